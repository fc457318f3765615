"""The data plane's pure parts, without a network: NC report validation, per-topic aggregation,
message format and the subscriber's accounting (the live tests are in test_dataplane.py)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from types import SimpleNamespace

import pytest

from testbed.nc.coordinate import Coordinate
from testbed.policies import ONE_WAY, RTT, latency
from testbed.systems.pubsub.client import Endpoint, Publisher, Subscriber
from testbed.systems.pubsub.lookup import parse_lookup, parse_lost
from testbed.systems.pubsub.trace_schema import FIELDS as TRACE_FIELDS
from testbed.systems.pubsub.metadata import check_topic
from testbed.systems.pubsub.reports import ClientEntry, Owned, parse_nc_report, topic_report


def coord(x: float, h: float = 0.001) -> dict:
    return {"vec": [x] + [0.0] * 7, "height": h, "adjustment": 0.0, "error": 0.5}


def test_nc_reports_are_validated():
    client, role, c, rate, _ = parse_nc_report(json.dumps({"client": "u1", "role": "producer", "coord": coord(0.01),
                                                        "rate": 200}).encode())
    assert (client, role, rate) == ("u1", "producer", 200.0) and c.vec[0] == 0.01
    assert parse_nc_report(b'{"client": "u1", "role": "consumer", "coord": null, "rate": 0}')[2] is None
    serf_keys = {"Vec": [0.0] * 8, "Height": 1e-5, "Adjustment": 0.0, "Error": 1.5}
    assert parse_nc_report(json.dumps({"client": "g", "role": "consumer", "coord": serf_keys}).encode())[2].height == 1e-5
    for bad in (b"", b"[]", b"not json", b'{"role": "producer"}', b'{"client": "x", "role": "boss"}',
                b'{"client": "", "role": "producer"}', b'{"client": "x", "role": "producer", "rate": -1}',
                b'{"client": "x", "role": "producer", "rate": "fast"}',
                b'{"client": "x", "role": "producer", "coord": {"vec": [NaN], "height": 0}}',
                b'{"client": "x", "role": "producer", "coord": {"vec": [], "height": 0}}',
                b'{"client": "x", "role": "producer", "coord": {"vec": [1], "height": -1}}',
                b'{"client": "x", "role": "producer", "coord": {"height": 0}}'):
        with pytest.raises(ValueError):
            parse_nc_report(bad)


def test_topic_names_are_checked_before_they_become_paths_or_subjects():
    assert check_topic("follow_leader-swarm3") == "follow_leader-swarm3"
    for bad in ("", "A", "t.x", "t/x", "t*", "t>", "1t", "t x", "-t"):
        with pytest.raises(ValueError):
            check_topic(bad)


def test_topic_report_aggregates_live_clients_only():
    now = time.time()
    c = lambda x: Coordinate((x,) + (0.0,) * 7, 0.5, 0.0, 0.001)  # noqa: E731
    state = Owned(since=now, clients={
        ("p1", "producer"): ClientEntry("producer", c(0.01), 100, now),
        ("p2", "producer"): ClientEntry("producer", c(0.03), 50, now),
        ("c1", "consumer"): ClientEntry("consumer", c(-0.02), 150, now),
        ("c2", "consumer"): ClientEntry("consumer", None, 150, now),  # no coordinate yet: counted, not placed
        ("old", "consumer"): ClientEntry("consumer", c(5.0), 1, now - 60),  # gone: dropped
    })
    me = c(0.0)
    report = topic_report("t", "b1", me, state, stale_s=15, distance=ONE_WAY)
    expected = latency.aggregate("t", "b1", me, [c(0.01), c(0.03)], [c(-0.02)], 150, 300, distance=ONE_WAY)
    assert ("old", "consumer") not in state.clients
    assert report.producers == 2 and report.consumers == 2 and report.rate_in == 150 and report.rate_out == 300
    assert report.ncp == expected.ncp and report.w == expected.w and report.e == expected.e
    assert math.isnan(topic_report("t", "b1", None, state, stale_s=15, distance=ONE_WAY).e)  # unknown, never 0
    # the scenario's reading: taken literally (rtt), E(t) and W(t) are twice the one-way ones
    literal = topic_report("t", "b1", me, state, stale_s=15, distance=RTT)
    assert literal.e == pytest.approx(2 * report.e) and literal.w == pytest.approx(2 * report.w)


def test_lookup_requests_carry_the_asker_when_they_can():
    asked = {"topic": "avatar-1", "client": "gs1", "role": "producer", "coord": coord(0.02)}
    topic, asker = parse_lookup(json.dumps(asked).encode())
    assert topic == "avatar-1" and asker.consumers == () and asker.producers[0].name == "gs1"
    assert asker.producers[0].coord.vec[0] == 0.02
    topic, asker = parse_lookup(json.dumps({**asked, "role": "consumer"}).encode())
    assert asker.producers == () and asker.consumers[0].name == "gs1"
    # an old client, no coordinate yet, or a malformed asker: the lookup is still answered, without it
    for request in ({"topic": "avatar-1"}, {**asked, "coord": None}, {**asked, "role": "boss"},
                    {**asked, "coord": {"vec": [float("nan")], "height": 0}}, {**asked, "client": ""},
                    {**asked, "coord": {"vec": [0.1], "height": -1}}, {**asked, "client": 7}):
        assert parse_lookup(json.dumps(request).encode()) == ("avatar-1", None)
    for bad in (b"{}", b'{"topic": "a/b"}', b"not json"):
        with pytest.raises((ValueError, KeyError)):
            parse_lookup(bad)


def test_a_lookup_may_say_which_broker_its_client_lost():
    assert parse_lost(json.dumps({"topic": "t", "lost": "bzone1"}).encode()) == "bzone1"
    for request in (b'{"topic": "t"}', b'{"topic": "t", "lost": 7}', b'{"topic": "t", "lost": ""}', b"not json",
                    b"[1]", json.dumps({"lost": "x" * 65}).encode()):
        assert parse_lost(request) is None


def test_payload_carries_id_seq_and_scheduled_time_at_the_configured_size():
    pub = Publisher("t", "uav1", rate=100, size=1000, owner=("b", "nats://127.0.0.1:1"), site="zone1")
    data = pub.payload(7, 1234.5)
    head = json.loads(data.split(b"\n", 1)[0])
    assert len(data) == 1000 and head == {"id": "uav1:7", "seq": 7, "t": 1234.5, "p": "uav1", "s": "zone1"}
    assert len(Publisher("t", "p", rate=1, size=10, owner=("b", "x")).payload(0, 0.0)) > 10  # header never cut


def test_subscriber_counts_losses_duplicates_and_reordering_and_writes_the_trace(tmp_path):
    trace = tmp_path / "trace.jsonl"
    sub = Subscriber("t", "c1", trace=trace, owner=("b1", "nats://127.0.0.1:1"), site="zone2", run_id="r1")
    ep = Endpoint("b1", "nats://127.0.0.1:1", nc=None)
    sub.current = ep

    def msg(seq: int, producer: str = "p1") -> SimpleNamespace:
        head = {"id": f"{producer}:{seq}", "seq": seq, "t": time.time() - 0.01, "p": producer, "s": "zone1"}
        return SimpleNamespace(data=json.dumps(head).encode() + b"\nxxxx", headers=None)

    async def feed():
        for seq in (0, 1, 3, 2, 2, 5):  # 4 lost, 2 reordered and duplicated
            await sub._on_msg(ep, msg(seq))
        await sub._on_msg(ep, SimpleNamespace(data=b"garbage", headers=None))
        await sub._on_msg(ep, msg(0, "p2"))

    asyncio.run(feed())
    sub.trace.flush()
    summary = sub.summary()
    assert summary["producers"]["p1"] == {"received": 5, "first": 0, "last": 5, "lost": 1, "duplicates": 1,
                                          "reordered": 1}
    assert summary["received"] == 6 and summary["malformed"] == 1 and summary["brokers"] == {"b1": 6}
    assert 0.009 < summary["latency_p50_s"] < 0.5
    rows = [json.loads(line) for line in trace.open()]
    assert len(rows) == 6 and all(tuple(r) == TRACE_FIELDS for r in rows)
    row = rows[0]
    assert row["run_id"] == "r1" and row["msg_id"] == "p1:0" and row["broker"] == "b1"
    assert row["producer_site"] == "zone1" and row["consumer_site"] == "zone2"
    assert float(row["receive_time"]) > float(row["send_time"])


def test_fast_trace_rows_and_headers_match_json_dumps(tmp_path):
    """The per-message formatting shortcuts write exactly what json.dumps would."""
    import json

    from testbed.systems.pubsub.client import Publisher, TraceWriter
    from testbed.systems.pubsub.tracking_client import TrackedPublishing

    publisher = Publisher("t1", "sw1-u2", 10.0, size=300, owner=("b", "nats://x:1"), site="zone1")
    data = publisher.payload(17, 1795438137.1234567)
    head = data.split(b"\n", 1)[0]
    assert head == json.dumps({"id": "sw1-u2:17", "seq": 17, "t": 1795438137.1234567, "p": "sw1-u2", "s": "zone1"},
                              separators=(",", ":")).encode()
    assert len(data) == 300
    tracked = Publisher("t1", "sw1-u2", 10.0, size=300, owner=("b", "nats://x:1"), site="zone1",
                        features=[TrackedPublishing()])
    head = json.loads(tracked.payload(17, 1795438137.1234567, "bzone1").split(b"\n", 1)[0])
    assert len(head.pop("r")) == 32 and head == json.loads(data.split(b"\n", 1)[0])  # seed 002's id, hex
    writer = TraceWriter(tmp_path / "a.jsonl")
    for track_id in (None, "00ff" * 8):
        writer.write(run_id="run1", topic="t1", producer='odd"name', consumer="c1", msg_id='odd"name:3', track_id=track_id,
                     seq=3, send_time="1.000000", receive_time="2.500000", broker="bzone1", producer_site="zone1",
                     consumer_site="zone2")
        prefix, suffix = writer.row_affixes("run1", "t1", "c1", "bzone1", "zone1", "zone2")
        writer.write_delivery(prefix, 'odd"name', 'odd"name:3', 3, 1.0, 2.5, suffix, track_id)
    writer.close()
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    assert lines[0] == lines[1] and lines[2] == lines[3]
    with pytest.raises(TypeError, match="not trace columns"):
        writer.write(sequence=3)


def test_producer_stats_count_gaps_reordering_and_duplicates():
    from testbed.systems.pubsub.client import ProducerStats

    stats = ProducerStats(5, 5)
    seen = [stats.see(s) for s in (6, 9, 8, 8, 3, 4, 12)]
    assert seen == [True, True, True, False, True, True, True]
    assert (stats.first, stats.last, stats.received, stats.duplicates, stats.reordered) == (3, 12, 7, 1, 3)
    assert stats.lost == len({7, 10, 11}) and stats.missing == {7, 10, 11}


def test_clients_of_one_process_share_one_coordinate_query():
    import asyncio
    import time

    from testbed.systems.pubsub.client import shared_query

    calls = []

    def fetch():
        calls.append(1)
        time.sleep(0.05)
        return {"vec": [len(calls)]}

    async def main():
        get = shared_query(fetch, max_age_s=0.2)
        first = await asyncio.gather(*(get() for _ in range(16)))
        again = await get()
        await asyncio.sleep(0.25)
        later = await get()
        return first, again, later

    first, again, later = asyncio.run(main())
    assert all(v == {"vec": [1]} for v in first) and again == {"vec": [1]}
    assert later == {"vec": [2]} and len(calls) == 2


def test_resource_sampler_counts_its_own_process_from_proc():
    from testbed.systems.pubsub.resources import ResourceSampler

    sampler = ResourceSampler(capacity_bps=1e6, server_comm="no-such-server")
    first = sampler.sample()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        math.sqrt(2.0)
    second = sampler.sample()
    assert first["cpu"] == 0.0 and second["cpu"] > 0 and 0 < second["memory"] < 1


class FakeNats:
    """What a client calls on a NATS connection, recorded."""

    def __init__(self):
        self.published: list[tuple[str, bytes]] = []
        self.flushes = 0

    async def publish(self, subject, data):
        self.published.append((subject, data))

    async def flush(self, timeout=10):
        self.flushes += 1

    async def subscribe(self, subject, cb=None):
        return SimpleNamespace(subject=subject)


@pytest.mark.parametrize("workflow", ["enhanced", "baseline"])
def test_both_workflows_end_a_downtime_at_the_switch_with_both_definitions(monkeypatch, workflow):
    """Paper 5.7: downtime until reconnected (the paper's) and until the new broker has the traffic
    (ours). The enhanced client holds nothing: it must not wait for its next due message when the
    baseline, holding, flushes at once; both end at the switch's flush."""
    from testbed.systems.pubsub import client

    new_nc = FakeNats()

    async def connect(address, **kwargs):
        return new_nc

    monkeypatch.setattr(client, "connect_nats", connect)

    async def scenario():
        pub = Publisher("t", "p", rate=1.0, size=100, owner=("old", "nats://old:1"))
        old = Endpoint("old", "nats://old:1", FakeNats())
        pub.current = old
        pub._open_downtime("redirect" if workflow == "enhanced" else "disconnect", old, "new")
        if workflow == "baseline":
            pub.current = None
            await pub._send(7, 1000.0)  # produced while detached: held
        new = await pub._attach("new", "nats://new:1")
        await pub._switch(old, new)
        return pub, new

    pub, new = asyncio.run(scenario())
    (down,) = [e for e in pub.events.items if e["type"] == "downtime"]
    assert pub.current is new and pub.downtime is None and new_nc.flushes == 1
    assert 0 <= down["reconnect_s"] <= down["downtime_s"] < 1.0  # not a message interval (1 s) later
    assert down["to"] == "new" and down["reconnected"] <= down["end"]
    data = [d for s, d in new_nc.published if s == "t.t"]
    assert data == ([pub.payload(7, 1000.0, "new")] if workflow == "baseline" else [])
