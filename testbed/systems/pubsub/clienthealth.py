"""Per-second health of one client process, for the run's saturation guard (`testbed.health`).

Two things only the client can see: how late its publishers send (open loop: message i is due at
start + i/rate, and every millisecond it leaves late is in the latency it produces) and how long
its event loop is blocked (a subscriber's receive time is taken in a callback that waits for the
loop). One JSON line per second goes to a file in the run's logs, which the harness's monitor
merges across processes: {"s": epoch second, "hist": publisher lateness histogram, "loop_lag_max_ms"}.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from testbed.health import LatenessHistogram

TICK_S = 0.05  # the loop-lag probe's period: short enough to see a blocked second, cheap at 20 wakeups/s


class ClientHealth:
    def __init__(self, path: Path | None):
        self.path = Path(path) if path else None
        self.second = int(time.time())
        self.hist = LatenessHistogram()
        self.loop_lag_max_ms = 0.0

    def published(self, late_s: float, now: float) -> None:
        """A message left its publisher `late_s` after its due time, at `now` (epoch s)."""
        self._roll(now)
        self.hist.add(max(0.0, late_s) * 1e3)

    def _roll(self, now: float) -> None:
        second = int(now)
        if second == self.second:
            return
        if self.path is not None and (self.hist.n or self.loop_lag_max_ms):
            row = {"s": self.second, "hist": self.hist.as_dict(), "loop_lag_max_ms": round(self.loop_lag_max_ms, 3)}
            with self.path.open("a") as handle:
                handle.write(json.dumps(row, separators=(",", ":")) + "\n")
        self.second, self.hist, self.loop_lag_max_ms = second, LatenessHistogram(), 0.0

    async def run(self) -> None:
        """Measure how late the loop wakes this task (its lag), and write each finished second
        (with no file to write to, nothing: the probe's wakeups would only cost)."""
        if self.path is None:
            await asyncio.Event().wait()
        while True:
            before = time.monotonic()
            await asyncio.sleep(TICK_S)
            lag_ms = (time.monotonic() - before - TICK_S) * 1e3
            self._roll(time.time())
            self.loop_lag_max_ms = max(self.loop_lag_max_ms, lag_ms)

    def close(self) -> None:
        self._roll(time.time() + 1.0)
