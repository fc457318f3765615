"""The harness's health, sampled once a second while the workload runs (the saturation guard's eyes).

A thread merges what each part can see of itself: the machine's idle CPU (/proc/stat), CPU per
class of process (every process of the run carries TESTBED_RUN=<run id>; others are "other work"
on the machine), the delay line's own lateness and drops (`Shaper.health`), and the clients'
publisher lateness and event-loop lag (`logs/health-*.jsonl`, `testbed.systems.pubsub.clienthealth`).
Each second [t, t + 1) becomes one row of `health.jsonl`, judged by `testbed.health`; rows are
written with a few seconds' delay so that every process's line for that second has arrived. CPU is
read as deltas over the interval between two samples and each row gets its overlap's share of every
sample (`spread`): a sample the thread took late covers its seconds honestly (`cpu_sample_s` says how
long it was) instead of leaving some seconds without CPU and one with several seconds' worth. The
classes add up to the machine's busy time (`cpu_busy`; the rest is `cpu_unaccounted`).
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
from testbed.emulation.runstate import ENV_TAG, pid_namespace, pid_namespaces_elsewhere
from testbed.stallprobe import BINARY as PROBE_BINARY, StallProbe

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
FILES_PERIOD_S = 10  # open file descriptors are counted this often (a directory listing per process)
LAG_S = 3  # clients write a second's line when it ends; relays answer one poll later
RELAY_NEEDLE = f"/{RELAY_BINARY.parent.name}/{RELAY_BINARY.name} "  # the binary, not a path that names it
#: Classes whose threads' wait for a core is sampled (/proc schedstat, per thread; the mean wait per
#: wake): the system under test's brokers and the harness's parts that time messages. The CPU idle
#: share says the machine was short; this says who waited, and how long a wake waited for a core.
WAIT_CLASSES = ("nats-server", "relays", "clients")
ELSEWHERE = "elsewhere"  # a process of another machine (an isolated namespace-server's), not counted here
OUTSIDE_TOP = 3  # outside processes named per second (the guard names them when they took the CPU)
CLASSES = (  # (class, substring of the command line); first match wins
    ("relays", RELAY_NEEDLE), ("storage", "/storage-"), ("nats-server", "nats-server"), ("clients", "testbed.systems.pubsub.workloads"),
    ("clients", "testbed.systems.pubsub.client"), ("clients", "testbed.systems.pubsub.multiclient"),
    ("clients", "/pubsub/_build/engine "),  # the compiled client engine (testbed.systems.pubsub.engine)
    ("broker-agents", "testbed.systems.pubsub.broker"), ("control-plane", "testbed.systems.pubsub.manager"),
    ("control-plane", "testbed.systems.pubsub.lookup"), ("zookeeper", "zookeeper"), ("serf", "serf"),
    ("nc-proxies", "testbed.nc."), ("docker", "containerd"), ("docker", "dockerd"),
    ("kernel-net", "[ksoftirqd"),  # softirq work the kernel could not do inline: mostly the emulated network
    ("stall-probe", f"/{PROBE_BINARY.name} "))  # the guard's own probe (testbed.stallprobe)


def classify(cmdline: str, in_run: bool, harness: bool) -> str:
    """The process class a command line belongs to (`cpu_by_class` keys)."""
    if harness:
        return "harness"
    if in_run and cmdline.startswith("ssh "):  # the harness's connection to a process on another machine
        return "ssh"
    for name, needle in CLASSES:
        if needle in cmdline and (in_run or name in ("docker", "kernel-net")):
            return name
    return "run-other" if in_run else "other"


class CpuSampler:
    """CPU the machine spent between two calls: its idle share, steal and busy cores (/proc/stat), and
    cores per process class, which add up to the busy cores: every process's own time, the time of
    its children that exited meanwhile (charged to it when reaped: `ProcessStat.children_ticks`,
    less what was already counted of them while they ran). Interrupts (the emulated links' packets)
    are no class: this kernel (no IRQ_TIME_ACCOUNTING) leaves them inside the time of the process they
    interrupted, and those taken on an idle core in no process: that is the unaccounted rest."""

    def __init__(self, run_id: str):
        self.tag = f"{ENV_TAG}={run_id}".encode()
        self.harness = os.getpid()
        self.elsewhere = pid_namespaces_elsewhere()  # isolated servers' processes: their own monitors count them
        self.known: dict[int, str] = {}
        self.names: dict[int, bytes] = {}  # the command name each was classified under
        self.times: dict[int, int] = {}  # ticks of each process and its reaped children, as last read
        self.parents: dict[int, int] = {}
        self.counted: dict[int, int] = {}  # per process: ticks of its exited children counted while they ran
        self.carry: dict[int, int] = {}  # credits a parent's reaping did not show yet: kept for one more sample
        self.carried: dict[int, int] = {}
        self.reaped: dict[int, int] = {}  # each process's reaped children's ticks, as last read
        self.orphans = self.orphans_before = 0  # counted ticks of exited processes whose parent died first
        self.delays: dict[int, tuple[int, int]] = {}  # (run-queue wait ns, runs) of WAIT_CLASSES' processes
        self.machine = procs.machine_ticks()
        self.at, self.wall, self.boot = time.monotonic(), time.time(), procs.boot_ticks()

    def _class(self, pid: int) -> str:
        if self.elsewhere and pid_namespace(pid) in self.elsewhere:
            return ELSEWHERE
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
        now, wall, boot, machine = time.monotonic(), time.time(), procs.boot_ticks(), procs.machine_ticks()
        total, idle = machine.total - self.machine.total, machine.idle - self.machine.idle
        elapsed = max(1e-3, now - self.at)
        running = procs.all_process_stats()
        self.carried, self.carry = self.carry, {}
        self._exited(running)
        ticks: dict[str, int] = {}
        outside: dict[bytes, int] = {}  # ticks of processes outside the run, by command name
        memory: dict[str, float] = {}
        mapped = elsewhere = 0.0
        for pid, stat in running.items():
            delta = self._ticks(pid, stat)
            if self.names.get(pid) != stat.name:  # new, or another program since an exec (a remote
                self.known[pid] = self._class(pid)  # process is first the shell that starts it)
                self.names[pid] = stat.name
            name = self.known[pid]
            if name == ELSEWHERE:
                elsewhere += delta
                continue
            memory[name] = memory.get(name, 0.0) + stat.rss_pages * PAGE_MB
            if name == "relays":
                mapped += stat.mapped_bytes / 2**20
            if delta:
                ticks[name] = ticks.get(name, 0) + delta
                if name == "other":
                    outside[stat.name] = outside.get(stat.name, 0) + delta
        waits = self._waits()
        to_cores = 1 / procs.TICKS / elapsed
        steal = (machine.steal - self.machine.steal) * to_cores
        # Idle and steal are timed exactly, busy time only sampled at ticks (which a tickless core
        # skips while it sleeps: short wakes go unseen, ~0.2 cores on an idle VM), so what the
        # machine spent is its cores' time less idle and steal, as each process's own time is exact.
        idle_share = min(1.0, idle * to_cores / procs.CPUS) if total > 0 else 1.0
        busy = max(0.0, procs.CPUS * (1 - idle_share) - steal - elsewhere * to_cores)
        sample = Sample(idle_share, round(1e3 * steal, 1),
                        {k: round(v * to_cores, 4) for k, v in sorted(ticks.items())},
                        {k: round(v, 1) for k, v in sorted(memory.items()) if k not in ("other", "kernel-net")},
                        round(mapped, 1), waits, self.wall, wall, round(busy, 4),
                        {n.decode(errors="replace"): round(t * to_cores, 3)
                         for n, t in sorted(outside.items(), key=lambda kv: -kv[1])[:OUTSIDE_TOP]})
        self.machine, self.at, self.wall, self.boot = machine, now, wall, boot
        return sample

    def _ticks(self, pid: int, stat: procs.ProcessStat) -> int:
        """Ticks `pid` spent since the last call, its reaped children's included once. A process seen
        for the first time brings all its time if it started since the last call, else none (its
        time before is not this interval's)."""
        used = stat.ticks + stat.children_ticks
        before, reaped = self.times.get(pid), self.reaped.get(pid, 0)
        self.times[pid], self.parents[pid], self.reaped[pid] = used, stat.ppid, stat.children_ticks
        if before is None or used < before:  # new (or a pid reused by another process)
            self.counted.pop(pid, None)
            return used if stat.started >= int(self.boot) else 0
        delta = used - before - self.counted.pop(pid, 0) - self.carried.pop(pid, 0)
        if delta < 0:  # a child gone before its parent's reaping showed (or a parent that never reaps):
            self.carry[pid] = -delta  # the rest next time only
            return 0
        orphans = min(self.orphans, delta, stat.children_ticks - reaped)  # reaped for a parent that died first
        self.orphans -= orphans
        return delta - orphans

    def _exited(self, running: dict) -> None:
        """Forget the processes gone since the last call; what was counted of each (and of its own
        exited children) is credited to its parent, whose children's time now holds all of it."""
        orphans = 0
        for pid in set(self.times) - set(running):
            counted = self.times.pop(pid) + self.counted.pop(pid, 0)
            parent = self.parents.pop(pid, 0)
            if parent in running:
                self.counted[parent] = self.counted.get(parent, 0) + counted
            else:  # its parent died first: a reaper adopted it (init, or a subreaper), which one is not known
                orphans += counted
            for table in (self.known, self.names, self.delays, self.reaped):
                table.pop(pid, None)
        self.orphans = min(self.orphans, self.orphans_before) + orphans  # an adoption shows within two samples
        self.orphans_before = orphans

    def _waits(self) -> dict[str, float]:
        """Per class of WAIT_CLASSES, the mean us its threads waited for a core each time they got one,
        since the last call (a process whose thread exited meanwhile is left out of that interval)."""
        totals = {name: [0, 0] for name in WAIT_CLASSES if name in self.known.values()}
        for pid, name in self.known.items():
            if name not in WAIT_CLASSES:
                continue
            now = procs.run_delays(pid)
            if now is None:
                continue
            before = self.delays.get(pid)
            self.delays[pid] = now
            if before is not None and now[0] >= before[0] and now[1] >= before[1]:
                totals[name][0] += now[0] - before[0]
                totals[name][1] += now[1] - before[1]
        return {name: round(waited / runs / 1e3, 1) for name, (waited, runs) in sorted(totals.items()) if runs}

    def open_files(self) -> dict[str, int]:
        """Open file descriptors per class of the run's processes (a leak shows as growth in a soak)."""
        found: dict[str, int] = {}
        for pid, name in list(self.known.items()):
            if name in ("other", "kernel-net", "docker", ELSEWHERE):
                continue
            try:
                found[name] = found.get(name, 0) + len(os.listdir(f"/proc/{pid}/fd"))
            except OSError:
                continue  # exited meanwhile
        return dict(sorted(found.items()))


class Sample(NamedTuple):
    """The machine between two calls of `CpuSampler.sample` (normally a second; longer when the
    monitor was late: then its figures are the interval's mean, and `spread` shares them out)."""

    idle: float                 # idle share of all cores
    steal_ms: float             # ms a second the hypervisor held the cores
    cores: dict[str, float]     # cores used, per process class
    memory_mb: dict[str, float]  # resident memory now, per class of the run's processes (and the harness)
    relays_mapped_mb: float     # the relays' mappings: their rings become resident as traffic walks them
    wait_us: dict[str, float]   # mean us a WAIT_CLASSES thread waited for a core per wake, per class
    start: float = 0.0          # the interval, wall-clock seconds
    end: float = 0.0
    busy: float = 0.0           # cores the machine spent (processes and interrupts; not idle, not steal)
    outside_top: dict[str, float] | None = None  # the busiest processes outside the run (class "other"): cores by name


class CpuShare:
    """The CPU figures of one second of a health row, from the samples that overlap it, each weighted
    by the overlap: every second gets its share of a late sample's interval, none is left without CPU
    and none holds several seconds' worth."""

    def __init__(self):
        self.covered = self.idle = self.steal_ms = self.busy = self.span = 0.0
        self.cores: dict[str, float] = {}

    def add(self, sample: Sample | dict, overlap: float) -> None:
        if isinstance(sample, dict):  # a server's feed line (`sample_fields`)
            sample = Sample(sample["cpu_idle"], sample["cpu_steal_ms"], sample["cpu_by_class"], {}, 0.0, {},
                            sample["cpu_from"], sample["cpu_to"], sample.get("cpu_busy", 0.0))
        self.covered += overlap
        self.idle += sample.idle * overlap
        self.steal_ms += sample.steal_ms * overlap
        self.busy += sample.busy * overlap
        for name, cores in sample.cores.items():
            self.cores[name] = self.cores.get(name, 0.0) + cores * overlap
        self.span = max(self.span, sample.end - sample.start)

    def fields(self) -> dict:
        """The row's CPU fields: means over the part of its second the samples covered."""
        if self.covered <= 0:
            return {}
        per = 1 / self.covered
        cores = {k: round(v * per, 4) for k, v in sorted(self.cores.items())}
        busy = round(self.busy * per, 4)
        return {"cpu_idle": round(self.idle * per, 4), "cpu_steal_ms": round(self.steal_ms * per, 1),
                "cpu_by_class": cores, "cpu_busy": busy, "cpu_unaccounted": round(busy - sum(cores.values()), 4),
                "cpu_sample_s": round(self.span, 3)}


def spread(start: float, end: float, add, slot_of) -> None:
    """Call `add(share, overlap)` for every whole second [s, s + 1) that the interval [start, end)
    overlaps, with that second's `CpuShare` (kept under "cpu" in `slot_of(s)`)."""
    for second in range(int(start), int(end) + 1):
        overlap = min(end, second + 1) - max(start, second)
        if overlap > 1e-6:
            add(slot_of(second).setdefault("cpu", CpuShare()), overlap)


class ClientLines:
    """New lines of the clients' per-second health files, merged by second."""

    def __init__(self, directory: Path):
        self.tail = procs.LineTail(directory, "health-*.jsonl")

    def read(self, into: dict[int, dict]) -> None:
        for line in self.tail.read_json():
            merge_client_line(line, into)


def merge_client_line(line: dict, into: dict[int, dict]) -> None:
    """One client process's health line into its second's slot."""
    try:
        second = int(line["s"])
    except (KeyError, TypeError, ValueError):
        return
    slot = into.setdefault(second, {})
    slot.setdefault("hist", health.LatenessHistogram()).merge(line.get("hist") or {})
    slot["loop_lag_max_ms"] = max(slot.get("loop_lag_max_ms", 0.0), float(line.get("loop_lag_max_ms", 0)))


def sample_fields(sample: Sample) -> dict:
    """A CPU sample as a server's feed line: the interval's figures, spread into rows by the harness."""
    return {"cpu_idle": round(sample.idle, 4), "cpu_steal_ms": sample.steal_ms, "cpu_by_class": sample.cores,
            "cpu_busy": sample.busy, "cpu_from": sample.start, "cpu_to": sample.end,
            "cpu_wait_us_by_class": sample.wait_us, "memory_mb_by_class": sample.memory_mb}


SNAPSHOT_FIELDS = ("cpu_wait_us_by_class", "memory_mb_by_class")  # of a sample: as at its end, not spread


def feed(run_id: str, log_dir: Path, out=None) -> None:
    """`python -m testbed.monitor RUN_ID LOG_DIR` on a server whose /proc and files the harness
    cannot read: each second a line {"s", "cpu": this machine's sample} and one {"client": line}
    per new line of the clients' health files there, on stdout, until SIGTERM (then the last lines);
    the second's line also counts the trace rows written there so far (the progress line's)."""
    import signal
    import sys

    out = out or sys.stdout
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cpu, tail = CpuSampler(run_id), procs.LineTail(Path(log_dir), "health-*.jsonl")
    rows = procs.LineCounter(Path(log_dir).parent / "traces", "*.jsonl")
    cpu.sample()
    while True:
        stopping = stop.wait(1.0 - (time.time() % 1.0) + 0.05)
        lines = [{"s": int(time.time()) - 1, "cpu": sample_fields(cpu.sample()), "trace_rows": rows.count()}]
        lines += [{"client": line} for line in tail.read_json()]
        try:
            out.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
            out.flush()
        except (BrokenPipeError, OSError):
            return  # the harness is gone
        if stopping:
            return


class ServerFeeds:
    """The `feed` of every server whose /proc is not ours, read in a thread each: CPU per second by
    server, and the clients' health lines there, for HealthMonitor to merge."""

    def __init__(self, feeds: dict[str, object]):
        """`feeds`: server name -> the Popen of its `feed` (stdout a text pipe)."""
        self.feeds = feeds
        self.lines: list[tuple[str, dict]] = []
        self.rows: dict[str, int] = {}  # trace rows written on each server so far
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._read, args=(name, process), daemon=True,
                                         name=f"feed-{name}") for name, process in feeds.items()]
        for thread in self.threads:
            thread.start()

    def _read(self, name: str, process) -> None:
        for text in process.stdout:
            try:
                line = json.loads(text)
            except ValueError:
                continue
            with self.lock:
                self.lines.append((name, line))
                if isinstance(line.get("trace_rows"), int):
                    self.rows[name] = line["trace_rows"]

    def trace_rows(self) -> int:
        """Trace rows the servers' nodes have written so far (deliveries, for the progress line)."""
        with self.lock:
            return sum(self.rows.values())

    def drain(self, into: dict[int, dict]) -> None:
        """The lines read so far, into their seconds' slots: a server's CPU under `servers`."""
        with self.lock:
            lines, self.lines = self.lines, []
        for name, line in lines:
            if "client" in line:
                merge_client_line(line["client"], into)
                by_server: dict[int, dict] = {}  # the same line in the server's own part of the row
                merge_client_line(line["client"], by_server)
                for second, part in by_server.items():
                    mine = into.setdefault(second, {}).setdefault("servers", {}).setdefault(name, {})
                    mine.setdefault("hist", health.LatenessHistogram()).merge(part["hist"].as_dict())
                    mine["loop_lag_max_ms"] = max(mine.get("loop_lag_max_ms", 0.0), part["loop_lag_max_ms"])
            elif "cpu" in line and isinstance(line.get("s"), int):
                cpu = line["cpu"]
                part_of = lambda s, name=name: into.setdefault(s, {}).setdefault("servers", {}).setdefault(name, {})  # noqa: E731
                spread(cpu["cpu_from"], cpu["cpu_to"], lambda share, overlap, cpu=cpu: share.add(cpu, overlap), part_of)
                part_of(line["s"]).update({k: cpu[k] for k in SNAPSHOT_FIELDS if k in cpu})

    def stop(self) -> None:
        """Each feed's last lines, then its end."""
        for process in self.feeds.values():
            process.terminate()
        for thread in self.threads:
            thread.join(10)
        for process in self.feeds.values():
            try:
                process.wait(timeout=5)
            except Exception:  # noqa: BLE001 - an ssh that does not end is killed
                process.kill()


def with_servers(row: dict) -> dict:
    """A row whose second has servers' CPU: the machine-wide fields become the busiest machine's
    (idle the least, steal the most) and CPU per class the sum over machines; each server's own
    figures stay under `servers`."""
    servers = row.get("servers")
    if not servers:
        return row
    parts = [row] + list(servers.values()) if "cpu_idle" in row else list(servers.values())
    row["cpu_idle"] = min(p.get("cpu_idle", 1.0) for p in parts)
    row["cpu_steal_ms"] = max(p.get("cpu_steal_ms", 0.0) for p in parts)
    for field in ("cpu_busy", "cpu_unaccounted"):  # machines' own: they add up
        row[field] = round(sum(p.get(field) or 0.0 for p in parts), 4)
    cores: dict[str, float] = {}
    waits: dict[str, float] = {}  # a mean wait per machine: the worst machine's
    for part in parts:
        for name, value in (part.get("cpu_by_class") or {}).items():
            cores[name] = round(cores.get(name, 0.0) + value, 3)
        for name, value in (part.get("cpu_wait_us_by_class") or {}).items():
            waits[name] = max(waits.get(name, 0.0), value)
    row["cpu_by_class"] = dict(sorted(cores.items()))
    if waits:
        row["cpu_wait_us_by_class"] = dict(sorted(waits.items()))
    return row


class HealthMonitor:
    """Samples once a second in a thread from `start()` to `stop()`; rows go to `path` and `rows`."""

    def __init__(self, run_id: str, shaper, log_dir: Path, path: Path, budget: health.Budget = health.BUDGET,
                 feeds: ServerFeeds | None = None):
        """`feeds`: the servers' own monitors, for a run over machines whose /proc is not ours."""
        self.shaper, self.path, self.budget, self.feeds = shaper, Path(path), budget, feeds
        self.cpu = CpuSampler(run_id)
        self.clients = ClientLines(log_dir)
        self.probe = StallProbe(run_id)
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
        self.probe.start()
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
        began = time.thread_time()
        sample = self.cpu.sample()
        spread(sample.start, sample.end, lambda share, overlap: share.add(sample, overlap),
               lambda s: self.pending.setdefault(s, {}))
        slot = self.pending.setdefault(second, {})
        slot.update(cpu_wait_us_by_class=sample.wait_us, memory_mb_by_class=sample.memory_mb,
                    relays_mapped_mb=sample.relays_mapped_mb, cpu_other_top=sample.outside_top)
        if second % FILES_PERIOD_S == 0:
            slot["open_files_by_class"] = self.cpu.open_files()
        relays = self.shaper.health() if self.shaper is not None else None
        if relays is not None:  # answers to the previous poll: the second before
            earlier = self.pending.setdefault(second - 1, {})
            earlier.update(relay_tx=relays["tx"], relay_over=relays["over_budget"],
                           relay_late_max_ms=round(relays["late_max_ms"], 3),
                           relay_harness_drops=relays["harness_drops"],
                           relay_forwarded=relays.get("forwarded", 0))  # hop to hop inside a routing shaper
            for began, ended in relays.get("outages", []):  # a dead relay's link forwarded nothing
                ended = min(ended, now)
                for s in range(int(began), int(ended) + 1):
                    slot_s = self.pending.setdefault(s, {})
                    slot_s["relay_down_ms"] = slot_s.get("relay_down_ms", 0.0) + round(
                        1e3 * (min(ended, s + 1) - max(began, s)), 3)
        self.clients.read(self.pending)
        self.probe.drain(self.pending)
        if self.feeds is not None:
            self.feeds.drain(self.pending)
        slot["monitor_cpu_ms"] = round(slot.get("monitor_cpu_ms", 0.0) + 1e3 * (time.thread_time() - began), 2)
        self._emit(upto=int(now) - LAG_S)

    def _emit(self, upto: float) -> None:
        for second in sorted(s for s in self.pending if s <= upto):
            slot = self.pending.pop(second)
            if second < int(self.start_time):
                continue
            for part in (slot.get("servers") or {}).values():
                part.update(part.pop("cpu").fields() if "cpu" in part else {})
            cpu = slot.pop("cpu").fields() if "cpu" in slot else {}
            row = with_servers({"t": second, "elapsed_s": round(second - self.start_time, 3), **cpu,
                                **{k: v for k, v in slot.items() if k != "hist"}})
            self._lateness(row, slot.get("hist"), keep_hist=True)
            for part in (row.get("servers") or {}).values():  # each server judged on its own figures too
                self._lateness(part, part.pop("hist", None))
                part["causes"] = health.judge(part, self.budget)
            row["causes"] = health.judge(row, self.budget)
            row["saturated"] = bool(row["causes"])
            self.rows.append(row)
            with self.path.open("a") as handle:
                handle.write(json.dumps(row, separators=(",", ":")) + "\n")

    def _lateness(self, row: dict, hist: health.LatenessHistogram | None, keep_hist: bool = False) -> None:
        """The publishers' lateness fields of a row (or a server's part of it) from its histogram."""
        if hist is not None and hist.n:
            row.update(publisher_n=hist.n, publisher_over=hist.over(self.budget.publisher_late_p99_ms),
                       publisher_late_p99_ms=hist.quantile_ms(0.99), publisher_late_max_ms=round(hist.max_ms, 3))
            if keep_hist:
                row["publisher_hist"] = hist.as_dict()

    def stop(self) -> None:
        """The workload phase ended: no more samples (what the clients still write is read by finish).
        A second call (the run's teardown) keeps the first end: seconds after it are not the run's."""
        if self.end_time is None:
            self.end_time = time.time()
            self._stop.set()
            if self._thread.is_alive():
                self._thread.join(5)
                sample = self.cpu.sample()  # the CPU of the last seconds, up to the end
                spread(sample.start, sample.end, lambda share, overlap: share.add(sample, overlap),
                       lambda s: self.pending.setdefault(s, {}))
        self._stop.set()
        self.probe.stop()

    def finish(self) -> dict:
        """After the clients exited: their last lines, the remaining rows, and the run's verdict."""
        if self.end_time is None:
            self.stop()
        self.clients.read(self.pending)
        self.probe.drain(self.pending)
        if self.feeds is not None:
            self.feeds.stop()
            self.feeds.drain(self.pending)
        self._emit(upto=int(self.end_time) - 1)
        self.pending.clear()
        result = health.verdict(self.rows, self.budget)
        if self.probe.problem and self.rows:
            result["unmeasured"].append(self.probe.problem)
        return result

    def latest(self) -> dict | None:
        return self.rows[-1] if self.rows else None


if __name__ == "__main__":
    import sys

    feed(sys.argv[1], Path(sys.argv[2]))
