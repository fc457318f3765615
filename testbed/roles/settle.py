"""Waiting for the network coordinates to converge, the one loop runs and benchmarks share.

Vivaldi coordinates start at the origin and need a while of gossip before their distances predict
RTTs (paper 5.3: within 6 % of the RTT once settled), and the short same-site paths need longer
still (docs/results/2026-11-paper.md: a zone's broker and NC proxy, 2 ms apart, were estimated
17-31 ms apart after 20-50 s).
So a wait is a criterion with a cap: the snapshots' `converged` (testbed.nc.snapshots.Criterion) must
hold for `hold` seconds in a row, or the cap `duration` ends the wait unsettled, which is recorded
(a `settle_end` event with the errors at that moment) and said, never silent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


def _ignore(_value) -> None:
    pass


@dataclass
class Settled:
    """What the wait saw: every snapshot with its seconds since the start, when the held convergence
    began (None if it never held, or nobody asked for it) and how long the wait took."""

    snapshots: list[tuple[float, dict]] = field(default_factory=list)
    converged_at: float | None = None
    waited: float = 0.0

    @property
    def last(self) -> dict | None:
        return self.snapshots[-1][1] if self.snapshots else None

    def end_event(self, cap: float, hold: float | None) -> dict:
        """The `settle_end` event: whether the criterion held, and every error at that moment."""
        last = self.last or {}
        keys = ("agents", "expected", "median_error_ms", "p95_error_ms", "median_relative", "same_site_pairs",
                "same_site_max_error_ms", "same_site_median_error_ms", "unmet")
        return {"type": "settle_end", "time": time.time(), "settled": self.converged_at is not None,
                "waited_s": round(self.waited, 3), "cap_s": cap, "hold_s": hold, "converged_at_s":
                None if self.converged_at is None else round(self.converged_at, 3),
                **{key: last.get(key) for key in keys}}


def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def describe_end(end: dict) -> str:
    """One line for the console and the end screen."""
    errors = (f"median error {_ms(end['median_error_ms'])}"
              + (f" ({end['median_relative']:.1%})" if end.get("median_relative") is not None else "")
              + (f", same-site worst {_ms(end['same_site_max_error_ms'])} over {end['same_site_pairs']} pairs"
                 if end.get("same_site_pairs") else ""))
    if end["settled"]:
        return f"settle: converged after {end['waited_s']:.0f}s (held {end['hold_s']:g}s): {errors}"
    why = "; ".join(end.get("unmet") or []) or "no convergence asked for"
    return f"settle: UNSETTLED at the {end['cap_s']:g}s cap ({why}): {errors}; the workload starts anyway"


def settle(snapshot: Callable[[], dict | None], duration: float, *, hold: float | None = None,
           min_wait: float = 0.0, poll: float = 5.0, say: Callable[[str], None] = _ignore,
           sink: Callable[[dict], None] = _ignore, supervise: Callable[[], list[dict]] | None = None,
           criterion: str = "") -> Settled:
    """Take coordinate snapshots until `duration` seconds (the cap) have passed or, with `hold`,
    until they have been `converged` (testbed.nc.snapshots) for `hold` seconds in a row, not counted
    before `min_wait`. The first snapshot is taken at once, the next every `poll` seconds (never less
    than 0.5 s, and no later than the cap).

    `snapshot()`: the coordinates now, as `testbed.nc.snapshots.snapshot` builds them (the
    coordinates role's `snapshot`); None when there are no agents, which ends the wait at once.
    `say`: the progress lines (`criterion` names the rule in the first). `sink`: each snapshot
    (marked `phase: settle`), each event of `supervise()` (called after every snapshot: restarts are
    events, never silent gaps) and, with `hold`, the closing `settle_end` event (`Settled.end_event`).
    """
    settled = Settled()
    if duration <= 0:
        return settled
    started = time.monotonic()
    below_since = None
    while True:
        elapsed = time.monotonic() - started
        snap = snapshot()
        if snap is None:
            break
        if not settled.snapshots:
            say(f"settle: {duration:g}s for the network coordinates to converge" if hold is None else
                f"settle: until the coordinates stay converged{' (' + criterion + ')' if criterion else ''} "
                f"for {hold:g}s (at most {duration:g}s)")
        snap["phase"] = "settle"
        sink(snap)
        for event in supervise() if supervise else ():
            sink(event)
        settled.snapshots.append((elapsed, snap))
        error, local = snap["median_error_ms"], snap.get("same_site_max_error_ms")
        say(f"settle: {elapsed:4.0f}s of {duration:g}s, {snap['agents']}/{snap['expected']} agents, "
            f"median NC error {error:.2f} ms" + (f", same-site worst {local:.2f} ms" if local is not None else "")
            if error is not None else "settle: waiting for coordinates")
        if hold is not None:
            if snap["converged"] and elapsed >= min_wait:
                below_since = elapsed if below_since is None else below_since
                if elapsed - below_since >= hold:
                    settled.converged_at = below_since
                    break
            else:
                below_since = None
        if elapsed >= duration:
            break
        time.sleep(min(poll, max(0.5, duration - elapsed)))
    settled.waited = time.monotonic() - started
    if hold is not None and settled.snapshots:
        end = settled.end_event(duration, hold)
        sink(end)
        say(describe_end(end))
    return settled
