"""The back-end data cluster (BAD Pub/Sub, Nguyen et al., 3.1), in the cloud node: every channel
executes at its period and yields, for each of its BE subscriptions, that subscription's result records,
published on the hub (`bad.r.<channel>.<p>`); brokers holding the subscription pull them across their
leaf connection. Each record carries its sequence number and its scheduled time (open loop, as the
pub/sub publishers: lateness counts in the latency), so subscribers measure end-to-end latency.

It also tells the coordinator every second what each BE subscription yields now (lambda_k, bytes/s,
surges included): the back end knows its result volumes, brokers measure their own loads.

    python -m testbed.systems.bad.cluster --nats nats://10.0.0.1:4222 --plan plan.json --start 1700000000.0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from testbed.systems.bad.plan import results_at
from testbed.systems.pubsub.client import connect_nats, run_precise
from testbed.systems.pubsub.clienthealth import ClientHealth

RATES = "bad.bcs.rates"
REPORT_S = 1.0


def record(seq: int, due: float, size: int) -> bytes:
    """One result record: `<seq> <scheduled time> ` padded to the record size."""
    head = f"{seq} {due:.6f} ".encode()
    return head + b"r" * max(0, size - len(head))


def parse_record(data: bytes) -> tuple[int, float]:
    seq, due, _ = data.split(b" ", 2)
    return int(seq), float(due)


class Cluster:
    def __init__(self, plan: dict, nc, start: float, health: ClientHealth):
        self.plan, self.nc, self.start, self.health = plan, nc, start, health
        self.seq = [0] * len(plan["be"])
        self.published = 0

    def rates(self, t: float) -> list[float]:
        size = self.plan["message_size"]
        return [results_at(self.plan, k, t) * size / be["period"] for k, be in enumerate(self.plan["be"])]

    async def channel(self, name: str, period: float, phase: float) -> None:
        """Execute channel `name` every `period` from `start + phase`: each BE subscription's records
        at its offset into the execution (the channel's runtime spread over its subscriptions)."""
        members = [k for k, be in enumerate(self.plan["be"]) if be["channel"] == name]
        size = self.plan["message_size"]
        n = 0
        while True:
            execution = self.start + phase + n * period
            for k in members:
                due = execution + self.plan["be"][k].get("offset", 0.0)
                await asyncio.sleep(max(0.0, due - time.time()))
                for _ in range(results_at(self.plan, k, execution - self.start)):
                    self.seq[k] += 1
                    await self.nc.publish(self.plan["be"][k]["subject"], record(self.seq[k], due, size))
                    self.health.published(time.time() - due, time.time())
                    self.published += 1
            n += 1

    async def report(self) -> None:
        while True:
            t = max(0.0, time.time() - self.start)
            await self.nc.publish(RATES, json.dumps({"time": time.time(), "rates": self.rates(t)}).encode())
            await asyncio.sleep(REPORT_S)


async def _main(args) -> int:
    plan = json.loads(Path(args.plan).read_text())
    nc = await connect_nats(args.nats, name="bad-cluster")
    health = ClientHealth(args.health)
    cluster = Cluster(plan, nc, args.start, health)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    # Channels start spread over their periods (c of C at c/C of its period), as channels created at
    # different times run: executions that all coincide would make one burst of every channel's results.
    count = len(plan["channels"])
    tasks = [asyncio.create_task(cluster.channel(c["name"], c["period"], i / count * c["period"]))
             for i, c in enumerate(plan["channels"])]
    tasks += [asyncio.create_task(cluster.report()), asyncio.create_task(health.run())]
    await stop.wait()
    for task in tasks:
        task.cancel()
    health.close()
    await nc.drain()
    print(json.dumps({"published": cluster.published}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="BAD's back end: channels executing at their periods")
    parser.add_argument("--nats", required=True, help="the hub's nats://ip:4222")
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--start", required=True, type=float, help="epoch time of every channel's first execution")
    parser.add_argument("--health", type=Path, help="per-second lateness, JSON lines (the saturation guard)")
    return run_precise(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
