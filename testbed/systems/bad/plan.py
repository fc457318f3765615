"""The BAD workload as data: drawn once from the scenario's `workload.bad` block and seed, written
to the run's directory, read by the back end, the coordinator and every subscriber process.

BE subscription k is one parameter value of one channel: its results go to subject
`bad.r.<channel>.<p>` (trace topic `<channel>-<p>`, of class `<channel>`) and its rate is
lambda_k = results x message_size / period bytes/s (times a surge's factor while one lasts). Its
results come out `offset` after each execution starts: the p-th of a channel's n subscriptions at
(p - 1) / n of the channel's runtime.
"""

from __future__ import annotations

import numpy as np

RESULTS = "bad.r"  # result subjects: bad.r.<channel>.<p>


def result_subject(channel: str, param: int) -> str:
    return f"{RESULTS}.{channel}.{param}"


def subscriber_id(node: str, member: int) -> str:
    return f"{node}-{member}"


def bad_plan(spec, message_size: float, nodes: list[tuple[str, str, int]], seed: int, duration: float) -> dict:
    """`spec`: the scenario's workload.bad; `nodes`: (node, site, subscribers) of the subscriber nodes."""
    rng = np.random.default_rng(seed)
    be, weights = [], []
    for c in spec.channels:
        for p in range(1, c.subscriptions + 1):
            be.append({"channel": c.name, "param": p, "subject": result_subject(c.name, p), "topic": f"{c.name}-{p}",
                       "period": c.period, "results": c.results, "rate": c.results * message_size / c.period,
                       "offset": c.runtime * (p - 1) / c.subscriptions})
            weights.append(1.0 / p ** spec.zipf)
    weights = np.asarray(weights) / sum(weights)
    subscribers = []
    for node, site, members in nodes:
        for m in range(1, members + 1):
            count = int(rng.integers(spec.subscriptions.min, spec.subscriptions.max + 1))
            subs = sorted(int(k) for k in rng.choice(len(be), size=count, replace=False, p=weights))
            subscribers.append({"id": subscriber_id(node, m), "node": node, "site": site, "subs": subs})
    surges = []
    if spec.surge is not None:
        s = spec.surge
        count = max(1, round(s.share * len(be)))
        at = s.every
        while at < duration:
            chosen = sorted(int(k) for k in rng.choice(len(be), size=count, replace=False))
            surges.append({"at": at, "until": at + s.hold, "subs": chosen, "factor": s.factor})
            at += s.every
    return {"message_size": int(message_size), "channels": [{"name": c.name, "period": c.period} for c in spec.channels],
            "be": be, "subscribers": subscribers, "surges": surges}


def factor_at(plan: dict, k: int, t: float) -> float:
    """BE subscription k's result multiplier at `t` seconds into the run (overlapping surges multiply)."""
    factor = 1.0
    for s in plan["surges"]:
        if s["at"] <= t < s["until"] and k in s["subs"]:
            factor *= s["factor"]
    return factor


def results_at(plan: dict, k: int, t: float) -> int:
    """How many result records BE subscription k yields at an execution at `t`."""
    return max(1, round(plan["be"][k]["results"] * factor_at(plan, k, t)))
