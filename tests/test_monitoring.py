"""Monitoring for AllPairs (the paper's naive approach, 3.2 and Fig. 6), without a network: a broker
agent run with --report-clients adds every client's coordinate to its report (which then grows with
the clients), ePulsar's report does not grow; the topic manager reads the clients back and runs
AllPairs on them (the live benchmark is testbed.systems.pubsub.bench.monitoring)."""

from __future__ import annotations

import asyncio
import json
import time

from testbed.nc.coordinate import Coordinate
from testbed.systems.pubsub import broker as broker_mod
from testbed.systems.pubsub import manager as manager_mod
from testbed.policies.snapshot import TopicClients
from testbed.systems.pubsub.reports import ClientEntry, Owned, topic_clients, topic_report
from testbed.policies import Overload, get_distance, get_policy, hash_broker, perform_repartitioning

ME = Coordinate(tuple([0.001] * 8), 0.5, 0.0, 0.0001)


def _coord(i: int) -> Coordinate:
    return Coordinate(tuple(0.0123456789 * (i + k) for k in range(8)), 0.25, -0.0001, 0.0002)


def _owned(clients: int) -> Owned:
    now = time.time()
    state = Owned(since=now)
    for i in range(clients):
        role = "producer" if i % 2 == 0 else "consumer"
        state.clients[(f"client-{i}", role)] = ClientEntry(role, _coord(i), 10.0, now)
    state.clients[("nocoord", "consumer")] = ClientEntry("consumer", None, 0.0, now)  # not listed
    return state


def _agent(report_clients: bool, topics: int, clients: int) -> broker_mod.BrokerAgent:
    parser_args = ["--node", "bzone1", "--nats", "nats://127.0.0.1:4222", "--zk", "127.0.0.1:2181"]
    if report_clients:
        parser_args.append("--report-clients")
    agent = broker_mod.BrokerAgent(_parse(parser_args))
    agent._serf_coordinate = lambda: ME
    agent._output_rate = lambda: 0.0
    agent.owned = {f"topic{t}": _owned(clients) for t in range(topics)}
    return agent


def _parse(argv: list[str]):
    """The agent's own argument parser (so that the flag is tested as run)."""
    captured = {}

    class Stop(Exception):
        pass

    def fake_agent(args):
        captured["args"] = args
        raise Stop

    real = broker_mod.BrokerAgent
    broker_mod.BrokerAgent = fake_agent
    try:
        broker_mod.main(argv)
    except Stop:
        pass
    finally:
        broker_mod.BrokerAgent = real
    return captured["args"]


def _report_size(report_clients: bool, topics: int, clients: int) -> tuple[int, dict]:
    data = asyncio.run(_agent(report_clients, topics, clients).build_report())
    return len(json.dumps(data, sort_keys=True).encode()), data


def test_topic_clients_lists_live_clients_with_a_coordinate():
    state = _owned(5)
    state.clients[("old", "producer")] = ClientEntry("producer", _coord(9), 1.0, time.time() - 100)
    topic_report("t1", "b", ME, state, stale_s=15.0, distance=get_distance("one_way"))  # drops the stale client
    tc = topic_clients(state)
    assert [c.name for c in tc.producers] == ["client-0", "client-2", "client-4"]
    assert [c.name for c in tc.consumers] == ["client-1", "client-3"]
    assert TopicClients.from_dict(json.loads(json.dumps(tc.to_dict()))) == tc


def test_epulsar_report_does_not_grow_with_clients_allpairs_report_does():
    e1, data = _report_size(False, 4, 1)
    e2, _ = _report_size(False, 4, 2)
    e50, _ = _report_size(False, 4, 50)
    a1, _ = _report_size(True, 4, 1)
    a50, adata = _report_size(True, 4, 50)
    assert "clients" not in data
    # ePulsar: one producer and one consumer centroid per topic (1 client has only a producer's), then
    # the same size up to the digits of the numbers (client counts, rates, W)
    assert e1 < e2 and abs(e50 - e2) < 4 * 300  # up to ~17 digits more per number of two centroids
    # AllPairs: the ePulsar report plus one coordinate per client and topic
    assert a1 > e1 and a50 > 15 * a1 and a50 - e50 > 4 * 50 * 200
    listed = adata["clients"]["topic0"]
    assert len(listed["producers"]) == 25 and len(listed["consumers"]) == 25


def test_manager_reads_the_clients_and_allpairs_runs_on_them():
    _, data = _report_size(True, 2, 6)
    _, edge = _report_size(True, 0, 0)
    edge.update(broker="bzone2", coord={"vec": [0.5] * 8, "height": 0.0, "adjustment": 0.0, "error": 0.5})

    class FakeMeta:
        def brokers(self):
            return {"bzone1": {}, "bzone2": {}}

        def reports(self):
            return {"bzone1": json.loads(json.dumps(data)), "bzone2": edge}

        def placement(self):
            return {"topic0": "bzone1", "topic1": "bzone1"}

        def threshold(self, _topic):
            return None

    manager = manager_mod.TopicManager(manager_mod.parser().parse_args([
        "--nats", "nats://127.0.0.1:4222", "--zk", "127.0.0.1:2181", "--node", "cloud", "--policy", "allpairs",
        "--executors", "4", "--output-rate", "1.5e6", "--threshold", "1e-9"]))
    manager.meta = FakeMeta()
    snapshot, clients = manager.state()
    assert set(clients) == {"topic0", "topic1"}
    assert len(clients["topic0"].producers) == 3 and len(clients["topic0"].consumers) == 3
    assert clients["topic0"].producers[0].coord == _coord(0)
    # Every topic violates a 1 ns threshold: AllPairs places them with the clients' coordinates
    # (without them it raises, which is what --policy allpairs did live before).
    migrations = perform_repartitioning(snapshot, get_policy("allpairs"), Overload(), clients=clients)
    assert {m.topic for m in migrations} <= {"topic0", "topic1"}
    assert manager.choose("topic0", snapshot, clients) in ("bzone1", "bzone2")
    # not reported yet: the default broker (here not reporting, so placed by name)
    assert manager.choose("unknown", snapshot, clients) == hash_broker("unknown", snapshot.brokers)
    # the owner's list wins over a stale one from another broker
    other = {"clients": {"topic0": {"producers": [], "consumers": []}}}
    assert len(manager_mod.clients_from_reports({"bzone1": data, "bzone2": other},
                                                {"topic0": "bzone1"})["topic0"].producers) == 3
    assert manager_mod.clients_from_reports({"bzone1": data, "bzone9": {"clients": {"topic0": "bad"}}},
                                            {"topic0": "bzone9"})["topic0"].producers
