"""One run directory -> its reduced tables (the I/O around the pure jobs in `analysis.jobs`).

    reduce_run(spark, "results/uav-smoke-ab12cd")            # tables in results/uav-smoke-ab12cd/tables/
    reduce_run(spark, "s3a://bucket/results/uav-ab12cd", out="s3a://bucket/reduced/uav-ab12cd")

A local run directory is first converted to Parquet (`analysis.traces`) when its Parquet files are
missing or older than its JSON lines; a URI must already hold traces.parquet, events.parquet and
run.parquet. Each table is one Parquet directory `<out>/<name>.parquet`:

  summary      per topic class: topics, messages, p50/p95/max latency, threshold, violation ratio
  e2e          Fig. 8: per topic and time bucket: p50/p95/max latency
  relinks      relink events with their time since the run start
  migration_marks  Fig. 8: each topic migration's end with its time since the run start
  time_above   per relink and topic of the node: seconds above the threshold until the topic migrated
  violations   violation ratio per run (policy, workflow) and topic class
  losses       per producer and topic: expected, received, lost, duplicates, reordered
  migrations   Fig. 7: per topic migration: migration time, worst client downtime
  aoi          Fig. 9: per avatar in one consumer's AoI and time bucket (MMOG runs: the player that saw
               the most avatars; or --consumer)
  aoi_marks    Fig. 9: that consumer's group changes and the migrations of the topics it received

and, for a local run with coordinate snapshots, `analysis.estimates`' E(t) tables (estimates,
estimate_pairs) and its figure estimates.png (estimated vs configured RTT, the settle's end marked).
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis import estimates, jobs, traces
from analysis.spark import is_uri, join
from testbed import plugin

TABLES = ("summary", "e2e", "relinks", "migration_marks", "time_above", "violations", "losses", "migrations", "aoi", "aoi_marks")
CONSUMER_TABLES = ("aoi", "aoi_marks")  # only for a run with one consumer to follow (MMOG)


def current(run_dir) -> bool:
    """Whether a local run's tables can be drawn from as they are: converted from its newest traces,
    and every table there (a reduction by an older version lacks a newer table: reduce again)."""
    tables = Path(run_dir) / "tables"
    return not traces.needs_conversion(run_dir) and all(
        (tables / f"{name}.parquet").exists() for name in TABLES if name not in CONSUMER_TABLES)


def _players(location: str) -> list[str]:
    """The MMOG run's players (its mmog-plan.json), or none (a URI, or a run without a plan)."""
    path = Path(location, "mmog-plan.json")
    if is_uri(location) or not path.exists():
        return []
    return list(json.loads(path.read_text()).get("players", []))


def run_thresholds(spark, run: dict):
    """Per-run thresholds frame (run_id, policy, workflow, topic_class, threshold_s) from run.parquet's row."""
    thresholds = run.get("thresholds") or {}
    if isinstance(thresholds, str):
        thresholds = json.loads(thresholds)
    rows = [(run.get("run_id"), run.get("policy"), run.get("workflow"), str(k), float(v))
            for k, v in thresholds.items() if v is not None]
    return spark.createDataFrame(rows, "run_id string, policy string, workflow string, topic_class string, "
                                       "threshold_s double")


def reduce_run(spark, location, out=None, bucket_s: float = 1.0, consumer: str | None = None,
               force_convert: bool = False, say=print) -> dict:
    """Convert if needed, run the jobs, write the tables; returns {run, tables, summary, conversion}."""
    location = str(location)
    conversion = None
    if not is_uri(location):
        conversion = traces.ensure_converted(location, force=force_convert)
        if conversion is not None:
            say(traces.describe(conversion))
    out = str(out) if out else join(location, "tables")
    trace_df = spark.read.parquet(join(location, "traces.parquet"))
    events = spark.read.parquet(join(location, "events.parquet"))
    runs = spark.read.parquet(join(location, "run.parquet"))
    run = runs.first().asDict()
    thresholds = run_thresholds(spark, run)

    frames = {
        "summary": jobs.summary(trace_df, thresholds),
        "e2e": jobs.e2e_over_time(trace_df, bucket_s, events),
        "relinks": jobs.relinks(events, trace_df),
        "migration_marks": jobs.migration_marks(events, trace_df),
        "time_above": jobs.time_above_threshold_after_relink(trace_df, events, thresholds),
        "violations": jobs.violation_ratio(trace_df, thresholds),
        "losses": jobs.losses(trace_df),
        "migrations": jobs.migration_downtime(events, runs),
    }
    experiment = plugin.experiments().get(run.get("workload"))
    if consumer is None and experiment and experiment.one_consumer:
        players = _players(location)  # e.g. Fig. 9 is one avatar's view (paper 5.8.2), not a game server's
        ranked = trace_df.where(trace_df.consumer.isin(players)) if players else trace_df
        best = jobs.representative_consumer(ranked).first()
        consumer = best["consumer"] if best else None
    if consumer:
        frames["aoi"] = jobs.aoi_latency(trace_df, consumer, bucket_s, events)
        frames["aoi_marks"] = jobs.aoi_marks(trace_df, events, consumer)
    written = {}
    for name, frame in frames.items():
        target = join(out, f"{name}.parquet")
        frame.coalesce(1).write.mode("overwrite").parquet(target)
        written[name] = target
    measured = None if is_uri(location) or is_uri(out) else estimates.reduce(location, out)
    if measured:
        written.update(measured["tables"])
    summary_rows = [row.asDict() for row in spark.read.parquet(written["summary"]).orderBy("topic_class").collect()]
    result = {"run": run, "tables": written, "summary": summary_rows, "consumer": consumer, "bucket_s": bucket_s,
              "conversion": None if conversion is None else conversion.meta, "estimates": measured}
    if not is_uri(out):
        Path(out, "reduce.json").write_text(json.dumps(
            {k: v for k, v in result.items() if k != "conversion"}, indent=2, default=str))
    return result


def format_summary(result: dict) -> str:
    run = result["run"]
    state = "partial" if run.get("partial") else "complete"
    lines = [f"run {run.get('run_id')} ({run.get('scenario')}, policy {run.get('policy')}, "
             f"workflow {run.get('workflow')}, {run.get('trace_rows')} trace rows, {state})"]
    header = f"{'topic class':<18} {'topics':>6} {'messages':>10} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} " \
             f"{'thr ms':>7} {'violations':>10}"
    lines.append(header)
    for row in result["summary"]:
        def ms(v):
            return f"{v * 1000:8.2f}" if v is not None else f"{'-':>8}"
        thr = f"{row['threshold_s'] * 1000:7.1f}" if row.get("threshold_s") is not None else f"{'-':>7}"
        ratio = f"{row['violation_ratio'] * 100:9.2f}%" if row.get("violation_ratio") is not None else f"{'-':>10}"
        lines.append(f"{row['topic_class']:<18} {row['topics']:>6} {row['messages']:>10} {ms(row['p50_s'])} "
                     f"{ms(row['p95_s'])} {ms(row['max_s'])} {thr} {ratio}")
    if not result["summary"]:
        lines.append("(no trace rows)")
    lines.extend(estimates.format_lines(result.get("estimates")))
    where = result["tables"]["summary"].rsplit("/", 1)[0]
    lines.append("tables: " + ", ".join(sorted(result["tables"])) + f" in {where}")
    return "\n".join(lines)


__all__ = ["TABLES", "current", "reduce_run", "run_thresholds", "format_summary"]
