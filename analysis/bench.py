"""Benchmark of the reduction: synthetic UAV traces at 250k, 500k and 1M rows (or any sizes, up to
100M), timed end to end, locally and (`--cluster 2`) on a standalone Spark cluster.

    python -m analysis.bench [--sizes 250000,500000,1000000] [--repeats 3] [--master local[*]] [--cluster 2]

For each size, synthetic rows (8 swarms of 8 UAVs at 200 msg/s: follow_leader-swarmN from the leader
to 7 followers, sensor_data-swarmN from every UAV to the leader; 17 ms base latency with log-normal
jitter; every swarm changes zone every 20-40 s and its latency rises by the 30 ms inter-site RTT for
2-6 s, until its topics migrate) are written to results/bench/analysis-data/rows-<N>/traces.parquet
with their events. The timed reduction is what Fig. 8 and the summary need: e2e_over_time (1 s
buckets), relinks and summary, each collected (full evaluation), in one SparkSession after a
warm-up. Prints a table and writes results/bench/analysis.json: the median of the repeats per size,
rows per second, and time(1M)/time(500k) (2.0 = linear; less means a fixed cost still shows).
Also times the JSON-lines -> Parquet conversion of the largest size (`--no-convert` skips it). The
generated data is removed afterwards (`--keep-data` keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.traces import EVENT_SCHEMA, TRACE_SCHEMA

SWARMS, UAVS, RATE = 8, 8, 200.0
T0 = 1_795_000_000.0
THRESHOLDS = {"follow_leader": 0.040, "sensor_data": 0.040}
TARGET_S = 60.0
ROWS_PER_SECOND = SWARMS * (RATE * (UAVS - 1) + RATE * UAVS)  # 24,000 delivered messages per second
EXECUTOR_MEMORY = "2g"  # on a cluster, each worker's one executor (workers get --worker-memory, 3g)
CHUNK_ROWS = 5_000_000  # rows generated at a time (about 2 GB of memory at the peak)


def _names(idx: np.ndarray, labels: list[str]) -> pa.Array:
    table = pa.array(labels, pa.string())
    return pc.take(table, pa.array(idx)) if len(idx) else pa.array([], pa.string())


def synthetic(rows: int, seed: int = 1, run_id: str = "bench", t0: float = T0, seq0: int = 0) -> tuple[pa.Table, pa.Table]:
    """(traces, events) with `rows` trace rows, UAV-like, sorted by send time, from epoch `t0` and
    sequence number `seq0`."""
    rng = np.random.default_rng(seed)
    duration = rows / ROWS_PER_SECOND * 1.02 + 1.0
    sends = int(duration * RATE)
    k = np.arange(sends)
    cols = {n: [] for n in ("swarm", "topic_kind", "producer", "consumer", "seq", "send")}
    relink_rows = []
    penalty_windows = []
    for s in range(SWARMS):
        t = 5.0 + rng.uniform(0, 20)
        zone = rng.integers(1, 5)
        while t < duration:
            new_zone = (zone + rng.integers(1, 4) - 1) % 4 + 1
            relink_rows.append({"run_id": run_id, "type": "relink", "time": t0 + t, "node": f"swarm{s + 1}",
                                "from_site": f"zone{zone}", "to_site": f"zone{new_zone}"})
            penalty_windows.append((s, t, t + rng.uniform(2.0, 6.0)))
            zone = new_zone
            t += rng.uniform(20.0, 40.0)
        # follow_leader: leader (uav 0) -> followers 1..7
        for c in range(1, UAVS):
            cols["swarm"].append(np.full(sends, s))
            cols["topic_kind"].append(np.zeros(sends, np.int8))
            cols["producer"].append(np.full(sends, 0))
            cols["consumer"].append(np.full(sends, c))
            cols["seq"].append(k)
            cols["send"].append(k / RATE + rng.uniform(0, 1 / RATE))
        # sensor_data: every UAV -> the leader
        for p in range(UAVS):
            cols["swarm"].append(np.full(sends, s))
            cols["topic_kind"].append(np.ones(sends, np.int8))
            cols["producer"].append(np.full(sends, p))
            cols["consumer"].append(np.full(sends, 0))
            cols["seq"].append(k)
            cols["send"].append(k / RATE + (p + 1) / (RATE * (UAVS + 1)))
    arr = {n: np.concatenate(v) for n, v in cols.items()}
    order = np.argsort(arr["send"], kind="stable")[:rows]
    arr = {n: v[order] for n, v in arr.items()}
    n = len(order)
    latency = 0.017 + rng.lognormal(np.log(0.0015), 0.6, n)
    for s, start, end in penalty_windows:
        hit = (arr["swarm"] == s) & (arr["send"] >= start) & (arr["send"] < end)
        latency[hit] += 0.030 + rng.exponential(0.004, int(hit.sum()))
    latency[rng.random(n) < 1e-4] += 0.2  # rare long delays
    uav_labels = [f"swarm{s + 1}-u{u + 1}" for s in range(SWARMS) for u in range(UAVS)]
    topic_labels = [f"{kind}-swarm{s + 1}" for s in range(SWARMS) for kind in ("follow_leader", "sensor_data")]
    producer = _names(arr["swarm"] * UAVS + arr["producer"], uav_labels)
    seq = pa.array(arr["seq"] + seq0, pa.int64())
    send = t0 + arr["send"]
    sites = _names((arr["swarm"] % 4), [f"zone{z + 1}" for z in range(4)])
    traces = pa.table({
        "run_id": pa.array(np.full(n, run_id, dtype=object), pa.string()),
        "topic": _names(arr["swarm"] * 2 + arr["topic_kind"], topic_labels),
        "producer": producer,
        "consumer": _names(arr["swarm"] * UAVS + arr["consumer"], uav_labels),
        "msg_id": pc.binary_join_element_wise(producer, pc.cast(seq, pa.string()), ":"),
        "track_id": pa.nulls(n, TRACE_SCHEMA.field("track_id").type),  # no message tracking in this run
        "seq": seq,
        "send_time": pa.array(send, pa.float64()),
        "receive_time": pa.array(send + latency, pa.float64()),
        "broker": _names(arr["swarm"] % 4, [f"bzone{z + 1}" for z in range(4)]),
        "producer_site": sites,
        "consumer_site": sites,
    }, schema=TRACE_SCHEMA)
    events = [{"run_id": run_id, "type": "run_start", "time": t0}, *sorted(relink_rows, key=lambda e: e["time"]),
              {"run_id": run_id, "type": "run_end", "time": t0 + duration}]
    events = pa.Table.from_pylist([{f.name: e.get(f.name) for f in EVENT_SCHEMA} for e in events], schema=EVENT_SCHEMA)
    return traces, events


def write_dataset(directory: Path, traces: pa.Table, events: pa.Table) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(traces, directory / "traces.parquet", row_group_size=256 * 1024)
    pq.write_table(events, directory / "events.parquet")


def write_rows(directory: Path, rows: int) -> int:
    """`rows` synthetic rows written `CHUNK_ROWS` at a time, each chunk the next stretch of one run
    (so 100M rows never sit in memory at once); returns the relinks."""
    directory.mkdir(parents=True, exist_ok=True)
    writer, events, done, part = None, [], 0, 0
    while done < rows:
        n = min(CHUNK_ROWS, rows - done)
        offset = done / ROWS_PER_SECOND * 1.02  # seconds of the run before this chunk
        traces, chunk_events = synthetic(n, seed=1 + part, t0=T0 + offset, seq0=int(offset * RATE))
        if writer is None:
            writer = pq.ParquetWriter(directory / "traces.parquet", traces.schema)
        writer.write_table(traces, row_group_size=256 * 1024)
        events.append(chunk_events if not events else chunk_events.slice(1))  # one run_start
        done, part = done + n, part + 1
    writer.close()
    merged = pa.concat_tables(events)
    pq.write_table(merged, directory / "events.parquet")
    return sum(1 for kind in merged.column("type").to_pylist() if kind == "relink")


def linear_fit(rows: list[int], seconds: list[float]) -> dict | None:
    """time = fixed + slope x rows, least squares: the fixed cost (planning, scheduling) and the per-row cost."""
    if len(rows) < 2:
        return None
    x, y = np.array(rows, float), np.array(seconds, float)
    slope, fixed = np.polyfit(x, y, 1)
    residual = y - (fixed + slope * x)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual ** 2).sum()) / total if total > 0 else 1.0
    return {"fixed_s": round(float(fixed), 3), "per_million_s": round(float(slope) * 1e6, 3), "r2": round(r2, 4)}


def reduction(spark, location: Path) -> dict:
    """What Fig. 8 and the summary need, fully evaluated; returns output row counts."""
    from analysis import jobs

    traces = spark.read.parquet(str(location / "traces.parquet"))
    events = spark.read.parquet(str(location / "events.parquet"))
    e2e = jobs.e2e_over_time(traces, 1.0, events).collect()
    moves = jobs.relinks(events, traces).collect()
    summary = jobs.summary(traces, THRESHOLDS).collect()
    return {"e2e_rows": len(e2e), "relinks": len(moves), "summary_rows": len(summary)}


def time_conversion(directory: Path, traces: pa.Table) -> dict:
    """Write the rows as JSON lines in a fake run directory and time analysis.traces.convert_run."""
    from analysis.traces import convert_run

    run = directory / "jsonl-run"
    (run / "traces").mkdir(parents=True, exist_ok=True)
    (run / "run.json").write_text(json.dumps({"run_id": "bench", "scenario": "bench", "complete": True}))
    (run / "events.jsonl").write_text("")
    with (run / "traces" / "all.jsonl").open("w") as handle:
        for batch in traces.to_batches(200_000):
            for row in batch.to_pylist():
                handle.write(json.dumps(row) + "\n")
    size = (run / "traces" / "all.jsonl").stat().st_size
    started = time.perf_counter()
    result = convert_run(run)
    seconds = time.perf_counter() - started
    return {"rows": result.trace_rows, "jsonl_bytes": size, "seconds": round(seconds, 3),
            "rows_per_s": round(result.trace_rows / seconds)}


def timed_sizes(spark, data: Path, sizes: list[int], repeats: int, cores: int) -> list[dict]:
    """The reduction of every size, `repeats` times each (median), after a warm-up; rows/s per core too."""
    results = []
    for rows in sizes:
        runs, out = [], None
        for _ in range(repeats):
            started = time.perf_counter()
            out = reduction(spark, data / f"rows-{rows}")
            runs.append(time.perf_counter() - started)
        median = statistics.median(runs)
        results.append({"rows": rows, "seconds": round(median, 3), "runs": [round(r, 3) for r in runs],
                        "rows_per_s": round(rows / median), "rows_per_s_per_core": round(rows / median / cores), **out})
        print(f"  {rows:>11,} rows on {spark.sparkContext.master}: {median:.2f}s "
              f"({rows / median:,.0f} rows/s)", flush=True)
    return results


def on_cluster(data: Path, sizes: list[int], repeats: int, workers: int, memory: str) -> dict:
    """The same reductions on a standalone cluster of `workers` one-core workers (analysis.cluster),
    started here from the installed pyspark and stopped by PID afterwards."""
    from analysis.cluster import StandaloneCluster
    from analysis.spark import session

    with StandaloneCluster(workers=workers, cores=1, memory=memory) as cluster:
        spark = session(cluster.master, conf={"spark.executor.memory": EXECUTOR_MEMORY})
        try:
            reduction(spark, data / "warmup")
            results = timed_sizes(spark, data, sizes, repeats, workers)
        finally:
            spark.stop()
    return {"master": "standalone", "workers": workers, "cores_per_worker": 1, "worker_memory": memory,
            "sizes": results}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="250000,500000,1000000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default=None)
    parser.add_argument("--out", default="results/bench/analysis.json")
    parser.add_argument("--data", default="results/bench/analysis-data")
    parser.add_argument("--no-convert", action="store_true")
    parser.add_argument("--keep-data", action="store_true", help="keep the generated Parquet and JSON lines")
    parser.add_argument("--cluster", type=int, default=0, metavar="WORKERS",
                        help="also on a standalone Spark cluster of this many one-core workers (analysis.cluster)")
    parser.add_argument("--worker-memory", default="3g", help="each cluster worker's memory")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    from analysis.spark import java_available, session

    if not java_available():
        print("bench-analysis: Spark needs a Java runtime (JAVA_HOME or java on PATH)")
        return 1
    data = Path(args.data)
    generated = {}
    for rows in sizes:
        started = time.perf_counter()
        relinks = write_rows(data / f"rows-{rows}", rows)
        generated[rows] = round(time.perf_counter() - started, 2)
        print(f"generated {rows:>11,} rows ({relinks} relinks) in {generated[rows]:.1f}s", flush=True)
    warm_traces, warm_events = synthetic(20_000, seed=2)
    write_dataset(data / "warmup", warm_traces, warm_events)

    started = time.perf_counter()
    spark = session(args.master)
    startup = time.perf_counter() - started
    master = spark.sparkContext.master
    print(f"spark {spark.version} on {master} ({os.cpu_count()} cpus): session up in {startup:.1f}s", flush=True)
    started = time.perf_counter()
    reduction(spark, data / "warmup")
    warmup = time.perf_counter() - started
    results = timed_sizes(spark, data, sizes, args.repeats, os.cpu_count())
    cluster = None
    if args.cluster:
        spark.stop()
        cluster = on_cluster(data, sizes, args.repeats, args.cluster, args.worker_memory)
        spark = session(args.master)

    by_rows = {r["rows"]: r["seconds"] for r in results}
    fit = linear_fit([r["rows"] for r in results], [r["seconds"] for r in results])
    ratio = round(by_rows[1_000_000] / by_rows[500_000], 3) if {500_000, 1_000_000} <= set(by_rows) else None
    conversion = None
    if not args.no_convert:
        traces, _ = synthetic(max(sizes))
        conversion = time_conversion(data, traces)

    print()
    print(f"{'rows':>10} {'median s':>9} {'runs (s)':<26} {'rows/s':>10} {'e2e rows':>9}")
    for r in results:
        print(f"{r['rows']:>10,} {r['seconds']:>9.2f} {', '.join(f'{x:.2f}' for x in r['runs']):<26} "
              f"{r['rows_per_s']:>10,} {r['e2e_rows']:>9,}")
    if cluster:
        print(f"on a standalone cluster of {cluster['workers']} one-core workers (local[*]: {os.cpu_count()} cores):")
        print(f"{'rows':>11} {'local rows/s/core':>18} {'cluster rows/s/core':>20}")
        for here, there in zip(results, cluster["sizes"]):
            print(f"{here['rows']:>11,} {here['rows_per_s_per_core']:>18,} {there['rows_per_s_per_core']:>20,}")
    if ratio is not None:
        print(f"time(1M)/time(500k) = {ratio:.2f} (2.00 = linear with no fixed cost)")
    if fit:
        print(f"least-squares fit: time = {fit['fixed_s']:.2f} s + {fit['per_million_s']:.2f} s per million rows "
              f"(R^2 {fit['r2']:.3f})")
    ok = by_rows.get(1_000_000, 0.0) <= TARGET_S if 1_000_000 in by_rows else None
    if ok is not None:
        print(f"target: 1,000,000 rows in <= {TARGET_S:.0f}s: {'met' if ok else 'MISSED'} ({by_rows[1_000_000]:.2f}s)")
    if conversion:
        print(f"JSON lines -> Parquet: {conversion['rows']:,} rows ({conversion['jsonl_bytes'] / 1e6:.0f} MB) in "
              f"{conversion['seconds']:.2f}s ({conversion['rows_per_s']:,} rows/s)")

    import pyspark

    report = {"machine": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
              "spark": spark.version, "pyspark": pyspark.__version__, "pyarrow": pa.__version__, "master": master,
              "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
              "session_startup_s": round(startup, 2), "warmup_s": round(warmup, 2), "repeats": args.repeats,
              "reduction": "e2e_over_time(1 s) + relinks + summary, collected", "sizes": results,
              "ratio_1m_500k": ratio, "fit": fit, "target_s": TARGET_S, "target_met": ok, "generate_s": generated,
              "conversion": conversion, "cluster": cluster}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")
    if not args.keep_data:
        import shutil

        shutil.rmtree(data, ignore_errors=True)
    return 0 if ok in (True, None) else 1


if __name__ == "__main__":
    raise SystemExit(main())
