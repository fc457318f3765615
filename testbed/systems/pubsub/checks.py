"""The pub/sub workloads' scenario checks: the checks that need the scenario's topology (testbed.topology.checked calls them
through the manifest). `report(field path, message)` records a problem at that field's line."""

from __future__ import annotations

from testbed.policies import get_policy


def handover_trigger(scenario, report) -> None:
    """`control.handover_trigger` against the rest of the control block: an early report no earlier
    than the periodic one, or a policy without Algorithm 1's latency rule, would be a trigger that
    cannot act."""
    trigger, control, where = scenario.control.handover_trigger, scenario.control, ("control", "handover_trigger")
    if not trigger.enabled:
        return
    if trigger.min_interval > control.nc_report_period:
        report(where + ("min_interval",), f"{trigger.min_interval:g}s is longer than nc_report_period "
               f"({control.nc_report_period:g}s): an early report would come no sooner than the periodic one")
    policy = get_policy(control.policy)
    if not policy.latency_aware or getattr(policy, "controller", None) is not None:
        report(where + ("enabled",), f"policy {control.policy!r} does not place by latency with Algorithm 1; the "
               "early round needs epulsar or allpairs")


def client_engine(scenario, report) -> None:
    """`workload.client_engine: compiled` moves the clients' data plane to the node's engine, which
    carries plain messages only: message tracking's ids and durable topics' acknowledgements are the
    Python client's features."""
    if scenario.workload.client_engine != "compiled":
        if scenario.workload.client_processes == "per-machine":
            report(("workload", "client_processes"), "one client host per machine runs the compiled engine's "
                   "clients: set client_engine: compiled (or client_processes: auto)")
        return
    where = ("workload", "client_engine")
    if scenario.tracking.strategy != "none":
        report(where, f"message tracking ({scenario.tracking.strategy}) needs the Python client: "
               "its ids travel in the messages the engine writes; use client_engine: python")
    durable = [t.name for t in scenario.workload.topics if t.durable is not None]
    if durable:
        report(where, f"durable topic class {durable[0]!r} needs the Python client (its acknowledgements): "
               "use client_engine: python")


def uav(scenario, built, report) -> None:
    """UAV swarms (paper 5.1): the scenario-wide checks every pub/sub workload shares."""
    handover_trigger(scenario, report)
    client_engine(scenario, report)


def mmog(scenario, built, report) -> None:
    """The MMOG case (paper 5.8.2) needs players (role avatar), one per avatar, each in a city with
    a game server (an edge site) to attach to."""
    handover_trigger(scenario, report)
    client_engine(scenario, report)
    players = [i for i, g in enumerate(scenario.nodes.clients) if g.role == "avatar"]
    if not players:
        report(("nodes", "clients"), "the mmog workload needs player nodes (role: avatar)")
        return
    count = sum(scenario.nodes.clients[i].count for i in players)
    if count != scenario.workload.avatars:
        report(("workload", "avatars"), f"{scenario.workload.avatars} avatars but {count} player nodes (role avatar)")
    edges = {site for _, site in built.placed("game-server")}
    for name, site in built.placed("avatar"):
        if site not in edges:
            report(("nodes", "clients", players[0], "site"), f"{name} is at {site}, which has no game server")
            return



def hotspot(scenario, built, report) -> None:
    """The hot-spot workload runs on static client nodes; its hot site must be an edge
    site with some of them (its topics' clients live there), and its surge within the run."""
    handover_trigger(scenario, report)
    client_engine(scenario, report)
    spec, where = scenario.workload.hotspot, ("workload", "hotspot")
    static = built.placed("static")
    if not static:
        report(("nodes", "clients"), "the hotspot workload needs client nodes with role: static")
        return
    sites = sorted({site for _, site in static})
    if spec.hot_site not in built.sites:
        report(where + ("hot_site",), f"{spec.hot_site!r} is not a site; sites: {', '.join(built.sites)}")
    elif spec.hot_topics() and spec.hot_site not in sites:
        report(where + ("hot_site",), f"{spec.hot_site!r} has no static client node; they are at {', '.join(sites)}")
    if spec.surge and spec.surge.at >= scenario.duration:
        report(where + ("surge", "at"), f"{spec.surge.at:g}s is not within the run's duration ({scenario.duration:g}s)")


def manager_fault(scenario, built, index, report) -> None:
    """`kill: manager` (a fault target of this system): a standby must take over, so the cloud needs
    a second broker node (a manager runs in every cloud node)."""
    if scenario.nodes.cloud_brokers < 2:
        report(("faults", index, "kill"), "killing the topic manager needs a standby: nodes.cloud_brokers of 2 "
                                          "or more (a manager in every cloud node)")
