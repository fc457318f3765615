"""Message tracking checked against the exact traces (Jun and Astley's Bloom-filter histories). The
testbed knows the truth: one trace row per delivered message, with the tracking id the brokers recorded.
A PySpark job groups a run's traces per tracking id (who received the message, through which brokers),
samples messages, and runs the traceback for each on the executors (each partition loads the run's
histories once), so every answer is compared with the truth in the job itself.

Counted per sampled message: false negatives (a subscriber that got the message, or a broker that
delivered it, missing from the answer: never allowed), false positives (a subscriber the traceback
tested that did not get the message but whose history said yes), the tests' expected false-positive
probability (eq. 2), and the query's cost (brokers and filters consulted). A broker the answer lists
as routing the message but through which nobody received it is counted apart (`routed_only`): a
migration's grace period forwards to the new owner whether or not its subscribers are there yet, so
the traces cannot call that wrong.

    python -m analysis.tracking results/tracking-smoke-ab12cd --sample 2000
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from analysis import spark as spark_mod
from analysis import traces as traces_mod

SAMPLE = 2000


def _check_partition(run_dir: str):
    """mapPartitions body: the traceback of each (track_id, consumers, brokers) row, compared."""
    def check(rows):
        from testbed.tracking.store import read_run
        from testbed.tracking.traceback import Traceback

        tracker = None
        for row in rows:
            if tracker is None:
                tracker = Traceback(read_run(run_dir))
            yield compared(row.track_id, set(row.consumers), set(row.brokers),
                           tracker.query(bytes.fromhex(row.track_id)))
    return check


def compared(track_id: str, consumers: set, brokers: set, answer) -> tuple:
    """One row of `_schema()`: a traceback `answer` against the truth. Sums start from 0.0 where
    the column is a double, since Spark refuses an int there (a message with no negative test)."""
    negatives = [t for t in answer.tests if t.kind == "sub" and t.subscriber not in consumers]
    return (track_id, len(consumers), len(consumers - set(answer.delivered)),
            len(brokers - set(answer.brokers)), answer.published,
            len(negatives), sum(t.positive for t in negatives), sum((t.efpp for t in negatives), 0.0),
            len(set(answer.routed) - brokers), answer.brokers_consulted, answer.filters_consulted,
            [(float(t.efpp), float(t.positive)) for t in negatives])


COLUMNS = ("track_id", "receivers", "missed_subscribers", "missed_brokers", "published", "negative_tests",
           "false_positives", "expected_false_positives", "routed_only", "brokers_consulted", "filters_consulted")
EFPP_FLOOR = 1e-9  # tests whose efpp is below this go into the lowest bin


def _schema():
    from pyspark.sql import types as T

    kinds = {"track_id": T.StringType(), "published": T.BooleanType(), "expected_false_positives": T.DoubleType()}
    fields = [T.StructField(c, kinds.get(c, T.LongType())) for c in COLUMNS]
    pair = T.StructType([T.StructField("efpp", T.DoubleType()), T.StructField("positive", T.DoubleType())])
    return T.StructType(fields + [T.StructField("negatives", T.ArrayType(pair))])


def calibration(checked) -> list[dict]:
    """Negative tests binned by their efpp (half decades): per bin the tests, the false positives
    measured and the false positives eq. 2 expects, so measured and expected rates can be compared
    where filters were nearly empty and where they were full."""
    from pyspark.sql import functions as F

    tests = checked.select(F.explode("negatives").alias("t")).select("t.efpp", "t.positive")
    binned = tests.withColumn("bin", F.floor(F.log10(F.greatest(F.col("efpp"), F.lit(EFPP_FLOOR))) * 2) / 2)
    rows = binned.groupBy("bin").agg(F.count("*").alias("tests"), F.sum("positive").alias("false_positives"),
                                     F.sum("efpp").alias("expected")).orderBy("bin").collect()
    floor = math.log10(EFPP_FLOOR)
    return [{"efpp_from": 0.0 if r.bin <= floor else 10 ** r.bin, "efpp_to": 10 ** (r.bin + 0.5), "tests": r.tests,
             "false_positives": int(r.false_positives), "expected": r.expected} for r in rows]


def check_run(run_dir: str | Path, sample: int = SAMPLE, seed: int = 1, master: str | None = None) -> dict:
    """The comparison for up to `sample` delivered messages of the run (all when fewer)."""
    from pyspark.sql import functions as F

    run_dir = Path(run_dir)
    traces_mod.ensure_converted(run_dir)
    spark = spark_mod.session(master)
    rows = (spark.read.parquet(spark_mod.uri(traces_mod.outputs(run_dir)["traces"]))
            .where(F.col("track_id").isNotNull())
            .groupBy("track_id").agg(F.collect_set("consumer").alias("consumers"),
                                     F.collect_set("broker").alias("brokers")))
    total = rows.count()
    if total == 0:
        raise ValueError(f"{run_dir}: no delivered message carries a tracking id (tracking was none)")
    picked = rows.orderBy(F.rand(seed)).limit(sample).repartition(2)
    checked = spark.createDataFrame(picked.rdd.mapPartitions(_check_partition(str(run_dir))), _schema()).cache()
    sums = checked.agg(*(F.sum(c).alias(c) for c in COLUMNS[1:] if c != "published"),
                       F.count("*").alias("messages"), F.sum(F.col("published").cast("int")).alias("published"),
                       F.max("filters_consulted").alias("filters_max"),
                       F.expr("percentile_approx(filters_consulted, 0.5)").alias("filters_p50")).first().asDict()
    files = json.loads((run_dir / "tracking" / sorted(p.name for p in (run_dir / "tracking").iterdir())[0]
                        / "meta.json").read_text())
    negatives = sums["negative_tests"] or 0
    return {"run": run_dir.name, "strategy": files["config"]["strategy"], "filter": files["config"]["filter"],
            "delivered_messages": total, **sums,
            "false_negatives": (sums["missed_subscribers"] or 0) + (sums["missed_brokers"] or 0),
            "measured_fp_rate": (sums["false_positives"] or 0) / negatives if negatives else None,
            "expected_fp_rate": (sums["expected_false_positives"] or 0.0) / negatives if negatives else None,
            "calibration": calibration(checked)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.tracking", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, metavar="RUN_DIR")
    parser.add_argument("--sample", type=int, default=SAMPLE, help=f"messages to trace back (default {SAMPLE})")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", help="Spark master (default local[*])")
    args = parser.parse_args(argv)
    try:
        result = check_run(args.run, args.sample, args.seed, args.master)
    except (ValueError, FileNotFoundError) as error:
        print(f"analysis.tracking: {error}", file=sys.stderr)
        return 2
    (args.run / "tracking-check.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
