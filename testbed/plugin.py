"""What a system under test declares, and the registry that loads the declarations.

The core names no system. It asks this module which workload kinds exist, which schema blocks they
bring, how a scenario of each kind is checked against its topology, what load it offers and which
roles run it. A system is one folder under testbed/systems/ whose `manifest.py` holds `SYSTEM`;
`testbed.systems.SYSTEMS` lists the folders, one line each, and `TESTBED_SYSTEMS` (packages,
comma-separated) adds systems kept outside this repository, as pytest's `-p` adds a plugin.

Two axes: a workload kind is declared once, by the system that defines its schema (`workloads`);
any system may say it runs another's kind too (`runs`), as OpenMessaging Benchmark runs one workload
file against every driver. A scenario names its kind (`workload.kind`) and, separately, the system
under test (`system:`, by default the system that declares the kind); capacity and offered load stay
the workload's.

Hooks are written "module:attribute", relative to the system's package, and imported on first use:
loading the registry imports only manifests and schema fragments, so a system's roles and checks can
sit above the core layers that ask for them (OpenMessaging Benchmark's drivers, named in a YAML,
are loaded the same way).
"""

from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

EXTRA_SYSTEMS_ENV = "TESTBED_SYSTEMS"
NO_WORKLOAD = "none"  # the kind of a scenario that runs no system (coordinates only)
FEATURES = ("durable", "tracking")  # what a workload kind may take or refuse, checked by the core


@dataclass(frozen=True)
class Experiment:
    """How `make paper` runs a workload kind as its paper's end-to-end experiment: the scenario per
    scale, the index entry its runs feed, and what the paper itself ran."""

    figure: str  # the index entry and the figure's stem ("fig8"); "load-balancing" for a balance experiment
    title: str  # the figure's title ("UAV swarms (Fig. 8)")
    scenarios: dict[str, str]  # scale ("smoke", "full") -> scenario file, relative to the repository
    paper_scale: str = ""  # what the paper ran, for the index's scale statement
    smoke_note: str = ""  # what the index says of its smoke runs against the paper's
    one_consumer: bool = False  # the figure is one subscriber's view (the representative consumer's AoI)
    balance: bool = False  # run under the balance policies only, for the load-balancing figures


@dataclass(frozen=True)
class WorkloadKind:
    """One `workload.kind` a system runs, and what the core needs to know about it."""

    name: str
    block: str | None = None  # its own block, `workload.<block>`, taken by this kind only
    block_model: type | None = None  # that block's pydantic model
    validate: Callable[[Any], None] | None = None  # the schema's check of the workload; raises ValueError
    check: str | None = None  # "module:function"(scenario, topology, report): checks that need the topology
    offered: str | None = None  # "module:function"(scenario, topology) -> (messages/s published, deliveries/s)
    # "module:function"(scenario, topology) -> {client node: (messages/s it sends, messages/s it receives)}:
    # what its access link carries (testbed.load.thin_access_links); none: those links are not judged
    offered_by_node: str | None = None
    coordinates: bool = True  # runs Serf agents and NC proxies (testbed.roles.coordinates)
    features: tuple[str, ...] = ()  # of FEATURES: what a scenario of this kind may switch on
    refuses: dict[str, str] = field(default_factory=dict)  # feature -> why this kind does not take it
    experiment: Experiment | None = None  # its runs in `make paper`, if its paper has an end-to-end figure


@dataclass(frozen=True)
class Figure:
    """One entry of `make paper`'s index: the paper's claim, and the rule our number is judged by."""

    entry: str  # the index's entry (its anchor), e.g. "fig4"
    images: tuple[str, ...]  # its PNGs, in the index's order
    section: str  # the claim: its paper and section,
    title: str  # what the figure shows,
    paper: str  # and what the paper says
    rule: str  # the rule our verdict applies, in words (each part could fail)


@dataclass(frozen=True)
class Benchmark:
    """A benchmark a system brings: `make bench-<name>` runs its program (`testbed bench <name>`), and
    `make paper` shows its figures beside their paper's claims. A quick one (`paper_runs`) is run by
    `make paper` (with `quick` under `paper --quick`, `redraw` with --reuse), its program drawing its
    PNGs; a long one is read when its JSON exists and drawn by its figures module. That module judges:
    headline(result, scale) -> analysis.headlines.Headline, or HEADLINES = {entry: headline} for a
    benchmark of several figures; optionally markdown_table(result) -> lines and notes(result) ->
    lines for the index, and draw(result, out, stem) -> lines said, for a long one."""

    name: str  # `make bench-<name>`; it writes results/bench/<name>.json
    program: str  # the module run as `python -m`, relative to the system's package
    about: str  # one line: what it measures and what it writes (`testbed bench` lists it)
    figures: str = ""  # the module judging (and drawing) it, relative to the system's package
    shows: tuple[Figure, ...] = ()  # the index entries it feeds (none: a measurement of the machine)
    scale: str = ""  # the scale it runs at, in words ("": the headline says)
    minutes: float = 20  # how long a default run takes on the reference VM
    paper_runs: bool = False  # `make paper` runs it (quick enough); else reads its JSON when present
    quick: tuple[str, ...] = ("--quick",)  # its flags under `paper --quick`
    redraw: str = "--figures-only"  # its flag for "figures only, from the JSON"
    args: tuple[str, ...] = ()  # flags its program always gets: a variant of another benchmark's program


@dataclass(frozen=True)
class FaultTarget:
    """A part of a system that a scenario's `kill:` names instead of a node (ePulsar's ZooKeeper, its
    elected topic manager): the core parses the name and its `restart_after` rule, the system's roles
    do the kill (`Role.kill(name)`), and its `check` judges the fault against the built topology."""

    name: str  # what `kill:` says
    about: str  # what a kill of it does, for the scenario reference
    restart: bool | None = None  # True: needs restart_after; False: takes none; None: either
    why: str = ""  # why restart_after is needed or refused, said with the refusal
    check: str | None = None  # "module:function"(scenario, topology, fault index, report)


@dataclass(frozen=True)
class System:
    """A system under test: the manifest of its folder."""

    name: str
    title: str  # what text calls it: the system and its paper
    workloads: tuple[WorkloadKind, ...] = ()
    client_roles: tuple[str, ...] = ()  # the client node roles its scenarios give (`nodes.clients[].role`)
    agent_roles: tuple[str, ...] = ()  # those whose fixed nodes run a Serf agent (a coordinate of their own)
    workload_fields: dict[str, tuple] = field(default_factory=dict)  # more `workload.<key>`: (type, default)
    control: dict[str, tuple] = field(default_factory=dict)  # `control.<key>`: (model, default, description)
    validate_control: Callable[[Any], None] | None = None  # its check of the control block; raises ValueError
    fault_targets: tuple[FaultTarget, ...] = ()  # parts that `kill:` may name beside nodes
    roles: tuple[str, ...] = ()  # "module:Class" of its harness roles, in start order
    runs: tuple[str, ...] = ()  # workload kinds another system declares that this one runs too
    check: str | None = None  # "module:function"(scenario, topology, report): its own checks, after the kind's
    settings: str | None = None  # "module:function"(scenario) -> str: its variant for a run's label ("home")
    benchmarks: tuple[Benchmark, ...] = ()  # `make bench-<name>`, and their entries in `make paper`'s index
    package: str = ""  # where it was loaded from (set by the registry)


def packages() -> tuple[str, ...]:
    """The registered system packages: the built-in ones, then any from TESTBED_SYSTEMS."""
    from testbed.systems import SYSTEMS

    extra = tuple(p.strip() for p in os.environ.get(EXTRA_SYSTEMS_ENV, "").split(",") if p.strip())
    return SYSTEMS + tuple(p for p in extra if p not in SYSTEMS)


@functools.cache
def _load(names: tuple[str, ...]) -> tuple[System, ...]:
    loaded, kinds, benches, owners = [], {}, {}, {}
    for package in names:
        try:
            manifest = importlib.import_module(f"{package}.manifest")
        except ModuleNotFoundError as error:
            raise RuntimeError(f"system {package!r} (testbed.systems.SYSTEMS or ${EXTRA_SYSTEMS_ENV}): no "
                               f"{package}.manifest module ({error})") from None
        system = getattr(manifest, "SYSTEM", None)
        if not isinstance(system, System):
            raise RuntimeError(f"{package}.manifest must define SYSTEM = testbed.plugin.System(...)")
        for kind in system.workloads:
            if kind.name in kinds or kind.name == NO_WORKLOAD:
                raise RuntimeError(f"workload kind {kind.name!r} of {system.name} is already "
                                   f"{'the core' if kind.name == NO_WORKLOAD else kinds[kind.name]}'s")
            kinds[kind.name] = system.name
        for bench in system.benchmarks:
            if bench.name in benches:
                raise RuntimeError(f"benchmark {bench.name!r} of {system.name} is already {benches[bench.name]}'s")
            benches[bench.name] = system.name
        _claim(owners, system.name, [f"control.{key}" for key in system.control]
               + [f"kill: {target.name}" for target in system.fault_targets])
        loaded.append(replace(system, package=package))
    names_seen = [s.name for s in loaded]
    for system in loaded:
        if names_seen.count(system.name) > 1:
            raise RuntimeError(f"system name {system.name!r} is registered twice")
        unknown = [k for k in system.runs if k not in kinds]
        if unknown:
            raise RuntimeError(f"system {system.name} runs workload kind {unknown[0]!r}, which no system declares "
                               f"(declared: {', '.join(kinds) or 'none'})")
    return tuple(loaded)


def _claim(owners: dict[str, str], system: str, names: list[str]) -> None:
    """A control key or fault target has one declaring system: a second one is a registry error."""
    for name in names:
        if name in owners:
            raise RuntimeError(f"{name} of {system} is already {owners[name]}'s")
        owners[name] = system


def systems() -> tuple[System, ...]:
    """Every registered system's manifest, in registry order (the roles' start order)."""
    return _load(packages())


def workload_kinds() -> dict[str, WorkloadKind]:
    """Every workload kind a scenario can name, by name."""
    return {kind.name: kind for system in systems() for kind in system.workloads}


def workload_kind(name: str) -> WorkloadKind | None:
    """The kind a scenario's `workload.kind` names; None for `none` (no system runs)."""
    return workload_kinds().get(name)


def system_of(kind_name: str) -> System:
    """The system that declares `kind_name` (its schema, checks and offered load): the default system
    under test of a scenario of that kind."""
    return next(s for s in systems() if any(k.name == kind_name for k in s.workloads))


def system_named(name: str) -> System | None:
    """The registered system called `name` (a scenario's `system:`), or None."""
    return next((s for s in systems() if s.name == name), None)


def runs(system: System, kind_name: str) -> bool:
    """Whether `system` runs workload kind `kind_name` (its own, or one it says it runs)."""
    return kind_name in system.runs or any(k.name == kind_name for k in system.workloads)


def systems_running(kind_name: str) -> list[str]:
    """The names of the systems that run workload kind `kind_name`, the declaring one first."""
    return [s.name for s in sorted(systems(), key=lambda s: kind_name in s.runs) if runs(s, kind_name)]


def default_system(kind_name: str) -> str | None:
    """A scenario's system when it names none: the one declaring its kind (None for `none`)."""
    return system_of(kind_name).name if kind_name in workload_kinds() else None


def hook(system: System, ref: str) -> Any:
    """A "module:attribute" of a system's package, imported now."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(f"{system.package}.{module}"), attribute)


def kind_hook(kind: WorkloadKind, name: str) -> Callable | None:
    """The kind's `check`, `offered` or `offered_by_node` function, or None when it declares none."""
    ref = getattr(kind, name)
    return None if ref is None else hook(system_of(kind.name), ref)


def role_classes(system_name: str | None = "") -> list[type]:
    """Every system's harness roles, in registry order; with `system_name`, that system's only (a
    run starts the roles of its system under test; None: no system)."""
    return [hook(system, ref) for system in systems() for ref in system.roles
            if system_name == "" or system.name == system_name]


def system_check(system_name: str | None) -> Callable | None:
    """The `check` a system adds to its kinds' own (None when it declares none)."""
    system = system_named(system_name) if system_name else None
    return hook(system, system.check) if system and system.check else None


def label(scenario) -> str:
    """What a run of `scenario` is called beside others: its system, and the system's setting
    (`natscluster/home`) or, for the system that declares the kind, nothing more than its name."""
    system = system_named(getattr(scenario, "system", None) or "")
    if system is None:
        return ""
    variant = hook(system, system.settings)(scenario) if system.settings else ""
    return f"{system.name}/{variant}" if variant else system.name


def taking(feature: str) -> list[str]:
    """The workload kinds that take `feature` (durable topics, message tracking)."""
    return [name for name, kind in workload_kinds().items() if feature in kind.features]


def experiments() -> dict[str, Experiment]:
    """The workload kinds `make paper` runs end to end, by kind, in registry order."""
    return {name: kind.experiment for name, kind in workload_kinds().items() if kind.experiment}


def benchmarks() -> dict[str, tuple[System, Benchmark]]:
    """Every system's benchmarks by name, with the system that brings each."""
    return {bench.name: (system, bench) for system in systems() for bench in system.benchmarks}


def client_roles() -> tuple[str, ...]:
    """Every client node role a scenario may give, in registry order (systems may share one)."""
    return tuple(dict.fromkeys(role for system in systems() for role in system.client_roles))


def agent_roles() -> set[str]:
    return {role for system in systems() for role in system.agent_roles}


def control_owner(key: str) -> System | None:
    """The system that declares `control.<key>` (None: a key of the core's)."""
    return next((s for s in systems() if key in s.control), None)


def fault_targets() -> dict[str, tuple[System, FaultTarget]]:
    """Every part a scenario's `kill:` may name beside a node, with the system that declares it."""
    return {target.name: (system, target) for system in systems() for target in system.fault_targets}


def foreign(system_name: str | None, owner: System) -> str | None:
    """What runs instead of `owner` when a setting or part it declares does not apply (the system under
    test `system_name` is another, or none); None: it applies."""
    if owner.name == system_name:
        return None
    return f"system {system_name!r}" if system_name else f"workload kind {NO_WORKLOAD!r} (no system)"
