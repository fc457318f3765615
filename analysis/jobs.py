"""PySpark reductions of traces and events: pure functions from DataFrames to DataFrames, no I/O.

Inputs have the Parquet schemas of `analysis.traces` (TRACE_SCHEMA, EVENT_SCHEMA); any DataFrame with
those columns works, whoever built it. Times are epoch seconds (float); latencies come out in
seconds (columns end in `_s`). A message's latency is `receive_time - send_time`: every node shares
the host's clock, and `send_time` is the scheduled send time (open loop), so a message held back by a
migration counts with the wait. "Relative to the run start" means after the run's `run_start` event,
or after its first send when the events have none.

A topic's class is its name up to the first `-` (`follow_leader-swarm3` -> `follow_leader`,
`avatar-17` -> `avatar`); thresholds are given per class: a number of seconds (all classes), a dict
{class: seconds}, or a DataFrame with `topic_class`, `threshold_s` and optionally `run_id` (per-run
thresholds) plus any grouping columns such as `policy` or `workflow` (kept in the output).

Percentiles are Spark's `percentile_approx` (accuracy 10000 by default: the rank error is at most
1/10000 of the count, and the value is always one of the data's latencies).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from analysis.traces import MEMBER_CLASS

ACCURACY = 10000
THRESHOLD_COLUMNS = ("topic_class", "threshold_s")


# ------------------------------------------------------------------------------------------ helpers

def topic_class(topic: Column | str = "topic") -> Column:
    """`follow_leader-swarm3` -> `follow_leader`: the topic name up to the first `-`."""
    column = F.col(topic) if isinstance(topic, str) else topic
    return F.regexp_extract(column, r"^([^-]*)", 1)


def with_latency(traces: DataFrame) -> DataFrame:
    """Traces plus `latency_s` and `topic_class`."""
    return (traces.withColumn("latency_s", F.col("receive_time") - F.col("send_time"))
            .withColumn("topic_class", topic_class("topic")))


def _percentiles(column: str, accuracy: int) -> list[Column]:
    quantiles = F.percentile_approx(column, [0.5, 0.95], accuracy)
    return [quantiles.getItem(0).alias("p50_s"), quantiles.getItem(1).alias("p95_s")]


def run_starts(traces: DataFrame | None = None, events: DataFrame | None = None) -> DataFrame:
    """`run_id`, `t0`: the run's `run_start` event, else its first send, else its first event."""
    parts = []
    if events is not None:
        parts.append(events.groupBy("run_id").agg(
            F.min(F.when(F.col("type") == "run_start", F.col("time"))).alias("_start"),
            F.min("time").alias("_first_event")))
    if traces is not None:
        parts.append(traces.groupBy("run_id").agg(F.min("send_time").alias("_first_send")))
    if not parts:
        raise ValueError("run_starts needs traces or events")
    starts = parts[0] if len(parts) == 1 else parts[0].join(parts[1], "run_id", "full")
    candidates = [F.col(c) for c in ("_start", "_first_send", "_first_event") if c in starts.columns]
    return starts.select("run_id", F.coalesce(*candidates).alias("t0"))


def thresholds_frame(spark, thresholds) -> DataFrame | None:
    """dict {class: seconds} or DataFrame -> DataFrame(topic_class, threshold_s, ...); a number -> None."""
    if isinstance(thresholds, DataFrame):
        missing = [c for c in THRESHOLD_COLUMNS if c not in thresholds.columns]
        if missing:
            raise ValueError(f"thresholds DataFrame lacks {missing}; it needs topic_class and threshold_s")
        return thresholds
    if isinstance(thresholds, dict):
        rows = [(str(k), float(v)) for k, v in thresholds.items() if v is not None]
        return spark.createDataFrame(rows, "topic_class string, threshold_s double")
    if isinstance(thresholds, (int, float)):
        return None
    raise TypeError(f"thresholds: a number of seconds, a dict or a DataFrame, not {type(thresholds).__name__}")


def _with_threshold(rows: DataFrame, thresholds) -> tuple[DataFrame, list[str]]:
    """Attach `threshold_s` by topic class (and run, if the thresholds are per run); extra grouping columns."""
    frame = thresholds_frame(rows.sparkSession, thresholds)
    if frame is None:
        return rows.withColumn("threshold_s", F.lit(float(thresholds))), []
    keys = ["topic_class"] + (["run_id"] if "run_id" in frame.columns else [])
    extra = [c for c in frame.columns if c not in keys and c != "threshold_s"]
    return rows.join(F.broadcast(frame), keys, "left"), extra


# ------------------------------------------------------------------------------------------ Fig. 8

def e2e_over_time(traces: DataFrame, bucket_s: float = 1.0, events: DataFrame | None = None,
                  accuracy: int = ACCURACY) -> DataFrame:
    """Fig. 8: per run, topic and time bucket (by send time, relative to the run start): latency stats.

    Columns: run_id, topic, topic_class, bucket, t_s (bucket start), messages, p50_s, p95_s, max_s.
    """
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    starts = run_starts(traces, events)
    rows = with_latency(traces).join(F.broadcast(starts), "run_id")
    rows = rows.withColumn("bucket", F.floor((F.col("send_time") - F.col("t0")) / F.lit(bucket_s)).cast("long"))
    return (rows.groupBy("run_id", "topic", "topic_class", "bucket")
            .agg(F.count(F.lit(1)).alias("messages"), *_percentiles("latency_s", accuracy),
                 F.max("latency_s").alias("max_s"))
            .withColumn("t_s", F.col("bucket") * F.lit(float(bucket_s)))
            .select("run_id", "topic", "topic_class", "bucket", "t_s", "messages", "p50_s", "p95_s", "max_s"))


def relinks(events: DataFrame, traces: DataFrame | None = None) -> DataFrame:
    """Relink events with their time relative to the run start: run_id, node, time, t_s, from_site, to_site."""
    starts = run_starts(traces, events)
    return (events.where(F.col("type") == "relink")
            .join(F.broadcast(starts), "run_id", "left")
            .select("run_id", "node", "time", (F.col("time") - F.col("t0")).alias("t_s"), "from_site", "to_site"))


def migration_marks(events: DataFrame, traces: DataFrame | None = None) -> DataFrame:
    """Fig. 8's migration marks: each topic migration's end relative to the run start: run_id, topic,
    t_s, from_broker, to_broker, ok."""
    starts = run_starts(traces, events)
    return (events.where(F.col("type") == "migration_end")
            .join(F.broadcast(starts), "run_id", "left")
            .select("run_id", "topic", (F.col("time") - F.col("t0")).alias("t_s"), "from_broker", "to_broker", "ok")
            .orderBy("t_s"))


# ------------------------------------------------------------------------------------------ Fig. 9

def aoi_latency(traces: DataFrame, consumer: str, bucket_s: float = 1.0, events: DataFrame | None = None,
                accuracy: int = ACCURACY) -> DataFrame:
    """Fig. 9: for one consumer, per producer (avatar in its area of interest) and time bucket.

    A producer has rows only while the consumer is subscribed to it, so its series runs for as long as
    the avatar is in the consumer's AoI. Columns: run_id, consumer, producer, topics, bucket, t_s,
    messages, p50_s, p95_s, max_s.
    """
    starts = run_starts(traces, events)
    rows = (with_latency(traces.where(F.col("consumer") == consumer)).join(F.broadcast(starts), "run_id")
            .withColumn("bucket", F.floor((F.col("send_time") - F.col("t0")) / F.lit(bucket_s)).cast("long")))
    return (rows.groupBy("run_id", "consumer", "producer", "bucket")
            .agg(F.countDistinct("topic").alias("topics"), F.count(F.lit(1)).alias("messages"),
                 *_percentiles("latency_s", accuracy), F.max("latency_s").alias("max_s"))
            .withColumn("t_s", F.col("bucket") * F.lit(float(bucket_s)))
            .select("run_id", "consumer", "producer", "topics", "bucket", "t_s", "messages", "p50_s", "p95_s", "max_s"))


def aoi_marks(traces: DataFrame, events: DataFrame, consumer: str) -> DataFrame:
    """Fig. 9's marks for one consumer: its own group changes and the migrations of the topics it
    received. Columns: run_id, kind (group_change | migration), t_s, topic (migrations)."""
    starts = run_starts(traces, events)
    topics = traces.where(F.col("consumer") == consumer).select("run_id", "topic").distinct()
    changes = (events.where((F.col("type") == "group_change") & (F.col("client") == consumer))
               .select("run_id", F.lit("group_change").alias("kind"), "time", F.lit(None).cast("string").alias("topic")))
    moves = (events.where(F.col("type") == "migration_end").join(F.broadcast(topics), ["run_id", "topic"])
             .select("run_id", F.lit("migration").alias("kind"), "time", "topic"))
    return (changes.unionByName(moves).join(F.broadcast(starts), "run_id")
            .select("run_id", "kind", (F.col("time") - F.col("t0")).alias("t_s"), "topic").orderBy("t_s"))


def representative_consumer(traces: DataFrame) -> DataFrame:
    """Consumers ranked for Fig. 9: most distinct producers first, then most messages, then by name."""
    return (traces.groupBy("run_id", "consumer")
            .agg(F.countDistinct("producer").alias("producers"), F.count(F.lit(1)).alias("messages"))
            .orderBy(F.desc("producers"), F.desc("messages"), "consumer"))


# ------------------------------------------------------------------------------------------ violations

def violation_ratio(traces: DataFrame, thresholds) -> DataFrame:
    """Share of messages above their class's threshold, per run (and policy etc.) and topic class.

    Columns: run_id, [columns of the thresholds frame such as policy], topic_class, threshold_s,
    messages, violations, violation_ratio. A class without a threshold has null violations.
    """
    rows, extra = _with_threshold(with_latency(traces), thresholds)
    above = F.when(F.col("threshold_s").isNotNull(), (F.col("latency_s") > F.col("threshold_s")).cast("long"))
    return (rows.groupBy("run_id", *extra, "topic_class", "threshold_s")
            .agg(F.count(F.lit(1)).alias("messages"), F.sum(above).alias("violations"))
            .withColumn("violation_ratio", F.col("violations") / F.col("messages")))


def summary(traces: DataFrame, thresholds, accuracy: int = ACCURACY) -> DataFrame:
    """Per run and topic class: topics, messages, p50/p95/max latency, threshold, violations and their ratio."""
    rows, extra = _with_threshold(with_latency(traces), thresholds)
    above = F.when(F.col("threshold_s").isNotNull(), (F.col("latency_s") > F.col("threshold_s")).cast("long"))
    return (rows.groupBy("run_id", *extra, "topic_class", "threshold_s")
            .agg(F.countDistinct("topic").alias("topics"), F.count(F.lit(1)).alias("messages"),
                 *_percentiles("latency_s", accuracy), F.max("latency_s").alias("max_s"),
                 F.sum(above).alias("violations"))
            .withColumn("violation_ratio", F.col("violations") / F.col("messages"))
            .select("run_id", *extra, "topic_class", "topics", "messages", "p50_s", "p95_s", "max_s",
                    "threshold_s", "violations", "violation_ratio")
            .orderBy("run_id", *extra, "topic_class"))


def time_above_threshold_after_relink(traces: DataFrame, events: DataFrame, threshold, settle_messages: int = 3,
                                      max_onset_s: float = 10.0, horizon_s: float = 300.0,
                                      by: str = "topic") -> DataFrame:
    """For each relink of a node: how long its topics' latency stays above the threshold.

    A node's topics are those with a producer or consumer that is the node or one of its clients
    (`swarm2`, `swarm2-u3`, `swarm2.leader`), or whose instance suffix is the node (`...-swarm2`). For
    each such topic, the messages sent from the relink on (until the node's next relink, at most
    `horizon_s`) are taken in send order. If one sent within `max_onset_s` of the relink is above the
    threshold, the window opens at the relink and closes at the send time of the first later message
    that starts `settle_messages` messages in a row at or below it (the topic has migrated);
    time_above_s = close - relink. A window that never closes (until the horizon, the next relink or
    the end of the run) counts up to the last message sent, with closed = false. No message above the
    threshold: 0 s.

    by="topic": run_id, node, relink_time, t_s, to_site, topic, topic_class, threshold_s, messages,
    messages_above, time_above_s, closed. by="relink": one row per relink, time_above_s the longest
    over the node's topics, topics and topics_above counts, closed if all closed.
    """
    if by not in ("topic", "relink"):
        raise ValueError("by must be 'topic' or 'relink'")
    if settle_messages < 1:
        raise ValueError("settle_messages must be at least 1")
    starts = run_starts(traces, events)
    moves = (events.where((F.col("type") == "relink") & F.col("node").isNotNull())
             .select("run_id", "node", F.col("time").alias("relink_time"), "to_site")
             .withColumn("next_relink", F.lead("relink_time").over(
                 Window.partitionBy("run_id", "node").orderBy("relink_time"))))
    nodes = moves.select("run_id", "node").distinct()
    streams = traces.select("run_id", "topic", "producer", "consumer").distinct()
    member = F.expr(
        f"producer RLIKE concat('^', node, '({MEMBER_CLASS}|$)') OR "
        f"consumer RLIKE concat('^', node, '({MEMBER_CLASS}|$)') OR "
        "topic RLIKE concat('-', node, '$')")
    node_topics = (streams.join(F.broadcast(nodes), "run_id").where(member)
                   .select("run_id", "node", "topic").distinct())
    window_end = F.least(F.coalesce(F.col("next_relink"), F.lit(float("inf"))),
                         F.col("relink_time") + F.lit(float(horizon_s)))
    rows = (with_latency(traces).join(F.broadcast(node_topics), ["run_id", "topic"])
            .join(F.broadcast(moves), ["run_id", "node"])
            .where((F.col("send_time") >= F.col("relink_time")) & (F.col("send_time") < window_end)))
    rows, _extra = _with_threshold(rows, threshold)
    key = ["run_id", "node", "relink_time", "topic"]
    ordered = Window.partitionBy(*key).orderBy("send_time", "receive_time")
    ahead = ordered.rowsBetween(0, settle_messages - 1)
    whole = Window.partitionBy(*key)
    above = F.col("latency_s") > F.col("threshold_s")
    onset = F.col("send_time") < F.col("relink_time") + F.lit(float(max_onset_s))
    rows = (rows.withColumn("_above", above)
            .withColumn("_first_above", F.min(F.when(above & onset, F.col("send_time"))).over(whole))
            .withColumn("_ahead_max", F.max("latency_s").over(ahead)))
    closing = (F.col("send_time") > F.col("_first_above")) & (F.col("_ahead_max") <= F.col("threshold_s"))
    per_topic = (rows.groupBy(*key, "to_site", "topic_class", "threshold_s")
                 .agg(F.count(F.lit(1)).alias("messages"), F.sum(F.col("_above").cast("long")).alias("messages_above"),
                      F.max("_first_above").alias("_first_above"),
                      F.min(F.when(closing, F.col("send_time"))).alias("_close"),
                      F.max("send_time").alias("_last")))
    opened = F.col("_first_above").isNotNull()
    per_topic = (per_topic
                 .withColumn("closed", ~opened | F.col("_close").isNotNull())
                 .withColumn("time_above_s", F.when(~opened, F.lit(0.0))
                             .when(F.col("_close").isNotNull(), F.col("_close") - F.col("relink_time"))
                             .otherwise(F.col("_last") - F.col("relink_time")))
                 .join(F.broadcast(starts), "run_id", "left")
                 .withColumn("t_s", F.col("relink_time") - F.col("t0"))
                 .select("run_id", "node", "relink_time", "t_s", "to_site", "topic", "topic_class", "threshold_s",
                         "messages", "messages_above", "time_above_s", "closed"))
    if by == "topic":
        return per_topic
    return (per_topic.groupBy("run_id", "node", "relink_time", "t_s", "to_site")
            .agg(F.count(F.lit(1)).alias("topics"),
                 F.sum((F.col("time_above_s") > 0).cast("long")).alias("topics_above"),
                 F.max("time_above_s").alias("time_above_s"), F.min(F.col("closed").cast("int")).alias("_closed"))
            .withColumn("closed", F.col("_closed") == 1).drop("_closed"))


# ------------------------------------------------------------------------------------------ Fig. 7

def migration_downtime(events: DataFrame, runs: DataFrame | None = None) -> DataFrame:
    """Per topic migration: the per-topic migration time and the worst client downtime (paper Fig. 2, 7).

    Events: `migration_start` (topic manager sends release) and `migration_end` (release reply) per
    topic, paired by `migration_id` when they carry one, else in order per run and topic;
    migration_time_s = end - start (or the end event's duration_s when there is no start).
    `downtime` events (time = first message through the new broker, duration_s = since the redirect or
    disconnect, client, topic) go to the latest migration of their topic started before they ended
    (or to their migration_id). Workflow, executors, n_topics and wan_one_way_s come from the start
    event, else from `runs` (run.parquet rows); n_topics falls back to the topics migrated in the run.

    Columns: run_id, topic, migration, start_time, end_time, migration_time_s, from_broker, to_broker,
    workflow, executors, n_topics, wan_one_way_s, ok, downtime_s (max over clients), downtime_clients.
    """
    def numbered(kind: str) -> DataFrame:
        part = events.where(F.col("type") == kind)
        order = Window.partitionBy("run_id", "topic").orderBy("time")
        return part.withColumn("migration", F.coalesce(
            F.col("migration_id"), F.concat(F.lit("#"), F.row_number().over(order).cast("string"))))

    starts = numbered("migration_start").select(
        "run_id", "topic", "migration", F.col("time").alias("start_time"), "from_broker", "to_broker",
        "workflow", "executors", "n_topics", "wan_one_way_s")
    ends = numbered("migration_end").select(
        "run_id", "topic", "migration", F.col("time").alias("end_time"), F.col("duration_s").alias("_reported"),
        F.col("ok"), F.col("from_broker").alias("_from_end"), F.col("to_broker").alias("_to_end"))
    migrations = (starts.join(ends, ["run_id", "topic", "migration"], "full")
                  .withColumn("migration_time_s",
                              F.coalesce(F.col("end_time") - F.col("start_time"), F.col("_reported")))
                  .withColumn("from_broker", F.coalesce("from_broker", "_from_end"))
                  .withColumn("to_broker", F.coalesce("to_broker", "_to_end"))
                  .drop("_reported", "_from_end", "_to_end"))

    # Downtimes: attach to the latest migration start of their topic (or their own migration_id).
    downs = events.where(F.col("type") == "downtime").select(
        "run_id", "topic", "client", "time", "duration_s", F.col("migration_id").alias("_own"), F.lit(1).alias("_kind"),
        F.lit(None).cast("string").alias("_key"))
    marks = starts.select("run_id", "topic", F.lit(None).cast("string").alias("client"),
                          F.col("start_time").alias("time"),
                          F.lit(None).cast("double").alias("duration_s"), F.lit(None).cast("string").alias("_own"),
                          F.lit(0).alias("_kind"), F.col("migration").alias("_key"))
    timeline = Window.partitionBy("run_id", "topic").orderBy("time", "_kind").rowsBetween(Window.unboundedPreceding, 0)
    attached = (downs.unionByName(marks)
                .withColumn("migration", F.coalesce(F.col("_own"), F.last("_key", ignorenulls=True).over(timeline)))
                .where((F.col("_kind") == 1) & F.col("migration").isNotNull())
                .groupBy("run_id", "topic", "migration")
                .agg(F.max("duration_s").alias("downtime_s"), F.countDistinct("client").alias("downtime_clients")))
    out = migrations.join(attached, ["run_id", "topic", "migration"], "left")

    if runs is not None:
        wanted = ["workflow", "executors", "wan_one_way_s"]
        run_cols = runs.select("run_id", *[F.col(c).alias(f"_run_{c}") for c in wanted if c in runs.columns])
        out = out.join(F.broadcast(run_cols), "run_id", "left")
        for c in wanted:
            if f"_run_{c}" in out.columns:
                out = out.withColumn(c, F.coalesce(F.col(c), F.col(f"_run_{c}"))).drop(f"_run_{c}")
    per_run = out.groupBy("run_id").agg(F.countDistinct("topic").alias("_migrated"))
    out = (out.join(per_run, "run_id", "left")
           .withColumn("n_topics", F.coalesce(F.col("n_topics"), F.col("_migrated")))
           .withColumn("downtime_clients", F.coalesce(F.col("downtime_clients"), F.lit(0)))
           .drop("_migrated"))
    return out.select("run_id", "topic", "migration", "start_time", "end_time", "migration_time_s", "from_broker",
                      "to_broker", "workflow", "executors", "n_topics", "wan_one_way_s", "ok", "downtime_s",
                      "downtime_clients")


# ------------------------------------------------------------------------------------------ losses

def losses(traces: DataFrame, per_consumer: bool = False) -> DataFrame:
    """Message losses, duplicates and reordering from the sequence numbers.

    A stream is one producer's messages on one topic as received by one consumer; `seq` counts the
    producer's messages on that topic. Per stream: the received range first_seq..last_seq is what
    was sent while the consumer listened (losses before the first or after the last received message
    cannot be seen), expected = last - first + 1, lost = expected - unique, duplicates = received -
    unique, reordered = first copies that arrive after a higher seq of the same stream.

    per_consumer=False sums the streams per run, topic and producer (consumers = their count).
    Columns: run_id, topic, producer, [consumer], [consumers], first_seq, last_seq, expected, received,
    unique, lost, duplicates, reordered, loss_ratio.
    """
    key = ["run_id", "topic", "producer", "consumer"]
    copies = traces.groupBy(*key, "seq").agg(F.count(F.lit(1)).alias("copies"),
                                             F.min("receive_time").alias("first_receive"))
    arrival = Window.partitionBy(*key).orderBy("first_receive", "seq").rowsBetween(Window.unboundedPreceding, -1)
    copies = copies.withColumn("_reordered", F.coalesce(
        (F.col("seq") < F.max("seq").over(arrival)).cast("long"), F.lit(0)))
    streams = (copies.groupBy(*key)
               .agg(F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"),
                    F.sum("copies").alias("received"), F.count(F.lit(1)).alias("unique"),
                    F.sum("_reordered").alias("reordered"))
               .withColumn("expected", F.col("last_seq") - F.col("first_seq") + 1))
    if not per_consumer:
        streams = (streams.groupBy("run_id", "topic", "producer")
                   .agg(F.count(F.lit(1)).alias("consumers"), F.min("first_seq").alias("first_seq"),
                        F.max("last_seq").alias("last_seq"), F.sum("expected").alias("expected"),
                        F.sum("received").alias("received"), F.sum("unique").alias("unique"),
                        F.sum("reordered").alias("reordered")))
    streams = (streams.withColumn("lost", F.col("expected") - F.col("unique"))
               .withColumn("duplicates", F.col("received") - F.col("unique"))
               .withColumn("loss_ratio", F.col("lost") / F.col("expected")))
    who = ["consumer"] if per_consumer else ["consumers"]
    return streams.select("run_id", "topic", "producer", *who, "first_seq", "last_seq", "expected", "received",
                          "unique", "lost", "duplicates", "reordered", "loss_ratio")


__all__ = ["topic_class", "with_latency", "run_starts", "thresholds_frame", "e2e_over_time", "relinks",
           "migration_marks",
           "aoi_latency", "representative_consumer", "violation_ratio", "summary",
           "time_above_threshold_after_relink", "migration_downtime", "losses"]
