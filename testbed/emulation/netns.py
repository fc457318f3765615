"""Open a TCP connection inside a node's network namespace from the harness process.

Agents listen on 127.0.0.1 inside their node, which the harness (in the host's namespace) cannot
reach. setns(2) moves only the calling thread, and a socket keeps the namespace it was created
in, so: enter the node's namespace, connect, return to ours. No management network is needed.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_lock = threading.Lock()


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextmanager
def entered(pid: int):
    """The calling thread is in the network namespace of process `pid` for the block."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(home)
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
