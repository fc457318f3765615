"""The subscriber of the auto-tuned publisher's experiment (seed 003, section V-A), next to the broker:
it creates each publisher variant's JetStream stream (bounded: a full stream refuses new messages)
and pulls from it, fast or slow.

- Fast (both times 0): pull requests always stand at the broker (a new one every half expiry), so
  a message is delivered as soon as the stream has stored it.
- Slow: the paper's gated vacationing server. It sleeps a time between pulls (exponential, mean
  `pull_interval`), then takes every message the stream holds at that instant and reads them one by
  one, each taking an exponential time (mean `pull_time`; the paper's 25 messages/s is 40 ms).
  A message stays in the stream, holding its room, until read and acknowledged (work-queue
  retention), so a slow subscriber fills the stream and the broker pushes back on the publisher.

One trace row per delivered message: send_time is the request's arrival at the publisher, so the
latency is the paper's end to end (request arrival to delivery).

    python -m testbed.systems.autotune.subscriber --node sub1 --nats nats://IP:4222 --variants JSON \
        --buffer 1000 --pull-interval 0 --pull-time 0 --trace-dir DIR --run-id ID
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
from pathlib import Path

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from testbed.systems.autotune.publisher import ARRIVAL_HEADER
from testbed.systems.pubsub.client import TraceWriter
from testbed.systems.pubsub.clienthealth import ClientHealth

CONSUMER = "sub"
FAST_BATCH = 1000  # messages per pull request: more than one brings in its life (35/s for 2 s at most)
FAST_EXPIRES_S = 2.0


def stream_name(variant: str) -> str:
    return f"AT_{variant}"


def subject(variant: str) -> str:
    return f"at.{variant}"


def _status(msg) -> str | None:
    """A pull request's end (404 no messages, 408 expired, 409 ...) rather than a message."""
    return (msg.headers or {}).get("Status")


class VariantConsumer:
    """One variant's stream and its pull loop; every delivery becomes a trace row."""

    def __init__(self, nc, variant: str, row: dict, trace: Path, buffer: int, pull_interval: float, pull_time: float,
                 rng: random.Random):
        self.nc, self.variant, self.row, self.buffer = nc, variant, row, buffer
        self.pull_interval, self.pull_time, self.rng = pull_interval, pull_time, rng
        self.trace = TraceWriter(trace)
        self.inbox = f"_INBOX.autotune.{variant}"
        self.queue: asyncio.Queue = asyncio.Queue()
        self.seen: set[int] = set()
        self.delivered = self.duplicates = 0

    async def setup(self, js) -> None:
        await js.add_stream(StreamConfig(name=stream_name(self.variant), subjects=[subject(self.variant)],
                                         retention=RetentionPolicy.WORK_QUEUE, max_msgs=self.buffer,
                                         discard=DiscardPolicy.NEW, storage=StorageType.MEMORY))
        await js.add_consumer(stream_name(self.variant), ConsumerConfig(durable_name=CONSUMER, ack_policy=AckPolicy.EXPLICIT,
                                                                        max_ack_pending=self.buffer, ack_wait=60.0))
        await self.nc.subscribe(self.inbox, cb=self.queue.put)

    async def _pull(self, **request) -> None:
        await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream_name(self.variant)}.{CONSUMER}",
                              json.dumps(request).encode(), reply=self.inbox)

    async def run(self) -> None:
        if self.pull_interval > 0 or self.pull_time > 0:
            await self._gated()
        else:
            await self._fast()

    async def _fast(self) -> None:
        """A new pull request every half expiry, whatever the server said of the last ones: a request
        ends with a message batch, a status or nothing at all (nats-server 2.9 drops an expired one
        silently now and then, and a reconnect drops them all), so requests stand back to back
        without our reading their ends; one too many only expires."""
        refresher = asyncio.get_running_loop().create_task(self._keep_pulling())
        try:
            while True:
                msg = await self.queue.get()
                if _status(msg) is None:
                    await self._deliver(msg)
        finally:
            refresher.cancel()

    async def _keep_pulling(self) -> None:
        expires = int(FAST_EXPIRES_S * 1e9)
        while True:
            await self._pull(batch=FAST_BATCH, expires=expires)
            await asyncio.sleep(FAST_EXPIRES_S / 2)

    async def _gated(self) -> None:
        while True:
            if self.pull_interval > 0:
                await asyncio.sleep(self.rng.expovariate(1 / self.pull_interval))
            await self._pull(batch=self.buffer, no_wait=True)
            gate = []  # what the stream holds at the instant the subscriber comes back
            while len(gate) < self.buffer:  # a request filled to its batch ends without a status
                msg = await self.queue.get()
                if _status(msg) is not None:
                    break
                gate.append(msg)
            for msg in gate:
                if self.pull_time > 0:
                    await asyncio.sleep(self.rng.expovariate(1 / self.pull_time))
                await self._deliver(msg)

    async def _deliver(self, msg) -> None:
        received = time.time()
        headers = msg.headers or {}
        msg_id = headers.get("Nats-Msg-Id", "")
        seq = int(msg_id.rsplit(":", 1)[-1]) if ":" in msg_id else -1
        if seq in self.seen:
            self.duplicates += 1
        else:
            self.seen.add(seq)
            self.delivered += 1
            self.trace.write(**self.row, msg_id=msg_id, seq=seq, send_time=float(headers[ARRIVAL_HEADER]),
                             receive_time=received)
        await msg.ack()

    def summary(self) -> dict:
        return {"variant": self.variant, "delivered": self.delivered, "duplicates": self.duplicates}

    def close(self) -> None:
        self.trace.close()


async def _main(args) -> int:
    variants = json.loads(args.variants)
    nc = await nats.connect(args.nats, name=f"{args.node}-autotune", max_reconnect_attempts=-1)
    js = nc.jetstream()
    trace_dir = Path(args.trace_dir)
    trace_dir.mkdir(parents=True, exist_ok=True)
    consumers = []
    for i, v in enumerate(variants):
        row = {"run_id": args.run_id, "topic": v["topic"], "producer": v["producer"], "consumer": args.node,
               "broker": args.broker, "producer_site": v["producer_site"], "consumer_site": args.site}
        consumer = VariantConsumer(nc, v["name"], row, trace_dir / f"{v['topic']}.{args.node}.jsonl", args.buffer,
                                   args.pull_interval, args.pull_time, random.Random(args.seed * 1000 + i))
        await consumer.setup(js)
        consumers.append(consumer)
    health = ClientHealth(args.health)
    print(json.dumps({"ready": True, "streams": len(consumers)}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(c.run()) for c in consumers] + [asyncio.create_task(health.run())]
    await stop.wait()
    for task in tasks:
        task.cancel()
    health.close()
    for consumer in consumers:
        consumer.close()
    print(json.dumps({"node": args.node, "variants": [c.summary() for c in consumers]}), flush=True)
    await nc.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", required=True)
    parser.add_argument("--site", default="")
    parser.add_argument("--broker", required=True, help="the broker node's name (for the trace)")
    parser.add_argument("--nats", required=True)
    parser.add_argument("--variants", required=True,
                        help='JSON list of {"name", "topic", "producer", "producer_site"}')
    parser.add_argument("--buffer", type=int, default=1000, help="each stream's capacity, messages")
    parser.add_argument("--pull-interval", type=float, default=0.0, help="mean time between pulls, s (0: fast)")
    parser.add_argument("--pull-time", type=float, default=0.0, help="mean time to read one message, s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trace-dir", type=Path, required=True)
    parser.add_argument("--run-id", default="")
    parser.add_argument("--health", type=Path, default=None)
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
