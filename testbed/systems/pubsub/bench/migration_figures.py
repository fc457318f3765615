"""ePulsar's Fig. 7a and 7b (paper 5.7) from results/bench/migration.json (`make bench-migration`):
the medians with their 95 % intervals per configuration, Fig. 7a with both downtime definitions (to
reconnected, the paper's; to traffic through the new broker, ours). Drawn here so they can be
redrawn (`--figures-only`) without measuring again."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis import figures, stats  # noqa: E402


DOWNTIME_DEFINITIONS = (  # (row key, legend, marker, line style): Fig. 7a draws both (paper 5.7 and ours)
    ("reconnect", "until reconnected (paper)", "s", "--"),
    ("downtime", "until traffic through the new broker (ours)", "o", "-"),
)
WORKFLOW_COLORS = {"baseline": "tab:red", "enhanced": "tab:green"}


def _errorbar(ax, xs: list, intervals: list, **style) -> None:
    """Medians with their 95 % intervals (analysis.stats, stored by the benchmark) as error bars, in ms."""
    values = [1e3 * i.value for i in intervals]
    low = [1e3 * (i.value - i.low) if i.has_interval else 0.0 for i in intervals]
    high = [1e3 * (i.high - i.value) if i.has_interval else 0.0 for i in intervals]
    ax.errorbar(xs, values, yerr=[low, high], capsize=4, linewidth=1.5, **style)


def _labelled(fig, ax, out: Path, title: str, xlabel: str, ylabel: str, series: list) -> dict:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return figures.save(fig, out, title, xlabel, ylabel, series)


def _saturation_note(rows: list[dict]) -> str:
    bad = [r for r in rows if not (r.get("harness") or {}).get("valid", True)]
    return f"; harness saturated in {len(bad)} of {len(rows)} configurations" if bad else ""


def draw(data: dict, directory: Path) -> list[dict]:
    """Fig. 7a (the 7a configurations: 128 topics at once, 16 executors, over the WAN latency) with
    both downtime definitions, and Fig. 7b (the 7b ones at 40 ms, timed from the round's decision so
    the executors' effect shows): medians with their 95 % intervals, as migration.json stores them."""
    rows = [r for r in data.get("rows") or [] if r.get("downtime") or r.get("completion")]
    if not rows:
        raise ValueError("this migration.json has no per-configuration intervals (written before they were "
                         "recorded): run `make bench-migration` again")
    directory = Path(directory)
    return [fig7a(rows, directory / "fig7a.png"), fig7b(rows, directory / "fig7b.png")]


def fig7a(rows: list[dict], out: Path) -> dict:
    rows = [r for r in rows if r["figure"] == "7a"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    series = []
    for workflow in ("baseline", "enhanced"):
        mine = sorted((r for r in rows if r["workflow"] == workflow), key=lambda r: r["wan_ms"])
        for key, definition, marker, line in DOWNTIME_DEFINITIONS:
            points = [(r["wan_ms"], stats.from_dict(r[key])) for r in mine if r.get(key)]
            if not points:
                continue
            label = f"{figures.WORKFLOW_NAMES[workflow]}, {definition}"
            _errorbar(ax, [x for x, _ in points], [i for _, i in points], marker=marker, linestyle=line,
                      color=WORKFLOW_COLORS[workflow], label=label)
            series.append(label)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    setup = ", ".join(sorted({f"{r['topics']} topics at once" for r in rows}) +
                      sorted({f"{r['executors']} executors" for r in rows if r["workflow"] == "enhanced"}))
    title = f"Fig. 7a: Client downtime vs one-way WAN latency\n({setup}{_saturation_note(rows)})"
    return _labelled(fig, ax, out, title, "one-way WAN latency, broker to topic manager (ms)",
                     "client downtime, median and 95 % CI (ms)", series)


def fig7b(rows: list[dict], out: Path) -> dict:
    rows = [r for r in rows if r["figure"] == "7b" and r.get("completion")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = []
    wans = sorted({r["wan_ms"] for r in rows})
    for workflow, executors in sorted({(r["workflow"], r["executors"]) for r in rows},
                                      key=lambda k: (k[0] != "baseline", k[1])):
        points = sorted((r["topics"], stats.from_dict(r["completion"])) for r in rows
                        if (r["workflow"], r["executors"]) == (workflow, executors))
        label = figures.WORKFLOW_NAMES[workflow] + (f", {executors} executor{'s' if executors != 1 else ''}"
                                                    if workflow == "enhanced" else "")
        _errorbar(ax, [n for n, _ in points], [i for _, i in points], marker="o", label=label)
        series.append(label)
    counts = sorted({r["topics"] for r in rows})
    if counts and counts[-1] >= 8 * counts[0]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(n) for n in counts])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    title = (f"Fig. 7b: Median per-topic migration time\n(one-way WAN latency {'/'.join(f'{w:g}' for w in wans)} ms"
             f"{_saturation_note(rows)})")
    return _labelled(fig, ax, out, title, "topics migrated at once", "per-topic migration time from the decision,\n"
                     "incl. waiting for an executor: median and 95 % CI (ms)", series)
