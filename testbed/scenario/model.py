"""The scenario schema: pydantic models that parse units once and reject anything unknown.

The value types (units, names that can reach a shell or the kernel) are testbed.scenario.fields';
the workload kinds, their blocks and the systems' control blocks come from each registered system's
manifest (testbed.plugin), so this module names no system.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, ValidationInfo, create_model, field_validator, model_validator

from testbed import natsserver, plugin
from testbed.nc.snapshots import CONVERGED_RELATIVE_ERROR, SAME_SITE_ERROR_S
from testbed.scenario.fields import (NAME_MAX, Bandwidth, CityCode, Count, Duration, Fraction, MessageSize, Name,
                                     PositiveDuration, Rate, Size, Speed, Strict, TopicName, check_name,
                                     check_scenario_name, min_max)
from testbed.tracking.bloom import PRESETS as TRACKING_PRESETS
from testbed.tracking.bloom import PREFIXES as MD5_PREFIXES
from testbed.tracking.bloom import Filter, segment_bits
from testbed.tracking.config import STRATEGIES as TRACKING_STRATEGIES
from testbed.tracking.config import LOG_RECORD_BYTES, TrackingConfig


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
    # "measured": each inter-city link varies as WonderProxy's pings between the two cities did (a
    # typical run's standard deviation, testbed.scenario.cities.measured_jitter); "none": constant
    jitter: Literal["none", "measured"] = "none"

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
    role: Literal[plugin.client_roles()]
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
    nats_server: natsserver.NatsServer = natsserver.DEFAULT  # which nats-server every broker runs (testbed.natsserver)

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


class WorkloadCore(Strict):
    """What every workload has: the core's keys. `Workload` adds each registered system's kinds,
    blocks and keys (testbed.plugin), and narrows `kind` to the registered kinds: this module names no system."""

    kind: str
    rate: Rate | None = None
    message_size: MessageSize = 1000.0
    topics: list[Topic] = []

    @model_validator(mode="after")
    def _complete(self) -> WorkloadCore:
        kind = plugin.workload_kind(self.kind)
        for other in plugin.workload_kinds().values():
            if other.block and (other is kind) != (getattr(self, other.block) is not None):
                article = "an" if other.block[0] in "aeiou" else "a"
                raise ValueError(f"workload kind {other.name!r} needs {article} {other.block} block, and only it takes one")
        if kind is not None and kind.validate is not None:
            kind.validate(self)
        names = [t.name for t in self.topics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate name {duplicates[0]!r} in topics")
        return self


WORKLOAD_DOC = """What the run offers: `kind` is a workload a registered system runs (`none`: coordinates only,
no system); its block and keys are the system's (testbed/systems/<name>/schema.py). `rate`: per
publisher; `topics`: the topic classes, each with its latency threshold."""


def _workload_model() -> type[Strict]:
    """`workload`: the core's keys, `kind` (every registered kind, or none), then each system's keys
    and blocks in registry order."""
    kinds = (*plugin.workload_kinds(), plugin.NO_WORKLOAD)
    extra = {}
    for system in plugin.systems():
        extra.update({name: (hint, Field(default)) for name, (hint, default) in system.workload_fields.items()})
        extra.update({k.block: (k.block_model | None, Field(None)) for k in system.workloads if k.block})
    return create_model("Workload", __base__=WorkloadCore, __doc__=WORKLOAD_DOC, kind=(Literal[kinds], ...), **extra)


Workload = _workload_model()


class StayTime(Strict):
    min: PositiveDuration
    max: PositiveDuration

    _ordered = model_validator(mode="after")(lambda self: min_max(self, "stay"))


class Mobility(Strict):
    """How clients move. `random-waypoint`: swarms fly over the towers' area at `speed` (paper 5.1).
    `group-change`: MMOG avatars change group after `stay` (paper 5.8.2). `shuttle`: mobile node k
    goes back and forth between zones k and k + 1 (in name order), one handover every `dwell`, as a
    client on a zone border does (the handover trigger's no-ping-pong test)."""

    model: Literal["none", "random-waypoint", "group-change", "shuttle"] = "none"
    speed: Speed | None = None
    pause: Duration = 0.0
    stay: StayTime | None = None
    dwell: PositiveDuration | None = None

    @model_validator(mode="after")
    def _parameters(self) -> Mobility:
        if self.model == "random-waypoint" and self.speed is None:
            raise ValueError("random-waypoint needs a speed such as '50m/s'")
        if self.model == "group-change" and self.stay is None:
            raise ValueError("group-change needs stay: {min: 30s, max: 60s}")
        if (self.model == "shuttle") != (self.dwell is not None):
            raise ValueError("dwell goes with model: shuttle, and shuttle needs it (time in each zone, e.g. 3s)")
        return self


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


class ControlCore(Strict):
    """What every system's control plane shares: `settle`, the wait for the network coordinates
    before the workload (testbed.roles.settle), and `nc_report_period`, how often a client reports
    its coordinate (testbed.roles.coordinates, the pub/sub clients). `Control` adds each registered
    system's own keys (its manifest's `control`, e.g. the topic manager's `policy`), checked by the
    system (`validate_control`) and refused under another system (testbed.scenario.owners): this model
    names no system's setting."""

    nc_report_period: PositiveDuration = 5.0
    settle: Settle = Settle()

    @model_validator(mode="after")
    def _systems_agree(self) -> ControlCore:
        for system in plugin.systems():
            if system.validate_control is not None:
                system.validate_control(self)
        return self


Control = create_model("Control", __base__=ControlCore, __doc__=ControlCore.__doc__,
                       **{key: (model, Field(default, description=note)) for system in plugin.systems()
                          for key, (model, default, note) in system.control.items()})


def _check_fault_target(value: str) -> str:
    """A node's name, or a part a system declares (testbed.plugin.FaultTarget)."""
    return value if value in plugin.fault_targets() else check_name(value)


def _restart_rule(fault: Fault) -> None:
    """restart_after as a fault target's system says: needed, refused, or either."""
    targets = plugin.fault_targets()
    target = targets[fault.kill][1] if fault.kill in targets else None
    if target is not None and target.restart is True and fault.restart_after is None:
        raise ValueError(f"kill: {target.name} needs restart_after ({target.why})")
    if fault.restart_after is not None and (fault.kill is None or (target is not None and target.restart is False)):
        restarted = [name for name, (_, t) in targets.items() if t.restart is not False]
        why = f" ({target.why})" if target is not None and target.why else ""
        raise ValueError(f"restart_after goes with kill: {' or '.join([*restarted, 'a broker'])}{why}")


class Fault(Strict):
    """At `at` into the run, `kill` crashes or `pause` stops a part. A broker node crashes for good:
    its nats-server, broker agent and Serf agent are killed (SIGKILL) and not restarted; its topics
    must be re-placed. `kill` may also name a part that the system under test declares (its
    manifest's `fault_targets`; the table below says what a kill of each does).
    With `restart_after`, a killed broker node starts again (its nats-server, broker agent and
    Serf agent, with no state: a crash and a reboot), as in a soak with periodic crashes.
    `pause: <broker>` stops every process of a broker node (SIGSTOP) for `resume_after` (SIGCONT):
    a broker that is only slow, which must not end up owning a topic another broker owns.
    `relay: [a, b]` kills the delay-line process of the link between sites a and b (or of node a's
    access link, b its site): an emulation error the harness must detect, repair and mark.
    `cut: <site>` cuts a site off for `heal_after`: nothing passes between it and any other site
    (its nodes still reach each other), as when a MEC site loses its backhaul."""

    at: PositiveDuration
    kill: Annotated[str, AfterValidator(_check_fault_target)] | None = None  # a node, or a system's fault target
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
        _restart_rule(self)
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
    shaper: Literal["auto", "routed", "shared", "delayline", "netem"] = "auto"
    switch: Literal["bridge", "ovs"] = "bridge"
    servers: list[ServerName] = []  # spread the run over these ([user@]host; docs/guide/multi-host.md)


class Outputs(Strict):
    dir: str = "results"
    traces: bool = True
    figures: list[str] = []


SystemName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,31}$")]


class Scenario(Strict):
    name: Annotated[str, AfterValidator(check_scenario_name)]
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 1
    duration: PositiveDuration
    scale: Annotated[float, Field(gt=0, le=100)] = 1.0
    infrastructure: Infrastructure
    nodes: Nodes = Nodes()
    workload: Workload = Workload(kind="none")
    # the system under test (a registered system's name): by default the one that declares the
    # workload's kind; any system that runs the kind (testbed.plugin.System.runs) may be named
    system: SystemName | None = Field(None, description=(
        "the system under test, a registered system that runs the workload's kind (`testbed run --system` "
        "overrides it); default: the system that declares the kind (its schema, checks and offered load)"))
    mobility: Mobility = Mobility()
    control: Control = Control()
    faults: list[Fault] = []
    tracking: Tracking = Tracking()
    emulation: Emulation = Emulation()
    outputs: Outputs = Outputs()

    @model_validator(mode="before")
    @classmethod
    def _default_system(cls, data):
        """No `system:`: the one declaring the workload's kind, written into the scenario as run."""
        if isinstance(data, dict) and data.get("system") is None:
            workload = data.get("workload")
            kind = workload.get("kind") if isinstance(workload, dict) else getattr(workload, "kind", None)
            if isinstance(kind, str) and kind in plugin.workload_kinds():
                data = {**data, "system": plugin.default_system(kind)}
        return data

    @field_validator("system")
    @classmethod
    def _system_runs_the_workload(cls, system: str | None, info: ValidationInfo) -> str | None:
        workload = info.data.get("workload")
        if system is None or workload is None:
            return system
        registered = plugin.system_named(system)
        if registered is None:
            raise ValueError(f"no system {system!r}; registered: {', '.join(s.name for s in plugin.systems())}")
        if workload.kind == plugin.NO_WORKLOAD:
            raise ValueError(f"workload kind {plugin.NO_WORKLOAD!r} runs no system: leave out system")
        if not plugin.runs(registered, workload.kind):
            raise ValueError(f"system {system!r} does not run workload kind {workload.kind!r}; the systems that do: "
                             f"{', '.join(plugin.systems_running(workload.kind))}")
        return system

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
        if self.tracking.strategy != "none" and self.workload.kind not in plugin.taking("tracking"):
            raise ValueError(f"tracking is for the workloads that take it ({', '.join(plugin.taking('tracking'))})")
        if self.mobility.model in ("random-waypoint", "shuttle") and not infra.mec_zones:
            raise ValueError(f"{self.mobility.model} mobility needs a mec_zones infrastructure (zones to move between)")
        if self.mobility.model == "shuttle" and infra.mec_zones.zones < 2:
            raise ValueError("shuttle mobility needs at least 2 MEC zones to go back and forth between")
        if self.mobility.model == "shuttle" and self.mobility.dwell >= self.duration:
            raise ValueError(f"mobility.dwell ({self.mobility.dwell:g}s) is not shorter than the run "
                             f"({self.duration:g}s): no handover would happen")
        return self

    def with_scale(self, scale: float) -> Scenario:
        """A copy at another scale (the CLI's --scale), validated again so names still fit."""
        data = self.model_dump(mode="json", exclude_unset=True)
        data["scale"] = scale
        return Scenario.model_validate(data)


def scaled_count(count: int, scale: float) -> int:
    """Counts scale with the scenario but never drop below one."""
    return max(1, round(count * scale))
