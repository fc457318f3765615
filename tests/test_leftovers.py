"""The leftover listing's pure parts (what counts as new, whose it is, how /proc and ip are read),
and the suite's end check failing a session that leaves a process behind, naming it: proof that
the check can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.emulation import leftovers, remote, runstate, servers
from tests.leftovers import foreign

ROOT = Path(__file__).resolve().parents[1]
INIT = 4026531833


def _process(pid=100, started=5, title="sleep 600", netns=INIT, **env) -> runstate.Process:
    return runstate.Process(pid, started, title, netns, env)


def _item(process: runstate.Process) -> leftovers.Item:
    return leftovers._process_item(process, {INIT})


def test_only_what_is_new_counts_and_a_reused_pid_is_new():
    before = [_item(_process(100, 5, "serf agent")), leftovers.Item("netns", "netns [7]", "network namespace [7]")]
    after = before + [_item(_process(100, 9, "serf agent")), leftovers.Item("netns", "netns [8]", "network namespace [8]"),
                      leftovers.Item("file", "file /run/testbed/ab12cd.json", "file /run/testbed/ab12cd.json")]
    assert [i.key for i in leftovers.new_since(before, after)] == ["process 100@9", "netns [8]",
                                                                    "file /run/testbed/ab12cd.json"]


def test_a_new_process_counts_only_when_it_is_the_testbeds():
    """Someone's editor starting meanwhile is not a leftover; what the testbed starts, a test
    session's child and anything in another network namespace are."""
    ours = [_process(1, title="/usr/bin/nats-server -a 10.1.0.2"), _process(2, title="python -m testbed.cli run x"),
            _process(3, title="java -cp /x org.apache.zookeeper.server.quorum.QuorumPeerMain z.cfg"),
            _process(4, title="sshd: root@notty", netns=99), _process(5, TESTBED_RUN="ab12cd"),
            _process(6, TESTBED_SUITE="f00d"), _process(7, title="ssh: /run/testbed/ssh-ab12cd/10.253.0.11 [mux]"),
            _process(8, title="python3 -m pyspark.daemon")]
    theirs = [_process(20, title="vim notes"), _process(21, title="sshd: root@pts/0"),
              _process(22, title="/usr/bin/serfdom --x")]
    new = leftovers.new_since([], [_item(p) for p in ours + theirs])
    assert sorted(i.processes[0].pid for i in new) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_what_another_session_holds_is_not_ours():
    """Another session's tag, or a live run whose harness carries another tag (or none), is
    theirs; our tag, a run whose harness is this process, and a process with no tag are ours."""
    harnesses = {50: _process(50, TESTBED_SUITE="them"), 51: _process(51, TESTBED_SUITE="us")}
    live = {"aaaaaa": 50, "bbbbbb": 51, "cccccc": 7, "dddddd": 52}

    def held(**env):
        return _item(_process(**env))

    assert foreign(held(TESTBED_SUITE="them"), "us", 7, live, harnesses)
    assert not foreign(held(TESTBED_SUITE="us"), "us", 7, live, harnesses)
    assert foreign(held(TESTBED_RUN="aaaaaa"), "us", 7, live, harnesses)
    assert foreign(held(TESTBED_RUN="dddddd"), "us", 7, live, harnesses)  # its harness is not a test's
    assert not foreign(held(TESTBED_RUN="bbbbbb"), "us", 7, live, harnesses)
    assert not foreign(held(TESTBED_RUN="cccccc"), "us", 7, live, harnesses)
    assert not foreign(held(TESTBED_RUN="eeeeee"), "us", 7, live, harnesses)  # a dead run's
    assert not foreign(held(title="sshd: root@notty", netns=99), "us", 7, live, harnesses)
    assert not foreign(leftovers.Item("link", "link tbmgmt", "link tbmgmt"), "us", 7, live, harnesses)
    someone = _process(52, title="python -m testbed.cli run x.yaml")  # a run started by hand meanwhile
    assert foreign(_item(someone), "us", 7, live, {**harnesses, 52: someone})
    assert foreign(leftovers.Item("file", "file dddddd.json", "file", processes=(someone,)), "us", 7, live,
                   {**harnesses, 52: someone})


def test_links_are_read_from_ip_json():
    text = json.dumps([{"ifname": "lo"}, {"ifname": "eth0"}, {"ifname": "tbmgmt", "linkinfo": {"info_kind": "bridge"}},
                       {"ifname": "tbmgmt1", "master": "tbmgmt", "linkinfo": {"info_kind": "veth"}}])
    assert leftovers.parse_links(text) == [("lo", "", ""), ("eth0", "", ""), ("tbmgmt", "bridge", ""),
                                           ("tbmgmt1", "veth", "tbmgmt")]


def test_mounts_are_read_from_mountinfo():
    info = ("36 25 0:4 net:[4026534091] /run/netns/tbs1 rw shared:5 - nsfs nsfs rw\n"
            "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
            "40 22 0:50 / /run/my\\040dir rw - tmpfs tmpfs rw\n")
    assert leftovers.parse_mounts(info) == [("/run/netns/tbs1", "nsfs"), ("/", "ext4"), ("/run/my dir", "tmpfs")]


def test_a_namespace_servers_connection_is_told_by_its_socket_on_port_22():
    table = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
             "   0: 0B00FD0A:0016 0100FD0A:A1D8 01 00000000:00000000 02:000A8317 00000000     0        0 262407 2\n"
             "   1: 0100007F:1CD9 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n")
    assert servers.local_addresses(table) == {("10.253.0.11", 22), ("127.0.0.1", 7385)}


def test_an_ssh_control_connection_is_told_by_its_title():
    where = Path("/run/testbed/ssh-ab12cd")
    assert servers.master_host("ssh: /run/testbed/ssh-ab12cd/10.253.0.11 [mux]", where) == "10.253.0.11"
    assert servers.master_host("ssh: /run/testbed/ssh-ab12cd/10.253.0.11 [mux]", where.parent) == "10.253.0.11"
    assert servers.master_host("ssh: /run/testbed/ssh-zz99zz/10.253.0.11 [mux]", where) is None
    assert servers.master_host("ssh -O exit root@10.253.0.11", where) is None


def test_remote_pid_files_carry_their_run(tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "PID_FILE", f"{tmp_path}/testbed-{{run}}-{{token}}.pid")
    for name in ("testbed-ab12cd-0f0f.pid", "testbed-zz99zz-1e1e.pid", "testbed-0f0f0f0f.pid"):
        (tmp_path / name).touch()
    assert remote.pid_files() == {tmp_path / "testbed-ab12cd-0f0f.pid": "ab12cd",
                                  tmp_path / "testbed-zz99zz-1e1e.pid": "zz99zz"}
    assert list(remote.pid_files("ab12cd")) == [tmp_path / "testbed-ab12cd-0f0f.pid"]
    assert leftovers.run_of(tmp_path / "testbed-ab12cd-0f0f.pid") == "ab12cd"


def test_run_state_belongs_to_its_run(tmp_path, monkeypatch):
    monkeypatch.setattr(runstate, "STATE_DIR", tmp_path)
    assert leftovers.run_of(tmp_path / "ab12cd.json") == "ab12cd"
    assert leftovers.run_of(tmp_path / "ssh-ab12cd" / "10.253.0.11") == "ab12cd"
    assert leftovers.run_of(tmp_path / "servers.json") is None
    assert leftovers.run_of(tmp_path / "servers" / "id_ed25519") is None


def test_the_namespace_servers_registry_is_not_a_run(tmp_path, monkeypatch):
    monkeypatch.setattr(runstate, "STATE_DIR", tmp_path)
    (tmp_path / "servers.json").write_text("[]")
    (tmp_path / "ab12cd.json").write_text(json.dumps({"pid": 1}))
    assert list(runstate.known_runs()) == ["ab12cd"]


def _session(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """A pytest session of its own with the check (settling for 1 s), running one test."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        pytest_plugins = ["tests.leftovers"]

        def pytest_configure(config):
            config.pluginmanager.get_plugin("tests.leftovers").SETTLE_S = 1.0
    """))
    (tmp_path / "test_one.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.slow
def test_a_session_that_leaves_a_process_fails_and_names_it(tmp_path):
    leaky = _session(tmp_path, """
        import subprocess
        def test_leaks():
            left = subprocess.Popen(["sleep", "31.5"], start_new_session=True)
            open("left.pid", "w").write(str(left.pid))
    """)
    pid = int((tmp_path / "left.pid").read_text())
    try:
        assert leaky.returncode == 1, leaky.stdout[-2000:]
        assert "1 passed" in leaky.stdout and "left behind" in leaky.stdout
        assert f"process {pid} (sleep 31.5" in leaky.stdout, leaky.stdout[-2000:]
    finally:
        runstate.end([pid])
