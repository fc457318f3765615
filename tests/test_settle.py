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
