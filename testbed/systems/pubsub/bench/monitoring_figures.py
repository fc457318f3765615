"""ePulsar's Fig. 6 (paper 5.6) from results/bench/monitoring.json (`make bench-monitoring`): one
broker's monitoring traffic to ZooKeeper against the topics it hosts, ePulsar's aggregates against
AllPairs' every client. Drawn here so it can be redrawn (`--figures-only`) without measuring again."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis import figures, stats  # noqa: E402


def fig6(data: dict, out: Path) -> dict:
    """Monitoring traffic to ZooKeeper (wire bytes/s minus the idle agent's) vs topics hosted, one
    line per policy and clients per topic."""
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    styles = {"epulsar": ("-", "o", "ePulsar (aggregates)"), "allpairs": ("--", "s", "AllPairs (every client)")}
    series = []
    for policy in ("epulsar", "allpairs"):
        counts = sorted({r["clients_per_topic"] for r in rows if r["policy"] == policy})
        for k, per_topic in enumerate(counts):
            points = sorted((r for r in rows if r["policy"] == policy and r["clients_per_topic"] == per_topic),
                            key=lambda r: r["topics"])
            line, marker, label = styles[policy]
            # hollow markers shrinking with the client count: lines that coincide (ePulsar's) stay visible
            spans = [stats.from_dict(r.get("zk_wire_net_Bps_ci")) for r in points]
            low = [r["zk_wire_net_Bps"] - i.low if i and i.has_interval else 0 for r, i in zip(points, spans)]
            high = [i.high - r["zk_wire_net_Bps"] if i and i.has_interval else 0 for r, i in zip(points, spans)]
            ax.errorbar([r["topics"] for r in points], [max(1.0, r["zk_wire_net_Bps"]) for r in points],
                        yerr=[low, high], capsize=3, linestyle=line, marker=marker, markersize=10 - 2.5 * k,
                        markerfacecolor="none", label=f"{label}, {per_topic} clients/topic")
            series.append(f"{label}, {per_topic} clients/topic")
    period = rows[0]["period_s"] if rows else 5
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sorted({r["topics"] for r in rows})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    xlabel = "topics hosted by the broker"
    ylabel = "monitoring traffic to ZooKeeper (bytes/s, wire,\nminus the idle agent's; bar: 95 % CI over periods)"
    title = f"Fig. 6: monitoring traffic of one broker (report every {period:g} s)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return figures.save(fig, out, title, xlabel, ylabel, series)



def draw(data: dict, directory: Path) -> list[dict]:
    return [fig6(data, Path(directory) / "fig6.png")]
