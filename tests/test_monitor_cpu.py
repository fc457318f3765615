"""CPU per health row adds up to what the machine spent: every second gets its share of each sample
that overlaps it (a late sample is spread, never dropped or piled into one row), the classes add up
to the machine's busy time, and the CPU of processes that exit between samples is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import procs
from testbed.monitor import CpuSampler, HealthMonitor, Sample
from testbed.systems.pubsub.bench import efficiency

T0 = 2_000


def _sample(start: float, end: float, cores: dict[str, float], busy: float | None = None, idle: float = 0.25) -> Sample:
    busy = sum(cores.values()) if busy is None else busy
    return Sample(idle, 0.0, cores, {}, 0.0, {}, start, end, busy)


class Samples:
    """A CpuSampler stand-in that replays given samples (the interval is what the test is about)."""

    def __init__(self, samples):
        self.samples = list(samples)

    def sample(self):
        return self.samples.pop(0)

    def open_files(self):
        return {}


def _monitor(tmp_path: Path, samples) -> HealthMonitor:
    monitor = HealthMonitor("none", None, tmp_path, tmp_path / "health.jsonl")
    monitor.cpu = Samples(samples)
    monitor.start_time = T0
    monitor.probe.problem = None
    return monitor


def test_a_late_sample_is_spread_over_the_seconds_it_covers(tmp_path):
    """The monitor thread ran at 1.05 s, then not before 4.2 s (starved), then at 5.05 s: every second
    1-4 still has CPU, each the mean rate of the samples overlapping it by their overlap, and the
    rows together hold exactly the CPU the samples measured."""
    samples = [_sample(T0 + 0.05, T0 + 1.05, {"clients": 1.0}),
               _sample(T0 + 1.05, T0 + 4.2, {"clients": 2.0, "relays": 0.5}),  # 3.15 s, taken late
               _sample(T0 + 4.2, T0 + 5.05, {"clients": 1.0})]
    monitor = _monitor(tmp_path, samples)
    for at in (T0 + 1.05, T0 + 4.2, T0 + 5.05):
        monitor.tick(at)
    monitor._emit(upto=T0 + 4)
    rows = {r["t"] - T0: r for r in monitor.rows}
    assert sorted(rows) == [0, 1, 2, 3, 4]
    assert rows[1]["cpu_by_class"]["clients"] == pytest.approx(0.05 * 1.0 + 0.95 * 2.0)
    assert rows[2]["cpu_by_class"] == {"clients": 2.0, "relays": 0.5} and rows[2]["cpu_sample_s"] == 3.15
    assert rows[4]["cpu_by_class"]["clients"] == pytest.approx(0.2 * 2.0 + 0.8 * 1.0)
    measured = 0.05 * 1.0 + 3.15 * 2.5 + 0.8 * 1.0  # what the samples measured in [T0 + 1, T0 + 5)
    assert sum(sum(rows[s]["cpu_by_class"].values()) for s in range(1, 5)) == pytest.approx(measured)
    assert all(abs(r["cpu_unaccounted"]) < 1e-9 for r in rows.values())


def test_cpu_per_delivery_counts_cpu_and_deliveries_over_the_same_seconds(tmp_path):
    """A recorded run whose monitor missed two samples (one row merged over three seconds): the
    per-delivery figure is the CPU the machine spent over the deliveries of the same seconds, and the
    unaccounted share is what no class holds. The old reduction, which counted every second's
    deliveries but CPU only from rows holding a sample, gave a third of it."""
    samples = [_sample(T0 + s + 0.05, T0 + s + 1.05, {"clients": 0.5, "relays": 0.5}, busy=1.1) for s in range(0, 3)]
    samples.append(_sample(T0 + 3.05, T0 + 6.05, {"clients": 0.5, "relays": 0.5}, busy=1.1))  # late by 2 s
    samples += [_sample(T0 + s + 0.05, T0 + s + 1.05, {"clients": 0.5, "relays": 0.5}, busy=1.1) for s in range(6, 9)]
    monitor = _monitor(tmp_path, samples)
    for sample in list(samples):
        monitor.tick(sample.end)
    monitor._emit(upto=T0 + 8)
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "health.jsonl").write_text((tmp_path / "health.jsonl").read_text())
    (run / "events.jsonl").write_text("")
    rows = [{"topic": "t", "send_time": T0 + i / 1000 - 0.001, "receive_time": T0 + i / 1000} for i in range(9000)]
    (run / "traces" / "sub.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    found = efficiency.per_delivery(run)
    assert found["seconds"] == 8 and found["seconds_without_cpu"] == 0 and found["deliveries"] == 8000
    assert found["total_us_per_delivery"] == pytest.approx(1.0 / 1000 * 1e6)  # 1 core over 1,000 deliveries/s
    assert found["busy_us_per_delivery"] == pytest.approx(1100.0)
    assert found["unaccounted_share"] == pytest.approx(0.1 / 1.1)
    assert efficiency.unaccounted([{"case": "uav", "rate": 1, "shaper": "routed", **found}])  # over 5 %: refused


def test_processes_that_exit_between_samples_are_counted_in_their_parents_class(tmp_path):
    """A tagged process forks 8 children that each burn ~0.1 s of CPU and exit, well inside one
    sampling interval: the class still holds their CPU (reaped children's time, less what was
    already counted of them), as the parent's own getrusage says, to a few clock ticks."""
    program = ("import os, resource, time, sys\n"
               "for _ in range(8):\n"
               "    pid = os.fork()\n"
               "    if pid == 0:\n"
               "        end = time.process_time() + 0.1\n"
               "        while time.process_time() < end: pass\n"
               "        os._exit(0)\n"
               "    os.waitpid(pid, 0)\n"
               "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
               "print(usage.ru_utime + usage.ru_stime, flush=True)\n"
               "sys.stdin.read()\n")
    sampler = CpuSampler("exits1")
    sampler.sample()
    child = subprocess.Popen([sys.executable, "-c", program, "zookeeper"], env={**os.environ, "TESTBED_RUN": "exits1"},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.05)
        first = sampler.sample()  # the parent seen (maybe a child too), before most of their work
        children_s = float(child.stdout.readline())
        second = sampler.sample()
    finally:
        child.stdin.close()
        child.wait()
    counted = first.cores.get("zookeeper", 0.0) * (first.end - first.start) + \
        second.cores.get("zookeeper", 0.0) * (second.end - second.start)
    assert children_s >= 0.75
    # what the class got covers the children's CPU (and the parent's own start-up, at most ~0.1 s)
    assert children_s - 4 * 8 / procs.TICKS <= counted <= children_s + 0.3


def test_an_orphans_time_is_counted_once_when_its_adopter_reaps_it(monkeypatch):
    """A parent dies, its child is adopted by a reaper (init, a subreaper) and exits within the same
    interval: the reaper's children's time jumps by the child's whole life, of which only what was not
    counted while it ran is new. Pure: /proc replaced by the table of each sample."""
    from testbed.procs import ProcessStat

    tables = [
        {1: ProcessStat(100, False, 1, ppid=0), 10: ProcessStat(5, False, 1, ppid=1), 11: ProcessStat(50, False, 1, ppid=10)},
        {1: ProcessStat(100, False, 1, ppid=0, children_ticks=5 + 60)},  # the parent (5) and its orphan (60) reaped by 1
    ]
    monkeypatch.setattr(procs, "all_process_stats", lambda: tables.pop(0))
    sampler = CpuSampler("orphan")
    monkeypatch.setattr(sampler, "_class", lambda pid: "other")
    sampler.sample()
    time.sleep(0.05)  # an interval of measurable length
    second = sampler.sample()
    counted = second.cores.get("other", 0.0) * (second.end - second.start) * procs.TICKS
    assert counted == pytest.approx(10, abs=0.01)  # the orphan's 10 ticks since it was last seen; not 60 + 5
