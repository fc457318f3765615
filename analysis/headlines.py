"""Each figure's headline number: ours (from the benchmark JSON or the policy comparison) beside the paper's.

The paper states most results as bounds or comparisons, not numbers; `PAPER` quotes them with their
section, and each `ours_*` function reduces our result to the same statement with our numbers and a
verdict: True (our numbers show what the paper states), False (they do not; the text says where), None
(nothing to judge). A function gets the parsed JSON (`results/bench/<name>.json`) or the rows of
`analysis.compare`; it raises `MissingInput` when the data lacks what the headline needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


PAPER = {
    "fig3b": Claim("5.3", "RTT estimation error of network coordinates (Serf, Vivaldi)",
                   "per-pair RTT error stays < 3.5 ms as the cluster grows (2-128 nodes) and < 6 % of the actual "
                   "RTT; the agent uses < 1 % CPU and < 15 MB"),
    "fig4": Claim("5.5.2", "Broker selection policies, MMOG (worst-case E2E latency, violation ratio)",
                  "Pulsar's consistent hashing is consistently worse than AllPairs and ePulsar; ePulsar's worst case "
                  "is similar to AllPairs; hashing causes many violations of the 100 ms threshold, AllPairs and "
                  "ePulsar similar levels (1024 clients, 128 groups, 1000 placements)"),
    "fig5": Claim("5.5.3", "Broker selection policies, UAV swarms (worst-case E2E latency, violation ratio)",
                  "ePulsar's worst-case E2E latency stays under the 40 ms threshold: no violations as MEC zones are "
                  "added (16 swarms of 8 UAVs, 1000 placements)"),
    "fig6": Claim("5.6", "Monitoring traffic to ZooKeeper vs topics and clients per topic",
                  "ePulsar's rate grows with topics but is independent of the clients per topic; AllPairs grows "
                  "faster and with more clients per topic"),
    "fig7a": Claim("5.7", "Client downtime during topic migration vs one-way WAN latency",
                   "ePulsar's client downtime is significantly lower than baseline Pulsar's (128 topics at once, "
                   "16 executors); the higher the WAN latency, the higher the gain"),
    "fig7b": Claim("5.7", "Median per-topic migration time vs topics migrated at once",
                   "ePulsar's per-topic migration time drops with more migration executors; baseline Pulsar migrates "
                   "sequentially (one-way WAN latency 40 ms)"),
    "fig8": Claim("5.8.1", "UAV swarms: E2E latency of each swarm's representative topic",
                  "E2E latency stays under the 40 ms threshold for most of the 10-minute run; transient violations "
                  "when a swarm enters another MEC zone, until its topics migrate (ePulsar only; 8 swarms of 8 UAVs, "
                  "200 msg/s of 1 KB, 50 m/s)"),
    "fig9": Claim("5.8.2", "MMOG: E2E area-of-interest latency of one client",
                  "E2E AoI latency consistently below the 100 ms threshold despite frequent AoI changes; transient "
                  "spikes at migrations (ePulsar only; 64 avatars, 5 cities, 300 msg/s of 998 B)"),
    "violations": Claim("5.5, 5.8", "Violation ratio per broker selection policy in the end-to-end runs",
                        "no such figure: the end-to-end runs use ePulsar only (5.8); the policies are compared "
                        "offline (Fig. 4, 5): hashing violates far more often, ePulsar about as often as AllPairs"),
}
POLICY_NAMES = {"epulsar": "ePulsar", "allpairs": "AllPairs", "pulsar-hash": "Pulsar (hash)"}
POLICY_ORDER = ("epulsar", "allpairs", "pulsar-hash")


def _span(values, fmt: str = "{:.1f}") -> str:
    values = sorted(values)
    if not values:
        return "-"
    low, high = fmt.format(values[0]), fmt.format(values[-1])
    return low if low == high else f"{low}-{high}"


def _require(rows, what: str):
    if not rows:
        raise MissingInput(f"no {what}")
    return rows


# ------------------------------------------------------------------------------------------ benchmarks

def ours_fig3b(nc: dict) -> Headline:
    acc = _require(nc.get("accuracy"), "accuracy rows in nc.json")
    by_nodes = [r for r in acc if r.get("rtt_ms") == 50.0]
    by_rtt = [r for r in acc if r.get("nodes") == 8]
    _require(by_nodes and by_rtt, "50 ms sweep or 8-node sweep in nc.json")
    errors = [r["median_error_ms"] for r in by_nodes]
    relative = [100 * r["median_relative"] for r in by_rtt]
    cost = nc.get("overhead") or []
    cpu = max((c["cpu_percent_max"] for c in cost), default=None)
    rss = max((c["rss_mb_mean"] for c in cost), default=None)
    rss_peak = max((c["rss_mb_max"] for c in cost), default=None)
    text = (f"median per-pair error {_span(errors)} ms for {_span([r['nodes'] for r in by_nodes], '{:d}')} nodes "
            f"at 50 ms RTT; {_span(relative)} % of the RTT for {_span([r['rtt_ms'] for r in by_rtt], '{:g}')} ms "
            "with 8 nodes")
    if cpu is not None:
        text += f"; agent CPU <= {cpu:.2f} %, RSS mean <= {rss:.1f} MB (peak {rss_peak:.1f} MB)"
    agrees = max(errors) < 3.5 and max(relative) < 6.0 and (cpu is None or (cpu < 1.0 and rss < 15.0))
    scale = f"{_span([r['nodes'] for r in acc], '{:d}')} nodes (paper: up to 128)"
    return Headline(text, agrees, scale, {"median_error_ms_max": max(errors), "relative_pct_max": max(relative),
                                          "cpu_percent_max": cpu, "rss_mb_max": rss})


def _placement(rows: list[dict], kind: str, evaluated_on: str = "estimate") -> dict:
    """{policy: {size: row}} for one scenario kind."""
    out: dict = {}
    for r in rows:
        if r.get("kind") == kind and r.get("evaluated_on") == evaluated_on:
            out.setdefault(r["policy"], {})[r["size"]] = r
    return out


def _worst(by_policy: dict, policy: str) -> str:
    return _span([1e3 * r["worst_max_s"] for r in by_policy.get(policy, {}).values()], "{:.0f}")


def _violating(by_policy: dict, policy: str) -> str:
    return _span([100 * r["violation_ratio_mean"] for r in by_policy.get(policy, {}).values()], "{:.1f}")


def ours_fig4(placement: dict) -> Headline:
    rows = _require([r for r in placement.get("summary") or [] if r.get("kind") == "mmog"], "MMOG rows in placement.json")
    est = _placement(rows, "mmog")
    sizes = sorted({r["size"] for r in rows})
    text = (f"worst-case E2E (coordinates) over {sizes[0]}-{sizes[-1]} cities: Pulsar (hash) {_worst(est, 'pulsar-hash')} ms, "
            f"AllPairs {_worst(est, 'allpairs')} ms, ePulsar {_worst(est, 'epulsar')} ms; violation ratio: hash "
            f"{_violating(est, 'pulsar-hash')} %, AllPairs {_violating(est, 'allpairs')} %, ePulsar "
            f"{_violating(est, 'epulsar')} %")
    claims = (placement.get("paper_claims") or {}).get("estimate") or {}
    worse = claims.get("mmog_hash_worse_than_both")
    similar = claims.get("mmog_epulsar_within_10pct_of_allpairs_worst_p95")
    if claims:
        text += (f" (hash worse than both: {'yes' if worse else 'no'}; ePulsar within 10 % of AllPairs: "
                 f"{'yes' if similar else 'no'}; hash violations: {'yes' if claims.get('mmog_hash_any_violations') else 'none'})")
    agrees = bool(worse and similar) if claims else None
    return Headline(text, agrees, f"{len(sizes)} topologies x {placement.get('seeds')} placements",
                    {"claims": claims})


def ours_fig5(placement: dict) -> Headline:
    rows = _require([r for r in placement.get("summary") or [] if r.get("kind") == "uav"], "UAV rows in placement.json")
    est = _placement(rows, "uav")
    sizes = sorted({r["size"] for r in rows})
    epulsar = list(est.get("epulsar", {}).values())
    text = (f"worst-case E2E (coordinates) over {sizes[0]}-{sizes[-1]} zones: ePulsar {_worst(est, 'epulsar')} ms, "
            f"AllPairs {_worst(est, 'allpairs')} ms, Pulsar (hash) {_worst(est, 'pulsar-hash')} ms; violation ratio: "
            f"ePulsar {_violating(est, 'epulsar')} %, hash {_violating(est, 'pulsar-hash')} %")
    agrees = bool(epulsar) and all(r["worst_max_s"] < 0.040 and r["violation_ratio_mean"] == 0 for r in epulsar)
    return Headline(text, agrees, f"{len(sizes)} topologies x {placement.get('seeds')} placements",
                    {"epulsar_worst_ms": max((1e3 * r["worst_max_s"] for r in epulsar), default=None)})


def ours_fig6(monitoring: dict) -> Headline:
    rows = _require(monitoring.get("rows"), "rows in monitoring.json")
    topics = max(r["topics"] for r in rows)
    top = {(r["policy"], r["clients_per_topic"]): r["zk_wire_net_Bps"] for r in rows if r["topics"] == topics}
    clients = sorted({c for _, c in top})
    _require(len(clients) >= 2, "two client counts in monitoring.json")
    rate = {p: [top.get((p, c)) for c in clients] for p in ("epulsar", "allpairs")}
    _require(all(v is not None for vs in rate.values() for v in vs), "both policies at every client count")

    def listed(values):
        return "/".join(f"{v:,.0f}" for v in values)

    text = (f"at {topics} topics with {'/'.join(map(str, clients))} clients per topic: ePulsar "
            f"{listed(rate['epulsar'])} B/s, AllPairs {listed(rate['allpairs'])} B/s "
            f"({rate['allpairs'][-1] / rate['epulsar'][-1]:.1f}x at {clients[-1]} clients)")
    # From 2 clients on (1 client has no consumer centroid to report), ePulsar's rate should not move.
    multi = [v for c, v in zip(clients, rate["epulsar"]) if c > 1] or rate["epulsar"]
    flat = max(multi) / min(multi) < 1.1
    grows = rate["allpairs"][-1] > 1.5 * rate["allpairs"][0]
    return Headline(text, flat and grows, f"topics {sorted({r['topics'] for r in rows})} x clients/topic {clients}",
                    {"epulsar_Bps": rate["epulsar"], "allpairs_Bps": rate["allpairs"]})


def ours_fig7a(migration: dict) -> Headline:
    rows = _require([r for r in migration.get("rows") or [] if r.get("figure") == "7a" and r.get("downtime_median_s")],
                    "Fig. 7a rows in migration.json")
    by = {(r["workflow"], r["wan_ms"]): 1e3 * r["downtime_median_s"] for r in rows}
    wans = sorted({w for _, w in by})
    enhanced = [by.get(("enhanced", w)) for w in wans]
    baseline = [by.get(("baseline", w)) for w in wans]
    _require(None not in enhanced + baseline, "both workflows at every WAN latency")
    gains = [b - e for e, b in zip(enhanced, baseline)]
    text = (f"median client downtime at {'/'.join(f'{w:g}' for w in wans)} ms one-way WAN: ePulsar "
            f"{'/'.join(f'{v:.0f}' for v in enhanced)} ms, Pulsar {'/'.join(f'{v:.0f}' for v in baseline)} ms")
    agrees = all(g > 0 for g in gains) and gains[-1] > gains[0]
    first = rows[0]
    return Headline(text, agrees, f"{first['topics']} topics at once (paper: 128), {first['executors']} executors",
                    {"enhanced_ms": enhanced, "baseline_ms": baseline})


def ours_fig7b(migration: dict) -> Headline:
    rows = _require([r for r in migration.get("rows") or [] if r.get("figure") == "7b" and r.get("completion_median_s")],
                    "Fig. 7b rows in migration.json")
    most = max(r["topics"] for r in rows)
    at = [r for r in rows if r["topics"] == most]
    enhanced = sorted((r["executors"], r["completion_median_s"]) for r in at if r["workflow"] == "enhanced")
    baseline = [r["completion_median_s"] for r in at if r["workflow"] == "baseline"]
    _require(enhanced and baseline, f"both workflows at {most} topics")
    per_executors = ", ".join(f"{s:.1f} s ({e} executor{'s' if e != 1 else ''})" for e, s in enhanced)
    text = (f"{most} topics at 40 ms: ePulsar {per_executors}; "
            f"Pulsar (sequential) {baseline[0]:.1f} s, median per topic from the decision")
    times = [s for _, s in enhanced]
    agrees = times == sorted(times, reverse=True) and times[-1] < baseline[0]
    return Headline(text, agrees, f"topics {sorted({r['topics'] for r in rows})}",
                    {"enhanced_s": dict(enhanced), "baseline_s": baseline[0]})


# ------------------------------------------------------------------------------------------ experiments

def _by_policy(rows: list[dict], scenario: str, topic_class: str | None) -> dict:
    chosen = [r for r in rows if r.get("scenario") == scenario]
    classes = sorted({r["topic_class"] for r in chosen})
    topic_class = topic_class if topic_class in classes else (classes[0] if classes else None)
    return {r["policy"]: r for r in chosen if r["topic_class"] == topic_class}


def ours_experiment(figure: str, violations: list[dict], recovery: list[dict], scenario: str,
                    topic_class: str | None = None, scale: str = "", migrations: dict | None = None) -> Headline:
    """Fig. 8 / Fig. 9 from `compare.policy_violations` (and `policy_recovery`) rows of one scenario.

    `migrations` ({policy: topic migrations in its runs}) says whether the policy moved topics at all.
    """
    by = _by_policy(violations, scenario, topic_class)
    _require(by, f"trace rows of {scenario} for any policy")
    moved = {r["policy"]: r for r in recovery if r.get("scenario") == scenario}
    parts = []
    for policy in sorted(by, key=lambda p: (POLICY_ORDER.index(p) if p in POLICY_ORDER else 9, p)):
        r = by[policy]
        part = (f"{POLICY_NAMES.get(policy, policy)} {100 * r['violation_ratio']:.1f} % above "
                f"{1e3 * r['threshold_s']:g} ms (p50 {1e3 * r['p50_s']:.0f}, p95 {1e3 * r['p95_s']:.0f} ms)")
        rec = moved.get(policy)
        if figure == "fig8" and rec and rec.get("relinks"):
            part += f", median {rec['median_s']:.1f} s above after a zone change ({rec['relinks']} changes)"
        if (migrations or {}).get(policy) is not None:
            part += f", {migrations[policy]} migrations"
        parts.append(part)
    cls = next(iter(by.values()))["topic_class"]
    text = f"{cls} messages: " + "; ".join(parts)
    ep = by.get("epulsar")
    if ep is None:
        agrees = None
    elif figure == "fig8":  # "under the threshold for most of the run", and not worse than hashing
        hashed = by.get("pulsar-hash")
        agrees = ep["violation_ratio"] < 0.5 and (hashed is None or ep["violation_ratio"] <= hashed["violation_ratio"])
    else:  # "consistently below the threshold": p95 under it
        agrees = ep["p95_s"] <= ep["threshold_s"]
    numbers = {p: {"violation_ratio": r["violation_ratio"], "p50_s": r["p50_s"], "p95_s": r["p95_s"]}
               for p, r in by.items()}
    return Headline(text, agrees, scale, numbers)


def ours_violations(violations: list[dict], scale: str = "") -> Headline:
    """Per scenario and policy, all topic classes pooled: the share of messages above their threshold."""
    _require(violations, "policy comparison rows")
    pooled: dict = {}
    for r in violations:
        total = pooled.setdefault((r["scenario"], r["policy"]), [0, 0])
        total[0] += r["violations"] or 0
        total[1] += r["messages"] or 0
    ratio = {key: v / m for key, (v, m) in pooled.items() if m}
    parts, agrees = [], None
    for scenario in sorted({s for s, _ in ratio}):
        mine = {p: r for (s, p), r in ratio.items() if s == scenario}
        order = sorted(mine, key=lambda p: (POLICY_ORDER.index(p) if p in POLICY_ORDER else 9, p))
        parts.append(f"{scenario}: " + ", ".join(f"{POLICY_NAMES.get(p, p)} {100 * mine[p]:.1f} %" for p in order))
        if "epulsar" in mine and "pulsar-hash" in mine:
            ok = mine["epulsar"] <= mine["pulsar-hash"]
            agrees = ok if agrees is None else agrees and ok
    return Headline("messages above the threshold: " + "; ".join(parts), agrees, scale,
                    {f"{s}/{p}": r for (s, p), r in ratio.items()})


BENCH_HEADLINES = {"fig3b": ("nc", ours_fig3b), "fig4": ("placement", ours_fig4), "fig5": ("placement", ours_fig5),
                   "fig6": ("monitoring", ours_fig6), "fig7a": ("migration", ours_fig7a),
                   "fig7b": ("migration", ours_fig7b)}
AGREEMENT_RULES = {
    "fig3b": "every median error < 3.5 ms and < 6 % of the RTT; CPU < 1 %, mean RSS < 15 MB",
    "fig4": "hash worse than both in worst case at every size, and ePulsar within 10 % of AllPairs",
    "fig5": "ePulsar's worst case < 40 ms with no violations at every zone count",
    "fig6": "ePulsar's rate within 10 % across client counts (from 2 clients on); AllPairs' grows > 1.5x",
    "fig7a": "ePulsar's median downtime below Pulsar's at every WAN latency, the gap growing with it",
    "fig7b": "more executors, shorter time; 16 executors faster than sequential Pulsar",
    "fig8": "ePulsar: under half of the messages above 40 ms, and no more than with hashing",
    "fig9": "ePulsar: p95 AoI latency at or below 100 ms",
    "violations": "ePulsar's violation ratio no higher than hashing's in each scenario",
}

__all__ = ["PAPER", "Claim", "Headline", "MissingInput", "BENCH_HEADLINES", "AGREEMENT_RULES", "ours_experiment", "ours_violations",
           "ours_fig3b", "ours_fig4", "ours_fig5", "ours_fig6", "ours_fig7a", "ours_fig7b"]
