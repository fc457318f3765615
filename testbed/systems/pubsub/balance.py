"""What a run's load balancing did, from the topic manager's events: how uneven the brokers were
(`loads`: the coefficient of variation of their message rates every round), how full the busiest
broker link got, which bundles Pulsar's load manager split and unloaded, which topics ePulsar's
overload branch shed, and what the moves cost the clients (downtime from a redirect or a
disconnect to the first message through the new broker).
"""

from __future__ import annotations

from testbed.procs import percentile


def summarize(events: list[dict]) -> dict:
    loads = [e for e in events if e.get("type") == "loads" and e.get("imbalance") is not None]
    cov = [e["imbalance"] for e in loads]
    busiest = max(((b["network_out"], name, e.get("round")) for e in loads for name, b in e["brokers"].items()),
                  default=None)
    downs = sorted(e["downtime_s"] for e in events
                   if e.get("type") == "downtime" and e.get("reason") in ("redirect", "disconnect"))
    unloads = [e for e in events if e.get("type") == "bundle_unload"]
    return {
        "rounds": len(loads),
        "imbalance_mean": sum(cov) / len(cov) if cov else None,
        "imbalance_max": max(cov, default=None),
        "imbalance_end": sum(cov[-3:]) / len(cov[-3:]) if cov else None,  # the last three rounds
        "busiest_link": {"broker": busiest[1], "use": busiest[0], "round": busiest[2]} if busiest else None,
        "splits": sum(e.get("type") == "bundle_split" for e in events),
        "unloads": len(unloads),
        "unloads_by": {by: sum(e.get("by") == by for e in unloads) for by in sorted({e.get("by") for e in unloads})},
        "topics_unloaded": sum(len(e.get("topics", ())) for e in unloads),
        "overload_sheds": sum(len(e.get("topics", ())) for e in events if e.get("type") == "overload_shed"),
        "shed_never_moved": shed_never_moved(events),
        "downtimes": len(downs),
        "downtime_p50_s": percentile(downs, 0.5),
        "downtime_max_s": downs[-1] if downs else None,
    }


def shed_never_moved(events: list[dict]) -> dict:
    """Topics ePulsar's overload branch shed in some round but never moved in any: {topic: {"rounds",
    "why"}}, why from the last round (each candidate the policy ranked and why it could not host it,
    or that it ranked none)."""
    sheds = [e for e in events if e.get("type") == "overload_shed" and "moved" in e]
    moved = {t for e in sheds for t, to in e["moved"].items() if to is not None}
    stuck: dict[str, dict] = {}
    for e in sheds:
        for topic in e["topics"]:
            if topic in moved:
                continue
            candidates = e.get("candidates", {}).get(topic) or []
            why = "; ".join(f"{c['broker']}: {c['refused']}" for c in candidates if c["refused"])
            entry = stuck.setdefault(topic, {"rounds": 0})
            entry["rounds"] += 1
            entry["why"] = why or "the policy ranked no broker for it"
    return stuck


def end_screen(balance: dict) -> list[str]:
    if not balance["rounds"]:
        return []
    link = balance["busiest_link"]
    moves = (f"{balance['splits']} bundle splits, {balance['unloads']} bundle unloads "
             f"({', '.join(f'{n} by {by}' for by, n in balance['unloads_by'].items()) or 'none'}; "
             f"{balance['topics_unloaded']} topics), {balance['overload_sheds']} topics shed by ePulsar's overload branch")
    cost = (f"client downtime p50 {balance['downtime_p50_s']:.2f} s, max {balance['downtime_max_s']:.2f} s over "
            f"{balance['downtimes']} moves" if balance["downtimes"] else "no client downtime")
    lines = [f"load balance: imbalance (CoV of broker msg rates) mean {balance['imbalance_mean']:.2f}, "
             f"max {balance['imbalance_max']:.2f}, last 3 rounds {balance['imbalance_end']:.2f}; busiest link "
             f"{100 * link['use']:.0f} % out ({link['broker']}, round {link['round']})",
             f"load balance: {moves}; {cost}"]
    stuck = sorted(balance.get("shed_never_moved", {}).items(), key=lambda item: -item[1]["rounds"])
    lines += [f"load balance: {topic} shed in {entry['rounds']} rounds, never moved: {entry['why']}"
              for topic, entry in stuck[:3]]
    if len(stuck) > 3:
        lines.append(f"load balance: {len(stuck) - 3} more topics shed and never moved (summary.json: balance)")
    return lines
