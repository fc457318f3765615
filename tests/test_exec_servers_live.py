"""`testbed exec` into a held run spread over two isolated namespace-servers, reached as other
machines are: a node there is entered over the server's ssh (its pid names a process of that server's
PID namespace, not of ours); the exit status crosses ssh; SIGINT leaves nothing on either side."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.emulation import runstate
from testbed.emulation import servers as servers_mod
from tests.held import HeldRun, texec
from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "tests" / "scenarios" / "hold-access10.yaml"
pytestmark = FULL_SYSTEM + [pytest.mark.long, pytest.mark.skipif(not shutil.which("sshd"), reason="needs sshd (openssh-server)")]


def _testbed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    if servers_mod.namespace_servers():
        pytest.skip("namespace-servers are already up (someone else's): not touching them")
    made = _testbed("servers", "up", "2", "--isolated")
    assert made.returncode == 0, made.stdout + made.stderr
    run = None
    try:
        run = HeldRun(SCENARIO, tmp_path_factory.mktemp("held"), sys.executable, "mininet", "--servers", "tbs1,tbs2")
        run.wait_for(r"\] testbed exec \S+ \S+ -- ping -c 3 ", 400)
        run.state = runstate.known_runs()[run.run_id]
        yield run
    finally:
        if run is not None:
            run.end()
        _testbed("servers", "down")


def test_nodes_on_other_servers_are_reached_over_ssh(held):
    elsewhere = held.state["elsewhere"]
    assert set(elsewhere.values()) == {"tbs1", "tbs2"}, elsewhere
    one, other = (next(n for n in held.state["nodes"] if elsewhere.get(n) == s) for s in ("tbs1", "tbs2"))
    done = texec(held.run_id, one, "ping", "-n", "-c", "3", held.state["ips"][other])
    assert done.returncode == 0 and "3 received" in done.stdout, done.stdout + done.stderr
    inside = texec(held.run_id, other, "sh", "-c", "echo $TESTBED_RUN; ip -o -4 addr show eth0")
    assert inside.stdout.split()[0] == held.run_id and f" {held.state['ips'][other]}/" in inside.stdout


def test_the_exit_status_crosses_ssh(held):
    node = next(iter(held.state["elsewhere"]))
    assert texec(held.run_id, node, "false").returncode == 1
    assert texec(held.run_id, node, "sh", "-c", "exit 7").returncode == 7


def test_sigint_ends_the_hold_and_leaves_nothing_on_the_servers(held):
    time.sleep(1.0)
    held.end()
    assert held.process.returncode == 0, "".join(held.lines[-30:])
    assert held.run_id not in runstate.known_runs() and held.run_id not in runstate.tagged_processes().values()
    here = _testbed("clean", "--check")
    assert held.run_id not in here.stdout, here.stdout
    for server in ("tbs1", "tbs2"):  # each server's own listing: its processes, namespaces and files
        there = subprocess.run(servers_mod.parse(server, least=1)[0].ssh(None) + [
            f"cd {ROOT} && {sys.executable} -m testbed.cli clean --check"], capture_output=True, text=True, timeout=120)
        assert "item(s) left" in there.stdout and held.run_id not in there.stdout, there.stdout + there.stderr
