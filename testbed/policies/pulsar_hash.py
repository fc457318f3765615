"""The Pulsar baseline as the paper models it (5.5): the hash of the topic name, the hash's output
space divided uniformly among the brokers (latency-agnostic). When that broker cannot take the load
the others follow, least loaded first, as Pulsar sheds to less loaded brokers (3.1)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from testbed.policies.base import by_load
from testbed.policies.snapshot import Snapshot, TopicClients


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
    """With a fixed broker set this is what Pulsar's bundles give; it is not a consistent-hashing ring
    (adding a broker moves most topics), which the paper's assessment never needs because the broker
    set is fixed per topology."""

    name = "pulsar-hash"
    label = "Pulsar (hash)"
    latency_aware = False
    needs_clients = False

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        first = hash_broker(topic, snapshot.brokers)
        return [first] + by_load(snapshot, (b for b in snapshot.brokers if b != first))
