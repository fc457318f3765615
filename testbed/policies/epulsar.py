"""ePulsar's broker selection (paper 3.4.1): rank brokers by W(t, b), the expected worst-case
end-to-end latency through b computed from the topic's aggregated report (producer and consumer
centroids and W(t), paper 3.2); feasible if W(t, b) <= Lth(t), all brokers ranked when none is."""

from __future__ import annotations

from collections.abc import Mapping

from testbed.policies import latency
from testbed.policies.base import by_load, ranked, threshold_of
from testbed.policies.snapshot import Snapshot, TopicClients


class EPulsar:
    """A topic nobody reports yet (no clients, so no coordinates) gets every broker, least loaded first."""

    name = "epulsar"
    label = "ePulsar"
    latency_aware = True
    needs_clients = False

    def scores(self, topic: str, snapshot: Snapshot,
               clients: Mapping[str, TopicClients] | None = None) -> dict[str, float] | None:
        report = snapshot.report(topic)
        if report is None:
            return None
        return {b: latency.expected_w_tb(report, r.coord, distance=snapshot.distance) for b, r in snapshot.brokers.items()}

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        scores = self.scores(topic, snapshot)
        if scores is None:
            return by_load(snapshot, snapshot.brokers)
        return ranked(scores, threshold_of(topic, snapshot))
