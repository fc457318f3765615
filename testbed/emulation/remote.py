"""Nodes on other servers, through Mininet Cluster Edition (mininet.examples.cluster).

Its RemoteMixin gives a node a shell on a server over ssh (`mnexec` there makes the namespace),
so `cmd()` and everything network.py builds with it work unchanged. Two things are ours:

- `RemotePopen`: a process in a remote node whose terminate/kill/send_signal reach the process
  itself (the cluster's popen only holds the local ssh client, and joins argv unquoted). The
  process writes its pid to a file on the server; signals are sent there with `kill`.
- VXLAN links between servers: the cluster edition tunnels over ssh (`-w`, needs PermitTunnel and
  a process per link) or GRE (this kernel has none). A VXLAN device is made in the server's own
  namespace (its UDP socket stays there, on the underlay) and moved into the node, as Docker's
  overlay networks do; the same shaper then sits on it as on a veth.
"""

from __future__ import annotations

import secrets
import shlex
import signal
import subprocess
from pathlib import Path

from testbed.emulation.servers import Server

VXLAN_PORT = 4789
VXLAN_MTU = 1500
# What a remote process needs from the harness's environment (ssh passes none of it).
FORWARDED_ENV = ("PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "HOME", "LANG")


def node_class(server: Server, control_dir: Path):
    """A Mininet Node class whose instances live on `server` (namespace when inNamespace, else the
    server's own namespace: the server's shell, which makes its VXLAN devices)."""
    from mininet.examples.cluster import RemoteMixin
    from mininet.node import Node

    ssh = server.ssh(control_dir)

    class RemoteNode(RemoteMixin, Node):
        sshbase = ssh[:-1] + ["-tt"]  # the cluster edition appends user@host itself

        def __init__(self, name, **params):
            super().__init__(name, server=server.host, user=server.user, serverIP=server.host, **params)
            self.sshcmd = self.sshbase + [self.dest]  # no local sudo: the harness runs as root
            self.testbed_server = server

        def popen(self, argv, **kwargs):
            return RemotePopen(self, ssh, list(argv), **kwargs)

    return RemoteNode


class RemotePopen(subprocess.Popen):
    """argv in a remote node's namespaces; the local Popen is the ssh client, which exits with the
    process. Signals go to the process over the server's control connection."""

    def __init__(self, node, ssh: list[str], argv: list[str], env: dict | None = None, cwd=None, **kwargs):
        self.remote_pid_file = f"/tmp/testbed-{secrets.token_hex(6)}.pid"
        self._ssh = ssh
        self._signallers: list[subprocess.Popen] = []
        forwarded = {k: v for k, v in (env or {}).items()
                     if k in FORWARDED_ENV or k.startswith("TESTBED_") or k.startswith("TB_")}
        script = (f"echo $$ > {self.remote_pid_file} && "
                  + (f"cd {shlex.quote(str(cwd))} && " if cwd else "")
                  + "exec " + shlex.join(["env", *(f"{k}={v}" for k, v in forwarded.items()), *argv]))
        remote = shlex.join(["mnexec", "-a", str(node.pid), "sh", "-c", script])
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        super().__init__(ssh + [remote], **kwargs)

    def send_signal(self, sig) -> None:
        if self.poll() is not None:
            return
        self._signallers = [p for p in self._signallers if p.poll() is None]
        self._signallers.append(subprocess.Popen(
            self._ssh + [f"kill -{int(sig)} $(cat {self.remote_pid_file}) 2>/dev/null"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the remote process and wait for that to be sent (callers wait() next)."""
        if self.poll() is not None:
            return
        subprocess.run(self._ssh + [f"kill -9 $(cat {self.remote_pid_file}) 2>/dev/null"],
                       capture_output=True, timeout=15)


def vxlan_pair(shells: dict[str, object], node1, intf1: str, mac1: str, node2, intf2: str, mac2: str,
               vni: int) -> None:
    """intf1 in node1 and intf2 in node2 (on different servers) as the two ends of one VXLAN: each
    made in its server's namespace by `shells[server name]`, moved into the node, then renamed."""
    ends = ((node1, intf1, mac1, node2), (node2, intf2, mac2, node1))
    for node, intf, mac, peer in ends:
        here, there = node.testbed_server, peer.testbed_server
        temporary = f"vx{vni}"
        shell = shells[here.name]
        out = shell.cmd(f"ip link add {temporary} address {mac} mtu {VXLAN_MTU} type vxlan id {vni} "
                        f"local {here.host} remote {there.host} dstport {VXLAN_PORT} && "
                        f"ip link set {temporary} netns {node.pid}")
        out += node.cmd(f"ip link set {temporary} name {intf}")
        if out.strip():
            raise RuntimeError(f"VXLAN {vni} {node.name}:{intf} ({here.name}) -> {peer.name} ({there.name}): "
                               f"{out.strip()}")
