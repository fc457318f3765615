"""Live runs for tests: `testbed run` as a user types it, repeated once when the harness did not
hold the run. A measurement counts only from a run the harness itself considers held; on this
2-core VM the hypervisor now and then stalls every process for milliseconds at once (steal time,
which the health rows record), and such a run is discarded and repeated, not judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


def run_held(argv: list[str], results: Path, name: str, not_held: Callable[[Path, dict], str | None],
             attempts: int = 2, timeout: float = 600) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """(the run, its directory, its summary) of `testbed run <argv> --results ...`, the first of
    `attempts` whose `not_held(run_dir, summary)` says nothing (None); each attempt in its own folder."""
    why = None
    for attempt in range(attempts):
        where = results / f"attempt{attempt}"
        run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", *argv, "--results", str(where)],
                             capture_output=True, text=True, cwd=ROOT, timeout=timeout)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        (out,) = where.glob(f"{name}-*")
        summary = json.loads((out / "summary.json").read_text())
        why = not_held(out, summary)
        if why is None:
            return run, out, summary
    raise AssertionError(f"{attempts} runs, none held by the harness: {why}")


def not_stalls(saturated: list[dict]) -> list[dict]:
    """The saturated intervals in which the hypervisor took no CPU from the VM (`steal_ms` 0): those
    the harness's own load can explain. An interval with steal is the machine stalling under the
    harness (the harness's load does not raise steal); a test of the system under test need not
    count it, and says so by using this."""
    return [i for i in saturated if not i.get("steal_ms")]
