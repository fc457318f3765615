"""Algorithm 1 of the paper (3.3): PerformRepartitioning and PlaceTopics, the same for every policy.

The live topic manager calls `perform_repartitioning` every monitoring period and executes the
migrations it returns; the offline assessment (5.5) calls `choose_brokers` with the same policies.

The unit Algorithm 1 moves is an opaque name with a `TopicReport`: a bundle policy (Pulsar's
bundles) reports each bundle as one TopicReport (centroids over all its topics' clients,
summed rates) and places bundles with the same functions. A client-moving policy (BAD's multistage
balancing) implements `Policy` for the broker side and adds its own step that moves
clients between brokers; the snapshot already carries what it needs (per-topic centroids,
per-broker load).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from testbed.policies.base import Policy, threshold_of
from testbed.policies.overload import Overload, host_refusal, overloaded_brokers, topics_to_shed
from testbed.policies.snapshot import Migration, Snapshot, TopicClients

CanHost = Callable[[str, str, Mapping[str, str], Snapshot], bool]


def latency_violated(topic: str, snapshot: Snapshot) -> bool:
    """latency_violated of Algorithm 1 (line 16): E(t) > Lth(t), as reported by the topic's broker; a
    topic with no producer or no consumer has no end-to-end path to violate. Only the owner's report
    counts: right after a migration the old broker's E(t) describes the old placement, so the topic
    waits for its new owner's report."""
    report = snapshot.report(topic)
    if report is None or report.producers == 0 or report.consumers == 0:
        return False
    if report.broker != snapshot.placement.get(topic, report.broker):
        return False
    return report.e > threshold_of(topic, snapshot)


def too_little_gain(topic: str, snapshot: Snapshot, policy: Policy, min_gain: float,
                    clients: Mapping[str, TopicClients] | None = None) -> bool:
    """Beyond the paper (`control.infeasible_min_gain`, seconds in the run's reading of d): whether a
    violating topic stays because no broker is feasible and the best one's score beats its own
    broker's by less than `min_gain`. Read literally, Algorithm 1 moves such a topic to whichever
    broker scores lowest, by any margin; with estimates that jitter by a millisecond or two, a topic
    no broker can serve within Lth(t) moved between two brokers of one city every other round (the
    MMOG case: 152 migrations of 64 topics in 55 s, ~20 at each round, each moving its clients). A
    move that cannot end the violation is made only when it gains at least `min_gain`."""
    scores = getattr(policy, "scores", None)
    current = snapshot.placement.get(topic)
    if min_gain <= 0 or scores is None:
        return False
    scores = scores(topic, snapshot, clients)
    if not scores or current not in scores:
        return False  # no estimate, or its broker is gone: Algorithm 1 decides
    best = min(scores.values())
    return best > threshold_of(topic, snapshot) and scores[current] - best < min_gain


def place_topics(to_migrate: Iterable[str], placement: Mapping[str, str], snapshot: Snapshot, policy: Policy,
                 can_host: CanHost, clients: Mapping[str, TopicClients] | None = None) -> dict[str, str]:
    """PlaceTopics of Algorithm 1 (lines 1-11): rank candidates per topic, then in order of increasing
    number of candidates (ties by name) put each topic on its first candidate that can host it. A
    topic no candidate can host keeps its broker (P starts as a copy of P0)."""
    result = dict(placement)
    candidates = {t: policy.feasible_brokers(t, snapshot, clients) for t in to_migrate}
    for t in sorted(candidates, key=lambda t: (len(candidates[t]), t)):
        for b in candidates[t]:
            if can_host(b, t, result, snapshot):
                result[t] = b
                break
    return result


def perform_repartitioning(snapshot: Snapshot, policy: Policy, thresholds: Overload = Overload(),
                           clients: Mapping[str, TopicClients] | None = None,
                           considered: dict[str, list[dict]] | None = None, min_gain: float = 0.0,
                           kept: set[str] | None = None) -> list[Migration]:
    """PerformRepartitioning of Algorithm 1 (lines 12-26): topics whose E(t) exceeds Lth(t)
    (latency-aware policies only) plus the topics shed by each overloaded broker, placed by
    `place_topics` with `can_host`; returns one Migration per topic whose broker changed, sorted by
    topic. `considered`, when given, gets every candidate asked per topic, in the policy's order:
    {"broker", "refused": why not (`host_refusal`) or None for the one chosen}. A violating topic
    `too_little_gain` keeps (`min_gain` > 0, beyond the paper) is added to `kept`, when given."""
    initial = snapshot.placement
    to_migrate: set[str] = set()
    if policy.latency_aware:
        violated = {t for t in initial if latency_violated(t, snapshot)}
        staying = {t for t in violated if too_little_gain(t, snapshot, policy, min_gain, clients)}
        to_migrate |= violated - staying
        if kept is not None:
            kept |= staying
    for broker in overloaded_brokers(snapshot, thresholds):
        to_migrate |= set(topics_to_shed(broker, snapshot, thresholds))

    def check(b: str, t: str, p: Mapping[str, str], m: Snapshot) -> bool:
        refused = host_refusal(b, t, p, m, thresholds)
        if considered is not None:
            considered.setdefault(t, []).append({"broker": b, "refused": refused})
        return refused is None

    result = place_topics(sorted(to_migrate), initial, snapshot, policy, check, clients)
    return [Migration(t, initial[t], result[t]) for t in sorted(initial) if result.get(t, initial[t]) != initial[t]]
