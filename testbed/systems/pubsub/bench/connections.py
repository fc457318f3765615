"""`make bench-connections`: what the compiled engine spends on many connections at a low rate, MMOG's
shape on loopback (one publisher per avatar topic, each subscriber on a connection of its own, as a
client host holds them), so the fixed cost of connections is measured apart from the emulated network.
Engine binaries given with `--binary` alternate run by run (A/B on one machine, one sitting); the CPU
is the engine process's own (its threads' schedstat) over a window after start-up, and the machine's steal and
outside load over that window are kept beside it, as the harness's guard would."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from testbed import procs
from testbed.bench.client import local_nats_server
from testbed.systems.pubsub.client import EventLog
from testbed.systems.pubsub.engine import Engine, EnginePublisher, EngineSubscriber, ensure_built

OUT = Path("results/bench/connections.json")


def sample(engine_pid: int, server_pid: int) -> tuple:
    """(machine ticks, engine CPU s, what this benchmark's own processes used, s); the engine's from its
    threads' schedstat (ns: a short window's CPU in 10 ms ticks would round to nothing)."""
    engine_s = procs.thread_cpu_ns(engine_pid) / 1e9
    ours = engine_s + procs.thread_cpu_ns(server_pid) / 1e9 + procs.thread_cpu_ns("self") / 1e9
    return procs.machine_ticks(), engine_s, ours


async def one_run(binary: Path, url: str, server_pid: int, topics: int, subscribers: int, rate: float,
                  window: float) -> dict:
    """One engine with `topics` publishers at `rate` and `subscribers` (one connection each) spread
    over the topics; its CPU over `window` seconds once every client is attached."""
    engine = await Engine(binary=binary).start()
    common = {"owner": ("b1", url), "site": "z", "run_id": "bench", "events": EventLog()}
    subs = [EngineSubscriber(f"t{i % topics}", f"s{i}", trace=None, engine=engine, **common) for i in range(subscribers)]
    pubs = [EnginePublisher(f"t{i}", f"p{i}", rate, 998, engine=engine, **common) for i in range(topics)]
    for client in subs + pubs:
        await client.start()
    start = time.time() + 1.0
    work = [asyncio.create_task(p.run(duration=window + 8.0, start=start)) for p in pubs]
    await asyncio.sleep(5.0)  # past the first messages and every connection's first ping
    t0, before = time.monotonic(), sample(engine.process.pid, server_pid)
    await asyncio.sleep(window)
    t1, after = time.monotonic(), sample(engine.process.pid, server_pid)
    for task in work:
        task.cancel()
    await asyncio.gather(*work, return_exceptions=True)  # each publisher halts while its engine still runs
    await engine.stop()
    elapsed, deliveries = t1 - t0, rate * subscribers  # every subscriber gets its topic's `rate`
    engine_s = after[1] - before[1]
    ticks = [a - b for a, b in zip(after[0], before[0])]  # total, idle, steal, irq
    busy_s = (ticks[0] - ticks[1] - ticks[2]) / procs.TICKS
    return {"binary": str(binary), "engine_cpu_ms_per_s": round(1000 * engine_s / elapsed, 1),
            "cpu_us_per_delivery": round(1e6 * engine_s / elapsed / deliveries, 1),
            "connections": topics + subscribers, "deliveries_per_s": deliveries,
            "steal_ms_per_s": round(1000 * ticks[2] / procs.TICKS / elapsed, 1),
            "outside_cores": round(max(0.0, busy_s - (after[2] - before[2])) / elapsed, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, action="append",
                        help="an engine binary (repeatable: they alternate); default the tree's build")
    parser.add_argument("--topics", type=int, default=64, help="publishers, one topic each (MMOG: 64 avatars)")
    parser.add_argument("--subscribers", type=int, default=1152, help="subscriber connections (MMOG: ~1,200)")
    parser.add_argument("--rate", type=float, default=3.0, help="messages/s per publisher")
    parser.add_argument("--window", type=float, default=15.0, help="seconds measured per run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    binaries = args.binary or [ensure_built()]
    process, url = local_nats_server()
    runs = []
    try:
        for round_ in range(args.repeat):
            for binary in binaries:
                found = asyncio.run(one_run(binary, url, process.pid, args.topics, args.subscribers, args.rate,
                                            args.window))
                runs.append(found)
                print(f"round {round_ + 1}/{args.repeat} {binary}: engine {found['engine_cpu_ms_per_s']} ms CPU/s, "
                      f"{found['cpu_us_per_delivery']} us per delivery ({found['connections']} connections; steal "
                      f"{found['steal_ms_per_s']} ms/s, {found['outside_cores']} cores outside)", flush=True)
    finally:
        process.terminate()
        process.wait(10)
    summary = {str(b): statistics.median(r["engine_cpu_ms_per_s"] for r in runs if r["binary"] == str(b)) for b in binaries}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs,
                                    "median_engine_cpu_ms_per_s": summary}, indent=1))
    print(f"median engine CPU (ms/s): {summary} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
