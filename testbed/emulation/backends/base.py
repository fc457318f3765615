"""The one interface of a backend: what makes the nodes of a network, and what runs in them.

As Mininet takes its node classes as parameters (`Mininet(host=...)`, `addHost(cls=...)`) and
Kathara loads a manager by name, a backend is a class found by name in the registry
(backends/__init__.py): choose.py asks each whether it can run on this machine, the Session asks
it what keeps a topology from running, and network.py builds through it. Everything else (site
routers, the shaper, links, routes, relink) is backend-neutral and stays in network.py.

A backend's library (mininet, Containernet, the Docker SDK) is imported inside its methods only:
the registry must import in any venv, and Containernet imports only in a venv of its own.
"""

from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

# Both backends speak Mininet's API; the network adds links and addresses itself, so Mininet
# sets no MACs or ARP entries and starts no controller.
NET_OPTIONS = {"build": False, "controller": None, "autoSetMacs": False, "autoStaticArp": False}

Check = tuple[str, tuple[bool, str]]  # a `testbed doctor` line: name, (ok, detail)


class Backend(ABC):
    """Makes a run's Mininet net and its hosts; one instance per run."""

    name: ClassVar[str]  # the key in the registry, `--backend` and `emulation.backend`
    node_kind: ClassVar[str]  # what a node is, said when `auto` falls back to this backend
    # Its library imports only in the Containernet venv (installed.find_containernet): asked for,
    # `testbed` re-runs itself there (choose.reexec_argv).
    needs_containernet_venv: ClassVar[bool] = False

    def __init__(self, run_id: str, log_dir: Path | None = None, images: dict[str, str] | None = None):
        self.run_id = run_id
        self.log_dir = log_dir  # the run's logs (results/<run>/logs), None outside a run
        self.images = images or {}  # image per role, where the backend uses images

    # -- this machine ----------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def available(cls) -> tuple[bool, str]:
        """Can this backend run here: (True, what was found) or (False, why not, with the fix)."""

    @classmethod
    @abstractmethod
    def checks(cls) -> list[Check]:
        """What `testbed doctor` reports for this backend, each line with its fix."""

    # -- one run ---------------------------------------------------------------------------
    def preflight(self, topology) -> list[str]:
        """What keeps this topology from running here (empty when nothing does)."""
        return []

    @abstractmethod
    def net_class(self) -> type:
        """The Mininet class of the net (Mininet, or Containernet's subclass)."""

    def make_net(self):
        return self.net_class()(**NET_OPTIONS)

    @abstractmethod
    def add_host(self, net, name: str, role: str):
        """Add the node `name` of a topology (its role picks an image where there are images);
        no interfaces or addresses yet: the network links and addresses it."""

    @property
    @abstractmethod
    def python(self) -> str:
        """The interpreter that runs the project inside this backend's nodes."""

    @abstractmethod
    def popen(self, host, argv: list, **kwargs) -> subprocess.Popen:
        """Start argv in a host made by add_host. The Popen's terminate/kill/send_signal reach the
        process in the node; stdout and stderr default to pipes (callers read the first line)."""
