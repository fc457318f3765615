"""Runs over servers, their pure parts: naming servers, placing sites, the scenario's field."""

from __future__ import annotations

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
