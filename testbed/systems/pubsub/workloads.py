"""Workload processes that run inside client nodes, on the client library.

uav: one process per swarm node (paper 5.1.1): the leader publishes `follow_leader-<swarm>`, which
every follower subscribes to; every follower publishes `sensor_data-<swarm>`, which the leader
subscribes to; each UAV at the scenario's rate and message size. The swarm's coordinate comes from
its zone's NC proxy. One trace file per subscriber.

mmog: one process per player node and per game-server node (paper 5.1.2, 5.8.2). Player p is a
mobile client attached to an edge site of its city: it publishes its avatar's topic `avatar-<p>`
and subscribes to the topics of the other avatars of its group (its area of interest), moving those
subscriptions at every group change of the plan (times since the common start, which the experiment
writes to --start-file once every client is ready); its coordinate comes from its edge site's NC
proxy (--proxy-ip). A game server is a static client with its own Serf agent that subscribes to the
topics of its edge site's players. One trace file per (subscriber, avatar topic).

hotspot: one process per static client node, holding every publisher and subscriber the run's plan
(`hotspot_plan`, written by the harness) puts on the node: topics `hot-1..hot-N` with Zipf rates, a
share of them wholly at one hot site, and surge publishers that start mid-run. One trace
file per subscriber.

    python -m testbed.systems.pubsub.workloads uav --node swarm1 --members 8 --rate 200 --size 1000 \
        --lookup nats://IP:4222 --trace-dir DIR --events FILE --run-id ID --site zone1
    python -m testbed.systems.pubsub.workloads mmog --node player3 --plan PLAN.json --start-file FILE --rate 300 \
        --size 998 --lookup nats://IP:4222 --trace-dir DIR --events FILE --run-id ID --site nyc --proxy-ip IP
    python -m testbed.systems.pubsub.workloads hotspot --node hc1 --plan PLAN.json --start-file FILE --rate 20 \
        --size 1000 --lookup nats://IP:4222 --trace-dir DIR --events FILE --run-id ID --site nyc
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import math
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from testbed.policies.topics import topic_class
from testbed.systems.pubsub.client import (EventLog, Publisher, Subscriber, coordinate_source, in_node, run_precise,
                                           shared_query)
from testbed.systems.pubsub.attach import AttachPlan, AttachWatch, first_broker
from testbed.systems.pubsub.clienthealth import ClientHealth
from testbed.systems.pubsub.durable import ACKS_DIR, parse_classes
from testbed.systems.pubsub.engine import Engine, EnginePublisher, EngineSubscriber
from testbed.systems.pubsub.durable_client import DurablePublishing, DurableSubscription, owes
from testbed.systems.pubsub.handover_watch import HandoverWatch
from testbed.policies.distance import DEFAULT_DISTANCE, DISTANCES, get_distance
from testbed.policies.handover import HandoverTrigger
from testbed.systems.pubsub.tracking_client import TrackedPublishing, TrackedSubscription

DRAIN_MIN_S, DRAIN_MAX_S = 3.0, 10.0  # the end of a run with durable topics (drain)
#: After the stop, a group change under way gets this long to complete. One whose subscription waits
#: for a lookup that no longer comes (an overloaded run lost its control plane: ZooKeeper sessions
#: expired, the lookup service gone) retried forever and held its process, and the run, for minutes.
CHANGE_GRACE_S = 10.0


def client_features(args, topic: str, client: str, producer: bool = False) -> dict:
    """A client's topic features (`feature.ClientFeature`), as this process was started: message
    tracking for every client when tracking is on; durable topics for a client of a durable class,
    whose producer records its acknowledgements in `<run>/acks/`."""
    features = []
    if topic_class(topic) in parse_classes(args.durable):
        if producer:
            acks = Path(args.trace_dir).parent / ACKS_DIR
            acks.mkdir(parents=True, exist_ok=True)
            features.append(DurablePublishing(acks / f"{topic}.{client}.csv"))
        else:
            features.append(DurableSubscription())
    if args.track:
        features.append(TrackedPublishing() if producer else TrackedSubscription())
    return {"features": features}


def durable_counts(publishers: list[Publisher], subscribers: list[Subscriber]) -> dict:
    """A process's durable-topic counters for its summary line (none without durable topics)."""
    producing = [f for f in (p.feature(DurablePublishing) for p in publishers) if f]
    if not producing and not any(s.feature(DurableSubscription) for s in subscribers):
        return {}
    return {"acked": sum(f.acked for f in producing), "unacked": sum(len(f.unacked) for f in producing),
            "resent": sum(f.resent for f in producing),
            "duplicates": sum(sum(st.duplicates for st in s.stats.values()) for s in subscribers)}


async def finish(publishers: list, subscribers: list) -> None:
    """Counts made final: the publishers' settled, the subscribers closed (an engine's subscriber
    settles once closed). A subscriber still open when its count is taken goes on receiving, from
    other processes' producers, into its trace: rows the count would not have."""
    for publisher in publishers:
        await publisher.settle()
    for subscriber in subscribers:
        await subscriber.close()


async def drain(publishers: list[Publisher], subscribers: list[Subscriber]) -> None:
    """The end of a process's work: messages in flight reach the subscribers. With durable topics
    that is every message acknowledged to a producer of this process reaching this process's
    subscribers of its topic (a redelivery after a move waits out the consumer's ack wait), at
    least `DRAIN_MIN_S` (for subscribers of other processes' producers) and at most `DRAIN_MAX_S`."""
    durable = [s for s in subscribers if s.feature(DurableSubscription)]
    if not durable:
        await asyncio.sleep(0.5)
        return
    began = time.monotonic()
    pairs = [(s, p) for s in durable for p in publishers if p.topic == s.topic and p.feature(DurablePublishing)]
    while time.monotonic() - began < DRAIN_MAX_S:
        if time.monotonic() - began >= DRAIN_MIN_S and not any(owes(s, p) for s, p in pairs):
            return
        await asyncio.sleep(0.1)


async def data_plane(args) -> tuple[Engine | None, ClientHealth]:
    """This process's engine (`--client-engine compiled`) and its health probe. With the engine, the
    per-message timing is the engine's and so is its health file; this process's loop carries only
    the control plane, and probing its lag would wake it 20 times a second: its probe writes nothing."""
    engine = await Engine(args.health).start() if args.client_engine == "compiled" else None
    return engine, ClientHealth(None if engine else args.health)


class NodeProcess:
    """What one node's workload runs on: its data plane (engine and health probe), the stop it waits
    for, and where its lines (ready, summary) go. A node's own process (`main`) has its own engine,
    stops on SIGTERM and prints; in a client host (`clienthost`: every client node of a machine in one
    process) the machine's engine, the node's stop and the host's output, tagged with the node."""

    def __init__(self, engine: Engine | None, health: ClientHealth, stop: asyncio.Event, say, own_engine: bool):
        self.engine, self.health, self.stop, self.say, self.own_engine = engine, health, stop, say, own_engine

    @classmethod
    async def standalone(cls, args) -> "NodeProcess":
        engine, health = await data_plane(args)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return cls(engine, health, stop, lambda line: print(json.dumps(line), flush=True), own_engine=True)

    async def close(self) -> None:
        if self.own_engine and self.engine is not None:
            await self.engine.stop()


def client_classes(engine: Engine | None, health: ClientHealth, netns: int | None = None):
    """(publisher, subscriber) constructors: the client library's, or its engine variants (`netns`:
    the node's pid, when one engine serves many nodes)."""
    if engine is None:
        return functools.partial(Publisher, health=health), Subscriber
    return (functools.partial(EnginePublisher, engine=engine, netns=netns),
            functools.partial(EngineSubscriber, engine=engine, netns=netns))


def uav_clients(args, events: EventLog, health: ClientHealth | None = None, engine: Engine | None = None,
                owner: tuple[str, str] | None = None) -> tuple[list[Publisher], list[Subscriber]]:
    """The swarm's clients; with `engine`, their data plane is the node's compiled engine; with
    `owner` (broker, address), they attach there without a lookup (`--attach`, testbed.systems.pubsub.attach)."""
    swarm, trace_dir = args.node, Path(args.trace_dir)
    common = {"lookup_url": None if owner else args.lookup, "owner": owner, "site": args.site, "run_id": args.run_id,
              "events": events, "coord": coordinate_source(args.coord, swarm, args.netns_pid),
              "nc_period": args.nc_period}
    pub, sub = client_classes(engine, health, args.netns_pid)
    leader, followers = f"{swarm}-u1", [f"{swarm}-u{i}" for i in range(2, args.members + 1)]
    follow, sensor = f"follow_leader-{swarm}", f"sensor_data-{swarm}"
    publishers = [pub(follow, leader, args.rate, args.size, precise_s=0.0, **common,
                      **client_features(args, follow, leader, producer=True))]
    publishers += [pub(sensor, f, args.rate, args.size, precise_s=0.0, **common,
                       **client_features(args, sensor, f, producer=True))
                   for f in followers]
    subscribers = [sub(follow, f, trace=trace_dir / f"{follow}.{f}.jsonl", keep_latencies=False, **common,
                       **client_features(args, follow, f))
                   for f in followers]
    subscribers.append(sub(sensor, leader, trace=trace_dir / f"{sensor}.{leader}.jsonl", keep_latencies=False,
                           **common, **client_features(args, sensor, leader)))
    return publishers, subscribers


async def run_uav(args, node: NodeProcess) -> int:
    Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
    events = EventLog(args.events)
    engine, health, stop = node.engine, node.health, node.stop
    plan = AttachPlan.read(args.attach) if args.attach else None
    owner = await first_broker(plan, args.site, args.coord == "proxy", args.netns_pid) if plan else None
    publishers, subscribers = uav_clients(args, events, health, engine, owner)
    for client in subscribers + publishers:  # subscribers first: no message is sent before anyone listens
        await client.start()
    follow = None  # without a lookup service, the swarm's clients follow it to its new zone's broker
    if plan is not None and args.coord == "proxy":
        follow = asyncio.create_task(AttachWatch(args.node, [*subscribers, *publishers], plan, args.site, events,
                                                 args.netns_pid).run())
    watch = None
    if args.handover.enabled:  # the swarm's clients report at once when it enters another zone
        watch = HandoverWatch(args.node, [*publishers, *subscribers], args.handover, get_distance(args.distance),
                              events)
        watch = asyncio.create_task(watch.run())
    node.say({"ready": True, "publishers": len(publishers), "subscribers": len(subscribers)})
    start = time.time() + 0.5
    gc.freeze()  # what start-up allocated is never garbage: keep it out of every later collection
    work = [asyncio.create_task(p.run(duration=args.duration, start=start + phase(i, len(publishers), args.rate)))
            for i, p in enumerate(publishers)]
    waiter, probe = asyncio.create_task(stop.wait()), asyncio.create_task(health.run())
    await asyncio.wait({*work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    for task in [*work, waiter, probe, *([watch] if watch else []), *([follow] if follow else [])]:
        task.cancel()
    health.close()
    await drain(publishers, subscribers)
    await finish(publishers, subscribers)
    readers = {}
    for s in subscribers:
        readers[s.topic] = readers.get(s.topic, 0) + 1
    summary = {"node": args.node, "sent": sum(p.sent for p in publishers),
               "expected": sum(p.sent * readers.get(p.topic, 0) for p in publishers),
               "received": sum(s.received for s in subscribers), **durable_counts(publishers, subscribers)}
    for client in publishers:
        await client.close()
    await node.close()
    node.say(summary)
    return 0


# -- mmog ------------------------------------------------------------------------------------------
def mmog_plan(players: list[tuple[str, str]], servers: list[tuple[str, str]], proxies: list[tuple[str, str]],
              groups: list[int], changes: list) -> dict:
    """The MMOG run's plan (paper 5.8.2), shared by every player's and game server's process.

    `players`, `servers`, `proxies`: (node, city) in topology order. A city's edge sites are its game
    servers, the k-th paired with the city's k-th NC proxy (round-robin when there are fewer proxies);
    a city's players are dealt round-robin over its edge sites. Avatar i is player i: `groups[i]` its
    initial group, `changes` the group changes (seconds since the workload's start) that the harness
    draws from the scenario's seed (`testbed.mobility.group_changes`)."""
    edges: dict[str, list[tuple[str, str | None]]] = {}
    for name, city in servers:
        mine = [p for p, c in proxies if c == city]
        edges.setdefault(city, []).append((name, mine[len(edges.get(city, [])) % len(mine)] if mine else None))
    dealt: dict[str, int] = {}
    placed = []
    for name, city in players:
        if city not in edges:
            raise ValueError(f"mmog: player {name} is in {city}, which has no game server (edge site)")
        k = dealt.get(city, 0)
        dealt[city] = k + 1
        server, proxy = edges[city][k % len(edges[city])]
        placed.append({"site": city, "edge": f"{city}-{k % len(edges[city]) + 1}", "server": server, "proxy": proxy})
    return {"players": [name for name, _ in players], "edges": placed, "servers": [name for name, _ in servers],
            "groups": list(groups), "changes": [[c.time, c.avatar, c.from_group, c.to_group] for c in changes]}


def area_of_interest(avatar: int, groups: list[int]) -> set[int]:
    """Avatars whose topics player `avatar` subscribes to: the others in its group (paper 5.1.2)."""
    return {a for a, g in enumerate(groups) if g == groups[avatar] and a != avatar}


def served(server: str, plan: dict) -> set[int]:
    """Avatars whose topics a game server subscribes to: the players attached to its edge site (the
    server keeps their game state; it is a stationary client of the pub/sub system, paper 5.8.2)."""
    return {a for a, edge in enumerate(plan["edges"]) if edge["server"] == server}


def avatar_topic(player: str) -> str:
    """A player's avatar topic: its actions, published by the player (object-based, paper 5.1.2)."""
    return f"avatar-{player}"


def phase(index: int, count: int, rate: float) -> float:
    """Seconds by which publisher `index` of `count` sharing a start starts after it: spread evenly
    over one period, as independent devices would be, so not all messages are due at one instant (a
    herd that made the last of 8 publishers in one process late by the cost of the 7 sends before it)."""
    return (index % count) / (count * rate) if count > 0 and rate > 0 else 0.0


def _due_between(start: float, rate: float, low: float, high: float) -> int:
    """How many of the messages due at start + k/rate (k >= 0) fall in [low, high)."""
    first = max(0, math.ceil((low - start) * rate - 1e-9))
    last = max(0, math.ceil((high - start) * rate - 1e-9))
    return max(0, last - first)


class MmogClient:
    """One MMOG node's client: a player publishes its avatar's topic and subscribes to its area of
    interest, moving those subscriptions at every group change (unsubscribe the old group's topics,
    subscribe to the new one's); a game server subscribes to the topics of its edge site's players."""

    def __init__(self, args, events: EventLog, plan: dict, coord, health: ClientHealth | None = None,
                 engine: Engine | None = None, owner: tuple[str, str] | None = None):
        """`engine`: the node's compiled engine carries its clients' data plane; `owner` (broker,
        address): every client attaches there without a lookup (`--attach`, testbed.systems.pubsub.attach)."""
        self.args, self.events, self.plan = args, events, plan
        self.pub_class, self.sub_class = client_classes(engine, health, args.netns_pid)
        self.node, self.trace_dir = args.node, Path(args.trace_dir)
        self.common = {"lookup_url": None if owner else args.lookup, "owner": owner, "site": args.site,
                       "run_id": args.run_id, "events": events, "coord": coord, "nc_period": args.nc_period}
        self.players = plan["players"]
        self.avatar = self.players.index(self.node) if self.node in self.players else None
        if self.avatar is None and self.node not in plan["servers"]:
            raise ValueError(f"mmog: {self.node} is neither a player nor a game server of the plan")
        self.groups = list(plan["groups"])
        self.publishers = ([self.pub_class(avatar_topic(self.node), self.node, args.rate, args.size, precise_s=0.0,
                                           **self.common,
                                           **client_features(args, avatar_topic(self.node), self.node, producer=True))]
                           if self.avatar is not None else [])
        self.subscribers: dict[int, Subscriber] = {}
        self.opened: dict[int, float] = {}  # avatar -> when its current subscription was ready
        self.windows: list[tuple[int, float, float]] = []  # closed subscriptions (avatar, ready, closed)
        self.received_closed = 0
        self.start = None

    def wanted(self) -> set[int]:
        return area_of_interest(self.avatar, self.groups) if self.avatar is not None else served(self.node, self.plan)

    async def subscribe(self, avatar: int, changed: bool = False) -> None:
        """`changed`: opened by a group change; with the handover trigger its first report goes at
        once (the topic manager learns of the new subscriber without waiting for two periods)."""
        topic = avatar_topic(self.players[avatar])
        sub = self.sub_class(topic, self.node, trace=self.trace_dir / f"{topic}.{self.node}.jsonl",
                             keep_latencies=False, **self.common, **client_features(self.args, topic, self.node))
        self.subscribers[avatar] = sub
        await sub.start()
        self.opened[avatar] = time.time()  # what it owes counts from here: the report below takes a round trip
        if changed and self.args.handover.enabled:
            await sub.report_now()

    async def unsubscribe(self, avatar: int) -> None:
        sub = self.subscribers.pop(avatar)
        ready = self.opened.pop(avatar, None)
        await sub.close()
        if ready is not None:
            self.windows.append((avatar, ready, time.time()))
        self.received_closed += sub.received

    async def follow_groups(self, end: asyncio.Event) -> None:
        """Apply the group changes at their times (relative to the common start) until `end`. It
        stops between changes, never inside one: a subscription cancelled halfway through closing
        went on writing its trace uncounted (CI: 32,003 rows for 31,978 delivered)."""
        for at, avatar, old, new in self.plan["changes"]:
            delay = self.start + at - time.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(end.wait(), delay)
                except asyncio.TimeoutError:
                    pass
            if end.is_set():
                return
            self.groups[avatar] = new
            if avatar == self.avatar:
                self.events.add("group_change", avatar=self.node, client=self.node, from_group=old, to_group=new,
                                planned_at_s=at)
            current = set(self.subscribers)
            wanted = self.wanted()
            added, removed = sorted(wanted - current), sorted(current - wanted)
            if not added and not removed:
                continue
            self.events.add("aoi_change", client=self.node, avatar=self.players[avatar], planned_at_s=at,
                            subscribed=[avatar_topic(self.players[a]) for a in added],
                            unsubscribed=[avatar_topic(self.players[a]) for a in removed])
            await asyncio.gather(*(self.unsubscribe(a) for a in removed),
                                 *(self.subscribe(a, changed=True) for a in added))

    def phase(self, avatar: int) -> float:
        """Avatar `avatar`'s publisher's offset from the common start (players spread over a period)."""
        return phase(avatar, len(self.players), self.args.rate)

    def expected(self, stopped: float) -> int:
        windows = self.windows + [(avatar, ready, stopped) for avatar, ready in self.opened.items()]
        return sum(_due_between(self.start + self.phase(avatar), self.args.rate, max(low, self.start), high)
                   for avatar, low, high in windows)


def mmog_coordinate(args):
    """A player asks its edge site's NC proxy (`--proxy-ip`); a game server its own Serf agent."""
    if args.proxy_ip:
        from testbed.nc import proxy

        return shared_query(in_node(lambda: proxy.query(args.proxy_ip)["coordinate"], args.netns_pid))
    return coordinate_source(args.coord, args.node, args.netns_pid)


def mmog_owner(args, plan: dict) -> tuple[str, str] | None:
    """With `--attach`: the broker of a player's edge-site proxy (its city's by default), or of a
    game server's site; None: the clients look their topics up."""
    if not args.attach:
        return None
    players = plan["players"]
    proxy = plan["edges"][players.index(args.node)]["proxy"] if args.node in players else None
    return AttachPlan.read(args.attach).for_proxy(proxy or "", args.site)


async def attach(args, events: EventLog, edge: dict) -> None:
    """A player's first question to its edge site's NC proxy, as an event (`player_attached`: which
    proxy answered, the access latency it measured), so the run shows whom each player asked."""
    from testbed.nc import proxy

    try:
        answer = await asyncio.to_thread(in_node(lambda: proxy.query(args.proxy_ip), args.netns_pid))
        events.add("player_attached", client=args.node, edge=edge["edge"], proxy=answer["proxy"],
                   access_s=answer["access_s"])
    except (TimeoutError, OSError, ValueError) as error:
        events.add("player_attached", client=args.node, edge=edge["edge"], proxy=None, miss=str(error))


async def wait_start(path: Path, stop: asyncio.Event, timeout: float = 300.0) -> float | None:
    """The common start time (epoch s) the experiment writes once every MMOG client is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set():
        try:
            return float(path.read_text().strip())
        except (OSError, ValueError):
            await asyncio.sleep(0.05)
    return None


async def run_mmog(args, node: NodeProcess) -> int:
    Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
    events = EventLog(args.events)
    plan = json.loads(Path(args.plan).read_text())
    engine, health, stop = node.engine, node.health, node.stop
    client = MmogClient(args, events, plan, mmog_coordinate(args), health, engine, mmog_owner(args, plan))
    if args.proxy_ip:
        await attach(args, events, plan["edges"][client.avatar])
    for avatar in sorted(client.wanted()):
        await client.subscribe(avatar)
    for publisher in client.publishers:
        await publisher.start()
    node.say({"ready": True, "avatar": client.avatar, "publishers": len(client.publishers),
              "subscribers": len(client.subscribers)})
    client.start = await wait_start(Path(args.start_file), stop) if args.start_file else None
    if client.start is None:
        client.start = time.time() + 0.5
    gc.freeze()
    work = [asyncio.create_task(p.run(duration=args.duration, start=client.start + client.phase(client.avatar)))
            for p in client.publishers]
    end_changes = asyncio.Event()
    follow = asyncio.create_task(client.follow_groups(end_changes))
    waiter, probe = asyncio.create_task(stop.wait()), asyncio.create_task(health.run())
    await asyncio.wait({*work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    stopped = time.time()
    for task in [*work, waiter, probe]:
        task.cancel()
    end_changes.set()
    try:  # a group change under way completes: its subscriptions are counted as they trace
        await asyncio.wait_for(follow, CHANGE_GRACE_S)
    except asyncio.TimeoutError:
        events.add("group_change_cut", client=args.node, after_s=CHANGE_GRACE_S)
        print(f"a group change was not complete {CHANGE_GRACE_S:g} s after the stop (its lookups unanswered?): "
              f"cut", file=sys.stderr, flush=True)
    except Exception as exc:  # noqa: BLE001 - a failed change is reported; the counts are still written
        print(f"group changes failed: {exc!r}", file=sys.stderr, flush=True)
    health.close()
    await asyncio.sleep(0.5)  # messages in flight reach the subscribers
    await finish(client.publishers, list(client.subscribers.values()))
    received = client.received_closed + sum(s.received for s in client.subscribers.values())
    summary = {"node": args.node, "avatar": client.avatar, "sent": sum(p.sent for p in client.publishers),
               "expected": client.expected(stopped), "received": received,
               "subscriptions": len(client.windows) + len(client.subscribers)}
    for c in client.publishers:
        await c.close()
    await node.close()
    node.say(summary)
    return 0


# -- hotspot ---------------------------------------------------------------------------------------
SURGE_LEAD_S = 1.0  # surge publishers attach this long before `at`, so their first message is on time


def hotspot_plan(spec, rate: float, nodes: list[tuple[str, str]], seed: int, topic_class: str) -> dict:
    """The hot-spot run's plan: which node publishes and subscribes to what, at what rate.

    `spec`: a scenario's `workload.hotspot` (topics, zipf, subscribers, hot_site, hot_share, surge).
    Topic `<topic_class>-k` (popularity rank k = 1..topics) publishes at `rate / k**zipf` (Zipf's
    law; `rate` is rank 1's). `round(hot_share x topics)` ranks, drawn with `seed`, are local to
    `hot_site`: their publisher and `subscribers` subscribers on `nodes` at that site; the others'
    on nodes drawn over every site. The surge: the `surge.topics` most popular local topics each
    gain `surge.publishers` publishers at `surge.at` s, on the topic's publisher's node. `nodes`:
    (node, site) of the static clients in topology order. Each publisher's `start_s` (since the
    common start) spreads the publishers of a node that start together over one period of their
    rate (`phase`)."""
    topics, zipf, subscribers, hot_site = spec.topics, spec.zipf, spec.subscribers, spec.hot_site
    everywhere = [name for name, _ in nodes]
    at_hot_site = [name for name, site in nodes if site == hot_site]
    local_count = round(spec.hot_share * topics)
    if not everywhere:
        raise ValueError("hotspot: the scenario has no static client nodes")
    if local_count and not at_hot_site:
        raise ValueError(f"hotspot: no static client node at the hot site {hot_site}")
    rng = random.Random(seed)
    local = set(rng.sample(range(1, topics + 1), local_count))
    plan: dict = {"hot_site": hot_site, "topics": [], "publishers": [], "subscribers": []}
    for rank in range(1, topics + 1):
        topic, pool = f"{topic_class}-{rank}", at_hot_site if rank in local else everywhere
        plan["topics"].append({"topic": topic, "rank": rank, "rate": rate / rank ** zipf, "local": rank in local})
        plan["publishers"].append({"client": f"{topic}-pub", "topic": topic, "node": rng.choice(pool),
                                   "rate": rate / rank ** zipf, "at": 0.0})
        plan["subscribers"] += [{"client": f"{topic}-sub{j}", "topic": topic, "node": rng.choice(pool)}
                                for j in range(1, subscribers + 1)]
    if spec.surge is not None:
        at, surged, extra = spec.surge.at, spec.surge.topics, spec.surge.publishers
        for rank in sorted(local)[:surged]:
            first = plan["publishers"][rank - 1]
            plan["publishers"] += [{**first, "client": f"{first['topic']}-pub{i}", "at": float(at)}
                                   for i in range(2, extra + 2)]
    together = Counter((p["node"], p["at"]) for p in plan["publishers"])
    seen: Counter = Counter()
    for p in plan["publishers"]:
        key = (p["node"], p["at"])
        p["start_s"] = p["at"] + phase(seen[key], together[key], p["rate"])
        seen[key] += 1
    return plan


def hotspot_expected(plan: dict, duration: float) -> int:
    """Deliveries the plan asks for in `duration` s from the common start: each publisher's messages
    due by then (surge publishers from their `at`) times its topic's subscribers."""
    readers = Counter(s["topic"] for s in plan["subscribers"])
    return sum(_due_between(p["start_s"], p["rate"], 0.0, duration) * readers[p["topic"]] for p in plan["publishers"])


async def _surge(publishers: list[tuple[Publisher, dict]], start: float, events: EventLog) -> None:
    """Attach the surge publishers just before their time, then publish from it."""
    await asyncio.sleep(max(0.0, start + min(p["at"] for _, p in publishers) - SURGE_LEAD_S - time.time()))
    for publisher, spec in publishers:
        await publisher.start()
        events.add("surge", client=publisher.name, topic=publisher.topic, planned_at_s=spec["at"],
                   attached_s=round(time.time() - start, 3))
    await asyncio.gather(*(publisher.run(start=start + spec["start_s"]) for publisher, spec in publishers))


async def run_hotspot(args, node: NodeProcess) -> int:
    Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
    events = EventLog(args.events)
    plan = json.loads(Path(args.plan).read_text())
    engine, health, stop = node.engine, node.health, node.stop
    pub_class, sub_class = client_classes(engine, health, args.netns_pid)
    common = {"lookup_url": args.lookup, "site": args.site, "run_id": args.run_id, "events": events,
              "coord": coordinate_source(args.coord, args.node, args.netns_pid), "nc_period": args.nc_period}
    subscribers = [sub_class(s["topic"], s["client"], trace=Path(args.trace_dir) / f"{s['topic']}.{s['client']}.jsonl",
                             keep_latencies=False, **common, **client_features(args, s["topic"], s["client"]))
                   for s in plan["subscribers"] if s["node"] == args.node]
    publishers = [(pub_class(p["topic"], p["client"], p["rate"], args.size, precise_s=0.0, **common,
                             **client_features(args, p["topic"], p["client"], producer=True)), p)
                  for p in plan["publishers"] if p["node"] == args.node]
    first = [(pub, p) for pub, p in publishers if p["at"] <= 0]
    later = [(pub, p) for pub, p in publishers if p["at"] > 0]
    for client in subscribers + [pub for pub, _ in first]:  # subscribers first, as everywhere
        await client.start()
    node.say({"ready": True, "publishers": len(first), "surge": len(later), "subscribers": len(subscribers)})
    start = await wait_start(Path(args.start_file), stop) if args.start_file else None
    start = start or time.time() + 0.5
    gc.freeze()
    work = [asyncio.create_task(pub.run(duration=args.duration, start=start + p["start_s"])) for pub, p in first]
    surge = [asyncio.create_task(_surge(later, start, events))] if later else []
    waiter, probe = asyncio.create_task(stop.wait()), asyncio.create_task(health.run())
    await asyncio.wait({*work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    for task in [*work, *surge, waiter, probe]:
        task.cancel()
    health.close()
    await drain([pub for pub, _ in publishers], subscribers)
    await finish([pub for pub, _ in publishers], subscribers)
    readers = Counter(s["topic"] for s in plan["subscribers"])
    summary = {"node": args.node, "sent": sum(pub.sent for pub, _ in publishers),
               "expected": sum(pub.sent * readers[pub.topic] for pub, _ in publishers),
               "received": sum(s.received for s in subscribers),
               "surge_sent": sum(pub.sent for pub, _ in later),
               **durable_counts([pub for pub, _ in publishers], subscribers)}
    for client in [pub for pub, _ in publishers]:
        await client.close()
    await node.close()
    node.say(summary)
    return 0


#: What each kind of client node runs (in its own process, or in a client host).
PROGRAMS = {"uav": run_uav, "mmog": run_mmog, "hotspot": run_hotspot}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """A node's workload arguments (the same in its own process and in a client host)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["uav", "mmog", "hotspot"])
    parser.add_argument("--node", required=True)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--lookup", help="the lookup service's nats:// address (or --attach)")
    parser.add_argument("--attach", type=Path, help="uav, mmog: a broker attachment plan instead of a lookup, JSON "
                        "(testbed.systems.pubsub.attach.AttachPlan)")
    parser.add_argument("--trace-dir", required=True)
    parser.add_argument("--events", type=Path)
    parser.add_argument("--run-id", default="")
    parser.add_argument("--site", default="")
    parser.add_argument("--coord", default="proxy")
    parser.add_argument("--nc-period", type=float, default=5.0)
    parser.add_argument("--health", type=Path, help="per-second publisher lateness and loop lag, JSON lines")
    parser.add_argument("--client-engine", choices=("python", "compiled"), default="python",
                        help="the clients' data plane: nats-py, or the node's compiled engine")
    parser.add_argument("--track", action="store_true", help="message tracking (Jun and Astley): ids on messages, "
                        "attachments told to the broker's tracker")
    parser.add_argument("--plan", type=Path, help="mmog, hotspot: the run's plan as JSON")
    parser.add_argument("--start-file", type=Path,
                        help="mmog, hotspot: wait for the common start time (epoch s) in this file")
    parser.add_argument("--proxy-ip", help="mmog player: its edge site's NC proxy (else --coord)")
    parser.add_argument("--durable", help="durable topic classes as JSON (testbed.systems.pubsub.durable.classes_json)")
    parser.add_argument("--handover-trigger", help="beyond the paper: report at once after a handover, "
                        "testbed.policies.handover.HandoverTrigger as JSON (default: off)")
    parser.add_argument("--distance", default=DEFAULT_DISTANCE, choices=list(DISTANCES),
                        help="the run's reading of d (the handover trigger compares coordinates with it)")
    parser.add_argument("--netns-pid", type=int, help="in a client host: the node's process, whose network "
                        "namespace its sockets are made in")
    args = parser.parse_args(argv)
    args.handover = HandoverTrigger.from_json(args.handover_trigger)
    if not args.lookup and not (args.attach and args.kind in ("uav", "mmog")):
        parser.error("give --lookup (uav, mmog also: --attach)")
    if args.kind in ("mmog", "hotspot") and not args.plan:
        parser.error(f"{args.kind} needs --plan")
    return args


async def run_alone(args) -> int:
    """A node's workload in a process of its own."""
    return await PROGRAMS[args.kind](args, await NodeProcess.standalone(args))


def main(argv: list[str] | None = None) -> int:
    return run_precise(run_alone(parse_args(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
