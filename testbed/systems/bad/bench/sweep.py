"""BAD's schemes on the live emulated network (`make bench-bad-live`, results/bench/bad-live.json):
the side-by-side table, the paper's qualitative claims as rules that could fail, and two figures
(cov and migrations per scheme; broker load over time of the NR runs from the coordinator's rounds).

Pure: JSON (and each run's events.jsonl) in, rows, verdicts and PNGs out. A rule reads only runs
the harness held (its saturation guard said valid, or flagged at most SATURATED_SHARE of the run);
a claim whose runs are missing or saturated is "not testable".
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis.headlines import Headline, MissingInput

SATURATED_SHARE = 0.05  # a run whose harness was saturated longer than this share is left out


def rows(sweep: dict) -> list[dict]:
    """One row per scheme that ran."""
    out = []
    for scheme, r in sweep.get("schemes", {}).items():
        if not r.get("ok"):
            out.append({"scheme": scheme, "ok": False, "error": r.get("error", "")[-200:]})
            continue
        b, classes = r["bad"], r["classes"].values()
        seconds = r.get("seconds") or 1
        out.append({"scheme": scheme, "ok": True, "cov_first": b["cov_first"], "cov_last": b["cov_last"],
                    "max_first_kBps": b["max_first"] / 1e3, "max_last_kBps": b["max_last"] / 1e3,
                    "migrations": b["migrations"], "shuffles": b["shuffles"], "reattach_p50_s": b["reattach_p50_s"],
                    "p50_ms": max(c["p50_ms"] for c in classes), "p95_ms": max(c["p95_ms"] for c in classes),
                    "saturated_s": r.get("saturated_seconds") or 0, "seconds": seconds,
                    "held": (r.get("saturated_seconds") or 0) <= SATURATED_SHARE * seconds, "run": r.get("run")})
    return out


def markdown_table(table: list[dict]) -> list[str]:
    lines = ["| scheme | cov first -> last | max load KB/s first -> last | migrations | shuffles | re-attach p50 ms "
             "| worst channel p50 / p95 ms | harness |", "|---|---|---|---|---|---|---|---|"]
    for r in table:
        if not r["ok"]:
            lines.append(f"| {r['scheme']} | failed: {r['error']} | | | | | | |")
            continue
        reattach = "-" if r["reattach_p50_s"] is None else f"{1e3 * r['reattach_p50_s']:.0f}"
        lines.append(f"| {r['scheme']} | {r['cov_first']:.3f} -> {r['cov_last']:.3f} | {r['max_first_kBps']:.0f} -> "
                     f"{r['max_last_kBps']:.0f} | {r['migrations']} | {r['shuffles']} | {reattach} | "
                     f"{r['p50_ms']:.1f} / {r['p95_ms']:.1f} | "
                     + ("valid" if not r["saturated_s"] else f"saturated {r['saturated_s']} of {r['seconds']} s") + " |")
    return lines


def _held(table: list[dict]) -> dict[str, dict]:
    return {r["scheme"]: r for r in table if r["ok"] and r["held"]}


def _verdict(claim: str, needed: list[str], table: list[dict], test) -> dict:
    held = _held(table)
    absent = [s for s in needed if s not in held]
    if absent:
        return {"claim": claim, "holds": None, "numbers": {"not held or not run": absent}}
    holds, numbers = test(held)
    return {"claim": claim, "holds": holds if holds is None else bool(holds), "numbers": numbers}


def rules(table: list[dict], alpha: float = 0.15) -> list[dict]:
    """The paper's claims (6.1.3) that a 4-broker smoke can test."""
    return [
        _verdict("NR placement is far more skewed than RND and RR", ["nr+none", "rnd+none", "rr+none"], table,
                 lambda h: (h["nr+none"]["cov_first"] > 2 * max(h["rnd+none"]["cov_first"], h["rr+none"]["cov_first"]),
                            {s: round(h[s]["cov_first"], 3) for s in ("nr+none", "rnd+none", "rr+none")})),
        _verdict("under NR, LDM and SDM each end below alpha and below no balancing", ["nr+none", "nr+ldm", "nr+sdm"],
                 table, lambda h: (all(h[s]["cov_last"] <= alpha and h[s]["cov_last"] < h["nr+none"]["cov_last"]
                                       for s in ("nr+ldm", "nr+sdm")),
                                   {s: round(h[s]["cov_last"], 3) for s in ("nr+none", "nr+ldm", "nr+sdm")})),
        _verdict("NR needs more migrations than RND and RR", ["nr+ldm", "nr+sdm", "rnd+ldm", "rnd+sdm", "rr+ldm", "rr+sdm"],
                 table, lambda h: (all(h[f"nr+{m}"]["migrations"] > max(h[f"rnd+{m}"]["migrations"],
                                                                        h[f"rr+{m}"]["migrations"]) for m in ("ldm", "sdm")),
                                   {s: h[s]["migrations"] for s in h if "+" in s and s.split("+")[1] != "none"})),
        _verdict("the shuffle ends at least as balanced as dynamic migration alone",
                 ["nr+ldm", "nr+ldm+gsh", "nr+sdm", "nr+sdm+gsh"], table,
                 lambda h: (None if not all(h[f"nr+{m}+gsh"]["shuffles"] for m in ("ldm", "sdm")) else
                            all(h[f"nr+{m}+gsh"]["cov_last"] <= h[f"nr+{m}"]["cov_last"] + 0.02 for m in ("ldm", "sdm")),
                            {s: {"cov_last": round(h[s]["cov_last"], 3), "shuffles": h[s]["shuffles"]} for s in
                             ("nr+ldm", "nr+ldm+gsh", "nr+sdm", "nr+sdm+gsh")})),
    ]


def sweep_figure(table: list[dict], path: Path, alpha: float = 0.15) -> Path | None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in table if r["ok"]]
    if not done:
        return None
    names = [r["scheme"] for r in done]
    x = range(len(done))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    left.bar([i - 0.2 for i in x], [r["cov_first"] for r in done], 0.4, label="first round with every subscriber")
    left.bar([i + 0.2 for i in x], [r["cov_last"] for r in done], 0.4, label="last round")
    left.axhline(alpha, ls="--", color="k", lw=0.8, label=f"alpha {alpha:g}")
    left.set_ylabel("cov of broker loads")
    right.bar(list(x), [r["migrations"] for r in done], color="tab:gray")
    right.set_ylabel("subscriber migrations")
    for ax in (left, right):
        ax.set_xticks(list(x), names, rotation=45, ha="right", fontsize=8)
    left.legend(fontsize=7)
    fig.suptitle("BAD schemes live (bad-smoke: 4 brokers, 100 subscribers, 60 s); hatched: harness saturated", fontsize=10)
    for i, r in enumerate(done):
        if not r["held"]:
            for patch in (left.patches[i], left.patches[len(done) + i], right.patches[i]):
                patch.set_hatch("//")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def load_figure(table: list[dict], path: Path, schemes=("nr+none", "nr+ldm", "nr+sdm", "nr+ldm+gsh")) -> Path | None:
    """Broker load F_j over time (the loads Algorithm 1 used each round), one panel per scheme."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {r["scheme"]: r for r in table if r["ok"] and r["scheme"] in schemes and r.get("run")}
    if not runs:
        return None
    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 3.4), sharey=True, squeeze=False)
    drawn = 0
    for ax, (scheme, r) in zip(axes[0], runs.items()):
        log = Path(r["run"]) / "events.jsonl"
        events = [json.loads(line) for line in log.read_text().splitlines() if line] if log.exists() else []
        rounds = sorted((e for e in events if e.get("type") == "bad_round"), key=lambda e: e["round"])
        if not rounds:
            continue
        drawn += 1
        t0 = rounds[0]["time"]
        for broker in rounds[0]["loads"]:
            ax.plot([e["time"] - t0 for e in rounds], [e["loads"][broker] / 1e3 for e in rounds], lw=1, label=broker)
        if (Path(r["run"]) / "scenario.yaml").exists():  # beta, the mean load below which nothing moves
            from testbed.systems.bad.bench.live_figures import thresholds
            ax.axhline(thresholds(r["run"])["beta_Bps"] / 1e3, color="k", ls="--", lw=0.8, label="beta")
        for e in rounds:
            if e.get("moves"):
                ax.axvline(e["time"] - t0, color="r", lw=0.6, ls=":")
        ax.set_title(f"{scheme}: {r['migrations']} migrations", fontsize=9)
        ax.set_xlabel("time since the first round (s)")
    if not drawn:
        plt.close(fig)
        return None
    axes[0][0].set_ylabel("broker load F_j (KB/s)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Broker load over time, live NR runs (dotted: rounds that moved subscribers; dashed: beta)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def headline(table: list[dict], scale: str) -> Headline:
    """The index's line: the rules' verdicts, NR's skew and what balancing did to it."""
    if not any(r["ok"] for r in table):
        raise MissingInput("no scheme ran in bad-live.json (make bench-bad-live)")
    verdicts = rules(table)
    testable = [v for v in verdicts if v["holds"] is not None]
    by = {r["scheme"]: r for r in table if r["ok"]}
    nr = by.get("nr+none")
    text = (f"{sum(v['holds'] for v in testable)} of {len(testable)} testable claims hold"
            + (f" ({len(verdicts) - len(testable)} not testable)" if len(testable) < len(verdicts) else "")
            + (f"; NR alone cov {nr['cov_first']:.2f}" if nr else "")
            + "".join(f"; {s} cov {by[s]['cov_first']:.2f} -> {by[s]['cov_last']:.3f} with {by[s]['migrations']} "
                      f"migrations" for s in ("nr+ldm", "nr+sdm") if s in by)
            + "".join(f"; FAILS: {v['claim']}" for v in testable if not v["holds"]))
    return Headline(text, all(v["holds"] for v in testable) if testable else None, scale, {"verdicts": verdicts},
                    untestable="" if testable else "no rule's runs were held by the harness")
