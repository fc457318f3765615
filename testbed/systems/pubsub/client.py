"""The client library (nats-py): look a topic up, publish or subscribe through its owning broker,
follow migrations, report coordinates, and record what the experiment measures.

A topic lives on the nats-server of the broker that owns it (`t.<topic>`). Clients follow control
messages on `_ep.ctl.<topic>`: `redirect` (enhanced workflow: connect to the given address at once,
make-before-break) or `disconnect` (baseline: drop the connection, look the topic up again; a
publisher holds what it produces meanwhile, as Pulsar's producer queue does). Each downtime is
recorded twice, from the control message (or the lost connection): until the client is connected to
the new broker (`reconnect_s`, the paper's definition in 5.7) and until the new broker carries its
traffic (`downtime_s`, ours). Both workflows end a move by the same step (`_switch`): a publisher
sends what it held, if anything, and a flush round trip confirms the new broker has it; a subscriber's
downtime ends at its first message delivered through the new broker. (Closing a publisher's downtime
at its next publish instead charged the enhanced client up to one message interval that the baseline,
flushing its queue at once, did not pay.)

Publishing is open loop: message i is due at start + i/rate and carries its scheduled time, so
latency = receive_time - scheduled send time includes any time the client spent late (every node
shares the host's clock). Subscribers write one trace row per delivered message and count losses,
duplicates and reordering per producer from the sequence numbers.

    python -m testbed.systems.pubsub.client pub --topic avatar-1 --name gs1 --lookup nats://10.1.0.1:4222 --rate 50
    python -m testbed.systems.pubsub.client sub --topic avatar-1 --name gs2 --lookup nats://10.1.0.1:4222 --trace t.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import logging
import random
import signal
import sys
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import nats

from testbed.procs import percentile
from testbed.systems.pubsub import trace_schema
from testbed.systems.pubsub.feature import ClientFeature
from testbed.systems.pubsub.metadata import check_topic
from testbed.systems.pubsub.reports import NC_REPORT, NC_REPORT_NOW
from testbed.policies.snapshot import coord_from_dict, coord_to_dict

_json_str = json.encoder.encode_basestring_ascii  # a str as json.dumps writes it (the C encoder)
FLUSH_EVERY_S = 1.0
RELOOKUP_CONNECT_S = 2.0  # a nats-server that is up accepts within an RTT; a dead one is given this long
# Longest pause between lookups after losing a broker. The lookup names the dead broker until its
# ZooKeeper session expires (~6 s); with pauses doubling to 2 s a retry could land just before the
# expiry and wait 2 s more (downtime 6 s or 8.5 s by chance, on either backend). 0.5 s bounds that.
RELOOKUP_PAUSE_MAX_S = 0.5
# How long one lookup waits for its answer before it is asked again. The topic manager answers in
# milliseconds (a lost broker's probe adds 0.5 s); a request sent while the path to it was cut sits
# in the dropped connection's buffer and is never answered, so after a site's cut heals a client
# would wait out the whole wait (a site-cut run: 10 s, all but 4 s of them after the heal).
LOOKUP_ATTEMPT_S = 3.0
# Pauses between failed lookups double from the first to the last, each drawn from its upper half: a
# lookup service that is gone answers "no responders" at once, and a fixed 0.2 s had every topic
# client ask five times a second together (an overloaded MMOG run: 576 clients, ~240 failed lookups a
# second for 20 minutes, while the topic managers fought ZooKeeper for the leadership). A lookup that
# failed slowly (timed out) is asked again after the first pause, as before: after a site's cut heals,
# the client is back within an attempt and that pause (tests/test_run_failover.py).
LOOKUP_PAUSE_FIRST_S, LOOKUP_PAUSE_MAX_S = 0.2, 1.0
NATS_CONNECT_TIMEOUT_S = 5.0  # one attempt to (re)connect to a nats-server: its SYNs go at 0, 1 and 3 s
NATS_RECONNECT_WAIT_S = 0.2  # between two attempts
PING_INTERVAL_S = 1.0  # nats-py's default is 2 minutes: a paused broker would hold its clients that long
MAX_PINGS_OUT = 2      # unanswered pings before the connection counts as dropped (~2-3 s)
NOTICE_S = PING_INTERVAL_S * (MAX_PINGS_OUT + 1)  # a broker that answers no ping for this long is lost


def run_precise(coro):
    """asyncio.run for open-loop publishers: a select()-based loop, whose timeouts have microsecond
    resolution where epoll's are rounded up to whole milliseconds (with asyncio's default loop every
    message left 0.7 ms late at the median and 2-3 ms at p99, measured), and 1 ns timer slack
    instead of the kernel's 50 us. A client process watches a few dozen sockets: select's cost per
    call is no concern there."""
    import ctypes
    import selectors

    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK, 1 ns
    except (OSError, AttributeError):
        pass  # not Linux: the default slack only costs accuracy
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selectors.SelectSelector())) as runner:
        return runner.run(coro)


async def _log_error(error: Exception) -> None:
    logging.getLogger("nats").warning("nats: %s: %s", type(error).__name__, error)  # one line, no traceback


async def connect_nats(address: str, name: str | None = None, timeout: float = 10.0, disconnected_cb=None,
                       reconnected_cb=None):
    """A NATS connection that reconnects forever once up (a restarted nats-server) but gives up on
    a first connect after `timeout` (a broker that is gone). Agents use it too. `disconnected_cb`
    (a coroutine function) runs each time the connection drops, also when a server stops answering
    pings (PING_INTERVAL_S x MAX_PINGS_OUT: a paused broker, whose TCP connections stay open);
    `reconnected_cb` each time it is back."""
    return await asyncio.wait_for(nats.connect(address, name=name, connect_timeout=NATS_CONNECT_TIMEOUT_S,
                                               max_reconnect_attempts=-1, reconnect_time_wait=NATS_RECONNECT_WAIT_S,
                                               error_cb=_log_error,
                                               ping_interval=PING_INTERVAL_S, max_outstanding_pings=MAX_PINGS_OUT,
                                               disconnected_cb=disconnected_cb, reconnected_cb=reconnected_cb),
                                  timeout)


async def close_quietly(nc, wait: float = 5.0) -> None:
    """Closes a connection, waiting `wait` at most: nats-py closes a socket only once what it holds is
    written, which a cut path holds back until TCP gives up (minutes), and then raised the
    CancelledError of its own reconnect task into the caller (a client ended during a cut lost
    its summary)."""
    try:
        await asyncio.wait_for(nc.close(), wait)
    except asyncio.CancelledError:
        if asyncio.current_task().cancelling():
            raise
    except Exception:  # noqa: BLE001 - closing what may already be gone
        pass


async def reachable(address: str, timeout: float = 1.0) -> None:
    """Raises unless something accepts TCP at nats://host:port (a refused connect fails at once,
    where a NATS connect would keep retrying until its timeout)."""
    host, port = address.removeprefix("nats://").rsplit(":", 1)
    _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
    writer.close()


async def lookup(topic: str, lookup_nc, timeout: float = 10.0, asker: dict | None = None,
                 lost: str | None = None) -> dict:
    """{"topic", "broker", "address"} from `_ep.lookup` (the topic manager at the cloud broker).
    `asker`: {"client", "role", "coord"}, who asks and from where, so that the topic manager can place
    a topic nobody owns near its first client (testbed.systems.pubsub.lookup.parse_lookup). `lost`:
    the broker whose connection dropped, which the topic manager probes and fences if it is gone."""
    request = {"topic": topic, **(asker or {}), **({"lost": lost} if lost else {})}
    reply = await lookup_nc.request("_ep.lookup", json.dumps(request).encode(), timeout=timeout)
    answer = json.loads(reply.data)
    if not answer.get("address"):
        raise LookupError(f"lookup of {topic}: {answer.get('error', answer)}")
    return answer


class LookupLink:
    """A process's one connection to the lookup service (`_ep.lookup` at the cloud broker), shared by
    all its topic clients as a Pulsar client's producers and consumers share its connections. One
    connection per topic client cost a keepalive ping a second each through the emulated network:
    the 576 topic clients of an MMOG point sent ~1,150 pings and pongs a second to the cloud broker,
    against its ~1,700 deliveries. Each client still records its own `lookup_dropped`/`lookup_back`;
    the connection closes with the last client's `leave`."""

    _links: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> {(url, node): LookupLink}

    def __init__(self, url: str, key: tuple, connect):
        self.url, self.key, self._connect = url, key, connect
        self.clients: set[TopicClient] = set()
        self.nc = None
        self._connecting: asyncio.Future | None = None

    @classmethod
    def join(cls, url: str, client: "TopicClient") -> "LookupLink":
        """The link of `client`'s node (`TopicClient._lookup_connector`: a client host serves many
        nodes in one loop, each with its own connection through its own access link)."""
        node, connect = client._lookup_connector()
        links = cls._links.setdefault(asyncio.get_running_loop(), {})
        key = (url, node)
        link = links.get(key) or links.setdefault(key, cls(url, key, connect))
        link.clients.add(client)
        return link

    async def connection(self):
        """The connection, made by the first client that asks (the others asking meanwhile wait for it);
        a failed connect raises to every one of them and is tried again by the next."""
        if self.nc is None:
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect(self.url, self._dropped, self._back))
            connecting = self._connecting
            try:
                self.nc = await asyncio.shield(connecting)
            finally:
                if self._connecting is connecting and connecting.done():
                    self._connecting = None
        return self.nc

    async def leave(self, client: "TopicClient") -> None:
        self.clients.discard(client)
        if self.clients:
            return
        links = self._links.get(asyncio.get_running_loop(), {})
        if links.get(self.key) is self:
            del links[self.key]
        if self._connecting is not None:
            self._connecting.cancel()
        nc, self.nc = self.nc, None
        if nc is not None:
            await close_quietly(nc)

    async def _dropped(self) -> None:  # a lookup waiting on the connection: each client's record says so
        for client in list(self.clients):
            client.events.add("lookup_dropped", topic=client.topic, client=client.name, role=client.role)

    async def _back(self) -> None:
        for client in list(self.clients):
            client.events.add("lookup_back", topic=client.topic, client=client.name, role=client.role)


class EventLog:
    """Events (relinks, downtime) in memory and, when given a path, appended as JSON lines."""

    def __init__(self, path: Path | None = None):
        self.items: list[dict] = []
        self.path = Path(path) if path else None

    def add(self, kind: str, **data) -> dict:
        event = {"type": kind, "time": time.time(), **data}
        self.items.append(event)
        if self.path:
            with self.path.open("a") as handle:
                handle.write(json.dumps(event) + "\n")
        return event


@dataclass
class Endpoint:
    """One connection of a client to the broker it is using for its topic."""

    broker: str
    address: str
    nc: object
    subs: list = field(default_factory=list)
    used: bool = False


class TopicClient:
    """What publishers and subscribers share: attachment, control messages, NC reports, downtime."""

    role = "client"

    def __init__(self, topic: str, name: str, lookup_url: str | None = None, owner: tuple[str, str] | None = None,
                 site: str = "", run_id: str = "", coord=None, nc_period: float = 5.0, events: EventLog | None = None,
                 features: list[ClientFeature] | tuple = ()):
        """`features`: what a topic feature adds to this client (durable topics, message tracking:
        `feature.ClientFeature`), one object per client, its hooks called in this order."""
        self.topic, self.name, self.site, self.run_id = check_topic(topic), name, site, run_id
        self.features = list(features)
        for feature in self.features:
            feature.bind(self)
        self.lookup_url, self.owner = lookup_url, owner
        if not lookup_url and not owner:
            raise ValueError("a client needs a lookup address or the owner's (broker, address)")
        self.coord_fn, self.nc_period = coord, nc_period
        self.events = events or EventLog()
        self.current: Endpoint | None = None
        self.downtime: dict | None = None  # an open downtime: control message seen, new broker not used yet
        self._lookup_link: LookupLink | None = None
        self._closing = False
        self._move_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()

    def feature(self, kind: type) -> ClientFeature | None:
        """This client's feature of class `kind`, if it has one."""
        return next((f for f in self.features if isinstance(f, kind)), None)

    # -- attachment -------------------------------------------------------------------------------
    async def start(self) -> None:
        broker, address = self.owner or await self._lookup(first=True)
        self.current = await self._attach(broker, address)
        self._spawn(self._report_loop())
        for feature in self.features:
            await feature.started(self)

    async def _lookup(self, first: bool = False, lost: str | None = None) -> tuple[str, str]:
        """The topic's broker. The first lookup says who asks and from where (the coordinate the client
        would report), so a topic nobody owns yet can start near it; later ones (after a disconnect or
        a lost broker) ask for a topic the manager already knows, and save the coordinate query."""
        if self._lookup_link is None:
            self._lookup_link = LookupLink.join(self.lookup_url, self)
        lookup_nc = await self._lookup_link.connection()
        asker = {"client": self.name, "role": self.role, "coord": await self._coordinate()} if first else None
        failed, pause, began = 0, LOOKUP_PAUSE_FIRST_S, time.time()
        while True:
            asked = time.monotonic()
            try:
                answer = await lookup(self.topic, lookup_nc, timeout=LOOKUP_ATTEMPT_S, asker=asker, lost=lost)
            except (LookupError, nats.errors.Error, asyncio.TimeoutError) as error:
                failed += 1
                if failed == 1:  # a streak is told twice: as it begins, and with its count once answered
                    self.events.add("lookup_failed", topic=self.topic, client=self.name, error=str(error))
                last_error = str(error)
                if time.monotonic() - asked >= LOOKUP_PAUSE_MAX_S:
                    pause = LOOKUP_PAUSE_FIRST_S  # a slow failure (a timeout) spaced the asks already
                await asyncio.sleep(pause * random.uniform(0.5, 1.0))
                pause = min(LOOKUP_PAUSE_MAX_S, 2 * pause)
                continue
            if failed:
                self.events.add("lookup_answered", topic=self.topic, client=self.name, failed=failed,
                                failing_s=round(time.time() - began, 3), last_error=last_error)
            return answer["broker"], answer["address"]

    async def _attach(self, broker: str, address: str, timeout: float = 10.0) -> Endpoint:
        attached: list[Endpoint] = []

        async def dropped() -> None:
            if attached:
                self._lost(attached[0])

        ep = Endpoint(broker, address, await self._connect(broker, address, timeout, dropped))
        attached.append(ep)
        if isinstance(ep.nc, nats.aio.client.Client):
            self._spawn(self._watch(ep))
        if self.downtime is not None and "reconnected" not in self.downtime:
            self.downtime["reconnected"] = time.time()  # the paper's end of the downtime (5.7)
        ep.subs.append(await ep.nc.subscribe(f"_ep.ctl.{self.topic}", cb=functools.partial(self._on_ctl, ep)))
        await self._on_attach(ep)
        if self.role == "consumer":  # make before break: subscribed at the new broker before leaving the old
            await ep.nc.flush()
        self._spawn(self._send_report(ep))  # a broker that does not own the topic answers with a redirect
        return ep

    async def _watch(self, ep: Endpoint) -> None:
        """nats-py tells of a dropped connection only once its socket has closed, and a socket closes
        only once what it holds is written: a producer whose path was cut found its connection stale
        within NOTICE_S but said nothing until TCP's retransmission got through after the heal (5.4 s
        after a 6 s site cut, once). A round trip awaited here notices the silent broker either way.
        (The compiled engine's libnats closes at once.)"""
        while not ep.nc.is_closed and not self._closing:
            await asyncio.sleep(PING_INTERVAL_S)
            if ep is not self.current:
                continue
            # not cancelled on time out: nats-py's ping, waiting to be written, would swallow that
            round_trip = asyncio.ensure_future(ep.nc.flush(timeout=NOTICE_S))
            round_trip.add_done_callback(lambda task: task.cancelled() or task.exception())
            done, _ = await asyncio.wait({round_trip}, timeout=NOTICE_S)
            if (not done or round_trip.exception() is not None) and ep is self.current:
                self._lost(ep)
                return

    async def _connect(self, broker: str, address: str, timeout: float, dropped):
        """A connection to a broker (nats-py here; through the node's compiled engine in
        `engine.EngineClient`): `dropped` is awaited each time it is lost."""
        return await connect_nats(address, timeout=timeout, disconnected_cb=dropped)

    def _lookup_connector(self):
        """(node, connect): the lookup connection this client shares with the other clients of its
        node, and how it is made, `connect(url, dropped, back)` (nats-py here; `engine.EngineClient`'s
        own inside the node's namespace when one process serves many nodes)."""
        async def connect(url: str, dropped, back):
            return await connect_nats(url, disconnected_cb=dropped, reconnected_cb=back)
        return None, connect

    async def _on_attach(self, ep: Endpoint) -> None:
        """Subclasses subscribe to data here."""

    def _use(self, ep: Endpoint | None) -> None:
        """`ep` becomes the endpoint in use (None: none, while a baseline move looks the topic up)."""
        self.current = ep

    async def settle(self) -> None:
        """Called once the run's traffic has stopped: the counts are final after it (a client whose
        data plane is the compiled engine asks the engine for them)."""

    async def _detach(self, ep: Endpoint | None) -> None:
        if ep is None:
            return
        for feature in self.features:
            await feature.detach(self, ep)
        try:
            await asyncio.wait_for(ep.nc.drain(), 5.0)
        except Exception:  # noqa: BLE001 - the old broker may be gone
            await close_quietly(ep.nc)

    def _spawn(self, coro) -> None:
        if self._closing:  # a closed client starts nothing (close cancelled what it had)
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- control messages -------------------------------------------------------------------------
    async def _on_ctl(self, ep: Endpoint, msg) -> None:
        if ep is not self.current:
            return  # from a broker this client is leaving
        try:
            control = json.loads(msg.data)
            op = control["op"]
        except (ValueError, KeyError, TypeError):
            return
        if op == "redirect" and control.get("address") and control["address"] != ep.address:
            self._open_downtime("redirect", ep, control.get("broker"))
            self._spawn(self._move(control.get("broker", "?"), control["address"]))
        elif op == "disconnect":
            self._open_downtime("disconnect", ep, None)
            self._spawn(self._relookup(ep))

    def _lost(self, ep: Endpoint) -> None:
        """The connection to the broker in use dropped (its nats-server died or restarted): the
        downtime starts now, and the client looks the topic up again. A broker that comes back is
        found again through the lookup; one that died for good has its topics re-placed by the topic
        manager once its ZooKeeper session expires."""
        if ep is not self.current or self._closing:
            return  # a connection being left or closed on purpose
        self.events.add("broker_lost", topic=self.topic, client=self.name, role=self.role, broker=ep.broker)
        self._open_downtime("broker_lost", ep, None)
        if self.lookup_url:
            self._spawn(self._relookup(ep, lost=True))

    def _open_downtime(self, reason: str, ep: Endpoint, target: str | None) -> None:
        if self.downtime is None:
            self.downtime = {"reason": reason, "start": time.time(), "from": ep.broker, "endpoint": ep}
            self.events.add("control", topic=self.topic, client=self.name, role=self.role, op=reason, broker=ep.broker,
                            to=target)

    async def _move(self, broker: str, address: str) -> None:
        """Enhanced: connect to the new broker, then leave the old one (make before break)."""
        async with self._move_lock:
            old = self.current
            if old is None or old.address == address:
                return
            try:
                new = await self._attach(broker, address)
            except Exception as error:  # noqa: BLE001 - the new broker cannot be reached: ask the lookup
                self.events.add("move_failed", topic=self.topic, client=self.name, to=broker, error=str(error))
                if self.lookup_url:
                    self._spawn(self._relookup(old))
                return
            await self._switch(old, new)
            self._spawn(self._detach(old))
            self.events.add("relinked", topic=self.topic, client=self.name, role=self.role, frm=old.broker, to=broker)

    async def move_to(self, broker: str, address: str, reason: str = "handover") -> None:
        """Move this client to `broker` at `address` (public: a system without a lookup service
        decides where its clients attach, testbed.systems.pubsub.attach). Make before break, as a
        redirect: the downtime opened here (`reason`) closes with the first message through the new
        broker. Nothing happens when the client already uses that address or is closing."""
        if self._closing or self.current is None or self.current.address == address:
            return
        self._open_downtime(reason, self.current, broker)
        await self._move(broker, address)

    @property
    def attached_to(self) -> tuple[str, str] | None:
        """(broker, address) of the connection in use, or None between brokers."""
        return (self.current.broker, self.current.address) if self.current is not None else None

    async def _relookup(self, old: Endpoint, lost: bool = False) -> None:
        """Baseline: the broker dropped us; find the topic's new owner through the topic manager.
        `lost`: the connection dropped (not a disconnect order): the lookups say so, and the topic
        manager probes the broker and fences it if it is gone (fast failover)."""
        async with self._move_lock:
            if self.current is not old:
                return
            self._use(None)
            self._spawn(self._detach(old))
            pause = 0.2
            while not self._closing:  # a client closed meanwhile (an MMOG group change) stops looking
                broker, address = await self._lookup(lost=old.broker if lost else None)
                try:  # a broker that is up accepts at once; a dead one is tried again after the next lookup
                    if address == old.address:  # still the broker we lost: is it back?
                        await reachable(address)
                    new = await self._attach(broker, address, timeout=RELOOKUP_CONNECT_S)
                    break
                except Exception as error:  # noqa: BLE001 - look up again: the owner may change meanwhile
                    self.events.add("attach_failed", topic=self.topic, client=self.name, to=broker,
                                    error=f"{type(error).__name__}: {error}")
                    await asyncio.sleep(pause)
                    pause = min(RELOOKUP_PAUSE_MAX_S, pause * 2)
            else:
                return
            await self._switch(old, new)
            self.events.add("relinked", topic=self.topic, client=self.name, role=self.role, frm=old.broker, to=broker)

    async def _switch(self, old: Endpoint, new: Endpoint) -> None:
        """`new` becomes the endpoint in use: the one step both workflows end a move with, so that
        their downtimes end by the same event. Pending work moves first (`_before_detach`), while
        `current` still holds what the open loop produces."""
        await self._before_detach(old, new)
        self._use(new)

    async def _before_detach(self, old: Endpoint, new: Endpoint) -> None:
        """Subclasses move their pending work to `new` here."""

    def _through(self, ep: Endpoint, at: float | None = None) -> None:
        """A message went through `ep` (at `at`, epoch s; default now): that closes an open downtime if
        `ep` is the new broker."""
        if not ep.used:
            ep.used = True
            if self.downtime is not None and ep is not self.downtime["endpoint"]:
                now = time.time() if at is None else at
                start = self.downtime["start"]
                reconnected = self.downtime.get("reconnected", now)
                self.events.add("downtime", topic=self.topic, client=self.name, role=self.role,
                                reason=self.downtime["reason"], frm=self.downtime["from"], to=ep.broker,
                                start=start, end=now, downtime_s=now - start,
                                reconnected=reconnected, reconnect_s=reconnected - start)
                self.downtime = None

    # -- NC reports -------------------------------------------------------------------------------
    def rate(self) -> float:
        return 0.0

    def byte_rate(self) -> float:
        """Bytes/s through this client, for the load manager's throughput (Pulsar's msgThroughput)."""
        return 0.0

    async def _coordinate(self) -> dict | None:
        if self.coord_fn is None:
            return None
        try:
            value = self.coord_fn()
            if inspect.isawaitable(value):
                value = await value
        except Exception:  # noqa: BLE001 - an agent or proxy that does not answer: report without it
            return None
        if value is None or isinstance(value, dict):
            return value and coord_to_dict(coord_from_dict(value))
        return coord_to_dict(value)

    async def _send_report(self, ep: Endpoint, now: bool = False) -> None:
        """An NC report; `now`: sent at once after a handover (testbed.policies.handover), so the
        broker passes it on without waiting for its period."""
        report = {"client": self.name, "role": self.role, "coord": await self._coordinate(), "rate": self.rate(),
                  "bytes": self.byte_rate()}
        try:
            await ep.nc.publish(f"{NC_REPORT_NOW if now else NC_REPORT}.{self.topic}", json.dumps(report).encode())
        except Exception:  # noqa: BLE001 - a closing connection; the next period reports again
            pass

    async def report_now(self) -> None:
        """Report at once (a handover: `handover_watch.HandoverWatch`)."""
        if self.current is not None:
            await self._send_report(self.current, now=True)

    async def _report_loop(self) -> None:
        # Each client's reports start at its own phase in the period (fixed per client, topic and role): a
        # process holding hundreds of clients started together otherwise reports all at once every
        # period, a burst that made its publishers ~10 ms late every 5 s (bench-tracking's one broker,
        # 400 clients on two nodes: 15 of 40 s saturated).
        await asyncio.sleep(self.nc_period * random.Random(f"{self.name}/{self.topic}/{self.role}").random())
        while True:
            if self.current is not None:
                await self._send_report(self.current)
            await asyncio.sleep(self.nc_period)

    async def close(self) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        if self.current is not None:
            await close_quietly(self.current.nc)
        if self._lookup_link is not None:
            await self._lookup_link.leave(self)
        for feature in self.features:
            feature.close()


class Publisher(TopicClient):
    role = "producer"

    def __init__(self, topic: str, name: str, rate: float, size: int = 1000, precise_s: float = 0.0015,
                 health=None, **kwargs):
        """`precise_s`: the last stretch before a message is due is slept blocking (the kernel's timer
        is ~50 us late, asyncio's ~0.5 ms); use 0 when many publishers share one event loop.
        `health` (a ClientHealth) is told how late each message leaves, for the saturation guard."""
        super().__init__(topic, name, **kwargs)
        self.health = health
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate_value, self.size, self.precise_s = rate, size, precise_s
        self._name_json, self._site_json = _json_str(self.name), _json_str(self.site)
        self._id_prefix = _json_str(f"{self.name}:")[:-1]  # '"name:' without the closing quote
        self.sent = 0
        self.held: deque[tuple[int, float]] = deque()  # (seq, due) produced while disconnected (baseline), sent on reattach
        # A feature that changes how messages leave (durable: stored, then acknowledged) or what their
        # header carries (tracking: an id) is chosen here once, not asked per message.
        sending = next((f.publish for f in self.features if f.publish is not None), None)
        self._publish = functools.partial(sending, self) if sending else self._publish_plain
        self._message_fields = [f.message_field for f in self.features if f.message_field is not None]

    def rate(self) -> float:
        return self.rate_value

    def byte_rate(self) -> float:
        return self.rate_value * self.size

    def payload(self, seq: int, due: float, broker: str = "") -> bytes:
        """The message: a JSON header line ({"id","seq","t","p","s"}, what `json.dumps` writes, and
        the members its features add, e.g. tracking's id as the message leaves through `broker`)
        padded to `size`. Formatted directly: this runs for every message of the run."""
        extra = "".join(field(broker) for field in self._message_fields) if self._message_fields else ""
        head = (f'{{"id":{self._id_prefix}{seq}","seq":{seq},"t":{due!r},"p":{self._name_json},'
                f'"s":{self._site_json}{extra}}}\n')
        data = head.encode()
        return data + b"x" * (self.size - len(data)) if len(data) < self.size else data

    async def _send(self, seq: int, due: float) -> None:
        ep = self.current
        if ep is None:
            self.held.append((seq, due))
            return
        await self._publish(ep, seq, due)
        self._through(ep)

    async def _publish_plain(self, ep: Endpoint, seq: int, due: float) -> None:
        await ep.nc.publish(f"t.{self.topic}", self.payload(seq, due, ep.broker))

    async def _on_attach(self, ep: Endpoint) -> None:
        for feature in self.features:
            await feature.attach(self, ep)

    async def _before_detach(self, old: Endpoint, new: Endpoint) -> None:
        """What was held goes to `new`, then a flush: once the new broker answers it has every held
        message, and the downtime ends, at once in both workflows (the enhanced client, which holds
        nothing, does not wait for its next due message). Until `new` becomes current, what the open
        loop produces keeps joining the queue: drain it all, also what arrived during the flush.
        What a feature still owes goes first (a durable topic's unacknowledged messages)."""
        for feature in self.features:
            await feature.handover(self, old, new)
        while self.held:
            await self._publish(new, *self.held.popleft())
        try:
            await new.nc.flush(timeout=30)  # nats-py: a flush that timed out breaks the read loop at its PONG
            self._through(new)
        except Exception:  # noqa: BLE001 - a new broker that does not answer: its next message tells
            pass
        while self.held:
            await self._publish(new, *self.held.popleft())

    async def run(self, duration: float | None = None, count: int | None = None, start: float | None = None) -> int:
        """Publish open loop until `duration` seconds or `count` messages; returns messages produced."""
        start = start or time.time()
        seq = 0
        while (count is None or seq < count) and (duration is None or seq / self.rate_value < duration):
            due = start + seq / self.rate_value
            now = time.time()
            delay = due - now
            if delay > self.precise_s:
                await asyncio.sleep(delay - self.precise_s)
                now = time.time()
                delay = due - now
            if delay > 0:
                time.sleep(delay) if self.precise_s else await asyncio.sleep(delay)
                now = time.time()
            elif delay <= -self.precise_s:
                await asyncio.sleep(0)  # late: still let the connection and the subscribers run
                now = time.time()
            if self.health is not None:
                self.health.published(now - due, now)
            await self._send(seq, due)
            seq += 1
            self.sent = seq
        if self.current is not None:
            await self.current.nc.flush()
        return seq

    def summary(self) -> dict:
        found = {"role": self.role, "client": self.name, "topic": self.topic, "sent": self.sent, "held": len(self.held),
                 "broker": self.current and self.current.broker,
                 "downtimes": [e for e in self.events.items if e["type"] == "downtime"]}
        for feature in self.features:
            found.update(feature.summary())
        return found


@dataclass
class ProducerStats:
    """One producer's sequence numbers as a subscriber saw them: [first, last] with the gaps still
    open (memory grows with the gaps, not with the messages: a 10-minute paper run delivers
    millions)."""

    first: int
    last: int
    missing: set = field(default_factory=set)
    received: int = 1
    duplicates: int = 0
    reordered: int = 0

    def see(self, seq: int) -> bool:
        """Record `seq`; False for a duplicate."""
        if seq > self.last:
            if seq > self.last + 1:
                self.missing.update(range(self.last + 1, seq))
            self.last = seq
        elif seq in self.missing:
            self.missing.discard(seq)
            self.reordered += 1
        elif seq < self.first:
            self.missing.update(range(seq + 1, self.first))
            self.first = seq
            self.reordered += 1
        else:
            self.duplicates += 1
            return False
        self.received += 1
        return True

    @property
    def lost(self) -> int:
        return len(self.missing)


class TraceWriter:
    """Trace rows as JSON lines, columns as `trace_schema` lists them (what analysis/traces.py turns
    into Parquet), buffered and flushed at least every second, so an interrupted run keeps what it
    recorded."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.handle = self.path.open("a", buffering=1 << 16)
        self.last_flush = time.monotonic()

    def write(self, **row) -> None:
        """One row by column name (a column the schema gains can never shift the others); columns
        left out are null."""
        unknown = set(row) - set(trace_schema.FIELDS)
        if unknown:
            raise TypeError(f"not trace columns: {sorted(unknown)}")
        self.handle.write(json.dumps({name: row.get(name) for name in trace_schema.FIELDS}, separators=(",", ":")) + "\n")
        self._maybe_flush()

    def write_delivery(self, prefix: str, producer: str, msg_id: str, seq: int, sent: float, received: float,
                       suffix: str, track_id: str | None = None) -> None:
        """One delivered message's row, formatted directly (byte for byte what `write` makes of the
        same row, so the columns are still `trace_schema`'s; tested): `prefix` and `suffix` are the
        subscriber's constant fields, from `row_affixes`. This runs for every delivery of the run."""
        track = _json_str(track_id) if track_id else "null"
        self.handle.write(f'{prefix}{_json_str(producer)}{self._consumer},"msg_id":{_json_str(msg_id)},"track_id":{track},"seq":{seq},'
                          f'"send_time":"{sent:.6f}","receive_time":"{received:.6f}"{suffix}\n')
        self._maybe_flush()

    def row_affixes(self, run_id: str, topic: str, consumer: str, broker: str, producer_site: str,
                    consumer_site: str) -> tuple[str, str]:
        self._consumer = f',"consumer":{_json_str(consumer)}'
        prefix = f'{{"run_id":{_json_str(run_id)},"topic":{_json_str(topic)},"producer":'
        suffix = (f',"broker":{_json_str(broker)},"producer_site":{_json_str(producer_site)},'
                  f'"consumer_site":{_json_str(consumer_site)}}}')
        return prefix, suffix

    def _maybe_flush(self) -> None:
        if time.monotonic() - self.last_flush >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        self.handle.flush()
        self.last_flush = time.monotonic()

    def close(self) -> None:
        self.handle.close()


class Subscriber(TopicClient):
    role = "consumer"

    def __init__(self, topic: str, name: str, trace: Path | None = None, keep_latencies: bool = True, **kwargs):
        super().__init__(topic, name, **kwargs)
        self.trace = TraceWriter(trace) if trace else None
        self.stats: dict[str, ProducerStats] = {}
        self.received = 0
        self.malformed = 0
        self.latencies: list[float] | None = [] if keep_latencies else None
        self.brokers_seen: dict[str, int] = {}
        self._affixes: dict[tuple[str, str], tuple[str, str]] = {}  # (broker, producer site) -> trace row parts
        self._window = (time.monotonic(), 0)
        self.received_bytes = 0
        self._byte_window = (time.monotonic(), 0)

    async def start(self) -> None:
        await super().start()
        if self.trace:
            self._spawn(self._flush_loop())

    async def _on_attach(self, ep: Endpoint) -> None:
        for feature in self.features:
            await feature.attach(self, ep)
        subject, deliver = f"t.{self.topic}", functools.partial(self._on_msg, ep)
        for feature in self.features:  # a durable topic's messages come from this consumer's cursor
            subject, deliver = feature.subscription(self, ep) or (subject, deliver)
        ep.subs.append(await ep.nc.subscribe(subject, cb=deliver))
        for feature in self.features:
            await feature.subscribed(self, ep)

    async def _on_msg(self, ep: Endpoint, msg) -> None:
        now = time.time()
        try:
            head = json.loads(msg.data.split(b"\n", 1)[0])
            producer, seq, sent = str(head["p"]), int(head["seq"]), float(head["t"])
        except (ValueError, KeyError, TypeError):
            self.malformed += 1
            return
        self._through(ep)
        stats = self.stats.get(producer)
        if stats is None:
            stats = self.stats[producer] = ProducerStats(seq, seq)
        elif not stats.see(seq):
            return
        self.received += 1
        self.received_bytes += len(msg.data)
        self.brokers_seen[ep.broker] = self.brokers_seen.get(ep.broker, 0) + 1
        if self.latencies is not None:
            self.latencies.append(now - sent)
        if self.trace:
            site = head.get("s", "")
            affixes = self._affixes.get((ep.broker, site))
            if affixes is None:
                affixes = self._affixes[(ep.broker, site)] = self.trace.row_affixes(
                    self.run_id, self.topic, self.name, ep.broker, site, self.site)
            self.trace.write_delivery(affixes[0], producer, str(head.get("id", f"{producer}:{seq}")), seq, sent, now,
                                      affixes[1], head.get("r"))

    def rate(self) -> float:
        started, count = self._window
        now = time.monotonic()
        self._window = (now, self.received)
        return (self.received - count) / max(1e-6, now - started)

    def byte_rate(self) -> float:
        started, count = self._byte_window
        now = time.monotonic()
        self._byte_window = (now, self.received_bytes)
        return (self.received_bytes - count) / max(1e-6, now - started)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            self.trace.flush()

    async def close(self) -> None:
        await super().close()
        if self.trace:
            self.trace.flush()
            self.trace.close()

    def summary(self) -> dict:
        per = {p: {"received": s.received, "first": s.first, "last": s.last, "lost": s.lost,
                   "duplicates": s.duplicates, "reordered": s.reordered} for p, s in self.stats.items()}
        lat = self.latencies or []
        return {"role": self.role, "client": self.name, "topic": self.topic, "received": self.received,
                "lost": sum(s.lost for s in self.stats.values()),
                "duplicates": sum(s.duplicates for s in self.stats.values()),
                "reordered": sum(s.reordered for s in self.stats.values()), "malformed": self.malformed,
                "producers": per, "brokers": self.brokers_seen, "broker": self.current and self.current.broker,
                "latency_p50_s": percentile(lat, 0.5, "higher"), "latency_p99_s": percentile(lat, 0.99, "higher"),
                "downtimes": [e for e in self.events.items if e["type"] == "downtime"]}


# -- coordinates for NC reports --------------------------------------------------------------------
def in_node(fetch, netns: int | None):
    """`fetch` with its thread inside the network namespace of node process `netns` while it runs
    (a client host serves many nodes from the machine's namespace: a query to the zone's NC proxy or
    the node's own Serf agent must leave through the node's own link). None: `fetch` itself."""
    if netns is None:
        return fetch
    from testbed.emulation.netns import entered

    def inside():
        with entered(netns):
            return fetch()
    return inside


def shared_query(fetch, max_age_s: float = 0.0):
    """An async coordinate source for every client of one process: one blocking `fetch` at a time (in
    a thread); callers that ask while it runs share its answer (and, with `max_age_s` > 0, callers
    up to that long after). The clients of a process live on one node (a swarm's UAVs share its
    access link, a game server's avatars its host), so they have one coordinate; each still sends its
    own report. Without it the 16 clients of a swarm asked the zone's NC proxy 16 times at once at
    every migration, 16 threads. No reuse after the answer by default: a swarm that just moved must
    not report its old zone's coordinate (a reuse of 1 s delayed a migration by a report period)."""
    state: dict = {"at": float("-inf"), "value": None, "pending": None}

    async def get():
        if time.monotonic() - state["at"] < max_age_s:
            return state["value"]
        if state["pending"] is None:
            state["pending"] = asyncio.ensure_future(asyncio.to_thread(fetch))
        pending = state["pending"]
        try:
            value = await asyncio.shield(pending)
        finally:
            if state["pending"] is pending and pending.done():
                state["pending"] = None
        state["at"], state["value"] = time.monotonic(), value
        return value

    return get


def coordinate_source(spec: str, node: str, netns: int | None = None):
    """none | serf (this node's agent) | proxy (the zone's NC proxy) | json:{...} (a fixed coordinate);
    `netns`: asked from inside that node process's namespace (`in_node`)."""
    if spec == "none":
        return None
    if spec.startswith("json:"):
        fixed = coord_from_dict(json.loads(spec[5:]))
        return lambda: fixed
    if spec == "serf":
        from testbed.nc.serf import SerfRPC

        def serf():
            with SerfRPC(timeout=1.0) as rpc:
                return rpc.coordinate(node)

        return shared_query(in_node(serf, netns))
    if spec == "proxy":
        from testbed.nc import proxy

        return shared_query(in_node(lambda: proxy.query()["coordinate"], netns))
    raise ValueError(f"--coord: {spec!r} is not none, serf, proxy or json:{{...}}")


async def _main(args) -> int:
    events = EventLog(args.events)
    common = {"lookup_url": args.lookup, "owner": (args.owner_broker, args.owner) if args.owner else None,
              "site": args.site, "run_id": args.run_id, "coord": coordinate_source(args.coord, args.name),
              "nc_period": args.nc_period, "events": events}
    engine = None
    if args.engine == "compiled":  # the data plane in the compiled engine (testbed.systems.pubsub.engine)
        from testbed.systems.pubsub.engine import Engine, EnginePublisher, EngineSubscriber

        engine = await Engine().start()
        if args.mode == "pub":
            client = EnginePublisher(args.topic, args.name, args.rate, args.size, engine=engine, **common)
        else:
            client = EngineSubscriber(args.topic, args.name, trace=args.trace, engine=engine, **common)
    elif args.mode == "pub":
        client = Publisher(args.topic, args.name, args.rate, args.size, precise_s=args.precise, **common)
    else:
        client = Subscriber(args.topic, args.name, trace=args.trace, keep_latencies=True, **common)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await client.start()
    print(json.dumps({"ready": True, "broker": client.current.broker}), flush=True)
    if args.mode == "pub":
        work = asyncio.create_task(client.run(duration=args.duration, count=args.count, start=args.start_at))
    else:
        work = asyncio.create_task(asyncio.sleep(args.duration if args.duration else 1e9))
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    work.cancel()
    waiter.cancel()
    await asyncio.sleep(0)  # the cancelled publisher's halt goes out before the summary is asked
    await client.settle()
    summary = client.summary()
    if args.mode == "sub":
        summary.pop("producers") if len(summary["producers"]) > 50 else None
    await client.close()
    if engine is not None:
        await engine.stop()
    print(json.dumps(summary), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a pub/sub client in a node",
                                     epilog="example: python -m testbed.systems.pubsub.client pub --topic t1 --name cl1 "
                                            "--lookup nats://10.1.0.1:4222 --rate 50 --duration 30")
    parser.add_argument("mode", choices=("pub", "sub"))
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True, help="client name (the node's, or node-member)")
    parser.add_argument("--lookup", help="the cloud broker's nats://ip:4222 answering _ep.lookup")
    parser.add_argument("--owner", help="skip the lookup: the owner's nats://ip:4222")
    parser.add_argument("--owner-broker", default="?", help="the owner's broker name (with --owner)")
    parser.add_argument("--site", default="")
    parser.add_argument("--run-id", default="")
    parser.add_argument("--rate", type=float, default=10.0, help="messages/s (pub)")
    parser.add_argument("--size", type=int, default=1000, help="payload bytes (pub)")
    parser.add_argument("--duration", type=float, help="seconds to run (default: until SIGTERM)")
    parser.add_argument("--count", type=int, help="messages to publish (pub)")
    parser.add_argument("--start-at", type=float, help="epoch time of message 0 (pub)")
    parser.add_argument("--precise", type=float, default=0.0015,
                        help="seconds before each due time slept blocking, for timing accuracy (pub; 0: asyncio only)")
    parser.add_argument("--trace", type=Path, help="trace file, JSON lines (sub)")
    parser.add_argument("--events", type=Path, help="events as JSON lines")
    parser.add_argument("--coord", default="none", help="none | serf | proxy | json:{...}")
    parser.add_argument("--nc-period", type=float, default=5.0)
    parser.add_argument("--engine", choices=("python", "compiled"), default="python",
                        help="the data plane: nats-py, or the compiled client engine")
    args = parser.parse_args(argv)
    if not args.lookup and not args.owner:
        parser.error("give --lookup or --owner")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run_precise(_main(args))


if __name__ == "__main__":
    sys.exit(main())
