"""Message ids as Jun and Astley's Table 1 lays them out: publisher id (4 bytes), the broker the publisher
is attached to (4 bytes), a millisecond timestamp from the publisher's clock plus its skew
adjustment (6 bytes), and a counter for messages of the same millisecond (2 bytes): 16 bytes, 32 hex
digits in a message's header (`"r"`)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

ID_BYTES = 16


def node_id(name: str) -> int:
    """A publisher's or broker's 4-byte id: CRC-32 of its name (the files map ids back to names)."""
    return zlib.crc32(name.encode())


@dataclass(frozen=True)
class MessageId:
    publisher: int
    broker: int
    t_ms: int
    counter: int

    def pack(self) -> bytes:
        return (self.publisher.to_bytes(4, "big") + self.broker.to_bytes(4, "big") + self.t_ms.to_bytes(6, "big")
                + self.counter.to_bytes(2, "big"))

    def hex(self) -> str:
        return self.pack().hex()


def unpack(raw: bytes) -> MessageId:
    if len(raw) != ID_BYTES:
        raise ValueError(f"a message id has {ID_BYTES} bytes, not {len(raw)}")
    return MessageId(int.from_bytes(raw[:4], "big"), int.from_bytes(raw[4:8], "big"),
                     int.from_bytes(raw[8:14], "big"), int.from_bytes(raw[14:], "big"))


def parse(text: str) -> MessageId:
    """A message id from its 32 hex digits."""
    try:
        raw = bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a message id (32 hex digits)") from None
    return unpack(raw)


class IdClock:
    """A publisher's ids: its clock in ms plus the skew adjustment delta (which the publishing broker
    corrects when a timestamp is out of its tolerance), and the counter within one millisecond."""

    def __init__(self, publisher: str, offset_s: float = 0.0):
        self.publisher = node_id(publisher)
        self.offset_ms = round(offset_s * 1000)  # a clock this far off the broker's (tests inject skew)
        self.delta_ms = 0
        self._last = (-1, 0)

    def adjust(self, by_ms: int) -> None:
        """A correction from the publishing broker. Timestamps never go backwards (ids stay unique):
        after a backward correction they hold still, the counter running, until the clock catches up."""
        self.delta_ms += by_ms

    def sync(self, broker_ms: float, local_s: float) -> None:
        """delta at connection time: the broker's clock minus ours (`local_s`: our clock when the
        broker read its own, the middle of the request's round trip)."""
        self.delta_ms = round(broker_ms - local_s * 1000) - self.offset_ms

    def next(self, broker: str, now_s: float) -> bytes:
        last, counter = self._last
        t_ms = max(last, int(now_s * 1000) + self.offset_ms + self.delta_ms)  # never backwards
        counter = counter + 1 if t_ms == last else 0
        if counter > 0xFFFF:  # more than 65,536 ids in one millisecond: borrow the next one
            t_ms, counter = last + 1, 0
        self._last = (t_ms, counter)
        return MessageId(self.publisher, node_id(broker), t_ms, counter).pack()
