"""The run's timeline kept moving: when the harness's main loop has not come round for `limit_s`, the
run stops, saying where the loop was stuck, instead of holding the machine for as long as the stuck
call takes. An MMOG capacity point 33 times past what this VM carries held it ~20 minutes with its
timeline at 0 s of 40 (its topic managers lost their leadership to an overloaded ZooKeeper, and the
run was interrupted by hand); nothing said which call held it.

The watchdog is a thread; on a stall it records the main thread's stack and sends the main thread
SIGUSR2, whose handler raises `TimelineStalled` there (Python runs a signal's handler in the main
thread, also in the middle of a wait, which it then leaves). A stall of the whole machine (the
hypervisor's, or a host too busy to run the watchdog itself on time) is not the loop's: the
watchdog's own lateness is added to the limit.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback

# The run loop comes round every 50 ms; a relink or a snapshot takes seconds, a crashed broker's restart
# up to ~35 s (its nats-server, then its agent registered with ZooKeeper).
TIMELINE_STALL_S = 120.0


class TimelineStalled(Exception):
    """The run's main loop did not come round for the watchdog's limit."""


class Watchdog:
    def __init__(self, limit_s: float = TIMELINE_STALL_S):
        self.limit_s = limit_s
        self.where: str | None = None  # the main thread's innermost frames when it fired
        self.stuck_in = "unknown"  # the innermost of them: function (file:line)
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._previous = None

    def start(self) -> Watchdog:
        """From the main thread (the only one a signal's handler runs in); elsewhere it does nothing."""
        if threading.current_thread() is not threading.main_thread():
            return self
        self._previous = signal.signal(signal.SIGUSR2, self._raise)
        self._main = threading.main_thread().ident
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="timeline-watchdog", daemon=True)
        self._thread.start()
        return self

    def beat(self) -> None:
        self._last = time.monotonic()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        if self._thread is not None:
            self._thread.join()
            signal.signal(signal.SIGUSR2, self._previous)
            self._thread = None

    def _watch(self) -> None:
        period = min(1.0, self.limit_s / 4)
        allowance = 0.0  # how late the watchdog itself woke since the last beat: the machine's stall
        beat_seen = self._last
        while True:
            due = time.monotonic() + period
            time.sleep(period)
            now = time.monotonic()
            if self._last != beat_seen:
                beat_seen, allowance = self._last, 0.0
            allowance += max(0.0, now - due - period / 2)
            if now - beat_seen <= self.limit_s + allowance:
                with self._lock:
                    if self._stopped:
                        return
                continue
            with self._lock:
                if self._stopped:
                    return
                frame = sys._current_frames().get(self._main)
                stack = traceback.extract_stack(frame, limit=8) if frame else []
                self.where = "".join(stack.format()) if stack else "unknown"
                self.stuck_in = f"{stack[-1].name} ({stack[-1].filename}:{stack[-1].lineno})" if stack else "unknown"
                signal.pthread_kill(self._main, signal.SIGUSR2)
                return

    def _raise(self, _signum, _frame) -> None:
        raise TimelineStalled(f"the run's timeline did not advance for {self.limit_s:g} s: the machine cannot "
                              f"run this scenario (stuck in {self.stuck_in})")
