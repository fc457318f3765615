"""Faults in live runs (root only; about 5 minutes): a broker killed for good has its topics re-placed
near their clients within a second (fast failover: the clients tell the topic manager, which probes
the broker and fences it) and every client's downtime is measured; a paused broker gives its topics
up when it resumes; a killed delay line is restarted and its outage marked; ZooKeeper killed and
restarted, then the elected topic manager killed and a standby elected; a client crash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
FAILOVER_P50_S = 1.0  # issue 19's target for the clients' downtime after a broker crash (was 6-7.6 s: the session)
pytestmark = FULL_SYSTEM


def run_variant(tmp_path: Path, base: str, name: str, settle: str | None = "5s",
                **changes) -> tuple[subprocess.CompletedProcess, Path, list[dict]]:
    """`testbed run` of scenarios/<base>.yaml with top-level `changes` (and the name `name`): the
    finished run, its directory and its events. The coordinates settle for `settle` at most (5 s:
    what these faults cost does not depend on converged coordinates; None keeps the scenario's)."""
    data = yaml.safe_load((ROOT / "scenarios" / f"{base}.yaml").read_text())
    data.update(name=name, **changes)
    if settle is not None:
        data["control"] = {**data.get("control", {}), "settle": settle}
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario), "--results", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out,) = tmp_path.glob(f"{name}-*")
    return run, out, [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_a_killed_broker_has_its_topics_replaced_and_the_downtime_measured(tmp_path):
    """failover-smoke's crash of bzone1 at 25 s, restarted 10 s later (`restart_after`): its topics
    fail over to bzone2 within a second, and once it is back the topic manager brings them home."""
    run, out, events = run_variant(tmp_path, "failover-smoke", "failover-smoke", settle=None, duration="48s",
                                   faults=[{"at": "25s", "kill": "bzone1", "restart_after": "10s"}])
    summary = json.loads((out / "summary.json").read_text())
    start = next(e["time"] for e in events if e["type"] == "run_start")
    (killed,) = [e for e in events if e["type"] == "broker_killed"]
    assert killed["node"] == "bzone1" and abs(killed["time"] - start - 25.0) < 1.0
    # everything in the node: its nats-server, broker agent (Python) and Serf agent
    assert len(killed["killed"]) == 3 and {"nats-server", "serf"} < set(killed["killed"])
    assert any(name.startswith("python") for name in killed["killed"])

    failover = summary["failover"]
    print(f"\nfailover: {failover}")
    assert failover["brokers_killed"] == ["bzone1"]
    # Both topics of the swarm lived on bzone1 (its home zone) and were re-placed, from their last
    # report, on the nearest live broker: bzone2 (30 ms RTT away) rather than the cloud (80 ms).
    orphans = {e["topic"]: e for e in events if e["type"] == "orphan_replaced"}
    assert set(orphans) == {"follow_leader-swarm1", "sensor_data-swarm1"}
    assert all(o["dead"] == "bzone1" and o["broker"] == "bzone2" and o["carried"] for o in orphans.values())
    assert failover["topics_replaced"] == 2
    # Every client (3 UAVs x 2 topics) lost its broker and came back within a second: the topic
    # manager probed bzone1 on the clients' word (refused at once) and fenced it, not waiting for
    # its ZooKeeper session (6 s) to expire.
    assert failover["clients_lost_broker"] == 6 and failover["clients_recovered"] == 6
    assert failover["brokers_fenced"] == ["bzone1"] and failover["fence_probe_s"] < 0.5
    assert failover["downtime_p50_s"] < FAILOVER_P50_S and failover["downtime_max_s"] < 2 * FAILOVER_P50_S
    # After the failover the traffic flows through bzone2, and almost everything was delivered.
    (restarted,) = [e for e in events if e["type"] == "broker_restarted"]
    # started 10 s after the kill; its nats-server and agent up (registered with ZooKeeper) within seconds
    assert restarted["node"] == "bzone1" and abs(restarted["time"] - restarted["start_s"] - killed["time"] - 10.0) < 1.0
    assert restarted["start_s"] < 5.0
    assert failover["brokers_restarted"] == ["bzone1"] and "restarted bzone1" in run.stdout
    rows = [json.loads(line) for path in (out / "traces").glob("*.jsonl") for line in path.open()]
    between = [r for r in rows if killed["time"] + 3 < float(r["send_time"]) < restarted["time"]]
    assert between and {row["broker"] for row in between} == {"bzone2"}
    # back: it registers again and the next rounds move both topics home (their clients are in zone1)
    home = [e for e in events if e["type"] == "migration_end" and e.get("ok") and e["time"] > restarted["time"]]
    assert {e["topic"] for e in home} == {"follow_leader-swarm1", "sensor_data-swarm1"}, home
    last = [r for r in rows if float(r["send_time"]) > max(e["time"] for e in home) + 1.0]
    assert last and {row["broker"] for row in last} == {"bzone1"}
    assert summary["delivered"] >= 0.9 * summary["expected_deliveries"]


def test_zookeeper_killed_and_restarted_stops_the_control_plane_not_the_data_plane(tmp_path):
    """`kill: zookeeper` with `restart_after` (issue 19): the control plane is gone for a while (the
    manager's rounds fail), the data plane keeps delivering, and once ZooKeeper serves again from its
    data the rounds resume. Later in the same run `kill: manager`: with two cloud brokers the standby
    topic manager is elected once the leader's ZooKeeper session expires, and runs the rounds."""
    nodes = {**yaml.safe_load((ROOT / "scenarios" / "failover-smoke.yaml").read_text())["nodes"], "cloud_brokers": 2}
    run, out, events = run_variant(tmp_path, "failover-smoke", "zk-outage", nodes=nodes,
                                   faults=[{"at": "12s", "kill": "zookeeper", "restart_after": "8s"},
                                           {"at": "27s", "kill": "manager"}])
    assert "ZooKeeper killed: back after" in run.stdout
    start = next(e["time"] for e in events if e["type"] == "run_start")
    (killed,) = [e for e in events if e["type"] == "zookeeper_killed"]
    (back,) = [e for e in events if e["type"] == "zookeeper_restarted"]
    assert abs(killed["time"] - start - 12.0) < 1.0 and 8.0 <= back["time"] - killed["time"] < 8.0 + 6
    outage = json.loads((out / "summary.json").read_text())["zookeeper_outage"]
    print(f"\nZooKeeper outage: {outage}")
    # the data plane does not need ZooKeeper: as many deliveries while it was down as just before
    assert outage["delivered_while_down"] >= 0.8 * outage["delivered_before"] > 0
    # the control plane stalled: the round due while ZooKeeper was down waited for it; then rounds resumed
    assert outage["first_round_after_s"] >= outage["down_s"] - 0.5 and outage["rounds_after"] >= 1
    rounds = [e for e in events if e["type"] == "round" and e["time"] > back["time"]]
    assert rounds and rounds[-1]["brokers"] >= 2
    # ZooKeeper was away longer than the managers' sessions (6 s): a manager whose session expired
    # stepped down (it may no longer be the leader) and came back as a standby; never two leaders
    lost = [e for e in events if e["type"] == "leadership_lost"]
    restarts = [e for e in events if e["type"] == "manager_restart"]
    assert {e["node"] for e in lost} == {e["node"] for e in restarts}, (lost, restarts)
    # the elected manager killed at 27 s: the other one took over after the leader's session (6 s)
    # and ran the rounds from then on
    handover = json.loads((out / "summary.json").read_text())["manager_handover"]
    print(f"manager handover: {handover}; stepped down: {[e['node'] for e in lost]}")
    assert {handover["killed"], handover["elected"]} == {"cloud1", "cloud2"} and handover["standbys"] == 1
    assert 4.0 <= handover["gap_s"] <= 10.0 and handover["rounds_after"] >= 1
    assert f"topic manager in {handover['killed']} killed: {handover['elected']} elected" in run.stdout
    elected_at = handover["time"] + handover["gap_s"]
    assert {e["node"] for e in events if e["type"] == "round" and e["time"] > elected_at} == {handover["elected"]}
    # one leader at a time: between two elections, the rounds come from the later-elected manager only
    elections = sorted((e for e in events if e["type"] == "elected"), key=lambda e: e["time"])
    for a, b in zip(elections, elections[1:] + [{"time": float("inf")}]):
        nodes = {e["node"] for e in events if e["type"] == "round" and a["time"] < e["time"] < b["time"]}
        assert nodes <= {a["node"]}, (a, b, nodes)


def test_a_paused_broker_is_fenced_and_gives_its_topics_up_when_it_resumes(tmp_path):
    """`pause: bzone1` (SIGSTOP of its node for 4 s, issue 19): the clients notice the silence (NATS
    pings), the topic manager's probe times out and fences bzone1, the topics go to bzone2; when
    bzone1 resumes (its ZooKeeper session still alive) its owner nodes' watches tell it the topics are
    gone, and it gives them up rather than serve them beside their new owner: no split brain. Later a
    delay line is killed (`relay:`): restarted, and its outage marked by the saturation guard."""
    run, out, events = run_variant(tmp_path, "failover-smoke", "paused", duration="40s",
                                   faults=[{"at": "18s", "pause": "bzone1", "resume_after": "4s"},
                                           {"at": "32s", "relay": ["zone1", "zone2"]}])
    (paused,) = [e for e in events if e["type"] == "broker_paused"]
    (resumed,) = [e for e in events if e["type"] == "broker_resumed"]
    assert {"nats-server", "serf"} < set(paused["paused"]) and 3.5 < resumed["time"] - paused["time"] < 5.5
    failover = json.loads((out / "summary.json").read_text())["failover"]
    print(f"\npaused broker: {failover}")
    assert failover["brokers_paused"] == ["bzone1"] and failover["brokers_fenced"] == ["bzone1"]
    (fenced,) = [e for e in events if e["type"] == "broker_fenced"]
    assert paused["time"] < fenced["time"] < resumed["time"] and fenced["probe_s"] >= 0.4  # a timeout, not a refusal
    assert sorted(fenced["fenced"]) == ["follow_leader-swarm1", "sensor_data-swarm1"]
    # every client noticed the silence and came back while bzone1 was still paused
    assert failover["clients_lost_broker"] == failover["clients_recovered"] == 6
    downtimes = [e for e in events if e["type"] == "downtime" and e.get("reason") == "broker_lost"]
    assert all(e["time"] < resumed["time"] for e in downtimes), downtimes
    # on resuming, bzone1 gave both topics up (its session was alive: the watches told it)
    gave_up = [e for e in events if e["type"] == "ownership_fenced"]
    assert sorted(e["topic"] for e in gave_up) == sorted(fenced["fenced"])
    assert all(resumed["time"] <= e["time"] < resumed["time"] + 2 for e in gave_up)
    # nothing of those topics went through bzone1 after it resumed until the topic manager moved them
    # back to it (the nearest broker again: a migration, announced by its start, not a second owner)
    back = [e for e in events if e["type"] == "migration_start" and e.get("to_broker") == "bzone1"]
    until = min([e["time"] for e in back], default=float("inf"))
    rows = [json.loads(line) for path in (out / "traces").glob("*.jsonl") for line in path.open()]
    served = [r for r in rows if r["broker"] == "bzone1" and resumed["time"] + 0.5 < float(r["receive_time"]) < until]
    assert not served, served[:3]
    # the same run's second fault: the delay line of the zone1-zone2 link killed at 32 s (an emulation
    # error): restarted within a second, and the seconds its link forwarded nothing marked saturated
    (relay,) = [e for e in events if e["type"] == "relay_killed"]
    repaired = [e for e in events if e["type"] == "data_path_problem" and "restarted" in e["detail"]]
    assert len(repaired) == 1 and relay["time"] <= repaired[0]["time"] < relay["time"] + 1.0, repaired
    harness = json.loads((out / "summary.json").read_text())["harness"]
    start = next(e["time"] for e in events if e["type"] == "run_start")
    marked = [i for i in harness["saturated"] if "relay-down" in i["causes"]]
    assert not harness["valid"] and len(marked) == 1, harness["saturated"]
    assert marked[0]["from_s"] <= relay["time"] - start < marked[0]["to_s"] + 1.0
    assert "a delay line died and was restarted" in marked[0]["cause"]


def test_a_client_that_crashes_stops_its_own_traffic_only(tmp_path):
    """`kill: swarm1` (a client node's workload process SIGKILLed, issue 19): its messages stop at
    once, the other swarm's traffic goes on as before, and the run says what the crash cost."""
    run, out, events = run_variant(tmp_path, "uav-smoke", "client-crash", duration="20s",
                                   faults=[{"at": "10s", "kill": "swarm1"}])
    assert "client swarm1 killed" in run.stdout
    (crash,) = [e for e in events if e["type"] == "client_killed"]
    assert crash["node"] == "swarm1" and any(name.startswith("python") for name in crash["killed"])
    assert not [e for e in events if e["type"] == "workload_died" and e["node"] == "swarm1"]  # said once
    (cost,) = json.loads((out / "summary.json").read_text())["client_crashes"]
    print(f"\nclient crash: {cost}")
    # nothing of swarm1's after the crash (a message already in flight may land within its path delay)
    assert cost["last_sent_s"] is not None and cost["last_sent_s"] <= 0.1
    assert cost["last_received_s"] is not None and cost["last_received_s"] <= 0.2
    # swarm2 delivered as much after the crash as in as long before (its own zone changes aside)
    assert cost["others_after"] >= 0.8 * cost["others_before"] > 0


def test_a_site_cut_off_stops_what_crosses_it_and_the_clients_come_back_after_the_heal(tmp_path):
    """`cut: zone1` for 6 s (issue 19), with hash placement: sensor_data-swarm1 lives on bzone1,
    in the swarm's own site, and follow_leader-swarm1 on the cloud broker, across the cut. The edge
    topic does not notice; the cloud topic delivers nothing during the cut, its clients lose their
    broker and are back on it after the heal; the run says what the cut cost, and run.json carries
    its span for the figures."""
    from testbed.policies.initial import hash_broker

    assert [hash_broker(t, ["bzone1", "bzone2", "cloud"]) for t in ("sensor_data-swarm1", "follow_leader-swarm1")] \
        == ["bzone1", "cloud"]
    run, out, events = run_variant(tmp_path, "failover-smoke", "site-cut", duration="32s",
                                   control={"policy": "pulsar-hash"},
                                   faults=[{"at": "14s", "cut": "zone1", "heal_after": "6s"}])
    start = next(e["time"] for e in events if e["type"] == "run_start")
    (cut,) = [e for e in events if e["type"] == "site_cut"]
    (healed,) = [e for e in events if e["type"] == "site_healed"]
    assert cut["site"] == "zone1" and abs(cut["time"] - start - 14.0) < 0.5 and abs(healed["time"] - cut["time"] - 6.0) < 0.5
    meta = json.loads((out / "run.json").read_text())
    (span,) = meta["faults"]
    assert (span["kind"], span["target"]) == ("cut", "zone1") and abs(span["to_s"] - span["from_s"] - 6.0) < 0.5
    rows = [json.loads(line) for path in (out / "traces").glob("*.jsonl") for line in path.read_text().splitlines()]
    brokers = {r["topic"]: r["broker"] for r in rows if float(r["receive_time"]) < cut["time"]}
    assert brokers == {"sensor_data-swarm1": "bzone1", "follow_leader-swarm1": "cloud"}, brokers

    def received(topic, low, high):
        return sum(low <= float(r["receive_time"]) < high for r in rows if r["topic"] == topic)
    # the edge topic delivers on through the cut; across it nothing arrives (past what was in flight)
    assert received("sensor_data-swarm1", cut["time"], healed["time"]) >= 0.9 * received(
        "sensor_data-swarm1", cut["time"] - 6.0, cut["time"]) > 0
    assert received("follow_leader-swarm1", cut["time"] + 0.2, healed["time"]) == 0
    assert received("follow_leader-swarm1", healed["time"] + 8.0, start + 32.0) > 0  # and after the heal again
    (cost,) = json.loads((out / "summary.json").read_text())["site_cuts"]
    print(f"\nsite cut: {cost}")
    assert cost["site"] == "zone1" and abs(cost["cut_s"] - 6.0) < 0.5
    assert cost["clients_lost_broker"] >= 2 and cost["clients_recovered"] == cost["clients_lost_broker"]
    # back within the NATS reconnect wait (2 s) and a lookup retry (3 s) of the heal
    assert cost["back_after_heal_s"] is not None and cost["back_after_heal_s"] < 6.0
    assert "site zone1 cut off for 6.0 s" in run.stdout
