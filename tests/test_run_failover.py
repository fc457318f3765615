"""Faults in live runs (root only; two runs, about 3 minutes together). A run costs half a minute
before its first message, so each run takes several faults, one after the other, and each fault is
judged in its own window of the run.

The broker run (failover-smoke with ePulsar: one swarm in zone1, its two topics on bzone1): a delay
line killed (restarted, its outage marked), bzone1 killed and restarted 6 s later (fast failover to
bzone2, then home again) and, once the topics are home, bzone1 paused (fenced; it gives its topics
up when it resumes). The control-plane run (hash placement, so that one topic of the cut site lives
across the cut; two swarms and two cloud brokers): ZooKeeper killed and restarted, zone1 cut off for
6 s, the elected topic manager killed, and a client crash.

Each fault comes after the worst-case recovery of the one before, derived from the scenario's
monitoring period. A timing claim (in seconds) gets what the hypervisor held of its span (steal, the
stall probe's stalls) added to its bound, never the clients' own lateness (a failover that blocks
the client loop is that much slower), and counts only if the harness had CPU to spare in that window;
otherwise the run is repeated (tests.spans, tests.live.run_held)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from testbed.scenario.loader import load
from testbed.systems.pubsub.client import LOOKUP_ATTEMPT_S, NATS_CONNECT_TIMEOUT_S, NATS_RECONNECT_WAIT_S, NOTICE_S
from testbed.systems.pubsub.lookup import PROBE_S, SESSION_S
from tests.live import run_held
from tests.needs import FULL_SYSTEM
from tests.spans import MIGRATION_S, health, slack_s, unmeasured_within

ROOT = Path(__file__).resolve().parent.parent
FAILOVER_P50_S = 1.0  # the clients' downtime after a broker crash (6-7.6 s when the session's expiry decided it)
START_MAX_S = 5.0  # a restarted broker's nats-server and agent are up (registered with ZooKeeper) within this
GIVE_UP_S = 2.0  # a resumed broker gives up the topics it lost while paused within this (its owner-node watches)
# A client cut off from the topic manager comes back in two steps after the heal. Its lookup connection
# (dropped on unanswered pings) is back once a connect attempt's SYN gets through: within 2.2 s by the
# SYN schedule, judged against a whole failed attempt and the wait before the next. A lookup asked
# meanwhile is answered then, or timed out and asked again: the client is on its broker within a lookup
# attempt and a second (the topic manager's probe of the lost broker, the connect) of that.
LOOKUP_BACK_S = NATS_CONNECT_TIMEOUT_S + NATS_RECONNECT_WAIT_S
RELINK_AFTER_LOOKUP_S = LOOKUP_ATTEMPT_S + 1.0
BACK_AFTER_HEAL_S = LOOKUP_BACK_S + RELINK_AFTER_LOOKUP_S
ZK_START_MAX_S = 6.0  # ZooKeeper's JVM serves again within this of its restart
# a standby manager is elected once the leader's session expires: a session after the leader was last
# heard from, which kazoo's pings (every third of a session) make at most a third before the kill
HANDOVER_MIN_S, HANDOVER_MAX_S = SESSION_S * 2 / 3, SESSION_S + 4.0
CRASH_SPAN_S = 6.0  # the other swarm's deliveries compared in as long before and after a client crash
BOTH = ["follow_leader-swarm1", "sensor_data-swarm1"]
pytestmark = FULL_SYSTEM + [pytest.mark.long]


def variant(root: Path, name: str, settle: str | None, **changes) -> Path:
    """scenarios/failover-smoke.yaml with top-level `changes`, named `name`, written under `root`. The
    coordinates settle for `settle` at most (None keeps the scenario's)."""
    data = yaml.safe_load((ROOT / "scenarios" / "failover-smoke.yaml").read_text())
    data.update(name=name, **changes)
    if settle is not None:
        data["control"] = {**data.get("control", {}), "settle": settle}
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def of(events: list[dict], kind: str, low: float = 0.0, high: float = float("inf")) -> list[dict]:
    """The events of a type with low <= time < high (epoch seconds)."""
    return [e for e in events if e.get("type") == kind and low <= e.get("time", 0.0) < high]


@dataclass
class Run:
    stdout: str
    out: Path
    events: list[dict]
    summary: dict

    @property
    def start(self) -> float:
        return next(e["time"] for e in self.events if e["type"] == "run_start")

    def rows(self) -> list[dict]:
        return [json.loads(line) for path in (self.out / "traces").glob("*.jsonl") for line in path.open()]

    def slack(self, low: float, high: float) -> float:
        """How much later than its own doing anything timed between two epoch times may be: what the
        machine held of the span (tests.spans.slack_s)."""
        return slack_s(self.out, low - self.start, high - self.start)


def live(path: Path, results: Path, windows: dict[str, tuple[float, float, tuple[str, ...]]]) -> Run:
    """The first run of scenario `path` in whose every window (run time, with the causes its fault
    itself is expected to mark) the machine had CPU to spare."""
    def not_held(out: Path, _summary: dict) -> str | None:
        late = {name: ours for name, (low, high, allowed) in windows.items()
                if (ours := unmeasured_within(out, low, high, allowed))}
        if not late:
            return None
        seen = {s for seconds in late.values() for s in seconds}
        causes = sorted({c for r in health(out) if float(r["elapsed_s"]) in seen for c in r.get("causes") or ()})
        return f"seconds without CPU to spare in these windows: {late} (causes {causes})"
    name = yaml.safe_load(path.read_text())["name"]
    run, out, summary = run_held([str(path)], results, name, not_held)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    return Run(run.stdout, out, events, summary)


# -- the broker run --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BrokerFaults:
    """Where the broker run's faults fall, from the monitoring period P. bzone1 is killed, and
    restarted; it registers within START_MAX_S and the next rounds bring its topics home: its agent
    reports within P, the round after within another P, the migration within MIGRATION_S. A second
    later (the traffic seen there) it is paused, long enough for its clients to notice and fail over
    as from a crash, and the run ends once it has resumed and given its topics up."""

    period: float
    relay_at: float = 4.0
    kill_at: float = 7.0
    restart_after: float = 6.0
    pause_for: float = NOTICE_S + 2 * FAILOVER_P50_S + 1.0

    @property
    def restart_at(self) -> float:
        return self.kill_at + self.restart_after

    @property
    def home_by(self) -> float:
        return self.restart_at + START_MAX_S + 2 * self.period + MIGRATION_S

    @property
    def pause_at(self) -> float:
        return self.home_by + 2.0

    @property
    def resumed_at(self) -> float:
        return self.pause_at + self.pause_for

    @property
    def duration(self) -> float:
        return self.resumed_at + GIVE_UP_S + 1.0

    def faults(self) -> list[dict]:
        return [{"at": f"{self.relay_at:g}s", "relay": ["zone1", "zone2"]},
                {"at": f"{self.kill_at:g}s", "kill": "bzone1", "restart_after": f"{self.restart_after:g}s"},
                {"at": f"{self.pause_at:g}s", "pause": "bzone1", "resume_after": f"{self.pause_for:g}s"}]

    def windows(self) -> dict[str, tuple[float, float, tuple[str, ...]]]:
        """The spans the timing claims are about; the relay's own seconds are marked by its outage."""
        return {"relay": (self.relay_at, self.relay_at + 1.5, ("relay-down",)),
                "kill": (self.kill_at - 1.0, self.kill_at + 3.0, ()),
                "restart": (self.restart_at - 1.0, self.restart_at + START_MAX_S, ()),
                "pause": (self.pause_at - 1.0, self.resumed_at + GIVE_UP_S, ())}


@pytest.fixture(scope="module")
def broker_run(tmp_path_factory) -> tuple[Run, BrokerFaults]:
    """failover-smoke with its coordinates settled (the scenario's cap): where a topic fails over to
    is chosen from them (bzone2, 30 ms away, over the cloud, 80 ms)."""
    root = tmp_path_factory.mktemp("broker-faults")
    probe = variant(root, "broker-faults", None)
    plan = BrokerFaults(period=load(probe).control.monitoring_period)
    path = variant(root, "broker-faults", None, duration=f"{plan.duration:g}s", faults=plan.faults())
    return live(path, root / "runs", plan.windows()), plan


def test_a_killed_delay_line_is_restarted_and_its_outage_marked(broker_run):
    """The delay line of the zone1-zone2 link killed (an emulation error): restarted within a second,
    and the seconds its link forwarded nothing marked saturated, so the run is not valid."""
    run, plan = broker_run
    assert run.summary["rounds_failed"] == 0
    (relay,) = of(run.events, "relay_killed")
    assert abs(relay["time"] - run.start - plan.relay_at) < 1.0 + run.slack(relay["time"] - 1.0, relay["time"])
    repaired = [e for e in of(run.events, "data_path_problem") if "restarted" in e["detail"]]
    assert len(repaired) == 1, repaired
    assert relay["time"] <= repaired[0]["time"] < relay["time"] + 1.0 + run.slack(relay["time"], relay["time"] + 1.0)
    harness = run.summary["harness"]
    marked = [i for i in harness["saturated"] if "relay-down" in i["causes"]]
    assert not harness["valid"] and len(marked) == 1, harness["saturated"]
    assert marked[0]["from_s"] <= relay["time"] - run.start < marked[0]["to_s"] + 1.0
    assert "a delay line died and was restarted" in marked[0]["cause"]


def test_a_killed_broker_has_its_topics_replaced_and_the_downtime_measured(broker_run):
    """bzone1 crashes (every process of its node SIGKILLed) and is restarted 6 s later: its topics
    fail over to bzone2 within a second (the clients tell the topic manager, which probes bzone1 and
    fences it rather than wait for its ZooKeeper session), and once it is back the next rounds bring
    them home."""
    run, plan = broker_run
    assert run.summary["rounds_failed"] == 0
    (killed,) = of(run.events, "broker_killed")
    (paused,) = of(run.events, "broker_paused")
    at = killed["time"]  # taken once the node's processes are gone: its clients may have noticed first
    since, until = run.start + plan.kill_at - 1.0, paused["time"]  # this fault's window: up to the next one
    assert killed["node"] == "bzone1" and abs(at - run.start - plan.kill_at) < 1.0 + run.slack(at - 1.0, at)
    # everything in the node: its nats-server, broker agent (Python) and Serf agent
    assert len(killed["killed"]) == 3 and {"nats-server", "serf"} < set(killed["killed"])
    assert any(name.startswith("python") for name in killed["killed"])
    failover = run.summary["failover"]
    print(f"\nfailover: {failover}")
    assert failover["brokers_killed"] == ["bzone1"] and failover["topics_replaced"] == 2
    # Both topics of the swarm lived on bzone1 (its home zone) and were re-placed, from their last
    # report, on the nearest live broker: bzone2 (30 ms RTT away) rather than the cloud (80 ms).
    orphans = {e["topic"]: e for e in of(run.events, "orphan_replaced", since, until)}
    assert sorted(orphans) == BOTH
    assert all(o["dead"] == "bzone1" and o["broker"] == "bzone2" and o["carried"] for o in orphans.values())
    # Every client (3 UAVs x 2 topics) lost its broker and came back within a second: the topic
    # manager probed bzone1 on the clients' word (refused at once) and fenced it.
    lost = {(e["topic"], e["client"], e.get("role")) for e in of(run.events, "broker_lost", since, until)}
    downs = [e for e in of(run.events, "downtime", since, until) if e.get("reason") == "broker_lost"]
    assert len(lost) == 6 and lost == {(e["topic"], e["client"], e.get("role")) for e in downs}
    (fenced,) = of(run.events, "broker_fenced", since, until)
    assert fenced["broker"] == "bzone1" and fenced["probe_s"] < PROBE_S + run.slack(since, fenced["time"])  # refused
    # each downtime less what the hypervisor held of it (not the clients' own lateness: theirs to answer for)
    own = sorted(e["downtime_s"] - run.slack(e["start"], e["end"]) for e in downs)
    assert statistics.median(own) < FAILOVER_P50_S and own[-1] < 2 * FAILOVER_P50_S, own
    # restarted when planned, its nats-server and agent up (registered with ZooKeeper) within seconds
    (restarted,) = of(run.events, "broker_restarted")
    began = restarted["time"] - restarted["start_s"]
    assert restarted["node"] == "bzone1" and abs(began - at - plan.restart_after) < 1.0 + run.slack(began - 1.0, began)
    assert restarted["start_s"] < START_MAX_S + run.slack(began, restarted["time"])
    assert failover["brokers_restarted"] == ["bzone1"] and "restarted bzone1" in run.stdout
    # meanwhile the traffic flowed through bzone2
    rows = run.rows()
    between = [r for r in rows if at + 3 < float(r["send_time"]) < restarted["time"]]
    assert between and {row["broker"] for row in between} == {"bzone2"}
    # back: it registers again and the next rounds move both topics home (their clients are in zone1)
    home = [e for e in of(run.events, "migration_end", restarted["time"], until) if e.get("ok")]
    assert sorted(e["topic"] for e in home) == BOTH, home
    assert max(e["time"] for e in home) - run.start <= plan.home_by + run.slack(restarted["time"], until)
    last = [r for r in rows if max(e["time"] for e in home) + 1.0 < float(r["send_time"]) < until]
    assert last and {row["broker"] for row in last} == {"bzone1"}


def test_a_paused_broker_is_fenced_and_gives_its_topics_up_when_it_resumes(broker_run):
    """bzone1 (home again) stopped (SIGSTOP of its node): the clients notice the silence (NATS pings),
    the topic manager's probe times out and fences bzone1, the topics go to bzone2; when bzone1
    resumes (its ZooKeeper session still alive) its owner nodes' watches tell it the topics are gone,
    and it gives them up rather than serve them beside their new owner: no split brain. What the run
    lost was what each fault left without a broker."""
    run, plan = broker_run
    (paused,) = of(run.events, "broker_paused")
    (resumed,) = of(run.events, "broker_resumed")
    at = paused["time"]  # this fault's window: to the end
    assert {"nats-server", "serf"} < set(paused["paused"])
    assert abs(at - run.start - plan.pause_at) < 1.0 + run.slack(at - 1.0, at)
    took = resumed["time"] - at
    assert plan.pause_for - 0.5 < took < plan.pause_for + 1.5 + run.slack(at, resumed["time"])
    failover = run.summary["failover"]
    print(f"\npaused broker: {failover}")
    assert failover["brokers_paused"] == ["bzone1"]
    (fenced,) = of(run.events, "broker_fenced", at)
    assert at < fenced["time"] < resumed["time"] and fenced["probe_s"] >= PROBE_S  # a timeout, not a refusal
    assert fenced["broker"] == "bzone1" and sorted(fenced["fenced"]) == BOTH
    # every client noticed the silence and came back, on bzone2, while bzone1 was still paused
    lost = {(e["topic"], e["client"], e.get("role")) for e in of(run.events, "broker_lost", at)}
    downtimes = [e for e in of(run.events, "downtime", at) if e.get("reason") == "broker_lost"]
    assert len(lost) == 6 and lost == {(e["topic"], e["client"], e.get("role")) for e in downtimes}
    assert all(e["to"] == "bzone2" and e["end"] < resumed["time"] + run.slack(at, resumed["time"])
               for e in downtimes), downtimes
    # on resuming, bzone1 gave both topics up (its session was alive: the watches told it)
    gave_up = of(run.events, "ownership_fenced", at)
    assert sorted(e["topic"] for e in gave_up) == BOTH
    late = GIVE_UP_S + run.slack(resumed["time"], resumed["time"] + GIVE_UP_S)
    assert all(resumed["time"] <= e["time"] < resumed["time"] + late for e in gave_up)
    # nothing of those topics went through bzone1 after it resumed until the topic manager moved them
    # back to it (the nearest broker again: a migration, announced by its start, not a second owner)
    back = [e for e in of(run.events, "migration_start", at) if e.get("to_broker") == "bzone1"]
    until = min([e["time"] for e in back], default=float("inf"))
    served = [r for r in run.rows()
              if r["broker"] == "bzone1" and resumed["time"] + 0.5 < float(r["receive_time"]) < until]
    assert not served, served[:3]
    # lost: what was in flight at the crash and its failover, and what bzone1 took in while paused
    # before its clients noticed and failed over (the swarm's deliveries a second: each of the
    # members - 1 followers gets the leader's messages, the leader each follower's)
    scenario = load(run.out / "scenario.yaml")
    (swarm,) = scenario.nodes.clients
    per_second = 2 * scenario.workload.rate * (swarm.members - 1)
    outages = 2 * FAILOVER_P50_S + NOTICE_S + 2 * FAILOVER_P50_S
    assert run.summary["delivered"] >= run.summary["expected_deliveries"] - per_second * outages


# -- the control-plane run -------------------------------------------------------------------------

@dataclass(frozen=True)
class PlaneFaults:
    """Where the control-plane run's faults fall, each after the one before is over and each
    reference window (as long a time just before a fault, which its claims compare with) clean of the
    others. ZooKeeper first, killed once as long a time of traffic as it stays away has passed: it is
    away longer than a session, so the leader steps down and is elected again once its old session
    expires after ZooKeeper is back. Then the cut (its reference window after ZooKeeper is back; its
    clients' lookups after the heal need the re-elected manager); the elected manager killed once
    they are back; a client crash meanwhile (data plane only: the manager's claims do not look at it,
    nor it at them). The run ends a standby's election and a round after the manager's kill."""

    period: float
    zk_for: float = SESSION_S + 2.0
    cut_for: float = 6.0

    @property
    def zk_at(self) -> float:
        return self.zk_for + 1.0  # after the publishers' start (within 0.5 s of the run's)

    @property
    def zk_back_by(self) -> float:
        return self.zk_at + self.zk_for + ZK_START_MAX_S

    @property
    def cut_at(self) -> float:
        return max(self.zk_back_by + self.cut_for, self.zk_back_by + SESSION_S)

    @property
    def healed_at(self) -> float:
        return self.cut_at + self.cut_for

    @property
    def manager_at(self) -> float:
        return self.healed_at + BACK_AFTER_HEAL_S + 1.0

    @property
    def crash_at(self) -> float:
        return self.healed_at + BACK_AFTER_HEAL_S + CRASH_SPAN_S

    @property
    def duration(self) -> float:
        return self.manager_at + HANDOVER_MAX_S + self.period + 1.0

    def faults(self) -> list[dict]:
        return [{"at": f"{self.zk_at:g}s", "kill": "zookeeper", "restart_after": f"{self.zk_for:g}s"},
                {"at": f"{self.cut_at:g}s", "cut": "zone1", "heal_after": f"{self.cut_for:g}s"},
                {"at": f"{self.manager_at:g}s", "kill": "manager"},
                {"at": f"{self.crash_at:g}s", "kill": "swarm2"}]

    def windows(self) -> dict[str, tuple[float, float, tuple[str, ...]]]:
        return {"zookeeper": (self.zk_at - self.zk_for, self.zk_back_by, ()),
                "cut": (self.cut_at - self.cut_for, self.healed_at + BACK_AFTER_HEAL_S, ()),
                "manager": (self.manager_at - 1.0, self.manager_at + HANDOVER_MAX_S, ()),
                "crash": (self.crash_at - CRASH_SPAN_S, self.crash_at + CRASH_SPAN_S, ())}


@pytest.fixture(scope="module")
def plane_run(tmp_path_factory) -> tuple[Run, PlaneFaults]:
    """failover-smoke with hash placement (sensor_data-swarm1 on bzone1, in the swarm's own site, and
    follow_leader-swarm1 on a cloud broker, across the cut), two swarms in zone1 and two cloud brokers
    (a standby topic manager). Nothing here is placed by the coordinates, but the topic manager lists
    a broker only once it reports one: 5 s of settling, not the scenario's 15."""
    root = tmp_path_factory.mktemp("plane-faults")
    base = yaml.safe_load((ROOT / "scenarios" / "failover-smoke.yaml").read_text())["nodes"]
    nodes = {**base, "cloud_brokers": 2, "clients": [{**base["clients"][0], "count": 2}]}
    probe = variant(root, "plane-faults", "5s", nodes=nodes)
    plan = PlaneFaults(period=load(probe).control.monitoring_period)
    path = variant(root, "plane-faults", "5s", nodes=nodes, duration=f"{plan.duration:g}s",
                   control={**yaml.safe_load(probe.read_text())["control"], "policy": "pulsar-hash"},
                   faults=plan.faults())
    return live(path, root / "runs", plan.windows()), plan


def test_a_site_cut_off_stops_what_crosses_it_and_the_clients_come_back_after_the_heal(plane_run):
    """zone1 cut off for 6 s: the edge topic does not notice; the cloud topic delivers nothing during
    the cut, its clients lose their broker and are back on one after the heal; the run says what the
    cut cost, and run.json carries its span for the figures."""
    from testbed.policies.initial import hash_broker

    run, plan = plane_run
    brokers = ["bzone1", "bzone2", "cloud1", "cloud2"]
    assert [hash_broker(t, brokers) for t in ("sensor_data-swarm1", "follow_leader-swarm1")] == ["bzone1", "cloud2"]
    (cut,) = of(run.events, "site_cut")
    (healed,) = of(run.events, "site_healed")
    late = 0.5 + run.slack(cut["time"] - 1.0, healed["time"])
    assert cut["site"] == "zone1" and abs(cut["time"] - run.start - plan.cut_at) < late
    assert abs(healed["time"] - cut["time"] - plan.cut_for) < late
    spans = [s for s in json.loads((run.out / "run.json").read_text())["faults"] if s["kind"] == "cut"]
    assert [s["target"] for s in spans] == ["zone1"] and abs(spans[0]["to_s"] - spans[0]["from_s"] - plan.cut_for) < late
    rows = run.rows()
    before = {r["topic"]: r["broker"] for r in rows if r["topic"].endswith("swarm1") and float(r["receive_time"]) < cut["time"]}
    assert before == {"sensor_data-swarm1": "bzone1", "follow_leader-swarm1": "cloud2"}, before

    def received(topic, low, high):
        return sum(low <= float(r["receive_time"]) < high for r in rows if r["topic"] == topic)
    # the edge topic delivers on through the cut; across it nothing arrives (past what was in flight)
    assert received("sensor_data-swarm1", cut["time"], healed["time"]) >= 0.9 * received(
        "sensor_data-swarm1", cut["time"] - plan.cut_for, cut["time"]) > 0
    # past what was in flight at the cut, which a late event loop stamps later than it arrived
    assert received("follow_leader-swarm1", cut["time"] + 0.2 + run.slack(cut["time"], cut["time"] + 1.0),
                    healed["time"]) == 0
    back = healed["time"] + BACK_AFTER_HEAL_S
    assert received("follow_leader-swarm1", back, back + 2.0) > 0  # and after the heal again
    (cost,) = run.summary["site_cuts"]
    print(f"\nsite cut: {cost}")
    assert cost["site"] == "zone1" and abs(cost["cut_s"] - plan.cut_for) < late
    # the end screen shows the cut as measured (5.947 s once, for 6 s planned: judged with its slack above)
    assert f"site zone1 cut off for {cost['cut_s']:.1f} s" in run.stdout, run.stdout[-2000:]
    # the clients that lost their broker in the cut, each back on one within the reconnect wait and a
    # lookup retry of the heal (the summary counts later faults' downtimes too: judged here up to the next)
    lost = {(e["topic"], e["client"], e.get("role")) for e in of(run.events, "broker_lost", cut["time"], back)}
    assert len(lost) >= 2 and cost["clients_lost_broker"] >= len(lost)
    assert cost["clients_recovered"] == cost["clients_lost_broker"]
    first_back = {}
    for e in of(run.events, "downtime", cut["time"]):
        first_back.setdefault((e["topic"], e["client"], e.get("role")), e["end"])
    assert lost <= set(first_back), lost - set(first_back)
    # each step of the way back judged on its own (the summary's back_after_heal_s is 1.9 s here; 6.03 s
    # once in CI, when a publisher's pings waited behind its data and it noticed nothing in the cut)
    lookup_back = {}
    for key in lost:
        lookup_back[key] = next((e["time"] for e in of(run.events, "lookup_back", healed["time"])
                                 if (e["topic"], e["client"], e["role"]) == key), healed["time"])
        assert lookup_back[key] - healed["time"] < LOOKUP_BACK_S + run.slack(healed["time"], lookup_back[key]), key
    assert all(broker_lost["time"] < healed["time"] for broker_lost in of(run.events, "broker_lost", cut["time"], back))
    # a subscriber's downtime ends with its first message, from a publisher that is back too
    all_looked_up = max(lookup_back.values())
    late_back = {key: first_back[key] - all_looked_up for key in lost}
    assert max(late_back.values()) < RELINK_AFTER_LOOKUP_S + run.slack(all_looked_up, back), late_back
    last = max(first_back[key] for key in lost)
    assert last - healed["time"] < BACK_AFTER_HEAL_S + run.slack(healed["time"], back)


def test_zookeeper_killed_and_restarted_stops_the_control_plane_not_the_data_plane(plane_run):
    """ZooKeeper SIGKILLed and started again later with its data: the control plane is gone meanwhile
    (no round completes; a round fails only on ZooKeeper's absence, and none outside it in the whole
    run), the data plane keeps delivering, and once ZooKeeper serves again the rounds resume. It was
    away longer than a session: the leader steps down and comes back as a standby, never two leaders."""
    run, plan = plane_run
    assert "ZooKeeper killed: back after" in run.stdout
    (killed,) = of(run.events, "zookeeper_killed")
    (back,) = of(run.events, "zookeeper_restarted")
    late = run.slack(killed["time"] - 1.0, back["time"])
    assert abs(killed["time"] - run.start - plan.zk_at) < 1.0 + late
    assert plan.zk_for <= back["time"] - killed["time"] < plan.zk_for + ZK_START_MAX_S + late
    outage = run.summary["zookeeper_outage"]
    print(f"\nZooKeeper outage: {outage}")
    # the data plane does not need ZooKeeper: as many deliveries while it was down as just before
    assert outage["delivered_while_down"] >= 0.8 * outage["delivered_before"] > 0
    # the control plane stalled: no round failed but while ZooKeeper was away, and those only on its
    # absence (a request in flight at the kill, or waiting when the session ended); then rounds resumed
    failed = of(run.events, "round_failed")
    assert run.summary["rounds_failed"] == outage["rounds_failed"] == len(failed)
    assert all(killed["time"] <= e["time"] <= back["time"] for e in failed), failed
    assert all(e["error"].startswith(("ConnectionLoss", "SessionExpired")) for e in failed), failed
    assert outage["first_round_after_s"] >= outage["down_s"] - 0.5 and outage["rounds_after"] >= 1
    rounds = of(run.events, "round", back["time"])
    assert rounds and rounds[-1]["brokers"] >= 2
    lost = of(run.events, "leadership_lost")
    restarts = of(run.events, "manager_restart")
    assert {e["node"] for e in lost} == {e["node"] for e in restarts}, (lost, restarts)


def test_a_killed_topic_manager_is_replaced_by_its_standby(plane_run):
    """The elected topic manager SIGKILLed: with two cloud brokers the other manager is elected once
    the leader's ZooKeeper session expires, not before, and runs the rounds from then on; between two
    elections the rounds come from the later-elected manager only."""
    run, plan = plane_run
    handover = run.summary["manager_handover"]
    print(f"\nmanager handover: {handover}; stepped down: {[e['node'] for e in of(run.events, 'leadership_lost')]}")
    assert abs(handover["time"] - run.start - plan.manager_at) < 1.0 + run.slack(handover["time"] - 1.0, handover["time"])
    assert {handover["killed"], handover["elected"]} == {"cloud1", "cloud2"} and handover["standbys"] == 1
    # the killed manager was the leader: it ran the rounds until then
    leading = of(run.events, "round", handover["time"] - plan.period - 1.0, handover["time"])
    assert leading and {e["node"] for e in leading} == {handover["killed"]}, leading
    elected_at = handover["time"] + handover["gap_s"]
    assert HANDOVER_MIN_S <= handover["gap_s"] <= HANDOVER_MAX_S + run.slack(handover["time"], elected_at)
    assert handover["rounds_after"] >= 1
    assert f"topic manager in {handover['killed']} killed: {handover['elected']} elected" in run.stdout
    assert {e["node"] for e in of(run.events, "round", elected_at)} == {handover["elected"]}
    elections = sorted(of(run.events, "elected"), key=lambda e: e["time"])
    for a, b in zip(elections, elections[1:] + [{"time": float("inf")}]):
        nodes = {e["node"] for e in of(run.events, "round", a["time"] + 1e-6, b["time"])}
        assert nodes <= {a["node"]}, (a, b, nodes)


def test_a_client_that_crashes_stops_its_own_traffic_only(plane_run):
    """swarm2's workload process SIGKILLed: its messages stop at once, swarm1's traffic goes on as
    before, and the run says what the crash cost."""
    run, plan = plane_run
    assert "client swarm2 killed" in run.stdout
    (crash,) = of(run.events, "client_killed")
    at = crash["time"]
    assert crash["node"] == "swarm2" and any(name.startswith("python") for name in crash["killed"])
    assert abs(at - run.start - plan.crash_at) < 1.0 + run.slack(at - 1.0, at)
    assert not [e for e in of(run.events, "workload_died") if e["node"] == "swarm2"]  # said once
    (cost,) = run.summary["client_crashes"]
    print(f"\nclient crash: {cost}")
    # nothing of swarm2's after the crash (the event's time is taken just before the kill; a message in
    # flight may land within its path delay)
    late = run.slack(at, at + 1.0)
    assert cost["last_sent_s"] is not None and cost["last_sent_s"] <= 0.1 + late
    assert cost["last_received_s"] is not None and cost["last_received_s"] <= 0.2 + late
    # swarm1 delivered as much after the crash as in as long before
    swarm1 = [float(r["receive_time"]) for r in run.rows() if r["topic"].endswith("-swarm1")]
    before = sum(at - CRASH_SPAN_S <= t < at for t in swarm1)
    after = sum(at <= t < at + CRASH_SPAN_S for t in swarm1)
    assert after >= 0.9 * before > 0, (before, after)
