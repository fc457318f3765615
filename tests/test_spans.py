"""How the live tests judge a span of a run (tests/spans.py, tests/live.py), on fabricated health
rows of a broken system: the clients' own lateness excuses nothing, only the machine's holds do, and
a run that was never held fails unless the machine is why."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import live, spans

START = 1_000_000


def _out(tmp_path: Path, rows: list[dict]) -> Path:
    (tmp_path / "health.jsonl").write_text("".join(json.dumps({"t": START + r["elapsed_s"], **r}) + "\n" for r in rows))
    return tmp_path


def test_a_client_loop_blocked_as_long_as_its_downtime_excuses_none_of_it(tmp_path):
    """A failover that blocks the client's event loop 1.5 s: its 1.5 s downtime stays 1.5 s (the
    broker run's median bound is 1 s: it fails); the same 1.5 s stolen by the hypervisor is excused."""
    blocked = _out(tmp_path, [{"elapsed_s": 10.0, "loop_lag_max_ms": 1500.0, "publisher_late_max_ms": 1500.0,
                               "causes": ["event-loops", "publishers"]}])
    assert spans.slack_s(blocked, 10.0, 11.5) == 0.0
    assert 1.5 - spans.slack_s(blocked, 10.0, 11.5) >= 1.0  # the failover's median bound: judged broken
    stolen = _out(tmp_path, [{"elapsed_s": 10.0, "loop_lag_max_ms": 1500.0, "cpu_steal_ms": 1500.0,
                              "causes": ["event-loops"]}])
    assert spans.slack_s(stolen, 10.0, 11.5) == 1.5
    stalled = _out(tmp_path, [{"elapsed_s": 10.0, "machine_stall_ms": 700.0, "relay_late_max_ms": 900.0}])
    assert spans.slack_s(stalled, 10.0, 11.5) == 0.7  # the delay line's own lateness is not in it either


def test_measured_lateness_is_judged_and_a_second_without_cpu_repeats_the_run(tmp_path):
    out = _out(tmp_path, [{"elapsed_s": 1.0, "loop_lag_max_ms": 900.0, "causes": ["event-loops"]},
                          {"elapsed_s": 2.0, "relay_late_max_ms": 40.0, "causes": ["relays"]},
                          {"elapsed_s": 3.0, "cpu_idle": 0.0, "causes": ["cpu"]},
                          {"elapsed_s": 4.0, "relay_late_max_ms": 40.0, "cpu_steal_ms": 60.0, "causes": ["relays"]}])
    assert spans.unmeasured_within(out, 0.0, 10.0) == [3.0]


def test_clean_seconds_drop_only_what_the_machine_took(tmp_path):
    """A second whose clients were late keeps its latencies (they are the system's); one the
    hypervisor held does not."""
    out = _out(tmp_path, [{"elapsed_s": 0.0},
                          {"elapsed_s": 1.0, "loop_lag_max_ms": 900.0, "causes": ["event-loops"]},
                          {"elapsed_s": 2.0, "loop_lag_max_ms": 30.0, "cpu_steal_ms": 80.0, "causes": ["event-loops"]},
                          {"elapsed_s": 3.0, "cpu_idle": 0.0, "causes": ["cpu"]}])
    assert spans.clean_seconds(out) == {START, START + 1, START + 3}


@pytest.mark.fabricated_claims
def test_a_latency_with_too_few_clean_deliveries_fails_unless_the_machine_took_the_seconds(tmp_path):
    quiet = _out(tmp_path, [{"elapsed_s": 0.0}])
    with pytest.raises(pytest.fail.Exception, match="3 of 5 deliveries in clean seconds, 100 needed"):
        spans.too_few_clean("median", quiet, 3, 100, 5)  # too few sent at all: the system's
    held = _out(tmp_path, [{"elapsed_s": 0.0, "loop_lag_max_ms": 30.0, "cpu_steal_ms": 80.0, "causes": ["event-loops"]}])
    with pytest.raises(pytest.fail.Exception):
        spans.too_few_clean("median", held, 3, 100, 5)
    with pytest.raises(pytest.skip.Exception, match=r"1 s the hypervisor held \(steal 80 ms"):
        spans.too_few_clean("median", held, 3, 100, 500)
    spans.too_few_clean("median", quiet, 100, 100, 500)  # enough: judged


def _fake_runs(monkeypatch, tmp_path: Path, codes: list[int]):
    """`testbed run` replaced: each attempt exits with the next of `codes`, leaving a run folder."""
    calls = iter(codes)

    def run(argv, **_kwargs):
        where = Path(argv[argv.index("--results") + 1]) / "toy-1"
        where.mkdir(parents=True)
        (where / "summary.json").write_text(json.dumps({"harness": {}}))
        return subprocess.CompletedProcess(argv, next(calls), "end screen: the machine's CPU was 0 % idle", "")

    monkeypatch.setattr(live.subprocess, "run", run)


@pytest.mark.fabricated_claims
def test_a_run_never_held_fails_with_its_reasons_unless_every_reason_is_the_machine_s(monkeypatch, tmp_path):
    _fake_runs(monkeypatch, tmp_path / "a", [0, 0])
    with pytest.raises(pytest.fail.Exception, match="2 runs, none held: 9 s ours; 9 s ours"):
        live.run_held([], tmp_path / "a", "toy", lambda out, summary: "9 s ours")
    _fake_runs(monkeypatch, tmp_path / "b", [0, 0])
    reasons = iter([live.ByMachine("steal 3 s"), "9 s ours"])
    with pytest.raises(pytest.fail.Exception):
        live.run_held([], tmp_path / "b", "toy", lambda out, summary: next(reasons))
    _fake_runs(monkeypatch, tmp_path / "c", [0, 0])
    with pytest.raises(pytest.skip.Exception, match="steal 3 s"):
        live.run_held([], tmp_path / "c", "toy", lambda out, summary: live.ByMachine("steal 3 s"))


def test_a_crashed_run_fails_whatever_its_end_screen_says(monkeypatch, tmp_path):
    _fake_runs(monkeypatch, tmp_path, [1])
    with pytest.raises(AssertionError, match="CPU was"):
        live.run_held([], tmp_path, "toy", lambda out, summary: live.ByMachine("steal"))


def test_a_swarm_s_topics_belong_on_its_zone_s_broker_by_the_configured_network_alone():
    """The UAV placement claim's truth (tests/test_run_uav.py): from the topology, not from the run's
    coordinate estimates; in uav-smoke every zone's own broker is the one nearest a swarm there."""
    from testbed import topology
    from testbed.scenario.loader import load
    from tests.test_run_uav import truly_nearest

    scenario = load(Path(__file__).resolve().parent.parent / "scenarios" / "uav-smoke.yaml")
    topo = topology.build(scenario)
    brokers = {name for name, node in topo.nodes.items() if node.role in ("broker", "cloud")}
    swarm, sites = topo.placed("uav-swarm")[0][0], {n.site for n in topo.nodes.values() if n.role == "broker"}
    assert len(sites) == 4 and "cloud" in brokers
    for site in sites:
        (own,) = [name for name, node in topo.nodes.items() if node.role == "broker" and node.site == site]
        assert truly_nearest(topo, swarm, site, brokers) == {own}
