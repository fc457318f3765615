"""What a test of the whole system (network, Serf, ZooKeeper, nats-server) needs, as pytest marks:
`pytestmark = FULL_SYSTEM`, each mark skipping with the reason when this machine lacks a part."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from testbed import natsserver
from testbed.emulation import installed

# the nats-server a run's brokers run by default (testbed.natsserver), for tests that start one themselves
NATS_SERVER = natsserver.binary(natsserver.DEFAULT, sys.executable)
needs_nats_server = pytest.mark.skipif(not os.access(NATS_SERVER, os.X_OK),
                                       reason=f"{NATS_SERVER} is not installed (make setup: requirements.txt)")

FULL_SYSTEM = [
    pytest.mark.root, pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(not installed.mininet_importable()[0], reason="Mininet is not installed"),
    pytest.mark.skipif(not all(shutil.which(b) for b in ("serf", "java")), reason="needs serf and Java (ZooKeeper)"),
    needs_nats_server,
]


def full_system(test):
    """FULL_SYSTEM's marks on one test (in a module whose other tests need none of it)."""
    for mark in FULL_SYSTEM:
        test = mark(test)
    return test


REQUIRE_CONTAINERNET_ENV = "TESTBED_REQUIRE_CONTAINERNET"


def containernet_missing(reason: str) -> None:
    """Skip a Containernet test, naming what is missing; fail instead where Containernet is required
    ($TESTBED_REQUIRE_CONTAINERNET=1: CI installed it, so a skip would hide a broken install)."""
    if os.environ.get(REQUIRE_CONTAINERNET_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} (and ${REQUIRE_CONTAINERNET_ENV} is set: Containernet must be usable here)",
                    pytrace=False)
    pytest.skip(reason)
