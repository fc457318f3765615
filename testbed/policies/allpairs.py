"""The AllPairs baseline (paper 5.5): ePulsar's ranking on every client's own coordinate, the worst
producer-consumer pair through each broker, instead of the topic's centroids. It needs the individual
coordinates (`TopicClients`), which ePulsar's reports do not carry: its monitoring traffic grows with
the number of clients (paper 3.2, 5.6)."""

from __future__ import annotations

from collections.abc import Mapping

from testbed.policies import latency
from testbed.policies.base import ranked, threshold_of
from testbed.policies.snapshot import Snapshot, TopicClients


class AllPairs:
    name = "allpairs"
    label = "AllPairs"
    latency_aware = True
    needs_clients = True

    def scores(self, topic: str, snapshot: Snapshot, clients: Mapping[str, TopicClients] | None) -> dict[str, float]:
        if clients is None or topic not in clients:
            raise ValueError(f"allpairs needs the individual client coordinates of topic {topic!r}")
        tc = clients[topic]
        producers = [c.coord for c in tc.producers]
        consumers = [c.coord for c in tc.consumers]
        return {b: latency.allpairs_worst(producers, consumers, r.coord, distance=snapshot.distance)
                for b, r in snapshot.brokers.items()}

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        return ranked(self.scores(topic, snapshot, clients), threshold_of(topic, snapshot))
