"""`testbed paper` (`make paper`): every experiment at a scale this machine holds, every figure, one index.

This module is the runner: it plans the steps, runs them with progress and the time left, resumes,
and writes the index at the end. What each entry is made from is testbed.paper_figures; the steps
themselves testbed.paper_steps; the index's entries testbed.paper_entries; the record index.json
testbed.paper_record.

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

import time
from pathlib import Path
from typing import Callable, NamedTuple

from testbed import paper_record, provenance
from testbed.paper_entries import entries
from testbed.paper_figures import (REPO, SCALES, Options, asides, balance_aside, balance_policies, compare_figures,
                                   machine, other_systems, run_benches, run_figures, scale_statement, scenario_facts,
                                   system_benches)
from testbed.paper_steps import State, Step, balance_step, bench_step, compare_step, read_bench_step, run_step, step_record

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
                                 _run_guess(scenario), run_figures(kind, policy, options)))
            for system in other_systems(kind, options):  # the same runs on another system: a series beside them
                todo.append(Todo(f"run {scenario} --system {system} (repeat {repeat + 1}/{options.repeats})",
                                 lambda state, k=kind, s=scenario, y=system, r=repeat: run_step(k, s, y, state, r,
                                                                                                 system=y),
                                 _run_guess(scenario), run_figures(kind, system, options)))
        for policy in balance_policies(options):
            todo.append(Todo(f"run {balance.scenario} --policy {policy} (repeat {repeat + 1}/{options.repeats})",
                             lambda state, p=policy, r=repeat: run_step(balance.kind, balance.scenario, p, state, r, balance),
                             _run_guess(balance.scenario), run_figures(balance.kind, policy, options, balance)))
    todo.append(Todo("PySpark comparison", compare_step, GUESS_S["comparison"], compare_figures(options)))
    for aside in asides() if options.asides else ():
        todo.append(Todo(" ".join(["run", aside.scenario, "--policy", "epulsar", *aside.overrides]),
                         lambda state, a=aside: run_step(a.kind, a.scenario, "epulsar", state, 0, a), _run_guess(aside.scenario),
                         run_figures(aside.kind, "epulsar", options, aside)))
        todo.append(Todo(f"PySpark comparison of the {aside.name} run", lambda state, a=aside: compare_step(state, a),
                         GUESS_S["comparison"], compare_figures(options, aside)))
    if balance_policies(options):
        todo.append(Todo("load balancing figures and table", balance_step, GUESS_S["balance"], ("load-balancing",)))
    todo += [Todo(f"{b.bench.name} figures", lambda state, b=b: read_bench_step(b, state), GUESS_S["figures"], b.entries)
             for b in system_benches() if not b.bench.paper_runs]
    return [t for t in todo if set(t.feeds) & set(options.only)] if options.only else todo


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"



def _about(state: State, statement: str, started: float) -> dict:
    """The record's facts; `earlier` keeps the previous records at this commit that this paper has not
    (yet) redone, so a paper interrupted, or run --only, loses nothing a later --resume could skip."""
    done = {s.name for s in state.steps}
    earlier = [r for name, r in state.previous.items()
               if name not in done and provenance.same_commit(r.get("commit"), state.head.get("commit"))]
    return {"command": state.options.command, "machine": machine(), "scale": statement,
            "commit": state.head.get("commit"), "dirty": state.head.get("dirty", []),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": time.time() - started,
            "steps": [step_record(s) for s in state.steps], "earlier": earlier}


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


__all__ = ["Todo", "plan", "main", "RUN_OVERHEAD_S"]
