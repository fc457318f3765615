"""`testbed exec` into a held run on Docker hosts: a node is its container (`docker exec`), a site
router a namespace as on Mininet; the exit status is the command's; SIGINT leaves no container.

The run starts under the Containernet interpreter (conftest's `cn_python`); `testbed exec` runs from
this venv, as a user types it: it needs no Containernet, only the Docker CLI.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from testbed.emulation import cleanup, installed, runstate
from testbed.emulation.backends.containernet import image_problems
from tests.held import HeldRun, texec
from tests.needs import containernet_missing

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "tests" / "scenarios" / "hold-access10.yaml"
pytestmark = pytest.mark.containernet


@pytest.fixture(scope="module")
def held(cn_python, tmp_path_factory):
    problems = image_problems({"cloud", "broker", "nc-proxy", "client"})
    if problems:
        containernet_missing("; ".join(problems))
    if not installed.find_containernet().usable:
        containernet_missing(installed.find_containernet().describe())
    run = HeldRun(SCENARIO, tmp_path_factory.mktemp("held"), cn_python, "containernet")
    try:
        run.wait_for(r"\] testbed exec \S+ \S+ -- ping -c 3 ", 400)
        run.state = runstate.known_runs()[run.run_id]
        yield run
    finally:
        run.end()


def test_a_docker_host_answers_ping_from_its_container(held):
    assert held.state["backend"] == "containernet"
    done = texec(held.run_id, "swarm1", "ping", "-n", "-c", "3", held.state["ips"]["bzone1"])
    assert done.returncode == 0 and "3 received" in done.stdout, done.stdout + done.stderr
    hostname = texec(held.run_id, "swarm1", "cat", "/etc/hostname")  # inside the container, not this machine
    assert hostname.returncode == 0 and hostname.stdout.strip() != Path("/etc/hostname").read_text().strip()


def test_the_exit_status_is_the_commands_in_a_container_and_a_site_router(held):
    assert texec(held.run_id, "swarm1", "false").returncode == 1
    assert texec(held.run_id, "zone1", "sh", "-c", "ip route | grep -q 10.1.0; exit 7").returncode == 7


def test_sigint_ends_the_hold_and_leaves_no_container(held):
    time.sleep(1.0)
    held.end()
    assert held.process.returncode == 0, "".join(held.lines[-30:])
    assert json.loads((held.out / "run.json").read_text())["held_s"] > 0
    assert not cleanup.docker_containers(held.run_id)
    assert held.run_id not in runstate.known_runs() and held.run_id not in runstate.tagged_processes().values()
    assert texec(held.run_id, "swarm1", "true").returncode == 2  # gone: refused, not hanging
