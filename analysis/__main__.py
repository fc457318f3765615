"""Command line of the trace analysis.

    python -m analysis convert RUN_DIR...                 JSON lines -> traces/events/run.parquet (no Spark)
    python -m analysis reduce RUN_DIR... [--master M]     Spark jobs -> RUN_DIR/tables/*.parquet, prints a summary
    python -m analysis figures RUN_DIR... --out DIR       Fig. 7a/7b/8/9 as PNG (reduces runs that need it), and
                                                          load balancing (analysis.balance) for runs with `loads`

Exit codes: 0 ok, 2 bad input (no such run, nothing to draw), 1 failure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

FIGURES = ("fig7a", "fig7b", "fig8", "fig9")


def _spark(master):
    from analysis.spark import java_available, session

    if not java_available():
        raise SystemExit("analysis: Spark needs a Java runtime (JAVA_HOME or java on PATH); "
                         "`make setup` installs default-jre-headless")
    return session(master)


def _check_dirs(locations, local_only: bool = False) -> list[str]:
    from analysis.spark import is_uri

    if local_only and any(is_uri(loc) for loc in locations):
        print("analysis: convert and figures read local run directories; "
              "copy the run directory (its .parquet files and tables/) here first",
              file=sys.stderr)
        raise SystemExit(2)
    bad = [loc for loc in locations if not is_uri(loc) and not Path(loc).is_dir()]
    if bad:
        print(f"analysis: no such run directory: {', '.join(bad)}", file=sys.stderr)
        raise SystemExit(2)
    return list(locations)


def cmd_convert(args) -> int:
    from analysis import traces

    for run_dir in _check_dirs(args.runs, local_only=True):
        print(traces.describe(traces.convert_run(run_dir)))
    return 0


def cmd_reduce(args) -> int:
    from analysis.reduce import format_summary, reduce_run

    runs = _check_dirs(args.runs)
    if args.out and len(runs) > 1:
        print("analysis: --out needs a single RUN_DIR", file=sys.stderr)
        return 2
    spark = _spark(args.master)
    for location in runs:
        result = reduce_run(spark, location, out=args.out, bucket_s=args.bucket, consumer=args.consumer,
                            force_convert=args.force)
        print(format_summary(result))
    return 0


def _load_tables(run_dir: Path) -> dict:
    import pyarrow.parquet as pq

    tables = {}
    for path in sorted((run_dir / "tables").glob("*.parquet")):
        tables[path.name.removesuffix(".parquet")] = pq.read_table(path)
    return tables


def _wanted(run: dict, only: list[str] | None) -> set[str]:
    if only:
        return set(only)
    asked = set(run.get("figures") or [])
    if "fig7" in asked:
        asked |= {"fig7a", "fig7b"}
    if not asked & set(FIGURES):
        from testbed import plugin

        experiment = plugin.experiments().get(run.get("workload"))
        asked |= {experiment.figure} if experiment else set()
    return asked & set(FIGURES)


def cmd_figures(args) -> int:
    from analysis import figures, traces

    runs = [Path(r) for r in _check_dirs(args.runs, local_only=True)]
    only = [f.strip() for f in args.only.split(",")] if args.only else None
    if only and set(only) - set(FIGURES):
        print(f"analysis: --only: unknown figure(s) {sorted(set(only) - set(FIGURES))}; known: {', '.join(FIGURES)}",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    spark = None
    drawn, skipped, migrations = [], [], []
    from analysis.reduce import current, reduce_run

    for run_dir in runs:
        if args.reduce or not current(run_dir):
            spark = spark or _spark(args.master)
            reduce_run(spark, run_dir, bucket_s=args.bucket, consumer=args.consumer)
        run = traces.read_run(run_dir)
        tables = _load_tables(run_dir)
        wanted = _wanted(run, only)
        thresholds = run.get("thresholds") or {}
        first_class = next(iter(thresholds), None)
        note = ", ".join(n for n in ("partial run" if run.get("partial") else "", traces.harness_note(run)) if n)
        saturated = run.get("harness_saturated")
        name = f"{run.get('scenario') or 'run'}-{run.get('run_id')}"
        if "fig8" in wanted:
            e2e = tables.get("e2e")
            if e2e is None or e2e.num_rows == 0:
                skipped.append(f"fig8 for {run_dir}: no trace rows")
            else:
                drawn.append(figures.fig8(e2e, out / f"fig8-{name}.png", relinks=tables.get("relinks"),
                                          migrations=tables.get("migration_marks"), threshold_s=thresholds.get(first_class, 0.040), stat=args.stat,
                                          topic_class=first_class, note=note, saturated=saturated,
                                          faults=run.get("faults")))
        if "fig9" in wanted:
            aoi = tables.get("aoi")
            if aoi is None or aoi.num_rows == 0:
                skipped.append(f"fig9 for {run_dir}: no AoI table "
                               "(not an MMOG run, or no traces; --consumer picks one)")
            else:
                drawn.append(figures.fig9(aoi, out / f"fig9-{name}.png", threshold_s=thresholds.get(first_class, 0.100),
                                          stat=args.stat, note=note, saturated=saturated,
                                          marks=tables.get("aoi_marks"), faults=run.get("faults")))
        estimates = run_dir / "tables" / "estimates.png"  # E(t) against the configured RTTs (analysis.estimates)
        if estimates.exists():
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy2(estimates, out / f"estimates-{name}.png")
            drawn.append({"path": str(out / f"estimates-{name}.png"),
                          "title": f"coordinates' estimated vs configured RTT over {name}"})
        if wanted & {"fig7a", "fig7b"} and tables.get("migrations") is not None:
            migrations.extend(tables["migrations"].to_pylist())
    if not only:  # runs whose topic manager reported `loads`: load balancing over time, side by side
        from analysis import balance

        more, reasons = balance.draw_runs(runs, out)
        drawn += more
        skipped += reasons
    wanted_any = set(only) if only else set().union(*(_wanted(traces.read_run(r), None) for r in runs))
    for fig in ("fig7a", "fig7b"):
        if fig not in wanted_any:
            continue
        column = "downtime_s" if fig == "fig7a" else "migration_time_s"
        if not any(row.get(column) is not None for row in migrations):
            skipped.append(f"{fig}: no migration events with {column} in these runs")
            continue
        render = figures.fig7a if fig == "fig7a" else figures.fig7b
        drawn.append(render(migrations, out / f"{fig}.png"))
    for item in drawn:
        print(f"wrote {item['path']}: {item['title']}")
    for reason in skipped:
        print(f"skipped {reason}")
    if drawn:
        out.mkdir(parents=True, exist_ok=True)
        (out / "figures.json").write_text(json.dumps({"runs": [str(r) for r in runs], "figures": drawn}, indent=2))
    if not drawn:
        print("analysis: nothing to draw for these runs", file=sys.stderr)
        return 2
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m analysis", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)

    convert = sub.add_parser("convert", help="JSON-lines traces and events -> Parquet (no Spark)",
                             epilog="example: python -m analysis convert results/uav-smoke-ab12cd")
    convert.add_argument("runs", nargs="+", metavar="RUN_DIR")
    convert.set_defaults(func=cmd_convert)

    reduce = sub.add_parser("reduce", help="Spark jobs -> RUN_DIR/tables/*.parquet and a summary",
                            epilog="example: python -m analysis reduce results/uav-smoke-ab12cd --master local[2]")
    reduce.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (paths or URIs)")
    reduce.add_argument("--master", help="Spark master (default $ANALYSIS_SPARK_MASTER or local[*])")
    reduce.add_argument("--out", help="where the tables go (path or URI; default RUN_DIR/tables)")
    reduce.add_argument("--bucket", type=float, default=1.0, help="time bucket in seconds (default 1)")
    reduce.add_argument("--consumer", help="the client whose AoI latency Fig. 9 shows (default: most avatars)")
    reduce.add_argument("--force", action="store_true", help="convert the JSON lines again")
    reduce.set_defaults(func=cmd_reduce)

    figs = sub.add_parser("figures", help="Fig. 7a, 7b, 8, 9 as PNG from run directories",
                          epilog="example: python -m analysis figures results/uav-* --out results/figures")
    figs.add_argument("runs", nargs="+", metavar="RUN_DIR")
    figs.add_argument("--out", required=True, help="directory for the PNG files")
    figs.add_argument("--master", help="Spark master, when a run still needs reducing")
    figs.add_argument("--only", help=f"comma-separated subset of {', '.join(FIGURES)}")
    figs.add_argument("--stat", default="p95_s", choices=["p50_s", "p95_s", "max_s"],
                      help="per-bucket statistic drawn in Fig. 8 and 9 (default p95_s)")
    figs.add_argument("--bucket", type=float, default=1.0, help="time bucket when reducing (default 1 s)")
    figs.add_argument("--consumer", help="Fig. 9's client when reducing")
    figs.add_argument("--reduce", action="store_true", help="reduce again even if tables exist")
    figs.set_defaults(func=cmd_figures)
    return top


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
