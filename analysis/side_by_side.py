"""Runs side by side (`testbed compare RUN_DIR RUN_DIR...`): one row per run and topic class, as a
table and a figure.

A run's latency per topic class is the paper comparison's own reduction (`analysis.compare.
policy_violations`, one row per run) on the messages the saturation guard keeps, as `make paper`
computes it; what the run counted itself comes from its summary.json: the guard's validity
("valid N of M s"), the migrations, the clients' downtime at a migration, and the share of the
expected deliveries that arrived.
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis import compare, traces
from testbed import health


class NotARun(ValueError):
    """A folder that is not a finished run's results folder: the message says what it lacks."""


def check(run_dir: Path) -> Path:
    """The folder, if a finished run wrote it (run.json and summary.json); else NotARun in one line."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NotARun(f"{run_dir}: no such folder; give a run's results folder, e.g. results/uav-smoke-<run id>")
    if not (run_dir / "run.json").exists():
        raise NotARun(f"{run_dir}: not a run's results folder (no run.json, which every `testbed run` writes first)")
    if not (run_dir / "summary.json").exists():
        raise NotARun(f"{run_dir}: the run wrote no summary.json (it did not finish; `testbed view {run_dir}` shows "
                      "what it recorded)")
    return run_dir


def counted(run_dir: Path) -> dict:
    """What the run counted itself (summary.json): validity, migrations, downtime, delivered share."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    harness = summary.get("harness") or {}
    balance = summary.get("balance") or {}
    expected = summary.get("expected_deliveries")
    return {"validity": harness.get("validity") or (health.validity(harness) if harness else "not checked"),
            "migrations": summary.get("migrations"),
            "downtime_p50_s": balance.get("downtime_p50_s"), "downtime_max_s": balance.get("downtime_max_s"),
            "delivered_share": summary.get("delivered", 0) / expected if expected else None}


def rows(spark, run_dirs: list[Path]) -> list[dict]:
    """One row per run and topic class (its scenario's order): the run's reduction and its counts."""
    from analysis.spark import join

    run_dirs = [check(d) for d in run_dirs]
    for run_dir in run_dirs:
        traces.ensure_converted(run_dir)
    runs = [traces.read_run(d) for d in run_dirs]
    seen: dict = {}
    for run_dir, run in zip(run_dirs, runs):
        if run["run_id"] in seen:
            raise NotARun(f"{run_dir}: the same run as {seen[run['run_id']]} (run id {run['run_id']})")
        seen[run["run_id"]] = run_dir
    trace_df = spark.read.parquet(*[join(d, "traces.parquet") for d in run_dirs])
    events = spark.read.parquet(*[join(d, "events.parquet") for d in run_dirs])
    kept = compare.outside_saturated(trace_df, events, compare.saturated_frame(spark, runs))
    reduced = {(r["run_id"], r["topic_class"]): r.asDict()
               for r in compare.policy_violations(kept, compare.runs_frame(spark, runs), per_run=True).collect()}
    out = []
    for run_dir, run in zip(run_dirs, runs):
        own = counted(run_dir)
        for topic_class, threshold_s in (run.get("thresholds") or {}).items():
            found = reduced.get((run["run_id"], topic_class), {})
            out.append({"run": run_dir.name, "run_dir": str(run_dir), "scenario": run.get("scenario"),
                        "policy": run.get("policy"), "system": run.get("system"), "label": label(run),
                        "topic_class": topic_class, "threshold_s": threshold_s,
                        **{k: found.get(k) for k in ("messages", "p50_s", "p95_s", "p99_s", "violation_ratio")},
                        **own})
    return out


def label(run: dict) -> str:
    """What a run is beside others: its system under test and the system's variant, `epulsar/pulsar-hash`,
    `natscluster/home` (a run before systems were recorded: its policy)."""
    system, policy = run.get("system"), run.get("policy")
    if not system:
        return policy or "-"
    return policy if policy and policy.startswith(f"{system}/") else f"{system}/{policy}" if policy else system


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _share(value) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def table(found: list[dict]):
    """The rows as a table (testbed.screen: long names fold, never cut)."""
    from testbed.screen import Table

    out = Table("run", "scenario", "system / policy", "validity", "topic class", "messages", "p50 ms", "p95 ms", "p99 ms",
                "threshold ms", "violations", "migrations", "downtime p50 / max ms", "delivered",
                title="Runs side by side: E2E latency on the messages outside saturated seconds (as make paper)")
    out.columns[0].no_wrap = True  # a run's name stays whole (it is what one types next); the others fold
    out.columns[2].no_wrap = True  # and so does its label (natscluster/home), which names the series
    for r in found:
        out.add_row(r["run"], r["scenario"] or "-", r.get("label") or label(r), r["validity"], r["topic_class"],
                    "-" if r["messages"] is None else str(r["messages"]), _ms(r["p50_s"]), _ms(r["p95_s"]),
                    _ms(r["p99_s"]), _ms(r["threshold_s"]), _share(r["violation_ratio"]),
                    "-" if r["migrations"] is None else str(r["migrations"]),
                    f"{_ms(r['downtime_p50_s'])} / {_ms(r['downtime_max_s'])}", _share(r["delivered_share"]))
    return out


QUANTILES = (("p50_s", "p50"), ("p95_s", "p95"), ("p99_s", "p99"))


def figure(found: list[dict], out: Path) -> dict:
    """Per topic class (columns): p50, p95 and p99 E2E latency per run with the threshold (top), and
    the violation ratio per run (bottom); the runs in the order given."""
    from analysis import figures

    plt = figures.plt
    classes = list(dict.fromkeys(r["topic_class"] for r in found))
    names = list(dict.fromkeys(r["run"] for r in found))
    fig, axes = plt.subplots(2, max(1, len(classes)), figsize=(2.2 + 1.6 * len(names) * max(1, len(classes)), 7.5),
                             squeeze=False)
    width = 0.8 / len(QUANTILES)
    for col, topic_class in enumerate(classes):
        top, bottom = axes[0, col], axes[1, col]
        mine = {r["run"]: r for r in found if r["topic_class"] == topic_class}
        for q, (column, name) in enumerate(QUANTILES):
            heights = [(mine[n][column] or 0.0) * 1e3 if n in mine else 0.0 for n in names]
            top.bar([i - 0.4 + width * (q + 0.5) for i in range(len(names))], heights, width, label=name)
        figures._threshold_line(top, next((r["threshold_s"] for r in mine.values() if r["threshold_s"]), None))
        bottom.bar(range(len(names)), [(mine[n]["violation_ratio"] or 0.0) * 100 if n in mine else 0.0 for n in names],
                   0.6, color="tab:red")
        for i, name in enumerate(names):  # an empty place is said, not drawn as zero latency
            if not (mine.get(name) or {}).get("messages"):
                top.annotate("no messages", (i, 0), ha="center", va="bottom", fontsize=8, color="grey")
        ticks = [f"{n}\n{mine[n].get('label') or label(mine[n])}\n{mine[n]['validity']}" if n in mine else n
                 for n in names]
        for ax in (top, bottom):
            ax.set_xticks(range(len(names)), ticks, fontsize=7)
            ax.set_xlabel("run (system / policy, harness validity)")
            ax.grid(True, axis="y", alpha=0.3)
        top.set_title(f"{topic_class}: E2E latency", fontsize=10)
        top.set_ylabel("E2E latency (ms)")
        top.set_ylim(bottom=0, top=top.get_ylim()[1] * 1.25)
        top.legend(fontsize="x-small", loc="upper right", ncol=2)
        bottom.set_title(f"{topic_class}: messages above the threshold", fontsize=10)
        bottom.set_ylabel("violation ratio (% of messages)")
        bottom.set_ylim(bottom=0, top=max(5.0, bottom.get_ylim()[1]))
    title = "Runs side by side (messages outside saturated seconds)"
    fig.suptitle(title)
    return figures.save(fig, out, title, "run (system / policy, harness validity)",
                        "E2E latency (ms); violation ratio (% of messages)", names)


def main(run_dirs: list[Path], out: Path, master: str | None, console) -> int:
    """`testbed compare`: every folder checked before Spark starts; the table, then the figure's path."""
    from analysis.spark import java_available, session

    run_dirs = [check(d) for d in run_dirs]
    if len(run_dirs) < 2:
        raise NotARun("compare: give two runs' results folders or more")
    if not java_available():
        raise NotARun("compare: Spark needs a Java runtime (JAVA_HOME or java on PATH); `make setup` installs it")
    found = rows(session(master), run_dirs)
    console.print(table(found))
    drawn = figure(found, out)
    console.print(f"figure: {drawn['path']}", highlight=False, markup=False, soft_wrap=True)
    return 0


__all__ = ["NotARun", "check", "counted", "rows", "table", "figure", "main"]
