"""The paper's 1000-placement policy assessment (5.5, Fig. 4 and Fig. 5) as a PySpark job.

    python -m testbed.systems.pubsub.bench.assess_spark --inputs snapshots.json --out results/assessment \\
        [--seeds 1000] [--master local[*]] [--figures results/assessment] [--topic-rows]

`--inputs`: the JSON file of `testbed.systems.pubsub.bench.assessment.load_inputs` (one entry per emulated
topology: its scenario and its coordinate snapshot). The topologies are built on the driver and
broadcast; `sparkContext.parallelize(range(seeds))` runs `assessment.assess` for every seed and
topology on the executors, each seed reduced at once to one row per placement (worst pair latency,
violation ratio), then Spark reduces per (topology size, policy, evaluated_on, distance) to the
worst-case latency's max and p95 (exact, Spark SQL `percentile`) over placements and the mean
violation ratio. `distance` is the reading of d (`one_way` | `rtt`, testbed.policies.distance):
every placement is assessed under each reading (`--distances`, default all), side by side.

Outputs in --out: placements.parquet (one row per seed, topology, policy, evaluated_on, distance),
summary.parquet and summary.csv (one file), topics.parquet with --topic-rows (one row per topic:
large, 1024 topics x 3 policies x 2 x 2 per MMOG placement). `--figures DIR` draws fig4.png /
fig5.png (and *_configured.png) from the summary, one row of panels per reading. `--master` takes any Spark master URL (default local[*]);
on a cluster the executors need this package importable (pip install it there, or ship it with
--py-files).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

from testbed.systems.pubsub.bench import figures as micro
from testbed.systems.pubsub.bench import assessment

PLACEMENT_COLUMNS = ("kind", "topology", "size", "policy", "seed", "evaluated_on", "distance", "worst_e2e_s", "pairs",
                     "violations", "violation_ratio")
SUMMARY_COLUMNS = ("kind", "topology", "size", "policy", "evaluated_on", "distance", "placements", "worst_max_s",
                   "worst_p95_s", "violation_ratio_mean", "violation_ratio_std")


def spark_session(master: str = "local[*]", app: str = "epulsar-assessment", shuffle_partitions: int = 8):
    """A session whose Python workers run this interpreter (so they import this package and its
    dependencies) unless PYSPARK_PYTHON says otherwise."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    return (SparkSession.builder.master(master).appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .getOrCreate())


def run(spark, infras: list[assessment.Infrastructure], seeds: int, out: Path, topic_rows: bool = False,
        partitions: int | None = None, distances: tuple[str, ...] = assessment.DISTANCE_NAMES) -> list[dict]:
    """Assess every topology for seeds 0..seeds-1 under each reading of d in `distances`; write the
    outputs; return the summary rows."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (DoubleType, IntegerType, LongType, StringType, StructField, StructType)

    sc = spark.sparkContext
    shared = sc.broadcast(infras)

    def placements_of(seed: int):
        for infra in shared.value:
            rows = assessment.assess(infra, seed, distances=distances)
            for p in assessment.per_placement(rows):
                yield tuple(p[c] for c in PLACEMENT_COLUMNS)

    placement_schema = StructType([
        StructField("kind", StringType()), StructField("topology", StringType()), StructField("size", IntegerType()),
        StructField("policy", StringType()), StructField("seed", LongType()), StructField("evaluated_on", StringType()),
        StructField("distance", StringType()), StructField("worst_e2e_s", DoubleType()), StructField("pairs", LongType()),
        StructField("violations", LongType()), StructField("violation_ratio", DoubleType())])
    seeds_rdd = sc.parallelize(range(seeds), partitions or max(2, sc.defaultParallelism * 4))
    placements = spark.createDataFrame(seeds_rdd.flatMap(placements_of), placement_schema).cache()
    out.mkdir(parents=True, exist_ok=True)
    placements.write.mode("overwrite").parquet(str(out / "placements.parquet"))

    summary = (placements.groupBy("kind", "topology", "size", "policy", "evaluated_on", "distance")
               .agg(F.count("*").alias("placements"), F.max("worst_e2e_s").alias("worst_max_s"),
                    F.expr("percentile(worst_e2e_s, 0.95)").alias("worst_p95_s"),
                    F.avg("violation_ratio").alias("violation_ratio_mean"),
                    F.stddev_samp("violation_ratio").alias("violation_ratio_std"))
               .orderBy("kind", "size", "topology", "policy", "evaluated_on", "distance")
               .cache())
    summary.write.mode("overwrite").parquet(str(out / "summary.parquet"))
    rows = [r.asDict() for r in summary.collect()]
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        for r in rows:
            writer.writerow({c: r[c] for c in SUMMARY_COLUMNS})

    if topic_rows:
        columns = ("policy", "kind", "topology", "size", "seed", "topic", "broker", "worst_e2e_s", "pairs",
                   "violations", "evaluated_on", "distance")

        def topics_of(seed: int):
            for infra in shared.value:
                for r in assessment.assess(infra, seed, distances=distances):
                    yield tuple(r[c] for c in columns)

        topic_schema = StructType([
            StructField("policy", StringType()), StructField("kind", StringType()),
            StructField("topology", StringType()), StructField("size", IntegerType()),
            StructField("seed", LongType()), StructField("topic", StringType()), StructField("broker", StringType()),
            StructField("worst_e2e_s", DoubleType()), StructField("pairs", LongType()),
            StructField("violations", LongType()), StructField("evaluated_on", StringType()),
            StructField("distance", StringType())])
        (spark.createDataFrame(sc.parallelize(range(seeds), seeds_rdd.getNumPartitions()).flatMap(topics_of),
                               topic_schema)
         .write.mode("overwrite").parquet(str(out / "topics.parquet")))
    summary.unpersist()
    placements.unpersist()
    return rows


def read_summary(path: str | Path) -> list[dict]:
    """summary.csv back as dicts (numbers as float/int) for the figures."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for r in rows:
        r["size"], r["placements"] = int(r["size"]), int(r["placements"])
        for c in ("worst_max_s", "worst_p95_s", "violation_ratio_mean"):
            r[c] = float(r[c])
        r["violation_ratio_std"] = float(r["violation_ratio_std"]) if r.get("violation_ratio_std") else None
    return rows


def figures(rows: list[dict], directory: Path, suffix: str = "", variant: str = "") -> list[Path]:
    """fig4{suffix}.png and fig5{suffix}.png (the coordinates' estimate), each with its _configured twin;
    `variant` titles a sibling of the paper's figure ("Fig. 4 (measured jitter)")."""
    drawn = []
    for kind, name in (("mmog", "fig4"), ("uav", "fig5")):
        if any(r["kind"] == kind for r in rows):
            drawn.append(micro.placement(rows, kind, directory / f"{name}{suffix}.png", "estimate", variant))
            drawn.append(micro.placement(rows, kind, directory / f"{name}{suffix}_configured.png", "configured", variant))
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="ePulsar paper 5.5: assess the broker selection policies over random placements (PySpark).",
        epilog="example: python -m testbed.systems.pubsub.bench.assess_spark --inputs snapshots.json --out results/assessment "
               "--figures results/assessment")
    parser.add_argument("--inputs", required=True, help="JSON file of topologies and coordinate snapshots")
    parser.add_argument("--out", required=True, help="output directory (Parquet and CSV)")
    parser.add_argument("--seeds", type=int, default=1000, help="number of random placements (default 1000)")
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    parser.add_argument("--partitions", type=int, default=None, help="partitions of the seed range")
    parser.add_argument("--topic-rows", action="store_true", help="also write one row per topic (large)")
    parser.add_argument("--figures", default=None, help="directory for fig4.png / fig5.png")
    parser.add_argument("--distances", default=",".join(assessment.DISTANCE_NAMES),
                        help=f"readings of d, comma-separated (default: all, {','.join(assessment.DISTANCE_NAMES)})")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    distances = tuple(d for d in args.distances.split(",") if d)
    unknown = sorted(set(distances) - set(assessment.DISTANCE_NAMES))
    if unknown or not distances:
        parser.error(f"--distances: {', '.join(unknown) or 'none given'}; known: {', '.join(assessment.DISTANCE_NAMES)}")
    try:
        infras = assessment.load_inputs(args.inputs)
    except (OSError, ValueError, KeyError) as error:
        print(f"{args.inputs}: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    spark = spark_session(args.master)
    try:
        rows = run(spark, infras, args.seeds, Path(args.out), args.topic_rows, args.partitions, distances)
    finally:
        spark.stop()
    for r in rows:
        print(f"{r['kind']:4} {r['topology']:>12} size {r['size']:2} {r['policy']:11} {r['evaluated_on']:10} "
              f"d={r['distance']:7} "
              f"worst max {r['worst_max_s'] * 1e3:6.1f} ms p95 {r['worst_p95_s'] * 1e3:6.1f} ms "
              f"violations {r['violation_ratio_mean'] * 100:5.2f} %")
    if args.figures:
        for path in figures(rows, Path(args.figures)):
            print(f"wrote {path}")
    print(f"{args.seeds} placements x {len(infras)} topologies in {time.monotonic() - started:.1f} s; "
          f"outputs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
