"""The data plane on a real emulated network (root only): the pub/sub system as runs assemble it
(ZooKeeper in the cloud node, three brokers with a nats-server and a broker agent each) with the
lookup service alone where the topic manager would be (no policy), and clients in their own nodes.

Two zones 30 ms apart, the cloud 20 ms one-way from each, access 4 ms, local 1 ms: cl1 (zone1)
publishes, cl2 (zone2) subscribes. Through bzone1 (or bzone2) the configured one-way path is
4 + 1 + 15 + 4 + 1 = 25 ms (no zone is favoured: the E2E latency does not change on migration).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import time
from pathlib import Path

import nats
import pytest

from testbed.emulation import choose
from testbed.experiment import Session
from testbed.policies import ONE_WAY, latency
from testbed.procs import read_line, stop_group
from testbed.roles.inside import NodeLoop
from testbed.roles.launch import expire_session, node_metadata, start_agent, start_lookup
from testbed.systems.pubsub.role import ManagerOptions, PubSubSystem
from testbed.systems.pubsub.broker import nats_url
from testbed.policies.snapshot import BrokerReport, coord_from_dict
from testbed.scenario.loader import parse_text
from tests import claims
from tests.live import QUIET_STEAL_MS, measured_held, steal_ms
from tests.needs import needs_nats_server

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(not choose.mininet_importable()[0], reason="Mininet is not installed"),
    needs_nats_server,
    pytest.mark.skipif(not shutil.which("java") or not os.path.exists("/usr/share/java/zookeeper.jar"),
                       reason="ZooKeeper is not installed (apt-get install zookeeper)"),
]

SCENARIO = """
name: dataplane
duration: 1m
seed: 3
infrastructure:
  mec_zones: {zones: 2, inter_site_rtt: 30ms}
  cloud: {one_way: 20ms}
  links: {access: {delay: 4ms}, local: {delay: 1ms}}
nodes:
  nc_proxies_per_site: 0
  clients:
    - {name: cl, role: static, count: 1, site: each}
emulation: {backend: mininet}
"""
BROKERS = {"cloud": "clouddc", "bzone1": "zone1", "bzone2": "zone2"}
PERIOD = 1.0  # monitoring and NC report period, short so the tests see reports quickly


class Plane(PubSubSystem):
    """The running data plane and the harness's hands on it (NATS and ZooKeeper from inside nodes).

    Assembled by PubSubSystem, as a run does, except that the cloud runs the lookup service alone
    instead of the topic manager: these tests move topics themselves, and the manager's policy rounds
    would move them too. Unowned topics go to `manager.default`."""

    def __init__(self, session: Session, log_dir):
        super().__init__(session.network, session.topology, log_dir, ManagerOptions(default="bzone1"),
                         monitoring_period=PERIOD, nc_period=PERIOD)
        self.session, self.net = session, session.network
        self.processes: list[subprocess.Popen] = []  # clients
        self.loops: dict[str, NodeLoop] = {}
        self.conns: dict[tuple[str, str], object] = {}
        self.serf = self.meta = None

    def start(self) -> None:
        if shutil.which("serf"):  # the brokers' coordinates, for E(t) in their reports
            from testbed.roles.launch import SerfAgents

            self.serf = SerfAgents(self.net, self.session.topology, self.log_dir)
            self.serf.start(list(BROKERS))
        started = time.monotonic()
        super().start()
        self.started_s = time.monotonic() - started
        self.meta = node_metadata(self.zk.hosts, self.network.connector("cloud")).start()

    def _start_manager(self) -> None:
        self.managers = {self.cloud: start_lookup(self.net, self.cloud, self.zk.hosts, self.manager.default,
                                                  self.log_dir)}

    def pid(self, node: str) -> int:
        return self.net.nodes[node].pid

    def url(self, node: str) -> str:
        return nats_url(self.net.ip_of(node))

    def loop(self, node: str) -> NodeLoop:
        if node not in self.loops:
            self.loops[node] = NodeLoop(self.pid(node))
        return self.loops[node]

    async def _conn(self, node: str, address: str):
        key = (node, address)
        if key not in self.conns or self.conns[key].is_closed:
            self.conns[key] = await nats.connect(address, connect_timeout=5)
        return self.conns[key]

    def request(self, subject: str, body: dict, at: str, node: str = "cloud", timeout: float = 15.0) -> dict:
        """Request/reply from `node` to the nats-server of broker `at` (the topic manager's view)."""
        async def go():
            nc = await self._conn(node, self.url(at))
            reply = await nc.request(subject, json.dumps(body).encode(), timeout=timeout)
            return json.loads(reply.data)

        return self.loop(node).run(go(), timeout + 5)

    def command(self, broker: str, **body) -> dict:
        return self.request(f"_ep.cmd.{broker}", body, at=broker)

    def client(self, mode: str, node: str, topic: str, *extra: str) -> subprocess.Popen:
        argv = [self.net.python, "-m", "testbed.systems.pubsub.client", mode, "--topic", topic, "--name", node,
                "--lookup", self.url("cloud"), "--site", self.net.site_of(node), "--nc-period", f"{PERIOD:g}",
                "--events", str(self.log_dir / f"events-{topic}-{node}.jsonl"), *extra]
        log = (self.log_dir / f"client-{topic}-{node}.log").open("ab")
        process = self.net.popen(node, argv, stdout=subprocess.PIPE, stderr=log, text=True)
        self.processes.append(process)
        line = read_line(process, 20)
        assert line and json.loads(line)["ready"], f"{mode} client in {node} did not start: {line}"
        return process

    @staticmethod
    def summary(process: subprocess.Popen, stop: bool = False, timeout: float = 30) -> dict:
        if stop:
            process.terminate()
        out, _ = process.communicate(timeout=timeout)
        return json.loads(out.strip().splitlines()[-1])

    def stop(self) -> None:
        for loop in self.loops.values():
            loop.close()
        try:
            if self.meta:
                self.meta.stop()
        except Exception:  # noqa: BLE001
            pass
        stop_group(self.processes)  # the clients, then the system (lookup and agents, servers, ZooKeeper)
        super().stop()
        if self.serf:
            self.serf.stop()


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("dataplane")
    with Session(parse_text(SCENARIO), log_dir=log_dir) as session:
        plane = Plane(session, log_dir)
        try:
            plane.start()
            yield plane
        finally:
            plane.stop()


def configured_one_way(plane: Plane, producer: str, broker: str, consumer: str) -> float:
    topo = plane.session.topology
    return (topo.node_rtt(producer, broker) + topo.node_rtt(broker, consumer)) / 2


def wait_for(predicate, timeout: float = 10.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def drained(trace: Path, expected: int, timeout: float = 15.0) -> int:
    """Wait until a subscriber's trace holds `expected` rows, or has not grown for longer than the
    client's flush period and a second (what is lost stays lost): the last messages may still be on
    the emulated path or in an event loop the hypervisor stalled, and a fixed sleep judged by luck."""
    from testbed.systems.pubsub.client import FLUSH_EVERY_S

    def rows() -> int:
        return sum(1 for _ in trace.open()) if trace.exists() else 0

    deadline, seen, since = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        count = rows()
        if count >= expected:
            return count
        if count != seen:
            seen, since = count, time.monotonic()
        elif time.monotonic() - since > FLUSH_EVERY_S + 1.0:
            return count
        time.sleep(0.1)
    return rows()


def test_zookeeper_runs_in_the_cloud_and_brokers_register(plane):
    assert plane.zk.four_letter("ruok") == "imok"
    assert plane.started_s < 40  # ZooKeeper, three brokers with their agents, the lookup
    brokers = plane.meta.brokers()
    assert set(brokers) == set(BROKERS)
    assert brokers["bzone1"]["address"] == plane.url("bzone1") and brokers["bzone1"]["site"] == "zone1"
    assert brokers["cloud"]["cloud"] is True
    reports = wait_for(lambda: len(plane.meta.reports()) == 3 and plane.meta.reports(), timeout=3 * PERIOD + 2)
    report = BrokerReport.from_dict(reports["bzone1"])
    assert 0 <= report.cpu < 1 and 0 < report.memory < 1 and reports["bzone1"]["period"] == PERIOD
    # no client has published yet: the broker reports no topic and nothing sent on
    assert report.broker == "bzone1" and report.topics == () and report.rate_out == 0.0


@pytest.mark.quiet
@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_e2e_latency_matches_the_configured_path(plane, engine):
    """Through either data plane (nats-py, or the compiled engine whose publishers leave on a 1 ms
    grid and whose receive times are the kernel's), the same bounds over the configured path."""
    configured = configured_one_way(plane, "cl1", "bzone1", "cl2")
    assert configured == pytest.approx(0.025)
    attempts = iter(range(10))

    def measure() -> tuple[dict, dict, list[dict], float]:
        trace = plane.log_dir / f"trace-e2e-{engine}-{next(attempts)}.jsonl"
        sub = plane.client("sub", "cl2", "e2e", "--trace", str(trace), "--engine", engine)
        pub = plane.client("pub", "cl1", "e2e", "--rate", "50", "--duration", "5", "--size", "1000", "--engine", engine)
        sent = plane.summary(pub)
        drained(trace, sent["sent"])
        got = plane.summary(sub, stop=True)
        rows = [json.loads(line) for line in trace.open()]
        lat = sorted(float(r["receive_time"]) - float(r["send_time"]) for r in rows)
        p50 = lat[len(lat) // 2]
        print(f"\nE2E cl1 -> bzone1 -> cl2 ({engine}): configured {configured * 1e3:.2f} ms, measured p50 {p50 * 1e3:.2f} ms, "
              f"p99 {lat[int(0.99 * len(lat))] * 1e3:.2f} ms over {len(lat)} messages at 50/s")
        return sent, got, rows, p50

    # the p50 within 0.5 ms below (clock reads) and 2 ms above (two client event loops, the broker,
    # the shaper's departure grid) the configured path, judged on a measurement the hypervisor left alone
    sent, got, rows, p50 = measured_held(measure, lambda m: 1e3 * max(m[3] - configured - 0.002, configured - 0.0005 - m[3]))
    assert sent["sent"] == 250 and got["received"] == 250 and got["lost"] == 0 and got["duplicates"] == 0
    assert len(rows) == 250 and {r["broker"] for r in rows} == {"bzone1"}
    assert rows[0]["msg_id"] == "cl1:0" and rows[0]["producer_site"] == "zone1" and rows[0]["consumer_site"] == "zone2"
    assert -0.0005 <= p50 - configured <= 0.002
    assert plane.meta.owner("e2e")["broker"] == "bzone1"
    report = wait_for(lambda: [t for t in plane.meta.report("bzone1")["topics"] if t["topic"] == "e2e"])
    assert report  # the owner reported the topic while its clients were alive


def _migrate(plane, topic: str, workflow: str, engine: str = "python") -> tuple[dict, dict, dict, float, float]:
    """(the broker's reply, the publisher's and the subscriber's summaries, the manager's time, the
    hypervisor's steal in ms over the migration and the clients' move) of one move of `topic` from
    bzone1 to bzone2 by `workflow`, its publisher at 100 messages/s for 6 s."""
    trace = plane.log_dir / f"trace-{topic}.jsonl"
    sub = plane.client("sub", "cl2", topic, "--trace", str(trace), "--engine", engine)
    pub = plane.client("pub", "cl1", topic, "--rate", "100", "--duration", "6", "--engine", engine)
    assert plane.meta.owner(topic)["broker"] == "bzone1"
    assert plane.command("bzone1", op="status")["ok"]  # the manager's connection to bzone1 is up before timing
    time.sleep(2.0)
    started, stolen_before = time.monotonic(), steal_ms()
    if workflow == "enhanced":
        reply = plane.command("bzone1", op="release", topic=topic, to="bzone2", address=plane.url("bzone2"))
    else:
        assert plane.request("_ep.lookup.plan", {"topic": topic, "broker": "bzone2"}, at="cloud")["ok"]
        reply = plane.command("bzone1", op="release", topic=topic)
    manager_s = time.monotonic() - started
    sent = plane.summary(pub)
    drained(trace, sent["sent"])
    got = plane.summary(sub, stop=True)
    return reply, sent, got, manager_s, steal_ms() - stolen_before


@pytest.mark.parametrize("workflow", ["enhanced", "baseline"])
def test_the_compiled_client_engine_moves_with_both_workflows(plane, workflow):
    """The same moves with the clients' data plane in the compiled engine (control plane in Python):
    one downtime each, the topic's messages through both brokers, and nothing lost in the enhanced
    workflow (the baseline's losses, if any, counted)."""
    topic = f"eng_{workflow[:4]}"
    reply, sent, got, *_ = _migrate(plane, topic, workflow, engine="compiled")
    reason = "redirect" if workflow == "enhanced" else "disconnect"
    downs = {s["role"]: [d for d in s["downtimes"] if d["reason"] == reason] for s in (sent, got)}
    print(f"\n{workflow} through the engine: downtime producer {[round(d['downtime_s'] * 1e3, 1) for d in downs['producer']]}"
          f" ms, consumer {[round(d['downtime_s'] * 1e3, 1) for d in downs['consumer']]} ms; received {got['received']}/"
          f"{sent['sent']}, lost {got['lost']}, by broker {got['brokers']}")
    assert reply["ok"] and reply["workflow"] == workflow and plane.meta.owner(topic)["broker"] == "bzone2"
    assert got["engine"] is True and sent["sent"] == 600 and sent["broker"] == got["broker"] == "bzone2"
    assert len(downs["producer"]) == 1 and len(downs["consumer"]) == 1, (sent["downtimes"], got["downtimes"])
    assert set(got["brokers"]) == {"bzone1", "bzone2"}
    if workflow == "enhanced":
        assert got["received"] == 600 and got["lost"] == 0
    else:
        assert_baseline_loss(got, downs)


RATE = 100  # the migrating topic's messages a second (_migrate)


def assert_baseline_loss(got: dict, downs: dict[str, list[dict]]) -> None:
    """What the baseline may lose: every message counted (received or lost), and at most what was
    published while its producer or its consumer was off a broker (their downtimes at RATE), and a
    message in flight at each end."""
    assert got["received"] + got["lost"] == 600
    off_s = sum(d["downtime_s"] for d in downs["producer"] + downs["consumer"])
    assert got["lost"] <= RATE * off_s + 2, (got["lost"], off_s)


MIGRATED = {"enhanced": "mig_enh", "baseline": "mig_base"}  # the topic each workflow moves (later tests use them)


def _pair(plane, suffix: str = "") -> dict[str, tuple]:
    return {workflow: _migrate(plane, topic + suffix, workflow) for workflow, topic in MIGRATED.items()}


@pytest.fixture(scope="module")
def migrations(plane) -> dict[str, tuple]:
    """A topic moved by each workflow, one after the other on the same plane (what `_migrate` gives,
    by workflow): each judged on its own, and the two against each other."""
    return _pair(plane)


def _downs(workflow: str, sent: dict, got: dict) -> dict[str, list[dict]]:
    reason = "redirect" if workflow == "enhanced" else "disconnect"
    return {s["role"]: [d for d in s["downtimes"] if d["reason"] == reason] for s in (sent, got)}


def test_enhanced_migration_moves_the_topic_without_loss(plane, migrations):
    reply, sent, got, manager_s, _ = migrations["enhanced"]
    assert reply["ok"] and reply["workflow"] == "enhanced" and reply["acquired"] is True
    assert plane.meta.owner("mig_enh")["broker"] == "bzone2"
    downs = _downs("enhanced", sent, got)
    print(f"\nenhanced: migration {reply['timing']['total_s'] * 1e3:.1f} ms at the broker "
          f"({manager_s * 1e3:.1f} ms at the manager), downtime producer "
          f"{[round(d['downtime_s'] * 1e3, 1) for d in downs['producer']]} ms, consumer "
          f"{[round(d['downtime_s'] * 1e3, 1) for d in downs['consumer']]} ms; received {got['received']}/"
          f"{sent['sent']}, duplicates {got['duplicates']}, reordered {got['reordered']}, by broker {got['brokers']}")
    assert sent["sent"] == 600 and got["received"] == 600 and got["lost"] == 0
    assert len(downs["producer"]) == 1 and len(downs["consumer"]) == 1, (sent["downtimes"], got["downtimes"])
    assert downs["producer"][0]["to"] == "bzone2" and downs["consumer"][0]["to"] == "bzone2"
    assert set(got["brokers"]) == {"bzone1", "bzone2"} and got["broker"] == "bzone2" and sent["broker"] == "bzone2"


def test_baseline_migration_goes_through_the_lookup(plane, migrations):
    reply, sent, got, manager_s, _ = migrations["baseline"]
    assert reply["ok"] and reply["workflow"] == "baseline" and reply["acquired"] is None
    assert plane.meta.owner("mig_base")["broker"] == "bzone2"
    downs = _downs("baseline", sent, got)
    print(f"\nbaseline: migration {reply['timing']['total_s'] * 1e3:.1f} ms at the broker "
          f"({manager_s * 1e3:.1f} ms at the manager), downtime producer "
          f"{[round(d['downtime_s'] * 1e3, 1) for d in downs['producer']]} ms, consumer "
          f"{[round(d['downtime_s'] * 1e3, 1) for d in downs['consumer']]} ms; received {got['received']}/"
          f"{sent['sent']}, lost {got['lost']}, duplicates {got['duplicates']}, by broker {got['brokers']}")
    assert len(downs["producer"]) == 1 and len(downs["consumer"]) == 1, (sent["downtimes"], got["downtimes"])
    assert sent["sent"] == 600 and sent["broker"] == "bzone2" and got["broker"] == "bzone2"
    assert_baseline_loss(got, downs)


def _longest_down(pair: dict[str, tuple]) -> dict[str, float]:
    return {w: max(d["downtime_s"] for ds in _downs(w, sent, got).values() for d in ds)
            for w, (_reply, sent, got, _manager_s, _stolen) in pair.items()}


def test_the_enhanced_workflow_is_down_shorter_than_the_baseline(plane, migrations):
    """The lookup round trip to the cloud is what the enhanced workflow saves: judged on the two
    moves of this plane, repeated once when the hypervisor stole more than a stall's worth in them
    and the order came out wrong, skipped (recorded) only when it did so again."""
    pairs = [migrations]
    for attempt in range(2):
        pair = pairs[-1]
        longest, stolen = _longest_down(pair), sum(m[4] for m in pair.values())
        if longest["baseline"] > longest["enhanced"] or stolen <= QUIET_STEAL_MS:
            with claims.judge("enhanced migration down shorter than the baseline"):
                assert longest["baseline"] > longest["enhanced"], longest
            return
        if attempt == 0:
            pairs.append(_pair(plane, "_again"))
    claims.unjudged("enhanced migration down shorter than the baseline",
                    f"enhanced {longest['enhanced'] * 1e3:.0f} ms, baseline {longest['baseline'] * 1e3:.0f} ms, twice, "
                    f"while the hypervisor stole {stolen:.0f} ms in the migrations", attributed_to_machine=True)


def test_a_publish_to_the_old_broker_is_forwarded_with_a_redirect(plane):
    trace = plane.log_dir / "trace-stray.jsonl"
    sub = plane.client("sub", "cl2", "stray", "--trace", str(trace))
    assert plane.command("bzone1", op="release", topic="stray", to="bzone2", address=plane.url("bzone2"))["ok"]
    events = plane.log_dir / "events-stray-cl2.jsonl"

    def moved() -> bool:  # the subscriber relinked to bzone2 (its event log is written as it goes)
        return events.exists() and any(json.loads(line).get("type") == "relinked" and json.loads(line).get("to") == "bzone2"
                                       for line in events.read_text().splitlines() if line.strip())
    assert wait_for(moved, timeout=15.0), "the subscriber did not move to bzone2"

    async def publish_to_old():
        nc = await nats.connect(plane.url("bzone1"))
        controls = []

        async def on_ctl(msg):
            controls.append(json.loads(msg.data))

        await nc.subscribe("_ep.ctl.stray", cb=on_ctl)
        await nc.flush()
        for seq in range(5):
            head = json.dumps({"id": f"ghost:{seq}", "seq": seq, "t": time.time(), "p": "ghost", "s": "zone1"})
            await nc.publish("t.stray", head.encode() + b"\n")
        await nc.flush()
        for _ in range(40):
            if controls:
                break
            await asyncio.sleep(0.05)
        await nc.close()
        return controls

    controls = plane.loop("cl1").run(publish_to_old())
    drained(trace, 5)
    status = plane.command("bzone1", op="status")
    got = plane.summary(sub, stop=True)
    print(f"\nstray: {status['grace']['stray']['forwarded']} forwarded by bzone1, redirects {controls}")
    assert controls and controls[0]["op"] == "redirect" and controls[0]["broker"] == "bzone2"
    assert status["grace"]["stray"]["forwarded"] == 5
    assert got["producers"]["ghost"]["received"] == 5 and got["brokers"] == {"bzone2": 5}


def test_a_publisher_whose_data_waits_behind_a_cut_path_notices_its_silent_broker(plane):
    """cl1 publishes 0.5 MB/s to bzone2, then its path there drops everything in silence (a route in
    cl1 into a veth whose peer is down; a blackhole route would fail the writes at once). Its writes block within a second, and nats-py's ping, written behind them, was
    never sent: the publisher noticed nothing until TCP's retransmission got through after the heal
    (once 5.4 s after a 6 s site cut). The client's own round trip notices within NOTICE_S."""
    from testbed.systems.pubsub.client import NOTICE_S, PING_INTERVAL_S

    events = plane.log_dir / "events-cut_pub-cl1.jsonl"
    assert plane.command("bzone2", op="acquire", topic="cut_pub")["ok"]
    pub = plane.client("pub", "cl1", "cut_pub", "--rate", "500", "--size", "1000")
    broker_ip = plane.net.ip_of("bzone2")
    held = 3 * NOTICE_S  # the cut lasts well past the notice, so that only the client's own check can explain one

    def lost() -> list[dict]:
        kinds = [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else []
        return [e for e in kinds if e["type"] == "broker_lost"]
    try:
        time.sleep(2 * PING_INTERVAL_S)
        assert not lost()
        plane.net.cmd("cl1", f"ip link add cut0 type veth peer name cut1 && ip link set cut0 up && "
                             f"ip neigh replace {broker_ip} lladdr 02:00:00:00:00:01 dev cut0 nud permanent && "
                             f"ip route replace {broker_ip}/32 dev cut0")
        cut = time.time()
        try:
            noticed = wait_for(lost, timeout=held)
        finally:
            plane.net.cmd("cl1", "ip link del cut0")  # its routes and neighbours go with it
            healed = time.time()
    finally:
        plane.summary(pub, stop=True)
    assert noticed, f"the publisher did not notice its broker's silence in {held:g} s"
    print(f"\nbroker lost {noticed[0]['time'] - cut:.2f} s into the cut (notice {NOTICE_S:g} s)")
    assert cut < noticed[0]["time"] < healed and noticed[0]["broker"] == "bzone2"


def test_nc_reports_are_aggregated_and_malformed_ones_counted(plane):
    assert plane.command("bzone1", op="acquire", topic="ncagg")["ok"]
    before = plane.command("bzone1", op="status")["counters"]["malformed"]
    c = lambda x, y, h: {"vec": [x, y] + [0.0] * 6, "height": h, "adjustment": 0.0, "error": 0.1}  # noqa: E731
    good = [{"client": "p1", "role": "producer", "coord": c(0.01, 0.0, 0.001), "rate": 10},
            {"client": "p2", "role": "producer", "coord": c(0.03, 0.0, 0.003), "rate": 20},
            {"client": "c1", "role": "consumer", "coord": c(0.0, 0.02, 0.002), "rate": 30}]
    bad = [b"not json", json.dumps({"client": "x", "role": "boss", "rate": 1}).encode(),
           b'{"client": "y", "role": "producer", "rate": 1, "coord": {"vec": [NaN], "height": 0}}',
           json.dumps({"client": "z", "role": "consumer", "rate": -5}).encode()]

    async def send():
        nc = await nats.connect(plane.url("bzone1"))
        for report in good:
            await nc.publish("_ep.nc.ncagg", json.dumps(report).encode())
        for data in bad:
            await nc.publish("_ep.nc.ncagg", data)
        await nc.flush()
        await nc.close()

    plane.loop("cl1").run(send())
    assert wait_for(lambda: plane.command("bzone1", op="status")["counters"]["malformed"] - before == len(bad), 3)
    sent_at = time.time()
    report = wait_for(lambda: (r := plane.meta.report("bzone1")) and r["time"] > sent_at and r, 3 * PERIOD + 2)
    (topic,) = [t for t in report["topics"] if t["topic"] == "ncagg"]
    assert topic["producers"] == 2 and topic["consumers"] == 1
    assert topic["rate_in"] == 30 and topic["rate_out"] == 30
    assert topic["ncp"]["vec"][:2] == pytest.approx([0.02, 0.0]) and topic["ncp"]["height"] == pytest.approx(0.002)
    ps = [coord_from_dict(r["coord"]) for r in good[:2]]
    cs = [coord_from_dict(good[2]["coord"])]
    assert report["distance"] == "one_way"  # the agents run with the default reading of d
    assert topic["w"] == pytest.approx(latency.deviation_w(ps, cs, distance=ONE_WAY))
    print(f"\nncagg: {len(bad)} malformed reports counted; W {topic['w'] * 1e3:.2f} ms, E {topic['e'] * 1e3:.2f} ms "
          f"(broker coordinate {'from Serf' if report['coord'] else 'unknown'})")
    if report["coord"] is not None:  # the broker's Serf agent answered: E(t) through this broker
        assert topic["e"] == pytest.approx(latency.worst_case_e(ps, cs, coord_from_dict(report["coord"]), distance=ONE_WAY))
    else:
        assert math.isnan(topic["e"])
    assert plane.command("bzone1", op="release", topic="ncagg")["ok"]


def test_a_lost_zookeeper_session_gets_the_topic_reacquired(plane):
    assert plane.command("bzone2", op="acquire", topic="zkloss")["ok"]
    before = plane.meta.zk.exists("/epulsar/topics/zkloss/owner").ephemeralOwner
    session = plane.command("bzone2", op="status")["zk_session"]
    started = time.monotonic()
    expire_session(plane.zk.hosts, (session["id"], bytes.fromhex(session["password"])), plane.network.connector("cloud"))
    stat = wait_for(lambda: (s := plane.meta.zk.exists("/epulsar/topics/zkloss/owner")) and
                    s.ephemeralOwner != before and s, timeout=15)
    took = time.monotonic() - started
    # The agent counts the reacquisition on its event loop after ZooKeeper's thread recreated the node
    # (CI14 read the status in between): wait for the count, not for the node alone.
    status = wait_for(lambda: (s := plane.command("bzone2", op="status"))["counters"]["reacquired"] >= 1 and s,
                      timeout=5) or plane.command("bzone2", op="status")
    print(f"\nzk session of bzone2 expired: owner node recreated by a new session after {took * 1e3:.0f} ms")
    assert stat and plane.meta.owner("zkloss")["broker"] == "bzone2"
    assert status["counters"]["reacquired"] >= 1 and "zkloss" in status["owned"]
    assert status["zk_session"]["id"] != session["id"]
    assert "bzone2" in plane.meta.brokers()


def test_a_restarted_broker_agent_adopts_its_topics(plane):
    assert plane.meta.owner("e2e")["broker"] == "bzone1"
    before = plane.meta.zk.exists("/epulsar/topics/e2e/owner").ephemeralOwner
    plane.agents["bzone1"].kill()  # SIGKILL: its ZooKeeper session lingers until it times out
    plane.agents["bzone1"].wait()
    started = time.monotonic()
    plane.agents["bzone1"] = start_agent(plane.net, "bzone1", plane.zk.hosts, plane.log_dir, site="zone1",
                                         period=PERIOD, nc_period=PERIOD)  # the agent alone: its server runs on
    took = time.monotonic() - started
    status = plane.command("bzone1", op="status")
    after = plane.meta.zk.exists("/epulsar/topics/e2e/owner").ephemeralOwner
    print(f"\nbzone1 agent killed and restarted: owns {status['owned']} again after {took * 1e3:.0f} ms")
    assert "e2e" in status["owned"] and after != before and after == status["zk_session"]["id"]
    assert plane.meta.owner("e2e")["broker"] == "bzone1"


def test_zookeeper_restarted_without_its_data_gets_everything_back(plane):
    owned = plane.meta.placement()
    assert owned.get("zkloss") == "bzone2" and owned.get("mig_enh") == "bzone2"
    plane.meta.stop()
    took = plane.zk.restart(wipe=True)
    plane.meta = node_metadata(plane.zk.hosts, plane.network.connector("cloud")).start()
    started = time.monotonic()
    back = wait_for(lambda: plane.meta.placement() == owned and set(plane.meta.brokers()) == set(BROKERS) and True,
                    timeout=20, step=0.2)
    print(f"\nZooKeeper restarted empty in {took:.1f}s; brokers and {len(owned)} owners back "
          f"{time.monotonic() - started:.1f}s later")
    assert back, (plane.meta.placement(), owned, plane.meta.brokers())
    # and the data plane still serves lookups and traffic
    trace = plane.log_dir / "trace-after.jsonl"
    sub = plane.client("sub", "cl2", "after", "--trace", str(trace))
    pub = plane.client("pub", "cl1", "after", "--rate", "50", "--count", "20")
    assert plane.summary(pub)["sent"] == 20
    drained(trace, 20)
    assert plane.summary(sub, stop=True)["received"] == 20


def test_a_fenced_broker_gives_its_topics_up_and_registers_again(plane):
    """Fast failover's fencing (issue 19): the topic manager deletes a broker's registration and
    owner nodes when it judges it gone; a broker that is alive after all (it was paused) drops the
    topics, tells their clients, and registers again, so no topic has two owners."""
    assert plane.command("bzone1", op="acquire", topic="fenced")["ok"]
    assert "fenced" in plane.meta.fence("bzone1")
    assert plane.meta.owner("fenced") is None
    status = wait_for(lambda: (s := plane.command("bzone1", op="status")) and "fenced" not in s["owned"] and s)
    assert status and status["counters"]["fenced"] >= 1, status
    assert wait_for(lambda: "bzone1" in plane.meta.brokers())  # alive, so registered again
    # the broker can be given topics again, and keeps them
    assert plane.command("bzone1", op="acquire", topic="fenced")["ok"]
    time.sleep(0.5)
    assert "fenced" in plane.command("bzone1", op="status")["owned"] and plane.meta.owner("fenced")["broker"] == "bzone1"


def _take_back(plane, topic: str, to: str, address: str) -> tuple[dict, dict, dict, list[dict], float]:
    """(the old owner's reply, the publisher's and the subscriber's summaries, the subscriber's trace
    rows, when the reply came) of an enhanced release from bzone1 that the new owner cannot complete,
    a publisher at 50 messages/s for 10 s and a subscriber on the topic throughout."""
    trace = plane.log_dir / f"trace-{topic}.jsonl"
    sub = plane.client("sub", "cl2", topic, "--trace", str(trace))
    pub = plane.client("pub", "cl1", topic, "--rate", "50", "--duration", "10")
    assert plane.meta.owner(topic)["broker"] == "bzone1"
    time.sleep(2.0)
    reply = plane.request("_ep.cmd.bzone1", {"op": "release", "topic": topic, "to": to, "address": address},
                          at="bzone1", timeout=40)  # an unreachable server is given up after 10 s
    back_at = time.time()
    assert reply.get("acquired") is False and reply.get("rolled_back") is True and not reply["ok"], reply
    assert "taken back here" in reply["error"] and plane.meta.owner(topic)["broker"] == "bzone1"
    sent = plane.summary(pub)
    drained(trace, sent["sent"])
    got = plane.summary(sub, stop=True)
    return reply, sent, got, [json.loads(line) for line in trace.read_text().splitlines() if line.strip()], back_at


def test_a_move_to_a_server_that_cannot_be_reached_is_taken_back_before_any_client_moves(plane):
    """The new owner's address is a client node's, where nothing listens: the old owner takes the
    topic back before telling any client to go there, so it never stays without an owner and the
    clients, never moved, lose nothing."""
    reply, sent, got, _, _ = _take_back(plane, "unreachable", "bzone2", nats_url(plane.net.ip_of("cl2")))
    assert "could not be reached" in reply["error"]
    assert got["received"] == sent["sent"], (got["received"], sent["sent"])


def test_a_move_the_new_owner_does_not_acquire_is_taken_back_and_its_clients_come_back(plane):
    """The clients are told to move to bzone2's server, but the broker asked to acquire there
    ("nobody") never answers: the old owner takes the topic back, the clients that moved are sent
    back (they are at a broker that does not own the topic), and once both are back every message
    arrives. What the round trip loses (the publisher back before the subscriber: no bridge carries
    a taken-back topic) is printed, not excused."""
    _, sent, got, rows, back_at = _take_back(plane, "unacquired", "nobody", plane.url("bzone2"))
    returns = [e["time"] for node in ("cl1", "cl2")
               for e in map(json.loads, (plane.log_dir / f"events-unacquired-{node}.jsonl").read_text().splitlines())
               if e["type"] == "relinked" and e["to"] == "bzone1"]
    assert len(returns) == 2, f"not both clients came back: {returns}"
    both_back = max(returns)
    assert both_back - back_at < 5.0, f"the clients came back {both_back - back_at:.1f} s after the take-back"
    delivered = {int(r["seq"]) for r in rows}
    due = {int(r["seq"]) for r in rows if float(r["send_time"]) >= both_back}
    first = min(due, default=sent["sent"])
    assert first < sent["sent"] and delivered >= set(range(first, sent["sent"])), (first, sent["sent"], len(due))
    print(f"\ntaken back: {sent['sent'] - len(delivered)} of {sent['sent']} messages lost while the clients came back "
          f"({both_back - back_at:.2f} s after the take-back)")
