"""Workload processes that run inside client nodes, on the client library.

uav: one process per swarm node (paper 5.1.1): the leader publishes `follow_leader-<swarm>`, which
every follower subscribes to; every follower publishes `sensor_data-<swarm>`, which the leader
subscribes to; each UAV at the scenario's rate and message size. The swarm's coordinate comes from
its zone's NC proxy. One trace file per subscriber.

mmog: one process per game-server node (paper 5.1.2, 5.8.2): avatar a's topic `avatar-<a>` is
published (producer `a<a>`) by the game server serving a's client; every game server subscribes to
the topics of the avatars in the groups of the avatars it serves (its area of interest), except its
own, and unsubscribes/subscribes as the plan's group changes happen (times since the common start,
which the experiment writes to --start-file once every game server is ready). Game servers are
static: their coordinate comes from their own Serf agent. One trace file per (server, avatar topic).

    python -m testbed.systems.pubsub.workloads uav --node swarm1 --members 8 --rate 200 --size 1000 \
        --lookup nats://IP:4222 --trace-dir DIR --events FILE --run-id ID --site zone1
    python -m testbed.systems.pubsub.workloads mmog --node gs1 --plan PLAN.json --start-file FILE --rate 300 \
        --size 998 --lookup nats://IP:4222 --trace-dir DIR --events FILE --run-id ID --site nyc --coord serf
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import signal
import sys
import time
from pathlib import Path

from testbed.systems.pubsub.client import EventLog, Publisher, Subscriber, coordinate_source, run_precise
from testbed.systems.pubsub.clienthealth import ClientHealth


def uav_clients(args, events: EventLog, health: ClientHealth | None = None) -> tuple[list[Publisher], list[Subscriber]]:
    swarm, trace_dir = args.node, Path(args.trace_dir)
    common = {"lookup_url": args.lookup, "site": args.site, "run_id": args.run_id, "events": events,
              "coord": coordinate_source(args.coord, swarm), "nc_period": args.nc_period}
    leader, followers = f"{swarm}-u1", [f"{swarm}-u{i}" for i in range(2, args.members + 1)]
    follow, sensor = f"follow_leader-{swarm}", f"sensor_data-{swarm}"
    publishers = [Publisher(follow, leader, args.rate, args.size, precise_s=0.0, health=health, **common)]
    publishers += [Publisher(sensor, f, args.rate, args.size, precise_s=0.0, health=health, **common)
                   for f in followers]
    subscribers = [Subscriber(follow, f, trace=trace_dir / f"{follow}.{f}.jsonl", keep_latencies=False, **common)
                   for f in followers]
    subscribers.append(Subscriber(sensor, leader, trace=trace_dir / f"{sensor}.{leader}.jsonl", keep_latencies=False,
                                  **common))
    return publishers, subscribers


async def _main(args) -> int:
    Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
    events = EventLog(args.events)
    health = ClientHealth(args.health)
    publishers, subscribers = uav_clients(args, events, health)
    for client in subscribers + publishers:  # subscribers first: no message is sent before anyone listens
        await client.start()
    print(json.dumps({"ready": True, "publishers": len(publishers), "subscribers": len(subscribers)}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    start = time.time() + 0.5
    gc.freeze()  # what start-up allocated is never garbage: keep it out of every later collection
    work = [asyncio.create_task(p.run(duration=args.duration, start=start + phase(i, len(publishers), args.rate)))
            for i, p in enumerate(publishers)]
    waiter, probe = asyncio.create_task(stop.wait()), asyncio.create_task(health.run())
    await asyncio.wait({*work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    for task in [*work, waiter, probe]:
        task.cancel()
    health.close()
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


# -- mmog ------------------------------------------------------------------------------------------
def mmog_plan(servers: list[str], groups: list[int], changes: list) -> dict:
    """The MMOG run's plan, shared by every game server's process: which server serves each avatar
    (round-robin over the game-server nodes in topology order), every avatar's initial group and the
    group changes (seconds since the workload's start). The harness draws `groups` and `changes`
    from the scenario's seed (`testbed.mobility.group_changes`) and writes the plan to a file."""
    return {"servers": list(servers), "serving": [servers[a % len(servers)] for a in range(len(groups))],
            "groups": groups, "changes": [[c.time, c.avatar, c.from_group, c.to_group] for c in changes]}


def area_of_interest(server: str, serving: list[str], groups: list[int]) -> set[int]:
    """Avatars whose topics `server` subscribes to: every avatar in a group of one of the avatars it
    serves, except its own avatars."""
    own = {a for a, s in enumerate(serving) if s == server}
    wanted = {groups[a] for a in own}
    return {a for a, g in enumerate(groups) if g in wanted and a not in own}


def avatar_topic(avatar: int) -> str:
    return f"avatar-{avatar}"


def avatar_name(avatar: int) -> str:
    """The producer name of an avatar's updates (what Fig. 9's lines are labelled with)."""
    return f"a{avatar}"


def phase(index: int, count: int, rate: float) -> float:
    """Seconds by which publisher `index` of `count` sharing a process starts after the common start:
    spread evenly over one period, as independent devices would be, so the process does not have all
    of its messages due at the same instant (a herd that made the last of 8 publishers late by the
    cost of the 7 sends before it)."""
    return (index % count) / (count * rate) if count > 0 and rate > 0 else 0.0


def _due_between(start: float, rate: float, low: float, high: float) -> int:
    """How many of the messages due at start + k/rate (k >= 0) fall in [low, high)."""
    first = max(0, math.ceil((low - start) * rate - 1e-9))
    last = max(0, math.ceil((high - start) * rate - 1e-9))
    return max(0, last - first)


class GameServer:
    """One game server: publishes its avatars' topics, subscribes to its area of interest, and
    follows the group changes by unsubscribing and subscribing."""

    def __init__(self, args, events: EventLog, plan: dict, health: ClientHealth | None = None):
        self.args, self.events, self.plan = args, events, plan
        self.node, self.trace_dir = args.node, Path(args.trace_dir)
        self.common = {"lookup_url": args.lookup, "site": args.site, "run_id": args.run_id, "events": events,
                       "coord": coordinate_source(args.coord, self.node), "nc_period": args.nc_period}
        self.groups = list(plan["groups"])
        self.own = [a for a, s in enumerate(plan["serving"]) if s == self.node]
        self.publishers = [Publisher(avatar_topic(a), avatar_name(a), args.rate, args.size, precise_s=0.0,
                                     health=health, **self.common) for a in self.own]
        self.subscribers: dict[int, Subscriber] = {}
        self.opened: dict[int, float] = {}  # avatar -> when its current subscription was ready
        self.windows: list[tuple[int, float, float]] = []  # closed subscriptions (avatar, ready, closed)
        self.received_closed = 0
        self.start = None

    async def subscribe(self, avatar: int) -> None:
        topic = avatar_topic(avatar)
        sub = Subscriber(topic, self.node, trace=self.trace_dir / f"{topic}.{self.node}.jsonl", keep_latencies=False,
                         **self.common)
        self.subscribers[avatar] = sub
        await sub.start()
        self.opened[avatar] = time.time()

    async def unsubscribe(self, avatar: int) -> None:
        sub = self.subscribers.pop(avatar)
        ready = self.opened.pop(avatar, None)
        await sub.close()
        if ready is not None:
            self.windows.append((avatar, ready, time.time()))
        self.received_closed += sub.received

    async def follow_groups(self) -> None:
        """Apply the group changes at their times (relative to the common start)."""
        for at, avatar, old, new in self.plan["changes"]:
            delay = self.start + at - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.groups[avatar] = new
            if avatar in self.own:
                self.events.add("group_change", avatar=avatar, server=self.node, from_group=old, to_group=new,
                                planned_at_s=at)
            wanted = area_of_interest(self.node, self.plan["serving"], self.groups)
            current = set(self.subscribers)
            added, removed = sorted(wanted - current), sorted(current - wanted)
            if not added and not removed:
                continue
            self.events.add("aoi_change", client=self.node, avatar=avatar, planned_at_s=at,
                            subscribed=[avatar_topic(a) for a in added], unsubscribed=[avatar_topic(a) for a in removed])
            await asyncio.gather(*(self.unsubscribe(a) for a in removed), *(self.subscribe(a) for a in added))

    def phase(self, avatar: int) -> float:
        """Avatar `avatar`'s publisher's offset from the common start (`phase` among its server's avatars)."""
        server = self.plan["serving"][avatar]
        mine = [a for a, s in enumerate(self.plan["serving"]) if s == server]
        return phase(mine.index(avatar), len(mine), self.args.rate)

    def expected(self, stopped: float) -> int:
        windows = self.windows + [(avatar, ready, stopped) for avatar, ready in self.opened.items()]
        return sum(_due_between(self.start + self.phase(avatar), self.args.rate, max(low, self.start), high)
                   for avatar, low, high in windows)


async def _wait_start(path: Path, stop: asyncio.Event, timeout: float = 300.0) -> float | None:
    """The common start time (epoch s) the experiment writes once every game server is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set():
        try:
            return float(path.read_text().strip())
        except (OSError, ValueError):
            await asyncio.sleep(0.05)
    return None


async def _main_mmog(args) -> int:
    Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
    events = EventLog(args.events)
    plan = json.loads(Path(args.plan).read_text())
    health = ClientHealth(args.health)
    server = GameServer(args, events, plan, health)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    for avatar in sorted(area_of_interest(args.node, plan["serving"], server.groups)):
        await server.subscribe(avatar)
    for publisher in server.publishers:
        await publisher.start()
    print(json.dumps({"ready": True, "avatars": server.own, "publishers": len(server.publishers),
                      "subscribers": len(server.subscribers)}), flush=True)
    if args.start_file:
        server.start = await _wait_start(Path(args.start_file), stop)
        if server.start is None:
            server.start = time.time() + 0.5
    else:
        server.start = time.time() + 0.5
    gc.freeze()
    work = [asyncio.create_task(p.run(duration=args.duration, start=server.start + server.phase(a)))
            for a, p in zip(server.own, server.publishers)]
    work.append(asyncio.create_task(server.follow_groups()))
    waiter, probe = asyncio.create_task(stop.wait()), asyncio.create_task(health.run())
    publishing = [t for t in work[:-1]] or [waiter]
    await asyncio.wait({*publishing, waiter}, return_when=asyncio.FIRST_COMPLETED)
    stopped = time.time()
    for task in [*work, waiter, probe]:
        task.cancel()
    health.close()
    await asyncio.sleep(0.5)  # messages in flight reach the subscribers
    received = server.received_closed + sum(s.received for s in server.subscribers.values())
    summary = {"node": args.node, "avatars": server.own, "sent": sum(p.sent for p in server.publishers),
               "expected": server.expected(stopped), "received": received,
               "subscriptions": len(server.windows) + len(server.subscribers)}
    for client in server.publishers + list(server.subscribers.values()):
        await client.close()
    print(json.dumps(summary), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["uav", "mmog"])
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
    parser.add_argument("--health", type=Path, help="per-second publisher lateness and loop lag, JSON lines")
    parser.add_argument("--plan", type=Path, help="mmog: the plan (servers, serving, groups, changes) as JSON")
    parser.add_argument("--start-file", type=Path, help="mmog: wait for the common start time (epoch s) in this file")
    args = parser.parse_args(argv)
    if args.kind == "mmog":
        if not args.plan:
            parser.error("mmog needs --plan")
        return run_precise(_main_mmog(args))
    return run_precise(_main(args))


if __name__ == "__main__":
    sys.exit(main())
