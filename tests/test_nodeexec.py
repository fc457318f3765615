"""`testbed exec`'s way into a node, for each backend, from a run's recorded state (pure: the states
are written here as a run writes them; the live test is tests/test_exec_live.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.emulation import nodeexec
from testbed.emulation.servers import Server

RUN = {"run_id": "ab12cd", "scenario": "uav-smoke", "backend": "mininet", "pid": 1,
       "nodes": {"cloud": 101, "swarm1": 102}, "sites": {"zone1": 201}, "elsewhere": {}}


def test_a_namespace_node_is_entered_by_its_pid_with_the_run_tag():
    assert nodeexec.argv_in(RUN, "swarm1", ["ping", "-c", "3", "10.1.0.2"]) == \
        ["env", "TESTBED_RUN=ab12cd", "mnexec", "-a", "102", "ping", "-c", "3", "10.1.0.2"]
    assert nodeexec.argv_in(RUN, "zone1", ["ip", "route"])[4] == "201"  # a site router too


def test_a_docker_host_is_its_container_and_a_site_router_stays_a_namespace():
    run = {**RUN, "backend": "containernet"}
    assert nodeexec.argv_in(run, "cloud", ["ip", "addr"]) == ["docker", "exec", "-i", "tbab12cd.cloud", "ip", "addr"]
    assert nodeexec.argv_in(run, "cloud", ["bash"], tty=True)[:4] == ["docker", "exec", "-i", "-t"]
    assert nodeexec.argv_in(run, "zone1", ["ip", "route"])[2:5] == ["mnexec", "-a", "201"]
    assert nodeexec.shell(run, "cloud") == ["bash"]


def test_a_node_on_another_server_is_reached_over_its_ssh_with_the_command_quoted_whole():
    tbs2 = Server("tbs2", "10.253.0.12", ssh_config="/run/testbed/servers/ssh_config")
    run = {**RUN, "elsewhere": {"swarm1": "tbs2"}}
    argv = nodeexec.argv_in(run, "swarm1", ["sh", "-c", "echo 'a b'; exit 7"], servers={"tbs2": tbs2})
    assert argv[:2] == ["ssh", "-q"] and "-F" in argv and argv[-2:-1] == ["root@10.253.0.12"] and "-T" in argv
    # the remote shell splits it back into the user's argv, untouched
    assert shlex.split(argv[-1]) == ["env", "TESTBED_RUN=ab12cd", "mnexec", "-a", "102", "sh", "-c", "echo 'a b'; exit 7"]
    assert "-t" in nodeexec.argv_in(run, "swarm1", ["bash"], tty=True, servers={"tbs2": tbs2})


def test_an_unknown_node_is_refused_with_the_nodes_there():
    with pytest.raises(nodeexec.NoSuchTarget, match=r"^NODE: run ab12cd has no node 'h1'; nodes: cloud, swarm1; "
                                                    r"site routers: zone1$"):
        nodeexec.argv_in(RUN, "h1", ["true"])
    with pytest.raises(nodeexec.NoSuchTarget, match="^CMD: "):
        nodeexec.argv_in(RUN, "cloud", [])
    with pytest.raises(nodeexec.NoSuchTarget, match="^NODE: run ab12cd has no network up yet"):
        nodeexec.argv_in({"run_id": "ab12cd", "pid": 1}, "cloud", ["true"])  # registered, still building


def test_a_run_is_found_by_its_id_or_its_results_folder(tmp_path):
    runs = {"ab12cd": RUN}
    assert nodeexec.find_run("ab12cd", runs) is RUN
    folder = tmp_path / "uav-smoke-ab12cd"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"run_id": "ab12cd"}))
    assert nodeexec.find_run(str(folder), runs) is RUN
    with pytest.raises(nodeexec.NoSuchTarget, match=r"^RUN: run zz99zz is not running; running: ab12cd \(uav-smoke\)$"):
        nodeexec.find_run("zz99zz", runs)
    with pytest.raises(nodeexec.NoSuchTarget, match=r"^RUN: 'nowhere' is neither a run id nor .*; running: none$"):
        nodeexec.find_run("nowhere", {})


def test_the_held_run_names_a_real_node_and_another_nodes_address():
    lines = nodeexec.example("ab12cd", {"cloud": "10.1.0.2", "swarm1": "10.1.0.7"})
    assert lines[0].startswith("testbed exec ab12cd cloud -- ping -c 3 10.1.0.7")
    assert lines[1] == "testbed shell ab12cd cloud"


def test_the_cli_refuses_before_anything_starts():
    """Exit 2, one line naming the argument: an unknown run; --hold with --interactive."""
    def testbed(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, timeout=60,
                              cwd=Path(__file__).resolve().parent.parent)

    done = testbed("exec", "/nonexistent/folder", "swarm1", "--", "true")
    assert done.returncode == 2 and done.stderr.startswith("RUN: '/nonexistent/folder' is neither a run id")
    done = testbed("run", "tests/scenarios/hold-access10.yaml", "--hold", "--interactive")
    assert done.returncode == 2 and done.stderr == "--hold: not with --interactive (the Mininet CLI already holds the network)\n"
