"""The compiled client data plane (`engine.c`) seen from Python: one engine process per client node
holds all of the node's broker connections and does what runs per message (open-loop publishing,
receiving with kernel timestamps, sequence tracking, trace rows, the guard's health lines); the
client library keeps the control plane (lookups, NC reports, control messages, both migration
workflows and their downtime events) and drives the engine by commands over a pipe.

`EnginePublisher` and `EngineSubscriber` are the client library's `Publisher` and `Subscriber` with
their data plane moved: the same attachment, moves and events, the same trace rows. A connection
is an `EngineConnection`, which offers what the library uses of a nats-py connection (subscribe,
publish, flush, drain, close), so the control plane's code is the library's own.

Why libnats (the official NATS C client, Debian's libnats-dev) in its external event-loop mode: a
well-kept client whose protocol handling (reconnects, pings, the server's INFO) we do not own,
and which, driven from our loop, costs no thread and no wakeup per connection: on this VM each
wakeup costs ~30 us, more than a message's own work.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import re
import time
from pathlib import Path

from testbed import procs
from testbed.scenario.fields import NATS_MAX_PAYLOAD_B
from testbed.systems.pubsub.client import Endpoint, Publisher, Subscriber

SOURCE = Path(__file__).with_name("engine.c")
BINARY = Path(__file__).with_name("_build") / "engine"
HEADER = Path("/usr/include/nats/nats.h")
TICK_US = 1000  # publishing wakes at most once a tick: one wake sends every message due by then
READ_HOLDOFF_US = 1000  # after a read, data alone wakes the engine again only this much later
#: The engine's scheduling: its wakes are short bursts whose lateness is every due message's, so it asks
#: for SCHED_FIFO below the delay line's (`delayline.DEFAULT_RT_PRIORITY`: the network comes first) and,
#: where it may not, the nice value (`engine.c` says why). It never busy-polls: the CPU it gets is still
#: only what its work needs (`make bench-capacity`).
RT_PRIORITY = 5
NICE = -10
_TOKEN = re.compile(r"\S+")
#: The longest payload a `pub` line may carry (nats-server's own limit): the engine sizes its command
#: buffer by it and refuses a longer one (its data would then be read as command lines).
MAX_PAYLOAD = NATS_MAX_PAYLOAD_B


class EngineUnavailable(RuntimeError):
    """The engine cannot be built here (no libnats-dev, no compiler)."""


class EngineError(RuntimeError):
    """The engine refused a command, or died."""


def ensure_built() -> Path:
    """The engine's binary, compiled on first use (as the delay line is)."""
    if not HEADER.exists():
        raise EngineUnavailable(f"the compiled client engine needs the NATS C client: {HEADER} is missing "
                                "(apt-get install -y libnats-dev, or `make setup`)")
    try:
        return procs.build_c(SOURCE, BINARY, libs=["-lnats", "-lm", "-lpthread"])
    except procs.BuildError as error:
        raise EngineUnavailable(f"the compiled client engine: {error}") from None


def _token(value: str, what: str) -> str:
    """A word of a command line: names, subjects and addresses never hold whitespace."""
    value = str(value)
    if not _TOKEN.fullmatch(value):
        raise ValueError(f"{what} {value!r} cannot be passed to the client engine (empty or with whitespace)")
    return value


class Message:
    """What a subscription callback gets (the part of nats-py's Msg the library reads)."""

    __slots__ = ("subject", "data")

    def __init__(self, subject: str, data: bytes):
        self.subject, self.data = subject, data


def health_path(health: Path) -> Path:
    """Where the engine of a process whose health file is `health` writes its per-second lines (the
    process's own probe keeps `health`; the monitor's glob and the guard read both)."""
    return Path(health).with_suffix(".engine.jsonl")


class Engine:
    """One engine process and its pipe: requests answered in order of their ids, events dispatched."""

    def __init__(self, health: Path | None = None, tick_us: int = TICK_US, read_holdoff_us: int = READ_HOLDOFF_US,
                 binary: Path | None = None):
        """`binary`: another build of the engine to run as it is (a benchmark's A/B); None: this tree's."""
        self.health, self.tick_us, self.read_holdoff_us, self.binary = health, tick_us, read_holdoff_us, binary
        self.process: asyncio.subprocess.Process | None = None
        # one counter per kind of id: requests are many (every flush, route, subscribe), and the engine
        # keeps clients in a table of 4096 and connections in 4096 slots (id modulo 4096)
        self._requests, self._connections, self._clients = itertools.count(1), itertools.count(1), itertools.count(1)
        # ids the engine has freed, given again lowest first: one engine serving every client node of a
        # machine opens thousands of connections and subscriptions over a run (moves, group changes)
        self._free_connections: list[int] = []
        self._free_clients: list[int] = []
        self._open: dict[int, "EngineConnection"] = {}
        self._waiting: dict[int, asyncio.Future] = {}
        self._subs: dict[int, tuple[str, object]] = {}  # sid -> (subject, callback)
        self._firsts: dict[int, object] = {}             # data sid -> callback on its first message
        self._lost: dict[int, object] = {}               # connection -> callback
        self._back: dict[int, object] = {}               # connection -> callback once reconnected
        self._namespaces: dict[int, int] = {}            # node pid -> the engine's index of its namespace
        self._of_node: dict[int, tuple[set, set]] = {}   # node pid -> (its connections, its publishers)
        self._done: dict[int, asyncio.Future] = {}       # publisher -> future of messages sent
        self.counts: dict[int, tuple[int, int]] = {}      # subscriber -> (received, bytes)
        self.closed_connections: set[int] = set()
        self._reader: asyncio.Task | None = None
        self.failure: str | None = None

    async def start(self) -> "Engine":
        binary = self.binary or ensure_built()
        argv = [str(binary), "--tick-us", str(int(self.tick_us)), "--read-holdoff-us", str(int(self.read_holdoff_us)),
                "--nice", str(NICE), "--rt-prio", str(RT_PRIORITY), "--max-payload", str(MAX_PAYLOAD)]
        if self.health:
            argv += ["--health", str(health_path(self.health))]
        self.process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                            stdout=asyncio.subprocess.PIPE, limit=1 << 24)
        line = await asyncio.wait_for(self.process.stdout.readline(), 10)
        if line.strip() != b"ready":
            raise EngineError(f"the client engine did not start (said {line!r}, exit {self.process.returncode})")
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return self

    def next_id(self) -> int:
        """A request's (or a subscription's) id."""
        return next(self._requests)

    def next_client(self) -> int:
        """A publisher's or subscriber's slot in the engine (at most 8192 at once per engine process)."""
        return heapq.heappop(self._free_clients) if self._free_clients else next(self._clients)

    def release_client(self, idx: int) -> None:
        """A forgotten subscriber's slot, free in the engine: its id may be given again."""
        self.counts.pop(idx, None)
        heapq.heappush(self._free_clients, idx)

    # -- the pipe -------------------------------------------------------------------------------------
    def send(self, line: str, data: bytes = b"") -> None:
        if self.failure or self.process is None or self.process.stdin.is_closing():
            raise EngineError(f"the client engine is gone: {self.failure or 'not started'}")
        self.process.stdin.write(line.encode() + b"\n" + data)

    async def request(self, words: list, data: bytes = b"", timeout: float | None = 30.0) -> str:
        """Send `op REQ words...`; the rest of the engine's "ok REQ ..." line, or EngineError."""
        req = self.next_id()
        future = asyncio.get_running_loop().create_future()
        self._waiting[req] = future
        self.send(" ".join([words[0], str(req), *map(str, words[1:])]), data)
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._waiting.pop(req, None)

    async def _read(self) -> None:
        stdout = self.process.stdout
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                op, _, rest = line.decode().rstrip("\n").partition(" ")
                if op == "msg":
                    sid, length = map(int, rest.split())
                    data = (await stdout.readexactly(length + 1))[:-1]
                    subject, callback = self._subs.get(sid, (None, None))
                    if callback is not None:
                        asyncio.get_running_loop().create_task(callback(Message(subject, data)))
                elif op in ("ok", "err"):
                    req, _, text = rest.partition(" ")
                    future = self._waiting.get(int(req))
                    if future is not None and not future.done():
                        future.set_result(text) if op == "ok" else future.set_exception(EngineError(text))
                elif op == "counts":
                    idx, received, size = map(int, rest.split())
                    self.counts[idx] = (received, size)
                elif op == "first":
                    sid, at = rest.split()
                    callback = self._firsts.pop(int(sid), None)
                    if callback is not None:
                        callback(float(at))
                elif op == "done":
                    idx, sent = map(int, rest.split())
                    future = self._done.get(idx)
                    if future is not None and not future.done():
                        future.set_result(sent)
                elif op == "lost":
                    callback = self._lost.get(int(rest))
                    if callback is not None:
                        asyncio.get_running_loop().create_task(callback())
                elif op == "back":
                    callback = self._back.get(int(rest))
                    if callback is not None:
                        asyncio.get_running_loop().create_task(callback())
                elif op == "closed":
                    self.closed_connections.add(int(rest))
                elif op == "gone":  # the engine freed the connection's slot
                    heapq.heappush(self._free_connections, int(rest))
        finally:
            code = await self.process.wait()
            self.failure = self.failure or f"the client engine exited with status {code}"
            for future in [*self._waiting.values(), *self._done.values()]:
                if not future.done():
                    future.set_exception(EngineError(self.failure))

    # -- what the clients ask -------------------------------------------------------------------------
    async def namespace(self, pid: int) -> int:
        """The engine's index of the network namespace of node process `pid`, opened on first use."""
        if pid not in self._namespaces:
            index = len(self._namespaces)
            self._namespaces[pid] = index
            try:
                await self.request(["netns", index, f"/proc/{int(pid)}/ns/net"], timeout=10)
            except BaseException:
                del self._namespaces[pid]
                raise
        return self._namespaces[pid]

    async def connect(self, broker: str, address: str, timeout: float, dropped, netns: int | None = None,
                      back=None) -> "EngineConnection":
        """A connection to `address`; with `netns` (a node's pid) its socket lives in that node's network
        namespace (a client host serving many nodes: `clienthost`). `dropped` and `back` are awaited
        when it is lost and when libnats has reconnected it."""
        space = "-" if netns is None else await self.namespace(netns)
        conn = heapq.heappop(self._free_connections) if self._free_connections else next(self._connections)
        self.closed_connections.discard(conn)
        self._lost[conn] = dropped
        if back is not None:
            self._back[conn] = back
        try:
            await self.request(["connect", conn, _token(address, "address"), _token(broker, "broker"),
                                int(timeout * 1000), space], timeout=timeout + 5)
        except BaseException as error:
            self._lost.pop(conn, None)
            self._back.pop(conn, None)
            if isinstance(error, EngineError) and self.failure is None:
                heapq.heappush(self._free_connections, conn)  # refused: the engine holds no slot for it
            raise
        if netns is not None:
            self.of_node(netns)[0].add(conn)
        connection = self._open[conn] = EngineConnection(self, conn)
        return connection

    def of_node(self, pid: int) -> tuple[set, set]:
        """(connections, publishers) of the node whose namespace is process `pid`'s."""
        return self._of_node.setdefault(pid, (set(), set()))

    async def crash(self, pid: int) -> None:
        """The node of process `pid` fails (a scenario fault in a client host): its publishers stop
        producing and its connections close at once, as its own process's would when killed."""
        connections, publishers = self._of_node.pop(pid, (set(), set()))
        for idx in publishers:
            self.send(f"halt {self.next_id()} {idx}")
        for conn in connections:
            connection = self._open.get(conn)
            if connection is not None and not connection.ended:
                connection.end()
                self.send(f"close {self.next_id()} {conn} now")
        await self.process.stdin.drain()

    async def stop(self) -> None:
        """Traces and health flushed, the process ended (killed if it does not end in 10 s)."""
        if self.process is None or self.process.returncode is not None:
            return
        try:
            self.send("exit")
            await self.process.stdin.drain()
            self.process.stdin.close()
            await asyncio.wait_for(self.process.wait(), 10)
        except (EngineError, ConnectionError, asyncio.TimeoutError):
            self.process.kill()
            await self.process.wait()
        if self._reader is not None:
            await self._reader


class EngineConnection:
    """A broker connection held by the engine, with the part of nats-py's interface the client library
    uses; what its data subscriptions receive never comes up the pipe."""

    def __init__(self, engine: Engine, conn: int):
        self.engine, self.id = engine, conn
        self._replies = itertools.count(1)
        self.ended = False  # closed or drained by us: the engine may give its id to another connection

    @property
    def is_closed(self) -> bool:
        return self.ended or self.id in self.engine.closed_connections

    def end(self) -> None:
        """From now on this object sends nothing under its id (a new connection may get it once gone)."""
        self.ended = True
        self.engine._lost.pop(self.id, None)
        self.engine._back.pop(self.id, None)
        if self.engine._open.get(self.id) is self:
            del self.engine._open[self.id]

    def _check(self) -> None:
        if self.ended:
            raise EngineError(f"connection {self.id} is closed")

    async def subscribe(self, subject: str, cb) -> "EngineSubscription":
        self._check()
        sid = self.engine.next_id()
        self.engine._subs[sid] = (subject, cb)
        await self.engine.request(["sub", sid, self.id, _token(subject, "subject")])
        return EngineSubscription(self.engine, sid)

    async def data_subscribe(self, subject: str, subscriber: int, on_first) -> "EngineSubscription":
        self._check()
        sid = self.engine.next_id()
        self.engine._firsts[sid] = on_first
        await self.engine.request(["dsub", sid, self.id, _token(subject, "subject"), subscriber])
        return EngineSubscription(self.engine, sid)

    async def publish(self, subject: str, payload: bytes) -> None:
        self._check()
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"a payload of {len(payload)} B is over the engine's limit of {MAX_PAYLOAD} B")
        self.engine.send(f"pub {self.id} {_token(subject, 'subject')} {len(payload)}", payload)

    async def request(self, subject: str, payload: bytes, timeout: float = 10.0) -> Message:
        """A request and its one answer (a lookup): a subscription to a fresh inbox, the request with
        that inbox as its reply subject, the subscription ended with the answer (asyncio.TimeoutError
        without one). The engine passes a subscription's messages up under its subject, so each request
        has one of its own."""
        inbox = f"_INBOX.E{self.engine.process.pid}.{self.id}.{next(self._replies)}"
        answer = asyncio.get_running_loop().create_future()

        async def answered(msg: Message) -> None:
            if not answer.done():
                answer.set_result(msg)
        subscription = await self.subscribe(inbox, answered)
        try:
            if len(payload) > MAX_PAYLOAD:
                raise ValueError(f"a payload of {len(payload)} B is over the engine's limit of {MAX_PAYLOAD} B")
            self._check()
            self.engine.send(f"pubr {self.id} {_token(subject, 'subject')} {inbox} {len(payload)}", payload)
            return await asyncio.wait_for(answer, timeout)
        finally:
            if self.engine.failure is None:
                await subscription.unsubscribe()

    async def flush(self, timeout: float = 30.0) -> None:
        self._check()
        await self.engine.request(["flush", self.id], timeout=timeout)

    async def drain(self) -> None:
        if self.ended:
            return
        self.end()
        await self.engine.request(["close", self.id, "drain"], timeout=None)

    async def close(self) -> None:
        if self.ended:
            return
        self.end()
        if self.engine.failure is None and self.engine.process.returncode is None:
            await self.engine.request(["close", self.id, "now"], timeout=10)


class EngineSubscription:
    def __init__(self, engine: Engine, sid: int):
        self.engine, self.sid = engine, sid

    async def unsubscribe(self) -> None:
        self.engine._subs.pop(self.sid, None)
        self.engine._firsts.pop(self.sid, None)
        await self.engine.request(["unsub", self.sid])


class EngineClient:
    """What both engine clients change in the library: connections come from the node's engine. In a
    client host (`netns`: the node's pid) they are made inside the node's network namespace, and so is
    the lookup connection, which then goes through the engine too."""

    engine: Engine
    netns: int | None = None

    async def _connect(self, broker: str, address: str, timeout: float, dropped):
        return await self.engine.connect(broker, address, timeout, dropped, netns=self.netns)

    def _lookup_connector(self):
        if self.netns is None:
            return super()._lookup_connector()
        engine, netns = self.engine, self.netns

        async def connect(url: str, dropped, back):
            return await engine.connect("lookup", url, 10.0, dropped, netns=netns, back=back)
        return netns, connect


class EnginePublisher(EngineClient, Publisher):
    """A publisher whose open loop runs in the engine: it sends message i at start + i/rate to the
    connection in use, holds what it produces while there is none (a baseline move) and, when a
    move ends, sends what it held and confirms the new broker has it by a round trip, as
    `Publisher._before_detach` does."""

    def __init__(self, topic: str, name: str, rate: float, size: int = 1000, *, engine: Engine, **kwargs):
        kwargs.pop("precise_s", None)
        kwargs.pop("health", None)  # the engine measures its own lateness (its health file)
        if kwargs.get("features"):
            raise ValueError("topic features (durable topics, message tracking) need the Python client")
        self.netns = kwargs.pop("netns", None)
        super().__init__(topic, name, rate, size, **kwargs)
        self.engine, self.idx, self._registered = engine, engine.next_client(), False
        _token(name, "client name"), _token(self.site or "-", "site")

    async def run(self, duration: float | None = None, count: int | None = None, start: float | None = None) -> int:
        if count is not None:
            raise ValueError("an engine publisher runs for a duration, not a count")
        start = start or time.time()
        future = asyncio.get_running_loop().create_future()
        self.engine._done[self.idx] = future
        route = self.current.nc.id if self.current is not None else "-"
        await self.engine.request(["publisher", self.idx, f"t.{self.topic}", self.name, self.site or "-",
                                   repr(float(self.rate_value)), int(self.size), repr(float(start)),
                                   repr(float(duration if duration is not None else 1e12)), route])
        self._registered = True
        if self.netns is not None:
            self.engine.of_node(self.netns)[1].add(self.idx)
        try:
            self.sent = await future
        except asyncio.CancelledError:
            self.engine.send(f"halt {self.engine.next_id()} {self.idx}")
            raise
        return self.sent

    def _use(self, ep: Endpoint | None) -> None:
        super()._use(ep)
        if ep is None and self._registered:  # a baseline move: what the open loop produces is held
            self.engine.send(f"route {self.engine.next_id()} {self.idx} -")

    async def _before_detach(self, old: Endpoint, new: Endpoint) -> None:
        if not self._registered:
            return
        try:  # what was held goes to `new`, then a round trip: once answered, the new broker has it all
            await self.engine.request(["route", self.idx, new.nc.id], timeout=30)
            self._through(new)
        except (EngineError, asyncio.TimeoutError):
            pass  # a new broker that does not answer: its next message tells

    async def settle(self) -> None:
        if self._registered and self.engine.failure is None:
            counts = json.loads(await self.engine.request(["summary", self.idx], timeout=10))
            self.sent = counts["sent"]
            self.held = [None] * counts["held"]


class EngineSubscriber(EngineClient, Subscriber):
    """A subscriber whose messages the engine receives, checks and writes to the trace; the library
    hears only of the first message through each connection (which ends a downtime)."""

    def __init__(self, topic: str, name: str, trace: Path | None = None, *, engine: Engine, **kwargs):
        kwargs.pop("keep_latencies", None)
        if kwargs.get("features"):
            raise ValueError("topic features (durable topics, message tracking) need the Python client")
        self.netns = kwargs.pop("netns", None)
        super().__init__(topic, name, trace=None, keep_latencies=False, **kwargs)
        self.engine, self.idx, self.trace_path = engine, engine.next_client(), trace
        self._final: dict | None = None
        self._forgotten = False

    async def start(self) -> None:
        await self.engine.request(["subscriber", self.idx, _token(self.trace_path or "-", "trace path"),
                                   _token(self.run_id or "-", "run id"), _token(self.topic, "topic"),
                                   _token(self.name, "client name"), _token(self.site or "-", "site")])
        await super().start()

    async def _on_attach(self, ep: Endpoint) -> None:
        if self._forgotten:  # closed meanwhile (a move under way): its slot may be another subscriber's
            raise EngineError(f"subscriber {self.name} of {self.topic} is closed")
        ep.subs.append(await ep.nc.data_subscribe(f"t.{self.topic}", self.idx, lambda at: self._through(ep, at)))

    @property
    def received(self) -> int:
        if self._forgotten:  # its slot may be another subscriber's now
            return self._final["received"] if self._final else 0
        return self.engine.counts.get(self.idx, (0, 0))[0]

    @received.setter
    def received(self, value: int) -> None:
        pass  # counted by the engine

    @property
    def received_bytes(self) -> int:
        if self._forgotten:
            return self._final["bytes"] if self._final else 0
        return self.engine.counts.get(self.idx, (0, 0))[1]

    @received_bytes.setter
    def received_bytes(self, value: int) -> None:
        pass

    async def settle(self) -> None:
        if self.engine.failure is None and not self._forgotten:
            self._final = json.loads(await self.engine.request(["summary", self.idx], timeout=10))
            self.engine.counts[self.idx] = (self._final["received"], self._final["bytes"])

    async def close(self) -> None:
        """Connections closed, the final counts kept, the engine's trace file closed (an MMOG
        subscription closes at each group change; a later one to the same topic is another)."""
        await super().close()
        await self.settle()
        if self.engine.failure is None and not self._forgotten:
            await self.engine.request(["forget", self.idx], timeout=10)
            self._forgotten = True
            self.engine.release_client(self.idx)
        self._forgotten = True

    def summary(self) -> dict:
        final = self._final or {"received": self.received, "lost": 0, "duplicates": 0, "reordered": 0,
                                "malformed": 0, "producers": {}}
        return {"role": self.role, "client": self.name, "topic": self.topic, "received": final["received"],
                "lost": final["lost"], "duplicates": final["duplicates"], "reordered": final["reordered"],
                "malformed": final["malformed"], "producers": final["producers"], "brokers": final.get("brokers", {}),
                "broker": self.current and self.current.broker, "engine": True,
                "downtimes": [e for e in self.events.items if e["type"] == "downtime"]}
