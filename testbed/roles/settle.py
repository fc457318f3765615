"""Waiting for the network coordinates to converge, the one loop runs and benchmarks share.

Vivaldi coordinates start at the origin and need a while of gossip before their distances predict
RTTs (paper 5.3: within 6 % of the RTT once settled). A run waits a fixed `control.settle` before
its workload (the snapshots are recorded, marked `phase: settle`); a benchmark waits until the
median per-pair error has stayed under the bound for `hold` seconds, with `duration` as its cap.
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


def settle(snapshot: Callable[[], dict | None], duration: float, *, hold: float | None = None,
           min_wait: float = 0.0, poll: float = 5.0, say: Callable[[str], None] = _ignore,
           sink: Callable[[dict], None] = _ignore, supervise: Callable[[], list[dict]] | None = None) -> Settled:
    """Take coordinate snapshots until `duration` seconds have passed or, with `hold`, until they
    have been `converged` (testbed.nc.snapshots) for `hold` seconds in a row, not counted before
    `min_wait`. The first snapshot is taken at once, the next every `poll` seconds (never less than
    0.5 s, and no later than the end).

    `snapshot()`: the coordinates now, as `testbed.nc.snapshots.snapshot` builds them (the
    coordinates role's `snapshot`); None when there are no agents, which ends the wait at once.
    `say`: the progress line. `sink`: each snapshot (marked `phase: settle`) and each event of
    `supervise()` (called after every snapshot: restarts are events, never silent gaps).
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
                f"settle: until the coordinates stay converged for {hold:g}s (at most {duration:g}s)")
        snap["phase"] = "settle"
        sink(snap)
        for event in supervise() if supervise else ():
            sink(event)
        settled.snapshots.append((elapsed, snap))
        error = snap["median_error_ms"]
        say(f"settle: {elapsed:4.0f}s of {duration:g}s, {snap['agents']}/{snap['expected']} agents, "
            f"median NC error {error:.2f} ms" if error is not None else "settle: waiting for coordinates")
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
    return settled
