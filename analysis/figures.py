"""matplotlib renderers for the paper's Fig. 7a, 7b, 8 and 9, from the reduced tables.

Each renderer takes a small table (a pyarrow Table, a list of dicts, a dict of columns, or a Spark
DataFrame, which is collected) and a PNG path, and returns what it drew: path, title, axis labels and
the series' labels. Latencies are in seconds in the tables and drawn in milliseconds.

- fig7a: client downtime vs one-way WAN latency, enhanced (ePulsar) vs baseline (Pulsar): median over
  migrations with the interquartile range (rows of `jobs.migration_downtime`, any number of runs).
- fig7b: median per-topic migration time vs topics migrated at once, one line per workflow and
  executor count (same rows; `time_column="completion_s"` for bench-migration's time from the
  round's decision, which adds the wait for an executor).
- fig8: E2E latency over time, one line per swarm's representative topic, the threshold, relinks
  marked (rows of `jobs.e2e_over_time` and `jobs.relinks`).
- fig9: AoI latency over time for one client, one line per avatar, the threshold (rows of
  `jobs.aoi_latency`); a line has gaps where the avatar was not in the client's AoI.
- fig8_policies / fig9_policies: the same, one row per broker selection policy (`testbed paper`).
- policy_over_time: one line per policy (rows of `compare.policy_latency_over_time`), the threshold.
- policy_violations: violation ratio and p50/p95 latency per policy (rows of `compare.policy_violations`).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis import stats  # noqa: E402
from testbed.policies import POLICIES  # noqa: E402

STAT_NAMES = {"p50_s": "median", "p95_s": "p95", "max_s": "max"}
PAPER_WAN_S = 0.040  # Fig. 7b's one-way WAN latency between the brokers and the Load Manager
WORKFLOW_NAMES = {"enhanced": "ePulsar (enhanced)", "baseline": "Pulsar (baseline)"}
MIGRATION_TIMES = {"migration_time_s": "median per-topic migration time (ms)",
                   "completion_s": "median per-topic migration time (ms),\nfrom the decision, incl. waiting for an executor"}


def columns(data) -> dict[str, np.ndarray]:
    """Any small table -> {column: numpy array} (object arrays for strings)."""
    if data is None:
        return {}
    if hasattr(data, "to_pydict"):
        raw = data.to_pydict()
    elif hasattr(data, "collect") and hasattr(data, "columns"):
        names = list(data.columns)
        rows = [row.asDict() for row in data.collect()]
        raw = {n: [r[n] for r in rows] for n in names}
    elif isinstance(data, dict):
        raw = data
    else:
        rows = list(data)
        names = list(rows[0].keys()) if rows else []
        raw = {n: [r.get(n) for r in rows] for n in names}
    out = {}
    for name, values in raw.items():
        values = list(values)
        present = [v for v in values if v is not None]
        if all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in present):
            out[name] = np.array([np.nan if v is None else v for v in values], dtype=float)
        else:
            out[name] = np.array(values, dtype=object)
    return out


def _missing(value) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and np.isnan(value))


def _rows(table: dict[str, np.ndarray]) -> int:
    return len(next(iter(table.values()))) if table else 0


def _gapped(x: np.ndarray, y: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Sort by x and put a NaN where consecutive points are more than 1.5 steps apart (line breaks)."""
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if len(x) < 2:
        return x, y
    breaks = np.where(np.diff(x) > 1.5 * step)[0] + 1
    return np.insert(x, breaks, np.nan), np.insert(y, breaks, np.nan)


def _step(t: np.ndarray) -> float:
    diffs = np.diff(np.unique(t[~np.isnan(t)]))
    return float(diffs.min()) if len(diffs) else 1.0


def _decorate(ax, title: str, xlabel: str, ylabel: str, legend_title: str | None = None) -> None:
    """Title, axis labels, grid, and the legend right of the axes (only what was drawn has a label)."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    handles, names = ax.get_legend_handles_labels()
    if handles:
        many = len(handles) > 12
        ax.legend(fontsize="x-small" if many else "small", ncol=2 if many else 1, title=legend_title,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _finish(fig, ax, out: str | os.PathLike, title: str, xlabel: str, ylabel: str, labels: list[str],
            legend_title: str | None = None) -> dict:
    _decorate(ax, title, xlabel, ylabel, legend_title)
    return _saved(fig, out, labels)


def _saved(fig, out: str | os.PathLike, labels: list[str]) -> dict:
    """Save a one-axes figure; what it shows is read back from the axes (one home: the figure)."""
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
    return {**save(fig, out, ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), labels), "legend": names}


def save(fig, out: str | os.PathLike, title: str, xlabel: str, ylabel: str, series: list) -> dict:
    """Write a finished figure (PNG, 120 dpi) and return what it shows, for the paper's index and tests."""
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return {"path": str(path), "title": title, "xlabel": xlabel, "ylabel": ylabel, "series": series}


def _shade_saturated(ax, saturated) -> None:
    """Grey bands where the run's harness was saturated (testbed.health): latencies there are the
    harness's, not the system's."""
    for i, interval in enumerate(saturated or []):
        ax.axvspan(interval["from_s"], interval["to_s"], color="grey", alpha=0.25, linewidth=0,
                   label="harness saturated (not evidence)" if i == 0 else None)


FAULT_WORDS = {"kill": "killed", "pause": "paused", "relay": "delay line killed", "cut": "cut off"}


def _mark_faults(ax, faults) -> None:
    """The scenario's faults (run.json `faults`, testbed.faults): a red band while a part was down
    (a cut site, a paused broker, ZooKeeper until its restart), a red line where one was killed for
    good or a delay line died, each named."""
    for i, fault in enumerate(faults or []):
        words = f"{fault['target']} {FAULT_WORDS.get(fault['kind'], fault['kind'])}"
        if fault.get("to_s") is not None:
            ax.axvspan(fault["from_s"], fault["to_s"], facecolor="none", edgecolor="red", hatch="//",
                       linewidth=0.0, alpha=0.6, label=f"fault: {words}")
        else:
            ax.axvline(fault["from_s"], color="red", linewidth=1.5, alpha=0.8, label=f"fault: {words}")


def _threshold_line(ax, threshold_s: float | None) -> None:
    if threshold_s:
        ax.axhline(threshold_s * 1000, color="red", linestyle="--", linewidth=1.2,
                   label=f"threshold {threshold_s * 1000:g} ms")


# ------------------------------------------------------------------------------------------ Fig. 8

def representative_topics(topics, topic_class: str | None = None) -> dict[str, str]:
    """{instance (e.g. swarm3): its representative topic}: the one of `topic_class`, else the first class."""
    by_instance: dict[str, list[str]] = defaultdict(list)
    for topic in sorted(set(topics)):
        cls, _, instance = topic.partition("-")
        by_instance[instance or topic].append(topic)
    chosen = {}
    for instance, names in by_instance.items():
        preferred = [t for t in names if t.partition("-")[0] == topic_class]
        chosen[instance] = (preferred or names)[0]
    return dict(sorted(chosen.items(), key=lambda kv: _natural(kv[0])))


def _natural(text: str):
    import re

    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _instance(topic: str) -> str:
    """A topic's swarm (or other instance): `follow_leader-swarm3` -> `swarm3`, as `representative_topics` groups."""
    cls, _, instance = str(topic).partition("-")
    return instance or cls


def _draw_e2e(ax, e2e, relinks, threshold_s: float | None, stat: str, topic_class: str | None,
              saturated=None, faults=None, migrations=None) -> tuple[list, float]:
    """Fig. 8's content on one axis: a line per swarm's representative topic, the threshold, each
    swarm's relinks (dotted lines) and its topics' migrations (triangles along the top) in the swarm's
    colour, saturated intervals shaded, the faults marked."""
    _shade_saturated(ax, saturated)
    _mark_faults(ax, faults)
    table = columns(e2e)
    labels = []
    colors = {}
    bucket = _step(table["t_s"]) if _rows(table) else 1.0
    if _rows(table):
        chosen = representative_topics(table["topic"], topic_class)
        cmap = plt.get_cmap("tab10" if len(chosen) <= 10 else "tab20")
        for i, (instance, topic) in enumerate(chosen.items()):
            mask = table["topic"] == topic
            x, y = _gapped(table["t_s"][mask], table[stat][mask] * 1000, bucket)
            (line,) = ax.plot(x, y, linewidth=1.2, color=cmap(i % cmap.N), label=topic)
            colors[instance] = line.get_color()
            labels.append(topic)
    _threshold_line(ax, threshold_s)
    _mark_relinks(ax, relinks, colors)
    ax.set_ylim(bottom=0)
    _mark_migrations(ax, migrations, colors)
    return labels, bucket


def _mark_relinks(ax, relinks, colors: dict) -> None:
    """A dotted line per relink (zone change) in its swarm's colour, one legend entry per swarm."""
    moves = columns(relinks)
    labelled = set()
    for node, t in zip(moves.get("node", []), moves.get("t_s", [])):
        ax.axvline(t, color=colors.get(node, "grey"), linestyle=":", linewidth=1.0, alpha=0.9,
                   label=f"{node}: relink (zone change)" if node not in labelled else None)
        labelled.add(node)


def _mark_migrations(ax, migrations, colors: dict) -> None:
    """A triangle along the top per topic migration (rows of `jobs.migration_marks`: topic, t_s, ok)
    in its swarm's colour, a cross where one failed; one legend entry per swarm and outcome."""
    table = columns(migrations)
    points: dict[tuple, list[float]] = defaultdict(list)
    for i in range(_rows(table)):
        ok = table["ok"][i] if "ok" in table else None
        failed = not _missing(ok) and not ok  # an end without `ok` is not said to have failed
        points[(_instance(table["topic"][i]), not failed)].append(float(table["t_s"][i]))
    if points:  # head room: the triangles ride above the lines
        ax.set_ylim(top=ax.get_ylim()[1] * 1.1)
    for (instance, ok), times in sorted(points.items(), key=lambda kv: (_natural(kv[0][0]), not kv[0][1])):
        ax.plot(times, [0.97] * len(times), transform=ax.get_xaxis_transform(), linestyle="none",
                marker="v" if ok else "x", markersize=7, color=colors.get(instance, "grey"), clip_on=False,
                label=f"{instance}: topic migration" + ("" if ok else " FAILED"))


def fig8_figure(e2e, relinks=None, threshold_s: float | None = 0.040, stat: str = "p95_s",
                topic_class: str | None = None, note: str = "", saturated=None, faults=None, migrations=None):
    """Fig. 8 as a matplotlib Figure (for `fig8` to save, for tests to read): (figure, series)."""
    fig, ax = plt.subplots(figsize=(10, 5))
    labels, bucket = _draw_e2e(ax, e2e, relinks, threshold_s, stat, topic_class, saturated, faults, migrations)
    title = "Fig. 8: E2E latency of each swarm's representative topic" + (f"\n({note})" if note else "")
    ylabel = f"E2E latency, {STAT_NAMES.get(stat, stat)} per {bucket:g} s (ms)"
    _decorate(ax, title, "time since run start (s)", ylabel)
    return fig, labels


def fig8(e2e, out, **kwargs) -> dict:
    """Fig. 8: E2E latency over time, one line per swarm's representative topic; threshold; relinks
    and migrations in each swarm's colour; the harness's saturated intervals shaded; the scenario's
    faults marked. Keywords as `fig8_figure`."""
    fig, labels = fig8_figure(e2e, **kwargs)
    return _saved(fig, out, labels)


# ------------------------------------------------------------------------------------------ Fig. 9

def _draw_aoi(ax, aoi, threshold_s: float | None, stat: str, saturated=None, marks=None,
              faults=None) -> tuple[list, float, str | None]:
    """Fig. 9's content on one axis: a line per avatar in the consumer's AoI, the threshold, saturated
    intervals shaded; with `marks` (`jobs.aoi_marks`), the consumer's group changes and the
    migrations of the topics it received as vertical lines; the faults marked."""
    _shade_saturated(ax, saturated)
    _mark_faults(ax, faults)
    table = columns(aoi)
    labels = []
    consumer = None
    bucket = _step(table["t_s"]) if _rows(table) else 1.0
    if _rows(table):
        consumer = str(table["consumer"][0])
        producers = sorted(set(table["producer"]), key=_natural)
        cmap = plt.get_cmap("tab20")
        for i, producer in enumerate(producers):
            mask = table["producer"] == producer
            x, y = _gapped(table["t_s"][mask], table[stat][mask] * 1000, bucket)
            ax.plot(x, y, linewidth=1.0, color=cmap(i % cmap.N), label=str(producer))
            labels.append(str(producer))
    marked = columns(marks) if marks is not None else {}
    for kind, style in (("group_change", {"color": "black", "linestyle": "-", "label": "group change"}),
                        ("migration", {"color": "grey", "linestyle": ":", "label": "migration"})):
        times = [t for k, t in zip(marked.get("kind", []), marked.get("t_s", [])) if k == kind]
        for i, t in enumerate(times):
            ax.axvline(t, linewidth=1.0, alpha=0.7, **{**style, "label": style["label"] if i == 0 else None})
    _threshold_line(ax, threshold_s)
    ax.set_ylim(bottom=0)
    return labels, bucket, consumer


def fig9(aoi, out, threshold_s: float | None = 0.100, stat: str = "p95_s", consumer: str | None = None,
         note: str = "", saturated=None, marks=None, faults=None) -> dict:
    """Fig. 9: AoI latency over time for one player (paper 5.8.2: one representative avatar), one line
    per avatar in its AoI; threshold; its group changes and its topics' migrations (`marks`); the
    harness's saturated intervals shaded."""
    fig, ax = plt.subplots(figsize=(10, 5))
    labels, bucket, seen_by = _draw_aoi(ax, aoi, threshold_s, stat, saturated, marks, faults)
    consumer = consumer or seen_by
    who = f" seen by {consumer}" if consumer else ""
    title = f"Fig. 9: E2E area-of-interest latency{who}" + (f"\n({note})" if note else "")
    ylabel = f"E2E AoI latency, {STAT_NAMES.get(stat, stat)} per {bucket:g} s (ms)"
    return _finish(fig, ax, out, title, "time since run start (s)", ylabel, labels, legend_title="player")


# ------------------------------------------------------------------------------------------ Fig. 7

def _quartiles(values: list[float]) -> tuple[float, float, float]:
    data = np.array(values, dtype=float)
    return tuple(float(v) for v in np.percentile(data, [25, 50, 75]))


def _pick(table: dict[str, np.ndarray], column: str, rule) -> float | None:
    values = [float(v) for v in table.get(column, []) if not _missing(v)]
    return rule(values) if values else None


def _executors_label(workflow: str, executors: int | None, counts: set) -> str:
    label = WORKFLOW_NAMES.get(workflow, workflow)
    if executors and (workflow != "baseline" or len(counts) > 1):
        label += f", {executors} executor{'s' if executors != 1 else ''}"
    return label


def fig7a(migrations, out, n_topics: int | None = None, executors: int | None = None, note: str = "") -> dict:
    """Fig. 7a: client downtime vs one-way WAN latency (broker - topic manager), per workflow.

    Only migrations of `n_topics` topics at once (default: the most there are, 128 in the paper) and,
    for the enhanced workflow, `executors` executors (default: the most there are, 16 in the paper).
    """
    table = columns(migrations)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = []
    n_topics = n_topics if n_topics is not None else _pick(table, "n_topics", max)
    if executors is None:
        enhanced = [float(table["executors"][i]) for i in range(_rows(table))
                    if table["workflow"][i] == "enhanced" and not _missing(table["executors"][i])]
        executors = max(enhanced) if enhanced else None
    groups: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i in range(_rows(table)):
        wan, down, workflow = table["wan_one_way_s"][i], table["downtime_s"][i], table["workflow"][i]
        if _missing(workflow) or _missing(wan) or _missing(down):
            continue
        if n_topics is not None and table["n_topics"][i] != n_topics:
            continue
        if workflow == "enhanced" and executors is not None and table["executors"][i] != executors:
            continue
        groups[str(workflow)][round(float(wan) * 1000, 3)].append(float(down) * 1000)
    for workflow in sorted(groups, key=lambda w: (w != "baseline", w)):
        xs = sorted(groups[workflow])
        stats = [_quartiles(groups[workflow][x]) for x in xs]
        med = np.array([s[1] for s in stats])
        err = np.array([[s[1] - s[0] for s in stats], [s[2] - s[1] for s in stats]])
        label = WORKFLOW_NAMES.get(workflow, workflow)
        ax.errorbar(xs, med, yerr=err, marker="o", capsize=4, linewidth=1.5, label=label)
        labels.append(label)
    ax.set_ylim(bottom=0)
    setup = []
    if n_topics is not None:
        setup.append(f"{int(n_topics)} topics at once")
    if executors is not None:
        setup.append(f"{int(executors)} executors")
    if note:
        setup.append(note)
    title = "Fig. 7a: Client downtime vs one-way WAN latency" + (f"\n({', '.join(setup)})" if setup else "")
    return _finish(fig, ax, out, title, "one-way WAN latency, broker to topic manager (ms)",
                   "client downtime, median and IQR (ms)", labels)


def fig7b(migrations, out, wan_one_way_s: float | None = None, note: str = "",
          time_column: str = "migration_time_s") -> dict:
    """Fig. 7b: median per-topic migration time vs topics migrated at once, per workflow and executors.

    Only migrations at one WAN latency: `wan_one_way_s`, default 40 ms (the paper's) if present, else the
    most frequent. `time_column`: one of MIGRATION_TIMES (release sent -> release done, or from the
    round's decision). Topic counts spanning 8x or more are drawn on a log2 axis.
    """
    table = columns(migrations)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = []
    if wan_one_way_s is None:
        wan_one_way_s = _pick(table, "wan_one_way_s",
                              lambda v: PAPER_WAN_S if any(np.isclose(v, PAPER_WAN_S)) else max(set(v), key=v.count))
    groups: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i in range(_rows(table)):
        n, t, workflow = table["n_topics"][i], table[time_column][i], table["workflow"][i]
        if _missing(workflow) or _missing(n) or _missing(t):
            continue
        if wan_one_way_s is not None and not np.isclose(table["wan_one_way_s"][i], wan_one_way_s):
            continue
        executors = table["executors"][i]
        executors = None if _missing(executors) else int(executors)
        groups[(str(workflow), executors)][int(n)].append(float(t) * 1000)
    counts = defaultdict(set)
    for workflow, executors in groups:
        counts[workflow].add(executors)
    for workflow, executors in sorted(groups, key=lambda k: (k[0] != "baseline", k[0], k[1] or 0)):
        series = groups[(workflow, executors)]
        xs = sorted(series)
        label = _executors_label(workflow, executors, counts[workflow])
        ax.plot(xs, [float(np.median(series[x])) for x in xs], marker="o", linewidth=1.5, label=label)
        labels.append(label)
    counts = sorted({n for series in groups.values() for n in series})
    if counts and counts[-1] >= 8 * counts[0]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(n) for n in counts])
    ax.set_ylim(bottom=0)
    setup = [f"one-way WAN latency {wan_one_way_s * 1000:g} ms"] if wan_one_way_s is not None else []
    if note:
        setup.append(note)
    title = "Fig. 7b: Median per-topic migration time" + (f"\n({', '.join(setup)})" if setup else "")
    return _finish(fig, ax, out, title, "topics migrated at once", MIGRATION_TIMES[time_column], labels)


# ------------------------------------------------------------------------------------------ policies side by side

POLICY_NAMES = {name: policy.label for name, policy in POLICIES.items()}  # the registry's labels and order
POLICY_ORDER = tuple(POLICIES)
# Every registered policy has its own colour: a None would take matplotlib's next, which can repeat one of these.
POLICY_COLORS = {"epulsar": "tab:green", "allpairs": "tab:blue", "pulsar-hash": "tab:red", "pulsar-lm": "tab:purple"}
POLICY_MARKERS = {"epulsar": "^", "allpairs": "o", "pulsar-hash": "s", "pulsar-lm": "D"}


def policy_name(policy) -> str:
    return POLICY_NAMES.get(policy, str(policy))


def policy_key(policy) -> tuple:
    return (POLICY_ORDER.index(policy) if policy in POLICY_ORDER else len(POLICY_ORDER), str(policy))


def _save(fig, out) -> str:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _panels(panels: list[dict], out, title: str, ylabel_for, draw, legend_title: str | None = None) -> dict:
    """One row per policy, shared axes; a panel without data says why instead of staying blank."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.9 * len(panels) + 0.8), sharex=True, sharey=True,
                             squeeze=False)
    series, ylabel = {}, ""
    for ax, panel in zip(axes[:, 0], panels):
        name = policy_name(panel["policy"])
        if panel.get("missing"):
            ax.text(0.5, 0.5, f"{name}: missing ({panel['missing']})", ha="center", va="center",
                    transform=ax.transAxes, color="darkred")
            _threshold_line(ax, panel.get("threshold_s"))
            labels, bucket = [], 1.0
        else:
            labels, bucket = draw(ax, panel)
        ylabel = ylabel_for(bucket)
        series[name] = labels
        ax.set_title(name + (f" ({panel['note']})" if panel.get("note") else ""), fontsize=10, loc="left")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(True, alpha=0.3)
        handles, names = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize="x-small", ncol=1 if len(handles) <= 12 else 2, title=legend_title,
                      title_fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    xlabel = "time since run start (s)"
    axes[-1, 0].set_xlabel(xlabel)
    fig.suptitle(title)
    fig.tight_layout()
    return {"path": _save(fig, out), "title": title, "xlabel": xlabel, "ylabel": ylabel, "series": series}


def fig8_policies(panels: list[dict], out, stat: str = "p95_s", topic_class: str | None = None,
                  variant: str = "") -> dict:
    """Fig. 8 once per policy (one row each): panels are {policy, e2e, relinks, migrations, threshold_s, note,
    missing}; `variant` names a sibling of the paper's figure in its title ("Fig. 8 (measured jitter)")."""
    def draw(ax, panel):
        return _draw_e2e(ax, panel.get("e2e"), panel.get("relinks"), panel.get("threshold_s"), stat, topic_class,
                         panel.get("saturated"), panel.get("faults"), panel.get("migrations"))

    title = f"Fig. 8{variant_title(variant)}: E2E latency of each swarm's representative topic, per broker selection policy"
    return _panels(sorted(panels, key=lambda p: policy_key(p["policy"])), out, title,
                   lambda bucket: f"E2E latency, {STAT_NAMES.get(stat, stat)}\nper {bucket:g} s (ms)", draw)


def variant_title(variant: str) -> str:
    """What a sibling of the paper's figure adds to its number: " (measured jitter)"."""
    return f" ({variant})" if variant else ""


def fig9_policies(panels: list[dict], out, stat: str = "p95_s", variant: str = "") -> dict:
    """Fig. 9 once per policy (one row each): panels are {policy, aoi, marks, threshold_s, note, missing};
    `variant` as in fig8_policies."""
    def draw(ax, panel):
        labels, bucket, _consumer = _draw_aoi(ax, panel.get("aoi"), panel.get("threshold_s"), stat,
                                              panel.get("saturated"), panel.get("marks"), panel.get("faults"))
        return labels, bucket

    title = f"Fig. 9{variant_title(variant)}: E2E area-of-interest latency of one player, per broker selection policy"
    return _panels(sorted(panels, key=lambda p: policy_key(p["policy"])), out, title,
                   lambda bucket: f"E2E AoI latency, {STAT_NAMES.get(stat, stat)}\nper {bucket:g} s (ms)", draw,
                   legend_title="player")


def policy_over_time(rows, out, title: str, stat: str = "p95_s", topic_class: str | None = None) -> dict:
    """One line per policy over time (rows of `compare.policy_latency_over_time` for one scenario), threshold."""
    table = columns(rows)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    labels = []
    bucket = _step(table["t_s"]) if _rows(table) else 1.0
    threshold = None
    if _rows(table):
        classes = sorted(set(table["topic_class"]))
        topic_class = topic_class if topic_class in classes else classes[0]
        for policy in sorted(set(table["policy"]), key=policy_key):
            mask = (table["policy"] == policy) & (table["topic_class"] == topic_class)
            x, y = _gapped(table["t_s"][mask], table[stat][mask] * 1000, bucket)
            ax.plot(x, y, linewidth=1.3, color=POLICY_COLORS.get(policy), label=policy_name(policy))
            labels.append(policy_name(policy))
            threshold = threshold or float(table["threshold_s"][mask][0])
    _threshold_line(ax, threshold)
    ax.set_ylim(bottom=0)
    ylabel = f"E2E latency, {STAT_NAMES.get(stat, stat)} over all {topic_class or ''} topics per {bucket:g} s (ms)"
    return _finish(fig, ax, out, title, "time since run start (s)", ylabel, labels, legend_title="policy")


def _interval_bar(ax, x: float, table: dict, column: str, i: int, scale: float) -> None:
    """The 95 % interval over a policy's runs (`compare_runs.with_intervals`) as a black error bar."""
    if column not in table:
        return
    value = table[column][i]
    interval = stats.from_dict(value) if isinstance(value, dict) else None
    if interval is not None and interval.has_interval:
        ax.errorbar([x], [interval.value * scale], yerr=[[(interval.value - interval.low) * scale],
                                                         [(interval.high - interval.value) * scale]],
                    color="black", capsize=3, linewidth=1)


def policy_violations(rows, out, scenario_titles: dict[str, str] | None = None) -> dict:
    """Per scenario (columns): violation ratio (top) and p50/p95 latency with the threshold (bottom), per policy.

    Rows of `compare.policy_violations`; bars are grouped by topic class, one bar per policy; a black
    error bar is the 95 % interval of the mean over the policy's runs (repeats with their own seeds).
    """
    table = columns(rows)
    present = set(table["scenario"]) if _rows(table) else set()
    titled = [s for s in (scenario_titles or {}) if s in present]  # the titles' order first (Fig. 8, then 9)
    scenarios = titled + sorted(present - set(titled))
    fig, axes = plt.subplots(2, max(1, len(scenarios)), figsize=(5.5 * max(1, len(scenarios)) + 1, 7.5),
                             squeeze=False)
    policies = sorted(set(table["policy"]), key=policy_key) if _rows(table) else []
    width = 0.8 / max(1, len(policies))
    for col, scenario in enumerate(scenarios):
        top, bottom = axes[0, col], axes[1, col]
        in_scenario = table["scenario"] == scenario
        classes = sorted(set(table["topic_class"][in_scenario]))
        for j, policy in enumerate(policies):
            for k, cls in enumerate(classes):
                mask = in_scenario & (table["policy"] == policy) & (table["topic_class"] == cls)
                if not mask.any():
                    continue
                i = int(np.flatnonzero(mask)[0])
                x = k - 0.4 + width * (j + 0.5)
                label = policy_name(policy) if k == 0 else None
                ratio = float(table["violation_ratio"][i]) * 100
                top.bar(x, ratio, width, color=POLICY_COLORS.get(policy), label=label)
                _interval_bar(top, x, table, "violation_ratio_ci", i, 100)
                top.annotate(f"{ratio:.1f}%", (x, ratio), ha="center", va="bottom", fontsize=7)
                bottom.bar(x, float(table["p95_s"][i]) * 1000, width, color=POLICY_COLORS.get(policy), label=label)
                _interval_bar(bottom, x, table, "p95_s_ci", i, 1000)
                bottom.plot([x], [float(table["p50_s"][i]) * 1000], marker="_", markersize=14, color="black",
                            label="p50" if (j == 0 and k == 0) else None)
        for k, cls in enumerate(classes):
            thresholds = table["threshold_s"][in_scenario & (table["topic_class"] == cls)]
            if len(thresholds) and not _missing(thresholds[0]):
                bottom.hlines(float(thresholds[0]) * 1000, k - 0.45, k + 0.45, colors="red", linestyles="--",
                              label=f"threshold {float(thresholds[0]) * 1000:g} ms" if k == 0 else None)
        name = (scenario_titles or {}).get(scenario, scenario)
        for ax in (top, bottom):
            ax.set_xticks(range(len(classes)), classes)
            ax.set_xlabel("topic class")
            ax.grid(True, axis="y", alpha=0.3)
        top.set_title(f"{name}: messages above the threshold", fontsize=10)
        top.set_ylabel("violation ratio (% of messages)")
        top.set_ylim(bottom=0, top=max(5.0, top.get_ylim()[1]))
        bottom.set_title(f"{name}: E2E latency, p95 bar, p50 tick", fontsize=10)
        bottom.set_ylabel("E2E latency (ms)")
        for ax in (top, bottom):  # head room so the legend does not cover the bars
            ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.35)
            ax.legend(fontsize="x-small", loc="upper right", ncol=2)
    if not scenarios:
        axes[0, 0].text(0.5, 0.5, "no runs", ha="center", va="center", transform=axes[0, 0].transAxes)
    title = "Violation ratio per broker selection policy (the Fig. 8 and Fig. 9 runs)"
    fig.suptitle(title)
    fig.tight_layout()
    return {"path": _save(fig, out), "title": title, "xlabel": "topic class",
            "ylabel": "violation ratio (% of messages); E2E latency (ms)",
            "series": [policy_name(p) for p in policies]}


__all__ = ["columns", "representative_topics", "fig7a", "fig7b", "fig8", "fig8_figure", "fig9", "fig8_policies",
           "fig9_policies", "policy_over_time", "policy_violations", "policy_name", "policy_key"]
