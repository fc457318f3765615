"""Pulsar's load manager live on the hot-spot smoke: the hot bundles split, a broker whose use
exceeds the average sheds bundles to others, every unloaded bundle's topics move with the baseline
workflow, and the brokers' imbalance ends well below its peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.needs import full_system

ROOT = Path(__file__).resolve().parent.parent


@full_system
def test_hotspot_smoke_with_pulsar_lm_sheds_the_overloaded_broker(tmp_path):
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "scenarios/hotspot-smoke.yaml", "--policy",
                          "pulsar-lm", "--backend", "mininet", "--results", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "load balance: imbalance" in run.stdout and "bundle unloads" in run.stdout
    (out,) = tmp_path.glob("hotspot-smoke-*")
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    elected = next(e for e in events if e["type"] == "elected")
    assert elected["policy"] == "pulsar-lm" and elected["workflow"] == "baseline"

    usage = [e for e in events if e["type"] == "lm_usage"]
    unloads = [e for e in events if e["type"] == "bundle_unload"]
    splits = [e for e in events if e["type"] == "bundle_split"]
    assert splits and all(len(s["into"]) == 2 for s in splits)
    shed = [u for u in unloads if u["by"] == "threshold"]
    assert shed, [(u["by"], u["bundle"]) for u in unloads]
    for u in shed:  # the shedder's rule held in the round it fired: use >= average + 10 points
        seen = next(e for e in usage if e["round"] == u["round"])
        assert seen["brokers"][u["from_broker"]]["usage"] >= seen["average"] + 0.10 - 1e-9
        assert u["to_broker"] != u["from_broker"]
    # every topic of every unloaded bundle moved to the bundle's new broker, with the baseline workflow
    ended = {(e["topic"], e["to_broker"]): e for e in events if e["type"] == "migration_end"}
    for u in unloads:
        for topic in u["topics"]:
            assert ended[(topic, u["to_broker"])]["ok"] and ended[(topic, u["to_broker"])]["workflow"] == "baseline"
    summary = json.loads((out / "summary.json").read_text())
    balance = summary["balance"]
    # the load ends with no broker overloaded (link use out under the 85 % threshold) and the busiest
    # link below its peak; not even: the hottest topic alone needs ~50 % of a broker's link after the
    # surge, and a one-topic bundle can neither split nor be shed (it is its broker's sole bundle)
    loads = [e for e in events if e["type"] == "loads" and e["imbalance"] is not None]
    busiest = [max(b["network_out"] for b in e["brokers"].values()) for e in loads]
    assert max(busiest[-3:]) < 0.85 and sum(busiest[-3:]) / 3 < max(busiest), busiest
    assert balance["unloads"] == len(unloads) and balance["unloads_by"]["threshold"] == len(shed)
    assert balance["imbalance_mean"] is not None and balance["downtimes"] > 0
    assert summary["delivered"] >= 0.97 * summary["expected_deliveries"]
