"""Load balancing: per broker over time, and ePulsar vs Pulsar's load manager vs hashing side by side.

    run = load_run("results/hotspot-smoke-qwuc01")        # the run's facts and its series over time
    over_time_figure([run, ...], "balance.png")            # one column per policy, the imbalance below
    table = side_by_side([run_row(load_run(d)) for d in dirs])
    comparison_figure(table, "balance-compare.png"); markdown_table(table)

The series come from the topic manager's events (testbed.systems.pubsub.manager): `loads` every
monitoring round (each broker's message rate out, link use out and topics owned; the imbalance, the
coefficient of variation of the brokers' message rates), `lm_usage` (bundles owned, Pulsar's load
manager only), `bundle_split`, `bundle_unload` (by shedder), `overload_shed` (ePulsar's overload
branch, paper 3.4.2/3.4.3). The numbers per run (mean imbalance, unloads, sheds, downtime) are not
derived again here: they are the harness's own summary (testbed.systems.pubsub.balance, in run.json's
`summary.balance`), which the end screen showed; this module only pools them over repeats
(`analysis.stats`). Time is seconds since the run's `run_start` event (the workload's start), as in
every other figure; the rounds before it are the settle phase, shaded.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import yaml  # noqa: E402

from analysis import stats  # noqa: E402
from analysis.figures import POLICY_COLORS, policy_key, policy_name, save  # noqa: E402
from testbed.procs import json_lines  # noqa: E402
from testbed.units import parse_rate  # noqa: E402

MARK_STYLES = {"split": {"color": "tab:purple", "linestyle": ":"},
               "unload": {"color": "black", "linestyle": "--"},
               "overload shed": {"color": "tab:red", "linestyle": "-."}}
UNLOAD_COLORS = {"split": "tab:gray", "threshold": "black", "overload": "tab:brown", "uniform": "tab:cyan"}  # by shedder


class BadRun(ValueError):
    """A run directory lacks what the figures of load balancing need (the message names file and field)."""


# ------------------------------------------------------------------------------------------ pure: events -> series

def run_start(events: list[dict], fallback: float | None = None) -> float:
    """The run's time origin: its `run_start` event, else `fallback` (run.json's `started`)."""
    starts = [e["time"] for e in events if e.get("type") == "run_start" and "time" in e]
    if starts:
        return min(starts)
    if fallback is None:
        raise BadRun("no run_start event and no run.json started")
    return float(fallback)


def over_time(events: list[dict], t0: float) -> dict:
    """Per broker, per monitoring round: `t_s`, `rate_out` (msg/s delivered), `link_out` (fraction of its
    link), `topics` owned and `bundles` owned (None without `lm_usage` that round); the imbalance per
    round where something flowed: [(t_s, CoV)]; and the marks (`marks`)."""
    bundles = {e["round"]: {b: v.get("bundles") for b, v in e.get("brokers", {}).items()}
               for e in events if e.get("type") == "lm_usage" and "round" in e}
    brokers: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    imbalance = []
    for e in sorted((e for e in events if e.get("type") == "loads"), key=lambda e: e["time"]):
        t = e["time"] - t0
        for name, b in e.get("brokers", {}).items():
            series = brokers[name]
            series["t_s"].append(t)
            series["rate_out"].append(b.get("rate_out"))
            series["link_out"].append(b.get("network_out"))
            series["topics"].append(b.get("topics"))
            series["bundles"].append(bundles.get(e.get("round"), {}).get(name))
        if e.get("imbalance") is not None:
            imbalance.append((t, e["imbalance"]))
    return {"brokers": {n: dict(s) for n, s in sorted(brokers.items())}, "imbalance": imbalance,
            "marks": marks(events, t0)}


def marks(events: list[dict], t0: float) -> list[dict]:
    """The moves to mark: bundle splits, bundle unloads (kind "unload", `by` its shedder) and ePulsar's
    overload sheds, each with `t_s`, the broker it left and the topics it moved."""
    out = []
    for e in events:
        kind = {"bundle_split": "split", "bundle_unload": "unload", "overload_shed": "overload shed"}.get(e.get("type"))
        if kind:
            out.append({"t_s": e["time"] - t0, "kind": kind, "by": e.get("by"),
                        "broker": e.get("from_broker") or e.get("broker"), "topics": list(e.get("topics") or [])})
    return sorted(out, key=lambda m: m["t_s"])


# ------------------------------------------------------------------------------------------ a run directory

def _surge_s(run_dir: Path, t0: float) -> float | None:
    """The hot-spot surge's planned start (hotspot-plan.json: the first publisher with `at` > 0) in
    seconds since run start; the plan's `at` counts from the workload's start (logs/hotspot-start)."""
    plan = run_dir / "hotspot-plan.json"
    if not plan.exists():
        return None
    try:
        ats = [float(p["at"]) for p in json.loads(plan.read_text()).get("publishers", []) if float(p["at"]) > 0]
    except (ValueError, KeyError, TypeError) as error:
        raise BadRun(f"{plan}: publishers[].at: {error}") from None
    if not ats:
        return None
    start_file = run_dir / "logs" / "hotspot-start"
    start = float(start_file.read_text().strip()) if start_file.exists() else t0
    return min(ats) + start - t0


def load_run(run_dir: str | os.PathLike) -> dict:
    """One run's facts (policy, scenario, workload, thresholds, surge, the harness's summary) and its
    series (`over_time`). Raises BadRun naming the file and field that is missing."""
    run_dir = Path(run_dir)
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError) as error:
        raise BadRun(f"{run_dir / 'run.json'}: {error}") from None
    try:
        scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise BadRun(f"{run_dir / 'scenario.yaml'}: {error}") from None
    control = scenario.get("control") or {}
    if not control.get("policy"):
        raise BadRun(f"{run_dir / 'scenario.yaml'}: control.policy missing")
    overload = control.get("overload") or {}
    events = list(json_lines(run_dir / "events.jsonl"))
    t0 = run_start(events, meta.get("started"))
    return {"dir": str(run_dir), "run_id": meta.get("run_id"), "scenario": meta.get("scenario") or scenario.get("name"),
            "workload": (scenario.get("workload") or {}).get("kind"), "policy": control["policy"],
            "seed": meta.get("seed"), "summary": meta.get("summary") or {},
            "link_threshold": float(overload["network"]) if overload.get("network") is not None else None,
            "rth_out": parse_rate(overload["output_rate"]) if overload.get("output_rate") is not None else None,
            "surge_s": _surge_s(run_dir, t0), **over_time(events, t0)}


def has_loads(run_dir: str | os.PathLike) -> bool:
    """Whether the topic manager of this run reported `loads` (runs from before Pulsar's load manager
    was added did not)."""
    return any(e.get("type") == "loads" for e in json_lines(Path(run_dir) / "events.jsonl"))


# ------------------------------------------------------------------------------------------ numbers per run, pooled

def run_row(run: dict) -> dict:
    """One run's side-by-side numbers, from the harness's summary: violation ratio (every topic class
    pooled), mean imbalance, migrations, bundle unloads, topics shed by ePulsar's overload branch,
    client downtime p50 and max. Raises BadRun when the run has no balance summary."""
    summary = run["summary"]
    balance = summary.get("balance")
    if not balance or not balance.get("rounds"):
        raise BadRun(f"{run['dir']}/run.json: summary.balance missing (a run before the load summary, or no rounds)")
    classes = summary.get("classes") or {}
    messages = sum(c.get("messages") or 0 for c in classes.values())
    violations = sum((c.get("violation_ratio") or 0) * (c.get("messages") or 0) for c in classes.values())
    return {"scenario": run["scenario"], "workload": run["workload"], "policy": run["policy"], "run_id": run["run_id"],
            "violation_ratio": violations / messages if messages else None,
            "imbalance_mean": balance["imbalance_mean"], "migrations": summary.get("migrations"),
            "unloads": balance["unloads"], "sheds": balance["overload_sheds"],
            "downtime_p50_s": balance["downtime_p50_s"], "downtime_max_s": balance["downtime_max_s"]}


TABLE_COLUMNS = {"violation_ratio": (0.0, 1.0), "imbalance_mean": (0.0, float("inf")), "migrations": None,
                 "unloads": None, "sheds": None, "downtime_p50_s": (0.0, float("inf")), "downtime_max_s": None}


def side_by_side(rows: list[dict]) -> list[dict]:
    """Per scenario and policy: every TABLE_COLUMNS as the mean over the runs (repeats with their own
    seeds) with its 95 % interval (`stats.mean_ci`; n=1 has none); None when no run had the value."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["scenario"], r["policy"])].append(r)
    out = []
    for (scenario, policy), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], policy_key(kv[0][1]))):
        row = {"scenario": scenario, "workload": runs[0]["workload"], "policy": policy, "runs": len(runs)}
        for column, bounds in TABLE_COLUMNS.items():
            values = [r[column] for r in runs if r.get(column) is not None]
            row[column] = stats.mean_ci(values, bounds=bounds) if values else None
        out.append(row)
    return out


def _cell(interval: stats.Interval | None, fmt: str, scale: float = 1.0, unit: str = "", ci: bool = True) -> str:
    if interval is None:
        return "-"
    if ci and interval.has_interval:
        return interval.text(fmt, scale, unit)
    return fmt.format(interval.value * scale) + unit


def markdown_table(table: list[dict]) -> list[str]:
    """The side-by-side table as markdown lines (means over runs; violation ratio and imbalance with
    their 95 % interval)."""
    lines = ["| scenario | policy | runs | violation ratio | mean imbalance (CoV) | migrations | bundle unloads "
             "| topics shed (overload) | downtime p50 | downtime max |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['scenario']} | {policy_name(r['policy'])} | {r['runs']} | "
                     f"{_cell(r['violation_ratio'], '{:.1f}', 100, ' %')} | {_cell(r['imbalance_mean'], '{:.2f}')} | "
                     f"{_cell(r['migrations'], '{:.1f}', ci=False)} | {_cell(r['unloads'], '{:.1f}', ci=False)} | "
                     f"{_cell(r['sheds'], '{:.1f}', ci=False)} | {_cell(r['downtime_p50_s'], '{:.0f}', 1000, ' ms')} | "
                     f"{_cell(r['downtime_max_s'], '{:.0f}', 1000, ' ms', ci=False)} |")
    return lines


# ------------------------------------------------------------------------------------------ figures

def _draw_marks(ax, run: dict, legend: bool) -> None:
    seen = set()
    for m in run["marks"]:
        name = m["kind"] if m["kind"] != "unload" else f"unload ({m['by']})"
        style = dict(MARK_STYLES[m["kind"]])
        if m["kind"] == "unload":
            style["color"] = UNLOAD_COLORS.get(m["by"], style["color"])
        ax.axvline(m["t_s"], linewidth=0.9, alpha=0.8, **style,
                   label=name if legend and name not in seen else None)
        seen.add(name)
    if run.get("surge_s") is not None:
        ax.axvline(run["surge_s"], color="tab:orange", linewidth=2.0, alpha=0.5, label="surge starts" if legend else None)


TIME_AXIS = "time since the workload started (s)"
THRESHOLD_SHOWN = 2.0  # a threshold up to this many times the data's peak is drawn; a higher one is named


def _threshold(ax, value: float | None, peak: float, words: str, unit: str) -> None:
    """A threshold where the data is: a red dashed line when it is within THRESHOLD_SHOWN x the data's
    peak (the axis then reaches it), else named at the top ("..., above the axis"): an axis stretched
    to a threshold far above the data flattens the data at the bottom."""
    if not value:
        return
    text = f"{words} {value:,.0f} {unit}" if value >= 100 else f"{words} {value:g} {unit}"
    if value <= THRESHOLD_SHOWN * peak:
        ax.axhline(value, color="red", linestyle="--", label=text)
        ax.set_ylim(top=max(ax.get_ylim()[1], 1.08 * value))
    else:  # head room for the words above the data's peak
        ax.set_ylim(top=max(ax.get_ylim()[1], 1.2 * peak))
        ax.text(0.99, 0.97, f"{text}, above the axis", transform=ax.transAxes, ha="right", va="top", color="red",
                fontsize="x-small", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


def _peak(series: list[list]) -> float:
    values = [v for values in series for v in values if v is not None]
    return max(values, default=0.0)


def _shade_settle(ax, run: dict) -> None:
    """The monitoring rounds before the workload started (negative times) are the settle phase."""
    first = min((t for s in run["brokers"].values() for t in s["t_s"]), default=0.0)
    if first < 0:
        ax.axvspan(first, 0.0, color="0.88", linewidth=0, label="settle (before the workload)")


def over_time_plot(runs: list[dict], title: str | None = None):
    """"Load balancing over time" as a matplotlib Figure: one column per run (a policy each, in the
    registry's order); rows: message rate out per broker with Rth_out, link use out with the overload
    threshold, topics (and bundles) owned; splits, unloads and overload sheds as vertical lines, the
    surge marked, the settle shaded; below, across the columns, the imbalance (CoV of the brokers'
    message rates) with one line per policy. Axes are scaled to the data (`_threshold`)."""
    if not runs:
        raise BadRun("over_time_figure: no runs")
    runs = sorted(runs, key=lambda r: policy_key(r["policy"]))
    names = sorted({b for r in runs for b in r["brokers"]})
    cmap = plt.get_cmap("tab10")
    colour = {b: cmap(i % 10) for i, b in enumerate(names)}
    bundles = any(v is not None for r in runs for s in r["brokers"].values() for v in s["bundles"])
    cols = len(runs)
    fig = plt.figure(figsize=(4.6 * cols + 1.8, 12))
    grid = fig.add_gridspec(4, cols, height_ratios=[1, 1, 1, 0.9])
    first, handles = None, {}
    for c, run in enumerate(runs):
        axes = [fig.add_subplot(grid[r, c], sharex=first) for r in range(3)]
        first = first or axes[0]
        for ax in axes:
            _shade_settle(ax, run)
        link = {name: [None if v is None else 100 * v for v in s["link_out"]] for name, s in run["brokers"].items()}
        for name, s in run["brokers"].items():
            axes[0].plot(s["t_s"], s["rate_out"], color=colour[name], marker=".", label=name)
            axes[1].plot(s["t_s"], link[name], color=colour[name], marker=".")
            axes[2].plot(s["t_s"], s["topics"], color=colour[name], marker=".", drawstyle="steps-post")
            owned = [(t, v) for t, v in zip(s["t_s"], s["bundles"]) if v is not None]  # rounds with lm_usage
            if owned:
                axes[2].plot(*zip(*owned), color=colour[name], linestyle="--", drawstyle="steps-post")
        for ax in axes:
            _draw_marks(ax, run, legend=True)
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
        _threshold(axes[0], run.get("rth_out"), _peak([s["rate_out"] for s in run["brokers"].values()]),
                   "Rth_out", "msg/s")
        _threshold(axes[1], 100 * run["link_threshold"] if run.get("link_threshold") else None,
                   _peak(list(link.values())), "overload", "%")
        axes[2].yaxis.set_major_locator(MaxNLocator(integer=True))  # topics and bundles come whole
        axes[0].set_title(f"{policy_name(run['policy'])}\n({run['scenario']} run {run['run_id']})", fontsize=10)
        axes[2].set_xlabel(TIME_AXIS)
        if c == 0:
            axes[0].set_ylabel("message rate out (msg/s)")
            axes[1].set_ylabel("link use out (% of the broker link)")
            axes[2].set_ylabel("topics owned (solid)\nbundles owned (dashed)" if bundles else "topics owned")
        for ax in axes:
            handles.update({label: h for h, label in zip(*ax.get_legend_handles_labels())})
    cov = fig.add_subplot(grid[3, :], sharex=first)
    for run in runs:
        if run["imbalance"]:
            t, v = zip(*run["imbalance"])
            cov.plot(t, v, marker=".", color=POLICY_COLORS.get(run["policy"]), label=policy_name(run["policy"]))
    surges = {r["surge_s"] for r in runs if r.get("surge_s") is not None}
    for i, s in enumerate(sorted(surges)):
        cov.axvline(s, color="tab:orange", linewidth=2.0, alpha=0.5, label="surge starts" if i == 0 else None)
    cov.set_ylim(bottom=0)
    cov.grid(True, alpha=0.3)
    cov.set_xlabel(TIME_AXIS)
    cov.set_ylabel("imbalance: CoV of the\nbrokers' msg rates")
    if cov.get_legend_handles_labels()[0]:
        cov.legend(fontsize="small", loc="upper right")
    fig.suptitle(title or f"Load balancing over time ({runs[0]['scenario']})")
    fig.tight_layout(rect=(0, 0, 1 - 2.0 / fig.get_figwidth(), 1))
    fig.legend(list(handles.values()), list(handles), fontsize="x-small", loc="center right",
               title="brokers, thresholds, moves", title_fontsize="x-small")
    return fig


def over_time_figure(runs: list[dict], out: str | os.PathLike, title: str | None = None) -> dict:
    """`over_time_plot` saved as PNG; returns what it shows."""
    fig = over_time_plot(runs, title)
    title = fig.get_suptitle()
    series = [policy_name(r["policy"]) for r in sorted(runs, key=lambda r: policy_key(r["policy"])) if r["imbalance"]]
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)  # not figures.save: its tight_layout would slide the axes under the legend
    plt.close(fig)
    return {"path": str(path), "title": title, "xlabel": TIME_AXIS,
            "ylabel": "message rate out (msg/s); link use out (%); topics and bundles; imbalance (CoV)",
            "series": series}


COMPARED = (("violation_ratio", "violation ratio (% of messages)", 100),
            ("imbalance_mean", "mean imbalance (CoV of broker msg rates)", 1),
            ("migrations", "topic migrations per run", 1),
            ("downtime_p50_s", "client downtime p50 (bar) and max (tick) (ms)", 1000))


def comparison_figure(table: list[dict], out: str | os.PathLike) -> dict:
    """Per metric a panel (violation ratio, mean imbalance, migrations, client downtime p50 with the
    max as a tick), bars grouped by scenario, one per policy; black error bars are the 95 % interval
    over the runs."""
    scenarios = list(dict.fromkeys(r["scenario"] for r in table))
    policies = sorted({r["policy"] for r in table}, key=policy_key)
    width = 0.8 / max(1, len(policies))
    fig, axes = plt.subplots(1, len(COMPARED), figsize=(4.2 * len(COMPARED) + 1.5, 4.6), squeeze=False)
    for ax, (column, label, scale) in zip(axes[0], COMPARED):
        for j, policy in enumerate(policies):
            for k, scenario in enumerate(scenarios):
                row = next((r for r in table if r["scenario"] == scenario and r["policy"] == policy), None)
                value = row and row[column]
                if value is None:
                    continue
                x = k - 0.4 + width * (j + 0.5)
                ax.bar(x, value.value * scale, width, color=POLICY_COLORS.get(policy))
                if value.has_interval:
                    ax.errorbar([x], [value.value * scale], yerr=[[(value.value - value.low) * scale],
                                                                  [(value.high - value.value) * scale]],
                                color="black", capsize=3, linewidth=1)
                if column == "downtime_p50_s" and row["downtime_max_s"] is not None:
                    ax.plot([x], [row["downtime_max_s"].value * scale], marker="_", markersize=12, color="black")
        ax.set_xticks(range(len(scenarios)), scenarios, rotation=15, fontsize=8)
        ax.set_ylabel(label, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    axes[0, -1].legend([Patch(color=POLICY_COLORS.get(p)) for p in policies], [policy_name(p) for p in policies],
                       fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    title = "Load balancing: ePulsar vs Pulsar's load manager vs hashing (mean over runs, 95 % interval)"
    fig.suptitle(title)
    return save(fig, out, title, "scenario", "; ".join(label for _, label, _ in COMPARED),
                [policy_name(p) for p in policies])



def draw_runs(run_dirs: list, out: str | os.PathLike) -> tuple[list[dict], list[str]]:
    """`testbed figures`' load-balancing figures for the runs whose topic manager reported `loads`:
    balance-<scenario>-<run>.png per run; per scenario run under several policies,
    balance-<scenario>.png (the first run given per policy, one column each); and, over them all,
    balance-compare.png. Returns (drawn, skipped with the reason)."""
    out = Path(out)
    drawn, skipped, runs = [], [], []
    for run_dir in run_dirs:
        if not has_loads(run_dir):
            continue
        try:
            run = load_run(run_dir)
        except BadRun as error:
            skipped.append(f"load balancing for {run_dir}: {error}")
            continue
        runs.append(run)
        drawn.append(over_time_figure([run], out / f"balance-{run['scenario']}-{run['run_id']}.png"))
    rows = []
    for scenario in dict.fromkeys(r["scenario"] for r in runs):
        first = {}
        for run in runs:
            if run["scenario"] == scenario:
                first.setdefault(run["policy"], run)
        if len(first) > 1:
            drawn.append(over_time_figure(list(first.values()), out / f"balance-{scenario}.png"))
    for run in runs:
        try:
            rows.append(run_row(run))
        except BadRun as error:
            skipped.append(f"load-balancing comparison: {error}")
    if len({(r["scenario"], r["policy"]) for r in rows}) > 1:
        drawn.append(comparison_figure(side_by_side(rows), out / "balance-compare.png"))
    return drawn, skipped


def headline(table: list[dict], scale: str = ""):
    """The index's line for the side-by-side table: per scenario, each policy's mean imbalance and
    violation ratio. No verdict: the paper makes no claim on balance (headlines.AGREEMENT_RULES)."""
    from analysis.headlines import Headline, require

    require(table, "runs with a load summary")
    parts = []
    for scenario in dict.fromkeys(r["scenario"] for r in table):
        mine = [r for r in table if r["scenario"] == scenario]
        parts.append(f"{scenario}: " + ", ".join(
            f"{policy_name(r['policy'])} CoV {_cell(r['imbalance_mean'], '{:.2f}', ci=False)}, "
            f"{_cell(r['violation_ratio'], '{:.1f}', 100, ' %', ci=False)} violations" for r in mine))
    numbers = {f"{r['scenario']}/{r['policy']}": {c: r[c].value for c in TABLE_COLUMNS if r[c] is not None}
               for r in table}
    return Headline("mean imbalance and messages above the threshold: " + "; ".join(parts), None, scale, numbers)


__all__ = ["BadRun", "run_start", "over_time", "marks", "load_run", "has_loads", "run_row", "side_by_side", "draw_runs",
           "markdown_table", "headline", "over_time_plot", "over_time_figure", "comparison_figure"]
