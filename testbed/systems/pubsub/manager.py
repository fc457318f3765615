"""The topic manager (ePulsar's Load Manager, paper 3.3-3.6), run by the elected cloud broker.

Every monitoring period it reads the brokers' reports from ZooKeeper, builds a Snapshot and runs the
policy family's controller (testbed.policies.control: Algorithm 1 around a ranking policy, or a
family's own loop such as Pulsar's load manager), then executes the migrations: `enhanced` (Fig. 2)
on a pool of executors, `baseline` one at a time with lazy reassignment through lookup. A family
may require a workflow (Pulsar's load manager: `baseline`); it overrides --workflow. Each round
also reports every broker's load and the imbalance between them (`loads`). It also answers `_ep.lookup` (assigning unowned topics with the
policy: `--initial-placement first_lookup` from the asking client's coordinate, `cloud` on the
default broker until reports come; testbed.policies.initial) and re-places the topics of brokers
that died. `--distance` is the reading of d its policy ranks with (testbed.policies.distance); the
brokers must report E(t) and W(t) in the same one (a broker reporting another is an event).
`--mode pingpong` is the paper's 5.7 driver: every period it moves all topics from one broker to the
other and back.

Each decision and migration is one JSON line on stdout (the run collects them as events).

    python -m testbed.systems.pubsub.manager --node cloud --nats nats://IP:4222 --zk IP:2181 --policy epulsar
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time

from kazoo.client import KazooState
from kazoo.exceptions import KazooException

from testbed.systems.pubsub.lookup import LookupService
from testbed.systems.pubsub.metadata import check_topic
from testbed.systems.pubsub.reports import HANDOVER_SUBJECT
from testbed.policies.handover import HandoverTrigger, early_round, returns_too_soon
from testbed.policies.snapshot import BrokerReport, Migration, Snapshot, TopicClients, TopicReport
from testbed.policies import (DEFAULT_DISTANCE, DEFAULT_INITIAL_PLACEMENT, DISTANCES, INITIAL_PLACEMENTS, DEFAULT_POLICY,
                               POLICIES, ControlOptions, LoadManagerConfig, Overload, controller_for, get_distance,
                               get_policy)


EARLY_ROUND_GATHER_S = 0.1  # an early round waits this long for the other reports of the same handover
LEADERSHIP_LOST_EXIT = 3  # the exit code of a manager that stepped down (`TopicManager.step_down`)


def emit(kind: str, **data) -> None:
    print(json.dumps({"type": kind, "time": time.time(), **data}), flush=True)


def clients_from_reports(reports: dict[str, dict], placement: dict[str, str]) -> dict[str, TopicClients]:
    """topic -> its clients' individual coordinates, from the `clients` of the brokers' reports (only
    agents run with --report-clients write them, for AllPairs). The owner's list wins when several
    brokers list a topic (during a migration); a malformed entry is left out."""
    out: dict[str, TopicClients] = {}
    for name, data in sorted(reports.items()):
        listed = data.get("clients")
        if not isinstance(listed, dict):
            continue
        for topic, entry in listed.items():
            if topic in out and placement.get(topic) != name:
                continue
            try:
                out[topic] = TopicClients.from_dict(entry)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
    return out


class TopicManager(LookupService):
    def __init__(self, args):
        super().__init__(args.nats, args.zk, args.default or args.node)
        self.node = args.node
        self.policy = get_policy(args.policy)
        self.overload = Overload.from_config(args)
        self.controller = controller_for(self.policy, ControlOptions(
            self.overload, args.initial_placement, args.default or args.node, args.seed,
            LoadManagerConfig.from_arguments(args), args.infeasible_min_gain))
        self.workflow = self.controller.workflow or args.workflow
        self.executors = args.executors if self.workflow == "enhanced" else 1
        self.period = args.period
        self.mode = args.mode
        self.default_threshold = args.threshold
        self.distance = get_distance(args.distance)
        self.initial = args.initial_placement
        self.mismatched: set[str] = set()  # brokers already reported for reporting in another reading
        self.started: set[str] = set()  # topics placed at their first lookup (initial_placement events)
        self.known: dict[str, str] = {}  # last placement seen: finds topics orphaned by a dead broker
        self.last_reports: dict[str, TopicReport] = {}  # each topic's latest report from a live owner
        self.last_clients: dict[str, TopicClients] = {}  # and its clients' coordinates (AllPairs)
        self.orphan_locks: dict[str, asyncio.Lock] = {}
        self.in_flight: set[str] = set()
        self.round = 0
        self.handover = HandoverTrigger.from_json(args.handover_trigger)  # beyond the paper: early rounds
        self.moved: dict[str, tuple[float, str]] = {}  # each topic's last migration: (when, the broker it left)
        self.handover_topics: set[str] = set()  # topics handovers concern, for the next early round
        self._early: asyncio.Task | None = None
        self._leading = False
        self._round_lock = asyncio.Lock()  # a round, periodic or early, sees the moves of the one before

    # -- snapshot ------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return self.state()[0]

    def state(self) -> tuple[Snapshot, dict[str, TopicClients]]:
        """The Snapshot, and each topic's individual client coordinates when the brokers report them
        (AllPairs; empty otherwise)."""
        brokers = self.meta.brokers()
        reports, raw = {}, {}
        for name, data in self.meta.reports().items():
            # Latency-aware decisions need the broker's coordinate; moving topics back and forth does not.
            if name in brokers and (data.get("coord") or self.mode == "pingpong"):
                reports[name] = BrokerReport.from_dict(data)
                raw[name] = data
                self._check_reading(name, data)
        placement = {t: b for t, b in self.meta.placement().items() if b in reports}
        live = Snapshot(reports, placement, distance=self.distance)
        clients = clients_from_reports(raw, placement)
        self.last_reports.update({t: r for t, r in live.reports().items() if t in placement})
        self.last_clients.update({t: c for t, c in clients.items() if t in placement})
        carried = {t: r for t, r in self.last_reports.items() if t not in placement}
        clients.update({t: c for t, c in self.last_clients.items() if t not in placement})
        thresholds = {t: (self.meta.threshold(t) or self.default_threshold) for t in [*placement, *carried]}
        return Snapshot(reports, placement, thresholds, carried, distance=self.distance), clients

    def _check_reading(self, broker: str, report: dict) -> None:
        """E(t) in another reading than ours would be compared with the wrong threshold: say so, once."""
        theirs = report.get("distance", self.distance.name)
        if theirs != self.distance.name and broker not in self.mismatched:
            self.mismatched.add(broker)
            emit("distance_mismatch", broker=broker, broker_distance=theirs, manager_distance=self.distance.name)

    # -- lookup: unowned topics go where the policy says --------------------------------------
    async def resolve(self, topic: str, asker: TopicClients | None = None) -> dict:
        if await asyncio.to_thread(self.meta.owner, topic):  # an owned topic needs no plan
            return await super().resolve(topic)
        try:
            snapshot, clients = await asyncio.to_thread(self.state)
        except Exception as error:  # noqa: BLE001 - fall back to the default broker
            emit("lookup_policy_failed", topic=topic, error=str(error))
            return await super().resolve(topic)
        if self.plan.get(topic) not in snapshot.brokers:  # no plan, or one for a broker that has died
            self.plan.pop(topic, None)
            if snapshot.brokers:
                self.plan[topic] = self.choose(topic, snapshot, clients, asker)
                if snapshot.report(topic) is None and topic not in self.known and topic not in self.started:
                    self.started.add(topic)  # once per topic, however many of its clients ask at once
                    emit("initial_placement", topic=topic, broker=self.plan[topic], initial=self.initial,
                         asker=[c.name for c in (*asker.producers, *asker.consumers)] if asker else None)
        if self.known.get(topic) not in (None, *snapshot.brokers):
            # A client asks for a topic whose owner died before a round noticed: placed now.
            return await self._place_orphan(topic, via="lookup")
        return await super().resolve(topic)

    def suspected(self, found: dict | None) -> None:
        if found is not None:
            emit("broker_fenced" if not found["alive"] else "broker_suspected", **found)

    async def _place_orphan(self, topic: str, via: str) -> dict:
        """Assign a topic whose owner died (as planned in self.plan) and record where it went."""
        async with self.orphan_locks.setdefault(topic, asyncio.Lock()):  # once, however many clients ask
            dead = self.known.get(topic)
            answer = await super().resolve(topic)
            broker = answer.get("broker")
            if broker != dead:
                emit("orphan_replaced", topic=topic, dead=dead, broker=broker, error=answer.get("error"), via=via,
                     carried=topic in self.last_reports)
                if broker:
                    self.known[topic] = broker
        return answer

    def choose(self, topic: str, snapshot: Snapshot, clients: dict[str, TopicClients] | None = None,
               asker: TopicClients | None = None) -> str:
        """Where the controller puts a topic nobody owns (Algorithm 1: testbed.policies.initial)."""
        return self.controller.assign(topic, snapshot, clients, asker)

    # -- the periodic round --------------------------------------------------------------------
    async def control_loop(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            self.round += 1
            try:
                await self.one_round()
            except Exception as error:  # noqa: BLE001 - a failed round is reported, the next one runs
                stopping = getattr(self, "stopping", None)
                if stopping is not None and stopping.is_set():
                    return  # SIGTERM closes the sessions under a round on purpose: not a failed round
                emit("round_failed", round=self.round, error=f"{type(error).__name__}: {error}")

    async def one_round(self) -> None:
        async with self._round_lock:
            await self._one_round()

    async def _one_round(self) -> None:
        await self.warm_peers()
        snapshot, clients = await asyncio.to_thread(self.state)
        await self.replace_orphans(snapshot, clients)
        if self.mode == "pingpong":
            migrations = self.pingpong(snapshot)
        else:
            violated = [t for t in snapshot.placement
                        if (r := snapshot.report(t)) is not None and r.e > snapshot.thresholds.get(t, 1e9)]
            for topic in violated:
                report = snapshot.report(topic)
                emit("violation_detected", topic=topic, broker=snapshot.placement[topic], e_s=report.e,
                     threshold_s=snapshot.thresholds[topic])
            decision = self.controller.round(snapshot, time.time(), clients)
            shed = {t for event in decision.events if event.get("type") == "overload_shed" for t in event["topics"]}
            for event in decision.events:
                emit(event.pop("type"), round=self.round, **event)
            migrations = self.hold(decision.migrations, shed)
            self.emit_loads(snapshot)
            if hasattr(self.controller, "ownership"):
                await asyncio.to_thread(self.meta.write_ownership, self.controller.ownership())
        migrations = [m for m in migrations if m.topic not in self.in_flight]
        emit("round", round=self.round, node=self.node, brokers=len(snapshot.brokers), topics=len(snapshot.placement),
             migrations=len(migrations))
        if migrations:
            await self.execute(migrations, snapshot)

    # -- handovers: early rounds (beyond the paper; testbed.policies.handover) --------------------
    def hold(self, migrations: list[Migration], shed: set[str]) -> list[Migration]:
        """With the handover trigger on, a periodic round does not move a topic back to the broker it
        left within `hold_s` either (an overloaded broker's shed topics excepted): a client on a zone
        border would otherwise have the periodic round bounce what the early rounds hold."""
        if not self.handover.enabled:
            return migrations
        now = time.time()
        held = [m.topic for m in migrations if m.topic not in shed
                and returns_too_soon(m.topic, m.target, self.moved, now, self.handover.hold_s)]
        if held:
            emit("round_held", round=self.round, topics=held, hold_s=self.handover.hold_s)
        return [m for m in migrations if m.topic not in held]

    def subscriptions(self) -> list[tuple[str, object]]:
        return [(HANDOVER_SUBJECT, self._on_handover)] if self.handover.enabled else []

    async def _on_handover(self, msg) -> None:
        """A broker wrote a report with a handed-over client's new coordinate: an early round for
        its topics, once the reports of the same handover (a swarm's clients) came in together."""
        try:
            topics = [check_topic(t) for t in json.loads(msg.data)["topics"]]
        except (ValueError, KeyError, TypeError):
            return
        self.handover_topics.update(topics)
        if self._leading and (self._early is None or self._early.done()):
            self._early = asyncio.get_running_loop().create_task(self.early_round())

    async def early_round(self) -> None:
        await asyncio.sleep(EARLY_ROUND_GATHER_S)
        async with self._round_lock:
            topics, self.handover_topics = sorted(self.handover_topics), set()
            try:
                snapshot, clients = await asyncio.to_thread(self.state)
                migrations, why = early_round(topics, snapshot, self.policy, self.moved, time.time(),
                                              self.handover.hold_s, self.overload, clients)
            except Exception as error:  # noqa: BLE001 - the periodic round is the backstop
                emit("early_round_failed", topics=topics, error=f"{type(error).__name__}: {error}")
                return
            migrations = [m for m in migrations if m.topic not in self.in_flight]
            emit("early_round", round=self.round, topics=topics, migrations=len(migrations), kept=why)
            if migrations:
                await self.execute(migrations, snapshot)

    def emit_loads(self, snapshot: Snapshot) -> None:
        """Every broker's load this round (for the figures of load balancing), and the imbalance: the
        coefficient of variation of the brokers' message rates (in + out of the topics each owns)."""
        reports = snapshot.reports()
        brokers = {}
        for name, b in sorted(snapshot.brokers.items()):
            owned = [t for t, owner in snapshot.placement.items() if owner == name]
            rate = sum(reports[t].load for t in owned if t in reports)
            brokers[name] = {"rate": rate, "rate_out": b.rate_out, "cpu": b.cpu, "memory": b.memory,
                             "network_in": b.network_in, "network_out": b.network_out, "topics": len(owned)}
        emit("loads", round=self.round, brokers=brokers, imbalance=imbalance([v["rate"] for v in brokers.values()]))

    def pingpong(self, snapshot: Snapshot) -> list[Migration]:
        """Move every topic to the other of the first two edge brokers (paper 5.7)."""
        brokers = sorted(b for b in snapshot.brokers if b != self.node)[:2]
        if len(brokers) < 2:
            return []
        a, b = brokers
        return [Migration(t, owner, b if owner == a else a) for t, owner in sorted(snapshot.placement.items())
                if owner in (a, b)]

    async def replace_orphans(self, snapshot: Snapshot, clients: dict[str, TopicClients] | None = None) -> None:
        """Topics whose owner died (ephemeral owner node gone with its session) get a new owner."""
        current = await asyncio.to_thread(self.meta.placement)
        self.known.update(current)
        orphans = [t for t, b in self.known.items() if t not in current and b not in snapshot.brokers]
        for topic in orphans:
            if snapshot.brokers:
                self.plan[topic] = self.choose(topic, snapshot, clients)
                await self._place_orphan(topic, via="round")

    # -- migrations ----------------------------------------------------------------------------
    async def execute(self, migrations: list[Migration], snapshot: Snapshot) -> None:
        brokers = await asyncio.to_thread(self.meta.brokers)
        gate = asyncio.Semaphore(self.executors)
        started = time.time()

        async def one(m: Migration) -> None:
            async with gate:
                await self.migrate(m, brokers)

        self.in_flight |= {m.topic for m in migrations}
        self.moved.update({m.topic: (started, m.source) for m in migrations})
        try:
            await asyncio.gather(*(one(m) for m in migrations))
        finally:
            self.in_flight -= {m.topic for m in migrations}
        emit("migrations_done", count=len(migrations), workflow=self.workflow, executors=self.executors,
             total_s=round(time.time() - started, 6))

    async def migrate(self, m: Migration, brokers: dict) -> None:
        source, target = brokers.get(m.source), brokers.get(m.target)
        if source is None or target is None:
            emit("migration_skipped", topic=m.topic, from_broker=m.source, to_broker=m.target,
                 reason="broker not registered")
            return
        request = {"op": "release", "topic": m.topic}
        if self.workflow == "enhanced":
            request.update(to=m.target, address=target["address"])
        else:
            self.plan[m.topic] = m.target  # lazy: the target acquires when a client looks the topic up
        emit("migration_start", topic=m.topic, from_broker=m.source, to_broker=m.target, workflow=self.workflow,
             executors=self.executors)
        t0 = time.time()
        try:
            peer = await self._peer(source["address"])
            reply = await peer.request(f"_ep.cmd.{m.source}", json.dumps(request).encode(), timeout=30)
            answer = json.loads(reply.data)
        except Exception as error:  # noqa: BLE001 - reported as a failed migration
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        took = round(time.time() - t0, 6)
        emit("migration_end", topic=m.topic, from_broker=m.source, to_broker=m.target, workflow=self.workflow,
             ok=bool(answer.get("ok")), migration_s=took, duration_s=took, error=answer.get("error"),
             rolled_back=answer.get("rolled_back"), timing=answer.get("timing"))

    # -- run -----------------------------------------------------------------------------------
    async def run(self) -> None:
        await asyncio.to_thread(self.meta.start)
        await asyncio.to_thread(self.meta.ensure_layout)
        election = self.meta.zk.Election("/epulsar/manager", self.node)
        leader = asyncio.Event()
        loop = asyncio.get_running_loop()
        resign = threading.Event()

        def elected() -> None:  # runs in kazoo's thread for as long as we lead
            loop.call_soon_threadsafe(leader.set)
            resign.wait()

        def lead() -> None:
            try:
                election.run(elected)
            except KazooException:  # resigned as the run stops: the session closed under the lock's release
                pass
        leading = threading.Thread(target=lead, daemon=True)
        leading.start()
        await leader.wait()
        restore = getattr(self.controller, "restore", None)
        if restore is not None and (previous := await asyncio.to_thread(self.meta.ownership)):
            restore(previous)
        emit("elected", node=self.node, policy=self.policy.name, workflow=self.workflow, executors=self.executors)
        lost = asyncio.Event()

        def session_gone(*_args) -> None:  # kazoo's thread: the session that won the election is gone
            loop.call_soon_threadsafe(lost.set)
        self.meta.on_restored = session_gone  # a new session after the old one expired (metadata's watchdog)
        self.meta.zk.add_listener(lambda state: session_gone() if state == KazooState.LOST else None)
        self._leading = True
        control = loop.create_task(self.control_loop())
        serving = loop.create_task(super().run())  # serves _ep.lookup until SIGTERM
        try:
            await asyncio.wait({serving, loop.create_task(lost.wait())}, return_when=asyncio.FIRST_COMPLETED)
            stopping = getattr(self, "stopping", None)
            if lost.is_set() and not serving.done() and not (stopping and stopping.is_set()):
                self.step_down()  # (a session that ends because we were told to stop is no reason)
        finally:
            control.cancel()
            resign.set()
            await asyncio.to_thread(leading.join, 2.0)  # its lock released before the process goes (no traceback)

    def step_down(self) -> None:
        """The ZooKeeper session that won the election expired (ZooKeeper was away longer than the
        session timeout): another manager may lead by now, so this one must not act a moment longer.
        It exits at once, and the harness starts it again as a standby (two leaders would migrate the
        same topics against each other)."""
        emit("leadership_lost", node=self.node)
        sys.stdout.flush()
        os._exit(LEADERSHIP_LOST_EXIT)


def imbalance(values: list[float]) -> float | None:
    """Coefficient of variation (population standard deviation over mean); None when nothing flows."""
    if not values or sum(values) <= 0:
        return None
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 / mean


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="ePulsar topic manager")
    parser.add_argument("--node", required=True, help="this cloud broker's name (also the default owner)")
    parser.add_argument("--nats", required=True)
    parser.add_argument("--zk", required=True)
    parser.add_argument("--default", default=None, help="broker for topics nobody reported yet")
    parser.add_argument("--policy", default=DEFAULT_POLICY, choices=list(POLICIES))
    parser.add_argument("--workflow", default="enhanced", choices=["enhanced", "baseline"])
    parser.add_argument("--executors", type=int, default=16)
    parser.add_argument("--period", type=float, default=5.0)
    parser.add_argument("--mode", default="control", choices=["control", "pingpong"])
    parser.add_argument("--threshold", type=float, default=0.1, help="Lth (s) of topics without their own")
    parser.add_argument("--distance", default=DEFAULT_DISTANCE, choices=list(DISTANCES),
                        help="reading of d: Serf's RTT estimate / 2 (one_way) or as is (rtt)")
    parser.add_argument("--initial-placement", default=DEFAULT_INITIAL_PLACEMENT, choices=list(INITIAL_PLACEMENTS),
                        help="an unowned topic's first broker: from the asking client's coordinate, or the cloud")
    parser.add_argument("--seed", type=int, default=0, help="the scenario's seed (a policy's random ties)")
    parser.add_argument("--infeasible-min-gain", type=float, default=0.0,
                        help="beyond the paper: s an infeasible topic's move must gain (0: Algorithm 1 as written)")
    parser.add_argument("--handover-trigger", help="beyond the paper: early rounds on handovers, "
                        "testbed.policies.handover.HandoverTrigger as JSON (default: off)")
    Overload.add_arguments(parser)
    LoadManagerConfig.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(TopicManager(args).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
