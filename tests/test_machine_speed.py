"""Today's machine against the day its capacity was measured (testbed.machine_speed): the wording a
run prints, when a run takes the reference, and the reference itself on real processes."""

from __future__ import annotations

import math
import os
import subprocess

import pytest

from testbed import machine_speed
from testbed.machine_speed import Reference
from tests.needs import full_system

THEN = {"relay_us_per_frame": 5.0, "nats_us_per_delivery": 2.0}


def _today(relay: float, nats: float) -> Reference:
    return Reference(relay, nats, steal_ms=12.0, taken_at=0.0)


def test_twice_as_costly_on_both_is_slower_by_two_and_warns():
    line = machine_speed.compared(_today(10.0, 4.0), THEN)
    assert line.startswith("machine today: 2.00x as costly as when its capacity was measured: slower")
    assert "its knee may not hold today" in line and "relay 10.00 against 5.00" in line and "12 ms stolen" in line


def test_the_ratio_weighs_both_references_alike():
    assert machine_speed.slowdown(_today(10.0, 2.0), THEN) == pytest.approx(math.sqrt(2))
    assert "faster" in machine_speed.compared(_today(3.5, 1.4), THEN)
    assert "as fast as when" in machine_speed.compared(_today(5.5, 2.2), THEN)


def test_a_capacity_file_without_a_reference_says_so():
    assert "has no reference to compare with" in machine_speed.compared(_today(5.0, 2.0), None)


def test_only_a_run_near_its_knee_takes_the_reference():
    said = []
    assert machine_speed.before_run(100.0, 1000.0, {"speed_reference": THEN}, said.append) is None
    assert machine_speed.before_run(100.0, None, {"speed_reference": THEN}, said.append) is None
    assert said == []
    assert machine_speed.near_knee(700.0, 1000.0) and machine_speed.near_knee(2000.0, 1000.0)


@full_system
def _reference_servers() -> set[str]:
    """nats-servers on loopback that this process started, as the reference starts them (its child;
    other tests, in other workers, run servers of their own on loopback meanwhile)."""
    found = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "nats-server -a 127.0.0.1 -p"],
                           capture_output=True, text=True)
    return set(found.stdout.split())


def test_the_reference_measures_real_work_and_leaves_nothing():
    before = _reference_servers()
    today = machine_speed.take()
    # A relay moves a 200 B frame for a few CPU-µs and nats-server delivers one for ~1-2 here; a
    # reference off by orders of magnitude measured something else (idle time, a dead process).
    assert 0.2 < today.relay_us_per_frame < 200, today
    assert 0.05 < today.nats_us_per_delivery < 100, today
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "tbspeed-" not in namespaces
    assert _reference_servers() <= before  # its own server stopped
