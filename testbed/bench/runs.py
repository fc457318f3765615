"""A benchmark's run of a scenario: `testbed run` as a user types it, in a child process, into a
directory of runs; the one home for "run it and find the run's directory"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml


def run_scenario(path: Path, runs: Path, backend: str) -> tuple[Path | None, str]:
    """(the new run's directory, "") or (None, the end of what the run said) when it failed."""
    before = set(runs.glob("*"))
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--backend", backend,
                           "--results", str(runs)], capture_output=True, text=True)
    made = sorted(set(runs.glob("*")) - before)
    if done.returncode != 0 or not made:
        return None, (done.stderr or done.stdout)[-1500:]
    return made[0], ""


def variant_file(base: Path, name: str, changes: dict, work: Path) -> Path:
    """`base` with `changes` ({"dotted.key": value}) and the scenario name `name`, written to `work`."""
    data = yaml.safe_load(base.read_text())
    data["name"] = name
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
