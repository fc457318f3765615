"""The UAV smoke scenario end to end: network, Serf, NC proxies, ZooKeeper, brokers, topic manager,
swarms publishing, relinks, migrations, traces and Fig. 8 (root only; about a minute)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
pytestmark = FULL_SYSTEM


def test_uav_smoke_runs_end_to_end(tmp_path):
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "scenarios/uav-smoke.yaml", "--duration", "30s",
                          "--results", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out,) = tmp_path.glob("uav-smoke-*")
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["classes"]) == {"follow_leader", "sensor_data"}
    # every message published was delivered (lossless migrations), and topics did move
    assert summary["expected_deliveries"] > 1000
    assert summary["delivered"] >= 0.99 * summary["expected_deliveries"]
    assert summary["migrations"] >= 2 and summary["migrations_failed"] == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    # while a topic sits at the broker of the swarm's current zone the path is 2 x (8 ms access + 0.5 ms
    # broker): ~17 ms, well under the 40 ms threshold. Judged on those messages only: how much of a
    # 30 s run a topic spends elsewhere (start-up on the cloud, the report and round after a handover)
    # depends on where the manager's 5 s rounds fall, not on the data path.
    at_home = _latencies_at_home(out, events)
    for topic_class in summary["classes"]:
        latencies = sorted(ms for topic, ms in at_home if topic.startswith(topic_class))
        assert len(latencies) >= 300, (topic_class, len(latencies))
        assert 15 <= latencies[len(latencies) // 2] <= 25, (topic_class, latencies[len(latencies) // 2])
    kinds = {e["type"] for e in events}
    assert {"relink", "migration_end", "violation_detected", "nc_snapshot"} <= kinds
    assert list((out / "traces").glob("*.jsonl"))
    # at 240 deliveries/s the harness is far from its limits: every second within budget, except at
    # most a few seconds just after a migration, when every client of a swarm process reconnects at
    # once (the UAVs of a swarm share one process and one core): the guard must say so, nothing else
    harness = summary["harness"]
    t0 = next(e["time"] for e in events if e["type"] == "run_start")
    herds = [(e["time"] - t0 - 0.5, e["time"] - t0 + 2.5) for e in events if e["type"] in ("migration_start",
                                                                                          "migration_end")]
    assert harness["saturated_seconds"] <= 3, harness["saturated"]
    # and one isolated second anywhere (this VM's timer stalls reach several ms now and then)
    elsewhere = [i for i in harness["saturated"] if not any(low <= i["from_s"] <= high for low, high in herds)]
    assert sum(i["to_s"] - i["from_s"] for i in elsewhere) <= 1.01, (elsewhere, herds)
    assert harness["seconds"] >= 25 and harness["publisher_late_p99_ms"] <= 2.0
    assert harness["cpu_by_class"].get("relays", 0) > 0 and harness["cpu_by_class"].get("clients", 0) > 0
    assert json.loads((out / "run.json").read_text())["harness"]["valid"] is harness["valid"]
    figures = subprocess.run([sys.executable, "-m", "testbed.cli", "figures", str(out), "--out", str(tmp_path / "figs")],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert figures.returncode == 0, figures.stderr[-2000:]
    assert (tmp_path / "figs" / f"fig8-{out.name}.png").stat().st_size > 10_000


def _latencies_at_home(out: Path, events: list[dict]) -> list[tuple[str, float]]:
    """(topic, latency ms) of every delivery whose broker was in the swarm's zone when it was sent."""
    broker_site = {e["broker"]: e["site"] for e in events if e["type"] == "broker_registered"}
    moves = sorted((e["time"], e["node"], e["to_site"]) for e in events if e["type"] == "relink")
    rows = []
    for path in (out / "traces").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            swarm = row["producer"].split("-")[0]
            sent = float(row["send_time"])
            site = row["producer_site"]  # the swarm's site at start (rows keep it: issue 13 item 9)
            for when, node, to_site in moves:
                if node == swarm and when <= sent:
                    site = to_site
            if broker_site.get(row["broker"]) == site:
                rows.append((row["topic"], 1000 * (float(row["receive_time"]) - sent)))
    return rows


def test_set_threshold_on_a_running_experiment(tmp_path):
    import time

    from testbed.emulation import runstate

    scenario = tmp_path / "long.yaml"
    scenario.write_text((ROOT / "scenarios/uav-smoke.yaml").read_text().replace("duration: 60s", "duration: 10m"))
    process = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--results", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        run_id = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if "topic manager" in line:
                run_id = line.split("]")[0].strip("[ ")
                break
        assert run_id, "the run did not bring up the pub/sub system"
        out = subprocess.run([sys.executable, "-m", "testbed.cli", "topic", "set-threshold", run_id,
                              "follow_leader-swarm1", "25ms"], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "follow_leader-swarm1: threshold 25 ms" in out.stdout
        from testbed.roles.launch import node_metadata
        from testbed.systems.pubsub.metadata import ZK_PORT

        run = runstate.known_runs()[run_id]
        cloud = [n for n, r in run["roles"].items() if r == "cloud"][0]
        meta = node_metadata(f"{run['ips'][cloud]}:{ZK_PORT}", run["nodes"][cloud]).start()
        try:
            assert meta.threshold("follow_leader-swarm1") == 0.025
        finally:
            meta.stop()
    finally:
        process.terminate()
        process.wait(timeout=120)
