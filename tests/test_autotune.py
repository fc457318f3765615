"""The auto-tuned batching publisher (seed 003): the control rule step by step on scripted polls, the
estimators (eq. 1, 2), the worker pool's priority, the request sources, the scenario's checks, and
the publisher against a real nats-server's JetStream stream on loopback (flow control by a full
stream, nothing lost or duplicated)."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import time
from pathlib import Path

import pytest

from testbed import topology
from testbed.systems.autotune.checks import autotune_nodes
from testbed.policies.autotune import Tuner, TuningConfig, ewma
from testbed.scenario.loader import ScenarioError, load
from testbed.systems.autotune import sources
from testbed.systems.autotune.publisher import PUBLISH, RECEIVE, AutotunedPublisher, Request, WorkerPool
from tests.needs import NATS_SERVER, needs_nats_server

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "scenarios" / "autotune-smoke.yaml"
TABLE_I = TuningConfig()


def test_table_i_defaults():
    assert (TABLE_I.t_min, TABLE_I.t_max, TABLE_I.alpha, TABLE_I.gamma, TABLE_I.beta, TABLE_I.n_min) == \
        (0.05, 0.2, 0.5, 0.75, 1.2, 1)


def test_fewer_than_n_waiting_halves_n_and_publishes_nothing():
    tuner = Tuner(TABLE_I, 50, tuned=True, poll_s=0.05)
    assert [tuner.poll(2, 1, 0.05, 0.01) for _ in range(5)] == [0] * 5
    assert tuner.n == 1  # 50 -> 25 -> 12 -> 6 -> 3 -> 1
    assert tuner.poll(2, 1, 0.05, 0.06) == 1  # now N (1) wait: a batch of N
    assert tuner.poll(0, 0, 0.05, 0.0) == 0 and tuner.n == 1  # never below N_min


def test_a_batch_on_time_grows_n_by_one_a_late_one_shrinks_it_and_t_poll_follows_t_mpt():
    tuner = Tuner(TABLE_I, 4, tuned=True, poll_s=0.05)
    assert tuner.poll(10, 10, 0.05, 0.05) == 4
    tuner.published(t_mpt_s=0.01)  # out before the next poll: additive increase
    assert tuner.n == 5 and tuner.t_poll == pytest.approx(0.05)  # 1.2 x 10 ms, clamped up to T_min
    assert tuner.poll(10, 5, 0.05, 0.05) == 5
    tuner.published(t_mpt_s=0.1)  # longer than T_poll (50 ms): the broker side is the limit
    assert tuner.n == 4 and tuner.t_poll == pytest.approx(0.12)  # 1.2 x 100 ms
    tuner.published(t_mpt_s=1.0)
    assert tuner.n == 3 and tuner.t_poll == pytest.approx(0.2)  # clamped down to T_max


def test_the_oldest_request_waits_at_most_t_then_whatever_waits_goes_out():
    fixed = Tuner(TABLE_I, 50, tuned=False, poll_s=0.05)
    assert fixed.poll(3, 1, 0.05, 0.19) == 0
    assert fixed.poll(3, 0, 0.05, 0.20) == 3
    assert fixed.n == 50  # without tuning N never moves ...
    fixed.published(0.5)
    assert fixed.n == 50 and fixed.t_poll == 0.05  # ... nor does T_poll
    assert fixed.poll(0, 0, 0.05, 0.0) == 0


def test_n_never_exceeds_the_capacity_estimate():
    tuner = Tuner(TABLE_I, 5, tuned=True, poll_s=0.05)
    tuner.transferred(service_s=2.0, in_flight=12)  # eta = 6 messages/s
    assert tuner.eta_est == 6.0
    for _ in range(5):
        tuner.poll(100, 10, 0.05, 0.0)
        tuner.published(0.001)
    assert tuner.n == 6  # 5 -> 6, then held at N_max = eta_est


def test_estimators_are_the_papers_ewma():
    assert ewma(None, 10.0, 0.5) == 10.0
    assert ewma(10.0, 20.0, 0.5) == 15.0  # eq. 1, alpha 0.5
    tuner = Tuner(TABLE_I, 1, tuned=True, poll_s=0.05)
    tuner.poll(0, 2, 0.1, 0.0)  # 20 requests/s sampled
    tuner.poll(0, 1, 0.1, 0.0)  # 10 requests/s
    assert tuner.lambda_est == pytest.approx(0.5 * 20 + 0.5 * 10)
    tuner.transferred(0.14, 7)  # 50 messages/s
    tuner.transferred(0.28, 7)  # 25 messages/s
    assert tuner.eta_est == pytest.approx(0.75 * 50 + 0.25 * 25)  # eq. 2, gamma 0.75


@pytest.mark.parametrize("field, value", [("t_min", 0.0), ("alpha", 1.0), ("gamma", -0.1), ("beta", 0.9), ("n_min", 0)])
def test_tuning_config_refuses_values_the_rule_cannot_use(field, value):
    with pytest.raises(ValueError, match=field):
        TuningConfig(**{field: value})


def test_a_freed_worker_serves_a_waiting_receive_first_only_with_priority():
    async def order(receive_first: bool) -> list[str]:
        pool, served = WorkerPool(1, receive_first=receive_first), []
        await pool.acquire(PUBLISH)

        async def wait(name, priority):
            await pool.acquire(priority)
            served.append(name)
            pool.release()
        tasks = [asyncio.create_task(wait("publish", PUBLISH))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(wait("receive", RECEIVE)))
        await asyncio.sleep(0)
        pool.release()
        await asyncio.gather(*tasks)
        assert pool.free == 1
        return served
    assert asyncio.run(order(True)) == ["receive", "publish"]
    assert asyncio.run(order(False)) == ["publish", "receive"]


def test_a_full_input_buffer_drops_the_request_and_counts_it(tmp_path):
    async def go():
        publisher = AutotunedPublisher(None, "at.x", "pub1", Tuner(TABLE_I, 1, True, 0.05), workers=1,
                                       input_buffer=2, size=10, retry_s=0.01, ack_timeout_s=1.0,
                                       poll_log=tmp_path / "poll.jsonl")
        for seq in range(5):
            publisher.receive(Request(seq, time.time()))
        publisher.close()
        return publisher.counts
    counts = asyncio.run(go())
    assert (counts["arrived"], counts["dropped"]) == (5, 3)


def test_sources_poisson_steps_and_trace():
    rng = random.Random(1)
    times = sources.poisson(35.0, 200.0, rng)
    assert abs(len(times) / 200.0 - 35.0) < 1.5 and times == sorted(times) and times[-1] < 200.0
    # Table II read in ms, time-scaled by 0.1: 100 s; 55 requests/s from 10 s to 30 s
    steps = sources.steps(sources.TABLE_II, 100.0, random.Random(2), time_scale=0.1)
    within = [t for t in steps if 10.0 <= t < 30.0]
    assert abs(len(within) / 20.0 - 55.0) < 6 and sum(t < 10.0 for t in steps) < 40
    trace = sources.read_trace(sources.trace_file("sls-synthetic"))
    fast = sources.from_trace(trace, 50.0, 60.0)
    assert fast[0] == 0.0 and fast[-1] < 60.0
    assert fast[10] == pytest.approx((trace[10] - trace[0]) / 50)
    with pytest.raises(ValueError, match="unknown trace"):
        sources.trace_file("nope")


def test_the_shipped_trace_is_what_its_generator_makes(tmp_path):
    """SOURCE.md's provenance holds: the generator still makes the shipped file byte for byte."""
    shipped = sources.trace_file("sls-synthetic")
    made = tmp_path / "made.csv"
    note = "\n".join(line[2:] for line in shipped.read_text().splitlines() if line.startswith("# "))
    sources.write_trace(made, sources.synthetic_sls(), note)
    assert made.read_bytes() == shipped.read_bytes()
    times = sources.read_trace(shipped)
    assert 0.4 < len(times) / times[-1] < 0.8  # sLS's low load, bursty


@pytest.mark.parametrize("old, new, message", [
    ("source: {kind: poisson, rate: 1.75/s}", "source: {kind: poisson}", "a poisson source needs a rate"),
    ("source: {kind: poisson, rate: 1.75/s}", "source: {kind: trace, trace: sls}", "autotune.source.trace"),
    ("source: {kind: poisson, rate: 1.75/s}", "source: {kind: steps, steps: [{start: 5s, end: 2s, rate: 1/s}]}",
     "end (2s) must come after start (5s)"),
    ("- {name: auto1, batch: 1, tuned: true}", "- {name: auto50, batch: 1, tuned: true}", "duplicate name 'auto50' in variants"),
    ("- {name: auto1, batch: 1, tuned: true}", "- {name: auto1, batch: 0, tuned: true}", "variants[2].batch"),
    ("kind: autotune", "kind: uav-swarm", "workload kind 'autotune' needs an autotune block, and only it takes one"),
])
def test_bad_autotune_settings_are_refused_with_file_line_and_field(tmp_path, old, new, message):
    assert old in SMOKE.read_text()
    (tmp_path / "s.yaml").write_text(SMOKE.read_text().replace(old, new))
    with pytest.raises(ScenarioError) as error:
        load(tmp_path / "s.yaml")
    assert "s.yaml:" in str(error.value) and message in str(error.value), str(error.value)


def test_autotune_needs_one_publisher_and_one_subscriber_beside_a_broker(tmp_path):
    text = SMOKE.read_text().replace("role: publisher, count: 1", "role: publisher, count: 2")
    (tmp_path / "s.yaml").write_text(text + "faults:\n  - {at: 10s, kill: bzone1}\n")
    with pytest.raises(ScenarioError) as error:
        topology.checked(load(tmp_path / "s.yaml"), str(tmp_path / "s.yaml"))
    assert "one node with role publisher and one with role subscriber, found 2 and 1" in str(error.value)
    assert "takes no faults" in str(error.value)
    built = topology.checked(load(SMOKE), str(SMOKE))
    assert autotune_nodes(built) == ("pub1", "sub1", "bzone1")
    assert built.node_rtt("pub1", "bzone1") == pytest.approx(0.140)  # Table I's RTT


@needs_nats_server
def test_a_full_stream_pushes_back_and_every_request_arrives_once(tmp_path):
    """Real JetStream on loopback: a stream of 5 messages and a subscriber that comes back every
    0.3 s; 30 requests at once. The stream refuses while full (the WTs try again), and all 30 are
    delivered, none twice."""
    import nats

    from testbed.systems.autotune.subscriber import VariantConsumer

    port = 24829
    server = subprocess.Popen([NATS_SERVER, "-js", "-sd", str(tmp_path / "js"), "-a", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def scenario():
        for _ in range(100):
            try:
                nc = await nats.connect(f"nats://127.0.0.1:{port}")
                break
            except Exception:  # noqa: BLE001 - the server is still starting
                await asyncio.sleep(0.05)
        js = nc.jetstream()
        row = {"run_id": "t", "topic": "requests-x", "producer": "pub1", "consumer": "sub1", "broker": "b",
               "producer_site": "a", "consumer_site": "b"}
        consumer = VariantConsumer(nc, "x", row, tmp_path / "trace.jsonl", buffer=5, pull_interval=0.3, pull_time=0.0,
                                   rng=random.Random(1))
        await consumer.setup(js)
        reader = asyncio.create_task(consumer.run())
        publisher = AutotunedPublisher(js, "at.x", "pub1", Tuner(TABLE_I, 10, True, 0.05), workers=8, input_buffer=100,
                                       size=100, retry_s=0.01, ack_timeout_s=2.0, poll_log=tmp_path / "poll.jsonl")
        tasks = [asyncio.create_task(publisher.mrt()), asyncio.create_task(publisher.mpt())]
        for seq in range(30):
            publisher.receive(Request(seq, time.time()))
        deadline = time.monotonic() + 20
        while consumer.delivered < 30 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in [*tasks, reader, *publisher.tasks]:
            task.cancel()
        publisher.close()
        consumer.close()
        await nc.close()
        return publisher.counts, consumer
    try:
        counts, consumer = asyncio.run(scenario())
    finally:
        server.kill()
        server.wait()
    assert counts["acked"] == 30 and counts["refused"] > 0 and counts["errors"] == 0, counts
    assert consumer.delivered == 30 and consumer.duplicates == 0
    rows = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert sorted(r["seq"] for r in rows) == list(range(30))
    assert all(r["receive_time"] > r["send_time"] for r in rows)
    polls = [json.loads(line) for line in (tmp_path / "poll.jsonl").read_text().splitlines()]
    assert polls and all({"n", "t_poll_s", "lambda_est", "eta_est", "waiting", "take"} <= set(p) for p in polls)
