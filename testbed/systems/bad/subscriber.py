"""A node's BAD subscribers (Nguyen et al., DEBS '19): each registers with the BCS, attaches to the
broker it is given, subscribes to its FE subscriptions there, and follows migrate orders by
re-attaching.

One NATS connection per subscriber to its broker (the broker keeps one connection per subscriber,
as in BAD); the node's subscribers share one connection to the hub for registering and for the
BCS's orders (subscribed before registering, so no order is lost). A migration
is make-before-break: connect to the new broker, subscribe, flush, then drop the old connection a
grace later (the leaf forwards the new interest upstream asynchronously: results published in
between still arrive through the old broker). Duplicates (both connections subscribed for a moment)
are dropped by sequence number and counted. Each downtime is recorded twice, as for topic
migrations: until re-attached (`reconnect_s`, subscriptions confirmed by the new broker) and until
the first result through the new broker (`downtime_s`).

    python -m testbed.systems.bad.subscriber --node sub1 --hub nats://10.0.0.1:4222 --plan plan.json --trace t.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import signal
import sys
import time
from pathlib import Path

from testbed.policies.snapshot import coord_to_dict
from testbed.systems.bad.cluster import parse_record
from testbed.systems.bad.coordinator import REGISTER, control_subject
from testbed.systems.pubsub.client import EventLog, ProducerStats, TraceWriter, connect_nats, coordinate_source
from testbed.systems.pubsub.clienthealth import ClientHealth

SWITCH_GRACE_S = 1.0  # the old connection outlives the new one's subscriptions by this long
REGISTER_TRIES_S = 60.0


class BadSubscriber:
    def __init__(self, spec: dict, plan: dict, run_id: str, trace: TraceWriter, events: EventLog):
        self.id, self.site = spec["id"], spec["site"]
        self.subjects = {plan["be"][k]["subject"]: plan["be"][k]["topic"] for k in spec["subs"]}
        self.run_id, self.trace, self.events = run_id, trace, events
        self.broker, self.nc = None, None
        self.stats: dict[str, ProducerStats] = {}
        self.received = self.duplicates = self.migrations = 0
        self.pending: dict | None = None  # an open downtime: {"since", "broker", "reconnect_s"}
        self._closing: set[asyncio.Task] = set()
        self.attached = asyncio.Event()

    async def register(self, hub, coord) -> dict:
        deadline = time.monotonic() + REGISTER_TRIES_S
        while True:
            here = coord() if coord else None
            here = await here if inspect.isawaitable(here) else here
            request = {"id": self.id, "coord": coord_to_dict(here)}
            answer = json.loads((await hub.request(REGISTER, json.dumps(request).encode(), timeout=10)).data)
            if "address" in answer:
                return answer
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.id}: the BCS did not place it: {answer.get('error')}")
            await asyncio.sleep(0.5)

    async def attach(self, broker: str, address: str):
        nc = await connect_nats(address, name=self.id)
        for subject in self.subjects:
            await nc.subscribe(subject, cb=self._receiver(broker))
        await nc.flush()
        return nc

    def _receiver(self, broker: str):
        async def on_msg(msg) -> None:
            now = time.time()
            seq, due = parse_record(msg.data)
            topic = self.subjects[msg.subject]
            stats = self.stats.get(topic)
            if stats is None:
                self.stats[topic] = ProducerStats(seq, seq)
            elif not stats.see(seq):
                self.duplicates += 1
                return
            self.received += 1
            self.trace.write(run_id=self.run_id, topic=topic, producer="cluster", consumer=self.id, msg_id=f"{topic}:{seq}",
                             seq=seq, send_time=f"{due:.6f}", receive_time=f"{now:.6f}", broker=broker,
                             producer_site="cloud", consumer_site=self.site)
            if self.pending and broker == self.pending["broker"]:
                self.events.add("downtime", client=self.id, topic="*", role="consumer", reason="bad_migration",
                                broker=broker, reconnect_s=self.pending["reconnect_s"],
                                downtime_s=now - self.pending["since"])
                self.pending = None
        return on_msg

    async def _on_control(self, msg) -> None:
        await self.attached.wait()  # an order may come before the first attachment is complete
        order = json.loads(msg.data)
        if order.get("type") != "migrate" or order.get("broker") == self.broker:
            return
        since = time.time()
        old = self.nc
        self.nc = await self.attach(order["broker"], order["address"])
        self.broker = order["broker"]
        self.migrations += 1
        self.pending = {"since": since, "broker": order["broker"], "reconnect_s": time.time() - since}
        self.events.add("bad_reattached", client=self.id, broker=order["broker"], round=order.get("round"),
                        reconnect_s=self.pending["reconnect_s"])
        closing = asyncio.create_task(self._close_later(old))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def _close_later(self, old) -> None:
        await asyncio.sleep(SWITCH_GRACE_S)
        await old.close()

    async def start(self, hub, coord) -> None:
        # Orders come over the node's hub connection, subscribed before registering: the BCS may
        # order a move at its next round, before this subscriber has attached (an order sent to its
        # broker connection then was lost: 6 of 28 in one smoke run).
        await hub.subscribe(control_subject(self.id), cb=self._on_control)
        await hub.flush()
        answer = await self.register(hub, coord)
        self.broker = answer["broker"]
        self.nc = await self.attach(answer["broker"], answer["address"])
        self.events.add("bad_attached", client=self.id, broker=self.broker)
        self.attached.set()

    def summary(self) -> dict:
        return {"client": self.id, "received": self.received, "duplicates": self.duplicates,
                "lost": sum(s.lost for s in self.stats.values()), "migrations": self.migrations, "broker": self.broker}


async def _main(args) -> int:
    plan = json.loads(Path(args.plan).read_text())
    trace, events, health = TraceWriter(args.trace), EventLog(args.events), ClientHealth(args.health)
    mine = [BadSubscriber(s, plan, args.run_id, trace, events)
            for s in [s for s in plan["subscribers"] if s["node"] == args.node][args.part::args.parts]]
    coord = coordinate_source(args.coord, args.node)
    hub = await connect_nats(args.hub, name=f"bad-{args.node}")
    await asyncio.gather(*(s.start(hub, coord) for s in mine))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    watch = asyncio.create_task(health.run())
    print("ready", flush=True)
    await stop.wait()
    watch.cancel()
    for s in mine:
        await s.nc.close()
    await hub.close()
    trace.close()
    health.close()
    summaries = [s.summary() for s in mine]
    print(json.dumps({"node": args.node, "received": sum(s["received"] for s in summaries),
                      "duplicates": sum(s["duplicates"] for s in summaries),
                      "lost": sum(s["lost"] for s in summaries), "migrations": sum(s["migrations"] for s in summaries),
                      "subscribers": summaries}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a node's BAD subscribers")
    parser.add_argument("--node", required=True)
    parser.add_argument("--hub", required=True, help="the hub's nats://ip:4222 (the BCS answers there)")
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--trace", required=True, type=Path)
    parser.add_argument("--events", type=Path)
    parser.add_argument("--health", type=Path)
    parser.add_argument("--run-id", default="")
    parser.add_argument("--part", type=int, default=0, help="this process runs the node's subscribers part, part + parts, ...")
    parser.add_argument("--parts", type=int, default=1)
    parser.add_argument("--coord", default="none", help="none | serf | proxy | json:{...} (nr placement needs one)")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
