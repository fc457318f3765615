"""The architecture as a contract: pyproject.toml's import-linter contracts (layers with no upward
import, pure policies) hold for the code as it stands, so `make test` fails on a new upward arrow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    linter = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(linter), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "NO_COLOR": "1"})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Contracts: 7 kept, 0 broken." in run.stdout


@pytest.mark.parametrize("module, arrow, verdict", [
    ("policies/snapshot.py", "from testbed import experiment", "testbed.policies is not allowed to import testbed.experiment"),
    ("systems/bad/plan.py", "from testbed.systems.autotune import sources", "testbed.systems.bad is not allowed to import "
                                                                           "testbed.systems.autotune"),
    ("load.py", "from testbed.systems.bad import plan", "testbed.load is not allowed to import testbed.systems.bad"),
    ("systems/bad/schema.py", "from testbed.systems.bad import role", "testbed.systems.bad.schema is not allowed to "
                                                                      "import testbed.systems.bad.role"),
])
def test_a_broken_contract_is_caught(tmp_path, module, arrow, verdict):
    """The contracts can fail: a copy of the tree with one upward or sideways arrow added (a pure policy
    importing the experiment, one system importing another, the core importing a system, a system's
    schema importing its harness role)."""
    import shutil

    for name in ("testbed", "analysis"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "_build", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "testbed" / module).open("a") as handle:
        handle.write(f"\n{arrow}  # noqa\n")
    linter = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(linter), "--no-cache"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
    assert run.returncode == 1, run.stdout[-3000:]
    assert verdict in " ".join(run.stdout.split()), run.stdout[-3000:]
