"""The steps of `make paper` that make data: a benchmark, a `testbed run`, a PySpark comparison, the
load-balancing tables, a long benchmark's figures read from its JSON.

Each takes the paper's State and returns a Step: its status, what it did, the index entries it feeds
and who made its data (this paper at HEAD, or, reused or resumed, whatever made it before:
testbed.paper_record). A step never raises on a failed child; the runner (testbed.paper) records it
and goes on.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from testbed import paper_record, provenance
from testbed.paper_figures import (BALANCE_KIND, REPO, SCALES, Aside, Microbenchmark, Options, SystemBench,
                                   balance_policies, compare_figures, experiment_images, EXPERIMENTS, rel,
                                   run_figures, scenario_facts)

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
    code = _subprocess([sys.executable, "-m", bench.module, *bench.args, *args])
    copied = []
    for name in bench.images:
        if (bench.json.parent / name).exists():
            shutil.copy2(bench.json.parent / name, out / name)
            copied.append(name)
    how = f"redrawn from {rel(bench.json)}" if redraw else f"ran {' '.join([bench.module, *bench.args, *args])}"
    step.status = "ok" if code == 0 and bench.json.exists() else "failed"
    step.detail = f"{how}; exit {code}; copied {', '.join(copied) or 'no PNG'}"
    if not bench.json.exists():
        step.detail += f"; {rel(bench.json)} missing"
    elif step.status == "ok" and resumed:
        step.made(done, f"resumed (done at {done['commit'][:7]}, {done['date']}); {step.detail}")
    elif step.status == "ok" and redraw:
        _made_elsewhere(step, bench.json, state)
    else:
        step.source_time = _json_time(bench.json)
    return step


def _run_dirs(runs_dir: Path, name: str) -> set[Path]:
    return {p for p in runs_dir.glob(f"{name}-*") if (p / "run.json").exists()}


def _jitter_of(run_dir: Path) -> str:
    """The cities' jitter a run was built with ("none" for a run on no cities, or before the option)."""
    try:
        infrastructure = (yaml.safe_load((run_dir / "scenario.yaml").read_text()) or {}).get("infrastructure") or {}
    except (OSError, yaml.YAMLError):
        return "none"
    return (infrastructure.get("cities") or {}).get("jitter") or "none"


def _control_of(run_dir: Path) -> dict:
    try:
        return (yaml.safe_load((run_dir / "scenario.yaml").read_text()) or {}).get("control") or {}
    except (OSError, yaml.YAMLError):
        return {}


def _other_system(run_dir: Path) -> str | None:
    """The system under test of a run, when it is not the one declaring its workload (`--system`):
    such a run is never one of the paper's policy runs, whatever its scenario's control.policy says."""
    from testbed import plugin

    try:
        scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    kind, system = (scenario.get("workload") or {}).get("kind"), scenario.get("system")
    return system if system and kind in plugin.workload_kinds() and system != plugin.default_system(kind) else None


def system_label(scenario: str, system: str) -> str:
    """A run's series under another system (its label, `natscluster/home`), from the scenario it runs."""
    from testbed import plugin
    from testbed.scenario.loader import load

    loaded = load(REPO / scenario)
    data = loaded.model_dump(mode="json", exclude_unset=True)
    return plugin.label(type(loaded).model_validate({**data, "system": system}))


def reusable_run(runs_dir: Path, name: str, policy: str, seed: int | None = None,
                 distance: str | None = None, jitter: str | None = None, system: str | None = None) -> Path | None:
    """The newest complete run of this scenario and policy (and seed, reading of d and cities' jitter,
    when given) that has traces, made by the system declaring the workload; with `system`, by that
    system (its policy not asked)."""
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
        if jitter is not None and _jitter_of(run_dir) != jitter:
            continue
        if _other_system(run_dir) != system:
            continue
        if meta.get("complete") and (system or control.get("policy") == policy) and any((run_dir / "traces").glob("*")):
            found.append((meta.get("started") or 0, run_dir))
    return max(found)[1] if found else None



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
    jitter = aside.jitter if aside and aside.jitter else facts["jitter"]
    override = aside.overrides if aside else []
    chosen = ["--system", system] if system else ["--policy", policy]
    policy = system_label(scenario, system) if system else policy
    step = Step(f"run {scenario} {' '.join(chosen)} --seed {seed}" + "".join(f" {a}" for a in override),
                figures=run_figures(kind, policy, options, aside))
    entry = {"workload": kind, "policy": policy, "repeat": repeat, "seed": seed, "distance": distance, "jitter": jitter,
             "dir": None}
    (state.aside_runs.setdefault(aside.name, []) if aside else state.runs).append(entry)
    done = state.resumed(step.name)
    if done and done.get("runs") and (REPO / done["runs"][0] / "run.json").exists():
        entry["dir"] = str(REPO / done["runs"][0])
        return step.made(done, f"resumed: {done['runs'][0]}, done at {done['commit'][:7]} ({done['date']})")
    if options.reuse_runs:
        found = reusable_run(runs_dir, name, policy, seed, distance, jitter, system)
        if found is not None:
            entry["dir"] = str(found)
            step.status, step.detail = "ok", f"reused {rel(found)}"
            _made_by_run(step, found)
            return step
    before = _run_dirs(runs_dir, name)
    code = _subprocess([sys.executable, "-m", "testbed.cli", "run", scenario, *chosen,
                        "--seed", str(seed), *override, "--results", str(runs_dir)])
    new = sorted(_run_dirs(runs_dir, name) - before, key=lambda p: p.stat().st_mtime)
    if new:
        entry["dir"] = str(new[-1])
        step.runs = [rel(new[-1])]
    else:
        entry["missing"] = f"testbed run exited {code} without a run directory"
    step.status = "ok" if code == 0 and new else "failed"
    step.detail = f"exit {code}; " + (f"results in {new[-1]}" if new else "no run directory")
    return step


def _made_by_run(step: Step, run_dir: Path) -> None:
    """A reused run: the commit its run.json records (uncommitted files then: not recorded) and its start."""
    import json

    meta = json.loads((run_dir / "run.json").read_text())
    step.elsewhere, step.runs = True, [rel(run_dir)]
    commit = meta.get("git_commit")
    step.commit = commit if commit and commit != "unknown" else None
    step.dirty = list(meta.get("git_dirty") or [])
    step.date = time.strftime("%Y-%m-%d %H:%M", time.localtime(meta["started"])) if meta.get("started") else ""


def compare_step(state: State, aside: Aside | None = None) -> Step:
    """The PySpark comparison of the smoke runs into OUT, or of an aside's run into OUT/<aside>/ (its
    PNGs copied into OUT as <figure>-<aside>.png and ...-p95.png)."""
    figures = compare_figures(state.options, aside)
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
        state.asides[aside.name] = result = compare_runs(spark, state.aside_runs.get(aside.name, []), out,
                                                         variant=aside.variant)
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



def read_bench_step(sb: SystemBench, state: State) -> Step:
    """A long benchmark's figures (its system's figures module) from its JSON, if present: never run here."""
    import importlib
    import json

    step = Step(f"{sb.bench.name} figures ({sb.module(sb.bench.figures)})", figures=sb.entries)
    if not sb.json.exists():
        step.status, step.detail = "skipped", f"{rel(sb.json)} missing ({sb.make}, ~{sb.bench.minutes:g} min)"
        return step
    figures = importlib.import_module(sb.module(sb.bench.figures))
    drawn = figures.draw(json.loads(sb.json.read_text()), state.options.out, sb.bench.name)
    _made_elsewhere(step, sb.json, state)
    step.status, step.detail = "ok", "; ".join(drawn) or "drew nothing"
    return step



def step_record(step: Step) -> dict:
    """A step as index.json keeps it (testbed.paper_record): its fields, the figures as a list."""
    return {**vars(step), "figures": list(step.figures)}


__all__ = ["Step", "State", "bench_step", "run_step", "compare_step", "balance_step", "read_bench_step",
           "reusable_run", "step_record"]
