"""`testbed paper` (`make paper`): every experiment at a scale this machine holds, every figure, one index.

Steps, each shown as [i/N] with what is left; a failing step is recorded and the others still run:

  microbenchmarks  bench nc (Fig. 3b), placement (Fig. 4, 5), monitoring (Fig. 6), migration (Fig. 7a, 7b):
                   `python -m testbed.bench.<name>` writing results/bench/<name>.json and PNGs; with
                   --reuse and the JSON present, only the figures are redrawn from it
  experiments      the UAV and MMOG scenarios --repeats N times per policy (`testbed run --policy P --seed S`,
                   seed = the file's + repeat), smoke scale by default, --scale full for uav.yaml/mmog.yaml;
                   runs land in <out>/runs/<scenario>-<id>/. The smokes check the mechanism; they are not
                   comparable with the paper (600 m/s, 60 s)
  asides           ePulsar once in each of asides(), each compared on its own into <out>/<aside>/: the UAV case
                   as the paper ran it (8 swarms of 8 UAVs, 50 m/s, 10 min) at its own 200 msg/s through the
                   compiled client engine (scenarios/uav.yaml) where bench-capacity's steady knee through the
                   engine holds that load, else at 5 msg/s (scenarios/uav-comparable.yaml), the index saying
                   which and why (Fig. 8's verdict), and the MMOG smoke under the other
                   reading of d (one_way; the smokes use rtt, the reading under which Fig. 4 reproduces)
  hot spot         scenarios/hotspot-smoke.yaml (hotspot.yaml at full scale) --repeats N times under each of
                   BALANCE_POLICIES (ePulsar, Pulsar's load manager, hashing), as an aside per policy
  comparison       PySpark over the runs' traces: fig8.png, fig9.png (one row per policy, first repeat),
                   fig8-p95.png, fig9-p95.png, violations.png (`analysis.compare_runs`); every table with a
                   95 % interval over the repeats (`analysis.stats`)
  load balancing   analysis.balance over the hot-spot, UAV and MMOG runs of BALANCE_POLICIES: balance.png,
                   balance-uav-swarm.png, balance-mmog.png (over time), balance-compare.png and the side-by-side table
  BAD Pub/Sub      the offline simulation is a microbenchmark (bench bad: badsim-fig5..14.png, the claims as
                   rules); the live sweep of every scheme (make bench-bad-live) is read when present: bad-live.png,
                   bad-live-load.png, bad-live-latency.png (testbed.systems.bad.bench.live_figures: latency beside cov) and its table
  index            <out>/index.md and index.html: each figure, our headline number, the paper's, the scale
                   and a verdict by a rule tied to the paper's mechanism (analysis.headlines): yes, no, or
                   "not testable" when the rule could not have failed (e.g. the configured topology bounds
                   every E2E latency below the threshold)
  record           <out>/index.json (testbed.paper_record), rewritten after every step: who made each entry
                   (commit, uncommitted files, date, runs, the guard's verdict, time), the paths it rests on
                   (depends) for `testbed paper --check` (testbed.paper_check), and each step's time, from which
                   the next paper's progress says how long is left; --resume skips the runs and benchmarks it
                   says were done at this commit; --only runs the steps feeding the entries it names

Exit code: 0 when every step succeeded, 1 when one failed (the index says which), 130 on Ctrl-C.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import yaml

from testbed import paper_record, plugin, provenance
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
                     f"the compiled engine, {steady:,.0f} deliveries/s, holds its {paper:,.0f}; {_rel(path)}); ")
    why = (f"the steady knee through the compiled engine is {steady:,.0f} deliveries/s, below the paper's "
           f"{paper:,.0f} ({_rel(path)})" if steady and paper else
           f"this machine's capacity through the compiled engine is not measured ({_rel(path)}: make bench-capacity "
           f"ARGS=\"--clients compiled\")")
    return Aside("comparable", "fig8", COMPARABLE_UAV, f"the paper's flight and length, rate scaled to 5 msg/s: {why}; ")


def asides() -> tuple[Aside, ...]:
    """The asides `make paper` runs (ePulsar once each); Fig. 8's is read from the capacity file at each
    call (a small JSON), so the plan, the scale statement and the index agree while it is unchanged."""
    return (fig8_aside(), Aside("one_way", "fig9-one_way", "scenarios/mmog-smoke.yaml",
                                "one-way distances (d = RTT / 2), ePulsar only; ", distance="one_way"))
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

    @property
    def json(self) -> Path:
        return BENCH_DIR / f"{self.name}.json"


BENCHES = (  # the core's own; each system's come from its manifest (system_benches)
    Microbenchmark("nc", "testbed.bench.nc", ("fig3b",), ("fig3b.png",), "--figures-only"),
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
        return Microbenchmark(b.name, self.module(b.program), self.entries, images, b.redraw, b.quick, b.minutes)

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
class Step:
    name: str
    status: str = "pending"           # ok | failed | skipped | interrupted
    seconds: float = 0.0
    detail: str = ""
    figures: tuple[str, ...] = ()
    # Who made the data it stands on (testbed.paper_record): this paper at HEAD unless `elsewhere`
    # (reused or resumed: then the commit, uncommitted files and date of whatever made it; commit None: not known)
    commit: str | None = None
    dirty: list[str] = field(default_factory=list)
    date: str = ""
    runs: list[str] = field(default_factory=list)    # run folders, as the index shows them
    source_time: float | None = None                 # a benchmark JSON's "time"
    elsewhere: bool = False
    resumed: bool = False                            # skipped by --resume: its time is the original's
    planned: str = ""                                # its name in the plan (what earlier timings are looked up by)

    def made(self, done: dict, detail: str) -> "Step":
        """This step stands on data a previous record says was made (resumed): its status, provenance and time."""
        self.status, self.detail, self.elsewhere, self.resumed = "ok", detail, True, True
        for key in ("commit", "dirty", "date", "runs", "source_time", "seconds"):
            setattr(self, key, done.get(key, getattr(self, key)))
        return self


@dataclass
class Options:
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


@dataclass
class State:
    options: Options
    steps: list[Step] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)     # {workload, policy, repeat, seed, dir, missing}
    comparison: dict | None = None
    aside_runs: dict = field(default_factory=dict)     # aside name -> its run entries
    asides: dict = field(default_factory=dict)         # aside name -> its comparison
    balance: dict | None = None                        # {table, missing}: analysis.balance over the runs
    previous: dict = field(default_factory=dict)       # step name -> its record in the last index.json
    head: dict = field(default_factory=dict)           # testbed.provenance.head() as this paper started

    def resumed(self, name: str) -> dict | None:
        """The previous record of step `name` when --resume skips it (testbed.paper_record.resumable)."""
        return paper_record.resumable(self.previous, name, self.head) if self.options.resume else None


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
            "description": data.get("description", ""), "duration": str(data.get("duration", "?"))}


def scale_statement(options: Options, benches_reused: list[str]) -> str:
    experiments = []
    for kind, rel in SCALES[options.scale].items():
        facts = scenario_facts(REPO / rel)
        experiments.append(f"{rel} ({facts['description']}; {facts['duration']}) {options.repeats} run(s) per "
                           f"policy ({', '.join(options.policies)}), seeds {facts['seed']}.."
                           f"{facts['seed'] + options.repeats - 1}; {EXPERIMENTS[kind].paper_scale}")
    for aside in asides() if options.asides else ():
        facts = scenario_facts(REPO / aside.scenario)
        experiments.append(f"{aside.scenario}{' --distance ' + aside.distance if aside.distance else ''} "
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


# ------------------------------------------------------------------------------------------ steps

def _rel(path: Path) -> str:
    """A path as the index shows it: relative to the repository when inside it."""
    path = Path(path)
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _subprocess(argv: list[str]) -> int:
    """A child in the repository, its output straight to ours; Ctrl-C reaches it too (same process group)."""
    return subprocess.call(argv, cwd=REPO)


def _json_time(path: Path) -> float | None:
    """A benchmark JSON's "time" (when it was measured): what ties it to the step that made it."""
    import json

    try:
        return json.loads(path.read_text()).get("time")
    except (OSError, ValueError, AttributeError):
        return None


def _made_elsewhere(step: Step, path: Path, state: State) -> None:
    """A step that only reads a benchmark JSON: who made it, from the previous record of this step when that
    ran it, else the mark `testbed bench` left beside it (testbed.provenance.mark); commit None: not known."""
    step.elsewhere, step.source_time = True, _json_time(path)
    done = paper_record.made_by(state.previous, step.name, step.source_time) or provenance.marked(path, step.source_time)
    step.commit = (done or {}).get("commit")
    step.dirty = list((done or {}).get("dirty") or [])
    step.date = (done or {}).get("date") or (time.strftime("%Y-%m-%d %H:%M", time.localtime(step.source_time))
                                             if step.source_time else "")


def bench_step(bench: Microbenchmark, state: State) -> Step:
    """Run a benchmark (or, with --reuse and its JSON there, or resumed, redraw its figures) and copy its PNGs."""
    options, out = state.options, state.options.out
    step = Step(f"bench {bench.name} ({', '.join(bench.figures)})" + (" --quick" if options.quick else ""),
                figures=bench.figures)
    done = state.resumed(step.name)
    resumed = bool(done) and bench.json.exists() and _json_time(bench.json) == done.get("source_time")
    redraw = resumed or (options.reuse and bench.json.exists())
    args = [bench.redraw] if redraw else (list(bench.quick) if options.quick else [])
    if not redraw:
        provenance.mark(bench.json)  # a later paper that only reads this JSON can name its commit
    code = _subprocess([sys.executable, "-m", bench.module, *args])
    copied = []
    for name in bench.images:
        if (BENCH_DIR / name).exists():
            shutil.copy2(BENCH_DIR / name, out / name)
            copied.append(name)
    how = f"redrawn from {_rel(bench.json)}" if redraw else f"ran {' '.join([bench.module, *args])}"
    step.status = "ok" if code == 0 and bench.json.exists() else "failed"
    step.detail = f"{how}; exit {code}; copied {', '.join(copied) or 'no PNG'}"
    if not bench.json.exists():
        step.detail += f"; {_rel(bench.json)} missing"
    elif step.status == "ok" and resumed:
        step.made(done, f"resumed (done at {done['commit'][:7]}, {done['date']}); {step.detail}")
    elif step.status == "ok" and redraw:
        _made_elsewhere(step, bench.json, state)
    else:
        step.source_time = _json_time(bench.json)
    return step


def _run_dirs(runs_dir: Path, name: str) -> set[Path]:
    return {p for p in runs_dir.glob(f"{name}-*") if (p / "run.json").exists()}


def _control_of(run_dir: Path) -> dict:
    try:
        return (yaml.safe_load((run_dir / "scenario.yaml").read_text()) or {}).get("control") or {}
    except (OSError, yaml.YAMLError):
        return {}


def _other_system(run_dir: Path) -> str | None:
    """The system under test of a run, when it is not the one declaring its workload (`--system`):
    such a run is never one of the paper's policy runs, whatever its scenario's control.policy says."""
    try:
        scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    kind, system = (scenario.get("workload") or {}).get("kind"), scenario.get("system")
    return system if system and kind in plugin.workload_kinds() and system != plugin.default_system(kind) else None


def other_systems(kind: str, options: Options) -> list[str]:
    """The systems besides the declaring one that `make paper` runs on `kind`'s experiment."""
    running = plugin.systems_running(kind)[1:]
    return running if options.systems is None else [s for s in running if s in options.systems]


def system_label(scenario: str, system: str) -> str:
    """A run's series under another system (its label, `natscluster/home`), from the scenario it runs."""
    from testbed.scenario.loader import load

    loaded = load(REPO / scenario)
    data = loaded.model_dump(mode="json", exclude_unset=True)
    return plugin.label(type(loaded).model_validate({**data, "system": system}))


def reusable_run(runs_dir: Path, name: str, policy: str, seed: int | None = None,
                 distance: str | None = None, system: str | None = None) -> Path | None:
    """The newest complete run of this scenario and policy (and seed and reading of d, when given)
    that has traces, made by the system declaring the workload; with `system`, by that system
    (its policy not asked)."""
    from testbed.policies import DEFAULT_DISTANCE

    import json

    found = []
    for run_dir in _run_dirs(runs_dir, name):
        try:
            meta = json.loads((run_dir / "run.json").read_text())
        except (OSError, ValueError):
            continue
        if seed is not None and meta.get("seed") != seed:
            continue
        control = _control_of(run_dir)
        if distance is not None and (control.get("distance") or DEFAULT_DISTANCE) != distance:
            continue
        if _other_system(run_dir) != system:
            continue
        if meta.get("complete") and (system or control.get("policy") == policy) and any((run_dir / "traces").glob("*")):
            found.append((meta.get("started") or 0, run_dir))
    return max(found)[1] if found else None


def harness_notes(rows: list[dict], scenario: str) -> list[str]:
    """What the index must say about the harness (testbed.health) for one scenario's runs: runs
    it saturated and the messages left out of the verdict, or runs never checked."""
    notes = []
    for r in rows:
        if r.get("scenario") != scenario:
            continue
        if r.get("valid") is None:
            notes.append(f"{r['policy']} run {r['run_id']}: harness not checked (a run before the saturation guard)")
        elif not r["valid"]:
            notes.append(f"{r['policy']} run {r['run_id']}: harness saturated for {r['saturated_s']:.0f} s; "
                         f"{r['excluded']} of {r['messages']} messages left out of the verdict")
    return notes


def _smoke_entry(kind: str, options: Options) -> str:
    """The index entry of a kind's per-policy runs: its figure, or <figure>-smoke when an aside makes that
    figure as the paper ran it (the UAV case)."""
    figure = EXPERIMENTS[kind].figure
    return f"{figure}-smoke" if options.asides and any(a.figure == figure for a in asides()) else figure


def _run_figures(kind: str, policy: str, options: Options, aside: Aside | None = None) -> tuple[str, ...]:
    """The index entries a run feeds: its aside's, or its kind's comparison, the violations and (under a
    balance policy) load balancing."""
    if aside:
        return (aside.figure,)
    return (_smoke_entry(kind, options), "violations", *(("load-balancing",) if policy in balance_policies(options) else ()))


def _compare_figures(options: Options, aside: Aside | None = None) -> tuple[str, ...]:
    return (aside.figure,) if aside else (*(_smoke_entry(k, options) for k in SCALES[options.scale]), "violations")


def run_step(kind: str, scenario: str, policy: str, state: State, repeat: int = 0, aside: Aside | None = None,
             system: str | None = None) -> Step:
    """One `testbed run` of `scenario` under `policy` (or, with `system`, under that system under
    test: its entry's policy is the system's label), the file's seed + `repeat`; its entry goes to
    the smoke comparison's runs, or to `aside`'s."""
    options = state.options
    runs_dir = options.out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    facts = scenario_facts(REPO / scenario)
    name, seed = facts["name"], facts["seed"] + repeat
    distance = aside.distance if aside and aside.distance else facts["distance"]
    override = ["--distance", aside.distance] if aside and aside.distance else []
    chosen = ["--system", system] if system else ["--policy", policy]
    policy = system_label(scenario, system) if system else policy
    step = Step(f"run {scenario} {' '.join(chosen)} --seed {seed}" + "".join(f" {a}" for a in override),
                figures=_run_figures(kind, policy, options, aside))
    entry = {"workload": kind, "policy": policy, "repeat": repeat, "seed": seed, "distance": distance, "dir": None}
    (state.aside_runs.setdefault(aside.name, []) if aside else state.runs).append(entry)
    done = state.resumed(step.name)
    if done and done.get("runs") and (REPO / done["runs"][0] / "run.json").exists():
        entry["dir"] = str(REPO / done["runs"][0])
        return step.made(done, f"resumed: {done['runs'][0]}, done at {done['commit'][:7]} ({done['date']})")
    if options.reuse_runs:
        found = reusable_run(runs_dir, name, policy, seed, distance, system)
        if found is not None:
            entry["dir"] = str(found)
            step.status, step.detail = "ok", f"reused {_rel(found)}"
            _made_by_run(step, found)
            return step
    before = _run_dirs(runs_dir, name)
    code = _subprocess([sys.executable, "-m", "testbed.cli", "run", scenario, *chosen,
                        "--seed", str(seed), *override, "--results", str(runs_dir)])
    new = sorted(_run_dirs(runs_dir, name) - before, key=lambda p: p.stat().st_mtime)
    if new:
        entry["dir"] = str(new[-1])
        step.runs = [_rel(new[-1])]
    else:
        entry["missing"] = f"testbed run exited {code} without a run directory"
    step.status = "ok" if code == 0 and new else "failed"
    step.detail = f"exit {code}; " + (f"results in {new[-1]}" if new else "no run directory")
    return step


def _made_by_run(step: Step, run_dir: Path) -> None:
    """A reused run: the commit its run.json records (uncommitted files then: not recorded) and its start."""
    import json

    meta = json.loads((run_dir / "run.json").read_text())
    step.elsewhere, step.runs = True, [_rel(run_dir)]
    commit = meta.get("git_commit")
    step.commit = commit if commit and commit != "unknown" else None
    step.dirty = list(meta.get("git_dirty") or [])
    step.date = time.strftime("%Y-%m-%d %H:%M", time.localtime(meta["started"])) if meta.get("started") else ""


def compare_step(state: State, aside: Aside | None = None) -> Step:
    """The PySpark comparison of the smoke runs into OUT, or of an aside's run into OUT/<aside>/ (its
    PNGs copied into OUT as <figure>-<aside>.png and ...-p95.png)."""
    figures = _compare_figures(state.options, aside)
    step = Step(f"PySpark comparison of {'the ' + aside.name + ' run' if aside else 'the runs'} ({', '.join(figures)})",
                figures=figures)
    from analysis.compare_runs import compare_runs
    from analysis.spark import java_available, session

    if not java_available():
        step.status, step.detail = "failed", "Spark needs a Java runtime (make setup installs default-jre-headless)"
        return step
    spark = session(state.options.master)
    if aside:
        out = state.options.out / aside.name
        state.asides[aside.name] = result = compare_runs(spark, state.aside_runs.get(aside.name, []), out)
        figure = EXPERIMENTS[aside.kind].figure
        for drawn, copy in zip(experiment_images(figure), experiment_images(figure, aside.name)):
            if (out / drawn).exists():
                shutil.copy2(out / drawn, state.options.out / copy)
    else:
        state.comparison = result = compare_runs(spark, state.runs, state.options.out)
    drawn = sorted(result["figures"])
    missing = result["missing"]
    step.status = "ok" if drawn and not missing else "failed"
    step.detail = f"drew {', '.join(drawn) or 'nothing'}" + (
        "; missing " + ", ".join(f"{m['workload']}/{m['policy']} ({m['reason']})" for m in missing) if missing else "")
    return step


def balance_step(state: State) -> Step:
    """Load balancing (analysis.balance): over time per scenario (the first repeat of each of
    BALANCE_POLICIES: balance.png for the balance experiment, balance-<workload>.png for the others) and the
    side-by-side table and figure (balance-compare.png) over every repeat."""
    from analysis import balance

    step = Step("load balancing (analysis.balance)", figures=("load-balancing",))
    out, wanted = state.options.out, balance_policies(state.options)
    entries = [e for e in state.runs + state.aside_runs.get(BALANCE_KIND, []) if e["policy"] in wanted and e.get("dir")]
    runs, missing = [], []
    for e in entries:
        try:
            runs.append(balance.load_run(e["dir"]))
        except balance.BadRun as error:
            missing.append(str(error))
    drawn = []
    for workload, name in ((BALANCE_KIND, "balance.png"), *((k, f"balance-{k}.png") for k in SCALES[state.options.scale])):
        first = {}
        for run in runs:
            if run["workload"] == workload and run["brokers"]:
                first.setdefault(run["policy"], run)
        if first:
            drawn.append(balance.over_time_figure(list(first.values()), out / name)["path"])
    rows = []
    for run in runs:
        try:
            rows.append(balance.run_row(run))
        except balance.BadRun as error:
            missing.append(str(error))
    table = balance.side_by_side(rows)
    if table:
        drawn.append(balance.comparison_figure(table, out / "balance-compare.png")["path"])
    state.balance = {"table": table, "missing": missing}
    step.status = "ok" if table and not missing else "failed"
    step.detail = f"drew {', '.join(Path(d).name for d in drawn) or 'nothing'}; {len(rows)} run(s) in the table" + (
        "; missing " + "; ".join(missing) if missing else "")
    return step


# ------------------------------------------------------------------------------------------ index

def _source(path: Path, data: dict | None) -> str:
    """A benchmark's JSON as the index cites it: where, and when and on which machine it was measured."""
    when = (f" ({time.strftime('%Y-%m-%d %H:%M', time.localtime(data['time']))}"
            f"{', ' + data['machine'] if data.get('machine') else ''})" if data and data.get("time") else "")
    return _rel(path) + when


def entries(state: State):
    """One index entry per figure, with its headline, sources and what is missing or failed."""
    import json

    from analysis import experiment_headlines, headlines
    from analysis.paper_index import Entry

    failed = {}
    for step in state.steps:
        if step.status in ("failed", "interrupted"):
            for fig in step.figures:
                failed.setdefault(fig, []).append(f"{step.name} ({step.detail})")
    out = []
    system = system_benches()
    for bench in BENCHES:
        data = None
        if bench.json.exists():
            data = json.loads(bench.json.read_text())
        for fig in bench.figures:
            entry = Entry(fig, images=FIGURE_IMAGES[fig], failed=failed.get(fig, []), source=_source(bench.json, data))
            if data is None:
                entry.missing.append(f"{_rel(bench.json)} (make bench-{bench.name})")
            else:
                try:
                    entry.headline = headlines.BENCH_HEADLINES[fig][1](data)
                except (headlines.MissingInput, KeyError, TypeError, ValueError) as error:
                    entry.missing.append(f"{_rel(bench.json)}: {error}")
            out.append(entry)
    out += [e for b in system if b.bench.paper_runs for e in _system_bench_entries(b, failed)]
    comparison = state.comparison or {}
    for kind, scenario in SCALES[state.options.scale].items():
        out.append(_experiment_entry(_smoke_entry(kind, state.options), kind, scenario, state.comparison, failed,
                                     images=experiment_images(EXPERIMENTS[kind].figure),
                                     note=EXPERIMENTS[kind].smoke_note))
    for aside in asides() if state.options.asides else ():
        out.append(_experiment_entry(aside.figure, aside.kind, aside.scenario, state.asides.get(aside.name), failed,
                                     images=experiment_images(EXPERIMENTS[aside.kind].figure, aside.name),
                                     note=aside.note))
    entry = Entry("violations", images=FIGURE_IMAGES["violations"], failed=failed.get("violations", []),
                  source=f"{_rel(state.options.out / 'tables' / 'policy_violations.parquet')}, "
                         f"{_rel(state.options.out / 'compare.json')}",
                  scale=f"{state.options.scale} scenarios; policies {', '.join(state.options.policies)}")
    if comparison.get("violations"):
        entry.headline = experiment_headlines.ours_violations(comparison, entry.scale)
    else:
        entry.missing.append("no policy comparison rows")
    out.append(entry)
    if balance_policies(state.options):
        out.append(_balance_entry(state, failed))
    out += [e for b in system if not b.bench.paper_runs for e in _system_bench_entries(b, failed)]
    steps = [_step_record(s) for s in state.steps]
    scope = depends(state.options)
    for entry in out:
        if state.options.only and entry.figure not in state.options.only:
            entry.missing.insert(0, f"not run (--only {','.join(state.options.only)})")
        entry.depends = scope.get(entry.figure) or _pathspecs([], [])
        entry.made = paper_record.made(entry.figure, steps)
    return out


# What an entry's numbers rest on, as git pathspecs (`testbed paper --check` diffs them against the entry's
# commits): the harness every measurement passes through (not the live view, nor the systems the entry
# does not run: git cannot include a folder again below an excluded one), then the entry's own scenarios.
HARNESS_PATHS = ("testbed", ":(exclude)testbed/view", "analysis", "requirements.txt")
BENCH_SCENARIOS = "scenarios/bench"


def _system_path(package: str) -> str:
    return package.replace(".", "/")


def _pathspecs(packages: list[str], files: list[str]) -> list[str]:
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
        own[_smoke_entry(kind, options)] = mine
        compared = (compared[0] + mine[0], compared[1] + mine[1])
    for aside in asides() if options.asides else ():
        own[aside.figure] = ([plugin.system_of(aside.kind).package], [aside.scenario])
    own["violations"] = compared
    if balance_policies(options):
        balance = balance_aside(options)
        own["load-balancing"] = (compared[0] + [plugin.system_of(balance.kind).package], compared[1] + [balance.scenario])
    return {fig: _pathspecs(*paths) for fig, paths in own.items()}


def run_benches() -> list[Microbenchmark]:
    """The benchmarks `make paper` runs: the paper's microbenchmarks, then each system's quick ones."""
    return list(BENCHES) + [b.as_microbenchmark() for b in system_benches() if b.bench.paper_runs]


def read_bench_step(sb: SystemBench, state: State) -> Step:
    """A long benchmark's figures (its system's figures module) from its JSON, if present: never run here."""
    import importlib
    import json

    step = Step(f"{sb.bench.name} figures ({sb.module(sb.bench.figures)})", figures=sb.entries)
    if not sb.json.exists():
        step.status, step.detail = "skipped", f"{_rel(sb.json)} missing ({sb.make}, ~{sb.bench.minutes:g} min)"
        return step
    figures = importlib.import_module(sb.module(sb.bench.figures))
    drawn = figures.draw(json.loads(sb.json.read_text()), state.options.out, sb.bench.name)
    _made_elsewhere(step, sb.json, state)
    step.status, step.detail = "ok", "; ".join(drawn) or "drew nothing"
    return step


def _system_bench_entries(sb: SystemBench, failed: dict) -> list:
    """A system benchmark's index entries: each figure's claim, its rule's verdict, the table, what is missing."""
    import importlib
    import json

    from analysis import headlines
    from analysis.paper_index import Entry

    b = sb.bench
    result = json.loads(sb.json.read_text()) if sb.json.exists() else None
    figures = importlib.import_module(sb.module(b.figures)) if result is not None else None
    out = []
    for figure in b.shows:
        entry = Entry(figure.entry, images=list(figure.images), failed=failed.get(figure.entry, []),
                      source=_source(sb.json, result), scale=b.scale, rule=figure.rule,
                      claim=headlines.Claim(figure.section, figure.title, figure.paper))
        out.append(entry)
        if result is None:
            entry.missing.append(f"{_rel(sb.json)} ({sb.make})")
            continue
        try:
            if len(b.shows) == 1:
                entry.table = getattr(figures, "markdown_table", lambda _: [])(result)
                entry.notes += getattr(figures, "notes", lambda _: [])(result)
            entry.headline = sb.judge(figure.entry)(result, entry.scale)
        except (headlines.MissingInput, KeyError, TypeError, ValueError) as error:
            entry.missing.append(f"{_rel(sb.json)}: {error}")
    return out


def _balance_entry(state: State, failed: dict):
    """"Load balancing": the figures, the headline and the side-by-side table (analysis.balance)."""
    from analysis import balance, headlines
    from analysis.paper_index import Entry

    runs = [e for e in state.runs + state.aside_runs.get(BALANCE_KIND, []) if e["policy"] in balance_policies(state.options)]
    compared = ", ".join(EXPERIMENTS[k].title for k in SCALES[state.options.scale])
    entry = Entry("load-balancing", images=balance_images(), failed=failed.get("load-balancing", []),
                  scale=f"{state.options.scale} scenarios ({compared}, {balance_aside(state.options).scenario}); policies "
                        f"{', '.join(balance_policies(state.options))}; {state.options.repeats} repeat(s)",
                  source="; ".join(f"{e['workload']} {e['policy']} seed {e.get('seed', '?')}: "
                                   f"{_rel(Path(e['dir'])) if e.get('dir') else e.get('missing', 'no run')}" for e in runs))
    done = state.balance or {}
    entry.missing += done.get("missing", [])
    try:
        entry.headline = balance.headline(done.get("table") or [], entry.scale)
        entry.table = balance.markdown_table(done["table"])
    except headlines.MissingInput as error:
        entry.missing.append(str(error))
    return entry


def _experiment_entry(fig: str, kind: str, scenario: str, comparison: dict | None, failed: dict,
                      images: list[str], note: str = ""):
    """Fig. 8 or 9 from one comparison: its headline by `analysis.experiment_headlines`, the runs it
    rests on, what is missing and what the saturation guard left out."""
    from analysis import experiment_headlines, headlines
    from analysis.paper_index import Entry
    from testbed.paper_scale import against_paper

    facts = scenario_facts(REPO / scenario)
    runs = [r for r in (comparison or {}).get("runs", []) if r["workload"] == kind]
    scale = (f"{note}{against_paper(kind, scenario)}; {facts['name']} ({facts['description']}; {facts['duration']}); "
             f"{len(runs)} run(s) on {machine()}")
    entry = Entry(fig, images=images, failed=failed.get(fig, []), scale=scale,
                  source="; ".join(f"{r['policy']} seed {r.get('seed', '?')}: {_rel(Path(r['dir']))}" for r in runs)
                  or "no runs")
    if comparison is None:
        entry.missing.append("no comparison (the PySpark step did not run or failed)")
        return entry
    entry.missing += [f"{m['policy']} run: {m['reason']}" for m in comparison.get("missing", []) if m["workload"] == kind]
    try:
        entry.headline = experiment_headlines.EXPERIMENT_HEADLINES[fig.split("-")[0]](
            comparison, facts["name"], _first_class(REPO / scenario), scale)
    except headlines.MissingInput as error:
        entry.missing.append(str(error))
    entry.notes += harness_notes(comparison.get("harness") or [], facts["name"])
    return entry


def _first_class(path: Path) -> str | None:
    topics = ((yaml.safe_load(path.read_text()) or {}).get("workload") or {}).get("topics") or []
    return topics[0].get("name") if topics else None


# ------------------------------------------------------------------------------------------ main

# How long a step should take when no earlier paper timed it (testbed.paper_record.expected_s): a run
# is its scenario's duration plus bring-up and teardown (a 60 s smoke takes 91-96 s on the 2-core VM).
RUN_OVERHEAD_S = 40.0
GUESS_S = {"redraw": 30.0, "comparison": 90.0, "balance": 60.0, "figures": 20.0}


class Todo(NamedTuple):
    name: str
    action: Callable[[State], Step]
    guess_s: float                    # its expected duration when no earlier paper timed it
    feeds: tuple[str, ...] = ()       # the index entries it feeds (what --only selects by)


def _run_guess(scenario: str) -> float:
    from testbed.units import parse_duration

    try:
        return parse_duration(scenario_facts(REPO / scenario)["duration"]) + RUN_OVERHEAD_S
    except ValueError:
        return 120.0


def plan(options: Options) -> list[Todo]:
    """Every step, in order; with `options.only`, those feeding the entries it names."""
    todo = [Todo(f"bench {b.name}", lambda state, b=b: bench_step(b, state),
                 GUESS_S["redraw"] if options.reuse and b.json.exists() else b.minutes * 60, b.figures)
            for b in run_benches()]
    balance = balance_aside(options)
    for repeat in range(options.repeats):  # repeat-major: an interrupted paper still has every policy once
        for kind, scenario in SCALES[options.scale].items():
            for policy in options.policies:
                todo.append(Todo(f"run {scenario} --policy {policy} (repeat {repeat + 1}/{options.repeats})",
                                 lambda state, k=kind, s=scenario, p=policy, r=repeat: run_step(k, s, p, state, r),
                                 _run_guess(scenario), _run_figures(kind, policy, options)))
            for system in other_systems(kind, options):  # the same runs on another system: a series beside them
                todo.append(Todo(f"run {scenario} --system {system} (repeat {repeat + 1}/{options.repeats})",
                                 lambda state, k=kind, s=scenario, y=system, r=repeat: run_step(k, s, y, state, r,
                                                                                                 system=y),
                                 _run_guess(scenario), _run_figures(kind, system, options)))
        for policy in balance_policies(options):
            todo.append(Todo(f"run {balance.scenario} --policy {policy} (repeat {repeat + 1}/{options.repeats})",
                             lambda state, p=policy, r=repeat: run_step(balance.kind, balance.scenario, p, state, r, balance),
                             _run_guess(balance.scenario), _run_figures(balance.kind, policy, options, balance)))
    todo.append(Todo("PySpark comparison", compare_step, GUESS_S["comparison"], _compare_figures(options)))
    for aside in asides() if options.asides else ():
        todo.append(Todo(f"run {aside.scenario} --policy epulsar" + (f" --distance {aside.distance}" if aside.distance else ""),
                         lambda state, a=aside: run_step(a.kind, a.scenario, "epulsar", state, 0, a), _run_guess(aside.scenario),
                         _run_figures(aside.kind, "epulsar", options, aside)))
        todo.append(Todo(f"PySpark comparison of the {aside.name} run", lambda state, a=aside: compare_step(state, a),
                         GUESS_S["comparison"], _compare_figures(options, aside)))
    if balance_policies(options):
        todo.append(Todo("load balancing figures and table", balance_step, GUESS_S["balance"], ("load-balancing",)))
    todo += [Todo(f"{b.bench.name} figures", lambda state, b=b: read_bench_step(b, state), GUESS_S["figures"], b.entries)
             for b in system_benches() if not b.bench.paper_runs]
    return [t for t in todo if set(t.feeds) & set(options.only)] if options.only else todo


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def _step_record(step: Step) -> dict:
    return {**vars(step), "figures": list(step.figures)}


def _about(state: State, statement: str, started: float) -> dict:
    """The record's facts; `earlier` keeps the previous records at this commit that this paper has not
    (yet) redone, so a paper interrupted, or run --only, loses nothing a later --resume could skip."""
    done = {s.name for s in state.steps}
    earlier = [r for name, r in state.previous.items()
               if name not in done and provenance.same_commit(r.get("commit"), state.head.get("commit"))]
    return {"command": state.options.command, "machine": machine(), "scale": statement,
            "commit": state.head.get("commit"), "dirty": state.head.get("dirty", []),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": time.time() - started,
            "steps": [_step_record(s) for s in state.steps], "earlier": earlier}


def _run(todo: Todo, state: State, interrupted: bool) -> tuple[Step, bool]:
    """One step, its time and who made its data (HEAD now, unless the step says its data came from elsewhere)."""
    t0, head = time.monotonic(), provenance.head()
    if interrupted:
        step = Step(todo.name, "skipped", detail="interrupted before this step")
    else:
        try:
            step = todo.action(state)
        except KeyboardInterrupt:
            step, interrupted = Step(todo.name, "interrupted", detail="Ctrl-C"), True
        except Exception as error:  # noqa: BLE001 - a failing step is reported, the others still run
            step = Step(todo.name, "failed", detail=f"{type(error).__name__}: {error}")
    if not step.resumed:
        step.seconds = time.monotonic() - t0
    if not step.elsewhere:
        step.commit, step.dirty, step.date = head["commit"], head["dirty"], time.strftime("%Y-%m-%d %H:%M")
    step.planned = todo.name
    return step, interrupted


def main(options: Options, say=print) -> int:
    """Run every step, write the index; 0 if all succeeded, 1 if any failed, 130 if interrupted."""
    from analysis.paper_index import write_index

    started = time.time()
    options.out = Path(options.out).resolve()
    options.out.mkdir(parents=True, exist_ok=True)
    state = State(options, head=provenance.head())
    try:
        state.previous = paper_record.steps_by_name(paper_record.read(options.out))
    except ValueError as error:
        say(f"paper: {error}; starting afresh")
    reused = [b.name for b in run_benches() if options.reuse and b.json.exists()]
    statement = scale_statement(options, reused)
    todo = plan(options)
    timed = {s.get("planned"): s for s in state.previous.values()}
    expected = [paper_record.expected_s(timed, t.name, t.guess_s) for t in todo]
    total = len(todo) + 1
    say(f"paper: {total} steps into {options.out} at {provenance.short(state.head['commit'])}"
        + (f" ({len(state.head['dirty'])} uncommitted files)" if state.head["dirty"] else "")
        + f", ~{_minutes(sum(expected))} expected\npaper: {statement}")
    interrupted = False
    for i, t in enumerate(todo, 1):
        say(f"\n[{i}/{total}] {t.name} ... ({_minutes(time.time() - started)} so far, ~{_minutes(sum(expected[i - 1:]))} "
            f"left with this one)")
        step, interrupted = _run(t, state, interrupted)
        state.steps.append(step)
        paper_record.write(options.out, _about(state, statement, started))  # --resume starts from here
        took = f"(it took {step.seconds:.0f} s when it ran)" if step.resumed else f"in {step.seconds:.0f} s"
        say(f"[{i}/{total}] {t.name}: {step.status} {took}; {step.detail}")
    say(f"\n[{total}/{total}] index ...")
    about = _about(state, statement, started)
    made = entries(state)
    md, page = write_index(options.out, made, about)
    paper_record.write(options.out, {**about, "entries": [e.record(options.out) for e in made]})
    bad = [s for s in state.steps if s.status != "ok"]
    say(f"[{total}/{total}] index: {md}, {page} and {paper_record.path(options.out).name}")
    if bad:
        say("paper: not ok: " + "; ".join(f"{s.name}: {s.status}" for s in bad))
    say(f"paper: took {_minutes(time.time() - started)} in all")
    return 130 if interrupted else (1 if bad else 0)


__all__ = ["Options", "main", "BENCHES", "SCALES", "POLICIES", "reusable_run", "entries", "scale_statement"]
