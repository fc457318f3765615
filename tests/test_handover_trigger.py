"""Handover-aware placement (beyond the paper): its scenario settings are refused when they could not
act or could storm the control plane, with file, line and field; the live effect is measured by
`make bench-handover` (testbed/systems/pubsub/bench/handover.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import topology
from testbed.scenario.loader import ScenarioError, load

ROOT = Path(__file__).resolve().parent.parent
SMOKE = (ROOT / "scenarios" / "uav-smoke.yaml").read_text()


def _scenario(tmp_path, control: str) -> Path:
    path = tmp_path / "trigger.yaml"
    path.write_text(SMOKE.replace("control: {policy: epulsar, settle: 15s}", control))
    return path


def test_the_trigger_is_off_by_default_and_reaches_the_processes_as_set(tmp_path):
    assert load(ROOT / "scenarios" / "uav-smoke.yaml").control.handover_trigger.enabled is False
    path = _scenario(tmp_path, "control:\n  policy: epulsar\n  handover_trigger: {enabled: true, min_change: 3ms, "
                               "poll: 250ms, min_interval: 500ms, hold: 8s}\n")
    config = load(path).control.handover_trigger.config()
    assert (config.enabled, config.min_change_s, config.poll_s, config.min_interval_s, config.hold_s) == \
        (True, 0.003, 0.25, 0.5, 8.0)
    topology.checked(load(path), str(path))  # consistent with the rest of the control block


@pytest.mark.parametrize("trigger, message", [
    ("{enabled: true, min_change: 0ms}", r"trigger.yaml:\d+: control.handover_trigger.min_change"),
    ("{enabled: true, poll: 10ms, min_interval: 1s}", r"poll \(10ms\) below 100ms would make every client"),
    ("{enabled: true, poll: 2s, min_interval: 1s}", r"min_interval \(1s\) shorter than poll \(2s\)"),
])
def test_a_trigger_that_could_storm_is_refused_at_its_line(tmp_path, trigger, message):
    with pytest.raises(ScenarioError, match=message):
        load(_scenario(tmp_path, f"control:\n  policy: epulsar\n  handover_trigger: {trigger}\n"))


def test_a_trigger_that_cannot_act_is_refused_against_the_rest_of_the_control_block(tmp_path):
    slow = _scenario(tmp_path, "control:\n  nc_report_period: 2s\n  handover_trigger: {enabled: true, "
                               "min_interval: 3s, poll: 1s}\n")
    with pytest.raises(ScenarioError, match=r"trigger.yaml:25: control.handover_trigger.min_interval: 3s is longer "
                                            r"than nc_report_period \(2s\)"):
        topology.checked(load(slow), str(slow))
    hashed = _scenario(tmp_path, "control:\n  policy: pulsar-hash\n  handover_trigger: {enabled: true}\n")
    with pytest.raises(ScenarioError, match="policy 'pulsar-hash' does not place by latency"):
        topology.checked(load(hashed), str(hashed))


def test_the_gain_asked_of_an_infeasible_move_is_read_and_refused_where_it_cannot_apply(tmp_path):
    """`control.infeasible_min_gain` (beyond the paper; testbed.policies.repartition.too_little_gain):
    0 by default, Algorithm 1 as written; refused, with its file and line, under a policy that does
    not move topics by latency."""
    assert load(ROOT / "scenarios" / "uav-smoke.yaml").control.infeasible_min_gain == 0.0
    assert load(_scenario(tmp_path, "control:\n  policy: allpairs\n  infeasible_min_gain: 5ms\n")) \
        .control.infeasible_min_gain == pytest.approx(0.005)
    for policy in ("pulsar-hash", "pulsar-lm"):
        with pytest.raises(ScenarioError, match=rf"trigger.yaml:\d+: control.*infeasible_min_gain: policy '{policy}'"):
            load(_scenario(tmp_path, f"control:\n  policy: {policy}\n  infeasible_min_gain: 5ms\n"))
    with pytest.raises(ScenarioError, match=r"trigger.yaml:\d+: control.infeasible_min_gain"):
        load(_scenario(tmp_path, "control:\n  policy: epulsar\n  infeasible_min_gain: -5ms\n"))
