"""Which tests may run side by side on the two workers of `make test`.

Measured: two live networks at once do not fit on this 2-core VM (an MMOG smoke beside another
run left the CPU 0 % idle for all its 34 s; failover runs had no CPU to spare in their fault
windows), and a test that judges timing finely (marker `quiet`: a probe's RTT bounds, the delay
line's accuracy, a path's end-to-end latency) is moved by milliseconds by anything beside it. So
a live test (marker `root`) or a quiet one has the machine to itself, fixtures included; tests of
pure logic run two at a time. Two file locks make it a readers-writer lock that lets a waiting
live test in first (a turnstile: a pure test passes through it before taking its shared lock).
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
    """Held for a test's phase: exclusive for a live or quiet test, shared otherwise."""
    if quiet:
        with _locked("turnstile", fcntl.LOCK_EX), _locked("machine", fcntl.LOCK_EX):
            yield
        return
    with _locked("turnstile", fcntl.LOCK_EX):
        pass
    with _locked("machine", fcntl.LOCK_SH):
        yield


def _phase(item):
    if LOCKS_ENV not in os.environ:
        return _nothing()
    return machine(quiet=bool(item.get_closest_marker("root") or item.get_closest_marker("quiet")))


@contextmanager
def _nothing():
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Fixtures too: a module's shared live run is set up in its first test's setup."""
    with _phase(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _phase(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    with _phase(item):
        yield
