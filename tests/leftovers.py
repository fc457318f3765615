"""The suite leaves nothing behind: what the testbed and the tests make on this machine (processes,
network namespaces, links, mounts, containers, run state and keys under /run/testbed) is listed
when the session starts and again when it ends, after every worker has finished; whatever is new
and stays new for SETTLE_S fails the session, each item named.

Other sessions may share the machine: their processes carry another session's tag, and a run
whose harness is alive and is not ours is theirs; neither is counted. Anything else that appears
meanwhile is counted, so the check is exact only when the suite runs alone.

Registered from conftest.py; `-p no:tests.leftovers` turns it off.
"""

from __future__ import annotations

import os
import secrets
import sys
import time

import pytest

from testbed.emulation import leftovers, runstate

SETTLE_S = 10.0  # what a teardown may still be finishing when the last test returns
BEFORE = pytest.StashKey[list]()


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    os.environ[leftovers.SUITE_TAG] = secrets.token_hex(4)  # before any worker or test process starts
    config.stash[BEFORE] = leftovers.listing()


def foreign(item: leftovers.Item, tag: str, our_pid: int, live_runs: dict[str, int],
            processes: dict[int, runstate.Process]) -> bool:
    """An item held only by processes of another session: another session's tag, or a live run
    (its harness, or a process of it) whose harness is neither this process nor carries our tag."""
    def theirs(process: runstate.Process) -> bool:
        if leftovers.SUITE_TAG in process.env:
            return process.env[leftovers.SUITE_TAG] != tag
        harness = process.pid if process.pid in live_runs.values() else live_runs.get(process.run)
        if harness is None or harness == our_pid:
            return False
        return processes.get(harness) is None or processes[harness].env.get(leftovers.SUITE_TAG) != tag

    return bool(item.processes) and all(theirs(p) for p in item.processes)


def left_by_us(before: list[leftovers.Item]) -> list[leftovers.Item]:
    tag = os.environ[leftovers.SUITE_TAG]
    live = {rid: info.get("pid") for rid, info in runstate.known_runs().items() if runstate.is_live(info)}
    processes = {p.pid: p for p in runstate.processes()}
    return [item for item in leftovers.new_since(before, leftovers.listing())
            if not foreign(item, tag, os.getpid(), live, processes)]


def _end_spark_gateway() -> None:
    """A JVM the pyspark of this process started reads our pipe until it closes, so it would end
    with us: ended now, so that it is not taken for a leftover."""
    context = sys.modules.get("pyspark.context")
    gateway = getattr(getattr(context, "SparkContext", None), "_gateway", None)
    if gateway is None:
        return
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - a gateway already half gone still has its process to end
        pass
    process = getattr(gateway, "proc", None)
    if process is not None:
        process.stdin.close()
        try:
            process.wait(timeout=20)
        except Exception:  # noqa: BLE001
            process.kill()
    context.SparkContext._gateway = context.SparkContext._jvm = None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    yield  # pytest-xdist's workers are shut down in here
    if hasattr(session.config, "workerinput") or BEFORE not in session.config.stash:
        return
    _end_spark_gateway()
    before = session.config.stash[BEFORE]
    deadline = time.monotonic() + SETTLE_S
    left = left_by_us(before)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = left_by_us(before)
    if not left:
        return
    report = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} item(s) left behind by this session (made during it, still here {SETTLE_S:g} s "
             "after the last test):"] + [f"  {item.text}" for item in left]
    if report is not None:
        report.write_sep("=", "left behind", red=True, bold=True)
        for line in lines:
            report.write_line(line)
    else:
        print("\n".join(lines), file=sys.stderr)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
