"""Mobility as a deterministic timeline computed before the run from the model and the seed.

Two runs with one seed relink at the same times, and the run can check afterwards that every
planned handover happened. Random waypoint moves a swarm over the tower area at constant speed;
a handover is planned whenever the nearest zone site changes (sampled every 100 ms). Shuttle moves
each node back and forth between two zones every `dwell` seconds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from testbed.scenario import zones
from testbed.scenario.model import Scenario
from testbed.topology import Topology

SAMPLE_S = 0.1


@dataclass(frozen=True)
class Handover:
    time: float  # seconds since the start of the workload
    node: str
    from_site: str
    to_site: str


@dataclass(frozen=True)
class GroupChange:
    time: float
    avatar: int
    from_group: int
    to_group: int


def _waypoint_track(rng: random.Random, low: np.ndarray, high: np.ndarray, speed: float, pause: float,
                    duration: float) -> np.ndarray:
    """Positions (x, y) every SAMPLE_S seconds for one random-waypoint walker."""
    steps = int(duration / SAMPLE_S) + 1
    track = np.empty((steps, 2))
    position = np.array([rng.uniform(low[0], high[0]), rng.uniform(low[1], high[1])])
    target = position
    pause_left = 0.0
    for i in range(steps):
        track[i] = position
        budget = speed * SAMPLE_S
        if pause_left > 0:
            pause_left -= SAMPLE_S
            continue
        while budget > 0:
            gap = target - position
            distance = float(np.hypot(*gap))
            if distance <= budget:
                position, budget = target, budget - distance
                target = np.array([rng.uniform(low[0], high[0]), rng.uniform(low[1], high[1])])
                if pause > 0:
                    pause_left = pause
                    break
            else:
                position = position + gap / distance * budget
                budget = 0
    return track


def random_waypoint(scenario: Scenario, topology: Topology) -> tuple[dict[str, str], list[Handover]]:
    """Initial site of every mobile node and the planned handovers, in time order."""
    infra = scenario.infrastructure
    points = zones.towers(infra.mec_zones.towers)
    projection = zones.Projection(points)
    xy = projection.to_xy(points)
    low, high = xy.min(axis=0), xy.max(axis=0)
    zone_list = [zones.Zone(s.name, s.lat, s.lon, 0) for s in topology.sites.values() if s.kind == "zone"]
    centres = projection.to_xy(np.array([[z.lat, z.lon] for z in zone_list]))
    initial: dict[str, str] = {}
    handovers: list[Handover] = []
    for node in sorted(n.name for n in topology.nodes.values() if n.mobile):
        rng = random.Random(f"{scenario.seed}:{node}")
        track = _waypoint_track(rng, low, high, scenario.mobility.speed, scenario.mobility.pause, scenario.duration)
        nearest = np.argmin(((track[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2), axis=1)
        initial[node] = zone_list[nearest[0]].name
        changes = np.nonzero(nearest[1:] != nearest[:-1])[0] + 1
        for step in changes:
            handovers.append(Handover(round(float(step) * SAMPLE_S, 3), node, zone_list[nearest[step - 1]].name,
                                      zone_list[nearest[step]].name))
    handovers.sort(key=lambda h: (h.time, h.node))
    return initial, handovers


def group_changes(scenario: Scenario, avatars: int | None = None) -> tuple[list[int], list[GroupChange]]:
    """Initial group of every avatar and each change after U(stay.min, stay.max) in its group.
    `avatars`: how many there are in the run (its player nodes, which the scale may change); by
    default the workload's `avatars`."""
    workload, stay = scenario.workload, scenario.mobility.stay
    rng = random.Random(scenario.seed)
    groups = [rng.randrange(workload.groups) for _ in range(workload.avatars if avatars is None else avatars)]
    changes: list[GroupChange] = []
    if stay is None:  # mobility.model none (not group-change): every avatar stays in its first group
        return groups, changes
    for avatar, group in enumerate(groups):
        t = rng.uniform(stay.min, stay.max)
        while t < scenario.duration:
            new = rng.randrange(workload.groups - 1) if workload.groups > 1 else 0
            new = new + 1 if workload.groups > 1 and new >= group else new
            changes.append(GroupChange(round(t, 3), avatar, group, new))
            group = new
            t += rng.uniform(stay.min, stay.max)
    changes.sort(key=lambda c: (c.time, c.avatar))
    return groups, changes


def shuttle(scenario: Scenario, topology: Topology) -> tuple[dict[str, str], list[Handover]]:
    """Mobile node k shuttles between zone k and zone k + 1 (in name order, wrapping), changing zone
    every `dwell` seconds: a client on a zone border."""
    zone_names = sorted(s.name for s in topology.sites.values() if s.kind == "zone")
    dwell = scenario.mobility.dwell
    initial: dict[str, str] = {}
    handovers: list[Handover] = []
    for k, node in enumerate(sorted(n.name for n in topology.nodes.values() if n.mobile)):
        here, there = zone_names[k % len(zone_names)], zone_names[(k + 1) % len(zone_names)]
        initial[node] = here
        t = dwell
        while t < scenario.duration:
            handovers.append(Handover(round(t, 3), node, here, there))
            here, there = there, here
            t += dwell
    handovers.sort(key=lambda h: (h.time, h.node))
    return initial, handovers


MOVERS = {"random-waypoint": random_waypoint, "shuttle": shuttle}  # the models that relink nodes


def plan(scenario: Scenario, topology: Topology) -> list[Handover]:
    """Place mobile nodes at their initial sites (mutates the topology) and return the handovers."""
    mover = MOVERS.get(scenario.mobility.model)
    if mover is None:
        return []
    initial, handovers = mover(scenario, topology)
    for node, site in initial.items():
        topology.nodes[node].site = site
    return handovers
