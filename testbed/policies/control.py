"""What the topic manager runs: a `Controller` per run, made by the policy family from the run's
options. It answers where a topic nobody owns goes (`assign`) and, every monitoring period, which
topics move (`round`).

Two kinds exist. `Algorithm1` is the paper's (3.3): stateless, a ranking policy (ePulsar, AllPairs,
hashing) inside PerformRepartitioning. A family with its own control loop and state (Pulsar's load
manager: bundles, load history, shedding; later BAD's coordinator) brings its own controller and may
require a migration workflow (`workflow`; None: the scenario's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from testbed.policies.base import Policy
from testbed.policies.initial import DEFAULT_INITIAL_PLACEMENT, unowned_broker
from testbed.policies.overload import Overload, overloaded_brokers, topics_to_shed
from testbed.policies.pulsar_lm.config import LoadManagerConfig
from testbed.policies.repartition import perform_repartitioning
from testbed.policies.snapshot import Decision, Snapshot, TopicClients


@dataclass(frozen=True)
class ControlOptions:
    """Everything a family may need to build its controller (each takes what it uses)."""

    overload: Overload = Overload()
    initial: str = DEFAULT_INITIAL_PLACEMENT
    default: str | None = None  # the cloud broker: where `cloud` start-up puts new topics
    seed: int = 0  # ties broken at random (Pulsar's placement) are drawn from it
    load_manager: LoadManagerConfig = LoadManagerConfig()
    infeasible_min_gain: float = 0.0  # beyond the paper: testbed.policies.repartition.too_little_gain (s)


class Controller(Protocol):
    workflow: str | None

    def assign(self, topic: str, snapshot: Snapshot, clients: Mapping[str, TopicClients] | None = None,
               asker: TopicClients | None = None) -> str:
        """The broker for `topic`, which nobody owns."""
        ...

    def round(self, snapshot: Snapshot, now: float, clients: Mapping[str, TopicClients] | None = None) -> Decision:
        """This period's migrations."""
        ...


class Algorithm1:
    """The paper's control loop around a ranking policy (testbed.policies.repartition)."""

    workflow = None

    def __init__(self, policy: Policy, options: ControlOptions):
        self.policy, self.options = policy, options

    def assign(self, topic: str, snapshot: Snapshot, clients: Mapping[str, TopicClients] | None = None,
               asker: TopicClients | None = None) -> str:
        return unowned_broker(topic, snapshot, self.policy, self.options.default or "", initial=self.options.initial,
                              clients=clients, asker=asker)

    def round(self, snapshot: Snapshot, now: float, clients: Mapping[str, TopicClients] | None = None) -> Decision:
        """Algorithm 1; each overloaded broker and the topics it sheds (3.4.3) are reported, each
        topic with where it goes (None: it stays) and the candidates the policy ranked for it, with
        why each one before the chosen was refused (a topic shed every round that never moves says
        why: every candidate over a threshold, or none ranked). Violating topics kept where they are
        because no move could end their violation and none gained `infeasible_min_gain` are reported
        as one `infeasible_kept` event."""
        limits = self.options.overload
        considered: dict[str, list[dict]] = {}
        kept: set[str] = set()
        migrations = perform_repartitioning(snapshot, self.policy, limits, clients=clients, considered=considered,
                                            min_gain=self.options.infeasible_min_gain, kept=kept)
        moved = {m.topic: m.target for m in migrations}
        shed = []
        for b in overloaded_brokers(snapshot, limits):
            topics = topics_to_shed(b, snapshot, limits)
            shed.append({"type": "overload_shed", "broker": b, "rate_out": snapshot.brokers[b].rate_out,
                         "topics": topics, "moved": {t: moved.get(t) for t in topics},
                         "candidates": {t: considered.get(t, []) for t in topics}})
        if kept:
            shed.append({"type": "infeasible_kept", "topics": sorted(kept),
                         "min_gain_s": self.options.infeasible_min_gain})
        return Decision(migrations, shed)


def controller_for(policy: Policy, options: ControlOptions) -> Controller:
    """The family's own controller when it has one, else Algorithm 1 around it."""
    make = getattr(policy, "controller", None)
    return make(options) if make is not None else Algorithm1(policy, options)


def choose_brokers(topics: Iterable[str], snapshot: Snapshot, policy: Policy,
                   clients: Mapping[str, TopicClients] | None = None, seed: int = 0) -> dict[str, str]:
    """Where each topic goes from nothing: a ranking policy's first-ranked broker, ignoring load (the
    initial placement of new topics and the latency-only assessment of paper 5.5); a family with
    its own controller assigns the topics in order from a fresh controller, nothing owned yet (Pulsar's
    leader placing bundles as their first topics are looked up, each new bundle counted at its
    default load)."""
    if getattr(policy, "controller", None) is None:
        return {t: policy.feasible_brokers(t, snapshot, clients)[0] for t in topics}
    fresh, empty = policy.controller(ControlOptions(seed=seed)), replace(snapshot, placement={})
    return {t: fresh.assign(t, empty, clients) for t in topics}
