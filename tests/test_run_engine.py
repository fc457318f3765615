"""The UAV smoke end to end with the compiled client engine (`workload.client_engine: compiled`):
the swarms' messages go through the engines, every one is delivered and traced with the schema's
columns, the moves end their downtimes, the guard reads the engines' health lines, and no engine
outlives the run (root; about a minute and a half). The same moves and the latency bounds on one
path, side by side with the Python client, are in tests/test_dataplane.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.systems.pubsub import trace_schema
from testbed.systems.pubsub.engine import HEADER
from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
pytestmark = FULL_SYSTEM + [pytest.mark.long,  # a live run that loads the whole machine: make test-long
                            pytest.mark.skipif(not HEADER.exists(), reason="libnats-dev is not installed (make setup)")]


def test_the_uav_smoke_through_the_compiled_engine(tmp_path):
    scenario = tmp_path / "engine.yaml"
    scenario.write_text((ROOT / "scenarios/uav-smoke.yaml").read_text()
                        .replace("  message_size: 1KB\n", "  message_size: 1KB\n  client_engine: compiled\n"))
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--duration", "40s",
                          "--results", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "(compiled client engine)" in run.stdout
    (out,) = tmp_path.glob("uav-smoke-*")
    summary = json.loads((out / "summary.json").read_text())
    print(f"\ndelivered {summary['delivered']} of {summary['expected_deliveries']}, migrations {summary['migrations']}, "
          f"harness valid {summary['harness']['valid']}, classes "
          f"{ {c: round(v.get('p50_ms') or 0, 1) for c, v in summary['classes'].items()} } (p50 ms)")
    # every message the engines published reaches its subscribers (the last second's in flight aside)
    assert summary["expected_deliveries"] > 5000
    assert summary["delivered"] >= 0.98 * summary["expected_deliveries"]
    rows = [json.loads(line) for trace in (out / "traces").glob("*.jsonl") for line in trace.open()]
    assert len(rows) == summary["delivered"]
    assert all(list(r) == list(trace_schema.FIELDS) for r in rows)
    assert {r["consumer_site"] for r in rows} and all(r["broker"] for r in rows)
    # moves made by the Python control plane over the engine's connections close their downtimes
    events = [json.loads(line) for line in (out / "events.jsonl").open()]
    downtimes = [e for e in events if e.get("type") == "downtime"]
    assert summary["migrations"] >= 1 and downtimes, "no migration or no downtime recorded"
    assert all(0 <= d["downtime_s"] < 10 for d in downtimes)
    # the guard read the engines' health lines (each second's publishing lateness)
    engines = sorted((out / "logs").glob("health-*.engine.jsonl"))
    assert [p.name for p in engines] == ["health-swarm1.engine.jsonl", "health-swarm2.engine.jsonl"]
    published = sum(json.loads(line)["hist"]["n"] for p in engines for line in p.open())
    assert published >= summary["published"] * 0.98
    assert not list((out / "logs").glob("health-swarm?.jsonl"))  # the control plane's loop is not probed
    leftover = subprocess.run(["pgrep", "-f", "pubsub/_build/engine "], capture_output=True, text=True)
    assert leftover.stdout == "", f"engine processes outlived the run: {leftover.stdout}"
