"""Each figure's headline number: ours (from the benchmark JSON or the policy comparison) beside the paper's.

The paper states most results as bounds or comparisons, not numbers; `PAPER` quotes them with their
section, and each `ours_*` function reduces our result to the same statement with our numbers and a
verdict: True (our numbers show what the paper states), False (they do not; the text says where), None
(nothing to judge), or "not testable" (`Headline.untestable` says why): the rule could not have failed
on this input, because the configured topology bounds every E2E latency below the threshold
(`analysis.bounds`) or no placement came near it. A function gets the parsed JSON
(`results/bench/<name>.json`); it raises `MissingInput` when the data lacks what the headline needs.
The end-to-end runs' headlines (Fig. 8, 9) are in `analysis.experiment_headlines`. `AGREEMENT_RULES`
words every figure's rule from the same constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analysis import stats
from testbed.policies import POLICIES


class MissingInput(ValueError):
    """The input exists but lacks the rows the headline needs."""


@dataclass(frozen=True)
class Claim:
    section: str
    title: str
    text: str


@dataclass
class Headline:
    ours: str
    agrees: bool | None
    scale: str
    numbers: dict = field(default_factory=dict)
    untestable: str = ""  # why the rule could not have failed on this input (then agrees is None)

    @property
    def verdict(self) -> str:
        if self.untestable:
            return "not testable"
        return "-" if self.agrees is None else ("yes" if self.agrees else "no")


def rule(claim: str, holds: bool | None, evidence: str, why_not: str = "") -> dict:
    """One claim's verdict as a benchmark's rules report it: holds, does not hold, or not testable
    (then `why_not` is its evidence)."""
    word = "not testable" if holds is None else ("holds" if holds else "does not hold")
    return {"claim": claim, "holds": holds, "verdict": word, "evidence": why_not if holds is None else evidence}


def name_saturated(verdicts: list[dict], experiments: dict) -> list[dict]:
    """A bench's verdicts with the experiments the harness did not hold named beside each."""
    judged = [name for name, run in experiments.items() if run.get("ok") and not run.get("valid")]
    for verdict in verdicts:
        if judged:
            verdict["evidence"] += f" [harness saturated in: {', '.join(judged)}]"
    return verdicts


def rules_headline(verdicts: list[dict], scale: str, nothing: str) -> Headline:
    """The index's line from a benchmark's `rule`s: each testable claim's verdict with its numbers;
    it agrees when every testable one holds. `nothing`: why none was testable."""
    testable = [v for v in verdicts if v["holds"] is not None]
    text = "; ".join(f"{v['claim'].split(':')[0]} {v['verdict']} ({v['evidence']})" for v in testable)
    return Headline(text or "nothing testable", all(v["holds"] for v in testable) if testable else None, scale,
                    {"verdicts": verdicts}, untestable="" if testable else nothing)


# The rules' numbers, each tied to the paper's mechanism (AGREEMENT_RULES words them).
WITHIN_SHARE = 0.95         # Fig. 8: "under the threshold for most of the run", outside the handover windows


PAPER = {
    "fig3b": Claim("5.3", "RTT estimation error of network coordinates (Serf, Vivaldi)",
                   "per-pair RTT error stays < 3.5 ms as the cluster grows (2-128 nodes) and < 6 % of the actual "
                   "RTT; the agent uses < 1 % CPU and < 15 MB"),
    "fig8": Claim("5.8.1", "UAV swarms: E2E latency of each swarm's representative topic",
                  "E2E latency stays under the 40 ms threshold for most of the 10-minute run; transient violations "
                  "when a swarm enters another MEC zone, until its topics migrate (ePulsar only; 8 swarms of 8 UAVs, "
                  "200 msg/s of 1 KB, 50 m/s)"),
    "fig9": Claim("5.8.2", "MMOG: E2E area-of-interest latency of one client",
                  "E2E AoI latency consistently below the 100 ms threshold despite frequent AoI changes; transient "
                  "spikes at migrations (ePulsar only; 64 avatars, 5 cities, 300 msg/s of 998 B)"),
    "fig8-smoke": Claim("5.8.1", "UAV swarms, smoke scale: the same mechanism at 600 m/s for 60 s, every policy",
                        "no such figure: Fig. 8's mechanism (transient violations after a zone change until the "
                        "topics migrate) at a speed that makes 60 s hold several zone changes; not comparable "
                        "with the paper's numbers"),
    "fig9-one_way": Claim("5.8.2", "MMOG under the other reading of d (one-way: d = Serf's RTT / 2), ePulsar",
                          "no such figure: the paper's d is the distance between coordinates, an RTT (our smokes "
                          "use it); here the same run with d halved, the physical one-way latency"),
    "fig9-jitter": Claim("5.8.2", "MMOG with measured jitter on every inter-city link (cities.jitter: measured), "
                         "ePulsar", "no such figure: the paper's links are its testbed's; here the MMOG smoke again "
                         "with each link between two cities varying as WonderProxy's pings between them did, beside "
                         "Fig. 9's constant links"),
    "violations": Claim("5.5, 5.8", "Violation ratio per broker selection policy in the end-to-end runs",
                        "no such figure: the end-to-end runs use ePulsar only (5.8); the policies are compared "
                        "offline (Fig. 4, 5): hashing violates far more often, ePulsar about as often as AllPairs"),
    "load-balancing": Claim("3.4.2, 3.4.3", "Load balancing: ePulsar vs Pulsar's load manager vs hashing "
                            "(UAV, MMOG, hot spot)",
                            "no such figure: ePulsar moves a topic off a broker only when the broker is overloaded "
                            "(CPU, memory or network above 85 %, or output rate above Rth_out; 3.4.2), the topics "
                            "that bring it back under (3.4.3); the paper does not measure balance, and its baseline "
                            "is Pulsar's hashing, not Pulsar's load manager (bundles, split, shedders)"),
}
POLICY_NAMES = {name: policy.label for name, policy in POLICIES.items()}  # the registry's labels and order
POLICY_ORDER = tuple(POLICIES)


def _span(values, fmt: str = "{:.1f}") -> str:
    values = sorted(values)
    if not values:
        return "-"
    low, high = fmt.format(values[0]), fmt.format(values[-1])
    return low if low == high else f"{low}-{high}"


def require(rows, what: str):
    if not rows:
        raise MissingInput(f"no {what}")
    return rows


# ------------------------------------------------------------------------------------------ benchmarks

def ours_fig3b(nc: dict) -> Headline:
    acc = require([r for r in nc.get("accuracy") or [] if not r.get("failed")], "accuracy rows in nc.json")
    by_nodes = [r for r in acc if r.get("rtt_ms") == 50.0]
    by_rtt = [r for r in acc if r.get("nodes") == 8]
    require(by_nodes and by_rtt, "50 ms sweep or 8-node sweep in nc.json")
    errors = [r["median_error_ms"] for r in by_nodes]
    relative = [100 * r["median_relative"] for r in by_rtt]
    cost = nc.get("overhead") or []
    cpu = max((c["cpu_percent_max"] for c in cost), default=None)
    rss = max((c["rss_mb_mean"] for c in cost), default=None)
    rss_peak = max((c["rss_mb_max"] for c in cost), default=None)
    text = (f"median per-pair error {_span(errors)} ms for {_span([r['nodes'] for r in by_nodes], '{:d}')} nodes "
            f"at 50 ms RTT; {_span(relative)} % of the RTT for {_span([r['rtt_ms'] for r in by_rtt], '{:g}')} ms "
            "with 8 nodes")
    worst = max(by_nodes, key=lambda r: r["median_error_ms"])
    worst_relative = max(by_rtt, key=lambda r: r["median_relative"])
    error_ci = stats.from_dict(worst.get("median_error_ms_ci"))
    relative_ci = stats.from_dict(worst_relative.get("median_relative_ci"))
    if error_ci and relative_ci:
        text += (f" (largest: {error_ci.text('{:.2f}', 1, ' ms')} at "
                 f"{worst['nodes']} nodes, {relative_ci.text('{:.2f}', 100, ' %')} "
                 f"at {worst_relative['rtt_ms']:g} ms; 95 % bootstrap over pairs)")
    if cpu is not None:
        text += f"; agent CPU <= {cpu:.2f} %, RSS mean <= {rss:.1f} MB (peak {rss_peak:.1f} MB)"
    agrees = max(errors) < 3.5 and max(relative) < 6.0 and (cpu is None or (cpu < 1.0 and rss < 15.0))
    scale = f"{_span([r['nodes'] for r in acc], '{:d}')} nodes (paper: up to 128)"
    return Headline(text, agrees, scale, {"median_error_ms_max": max(errors), "relative_pct_max": max(relative),
                                          "cpu_percent_max": cpu, "rss_mb_max": rss})


def fig3b_table(nc: dict) -> list[str]:
    """Convergence time and accuracy per cluster size (the 50 ms sweep), a size that could not run said so."""
    rows = sorted((r for r in nc.get("accuracy") or [] if r.get("rtt_ms") == 50.0), key=lambda r: r["nodes"])
    lines = ["| nodes | converged after | median error | p95 error | median relative | within the paper's bounds |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("failed"):
            lines.append(f"| {r['nodes']} | could not run: {r['failed']} | - | - | - | no |")
            continue
        converged = f"{r['convergence_s']:g} s" if r.get("convergence_s") is not None else "not converged"
        p95 = f"{r['p95_error_ms']:.2f} ms" if r.get("p95_error_ms") is not None else "-"
        lines.append(f"| {r['nodes']} | {converged} | {r['median_error_ms']:.2f} ms | {p95} | "
                     f"{100 * r['median_relative']:.2f} % | {'yes' if r.get('ok') else 'no'} |")
    return lines if rows else []


def fig3b_notes(nc: dict) -> list[str]:
    """The largest cluster size the machine ran, as the benchmark measured it."""
    return [nc["max_nodes_note"]] if nc.get("max_nodes_note") else []


BENCH_HEADLINES = {"fig3b": ("nc", ours_fig3b)}
BENCH_TABLES = {"fig3b": (fig3b_table, fig3b_notes)}  # a core benchmark's per-size table and notes under its entry
AGREEMENT_RULES = {
    "fig3b": "every median error < 3.5 ms and < 6 % of the RTT; CPU < 1 %, mean RSS < 15 MB",
    "fig8": ("ePulsar: every post-handover window (from a swarm's relink until its topics are back under the "
             "threshold) closes within the control loop's reaction time as the run measured it (NC report + "
             "the broker's monitoring report + the topic manager's round, 15 s with the paper's 5 s periods, + "
             "the run's p95 migration time from the decision until the "
             f"topic's clients use the new broker), some handover happened, and >= {100 * WITHIN_SHARE:g} % of the messages outside the "
             "windows are within their threshold; not testable when the configured topology bounds E2E below it"),
    "fig8-smoke": "as Fig. 8, on the smoke runs",
    "fig9-one_way": "as Fig. 9, on ePulsar's run with one-way distances",
    "fig9-jitter": "as Fig. 9, on ePulsar's run with measured jitter on the inter-city links",
    "fig9": ("ePulsar: some topic migrated within the reaction time after a group change moved its subscribers, "
             "and the AoI latency p95 < the threshold (100 ms); when the configured topology bounds E2E below it, "
             "the latency half holds by construction and only the migrations are judged (not testable if ePulsar "
             "never migrated)"),
    "violations": ("ePulsar's violation ratio no higher than hashing's in each scenario whose topology allows a "
                   "violation"),
    "load-balancing": "none: the paper states nothing on balance; the numbers are side by side, not judged",
}

__all__ = ["PAPER", "Claim", "Headline", "MissingInput", "BENCH_HEADLINES", "AGREEMENT_RULES", "POLICY_NAMES",
           "POLICY_ORDER", "require",
           "ours_fig3b", "fig3b_table", "fig3b_notes", "BENCH_TABLES"]
