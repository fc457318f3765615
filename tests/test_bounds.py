"""analysis.bounds: the worst E2E latency a configured topology allows, which says when a verdict cannot fail."""

from __future__ import annotations

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
    assert limits.reaction_s == 10.0  # a 5 s NC report and a 5 s monitoring round
    assert bounds.run_limits(tmp_path / "missing") == bounds.Limits(None, None)
    (tmp_path / "scenario.yaml").write_text("name: broken\n")
    assert bounds.run_limits(tmp_path) == bounds.Limits(None, None)
