"""PySpark reductions across runs: the same scenario under each policy, side by side (`testbed paper`).

Pure DataFrame -> DataFrame functions like `analysis.jobs` (no I/O). Their `runs` input labels each
run: one row per run and topic class with run_id, scenario, policy, topic_class, threshold_s (what
`runs_frame` builds from run.parquet rows). Traces and events are the unions of the runs' Parquet
files; every output is grouped by scenario and policy, so several runs of one policy pool their
messages (a ratio over all messages, not a mean of ratios).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis import jobs

RUN_COLUMNS = "run_id string, scenario string, policy string, topic_class string, threshold_s double"


def runs_frame(spark, runs: list[dict]) -> DataFrame:
    """Run rows (`traces.read_run`: run_id, scenario, policy, thresholds) -> one row per run and topic class."""
    rows = [(r.get("run_id"), r.get("scenario"), r.get("policy"), str(cls), float(thr))
            for r in runs for cls, thr in (r.get("thresholds") or {}).items() if thr is not None]
    return spark.createDataFrame(rows, RUN_COLUMNS)


SATURATED_COLUMNS = "run_id string, from_s double, to_s double"


def saturated_frame(spark, runs: list[dict]) -> DataFrame:
    """Run rows (`traces.read_run`, with harness_saturated) -> one row per saturated interval."""
    rows = [(r.get("run_id"), float(i["from_s"]), float(i["to_s"]))
            for r in runs for i in (r.get("harness_saturated") or [])]
    return spark.createDataFrame(rows, SATURATED_COLUMNS)


def outside_saturated(traces: DataFrame, events: DataFrame, saturated: DataFrame) -> DataFrame:
    """Traces without the messages sent while their run's harness was saturated (testbed.health):
    there the latency is the harness's, so no verdict may rest on them. Same columns as `traces`."""
    starts = jobs.run_starts(traces, events)
    sent = traces.join(F.broadcast(starts), "run_id").withColumn("_t", F.col("send_time") - F.col("t0"))
    spans = F.broadcast(saturated.withColumnRenamed("run_id", "_run"))
    inside = (F.col("run_id") == F.col("_run")) & (F.col("_t") >= F.col("from_s")) & (F.col("_t") < F.col("to_s"))
    return sent.join(spans, inside, "left_anti").select(*traces.columns)


def _labelled(traces: DataFrame, runs: DataFrame) -> DataFrame:
    """Traces of the labelled runs with latency_s, topic_class, scenario, policy and threshold_s."""
    return jobs.with_latency(traces).join(F.broadcast(runs), ["run_id", "topic_class"])


def policy_violations(traces: DataFrame, runs: DataFrame, accuracy: int = jobs.ACCURACY,
                      per_run: bool = False) -> DataFrame:
    """Per scenario, policy and topic class over all its runs: how often and how far the threshold is exceeded.

    Columns: scenario, policy, topic_class, threshold_s, runs, topics, messages, p50_s, p95_s, p99_s,
    max_s, violations, violation_ratio (violations / messages). With `per_run`, one row per run as
    well (a run_id column first): the samples of the confidence intervals over repeats
    (`analysis.stats`), and the rows of `testbed compare` (`analysis.side_by_side`).
    """
    rows = _labelled(traces, runs)
    above = (F.col("latency_s") > F.col("threshold_s")).cast("long")
    quantiles = F.percentile_approx("latency_s", [0.5, 0.95, 0.99], accuracy)
    keys = (["run_id"] if per_run else []) + ["scenario", "policy", "topic_class", "threshold_s"]
    return (rows.groupBy(*keys)
            .agg(F.countDistinct("run_id").alias("runs"), F.countDistinct("topic").alias("topics"),
                 F.count(F.lit(1)).alias("messages"), quantiles.getItem(0).alias("p50_s"),
                 quantiles.getItem(1).alias("p95_s"), quantiles.getItem(2).alias("p99_s"),
                 F.max("latency_s").alias("max_s"), F.sum(above).alias("violations"))
            .withColumn("violation_ratio", F.col("violations") / F.col("messages"))
            .select(*keys, "runs", "topics", "messages", "p50_s", "p95_s", "p99_s", "max_s", "violations",
                    "violation_ratio")
            .orderBy("scenario", "topic_class", "policy", *(["run_id"] if per_run else [])))


def policy_latency_over_time(traces: DataFrame, runs: DataFrame, bucket_s: float = 1.0,
                             events: DataFrame | None = None, accuracy: int = jobs.ACCURACY) -> DataFrame:
    """Per scenario, policy, topic class and time bucket (since each run's start), over all its topics.

    Columns: scenario, policy, topic_class, threshold_s, bucket, t_s, messages, p50_s, p95_s, max_s,
    violation_ratio.
    """
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    starts = jobs.run_starts(traces, events)
    rows = (_labelled(traces, runs).join(F.broadcast(starts), "run_id")
            .withColumn("bucket", F.floor((F.col("send_time") - F.col("t0")) / F.lit(bucket_s)).cast("long")))
    above = (F.col("latency_s") > F.col("threshold_s")).cast("long")
    quantiles = F.percentile_approx("latency_s", [0.5, 0.95], accuracy)
    return (rows.groupBy("scenario", "policy", "topic_class", "threshold_s", "bucket")
            .agg(F.count(F.lit(1)).alias("messages"), quantiles.getItem(0).alias("p50_s"),
                 quantiles.getItem(1).alias("p95_s"), F.max("latency_s").alias("max_s"),
                 (F.sum(above) / F.count(F.lit(1))).alias("violation_ratio"))
            .withColumn("t_s", F.col("bucket") * F.lit(float(bucket_s)))
            .select("scenario", "policy", "topic_class", "threshold_s", "bucket", "t_s", "messages", "p50_s",
                    "p95_s", "max_s", "violation_ratio")
            .orderBy("scenario", "topic_class", "policy", "bucket"))


def policy_recovery(traces: DataFrame, events: DataFrame, runs: DataFrame) -> DataFrame:
    """Per scenario and policy: after each relink (zone change), how long the node's topics stay above threshold.

    Uses `jobs.time_above_threshold_after_relink(by="relink")` on every run. Columns: scenario, policy,
    relinks, relinks_above (some topic went above), median_s and max_s of time_above_s over relinks,
    unclosed (still above when the window ended: the topic never came back under the threshold).
    """
    thresholds = runs.select("run_id", "topic_class", "threshold_s")
    per_relink = jobs.time_above_threshold_after_relink(traces, events, thresholds, by="relink")
    labels = runs.select("run_id", "scenario", "policy").distinct()
    return (per_relink.join(F.broadcast(labels), "run_id")
            .groupBy("scenario", "policy")
            .agg(F.count(F.lit(1)).alias("relinks"),
                 F.sum((F.col("time_above_s") > 0).cast("long")).alias("relinks_above"),
                 F.percentile_approx("time_above_s", 0.5, jobs.ACCURACY).alias("median_s"),
                 F.max("time_above_s").alias("max_s"),
                 F.sum((~F.col("closed")).cast("long")).alias("unclosed"))
            .orderBy("scenario", "policy"))


def policy_handovers(traces: DataFrame, events: DataFrame, runs: DataFrame,
                     max_window_s: float | Mapping[str, float]) -> DataFrame:
    """Fig. 8's mechanism per scenario and policy: the post-handover windows and the rest of the run.

    A window opens at a relink of a node (a swarm enters another MEC zone) and lasts, per topic of the
    node, until the topic is back under its threshold (`jobs.time_above_threshold_after_relink`); the
    relink's window is its longest topic's. A window is `long` when it lasted more than
    `max_window_s` (one for every run, or per run_id: each run's own reaction and migration time,
    `analysis.bounds.Limits.window_s`), closed or not; `open` when it never closed but was watched for
    less than that (the next relink or the end of the run came first: undecided). Every message of a
    topic sent inside one of its windows is left out; the others are the run "outside the windows".

    Columns: scenario, policy, relinks, windows_long, windows_open, longest_window_s, window_limit_s
    (the longest limit of the scenario's runs under the policy), messages_outside, within_outside (at
    or below the threshold), within_ratio_outside.
    """
    thresholds = runs.select("run_id", "topic_class", "threshold_s")
    per_topic = jobs.time_above_threshold_after_relink(traces, events, thresholds, by="topic").cache()
    windows = (per_topic.where(F.col("time_above_s") > 0)
               .select(F.col("run_id").alias("_run"), F.col("topic").alias("_topic"),
                       F.col("relink_time").alias("_from"), (F.col("relink_time") + F.col("time_above_s")).alias("_to"),
                       F.col("closed").alias("_closed")))
    # A closed window ends at the first message back under the threshold; an open one at its last message.
    ends = (F.col("send_time") < F.col("_to")) | (~F.col("_closed") & (F.col("send_time") <= F.col("_to")))
    inside = ((F.col("run_id") == F.col("_run")) & (F.col("topic") == F.col("_topic"))
              & (F.col("send_time") >= F.col("_from")) & ends)
    outside = (_labelled(traces, runs).join(F.broadcast(windows), inside, "left_anti")
               .groupBy("scenario", "policy")
               .agg(F.count(F.lit(1)).alias("messages_outside"),
                    F.sum((F.col("latency_s") <= F.col("threshold_s")).cast("long")).alias("within_outside")))
    labels = runs.select("run_id", "scenario", "policy").distinct()
    if isinstance(max_window_s, Mapping):
        limits = traces.sparkSession.createDataFrame([(str(k), float(v)) for k, v in max_window_s.items()],
                                                     "run_id string, _limit double")
        labels = labels.join(F.broadcast(limits), "run_id", "left")
    else:
        labels = labels.withColumn("_limit", F.lit(float(max_window_s)))
    limit = F.col("_limit")
    per_relink = (per_topic.groupBy("run_id", "node", "relink_time")
                  .agg(F.max("time_above_s").alias("window_s"), F.min(F.col("closed").cast("int")).alias("_closed")))
    relinks = (per_relink.join(F.broadcast(labels), "run_id")
               .groupBy("scenario", "policy")
               .agg(F.count(F.lit(1)).alias("relinks"),
                    F.sum((F.col("window_s") > limit).cast("long")).alias("windows_long"),
                    F.sum(((F.col("_closed") == 0) & (F.col("window_s") <= limit)).cast("long")).alias("windows_open"),
                    F.max("window_s").alias("longest_window_s")))
    limits_used = labels.groupBy("scenario", "policy").agg(F.max("_limit").alias("window_limit_s"))
    return (outside.join(relinks, ["scenario", "policy"], "left")
            .join(limits_used, ["scenario", "policy"], "left")
            .fillna(0, ["relinks", "windows_long", "windows_open"])
            .withColumn("within_ratio_outside", F.col("within_outside") / F.col("messages_outside"))
            .select("scenario", "policy", "relinks", "windows_long", "windows_open", "longest_window_s",
                    "window_limit_s", "messages_outside", "within_outside", "within_ratio_outside")
            .orderBy("scenario", "policy"))


def policy_reactions(events: DataFrame, runs: DataFrame, horizon_s: float) -> DataFrame:
    """Fig. 9's mechanism per scenario and policy: topic migrations that follow a change of subscribers.

    A group change makes game servers subscribe to and unsubscribe from avatar topics (`aoi_change`
    events list the topics); a migration "after a group change" is a `migration_start` of one of those
    topics within `horizon_s` after the change (the control loop's reaction time).

    Columns: scenario, policy, changes (aoi_change events), migrations (all migration_start),
    migrations_after_change.
    """
    labels = runs.select("run_id", "scenario", "policy").distinct()
    lists = F.from_json("attrs", "subscribed array<string>, unsubscribed array<string>")
    changes = events.where(F.col("type") == "aoi_change")
    changed = (changes.withColumn("_lists", lists)
               .select("run_id", F.col("time").alias("_changed"),
                       F.explode(F.concat(F.coalesce(F.col("_lists.subscribed"), F.array().cast("array<string>")),
                                          F.coalesce(F.col("_lists.unsubscribed"), F.array().cast("array<string>"))))
                       .alias("topic")))
    starts = events.where(F.col("type") == "migration_start").select("run_id", "topic", "time")
    following = (starts.join(changed, ["run_id", "topic"])
                 .where((F.col("time") >= F.col("_changed")) & (F.col("time") <= F.col("_changed") + F.lit(float(horizon_s))))
                 .select("run_id", "topic", "time").distinct()
                 .groupBy("run_id").agg(F.count(F.lit(1)).alias("migrations_after_change")))
    counts = (labels
              .join(changes.groupBy("run_id").agg(F.count(F.lit(1)).alias("changes")), "run_id", "left")
              .join(starts.groupBy("run_id").agg(F.count(F.lit(1)).alias("migrations")), "run_id", "left")
              .join(following, "run_id", "left")
              .fillna(0, ["changes", "migrations", "migrations_after_change"]))
    return (counts.groupBy("scenario", "policy")
            .agg(F.sum("changes").alias("changes"), F.sum("migrations").alias("migrations"),
                 F.sum("migrations_after_change").alias("migrations_after_change"))
            .orderBy("scenario", "policy"))


__all__ = ["RUN_COLUMNS", "SATURATED_COLUMNS", "saturated_frame", "outside_saturated", "runs_frame", "policy_violations", "policy_latency_over_time", "policy_recovery", "policy_handovers", "policy_reactions"]
