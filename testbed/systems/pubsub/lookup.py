"""The lookup service: answers `_ep.lookup` at the cloud broker with the topic's owner from
ZooKeeper, and assigns an unowned topic lazily (as Pulsar does) by telling a broker to acquire it.

A lookup request is {"topic": t} plus, from the client library, the asker: {"client", "role",
"coord"} (its coordinate as it would report it to the topic's broker). The topic manager places an
unowned topic from the asker's coordinate (`control.initial_placement: first_lookup`); a missing or
malformed asker only loses that (the lookup is still answered).

Fast failover: a client whose connection to its broker dropped says so in its lookup
({"lost": b}). The service probes b (a TCP connect to its nats-server, then its agent's status)
within PROBE_S; a broker that fails the probe is fenced: its registration and owner nodes are
deleted from ZooKeeper, so its topics are orphans at once instead of when its ZooKeeper session
expires (6 s), and the lookup places them anew. A broker that was only slow (paused) and comes back
learns from its owner nodes' watches that it lost them and redirects its clients
(`metadata.Metadata.fence`, the broker agent's `_fenced`): no topic keeps two owners.

The topic manager (`manager.TopicManager`) is this service with a placement policy for unowned
topics. Run alone (the data-plane tests), it places a topic on the broker planned for it on
`_ep.lookup.plan` ({"topic": t, "broker": b}, used once), else on the default broker.

    python -m testbed.systems.pubsub.lookup --nats nats://10.1.0.1:4222 --zk 10.1.0.1:2181 --default cloud
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time

from testbed.policies.initial import asker_clients
from testbed.policies.snapshot import ClientNC, TopicClients, coord_from_dict
from testbed.systems.pubsub.client import connect_nats, reachable
from testbed.systems.pubsub.metadata import Metadata, check_topic
from testbed.systems.pubsub.peers import Peers
from testbed.systems.pubsub.reports import check_coordinate

PROBE_S = 0.5  # a live broker's nats-server accepts and its agent answers well within this on any emulated path


def parse_lost(data: bytes) -> str | None:
    """The broker a lookup says its client lost ({"lost": name}), or None."""
    try:
        lost = json.loads(data).get("lost")
    except (ValueError, AttributeError):
        return None
    return lost if isinstance(lost, str) and 0 < len(lost) <= 64 else None


def parse_lookup(data: bytes) -> tuple[str, TopicClients | None]:
    """(topic, the asker as the topic's only client, or None) of a lookup request; ValueError when
    the topic is missing or invalid. The asker is optional: None when absent or malformed."""
    request = json.loads(data)
    topic = check_topic(request["topic"])
    try:
        client, coord = request["client"], check_coordinate(coord_from_dict(request["coord"]))
        if not isinstance(client, str) or not 0 < len(client) <= 64:
            raise ValueError("client must be a name")
        return topic, asker_clients(ClientNC(client, coord), request["role"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return topic, None


SESSION_S = 6.0  # the manager's ZooKeeper session (the brokers' too): a dead leader hands over this much later


class LookupService:
    def __init__(self, nats_url: str, zk: str, default: str):
        self.nats_url, self.default = nats_url, default
        self.meta = Metadata(zk, session_timeout=SESSION_S)
        self.plan: dict[str, str] = {}
        self.peers = Peers("lookup")
        self.locks: dict[str, asyncio.Lock] = {}
        self.answered = 0
        self._tasks: set = set()

    async def _peer(self, address: str):
        return await self.peers.get(address)

    async def warm_peers(self) -> None:
        """Connect ahead to every registered broker: an orphan's acquire at its new owner then waits
        for no handshake (`peers.Peers`)."""
        brokers = await asyncio.to_thread(self.meta.brokers)
        self.peers.warm([info.get("address") for info in brokers.values()], self._spawn)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def resolve(self, topic: str, asker: TopicClients | None = None) -> dict:
        """The topic's owner, assigning it if it has none; `asker` (who asks, `parse_lookup`) is for
        subclasses that place by coordinates."""
        async with self.locks.setdefault(topic, asyncio.Lock()):  # one assignment per topic at a time
            owner = await asyncio.to_thread(self.meta.owner, topic)
            if owner:
                return {"topic": topic, **owner}
            broker = self.plan.pop(topic, self.default)
            registered = (await asyncio.to_thread(self.meta.brokers)).get(broker)
            if not registered:
                return {"topic": topic, "error": f"broker {broker} is not registered"}
            peer = await self._peer(registered["address"])
            reply = await peer.request(f"_ep.cmd.{broker}", json.dumps({"op": "acquire", "topic": topic}).encode(),
                                       timeout=10)
            answer = json.loads(reply.data)
            if answer.get("ok"):
                return {"topic": topic, "broker": broker, "address": registered["address"]}
            if answer.get("owner"):
                return {"topic": topic, **answer["owner"]}
            return {"topic": topic, "error": answer.get("error", "acquire failed")}

    async def suspect(self, broker: str) -> dict | None:
        """A client lost `broker`: probe it, and fence it if it fails the probe. Returns what was
        found ({"broker", "alive", "probe_s", "fenced": topics}) or None when the broker is no longer
        registered (fenced already, or its session expired). One probe per broker at a time: the
        clients that lost it together wait for the first one's answer."""
        async with self.locks.setdefault(f"broker {broker}", asyncio.Lock()):
            registered = (await asyncio.to_thread(self.meta.brokers)).get(broker)
            if registered is None:
                return None
            started = time.monotonic()
            alive = await self.probe(broker, registered["address"])
            found = {"broker": broker, "alive": alive, "probe_s": round(time.monotonic() - started, 4), "fenced": []}
            if not alive:
                found["fenced"] = await asyncio.to_thread(self.meta.fence, broker)
            return found

    async def probe(self, broker: str, address: str) -> bool:
        """Whether `broker` serves: its nats-server accepts a TCP connection and its agent answers a
        status request, each within PROBE_S. A killed node refuses at once; a paused one times out."""
        try:
            await reachable(address, timeout=PROBE_S)
            peer = await asyncio.wait_for(self._peer(address), PROBE_S)
            reply = await peer.request(f"_ep.cmd.{broker}", b'{"op": "status"}', timeout=PROBE_S)
            return bool(json.loads(reply.data).get("ok"))
        except Exception:  # noqa: BLE001 - any failure to answer in time is a failed probe
            return False

    async def _on_lookup(self, msg) -> None:
        self._spawn(self._answer(msg))

    async def _answer(self, msg) -> None:
        try:
            lost = parse_lost(msg.data)
            if lost is not None:
                self.suspected(await self.suspect(lost))
            answer = await self.resolve(*parse_lookup(msg.data))
        except Exception as error:  # noqa: BLE001 - the client must get an answer
            answer = {"error": f"{type(error).__name__}: {error}"}
        self.answered += 1
        await msg.respond(json.dumps(answer).encode())

    def suspected(self, found: dict | None) -> None:
        """What a suspicion found (`suspect`); the topic manager records it as an event."""

    async def _on_plan(self, msg) -> None:
        try:
            request = json.loads(msg.data)
            self.plan[check_topic(request["topic"])] = str(request["broker"])
            answer = {"ok": True}
        except (ValueError, KeyError, TypeError) as error:
            answer = {"ok": False, "error": str(error)}
        if msg.reply:
            await msg.respond(json.dumps(answer).encode())

    def subscriptions(self) -> list[tuple[str, object]]:
        """What else this service listens to on the cloud's nats-server (the topic manager adds its own)."""
        return []

    async def run(self) -> None:
        stop = self.stopping = asyncio.Event()  # set by SIGTERM: what follows (sessions closing) is on purpose
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await asyncio.to_thread(self.meta.start)
        await asyncio.to_thread(self.meta.ensure_layout)
        nc = await connect_nats(self.nats_url, name="lookup")
        await nc.subscribe("_ep.lookup", cb=self._on_lookup)
        await nc.subscribe("_ep.lookup.plan", cb=self._on_plan)
        for subject, callback in self.subscriptions():
            await nc.subscribe(subject, cb=callback)
        await nc.flush()
        print("ready", flush=True)
        await stop.wait()
        await self.peers.close()
        await nc.close()
        await asyncio.to_thread(self.meta.stop)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="lookup service (the topic manager's, without its policy)")
    parser.add_argument("--nats", required=True, help="the cloud broker's nats://ip:4222")
    parser.add_argument("--zk", required=True, help="ZooKeeper ip:port")
    parser.add_argument("--default", required=True, help="broker that unowned topics are assigned to")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(LookupService(args.nats, args.zk, args.default).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
