"""The paper's index entries: from what the steps left (benchmark JSON, comparisons, run folders), one
Entry per figure with our headline, the paper's, the verdict of its rule, its scale, sources and
what is missing (analysis.paper_index writes them as index.md, index.html; testbed.paper_record as
index.json).
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from testbed import paper_record
from testbed.paper_figures import (BALANCE_KIND, BENCHES, EXPERIMENTS, FIGURE_IMAGES, REPO, SCALES, SystemBench,
                                   asides, balance_aside, balance_images, balance_policies, depends,
                                   experiment_images, machine, pathspecs, rel, scenario_facts, smoke_entry,
                                   system_benches)
from testbed.paper_steps import State, step_record

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



def _source(path: Path, data: dict | None) -> str:
    """A benchmark's JSON as the index cites it: where, and when and on which machine it was measured."""
    when = (f" ({time.strftime('%Y-%m-%d %H:%M', time.localtime(data['time']))}"
            f"{', ' + data['machine'] if data.get('machine') else ''})" if data and data.get("time") else "")
    return rel(path) + when


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
                entry.missing.append(f"{rel(bench.json)} (make bench-{bench.name})")
            else:
                try:
                    entry.headline = headlines.BENCH_HEADLINES[fig][1](data)
                    table, notes = headlines.BENCH_TABLES.get(fig, (lambda _: [], lambda _: []))
                    entry.table, entry.notes = table(data), entry.notes + notes(data)
                except (headlines.MissingInput, KeyError, TypeError, ValueError) as error:
                    entry.missing.append(f"{rel(bench.json)}: {error}")
            out.append(entry)
    out += [e for b in system if b.bench.paper_runs for e in _system_bench_entries(b, failed)]
    comparison = state.comparison or {}
    for kind, scenario in SCALES[state.options.scale].items():
        out.append(_experiment_entry(smoke_entry(kind, state.options), kind, scenario, state.comparison, failed,
                                     images=experiment_images(EXPERIMENTS[kind].figure),
                                     note=EXPERIMENTS[kind].smoke_note))
    for aside in asides() if state.options.asides else ():
        out.append(_experiment_entry(aside.figure, aside.kind, aside.scenario, state.asides.get(aside.name), failed,
                                     images=experiment_images(EXPERIMENTS[aside.kind].figure, aside.name),
                                     note=aside.note))
    entry = Entry("violations", images=FIGURE_IMAGES["violations"], failed=failed.get("violations", []),
                  source=f"{rel(state.options.out / 'tables' / 'policy_violations.parquet')}, "
                         f"{rel(state.options.out / 'compare.json')}",
                  scale=f"{state.options.scale} scenarios; policies {', '.join(state.options.policies)}")
    if comparison.get("violations"):
        entry.headline = experiment_headlines.ours_violations(comparison, entry.scale)
    else:
        entry.missing.append("no policy comparison rows")
    out.append(entry)
    if balance_policies(state.options):
        out.append(_balance_entry(state, failed))
    out += [e for b in system if not b.bench.paper_runs for e in _system_bench_entries(b, failed)]
    steps = [step_record(s) for s in state.steps]
    scope = depends(state.options)
    for entry in out:
        if state.options.only and entry.figure not in state.options.only:
            entry.missing.insert(0, f"not run (--only {','.join(state.options.only)})")
        entry.depends = scope.get(entry.figure) or pathspecs([], [])
        entry.made = paper_record.made(entry.figure, steps)
    return out



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
            entry.missing.append(f"{rel(sb.json)} ({sb.make})")
            continue
        try:
            if len(b.shows) == 1:
                entry.table = getattr(figures, "markdown_table", lambda _: [])(result)
                entry.notes += getattr(figures, "notes", lambda _: [])(result)
            entry.headline = sb.judge(figure.entry)(result, entry.scale)
        except (headlines.MissingInput, KeyError, TypeError, ValueError) as error:
            entry.missing.append(f"{rel(sb.json)}: {error}")
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
                                   f"{rel(Path(e['dir'])) if e.get('dir') else e.get('missing', 'no run')}" for e in runs))
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
                  source="; ".join(f"{r['policy']} seed {r.get('seed', '?')}: {rel(Path(r['dir']))}" for r in runs)
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


__all__ = ["entries", "harness_notes"]
