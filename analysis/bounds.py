"""What a run's configured network allows, so that a verdict can say when it cannot fail.

A rule such as "AoI latency p95 < 100 ms" tests placement only if some placement could break it. On
a topology whose worst path is 78 ms (the MMOG smoke's lax -> nyc -> lax) every placement passes:
the verdict is "not testable", not "yes". The bound is computed from the scenario saved in the run
directory (`scenario.yaml`, the model as run) through `testbed.topology`, the same graph the
emulation built:

    worst E2E = max over producer site p, broker b, consumer site c of
                access(p) + site_one_way(p, b) + 2 x access(b) + site_one_way(b, c) + access(c)

with each link's delay plus its jitter, a mobile client at any edge site (zone or city) and a static
one at its own, any broker (cloud included). It is an upper bound of the network's part only:
queueing and processing in brokers, clients and the harness come on top, but those are not what the
placement rules judge (the saturation guard excludes the harness's own stalls).

The control loop's reaction time is the scenario's and the run's: a client's coordinate reaches its
broker within one NC report period, the broker's report to ZooKeeper carries it within one
monitoring period, and the topic manager acts on it at its next round, one monitoring period later
at most (paper 3.2 and 4: three periodic stages, each on its own clock: `reaction_s`, the sum; 15 s
with the paper's 5 s periods. Read as two, 10 s, it was passed only by lucky phases: a 10-minute
run at the paper's size had 5 of 8 windows over it), and the move itself then takes the run's migration time
(`migration_s`: from the manager's decision until the topic's clients use the new broker, as that
run's events measured it). A topic should be back under its threshold within `window_s` = both.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from testbed import topology as topology_mod
from testbed.procs import percentile
from testbed.scenario.loader import load

BROKER_ROLES = ("cloud", "broker")          # nodes that host topics (testbed.topology roles)
NOT_CLIENTS = (*BROKER_ROLES, "nc-proxy")    # every other role is a pub/sub client's node
EDGE_SITES = ("zone", "city")                # where a mobile client can be
PAPER_REACTION_S = 15.0                      # 5 s coordinate reports + 5 s broker reports + 5 s rounds (paper 4)
CLIENT_MOVE_GRACE_S = 2.0                    # a client's downtime that starts this long after its migration ended still belongs to it


@dataclass(frozen=True)
class Bound:
    """The worst configured E2E latency of any placement, and the path that gives it."""

    seconds: float
    path: str


@dataclass(frozen=True)
class Limits:
    """What a run allows: its scenario's latency bound (None when unknown) and reaction time, and the
    run's own migration time (p95 of its moves; None when nothing moved or no events were kept)."""

    bound: Bound | None
    reaction_s: float | None
    migration_s: float | None = None

    @property
    def window_s(self) -> float | None:
        """How long a topic may stay over its threshold after its clients moved: the reaction time
        plus the run's migration time."""
        return None if self.reaction_s is None else self.reaction_s + (self.migration_s or 0.0)


def _one_way(shaping) -> float:
    return shaping.delay + shaping.jitter


def latency_bound(topology) -> Bound | None:
    """The worst E2E latency any placement can give on this `testbed.topology.Topology` (module doc);
    None when it has no broker or no client."""
    brokers = [n for n in topology.nodes.values() if n.role in BROKER_ROLES]
    edges = [s.name for s in topology.sites.values() if s.kind in EDGE_SITES]
    ends = {}  # (site) -> (worst access there, node): a client's end of a path
    for node in topology.nodes.values():
        if node.role in NOT_CLIENTS:
            continue
        for site in (edges if node.mobile else [node.site]):
            if _one_way(node.access) > ends.get(site, (-1.0, ""))[0]:
                ends[site] = (_one_way(node.access), node.name)
    if not brokers or not ends:
        return None
    best = None
    for broker in brokers:
        leg = max(((access + topology.site_one_way(site, broker.site) + _site_jitter(topology, site, broker.site),
                    f"{name}@{site}") for site, (access, name) in ends.items()))
        total = 2 * leg[0] + 2 * _one_way(broker.access)
        if best is None or total > best.seconds:
            best = Bound(total, f"{leg[1]} -> {broker.name}@{broker.site} -> {leg[1]}")
    return best


def _site_jitter(topology, a: str, b: str) -> float:
    link = topology.link_between(a, b) if a != b else None
    return link.shaping.jitter if link is not None else 0.0


def migration_times(events: list[dict]) -> list[float]:
    """Each migration's time as its clients saw it: from the manager's `migration_start` until the
    later of its `migration_end` and the end of the last client downtime of that topic that began
    before the migration ended (plus `CLIENT_MOVE_GRACE_S`: a baseline client looks the topic up
    again only after the old broker dropped it). A migration with no end recorded is left out."""
    starts: dict[str, float] = {}
    moves: list[tuple[str, float, float]] = []
    for e in sorted(events, key=lambda e: e.get("time", 0.0)):
        kind, topic = e.get("type"), e.get("topic")
        if kind == "migration_start":
            starts[topic] = e["time"]
        elif kind == "migration_end" and topic in starts:
            moves.append((topic, starts.pop(topic), e["time"]))
    downs = [e for e in events if e.get("type") == "downtime" and e.get("reason") in ("redirect", "disconnect")]
    times = []
    for topic, began, ended in moves:
        clients = [d["end"] for d in downs
                   if d.get("topic") == topic and began <= d.get("start", 0.0) <= ended + CLIENT_MOVE_GRACE_S]
        times.append(max([ended, *clients]) - began)
    return times


def _events(run_dir: Path) -> list[dict]:
    try:
        with (run_dir / "events.jsonl").open() as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        return []


def reaction_s(nc_report_period: float, monitoring_period: float) -> float:
    """The control loop's reaction time: a client's NC report, its broker's monitoring report, the
    topic manager's round (the last two both every monitoring period, unsynchronised)."""
    return nc_report_period + 2 * monitoring_period


def run_limits(run_dir: str | os.PathLike) -> Limits:
    """A run directory's Limits from its scenario.yaml and events.jsonl; unknown parts are None (a
    scenario that does not validate, or none saved)."""
    run_dir = Path(run_dir)
    try:
        scenario = load(run_dir / "scenario.yaml")  # ScenarioError is a ValueError, a missing file too
    except ValueError:
        return Limits(None, None)
    control = scenario.control
    try:
        bound = latency_bound(topology_mod.build(scenario))
    except (KeyError, ValueError):
        bound = None
    moved = migration_times(_events(run_dir))
    return Limits(bound, reaction_s(control.nc_report_period, control.monitoring_period),
                  percentile(moved, 0.95, "higher") if moved else None)


__all__ = ["Bound", "Limits", "latency_bound", "migration_times", "run_limits", "reaction_s", "BROKER_ROLES",
           "PAPER_REACTION_S"]
