"""roles.settle: the one wait for the coordinates, on a fake clock (pure, no agents)."""

from __future__ import annotations

import pytest

from testbed.roles import settle as settle_mod
from testbed.roles.settle import settle


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(settle_mod.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(settle_mod.time, "sleep", fake.sleep)
    return fake


def snapshots(converged):
    """A snapshot source whose n-th snapshot is converged when converged(n)."""
    taken = []

    def take():
        taken.append(1)
        n = len(taken) - 1
        return {"type": "nc_snapshot", "agents": 4, "expected": 4, "converged": converged(n),
                "median_error_ms": 10.0 / (n + 1), "median_relative": 0.5 / (n + 1)}

    return take


def test_a_fixed_settle_snapshots_every_poll_until_the_duration_and_records_them(clock):
    sink, said = [], []
    result = settle(snapshots(lambda n: False), 12, say=said.append, sink=sink.append,
                    supervise=lambda: [{"type": "serf_restart"}])
    assert [t for t, _ in result.snapshots] == [0, 5, 10, 12]
    assert clock.sleeps == [5, 5, 2]  # the last sleep stops at the duration
    assert result.converged_at is None and result.waited == 12
    assert [e["type"] for e in sink] == ["nc_snapshot", "serf_restart"] * 4
    assert all(s["phase"] == "settle" for _, s in result.snapshots)
    assert said[0] == "settle: 12s for the network coordinates to converge"
    assert said[1] == "settle:    0s of 12s, 4/4 agents, median NC error 10.00 ms"


def test_hold_ends_the_wait_once_convergence_lasted(clock):
    result = settle(snapshots(lambda n: n >= 3), 180, hold=10, poll=2)
    assert result.converged_at == 6  # converged from the 4th snapshot on, held for 10 s
    assert result.waited == 16 and result.last["converged"]


def test_a_lapse_restarts_the_hold_and_min_wait_delays_it(clock):
    assert settle(snapshots(lambda n: n not in (0, 3)), 180, hold=4, poll=2).converged_at == 8
    assert settle(snapshots(lambda n: True), 180, hold=4, min_wait=20, poll=2).converged_at == 20


def test_never_converged_stops_at_the_cap(clock):
    result = settle(snapshots(lambda n: False), 9, hold=4, poll=2)
    assert result.converged_at is None and result.snapshots[-1][0] == 9


def test_nothing_to_settle(clock):
    said = []
    assert settle(lambda: None, 60, say=said.append).snapshots == [] and said == []
    assert settle(snapshots(lambda n: True), 0).snapshots == [] and clock.sleeps == []


def test_a_held_wait_closes_with_a_settle_end_event_that_says_whether_it_settled(clock):
    sink, said = [], []
    settle(snapshots(lambda n: n >= 2), 60, hold=4, poll=2, sink=sink.append, say=said.append)
    end = sink[-1]
    assert end["type"] == "settle_end" and end["settled"] and end["converged_at_s"] == 4 and end["waited_s"] == 8
    assert said[-1].startswith("settle: converged after 8s (held 4s): median error 2.0 ms (10.0%)")


def test_the_cap_ends_the_wait_unsettled_with_the_errors_at_that_moment(clock):
    def stuck():
        return {"type": "nc_snapshot", "agents": 4, "expected": 4, "converged": False, "median_error_ms": 3.0,
                "median_relative": 0.04, "same_site_pairs": 2, "same_site_max_error_ms": 21.5,
                "unmet": ["same-site worst 21.5 ms > 5 ms"]}
    sink, said = [], []
    settle(stuck, 15, hold=5, poll=2, sink=sink.append, say=said.append)
    end = sink[-1]
    assert not end["settled"] and end["waited_s"] == 15 and end["same_site_max_error_ms"] == 21.5
    assert end["unmet"] == ["same-site worst 21.5 ms > 5 ms"]
    assert said[-1] == ("settle: UNSETTLED at the 15s cap (same-site worst 21.5 ms > 5 ms): median error 3.0 ms "
                        "(4.0%), same-site worst 21.5 ms over 2 pairs; the workload starts anyway")


# -- the criterion (testbed.nc.snapshots), on fake coordinates and a fake topology ---------------------

class Site:
    def __init__(self, site):
        self.site = site


class Topology:
    """Two sites 30 ms apart (RTT), 1 ms access links: same-site RTT 4 ms, cross-site 34 ms."""

    def __init__(self, sites):
        self.nodes = {name: Site(site) for name, site in sites.items()}

    def node_rtt(self, a, b):
        return 0.004 + (0.030 if self.nodes[a].site != self.nodes[b].site else 0.0)


def coordinates(positions_ms):
    """node -> Coordinate at (x, y) ms in Serf's 8 dimensions."""
    from testbed.nc.coordinate import Coordinate

    return {name: Coordinate(vec=[x / 1e3, y / 1e3] + [0.0] * 6, height=1e-5, error=0.1, adjustment=0.0)
            for name, (x, y) in positions_ms.items()}


TOPOLOGY = Topology({"b1": "z1", "p1": "z1", "b2": "z2", "p2": "z2"})


def test_the_same_site_bound_catches_what_the_all_pairs_median_hides():
    from testbed.nc.snapshots import Criterion, snapshot

    # Cross-site pairs within 16 %, but each zone's broker and proxy estimated 20 ms apart (4 ms).
    coords = coordinates({"b1": (0, 0), "p1": (0, 20), "b2": (34, 0), "p2": (34, 20)})
    loose, strict = Criterion(median_relative=0.5), Criterion(median_relative=0.5, same_site_s=0.005)
    snap = snapshot(coords, TOPOLOGY, 4, loose)
    assert snap["same_site_pairs"] == 2 and snap["same_site_max_error_ms"] == pytest.approx(16.0, abs=0.1)
    assert snap["converged"] and snap["unmet"] == []
    judged = snapshot(coords, TOPOLOGY, 4, strict)
    assert not judged["converged"] and judged["unmet"] == ["same-site worst 16.0 ms > 5 ms"]


def test_the_criterion_counts_agents_and_the_median():
    from testbed.nc.snapshots import Criterion, snapshot

    exact = coordinates({"b1": (0, 0), "p1": (0, 4), "b2": (34, 0), "p2": (34, 4)})
    assert snapshot(exact, TOPOLOGY, 4, Criterion(same_site_s=0.005))["converged"]
    assert snapshot(exact, TOPOLOGY, 5)["unmet"] == ["4/5 agents"]
    far = coordinates({"b1": (0, 0), "p1": (0, 4), "b2": (80, 0), "p2": (80, 4)})  # 80 ms for 34 ms
    assert snapshot(far, TOPOLOGY, 4)["unmet"] == ["median error 135.4% >= 6.0%"]
    assert snapshot({}, TOPOLOGY, 0)["unmet"] == ["no pairs"]


# -- control.settle in the scenario ---------------------------------------------------------------

def _control(settle_text):
    from testbed.scenario.loader import parse_text
    from tests.texts import MINIMAL

    return parse_text(MINIMAL + f"control: {{settle: {settle_text}}}\n", "s.yaml").control.settle


def test_a_bare_duration_is_the_cap_with_the_default_bounds():
    rule = _control("150s")
    assert (rule.max, rule.same_site, rule.median_error, rule.hold) == (150, 0.008, 0.06, 5)
    rule = _control("{max: 3m, same_site: 3ms, median_error: 8%, hold: 10s}")
    assert (rule.max, rule.same_site, rule.median_error, rule.hold) == (180, 0.003, 0.08, 10)
    assert _control("2s").hold == 2  # a cap shorter than the default hold: the cap is the wait


@pytest.mark.parametrize("settle_text", ["2s", "5s", "150s", "{max: 10s, hold: 10s}"])
def test_the_scenario_as_run_loads_again(settle_text):
    """results/<run>/scenario.yaml writes every field; the analysis loads it back (a site-cut run with
    `settle: 5s` once wrote hold 5s beside max 5s, which its own loader then refused)."""
    import yaml

    from testbed.scenario.loader import parse_text
    from tests.texts import MINIMAL

    scenario = parse_text(MINIMAL + f"control: {{settle: {settle_text}}}\n", "s.yaml")
    again = parse_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False), "as-run.yaml")
    assert again.control.settle == scenario.control.settle


@pytest.mark.parametrize("text, message", [
    ("abc", "s.yaml:11: control.settle.max: 'abc' is not a duration such as '40ms'"),
    ("{max: 10s, hold: 20s}", "s.yaml:11: control.settle: hold (20s) must not be longer than max (10s)"),
    ("{max: 150s, same_site: 5}", "control.settle.same_site: 5 is not a duration such as '40ms' (the unit is missing)"),
    ("{max: 150s, median_error: 0%}", "control.settle: median_error must be above 0%"),
    ("{max: 150s, median_error: 150%}", "control.settle.median_error: '150%' is not between 0% and 100%"),
    ("{max: 150s, within: 5ms}", "control.settle.within: unknown key 'within'; allowed: max, same_site, median_error, hold"),
])
def test_settle_errors_name_file_line_and_field(text, message):
    from testbed.scenario.loader import ScenarioError

    with pytest.raises(ScenarioError) as error:
        _control(text)
    assert message in str(error.value)


# -- live: the coordinates role's settle on real Serf agents (root; ~20 s) ----------------------------

LIVE_ZONES = """
name: settlez
duration: 1m
infrastructure:
  mec_zones: {zones: 2, inter_site_rtt: 30ms}
  cloud: {one_way: 20ms}
  links: {access: {delay: 4ms}, local: {delay: 1ms}}
control: {settle: {max: 8s, hold: 2s}}
emulation: {backend: mininet}
"""


def _live_marks(test):
    import os
    import shutil

    from testbed.emulation import installed

    for mark in (pytest.mark.root,
                 pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
                 pytest.mark.skipif(not installed.mininet_importable()[0], reason="Mininet is not installed"),
                 pytest.mark.skipif(not shutil.which("serf"), reason="serf is not installed (apt-get install serf)")):
        test = mark(test)
    return test


@_live_marks
def test_live_settle_records_the_same_site_pairs_and_a_settle_end(tmp_path):
    from testbed.experiment import Session
    from testbed.roles import RunContext
    from testbed.roles.coordinates import Coordinates
    from testbed.scenario.loader import parse_text

    scenario = parse_text(LIVE_ZONES)
    with Session(scenario) as session:
        (tmp_path / "logs").mkdir()
        role = Coordinates(RunContext(session.network, session.topology, scenario, tmp_path, session.run_id))
        role.start()
        sink = []
        try:
            settled = role.settle(sink.append)
        finally:
            role.stop()
    end = sink[-1]
    assert end["type"] == "settle_end" and end["same_site_pairs"] == 2 and end["agents"] == 5
    assert end["settled"] == (settled.converged_at is not None)
    assert end["waited_s"] <= 8 + 2 and (end["settled"] or end["unmet"])  # the cap, or held before it
    assert all(s["phase"] == "settle" and s["same_site_max_error_ms"] is not None for _, s in settled.snapshots)
    assert role.summary([])["settle"]["same_site_pairs"] == 2


def test_a_snapshot_stops_asking_slow_agents_at_its_budget(clock, monkeypatch):
    """On an overloaded machine each agent answered slowly, and 26 of them held the run's timeline
    (relinks, faults) 55 s: the snapshot leaves out whom its budget does not reach."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from testbed.nc.coordinate import Coordinate
    from testbed.roles import launch

    asked: list[tuple[str, float]] = []

    @contextmanager
    def slow_rpc(node, timeout):
        asked.append((node, timeout))
        clock.now += 0.3
        yield SimpleNamespace(coordinate=lambda _node: Coordinate((0.001, 0.0), 0.1, 0.0, 0.0001))

    agents = object.__new__(launch.SerfAgents)
    agents.agents = {f"n{i}": None for i in range(20)}
    monkeypatch.setattr(agents, "rpc", slow_rpc)
    found = agents.coordinates()
    budget = max(launch.SNAPSHOT_BUDGET_S, launch.SNAPSHOT_AGENT_S * 20)
    assert len(asked) == int(budget / 0.3 - 1e-9) + 1 and set(found) == {node for node, _ in asked}
    assert all(timeout <= launch.SNAPSHOT_RPC_S for _, timeout in asked)
    assert asked[-1][1] == pytest.approx(budget - 0.3 * (len(asked) - 1))  # the last one gets what is left
