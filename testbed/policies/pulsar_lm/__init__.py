"""Apache Pulsar's modular load manager ("Achieving Broker Load Balancing with Apache Pulsar";
shared/reference/pulsar-load-balancing.md) as a policy family, `pulsar-lm`: bundles (`bundles`), load
data (`load`), placement strategies (`placement`), shedders and the split rule (`shedding`), the
leader's state and rounds (`leader`), parameters (`config`). Unlike the paper's "Pulsar" baseline
(`pulsar-hash`, a fixed hash of the topic name), it balances load and ignores distance.
"""

from __future__ import annotations

from collections.abc import Mapping

from testbed.policies.base import by_load
from testbed.policies.pulsar_lm.config import LoadManagerConfig
from testbed.policies.pulsar_lm.leader import LoadManager
from testbed.policies.snapshot import Snapshot, TopicClients


class PulsarLoadManager:
    """Stateful: the topic manager runs its controller (`LoadManager`), which needs the `baseline`
    workflow (an unloaded bundle's clients disconnect and look their topics up again)."""

    name = "pulsar-lm"
    label = "Pulsar (load manager)"
    latency_aware = False
    needs_clients = False
    workflow = LoadManager.workflow

    def controller(self, options) -> LoadManager:
        return LoadManager(options.load_manager, options.seed)

    def feasible_brokers(self, topic: str, snapshot: Snapshot,
                         clients: Mapping[str, TopicClients] | None = None) -> list[str]:
        """Where a new leader with Pulsar's defaults would put the topic, then the rest by load."""
        first = LoadManager(LoadManagerConfig()).assign(topic, snapshot)
        return [first] + by_load(snapshot, (b for b in snapshot.brokers if b != first))


__all__ = ["PulsarLoadManager", "LoadManager", "LoadManagerConfig"]
