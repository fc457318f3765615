"""The scenario schema: pydantic models that parse units once and reject anything unknown.

Every identifier that can become a host, interface, container or namespace name goes through
`Name`: a strict alphabet and a length that keeps `<name><index>-eth<N>` inside Linux's 15-byte
interface-name limit, so nothing from a scenario can reach a shell or the kernel unchecked.
"""

from __future__ import annotations

import re
from dataclasses import fields as dataclass_fields
from typing import Annotated, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, StringConstraints,
                      create_model, model_validator)

from testbed import units
from testbed.nc.snapshots import CONVERGED_RELATIVE_ERROR, SAME_SITE_ERROR_S
from testbed.policies.distance import DEFAULT_DISTANCE, DISTANCES
from testbed.policies.bad import MIGRATIONS as BAD_MIGRATIONS
from testbed.policies.bad import PLACEMENTS as BAD_PLACEMENTS
from testbed.policies.bad import BalancerConfig
from testbed.policies.autotune import TuningConfig
from testbed.policies.initial import DEFAULT_INITIAL_PLACEMENT, INITIAL_PLACEMENTS
from testbed.policies.overload import Overload as OverloadThresholds
from testbed.policies.pulsar_lm.config import PULSAR_CAPACITIES as LM_CAPACITIES
from testbed.policies.pulsar_lm.config import UNITS as LM_UNITS
from testbed.policies.pulsar_lm.config import LoadManagerConfig
from testbed.policies.registry import DEFAULT_POLICY, POLICIES
from testbed.policies.topics import CLASS_RE
from testbed.scenario.cities import CITY_CODES
from testbed.tracking.bloom import PRESETS as TRACKING_PRESETS
from testbed.tracking.bloom import PREFIXES as MD5_PREFIXES
from testbed.tracking.bloom import Filter, segment_bits
from testbed.tracking.config import STRATEGIES as TRACKING_STRATEGIES
from testbed.tracking.config import LOG_RECORD_BYTES, TrackingConfig

BAD_DEFAULTS = BalancerConfig()
TUNING_DEFAULTS = TuningConfig()
AUTOTUNE_TRACES = ("sls-synthetic",)  # shipped request traces, testbed/data/autotune/<name>.csv
NAME_MAX = 8
NAME_RE = re.compile(r"[a-z][a-z0-9]*")
SCENARIO_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")


def check_name(value: str) -> str:
    """Names become host, interface and container names: a-z, 0-9, at most 8 bytes."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or len(value) > NAME_MAX:
        raise ValueError(
            f"{value!r} is not a valid name: use 1-{NAME_MAX} characters a-z and 0-9, starting with a letter"
        )
    return value


def _check_topic(value: str) -> str:
    if not isinstance(value, str) or not CLASS_RE.fullmatch(value) or len(value) > 32:
        raise ValueError(f"{value!r} is not a valid topic name: use 1-32 characters a-z, 0-9 and _, starting with a letter")
    return value


def _check_scenario_name(value: str) -> str:
    if not isinstance(value, str) or not SCENARIO_NAME_RE.fullmatch(value) or len(value) > 40:
        raise ValueError(f"{value!r} is not a valid scenario name: use 1-40 characters a-z, 0-9 and -")
    return value


def _check_city(value: str) -> str:
    if value not in CITY_CODES:
        raise ValueError(f"{value!r} is not a known city; known: {', '.join(CITY_CODES)}")
    return value


def _one_of(names):
    """A value from one of the policies' lists of names (policies, distance readings, start-ups), so
    the schema never lists them itself."""
    def check(value: str) -> str:
        if value not in names:
            quoted = [repr(name) for name in names]
            raise ValueError(f"{value!r}: input should be {', '.join(quoted[:-1])} or {quoted[-1]}")
        return value
    return check


def _non_negative(kind: str):
    def check(value: float) -> float:
        if value < 0:
            raise ValueError(f"a {kind} must not be negative, got {value:g}")
        return value
    return check


def _positive(kind: str):
    def check(value: float) -> float:
        if value <= 0:
            raise ValueError(f"a {kind} must be greater than zero")
        return value
    return check


# What no run on any machine can honour, refused at validation. Each bound is far above
# what a one-machine testbed runs and far below where arithmetic or the tools break:
MAX_DURATION_S = 86_400.0       # a day: any duration or delay (a day of smoke traces is ~10 GB)
MAX_BANDWIDTH_BPS = 100e9       # 100 Gbit/s: beyond any NIC a shaped link stands for (HTB takes 64-bit rates)
MAX_SIZE_B = float(1 << 30)     # 1 GiB: any buffer or size
NATS_MAX_PAYLOAD_B = 1 << 20    # nats-server's default max_payload (roles/launch.py does not raise it)
MAX_RATE_PER_S = 1e6            # 1M msg/s from one publisher: the Python client peaks near 10^4
MAX_SPEED_MPS = 10_000.0        # 10 km/s: smokes compress time (600 m/s); faster, a client crosses a
                                # ~1 km MEC zone in under the 0.1 s a relink takes
MAX_BYTE_RATE = 10e9            # 10 GB/s of BAD results per subscription


def _at_most(kind: str, limit: float, unit: str, why: str):
    def shown(value: float) -> str:
        return f"{value:,.0f}{unit}" if 1e4 <= value < 1e15 and value == int(value) else f"{value:g}{unit}"

    def check(value: float) -> float:
        if value > limit:
            raise ValueError(f"a {kind} of at most {shown(limit)} ({why}), got {shown(value)}")
        return value
    return check


def _signed(parser):
    """Let a leading minus through the unit parser so the error can say 'negative' plainly."""
    def parse(value):
        if isinstance(value, str) and value.strip().startswith("-"):
            return -parser(value.strip()[1:])
        return parser(value)
    return parse


def _unit(suffix: str, factor: float = 1.0):
    """Serialize back into a unit string, so a dumped scenario loads again unchanged."""
    return PlainSerializer(lambda v: None if v is None else f"{v / factor!r}{suffix}", when_used="json")


Name = Annotated[str, AfterValidator(check_name)]
TopicName = Annotated[str, AfterValidator(_check_topic)]
CityCode = Annotated[str, AfterValidator(_check_city)]
PolicyName = Annotated[str, AfterValidator(_one_of(POLICIES))]
DistanceName = Annotated[str, AfterValidator(_one_of(DISTANCES))]
InitialPlacement = Annotated[str, AfterValidator(_one_of(INITIAL_PLACEMENTS))]
_day = AfterValidator(_at_most("duration", MAX_DURATION_S, "s", "a day"))
Duration = Annotated[
    float, BeforeValidator(_signed(units.parse_duration)), AfterValidator(_non_negative("duration")), _day, _unit("s")
]
PositiveDuration = Annotated[
    float, BeforeValidator(_signed(units.parse_duration)), AfterValidator(_positive("duration")), _day, _unit("s")
]
Bandwidth = Annotated[
    float, BeforeValidator(_signed(units.parse_bandwidth)), AfterValidator(_positive("bandwidth")),
    AfterValidator(_at_most("bandwidth", MAX_BANDWIDTH_BPS, "bit/s", "100 Gbit/s")), _unit("bit")
]
Size = Annotated[float, BeforeValidator(_signed(units.parse_size)), AfterValidator(_positive("size")),
                 AfterValidator(_at_most("size", MAX_SIZE_B, "B", "1 GiB")), _unit("B")]
MessageSize = Annotated[Size, AfterValidator(_at_most("message size", NATS_MAX_PAYLOAD_B, "B",
                                                      "nats-server's maximum payload, 1 MiB"))]
Rate = Annotated[float, BeforeValidator(_signed(units.parse_rate)), AfterValidator(_positive("rate")),
                 AfterValidator(_at_most("rate", MAX_RATE_PER_S, "/s", "per publisher; the client peaks near 10^4")),
                 _unit("/s")]
Speed = Annotated[float, BeforeValidator(_signed(units.parse_speed)), AfterValidator(_positive("speed")),
                  AfterValidator(_at_most("speed", MAX_SPEED_MPS, "m/s", "relinks could not keep up")), _unit("m/s")]
ByteRate = Annotated[float, BeforeValidator(_signed(units.parse_byte_rate)), AfterValidator(_non_negative("data rate")),
                     AfterValidator(_at_most("data rate", MAX_BYTE_RATE, "B/s", "10 GB/s")), _unit("B/s")]
Fraction = Annotated[float, BeforeValidator(units.parse_fraction)]
Count = Annotated[int, Field(ge=1, le=100_000)]


def _min_max(model, name: str):
    """A {min, max} block's check, for every such block."""
    if model.max < model.min:
        raise ValueError(f"{name}.max must not be smaller than {name}.min")
    return model


class Strict(BaseModel):
    """Unknown keys are errors, values are parsed once and never change."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --- infrastructure -------------------------------------------------------------------------


class LinkParams(Strict):
    """One direction's shaping; a link applies the same parameters in both directions."""

    delay: Duration | None = None
    jitter: Duration = 0.0
    loss: Fraction = 0.0
    bandwidth: Bandwidth | None = None

    def merged(self, other: LinkParams | None) -> LinkParams:
        """`other`'s explicitly set fields win: how per-link overrides refine a link class."""
        if other is None:
            return self
        return self.model_copy(update=other.model_dump(exclude_unset=True))


class LinkClasses(Strict):
    """access: clients to their site; local: brokers, NC proxies and cloud nodes to their site."""

    access: LinkParams = LinkParams(delay="1ms")
    local: LinkParams = LinkParams(delay="0.5ms")
    site: LinkParams = LinkParams()
    cloud: LinkParams = LinkParams()


class LinkOverride(LinkParams):
    between: tuple[Name, Name]


class MecZones(Strict):
    """A metro area cut into MEC zones by k-means over real tower coordinates."""

    towers: Literal["atlanta"] = "atlanta"
    zones: Count
    inter_site_rtt: PositiveDuration


class Cities(Strict):
    """A set of US cities with WonderProxy-measured inter-city RTTs."""

    names: list[CityCode] = Field(min_length=1)
    access_latency: Duration | None = None  # one-way client access delay in every city (else links.access)
    access: dict[CityCode, Duration] = {}  # per-city override of access_latency

    @model_validator(mode="after")
    def _unique(self) -> Cities:
        seen = set()
        for code in self.names:
            if code in seen:
                raise ValueError(f"duplicate name {code!r} in names")
            seen.add(code)
        unknown = set(self.access) - set(self.names)
        if unknown:
            raise ValueError(f"access names cities not in names: {', '.join(sorted(unknown))}")
        return self


class Star(Strict):
    """The microbenchmark topology: N nodes, each with the same one-way latency to one switch."""

    nodes: Annotated[int, Field(ge=2, le=256)]
    link_delay: Duration


class Cloud(Strict):
    name: Name = "cloud"
    one_way: Duration | None = None
    city: CityCode | None = None


class Storage(Strict):
    """Storage nodes (Pulsar's bookies, here JetStream servers): `racks` of them at every edge site
    and in the cloud datacentre, one per rack, all in one JetStream cluster."""

    racks: Annotated[int, Field(ge=1, le=5)] = 3


class Infrastructure(Strict):
    mec_zones: MecZones | None = None
    cities: Cities | None = None
    star: Star | None = None
    cloud: Cloud | None = None
    links: LinkClasses = LinkClasses()
    overrides: list[LinkOverride] = []
    storage: Storage | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Infrastructure:
        kinds = [k for k in ("mec_zones", "cities", "star") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of mec_zones, cities or star")
        if self.mec_zones and (self.cloud is None or self.cloud.one_way is None):
            raise ValueError("mec_zones needs cloud.one_way (the cloud's one-way latency to every zone)")
        if self.cities and self.cloud and self.cloud.city and self.cloud.city not in self.cities.names:
            raise ValueError(f"cloud.city {self.cloud.city!r} is not one of cities.names")
        return self


# --- nodes, workload, mobility, control ------------------------------------------------------


class ClientGroup(Strict):
    """`count` client nodes named `<name>1..<name>N`; a UAV swarm node carries `members` UAVs."""

    name: Name
    role: Literal["uav-swarm", "game-server", "avatar", "static", "subscriber", "publisher"]
    count: Count
    members: Count = 1
    mobile: bool = False
    site: Name | Literal["random", "each"] = "random"
    access: LinkParams | None = None


class Nodes(Strict):
    cloud_brokers: Annotated[int, Field(ge=0, le=16)] = 1
    brokers_per_site: Annotated[int, Field(ge=0, le=16)] = 1
    nc_proxies_per_site: Annotated[int, Field(ge=0, le=16)] = 1
    clients: list[ClientGroup] = []

    @model_validator(mode="after")
    def _unique(self) -> Nodes:
        seen = set()
        for group in self.clients:
            if group.name in seen:
                raise ValueError(f"duplicate name {group.name!r} in clients")
            seen.add(group.name)
        return self


STORAGE_POLICIES = ("site-local", "cloud")  # where a durable topic's replicas live (testbed.systems.pubsub.durable)


class Durable(Strict):
    """A persistent topic class (paper 3.5): a message is acknowledged once `replicas` storage nodes
    of the policy's site hold it (a JetStream stream, replicas on distinct racks). `site-local`
    (ePulsar) stores at the owning broker's site, `cloud` in the cloud datacentre."""

    replicas: Annotated[int, Field(ge=1, le=5)] = 1
    storage: Literal[STORAGE_POLICIES] = "site-local"


class Topic(Strict):
    """A topic class (e.g. `follow_leader` of every swarm), its end-to-end latency threshold and,
    if durable, how its messages are stored (else nothing is kept: NATS core)."""

    name: TopicName
    threshold: PositiveDuration
    durable: Durable | None = None


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

    _ordered = model_validator(mode="after")(lambda self: _min_max(self, "subscriptions"))


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


class Workload(Strict):
    kind: Literal["uav-swarm", "mmog", "hotspot", "bad", "autotune", "none"]
    rate: Rate | None = None
    message_size: MessageSize = 1000.0
    topics: list[Topic] = []
    avatars: Annotated[int, Field(ge=1, le=100_000)] = 1
    groups: Annotated[int, Field(ge=1, le=10_000)] = 1
    hotspot: Hotspot | None = None
    bad: Bad | None = None
    autotune: Autotune | None = None

    @model_validator(mode="after")
    def _complete(self) -> Workload:
        if (self.kind == "bad") != (self.bad is not None):
            raise ValueError("workload kind 'bad' needs a bad block, and only it takes one")
        if (self.kind == "autotune") != (self.autotune is not None):
            raise ValueError("workload kind 'autotune' needs an autotune block, and only it takes one")
        if self.kind == "autotune":
            if len(self.topics) != 1:
                raise ValueError("the autotune workload needs one topic class (its requests) with a threshold")
        elif self.kind == "bad":
            missing = sorted({c.name for c in self.bad.channels} - {t.name for t in self.topics})
            if missing:
                raise ValueError(f"every channel needs a threshold in topics: add {{name: {missing[0]}, threshold: ...}}")
        elif self.kind != "none":
            if self.rate is None:
                raise ValueError(f"workload kind {self.kind!r} needs a rate such as '200/s'")
            if not self.topics:
                raise ValueError(f"workload kind {self.kind!r} needs topics, each with a threshold")
        if (self.kind == "hotspot") != (self.hotspot is not None):
            raise ValueError("workload kind 'hotspot' needs a hotspot block, and only it takes one")
        if self.kind == "hotspot" and HOTSPOT_CLASS not in {t.name for t in self.topics}:
            raise ValueError(f"hot-spot topics are named {HOTSPOT_CLASS}-<rank>: topics needs "
                             f"{{name: {HOTSPOT_CLASS}, threshold: ...}}")
        names = [t.name for t in self.topics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate name {duplicates[0]!r} in topics")
        return self


class StayTime(Strict):
    min: PositiveDuration
    max: PositiveDuration

    _ordered = model_validator(mode="after")(lambda self: _min_max(self, "stay"))


class Mobility(Strict):
    model: Literal["none", "random-waypoint", "group-change"] = "none"
    speed: Speed | None = None
    pause: Duration = 0.0
    stay: StayTime | None = None

    @model_validator(mode="after")
    def _parameters(self) -> Mobility:
        if self.model == "random-waypoint" and self.speed is None:
            raise ValueError("random-waypoint needs a speed such as '50m/s'")
        if self.model == "group-change" and self.stay is None:
            raise ValueError("group-change needs stay: {min: 30s, max: 60s}")
        return self


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


class Settle(Strict):
    """How long a run waits for the network coordinates before its workload (testbed.roles.settle):
    until the all-pairs median error is below `median_error` and every same-site pair (a zone's
    broker and NC proxy, whose configured RTT is a few ms) is estimated within `same_site` of its
    configured RTT, held for `hold`; or at most `max`, after which the run starts unsettled and says
    so. A bare duration (`settle: 150s`) is the cap with the default bounds (testbed.nc.snapshots)."""

    max: Duration = 60.0
    same_site: PositiveDuration = SAME_SITE_ERROR_S
    median_error: Fraction = CONVERGED_RELATIVE_ERROR
    hold: Duration = 5.0

    @model_validator(mode="before")
    @classmethod
    def _bare_cap(cls, value):
        return value if isinstance(value, dict) else {"max": value}

    @model_validator(mode="after")
    def _reachable(self) -> Settle:
        if self.median_error <= 0:
            raise ValueError("median_error must be above 0% (no estimate is exact), e.g. 6%")
        if "hold" in self.model_fields_set and 0 < self.max < self.hold:
            raise ValueError(f"hold ({self.hold:g}s) must not be longer than max ({self.max:g}s), "
                             "or the cap always ends the wait first")
        if 0 < self.max < self.hold:  # a bare cap below the default hold: the cap is the wait
            return self.model_copy(update={"hold": self.max})  # (and the scenario as run loads again)
        return self


def _pulsar_lm_model() -> type[Strict]:
    """`control.pulsar_lm`: every parameter of Pulsar's load manager, with the units a scenario writes
    and the defaults of testbed.policies.pulsar_lm.config. The capacities default to None: Pulsar's
    values at the same share of the run's Rth_out (`Control.load_manager`)."""
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


PulsarLm = _pulsar_lm_model()


class Control(Strict):
    """The control plane. `distance`: how d is read from Serf's RTT estimate (`one_way` halves it,
    `rtt` takes it as the paper writes d; testbed.policies.distance). `initial_placement`: where a
    topic starts (`first_lookup`: placed by the policy from the first asking client's coordinate;
    `cloud`: on the cloud broker until its first report and round; testbed.policies.initial)."""

    policy: PolicyName = DEFAULT_POLICY
    distance: DistanceName = DEFAULT_DISTANCE
    initial_placement: InitialPlacement = DEFAULT_INITIAL_PLACEMENT
    monitoring_period: PositiveDuration = 5.0
    nc_report_period: PositiveDuration = 5.0
    settle: Settle = Settle()
    migration: Migration = Migration()
    overload: Overload = Overload()
    pulsar_lm: PulsarLm = PulsarLm()  # Pulsar's load manager (policy pulsar-lm), testbed.policies.pulsar_lm.config
    bad: BadControl = BadControl()  # BAD's coordinator (workload kind bad), testbed.policies.bad

    def load_manager(self) -> LoadManagerConfig:
        """pulsar-lm's parameters for this run: the given ones, the capacities scaled to Rth_out."""
        return LoadManagerConfig.scaled(self.overload.output_rate, **self.pulsar_lm.model_dump())

    @model_validator(mode="after")
    def _load_manager(self) -> Control:
        try:
            self.load_manager()
        except ValueError as error:
            raise ValueError(f"pulsar_lm: {error}") from None
        return self


ZOOKEEPER = "zookeeper"  # a fault's target that is the cloud's ZooKeeper, not a node
MANAGER = "manager"  # a fault's target that is the elected topic manager (a standby takes over)


def _check_fault_target(value: str) -> str:
    return value if value in (ZOOKEEPER, MANAGER) else check_name(value)


class Fault(Strict):
    """At `at` into the run, `kill` crashes or `pause` stops a part. A broker node crashes for good:
    its nats-server, broker agent and Serf agent are killed (SIGKILL) and not restarted; its topics
    must be re-placed. `kill: zookeeper` kills the cloud's ZooKeeper (SIGKILL) and starts it again,
    with its data, `restart_after` later: the control plane is gone meanwhile, the data plane is not.
    `kill: manager` kills the elected topic manager for good; with two or more cloud brokers a
    standby manager (one in every cloud node) is elected once the leader's ZooKeeper session expires.
    With `restart_after`, a killed broker node starts again (its nats-server, broker agent and
    Serf agent, with no state: a crash and a reboot), as in a soak with periodic crashes.
    `pause: <broker>` stops every process of a broker node (SIGSTOP) for `resume_after` (SIGCONT):
    a broker that is only slow, which must not end up owning a topic another broker owns.
    `relay: [a, b]` kills the delay-line process of the link between sites a and b (or of node a's
    access link, b its site): an emulation error the harness must detect, repair and mark.
    `cut: <site>` cuts a site off for `heal_after`: nothing passes between it and any other site
    (its nodes still reach each other), as when a MEC site loses its backhaul."""

    at: PositiveDuration
    kill: Annotated[str, AfterValidator(_check_fault_target)] | None = None  # a node, `zookeeper` or `manager`
    restart_after: PositiveDuration | None = None
    pause: Annotated[str, AfterValidator(check_name)] | None = None
    resume_after: PositiveDuration | None = None
    relay: tuple[Name, Name] | None = None
    cut: Name | None = None
    heal_after: PositiveDuration | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Fault:
        if sum(k is not None for k in (self.kill, self.pause, self.relay, self.cut)) != 1:
            raise ValueError("a fault is a kill, a pause, a relay or a cut: give exactly one of kill, pause, "
                             "relay and cut")
        if self.kill == ZOOKEEPER and self.restart_after is None:
            raise ValueError("kill: zookeeper needs restart_after (the run has no control plane without it)")
        if self.restart_after is not None and (self.kill is None or self.kill == MANAGER):
            raise ValueError("restart_after goes with kill: zookeeper or a broker (a manager has standbys)")
        if (self.pause is not None) != (self.resume_after is not None):
            raise ValueError("resume_after goes with pause, and a pause needs it")
        if (self.cut is not None) != (self.heal_after is not None):
            raise ValueError("heal_after goes with cut, and a cut needs it")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("kill", "pause", "relay", "cut") if getattr(self, k) is not None)

    @property
    def target(self) -> str:
        if self.relay is not None:
            return "-".join(self.relay)
        return getattr(self, self.kind)

    @property
    def back_field(self) -> str | None:
        """The field that says when the part is back; None: it is not (a kill for good, a relay)."""
        return next((f for f in ("restart_after", "resume_after", "heal_after") if getattr(self, f) is not None), None)

    @property
    def back_after(self) -> float | None:
        """How long until the part is back (a restart, a resume, a heal); None: gone for good."""
        return getattr(self, self.back_field) if self.back_field else None


class Tracking(Strict):
    """Message tracking in every broker (Jun and Astley): `strategy` none, log (the paper's ASYNC) or bloom.
    bloom's filters: a Table 2 `preset` (10K-99.999, 10K-99, 10K-95, 135K-99.999, 135K-99, 135K-95;
    the default 10K-99.999) or m bits, k hash functions, capacity n. `buffer`: log's in-memory buffer.
    `persistence`: T_p. `skew_tolerance`: T_s. `jitter`: how late a message may be delivered (held or
    forwarded in a migration), widening the attachment window at traceback. `sync`: fsync each store."""

    strategy: Literal[TRACKING_STRATEGIES] = "none"
    preset: Literal[tuple(TRACKING_PRESETS)] | None = None
    m: Annotated[int, Field(ge=8, le=1 << 27)] | None = None
    k: Annotated[int, Field(ge=1, le=64)] | None = None
    n: Annotated[int, Field(ge=1, le=1 << 24)] | None = None
    buffer: Size = 10_000.0
    persistence: PositiveDuration = 1.0
    skew_tolerance: Duration = 0.05
    jitter: Duration = 10.0
    sync: bool = True

    @model_validator(mode="after")
    def _filter(self) -> Tracking:
        given = [name for name in ("m", "k", "n") if getattr(self, name) is not None]
        if given and self.preset:
            raise ValueError("give a preset or m, k and n, not both")
        if given and len(given) < 3:
            raise ValueError(f"a filter needs m, k and n; missing {', '.join(sorted({'m', 'k', 'n'} - set(given)))}")
        if (given or self.preset) and self.strategy != "bloom":
            raise ValueError("filters (preset, m, k, n) are for strategy bloom")
        if given and segment_bits(self.m) * self.k > 128 * len(MD5_PREFIXES):
            raise ValueError(f"k={self.k} hash functions of {segment_bits(self.m)} bits need more than "
                             f"{len(MD5_PREFIXES)} MD5 applications; lower k")
        if self.buffer < LOG_RECORD_BYTES:
            raise ValueError(f"buffer must hold one {LOG_RECORD_BYTES}-byte record")
        return self

    def config(self) -> TrackingConfig:
        if self.m is not None:
            chosen = Filter(m=self.m, k=self.k, n=self.n)
        else:
            chosen = TRACKING_PRESETS[self.preset or "10K-99.999"]
        return TrackingConfig(strategy=self.strategy, filter=chosen, buffer_bytes=int(self.buffer),
                              persistence_s=self.persistence, skew_tolerance_s=self.skew_tolerance,
                              jitter_s=self.jitter, sync=self.sync)


ServerName = Annotated[str, StringConstraints(pattern=r"^([a-z_][a-z0-9_-]{0,31}@)?[A-Za-z0-9][A-Za-z0-9.-]{0,252}$")]


class Emulation(Strict):
    backend: Literal["auto", "containernet", "mininet"] = "auto"
    shaper: Literal["auto", "shared", "delayline", "netem"] = "auto"
    switch: Literal["bridge", "ovs"] = "bridge"
    servers: list[ServerName] = []  # spread the run over these ([user@]host; docs/guide/multi-host.md)


class Outputs(Strict):
    dir: str = "results"
    traces: bool = True
    figures: list[str] = []


class Scenario(Strict):
    name: Annotated[str, AfterValidator(_check_scenario_name)]
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 1
    duration: PositiveDuration
    scale: Annotated[float, Field(gt=0, le=100)] = 1.0
    infrastructure: Infrastructure
    nodes: Nodes = Nodes()
    workload: Workload = Workload(kind="none")
    mobility: Mobility = Mobility()
    control: Control = Control()
    faults: list[Fault] = []
    tracking: Tracking = Tracking()
    emulation: Emulation = Emulation()
    outputs: Outputs = Outputs()

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        infra = self.infrastructure
        if infra.cities and not (infra.cloud and infra.cloud.city):
            raise ValueError("a cities infrastructure needs cloud.city (the city hosting the cloud)")
        for group in self.nodes.clients:
            longest = len(group.name) + len(str(scaled_count(group.count, self.scale)))
            if longest > NAME_MAX:
                raise ValueError(
                    f"client names {group.name}1..{group.name}{scaled_count(group.count, self.scale)} "
                    f"would exceed {NAME_MAX} characters; shorten {group.name!r}"
                )
        if self.tracking.strategy != "none" and self.workload.kind in ("bad", "autotune", "none"):
            raise ValueError("tracking is for the pub/sub workloads (uav-swarm, mmog, hotspot)")
        if self.mobility.model == "random-waypoint" and not infra.mec_zones:
            raise ValueError("random-waypoint mobility needs a mec_zones infrastructure (an area to fly over)")
        return self

    def with_scale(self, scale: float) -> Scenario:
        """A copy at another scale (the CLI's --scale), validated again so names still fit."""
        data = self.model_dump(mode="json", exclude_unset=True)
        data["scale"] = scale
        return Scenario.model_validate(data)


def scaled_count(count: int, scale: float) -> int:
    """Counts scale with the scenario but never drop below one."""
    return max(1, round(count * scale))
