"""The message tracker beside a broker's nats-server (Jun and Astley's message tracking): it sees every
message the broker carries and every subscriber that attaches or leaves, and keeps the broker's tracking
histories (testbed.tracking.recorder) in <run>/tracking/<broker>/.

nats-server has no plug-in point, so the tracker is a subscriber of the server it tracks (`>`, one
subscription: NATS keeps one connection's messages in order, so an attachment is always seen before
any message delivered to that subscriber). It is off the data path: nothing waits for it. What it
costs the data path is measured (`make bench-tracking`): the server's one more copy of each message,
and the CPU the tracker takes from a 2-core machine. A tracker that fell behind (nats-server cut it
off as a slow consumer) says so in meta.json: its histories then miss messages.

    python -m testbed.systems.pubsub.tracker --node bzone1 --nats nats://10.1.0.2:4222 --dir RUN/tracking/bzone1 \
        --config '{"strategy": "bloom", ...}'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import resource
import signal
import sys
import time
from pathlib import Path

import nats

from testbed.systems.pubsub.broker import FWD_HEADER
from testbed.systems.pubsub.tracking_client import TRACK_ATTACH, TRACK_DETACH, TRACK_SKEW, TRACK_TIME
from testbed.tracking.config import TrackingConfig
from testbed.tracking.msgid import node_id
from testbed.tracking.recorder import Recorder
from testbed.tracking.store import StoreWriter

TICK_S = 0.1  # how often expired buffers are looked for and stored buffers written
HEAD_BYTES = 512  # the tracking id is in a message's first line, within this many bytes


class Tracker:
    def __init__(self, args):
        self.name = args.node
        self.config = TrackingConfig.from_json(json.loads(args.config))
        self.writer = StoreWriter(Path(args.dir), {"broker": self.name, "id": node_id(self.name),
                                                   "config": self.config.to_json(), "started": time.time()},
                                  sync=self.config.sync)
        self.recorder = Recorder(self.name, self.config,
                                 on_history=lambda code, entry: self.writer.line("histories", {"code": code, **entry}))
        self.url = args.nats
        self.publishers: dict[bytes, str] = {}
        self.untracked = self.slow_consumer = self.disconnects = 0
        self.stopping = False
        self.nc = None

    async def _error(self, error: Exception) -> None:
        if isinstance(error, nats.errors.SlowConsumerError):
            self.slow_consumer += 1
        else:
            logging.getLogger("tracker").warning("nats: %s: %s", type(error).__name__, error)

    async def _disconnected(self) -> None:
        if not self.stopping:  # a lost connection: what the server carried meanwhile was not seen
            self.disconnects += 1

    async def on_msg(self, msg) -> None:
        subject = msg.subject
        if subject.startswith("t."):
            data = msg.data
            at = data.find(b'"r":"', 0, HEAD_BYTES)
            if at < 0:
                self.untracked += 1
                return
            raw = bytes.fromhex(data[at + 5:at + 37].decode())
            publisher = raw[:4]
            if publisher not in self.publishers:
                self._learn_name(publisher, data)
            forwarded = bool(msg.headers) and FWD_HEADER in msg.headers
            correction = self.recorder.message(subject[2:], raw, time.time(), forwarded)
            if correction is not None and self.publishers.get(publisher):
                await self.nc.publish(f"{TRACK_SKEW}.{self.publishers[publisher]}",
                                      json.dumps({"adjust_ms": correction}).encode())
        elif subject == TRACK_TIME and msg.reply:  # a publisher initialising its skew adjustment
            await self.nc.publish(msg.reply, json.dumps({"t_ms": time.time() * 1000}).encode())
        elif subject in (TRACK_ATTACH, TRACK_DETACH):
            try:
                body = json.loads(msg.data)
                subscriber, topic = str(body["subscriber"]), str(body["topic"])
            except (ValueError, KeyError, TypeError):
                return
            attach = subject == TRACK_ATTACH
            (self.recorder.attach if attach else self.recorder.detach)(subscriber, topic)
            self.writer.line("attach", {"t_ms": round(time.time() * 1000), "op": "attach" if attach else "detach",
                                        "subscriber": subscriber, "topic": topic})

    def _learn_name(self, publisher: bytes, data: bytes) -> None:
        try:
            name = str(json.loads(data.split(b"\n", 1)[0])["p"])
        except (ValueError, KeyError, TypeError):
            name = ""
        self.publishers[publisher] = name
        self.writer.line("names", {"id": int.from_bytes(publisher, "big"), "name": name})

    async def _write(self) -> None:
        stored = self.recorder.take()
        if stored:
            await asyncio.to_thread(self.writer.write, stored)

    async def run(self, stop: asyncio.Event) -> None:
        self.nc = await nats.connect(self.url, name=f"tracker-{self.name}", error_cb=self._error,
                                     disconnected_cb=self._disconnected, max_reconnect_attempts=-1,
                                     reconnect_time_wait=0.2)
        await self.nc.subscribe(">", cb=self.on_msg, pending_msgs_limit=1 << 20, pending_bytes_limit=1 << 30)
        await self.nc.flush()
        print("ready", flush=True)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), TICK_S)
            except asyncio.TimeoutError:
                pass
            self.recorder.tick(time.time())
            await self._write()
        self.stopping = True
        await self.nc.drain()
        self.recorder.close()
        await self._write()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        r = self.recorder
        self.writer.close(stopped=time.time(), messages=r.messages, published=r.published, events=r.events, corrections=r.corrections,
                          histories=len(r.codes), untracked=self.untracked, slow_consumer=self.slow_consumer,
                          disconnects=self.disconnects, complete=self.slow_consumer == 0 and self.disconnects == 0,
                          cpu_s=usage.ru_utime + usage.ru_stime, max_rss_kb=usage.ru_maxrss)


async def _main(args) -> int:
    tracker = Tracker(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await tracker.run(stop)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", required=True, help="the broker's name")
    parser.add_argument("--nats", required=True, help="the broker's nats://ip:4222")
    parser.add_argument("--dir", required=True, help="where its files go (<run>/tracking/<broker>)")
    parser.add_argument("--config", required=True, help="TrackingConfig as JSON")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
