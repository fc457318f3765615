"""`make bench-handover`'s figure and claims: Fig. 8's post-handover windows with and without the
handover trigger (beyond the paper: testbed.policies.handover) on the same flights, and ping-pong on
a zone border. Plain data in (results/bench/handover.json), a PNG and verdicts out."""

from __future__ import annotations

import statistics
from pathlib import Path

from analysis import figures
from analysis.bounds import PAPER_REACTION_S
from analysis.headlines import Headline, MissingInput, name_saturated, rule, rules_headline

TARGET_MEDIAN_S, TARGET_MAX_S = 1.5, 3.0  # the trigger's targets for the windows
MAX_MIGRATIONS_PER_HANDOVER = 1.0  # no ping-pong on a zone border


def _runs(result: dict, prefix: str) -> list[tuple[str, dict]]:
    return sorted((name, run) for name, run in result.get("experiments", {}).items()
                  if name.startswith(prefix) and run.get("ok"))


def _windows(runs: list[tuple[str, dict]], closed: bool = True) -> list[float]:
    """The windows that closed (`closed`), or those cut short by the node's next relink or the end of
    the run (undecided: as Fig. 8's rule counts them)."""
    return [w["window_s"] for _, run in runs for w in run["windows"] if w["closed"] == closed]


def _monitoring_ratio(runs: list[tuple[str, dict]]) -> tuple[float, float] | None:
    """(early NC reports / periodic ones, early monitoring reports / periodic ones) over the runs."""
    m = [run.get("monitoring") or {} for _, run in runs]
    periodic_nc = sum(x.get("nc_reports", 0) - x.get("nc_reports_now", 0) for x in m)
    periodic_reports = sum(x.get("reports_written", 0) for x in m)
    if not periodic_nc or not periodic_reports:
        return None
    return sum(x.get("nc_reports_now", 0) for x in m) / periodic_nc, sum(x.get("early_reports", 0) for x in m) / periodic_reports


FLIGHTS = (("", "uav-smoke"), ("comparable-", "uav-comparable"))  # (experiment prefix, scenario): each judged alone


def _chain(runs: list[tuple[str, dict]]) -> str:
    """The medians of the reaction's steps after a relink (bench.handover.reaction_chain), where they came."""
    from testbed.systems.pubsub.bench.handover import CHAIN

    parts = []
    for step in CHAIN:
        times = [c[step] for _, run in runs for c in run.get("chain", ()) if c.get(step) is not None]
        if times:
            parts.append(f"{step} {statistics.median(times):.2f}")
    return f"; from the relink (median s): {', '.join(parts)}" if parts else ""


def rules(result: dict) -> list[dict]:
    out = []
    for prefix, flight in FLIGHTS:
        on, off = _runs(result, f"{prefix}trigger"), _runs(result, f"{prefix}periodic")
        trig, base = _windows(on), _windows(off)
        if not trig:
            continue
        median, longest = statistics.median(trig), max(trig)
        cost = _monitoring_ratio(on)
        extra = (f"; extra monitoring: {100 * cost[0]:.1f} % more NC reports, {100 * cost[1]:.1f} % more monitoring "
                 "reports than the periodic ones" if cost else "")
        out.append(rule(f"Beyond the paper: with the handover trigger a post-handover window closes in about a second "
                        f"({flight})", median <= TARGET_MEDIAN_S and longest <= TARGET_MAX_S,
                        f"{len(trig)} closed windows: median {median:.2f} s (target <= {TARGET_MEDIAN_S:g}), max "
                        f"{longest:.2f} s (target <= {TARGET_MAX_S:g}), {len(_windows(on, False))} cut short by the next "
                        "relink or the run's end"
                        + (f"; without it, same flights: median {statistics.median(base):.2f} s, max {max(base):.2f} s"
                           if base else "") + _chain(on) + extra))
    border = dict(_runs(result, "border-"))
    if "border-trigger" in border:
        run = border["border-trigger"]
        rate = run["migrations_per_handover"]
        periodic = border.get("border-periodic", {}).get("migrations_per_handover")
        out.append(rule("No ping-pong: a swarm crossing a zone border back and forth moves each of its topics at most "
                        "once per handover", rate is not None and rate <= MAX_MIGRATIONS_PER_HANDOVER,
                        f"{run['migrations']} topic migrations over {run['handovers']} handovers of "
                        f"{run['topic_handovers'] // max(1, run['handovers'])} topics each = {rate:.2f} per topic and "
                        f"handover ({run['early_rounds']} early rounds)"
                        + (f"; without the trigger {periodic:.2f}" if periodic is not None else "")))
    return name_saturated(out, result.get("experiments", {}))


def headline(result: dict, scale: str) -> Headline:
    if not result.get("experiments"):
        raise MissingInput("no results/bench/handover.json (make bench-handover)")
    return rules_headline(rules(result), scale, "no experiment completed")


def markdown_table(result: dict) -> list[str]:
    lines = ["| run | valid | handovers | windows median / max (s) | over threshold | migrations | early rounds | "
             "NC reports at once / periodic | early / periodic reports |", "|---|---|---|---|---|---|---|---|---|"]
    for name, run in sorted(result.get("experiments", {}).items()):
        if not run.get("ok"):
            lines.append(f"| {name} | failed | | | | | | | |")
            continue
        m = run.get("monitoring") or {}
        ratio = run["above_ratio"]
        lines.append(
            f"| {name} | {'yes' if run['valid'] else 'no'} | {run['handovers']} | "
            f"{_n(run['window_median_s'])} / {_n(run['window_max_s'])} | {'-' if ratio is None else f'{100 * ratio:.1f} %'} | "
            f"{run['migrations']} | {run['early_rounds']} | {m.get('nc_reports_now', 0)} / "
            f"{m.get('nc_reports', 0) - m.get('nc_reports_now', 0)} | {m.get('early_reports', 0)} / {m.get('reports_written', 0)} |")
    return lines


def _n(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def draw(result: dict, out: Path, stem: str = "handover") -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    border = dict(_runs(result, "border-"))
    groups = [(f"{mode}\n{flight}", _windows(_runs(result, f"{prefix}{kind}")))  # closed windows
              for prefix, flight in FLIGHTS for kind, mode in (("periodic", "periodic (paper)"), ("trigger", "trigger"))]
    if not (any(values for _, values in groups) or border):
        return []
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [3, 2]})
    shown = [(label, values) for label, values in groups if values]
    left.boxplot([v for _, v in shown], showfliers=False)
    for i, (_, values) in enumerate(shown, 1):
        left.scatter([i + 0.08 * ((k % 5) - 2) for k in range(len(values))], values, s=14, alpha=0.7, zorder=3)
    left.set_xticks(range(1, len(shown) + 1), [label for label, _ in shown], fontsize=8)
    left.axhline(PAPER_REACTION_S, color="grey", linestyle=":", label=f"paper's reaction time {PAPER_REACTION_S:g} s")
    left.axhline(TARGET_MAX_S, color="red", linestyle="--", label=f"target max {TARGET_MAX_S:g} s")
    left.axhline(TARGET_MEDIAN_S, color="green", linestyle="--", label=f"target median {TARGET_MEDIAN_S:g} s")
    left.set_ylabel("post-handover window (s): relink until the node's\ntopics are back under 40 ms (closed windows)")
    left.set_title("Fig. 8's windows, same flights with and without the trigger", fontsize=10)
    left.set_ylim(bottom=0)
    left.legend(fontsize=7, loc="center")
    bars = [(name.replace("border-", ""), run["migrations_per_handover"] or 0.0) for name, run in sorted(border.items())]
    right.bar([b for b, _ in bars], [v for _, v in bars],
              color=["tab:green" if b == "trigger" else "tab:grey" for b, _ in bars])
    right.axhline(MAX_MIGRATIONS_PER_HANDOVER, color="red", linestyle="--", label="at most one per handover")
    right.set_ylabel("migrations per topic and handover")
    right.set_title("a swarm crossing a zone border every 4 s (uav-border)", fontsize=10)
    right.legend(fontsize=7)
    title = "Beyond the paper: handover-aware placement (early reports and rounds) vs the paper's periodic loop"
    fig.suptitle(title, fontsize=11)
    info = figures.save(fig, out / f"{stem}.png", title, "configuration", "post-handover window (s)",
                        [label.replace("\n", " ") for label, _ in shown] + [b for b, _ in bars])
    return [f"wrote {info['path']}: {title}"]
