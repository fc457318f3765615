"""The auto-tuned publisher's part of the scenario schema: `workload.autotune` (the request source,
the publisher variants, Table I's tuning parameters, the subscriber's speed)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from testbed.policies.autotune import TuningConfig
from testbed.scenario.fields import Duration, Name, PositiveDuration, Rate, Strict

TUNING_DEFAULTS = TuningConfig()
AUTOTUNE_TRACES = ("sls-synthetic",)  # shipped request traces, testbed/data/autotune/<name>.csv


class Step(Strict):
    start: Duration
    end: PositiveDuration
    rate: Rate

    @model_validator(mode="after")
    def _ordered(self) -> Step:
        if self.end <= self.start:
            raise ValueError(f"end ({self.end:g}s) must come after start ({self.start:g}s)")
        return self


class Source(Strict):
    """Where the auto-tuned publisher's requests come from (Balasubramanian et al.): `poisson` at `rate`;
    `steps`, piecewise Poisson (Table II when `steps` is left out), its times multiplied by `time_scale`; or
    `trace`, a shipped trace's arrivals with inter-arrival times divided by `speedup`."""

    kind: Literal["poisson", "steps", "trace"]
    rate: Rate | None = None
    steps: list[Step] | None = None
    time_scale: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] = 1.0
    trace: Literal[AUTOTUNE_TRACES] | None = None
    speedup: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] = 1.0

    @model_validator(mode="after")
    def _complete(self) -> Source:
        if (self.kind == "poisson") != (self.rate is not None):
            raise ValueError("a poisson source needs a rate, and only it takes one")
        if self.steps is not None and self.kind != "steps":
            raise ValueError("steps are for a steps source")
        if (self.kind == "trace") != (self.trace is not None):
            raise ValueError(f"a trace source needs trace (one of {', '.join(AUTOTUNE_TRACES)}), and only it takes one")
        return self


class Variant(Strict):
    """One publisher of the run: N fixed at `batch`, or tuned from it (`tuned: true`)."""

    name: Name
    batch: Annotated[int, Field(ge=1, le=10_000)]
    tuned: bool = False


class Tuning(Strict):
    """Table I of Balasubramanian et al. (testbed.policies.autotune.TuningConfig has the defaults)."""

    t_min: PositiveDuration = TUNING_DEFAULTS.t_min
    t_max: PositiveDuration = TUNING_DEFAULTS.t_max
    alpha: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = TUNING_DEFAULTS.alpha
    gamma: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = TUNING_DEFAULTS.gamma
    beta: Annotated[float, Field(ge=1, le=100, allow_inf_nan=False)] = TUNING_DEFAULTS.beta
    n_min: Annotated[int, Field(ge=1, le=10_000)] = TUNING_DEFAULTS.n_min

    @model_validator(mode="after")
    def _bounds(self) -> Tuning:
        if self.t_max < self.t_min:
            raise ValueError(f"t_max ({self.t_max:g}s) must not be below t_min ({self.t_min:g}s)")
        return self

    def config(self) -> TuningConfig:
        return TuningConfig(**self.model_dump())


class PullSpeed(Strict):
    """The subscriber: mean time between pulls and mean time to read one message (both exponential,
    Balasubramanian et al. V-A); both 0 (the default) is a subscriber that never lags."""

    pull_interval: Duration = 0.0
    pull_time: Duration = 0.0


class Autotune(Strict):
    """The auto-tuned batching publisher (Balasubramanian et al.): every variant is its own publisher
    process on the publisher node with its own stream on the subscriber's broker, all fed the same arrivals.
    `workers`: W; `input_buffer`: the receive side's buffer (requests beyond it are dropped);
    `broker_buffer`: each stream's capacity in messages (full, it refuses: flow control); `poll`: T_poll
    without tuning (the paper's 50 ms); `retry`: a WT's wait before resending."""

    source: Source
    variants: list[Variant] = Field(min_length=1, max_length=24)
    workers: Annotated[int, Field(ge=1, le=1000)] = 16
    input_buffer: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    broker_buffer: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    poll: PositiveDuration = 0.05
    retry: PositiveDuration = 0.01
    tuning: Tuning = Tuning()
    subscriber: PullSpeed = PullSpeed()

    @model_validator(mode="after")
    def _unique(self) -> Autotune:
        names = [v.name for v in self.variants]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate name {duplicates[0]!r} in variants")
        return self


def one_topic_class(workload) -> None:
    """The requests are one topic class, whose threshold judges their latency."""
    if len(workload.topics) != 1:
        raise ValueError("the autotune workload needs one topic class (its requests) with a threshold")
