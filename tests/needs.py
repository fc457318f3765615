"""What a test of the whole system (network, Serf, ZooKeeper, nats-server) needs, as pytest marks:
`pytestmark = FULL_SYSTEM`, each mark skipping with the reason when this machine lacks a part."""

from __future__ import annotations

import os
import shutil

import pytest

from testbed.emulation import installed

FULL_SYSTEM = [
    pytest.mark.root, pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(not installed.mininet_importable()[0], reason="Mininet is not installed"),
    pytest.mark.skipif(not all(shutil.which(b) for b in ("serf", "nats-server", "java")),
                       reason="needs serf, nats-server and Java (ZooKeeper)"),
]


def full_system(test):
    """FULL_SYSTEM's marks on one test (in a module whose other tests need none of it)."""
    for mark in FULL_SYSTEM:
        test = mark(test)
    return test
