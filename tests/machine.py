"""Tests side by side, except those that need the machine to themselves.

`make test` runs two workers. A test shares the machine with the other worker's test; a test
marked `quiet` judges timing at sub-millisecond precision (a probe's RTT bounds, the delay line's
accuracy, a path's end-to-end latency), which a second live network or a Spark job on two cores
would move by milliseconds, so it waits until the other worker's test ends and holds the next one
off while it runs. Two file locks make it a readers-writer lock that lets a waiting
quiet test in first (a turnstile: a live test passes through it before taking its shared lock).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

LOCKS_ENV = "TESTBED_TEST_LOCKS"


def pytest_configure(config):
    config.addinivalue_line("markers", "quiet: judges timing finely: runs with no other test beside it")
    if not hasattr(config, "workerinput"):  # the controller, before any worker starts: they inherit it
        os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="testbed-test-locks-")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.pop(LOCKS_ENV, ""), ignore_errors=True)


@contextmanager
def _locked(name: str, mode: int):
    with open(Path(os.environ[LOCKS_ENV]) / name, "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def machine(quiet: bool):
    """Held for a test's phase: exclusive when `quiet`, shared otherwise."""
    if quiet:
        with _locked("turnstile", fcntl.LOCK_EX), _locked("machine", fcntl.LOCK_EX):
            yield
        return
    with _locked("turnstile", fcntl.LOCK_EX):
        pass
    with _locked("machine", fcntl.LOCK_SH):
        yield


def _phase(item, exclusive: bool):
    if LOCKS_ENV not in os.environ:
        return _nothing()
    return machine(quiet=exclusive)


@contextmanager
def _nothing():
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Fixtures (a module's shared live run among them) run beside the other worker's tests."""
    with _phase(item, exclusive=False):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """The test's own body: alone on the machine when it is `quiet`."""
    with _phase(item, exclusive=item.get_closest_marker("quiet") is not None):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    with _phase(item, exclusive=False):
        yield
