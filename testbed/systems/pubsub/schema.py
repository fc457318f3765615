"""The pub/sub system's part of the scenario schema: the hot-spot block and the checks of each kind,
and the topic manager's `control` keys (testbed/systems/pubsub/manifest.py declares them).

UAV swarms (paper 5.1) and the MMOG (paper 5.8.2) need only the core workload keys (a rate per
publisher, topic classes with thresholds; the MMOG also avatars and groups); the hot spot adds its
Zipf-ranked topics, its hot site and a surge. The control keys are ePulsar's (Algorithm 1, the
policy, the migration workflow, the overload thresholds) and Pulsar's load manager's: no other
system reads them, so they are this folder's, not the core's.
"""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from typing import Annotated, Literal

from pydantic import Field, create_model, model_validator

from testbed.policies.handover import POLL_MIN_S, HandoverTrigger as TriggerConfig
from testbed.policies.overload import Overload as OverloadThresholds
from testbed.policies.pulsar_lm.config import PULSAR_CAPACITIES as LM_CAPACITIES
from testbed.policies.pulsar_lm.config import UNITS as LM_UNITS
from testbed.policies.pulsar_lm.config import LoadManagerConfig
from testbed.scenario.fields import Count, Duration, Fraction, Name, PositiveDuration, Rate, Size, Strict


class Surge(Strict):
    """At `at` into the run, the `topics` most popular topics of the hot site each gain `publishers`
    extra publishers (same rate, on the topic's publisher's node): load ramps up mid-run."""

    at: PositiveDuration
    topics: Count
    publishers: Count


HOTSPOT_CLASS = "hot"  # hot-spot topics are `hot-<rank>`: their class (and threshold) is `hot`


class Hotspot(Strict):
    """Topics `hot-1..hot-N` whose rates follow Zipf's law (rank k publishes at workload.rate / k**zipf),
    each with `subscribers` subscribers. A `hot_share` of the topics (drawn with the seed) has its
    publisher and subscribers all on the client nodes of `hot_site` (a stadium, an event); the others
    on client nodes drawn over every edge site. `surge` ramps the hot site's load up mid-run."""

    topics: Annotated[int, Field(ge=1, le=10_000)]
    zipf: Annotated[float, Field(ge=0, le=10)] = 1.0
    subscribers: Annotated[int, Field(ge=1, le=1_000)] = 2
    hot_site: Name
    hot_share: Fraction = 0.5
    surge: Surge | None = None

    def hot_topics(self) -> int:
        """How many topics live at the hot site."""
        return round(self.hot_share * self.topics)

    @model_validator(mode="after")
    def _surge_fits(self) -> Hotspot:
        if self.surge is not None and self.surge.topics > self.hot_topics():
            raise ValueError(f"surge.topics ({self.surge.topics}) exceeds the hot site's topics "
                             f"({self.hot_topics()} = hot_share x topics)")
        return self


def needs_rate_and_topics(workload) -> None:
    """Every pub/sub workload publishes at a rate, on topic classes that each have a threshold."""
    if workload.rate is None:
        raise ValueError(f"workload kind {workload.kind!r} needs a rate such as '200/s'")
    if not workload.topics:
        raise ValueError(f"workload kind {workload.kind!r} needs topics, each with a threshold")


def hotspot_topics(workload) -> None:
    needs_rate_and_topics(workload)
    if HOTSPOT_CLASS not in {t.name for t in workload.topics}:
        raise ValueError(f"hot-spot topics are named {HOTSPOT_CLASS}-<rank>: topics needs "
                         f"{{name: {HOTSPOT_CLASS}, threshold: ...}}")


class HandoverTrigger(Strict):
    """Beyond the paper, off by default (testbed.policies.handover): a client that is handed over
    (its coordinate moved by more than `min_change`, in the run's reading of d, since it last acted;
    it looks every `poll`) reports at once, at most once per `min_interval`; its broker writes its
    report and the topic manager runs an early round for the topics concerned, never moving a topic
    back to the broker it left less than `hold` ago (no ping-pong on a zone border; a swarm that goes
    on to a third zone is followed at once). A subscription an MMOG
    group change opens reports at once too. The periodic round stays the backstop."""

    enabled: bool = False
    min_change: PositiveDuration = 0.005
    poll: PositiveDuration = 0.5
    min_interval: PositiveDuration = 1.0
    hold: Duration = 10.0

    @model_validator(mode="after")
    def _no_storm(self) -> HandoverTrigger:
        if self.poll < POLL_MIN_S:
            raise ValueError(f"poll ({1e3 * self.poll:g}ms) below {1e3 * POLL_MIN_S:g}ms would make every client "
                             "query its NC proxy as a load generator")
        if self.min_interval < self.poll:
            raise ValueError(f"min_interval ({self.min_interval:g}s) shorter than poll ({self.poll:g}s): a client "
                             "can only report as often as it looks")
        return self

    def config(self) -> TriggerConfig:
        return TriggerConfig(self.enabled, self.min_change, self.poll, self.min_interval, self.hold)

ZOOKEEPER, MANAGER = "zookeeper", "manager"  # the parts a fault may kill beside nodes (the manifest's fault_targets)


class Migration(Strict):
    workflow: Literal["enhanced", "baseline"] = "enhanced"
    executors: Annotated[int, Field(ge=1, le=256)] = 16


_OVERLOAD = OverloadThresholds()


class Overload(Strict):
    """Broker overload thresholds (paper 3.4.2) with units; the defaults are the policies' own
    (testbed.policies.overload, where Rth_out for nats-server is explained)."""

    cpu: Fraction = _OVERLOAD.cpu
    memory: Fraction = _OVERLOAD.memory
    network: Fraction = _OVERLOAD.network
    output_rate: Rate = _OVERLOAD.output_rate


def _pulsar_lm_model() -> type[Strict]:
    """`control.pulsar_lm`: every parameter of Pulsar's load manager, with the units a scenario writes
    and the defaults of testbed.policies.pulsar_lm.config. The capacities default to None: Pulsar's
    values at the same share of the run's Rth_out (`load_manager`)."""
    kinds = {"duration": Duration, "msg/s": Rate, "bytes/s": Size, "fraction": Fraction}
    defaults = LoadManagerConfig()
    fields_ = {}
    for f in dataclass_fields(LoadManagerConfig):
        default = getattr(defaults, f.name)
        if f.name in LM_CAPACITIES:
            fields_[f.name] = (kinds[LM_UNITS[f.name]] | None, Field(None, description=f.metadata["help"]))
            continue
        if f.metadata["choices"]:
            kind = Literal[tuple(f.metadata["choices"])]
        elif isinstance(default, bool):
            kind = bool
        elif isinstance(default, int):
            kind = Annotated[int, Field(ge=1 if f.name in ("bundles", "max_bundles") else 0, le=1_000_000)]
        else:
            kind = kinds.get(LM_UNITS.get(f.name), Annotated[float, Field(ge=0, allow_inf_nan=False)])
        fields_[f.name] = (kind, Field(default, description=f.metadata["help"]))
    return create_model("PulsarLm", __base__=Strict, **fields_)


PulsarLm = _pulsar_lm_model()


def load_manager(control) -> LoadManagerConfig:
    """pulsar-lm's parameters for a run: the given ones, the capacities scaled to Rth_out."""
    return LoadManagerConfig.scaled(control.overload.output_rate, **control.pulsar_lm.model_dump())


def check_control(control) -> None:
    """What the topic manager's keys must agree on (the manifest's `validate_control`)."""
    from testbed.policies import get_policy  # the policies' modules, only when a scenario is checked

    policy = get_policy(control.policy)
    if control.infeasible_min_gain > 0 and (not policy.latency_aware or getattr(policy, "controller", None)):
        raise ValueError(f"infeasible_min_gain: policy {control.policy!r} does not move topics by latency with "
                         "Algorithm 1, so the gain asked of a move could never apply (epulsar or allpairs)")
    try:
        load_manager(control)
    except ValueError as error:
        raise ValueError(f"pulsar_lm: {error}") from None
