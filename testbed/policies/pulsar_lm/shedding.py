"""Which bundles Pulsar's leader unloads from which brokers ("Shedding" in "Achieving Broker Load
Balancing with Apache Pulsar"; the LoadSheddingStrategy implementations of the modular load manager),
and which bundles it splits.

Every function is pure: the brokers' loads, each bundle's rates, who owns what, and the bundles in
their grace period (recently unloaded) in; (broker, bundle, why) out. A broker owning a single
bundle never sheds it (Pulsar logs "HIGH USAGE WARNING" instead), and a bundle in its grace period
is skipped.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from testbed.policies.pulsar_lm.config import LoadManagerConfig
from testbed.policies.pulsar_lm.load import BrokerLoad, Rates

MARGIN = 0.05  # ADDITIONAL_THRESHOLD_PERCENT_MARGIN: shed a little past the threshold


@dataclass(frozen=True)
class Unload:
    broker: str
    bundle: str
    reason: str


def smoothed_usage(brokers: Mapping[str, BrokerLoad], history: dict[str, float], config: LoadManagerConfig) -> dict[str, float]:
    """ThresholdShedder's updateAvgResourceUsage for every broker: history * previous + (1 - history) *
    weighted max use (the first sample as is). Updates `history` in place and returns it."""
    for name, broker in brokers.items():
        now = broker.weighted_usage(config)
        before = history.get(name)
        history[name] = now if before is None else config.history * before + (1 - config.history) * now
    for gone in set(history) - set(brokers):
        del history[gone]
    return history


def _largest_first(broker: str, owned: Collection[str], rates: Mapping[str, Rates], needed: float, grace: Collection[str],
                   reason: str, key=lambda r: r.throughput) -> list[Unload]:
    """The broker's bundles, highest `key` first and outside their grace period, until at least
    `needed` is marked, and at least one (the loop both shedders share)."""
    marked, out = 0.0, []
    for bundle in sorted((b for b in owned if b not in grace), key=lambda b: (-key(rates.get(b, Rates())), b)):
        if marked >= needed and out:
            break
        out.append(Unload(broker, bundle, reason))
        marked += key(rates.get(bundle, Rates()))
    return out


def threshold_shedder(brokers: Mapping[str, BrokerLoad], usage: Mapping[str, float], owned: Mapping[str, Collection[str]],
                      short_term: Mapping[str, Rates], grace: Collection[str], config: LoadManagerConfig) -> list[Unload]:
    """ThresholdShedder (Pulsar's default since 2.10): a broker whose smoothed use is at least the
    average + `threshold` sheds (use - average - threshold + 5 %) of its throughput, highest
    short-term throughput bundles first; nothing when that is under `min_unload_throughput`."""
    if not usage:
        return []
    average = sum(usage.values()) / len(usage)
    if average == 0:
        return []
    out = []
    for name in sorted(brokers):
        current = usage.get(name, 0.0)
        if current < average + config.threshold or len(owned.get(name, ())) < 2:
            continue
        share = current - average - config.threshold + MARGIN
        needed = brokers[name].current.throughput * share
        if needed < config.min_unload_throughput:
            continue
        out += _largest_first(name, owned[name], short_term, needed, grace,
                              f"use {current:.2f} >= average {average:.2f} + {config.threshold:.2f}")
    return out


def overload_shedder(brokers: Mapping[str, BrokerLoad], owned: Mapping[str, Collection[str]], last: Mapping[str, Rates],
                     grace: Collection[str], config: LoadManagerConfig) -> list[Unload]:
    """OverloadShedder (the default before 2.10): a broker whose max resource use is at least the
    overload threshold sheds (use - threshold + 5 %) of its throughput, highest last-report
    throughput bundles first."""
    out = []
    for name in sorted(brokers):
        current = brokers[name].max_usage
        if current < config.overload_threshold or len(owned.get(name, ())) < 2:
            continue
        needed = brokers[name].current.throughput * (current - config.overload_threshold + MARGIN)
        out += _largest_first(name, owned[name], last, needed, grace,
                              f"max use {current:.2f} >= {config.overload_threshold:.2f}")
    return out


def uniform_load_shedder(brokers: Mapping[str, BrokerLoad], owned: Mapping[str, Collection[str]],
                         short_term: Mapping[str, Rates], grace: Collection[str], config: LoadManagerConfig) -> list[Unload]:
    """UniformLoadShedder: compare the busiest broker (highest message rate or throughput) with the
    idlest; when the rate differs by more than `uniform_rate_difference` (relative to the idlest) or
    the throughput by more than `uniform_throughput_multiplier` times, unload from the busiest
    bundles that fit in `uniform_max_unload` of the difference (by rate when the rate rule fired,
    else by throughput; Pulsar lets a bundle exceed the rate budget by 1000 msg/s, scaled here to
    `uniform_min_unload_rate`), if that budget reaches the minimum unload."""
    if len(brokers) < 2:
        return []
    busiest = idlest = None
    high_rate = high_bytes = -1.0
    low_rate = low_bytes = float("inf")
    for name in sorted(brokers):  # Pulsar's single pass: either quantity can make a broker the busiest
        rates = brokers[name].current
        if rates.rate > high_rate or rates.throughput > high_bytes:
            busiest, high_rate, high_bytes = name, rates.rate, rates.throughput
        if rates.rate < low_rate or rates.throughput < low_bytes:
            idlest, low_rate, low_bytes = name, rates.rate, rates.throughput
    low_rate, low_bytes = low_rate or 1.0, low_bytes or 1.0  # Pulsar's guard against dividing by zero
    by_rate = config.uniform_rate_difference > 0 and (high_rate - low_rate) / low_rate > config.uniform_rate_difference
    by_bytes = config.uniform_throughput_multiplier > 0 and high_bytes / low_bytes > config.uniform_throughput_multiplier
    if not (by_rate or by_bytes) or busiest == idlest or len(owned.get(busiest, ())) < 2:
        return []
    rate_budget = (high_rate - low_rate) * config.uniform_max_unload
    bytes_budget = (high_bytes - low_bytes) * config.uniform_max_unload
    if rate_budget < config.uniform_min_unload_rate and bytes_budget < config.uniform_min_unload_throughput:
        return []
    reason = (f"rate {high_rate:.0f} vs {low_rate:.0f} msg/s at {idlest}" if by_rate
              else f"throughput {high_bytes:.0f} vs {low_bytes:.0f} B/s at {idlest}")
    out = []
    key = (lambda r: r.rate) if by_rate else (lambda r: r.throughput)
    for bundle in sorted((b for b in owned[busiest] if b not in grace), key=lambda b: (-key(short_term.get(b, Rates())), b)):
        value = key(short_term.get(bundle, Rates()))
        if by_rate and value <= rate_budget + config.uniform_min_unload_rate:
            out.append(Unload(busiest, bundle, reason))
            rate_budget -= value
        elif not by_rate and value <= bytes_budget:
            out.append(Unload(busiest, bundle, reason))
            bytes_budget -= value
    return out


@dataclass(frozen=True)
class Split:
    bundle: str
    reason: str


def bundles_to_split(bundle_topics: Mapping[str, Collection[str]], sessions: Mapping[str, int],
                     long_term: Mapping[str, Rates], bundle_count: int, config: LoadManagerConfig) -> list[Split]:
    """BundleSplitterTask: a bundle with two or more topics that exceeds the topics, sessions
    (producers + consumers), long-term message rate or long-term throughput limit, while the
    namespace stays under `max_bundles`, in name order."""
    out = []
    for bundle in sorted(bundle_topics):
        topics = len(bundle_topics[bundle])
        if topics < 2:
            continue
        rates = long_term.get(bundle, Rates())
        over = [what for what, hit in (
            (f"topics {topics} > {config.split_max_topics}", topics > config.split_max_topics),
            (f"sessions {sessions.get(bundle, 0)} > {config.split_max_sessions}",
             config.split_max_sessions > 0 and sessions.get(bundle, 0) > config.split_max_sessions),
            (f"rate {rates.rate:.0f} > {config.split_max_rate:.0f} msg/s", rates.rate > config.split_max_rate),
            (f"throughput {rates.throughput:.0f} > {config.split_max_throughput:.0f} B/s",
             rates.throughput > config.split_max_throughput)) if hit]
        if over and bundle_count + len(out) < config.max_bundles:
            out.append(Split(bundle, "; ".join(over)))
    return out
