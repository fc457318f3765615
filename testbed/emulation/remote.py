"""Nodes on other servers, through Mininet Cluster Edition (mininet.examples.cluster).

Its RemoteMixin gives a node a shell on a server over ssh (`mnexec` there makes the namespace),
so `cmd()` and everything network.py builds with it work unchanged. Two things are ours:

- `RemotePopen`: a process in a remote node whose terminate/kill/send_signal reach the process
  itself (the cluster's popen only holds the local ssh client, and joins argv unquoted). The
  process writes its pid to a file on the server, named with the run id so that `testbed clean`
  there removes it; signals are sent there with `kill`.
- `connect_through`: a TCP connection from the harness to a service that listens only inside a
  remote node (Serf's RPC, ZooKeeper, NATS): on one machine the harness enters the node's
  namespace (netns.connect_in), which another machine's kernel does not offer; so a relay started
  in the node by `mnexec` over the server's ssh connection carries the bytes, and the harness gets
  one end of a socket pair, used as the TCP socket would be.
- VXLAN links between servers: the cluster edition tunnels over ssh (`-w`, needs PermitTunnel and
  a process per link) or GRE (this kernel has none). A VXLAN device is made in the server's own
  namespace (its UDP socket stays there, on the underlay) and moved into the node, as Docker's
  overlay networks do; the same shaper then sits on it as on a veth.
"""

from __future__ import annotations

import glob
import secrets
import shlex
import signal
import socket
import subprocess
import threading
from pathlib import Path

from testbed.emulation import runstate
from testbed.emulation.servers import Server

VXLAN_PORT = 4789
VXLAN_MTU = 1500
# What a remote process needs from the harness's environment (ssh passes none of it).
FORWARDED_ENV = ("PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "HOME", "LANG")
PID_FILE = "/tmp/testbed-{run}-{token}.pid"  # on the server: a remote process's pid, for its signals


def pid_file_run(path: Path) -> str | None:
    """The run a remote pid file belongs to (None for any other file)."""
    prefix, _ = PID_FILE.split("{run}")
    rest = str(path)[len(prefix):]
    if not str(path).startswith(prefix) or not rest.endswith(".pid") or "-" not in rest:
        return None
    return rest.rsplit("-", 1)[0]


def pid_files(run: str = "*") -> dict[Path, str]:
    """The remote pid files of one run (every run: "*") on this machine, with their run."""
    return {Path(path): pid_file_run(Path(path)) for path in glob.glob(PID_FILE.format(run=run, token="*"))}


# The relay in the node: connect, say "+" (or exit with the reason on stderr), then copy both ways;
# our end closing (EOF on stdin) half-closes the service's, and the service closing ends the relay.
RELAY = """import os, selectors, socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
except OSError as e:
    sys.exit(f"connect {sys.argv[1]}:{sys.argv[2]}: {e.strerror or e}")
s.settimeout(None)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
os.write(1, b"+")
sel = selectors.DefaultSelector()
sel.register(0, selectors.EVENT_READ)
sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj == 0:
            data = os.read(0, 65536)
            if not data:
                sel.unregister(0)
                s.shutdown(socket.SHUT_WR)
            else:
                s.sendall(data)
        else:
            data = s.recv(65536)
            if not data:
                sys.exit(0)
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
"""
_relays: list[subprocess.Popen] = []
_relays_lock = threading.Lock()


def connect_through(ssh: list[str], pid: int, python: str, address: tuple[str, int], timeout: float = 5.0) -> socket.socket:
    """A socket connected to `address` from inside the remote node whose namespace process `pid`
    holds, through the server's ssh (`ssh`: its command line up to the remote command). Raises
    OSError with the reason, as socket.create_connection would, when the node cannot connect."""
    _reap()
    ours, theirs = socket.socketpair()
    relay = subprocess.Popen(ssh + [shlex.join(["mnexec", "-a", str(pid), python, "-c", RELAY, address[0],
                                                str(address[1]), f"{timeout:g}"])],
                             stdin=theirs, stdout=theirs, stderr=subprocess.PIPE, start_new_session=True)
    theirs.close()
    with _relays_lock:
        _relays.append(relay)
    ours.settimeout(timeout + 10.0)  # ssh's own connection comes first
    try:
        said = ours.recv(1)
    except OSError:
        said = b""
    if said != b"+":
        ours.close()
        try:
            why = relay.communicate(timeout=10)[1].decode(errors="replace").strip()
        except subprocess.TimeoutExpired:
            relay.kill()
            why = "no answer"
        raise ConnectionError(f"{address[0]}:{address[1]} in node {pid} through ssh: {why or f'exit {relay.poll()}'}")
    ours.settimeout(timeout)
    return ours


def _reap() -> None:
    """Wait for the relays whose connection ended (each is an ssh client of ours)."""
    with _relays_lock:
        for relay in [r for r in _relays if r.poll() is not None]:
            relay.stderr.close()
            _relays.remove(relay)


def end_relays() -> None:
    """End every relay still open (the run is over)."""
    with _relays_lock:
        relays, _relays[:] = list(_relays), []
    for relay in relays:
        if relay.poll() is None:
            relay.kill()
        relay.wait()
        relay.stderr.close()


def node_class(server: Server, control_dir: Path):
    """A Mininet Node class whose instances live on `server` (namespace when inNamespace, else the
    server's own namespace: the server's shell, which makes its VXLAN devices)."""
    from mininet.examples.cluster import RemoteMixin
    from mininet.node import Node

    ssh = server.ssh(control_dir)

    class RemoteNode(RemoteMixin, Node):
        sshbase = ssh[:-1] + ["-tt"]  # the cluster edition appends user@host itself

        def __init__(self, name, **params):
            self.testbed_server = server
            super().__init__(name, server=server.host, user=server.user, serverIP=server.host, **params)

        def startShell(self, *args, **kwargs):
            self.sshcmd = self.sshbase + [self.dest]  # no `sudo -u`: the harness runs as root already
            super().startShell(*args, **kwargs)

        def _popen(self, cmd, sudo=True, tt=True, **params):
            return super()._popen(cmd, sudo=sudo and server.user != "root", tt=tt, **params)

        def popen(self, argv, **kwargs):
            return RemotePopen(self, ssh, list(argv), **kwargs)

    return RemoteNode


class SignalPipe:
    """One shell per server, over the control connection, that sends the signals of every remote
    process there: a signal is a line written to it (an ssh per signal would fork two processes
    each time, and the delay line's counters are asked for every second)."""

    _pipes: dict[tuple, SignalPipe] = {}
    _lock = threading.Lock()

    def __init__(self, ssh: list[str]):
        self.process = subprocess.Popen(ssh + ["exec sh"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, text=True, bufsize=1)

    @classmethod
    def of(cls, ssh: list[str]) -> SignalPipe:
        with cls._lock:
            pipe = cls._pipes.get(tuple(ssh))
            if pipe is None or pipe.process.poll() is not None:
                pipe = cls._pipes[tuple(ssh)] = SignalPipe(ssh)
            return pipe

    def send(self, pid_file: str, sig: int) -> None:
        with self._lock:
            try:
                self.process.stdin.write(f"read p < {pid_file} 2>/dev/null && kill -{sig} $p 2>/dev/null\n")
                self.process.stdin.flush()
            except (BrokenPipeError, OSError):
                pass  # the server's connection is gone: its processes went with it

    @classmethod
    def close_all(cls) -> None:
        with cls._lock:
            pipes, cls._pipes = list(cls._pipes.values()), {}
        for pipe in pipes:
            try:
                pipe.process.stdin.close()
                pipe.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pipe.process.kill()


class RemotePopen(subprocess.Popen):
    """argv in a remote node's namespaces; the local Popen is the ssh client, which exits with the
    process. Signals go to the process through its server's SignalPipe."""

    def __init__(self, node, ssh: list[str], argv: list[str], env: dict | None = None, cwd=None, **kwargs):
        forwarded = {k: v for k, v in (env or {}).items()
                     if k in FORWARDED_ENV or k.startswith("TESTBED_") or k.startswith("TB_")}
        self.remote_pid_file = PID_FILE.format(run=forwarded.get(runstate.ENV_TAG, "untagged"),
                                               token=secrets.token_hex(6))
        self._signals = SignalPipe.of(ssh)
        script = (f"echo $$ > {self.remote_pid_file} && "
                  + (f"cd {shlex.quote(str(cwd))} && " if cwd else "")
                  + "exec " + shlex.join(["env", *(f"{k}={v}" for k, v in forwarded.items()), *argv]))
        remote = shlex.join(["mnexec", "-a", str(node.pid), "sh", "-c", script])
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        super().__init__(ssh + [remote], **kwargs)

    def send_signal(self, sig) -> None:
        if self.poll() is None:
            self._signals.send(self.remote_pid_file, int(sig))

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


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
