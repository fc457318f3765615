"""Broker selection policies and the topic manager's Algorithm 1 (paper sections 3.3, 3.4, 5.5).

Everything here is a pure function of a `Snapshot` (the brokers' latest reports, the current
placement P0 and the topics' thresholds Lth(t)): the live topic manager calls
`perform_repartitioning` every monitoring period and executes the migrations it returns; the
offline assessment calls `choose_brokers` with the same policies.

A policy only ranks brokers for one topic (`Policy.feasible_brokers`, best first); Algorithm 1 (which
topics to move, in what order, onto which broker that can take the load) is shared:

- `epulsar`: W(t, b) from the topic's aggregated report (centroids and W(t)); feasible if
  W(t, b) <= Lth(t); ranked by W(t, b); all brokers ranked when none is feasible.
- `allpairs`: the same on every client's own coordinate (worst producer-consumer pair through b);
  it needs the individual coordinates (`TopicClients`), which ePulsar's reports do not carry.
- `pulsar-hash`: the topic name's hash decides (latency-agnostic); when that broker cannot take the
  load the others follow, least loaded first, as Pulsar sheds to less loaded brokers.

Extension points. Policies are looked up by name in `POLICIES`; a new one implements `Policy`.
The unit Algorithm 1 moves is an opaque name with a `TopicReport`: a bundle policy (Pulsar's bundles,
seed 001) reports each bundle as one TopicReport (centroids over all its topics' clients, summed
rates) and places bundles with the same functions. A client-moving policy (seed 004) implements
`Policy` for the broker side and adds its own step that moves clients between brokers; the
snapshot and reports here already carry what it needs (per-topic centroids, per-broker load).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from testbed.policies import latency
from testbed.policies.snapshot import Migration, Snapshot, TopicClients
from testbed.scenario.model import NATS_OUTPUT_RATE_THRESHOLD

CanHost = Callable[[str, str, Mapping[str, str], Snapshot], bool]


@dataclass(frozen=True)
class Overload:
    """Paper 3.4.2: a broker is overloaded when CPU, memory or network use exceeds 85 % (fractions
    here) or its aggregate output rate exceeds Rth_out (msg/s; calibrated for nats-server as the paper
    did for Pulsar in 5.4, see testbed.scenario.model.NATS_OUTPUT_RATE_THRESHOLD)."""

    cpu: float = 0.85
    memory: float = 0.85
    network: float = 0.85
    output_rate: float = NATS_OUTPUT_RATE_THRESHOLD

    @classmethod
    def from_config(cls, config) -> Overload:
        """From a scenario's `control.overload` (testbed.scenario.model.Overload) or any object with
        the same attributes."""
        return cls(float(config.cpu), float(config.memory), float(config.network), float(config.output_rate))


RESOURCES = ("cpu", "memory", "network")


@runtime_checkable
class Policy(Protocol):
    name: str
    latency_aware: bool  # whether a latency violation (E(t) > Lth(t)) makes Algorithm 1 move a topic

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        """Candidate brokers for `topic`, best first."""
        ...


def _threshold(topic: str, snapshot: Snapshot) -> float:
    return snapshot.thresholds.get(topic, float("inf"))


def _by_load(snapshot: Snapshot, brokers: Iterable[str]) -> list[str]:
    return sorted(brokers, key=lambda b: (snapshot.brokers[b].rate_out, b))


def _ranked(scores: dict[str, float], threshold: float) -> list[str]:
    """Brokers with score <= threshold ranked by score (then name); all of them if none is feasible."""
    ranked = sorted(scores, key=lambda b: (scores[b], b))
    feasible = [b for b in ranked if scores[b] <= threshold]
    return feasible or ranked


def hash_slot(topic: str, n: int) -> int:
    """Which of n equal slices of the 64-bit hash space the topic's name falls in: the first 8 bytes
    of SHA-1 (stable across processes and Python versions, unlike hash()) as a big-endian integer h,
    slot = floor(h * n / 2**64)."""
    h = int.from_bytes(hashlib.sha1(topic.encode()).digest()[:8], "big")
    return h * n >> 64


def hash_broker(topic: str, brokers: Iterable[str]) -> str:
    """The broker owning the topic's hash: slot `hash_slot` over the sorted broker names."""
    ordered = sorted(brokers)
    if not ordered:
        raise ValueError("no brokers")
    return ordered[hash_slot(topic, len(ordered))]


class PulsarHash:
    """Pulsar's placement as the paper models it (5.5): the hash of the topic name, the output space
    divided uniformly among the brokers. With a fixed broker set this is what Pulsar's bundles give;
    it is not a consistent-hashing ring (adding a broker moves most topics), which the paper's
    assessment never needs because the broker set is fixed per topology."""

    name = "pulsar-hash"
    latency_aware = False

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        first = hash_broker(topic, snapshot.brokers)
        return [first] + _by_load(snapshot, (b for b in snapshot.brokers if b != first))


class AllPairs:
    """Baseline of 5.5: every producer-consumer pair's estimate through each broker."""

    name = "allpairs"
    latency_aware = True

    def scores(self, topic: str, snapshot: Snapshot, clients: Mapping[str, TopicClients] | None) -> dict[str, float]:
        if clients is None or topic not in clients:
            raise ValueError(f"allpairs needs the individual client coordinates of topic {topic!r}")
        tc = clients[topic]
        producers = [c.coord for c in tc.producers]
        consumers = [c.coord for c in tc.consumers]
        return {b: latency.allpairs_worst(producers, consumers, r.coord) for b, r in snapshot.brokers.items()}

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        return _ranked(self.scores(topic, snapshot, clients), _threshold(topic, snapshot))


class EPulsar:
    """Paper 3.4.1: W(t, b) from the topic's aggregates. A topic nobody reports yet (no clients, so
    no coordinates) gets every broker, least loaded first."""

    name = "epulsar"
    latency_aware = True

    def scores(self, topic: str, snapshot: Snapshot) -> dict[str, float] | None:
        report = snapshot.report(topic)
        if report is None:
            return None
        return {b: latency.expected_w_tb(report, r.coord) for b, r in snapshot.brokers.items()}

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        scores = self.scores(topic, snapshot)
        if scores is None:
            return _by_load(snapshot, snapshot.brokers)
        return _ranked(scores, _threshold(topic, snapshot))


POLICIES: dict[str, Policy] = {p.name: p for p in (EPulsar(), AllPairs(), PulsarHash())}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


# --- Algorithm 1 ---------------------------------------------------------------------------------


def latency_violated(topic: str, snapshot: Snapshot) -> bool:
    """E(t) > Lth(t), as reported by the topic's broker; a topic with no producer or no consumer has
    no end-to-end path to violate. Only the owner's report counts: right after a migration the old
    broker's E(t) describes the old placement, so the topic waits for its new owner's report."""
    report = snapshot.report(topic)
    if report is None or report.producers == 0 or report.consumers == 0:
        return False
    if report.broker != snapshot.placement.get(topic, report.broker):
        return False
    return report.e > _threshold(topic, snapshot)


def overloaded_brokers(snapshot: Snapshot, thresholds: Overload = Overload()) -> list[str]:
    """Brokers with CPU, memory or network use above its threshold, or rate_out above Rth_out."""
    out = []
    for name, b in sorted(snapshot.brokers.items()):
        if (b.cpu > thresholds.cpu or b.memory > thresholds.memory or b.network > thresholds.network
                or b.rate_out > thresholds.output_rate):
            out.append(name)
    return out


def _hosted(broker: str, snapshot: Snapshot) -> list:
    """The reports of the topics this broker owns (in P0, or unplaced topics it reports)."""
    return [t for t in snapshot.brokers[broker].topics if snapshot.placement.get(t.topic, broker) == broker]


def topics_to_shed(broker: str, snapshot: Snapshot, thresholds: Overload = Overload()) -> list[str]:
    """Paper 3.4.3: the broker's topics in decreasing Rout(t) (incoming + outgoing message rate,
    `TopicReport.load`) until the overload is gone.

    - Output rate above Rth_out: shed until rate_out minus the shed topics' rate_out <= Rth_out.
    - A resource above its threshold: assuming resource use proportional to the broker's message
      rate (the paper's stated simplification: topics with equal rates load a broker equally), the
      target total rate is current_rate * threshold / use; shed until the remaining rate is at or
      below it.
    With several triggers, shedding continues until all are met. Returns [] when not overloaded.
    """
    b = snapshot.brokers[broker]
    hosted = sorted(_hosted(broker, snapshot), key=lambda t: (-t.load, t.topic))
    total = sum(t.load for t in hosted)
    load_targets = [total * getattr(thresholds, r) / getattr(b, r) for r in RESOURCES
                    if getattr(b, r) > getattr(thresholds, r)]
    shed: list[str] = []
    out, remaining = b.rate_out, total
    for report in hosted:
        if out <= thresholds.output_rate and all(remaining <= target for target in load_targets):
            break
        shed.append(report.topic)
        out -= report.rate_out
        remaining -= report.load
    return shed


def _resource_cost(snapshot: Snapshot, resource: str) -> float:
    """Cluster-average resource use per msg/s, for a broker that has no traffic to scale from."""
    ratios = [getattr(b, resource) / b.load for b in snapshot.brokers.values() if b.load > 0]
    return sum(ratios) / len(ratios) if ratios else 0.0


def can_host(broker: str, topic: str, placement: Mapping[str, str], snapshot: Snapshot,
             thresholds: Overload = Overload()) -> bool:
    """Would `broker` stay out of overload with the placement `placement` (P of Algorithm 1, holding
    the moves already decided this round) plus `topic`?

    Projected output rate = the part of the broker's reported rate_out that its topic reports do not
    account for + the rate_out of every topic P places on it, `topic` included; it must stay
    <= Rth_out. Projected resource use = use + cost * (projected message rate - current message rate)
    with message rate = sum of Rout(t) (in + out) of its topics and cost = use / current rate (use
    proportional to message rate, as in `topics_to_shed`), or the cluster's average cost for an idle
    broker; each must stay <= its threshold. Topics nobody reports count for nothing.
    """
    b = snapshot.brokers[broker]
    reports = snapshot.reports()
    here = {t for t, r in reports.items() if placement.get(t, r.broker) == broker} | {topic}
    unreported_out = max(0.0, b.rate_out - sum(t.rate_out for t in b.topics))
    out = unreported_out + sum(reports[t].rate_out for t in here if t in reports)
    load = sum(reports[t].load for t in here if t in reports)
    if out > thresholds.output_rate:
        return False
    for r in RESOURCES:
        use = getattr(b, r)
        cost = use / b.load if b.load > 0 else _resource_cost(snapshot, r)
        if use + cost * (load - b.load) > getattr(thresholds, r):
            return False
    return True


def place_topics(to_migrate: Iterable[str], placement: Mapping[str, str], snapshot: Snapshot, policy: Policy,
                 can_host: CanHost, clients: Mapping[str, TopicClients] | None = None) -> dict[str, str]:
    """PlaceTopics of Algorithm 1: rank candidates per topic, then in order of increasing number of
    candidates (ties by name) put each topic on its first candidate that can host it. A topic no
    candidate can host keeps its broker (P starts as a copy of P0)."""
    result = dict(placement)
    candidates = {t: policy.feasible_brokers(t, snapshot, clients) for t in to_migrate}
    for t in sorted(candidates, key=lambda t: (len(candidates[t]), t)):
        for b in candidates[t]:
            if can_host(b, t, result, snapshot):
                result[t] = b
                break
    return result


def perform_repartitioning(snapshot: Snapshot, policy: Policy, thresholds: Overload = Overload(),
                           clients: Mapping[str, TopicClients] | None = None) -> list[Migration]:
    """PerformRepartitioning of Algorithm 1: topics whose E(t) exceeds Lth(t) (latency-aware policies
    only) plus the topics shed by each overloaded broker, placed by `place_topics` with `can_host`;
    returns one Migration per topic whose broker changed, sorted by topic."""
    initial = snapshot.placement
    to_migrate: set[str] = set()
    if policy.latency_aware:
        to_migrate |= {t for t in initial if latency_violated(t, snapshot)}
    for broker in overloaded_brokers(snapshot, thresholds):
        to_migrate |= set(topics_to_shed(broker, snapshot, thresholds))

    def check(b: str, t: str, p: Mapping[str, str], m: Snapshot) -> bool:
        return can_host(b, t, p, m, thresholds)

    result = place_topics(sorted(to_migrate), initial, snapshot, policy, check, clients)
    return [Migration(t, initial[t], result[t]) for t in sorted(initial) if result.get(t, initial[t]) != initial[t]]


def choose_brokers(topics: Iterable[str], snapshot: Snapshot, policy: Policy,
                   clients: Mapping[str, TopicClients] | None = None) -> dict[str, str]:
    """Every topic on its policy's first-ranked broker, ignoring load: the initial placement of new
    topics and the latency-only assessment of paper 5.5."""
    return {t: policy.feasible_brokers(t, snapshot, clients)[0] for t in topics}
