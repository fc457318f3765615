"""Handover-aware placement, beyond the paper: a client that is handed over says so at once, and the
topic manager reacts for the topics concerned without waiting for its next period.

In the paper a swarm that enters another MEC zone stays above its threshold until the next NC report
(every 5 s), the next monitoring round (every 5 s) and the migration: windows of ~10 s that two
periods set, not the network. A client knows when it is handed over: its zone's NC proxy answers
with another coordinate. With the trigger on (`control.handover_trigger`, off by default so the
paper's behaviour stays the baseline):
- a client polls its coordinate every `poll_s` and, when it moved by more than `min_change_s` (d in
  the run's reading, testbed.policies.distance) since its last report, reports at once, at most once
  per `min_interval_s` (`coordinate_moved`, `EarlyReports`);
- its broker writes its monitoring report at once and tells the topic manager which topic it concerns;
- the manager runs an early round for those topics only (`early_round`): Algorithm 1's placement for
  those of them whose E(t) now exceeds Lth(t), except a move back to the broker a topic left less
  than `hold_s` ago, so a client on a zone border cannot bounce its topics back and forth (a swarm
  that goes on to a third zone is followed at once; the periodic round stays the backstop).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from testbed.nc.coordinate import Coordinate
from testbed.policies.base import Policy
from testbed.policies.distance import Distance
from testbed.policies.overload import Overload, host_refusal
from testbed.policies.repartition import latency_violated, place_topics
from testbed.policies.snapshot import Migration, Snapshot, TopicClients

POLL_MIN_S = 0.1  # a faster poll would make every client a load generator for its NC proxy


@dataclass(frozen=True)
class HandoverTrigger:
    """The trigger's settings (the scenario's `control.handover_trigger`, in seconds)."""

    enabled: bool = False
    min_change_s: float = 0.005
    poll_s: float = 0.5
    min_interval_s: float = 1.0
    hold_s: float = 10.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> HandoverTrigger:
        return cls(**json.loads(text)) if text else cls()


def coordinate_change(before: Coordinate, after: Coordinate, distance: Distance) -> float:
    """How far a coordinate moved, in the run's reading of d: the Euclidean distance between the two
    positions plus the change of height and of adjustment. Not Vivaldi's distance between them,
    which counts both heights even between a coordinate and itself."""
    moved = math.dist(before.vec, after.vec) + abs(after.height - before.height)
    return distance.of_rtt(moved + abs(after.adjustment - before.adjustment))


def coordinate_moved(reported: Coordinate | None, now: Coordinate | None, min_change_s: float,
                     distance: Distance) -> bool:
    """Whether a client's coordinate moved by more than `min_change_s` since it last reported (a
    client that never reported, or has no coordinate, has nothing to compare)."""
    if reported is None or now is None:
        return False
    return coordinate_change(reported, now, distance) > min_change_s


class EarlyReports:
    """One client's rate limit on early reports: at most one per `min_interval_s`."""

    def __init__(self, min_interval_s: float):
        self.min_interval_s = min_interval_s
        self.last: float | None = None

    def allow(self, now: float) -> bool:
        if self.last is not None and now - self.last < self.min_interval_s:
            return False
        self.last = now
        return True


def returns_too_soon(topic: str, target: str, moved: Mapping[str, tuple[float, str]], now: float,
                     hold_s: float) -> str | None:
    """Why moving `topic` to `target` now would be ping-pong (None when it would not): `target` is
    the broker the topic left less than `hold_s` ago (`moved`: each topic's last migration, as
    (when, the broker it left))."""
    when, left = moved.get(topic, (float("-inf"), ""))
    if target == left and now - when < hold_s:
        return f"held: would return to {left}, which it left {now - when:.1f} s ago (hold {hold_s:g} s)"
    return None


def early_round(topics: Iterable[str], snapshot: Snapshot, policy: Policy, moved: Mapping[str, tuple[float, str]],
                now: float, hold_s: float, thresholds: Overload = Overload(),
                clients: Mapping[str, TopicClients] | None = None) -> tuple[list[Migration], dict[str, str]]:
    """An early round for the topics a handover concerns: those whose E(t) exceeds Lth(t) in the
    snapshot are placed as Algorithm 1's PlaceTopics would (`can_host` included), except a move back
    to the broker a topic left less than `hold_s` ago (`returns_too_soon`). Returns the migrations
    and, per concerned topic left where it is, why (held, not violated, not placed, no placement)."""
    placement = snapshot.placement
    why: dict[str, str] = {}
    candidates = []
    for topic in sorted(set(topics)):
        if topic not in placement:
            why[topic] = "not placed"
        elif not latency_violated(topic, snapshot):
            why[topic] = "E(t) within its threshold"
        else:
            candidates.append(topic)

    def check(b: str, t: str, p: Mapping[str, str], m: Snapshot) -> bool:
        return host_refusal(b, t, p, m, thresholds) is None

    result = place_topics(candidates, placement, snapshot, policy, check, clients)
    migrations = []
    for topic in candidates:
        if result[topic] == placement[topic]:
            why[topic] = "no better broker can host it"
        elif held := returns_too_soon(topic, result[topic], moved, now, hold_s):
            why[topic] = held
        else:
            migrations.append(Migration(topic, placement[topic], result[topic]))
    return migrations, why
