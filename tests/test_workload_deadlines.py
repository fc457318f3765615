"""The clients of a run attach and stop under one deadline for all (`workload_role`): on a machine far
past its capacity, 64 clients that never attached or never stopped held the run 120 s or 15 s each,
one after another. Local child processes stand in for the clients (no root, no network)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from testbed.procs import stop_group
from testbed.systems.pubsub import workload_role
from testbed.systems.pubsub.workload_role import PubSubWorkload

SILENT = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); {say}time.sleep(60)"


def _workload(count: int, say: str = "") -> PubSubWorkload:
    """`count` local clients that ignore SIGTERM, each printing `say` once it does."""
    role = object.__new__(PubSubWorkload)  # only what attach and stop use
    code = SILENT.format(say=f"print({say!r}, flush=True); " if say else "")
    role.processes = {f"node{i}": subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
                      for i in range(count)}
    role.summaries, role.hosted, role.host = [], [], None  # a process per node (no client host)
    return role


def test_clients_that_never_attach_fail_the_run_after_one_deadline_for_all(monkeypatch):
    monkeypatch.setattr(workload_role, "ATTACH_S", 1.0)
    role = _workload(4)
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="workload in node0 did not attach"):
            role._wait_attached()
    finally:
        stop_group(role.processes.values(), timeout=1)
    assert time.monotonic() - started < 30  # one deadline; a wait per client would be 4 x 120 s


def test_clients_that_do_not_stop_are_killed_after_one_deadline_for_all(monkeypatch):
    monkeypatch.setattr(workload_role, "STOP_S", 1.0)
    role = _workload(4, say="deaf")
    processes = list(role.processes.values())
    assert [p.stdout.readline() for p in processes] == ["deaf\n"] * 4  # they ignore SIGTERM from here on
    started = time.monotonic()
    role.stop()
    assert time.monotonic() - started < 30  # a wait per client would be 4 x 15 s
    assert [p.returncode for p in processes] == [-9] * 4 and role.processes == {} and role.summaries == []
