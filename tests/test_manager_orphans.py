"""The topic manager's handling of a broker that died and of a topic's first lookup (pure logic: a
fake metadata store stands in for ZooKeeper; the live paths are tests/test_run_failover.py and
tests/test_run_uav.py)."""

from __future__ import annotations

import asyncio
import json

from testbed.systems.pubsub import manager as manager_mod
from testbed.systems.pubsub.manager import TopicManager
from testbed.systems.pubsub.manager import parser as manager_parser
from testbed.policies.snapshot import coord_to_dict
from testbed.nc.coordinate import Coordinate


def coord(x: float, y: float = 0.0) -> dict:
    return coord_to_dict(Coordinate((x, y, 0, 0, 0, 0, 0, 0), 0.1, 0.0, 0.0))


def topic_report(topic: str, broker: str, where: dict) -> dict:
    return {"topic": topic, "broker": broker, "rate_in": 10, "rate_out": 20, "producers": 1, "consumers": 2,
            "ncp": where, "ncc": where, "w": 0.0, "e": 0.05}


class FakeMeta:
    """brokers(), reports(), placement(), threshold() and owner() as ZooKeeper would answer them."""

    def __init__(self):
        # Clients sit at x = 0; bzone1 (their home) at 5 ms, bzone2 at 25 ms, the cloud at 80 ms.
        self.registered = {b: {"address": f"nats://{b}:4222"} for b in ("cloud", "bzone1", "bzone2")}
        self.report_data = {
            "cloud": {"broker": "cloud", "coord": coord(0.080), "topics": []},
            "bzone1": {"broker": "bzone1", "coord": coord(0.005),
                       "topics": [topic_report("alpha", "bzone1", coord(0.0))]},
            "bzone2": {"broker": "bzone2", "coord": coord(0.025), "topics": []},
        }
        self.owners = {"alpha": "bzone1"}

    def kill(self, broker: str) -> None:
        """The broker's session expired: its registration and owner nodes are gone, its last report stays."""
        del self.registered[broker]
        self.owners = {t: b for t, b in self.owners.items() if b != broker}

    def brokers(self):
        return dict(self.registered)

    def reports(self):
        return dict(self.report_data)

    def placement(self):
        return dict(self.owners)

    def threshold(self, _topic):
        return 0.04

    def owner(self, topic):
        broker = self.owners.get(topic)
        return {"broker": broker, "address": self.registered[broker]["address"]} if broker else None


class FakePeer:
    def __init__(self, meta, broker):
        self.meta, self.broker = meta, broker

    async def request(self, subject, data, timeout):
        request = json.loads(data)
        assert subject == f"_ep.cmd.{self.broker}" and request["op"] == "acquire"
        self.meta.owners[request["topic"]] = self.broker

        class Reply:
            data = json.dumps({"ok": True}).encode()
        return Reply()


def make_manager(policy: str = "epulsar", initial: str = "first_lookup",
                 distance: str = "one_way") -> tuple[TopicManager, FakeMeta]:
    args = manager_parser().parse_args([
        "--nats", "nats://127.0.0.1:4222", "--zk", "127.0.0.1:2181", "--node", "cloud", "--policy", policy,
        "--executors", "4", "--output-rate", "1e6", "--distance", distance, "--initial-placement", initial])
    manager = TopicManager(args)
    meta = FakeMeta()
    manager.meta = meta

    async def peer(address):
        return FakePeer(meta, address.removeprefix("nats://").split(":")[0])
    manager._peer = peer
    return manager, meta


def test_a_dead_brokers_topic_keeps_its_last_report_and_goes_to_the_nearest_live_broker(monkeypatch):
    emitted = []
    monkeypatch.setattr(manager_mod, "emit", lambda kind, **data: emitted.append((kind, data)))
    manager, meta = make_manager()
    snapshot, _ = manager.state()
    manager.known = snapshot.placement
    assert snapshot.placement == {"alpha": "bzone1"} and not snapshot.carried
    meta.kill("bzone1")
    snapshot, clients = manager.state()
    assert "alpha" not in snapshot.placement and set(snapshot.brokers) == {"cloud", "bzone2"}
    assert snapshot.report("alpha") is not None  # carried from bzone1's last report
    assert snapshot.thresholds["alpha"] == 0.04
    # Without the carried report the topic would go to the default (cloud) broker.
    assert manager.choose("alpha", snapshot, clients) == "bzone2"
    asyncio.run(manager.replace_orphans(snapshot, clients))
    assert meta.owners == {"alpha": "bzone2"}
    assert emitted == [("orphan_replaced", {"topic": "alpha", "dead": "bzone1", "broker": "bzone2", "error": None,
                                            "via": "round", "carried": True})]
    asyncio.run(manager.replace_orphans(*manager.state()))  # nothing left to re-place
    assert len(emitted) == 1 and manager.known == {"alpha": "bzone2"}


def test_a_lookup_for_an_orphan_places_it_at_once_and_ignores_a_plan_for_the_dead_broker(monkeypatch):
    emitted = []
    monkeypatch.setattr(manager_mod, "emit", lambda kind, **data: emitted.append((kind, data)))
    manager, meta = make_manager()
    manager.known = manager.state()[0].placement
    # A client asks while bzone1 is dead but its session has not expired: the owner is still bzone1,
    # and no plan may be made from that stale view.
    answer = asyncio.run(manager.resolve("alpha"))
    assert answer["broker"] == "bzone1" and "alpha" not in manager.plan
    manager.plan["alpha"] = "bzone1"  # e.g. a lazy (baseline) migration planned before the crash
    meta.kill("bzone1")

    async def three_clients_at_once():
        return await asyncio.gather(*(manager.resolve("alpha") for _ in range(3)))

    answers = asyncio.run(three_clients_at_once())
    assert answers == [{"topic": "alpha", "broker": "bzone2", "address": "nats://bzone2:4222"}] * 3
    assert emitted == [("orphan_replaced", {"topic": "alpha", "dead": "bzone1", "broker": "bzone2", "error": None,
                                            "via": "lookup", "carried": True})]


def test_a_topic_nobody_reported_goes_to_the_default_broker_unless_the_policy_needs_no_report():
    """Latency-aware policies wait for the topic's coordinates (AllPairs also for its clients' list),
    the cloud broker serving it meanwhile; a latency-agnostic one (pulsar-hash) places it at once."""
    from testbed.policies import hash_broker

    chosen = {}
    for policy in ("epulsar", "allpairs", "pulsar-hash"):
        manager, _ = make_manager(policy)
        snapshot, clients = manager.state()
        chosen[policy] = (manager.choose("alpha", snapshot, clients), manager.choose("beta", snapshot, clients))
    brokers = ["bzone1", "bzone2", "cloud"]
    assert chosen == {"epulsar": ("bzone1", "cloud"), "allpairs": ("cloud", "cloud"),
                      "pulsar-hash": (hash_broker("alpha", brokers), hash_broker("beta", brokers))}


def test_a_first_lookup_carrying_the_askers_coordinate_places_the_topic_near_it(monkeypatch):
    """control.initial_placement: first_lookup places "beta" (nobody reports it) next to the asking
    client at x = 24 ms (bzone2, 25 ms); cloud keeps it on the cloud broker until a round moves it."""
    from testbed.policies import asker_clients
    from testbed.policies.snapshot import ClientNC, coord_from_dict

    asker = asker_clients(ClientNC("uav1", coord_from_dict(coord(0.024))), "consumer")
    for initial, expected in (("first_lookup", "bzone2"), ("cloud", "cloud")):
        emitted = []
        monkeypatch.setattr(manager_mod, "emit", lambda kind, **data: emitted.append((kind, data)))
        manager, meta = make_manager(initial=initial)
        answer = asyncio.run(manager.resolve("beta", asker))
        assert answer == {"topic": "beta", "broker": expected, "address": f"nats://{expected}:4222"}
        assert meta.owners["beta"] == expected
        assert emitted == [("initial_placement", {"topic": "beta", "broker": expected, "initial": initial,
                                                  "asker": ["uav1"]})]
        # an owned topic is answered as it is, whoever asks from wherever
        far = asker_clients(ClientNC("uav2", coord_from_dict(coord(0.0))), "producer")
        assert asyncio.run(manager.resolve("beta", far))["broker"] == expected

    # the producer and the consumer ask at once: one placement, one event
    emitted.clear()
    manager, meta = make_manager()

    async def both_at_once():
        return await asyncio.gather(manager.resolve("gamma", asker), manager.resolve("gamma", far))

    first, second = asyncio.run(both_at_once())
    assert first == second and [kind for kind, _ in emitted] == ["initial_placement"]


def test_a_broker_reporting_in_another_reading_is_reported_once(monkeypatch):
    emitted = []
    monkeypatch.setattr(manager_mod, "emit", lambda kind, **data: emitted.append((kind, data)))
    manager, meta = make_manager(distance="rtt")
    meta.report_data["bzone2"]["distance"] = "rtt"
    meta.report_data["bzone1"]["distance"] = "one_way"
    snapshot = manager.snapshot()
    manager.snapshot()
    assert snapshot.distance.name == "rtt"
    assert emitted == [("distance_mismatch", {"broker": "bzone1", "broker_distance": "one_way",
                                              "manager_distance": "rtt"})]
