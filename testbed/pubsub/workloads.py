"""Workload processes that run inside client nodes, on the client library.

uav: one process per swarm node (paper 5.1.1): the leader publishes `follow_leader-<swarm>`, which
every follower subscribes to; every follower publishes `sensor_data-<swarm>`, which the leader
subscribes to; each UAV at the scenario's rate and message size. The swarm's coordinate comes from
its zone's NC proxy. One trace file per subscriber.

    python -m testbed.pubsub.workloads uav --node swarm1 --members 8 --rate 200 --size 1000 \
        --lookup nats://IP:4222 --trace-dir DIR --events FILE --run-id ID --site zone1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from testbed.pubsub.client import EventLog, Publisher, Subscriber, coordinate_source


def uav_clients(args, events: EventLog) -> tuple[list[Publisher], list[Subscriber]]:
    swarm, trace_dir = args.node, Path(args.trace_dir)
    common = {"lookup_url": args.lookup, "site": args.site, "run_id": args.run_id, "events": events,
              "coord": coordinate_source(args.coord, swarm), "nc_period": args.nc_period}
    leader, followers = f"{swarm}-u1", [f"{swarm}-u{i}" for i in range(2, args.members + 1)]
    follow, sensor = f"follow_leader-{swarm}", f"sensor_data-{swarm}"
    publishers = [Publisher(follow, leader, args.rate, args.size, precise_s=0.0, **common)]
    publishers += [Publisher(sensor, f, args.rate, args.size, precise_s=0.0, **common) for f in followers]
    subscribers = [Subscriber(follow, f, trace=trace_dir / f"{follow}.{f}.jsonl", keep_latencies=False, **common)
                   for f in followers]
    subscribers.append(Subscriber(sensor, leader, trace=trace_dir / f"{sensor}.{leader}.jsonl", keep_latencies=False,
                                  **common))
    return publishers, subscribers


async def _main(args) -> int:
    Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
    events = EventLog(args.events)
    publishers, subscribers = uav_clients(args, events)
    for client in subscribers + publishers:  # subscribers first: no message is sent before anyone listens
        await client.start()
    print(json.dumps({"ready": True, "publishers": len(publishers), "subscribers": len(subscribers)}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    start = time.time() + 0.5
    work = [asyncio.create_task(p.run(duration=args.duration, start=start)) for p in publishers]
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({*work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    for task in [*work, waiter]:
        task.cancel()
    await asyncio.sleep(0.5)  # messages in flight reach the subscribers
    readers = {}
    for s in subscribers:
        readers[s.topic] = readers.get(s.topic, 0) + 1
    summary = {"node": args.node, "sent": sum(p.sent for p in publishers),
               "expected": sum(p.sent * readers.get(p.topic, 0) for p in publishers),
               "received": sum(s.received for s in subscribers)}
    for client in publishers + subscribers:
        await client.close()
    print(json.dumps(summary), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["uav"])
    parser.add_argument("--node", required=True)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--lookup", required=True)
    parser.add_argument("--trace-dir", required=True)
    parser.add_argument("--events", type=Path)
    parser.add_argument("--run-id", default="")
    parser.add_argument("--site", default="")
    parser.add_argument("--coord", default="proxy")
    parser.add_argument("--nc-period", type=float, default=5.0)
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
