"""The harness's health, sampled once a second while the workload runs (the saturation guard's eyes).

A thread merges what each part can see of itself: the machine's idle CPU (/proc/stat), CPU per
class of process (every process of the run carries TESTBED_RUN=<run id>; others are "other work"
on the machine), the delay line's own lateness and drops (`Shaper.health`), and the clients'
publisher lateness and event-loop lag (`logs/health-*.jsonl`, `testbed.systems.pubsub.clienthealth`).
Each second becomes one row of `health.jsonl`, judged by `testbed.health`; rows are written with a
few seconds' delay so that every process's line for that second has arrived.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import NamedTuple

from testbed import health, procs
from testbed.emulation.delayline import BINARY as RELAY_BINARY
from testbed.emulation.runstate import ENV_TAG

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
FILES_PERIOD_S = 10  # open file descriptors are counted this often (a directory listing per process)
LAG_S = 3  # clients write a second's line when it ends; relays answer one poll later
RELAY_NEEDLE = f"/{RELAY_BINARY.parent.name}/{RELAY_BINARY.name} "  # the binary, not a path that names it
CLASSES = (  # (class, substring of the command line); first match wins
    ("relays", RELAY_NEEDLE), ("storage", "/storage-"), ("nats-server", "nats-server"), ("clients", "testbed.systems.pubsub.workloads"),
    ("clients", "testbed.systems.pubsub.client"), ("clients", "testbed.systems.pubsub.multiclient"),
    ("clients", "/pubsub/_build/engine "),  # the compiled client engine (testbed.systems.pubsub.engine)
    ("broker-agents", "testbed.systems.pubsub.broker"), ("control-plane", "testbed.systems.pubsub.manager"),
    ("control-plane", "testbed.systems.pubsub.lookup"), ("zookeeper", "zookeeper"), ("serf", "serf"),
    ("nc-proxies", "testbed.nc."), ("docker", "containerd"), ("docker", "dockerd"),
    ("kernel-net", "[ksoftirqd"))  # softirq work the kernel could not do inline: mostly the emulated network


def classify(cmdline: str, in_run: bool, harness: bool) -> str:
    """The process class a command line belongs to (`cpu_by_class` keys)."""
    if harness:
        return "harness"
    for name, needle in CLASSES:
        if needle in cmdline and (in_run or name in ("docker", "kernel-net")):
            return name
    return "run-other" if in_run else "other"


class CpuSampler:
    """Idle share of the machine and cores used per process class between two calls."""

    def __init__(self, run_id: str):
        self.tag = f"{ENV_TAG}={run_id}".encode()
        self.harness = os.getpid()
        self.known: dict[int, str] = {}
        self.times: dict[int, int] = {}
        self.machine = procs.machine_ticks()
        self.at = time.monotonic()

    def _class(self, pid: int) -> str:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not cmdline:  # a kernel thread: its name
                cmdline = "[" + Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            environ, cmdline = b"", ""
        return classify(cmdline, self.tag in environ, pid == self.harness)

    def sample(self) -> Sample:
        """The machine and the process classes since the previous call."""
        now, machine = time.monotonic(), procs.machine_ticks()
        total, idle = machine.total - self.machine.total, machine.idle - self.machine.idle
        elapsed = max(1e-3, now - self.at)
        cores: dict[str, float] = {}
        memory: dict[str, float] = {}
        mapped = 0.0
        running = procs.all_process_stats()
        for pid, stat in running.items():
            used = stat.ticks
            if pid not in self.known:
                self.known[pid] = self._class(pid)
                self.times[pid] = used  # its CPU before we saw it is not this interval's
            name = self.known[pid]
            memory[name] = memory.get(name, 0.0) + stat.rss_pages * PAGE_MB
            if name == "relays":
                mapped += stat.mapped_bytes / 2**20
            delta = used - self.times[pid]
            self.times[pid] = used
            if delta > 0:
                cores[name] = cores.get(name, 0.0) + delta / procs.TICKS / elapsed
        for pid in set(self.known) - set(running):
            self.known.pop(pid)
            self.times.pop(pid, None)
        steal_ms = 1e3 * (machine.steal - self.machine.steal) / procs.TICKS / elapsed
        self.machine, self.at = machine, now
        return Sample(idle / total if total > 0 else 1.0, round(steal_ms, 1),
                      {k: round(v, 3) for k, v in sorted(cores.items())},
                      {k: round(v, 1) for k, v in sorted(memory.items()) if k not in ("other", "kernel-net")},
                      round(mapped, 1))

    def open_files(self) -> dict[str, int]:
        """Open file descriptors per class of the run's processes (a leak shows as growth in a soak)."""
        found: dict[str, int] = {}
        for pid, name in list(self.known.items()):
            if name in ("other", "kernel-net", "docker"):
                continue
            try:
                found[name] = found.get(name, 0) + len(os.listdir(f"/proc/{pid}/fd"))
            except OSError:
                continue  # exited meanwhile
        return dict(sorted(found.items()))


class Sample(NamedTuple):
    """One second of the machine as `CpuSampler` saw it."""

    idle: float                 # idle share of all cores
    steal_ms: float             # ms a second the hypervisor held the cores
    cores: dict[str, float]     # cores used, per process class
    memory_mb: dict[str, float]  # resident memory now, per class of the run's processes (and the harness)
    relays_mapped_mb: float     # the relays' mappings: their rings become resident as traffic walks them


class ClientLines:
    """New lines of the clients' per-second health files, merged by second."""

    def __init__(self, directory: Path):
        self.tail = procs.LineTail(directory, "health-*.jsonl")

    def read(self, into: dict[int, dict]) -> None:
        for line in self.tail.read_json():
            try:
                second = int(line["s"])
            except (KeyError, TypeError, ValueError):
                continue
            slot = into.setdefault(second, {})
            slot.setdefault("hist", health.LatenessHistogram()).merge(line.get("hist") or {})
            slot["loop_lag_max_ms"] = max(slot.get("loop_lag_max_ms", 0.0), float(line.get("loop_lag_max_ms", 0)))


class HealthMonitor:
    """Samples once a second in a thread from `start()` to `stop()`; rows go to `path` and `rows`."""

    def __init__(self, run_id: str, shaper, log_dir: Path, path: Path, budget: health.Budget = health.BUDGET):
        self.shaper, self.path, self.budget = shaper, Path(path), budget
        self.cpu = CpuSampler(run_id)
        self.clients = ClientLines(log_dir)
        self.pending: dict[int, dict] = {}
        self.rows: list[dict] = []
        self.start_time = time.time()
        self.end_time: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="health-monitor", daemon=True)

    def start(self, t0: float | None = None) -> None:
        """Sample from now on; `elapsed_s` counts from `t0` (the run's run_start event, which the
        analysis takes as time zero), so saturated intervals line up with the figures' time axis."""
        self.start_time = t0 if t0 is not None else time.time()
        self.cpu.sample()
        if self.shaper is not None:
            self.shaper.health()  # the first poll only asks; its answers come with the next
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(1.0 - (time.time() % 1.0) + 0.05):
            self.tick(time.time())

    def tick(self, now: float) -> None:
        """One sample: the last second's machine and relay figures, clients' lines, rows now final."""
        second = int(now) - 1
        sample = self.cpu.sample()
        slot = self.pending.setdefault(second, {})
        slot.update(cpu_idle=round(sample.idle, 4), cpu_steal_ms=sample.steal_ms, cpu_by_class=sample.cores,
                    memory_mb_by_class=sample.memory_mb, relays_mapped_mb=sample.relays_mapped_mb)
        if second % FILES_PERIOD_S == 0:
            slot["open_files_by_class"] = self.cpu.open_files()
        relays = self.shaper.health() if self.shaper is not None else None
        if relays is not None:  # answers to the previous poll: the second before
            earlier = self.pending.setdefault(second - 1, {})
            earlier.update(relay_tx=relays["tx"], relay_over=relays["over_budget"],
                           relay_late_max_ms=round(relays["late_max_ms"], 3),
                           relay_harness_drops=relays["harness_drops"])
            for began, ended in relays.get("outages", []):  # a dead relay's link forwarded nothing
                ended = min(ended, now)
                for s in range(int(began), int(ended) + 1):
                    slot_s = self.pending.setdefault(s, {})
                    slot_s["relay_down_ms"] = slot_s.get("relay_down_ms", 0.0) + round(
                        1e3 * (min(ended, s + 1) - max(began, s)), 3)
        self.clients.read(self.pending)
        self._emit(upto=int(now) - LAG_S)

    def _emit(self, upto: float) -> None:
        for second in sorted(s for s in self.pending if s <= upto):
            slot = self.pending.pop(second)
            if second < int(self.start_time):
                continue
            row = {"t": second, "elapsed_s": round(second - self.start_time, 3),
                   **{k: v for k, v in slot.items() if k != "hist"}}
            hist = slot.get("hist")
            if hist is not None and hist.n:
                row.update(publisher_n=hist.n, publisher_over=hist.over(self.budget.publisher_late_p99_ms),
                           publisher_late_p99_ms=hist.quantile_ms(0.99), publisher_late_max_ms=round(hist.max_ms, 3),
                           publisher_hist=hist.as_dict())
            row["causes"] = health.judge(row, self.budget)
            row["saturated"] = bool(row["causes"])
            self.rows.append(row)
            with self.path.open("a") as handle:
                handle.write(json.dumps(row, separators=(",", ":")) + "\n")

    def stop(self) -> None:
        """The workload phase ended: no more samples (what the clients still write is read by finish).
        A second call (the run's teardown) keeps the first end: seconds after it are not the run's."""
        if self.end_time is None:
            self.end_time = time.time()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def finish(self) -> dict:
        """After the clients exited: their last lines, the remaining rows, and the run's verdict."""
        if self.end_time is None:
            self.stop()
        self.clients.read(self.pending)
        self._emit(upto=int(self.end_time) - 1)
        self.pending.clear()
        return health.verdict(self.rows, self.budget)

    def latest(self) -> dict | None:
        return self.rows[-1] if self.rows else None
