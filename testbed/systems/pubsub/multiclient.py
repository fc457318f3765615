"""Many publishers (one per topic) in one process: the clients of the migration microbenchmark
(paper 5.7: one client per topic, up to 128 topics), sharing one event loop; with `--client-engine
compiled` their data plane is one compiled engine (testbed.systems.pubsub.engine), the control plane
(lookups, redirects, the migration workflows) this loop.

    python -m testbed.systems.pubsub.multiclient --topics 32 --prefix mig --lookup nats://IP:4222 --rate 20 --events F
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from testbed.systems.pubsub.client import EventLog, run_precise
from testbed.systems.pubsub.workloads import client_classes, data_plane


async def _main(args) -> int:
    events = EventLog(args.events)
    engine, health = await data_plane(args)  # how late the publishers send (and the loop's lag), per second
    publisher = client_classes(engine, health)[0]
    publishers = [publisher(f"{args.prefix}{i}", f"{args.name}-{i}", args.rate, args.size, precise_s=0.0,
                            lookup_url=args.lookup, site=args.site, run_id=args.run_id, events=events)
                  for i in range(1, args.topics + 1)]
    await asyncio.gather(*(publisher.start() for publisher in publishers))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Staggered over one message interval: started together, the publishers' messages would all fall
    # due at once, and each burst blocked the shared loop (and the next control message) for ~n sends.
    start = time.time()
    work = [asyncio.create_task(p.run(duration=args.duration, start=start + i / (args.rate * len(publishers))))
            for i, p in enumerate(publishers)]
    work.append(asyncio.create_task(health.run()))
    await asyncio.sleep(0.2)  # "ready" means publishing: downtime is measured from here on
    print(json.dumps({"ready": True, "topics": len(publishers), "time": time.time()}), flush=True)
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({*work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    for task in [*work, waiter]:
        task.cancel()
    health.close()
    for p in publishers:
        await p.settle()  # the engine's counts
    for p in publishers:
        await p.close()
    if engine is not None:
        await engine.stop()
    print(json.dumps({"done": True, "sent": sum(p.sent for p in publishers)}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, required=True)
    parser.add_argument("--prefix", default="mig")
    parser.add_argument("--name", default="mc")
    parser.add_argument("--lookup", required=True)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--site", default="")
    parser.add_argument("--run-id", default="")
    parser.add_argument("--events", type=Path)
    parser.add_argument("--health", type=Path, help="per-second publisher lateness and loop lag, JSON lines")
    parser.add_argument("--client-engine", choices=("python", "compiled"), default="python",
                        help="the publishers' data plane: nats-py in this loop, or one compiled engine")
    return run_precise(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
