"""Tells a stall of the whole VM apart from the harness's load (``stallprobe.c``), for the guard.

On this VM the hypervisor sometimes stops every core at once for 8-55 ms without reporting steal
time: every engine and the delay line, each in its own real-time process, are then late by the same
amount in the same second, on a machine that was half idle. The guard would blame the load. The
probe is one SCHED_FIFO 99 thread pinned to each core, waking every `health.STALL_PROBE_PERIOD_MS`:
nothing in the guest can delay all of them at once, so a span in which every core's probe was late
is the machine's. `HealthMonitor` puts each second's longest such span into its row
(`machine_stall_ms`), and `health.explained_by_machine` judges the second with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

from testbed import procs
from testbed.emulation.runstate import ENV_TAG
from testbed.health import STALL_PROBE_PERIOD_MS

SOURCE = Path(__file__).with_name("stallprobe.c")
BINARY = Path(__file__).with_name("_build") / "stallprobe"
HEADER_TIMEOUT_S = 5.0


class StallProbe:
    """The probe process of one run: `start()`, then `drain(into)` each second, then `stop()`."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.process: subprocess.Popen | None = None
        self.problem: str | None = None  # why stalls are not measured (the guard falls back to steal)
        self.seconds: dict[int, float] = {}
        self.reader: threading.Thread | None = None
        self.lock = threading.Lock()

    def start(self) -> bool:
        """Build and start the probe; False (and `problem` says why) when it cannot tell stalls here."""
        try:
            binary = procs.build_c(SOURCE, BINARY, libs=["-lpthread"])
        except procs.BuildError as error:
            self.problem = f"the stall probe cannot be built: {error}"
            return False
        self.process = subprocess.Popen(
            [str(binary), "--period-us", str(round(STALL_PROBE_PERIOD_MS * 1000))],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, ENV_TAG: self.run_id})
        line = procs.read_line(self.process, HEADER_TIMEOUT_S)
        header = json.loads(line) if line else {}
        if not header.get("rt"):
            self.problem = ("the stall probe runs without real-time priority (no CAP_SYS_NICE?): it cannot "
                            "tell a stalled VM from load" if header else "the stall probe did not start")
            self.stop()
            return False
        self.reader = threading.Thread(target=self._read, name="stall-probe", daemon=True)
        self.reader.start()
        return True

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                second = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self.lock:
                self.seconds[int(second["t"])] = float(second["stall_ms"])

    def drain(self, into: dict[int, dict]) -> None:
        """Each second reported since the last call, as `machine_stall_ms` of `into[second]`."""
        with self.lock:
            seconds, self.seconds = self.seconds, {}
        for second, stall in seconds.items():
            into.setdefault(second, {})["machine_stall_ms"] = stall

    def stop(self) -> None:
        """Stop the probe; the seconds it reports on its way out are read before this returns."""
        if self.process is not None:
            procs.stop_group([self.process], timeout=2.0)
        if self.reader is not None:
            self.reader.join(2.0)
