"""A system's settings are its own: the topic manager's `control` keys and the `kill:` targets
ZooKeeper and manager are declared by the pub/sub system's manifest (testbed.plugin), not by the
core. Under another system under test they are refused at their line, naming the system that has
them; `--policy` is refused before a run starts; `--system` keeps the file's own settings as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed import plugin, topology
from testbed.options import with_system
from testbed.scenario.loader import ScenarioError, load, parse_text

ROOT = Path(__file__).resolve().parent.parent
UAV, MMOG = ROOT / "scenarios" / "uav-smoke.yaml", ROOT / "scenarios" / "mmog-smoke.yaml"


def _line(text: str, starts: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith(starts))


def _problems(text: str, path: Path) -> list:
    path.write_text(text)
    with pytest.raises(ScenarioError) as error:
        topology.checked(parse_text(text, str(path)), str(path))
    return error.value.problems


def test_the_topic_manager_s_keys_and_targets_are_the_pub_sub_system_s():
    assert {plugin.control_owner(k).name for k in ("policy", "distance", "migration", "pulsar_lm")} == {"epulsar"}
    assert plugin.control_owner("settle") is None and plugin.control_owner("nc_report_period") is None
    assert {name: system.name for name, (system, _) in plugin.fault_targets().items()} == \
        {"zookeeper": "epulsar", "manager": "epulsar"}


def test_a_topic_manager_key_under_another_system_is_refused_at_its_line(tmp_path):
    text = UAV.read_text().replace("control: {policy: epulsar, settle: 15s}",
                                   "system: natscluster\ncontrol:\n  settle: 15s\n  policy: allpairs\n  distance: one_way")
    (problem,) = _problems(text, tmp_path / "nats-policy.yaml")
    assert (problem.field, problem.line) == ("control.policy", _line(text, "policy:"))
    assert "setting of system 'epulsar'" in problem.message and "under system 'natscluster'" in problem.message
    assert str(problem).startswith(f"{tmp_path / 'nats-policy.yaml'}:{problem.line}: control.policy: ")
    # a default value configures nothing either way: a run's scenario.yaml, with every default, passes
    topology.checked(parse_text(text.replace("policy: allpairs", "policy: epulsar"), "ok.yaml"), "ok.yaml")


def test_a_system_s_fault_target_under_another_system_is_refused_with_the_system_that_has_it(tmp_path):
    text = UAV.read_text().replace("control: {policy: epulsar, settle: 15s}", "system: natscluster\ncontrol: {settle: 15s}")
    text += "faults:\n  - {at: 20s, kill: zookeeper, restart_after: 5s}\n"
    problems = {p.field: p for p in _problems(text, tmp_path / "nats-zk.yaml")}
    problem = problems["faults[0].kill"]
    assert problem.line == _line(text, "- {at: 20s, kill: zookeeper")
    assert "'zookeeper' is a part of system 'epulsar'" in problem.message and "has it: epulsar" in problem.message


def test_the_pub_sub_system_judges_its_own_targets(tmp_path):
    with pytest.raises(ScenarioError, match="kill: zookeeper needs restart_after"):
        parse_text(UAV.read_text() + "faults:\n  - {at: 20s, kill: zookeeper}\n", "zk.yaml")
    with pytest.raises(ScenarioError, match=r"restart_after goes with kill: zookeeper or a broker \(a manager has"):
        parse_text(UAV.read_text() + "faults:\n  - {at: 20s, kill: manager, restart_after: 5s}\n", "m.yaml")
    (problem,) = _problems(UAV.read_text() + "faults:\n  - {at: 20s, kill: manager}\n", tmp_path / "m.yaml")
    assert problem.field == "faults[0].kill" and "needs a standby" in problem.message


def test_system_keeps_the_file_s_own_settings_as_written():
    """mmog-smoke's `distance: rtt` stays under `--system natscluster` (inert there, and recorded, so
    the NATS cluster's runs and ePulsar's are one experiment with one reading of d)."""
    written = load(MMOG)
    scenario = with_system(written, "natscluster", MMOG)
    assert scenario.control.distance == "rtt"
    topology.checked(scenario, str(MMOG), written_for=written.system)
    with pytest.raises(ScenarioError, match="control.distance: a setting of system 'epulsar'"):
        topology.checked(scenario, str(MMOG))  # the same settings in a file that names natscluster itself
    saved = yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)
    assert parse_text(saved, "scenario.yaml").control.distance == "rtt"  # a run's saved scenario loads again


def test_policy_is_refused_for_a_system_without_policies_before_anything_starts():
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(UAV), "--system", "natscluster",
                          "--policy", "allpairs"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "--policy: control.policy is a setting of system 'epulsar'" in run.stderr, run.stderr
    assert "system 'natscluster' has none" in run.stderr
    bad = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(UAV), "--policy", "nope"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "'epulsar', 'allpairs'" in bad.stderr, bad.stderr  # the system's field checks it
