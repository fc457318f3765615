"""The lookup service: answers `_ep.lookup` at the cloud broker with the topic's owner from
ZooKeeper, and assigns an unowned topic lazily (as Pulsar does) by telling a broker to acquire it.

A lookup request is {"topic": t} plus, from the client library, the asker: {"client", "role",
"coord"} (its coordinate as it would report it to the topic's broker). The topic manager places an
unowned topic from the asker's coordinate (`control.initial_placement: first_lookup`); a missing or
malformed asker only loses that (the lookup is still answered).

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

from testbed.policies.initial import asker_clients
from testbed.policies.snapshot import ClientNC, TopicClients, coord_from_dict
from testbed.systems.pubsub.client import connect_nats
from testbed.systems.pubsub.metadata import Metadata, check_topic
from testbed.systems.pubsub.reports import check_coordinate


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


class LookupService:
    def __init__(self, nats_url: str, zk: str, default: str):
        self.nats_url, self.default = nats_url, default
        self.meta = Metadata(zk)
        self.plan: dict[str, str] = {}
        self.peers: dict[str, object] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.answered = 0
        self._tasks: set = set()

    async def _peer(self, address: str):
        if address not in self.peers or self.peers[address].is_closed:
            self.peers[address] = await connect_nats(address, name="lookup")
        return self.peers[address]

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

    async def _on_lookup(self, msg) -> None:
        task = asyncio.get_running_loop().create_task(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, msg) -> None:
        try:
            answer = await self.resolve(*parse_lookup(msg.data))
        except Exception as error:  # noqa: BLE001 - the client must get an answer
            answer = {"error": f"{type(error).__name__}: {error}"}
        self.answered += 1
        await msg.respond(json.dumps(answer).encode())

    async def _on_plan(self, msg) -> None:
        try:
            request = json.loads(msg.data)
            self.plan[check_topic(request["topic"])] = str(request["broker"])
            answer = {"ok": True}
        except (ValueError, KeyError, TypeError) as error:
            answer = {"ok": False, "error": str(error)}
        if msg.reply:
            await msg.respond(json.dumps(answer).encode())

    async def run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await asyncio.to_thread(self.meta.start)
        await asyncio.to_thread(self.meta.ensure_layout)
        nc = await connect_nats(self.nats_url, name="lookup")
        await nc.subscribe("_ep.lookup", cb=self._on_lookup)
        await nc.subscribe("_ep.lookup.plan", cb=self._on_plan)
        await nc.flush()
        print("ready", flush=True)
        await stop.wait()
        for conn in [nc, *self.peers.values()]:
            await conn.close()
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
