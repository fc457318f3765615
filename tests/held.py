"""A `testbed run --hold` as a user starts it (a subprocess), read line by line, and `testbed exec`
into it: shared by the live tests of exec on each backend."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from testbed.scenario.loader import load

ROOT = Path(__file__).resolve().parent.parent


class HeldRun:
    """The `testbed run --hold` subprocess, its output lines as they come, and its run's state."""

    def __init__(self, scenario: Path, results: Path, python: str, backend: str, *options: str):
        self.process = subprocess.Popen(
            [python, "-m", "testbed.cli", "run", str(scenario), "--backend", backend, "--hold",
             "--results", str(results), *options], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            cwd=ROOT)
        self.name = load(scenario).name
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.run_id = self.wait_for(r"^\[([a-z0-9]{6})\] ", 120)[1]
        self.results = results

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            self._new.put(line)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                match = re.search(pattern, self._new.get(timeout=0.5))
            except queue.Empty:
                assert self.process.poll() is None, "the run ended:\n" + "".join(self.lines[-40:])
                continue
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r} in {timeout:g} s:\n" + "".join(self.lines[-40:]))

    @property
    def out(self) -> Path:
        (out,) = self.results.glob(f"{self.name}-{self.run_id}")
        return out

    def end(self) -> None:
        """SIGINT, as Ctrl-C; killed if the teardown does not end in 90 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def texec(run: str, node: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", "exec", run, node, "--", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout)
