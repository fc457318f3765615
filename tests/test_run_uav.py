"""The UAV smoke scenario end to end: network, Serf, NC proxies, ZooKeeper, brokers, topic manager,
swarms publishing, relinks, migrations, traces and Fig. 8 (root only; about a minute)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


import pytest

from tests.live import judged_seconds, run_held, unexplained_seconds
from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
pytestmark = FULL_SYSTEM


def _not_held(out: Path, summary: dict) -> str | None:
    """At 240 deliveries/s the harness is far from its limits: every second within budget, except
    at most a few seconds just after a migration, when every client of a swarm process reconnects
    at once (the UAVs of a swarm share one process and one core), and one isolated second anywhere
    (this VM's timer stalls reach several ms now and then); a second in which the hypervisor took
    the VM's cores for at least as long as the harness was late is the hypervisor's, not the
    harness's (`tests.live.explained_by_steal`). None when so, else what was not."""
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    t0 = next(e["time"] for e in events if e["type"] == "run_start")
    herds = [(e["time"] - t0 - 0.5, e["time"] - t0 + 2.5) for e in events if e["type"] in ("migration_start",
                                                                                          "migration_end")]
    ours = unexplained_seconds(out)  # seconds the hypervisor stalled the VM for longer are not the harness's
    elsewhere = [s for s in ours if not any(low <= s <= high for low, high in herds)]
    if judged_seconds(out) < 25 or len(ours) > 3 or len(elsewhere) > 1:
        return f"{judged_seconds(out)} s judged; saturated {summary['harness']['saturated']}; migrations at {herds}"
    return None


@pytest.fixture(scope="module")
def uav_run(tmp_path_factory) -> tuple[Path, Path]:
    """One real run of the UAV smoke (30 s) that the harness held, for this module's tests: (its
    directory, the results root)."""
    root = tmp_path_factory.mktemp("uav")
    _run, out, _summary = run_held(["scenarios/uav-smoke.yaml", "--duration", "30s"], root, "uav-smoke", _not_held)
    return out, root


def test_uav_smoke_runs_end_to_end(uav_run):
    out, tmp_path = uav_run
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
    harness = summary["harness"]
    assert _not_held(out, summary) is None  # run_held kept the first run the harness held
    assert harness["seconds"] >= 25
    assert harness["cpu_by_class"].get("relays", 0) > 0 and harness["cpu_by_class"].get("clients", 0) > 0
    assert json.loads((out / "run.json").read_text())["harness"]["valid"] is harness["valid"]
    figures = subprocess.run([sys.executable, "-m", "testbed.cli", "figures", str(out), "--out", str(tmp_path / "figs")],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert figures.returncode == 0, figures.stderr[-2000:]
    assert (tmp_path / "figs" / f"fig8-{out.name}.png").stat().st_size > 10_000


def test_the_reduction_on_a_standalone_spark_cluster_equals_local_row_for_row(uav_run):
    """Issue 20: the UAV run's Parquet reduced on a Spark standalone cluster (a master and two
    workers from pyspark's own launcher, `analysis.cluster`) gives every table local[*] gave (the
    end-to-end test reduced it locally first), row for row; the cluster is stopped by PID after."""
    import pyarrow.parquet as pq

    from analysis.cluster import StandaloneCluster
    from analysis.reduce import TABLES

    out, root = uav_run
    if not (out / "tables" / "summary.parquet").exists():
        pytest.skip("the end-to-end test did not reduce the run")
    with StandaloneCluster(workers=2, log_dir=root / "spark-cluster") as cluster:
        daemons = [p.pid for p in cluster.processes]
        assert len(cluster.state()["workers"]) == 2
        reduced = subprocess.run([sys.executable, "-m", "analysis", "reduce", str(out), "--master", cluster.master,
                                  "--out", str(root / "cluster-tables")], capture_output=True, text=True, cwd=ROOT,
                                 timeout=600, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
        assert reduced.returncode == 0, reduced.stderr[-3000:]
        applications = cluster.state()["completedapps"] + cluster.state()["activeapps"]
        assert applications, "the reduction did not run on the cluster"
    for pid in daemons:  # stopped by PID, nothing left
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    compared = 0
    for name in TABLES:
        local, remote = out / "tables" / f"{name}.parquet", root / "cluster-tables" / f"{name}.parquet"
        if not local.exists():
            continue
        a, b = pq.read_table(local).to_pylist(), pq.read_table(remote).to_pylist()
        key = lambda row: json.dumps(row, sort_keys=True, default=str)  # noqa: E731 - a sort key
        assert sorted(a, key=key) == sorted(b, key=key), name
        compared += 1
    assert compared >= 5


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
