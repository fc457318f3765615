"""BAD Pub/Sub's part of the scenario schema: `workload.bad` (channels, subscriptions, rate surges)
and `control.bad` (the coordinator's three stages)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from testbed.policies.bad import MIGRATIONS as BAD_MIGRATIONS
from testbed.policies.bad import PLACEMENTS as BAD_PLACEMENTS
from testbed.policies.bad import BalancerConfig
from testbed.scenario.fields import ByteRate, Count, Duration, Fraction, PositiveDuration, Strict, TopicName, min_max

BAD_DEFAULTS = BalancerConfig()


class Channel(Strict):
    """A BAD channel (Nguyen et al., 3.1): a query the back end runs every `period`; each of its
    `subscriptions` BE subscriptions (parameter values) yields `results` records of the workload's
    message_size per execution; an execution takes `runtime`, over which its BE subscriptions'
    results come out one after another (0: all at once). Its topics are `<name>-<k>`, of class `name`."""

    name: TopicName
    period: PositiveDuration
    subscriptions: Annotated[int, Field(ge=1, le=10_000)]
    results: Annotated[int, Field(ge=1, le=10_000)] = 1
    runtime: Duration = 0.0

    @model_validator(mode="after")
    def _runs_within_period(self) -> Channel:
        if self.runtime >= self.period:
            raise ValueError(f"runtime ({self.runtime:g}s) must be shorter than the period ({self.period:g}s)")
        return self


class SubscriptionCount(Strict):
    min: Count
    max: Count

    _ordered = model_validator(mode="after")(lambda self: min_max(self, "subscriptions"))


class RateSurge(Strict):
    """Every `every`, a `share` of the BE subscriptions (drawn with the seed) yields `factor` times its
    results for `hold` (the paper's simulation: a quarter, every minute, 4-6 minutes)."""

    every: PositiveDuration
    share: Fraction = 0.25
    factor: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] = 3.0
    hold: PositiveDuration


class Bad(Strict):
    """BAD Pub/Sub (Nguyen et al., DEBS '19): channels on the cloud's back end, subscribers (role
    subscriber, each node carrying `members`) each with a number of FE subscriptions drawn over the BE
    subscriptions with Zipf popularity (rank r within its channel weighs 1 / r**zipf)."""

    channels: list[Channel] = Field(min_length=1)
    subscriptions: SubscriptionCount
    zipf: Annotated[float, Field(ge=0, le=10)] = 1.0
    surge: RateSurge | None = None

    @model_validator(mode="after")
    def _unique(self) -> Bad:
        names = [c.name for c in self.channels]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate name {duplicates[0]!r} in channels")
        total = sum(c.subscriptions for c in self.channels)
        if self.subscriptions.max > total:
            raise ValueError(f"subscriptions.max ({self.subscriptions.max}) exceeds the {total} BE subscriptions")
        return self


class BadControl(Strict):
    """BAD's coordinator (Nguyen et al.): stage 1 `placement`, stage 2 `migration` while cov > alpha and
    the mean load > beta, stage 3 the greedy `shuffle` when cov > gamma and the mean > theta, every
    `period`. Defaults: testbed.policies.bad.config (the paper's alpha; its beta of 300 MB/s is for
    10,000 subscribers, a live run gives its own; theta defaults to beta)."""

    placement: Literal[BAD_PLACEMENTS] = "nr"
    migration: Literal[BAD_MIGRATIONS] = BAD_DEFAULTS.migration
    shuffle: bool = BAD_DEFAULTS.shuffle
    alpha: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = BAD_DEFAULTS.alpha
    beta: ByteRate = BAD_DEFAULTS.beta
    gamma: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = BAD_DEFAULTS.gamma
    theta: ByteRate | None = None  # None: beta
    period: PositiveDuration = 5.0

    def balancer(self) -> BalancerConfig:
        return BalancerConfig(migration=self.migration, shuffle=self.shuffle, alpha=self.alpha, beta=self.beta,
                              gamma=self.gamma, theta=self.theta)


def channels_have_thresholds(workload) -> None:
    """A channel's results are a topic class: each needs its latency threshold."""
    missing = sorted({c.name for c in workload.bad.channels} - {t.name for t in workload.topics})
    if missing:
        raise ValueError(f"every channel needs a threshold in topics: add {{name: {missing[0]}, threshold: ...}}")
