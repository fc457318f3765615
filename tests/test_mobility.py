"""The mobility timeline is computed before the run and is the same for the same seed."""

from pathlib import Path

from testbed import mobility, topology
from testbed.scenario.loader import load

ROOT = Path(__file__).resolve().parent.parent


def plan(path: str, seed: int | None = None):
    scenario = load(ROOT / path)
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    topo = topology.build(scenario)
    return mobility.plan(scenario, topo), topo


def test_same_seed_same_handovers():
    first, _ = plan("scenarios/uav.yaml")
    second, _ = plan("scenarios/uav.yaml")
    assert first == second and len(first) > 0


def test_other_seed_other_handovers():
    assert plan("scenarios/uav.yaml")[0] != plan("scenarios/uav.yaml", seed=8)[0]


def test_handovers_are_consistent_with_the_initial_sites():
    handovers, topo = plan("scenarios/uav.yaml")
    where = {n.name: n.site for n in topo.nodes.values() if n.mobile}
    for h in handovers:
        assert where[h.node] == h.from_site != h.to_site
        where[h.node] = h.to_site
    assert [h.time for h in handovers] == sorted(h.time for h in handovers)
    assert all(0 < h.time <= 600 for h in handovers)


def test_the_smoke_scenario_has_a_zone_change():
    handovers, _ = plan("scenarios/uav-smoke.yaml")
    assert handovers


def test_group_changes_follow_the_stay_time():
    scenario = load(ROOT / "scenarios/mmog.yaml")
    groups, changes = mobility.group_changes(scenario)
    assert len(groups) == 64 and all(0 <= g < 8 for g in groups)
    last = {}
    for change in changes:
        assert change.from_group != change.to_group
        gap = change.time - last.get(change.avatar, 0.0)
        assert 30 - 1e-6 <= gap <= 60 + 1e-6
        last[change.avatar] = change.time
    assert mobility.group_changes(scenario) == (groups, changes)
