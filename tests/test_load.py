"""The offered-load estimate (testbed.load) and `run --strict` against a capacity file (pure)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed import load, topology
from testbed.cli import app
from testbed.scenario.loader import load as load_scenario

REPO = Path(__file__).resolve().parents[1]


def estimate(name: str, scale: float | None = None) -> load.Estimate:
    scenario = load_scenario(REPO / "scenarios" / f"{name}.yaml")
    if scale is not None:
        scenario = scenario.with_scale(scale)
    return load.estimate(scenario, topology.build(scenario))


def test_uav_paper_case():
    est = estimate("uav")  # 8 swarms x 8 UAVs x 200 msg/s; per swarm 7 followers + the leader read
    assert est.published_per_s == 12_800
    assert est.deliveries_per_s == 22_400
    # 1 KB + overhead fits one frame, plus its ACK; 3 crossings per message and per delivery
    assert load.frames_per_crossing(1000) == 2
    assert est.shaper_packets_per_s == 2 * 3 * (12_800 + 22_400)


def test_uav_smoke_is_the_issue_table_s_240_deliveries():
    est = estimate("uav-smoke")  # 2 swarms x 4 UAVs x 20 msg/s
    assert (est.published_per_s, est.deliveries_per_s) == (160, 240)


def test_scale_halves_swarms_and_rate():
    est = estimate("uav", 0.5)  # 4 swarms x 8 UAVs at 100 msg/s
    assert (est.published_per_s, est.deliveries_per_s) == (3_200, 5_600)


def test_mmog_uses_the_run_s_areas_of_interest():
    scenario = load_scenario(REPO / "scenarios" / "mmog.yaml")
    topo = topology.build(scenario)
    from testbed.mobility import group_changes
    from testbed.systems.pubsub.workloads import area_of_interest

    groups, _ = group_changes(scenario, 64)
    subscriptions = sum(len(area_of_interest(a, groups)) for a in range(64)) + 64  # + each avatar's game server
    est = load.estimate(scenario, topo)
    assert len(topo.placed("avatar")) == 64 and est.published_per_s == 64 * 300
    assert est.deliveries_per_s == 300 * subscriptions == load.deliveries_per_s(scenario, topo)
    # 8 groups of ~8: each player sees ~7 others
    assert 64 * 4 <= subscriptions - 64 <= 64 * 10


def test_big_messages_take_more_frames():
    assert load.frames_per_crossing(1248) == 2
    assert load.frames_per_crossing(1249) == 4


CAPACITY = {"knee": {"uav-swarm": {"deliveries_per_s": 1000.0, "reached": True}}, "nats_msgs_per_s": 50_000.0,
            "delayline_pkts_per_s": 100_000.0, "cpus": 2}


def test_compare_against_capacity():
    smoke, paper = estimate("uav-smoke"), estimate("uav")
    assert load.compare(smoke, CAPACITY).beyond == []
    verdict = load.compare(paper, CAPACITY)
    assert verdict.measured and len(verdict.beyond) == 2  # the harness knee and the delay line, not nats
    assert "22,400 > harness knee, deliveries/s 1,000" in verdict.beyond[0]
    unmeasured = load.compare(paper, None)
    assert not unmeasured.measured and unmeasured.beyond == [] and unmeasured.notes == [load.UNMEASURED]
    mmog = load.compare(estimate("mmog-smoke"), CAPACITY)
    assert "mmog: no knee measured" in mmog.notes[0]
    none_held = load.compare(smoke, {"knee": {"uav-swarm": {"deliveries_per_s": None}}})
    assert "no measured uav-swarm load held" in none_held.beyond[0]


def test_show_says_unmeasured_without_a_capacity_file(tmp_path):
    result = CliRunner().invoke(app, ["show", str(REPO / "scenarios" / "uav.yaml"), "--json",
                                      "--capacity", str(tmp_path / "none.json")])
    assert result.exit_code == 0
    data = json.loads(result.output)["load"]
    assert data["deliveries_per_s"] == 22_400 and data["capacity"]["notes"] == [load.UNMEASURED]


@pytest.fixture
def capacity_file(tmp_path):
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(CAPACITY))
    return path


def test_run_strict_refuses_beyond_capacity(capacity_file):
    scenario = REPO / "scenarios" / "uav.yaml"
    result = CliRunner().invoke(app, ["run", str(scenario), "--scale", "0.5", "--strict", "--capacity", str(capacity_file)])
    assert result.exit_code == 2
    refusal = [line for line in result.output.splitlines() if "--strict" in line]
    assert len(refusal) == 1 and str(scenario) in refusal[0] and "harness knee" in refusal[0]


def test_a_load_past_what_the_machine_carries_at_all_is_refused_at_validation(tmp_path, monkeypatch):
    """More deliveries than any measured run delivered (or more frames than the delay line moves on
    every core): `validate` and `run` refuse it with file:line, `run --over-capacity` runs it."""
    from testbed import experiment

    path = tmp_path / "capacity.json"
    ceiling = {**CAPACITY, "knee": {"uav-swarm": {**CAPACITY["knee"]["uav-swarm"], "delivered_max_per_s": 9_000.0}}}
    path.write_text(json.dumps(ceiling))
    verdict = load.compare(estimate("uav"), ceiling)
    assert verdict.impossible == ["22,400 deliveries/s > the most any measured uav-swarm run delivered, 9,000/s",
                                  "211,200 frames/s > the delay line on every core, 200,000"]
    assert load.compare(estimate("uav-smoke"), ceiling).impossible == []
    scenario = REPO / "scenarios" / "uav.yaml"
    result = CliRunner().invoke(app, ["validate", str(scenario), "--capacity", str(path)])
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if "past what this machine can carry" in line]
    assert line.startswith(f"{scenario}:") and ": workload: offered load past" in line and "--over-capacity" in line
    assert CliRunner().invoke(app, ["validate", str(scenario), "--scale", "0.1", "--capacity", str(path)]).exit_code == 0
    started = []
    monkeypatch.setattr(experiment, "run", lambda scenario, *a, **k: started.append(scenario.name) or 0)
    assert CliRunner().invoke(app, ["run", str(scenario), "--capacity", str(path)]).exit_code == 2 and not started
    assert CliRunner().invoke(app, ["run", str(scenario), "--capacity", str(path), "--over-capacity"]).exit_code == 0
    assert started == ["uav"]


def test_run_strict_starts_within_capacity(capacity_file, monkeypatch):
    from testbed import experiment

    started = []
    monkeypatch.setattr(experiment, "run", lambda scenario, *a, **k: started.append(scenario.name) or 0)
    result = CliRunner().invoke(app, ["run", str(REPO / "scenarios" / "uav-smoke.yaml"), "--strict",
                                      "--capacity", str(capacity_file)])
    assert result.exit_code == 0 and started == ["uav-smoke"]
    assert "within this machine's measured capacity" in result.output


def test_a_broken_capacity_file_is_bad_input(tmp_path):
    path = tmp_path / "capacity.json"
    path.write_text("{not json")
    result = CliRunner().invoke(app, ["show", str(REPO / "scenarios" / "uav.yaml"), "--capacity", str(path)])
    assert result.exit_code == 2 and "not a capacity file" in result.output


def test_a_run_is_judged_against_the_capacity_measured_with_its_own_client_data_plane(tmp_path, monkeypatch):
    """The default capacity file gives way to capacity-compiled.json for a run through the compiled
    engine once that sweep exists; a file asked for by name is always the one used."""
    from pathlib import Path

    from testbed.load import CAPACITY_FILE, capacity_file

    monkeypatch.chdir(tmp_path)
    assert capacity_file("compiled") == CAPACITY_FILE  # not measured with the engine: the default
    CAPACITY_FILE.parent.mkdir(parents=True)
    CAPACITY_FILE.with_name("capacity-compiled.json").write_text("{}")
    assert capacity_file("compiled") == CAPACITY_FILE.with_name("capacity-compiled.json")
    assert capacity_file("python") == CAPACITY_FILE
    assert capacity_file("compiled", Path("mine.json")) == Path("mine.json")


def test_a_load_within_the_steady_knee_is_judged_by_it_when_no_point_held_strictly():
    """bench-capacity through the compiled engine: one 17.9 ms stall failed the strict rule at every
    load, while the steady rule's knee held the paper's UAV load. `run` judges by the steady knee and
    says so, instead of calling the paper's load beyond capacity."""
    steady = {"knee": {"uav-swarm": {"deliveries_per_s": None, "reached": True,
                                      "steady": {"deliveries_per_s": 22_400.0, "reached": True}}}}
    verdict = load.compare(estimate("uav"), steady)
    assert verdict.beyond == [] and verdict.limits == {load.HARNESS_KNEE_STEADY: 22_400.0}
    assert "strict rule" in verdict.notes[0] and "steady rule" in verdict.notes[0]
    beyond = load.compare(estimate("uav", scale=1.5), steady).beyond
    assert beyond and beyond[0].endswith(f"> {load.HARNESS_KNEE_STEADY} 22,400")


def test_an_access_link_too_thin_for_its_node_s_own_messages_is_refused_naming_both_rates(tmp_path, monkeypatch):
    """uav-smoke's swarm node receives 120 msg/s of 1000 B (its 4 UAVs' 2 x 3 deliveries at 20/s):
    at least 1.152 Mbit/s, which a 100 kbit/s access link cannot carry whatever a policy does."""
    import testbed.experiment

    text = (REPO / "scenarios" / "uav-smoke.yaml").read_text()
    assert "bandwidth: 100Mbit}" in text
    thin = tmp_path / "thin.yaml"
    thin.write_text(text.replace("bandwidth: 100Mbit}", "bandwidth: 100kbit}"))
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "bandwidth: 100Mbit" in row)
    none = str(tmp_path / "no-capacity.json")
    monkeypatch.setattr(testbed.experiment, "run", lambda *_a, **_k: pytest.fail("a thin link was run"))
    for args in (["validate", str(thin)], ["run", str(thin)]):
        result = CliRunner().invoke(app, [*args, "--capacity", none])
        assert result.exit_code == 2, result.output
        assert (f"{thin}:{line}: infrastructure.links.access.bandwidth: 100kbit/s cannot carry what swarm1 "
                "receives: 120 msg/s of 1000 B + 200 B protocol = 1.152Mbit/s") in result.output, result.output
    assert CliRunner().invoke(app, ["validate", str(thin), "--scale", "0.05", "--capacity", none]).exit_code == 0
    shown = CliRunner().invoke(app, ["show", str(thin), "--capacity", none])
    assert shown.exit_code == 0 and "refused by validate and run" in shown.output


def test_every_shipped_scenario_s_links_carry_its_own_messages(tmp_path):
    paths = sorted(str(p) for p in [*(REPO / "scenarios").glob("*.yaml"), *(REPO / "tests" / "scenarios").glob("*.yaml")])
    result = CliRunner().invoke(app, ["validate", *paths, "--capacity", str(tmp_path / "no-capacity.json")])
    assert result.exit_code == 0, result.output[-2000:]
    assert result.output.count(": ok (") == len(paths)
