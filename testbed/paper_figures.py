"""What `make paper` makes, entry by entry: which benchmark, scenario or aside feeds each figure.

The table the runner (testbed.paper) plans from, the steps (testbed.paper_steps) run and the index
(testbed.paper_entries) reads back: the per-policy experiments per scale, the asides (ePulsar once,
under another size or reading), the microbenchmarks (the core's and each system's), which index
entries each step feeds, and the paths each entry's numbers rest on (`testbed paper --check`). Data
only and pure functions of the options: nothing here runs anything.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed import plugin
from testbed.policies import POLICIES as REGISTRY

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "results" / "bench"
POLICIES = tuple(REGISTRY)  # every registered policy (testbed.policies.registry), in its order
EXPERIMENTS = plugin.experiments()  # the workload kinds run end to end, each feeding its figure (testbed.plugin)
SCALE_NAMES = ("smoke", "full")
# The policy comparison's scenario per scale and kind; the balance experiment (the hot spot) runs apart.
SCALES = {scale: {kind: e.scenarios[scale] for kind, e in EXPERIMENTS.items() if not e.balance} for scale in SCALE_NAMES}


@dataclass(frozen=True)
class Aside:
    """An ePulsar run beside the per-policy smokes, compared on its own into OUT/<name>/; its index
    entry is `figure`, its PNGs are copied into OUT as <its kind's figure>-<name>.png."""
    name: str
    figure: str
    scenario: str
    note: str
    distance: str | None = None       # --distance override
    jitter: str | None = None         # --jitter override (infrastructure.cities.jitter)
    variant: str = ""                 # what its figure's title adds to the paper's ("Fig. 9 (measured jitter)")

    @property
    def overrides(self) -> list[str]:
        """Its `testbed run` flags beyond the policy and seed."""
        return [*(["--distance", self.distance] if self.distance else []), *(["--jitter", self.jitter] if self.jitter else [])]

    @property
    def kind(self) -> str:
        return scenario_facts(REPO / self.scenario)["workload"]


FIG8_KIND = next(kind for kind, e in EXPERIMENTS.items() if e.figure == "fig8")  # the workload Fig. 8 is drawn from
PAPER_UAV = EXPERIMENTS[FIG8_KIND].scenarios["full"]  # the paper's case at its own size, through the engine
COMPARABLE_UAV = "scenarios/uav-comparable.yaml"      # its flight and length at 5 msg/s per UAV


def fig8_aside(capacity: Path | None = None) -> Aside:
    """Fig. 8's aside at the paper's own size (uav.yaml: 22,400 deliveries/s through the compiled client
    engine) when this machine's capacity measured through the engine holds that load by the steady
    rule (`make bench-capacity ARGS="--clients compiled"`); else the same flight and length at 5 msg/s,
    with the reason in its index entry."""
    from testbed import load

    path = Path(capacity) if capacity else load.capacity_file("compiled")
    try:
        measured = load.read_capacity(path) if path.name != load.CAPACITY_FILE.name else None
    except ValueError:
        measured = None
    knee = ((measured or {}).get("knee") or {}).get(FIG8_KIND) or {}
    steady, paper = (knee.get("steady") or {}).get("deliveries_per_s"), knee.get("paper_deliveries_per_s")
    if steady and paper and steady >= paper:
        return Aside("comparable", "fig8", PAPER_UAV, f"the paper's UAV case at its own size (the steady knee through "
                     f"the compiled engine, {steady:,.0f} deliveries/s, holds its {paper:,.0f}; {rel(path)}); ")
    why = (f"the steady knee through the compiled engine is {steady:,.0f} deliveries/s, below the paper's "
           f"{paper:,.0f} ({rel(path)})" if steady and paper else
           f"this machine's capacity through the compiled engine is not measured ({rel(path)}: make bench-capacity "
           f"ARGS=\"--clients compiled\")")
    return Aside("comparable", "fig8", COMPARABLE_UAV, f"the paper's flight and length, rate scaled to 5 msg/s: {why}; ")


FIG9_KIND = next(kind for kind, e in EXPERIMENTS.items() if e.figure == "fig9")  # the workload Fig. 9 is drawn from


def asides() -> tuple[Aside, ...]:
    """The asides `make paper` runs (ePulsar once each); Fig. 8's is read from the capacity file at each
    call (a small JSON), so the plan, the scale statement and the index agree while it is unchanged.
    Fig. 9 runs again with measured jitter (its smoke's cities, each link varying as WonderProxy's pings
    did) beside its constant links: what the real paths' variation changes."""
    mmog = EXPERIMENTS[FIG9_KIND].scenarios["smoke"]
    return (fig8_aside(), Aside("one_way", "fig9-one_way", mmog, "one-way distances (d = RTT / 2), ePulsar only; ",
                                distance="one_way", variant="one-way distances"),
            Aside("jitter", "fig9-jitter", mmog, "measured jitter on every inter-city link (cities.jitter: measured), "
                  "ePulsar only; ", jitter="measured", variant="measured jitter"))
# The balance experiment (the hot spot) under ePulsar, Pulsar's load manager and the paper's baseline
# (hashing), run as an aside per policy and repeat; with the comparison's runs of the same policies it
# feeds "Load balancing".
BALANCE_POLICIES = ("epulsar", "pulsar-lm", "pulsar-hash")
BALANCE_KIND = next((kind for kind, e in EXPERIMENTS.items() if e.balance), None)


def balance_aside(options: "Options") -> Aside | None:
    if BALANCE_KIND is None:
        return None
    experiment = EXPERIMENTS[BALANCE_KIND]
    return Aside(BALANCE_KIND, experiment.figure, experiment.scenarios[options.scale], f"{experiment.title}; ")


def balance_policies(options: "Options") -> tuple[str, ...]:
    return tuple(p for p in BALANCE_POLICIES if p in options.policies) if BALANCE_KIND else ()


def balance_images() -> list[str]:
    """The balance figures over time: the balance experiment's, then one per compared kind; the side by side."""
    return ["balance.png", "balance-compare.png", *(f"balance-{kind}.png" for kind in SCALES["smoke"])]


@dataclass(frozen=True)
class Microbenchmark:
    name: str
    module: str
    figures: tuple[str, ...]          # figure ids this benchmark's JSON feeds
    images: tuple[str, ...]           # PNGs it writes into results/bench
    redraw: str                       # its flag for "figures only, from the JSON"
    quick: tuple[str, ...] = ("--quick",)  # its flags under `paper --quick` (none: it is quick already)
    minutes: float = 7.0              # how long it takes on the reference VM, until a paper times it
    args: tuple[str, ...] = ()        # flags its program always gets (a variant: placement --jitter measured)

    @property
    def json(self) -> Path:
        return BENCH_DIR / f"{self.name}.json"


BENCHES = (  # the core's own; each system's come from its manifest (system_benches)
    # Fig. 3b: even `paper --quick` sweeps the cluster up to 32 agents (the paper: 128); the RTT sweep stays quick
    Microbenchmark("nc", "testbed.bench.nc", ("fig3b",), ("fig3b.png",), "--figures-only",
                   quick=("--quick", "--nodes", "2,4,8,16,32"), minutes=12.0),
)


@dataclass(frozen=True)
class SystemBench:
    """A system's benchmark (testbed.plugin.Benchmark) as `make paper` handles it."""

    package: str
    bench: plugin.Benchmark

    @property
    def json(self) -> Path:
        return BENCH_DIR / f"{self.bench.name}.json"

    @property
    def make(self) -> str:
        return f"make bench-{self.bench.name}"

    def module(self, ref: str) -> str:
        return f"{self.package}.{ref}"

    @property
    def entries(self) -> tuple[str, ...]:
        return tuple(f.entry for f in self.bench.shows)

    def as_microbenchmark(self) -> Microbenchmark:
        b = self.bench
        images = tuple(image for f in b.shows for image in f.images)
        return Microbenchmark(b.name, self.module(b.program), self.entries, images, b.redraw, b.quick, b.minutes, b.args)

    def judge(self, entry: str):
        """The figures module's headline function for `entry`."""
        import importlib

        figures = importlib.import_module(self.module(self.bench.figures))
        return (getattr(figures, "HEADLINES", None) or {entry: figures.headline})[entry]


def system_benches() -> list[SystemBench]:
    """Every registered system's benchmarks, in registry order."""
    return [SystemBench(system.package, bench) for system, bench in plugin.benchmarks().values() if bench.shows]


FIGURE_IMAGES = {"fig3b": ["fig3b.png"], "violations": ["violations.png"]}


def experiment_images(figure: str, name: str = "") -> list[str]:
    """A comparison's PNGs: the figure and its p95 panel, suffixed with an aside's name."""
    stem = f"{figure}-{name}" if name else figure
    return [f"{stem}.png", f"{stem}-p95.png"]


@dataclass
class Options:
    """What `testbed paper` was asked for (its flags); the table above reads it to decide the steps."""

    out: Path = REPO / "results" / "paper"
    reuse: bool = False               # benchmarks: redraw from their JSON when it exists
    reuse_runs: bool = False          # experiments: take the newest complete run per scenario and policy
    scale: str = "smoke"
    quick: bool = False               # benchmarks that do run: their --quick sweep
    policies: tuple[str, ...] = POLICIES
    # the other systems under test run on the same experiments (`--system`), each a series beside the
    # policies; None: every registered system that runs the experiment's workload kind
    systems: tuple[str, ...] | None = None
    repeats: int = 2                  # runs per scenario and policy, seeds file seed + 0..repeats-1
    asides: bool = True               # also run asides() (ePulsar, once each)
    master: str | None = None
    command: str = "testbed paper"
    resume: bool = False              # skip the runs and benchmarks index.json says were done at this commit
    only: tuple[str, ...] = ()        # run only the steps feeding these index entries (the others: listed as not run)


def other_systems(kind: str, options: Options) -> list[str]:
    """The systems besides the declaring one that `make paper` runs on `kind`'s experiment."""
    running = plugin.systems_running(kind)[1:]
    return running if options.systems is None else [s for s in running if s in options.systems]


def machine() -> str:
    """Host, CPUs, memory and kernel: what 'this machine' was."""
    try:
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))
        memory = f"{kib / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        memory = "RAM unknown"
    return f"{platform.node()} ({os.cpu_count()} CPUs, {memory}, Linux {platform.release()})"


def scenario_facts(path: Path) -> dict:
    """name, workload, description, duration of a scenario file (plain YAML: no emulation imports)."""
    data = yaml.safe_load(path.read_text()) or {}
    from testbed.policies import DEFAULT_DISTANCE

    return {"name": data.get("name"), "workload": (data.get("workload") or {}).get("kind"), "seed": data.get("seed", 1),
            "distance": (data.get("control") or {}).get("distance") or DEFAULT_DISTANCE,
            "jitter": ((data.get("infrastructure") or {}).get("cities") or {}).get("jitter") or "none",
            "description": data.get("description", ""), "duration": str(data.get("duration", "?"))}


def scale_statement(options: Options, benches_reused: list[str]) -> str:
    """What this paper ran and at what size, in words, for the index's header: a reader judges every
    verdict against it (smoke or full, repeats, which benchmarks ran now and which were redrawn)."""
    experiments = []
    for kind, scenario in SCALES[options.scale].items():
        facts = scenario_facts(REPO / scenario)
        experiments.append(f"{scenario} ({facts['description']}; {facts['duration']}) {options.repeats} run(s) per "
                           f"policy ({', '.join(options.policies)}), seeds {facts['seed']}.."
                           f"{facts['seed'] + options.repeats - 1}; {EXPERIMENTS[kind].paper_scale}")
    for aside in asides() if options.asides else ():
        facts = scenario_facts(REPO / aside.scenario)
        experiments.append(f"{' '.join([aside.scenario, *aside.overrides])} "
                           f"({facts['description']}; {facts['duration']}) once, ePulsar ({aside.figure})")
    if balance_policies(options):
        balance = balance_aside(options).scenario
        facts = scenario_facts(REPO / balance)
        experiments.append(f"{balance} ({facts['description']}; {facts['duration']}) "
                           f"{options.repeats} run(s) per policy ({', '.join(balance_policies(options))}), "
                           f"seeds {facts['seed']}..{facts['seed'] + options.repeats - 1} (load balancing)")
    benches = ("microbenchmarks redrawn from their JSON as measured earlier: " + ", ".join(benches_reused)
               if benches_reused else "")
    ran = [b.name for b in run_benches() if b.name not in benches_reused
           and (not options.only or set(b.figures) & set(options.only))]
    if ran:
        benches += ("; " if benches else "") + f"microbenchmarks run now ({', '.join(ran)}) at their " \
            + ("--quick sweep" if options.quick else "default sweep")
    only = f"Only the steps feeding {', '.join(options.only)} (--only); the other entries were not run. " \
        if options.only else ""
    return (f"{only}{options.scale} scale. Experiments: " + " | ".join(experiments) + (f". {benches}" if benches else "") + ". "
            f"Machine: {machine()}. `--scale full` runs uav.yaml and mmog.yaml (10 min each, per policy).")


def rel(path: Path) -> str:
    """A path as the index shows it: relative to the repository when inside it."""
    path = Path(path)
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def smoke_entry(kind: str, options: Options) -> str:
    """The index entry of a kind's per-policy runs: its figure, or <figure>-smoke when an aside makes that
    figure as the paper ran it (the UAV case)."""
    figure = EXPERIMENTS[kind].figure
    return f"{figure}-smoke" if options.asides and any(a.figure == figure for a in asides()) else figure


def run_figures(kind: str, policy: str, options: Options, aside: Aside | None = None) -> tuple[str, ...]:
    """The index entries a run feeds: its aside's, or its kind's comparison, the violations and (under a
    balance policy) load balancing."""
    if aside:
        return (aside.figure,)
    return (smoke_entry(kind, options), "violations", *(("load-balancing",) if policy in balance_policies(options) else ()))


def compare_figures(options: Options, aside: Aside | None = None) -> tuple[str, ...]:
    return (aside.figure,) if aside else (*(smoke_entry(k, options) for k in SCALES[options.scale]), "violations")



# What an entry's numbers rest on, as git pathspecs (`testbed paper --check` diffs them against the entry's
# commits): the harness every measurement passes through (not the live view, nor the systems the entry
# does not run: git cannot include a folder again below an excluded one), then the entry's own scenarios.
HARNESS_PATHS = ("testbed", ":(exclude)testbed/view", "analysis", "requirements.txt")
BENCH_SCENARIOS = "scenarios/bench"


def _system_path(package: str) -> str:
    return package.replace(".", "/")


def pathspecs(packages: list[str], files: list[str]) -> list[str]:
    others = [f":(exclude){_system_path(p)}" for p in plugin.packages() if p not in packages]
    return [*HARNESS_PATHS, *others, *dict.fromkeys(_system_path(p) for p in packages), *dict.fromkeys(files)]


def depends(options: Options) -> dict[str, list[str]]:
    """Each index entry's pathspecs: the harness, its systems' folders (no other system's) and its scenarios."""
    own: dict[str, tuple[list[str], list[str]]] = {fig: ([], [BENCH_SCENARIOS]) for b in BENCHES for fig in b.figures}
    for sb in system_benches():
        for fig in sb.entries:
            own[fig] = ([sb.package], [BENCH_SCENARIOS])
    compared: tuple[list[str], list[str]] = ([], [])
    for kind, scenario in SCALES[options.scale].items():
        mine = ([plugin.system_of(kind).package, *(plugin.system_named(s).package for s in other_systems(kind, options))],
                [scenario])
        own[smoke_entry(kind, options)] = mine
        compared = (compared[0] + mine[0], compared[1] + mine[1])
    for aside in asides() if options.asides else ():
        own[aside.figure] = ([plugin.system_of(aside.kind).package], [aside.scenario])
    own["violations"] = compared
    if balance_policies(options):
        balance = balance_aside(options)
        own["load-balancing"] = (compared[0] + [plugin.system_of(balance.kind).package], compared[1] + [balance.scenario])
    return {fig: pathspecs(*paths) for fig, paths in own.items()}


def run_benches() -> list[Microbenchmark]:
    """The benchmarks `make paper` runs: the paper's microbenchmarks, then each system's quick ones."""
    return list(BENCHES) + [b.as_microbenchmark() for b in system_benches() if b.bench.paper_runs]


__all__ = ["Options", "Aside", "Microbenchmark", "SystemBench", "BENCHES", "SCALES", "POLICIES", "asides", "fig8_aside",
           "system_benches", "run_benches", "depends", "scale_statement", "scenario_facts"]
