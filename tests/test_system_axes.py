"""Two axes: a scenario names its workload (`workload.kind`) and, separately, its system under test
(`system:`, default the system declaring the kind; `--system` overrides it). A system runs its own
kinds and those it says it runs (`System.runs`), and refuses the rest naming file, line, field and
the systems that do run it; a run's saved scenario re-validates; the NATS cluster's attach plan."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from analysis.side_by_side import label
from analysis.traces import series
from testbed import plugin
from testbed.nc.coordinate import Coordinate
from testbed.options import with_system
from testbed.policies.distance import get_distance
from testbed.roles import classes
from testbed.scenario.loader import ScenarioError, load, parse_text
from testbed.systems.natscluster.role import attach_plan, cluster_config

ROOT = Path(__file__).resolve().parent.parent
UAV, HOTSPOT, BAD = (ROOT / "scenarios" / f"{n}.yaml" for n in ("uav-smoke", "hotspot-smoke", "bad-smoke"))


def test_a_scenario_without_system_runs_the_system_declaring_its_kind():
    assert load(UAV).system == "epulsar" and load(BAD).system == "bad"
    assert plugin.default_system("uav-swarm") == "epulsar" and plugin.default_system(plugin.NO_WORKLOAD) is None


def test_a_kind_is_declared_once_and_run_by_every_system_that_says_so():
    assert plugin.systems_running("uav-swarm") == ["epulsar", "natscluster"]
    assert plugin.systems_running("mmog") == ["epulsar", "natscluster"]
    assert plugin.systems_running("hotspot") == ["epulsar"]
    assert plugin.system_of("uav-swarm").name == "epulsar"  # its schema, checks and offered load
    assert "uav-swarm" not in {k.name for k in plugin.system_named("natscluster").workloads}


def test_a_system_that_does_not_run_the_workload_is_refused_with_file_line_field_and_who_does(tmp_path):
    text = HOTSPOT.read_text() + "system: natscluster\n"
    with pytest.raises(ScenarioError) as error:
        parse_text(text, "hotspot-nats.yaml")
    (problem,) = error.value.problems
    assert (problem.field, problem.line) == ("system", len(text.splitlines()))
    assert "'natscluster' does not run workload kind 'hotspot'" in problem.message and "do: epulsar" in problem.message
    with pytest.raises(ScenarioError, match="no system 'nope'; registered: epulsar, bad, autotune, natscluster"):
        parse_text(UAV.read_text() + "system: nope\n", "x.yaml")


def test_the_system_option_overrides_the_file_and_is_checked_as_the_file_would_be():
    scenario = with_system(load(UAV), "natscluster", UAV)
    assert scenario.system == "natscluster" and scenario.control.natscluster.attach == "home"
    assert with_system(load(UAV), None, UAV).system == "epulsar"
    with pytest.raises(ScenarioError) as error:
        with_system(load(HOTSPOT), "natscluster", HOTSPOT)
    (problem,) = error.value.problems
    assert problem.field == "system" and problem.line == next(
        i for i, line in enumerate(HOTSPOT.read_text().splitlines(), 1) if line.strip().startswith("kind:"))
    assert problem.message.startswith("--system natscluster: ") and "the systems that do: epulsar" in problem.message


def test_the_cli_refuses_a_system_that_does_not_run_the_workload():
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(HOTSPOT), "--system", "natscluster"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "system: --system natscluster: system 'natscluster' does not run" in run.stderr
    ok = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(UAV), "--system", "natscluster"],
                        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert ok.returncode == 0, ok.stderr
    shown = subprocess.run([sys.executable, "-m", "testbed.cli", "show", str(UAV), "--system", "natscluster"],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "workload uav-swarm on system under test natscluster/home" in shown.stdout, shown.stderr


def test_a_run_s_saved_scenario_re_validates_with_its_system_and_settings():
    scenario = with_system(load(UAV), "natscluster", UAV)
    saved = yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)  # as experiment.run writes it
    again = parse_text(saved, "scenario.yaml")
    assert again == scenario and again.system == "natscluster"
    assert plugin.label(again) == "natscluster/home" and plugin.label(load(UAV)) == "epulsar"


def test_the_system_s_own_checks_refuse_what_it_cannot_run():
    from testbed import topology

    data = yaml.safe_load(UAV.read_text())
    data["system"] = "natscluster"
    data["faults"] = [{"at": "5s", "kill": "bzone1"}]
    path = "nats-fault.yaml"
    with pytest.raises(ScenarioError, match=r"faults\[0\]: system natscluster takes no faults"):
        topology.checked(parse_text(yaml.safe_dump(data), path), path)


def test_a_run_starts_the_roles_of_its_system_only():
    names = lambda system: [c.__name__ for c in plugin.role_classes(system)]  # noqa: E731
    assert names("natscluster") == ["NatsClusterRole", "NatsClusterWorkload"]
    assert names("epulsar") == ["PubSubRole", "PubSubWorkload"]
    assert len(classes()) == 1 + sum(len(s.roles) for s in plugin.systems())


def test_a_system_may_not_run_a_kind_nobody_declares(tmp_path, monkeypatch):
    folder = tmp_path / "ghost"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "manifest.py").write_text("from testbed.plugin import System\n"
                                        "SYSTEM = System(name='ghost', title='t', runs=('no-such-kind',))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="runs workload kind 'no-such-kind', which no system declares"):
        plugin._load(("testbed.systems.pubsub", "ghost"))


def test_home_attaches_to_the_zone_s_broker_and_nearest_by_the_proxy_s_coordinate():
    brokers = {"bzone1": ("zone1", "nats://a:4222"), "bzone2": ("zone2", "nats://b:4222")}
    proxies = {"pzone1": "zone1", "pzone2": "zone2"}
    at = lambda x: Coordinate((x, 0.0), 0.1, 0.0, 0.0)  # noqa: E731
    coords = {"bzone1": at(0.0), "bzone2": at(0.010), "pzone1": at(0.009), "pzone2": at(0.011)}
    distance = get_distance("rtt")
    home = attach_plan("home", brokers, proxies, coords, distance)
    assert home.by_proxy == {"pzone1": ("bzone1", "nats://a:4222"), "pzone2": ("bzone2", "nats://b:4222")}
    nearest = attach_plan("nearest", brokers, proxies, coords, distance)
    assert nearest.by_proxy["pzone1"] == ("bzone2", "nats://b:4222")  # zone1's proxy is nearer zone2's broker
    assert nearest.for_proxy("unknown", "zone1") == ("bzone1", "nats://a:4222")  # no proxy answered: the site's
    assert type(nearest).read is not None and nearest.to_json().startswith('{"mode": "nearest"')


def test_every_server_routes_to_every_other():
    config = cluster_config("10.0.0.1", ["10.0.0.2", "10.0.0.3"])
    assert 'listen: "10.0.0.1:6222"' in config and config.count("nats-route://") == 2


def test_a_run_is_labelled_by_its_system_and_mode_beside_the_policies():
    assert series({"system": "natscluster", "label": "natscluster/home"}, "uav-swarm", "epulsar") == "natscluster/home"
    assert series({"system": "epulsar"}, "uav-swarm", "pulsar-hash") == "pulsar-hash"  # the paper's series stay
    assert series({}, "uav-swarm", "epulsar") == "epulsar"  # a run made before systems were recorded
    assert label({"system": "natscluster", "policy": "natscluster/home"}) == "natscluster/home"
    assert label({"system": "epulsar", "policy": "pulsar-hash"}) == "epulsar/pulsar-hash"
    assert label({"policy": "epulsar"}) == "epulsar"
