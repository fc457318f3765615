"""The claims record: which claims of the live tests were judged, and which could not be, and why.

A live test judges claims about the system under test (a downtime, a latency median, a placement).
A claim the run cannot judge is never passed in silence. The policy:

- the fixture re-runs a run the harness did not hold, once, where practical (tests.live.run_held);
- a claim still not judgeable FAILS with the guard's reasons (`unjudged(..., attributed_to_machine=False)`),
  unless the stall probe or the hypervisor's steal accounts for the seconds that made it
  unjudgeable: then it is skipped with that figure (`attributed_to_machine=True`);
- a claim the run did not exercise at all (a killed broker that held no topic) is recorded as such
  and the test goes on with the claims it can judge (`not_exercised`).

Every outcome goes to `claims.json` (`$CLAIMS_JSON`, else `.pytest-claims.json` in the rootdir), with
the judged claims counted too (`judged`), and every skipped test with its reason; `python -m
tests.claims_report` prints the table (.ci/run does after the tests).

Across pytest-xdist workers: a record is kept in the running test's `user_properties`, which xdist
sends to the controller with each report, so only the controller writes the file, once, at the end
of the session: no part files, no two writers.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

ENV = "CLAIMS_JSON"
DEFAULT_NAME = ".pytest-claims.json"
KEY = "claim"  # the user_properties name of a record
#: The marker of a pure test that drives these helpers with fabricated runs: what it makes them say is
#: not a claim about the system, so it stays out of the record (and out of CI's table).
FABRICATED = "fabricated_claims"

_current: pytest.Item | None = None  # the test whose phase runs now (fixtures included)
_records: list[dict] = []  # the controller's, from every report


def _record(claim: str, status: str, reason: str = "", attributed_to_machine: bool = False) -> dict:
    record = {"claim": claim, "status": status, "reason": reason, "attributed_to_machine": attributed_to_machine}
    if _current is not None and _current.get_closest_marker(FABRICATED) is None:
        _current.user_properties.append((KEY, record))
    return record


def judged(claim: str) -> None:
    """Count `claim` as judged (its assertions ran on this run's evidence)."""
    _record(claim, "judged")


@contextmanager
def judge(claim: str):
    """The assertions of `claim` inside the block: counted as judged when they ran to their end or
    one of them failed (a claim found false was judged)."""
    try:
        yield
    except AssertionError:
        judged(claim)
        raise
    judged(claim)


def unjudged(claim: str, reason: str, attributed_to_machine: bool) -> NoReturn:
    """`claim` could not be judged on this run: skipped (recorded) when the hypervisor accounts for
    it (`reason` then carries its figure), failed with `reason` otherwise."""
    _record(claim, "skipped" if attributed_to_machine else "failed", reason, attributed_to_machine)
    if attributed_to_machine:
        pytest.skip(f"{claim}: not judged, the machine's doing: {reason}")
    pytest.fail(f"{claim}: could not be judged, and the machine does not explain it: {reason}")


def not_exercised(claim: str, reason: str) -> None:
    """`claim` was not exercised by this run (recorded); the test goes on with its other claims."""
    _record(claim, "not exercised", reason)


# -- the plugin (registered in tests/conftest.py) ---------------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    _current = item
    try:
        yield
    finally:
        _current = None


def pytest_runtest_logreport(report):
    """On the controller (or the only process): each test's records once (its teardown report
    carries all of them), each live test (marker `root`) that passed, and a skipped test's reason."""
    records = [value for name, value in report.user_properties if name == KEY]
    if report.when == "teardown":
        _records.extend({"test": report.nodeid, **r} for r in records)
    if report.when == "call" and report.passed and "root" in report.keywords:  # the denominator
        _records.append({"test": report.nodeid, "claim": "(the whole test)", "status": "live test passed",
                         "reason": "", "attributed_to_machine": False})
    if report.skipped and not any(r["status"] == "skipped" for r in records):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _records.append({"test": report.nodeid, "claim": "(the whole test)", "status": "test skipped",
                         "reason": reason.removeprefix("Skipped: "), "attributed_to_machine": False})


def path(rootdir: Path) -> Path:
    return Path(os.environ.get(ENV) or rootdir / DEFAULT_NAME)


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):  # a worker: its reports went to the controller
        return
    target = path(Path(session.config.rootpath))
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps({"claims": _records}, indent=1) + "\n")
    tmp.replace(target)
