"""`make bench-autotune`'s figures and claims (Balasubramanian et al.): Fig. 8 and 9
(end-to-end latency against N, fixed and tuned, at four loads), Fig. 10 (N over time at 35
requests/s), Fig. 11 (N under Table II's step profile), Fig. 12-14 (the bursty trace as is and 50x
faster), the slow subscriber's drops (section V-B-3, unplotted in the paper), and beyond the paper
the best N over four RTTs. Plain data in (results/bench/autotune.json), PNGs and verdicts out."""

from __future__ import annotations

import statistics
from pathlib import Path

from analysis.headlines import Headline, MissingInput, name_saturated, rule, rules_headline

LOADS = ("load-1.75", "load-17.5", "load-35", "load-55")
TUNED_SPREAD_MS = 15.0     # Fig. 9: "the same irrespective of the initial N": tuned means within 15 ms ...
TUNED_SPREAD_SHARE = 0.15  # ... or 15 % of the smallest, whichever is larger
NEAR_BEST_SHARE = 0.10     # Fig. 8: "the optimum is near 10": N = 10 within 10 % of the best fixed N
SMALL_N_SLOW_FACTOR = 2.0  # Fig. 8: at high load N = 1 at least twice the best fixed N's latency
TUNED_VS_BEST_SHARE = 0.15  # tuning, not knowing the load, within 15 % of the best fixed N that knew it


def _ok(result: dict, name: str) -> dict | None:
    run = result.get("experiments", {}).get(name)
    return run if run and run.get("ok") else None


def _means(run: dict, tuned: bool) -> dict[int, float]:
    """N (fixed, or the start when tuned) -> mean end-to-end latency, ms."""
    return {v["batch"]: v["mean_ms"] for v in run["variants"].values() if v["tuned"] == tuned and v["mean_ms"] is not None}


def _spread_ok(values) -> bool:
    low, high = min(values), max(values)
    return high - low <= max(TUNED_SPREAD_MS, TUNED_SPREAD_SHARE * low)


def _fmt_means(means: dict[int, float]) -> str:
    return ", ".join(f"N {n}: {m:.0f}" for n, m in sorted(means.items()))


def rules(result: dict) -> list[dict]:
    out = []
    low, mid, high = _ok(result, "load-1.75"), _ok(result, "load-35"), _ok(result, "load-55")
    if low:
        fixed = _means(low, False)
        best = min(fixed, key=fixed.get)
        out.append(rule("Fig. 8: without tuning N = 1 is best at 1.75 requests/s", best == 1,
                         f"mean ms {_fmt_means(fixed)}"))
    if mid:
        fixed = _means(mid, False)
        best = min(fixed, key=fixed.get)
        out.append(rule("Fig. 8: without tuning the best N at 35 requests/s is near 10",
                         fixed.get(10, float("inf")) <= (1 + NEAR_BEST_SHARE) * fixed[best],
                         f"best N {best} ({fixed[best]:.0f} ms), N 10: {fixed.get(10, float('nan')):.0f} ms"))
    if high:
        fixed = _means(high, False)
        best = min(fixed.values())
        out.append(rule("Fig. 8: at 55 requests/s a small N is slow", fixed.get(1, 0) >= SMALL_N_SLOW_FACTOR * best,
                         f"N 1: {fixed.get(1, float('nan')):.0f} ms vs best {best:.0f} ms"))
    loads = [(name, run) for name in LOADS if (run := _ok(result, name))]
    if loads:
        spreads = {name: _means(run, True) for name, run in loads}
        out.append(rule("Fig. 9: with tuning the latency does not depend on the initial N",
                         all(_spread_ok(m.values()) for m in spreads.values() if m),
                         "; ".join(f"{name[5:]}/s: {min(m.values()):.0f}-{max(m.values()):.0f} ms"
                                   for name, m in spreads.items() if m)))
        close = {name: (statistics.fmean(_means(run, True).values()), min(_means(run, False).values()))
                 for name, run in loads}
        out.append(rule("Tuning comes within 15 % of the best fixed N at every load, without knowing the load",
                         all(t <= (1 + TUNED_VS_BEST_SHARE) * b for t, b in close.values()),
                         "; ".join(f"{name[5:]}/s: tuned {t:.0f} vs best fixed {b:.0f} ms" for name, (t, b) in close.items())))
    if mid:
        fixed = _means(mid, False)
        best = min(fixed, key=fixed.get)
        n_means = [v["n_mean"] for v in mid["variants"].values() if v["tuned"] and v["n_mean"] is not None]
        if n_means:
            n = statistics.fmean(n_means)
            out.append(rule("Fig. 10: at 35 requests/s tuned N averages near the best fixed N",
                             best / 2 <= n <= best * 2, f"tuned N mean {n:.1f}, best fixed N {best}"))
    for name, fig in (("trace-x1", "12"), ("trace-x50", "13")):
        run = _ok(result, name)
        if run:
            tuned = _means(run, True)
            out.append(rule(f"Fig. {fig}: on the bursty trace ({name[6:]}) tuning gives the same latency from any N",
                             _spread_ok(tuned.values()), f"tuned {min(tuned.values()):.0f}-{max(tuned.values()):.0f} ms; "
                                                         f"fixed {_fmt_means(_means(run, False))}"))
    slow = _ok(result, "slow")
    if slow:
        fixed = sum(v["dropped"] or 0 for v in slow["variants"].values() if not v["tuned"])
        tuned = sum(v["dropped"] or 0 for v in slow["variants"].values() if v["tuned"])
        out.append(rule("V-B-3: under a slow subscriber the untuned publisher drops requests, the tuned one none",
                         fixed > 0 and tuned == 0, f"dropped: fixed {fixed}, tuned {tuned} "
                                                   f"(of {slow['arrivals']} per publisher)"))
    return name_saturated(out, result.get("experiments", {}))


def headline(result: dict, scale: str) -> Headline:
    if not result.get("experiments"):
        raise MissingInput("no results/bench/autotune.json (make bench-autotune)")
    return rules_headline(rules(result), scale, "no experiment completed")


def best_n_by_rtt(result: dict) -> list[tuple[float, int, float, float | None]]:
    """(RTT ms, best fixed N, its mean ms, tuned-from-1 mean ms) at 35 requests/s, over RTTs."""
    rows = []
    for name, run in result.get("experiments", {}).items():
        if run.get("ok") and (name.startswith("rtt-") or name == "load-35"):
            fixed, tuned = _means(run, False), _means(run, True)
            best = min(fixed, key=fixed.get)
            rows.append((run["rtt_ms"], best, fixed[best], tuned.get(1)))
    return sorted(rows)


def markdown_table(result: dict) -> list[str]:
    lines = ["| experiment | RTT ms | harness | publisher | N | mean ms | p50 ms | p95 ms | N mean | dropped | refused |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, run in result.get("experiments", {}).items():
        if not run.get("ok"):
            lines.append(f"| {name} | - | failed | - | - | - | - | - | - | - | - |")
            continue
        held = "valid" if run["valid"] else f"saturated {run['saturated_seconds']} s"
        for pub, v in run["variants"].items():
            lines.append(f"| {name} | {run['rtt_ms']:.0f} | {held} | {pub} | {'from ' if v['tuned'] else ''}{v['batch']} | "
                         f"{_n(v['mean_ms'])} | {_n(v['p50_ms'])} | {_n(v['p95_ms'])} | {_n(v['n_mean'])} | "
                         f"{v['dropped']} | {v['refused']} |")
    rows = best_n_by_rtt(result)
    if rows:
        lines += ["", "| RTT ms (35 requests/s) | best fixed N | its mean ms | tuned from 1, mean ms |", "|---|---|---|---|"]
        lines += [f"| {rtt:.0f} | {n} | {m:.0f} | {_n(t)} |" for rtt, n, m, t in rows]
    return lines


def _n(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


# -- figures ---------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _title(name: str, run: dict) -> str:
    return f"{name.replace('load-', '')} requests/s" + ("" if run["valid"] else " (harness SATURATED)")


def fig_latency_vs_n(result: dict, path: Path, tuned: bool, number: int) -> Path | None:
    runs = [(name, run) for name in LOADS if (run := _ok(result, name))]
    if not runs:
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for ax, (name, run) in zip(axes.flat, runs):
        vs = sorted((v for v in run["variants"].values() if v["tuned"] == tuned), key=lambda v: v["batch"])
        xs = [str(v["batch"]) for v in vs]
        means = [v["mean_ms"] for v in vs]
        low = [m - (v["q05_ms"] or m) for v, m in zip(vs, means)]
        high = [(v["q95_ms"] or m) - m for v, m in zip(vs, means)]
        ax.errorbar(xs, means, yerr=[low, high], fmt="o-", capsize=3, label="mean (bars: 5th-95th percentile)")
        ax.axhline(run["rtt_ms"] / 2, color="grey", ls="--", lw=1, label=f"one-way path delay {run['rtt_ms'] / 2:.0f} ms")
        ax.set_yscale("log")
        ax.set_title(_title(name, run))
        ax.set_ylabel("end-to-end latency (ms)")
        ax.grid(alpha=0.3, which="both")
    for ax in axes[-1]:
        ax.set_xlabel("initial N (tuned)" if tuned else "N (fixed, T_poll 50 ms)")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"Fig. {number}: end-to-end latency {'with' if tuned else 'without'} auto-tuning "
                 f"(publisher {runs[0][1]['rtt_ms']:.0f} ms RTT from the broker, live)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fig_n_over_time(run: dict, path: Path, title: str, best_n: int | None = None, profile=None) -> Path | None:
    tuned = {name: v for name, v in run["variants"].items() if v["tuned"] and v.get("series")}
    if not tuned:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for name, v in tuned.items():
        xs, ns = [p[0] for p in v["series"]], [p[1] for p in v["series"]]
        ax.plot(xs, ns, lw=1, label=f"N, tuned from {v['batch']}")
    if best_n is not None:
        ax.axhline(best_n, color="k", ls="--", lw=1.5, label=f"best fixed N at this load ({best_n})")
    ax.set_xlabel("time since the start (s)")
    ax.set_ylabel("N (requests per batch, 1 s means)")
    ax.grid(alpha=0.3)
    if profile:
        right = ax.twinx()
        right.step([p[0] for p in profile], [p[1] for p in profile], where="post", color="red", lw=1.5, label="load")
        right.set_ylabel("load (requests/s)", color="red")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title + ("" if run["valid"] else " (harness SATURATED)"))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fig_boxplots(run: dict, path: Path, number: int, label: str) -> Path | None:
    vs = sorted(run["variants"].values(), key=lambda v: (v["tuned"], v["batch"]))
    stats = [{"label": f"{'ON' if v['tuned'] else 'OFF'}\nN {v['batch']}", "whislo": v["q05_ms"], "q1": v["q25_ms"],
              "med": v["q50_ms"], "q3": v["q75_ms"], "whishi": v["q95_ms"], "mean": v["mean_ms"], "fliers": []}
             for v in vs if v["q50_ms"] is not None]
    if not stats:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.bxp(stats, showmeans=True)
    ax.axhline(run["rtt_ms"] / 2, color="grey", ls="--", lw=1, label=f"one-way path delay {run['rtt_ms'] / 2:.0f} ms")
    ax.set_yscale("log")
    ax.set_ylabel("response time (ms; whiskers 5th-95th percentile)")
    ax.set_xlabel("auto-tuning OFF / ON and N (fixed, or initial)")
    ax.legend(fontsize=8)
    ax.set_title(f"Fig. {number}: response times on the synthetic sLS trace {label}"
                 + ("" if run["valid"] else " (harness SATURATED)"))
    ax.grid(alpha=0.3, axis="y", which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fig_rtt(result: dict, path: Path) -> Path | None:
    runs = sorted(((run["rtt_ms"], run) for name, run in result.get("experiments", {}).items()
                   if run.get("ok") and (name.startswith("rtt-") or name == "load-35")), key=lambda p: p[0])
    if not runs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 5))
    for rtt, run in runs:
        fixed = sorted(_means(run, False).items())
        line, = ax.plot([str(n) for n, _ in fixed], [m for _, m in fixed], "o-", label=f"fixed N, RTT {rtt:.0f} ms"
                        + ("" if run["valid"] else " (SATURATED)"))
        tuned = _means(run, True)
        if tuned:
            ax.axhline(statistics.fmean(tuned.values()), color=line.get_color(), ls="--", lw=1)
        best = min(fixed, key=lambda p: p[1])
        ax.plot([str(best[0])], [best[1]], "*", ms=14, color=line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel("N (fixed, T_poll 50 ms); star: best N; dashed: tuned (mean over initial N)")
    ax.set_ylabel("end-to-end latency, mean (ms)")
    ax.set_title("Beyond the paper: the best batch size over the path's RTT (35 requests/s, live)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fig_drops(run: dict, path: Path) -> Path:
    plt = _plt()
    vs = sorted(run["variants"].values(), key=lambda v: (v["tuned"], v["batch"]))
    labels = [f"{'tuned from' if v['tuned'] else 'fixed N'} {v['batch']}" for v in vs]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(labels, [v["dropped"] or 0 for v in vs], color=["tab:red" if not v["tuned"] else "tab:green" for v in vs])
    ax.set_ylabel(f"requests dropped at the input (of {run['arrivals']})")
    sub = run["subscriber"]
    ax.set_title(f"Slow subscriber (pull every {sub['pull_interval']}, {sub['pull_time']} per message): "
                 f"drops at the publisher's input" + ("" if run["valid"] else " (harness SATURATED)"), fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _profile(run: dict) -> list[tuple[float, float]]:
    """The step profile the bench recorded: [(start s, requests/s)], closed by the last step's end."""
    return [tuple(p) for p in run.get("profile") or []]


def draw(result: dict, out: Path, stem: str = "autotune") -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    made = [fig_latency_vs_n(result, out / f"{stem}-fig8.png", False, 8),
            fig_latency_vs_n(result, out / f"{stem}-fig9.png", True, 9)]
    mid = _ok(result, "load-35")
    if mid:
        fixed = _means(mid, False)
        made.append(fig_n_over_time(mid, out / f"{stem}-fig10.png", "Fig. 10: N with auto-tuning at 35 requests/s",
                                    best_n=min(fixed, key=fixed.get) if fixed else None))
    steps = _ok(result, "steps")
    if steps:
        made.append(fig_n_over_time(steps, out / f"{stem}-fig11.png",
                                    f"Fig. 11: N following Table II's load steps (time-scaled x{steps['source'].get('time_scale', 1):g})",
                                    profile=_profile(steps)))
    for name, number, label in (("trace-x1", 12, "as recorded"), ("trace-x50", 13, "50x faster")):
        run = _ok(result, name)
        if run:
            made.append(fig_boxplots(run, out / f"{stem}-fig{number}.png", number, label))
    fast = _ok(result, "trace-x50")
    if fast:
        made.append(fig_n_over_time(fast, out / f"{stem}-fig14.png", "Fig. 14: N with auto-tuning on the trace 50x faster"))
    made.append(fig_rtt(result, out / f"{stem}-rtt.png"))
    slow = _ok(result, "slow")
    if slow:
        made.append(fig_drops(slow, out / f"{stem}-drops.png"))
    return [f"wrote {p}" for p in made if p]


FIGURES = [f"autotune-fig{n}.png" for n in range(8, 15)] + ["autotune-rtt.png", "autotune-drops.png"]
