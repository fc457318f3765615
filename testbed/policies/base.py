"""What every broker selection policy is (paper 3.4: Algorithm 1 "provides an extensible framework
for implementing various policies"), and the ranking helpers the families share.

A policy only ranks brokers for one topic, best first: get_feasible_brokers_by_latency of
Algorithm 1, line 4. Which topics move, in what order and onto which broker that can take the load
is shared by every policy (testbed.policies.repartition, testbed.policies.overload).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

from testbed.policies.snapshot import Snapshot, TopicClients


@runtime_checkable
class Policy(Protocol):
    """One family of broker selection. `name` is what scenarios, the CLI and the topic manager call it
    (the registry, testbed.policies.registry, is the only list of names); `label` is how figures and
    reports print it."""

    name: str
    label: str
    latency_aware: bool  # whether a latency violation (E(t) > Lth(t)) makes Algorithm 1 move a topic
    needs_clients: bool  # whether it ranks on every client's own coordinate (brokers must report them)

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        """Candidate brokers for `topic`, best first."""
        ...


def threshold_of(topic: str, snapshot: Snapshot) -> float:
    """Lth(t); a topic without one never violates."""
    return snapshot.thresholds.get(topic, float("inf"))


def by_load(snapshot: Snapshot, brokers: Iterable[str]) -> list[str]:
    """Least loaded (reported output rate) first, ties by name."""
    return sorted(brokers, key=lambda b: (snapshot.brokers[b].rate_out, b))


def ranked(scores: dict[str, float], threshold: float) -> list[str]:
    """Paper 3.4.1: brokers with score <= threshold ranked by score (then name); all of them, ranked,
    if none is feasible."""
    order = sorted(scores, key=lambda b: (scores[b], b))
    feasible = [b for b in order if scores[b] <= threshold]
    return feasible or order
