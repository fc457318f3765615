"""Mininet: every node is a shell in a network namespace of its own, on this machine's Python."""

from __future__ import annotations

import subprocess
import sys

from testbed.emulation import installed
from testbed.emulation.backends.base import Backend, Check


class MininetBackend(Backend):
    name = "mininet"
    node_kind = "network namespaces"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return installed.mininet_importable()

    @classmethod
    def checks(cls) -> list[Check]:
        return [("Mininet", installed.mininet_importable())]

    def net_class(self) -> type:
        from mininet.net import Mininet

        return Mininet

    def add_host(self, net, name: str, role: str):
        from mininet.node import Host

        return net.addHost(name, cls=Host, inNamespace=True, ip=None)

    @property
    def python(self) -> str:
        """The harness's own: a namespace shares this machine's file system."""
        return sys.executable

    def popen(self, host, argv: list, **kwargs) -> subprocess.Popen:
        return host.popen(argv, **kwargs)
