"""Environment check for the Containernet backend (see docs/containernet.md).

Containernet lives in its own venv (it ships a mininet fork that would shadow
Debian's mininet), so the network part runs in a subprocess with that
interpreter: $TESTBED_CONTAINERNET_PYTHON, else /opt/cn-venv/bin/python (the `cn_python` fixture
of tests/conftest.py, which skips naming what is missing).
"""

from __future__ import annotations

import subprocess

import pytest

from testbed.emulation.docker_engine import BASE_IMAGE, allow_bridged_traffic

pytestmark = pytest.mark.containernet

# Two Docker hosts on a plain Linux bridge (no OVS: no openvswitch module),
# no controller, plain veth links (no TC: no sch_netem).
TWO_HOSTS = r"""
import sys
from mininet.net import Containernet  # first: mininet.link alone is a circular import
from mininet.link import Link
from mininet.log import setLogLevel
from mininet.nodelib import LinuxBridge

setLogLevel("warning")
image = sys.argv[1]
net = Containernet(controller=None, switch=LinuxBridge, link=Link, autoSetMacs=True)
try:
    h1 = net.addDocker("cnh1", ip="10.77.0.1/24", dimage=image)
    h2 = net.addDocker("cnh2", ip="10.77.0.2/24", dimage=image)
    s1 = net.addSwitch("cns1")
    net.addLink(h1, s1)
    net.addLink(h2, s1)
    net.start()
    print("PING-OUTPUT", h1.cmd("ping -c 2 -W 2 10.77.0.2"))
    print("LOSS=%s" % net.ping([h1, h2], timeout="2"))
finally:
    net.stop()
"""


def test_two_docker_hosts_ping_over_linux_bridge(cn_python: str) -> None:
    # dockerd's FORWARD policy DROP also hits bridged frames (br_netfilter).
    allow_bridged_traffic()
    subprocess.run(["docker", "rm", "-f", "mn.cnh1", "mn.cnh2"], capture_output=True,
                   check=False)  # leftovers of an interrupted run
    res = subprocess.run([cn_python, "-c", TWO_HOSTS, BASE_IMAGE], capture_output=True,
                         text=True, timeout=300, check=False)
    output = res.stdout + res.stderr
    assert res.returncode == 0, output
    assert "LOSS=0.0" in output, output
