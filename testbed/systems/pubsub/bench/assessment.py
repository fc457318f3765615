"""Broker selection policy assessment (paper 5.5, Fig. 4 and Fig. 5): random client placements and
subscriptions over an emulated topology, every policy's choice, and its outcome.

Inputs per topology: the coordinates of a snapshot (node -> Coordinate, read once the agents have
settled) and the configured network (`Topology`), so each outcome is evaluated twice:
`evaluated_on="estimate"` with the coordinates (Serf's RTT estimates) and `evaluated_on="configured"`
with the configured round trips (how good the choice really is).

Under both readings of d (`distance`, testbed.policies.distance), side by side: `one_way` (RTT / 2,
what a message takes producer -> broker -> consumer) and `rtt` (Serf's distance as the paper's d,
never halved). The policies rank with the reading (a uniform scale, so their choices are the same);
the worst pair latency and the violations of the threshold are read with it too, so every row
carries its `distance`.

Where clients are. Clients sit at the edge sites (cities, MEC zones) and take the coordinate of a
node standing for their site:
- MMOG: the city's game server (the pub/sub client is the game server; avatars' topics are published
  and subscribed by game servers), or its NC proxy if the snapshot has no game server there.
- UAV: the zone's NC proxy, with the UAV's access latency added to the height exactly as the live
  NC proxy answers (testbed.nc.proxy: one-way client-proxy latency = the UAV's access delay + the
  proxy's own link delay); its configured latency is that of a UAV node of the topology relinked to
  the zone (`Topology.node_rtt(..., site_a=zone)`).
Brokers are the nodes with role "broker" and, unless `include_cloud=False`, the cloud broker(s).

Workloads (one per seed, `random.Random(seed)`):
- MMOG: 1024 clients, each in a city drawn uniformly, each in one of 128 groups drawn uniformly;
  object-based subscriptions: client a's avatar topic is published by the game server of a's city
  and subscribed by the game servers of the cities of the other members of a's group (a game server
  subscribes once however many members it serves). A topic whose group has no other member has no
  producer-consumer pair and no row.
- UAV: 16 swarms of 8 UAVs, each swarm in a zone drawn uniformly (all its UAVs there); per swarm
  follow_leader (leader -> 7 followers) and sensor_data (7 followers -> leader).
Threshold: 100 ms (MMOG), 40 ms (UAV). A pair violates it when its latency is strictly above.

The policies choose from the same snapshot the live topic manager would see: every topic reported
(centroids, W(t), E(t)) by its Pulsar-hash broker, which is where topics start; AllPairs also gets
each client's coordinate. Load plays no part here (paper 5.5 assesses latency only).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.nc.coordinate import Coordinate
from testbed.policies import DEFAULT_DISTANCE, DISTANCES, POLICIES, Distance, choose_brokers, hash_broker, latency
from testbed.policies.snapshot import BrokerReport, ClientNC, Snapshot, TopicClients, coord_from_dict

THRESHOLDS = {"mmog": 0.100, "uav": 0.040}
POLICY_NAMES = tuple(reversed(POLICIES))  # the registry's, baselines first and ePulsar last, as Fig. 4 and 5 draw them
EVALUATED_ON = ("estimate", "configured")
DISTANCE_NAMES = tuple(DISTANCES)  # every reading, side by side (the default first)
MMOG_CLIENTS, MMOG_GROUPS = 1024, 128
UAV_SWARMS, UAV_PER_SWARM = 16, 8
EDGE_SITE_KINDS = ("city", "zone")


@dataclass(frozen=True)
class Infrastructure:
    """One emulated topology as the assessment sees it.

    places: edge site -> the coordinate a client at that site reports.
    estimate / configured: site -> broker -> round-trip time in seconds, from the coordinates (Serf's
    distance) and from the configured network; `table` reads them as d.
    """

    kind: str  # "mmog" | "uav"
    name: str
    brokers: dict[str, Coordinate]
    places: dict[str, Coordinate]
    estimate: dict[str, dict[str, float]]
    configured: dict[str, dict[str, float]]
    threshold: float
    info: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of edge sites clients can be at: cities (Fig. 4) or MEC zones (Fig. 5)."""
        return len(self.places)

    def table(self, evaluated_on: str, distance: Distance) -> dict[str, dict[str, float]]:
        """site -> broker -> d in the reading `distance`, estimated or configured."""
        rtts = getattr(self, evaluated_on)
        return {site: {b: distance.of_rtt(rtt) for b, rtt in row.items()} for site, row in rtts.items()}


@dataclass(frozen=True)
class TopicSpec:
    """A topic with its clients given by the sites they are at (one entry per client)."""

    topic: str
    producers: tuple[str, ...]
    consumers: tuple[str, ...]


def _first(nodes: Iterable, role: str, site: str, coordinates: dict) -> str | None:
    names = sorted(n.name for n in nodes if n.role == role and n.site == site and n.name in coordinates)
    return names[0] if names else None


def mobile_client_coord(proxy: Coordinate, access_one_way: float) -> Coordinate:
    """The coordinate a mobile client gets from its zone's NC proxy, as testbed.nc.proxy answers it
    (`client_coordinate`): the client-proxy RTT (2 x the one-way access) less the proxy's own leg
    goes into the proxy's height."""
    from testbed.nc.proxy import client_coordinate

    return client_coordinate(proxy, 2 * access_one_way)


def infrastructure(kind: str, topology, coordinates: dict[str, Coordinate], *, name: str | None = None,
                   threshold: float | None = None, include_cloud: bool = True) -> Infrastructure:
    """Brokers, client places and both latency tables for one topology and its coordinate snapshot.

    Sites with no usable node in the snapshot (no game server or NC proxy coordinate) get no clients.
    """
    if kind not in THRESHOLDS:
        raise ValueError(f"kind must be one of {sorted(THRESHOLDS)}, not {kind!r}")
    roles = ("broker", "cloud") if include_cloud else ("broker",)
    brokers = {n.name: coordinates[n.name] for n in sorted(topology.nodes.values(), key=lambda n: n.name)
               if n.role in roles and n.name in coordinates}
    if not brokers:
        raise ValueError("no broker has a coordinate in the snapshot")
    nodes = list(topology.nodes.values())
    mobile = sorted(n.name for n in nodes if n.role == "uav-swarm")
    places: dict[str, Coordinate] = {}
    estimate: dict[str, dict[str, float]] = {}
    configured: dict[str, dict[str, float]] = {}
    for site in sorted(s.name for s in topology.sites.values() if s.kind in EDGE_SITE_KINDS):
        proxy = _first(nodes, "nc-proxy", site, coordinates)
        if kind == "mmog":
            node = _first(nodes, "game-server", site, coordinates) or proxy
            if node is None:
                continue
            coord = coordinates[node]
            truth = {b: topology.node_rtt(node, b) for b in brokers}
        else:
            if proxy is None:
                continue
            if mobile:
                uav = topology.nodes[mobile[0]]
                access = uav.access.delay + topology.nodes[proxy].access.delay  # what the live proxy measures
                coord = mobile_client_coord(coordinates[proxy], access)
                truth = {b: topology.node_rtt(uav.name, b, site_a=site) for b in brokers}
            else:
                coord = coordinates[proxy]
                truth = {b: topology.node_rtt(proxy, b) for b in brokers}
        places[site] = coord
        estimate[site] = {b: coord.distance_to(bc) for b, bc in brokers.items()}
        configured[site] = truth
    if not places:
        raise ValueError("no edge site has a client coordinate (game server or NC proxy) in the snapshot")
    return Infrastructure(kind, name or topology.name, brokers, places, estimate, configured,
                          THRESHOLDS[kind] if threshold is None else threshold)


# --- workloads ------------------------------------------------------------------------------------


def mmog_topics(sites: Sequence[str], rng: random.Random, clients: int = MMOG_CLIENTS,
                groups: int = MMOG_GROUPS) -> list[TopicSpec]:
    """Object-based MMOG subscriptions (paper 5.1.2, 5.5.2); topics named avatar<i>."""
    city = [rng.choice(sites) for _ in range(clients)]
    group = [rng.randrange(groups) for _ in range(clients)]
    members: dict[int, list[int]] = {}
    for a, g in enumerate(group):
        members.setdefault(g, []).append(a)
    topics = []
    for a in range(clients):
        subscribers = tuple(sorted({city[m] for m in members[group[a]] if m != a}))
        topics.append(TopicSpec(f"avatar{a}", (city[a],), subscribers))
    return topics


def uav_topics(sites: Sequence[str], rng: random.Random, swarms: int = UAV_SWARMS,
               per_swarm: int = UAV_PER_SWARM) -> list[TopicSpec]:
    """Per swarm: follow_leader (leader -> followers) and sensor_data (followers -> leader)."""
    topics = []
    for s in range(swarms):
        zone = rng.choice(sites)
        followers = (zone,) * (per_swarm - 1)
        topics.append(TopicSpec(f"swarm{s}/follow_leader", (zone,), followers))
        topics.append(TopicSpec(f"swarm{s}/sensor_data", followers, (zone,)))
    return topics


def workload(infra: Infrastructure, seed: int) -> list[TopicSpec]:
    sites = sorted(infra.places)
    rng = random.Random(seed)
    return mmog_topics(sites, rng) if infra.kind == "mmog" else uav_topics(sites, rng)


# --- one placement --------------------------------------------------------------------------------


def snapshot_for(infra: Infrastructure, topics: Sequence[TopicSpec],
                 distance: Distance) -> tuple[Snapshot, dict[str, TopicClients]]:
    """The topic manager's view in the reading `distance`: each topic reported by its Pulsar-hash
    broker; the clients' own coordinates for AllPairs."""
    hosted: dict[str, list] = {b: [] for b in infra.brokers}
    placement, clients = {}, {}
    for spec in topics:
        broker = hash_broker(spec.topic, infra.brokers)
        placement[spec.topic] = broker
        producers = tuple(ClientNC(f"{spec.topic}/p{i}@{s}", infra.places[s]) for i, s in enumerate(spec.producers))
        consumers = tuple(ClientNC(f"{spec.topic}/c{i}@{s}", infra.places[s]) for i, s in enumerate(spec.consumers))
        clients[spec.topic] = TopicClients(producers, consumers)
        hosted[broker].append(latency.aggregate(spec.topic, broker, infra.brokers[broker], producers, consumers,
                                                distance=distance))
    reports = {b: BrokerReport(b, c, topics=tuple(hosted[b])) for b, c in infra.brokers.items()}
    return Snapshot(reports, placement, {spec.topic: infra.threshold for spec in topics}, distance=distance), clients


def evaluate(spec: TopicSpec, broker: str, table: dict[str, dict[str, float]], threshold: float) -> tuple[float, int, int]:
    """Worst pair latency, number of producer-consumer pairs and how many exceed the threshold."""
    worst, violations = 0.0, 0
    for p in spec.producers:
        for c in spec.consumers:
            e2e = table[p][broker] + table[c][broker]
            worst = max(worst, e2e)
            violations += e2e > threshold
    return worst, len(spec.producers) * len(spec.consumers), violations


def assess(infra: Infrastructure, seed: int, policies: Sequence[str] = POLICY_NAMES,
           distances: Sequence[str] = DISTANCE_NAMES) -> list[dict]:
    """One random placement: a row per (distance, policy, topic with pairs, evaluated_on)."""
    topics = [t for t in workload(infra, seed) if t.producers and t.consumers]
    rows = []
    for reading in (DISTANCES[name] for name in distances):
        snapshot, clients = snapshot_for(infra, topics, reading)
        tables = {on: infra.table(on, reading) for on in EVALUATED_ON}
        for name in policies:
            chosen = choose_brokers([t.topic for t in topics], snapshot, POLICIES[name], clients, seed=seed)
            for spec in topics:
                broker = chosen[spec.topic]
                for on in EVALUATED_ON:
                    worst, pairs, violations = evaluate(spec, broker, tables[on], infra.threshold)
                    rows.append({"policy": name, "kind": infra.kind, "topology": infra.name, "size": infra.size,
                                 "seed": seed, "topic": spec.topic, "broker": broker, "worst_e2e_s": worst,
                                 "pairs": pairs, "violations": violations, "evaluated_on": on,
                                 "distance": reading.name})
    return rows


PLACEMENT_KEY = ("kind", "topology", "size", "policy", "seed", "evaluated_on", "distance")
SUMMARY_KEY = ("kind", "topology", "size", "policy", "evaluated_on", "distance")


def per_placement(rows: Iterable[dict]) -> list[dict]:
    """Per (topology, policy, seed, evaluated_on, distance): the worst pair latency over all topics and
    the violation ratio (violating pairs / pairs)."""
    acc: dict[tuple, dict] = {}
    for r in rows:
        key = tuple(r[k] for k in PLACEMENT_KEY)
        a = acc.setdefault(key, {**dict(zip(PLACEMENT_KEY, key)), "worst_e2e_s": 0.0, "pairs": 0, "violations": 0})
        a["worst_e2e_s"] = max(a["worst_e2e_s"], r["worst_e2e_s"])
        a["pairs"] += r["pairs"]
        a["violations"] += r["violations"]
    for a in acc.values():
        a["violation_ratio"] = a["violations"] / a["pairs"] if a["pairs"] else 0.0
    return list(acc.values())


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, Spark SQL's `percentile`)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(placements: Iterable[dict]) -> list[dict]:
    """Per (topology, policy, evaluated_on, distance) over placements: max and p95 of the worst-case
    latency, mean violation ratio. The same reduction as the Spark job, for small runs and tests."""
    groups: dict[tuple, list[dict]] = {}
    for p in placements:
        groups.setdefault(tuple(p[k] for k in SUMMARY_KEY), []).append(p)
    out = []
    for key, items in sorted(groups.items()):
        worst = [p["worst_e2e_s"] for p in items]
        ratios = [p["violation_ratio"] for p in items]
        out.append({**dict(zip(SUMMARY_KEY, key)), "placements": len(items), "worst_max_s": max(worst),
                    "worst_p95_s": percentile(worst, 0.95),
                    "violation_ratio_mean": statistics.fmean(ratios),
                    "violation_ratio_std": statistics.stdev(ratios) if len(ratios) > 1 else None})
    return out


# --- inputs ---------------------------------------------------------------------------------------


def coordinates_from(data: dict) -> dict[str, Coordinate]:
    """node -> Coordinate from a snapshot's "coordinates" mapping (testbed.nc.snapshots format)."""
    return {node: coord_from_dict(c) for node, c in data.items()}


def snapshot_from_events(path: str | Path) -> dict:
    """The last converged nc_snapshot of a run's events.jsonl (else its last nc_snapshot)."""
    last, last_converged = None, None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if '"nc_snapshot"' not in line:
                continue
            event = json.loads(line)
            if event.get("type") == "nc_snapshot":
                last = event
                if event.get("converged"):
                    last_converged = event
    if last is None:
        raise ValueError(f"{path}: no nc_snapshot event")
    return last_converged or last


def kind_of(scenario) -> str:
    if scenario.infrastructure.cities:
        return "mmog"
    if scenario.infrastructure.mec_zones:
        return "uav"
    raise ValueError(f"scenario {scenario.name!r}: the assessment needs cities (MMOG) or mec_zones (UAV)")


def load_inputs(path: str | Path) -> list[Infrastructure]:
    """Read the assessment's input file: JSON {"inputs": [entry, ...]} (or a bare list), each entry

        {"run": "results/uav-..."}                  scenario.yaml and the last converged snapshot of
                                                    events.jsonl in a run directory, or
        {"scenario": "x.yaml", "coordinates": {node: {"vec", "height", "adjustment", "error"}}}, or
        {"scenario": "x.yaml", "events": "events.jsonl"}

    with optional "kind" ("mmog" | "uav"; else from the scenario's infrastructure), "name",
    "threshold" (seconds) and "include_cloud" (default true). Relative paths are relative to the
    input file. The topology is rebuilt from the scenario (deterministic for its seed).
    """
    from testbed import topology as topology_mod
    from testbed.scenario.loader import load

    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    entries = data["inputs"] if isinstance(data, dict) else data
    out = []
    for i, entry in enumerate(entries):
        def rel(p: str) -> Path:
            q = Path(p)
            return q if q.is_absolute() else path.parent / q

        if "run" in entry:
            scenario_path, events = rel(entry["run"]) / "scenario.yaml", rel(entry["run"]) / "events.jsonl"
        elif "scenario" in entry:
            scenario_path, events = rel(entry["scenario"]), rel(entry["events"]) if "events" in entry else None
        else:
            raise ValueError(f"{path}: inputs[{i}] needs 'run' or 'scenario'")
        if "coordinates" in entry:
            coordinates = coordinates_from(entry["coordinates"])
        elif events is not None:
            coordinates = coordinates_from(snapshot_from_events(events)["coordinates"])
        else:
            raise ValueError(f"{path}: inputs[{i}] needs 'coordinates', 'events' or 'run'")
        scenario = load(scenario_path)
        topo = topology_mod.build(scenario)
        out.append(infrastructure(entry.get("kind") or kind_of(scenario), topo, coordinates,
                                  name=entry.get("name"), threshold=entry.get("threshold"),
                                  include_cloud=entry.get("include_cloud", True)))
    return out


def reading_of(row: dict) -> str:
    """A summary row's reading of d; rows from before readings were recorded are the default's."""
    return row.get("distance") or DEFAULT_DISTANCE
