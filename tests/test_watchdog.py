"""The run's timeline watchdog (testbed/watchdog.py) with real threads and a real signal: a main loop
stuck in a call is stopped with the place it was stuck at; one that comes round is left alone, also
across a stall of the whole process; a stopped watchdog sends nothing."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from testbed.watchdog import TimelineStalled, Watchdog


def _stuck_in_a_call() -> None:
    time.sleep(30)


def test_a_loop_stuck_in_a_call_is_stopped_with_where_it_was_stuck():
    watchdog = Watchdog(limit_s=0.5).start()
    began = time.monotonic()
    try:
        with pytest.raises(TimelineStalled) as stalled:
            watchdog.beat()
            _stuck_in_a_call()
    finally:
        watchdog.stop()
    assert time.monotonic() - began < 20  # not the 30 s of the stuck call
    assert "did not advance for 0.5 s" in str(stalled.value)
    assert f"stuck in _stuck_in_a_call ({__file__}:" in str(stalled.value), str(stalled.value)
    assert "time.sleep(30)" in watchdog.where
    assert signal.getsignal(signal.SIGUSR2) is not watchdog._raise  # the handler before it is back


def test_a_loop_that_comes_round_is_left_alone_also_across_a_stall_of_its_process():
    """The process stopped (SIGSTOP, as the hypervisor stops a VM) for longer than the limit: the
    watchdog, stopped as well, does not blame the loop for it."""
    watchdog = Watchdog(limit_s=2.0).start()
    stop = f"kill -STOP {os.getpid()}; sleep 4; kill -CONT {os.getpid()}"
    stopper = threading.Thread(target=lambda: (time.sleep(0.5), os.system(stop)))
    try:
        stopper.start()
        end = time.monotonic() + 6.0
        while time.monotonic() < end:
            watchdog.beat()
            time.sleep(0.02)
    finally:
        stopper.join()
        watchdog.stop()
    assert watchdog.where is None


def test_a_stopped_watchdog_sends_nothing():
    watchdog = Watchdog(limit_s=0.2).start()
    watchdog.stop()
    time.sleep(0.6)  # would have fired twice over
    assert watchdog.where is None
