"""One broker's message tracking (Jun and Astley, 3.2), fed by the tracker process with every message the
broker carries and every subscriber that attaches or leaves; clock passed in, so it is tested
without a network.

Histories: the publisher history (messages whose id names this broker: its publishers' own), a
routing history per origin broker (messages that came from another broker: forwarded during a
migration's grace period, or bridged back to consumers not moved yet), and a subscriber history per
(origin broker, subscriber) for each subscriber attached to the message's topic. With `bloom` each
history keeps a current filter and its timestamp range R, stored when it holds n keys or T_p after
its first key; with `log` every tracking event is one 20-byte record in a single buffer, stored when
the buffer is full or T_p after its first record (the paper's ASYNC). Publishing phase: a local
publisher's timestamp more than T_s from the broker's clock earns the publisher a correction."""

from __future__ import annotations

from dataclasses import dataclass

from testbed.tracking.bloom import BloomFilter
from testbed.tracking.config import TrackingConfig
from testbed.tracking.msgid import node_id
from testbed.tracking.store import BLOOM, LOG, Stored

SKEW_NOTICE_EVERY_S = 1.0  # a publisher is told its correction at most this often (it is in flight)


@dataclass
class _Current:
    """A history's (or the log's) in-memory buffer: B_j and R_j, and when its first key came."""

    born: float
    t_start: int
    t_end: int
    bloom: BloomFilter | None = None
    log: bytearray | None = None
    count: int = 0

    def cover(self, t_ms: int) -> None:
        if t_ms < self.t_start:
            self.t_start = t_ms
        elif t_ms > self.t_end:
            self.t_end = t_ms


class Recorder:
    def __init__(self, broker: str, config: TrackingConfig, on_history=lambda code, entry: None):
        if not config.enabled:
            raise ValueError("a recorder needs a tracking strategy (log or bloom)")
        self.broker, self.id, self.config = broker, node_id(broker), config
        self.on_history = on_history  # told each new history (code, {"kind", "origin", "subscriber"})
        self.codes: dict[tuple[str, int, str], int] = {}
        self.current: dict[int, _Current] = {}  # bloom: per history code; log: the one buffer under code 0
        self.attached: dict[str, set[str]] = {}  # topic -> subscribers (the attachment map's present)
        self.pending: list[Stored] = []  # stored buffers the caller has not written yet
        self._noticed: dict[int, float] = {}
        self.messages = self.published = self.events = self.corrections = 0

    # -- the three phases -------------------------------------------------------------------------
    def message(self, topic: str, raw: bytes, now_s: float, forwarded: bool = False) -> int | None:
        """Record message id `raw` on `topic`; returns a skew correction (ms) for its publisher, or None."""
        origin, t_ms = int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:14], "big")
        self.messages += 1
        local = origin == self.id
        self.published += local
        self._add(self._code("pub" if local else "route", origin), raw, t_ms, now_s)
        for subscriber in self.attached.get(topic, ()):
            self._add(self._code("sub", origin, subscriber), raw, t_ms, now_s)
        if local and not forwarded:
            return self._skew(raw, t_ms, now_s)
        return None

    def attach(self, subscriber: str, topic: str) -> None:
        self.attached.setdefault(topic, set()).add(subscriber)

    def detach(self, subscriber: str, topic: str) -> None:
        self.attached.get(topic, set()).discard(subscriber)

    def _skew(self, raw: bytes, t_ms: int, now_s: float) -> int | None:
        off = round(now_s * 1000) - t_ms
        if abs(off) <= self.config.skew_tolerance_s * 1000:
            return None
        publisher = int.from_bytes(raw[:4], "big")
        if now_s - self._noticed.get(publisher, float("-inf")) < SKEW_NOTICE_EVERY_S:
            return None
        self._noticed[publisher] = now_s
        self.corrections += 1
        return off

    # -- histories --------------------------------------------------------------------------------
    def _code(self, kind: str, origin: int, subscriber: str = "") -> int:
        key = (kind, origin, subscriber)
        code = self.codes.get(key)
        if code is None:
            code = self.codes[key] = len(self.codes) + 1
            self.on_history(code, {"kind": kind, "origin": origin, "subscriber": subscriber})
        return code

    def _add(self, code: int, raw: bytes, t_ms: int, now_s: float) -> None:
        self.events += 1
        if self.config.strategy == "bloom":
            current = self.current.get(code)
            if current is None:
                f = self.config.filter
                current = self.current[code] = _Current(now_s, t_ms, t_ms, bloom=BloomFilter(f.m, f.k))
            current.bloom.add(raw)
            current.count += 1
            current.cover(t_ms)
            if current.count >= self.config.filter.n:
                self._store(code, "full")
        else:
            current = self.current.get(0)
            if current is None:
                current = self.current[0] = _Current(now_s, t_ms, t_ms, log=bytearray())
            current.log += code.to_bytes(4, "big") + raw
            current.count += 1
            current.cover(t_ms)
            if len(current.log) + len(raw) + 4 > self.config.buffer_bytes:
                self._store(0, "full")

    def _store(self, code: int, reason: str) -> None:
        current = self.current.pop(code)
        if current.bloom is not None:
            f = current.bloom
            self.pending.append(Stored(BLOOM, code, current.t_start, current.t_end, current.count, bytes(f.bits),
                                       m=f.m, k=f.k, reason=reason))
        else:
            self.pending.append(Stored(LOG, 0, current.t_start, current.t_end, current.count, bytes(current.log),
                                       reason=reason))

    def tick(self, now_s: float) -> None:
        """Store every buffer whose first key is T_p old (the persistence interval)."""
        limit = self.config.persistence_s
        for code in [c for c, cur in self.current.items() if now_s - cur.born >= limit]:
            self._store(code, "interval")

    def close(self) -> None:
        for code in list(self.current):
            self._store(code, "stop")

    def take(self) -> list[Stored]:
        """What was stored since the last call, to write (one disk force per call)."""
        stored, self.pending = self.pending, []
        return stored
