"""Supervision reports each dead process once (issue 19, a client process crash): the experiment
asks every 50 ms, and a crash reported at every ask was thousands of events and progress lines."""

from __future__ import annotations

from testbed.roles.base import RunContext, newly_dead
from testbed.systems.pubsub.workload_role import PubSubWorkload


class FakeProcess:
    def __init__(self, code=None):
        self.code = code

    def poll(self):
        return self.code


def test_a_dead_process_is_reported_once_with_its_exit_code():
    processes, reported = {"a": FakeProcess(), "b": FakeProcess(-9)}, set()
    assert newly_dead(processes, reported) == [("b", -9)]
    assert newly_dead(processes, reported) == []
    processes["a"].code = 1
    assert newly_dead(processes, reported) == [("a", 1)] and newly_dead(processes, reported) == []


def test_a_crashed_workload_process_is_one_event_and_a_finished_one_none(tmp_path):
    role = PubSubWorkload(RunContext(network=None, topology=None, scenario=None, out=tmp_path, run_id="r1"))
    role.processes = {"sw1": FakeProcess(), "sw2": FakeProcess(0)}
    assert role.supervise() == []  # sw2 finished its duration (exit 0): not a crash
    role.processes["sw1"].code = -9
    events = role.supervise()
    assert [(e["type"], e["node"], e["exit_code"]) for e in events] == [("workload_died", "sw1", -9)]
    assert role.supervise() == []
