"""An edge broker's load F_j (BAD Pub/Sub, eq. 5) as the broker measures it, reported to the BCS.

nats-server counts the payload bytes it receives (`in_bytes`: here the results pulled from the hub
across the leaf connection, I_j) and sends (`out_bytes`: the results pushed to subscribers, O_j);
over a period their growth is F_j = I_j + O_j per second, with no Python step per message. The
report also names the window it covers, so the BCS can tell a measurement taken before a migration
from one taken after.

    python -m testbed.systems.bad.brokerload --node z1 --nats nats://10.0.0.2:4222 --monitor http://10.0.0.2:8222
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
import urllib.request

from testbed.systems.pubsub.client import connect_nats

LOADS = "bad.bcs.load"


def varz(monitor: str) -> dict:
    with urllib.request.urlopen(f"{monitor}/varz", timeout=2.0) as answer:
        return json.load(answer)


def load_between(before: dict, after: dict) -> dict:
    """F_j and its two parts, bytes/s, between two varz samples (each with its "time")."""
    span = max(1e-6, after["time"] - before["time"])
    pulled = (after["in_bytes"] - before["in_bytes"]) / span
    pushed = (after["out_bytes"] - before["out_bytes"]) / span
    return {"in": pulled, "out": pushed, "F": pulled + pushed, "since": before["time"], "until": after["time"],
            "connections": after.get("connections", 0)}


async def _main(args) -> int:
    nc = await connect_nats(args.nats, name=f"bad-load-{args.node}")
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    before = None
    while not stop.is_set():
        try:
            after = {**await asyncio.to_thread(varz, args.monitor), "time": time.time()}
        except (OSError, ValueError) as error:  # a restarting nats-server: the next window is longer
            print(f"varz: {error}", file=sys.stderr, flush=True)
            after = None
        if before and after:
            await nc.publish(LOADS, json.dumps({"broker": args.node, **load_between(before, after)}).encode())
        before = after or before
        try:
            await asyncio.wait_for(stop.wait(), args.period)
        except asyncio.TimeoutError:
            pass
    await nc.drain()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="an edge broker's load F_j, from its nats-server, to the BCS")
    parser.add_argument("--node", required=True)
    parser.add_argument("--nats", required=True, help="this broker's nats://ip:4222")
    parser.add_argument("--monitor", required=True, help="this broker's nats-server monitoring http://ip:8222")
    parser.add_argument("--period", type=float, default=5.0)
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
