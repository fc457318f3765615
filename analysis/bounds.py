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

The control loop's reaction time is also the scenario's: a client's coordinate reaches its broker
within one NC report period, the manager acts on it at its next monitoring round (paper 4: both
every 5 s), so a topic should be back under its threshold within `reaction_s` = the sum.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from testbed import topology as topology_mod
from testbed.scenario.loader import load

BROKER_ROLES = ("cloud", "broker")          # nodes that host topics (testbed.topology roles)
NOT_CLIENTS = (*BROKER_ROLES, "nc-proxy")    # every other role is a pub/sub client's node
EDGE_SITES = ("zone", "city")                # where a mobile client can be
PAPER_REACTION_S = 10.0                      # 5 s coordinate reports + 5 s monitoring rounds (paper 4)


@dataclass(frozen=True)
class Bound:
    """The worst configured E2E latency of any placement, and the path that gives it."""

    seconds: float
    path: str


@dataclass(frozen=True)
class Limits:
    """What a run's scenario allows: its latency bound (None when unknown) and reaction time."""

    bound: Bound | None
    reaction_s: float | None


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


def run_limits(run_dir: str | os.PathLike) -> Limits:
    """A run directory's Limits from its scenario.yaml; unknown parts are None (a scenario that does not
    validate, or none saved)."""
    try:
        scenario = load(Path(run_dir) / "scenario.yaml")  # ScenarioError is a ValueError, a missing file too
    except ValueError:
        return Limits(None, None)
    control = scenario.control
    try:
        bound = latency_bound(topology_mod.build(scenario))
    except (KeyError, ValueError):
        bound = None
    return Limits(bound, control.nc_report_period + control.monitoring_period)


__all__ = ["Bound", "Limits", "latency_bound", "run_limits", "BROKER_ROLES", "PAPER_REACTION_S"]
