"""Runs of the UAV and MMOG scenarios under each policy -> cross-run tables and the comparative figures.

    result = compare_runs(spark, [{"workload": "uav-swarm", "policy": "epulsar", "dir": "results/paper/runs/uav-smoke-ab12cd"},
                                  {"workload": "mmog", "policy": "allpairs", "dir": None, "missing": "run failed"}, ...],
                          out="results/paper")

The I/O around `analysis.compare`: every run is reduced as `testbed figures` does (its own tables/),
MMOG runs all with the same consumer so Fig. 9's panels show one client; then the union of the runs'
traces gives the per-policy tables (`<out>/tables/*.parquet`, rows also in `<out>/compare.json`) and
the figures: fig8.png and fig9.png (one row per policy), fig8-p95.png and fig9-p95.png (one line per
policy), violations.png. A run without trace rows is drawn as a missing panel with its reason.

The verdicts' inputs are here too: per scenario and policy the post-handover windows (Fig. 8) and
the migrations after group changes (Fig. 9), judged against the runs' reaction time (Fig. 8: plus
each run's own migration time, `analysis.bounds.Limits.window_s`); and per run the
worst E2E latency its configured topology allows (`analysis.bounds`), which says when a rule cannot
fail. Every table is computed on the messages the saturation guard keeps (`compare.outside_saturated`).
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis import bounds, compare, figures, traces
from analysis.reduce import current, reduce_run
from analysis.spark import join
from testbed import plugin

# The workload kinds compared across policies, each drawn as its figure (the systems' manifests declare them).
EXPERIMENTS = {kind: e for kind, e in plugin.experiments().items() if not e.balance}
WORKLOAD_FIGURE = {kind: e.figure for kind, e in EXPERIMENTS.items()}
SCENARIO_TITLES = {kind: e.title for kind, e in EXPERIMENTS.items()}


def _tables(run_dir: Path) -> dict:
    import pyarrow.parquet as pq

    return {p.name.removesuffix(".parquet"): pq.read_table(p) for p in sorted((run_dir / "tables").glob("*.parquet"))}


def _reduced_consumer(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "tables" / "reduce.json").read_text()).get("consumer")
    except (OSError, ValueError):
        return None


def _reduce(spark, run_dir: Path, consumer: str | None, say) -> None:
    """Reduce unless the tables are current (and, for MMOG, made for the wanted consumer)."""
    if not current(run_dir) or (consumer and _reduced_consumer(run_dir) != consumer):
        reduce_run(spark, run_dir, consumer=consumer, say=say)


def _migrations(run_dir: Path) -> int | None:
    """Topic migrations the run's summary counted (testbed run writes summary.json)."""
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("migrations")
    except (OSError, ValueError):
        return None


def _distance(run_dir: Path) -> str:
    """The run's reading of d (control.distance in its scenario.yaml; the default when absent)."""
    import yaml

    from testbed.policies import DEFAULT_DISTANCE

    try:
        control = (yaml.safe_load((run_dir / "scenario.yaml").read_text()) or {}).get("control") or {}
    except (OSError, yaml.YAMLError):
        control = {}
    return control.get("distance") or DEFAULT_DISTANCE


def label_readings(usable: list[dict]) -> None:
    """Runs of one scenario under different readings of d are different experiments: their scenario
    label gets ` (d=<reading>)` so no table pools them. Runs under one reading keep the plain name."""
    readings: dict = {}
    for u in usable:
        readings.setdefault(u["run"].get("scenario"), set()).add(u["distance"])
    for u in usable:
        if len(readings[u["run"].get("scenario")]) > 1:
            u["run"]["scenario"] = u["scenario"] = f"{u['run'].get('scenario')} (d={u['distance']})"


def _note(run: dict) -> str:
    parts = [f"run {run.get('run_id')}"]
    if run.get("partial"):
        parts.append("partial run")
    if traces.harness_note(run):
        parts.append(traces.harness_note(run))
    return ", ".join(parts)


def _harness_rows(usable: list[dict], all_messages, kept) -> list[dict]:
    """Per run: its harness verdict and the messages left out of every verdict (sent while saturated)."""
    from pyspark.sql import functions as F

    before = {r["run_id"]: r["n"] for r in all_messages.groupBy("run_id").agg(F.count(F.lit(1)).alias("n")).collect()}
    after = {r["run_id"]: r["n"] for r in kept.groupBy("run_id").agg(F.count(F.lit(1)).alias("n")).collect()}
    rows = []
    for u in usable:
        run = u["run"]
        run_id = run.get("run_id")
        rows.append({"run_id": run_id, "scenario": run.get("scenario"), "policy": run.get("policy"),
                     "valid": run.get("harness_valid"),
                     "saturated_s": sum(i["to_s"] - i["from_s"] for i in run.get("harness_saturated") or []),
                     "messages": before.get(run_id, 0), "excluded": before.get(run_id, 0) - after.get(run_id, 0)})
    return rows


INTERVAL_COLUMNS = {"violation_ratio": (0.0, 1.0), "p50_s": (0.0, float("inf")), "p95_s": (0.0, float("inf"))}


def with_intervals(pooled: list[dict], per_run: list[dict]) -> None:
    """Give each pooled row (scenario, policy, topic class) a 95 % interval of the mean over its runs
    for INTERVAL_COLUMNS (`analysis.stats.mean_ci`; each repeat has its own seed): `<column>_ci`."""
    from analysis.stats import mean_ci

    key = ("scenario", "policy", "topic_class")
    for row in pooled:
        mine = [r for r in per_run if all(r[k] == row[k] for k in key)]
        for column, limits in INTERVAL_COLUMNS.items():
            values = [r[column] for r in mine if r.get(column) is not None]
            row[f"{column}_ci"] = mean_ci(values, bounds=limits).as_dict() if values else None


def compare_runs(spark, runs: list[dict], out, bucket_s: float = 1.0, stat: str = "p95_s", say=print,
                 variant: str = "") -> dict:
    """Reduce the runs, write the per-policy tables and figures into `out`; returns what was drawn and the rows."""
    out = Path(out)
    usable, missing, panels = [], [], {kind: [] for kind in WORKLOAD_FIGURE}
    consumers: dict[str, str | None] = {}
    order = sorted(runs, key=lambda r: figures.policy_key(r["policy"]))  # ePulsar's run picks Fig. 9's client
    for entry in order:
        kind, policy = entry["workload"], entry["policy"]
        run_dir = Path(entry["dir"]) if entry.get("dir") else None
        panel = {"policy": policy, "missing": entry.get("missing")}
        if run_dir is not None and not panel["missing"]:
            traces.ensure_converted(run_dir)
            run = traces.read_run(run_dir)
            if not run.get("trace_rows"):
                panel["missing"] = f"run {run.get('run_id')} has no trace rows"
            else:
                one_consumer = kind in EXPERIMENTS and EXPERIMENTS[kind].one_consumer
                _reduce(spark, run_dir, consumers.get(kind) if one_consumer else None, say)
                if one_consumer and kind not in consumers:
                    consumers[kind] = _reduced_consumer(run_dir)
                tables = _tables(run_dir)
                thresholds = run.get("thresholds") or {}
                first_class = next(iter(thresholds), None)
                panel.update(threshold_s=thresholds.get(first_class), topic_class=first_class, note=_note(run),
                             saturated=run.get("harness_saturated"), faults=run.get("faults"),
                             e2e=tables.get("e2e"), relinks=tables.get("relinks"), aoi=tables.get("aoi"),
                             migrations=tables.get("migration_marks"),
                             marks=tables.get("aoi_marks"))
                limits = bounds.run_limits(run_dir)
                usable.append({**entry, "dir": str(run_dir), "run": run, "migrations": _migrations(run_dir),
                               "distance": _distance(run_dir),
                               "scenario": run.get("scenario"), "reaction_s": limits.reaction_s,
                               "migration_s": limits.migration_s, "window_s": limits.window_s,
                               "latency_bound_s": limits.bound.seconds if limits.bound else None,
                               "bound_path": limits.bound.path if limits.bound else None})
        panel.setdefault("threshold_s", entry.get("threshold_s"))
        if not panel.get("missing") and run_dir is None:
            panel["missing"] = "no run"
        if panel.get("missing"):
            missing.append({"workload": kind, "policy": policy, "reason": panel["missing"]})
        if not entry.get("repeat"):  # the time-series figures show each policy's first repeat
            panels.setdefault(kind, []).append(panel)

    label_readings(usable)
    result = {"runs": [{k: v for k, v in u.items() if k != "run"} | {"run_id": u["run"].get("run_id")}
                       for u in usable],
              "missing": missing,
              "figures": {}, "violations": [], "run_violations": [], "latency": [], "recovery": [], "handovers": [],
              "reactions": []}
    if usable:
        labels = compare.runs_frame(spark, [u["run"] for u in usable])
        trace_df = spark.read.parquet(*[join(u["dir"], "traces.parquet") for u in usable])
        events = spark.read.parquet(*[join(u["dir"], "events.parquet") for u in usable])
        all_messages = trace_df
        trace_df = compare.outside_saturated(trace_df, events, compare.saturated_frame(spark, [u["run"] for u in usable]))
        result["harness"] = _harness_rows(usable, all_messages, trace_df)
        reaction = max((u["reaction_s"] for u in usable if u["reaction_s"]), default=bounds.PAPER_REACTION_S)
        result["reaction_s"] = reaction
        # Fig. 8's windows: each run's reaction time plus its own migration time (analysis.bounds)
        windows = {u["run"].get("run_id"): u["window_s"] or reaction for u in usable}
        frames = {"violations": compare.policy_violations(trace_df, labels),
                  "run_violations": compare.policy_violations(trace_df, labels, per_run=True),
                  "latency": compare.policy_latency_over_time(trace_df, labels, bucket_s, events),
                  "recovery": compare.policy_recovery(trace_df, events, labels),
                  "handovers": compare.policy_handovers(trace_df, events, labels, windows),
                  "reactions": compare.policy_reactions(events, labels, reaction)}
        for name, frame in frames.items():
            target = out / "tables" / f"policy_{name}.parquet"
            frame.coalesce(1).write.mode("overwrite").parquet(str(target))
            result[name] = [row.asDict() for row in spark.read.parquet(str(target)).collect()]
        with_intervals(result["violations"], result["run_violations"])
    for kind_panels in panels.values():  # a missing panel still shows its scenario's threshold
        known = next((p["threshold_s"] for p in kind_panels if p.get("threshold_s")), None)
        for panel in kind_panels:
            panel["threshold_s"] = panel.get("threshold_s") or known
    scenario_of = {u["workload"]: u["run"].get("scenario") for u in usable}
    for kind, fig in WORKLOAD_FIGURE.items():
        kind_panels = panels.get(kind) or []
        if not kind_panels:
            continue
        if fig == "fig8":
            topic_class = next((p["topic_class"] for p in kind_panels if p.get("topic_class")), None)
            drawn = figures.fig8_policies(kind_panels, out / "fig8.png", stat=stat, topic_class=topic_class,
                                          variant=variant)
        else:
            drawn = figures.fig9_policies(kind_panels, out / "fig9.png", stat=stat, variant=variant)
        result["figures"][fig] = drawn
        rows = [r for r in result["latency"] if r["scenario"] == scenario_of.get(kind)]
        if rows:
            title = (f"{SCENARIO_TITLES[kind]}{figures.variant_title(variant)}: {figures.STAT_NAMES.get(stat, stat)} "
                     "E2E latency per policy")
            result["figures"][f"{fig}-p95"] = figures.policy_over_time(rows, out / f"{fig}-p95.png", title, stat=stat)
    if result["violations"]:
        titles = {scenario_of[k]: SCENARIO_TITLES[k] for k in WORKLOAD_FIGURE if k in scenario_of}
        result["figures"]["violations"] = figures.policy_violations(result["violations"], out / "violations.png",
                                                                    scenario_titles=titles)
    result["consumers"] = consumers
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(result, indent=2, default=str))
    return result


__all__ = ["compare_runs", "WORKLOAD_FIGURE"]
