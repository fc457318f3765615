"""A live run's health over one span of it, for tests that judge each part of a run on its own (a
fault's window, the seconds a latency is measured in) rather than the run as a whole.

Each health row covers one second of the run, [elapsed_s, elapsed_s + 1). Two kinds of trouble:

- a stall the harness measured, in milliseconds: the hypervisor's steal, a publisher or delay line
  late, a client's event loop blocked. Anything timed across the span may be that much later, so a
  bound in seconds (a downtime, a handover) gets the span's `slack_s` added, and stays judged;
- a second the machine had no CPU to spare (cause `cpu`) or the harness lost frames of its own, that
  steal does not explain: nothing says how late the processes that were not measured (brokers, the
  topic manager) were, so a timing claim over it is not judged and the run is repeated
  (`unmeasured_within`, for tests.live.run_held).

A latency in milliseconds is judged only on messages sent in `clean_seconds`."""

from __future__ import annotations

import json
from pathlib import Path

from tests.live import LATENESS_FIELDS, explained_by_machine

MEASURED = ("publishers", "relays", "event-loops")  # causes whose size a row carries (LATENESS_FIELDS)


def health(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines() if line.strip()]


def _overlaps(row: dict, low: float, high: float) -> bool:
    start = float(row["elapsed_s"])
    return start < high and start + 1.0 > low


def unmeasured_within(out: Path, low: float, high: float, allowed: tuple[str, ...] = ()) -> list[float]:
    """The seconds overlapping [low, high] (run time) saturated by more than a measured lateness
    (`MEASURED`) or an expected cause (`allowed`: a fault that marks its own seconds), that the
    hypervisor (steal or a stalled VM) does not explain."""
    return [float(r["elapsed_s"]) for r in health(out)
            if _overlaps(r, low, high) and set(r.get("causes") or ()) - set(MEASURED) - set(allowed)
            and not explained_by_machine(r)]


def slack_s(out: Path, low: float, high: float) -> float:
    """How much later than its own doing anything timed across [low, high] (run time) may be: per
    second, the largest of the steal (both cores' together), the VM's stall (the stall probe's) and the
    harness's worst lateness, summed."""
    return sum(max(r.get("cpu_steal_ms") or 0.0, r.get("machine_stall_ms") or 0.0,
                   *((r.get(f) or 0.0) for f in LATENESS_FIELDS))
               for r in health(out) if _overlaps(r, low, high)) / 1e3


def clean_seconds(out: Path) -> set[int]:
    """The epoch seconds (a health row's `t`) with no saturation at all, neither the harness's nor
    the hypervisor's: the seconds a latency may be measured in."""
    return {int(r["t"]) for r in health(out) if not r.get("causes")}


MIGRATION_S = 1.0  # an enhanced migration's release, acquire and the clients' move (0.3-0.6 s measured)


def detection_window(control) -> float:
    """How long after a topic's clients change (a swarm moves, a player changes group, a topic is
    first placed) it may still sit where the change left it: the clients report their coordinates
    within an NC report period, their broker reports E(t) within a monitoring period, the topic
    manager's next round comes within another, and the migration takes MIGRATION_S. `control`: the
    scenario's."""
    return control.nc_report_period + 2 * control.monitoring_period + MIGRATION_S
