"""The saturation guard live: a smoke topology driven far past this machine's capacity on purpose
must say so, with the publishers as the cause (root only; about a minute). The light-load case is
asserted in test_run_uav (its run must be valid)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
pytestmark = FULL_SYSTEM + [pytest.mark.long]  # a live run that loads the whole machine: make test-long


def test_a_run_past_capacity_is_marked_saturated_with_its_cause(tmp_path):
    # 8 UAVs at 5,000 msg/s each: 40,000 msg/s offered by two Python processes, far past any 2-core knee
    scenario = tmp_path / "overload.yaml"
    # access links wide enough for it (validation refuses a link thinner than its node's own messages):
    # what is past capacity is the machine, not a link
    base = (ROOT / "scenarios/uav-smoke.yaml").read_text()
    assert "access: {delay: 8ms, bandwidth: 100Mbit}" in base
    scenario.write_text(base.replace("rate: 20/s", "rate: 5000/s").replace("settle: 15s", "settle: 2s")
                        .replace("access: {delay: 8ms, bandwidth: 100Mbit}", "access: {delay: 8ms, bandwidth: 1Gbit}"))
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--duration", "12s",
                          "--results", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out,) = tmp_path.glob("uav-smoke-*")
    harness = json.loads((out / "summary.json").read_text())["harness"]
    assert harness["valid"] is False
    assert harness["saturated_seconds"] >= 5
    assert any("publishers" in i["causes"] and "publishers late by up to" in i["cause"] for i in harness["saturated"])
    assert json.loads((out / "run.json").read_text())["harness"]["valid"] is False
    rows = [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines()]
    assert sum(r["saturated"] for r in rows) >= 5 and sum("cpu_idle" in r for r in rows) >= 5
    assert f"harness: {harness['validity']}; SATURATED {harness['saturated_seconds']} s" in run.stdout  # the end screen
