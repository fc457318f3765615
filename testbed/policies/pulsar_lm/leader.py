"""Pulsar's load manager as its leader broker runs it ("Achieving Broker Load Balancing with Apache
Pulsar"), on the testbed's snapshots: the bundles, who owns each, the load history, and each round's
splits and unloads.

`LoadManager.assign` answers a lookup of a topic nobody owns (the bundle's owner, or a broker chosen
for the bundle by the placement strategy); `LoadManager.round` runs every monitoring period: it
updates the time averages and, every `shedding_interval`, splits hot bundles and runs the shedder.
An unloaded bundle's topics all move to the broker the strategy picks for the bundle (Pulsar 3.x
picks the destination when it unloads and skips a bundle whose destination is its owner); the topic
manager executes them with the `baseline` workflow (clients disconnect and look up again).

State kept between rounds, as Pulsar's leader keeps it: bundle boundaries, bundle -> broker
assignments (ours: the leader's own record, filled from observed topic ownership for bundles it has
not assigned, e.g. after a leader change), per-topic short- and long-term averages, the smoothed
use per broker, and when each bundle was last unloaded.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

from testbed.policies.pulsar_lm.bundles import Bundles
from testbed.policies.pulsar_lm.config import LoadManagerConfig
from testbed.policies.pulsar_lm.load import BrokerLoad, Rates, TimeAverage
from testbed.policies.pulsar_lm.placement import select_broker
from testbed.policies.pulsar_lm.shedding import (Unload, bundles_to_split, overload_shedder, smoothed_usage,
                                              threshold_shedder, uniform_load_shedder)
from testbed.policies.snapshot import Decision, Migration, Snapshot, TopicClients


class LoadManager:
    workflow = "baseline"  # an unloaded bundle's clients disconnect and look their topics up again

    def __init__(self, config: LoadManagerConfig = LoadManagerConfig(), seed: int = 0):
        self.config = config
        self.rng = random.Random(seed)
        self.bundles = Bundles.equal(config.bundles)
        self.assigned: dict[str, str] = {}
        self.pending: set[str] = set()  # assigned (at a lookup or an unload), no topic of it at its broker yet
        self.short: dict[str, TimeAverage] = {}
        self.long: dict[str, TimeAverage] = {}
        self.shedder_usage: dict[str, float] = {}  # ThresholdShedder's history, updated when it runs
        self.placement_usage: dict[str, float] = {}  # LeastResourceUsageWithWeight's, updated every round
        self.unloaded_at: dict[str, float] = {}
        self.last_shedding: float | None = None

    # -- what the leader knows -------------------------------------------------------------------
    def _refresh(self, snapshot: Snapshot) -> None:
        """Forget dead brokers' assignments and bundles with no topic (an empty bundle is owned by
        nobody until a lookup lands in it), unless preallocated; adopt the observed owner of a bundle
        it has not assigned. A preallocated bundle stays so until one of its topics is seen at its
        broker: an unloaded bundle's topics are all released before the destination acquires them,
        and a lookup in between must get the destination, not a new choice (one such lookup once
        left the record naming another broker than the one that owned the topics, and the shedder
        then found the hot broker's own bundles "already" elsewhere)."""
        observed: dict[str, Counter] = {}
        for topic, broker in snapshot.placement.items():
            observed.setdefault(self.bundles.bundle_of(topic), Counter())[broker] += 1
        self.pending -= {b for b, counts in observed.items() if self.assigned.get(b) in counts}
        self.assigned = {b: o for b, o in self.assigned.items()
                         if o in snapshot.brokers and (b in observed or b in self.pending)}
        for bundle, counts in observed.items():
            if bundle not in self.assigned:
                self.assigned[bundle] = min(counts, key=lambda b: (-counts[b], b))

    def _bundle_topics(self, snapshot: Snapshot) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for topic in sorted(snapshot.placement):
            out.setdefault(self.bundles.bundle_of(topic), []).append(topic)
        return out

    def _sum(self, averages: Mapping[str, TimeAverage], topics) -> Rates:
        return Rates.total(averages[t].value for t in topics if t in averages)

    def broker_loads(self, snapshot: Snapshot) -> dict[str, BrokerLoad]:
        reports = snapshot.reports()
        return {name: BrokerLoad.of(report, [reports[t] for t, b in snapshot.placement.items() if b == name and t in reports])
                for name, report in snapshot.brokers.items()}

    def owned(self, snapshot: Snapshot) -> dict[str, list[str]]:
        """broker -> bundles assigned to it (with topics, or preallocated)."""
        out: dict[str, list[str]] = {b: [] for b in snapshot.brokers}
        for bundle, broker in sorted(self.assigned.items()):
            out.setdefault(broker, []).append(bundle)
        return out

    def _long_term_rate(self, snapshot: Snapshot) -> dict[str, float]:
        """Each broker's long-term msg/s in + out: its bundles' topics, and the default rate for a
        bundle assigned to it with no topic reported yet (Pulsar's preallocated bundle data)."""
        topics = self._bundle_topics(snapshot)
        out: dict[str, float] = {}
        for bundle, broker in self.assigned.items():
            rate = self._sum(self.long, topics.get(bundle, ())).rate
            reported = any(t in self.long for t in topics.get(bundle, ()))
            out[broker] = out.get(broker, 0.0) + (rate if reported else 2 * self.config.default_bundle_rate)
        return out

    def ownership(self) -> dict:
        """The bundles and their owners, as the leader records them in ZooKeeper."""
        return {"policy": "pulsar-lm", "bundles": self.bundles.names(), "assigned": dict(sorted(self.assigned.items()))}

    def restore(self, state: dict) -> None:
        """Take over a previous leader's record (`ownership`); its averages start again."""
        if state.get("policy") == "pulsar-lm" and state.get("bundles"):
            self.bundles = Bundles.from_names(state["bundles"])
            self.assigned = {b: o for b, o in state.get("assigned", {}).items() if b in set(self.bundles.names())}
            self.pending = set(self.assigned)  # until the next round sees their topics

    # -- placement -------------------------------------------------------------------------------
    def _select(self, snapshot: Snapshot) -> str | None:
        counts = {b: len(bs) for b, bs in self.owned(snapshot).items()}
        return select_broker(snapshot.brokers, self.broker_loads(snapshot), counts, self._long_term_rate(snapshot),
                             self.placement_usage, self.config, self.rng)

    def assign(self, topic: str, snapshot: Snapshot, clients: Mapping[str, TopicClients] | None = None,
               asker: TopicClients | None = None) -> str:
        """The broker for a topic nobody owns: its bundle's, else one chosen for the bundle now."""
        self._refresh(snapshot)
        bundle = self.bundles.bundle_of(topic)
        if bundle not in self.assigned:
            chosen = self._select(snapshot)
            if chosen is None:
                raise ValueError("no brokers")
            self.assigned[bundle] = chosen
            self.pending.add(bundle)
        return self.assigned[bundle]

    # -- the periodic round ----------------------------------------------------------------------
    def round(self, snapshot: Snapshot, now: float, clients: Mapping[str, TopicClients] | None = None) -> Decision:
        self._refresh(snapshot)
        reports = snapshot.reports()
        for topic in snapshot.placement:
            if topic in reports:
                sample = Rates.of(reports[topic])
                self.short.setdefault(topic, TimeAverage(self.config.short_samples)).update(sample)
                self.long.setdefault(topic, TimeAverage(self.config.long_samples)).update(sample)
        loads = self.broker_loads(snapshot)
        smoothed_usage(loads, self.placement_usage, self.config)
        decision = Decision()
        if self.last_shedding is not None and now - self.last_shedding < self.config.shedding_interval:
            return decision
        self.last_shedding = now
        grace = {b for b, at in self.unloaded_at.items() if now - at < self.config.grace_period}
        if self.config.auto_split:
            self._split(snapshot, now, grace, decision)
        self._shed(snapshot, loads, now, grace, decision)
        return decision

    def _split(self, snapshot: Snapshot, now: float, grace: set[str], decision: Decision) -> None:
        topics = self._bundle_topics(snapshot)
        reports = snapshot.reports()
        sessions = {b: sum(reports[t].producers + reports[t].consumers for t in ts if t in reports)
                    for b, ts in topics.items()}
        long_term = {b: self._sum(self.long, ts) for b, ts in topics.items()}
        for split in bundles_to_split(topics, sessions, long_term, len(self.bundles), self.config):
            owner = self.assigned.get(split.bundle)
            after = self.bundles.split(split.bundle, self.config.split_algorithm, topics[split.bundle])
            if after == self.bundles or owner is None:
                continue
            before = set(self.bundles.names())
            self.bundles = after
            halves = sorted(set(after.names()) - before)
            del self.assigned[split.bundle]
            for half in halves:
                if any(self.bundles.bundle_of(t) == half for t in topics[split.bundle]):
                    self.assigned[half] = owner
            decision.events.append({"type": "bundle_split", "bundle": split.bundle, "into": halves, "broker": owner,
                                    "reason": split.reason, "bundles": len(after)})
            if self.config.unload_split_bundles:
                for half in (h for h in halves if h in self.assigned):
                    self._unload(Unload(owner, half, f"split of {split.bundle}"), snapshot, now, decision, "split")
                    grace.add(half)

    def _shed(self, snapshot: Snapshot, loads: dict[str, BrokerLoad], now: float, grace: set[str],
              decision: Decision) -> None:
        topics = self._bundle_topics(snapshot)
        owned = {b: [x for x in bs if x in topics] for b, bs in self.owned(snapshot).items()}
        short_term = {b: self._sum(self.short, ts) for b, ts in topics.items()}
        reports = snapshot.reports()
        last = {b: Rates.total(Rates.of(reports[t]) for t in ts if t in reports) for b, ts in topics.items()}
        shedder = self.config.shedder
        if shedder == "threshold":
            usage = smoothed_usage(loads, self.shedder_usage, self.config)
            average = sum(usage.values()) / len(usage) if usage else 0.0
            decision.events.append({"type": "lm_usage", "shedder": shedder, "average": average,
                                    "brokers": {b: {"usage": usage[b], "max_usage": loads[b].max_usage,
                                                    "bundles": len(owned.get(b, ()))} for b in sorted(usage)}})
            unloads = threshold_shedder(loads, usage, owned, short_term, grace, self.config)
        elif shedder == "overload":
            unloads = overload_shedder(loads, owned, last, grace, self.config)
        else:
            unloads = uniform_load_shedder(loads, owned, short_term, grace, self.config)
        for unload in unloads:
            self._unload(unload, snapshot, now, decision, shedder)

    def _unload(self, unload: Unload, snapshot: Snapshot, now: float, decision: Decision, by: str) -> None:
        """Pick the bundle's destination now (its owner still counting it, as Pulsar's load data does)
        and move its topics."""
        target = self._select(snapshot)
        if target is None or target == unload.broker:
            decision.events.append({"type": "bundle_unload_skipped", "bundle": unload.bundle, "broker": unload.broker,
                                    "by": by, "reason": "the destination is the owner"})
            return
        self.assigned[unload.bundle] = target
        self.pending.add(unload.bundle)
        self.unloaded_at[unload.bundle] = now
        moved = [t for t, b in sorted(snapshot.placement.items())
                 if b == unload.broker and self.bundles.bundle_of(t) == unload.bundle]
        decision.migrations += [Migration(t, unload.broker, target) for t in moved]
        decision.events.append({"type": "bundle_unload", "bundle": unload.bundle, "from_broker": unload.broker,
                                "to_broker": target, "topics": moved, "by": by, "reason": unload.reason})
