"""The microbenchmarks' figures, drawn from the JSON each writes in results/bench/ (`make bench-*`,
`testbed paper`). A benchmark measures and writes its JSON; this module is where its figure is drawn,
so a figure can be redrawn (or restyled) without measuring again.

- nc.json -> fig3b.png: Serf's RTT estimation error vs cluster size and vs the RTT (paper 5.3)
- overload.json -> overload.png: nats-server's output rate vs p95 latency, the Rth_out knee (paper 5.4)
- capacity.json -> capacity.png: the harness's overhead vs offered load, CPU by process class
- efficiency.json -> efficiency.png: CPU-us per delivered message by process class, shapers side by side
- calibration.json -> calibration.png: the emulated inter-city RTTs against WonderProxy's pings, per pair

    python -m analysis.bench_figures [--dir results/bench] [nc overload capacity efficiency ...]

ePulsar's Fig. 6 and 7 are drawn in its folder (testbed/systems/pubsub/bench/monitoring_figures.py,
migration_figures.py).

Each renderer takes the benchmark's JSON (a dict) and where to write, and returns what it drew (path,
title, axis labels, series), like `analysis.figures`. A name ending in -quick (overload-quick,
capacity-quick) draws that JSON under its own name.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis import figures, stats  # noqa: E402

OUT = Path("results/bench")


def _drawn(fig, path: Path, title: str, xlabel: str, ylabel: str, series: list) -> dict:
    return figures.save(fig, path, title, xlabel, ylabel, series)


# ------------------------------------------------------------------------------------------ Fig. 3b

def _convergence_panel(ax, rows: list[dict]) -> list[str]:
    """Convergence time per cluster size at 50 ms; sizes that failed or never converged drawn at the top."""
    by_n = sorted((r for r in rows if r["rtt_ms"] == 50), key=lambda r: r["nodes"])
    done = [r for r in by_n if not r.get("failed") and r.get("convergence_s") is not None]
    series = []
    if done:
        ax.plot([r["nodes"] for r in done], [r["convergence_s"] for r in done], marker="o", label="converged after (s)")
        series.append("converged after (s)")
    top = max([r["convergence_s"] for r in done] + [10.0]) * 1.15
    lost = [r for r in by_n if r not in done]
    if lost:
        ax.scatter([r["nodes"] for r in lost], [top] * len(lost), marker="x", color="red",
                   label="could not run / never converged")
        series.append("could not run / never converged")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("nodes in the NC cluster")
    ax.set_ylabel("convergence time (s)")
    ax.set_title("convergence (median error < 6 %, held)")
    ax.set_ylim(bottom=0, top=top * 1.1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return series


def fig3b(data: dict, out: Path) -> dict:
    """Left: error against cluster size at 50 ms, bar to p95, the paper's 3.5 ms bound; middle: how long
    each size took to converge (a size that could not run or never converged marked at the top);
    right: error relative to the RTT, 8 nodes, the paper's 6 % bound."""
    rows, paper = [r for r in data["accuracy"] if not r.get("failed")], data["paper"]
    fig, (ax_n, ax_conv, ax_rtt) = plt.subplots(1, 3, figsize=(15, 4))
    series = []
    by_n = sorted((r for r in rows if r["rtt_ms"] == 50), key=lambda r: r["nodes"])
    if by_n:
        ax_n.errorbar([r["nodes"] for r in by_n], [r["median_error_ms"] for r in by_n],
                      yerr=[[0] * len(by_n), [r["p95_error_ms"] - r["median_error_ms"] for r in by_n]],
                      marker="o", capsize=3, label="median per-pair error (bar: p95)")
        series.append("median per-pair error (bar: p95)")
        spans = [(r["nodes"], stats.from_dict(r.get("median_error_ms_ci"))) for r in by_n]
        spans = [(n, i) for n, i in spans if i is not None and i.has_interval]
        if spans:
            ax_n.vlines([n for n, _ in spans], [i.low for _, i in spans], [i.high for _, i in spans], color="black",
                        linewidth=4, alpha=0.5, label="95 % CI of the median")
            series.append("95 % CI of the median")
    ax_n.axhline(paper["median_error_ms"], color="red", linestyle="--",
                 label=f"paper's bound: {paper['median_error_ms']:g} ms")
    ax_n.set_xscale("log", base=2)
    ax_n.set_xlabel("nodes in the NC cluster")
    ax_n.set_ylabel("RTT estimation error (ms)")
    ax_n.set_title("actual RTT 50 ms")
    series += _convergence_panel(ax_conv, data["accuracy"])
    by_rtt = sorted((r for r in rows if r["nodes"] == 8), key=lambda r: r["rtt_ms"])
    if by_rtt:
        xs = [r["rtt_ms"] for r in by_rtt]
        ax_rtt.plot(xs, [100 * r["median_relative"] for r in by_rtt], marker="o", label="median error / actual RTT")
        series.append("median error / actual RTT")
        for r in by_rtt:
            ax_rtt.annotate(f"{r['median_error_ms']:.1f} ms", (r["rtt_ms"], 100 * r["median_relative"]),
                            textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax_rtt.axhline(100 * paper["median_relative"], color="red", linestyle="--",
                   label=f"paper's bound: {100 * paper['median_relative']:g} %")
    ax_rtt.set_xlabel("actual RTT (ms)")
    ax_rtt.set_ylabel("relative RTT estimation error (%)")
    ax_rtt.set_title("8 nodes")
    ax_rtt.set_ylim(bottom=0)
    ax_n.set_ylim(bottom=0)
    for ax in (ax_n, ax_rtt):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    title = "Fig. 3b: RTT estimation error of Serf's Vivaldi coordinates (star topology, after convergence)"
    fig.suptitle(title)
    return _drawn(fig, out, title, "nodes in the NC cluster; actual RTT (ms)",
                  "RTT estimation error (ms); convergence time (s); relative RTT estimation error (%)", series)


# ------------------------------------------------------------------------------------------ overload

def overload(data: dict, out: Path) -> dict:
    """p95 latency vs delivered output rate, one panel per path (through the emulated network,
    direct): a line per message size and repeat with its knee dotted, the other shapes in black,
    points disturbed by other processes hollow, Rth_out dashed, the paper's Rth_out on the direct panel."""
    how, rows, result = data["how"], data["rows"], data["analysis"]
    if "max_foreign_cores" not in how or any("path" not in knee for knee in result["knees"].values()):
        raise ValueError("this overload.json predates the facts its figure reads: "
                         "python -m testbed.bench.overload --reanalyse rewrites them")
    shape = (how["shape"]["topics"], how["shape"]["consumers_per_topic"])
    max_foreign, paper_rth_out = how["max_foreign_cores"], how["paper_rth_out"]
    paths = [p for p in ("emulated", "direct") if any(r["path"] == p for r in rows)]
    fig, axes = plt.subplots(1, len(paths), figsize=(6.2 * len(paths), 4.6), squeeze=False)
    xlabel, ylabel, series = "aggregate output rate delivered to consumers (msg/s)", "p95 end-to-end latency (ms)", []
    for ax, path in zip(axes[0], paths):
        disturbed = []
        mains = [knee for knee in result["knees"].values() if knee["path"] == path]  # a knee per main series
        for knee, marker in zip(mains, "os^vDx"):
            size, rep = knee["size"], knee["repeat"]
            points = sorted((r for r in rows if (r["path"], r["size"], r.get("repeat", 1)) == (path, size, rep)
                             and (r["topics"], r["consumers"]) == shape and r["p95_ms"]), key=lambda r: r["offered"])
            disturbed += [r for r in points if r.get("foreign_cpu", 0.0) > max_foreign]
            points = [r for r in points if r.get("foreign_cpu", 0.0) <= max_foreign]
            label = f"{size} B, {shape[0]} topics x {shape[1]} consumers, run {rep}"
            line = ax.plot([r["achieved"] for r in points], [r["p95_ms"] for r in points], marker=marker,
                           label=label)[0]
            series.append(f"{path}: {label}")
            if knee.get("knee"):
                ax.axvline(knee["knee"], color=line.get_color(), linestyle=":", linewidth=1)
        others = [r for r in rows if r["path"] == path and (r["topics"], r["consumers"]) != shape and r["p95_ms"]]
        for (topics, consumers), marker in zip(sorted({(r["topics"], r["consumers"]) for r in others}), "PX*"):
            pts = [r for r in others if (r["topics"], r["consumers"]) == (topics, consumers)]
            ax.scatter([r["achieved"] for r in pts], [r["p95_ms"] for r in pts], marker=marker, color="k", zorder=3,
                       label=f"{pts[0]['size']} B, {topics} topics x {consumers} consumers")
        if disturbed:
            ax.scatter([r["achieved"] for r in disturbed], [r["p95_ms"] for r in disturbed], marker="o",
                       facecolors="none", edgecolors="grey",
                       label=f"other processes > {max_foreign:g} cores (left out)")
        if path == "direct":
            ax.axvline(paper_rth_out, color="grey", linestyle="-.", linewidth=1,
                       label=f"paper's Rth_out for Pulsar (8-CPU VMs): {paper_rth_out / 1e6:g}M msg/s")
        rec = result["recommendation"].get(path, {})
        if rec.get("rth_out"):
            ax.axvline(rec["rth_out"], color="red", linestyle="--",
                       label=f"Rth_out = {rec['rth_out']:,.0f} msg/s (dotted: knees)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"nats-server, {how['paths'][path]}", fontsize=8)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    title = "nats-server output rate vs p95 end-to-end latency (the Rth_out knee, paper 5.4)"
    return _drawn(fig, out, title, xlabel, ylabel, series)


# ------------------------------------------------------------------------------------------ capacity

def capacity(data: dict, out: Path) -> dict:
    """`make bench-capacity` (testbed.systems.pubsub.bench.capacity): left, the harness's overhead over the
    configured path (p50 solid, p99 dashed) against offered deliveries/s per case and axis, saturated
    points crossed, the knee rule's limits and the paper's loads; right, CPU by process class per point."""
    rows = [r for r in data["rows"] if r.get("overhead_p50_ms") is not None]
    rule = data["how"]["knee_rule"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    series = []
    for (case, axis), color in zip(sorted({(r["case"], r["axis"]) for r in rows}), plt.cm.tab10.colors):
        points = sorted((r for r in rows if (r["case"], r["axis"]) == (case, axis)), key=lambda r: r["offered_per_s"])
        x = [r["offered_per_s"] for r in points]
        left.plot(x, [max(r["overhead_p50_ms"], 0.01) for r in points], "o-", color=color, label=f"{case}, {axis}: p50")
        left.plot(x, [max(r["overhead_p99_ms"], 0.01) for r in points], "s--", color=color, label=f"{case}, {axis}: p99")
        series += [f"{case}, {axis}: p50", f"{case}, {axis}: p99"]
        bad = [r for r in points if r["saturated"]]
        left.scatter([r["offered_per_s"] for r in bad], [max(r["overhead_p99_ms"], 0.01) for r in bad], marker="x",
                     s=80, color="red", zorder=3)
    for case, paper in data["paper"].items():
        left.axvline(paper, color="grey", linestyle=":", linewidth=1)
        left.text(paper, 0.98, f"paper {case}", transform=left.get_xaxis_transform(), rotation=90, va="top",
                  ha="right", fontsize=7, color="grey")
    for case, knee in data.get("knee", {}).items():
        if knee.get("deliveries_per_s"):
            left.axvline(knee["deliveries_per_s"], color="green", linewidth=1)
    left.axhline(rule["overhead_p50_ms"], color="black", linewidth=0.8)
    left.axhline(rule["overhead_p99_ms"], color="black", linestyle="--", linewidth=0.8)
    xlabel, ylabel = "offered deliveries/s", "E2E - configured path (ms)"
    title = "harness overhead (x: guard saturated; green: knees; lines: knee limits)"
    left.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
    left.grid(alpha=0.3, which="both")
    left.legend(fontsize=7)
    ordered = sorted(data["rows"], key=lambda r: (r["case"], r["offered_per_s"]))
    classes = sorted({k for r in ordered for k in r["cpu_by_class"]})
    bottom = np.zeros(len(ordered))
    for name in classes:
        values = np.array([r["cpu_by_class"].get(name, 0.0) for r in ordered])
        right.bar(range(len(ordered)), values, bottom=bottom, label=name)
        bottom += values
    right.axhline(data.get("cpus") or 0, color="red", linestyle="--", linewidth=1)
    right.set_xticks(range(len(ordered)), [f"{r['name'][4:]}\n{r['offered_per_s']:,.0f}/s" for r in ordered],
                     rotation=60, fontsize=6)
    right.set(ylabel="cores (mean over the workload)", title="CPU by process class (red: the machine's cores)")
    if classes:
        right.legend(fontsize=7)
    return _drawn(fig, out, title, xlabel, ylabel, series)


# ------------------------------------------------------------------------------------------ efficiency

def efficiency(data: dict, out: Path) -> dict:
    """`make bench-efficiency` (testbed.systems.pubsub.bench.efficiency): CPU-us per delivered message stacked by
    process class, one bar per run, the shapers side by side at each load; steal hatched on top (the
    hypervisor's, not a process's); the line is what the paper's load on two cores allows."""
    rows = sorted((r for r in data["rows"] if r.get("total_us_per_delivery") is not None),
                  key=lambda r: (r["case"], r["offered_per_s"], r["shaper"], r.get("repeat", 0)))
    classes = sorted({k for r in rows for k in r["cpu_us_per_delivery"]})
    fig, ax = plt.subplots(figsize=(max(7.0, 0.55 * len(rows) + 2), 4.8))
    bottom = np.zeros(len(rows))
    for name, color in zip(classes, plt.cm.tab10.colors):
        values = np.array([r["cpu_us_per_delivery"].get(name) or 0.0 for r in rows])
        ax.bar(range(len(rows)), values, bottom=bottom, label=name, color=color)
        bottom += values
    steal = np.array([r.get("steal_us_per_delivery") or 0.0 for r in rows])
    ax.bar(range(len(rows)), steal, bottom=bottom, label="steal (not process CPU)", color="white",
           edgecolor="grey", hatch="//")
    ax.axhline(data.get("target_us", 70.0), color="red", linestyle="--", linewidth=1,
               label=f"paper's UAV load on {data.get('cpus') or 2} cores")
    paper = data.get("paper", {})
    ax.set_xticks(range(len(rows)), [f"{r['case'].split('-')[0]} {r['offered_per_s'] / paper[r['case']]:.2f}x\n"
                                     f"{r['shaper']}" if paper.get(r["case"]) else r["shaper"] for r in rows],
                  rotation=60, fontsize=7)
    title = "CPU per delivered message by process class (x: share of the paper's load, shaper)"
    xlabel, ylabel = "run (load as a share of the paper's, shaper)", "CPU-us per delivered message"
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, ncol=2)
    return _drawn(fig, out, title, xlabel, ylabel, [*classes, "steal"])


# ------------------------------------------------------------------------------------- calibration

def calibration(data: dict, out: Path) -> dict:
    """`make bench-calibration` (testbed.bench.calibration): per city pair, left the emulated RTT's mean
    less the measured one against the measured RTT, with the max(0.5 ms, 3 %) band; right the emulated
    RTTs' standard deviation against the measured mdev, with y = x and the 30 % band; one colour per
    `cities.jitter` mode."""
    targets = data["targets"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6))
    top = 0.0
    for (mode, result), color in zip(data["modes"].items(), ("tab:grey", "tab:blue", "tab:orange")):
        rows = result["rows"]
        real_avg = np.array([r["measured"]["avg"] for r in rows])
        left.scatter(real_avg, [r["emulated"]["avg"] - r["measured"]["avg"] for r in rows], s=10, color=color,
                     label=f"jitter: {mode} ({result['verdict']['avg_within']:.0%} within)")
        real, emulated = [r["measured"]["mdev"] for r in rows], [r["emulated"]["mdev"] for r in rows]
        right.scatter(real, emulated, s=10, color=color,
                      label=f"jitter: {mode} ({result['verdict']['mdev_within']:.0%} within)")
        top = max(top, *real, *emulated)
    span = np.linspace(0, max((r["measured"]["avg"] for m in data["modes"].values() for r in m["rows"]), default=80), 100)
    bound = np.maximum(targets["avg_ms"], targets["avg_share"] * span)
    left.fill_between(span, -bound, bound, color="green", alpha=0.12,
                      label=f"target: max({targets['avg_ms']} ms, {targets['avg_share']:.0%})")
    left.axhline(0, color="black", linewidth=0.8)
    left.set(xlabel="measured RTT, avg (ms)", ylabel="emulated - measured avg RTT (ms)", title="mean RTT per city pair")
    diagonal = np.linspace(0, top * 1.05 or 1.0, 50)
    right.plot(diagonal, diagonal, color="black", linewidth=0.8, label="emulated = measured")
    right.fill_between(diagonal, diagonal * (1 - targets["mdev_share"]), diagonal * (1 + targets["mdev_share"]),
                       color="green", alpha=0.12, label=f"target: within {targets['mdev_share']:.0%}")
    right.set(xlabel="measured RTT mdev (ms, a typical 30-ping run)", ylabel="emulated RTT std dev (ms)",
              title="RTT spread per city pair")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    title = "Emulated inter-city paths against WonderProxy's pings (16 US cities)"
    fig.suptitle(title)
    return _drawn(fig, out, title, "measured RTT (ms)", "emulated RTT (ms)", list(data["modes"]))


# ------------------------------------------------------------------------------------------ by name

FIGURES = {"nc": lambda data, d, name: [fig3b(data, d / "fig3b.png")],
           "overload": lambda data, d, name: [overload(data, d / f"{name}.png")],
           "capacity": lambda data, d, name: [capacity(data, d / f"{name}.png")],
           "efficiency": lambda data, d, name: [efficiency(data, d / f"{name}.png")],
           "calibration": lambda data, d, name: [calibration(data, d / f"{name}.png")]}


def draw(name: str, data: dict | None = None, directory: Path = OUT) -> list[dict]:
    """Draw benchmark `name`'s figures into `directory`, from `data` or `directory`/<name>.json."""
    kind = name.split("-", 1)[0]  # capacity-quick, capacity-compiled, efficiency-quick: the same figure
    if kind not in FIGURES:
        raise ValueError(f"no figures for {name!r}; known: {', '.join(FIGURES)}")
    if data is None:
        data = json.loads((directory / f"{name}.json").read_text())
    return FIGURES[kind](data, Path(directory), name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.bench_figures", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"benchmarks (default: every one whose JSON exists): {', '.join(FIGURES)}")
    parser.add_argument("--dir", type=Path, default=OUT, help="where the JSON is and the PNGs go")
    args = parser.parse_args(argv)
    names = args.names or [n for n in (*FIGURES, "overload-quick", "capacity-quick", "efficiency-quick") if (args.dir / f"{n}.json").exists()]
    failed = 0
    for name in names:
        try:
            for item in draw(name, directory=args.dir):
                print(f"wrote {item['path']}: {item['title']}")
        except (OSError, ValueError, KeyError) as error:
            failed += 1
            print(f"{name}: {error}", file=sys.stderr)
    return 1 if failed or not names else 0


if __name__ == "__main__":
    sys.exit(main())
