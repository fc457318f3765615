"""Broker overload (paper 3.4.2), which topics an overloaded broker sheds (3.4.3) and whether a
broker can take a topic (can_host of Algorithm 1, line 8): the load side of Algorithm 1, shared by
every policy.

The thresholds have their one home here: the scenario schema (`control.overload`) takes its
defaults from `Overload()`, and the topic manager's command line is `Overload.add_arguments` /
`Overload.to_argv`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from testbed.policies.snapshot import Snapshot, TopicReport

# Rth_out for one nats-server broker behind the emulated network on a 2-core VM: the knee of
# `make bench-overload` (p95 latency against output rate, docs/results/2026-11-harness.md). The
# paper's 1.5M msg/s was Pulsar's on 8-CPU VMs (5.4); recalibrate on other machines and set
# control.overload.output_rate.
NATS_OUTPUT_RATE_THRESHOLD = 20_000.0

RESOURCES = ("cpu", "memory", "network")

_HELP = {"cpu": "CPU use (fraction) above which a broker is overloaded",
         "memory": "memory use (fraction) above which a broker is overloaded",
         "network": "network use (fraction) above which a broker is overloaded",
         "output_rate": "Rth_out, msg/s"}


@dataclass(frozen=True)
class Overload:
    """Paper 3.4.2: a broker is overloaded when CPU, memory or network use exceeds 85 % (fractions
    here, "same as Pulsar") or its aggregate output rate exceeds Rth_out (msg/s; calibrated for
    nats-server as the paper did for Pulsar in 5.4, see NATS_OUTPUT_RATE_THRESHOLD)."""

    cpu: float = 0.85
    memory: float = 0.85
    network: float = 0.85
    output_rate: float = NATS_OUTPUT_RATE_THRESHOLD

    @classmethod
    def from_config(cls, config) -> Overload:
        """From a scenario's `control.overload`, parsed command-line arguments (`add_arguments`) or any
        object with the same attributes."""
        return cls(*(float(getattr(config, f.name)) for f in fields(cls)))

    @classmethod
    def add_arguments(cls, parser) -> None:
        """--cpu, --memory, --network, --output-rate on an argparse parser, defaulting to `Overload()`."""
        for f in fields(cls):
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=float, default=f.default, help=_HELP[f.name])

    def to_argv(self) -> list[str]:
        """The command-line form `add_arguments` reads back (exact: repr of each float)."""
        return [part for f in fields(self) for part in (f"--{f.name.replace('_', '-')}", repr(getattr(self, f.name)))]


def overloaded_brokers(snapshot: Snapshot, thresholds: Overload = Overload()) -> list[str]:
    """get_overloaded_brokers (Algorithm 1, line 18): brokers with CPU, memory or network use above its
    threshold, or rate_out above Rth_out."""
    out = []
    for name, b in sorted(snapshot.brokers.items()):
        if (b.cpu > thresholds.cpu or b.memory > thresholds.memory or b.network > thresholds.network
                or b.rate_out > thresholds.output_rate):
            out.append(name)
    return out


def _hosted(broker: str, snapshot: Snapshot) -> list[TopicReport]:
    """The reports of the topics this broker owns (in P0, or unplaced topics it reports)."""
    return [t for t in snapshot.brokers[broker].topics if snapshot.placement.get(t.topic, broker) == broker]


def topics_to_shed(broker: str, snapshot: Snapshot, thresholds: Overload = Overload()) -> list[str]:
    """get_topics_to_migrate (Algorithm 1, line 20; paper 3.4.3): the broker's topics in decreasing
    Rout(t) (incoming + outgoing message rate, `TopicReport.load`) until the overload is gone.

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


def host_refusal(broker: str, topic: str, placement: Mapping[str, str], snapshot: Snapshot,
                 thresholds: Overload = Overload()) -> str | None:
    """Why `broker` cannot host `topic` (can_host of Algorithm 1, line 8: would it stay out of overload
    with the placement `placement`, P, holding the moves already decided this round, plus `topic`?),
    or None when it can. The reason names the projected value and its threshold, so a topic that an
    overloaded broker sheds but that never moves says why in the run's events.

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
        return f"output rate {out:.0f} msg/s > Rth_out {thresholds.output_rate:.0f}"
    for r in RESOURCES:
        use = getattr(b, r)
        cost = use / b.load if b.load > 0 else _resource_cost(snapshot, r)
        projected = use + cost * (load - b.load)
        if projected > getattr(thresholds, r):
            return f"{r} {projected:.2f} > {getattr(thresholds, r):.2f}"
    return None


def can_host(broker: str, topic: str, placement: Mapping[str, str], snapshot: Snapshot,
             thresholds: Overload = Overload()) -> bool:
    """can_host of Algorithm 1 (line 8): `host_refusal` finds no reason."""
    return host_refusal(broker, topic, placement, snapshot, thresholds) is None
