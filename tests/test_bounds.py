"""analysis.bounds: the worst E2E latency a configured topology allows, which says when a verdict cannot fail."""

from __future__ import annotations

import json

from pathlib import Path

import pytest
import yaml

from analysis import bounds
from testbed import topology
from testbed.scenario.loader import load

REPO = Path(__file__).resolve().parents[1]


def test_the_mmog_cities_bound_every_placement_below_100_ms():
    """A player in lax -> the cloud in nyc -> lax: 2 x (9.5 ms access + WonderProxy's lax-nyc RTT / 2) + 2 x 0.5 ms."""
    bound = bounds.latency_bound(topology.build(load(REPO / "scenarios" / "mmog-smoke.yaml")))
    assert bound.seconds == pytest.approx(0.0883, abs=2e-4) and bound.seconds < 0.100
    assert "@lax" in bound.path and "@nyc" in bound.path


def test_mobile_swarms_reach_the_cloud_path_above_40_ms():
    """A swarm may be at any zone; the worst broker is the cloud: 2 x (8 + 40) + 2 x 0.5 = 97 ms."""
    bound = bounds.latency_bound(topology.build(load(REPO / "scenarios" / "uav-smoke.yaml")))
    assert bound.seconds == pytest.approx(0.097) and "cloud@clouddc" in bound.path


def test_jitter_counts_and_a_static_client_stays_at_its_site():
    topo = topology.build(load(REPO / "scenarios" / "uav-smoke.yaml"))
    swarms = [n for n in topo.nodes.values() if n.role == "uav-swarm"]
    for node in swarms:
        node.access = topology.Shaping(node.access.delay, jitter=0.002)
    assert bounds.latency_bound(topo).seconds == pytest.approx(0.101)  # +2 ms jitter on each access link
    for node in swarms:
        node.mobile = False
    worst = bounds.latency_bound(topo)
    assert worst.path.split(" -> ")[0] in {f"{n.name}@{n.site}" for n in swarms}  # only where it was placed


def test_no_broker_no_bound():
    topo = topology.build(load(REPO / "scenarios" / "uav-smoke.yaml"))
    topo.nodes = {k: n for k, n in topo.nodes.items() if n.role not in bounds.BROKER_ROLES}
    assert bounds.latency_bound(topo) is None


def test_run_limits_read_the_scenario_saved_in_the_run(tmp_path):
    scenario = load(REPO / "scenarios" / "mmog-smoke.yaml")
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    limits = bounds.run_limits(tmp_path)
    assert limits.bound.seconds == pytest.approx(0.0883, abs=2e-4)
    assert limits.reaction_s == 15.0  # a 5 s NC report, a 5 s broker report, a 5 s manager round
    assert bounds.run_limits(tmp_path / "missing") == bounds.Limits(None, None)
    (tmp_path / "scenario.yaml").write_text("name: broken\n")
    assert bounds.run_limits(tmp_path) == bounds.Limits(None, None)


def test_a_migration_lasts_until_its_clients_use_the_new_broker():
    """From the manager's decision to the later of its end and its clients' last downtime; a downtime
    of another topic, or one that began long after, is not the migration's."""
    events = [{"type": "migration_start", "time": 100.0, "topic": "a"},
              {"type": "migration_end", "time": 100.2, "topic": "a"},
              {"type": "downtime", "time": 100.5, "topic": "a", "reason": "redirect", "start": 100.1, "end": 100.5},
              {"type": "downtime", "time": 100.9, "topic": "a", "reason": "disconnect", "start": 101.0, "end": 100.9},
              {"type": "downtime", "time": 150.0, "topic": "a", "reason": "redirect", "start": 149.0, "end": 150.0},
              {"type": "downtime", "time": 103.0, "topic": "b", "reason": "redirect", "start": 100.1, "end": 103.0},
              {"type": "migration_start", "time": 200.0, "topic": "b"},
              {"type": "migration_end", "time": 200.3, "topic": "b"},
              {"type": "migration_start", "time": 300.0, "topic": "c"}]  # never ended: left out
    assert bounds.migration_times(events) == pytest.approx([0.9, 0.3])


def test_run_limits_add_the_runs_own_migration_time(tmp_path):
    scenario = load(REPO / "scenarios" / "uav-smoke.yaml")
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    assert bounds.run_limits(tmp_path).window_s == 15.0  # no events: reports and rounds only
    moves = [[{"type": "migration_start", "time": 10.0 * i, "topic": f"t{i}"},
              {"type": "migration_end", "time": 10.0 * i + 0.1 * i, "topic": f"t{i}"}] for i in range(1, 21)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for pair in moves for e in pair))
    limits = bounds.run_limits(tmp_path)
    assert limits.migration_s == pytest.approx(2.0)  # the p95 of 0.1 .. 2.0 s (the higher rank: 20 of 20)
    assert limits.window_s == pytest.approx(17.0)
