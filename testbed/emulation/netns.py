"""Open a TCP connection inside a node's network namespace from the harness process.

Agents listen on 127.0.0.1 inside their node, which the harness (in the host's namespace) cannot
reach. setns(2) moves only the calling thread, and a socket keeps the namespace it was created
in, so: enter the node's namespace, connect, return to ours. No management network is needed.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from testbed.procs import setns_net

_lock = threading.Lock()
_forbidden: str | None = None  # why nodes may not be entered from here (a run over other machines)


class LocalShortcut(RuntimeError):
    """Something tried to reach a node through this machine's kernel where nodes live on others."""


def forbid_local(reason: str | None) -> None:
    """From now on (None: no longer) entering a node's namespace from this process raises
    LocalShortcut with `reason`: a pid a server gave names another process here, or none."""
    global _forbidden
    _forbidden = reason


def _allowed(pid: int) -> None:
    if _forbidden is not None:
        raise LocalShortcut(f"node process {pid} entered through this machine's kernel: {_forbidden}")


@contextmanager
def entered(pid: int):
    """The calling thread is in the network namespace of process `pid` for the block."""
    _allowed(pid)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            setns_net(target)
            try:
                yield
            finally:
                setns_net(home)
        finally:
            os.close(target)
    finally:
        os.close(home)


def connect_in(pid: int, address: tuple[str, int], timeout: float = 5.0) -> socket.socket:
    """A connected TCP socket living in the network namespace of process `pid`."""
    with _lock, entered(pid):
        return socket.create_connection(address, timeout=timeout)


def pids_in(pid: int) -> list[int]:
    """Every process that shares the network namespace of process `pid` (a node), `pid` excluded."""
    _allowed(pid)
    want = os.stat(f"/proc/{pid}/ns/net")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == pid:
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if (st.st_ino, st.st_dev) == (want.st_ino, want.st_dev):
            found.append(int(entry))
    return found


def running_in(pid: int, argv: list[str]) -> list[int]:
    """The processes in the network namespace of process `pid` (a node) whose command line is `argv`."""
    wanted = "\0".join(str(a) for a in argv)
    found = []
    for other in pids_in(pid):
        try:
            if Path(f"/proc/{other}/cmdline").read_bytes().decode(errors="replace").rstrip("\0") == wanted:
                found.append(other)
        except OSError:
            continue  # exited meanwhile
    return found


def signal_processes(pid: int, signum: int) -> list[str]:
    """Send `signum` to every process in the network namespace of process `pid` (a node) but the
    emulator's own shell into it (Containernet's `mininet:` shell); the names of those reached."""
    reached = []
    for other in pids_in(pid):
        try:
            if b"mininet:" in Path(f"/proc/{other}/cmdline").read_bytes():
                continue
            name = Path(f"/proc/{other}/comm").read_text().strip()
            os.kill(other, signum)
            reached.append(name)
        except OSError:
            continue  # exited meanwhile
    return sorted(reached)


def main(argv: list[str]) -> int:
    """`python -m testbed.emulation.netns signal PID SIGNUM`: signal_processes on a server, for a
    harness on another machine; prints the names reached, one per line."""
    if len(argv) != 3 or argv[0] != "signal" or not argv[1].isdigit() or not argv[2].isdigit():
        print("usage: python -m testbed.emulation.netns signal PID SIGNUM", file=sys.stderr)
        return 2
    for name in signal_processes(int(argv[1]), int(argv[2])):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
