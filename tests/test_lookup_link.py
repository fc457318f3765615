"""The topic clients of one process share one connection to the lookup service (`client.LookupLink`),
against real nats-servers on loopback: one connection whatever the number of clients, each client's
lookups answered over it, each client's own `lookup_dropped` and `lookup_back` when the lookup
service's server goes away and comes back, and the connection closed with the last client. A lookup
service that is not there is asked again after pauses that grow, and its absence is told once per
client, with the count once it answers."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import urllib.request

import nats

from testbed.bench.client import local_nats_server
from testbed.procs import free_port
from testbed.systems.pubsub.client import LOOKUP_PAUSE_FIRST_S, LOOKUP_PAUSE_MAX_S, EventLog, LookupLink, Subscriber
from tests.needs import NATS_SERVER, needs_nats_server

pytestmark = needs_nats_server
CLIENTS = 3
WAIT_S = 10.0


def _lookup_server(port: int, monitor: int) -> subprocess.Popen:
    server = subprocess.Popen([NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return server
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise AssertionError(f"nats-server on port {port} did not start")


def _connections(monitor: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/connz", timeout=5) as reply:
        return json.load(reply)["num_connections"]


async def _answering(url: str, broker_url: str, asked: list[str]):
    """The lookup service: every topic is on `broker_url`."""
    nc = await nats.connect(url)

    async def answer(msg) -> None:
        topic = json.loads(msg.data)["topic"]
        asked.append(topic)
        await msg.respond(json.dumps({"topic": topic, "broker": "b1", "address": broker_url}).encode())

    await nc.subscribe("_ep.lookup", cb=answer)
    return nc


async def _until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


def test_the_clients_of_a_process_share_one_lookup_connection_and_each_records_its_drops():
    port, monitor = free_port(), free_port()
    url = f"nats://127.0.0.1:{port}"
    lookup_server = _lookup_server(port, monitor)
    broker, broker_url = local_nats_server(NATS_SERVER)

    async def scenario() -> None:
        nonlocal lookup_server
        asked: list[str] = []
        service = await _answering(url, broker_url, asked)
        events = EventLog()
        clients = [Subscriber(f"topic{i}", f"player{i}", lookup_url=url, events=events) for i in range(CLIENTS)]
        await asyncio.gather(*(client.start() for client in clients))
        try:
            assert sorted(asked) == [f"topic{i}" for i in range(CLIENTS)]
            links = {id(client._lookup_link) for client in clients}
            assert len(links) == 1 and clients[0]._lookup_link.nc.is_connected
            assert await asyncio.to_thread(_connections, monitor) == 2  # the service's and the clients' one
            await service.close()

            lookup_server.kill()
            lookup_server.wait()
            dropped = lambda: {e["topic"] for e in events.items if e["type"] == "lookup_dropped"}  # noqa: E731
            await _until(lambda: len(dropped()) == CLIENTS, f"lookup_dropped for every client: {dropped()}")
            lookup_server = _lookup_server(port, monitor)
            back = lambda: {e["topic"] for e in events.items if e["type"] == "lookup_back"}  # noqa: E731
            await _until(lambda: len(back()) == CLIENTS, f"lookup_back for every client: {back()}")

            link = clients[0]._lookup_link
            for client in clients[:-1]:
                await client.close()
            assert link.nc is not None and link.nc.is_connected  # still in use by the last client
            await clients[-1].close()
            assert link.nc is None and LookupLink._links[asyncio.get_running_loop()] == {}
            await _until(lambda: _connections(monitor) == 0, "the shared connection closed with the last client")
        finally:
            for client in clients:
                await client.close()

    try:
        asyncio.run(scenario())
    finally:
        for server in (lookup_server, broker):
            server.terminate()
            server.wait()


def test_lookups_without_a_lookup_service_back_off_and_are_told_once():
    """Nobody answers lookups ("no responders", at once) for ABSENT_S: each client asks again after
    pauses doubling to LOOKUP_PAUSE_MAX_S (fewer asks than a fixed first pause would make), records one
    `lookup_failed`, and once the service is there one `lookup_answered` with how many failed."""
    absent_s = 4.0
    port, monitor = free_port(), free_port()
    url = f"nats://127.0.0.1:{port}"
    lookup_server = _lookup_server(port, monitor)
    broker, broker_url = local_nats_server(NATS_SERVER)

    async def scenario() -> list[dict]:
        events = EventLog()
        clients = [Subscriber(f"topic{i}", f"player{i}", lookup_url=url, events=events) for i in range(CLIENTS)]
        starting = [asyncio.create_task(client.start()) for client in clients]
        await asyncio.sleep(absent_s)
        asked: list[str] = []
        service = await _answering(url, broker_url, asked)
        try:
            await asyncio.wait_for(asyncio.gather(*starting), WAIT_S)
        finally:
            for client in clients:
                await client.close()
            await service.close()
        return events.items

    try:
        events = asyncio.run(scenario())
    finally:
        for server in (lookup_server, broker):
            server.terminate()
            server.wait()
    failed = [e for e in events if e["type"] == "lookup_failed"]
    answered = [e for e in events if e["type"] == "lookup_answered"]
    assert sorted(e["client"] for e in failed) == sorted(e["client"] for e in answered) == [f"player{i}" for i in range(CLIENTS)]
    fixed = absent_s / LOOKUP_PAUSE_FIRST_S  # what a fixed first pause would ask per client
    # the most a client can ask: each pause at least half its nominal value
    pauses, total, most = LOOKUP_PAUSE_FIRST_S, 0.0, 1
    while total < absent_s:
        total += pauses / 2
        pauses = min(LOOKUP_PAUSE_MAX_S, 2 * pauses)
        most += 1
    print(f"\nfailed lookups per client over {absent_s} s: {[e['failed'] for e in answered]} (at most {most}; fixed pauses: {fixed:.0f})")
    assert all(2 <= e["failed"] <= most < fixed for e in answered), (answered, most, fixed)
    assert all(e["failing_s"] >= absent_s - 0.5 for e in answered), answered
