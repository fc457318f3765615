"""A live run's health over one span of it, for tests that judge each part of a run on its own (a
fault's window, the seconds a latency is measured in) rather than the run as a whole.

Each health row covers one second of the run, [elapsed_s, elapsed_s + 1). Three kinds of trouble:

- the machine held the VM (the hypervisor's steal, a stall every core's stall probe saw): from
  outside the system under test, measured in milliseconds. Anything timed across the span may be
  that much later, so a bound in seconds (a downtime, a handover) gets the span's `slack_s` added,
  and stays judged; a latency in milliseconds is not measured in such a second (`clean_seconds`);
- the clients' own lateness (a publisher late, an event loop blocked): the system under test's
  doing. It is never subtracted from the clients' own downtime nor a reason to drop a second: a
  failover that blocks the client loop 1.5 s has a downtime 1.5 s longer, and is judged so;
- a second the machine had no CPU to spare (cause `cpu`) or the harness lost frames of its own, that
  the machine does not explain: nothing says how late the processes that were not measured (brokers,
  the topic manager) were, so a timing claim over it is not judged and the run is repeated
  (`unmeasured_within`, for tests.live.run_held). A delay line late by a measured amount is judged
  through, unexcused like the clients' own lateness: it shares their cores, so a client that
  starves it must not be excused by it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests import claims
from tests.live import explained_by_machine, held_by_machine, machine_seconds

MEASURED = ("publishers", "relays", "event-loops")  # lateness a row measures: judged through, never excused


def health(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines() if line.strip()]


def _overlaps(row: dict, low: float, high: float) -> bool:
    start = float(row["elapsed_s"])
    return start < high and start + 1.0 > low


def unmeasured_within(out: Path, low: float, high: float, allowed: tuple[str, ...] = ()) -> list[float]:
    """The seconds overlapping [low, high] (run time) saturated by more than a measured lateness
    (`MEASURED`) or an expected cause (`allowed`: a fault that marks its own seconds),
    that the hypervisor (steal or a stalled VM) does not explain."""
    return [float(r["elapsed_s"]) for r in health(out)
            if _overlaps(r, low, high) and set(r.get("causes") or ()) - set(MEASURED) - set(allowed)
            and not explained_by_machine(r)]


def machine_slack_ms(row: dict) -> float:
    """How long the machine held the VM in one health row's second: the larger of the steal (both
    cores' together) and the stall probe's all-cores stall. The harness's and the clients' own
    lateness are not in it."""
    return max(row.get("cpu_steal_ms") or 0.0, row.get("machine_stall_ms") or 0.0)


def slack_s(out: Path, low: float, high: float) -> float:
    """How much later than its own doing anything timed across [low, high] (run time) may be: the
    machine's holds of the VM (`machine_slack_ms`) in its seconds, summed."""
    return sum(machine_slack_ms(r) for r in health(out) if _overlaps(r, low, high)) / 1e3


def clean_seconds(out: Path) -> set[int]:
    """The epoch seconds (a health row's `t`) the machine did not take: every second but those the
    guard attributes to the hypervisor (`explained_by_machine`). A second the harness or the clients
    were late in stays: its latencies are what the system under test delivered."""
    return {int(r["t"]) for r in health(out) if not (r.get("causes") and explained_by_machine(r))}


def too_few_clean(claim: str, out: Path, judged: int, needed: int, sent: int) -> None:
    """`claim` (a latency over `judged` of `sent` deliveries, `needed` for a median over seconds) when
    too few were sent in clean seconds: skipped, recorded, when the machine's seconds are why (with
    them counted there would have been enough), failed otherwise; judged (counted) when enough."""
    if judged >= needed:
        claims.judged(claim)
        return
    held = machine_seconds(out)
    claims.unjudged(claim, f"{judged} of {sent} deliveries in clean seconds, {needed} needed; {held_by_machine(held)}",
                    attributed_to_machine=bool(held) and sent >= needed)


MIGRATION_S = 1.0  # an enhanced migration's release, acquire and the clients' move (0.3-0.6 s measured)


def detection_window(control) -> float:
    """How long after a topic's clients change (a swarm moves, a player changes group, a topic is
    first placed) it may still sit where the change left it: the clients report their coordinates
    within an NC report period, their broker reports E(t) within a monitoring period, the topic
    manager's next round comes within another, and the migration takes MIGRATION_S. `control`: the
    scenario's."""
    return control.nc_report_period + 2 * control.monitoring_period + MIGRATION_S
