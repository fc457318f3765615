"""The end-to-end runs' headlines (paper 5.8: Fig. 8, Fig. 9, and the pooled violation ratios) from an
`analysis.compare_runs` result, each with a verdict by its rule in `analysis.headlines.AGREEMENT_RULES`.

Each rule is tied to the paper's mechanism: Fig. 8's transient violations are the windows after a
swarm enters another MEC zone (`compare.policy_handovers`), Fig. 9's spikes are migrations after a
group change moved a topic's subscribers (`compare.policy_reactions`). A rule is "not testable" when
the run's configured topology bounds every E2E latency below the threshold (`analysis.bounds`, per
run in the result's `runs`): then no placement could have failed it.
"""

from __future__ import annotations

from analysis import stats
from analysis.headlines import POLICY_NAMES, POLICY_ORDER, WITHIN_SHARE, Headline, require


def _by_policy(rows: list[dict], scenario: str, topic_class: str | None) -> dict:
    chosen = [r for r in rows if r.get("scenario") == scenario]
    classes = sorted({r["topic_class"] for r in chosen})
    topic_class = topic_class if topic_class in classes else (classes[0] if classes else None)
    return {r["policy"]: r for r in chosen if r["topic_class"] == topic_class}


def _ordered(policies) -> list[str]:
    return sorted(policies, key=lambda p: (POLICY_ORDER.index(p) if p in POLICY_ORDER else 9, p))


def scenario_bound(comparison: dict, scenario: str) -> tuple[float, str] | None:
    """(seconds, path): the worst E2E the scenario's configured topology allows, over its runs
    (`compare_runs` puts each run's `analysis.bounds` result in its row); None when unknown."""
    known = [(r["latency_bound_s"], r.get("bound_path") or "") for r in comparison.get("runs") or []
             if r.get("scenario") == scenario and r.get("latency_bound_s") is not None]
    return max(known) if known else None


def _untestable(comparison: dict, scenario: str, thresholds: list[float]) -> str:
    """Why no message of the scenario can exceed its threshold, or "" (see `analysis.bounds`)."""
    bound = scenario_bound(comparison, scenario)
    if bound is None or not thresholds or bound[0] >= min(thresholds):
        return ""
    return (f"the configured topology bounds E2E latency at {1e3 * bound[0]:.0f} ms ({bound[1]}) < "
            f"{1e3 * min(thresholds):g} ms: no placement can exceed the threshold")


def _with_ci(row: dict, column: str, scale: float, unit: str, fmt: str = "{:.1f}") -> str:
    """The pooled value of `column` (all messages of the policy's runs), then the 95 % interval of
    the mean over its runs when `compare_runs` gave one (`<column>_ci`, one sample per repeat)."""
    text = fmt.format(row[column] * scale) + unit
    interval = stats.from_dict(row.get(f"{column}_ci"))
    if interval is None:
        return text
    if not interval.has_interval:
        return text + f" (n={interval.n} run)"
    return text + f" (runs' mean {interval.text(fmt, scale, unit)})"


def _policy_parts(by: dict, comparison: dict, scenario: str) -> list[str]:
    migrations: dict = {}
    for r in comparison.get("runs") or []:
        if r.get("scenario") == scenario and r.get("migrations") is not None:
            migrations[r["policy"]] = migrations.get(r["policy"], 0) + r["migrations"]
    recovery = {r["policy"]: r for r in comparison.get("recovery") or [] if r.get("scenario") == scenario}
    parts = []
    for policy in _ordered(by):
        r = by[policy]
        part = (f"{POLICY_NAMES.get(policy, policy)} {_with_ci(r, 'violation_ratio', 100, ' %')} above "
                f"{1e3 * r['threshold_s']:g} ms (p50 {1e3 * r['p50_s']:.0f} ms, p95 {_with_ci(r, 'p95_s', 1e3, ' ms', '{:.0f}')})")
        rec = recovery.get(policy)
        if rec and rec.get("relinks"):
            part += f", median {rec['median_s']:.1f} s above after a zone change ({rec['relinks']} changes)"
        if policy in migrations:
            part += f", {migrations[policy]} migrations"
        parts.append(part)
    return parts


def _numbers(by: dict) -> dict:
    return {p: {"violation_ratio": r["violation_ratio"], "p50_s": r["p50_s"], "p95_s": r["p95_s"],
                **{k: r[k] for k in ("violation_ratio_ci", "p95_s_ci", "runs") if r.get(k) is not None}}
            for p, r in by.items()}


def ours_fig8(comparison: dict, scenario: str, topic_class: str | None = None, scale: str = "") -> Headline:
    """Fig. 8 from a `compare_runs` result: the transient violations are the handover windows (5.8.1)."""
    by = _by_policy(comparison.get("violations") or [], scenario, topic_class)
    require(by, f"trace rows of {scenario} for any policy")
    text = f"{next(iter(by.values()))['topic_class']} messages: " + "; ".join(_policy_parts(by, comparison, scenario))
    numbers = _numbers(by)
    if "epulsar" not in by:
        return Headline(text, None, scale, numbers)
    reaction = comparison.get("reaction_s")
    windows = next((r for r in comparison.get("handovers") or []
                    if r.get("scenario") == scenario and r.get("policy") == "epulsar"), None)
    thresholds = [r["threshold_s"] for r in comparison.get("violations") or []
                  if r.get("scenario") == scenario and r.get("policy") == "epulsar" and r.get("threshold_s")]
    why = _untestable(comparison, scenario, thresholds)
    if windows is None or reaction is None:
        return Headline(text + "; ePulsar's handover windows not measured", None, scale, numbers, why)
    numbers["handovers"] = windows
    limit = windows.get("window_limit_s") or reaction  # reaction plus the runs' migration time (analysis.bounds)
    if windows["relinks"]:
        how = (f"{reaction:g} s of reports and rounds + {limit - reaction:.1f} s of migration, as the runs measured"
               if limit > reaction else "reports and rounds")
        text += (f". ePulsar: {windows['relinks']} handovers, longest window {windows['longest_window_s']:.1f} s "
                 f"({windows['windows_long']} over {limit:.1f} s = {how}; {windows['windows_open']} cut short before "
                 f"it), ")
    else:
        text += ". ePulsar: no handover in its runs, "
        why = why or "no handover happened in ePulsar's runs"
    share = windows["within_ratio_outside"]
    text += (f"{100 * share:.1f} % of {windows['messages_outside']} messages within their threshold outside the "
             "windows" if share is not None else "no message outside the windows")
    agrees = None if why else (windows["windows_long"] == 0 and share is not None and share >= WITHIN_SHARE)
    return Headline(text, agrees, scale, numbers, why)


def ours_fig9(comparison: dict, scenario: str, topic_class: str | None = None, scale: str = "") -> Headline:
    """Fig. 9 from a `compare_runs` result: migrations follow the group changes, AoI latency stays low (5.8.2)."""
    by = _by_policy(comparison.get("violations") or [], scenario, topic_class)
    require(by, f"trace rows of {scenario} for any policy")
    text = f"{next(iter(by.values()))['topic_class']} messages: " + "; ".join(_policy_parts(by, comparison, scenario))
    numbers = _numbers(by)
    ep = by.get("epulsar")
    if ep is None:
        return Headline(text, None, scale, numbers)
    why = _untestable(comparison, scenario, [ep["threshold_s"]])
    reactions = next((r for r in comparison.get("reactions") or []
                      if r.get("scenario") == scenario and r.get("policy") == "epulsar"), None)
    if reactions is None:
        return Headline(text + "; ePulsar's migrations after group changes not measured", None, scale, numbers, why)
    numbers["reactions"] = reactions
    text += (f". ePulsar: {reactions['migrations_after_change']} of {reactions['migrations']} migrations within "
             f"{comparison.get('reaction_s', 0):g} s of a group change that moved the topic's subscribers "
             f"({reactions['changes']} AoI changes); AoI p95 {1e3 * ep['p95_s']:.0f} ms")
    followed = reactions["migrations_after_change"] > 0
    if not why:
        return Headline(text, followed and ep["p95_s"] < ep["threshold_s"], scale, numbers)
    # Bounded topology: the latency half holds by construction; the migrations can still be judged
    # when the control loop acted at all (with one-way distances it never estimates a violation).
    if reactions["migrations"] == 0:
        return Headline(text, None, scale, numbers, why + "; and ePulsar never migrated, so neither half can fail")
    text += f"; AoI latency below the threshold by construction ({why.split(' (')[0].removeprefix('the ')}), only " \
            "the migrations judged"
    return Headline(text, followed, scale, numbers)


EXPERIMENT_HEADLINES = {"fig8": ours_fig8, "fig9": ours_fig9}


def ours_violations(comparison: dict, scale: str = "") -> Headline:
    """Per scenario and policy, all topic classes pooled: the share of messages above their threshold."""
    violations = require(comparison.get("violations"), "policy comparison rows")
    pooled: dict = {}
    thresholds: dict = {}
    for r in violations:
        total = pooled.setdefault((r["scenario"], r["policy"]), [0, 0])
        total[0] += r["violations"] or 0
        total[1] += r["messages"] or 0
        thresholds.setdefault(r["scenario"], []).append(r["threshold_s"])
    ratio = {key: v / m for key, (v, m) in pooled.items() if m}
    parts, agrees, untestable = [], None, []
    for scenario in sorted({s for s, _ in ratio}):
        mine = {p: r for (s, p), r in ratio.items() if s == scenario}
        parts.append(f"{scenario}: " + ", ".join(f"{POLICY_NAMES.get(p, p)} {100 * mine[p]:.1f} %" for p in _ordered(mine)))
        why = _untestable(comparison, scenario, [t for t in thresholds[scenario] if t])
        if why:
            parts[-1] += " (not testable)"
            untestable.append(f"{scenario}: {why}")
        elif "epulsar" in mine and "pulsar-hash" in mine:
            ok = mine["epulsar"] <= mine["pulsar-hash"]
            agrees = ok if agrees is None else agrees and ok
    why = "; ".join(untestable) if agrees is None and untestable else ""
    return Headline("messages above the threshold: " + "; ".join(parts), agrees, scale,
                    {f"{s}/{p}": r for (s, p), r in ratio.items()}, why)


__all__ = ["EXPERIMENT_HEADLINES", "ours_fig8", "ours_fig9", "ours_violations", "scenario_bound"]
