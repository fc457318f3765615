"""The policy registry is the only list of names; the overload thresholds and the topic-class rule
each have one home. Everything that offers a choice of policy derives it from the registry."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import asdict, astuple, fields

import pytest

from testbed import cli, paper_figures
from testbed.systems.pubsub.bench import assessment
from testbed.policies import (DEFAULT_DISTANCE, DEFAULT_INITIAL_PLACEMENT, DEFAULT_POLICY, DISTANCES, FAMILIES,
                              INITIAL_PLACEMENTS, ONE_WAY, POLICIES, Overload, Policy, get_policy,
                              perform_repartitioning, topic_class, topic_name)
from testbed.policies.topics import CLASS_RE, TOPIC_RE
from testbed.policies.snapshot import BrokerReport, Snapshot
from testbed.nc.coordinate import Coordinate
from testbed.scenario import fields as scenario_fields
from testbed.scenario.loader import ScenarioError, load, parse_text
from testbed.systems.pubsub import broker, manager
from tests.texts import MINIMAL



def test_each_family_is_one_module_named_after_it():
    assert len(POLICIES) == len(FAMILIES)  # no two families share a name
    for name, policy in POLICIES.items():
        assert isinstance(policy, Policy) and policy.name == name and policy.label
        assert type(policy).__module__ == "testbed.policies." + name.replace("-", "_")
    assert DEFAULT_POLICY in POLICIES


def test_every_list_of_names_is_the_registry(capsys):
    names = tuple(POLICIES)
    assert cli.POLICY_CHOICES == names and paper_figures.POLICIES == names and paper_figures.Options().policies == names
    assert sorted(assessment.POLICY_NAMES) == sorted(names)
    with pytest.raises(SystemExit):
        manager.main(["--help"])
    assert "{" + ",".join(names) + "}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        manager.main(["--node", "cloud", "--nats", "nats://x:4222", "--zk", "x:2181", "--policy", "fastest"])
    assert info.value.code == 2 and "invalid choice: 'fastest'" in capsys.readouterr().err


def test_the_scenario_accepts_every_registered_policy_and_names_the_line_of_a_bad_one(tmp_path):
    assert parse_text(MINIMAL).control.policy == DEFAULT_POLICY
    for name in POLICIES:
        assert parse_text(MINIMAL + f"control: {{policy: {name}}}\n").control.policy == name
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL + "control:\n  policy: fastest\n")
    with pytest.raises(ScenarioError) as info:
        load(path)
    allowed = ", ".join(repr(n) for n in list(POLICIES)[:-1]) + f" or {list(POLICIES)[-1]!r}"
    assert str(info.value) == f"{path}:12: control.policy: 'fastest': input should be {allowed}"


def test_the_distance_readings_and_start_ups_are_one_list_each(tmp_path, capsys):
    """control.distance and control.initial_placement: the scenario, the topic manager's and the broker
    agent's command lines take theirs from testbed.policies (distance, initial)."""
    control = parse_text(MINIMAL).control
    assert (control.distance, control.initial_placement) == (DEFAULT_DISTANCE, DEFAULT_INITIAL_PLACEMENT)
    for name in DISTANCES:
        assert parse_text(MINIMAL + f"control: {{distance: {name}}}\n").control.distance == name
    for name in INITIAL_PLACEMENTS:
        assert parse_text(MINIMAL + f"control: {{initial_placement: {name}}}\n").control.initial_placement == name
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL + "control:\n  policy: epulsar\n  distance: half\n")
    with pytest.raises(ScenarioError) as info:
        load(path)
    assert str(info.value) == f"{path}:13: control.distance: 'half': input should be 'one_way' or 'rtt'"
    for program, flag, names in ((manager, "--distance", DISTANCES), (manager, "--initial-placement", INITIAL_PLACEMENTS),
                                 (broker, "--distance", DISTANCES)):
        with pytest.raises(SystemExit):
            program.main(["--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        assert f"{flag} " + "{" + ",".join(names) + "}" in help_text, (program.__name__, flag)


class Nearest:
    """A stand-in new family: the broker with the smallest first coordinate."""

    name = "nearest"
    label = "Nearest"
    latency_aware = True
    needs_clients = False

    def feasible_brokers(self, topic, snapshot, clients=None):
        return sorted(snapshot.brokers, key=lambda b: snapshot.brokers[b].coord.vec[0])


def test_registering_a_family_is_all_it_takes(monkeypatch):
    monkeypatch.setitem(POLICIES, "nearest", Nearest())
    assert parse_text(MINIMAL + "control: {policy: nearest}\n").control.policy == "nearest"
    policy = get_policy("nearest")
    assert isinstance(policy, Policy)
    snap = Snapshot({b: BrokerReport(b, Coordinate((x, 0.0), 0.5, 0.0, 0.0)) for b, x in (("ba", 0.02), ("bb", 0.01))},
                    {}, distance=ONE_WAY)
    assert perform_repartitioning(snap, policy) == [] and policy.feasible_brokers("t", snap) == ["bb", "ba"]


# --- overload thresholds: one home (testbed.policies.overload) -------------------------------------


def test_the_scenarios_overload_defaults_are_the_policies():
    config = parse_text(MINIMAL).control.overload
    assert config.model_dump() == asdict(Overload())
    assert Overload.from_config(config) == Overload()
    custom = parse_text(MINIMAL + "control: {overload: {cpu: 70%, output_rate: 5000/s}}\n").control.overload
    assert Overload.from_config(custom) == Overload(cpu=0.7, output_rate=5000.0)


def test_the_managers_command_line_carries_the_thresholds_exactly():
    parser = argparse.ArgumentParser()
    Overload.add_arguments(parser)
    assert Overload.from_config(parser.parse_args([])) == Overload()
    odd = Overload(cpu=0.5, memory=0.625, network=0.123456789, output_rate=1234567.5)
    assert Overload.from_config(parser.parse_args(odd.to_argv())) == odd
    assert [a for a in odd.to_argv() if a.startswith("--")] == ["--" + f.name.replace("_", "-") for f in fields(Overload)]


def test_the_pubsub_roles_default_thresholds_are_the_policies():
    from testbed.systems.pubsub.role import ManagerOptions

    assert ManagerOptions().overload == astuple(Overload()) and ManagerOptions().policy == DEFAULT_POLICY


# --- the topic-class rule: one home (testbed.policies.topics) --------------------------------------


def test_topic_class_rule():
    assert topic_class("follow_leader-swarm3") == "follow_leader"
    assert topic_class(topic_name("avatar", 17)) == "avatar" and topic_name("avatar", 17) == "avatar-17"
    assert topic_class("sensor_data") == "sensor_data"
    assert topic_class("a-b-c") == "a"  # whatever follows the first separator is the instance
    assert CLASS_RE.fullmatch("follow_leader") and not CLASS_RE.fullmatch("follow-leader")
    assert TOPIC_RE.fullmatch(topic_name("follow_leader", "swarm3")) and TOPIC_RE.fullmatch("avatar")
    for bad in ("follow_leader-swarm.3", "a-b-c", "Avatar-1", "avatar-1\n", "x/y"):
        assert not TOPIC_RE.fullmatch(bad), bad
    assert scenario_fields.CLASS_RE is CLASS_RE  # the scenario checks topic classes with the one rule


# --- layering -----------------------------------------------------------------------------------


def test_pure_policy_code_imports_nothing_from_the_harness():
    code = ("import sys, testbed.policies; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('testbed'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "testbed.policies.registry" in loaded
    outside = [m for m in loaded if not m.startswith("testbed.policies") and m not in ("testbed", "testbed.nc",
                                                                                          "testbed.nc.coordinate")]
    assert outside == []
