"""The architecture as a contract: pyproject.toml's import-linter contracts (layers with no upward
import, pure policies) hold for the code as it stands, so `make test` fails on a new upward arrow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    linter = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(linter), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "NO_COLOR": "1"})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in run.stdout


def test_a_broken_layer_is_caught(tmp_path):
    """The contract can fail: a copy of the tree where a pure policy module imports the experiment."""
    import shutil

    for name in ("testbed", "analysis"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "_build", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "testbed" / "policies" / "snapshot.py").open("a") as handle:
        handle.write("\nfrom testbed import experiment  # noqa\n")
    linter = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(linter), "--no-cache"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
    assert run.returncode == 1, run.stdout[-3000:]
    assert "testbed.policies is not allowed to import testbed.experiment" in run.stdout
