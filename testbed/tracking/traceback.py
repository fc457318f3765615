"""The traceback query (Jun and Astley, 3.3): given a message id, which brokers routed it and which
subscribers it was delivered to, by a breadth-first search over the brokers' stored histories,
starting at the origin broker the id names. Every broker may forward to every other (the topic
manager can move a topic anywhere), so the origin's neighbours are all brokers; a broker whose
routing history does not hold the message is not searched further (the paper's optimisation).

Each history test reports the expected false-positive probability of its matching set (eq. 2 over
the filters whose range R holds the timestamp, each at its own fill); the answer adds them up as the
expected number of wrong entries."""

from __future__ import annotations

from dataclasses import dataclass, field

from testbed.tracking.bloom import BloomFilter, efpp
from testbed.tracking.msgid import MessageId, unpack
from testbed.tracking.store import BLOOM, BrokerFiles

INFINITY = float("inf")


@dataclass
class Test:
    broker: str
    kind: str
    subscriber: str
    positive: bool
    efpp: float
    filters: int


@dataclass
class Answer:
    id: MessageId
    origin: str | None
    publisher: str | None
    published: bool  # the origin's publisher history holds it
    routed: list[str] = field(default_factory=list)  # other brokers whose routing history holds it
    delivered: dict[str, list[str]] = field(default_factory=dict)  # subscriber -> brokers that delivered it
    tests: list[Test] = field(default_factory=list)
    brokers_consulted: int = 0

    @property
    def filters_consulted(self) -> int:
        return sum(t.filters for t in self.tests)

    @property
    def expected_false(self) -> float:
        """Expected number of wrong entries: the sum of the tests' efpp (3.4's D' x efpp)."""
        return sum(t.efpp for t in self.tests)

    @property
    def brokers(self) -> list[str]:
        """The brokers the message crossed: its origin and those that routed it."""
        return ([self.origin] if self.origin and self.published else []) + self.routed

    def to_json(self) -> dict:
        positive = {(t.broker, t.kind, t.subscriber): t.efpp for t in self.tests if t.positive}
        return {"id": self.id.hex(), "publisher": self.publisher, "origin": self.origin, "published": self.published,
                "timestamp_ms": self.id.t_ms, "brokers": self.brokers, "routed": self.routed,
                "delivered": {s: b for s, b in sorted(self.delivered.items())},
                "efpp": {f"{b}/{k}/{s}".rstrip("/"): round(e, 9) for (b, k, s), e in sorted(positive.items())},
                "expected_false_entries": self.expected_false, "brokers_consulted": self.brokers_consulted,
                "filters_consulted": self.filters_consulted}


class _Broker:
    """One broker's histories, indexed for queries."""

    def __init__(self, files: BrokerFiles):
        self.name, self.id = files.name, files.id
        config = files.meta.get("config", {})
        self.window_ms = 1000 * (config.get("skew_tolerance_s", 0.0) + config.get("jitter_s", 0.0))
        self.exact = config.get("strategy") == "log"
        self.codes = {(h["kind"], int(h["origin"]), h["subscriber"]): code for code, h in files.histories.items()}
        self.blooms: dict[int, list[tuple[int, int, BloomFilter]]] = {}
        self.logs: dict[int, set[bytes]] = {}
        self.log_ranges: list[tuple[int, int]] = []
        for r in files.records:
            if r.strategy == BLOOM:
                self.blooms.setdefault(r.code, []).append((r.t_start, r.t_end, BloomFilter(r.m, r.k, r.payload, r.count)))
            else:
                self.log_ranges.append((r.t_start, r.t_end))
                view = r.payload
                for at in range(0, len(view) - 19, 20):
                    self.logs.setdefault(int.from_bytes(view[at:at + 4], "big"), set()).add(view[at + 4:at + 20])
        self.attachments: dict[str, list[tuple[float, float]]] = {}
        opened: dict[tuple[str, str], float] = {}
        for event in files.attach:
            key = (event["subscriber"], event["topic"])
            if event["op"] == "attach":
                opened.setdefault(key, event["t_ms"])
            elif key in opened:
                self.attachments.setdefault(key[0], []).append((opened.pop(key), event["t_ms"]))
        for (subscriber, _), start in opened.items():
            self.attachments.setdefault(subscriber, []).append((start, INFINITY))

    def attached(self, t_ms: int) -> list[str]:
        """Subscribers attached here within the window around `t_ms` (the map is on the broker's
        clock, the timestamp on the publisher's, and a message may arrive late)."""
        low, high = t_ms - self.window_ms, t_ms + self.window_ms
        return sorted(s for s, spans in self.attachments.items() if any(a <= high and b >= low for a, b in spans))

    def test(self, kind: str, origin: int, subscriber: str, raw: bytes, t_ms: int) -> Test:
        code = self.codes.get((kind, origin, subscriber))
        if code is None:
            return Test(self.name, kind, subscriber, False, 0.0, 0)
        if self.exact:
            matching = sum(1 for a, b in self.log_ranges if a <= t_ms <= b)
            return Test(self.name, kind, subscriber, raw in self.logs.get(code, ()), 0.0, matching)
        matching = [f for a, b, f in self.blooms.get(code, ()) if a <= t_ms <= b]
        return Test(self.name, kind, subscriber, any(raw in f for f in matching), efpp(f.fpp() for f in matching),
                    len(matching))


class Traceback:
    """A run's tracking files, loaded once, answering traceback queries."""

    def __init__(self, brokers: dict[str, BrokerFiles]):
        if not brokers:
            raise ValueError("the run has no tracking files (was tracking on? see the scenario's tracking block)")
        self.brokers = {name: _Broker(files) for name, files in sorted(brokers.items())}
        self.by_id = {b.id: name for name, b in self.brokers.items()}
        self.names = {pid: name for files in brokers.values() for pid, name in files.names.items()}
        self.order = sorted(self.brokers)

    def query(self, raw: bytes) -> Answer:
        mid = unpack(raw)
        origin = self.by_id.get(mid.broker)
        answer = Answer(mid, origin, self.names.get(mid.publisher), published=False)
        frontier = [origin] if origin else list(self.order)
        explored: set[str] = set()
        while frontier:
            name = frontier.pop(0)
            if name in explored:
                continue
            explored.add(name)
            broker = self.brokers[name]
            answer.brokers_consulted += 1
            kind = "pub" if name == origin else "route"
            test = broker.test(kind, mid.broker, "", raw, mid.t_ms)
            answer.tests.append(test)
            if test.positive:
                if kind == "pub":
                    answer.published = True
                else:
                    answer.routed.append(name)
            if not (test.positive or name == origin):
                continue
            for subscriber in broker.attached(mid.t_ms):
                sub_test = broker.test("sub", mid.broker, subscriber, raw, mid.t_ms)
                answer.tests.append(sub_test)
                if sub_test.positive:
                    answer.delivered.setdefault(subscriber, []).append(name)
            frontier += [other for other in self.order if other not in explored]
        return answer

