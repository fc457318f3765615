"""The harness's error budget and the verdict on a run: was the testbed itself what set the latency?

A run is only evidence about the system under test while the harness keeps up: publishers send on
time, the delay line releases frames on time and drops none of its own, event loops are not
starved, and the machine has CPU to spare. Every second of the workload phase is judged against
`Budget`; consecutive bad seconds become `saturated` intervals with a cause a person can act on
("publishers late by up to 48 s: the machine cannot offer this load"). Pure logic: the samples come
from `testbed.monitor` (harness side) and from the clients (`LatenessHistogram`), the verdict goes to
summary.json, run.json, the end screen, the Parquet metadata and the figures.

A p99 within a budget is judged exactly from counts: p99 <= b  <=>  at most 1 % of the samples
exceed b, so clients and relays only count samples over the budget per second (cheap, mergeable
across processes), and keep a coarse histogram for the reported value.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass

#: Upper edges (ms) of the lateness histogram buckets; the last bucket is open.
BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)


@dataclass(frozen=True)
class Budget:
    """What the harness may add, per second of the run (issue "Paper scale", section 1).

    publisher_late_p99_ms: a message leaves its publisher at most this late (open loop: a late
        publisher's lateness is in every latency it produces). 2 ms, the p50 overhead the capacity
        knee allows: several UAVs share one Python process, and on an idle 2-core VM the seconds in
        which one of them reconnects (a migration) see 1-2.6 ms for a few of the others' messages.
    relay_late_p99_ms: the delay line releases a frame at most this long after its due time.
    loop_lag_max_ms: no client event loop is blocked longer (subscribers' receive callbacks wait
        for it: what a subscriber measures includes it).
    cpu_idle_min: share of the machine's CPU left idle; below it nats-server, relays and clients
        queue behind each other for a core.
    harness_drops: frames the relays' sockets lost (kernel receive-buffer drops, send errors): not
        the emulated link's loss or queue, which are the scenario's.
    """

    publisher_late_p99_ms: float = 2.0
    relay_late_p99_ms: float = 0.5
    loop_lag_max_ms: float = 10.0
    cpu_idle_min: float = 0.05
    harness_drops: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


BUDGET = Budget()


class LatenessHistogram:
    """Per-second lateness counts, mergeable across publishers and processes (dict form in JSON)."""

    def __init__(self):
        self.counts = [0] * (len(BUCKETS_MS) + 1)
        self.n = 0
        self.max_ms = 0.0

    def add(self, late_ms: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS_MS, late_ms)] += 1
        self.n += 1
        if late_ms > self.max_ms:
            self.max_ms = late_ms

    def merge(self, other: dict) -> None:
        for i, c in enumerate(other.get("counts", ())):
            if i < len(self.counts):
                self.counts[i] += int(c)
        self.n += int(other.get("n", 0))
        self.max_ms = max(self.max_ms, float(other.get("max_ms", 0.0)))

    def quantile_ms(self, q: float) -> float | None:
        """Upper edge of the bucket holding the q-quantile (the maximum for the open bucket)."""
        if not self.n:
            return None
        rank = q * self.n
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= rank and c:
                return min(BUCKETS_MS[i], self.max_ms) if i < len(BUCKETS_MS) else self.max_ms
        return self.max_ms

    def over(self, limit_ms: float) -> int:
        """Samples in buckets entirely above `limit_ms` (exact when `limit_ms` is a bucket edge)."""
        first = bisect.bisect_right(BUCKETS_MS, limit_ms)
        return sum(self.counts[first:])

    def as_dict(self) -> dict:
        return {"n": self.n, "max_ms": round(self.max_ms, 3), "counts": list(self.counts)}


MIN_SAMPLES = 100  # a second with fewer samples is judged as if it had this many


def over_p99(over: int, n: int) -> bool:
    """True when more than 1 % of n samples exceed the budget, i.e. their p99 is above it. Below
    MIN_SAMPLES a p99 is the maximum, so one late message among 40 would condemn its second: there
    the allowance is one sample, as it is in a second of exactly 100."""
    return n > 0 and over * 100 > max(n, MIN_SAMPLES)


def judge(row: dict, budget: Budget = BUDGET) -> list[str]:
    """The causes (short codes) that make one second of `row` saturated; [] when within budget.

    `row` keys (absent = not measured): publisher_n, publisher_over, relay_tx, relay_over,
    relay_harness_drops, relay_down_ms (a dead relay's link, within the second), loop_lag_max_ms,
    cpu_idle."""
    causes = []
    if over_p99(row.get("publisher_over", 0), row.get("publisher_n", 0)):
        causes.append("publishers")
    if over_p99(row.get("relay_over", 0), row.get("relay_tx", 0)):
        causes.append("relays")
    if row.get("relay_harness_drops", 0) > budget.harness_drops:
        causes.append("relay-drops")
    if row.get("relay_down_ms", 0) > 0:
        causes.append("relay-down")
    if (row.get("loop_lag_max_ms") or 0.0) > budget.loop_lag_max_ms:
        causes.append("event-loops")
    idle = row.get("cpu_idle")
    if idle is not None and idle < budget.cpu_idle_min:
        causes.append("cpu")
    return causes


#: The lateness fields of a health row: how late the harness was in that second.
LATENESS_FIELDS = ("relay_late_max_ms", "publisher_late_max_ms", "loop_lag_max_ms")


#: The stall probe's period (`testbed.stallprobe`): a stall of S ms shows in it as at least S - this.
STALL_PROBE_PERIOD_MS = 2.0
#: The shortest all-cores stall that counts: on a running VM a SCHED_FIFO 99 thread wakes within
#: ~0.1-0.4 ms, so every core's probe late at once for a millisecond means the guest did not run.
STALL_MIN_MS = 1.0


def explained_by_machine(row: dict) -> bool:
    """True when the machine, not the harness's load, accounts for how late the harness was in this
    second: the hypervisor held the VM's cores for at least that long, either as steal time
    (/proc/stat, ms) or as a stall in which every core's stall probe was late at once
    (`machine_stall_ms`, a lower bound by up to the probe's period, so that is allowed; a stall does
    not explain a second whose CPU was short too). A stall of S ms can delay a frame, a publish or an
    event loop by up to S ms, so the second says nothing about the harness's own load. A second late
    by more than either (none included) is the harness's: a guard that flagged every second would be
    caught by the seconds without them. A dead relay or frames its sockets lost are the emulation's
    failures, whatever the machine did."""
    causes = set(row.get("causes") or ())
    if causes & {"relay-down", "relay-drops"}:
        return False
    late = max((row.get(field) or 0.0) for field in LATENESS_FIELDS)
    steal = row.get("cpu_steal_ms") or 0.0
    if steal > 0 and steal >= late:
        return True
    stall = row.get("machine_stall_ms") or 0.0
    return stall >= STALL_MIN_MS and "cpu" not in causes and stall + STALL_PROBE_PERIOD_MS >= late


CAUSE_TEXT = {
    "publishers": ("publisher_late_max_ms", "publishers late by up to {value}"),
    "relays": ("relay_late_max_ms", "delay line late by up to {value}: emulated links are longer than configured"),
    "relay-drops": ("relay_harness_drops", "delay line lost {value} frames of its own (socket buffers full)"),
    "relay-down": ("relay_down_ms", "a delay line died and was restarted: its link forwarded nothing for {value}"),
    "event-loops": ("loop_lag_max_ms", "client event loops blocked for up to {value}: receive times are late"),
    "cpu": ("cpu_idle", "the machine's CPU was {value} idle: processes queue for a core"),
}
#: Outside load worth naming: cores used by processes that are not the run's (`other` in `cpu_by_class`).
OUTSIDE_CORES_MIN = 0.25
#: Why clients were late, by what the CPU figures of their seconds show (`_why_late`).
WHY_LATE = {
    "outside": "processes outside the run took up to {cores:.2f} cores{names}: repeat it on a quiet machine",
    "load": "the machine cannot offer this load",
    "own": "the CPU was at least {idle:.0f} % idle: the run's own processes fell behind, not the machine's capacity",
}

#: Appended to a saturated interval's cause when the hypervisor took CPU from the VM in it (/proc/stat
#: steal) but less than the harness was late: the load is still what overloaded the seconds.
STEAL_TEXT = " (the hypervisor held this VM's cores for up to {value} a second then: steal time)"
#: Appended likewise when every core's stall probe was late at once, for less than the harness was.
STALL_TEXT = " (every core of this VM stopped at once for up to {value} then: a stalled VM)"
#: The cause of an interval whose every second the machine explains (`explained_by_machine`): not
#: evidence either, but the load is not what made it late; such a run is worth repeating rather than
#: scaling down.
BY_MACHINE_TEXT = ("the hypervisor held this VM's cores ({held}), as long as the harness was late ({late}): "
                   "the machine, not this load")


def intervals(rows: list[dict], budget: Budget = BUDGET) -> list[dict]:
    """Runs of consecutive saturated seconds: [{"from_s", "to_s", "cause", "causes"}], each cause
    worded with its worst value in the interval. `rows` carry "elapsed_s" and their "causes"
    (recomputed with `judge` when absent)."""
    found: list[dict] = []
    current: dict | None = None
    for row in sorted(rows, key=lambda r: r["elapsed_s"]):
        causes = row.get("causes")
        if causes is None:
            causes = judge(row, budget)
        if not causes:
            current = None
            continue
        start = float(row["elapsed_s"])
        by_machine = explained_by_machine(row)
        if current is None or start > current["to_s"] + 1e-3 or current["by_machine"] != by_machine:
            current = {"from_s": start, "to_s": start + 1.0, "worst": {}, "steal_ms": 0.0, "stall_ms": 0.0,
                       "by_machine": by_machine, "idle_min": None, "outside": 0.0, "names": {}}
            found.append(current)
        current["to_s"] = start + 1.0
        current["steal_ms"] = max(current["steal_ms"], row.get("cpu_steal_ms") or 0.0)
        current["stall_ms"] = max(current["stall_ms"], row.get("machine_stall_ms") or 0.0)
        _note_cpu(current, row)
        for cause in causes:
            value = row.get(CAUSE_TEXT[cause][0])
            best = current["worst"].get(cause)
            if value is None or best is None:
                current["worst"][cause] = best if value is None else value
            else:
                current["worst"][cause] = min(best, value) if cause == "cpu" else max(best, value)
    for interval in found:
        worst = interval.pop("worst")
        interval["causes"] = sorted(worst)
        why = _why_late(interval.pop("idle_min"), interval.pop("outside"), interval.pop("names"), interval["causes"])
        if interval["by_machine"]:
            late = ", ".join(f"{c} {_format(c, worst[c])}" for c in sorted(worst) if worst[c] is not None
                             and CAUSE_TEXT[c][0] in LATENESS_FIELDS) or "no lateness measured"
            held = [f"steal up to {_format('steal', interval['steal_ms'])} a second"] if interval["steal_ms"] else []
            held += [f"every core stopped for up to {_format('stall', interval['stall_ms'])} at once"
                     ] if interval["stall_ms"] >= STALL_MIN_MS else []
            interval["cause"] = BY_MACHINE_TEXT.format(held="; ".join(held), late=late)
            continue
        interval["cause"] = "; ".join(CAUSE_TEXT[c][1].format(value=_format(c, worst[c])) for c in sorted(worst)) + why
        if interval["steal_ms"] > 0:
            interval["cause"] += STEAL_TEXT.format(value=_format("steal", interval["steal_ms"]))
        if interval["stall_ms"] >= STALL_MIN_MS:
            interval["cause"] += STALL_TEXT.format(value=_format("stall", interval["stall_ms"]))
    return found


def _note_cpu(interval: dict, row: dict) -> None:
    """What an interval's rows say of the CPU: the least idle share, the most outside load and who."""
    idle = row.get("cpu_idle")
    if idle is not None:
        interval["idle_min"] = idle if interval["idle_min"] is None else min(interval["idle_min"], idle)
    interval["outside"] = max(interval["outside"], (row.get("cpu_by_class") or {}).get("other", 0.0))
    for name, cores in (row.get("cpu_other_top") or {}).items():
        interval["names"][name] = max(interval["names"].get(name, 0.0), cores)


def _why_late(idle_min: float | None, outside: float, names: dict, causes: list[str]) -> str:
    """Why the clients or the CPU fell short in an interval, as far as its CPU figures tell: outside
    load, this run's load on a machine with no CPU left, or its own processes with CPU to spare.
    Nothing when no lateness or CPU cause needs it, or the CPU was not measured."""
    if not set(causes) & {"publishers", "event-loops", "cpu"} or idle_min is None:
        return ""
    if outside >= OUTSIDE_CORES_MIN:
        top = sorted(names.items(), key=lambda kv: -kv[1])[:3]
        listed = f" ({', '.join(f'{n} {c:.2f}' for n, c in top)})" if top else ""
        return "; " + WHY_LATE["outside"].format(cores=outside, names=listed)
    if "cpu" in causes or idle_min < 2 * BUDGET.cpu_idle_min:
        return "; " + WHY_LATE["load"]
    return "; " + WHY_LATE["own"].format(idle=100 * idle_min)


def _format(cause: str, worst: float | None) -> str:
    if worst is None:
        return "an unmeasured amount"
    if cause == "cpu":
        return f"{100 * worst:.0f} %"
    if cause == "relay-drops":
        return f"{worst:.0f}"
    return f"{worst / 1000:.1f} s" if worst >= 1000 else f"{worst:.1f} ms"


def verdict(rows: list[dict], budget: Budget = BUDGET) -> dict:
    """The run's verdict for summary.json and run.json: valid, or the saturated intervals."""
    found = intervals(rows, budget)
    merged = LatenessHistogram()
    relay_tx = relay_over = 0
    relay_max = 0.0
    for row in rows:
        if row.get("publisher_hist"):
            merged.merge(row["publisher_hist"])
        relay_tx += row.get("relay_tx", 0)
        relay_over += row.get("relay_over", 0)
        relay_max = max(relay_max, row.get("relay_late_max_ms") or 0.0)
    idles = [row["cpu_idle"] for row in rows if row.get("cpu_idle") is not None]
    sampled = [row for row in rows if row.get("cpu_by_class") is not None]
    classes: dict[str, float] = {}
    for row in sampled:
        for name, cores in row["cpu_by_class"].items():
            classes[name] = classes.get(name, 0.0) + cores / len(sampled)
    busy = [row["cpu_busy"] for row in sampled if row.get("cpu_busy") is not None]
    result = {
        "valid": bool(rows) and not found,
        "seconds": len(rows),
        "saturated_seconds": sum(1 for row in rows if row.get("causes", judge(row, budget))),
        "machine_seconds": sum(1 for row in rows if row.get("causes", judge(row, budget)) and explained_by_machine(row)),
        "saturated": found,
        "budget": budget.as_dict(),
        "publisher_late_p99_ms": merged.quantile_ms(0.99),
        "publisher_late_max_ms": merged.max_ms if merged.n else None,
        "relay_late_share_over_budget": relay_over / relay_tx if relay_tx else None,
        "relay_late_max_ms": relay_max if relay_tx else None,
        "cpu_idle_min": min(idles) if idles else None,
        "cpu_idle_mean": sum(idles) / len(idles) if idles else None,
        "cpu_by_class": {k: round(v, 3) for k, v in sorted(classes.items())},
        "cpu_busy_mean": round(sum(busy) / len(busy), 3) if busy else None,
        "cpu_unaccounted_share": _unaccounted_share(sampled),
        "cpu_unsampled_seconds": len(rows) - len(sampled),
        "cpu_steal_ms": round(sum(row.get("cpu_steal_ms") or 0.0 for row in rows), 1),
        "machine_stall_max_ms": max((row.get("machine_stall_ms") or 0.0 for row in rows), default=0.0),
        "cpu_wait_us_max_by_class": _max_by_class(rows, "cpu_wait_us_by_class"),
        "stalls_measured": any("machine_stall_ms" in row for row in rows),
        "unmeasured": [] if rows else ["no health samples: the run ended before its workload phase"],
    }
    result["validity"] = validity(result)
    return result


def validity(result: dict) -> str:
    """The run's validity in the one wording every place shows (progress line, end screen,
    summary.json, the view, the figures): how many of its judged seconds were within budget."""
    seconds = result.get("seconds") or 0
    if not seconds:
        return "not measured (no workload phase)"
    return f"valid {seconds - (result.get('saturated_seconds') or 0)} of {seconds} s"


def _unaccounted_share(rows: list[dict]) -> float | None:
    """The share of the machine's busy time over `rows` that no class accounts for."""
    busy = sum(row.get("cpu_busy") or 0.0 for row in rows)
    if busy <= 0:
        return None
    return round(sum(row.get("cpu_unaccounted") or 0.0 for row in rows) / busy, 4)


def _max_by_class(rows: list[dict], field: str) -> dict[str, float]:
    """Per class, the worst second's value of a per-class field of the rows."""
    worst: dict[str, float] = {}
    for row in rows:
        for name, value in (row.get(field) or {}).items():
            worst[name] = max(worst.get(name, 0.0), value)
    return dict(sorted(worst.items()))


def describe(result: dict) -> str:
    """One line for the end screen and the paper index."""
    if not result.get("seconds"):
        return "harness: not measured (no workload phase)"
    if result["valid"]:
        stall = result.get("machine_stall_max_ms") or 0.0
        stopped = f"; the VM stopped for up to {stall:.1f} ms at once" if stall >= STALL_MIN_MS else ""
        return (f"harness: {validity(result)} (within budget in every second; publishers p99 late "
                f"{_ms(result['publisher_late_p99_ms'])}, CPU idle >= {100 * (result['cpu_idle_min'] or 0):.0f} %"
                f"{stopped})")
    spans = ", ".join(f"t={max(0.0, i['from_s']):.0f}-{i['to_s']:.0f} s" for i in result["saturated"][:4])
    more = f" and {len(result['saturated']) - 4} more" if len(result["saturated"]) > 4 else ""
    ours = [i for i in result["saturated"] if not i.get("by_machine", i.get("by_steal"))] or result["saturated"]
    worst = max(ours, key=lambda i: i["to_s"] - i["from_s"])
    held = machine_seconds(result)
    by_machine = f", {held} of them the hypervisor's (steal or a stalled VM), not the load" if held else ""
    return (f"harness: {validity(result)}; SATURATED {result['saturated_seconds']} s{by_machine} ({spans}{more}): "
            f"{worst['cause']}")


def machine_seconds(result: dict) -> int:
    """Saturated seconds of a verdict that the machine explains (`steal_seconds` in runs recorded
    before the stall probe)."""
    return int(result.get("machine_seconds", result.get("steal_seconds")) or 0)


def load_saturated(result: dict) -> bool:
    """True when some saturated second of a verdict is the harness's load, not the machine's."""
    return bool(result.get("saturated_seconds")) and result["saturated_seconds"] > machine_seconds(result)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"
