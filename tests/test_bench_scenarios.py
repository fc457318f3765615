"""The benchmarks' networks are scenario files (scenarios/bench/*.yaml), validated like any other, and
the values a benchmark sweeps are applied to them without breaking what the file promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import topology
from testbed.scenario.loader import load

ROOT = Path(__file__).resolve().parent.parent
BENCH = sorted((ROOT / "scenarios" / "bench").glob("*.yaml"))
EVERY = sorted((ROOT / "scenarios").glob("*.yaml")) + BENCH


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_bench_scenarios_load_and_build(path):
    scenario = load(path)
    assert scenario.name.startswith("bench-")
    assert topology.build(scenario).nodes


def test_every_scenario_passes_testbed_validate(tmp_path):
    """The command users run: schema and semantic checks, each error as file:line: field. Against no
    capacity measurement: what this machine measured (results/bench/capacity.json) refuses the
    paper-size scenarios, which is `testbed.load`'s to test, not the scenario files'."""
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", "--capacity", str(tmp_path / "unmeasured.json"),
                          *map(str, EVERY)], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count(": ok (") == len(EVERY)


def test_each_benchmark_names_an_existing_file():
    from testbed.bench import emulation, overload
    from testbed.systems.pubsub.bench import migration, monitoring

    for path in (overload.SCENARIO, monitoring.SCENARIO, migration.SCENARIO, emulation.ACCURACY, emulation.BRINGUP,
                 emulation.MOBILE):
        assert path in BENCH


def test_the_bench_nodes_exist_in_their_networks():
    from testbed.bench import overload
    from testbed.systems.pubsub.bench import monitoring

    assert {overload.BROKER, overload.PUB, overload.SUB} <= set(topology.build(load(overload.SCENARIO)).nodes)
    assert {monitoring.BROKER, monitoring.CLIENTS} <= set(topology.build(load(monitoring.SCENARIO)).nodes)


@pytest.mark.parametrize("rtt_ms", [10, 40, 100, 200])
def test_accuracy_network_has_three_paths_of_the_asked_rtt(rtt_ms):
    from testbed.bench.emulation import accuracy_scenario

    topo = topology.build(accuracy_scenario(rtt_ms))
    assert topo.nodes["one1"].access.delay * 2 == pytest.approx(rtt_ms / 1e3)  # 1 hop: to its gateway and back
    assert topo.node_rtt("two1", "two2") == pytest.approx(rtt_ms / 1e3)       # 2 hops: one switch
    assert topo.node_rtt("thra1", "thrb1") == pytest.approx(rtt_ms / 1e3)     # 3 hops: two sites


def test_migration_sweeps_the_wan_latency_only():
    from testbed.systems.pubsub.bench.migration import SCENARIO, scenario_at

    base, changed = load(SCENARIO), scenario_at(80)
    assert changed.infrastructure.cloud.one_way == pytest.approx(0.080)
    assert changed.model_copy(update={"infrastructure": base.infrastructure}) == base


@pytest.mark.parametrize("quick", [False, True])
def test_migration_plan_runs_fig7a_at_the_papers_128_topics(quick):
    from testbed.systems.pubsub.bench.migration import plan

    configs = plan(quick)
    fig7a = [c for c in configs if c[0] == "7a"]
    wans = {wan for _, _, wan, _, _ in fig7a}
    assert {(n, wf, ex) for _, n, _, wf, ex in fig7a} == {(128, "enhanced", 16), (128, "baseline", 1)}
    assert len(fig7a) == 2 * len(wans) and 40 in wans and len(wans) == (2 if quick else 4)
    fig7b = [c for c in configs if c[0] == "7b"]
    assert {wan for _, _, wan, _, _ in fig7b} == {40} and max(n for _, n, _, _, _ in fig7b) == 128
    assert {ex for _, _, _, wf, ex in configs if wf == "baseline"} == {1}  # Pulsar migrates sequentially


@pytest.mark.parametrize("nodes", [8, 64])
def test_nc_star_at_an_rtt_shipped_or_not(nodes):
    from testbed.bench.nc import _star

    scenario = _star(nodes, 100)
    assert scenario.infrastructure.star.nodes == nodes and scenario.name == f"nc-accuracy-n{nodes}"
    topo = topology.build(scenario)
    assert len(topo.nodes) == nodes
    a, b = sorted(topo.nodes)[:2]
    assert topo.node_rtt(a, b) == pytest.approx(0.100)


def test_migration_clients_are_split_and_their_health_merged_per_second(tmp_path):
    """At most 32 clients share an event loop; the guard reads every process's lateness, second by second."""
    from testbed import health
    from testbed.procs import TICKS
    from testbed.systems.pubsub.bench.migration import _harness, client_shares

    assert client_shares(128) == [32, 32, 32, 32] and client_shares(33) == [17, 16] and client_shares(8) == [8]

    def second(s: float, late_ms: float, lag_ms: float) -> str:
        hist = health.LatenessHistogram()
        for _ in range(50):
            hist.add(late_ms)
        return json.dumps({"s": s, "hist": hist.as_dict(), "loop_lag_max_ms": lag_ms}) + "\n"

    quiet, late = tmp_path / "h0.jsonl", tmp_path / "h1.jsonl"
    quiet.write_text(second(100.0, 0.1, 1.0) + second(101.0, 0.1, 1.0))
    late.write_text(second(100.0, 0.1, 2.0) + second(101.0, 50.0, 60.0))
    verdict = _harness([quiet, late], [], 100.0, 102.0)
    assert verdict["seconds"] == 2 and verdict["saturated_seconds"] == 1 and not verdict["valid"]
    assert verdict["loop_lag_max_ms"] == 60.0
    assert _harness([quiet], [], 100.0, 102.0)["valid"]
    # /proc/stat samples (time, total, idle, steal ticks): a late second with more steal than lateness
    # is told apart as the hypervisor's, one with less stays the load's
    ticks = TICKS
    stalled = [(100.0, 0, 0, 0), (101.0, 2 * ticks, ticks, 0), (102.0, 4 * ticks, 2 * ticks, ticks // 10)]
    verdict = _harness([quiet, late], stalled, 100.0, 102.0)
    assert verdict["machine_seconds"] == 1 and "steal up to 100.0 ms a second" in verdict["describe"]
    loaded = [(100.0, 0, 0, 0), (101.0, 2 * ticks, ticks, 0), (102.0, 4 * ticks, 2 * ticks, 1)]
    assert _harness([quiet, late], loaded, 100.0, 102.0)["machine_seconds"] == 0
    # the stall probe's seconds: every core stopped at once for as long as the clients were late
    stopped = _harness([quiet, late], loaded, 100.0, 102.0, {101: {"machine_stall_ms": 59.0}})
    assert stopped["machine_seconds"] == 1 and "every core stopped for up to 59.0 ms" in stopped["describe"]
