"""Scenario -> backend-neutral graph: sites, nodes with roles, links with delay/jitter/loss/bandwidth.

The emulated network is routed: every site is a router with a switch (bridge) for the nodes
attached to it, sites are joined by point-to-point links whose delays reproduce the scenario's
site-to-site latencies (so a measured matrix such as WonderProxy's, triangle-inequality
violations and all, is reproduced exactly, which a tree of switches cannot do), and a node's
access link goes to its site's switch. Moving a node = moving its access link to another switch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from itertools import combinations

from testbed import plugin
from testbed.scenario import cities, owners, zones
from testbed.scenario.loader import Problem, ScenarioError, line_of
from testbed.scenario.model import LinkParams, Scenario, scaled_count

# Addresses live only inside the run's own namespaces, so every run can use the same plan.
GATEWAY_IP = "10.255.255.254"
GATEWAY_MAC = "02:00:0a:ff:ff:fe"


@dataclass(frozen=True)
class Shaping:
    """Per-direction link parameters in SI units (the same in both directions)."""

    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    bandwidth: float | None = None

    @classmethod
    def of(cls, params: LinkParams, delay: float | None = None) -> Shaping:
        return cls(
            delay=params.delay if params.delay is not None else (delay or 0.0),
            jitter=params.jitter,
            loss=params.loss,
            bandwidth=params.bandwidth,
        )


@dataclass
class Site:
    name: str
    kind: str  # zone | city | cloud | hub
    lat: float | None = None
    lon: float | None = None


@dataclass
class Node:
    name: str
    role: str  # cloud | broker | nc-proxy | storage | star, or a system's client role (testbed.plugin)
    site: str
    ip: str
    access: Shaping
    mobile: bool = False
    members: int = 1
    rack: int = 0  # a storage node's rack at its site (1..racks)


@dataclass
class Link:
    """A site-to-site link: one-way shaping applied in each direction."""

    a: str
    b: str
    kind: str  # site | cloud
    shaping: Shaping


@dataclass
class Topology:
    name: str
    sites: dict[str, Site] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)

    def link_between(self, a: str, b: str) -> Link | None:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        return None

    def placed(self, role: str) -> list[tuple[str, str]]:
        """(node, site) of every node with this role, in topology order."""
        return [(n.name, n.site) for n in self.nodes.values() if n.role == role]

    def site_one_way(self, a: str, b: str) -> float:
        """Configured one-way delay between two sites (direct link; routing uses direct links only)."""
        if a == b:
            return 0.0
        link = self.link_between(a, b)
        if link is None:
            raise KeyError(f"no link between sites {a} and {b}")
        return link.shaping.delay

    def path_jitter(self, a: str, b: str) -> float:
        """The jitter (s, per direction) of every link between two nodes added up: how far a frame's
        one-way delay may stray from the configured one."""
        na, nb = self.nodes[a], self.nodes[b]
        site = self.link_between(na.site, nb.site).shaping.jitter if na.site != nb.site else 0.0
        return na.access.jitter + nb.access.jitter + site

    def node_rtt(self, a: str, b: str, site_a: str | None = None, site_b: str | None = None) -> float:
        """Configured RTT between two nodes (optionally as if they were attached at other sites)."""
        na, nb = self.nodes[a], self.nodes[b]
        one_way = na.access.delay + nb.access.delay + self.site_one_way(site_a or na.site, site_b or nb.site)
        return 2 * one_way

    def site_rtt(self, a: str, b: str) -> float:
        return 2 * self.site_one_way(a, b)




def cloud_site_name(cloud: str) -> str:
    """The cloud's own site (a datacenter) is named apart from the cloud node that lives in it."""
    return f"{cloud}dc"


def _address(index: int) -> str:
    return f"10.1.{index // 250}.{index % 250 + 1}"


def _sites(scenario: Scenario, topo: Topology) -> None:
    infra = scenario.infrastructure
    links = infra.links
    if infra.mec_zones:
        for zone in zones.mec_zones(infra.mec_zones.zones, scenario.seed, infra.mec_zones.towers):
            topo.sites[zone.name] = Site(zone.name, "zone", zone.lat, zone.lon)
        one_way = infra.mec_zones.inter_site_rtt / 2
        for a, b in combinations(list(topo.sites), 2):
            topo.links.append(Link(a, b, "site", Shaping.of(links.site, one_way)))
        cloud = infra.cloud
        zone_names = list(topo.sites)
        topo.sites[cloud_site_name(cloud.name)] = Site(cloud_site_name(cloud.name), "cloud")
        for zone_name in zone_names:
            topo.links.append(
                Link(cloud_site_name(cloud.name), zone_name, "cloud", Shaping.of(links.cloud, cloud.one_way)))
    elif infra.cities:
        table = cities.city_table()
        for code in infra.cities.names:
            topo.sites[code] = Site(code, "city", table[code].lat, table[code].lon)
        measured = infra.cities.jitter == "measured"
        for a, b in combinations(infra.cities.names, 2):
            shaping = Shaping.of(links.site, cities.rtt(a, b) / 2)
            if measured:
                shaping = replace(shaping, jitter=cities.measured_jitter(a, b))
            topo.links.append(Link(a, b, "site", shaping))
    else:
        topo.sites["hub"] = Site("hub", "hub")
    for override in infra.overrides:
        link = topo.link_between(*override.between)
        if link is None:
            raise ValueError(f"no link between {override.between[0]!r} and {override.between[1]!r}")
        link.shaping = Shaping.of(infra.links.site.merged(override), link.shaping.delay)


def build(scenario: Scenario) -> Topology:
    """The graph for a validated scenario: deterministic for its seed and scale."""
    topo = Topology(scenario.name)
    _sites(scenario, topo)
    infra = scenario.infrastructure
    access = infra.links.access
    rng = random.Random(scenario.seed)
    counter = iter(range(1, 1_000_000))

    def add(name: str, role: str, site: str, shaping: Shaping, mobile: bool = False, members: int = 1,
            rack: int = 0) -> None:
        if name in topo.nodes or name in topo.sites:
            raise ValueError(f"duplicate name {name!r}: a node and another node or site share it")
        topo.nodes[name] = Node(name, role, site, _address(next(counter)), shaping, mobile, members, rack)

    if infra.star:
        for i in range(1, infra.star.nodes + 1):
            add(f"n{i}", "star", "hub", Shaping(infra.star.link_delay, access.jitter, access.loss, access.bandwidth))
        return topo

    cloud = infra.cloud
    cloud_site = cloud.city if (cloud and cloud.city) else (cloud_site_name(cloud.name) if cloud else None)
    if cloud_site:
        local = Shaping.of(infra.links.local)
        count = scenario.nodes.cloud_brokers
        for i in range(1, count + 1):
            add(cloud.name if count == 1 else f"{cloud.name}{i}", "cloud", cloud_site, local)
    else:
        local = Shaping.of(infra.links.local)
    edge_sites = [s for s in topo.sites.values() if s.kind in ("zone", "city")]
    for site in edge_sites:
        for i in range(1, scenario.nodes.brokers_per_site + 1):
            suffix = "" if scenario.nodes.brokers_per_site == 1 else str(i)
            add(f"b{site.name}{suffix}", "broker", site.name, Shaping.of(infra.links.local))
        for i in range(1, scenario.nodes.nc_proxies_per_site + 1):
            suffix = "" if scenario.nodes.nc_proxies_per_site == 1 else str(i)
            add(f"p{site.name}{suffix}", "nc-proxy", site.name, Shaping.of(infra.links.local))
    if infra.storage:
        stored = [*edge_sites, *([topo.sites[cloud_site]] if cloud_site and topo.sites[cloud_site] not in edge_sites else [])]
        for site in stored:  # (a cloud in a city shares that city's storage nodes)
            for rack in range(1, infra.storage.racks + 1):
                add(storage_node_name(site.name, rack), "storage", site.name, Shaping.of(infra.links.local), rack=rack)
    for group in scenario.nodes.clients:
        shaping = Shaping.of(access.merged(group.access))
        count = scaled_count(group.count, scenario.scale)
        if group.site == "each":
            placements = [site.name for site in edge_sites for _ in range(count)]
        elif group.site == "random":
            placements = [rng.choice(edge_sites).name for _ in range(count)]
        else:
            if group.site not in topo.sites:
                raise ValueError(f"client group {group.name!r}: unknown site {group.site!r}")
            placements = [group.site] * count
        for i, site_name in enumerate(placements, start=1):
            add(f"{group.name}{i}", group.role, site_name, _city_access(scenario, group, site_name, shaping),
                group.mobile, group.members)
    return topo


def storage_node_name(site: str, rack: int) -> str:
    """`s<rack><site>`: a site name starts with a letter, so the rack number is never ambiguous."""
    return f"s{rack}{site}"


def _check_durable(scenario: Scenario, built: Topology, report) -> None:
    """Durable topic classes need storage nodes, enough racks for their replicas (one replica per
    rack), a workload that takes them, and for `cloud` storage a cloud datacentre."""
    storage, kind = scenario.infrastructure.storage, plugin.workload_kind(scenario.workload.kind)
    for i, topic in enumerate(scenario.workload.topics):
        if topic.durable is None:
            continue
        where = ("workload", "topics", i, "durable")
        refusal = kind.refuses.get("durable") if kind else None
        if refusal:
            report(where, f"durable topics are not for {scenario.workload.kind}: {refusal}")
        elif scenario.workload.kind not in plugin.taking("durable"):
            report(where, f"durable topics are for the workloads {' and '.join(plugin.taking('durable'))}, "
                          f"not {scenario.workload.kind}")
        elif storage is None:
            report(where, "durable topics need storage nodes: add infrastructure.storage: {racks: 3}")
        elif topic.durable.replicas > storage.racks:
            report(where + ("replicas",), f"{topic.durable.replicas} replicas but each site has "
                                          f"{storage.racks} storage nodes (infrastructure.storage.racks)")
        elif topic.durable.storage == "cloud" and not built.placed("cloud"):
            report(where + ("storage",), "cloud storage needs a cloud (infrastructure.cloud)")
    if storage is not None and scenario.infrastructure.star:
        report(("infrastructure", "storage"), "storage nodes live at edge sites and in the cloud; a star has neither")


def _city_access(scenario: Scenario, group, site: str, shaping: Shaping) -> Shaping:
    """A city's own access latency applies unless the client group sets its access delay itself."""
    city_cfg = scenario.infrastructure.cities
    if city_cfg is None or (group.access is not None and group.access.delay is not None):
        return shaping
    delay = city_cfg.access.get(site, city_cfg.access_latency)
    return shaping if delay is None else Shaping(delay, shaping.jitter, shaping.loss, shaping.bandwidth)


def sites_of(scenario: Scenario) -> list[str]:
    """Site names without building nodes: what overrides and client groups may refer to."""
    topo = Topology(scenario.name)
    _sites(scenario.model_copy(update={"infrastructure": scenario.infrastructure.model_copy(update={"overrides": []})}), topo)
    return list(topo.sites)


def checked(scenario: Scenario, path: str, written_for: str | None = None) -> Topology:
    """Build the topology of a schema-valid scenario, checking what needs the data or the whole
    graph (zones vs towers, site names, name clashes, faults on brokers, settings and fault targets
    of a system not under test); every problem names the line of the field at fault, like schema
    errors. The topology is returned, so it is built once. `written_for`: the file's own system
    when `--system` replaced it (its settings are kept as written)."""
    problems: list[Problem] = []

    def report(loc: tuple, message: str) -> None:
        field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
        problems.append(Problem(path, line_of(path, loc), field, message))

    infra = scenario.infrastructure
    if infra.mec_zones:
        available = len(zones.towers(infra.mec_zones.towers))
        if infra.mec_zones.zones > available:
            report(("infrastructure", "mec_zones", "zones"),
                   f"{infra.mec_zones.zones} zones but the {infra.mec_zones.towers} data has only {available} towers")
    if infra.cities and infra.cities.jitter == "measured" and infra.links.site.jitter:
        report(("infrastructure", "cities", "jitter"),
               "measured: every inter-city link's jitter comes from WonderProxy's pings, and links.site.jitter "
               "sets one for all of them too; keep one of the two")
    if problems:
        raise ScenarioError(problems)

    sites = sites_of(scenario)
    for i, override in enumerate(infra.overrides):
        for name in override.between:
            if name not in sites:
                report(("infrastructure", "overrides", i, "between"),
                       f"{name!r} is not a site; sites: {', '.join(sites)}")
        if override.between[0] == override.between[1]:
            report(("infrastructure", "overrides", i, "between"), "a link joins two different sites")
    for i, group in enumerate(scenario.nodes.clients):
        if group.site not in ("random", "each") and group.site not in sites:
            report(("nodes", "clients", i, "site"), f"{group.site!r} is not a site; sites: {', '.join(sites)}")
    if problems:
        raise ScenarioError(problems)
    try:
        built = build(scenario)
    except ValueError as error:
        report(("nodes",), str(error))
        raise ScenarioError(problems) from None
    kind = plugin.workload_kind(scenario.workload.kind)
    check = kind and plugin.kind_hook(kind, "check")
    if check:
        check(scenario, built, report)
    check = plugin.system_check(getattr(scenario, "system", None))  # what the system under test adds
    if check:
        check(scenario, built, report)
    _check_durable(scenario, built, report)
    owners.check_control(scenario, report, written_for)
    targets = plugin.fault_targets()
    brokers = sorted(n.name for n in built.nodes.values() if n.role == "broker")
    clients = {n.name for n in built.nodes.values() if n.role in plugin.client_roles()}
    for i, fault in enumerate(scenario.faults):
        if fault.at >= scenario.duration:
            report(("faults", i, "at"), f"{fault.at:g}s is not within the run's duration ({scenario.duration:g}s)")
        if fault.back_after is not None and fault.at + fault.back_after >= scenario.duration:
            report(("faults", i, fault.back_field), f"back at {fault.at + fault.back_after:g}s, not within the "
                                                   f"run's duration ({scenario.duration:g}s)")
        if fault.kill in targets:  # a part a system declares: its system judges it
            owners.check_fault_target(scenario, built, i, report)
            continue
        if fault.relay is not None:
            a, b = fault.relay
            if not (built.link_between(a, b) or (a in built.nodes and built.nodes[a].site == b)):
                report(("faults", i, "relay"), f"no link between {a!r} and {b!r}: name two linked sites, or a node "
                                               f"and its site (its access link)")
            continue
        if fault.cut is not None:
            if fault.cut not in built.sites:
                report(("faults", i, "cut"), f"{fault.cut!r} is not a site; sites: {', '.join(sorted(built.sites))}")
            continue
        field, verb = ("kill", "killed") if fault.kill is not None else ("pause", "paused")
        if fault.kill is not None and fault.target in clients:  # a client node's workload process crashes
            if fault.restart_after is not None:
                report(("faults", i, "restart_after"), "a client node is killed for good: no restart_after")
            continue
        if fault.kill is not None and built.nodes.get(fault.target) and built.nodes[fault.target].role == "storage":
            continue  # a storage node's nats-server crashes; with restart_after it rejoins with its disk
        if fault.target not in brokers:
            why = (f"the cloud node holds ZooKeeper and the topic manager; only edge brokers can be {verb}"
                   if fault.target in built.nodes and built.nodes[fault.target].role == "cloud"
                   else "not a broker node" + (" or a client node" if fault.kill is not None else ""))
            report(("faults", i, field), f"{fault.target!r}: {why}; brokers: {', '.join(brokers) or 'none'}")
    if scenario.faults and scenario.workload.kind == "none":
        report(("faults",), "faults kill brokers of the pub/sub system: the scenario needs a workload")
    down_until: dict[str, float | None] = {}  # a part is hit again only once it is back
    for i, fault in sorted(enumerate(scenario.faults), key=lambda item: item[1].at):
        if fault.target in down_until:
            until = down_until[fault.target]
            if until is None or until >= fault.at:
                back = "it is not back" if until is None else f"it is back only at {until:g}s"
                report(("faults", i, "at"), f"{fault.target} is hit again at {fault.at:g}s but {back}: faults on "
                                            "one part must not overlap")
        down_until[fault.target] = fault.at + fault.back_after if fault.back_after is not None else None
    if problems:
        raise ScenarioError(problems)
    return built
