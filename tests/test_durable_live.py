"""Durable topics in a live run (root only; about 2 minutes): scenarios/durable-smoke.yaml stores
both topics on 3 site-local replicas, kills the broker holding them at 25 s and a storage node of
the site they moved to at 38 s (back 6 s later). No acknowledged message may be lost (the same run
without durability loses what was in flight at the crash)."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
pytestmark = FULL_SYSTEM


def test_acknowledged_messages_survive_a_broker_crash_and_a_storage_node_crash(tmp_path):
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "scenarios/durable-smoke.yaml", "--results",
                          str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out,) = tmp_path.glob("durable-smoke-*")
    summary = json.loads((out / "summary.json").read_text())
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    kinds = [e["type"] for e in events]
    assert {"broker_killed", "storage_killed", "storage_restarted"} <= set(kinds)

    durable = summary["durable"]
    print(f"\ndurable: {durable}\nstorage: {summary['storage']}")
    assert durable["owed"] > 2500 and durable["lost"] == 0, durable["lost_first"]
    assert durable["delivered"] == durable["owed"]
    # the topics followed their broker: their streams moved from zone1's racks to zone2's
    moved = [e for e in events if e["type"] == "stream_moved"]
    assert {(e["frm"], e["to"]) for e in moved} == {("zone1", "zone2")} and len(moved) == 2
    assert summary["storage"]["nodes"] == 9 and summary["storage"]["rx_bytes"] > 3 * 1000 * durable["acknowledged"]
    assert "durable topics:" in run.stdout and "0 acknowledged lost" in run.stdout

    # site-local storage: the acknowledgement is the access round trip plus a local quorum, well
    # under the cloud's 80 ms round trip, while the broker at the swarm's own site serves it (until the
    # crash at 25 s; then bzone2, 30 ms RTT away, adds that round trip)
    start = next(e["time"] for e in events if e["type"] == "run_start")
    acks = [(float(r[3]) - start, float(r[4]) - float(r[3])) for path in (out / "acks").glob("*.csv")
            for r in csv.reader(path.open()) if len(r) == 5]
    assert len(acks) == durable["acknowledged"]
    local = [took for sent, took in acks if sent < 24.0]
    print(f"ack p50 on bzone1: {1e3 * statistics.median(local):.1f} ms over {len(local)}")
    assert len(local) > 1000 and statistics.median(local) < 0.035
