"""What a BAD workload offers (testbed.load asks through the manifest)."""

from __future__ import annotations


def bad(scenario, topology) -> tuple[float, float]:
    """(results/s published, deliveries/s) of the BAD plan at its peak (the busiest moment of the
    rate surges): each BE subscription's records per period, times its FE subscriptions for the
    deliveries. Subscription sharing does not reduce deliveries, only what crosses to the brokers."""
    from collections import Counter

    from testbed.systems.bad.plan import bad_plan, results_at

    nodes = [(n.name, n.site, n.members) for n in topology.nodes.values() if n.role == "subscriber"]
    plan = bad_plan(scenario.workload.bad, scenario.workload.message_size, nodes, scenario.seed, scenario.duration)
    holders = Counter(k for s in plan["subscribers"] for k in s["subs"])
    peak = (0.0, 0.0)
    for t in [0.0] + [s["at"] for s in plan["surges"]]:
        per_s = [results_at(plan, k, t) / be["period"] for k, be in enumerate(plan["be"])]
        peak = max(peak, (sum(per_s), sum(r * holders[k] for k, r in enumerate(per_s))), key=lambda p: p[1])
    return peak
