"""Namespace-servers leave nothing behind: a connection still open when `servers down` runs is
ended with them, and the process of a connection that outlived a server's name (its namespace
held by sshd alone, unreachable once the management link is gone) is found and ended by
`testbed clean` and by `servers down`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.emulation import runstate
from testbed.emulation import servers as servers_mod

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
              pytest.mark.skipif(not shutil.which("sshd"), reason="needs sshd (openssh-server)")]

ROOT = Path(__file__).resolve().parents[1]


def _testbed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.fixture
def two_servers():
    if servers_mod.namespace_servers():
        pytest.skip("namespace-servers are already up (someone else's): not touching them")
    made = _testbed("servers", "up", "2")
    assert made.returncode == 0, made.stdout + made.stderr
    yield servers_mod.namespace_servers()
    _testbed("servers", "down")


def _connect(server: servers_mod.Server, control_dir: Path | None) -> subprocess.Popen:
    """A connection that stays open: a command that waits, over a control connection or not."""
    return subprocess.Popen(server.ssh(control_dir) + ["sleep 300"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _servers_sshd() -> list[runstate.Process]:
    return [p for p in runstate.processes() if servers_mod.is_server_sshd(p)]


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_servers_down_ends_the_connections_open_to_them(two_servers, tmp_path):
    control_dir = runstate.STATE_DIR / f"ssh-{runstate.new_run_id()}"
    control_dir.mkdir(parents=True)
    clients = [_connect(two_servers["tbs1"], control_dir), _connect(two_servers["tbs2"], None)]
    try:
        _until(lambda: len(_servers_sshd()) >= 4 and servers_mod.control_masters(control_dir))  # listeners, connections
        down = _testbed("servers", "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert "ssh connection to 10.253.0.11" in down.stdout and "namespace-server tbs2: ended" in down.stdout
        assert _servers_sshd() == [] and servers_mod.control_masters(control_dir) == []
        for client in clients:
            assert client.wait(timeout=10) != 0  # its connection was ended, not left waiting
    finally:
        for client in clients:
            client.kill()
        shutil.rmtree(control_dir, ignore_errors=True)


def test_a_connection_that_outlived_its_servers_name_is_ended_by_clean(two_servers):
    """The way `servers down` used to go: the listener killed, the name and the link deleted, a
    connection's sshd left holding an unnamed namespace."""
    client = _connect(two_servers["tbs1"], None)
    try:
        _until(lambda: len(servers_mod.server_processes(orphans_only=False).get("tbs1", [])) >= 2)
        runstate.end([int((servers_mod.NS_DIR / "sshd-tbs1.pid").read_text())])
        subprocess.run(["ip", "netns", "del", "tbs1"], check=True)
        subprocess.run(["ip", "link", "del", f"{servers_mod.MGMT_BRIDGE}1"], check=True)
        orphans = servers_mod.server_processes(orphans_only=True)
        assert len(orphans) == 1 and all(name.startswith("netns [") for name in orphans), orphans
        clean = _testbed("clean", runstate.new_run_id())  # a run that never was: only the orphan is its to end
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "orphaned namespace-server session, netns [" in clean.stdout and "sshd: " in clean.stdout
        assert servers_mod.server_processes(orphans_only=True) == {}
        assert "tbs2" in servers_mod.server_processes(orphans_only=False)  # a server that is up is left alone
    finally:
        client.kill()
