"""A broker's resource use for its reports (paper 3.2, 3.4.2), read from /proc inside its node.

Nodes are network namespaces on one host: /proc/net/dev is the node's own (per namespace), but
CPU and memory are the host's, so the broker's share is what its own processes use: the
nats-server of this namespace plus this agent. CPU is a fraction of all the host's cores, memory
of the host's RAM, network of the node's link capacity.
"""

from __future__ import annotations

import os
import time

from testbed import procs

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _netns_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def find_process(comm: str) -> int | None:
    """The process called `comm` in this network namespace (the node's nats-server)."""
    here = _netns_inode("self")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as handle:
                if handle.read().strip() != comm:
                    continue
        except OSError:
            continue
        if _netns_inode(entry) == here:
            return int(entry)
    return None


def _net_bytes() -> tuple[int, int]:
    """Bytes received and sent by the node's interfaces (loopback excluded)."""
    rx = tx = 0
    with open("/proc/net/dev") as handle:
        for line in handle.readlines()[2:]:
            name, data = line.split(":", 1)
            if name.strip() != "lo":
                values = data.split()
                rx, tx = rx + int(values[0]), tx + int(values[8])
    return rx, tx


def _mem_total() -> int:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 1


class ResourceSampler:
    """Successive calls to `sample()` give use over the interval since the previous call."""

    def __init__(self, capacity_bps: float = 100e6, server_comm: str = "nats-server"):
        self.capacity_bps = capacity_bps
        self.server_comm = server_comm
        self.server_pid: int | None = None
        self.mem_total = _mem_total()
        self.cpus = os.cpu_count() or 1
        self._last: tuple[float, float, tuple[int, int]] | None = None

    def _pids(self) -> list[int]:
        if self.server_pid is None or not os.path.exists(f"/proc/{self.server_pid}"):
            self.server_pid = find_process(self.server_comm)
        return [os.getpid()] + ([self.server_pid] if self.server_pid else [])

    def sample(self) -> dict:
        cpu_s, rss = 0.0, 0
        for pid in self._pids():
            stat = procs.process_stat(pid)
            if stat is not None:
                cpu_s, rss = cpu_s + stat.ticks / procs.TICKS, rss + stat.rss_pages * _PAGE
        now, net = time.monotonic(), _net_bytes()
        out = {"cpu": 0.0, "memory": rss / self.mem_total, "network": 0.0, "network_bps": 0.0, "network_in": 0.0,
               "network_out": 0.0}
        if self._last is not None:
            wall = max(1e-6, now - self._last[0])
            rx, tx = (max(0, now_ - then) / wall for now_, then in zip(net, self._last[2]))
            out["cpu"] = max(0.0, cpu_s - self._last[1]) / wall / self.cpus
            out["network_bps"] = rx + tx  # bytes/s, both directions
            if self.capacity_bps:  # fractions of the link's capacity (per direction: links are full duplex)
                out["network"] = (rx + tx) * 8 / self.capacity_bps
                out["network_in"], out["network_out"] = rx * 8 / self.capacity_bps, tx * 8 / self.capacity_bps
        self._last = (now, cpu_s, net)
        return out
