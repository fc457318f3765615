"""The UAV, hot-spot and MMOG smokes end to end with the compiled client engine (`workload.client_engine:
compiled`): the messages go through the engines, every one is delivered and traced with the
schema's columns, the moves end their downtimes, the guard reads the engines' health lines, and no
engine outlives the run (root; about a minute and a half each). The UAV and MMOG smokes run every
client node in one client host (`clienthost`, the default), the hot spot one process per node
(`client_processes: per-node`); a node crashed in the client host stops only its own traffic. The same moves and the latency
bounds on one path, side by side with the Python client, are in tests/test_dataplane.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import topology
from testbed.mobility import random_waypoint
from testbed.scenario.loader import load
from testbed.systems.pubsub import trace_schema
from testbed.systems.pubsub.engine import BINARY, HEADER
from tests.needs import FULL_SYSTEM
from tests.spans import MIGRATION_S, slack_s

ROOT = Path(__file__).resolve().parent.parent
pytestmark = FULL_SYSTEM + [pytest.mark.long,  # a live run that loads the whole machine: make test-long
                            pytest.mark.skipif(not HEADER.exists(), reason="libnats-dev is not installed (make setup)")]


def run_compiled(tmp_path: Path, name: str, size_line: str, processes: str = "auto", more: str = "") -> tuple[Path, str]:
    """scenarios/<name>.yaml for 40 s with `client_engine: compiled` and `client_processes: processes`
    (after its `size_line`), and `more` lines at its end: the results folder and what the run printed."""
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text((ROOT / "scenarios" / f"{name}.yaml").read_text()
                        .replace(size_line, f"{size_line}  client_engine: compiled\n  client_processes: {processes}\n")
                        + more)
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--duration", "40s",
                          "--results", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out,) = tmp_path.glob(f"{name}-*")
    return out, run.stdout


def test_the_uav_smoke_through_the_compiled_engine(tmp_path):
    out, printed = run_compiled(tmp_path, "uav-smoke", "  message_size: 1KB\n")
    assert "(compiled client engine); one client host for 2 nodes (2 processes)" in printed
    summary = json.loads((out / "summary.json").read_text())
    print(f"\ndelivered {summary['delivered']} of {summary['expected_deliveries']}, migrations {summary['migrations']}, "
          f"harness valid {summary['harness']['valid']}, classes "
          f"{ {c: round(v.get('p50_ms') or 0, 1) for c, v in summary['classes'].items()} } (p50 ms)")
    # every message the engines published reaches its subscribers (the last second's in flight aside):
    # each UAV's to the swarm's members - 1 others, in both classes, from within 0.5 s of the start
    scenario = load(out / "scenario.yaml")
    (swarms,) = scenario.nodes.clients
    per_second = 2 * swarms.count * scenario.workload.rate * (swarms.members - 1)
    assert summary["expected_deliveries"] >= per_second * (scenario.duration - 1.0)
    assert summary["delivered"] >= 0.98 * summary["expected_deliveries"]
    rows = [json.loads(line) for trace in (out / "traces").glob("*.jsonl") for line in trace.open()]
    assert len(rows) == summary["delivered"]
    assert all(list(r) == list(trace_schema.FIELDS) for r in rows)
    # each row names its consumer's swarm's site at the start and a broker of the run
    events = [json.loads(line) for line in (out / "events.jsonl").open()]
    start_sites = random_waypoint(scenario, topology.build(scenario))[0]
    brokers = {e["broker"] for e in events if e.get("type") == "broker_registered"}
    assert {(r["consumer"].split("-")[0], r["consumer_site"]) for r in rows} <= set(start_sites.items())
    assert {r["broker"] for r in rows} <= brokers
    # moves made by the Python control plane over the engine's connections close their downtimes, each
    # within a migration's time (and what the hypervisor held of it)
    t0 = next(e["time"] for e in events if e.get("type") == "run_start")
    downtimes = [e for e in events if e.get("type") == "downtime"]
    assert summary["migrations"] >= 1 and downtimes, "no migration or no downtime recorded"
    assert all(0 <= d["downtime_s"] < MIGRATION_S + slack_s(out, d["start"] - t0, d["end"] - t0) for d in downtimes), \
        downtimes
    # the guard read the engines' health lines (each second's publishing lateness)
    engines = sorted((out / "logs").glob("health-*.engine.jsonl"))
    assert [p.name for p in engines] == ["health-clients.engine.jsonl"]  # the client host's one engine
    published = sum(json.loads(line)["hist"]["n"] for p in engines for line in p.open())
    assert published >= summary["published"] * 0.98
    assert not list((out / "logs").glob("health-swarm?.jsonl"))  # the control plane's loop is not probed
    # this checkout's engines only: another checkout's run on the machine has its own
    leftover = subprocess.run(["pgrep", "-f", f"{BINARY} "], capture_output=True, text=True)
    assert leftover.stdout == "", f"engine processes outlived the run: {leftover.stdout}"


def test_the_hot_spot_through_the_compiled_engine(tmp_path):
    """The hot spot's Zipf-rated publishers and its surge publishers (attached mid-run) through the
    engines: every message delivered, the surge's among them."""
    out, printed = run_compiled(tmp_path, "hotspot-smoke", "  message_size: 1000B\n", processes="per-node")
    assert "client processes" in printed and "client host" not in printed
    summary = json.loads((out / "summary.json").read_text())
    print(f"\nhot spot: delivered {summary['delivered']} of {summary['expected_deliveries']}, "
          f"harness valid {summary['harness']['valid']}")
    assert summary["expected_deliveries"] > 1000
    assert summary["delivered"] >= 0.98 * summary["expected_deliveries"]
    surge = {e["client"] for e in (json.loads(line) for line in (out / "events.jsonl").open()) if e.get("type") == "surge"}
    assert len(surge) == 6  # 3 topics x 2 publishers attached at 25 s
    rows = [json.loads(line) for trace in (out / "traces").glob("*.jsonl") for line in trace.open()]
    assert {r["producer"] for r in rows} >= surge  # their messages came through the engines
    assert sorted(p.name for p in (out / "logs").glob("health-*.engine.jsonl")) == \
        [f"health-{n}.engine.jsonl" for n in sorted({p.name.split("-")[1].split(".")[0]
                                                     for p in (out / "logs").glob("workload-*.log")})]


def test_the_mmog_smoke_through_the_compiled_engine(tmp_path):
    """Players and game servers through their engines, subscriptions opened and closed at every group
    change (each closed one's trace file closed by the engine, a later one to the same topic another):
    what was owed while subscribed is delivered."""
    out, _ = run_compiled(tmp_path, "mmog-smoke", "  message_size: 998B\n")
    summary = json.loads((out / "summary.json").read_text())
    changes = [e for e in (json.loads(line) for line in (out / "events.jsonl").open()) if e.get("type") == "aoi_change"]
    print(f"\nmmog: delivered {summary['delivered']} of {summary['expected_deliveries']}, {len(changes)} area-of-interest "
          f"changes, harness valid {summary['harness']['valid']}")
    assert changes, "no group change moved a subscription"
    assert summary["expected_deliveries"] > 1000
    assert summary["delivered"] >= 0.97 * summary["expected_deliveries"]
    rows = [json.loads(line) for trace in (out / "traces").glob("*.jsonl") for line in trace.open()]
    assert len(rows) == summary["delivered"] and all(list(r) == list(trace_schema.FIELDS) for r in rows)


def test_a_node_crashed_in_the_client_host_stops_its_own_traffic_only(tmp_path):
    """swarm2 crashed (`kill: swarm2`) while both swarms run in one client host: its messages stop at
    once, its connections close, swarm1 delivers after the crash as much as before, and the host and
    its engine end with the run."""
    crash_at = 25.0
    out, printed = run_compiled(tmp_path, "uav-smoke", "  message_size: 1KB\n",
                                more=f"faults:\n  - {{at: {crash_at:g}s, kill: swarm2}}\n")
    assert "one client host for 2 nodes" in printed and "client swarm2 killed" in printed
    summary = json.loads((out / "summary.json").read_text())
    events = [json.loads(line) for line in (out / "events.jsonl").open()]
    (crash,) = [e for e in events if e.get("type") == "client_killed"]
    assert crash["node"] == "swarm2" and crash["killed"] == ["swarm2's clients in the client host"]
    assert not [e for e in events if e.get("type") == "workload_died"]
    (cost,) = summary["client_crashes"]
    print(f"\nclient crash in the client host: {cost}")
    at = crash["time"]
    t0 = next(e["time"] for e in events if e.get("type") == "run_start")
    late = slack_s(out, at - t0, at - t0 + 1.0)  # what the hypervisor held of the second after the crash
    assert cost["last_sent_s"] is not None and cost["last_sent_s"] <= 0.1 + late
    assert cost["last_received_s"] is not None and cost["last_received_s"] <= 0.2 + late
    rows = [json.loads(line) for trace in (out / "traces").glob("*.jsonl") for line in trace.open()]
    swarm1 = [float(r["receive_time"]) for r in rows if r["topic"].endswith("-swarm1")]
    span = 10.0
    before = sum(at - span <= t < at for t in swarm1)
    after = sum(at <= t < at + span for t in swarm1)
    assert after >= 0.9 * before > 0, (before, after)
    # swarm1's own summary came; swarm2 said none (it crashed)
    assert summary["published"] > 0
    leftover = subprocess.run(["pgrep", "-f", str(out / "client-host.json")], capture_output=True, text=True)
    assert leftover.stdout == "", f"a client host outlived the run: {leftover.stdout}"
