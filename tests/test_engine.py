"""The compiled client data plane (testbed/systems/pubsub/engine.c) against a real nats-server on
loopback: its trace rows are the Python client's, column for column; its sequence tracking counts
what the Python client counts; a publisher routed nowhere holds and then delivers everything; what
it tells the guard merges as the Python client's health lines do; a dead engine is an error, never a
silent gap; and a scenario that asks for it where it cannot carry the run is refused at its line.
Moves through real brokers (enhanced and baseline) are in tests/test_dataplane.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from testbed import topology
from testbed.bench.client import local_nats_server
from testbed.health import LatenessHistogram
from testbed.scenario.loader import ScenarioError, load
from testbed.systems.pubsub import trace_schema
from testbed.systems.pubsub.client import EventLog, Publisher, Subscriber
from testbed.systems.pubsub.engine import HEADER, Engine, EngineError, EnginePublisher, EngineSubscriber
from tests.needs import needs_nats_server

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    needs_nats_server,
    pytest.mark.skipif(not HEADER.exists(), reason="libnats-dev is not installed (make setup)"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("nats") / "nats.log"
    process, url = local_nats_server(log=log.open("wb"))
    yield url
    process.terminate()
    process.wait(10)


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def arrived(subscribers: list, done, deadline_s: float = 15.0) -> None:
    """Until `done(summary)` holds for every subscriber's summary (an engine's asked of the engine),
    or a generous deadline passed: then the test asserts exact counts. A fixed sleep judged by luck
    whether the last messages were still on their way."""
    end = time.monotonic() + deadline_s
    while True:
        for subscriber in subscribers:
            if isinstance(subscriber, EngineSubscriber):
                await subscriber.settle()
        if all(done(subscriber.summary()) for subscriber in subscribers) or time.monotonic() > end:
            return
        await asyncio.sleep(0.05)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


def test_engine_and_python_clients_write_the_same_rows_for_the_same_messages(server, tmp_path):
    """One engine publisher, one engine and one Python subscriber on the topic, then a Python publisher
    read by both: every row has the schema's columns in its order, and both readers see every message."""

    async def go():
        engine = await Engine(health=tmp_path / "health-n.jsonl").start()
        common = {"owner": ("b1", server), "site": "zone1", "run_id": "r1", "events": EventLog()}
        by_engine = EngineSubscriber("same", "se", trace=tmp_path / "se.jsonl", engine=engine, **common)
        by_python = Subscriber("same", "sp", trace=tmp_path / "sp.jsonl", keep_latencies=False, **common)
        sending = EnginePublisher("same", "pe", 100, 500, engine=engine, **{**common, "site": "zone2"})
        python_sending = Publisher("same", "pp", 100, 500, precise_s=0.0, **{**common, "site": "zone2"})
        for client in (by_engine, by_python, sending, python_sending):
            await client.start()
        start = time.time() + 0.2
        sent = await asyncio.gather(sending.run(duration=1.0, start=start),
                                    python_sending.run(duration=1.0, start=start + 0.005))
        await arrived([by_engine, by_python], lambda got: got["received"] >= 200)
        await sending.settle()
        summaries = by_engine.summary(), by_python.summary(), sending.summary()
        for client in (by_engine, by_python, sending, python_sending):
            await client.close()
        await engine.stop()
        return sent, summaries

    (sent_e, sent_p), (got_e, got_p, pub) = run(go())
    assert sent_e == sent_p == 100 and pub["sent"] == 100 and pub["held"] == 0
    engine_rows, python_rows = _rows(tmp_path / "se.jsonl"), _rows(tmp_path / "sp.jsonl")
    assert len(engine_rows) == len(python_rows) == 200
    assert all(list(r) == list(trace_schema.FIELDS) for r in engine_rows + python_rows)
    key = lambda r: (r["producer"], r["seq"])  # noqa: E731
    python_by = {key(r): r for r in python_rows}
    for row in engine_rows:
        twin = python_by[key(row)]
        assert {c: row[c] for c in ("run_id", "topic", "producer", "msg_id", "track_id", "seq", "send_time", "broker",
                                    "producer_site", "consumer_site")} == \
               {c: twin[c] for c in ("run_id", "topic", "producer", "msg_id", "track_id", "seq", "send_time", "broker",
                                     "producer_site", "consumer_site")}
        assert row["consumer"] == "se" and float(row["receive_time"]) >= float(row["send_time"])
    assert got_e["received"] == got_p["received"] == 200 and got_e["lost"] == got_p["lost"] == 0
    assert got_e["brokers"] == {"b1": 200} and set(got_e["producers"]) == {"pe", "pp"}
    # what the engine tells the guard: one line a second, merging as the Python client's do
    merged = LatenessHistogram()
    for line in (tmp_path / "health-n.engine.jsonl").open():
        row = json.loads(line)
        assert set(row) >= {"s", "hist", "loop_lag_max_ms"}
        merged.merge(row["hist"])
    assert merged.n == 100  # every message the engine published, with how late it left


def test_sequence_tracking_counts_as_the_python_client_does(server, tmp_path):
    """Messages crafted with sequence numbers 0 1 3 2 2 6 (and one that is not a message): received 5,
    one reordered, one duplicate, 4 and 5 lost; the Python client's ProducerStats on the same stream
    agrees."""
    seqs = (0, 1, 3, 2, 2, 6)

    async def go():
        engine = await Engine().start()
        common = {"owner": ("b1", server), "run_id": "r1", "events": EventLog()}
        by_engine = EngineSubscriber("seqs", "se", trace=tmp_path / "seqs.jsonl", engine=engine, **common)
        by_python = Subscriber("seqs", "sp", keep_latencies=False, **common)
        await by_engine.start()
        await by_python.start()
        crafting = Publisher("seqs", "p", 1, 100, **common)
        await crafting.start()
        conn = by_engine.current.nc  # any engine connection publishes what it is given
        for seq in seqs:
            await conn.publish("t.seqs", crafting.payload(seq, time.time()))
        await conn.publish("t.seqs", b"not a message")
        await conn.flush()
        await arrived([by_engine, by_python], lambda got: got["received"] + got["duplicates"] + got["malformed"] >= 7)
        found = by_engine.summary(), by_python.summary()
        for client in (by_engine, by_python, crafting):
            await client.close()
        await engine.stop()
        return found

    got_e, got_p = run(go())
    for got in (got_e, got_p):
        assert (got["received"], got["lost"], got["duplicates"], got["reordered"], got["malformed"]) == (5, 2, 1, 1, 1)
    assert got_e["producers"]["p"] == {k: v for k, v in got_p["producers"]["p"].items()}
    assert [r["seq"] for r in _rows(tmp_path / "seqs.jsonl")] == [0, 1, 3, 2, 6]


def test_every_engine_thread_runs_real_time_and_a_forgotten_trace_is_complete_when_forget_is_answered(server, tmp_path):
    """Every thread of the engine runs SCHED_FIFO at `engine.RT_PRIORITY` (its wakes go first on a busy
    machine, and no libnats thread holding a connection's lock waits behind the emulated hosts while the
    loop waits for that lock), and its trace rows reach the disk from a writer thread: once a subscriber
    is closed (the engine's "forget" answered), every row it counted is in its file, also with thousands
    of rows in the buffers."""
    from testbed.systems.pubsub import engine as engine_module

    async def go():
        engine = await Engine().start()
        pid = engine.process.pid

        def scheduling() -> set[tuple[int, int]]:
            """(policy, rt_priority) of every thread the engine has now."""
            found = set()
            for task in Path(f"/proc/{pid}/task").iterdir():
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()  # from field 3 (state) on
                found.add((int(fields[38]), int(fields[37])))
            return found

        threads = scheduling()  # the loop and libnats's timer thread
        common = {"owner": ("b1", server), "site": "zone1", "run_id": "r1", "events": EventLog()}
        reader = EngineSubscriber("many", "se", trace=tmp_path / "many.jsonl", engine=engine, **common)
        sending = EnginePublisher("many", "pe", 4000, 200, engine=engine, **common)
        for client in (reader, sending):
            await client.start()
        await sending.run(duration=1.0, start=time.time() + 0.1)
        await asyncio.sleep(0.3)
        await sending.settle()
        await reader.close()
        threads |= scheduling()  # and the threads started since: the trace writer, the closer
        received, rows = reader.summary()["received"], len(_rows(tmp_path / "many.jsonl"))
        await sending.close()
        await engine.stop()
        return threads, received, rows

    threads, received, rows = run(go())
    if os.geteuid() == 0:
        assert threads == {(os.SCHED_FIFO, engine_module.RT_PRIORITY)}
    else:  # no right to a real-time priority: the nice value's fallback, the same for every thread
        assert len(threads) == 1 and threads.pop()[0] == os.SCHED_OTHER
    assert received >= 3900 and rows == received


def test_a_publisher_routed_nowhere_holds_and_then_delivers_everything(server, tmp_path):
    """A baseline move: the publisher has no connection for a while (what its open loop produces is
    held), then a new one: the held messages go first, a round trip confirms them, nothing is lost."""

    async def go():
        engine = await Engine().start()
        common = {"owner": ("b1", server), "run_id": "r1", "events": EventLog()}
        sub = EngineSubscriber("held", "s", trace=tmp_path / "held.jsonl", engine=engine, **common)
        pub = EnginePublisher("held", "p", 200, 200, engine=engine, **common)
        await sub.start()
        await pub.start()
        running = asyncio.create_task(pub.run(duration=1.5, start=time.time() + 0.1))
        await asyncio.sleep(0.5)
        old = pub.current
        pub._use(None)  # as TopicClient._relookup does
        await asyncio.sleep(0.4)
        await pub.settle()
        held_meanwhile = pub.held
        new = await pub._attach("b2", server)
        await pub._switch(old, new)
        await pub._detach(old)
        sent = await running
        await asyncio.sleep(0.3)
        await sub.settle()
        await pub.settle()
        found = sent, len(held_meanwhile), sub.summary(), pub.summary()
        for client in (sub, pub):
            await client.close()
        await engine.stop()
        return found

    sent, held, got, pub = run(go())
    assert sent == 300 and held >= 40  # ~0.4 s of 200/s held
    assert got["received"] == 300 and got["lost"] == 0 and got["duplicates"] == 0
    assert pub["broker"] == "b2" and pub["held"] == 0
    rows = _rows(tmp_path / "held.jsonl")
    assert sorted(r["seq"] for r in rows) == list(range(300))


def test_a_long_run_does_not_run_out_of_connections_or_client_slots(server, tmp_path):
    """Every flush, route or subscription is a request with an id; the engine keeps 4096 connection
    slots and 4096 clients. After more requests than that (a long run's migrations), a new
    connection, a new publisher and a new subscriber still work, and every closed connection is
    released (the closer thread's: closes queued at once, as a migration's burst does)."""

    async def go():
        engine = await Engine().start()
        common = {"owner": ("b1", server), "run_id": "r1", "events": EventLog()}
        first = await engine.connect("b1", server, 5.0, None)
        for _ in range(4200):
            await first.flush()
        burst = [await engine.connect("b1", server, 5.0, None) for _ in range(40)]
        await asyncio.gather(*(c.drain() for c in burst))
        sub = EngineSubscriber("late", "s", trace=tmp_path / "late.jsonl", engine=engine, **common)
        pub = EnginePublisher("late", "p", 100, 100, engine=engine, **common)
        await sub.start()
        await pub.start()
        sent = await pub.run(duration=0.2, start=time.time() + 0.05)
        await arrived([sub], lambda got: got["received"] >= 20)
        got = sub.summary()
        for client in (sub, pub, first):
            await client.close()
        await engine.stop()
        return sent, got

    sent, got = run(go(), timeout=120)
    assert sent == 20 and got["received"] == 20 and got["lost"] == 0


def test_one_engine_gives_ids_again_once_free_so_a_client_host_never_runs_out(server, tmp_path):
    """A client host's one engine opens and closes more connections and subscribers over a run than it
    has slots (an MMOG run's moves and group changes: 869 attach failures before ids were given
    again). 5,000 connections opened and closed, 9,000 subscribers made and forgotten: the ids stay
    low, a closed connection object sends nothing under its old id, and a subscriber made on a
    reused slot counts only its own messages."""

    async def go():
        engine = await Engine().start()
        common = {"owner": ("b1", server), "run_id": "r1", "events": EventLog()}
        for _ in range(50):
            batch = [await engine.connect("b1", server, 5.0, None) for _ in range(100)]
            await asyncio.gather(*(c.close() for c in batch))
        stale = batch[0]
        with pytest.raises(EngineError, match="closed"):
            await stale.publish("t.x", b"x")
        for k in range(9000):
            idx = engine.next_client()
            await engine.request(["subscriber", idx, "-", "r1", "t", f"s{k}", "-"])
            await engine.request(["forget", idx])
            engine.release_client(idx)
        old = EngineSubscriber("reused", "old", trace=tmp_path / "old.jsonl", engine=engine, **common)
        await old.start()
        await old.close()  # forgotten: its slot goes to the next subscriber
        sub = EngineSubscriber("reused", "s", trace=tmp_path / "new.jsonl", engine=engine, **common)
        pub = EnginePublisher("reused", "p", 100, 100, engine=engine, **common)
        await sub.start()
        await pub.start()
        sent = await pub.run(duration=0.2, start=time.time() + 0.05)
        await arrived([sub], lambda got: got["received"] >= 20)
        got = sub.summary()
        highest = max(engine._free_connections + [c for c in engine._open]), sub.idx, old.idx
        for client in (sub, pub):
            await client.close()
        await engine.stop()
        return sent, got, highest, old.received

    sent, got, (conn_high, sub_idx, old_idx), old_received = run(go(), timeout=300)
    assert sent == 20 and got["received"] == 20 and got["lost"] == 0 and old_received == 0
    assert sub_idx == old_idx and conn_high <= 200


def test_a_connection_made_in_a_node_namespace_lives_there(server, tmp_path):
    """`connect(..., netns=pid)`: the socket is made inside that process's network namespace. A
    namespace with only a downed loopback cannot reach the server on this machine's loopback; the
    same connect without it can."""
    import subprocess

    isolated = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    try:
        time.sleep(0.2)

        async def go():
            engine = await Engine().start()
            try:
                here = await engine.connect("b1", server, 5.0, None)
                await here.flush()
                with pytest.raises(EngineError, match=server.split("//")[1]):
                    await engine.connect("b1", server, 2.0, None, netns=isolated.pid)
                await here.close()
            finally:
                await engine.stop()
        run(go())
    finally:
        isolated.kill()
        isolated.wait()


def test_a_dead_engine_is_an_error_not_a_silent_gap(server):
    async def go():
        engine = await Engine().start()
        pub = EnginePublisher("dead", "p", 50, 100, engine=engine, owner=("b1", server), events=EventLog())
        await pub.start()
        running = asyncio.create_task(pub.run(duration=30, start=time.time()))
        await asyncio.sleep(0.3)
        os.kill(engine.process.pid, signal.SIGKILL)
        with pytest.raises(EngineError, match="exited with status -9"):
            await running
        with pytest.raises(EngineError, match="exited with status -9"):
            await engine.request(["summary", pub.idx])
        await engine.stop()

    run(go())


def test_words_that_would_break_the_command_line_are_refused(server):
    async def go():
        engine = await Engine().start()
        with pytest.raises(ValueError, match="cannot be passed to the client engine"):
            EnginePublisher("t1", "two words", 10, engine=engine, owner=("b1", server))
        with pytest.raises(ValueError, match="cannot be passed to the client engine"):
            await engine.connect("b1", "nats://127.0.0.1:1 \nexit", 1.0, None)
        conn = await engine.connect("b1", server, 5.0, None)  # a real exchange after the refusals
        await conn.flush()
        assert engine.process.returncode is None  # the "exit" never reached it: it still serves
        await conn.close()
        await engine.stop()

    run(go())


@pytest.mark.parametrize("change, message", [
    ("tracking: {strategy: bloom}\n", "message tracking"),
    ("  - {name: sensor_data, threshold: 40ms}", None),
])
def test_a_scenario_the_engine_cannot_carry_is_refused_at_its_line(tmp_path, change, message):
    smoke = (ROOT / "scenarios" / "uav-smoke.yaml").read_text().replace(
        "  message_size: 1KB\n", "  message_size: 1KB\n  client_engine: compiled\n")
    if message is None:  # a durable class
        text = smoke.replace(change, "  - {name: sensor_data, threshold: 40ms, durable: {replicas: 3, storage: site-local}}")
        message = "durable topic class 'sensor_data' needs the Python client"
    else:
        text = smoke + change
    path = tmp_path / "engine.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=rf"engine.yaml:19: workload.client_engine: .*{message}"):
        topology.checked(load(path), str(path))
    assert load(ROOT / "scenarios" / "uav-smoke.yaml").workload.client_engine == "python"


def test_one_client_host_per_machine_without_the_engine_is_refused_at_its_line(tmp_path):
    """`client_processes: per-machine` runs the compiled engine's clients; with the Python client the
    scenario says so at its line (auto and per-node are fine with either)."""
    smoke = (ROOT / "scenarios" / "uav-smoke.yaml").read_text()
    path = tmp_path / "host.yaml"
    path.write_text(smoke.replace("  message_size: 1KB\n", "  message_size: 1KB\n  client_processes: per-machine\n"))
    with pytest.raises(ScenarioError, match=r"host.yaml:19: workload.client_processes: .*client_engine: compiled"):
        topology.checked(load(path), str(path))
    for fine in ("auto", "per-node"):
        path.write_text(smoke.replace("  message_size: 1KB\n", f"  message_size: 1KB\n  client_processes: {fine}\n"))
        topology.checked(load(path), str(path))
    assert load(ROOT / "scenarios" / "uav-smoke.yaml").workload.client_processes == "auto"


def test_bench_client_measures_the_engine_alone_beside_the_whole_swarm_process():
    """`make bench-client CLIENT_ARGS="--engine compiled"`: one short run of a 3-UAV swarm through its
    engine delivers every message and reports the engine's own CPU per message apart from the
    process's (which holds Python's start-up)."""
    from testbed.bench.client import REPO, measure

    row = measure(3, 50, 1.0, REPO, engine="compiled")
    followers = 2  # each reads the leader's 50, the leader reads each follower's 50
    assert row["engine"] == "compiled" and row["sent"] == 150 and row["received"] == 2 * followers * 50
    assert 0 < row["engine_us_per_message"] < row["client_us_per_message"]


@pytest.mark.parametrize("name, size", [("pe", 300), ("p" * 100, 64)])
def test_the_engine_publishes_the_python_clients_message(server, name, size):
    """Byte for byte what Publisher.payload makes of the same message (its due time as "%.6f", as the
    engine writes it), padded to `size` with 'x', or the header alone when it is longer than that."""
    import nats

    async def go():
        engine = await Engine().start()
        reader = await nats.connect(server)
        got = []

        async def keep(msg):
            got.append(msg.data)

        await reader.subscribe("t.raw", cb=keep)
        await reader.flush()
        common = {"owner": ("b1", server), "site": "zone2", "run_id": "r1", "events": EventLog()}
        sending = EnginePublisher("raw", name, 200, size, engine=engine, **common)
        await sending.start()
        start = round(time.time() + 0.2, 3)
        await sending.run(duration=0.1, start=start)
        end = time.monotonic() + 15.0
        while len(got) < 20 and time.monotonic() < end:  # then exactly 20
            await asyncio.sleep(0.05)
        await sending.close()
        await engine.stop()
        await reader.close()
        return start, got

    start, got = run(go())
    like = Publisher("raw", name, 200, size, precise_s=0.0, site="zone2", owner=("b1", server), events=EventLog())
    assert len(got) == 20
    for seq, data in enumerate(got):
        head = like.payload(seq, 0.0).split(b"\n", 1)[0].replace(b'"t":0.0,', f'"t":{start + seq / 200:.6f},'.encode())
        assert data == (head + b"\n").ljust(size, b"x"), (seq, data[:200])


def test_bench_connections_runs_the_binaries_it_is_given_alternating(tmp_path):
    """`make bench-connections` at a toy size: each binary given runs in turn, with its CPU and the
    machine's steal beside it."""
    from testbed.systems.pubsub.bench import connections
    from testbed.systems.pubsub.engine import ensure_built

    copy = tmp_path / "engine-copy"
    copy.write_bytes(ensure_built().read_bytes())
    copy.chmod(0o755)
    out = tmp_path / "connections.json"
    assert connections.main(["--binary", str(copy), "--binary", str(ensure_built()), "--topics", "2",
                             "--subscribers", "6", "--rate", "20", "--window", "1", "--repeat", "1",
                             "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["binary"] for r in result["runs"]] == [str(copy), str(ensure_built())]
    assert all(r["connections"] == 8 and r["deliveries_per_s"] == 120 and r["engine_cpu_ms_per_s"] > 0
               and r["steal_ms_per_s"] >= 0 for r in result["runs"])
