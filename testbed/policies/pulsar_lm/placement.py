"""Where Pulsar's leader puts a bundle nobody owns ("Selecting a broker" in "Achieving Broker Load
Balancing with Apache Pulsar"; ModularLoadManagerImpl.selectBroker and its ModularLoadManagerStrategy).

First the candidates: with `distribute_evenly` (Pulsar's default) only the brokers owning the fewest
bundles of the namespace (LoadManagerShared.removeMostServicingBrokersForNamespace). Then the
strategy, ties broken at random with the run's seeded generator:

- LeastLongTermMessageRate (default): score = the broker's long-term message rate in + out plus
  that of the bundles assigned to it since its last report; a broker whose max resource use exceeds
  the overload threshold scores infinity; if every candidate does, all are tied.
- LeastResourceUsageWithWeight: the brokers whose smoothed weighted use is at least
  `usage_difference` below the candidates' average; all candidates when none is.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping

from testbed.policies.pulsar_lm.config import LoadManagerConfig
from testbed.policies.pulsar_lm.load import BrokerLoad


def fewest_bundles(candidates: Iterable[str], bundle_counts: Mapping[str, int]) -> list[str]:
    """The candidates owning the fewest bundles (removeMostServicingBrokersForNamespace)."""
    pool = sorted(candidates)
    if not pool:
        return []
    least = min(bundle_counts.get(b, 0) for b in pool)
    return [b for b in pool if bundle_counts.get(b, 0) == least]


def long_term_score(broker: BrokerLoad, long_term_rate: float, config: LoadManagerConfig) -> float:
    """LeastLongTermMessageRate.getScore: infinity when overloaded, else the long-term msg/s in + out
    (`long_term_rate`, preallocated bundles included)."""
    return math.inf if broker.max_usage > config.overload_threshold else long_term_rate


def least_long_term_message_rate(candidates: list[str], brokers: Mapping[str, BrokerLoad],
                                 long_term_rate: Mapping[str, float], config: LoadManagerConfig,
                                 rng: random.Random) -> str | None:
    scores = {b: long_term_score(brokers[b], long_term_rate.get(b, 0.0), config) for b in candidates}
    if not scores:
        return None
    best = min(scores.values())
    return rng.choice(sorted(b for b, s in scores.items() if s == best))


def least_resource_usage_with_weight(candidates: list[str], usage: Mapping[str, float], config: LoadManagerConfig,
                                     rng: random.Random) -> str | None:
    if not candidates:
        return None
    average = sum(usage.get(b, 1.0) for b in candidates) / len(candidates)
    best = [b for b in sorted(candidates) if usage.get(b, 1.0) + config.usage_difference <= average]
    return rng.choice(best or sorted(candidates))


def select_broker(candidates: Iterable[str], brokers: Mapping[str, BrokerLoad], bundle_counts: Mapping[str, int],
                  long_term_rate: Mapping[str, float], usage: Mapping[str, float], config: LoadManagerConfig,
                  rng: random.Random) -> str | None:
    """The broker for one bundle, or None without candidates."""
    pool = [b for b in candidates if b in brokers]
    if config.distribute_evenly:
        pool = fewest_bundles(pool, bundle_counts)
    if config.placement == "least_resource_usage_with_weight":
        return least_resource_usage_with_weight(pool, usage, config, rng)
    return least_long_term_message_rate(pool, brokers, long_term_rate, config, rng)
