"""Runs over servers, their pure parts: naming servers, placing sites, the scenario's field."""

from __future__ import annotations

import os
import shutil

import pytest

from testbed.emulation import servers as servers_mod
from testbed.emulation.network import EmulationError, place
from testbed.emulation.servers import Server
from testbed.scenario.loader import ScenarioError, parse_text
from testbed.topology import build


def _uav():
    from testbed.scenario.loader import load

    return build(load("scenarios/uav-smoke.yaml"))


def test_servers_are_user_at_host_and_at_least_two(monkeypatch):
    monkeypatch.setattr(servers_mod, "namespace_servers", lambda: {})
    one, two = servers_mod.parse("alice@127.0.0.1, 127.0.0.2")
    assert (one.user, one.host, two.user, two.host) == ("alice", "127.0.0.1", "root", "127.0.0.2")
    assert not one.on_this_machine  # a machine of its own unless it is a namespace-server
    for bad, said in [("127.0.0.1", "two servers or more"), ("127.0.0.1,127.0.0.1", "named twice"),
                      ("127.0.0.1,a;rm -rf /", r"is not \[user@\]host"), ("127.0.0.1,tbs9", "servers up 2")]:
        with pytest.raises(ValueError, match=said):
            servers_mod.parse(bad)


def test_namespace_servers_are_found_by_name_with_their_ssh_config(monkeypatch):
    made = {"tbs1": Server("tbs1", "10.253.0.11", "root", "/run/x/ssh_config", True),
            "tbs2": Server("tbs2", "10.253.0.12", "root", "/run/x/ssh_config", True)}
    monkeypatch.setattr(servers_mod, "namespace_servers", lambda: made)
    assert servers_mod.parse("tbs2,tbs1") == [made["tbs2"], made["tbs1"]]
    ssh = made["tbs1"].ssh(servers_mod.Path("/run/ctl"))
    assert ssh[-1] == "root@10.253.0.11" and "-F" in ssh and "ControlPath=/run/ctl/%h" in ssh


def test_whole_sites_go_to_the_least_loaded_server():
    """Sites with most nodes first, each onto the server holding fewest nodes: every site's nodes
    stay with it, and no server is left empty."""
    topology = _uav()
    servers = [Server(f"s{i}", f"10.0.0.{i}") for i in (1, 2, 3)]
    placement = place(topology, servers)
    assert set(placement) == set(topology.sites) and {s.name for s in placement.values()} == {"s1", "s2", "s3"}
    load = {s.name: 0 for s in servers}
    for site, server in placement.items():
        load[server.name] += 1 + sum(n.site == site for n in topology.nodes.values())
    assert max(load.values()) - min(load.values()) <= max(
        1 + sum(n.site == site for n in topology.nodes.values()) for site in topology.sites)
    with pytest.raises(EmulationError, match="would hold no site"):
        place(topology, [Server(f"s{i}", f"10.0.0.{i}") for i in range(1, len(topology.sites) + 2)])


def test_the_scenario_names_its_servers_and_a_bad_one_is_refused_with_its_line():
    base = open("scenarios/uav-smoke.yaml").read()
    scenario = parse_text(base + "\nemulation:\n  servers: [tbs1, root@vm2.lab]\n", "x.yaml")
    assert scenario.emulation.servers == ["tbs1", "root@vm2.lab"]
    with pytest.raises(ScenarioError, match=r"x.yaml:\d+.*emulation.servers"):
        parse_text(base + "\nemulation:\n  servers: [tbs1, 'vm2; reboot']\n", "x.yaml")


def test_servers_check_says_each_failure_with_what_to_fix(monkeypatch):
    """server_check's decisions on what two machines answer (the ssh commands themselves are
    exercised on namespace-servers in tests/test_servers_live.py)."""
    import json

    from testbed.emulation import server_check

    doctor = {"checks": [{"name": n, "ok": n != "serf", "detail": "serf not found" if n == "serf" else "ok"}
                         for n in (*server_check.SERVER_NEEDS, "nats-server (pypi, default)", "nats-server (debian)",
                                   "Open vSwitch")]}
    answers = {  # (host, command start) -> output, or an exception
        ("10.0.0.1", "id -u"): "0\n", ("10.0.0.2", "id -u"): "1000\n",
        ("10.0.0.2", "sudo -n true"): servers_mod.ServerError("sudo: a password is required"),
        ("10.0.0.1", "git -C"): "abc123\n", ("10.0.0.2", "git -C"): "def456-dirty\n",
        ("10.0.0.1", "ip -o route"): "10.0.0.2 dev eth0 src 10.0.0.1", ("10.0.0.2", "ip -o route"): "10.0.0.1 dev eth1",
        ("10.0.0.1", "ip -o link"): "2: eth0: <UP> mtu 9000 qdisc", ("10.0.0.2", "ip -o link"): "3: eth1: <UP> mtu 1500 q",
    }

    def run(server, command, _control, timeout=30.0):
        if command.startswith("cd "):
            return json.dumps(doctor)
        for (host, start), out in answers.items():
            if host == server.host and command.startswith(start):
                if isinstance(out, Exception):
                    raise out
                return out
        return ""

    monkeypatch.setattr(server_check, "run", run)
    monkeypatch.setattr(server_check, "project_version", lambda _p: "abc123")
    monkeypatch.setattr(server_check, "clock_offset", lambda s, *_a: (0.0001 if s.name == "a" else 0.0035, 0.0002))
    found = server_check.survey([Server("a", "10.0.0.1"), Server("b", "10.0.0.2", "admin")], None,
                                servers_mod.Path("/opt/testbed"), "/opt/testbed/.venv/bin/python")
    failed = {(f.server, f.check): f.detail for f in found if not f.ok}
    assert set(failed) == {("a", "tools"), ("b", "root"), ("b", "version"), ("b", "tools"), ("b", "MTU to a"),
                           ("b", "clock")}
    assert "no passwordless sudo" in failed[("b", "root")]
    assert failed[("b", "version")] == "def456-dirty there, abc123 here: check out the same commit on both"
    assert failed[("a", "tools")] == "serf (serf not found)"  # the debian nats-server and OVS are not needed
    assert "MTU 1500; VXLAN needs 1550" in failed[("b", "MTU to a")]
    assert "+3.50 ms" in failed[("b", "clock")] and "chrony" in failed[("b", "clock")]
    assert server_check.problems(found)[0].startswith("server a: tools: serf")


def test_a_node_entered_through_this_kernel_fails_loudly_in_a_run_over_other_machines():
    """A run over other machines forbids the local shortcuts (a pid a server gave names another
    process here, or none): entering a node's namespace or signalling its processes from here raises."""
    from testbed.emulation import netns

    netns.forbid_local("servers tbs1 are other machines")
    try:
        with pytest.raises(netns.LocalShortcut, match="tbs1 are other machines"):
            netns.connect_in(1, ("127.0.0.1", 1))
        with pytest.raises(netns.LocalShortcut):
            netns.signal_processes(1, 0)
    finally:
        netns.forbid_local(None)
    assert isinstance(netns.pids_in(os.getpid()), list)  # allowed again


def test_gathering_takes_what_only_a_server_has_appends_its_side_of_a_log_once_and_keeps_ours(tmp_path):
    from testbed.emulation.runfiles import merge

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for directory in (ours / "logs", theirs / "logs", theirs / "traces"):
        directory.mkdir(parents=True)
    (ours / "plan.json").write_text("{}")  # shipped: the same on both
    (theirs / "plan.json").write_text("{}")
    (ours / "logs" / "nats-b1.log").write_text("stderr here\n")  # a process's stderr here, its own log there
    (theirs / "logs" / "nats-b1.log").write_text("its log there\n")
    (ours / "logs" / "empty.log").write_text("")
    (theirs / "logs" / "empty.log").write_text("only there\n")
    (theirs / "traces" / "t.s1.jsonl").write_text('{"a": 1}\n')
    again = tmp_path / "again"
    shutil.copytree(theirs, again)
    merge(theirs, ours)
    merge(again, ours)  # `testbed gather` a second time changes nothing
    assert (ours / "traces" / "t.s1.jsonl").read_text() == '{"a": 1}\n'
    assert (ours / "logs" / "nats-b1.log").read_text() == "stderr here\nits log there\n"
    assert (ours / "logs" / "empty.log").read_text() == "only there\n"
    assert (ours / "plan.json").read_text() == "{}"


def test_gathering_after_a_partial_copy_ends_with_each_row_once(tmp_path):
    """A gather while the nodes still wrote (or cut short) left a prefix of their files here, ending
    mid-row; gathering again completes them to exactly what the server holds, and again changes
    nothing. A log both wrote to gets the rest of theirs after ours, once."""
    from testbed.emulation.runfiles import merge

    rows = "".join(f'{{"seq": {k}, "receive_time": "{1800000000 + k / 10:.6f}"}}\n' for k in range(50))
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for directory in (ours / "traces", theirs / "traces", ours / "logs", theirs / "logs"):
        directory.mkdir(parents=True)
    (theirs / "traces" / "t.s1.jsonl").write_text(rows)
    (ours / "traces" / "t.s1.jsonl").write_text(rows[:len(rows) // 2 + 7])  # cut mid-row
    (theirs / "traces" / "t.s2.jsonl").write_text(rows)
    (ours / "traces" / "t.s2.jsonl").write_text(rows[:5])  # cut within the first row
    log = "".join(f"line {k}\n" for k in range(20))
    (theirs / "logs" / "nats-b1.log").write_text(log)
    (ours / "logs" / "nats-b1.log").write_text("stderr here\n" + log[:33])
    for _ in range(2):
        again = tmp_path / "again"
        shutil.copytree(theirs, again)
        merge(again, ours)
        shutil.rmtree(again)
        assert (ours / "traces" / "t.s1.jsonl").read_text() == rows
        assert (ours / "traces" / "t.s2.jsonl").read_text() == rows
        assert (ours / "logs" / "nats-b1.log").read_text() == "stderr here\n" + log


def test_each_servers_shaper_routes_only_onto_links_it_holds_and_forgets_routes_that_moved_away():
    """A run over servers has a routing shaper per server (shaping.ShaperPerServer): a hop goes to
    the shaper holding its link, a route to the one holding its next link, and every other shaper
    drops that route, so its frames for the address go through the router (pure bookkeeping; the
    live runs over isolated servers carry the packets)."""
    from types import SimpleNamespace

    from testbed.emulation.shaping import NextHop, ShapedLink, ShaperPerServer

    class Recorder:
        name = "routed"

        def __init__(self):
            self.calls = []

        def route(self, hops, routes):
            self.calls.append((hops, routes))

    node = {name: SimpleNamespace(name=name, testbed_server=SimpleNamespace(name=name)) for name in ("s1", "s2")}
    one, two = Recorder(), Recorder()
    per_server = ShaperPerServer({"s1": one, "s2": two})
    on_one = ShapedLink(1, node["s1"], "p-b", node["s2"], "p-a", shaping=None, seed=1)
    on_two = ShapedLink(2, node["s2"], "eth0", node["s2"], "a-x", shaping=None, seed=2)
    hop = NextHop(on_two, 1, "02:00:00:00:00:01", "02:00:00:00:00:02")
    per_server.route([(on_one, 0, (1, "02:00:00:00:00:03"))], [(1, "10.0.0.9", hop), (0, "10.0.0.9", None)])
    assert one.calls == [([(on_one, 0, (1, "02:00:00:00:00:03"))], [(1, "10.0.0.9", None), (0, "10.0.0.9", None)])]
    assert two.calls == [([], [(1, "10.0.0.9", hop), (0, "10.0.0.9", None)])]
