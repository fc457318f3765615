"""Pulsar's namespace bundles ("Topics are assigned to brokers at the bundle level" in the Pulsar
load-balancing article): a namespace's 32-bit hash range cut into bundles, a topic in the bundle its
name hashes into, a hot bundle split in two.

Pulsar hashes the full topic name ("persistent://tenant/namespace/topic") with CRC-32 (Guava's
`Hashing.crc32()` in `NamespaceBundleFactory`, the same polynomial as zlib's) and finds the bundle
whose range [lower, upper) holds it; the last bundle also holds 0xFFFFFFFF. A bundle is named by its
range as Pulsar prints it: "0x40000000_0x80000000".
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

FULL_RANGE = 0x1_0000_0000  # 2**32: bundle boundaries run from 0 to here (printed as 0xffffffff)
NAMESPACE = "persistent://public/default"  # the one namespace the testbed's topics live in
SPLIT_ALGORITHMS = ("range_equally_divide", "topic_count_equally_divide")


def topic_hash(topic: str) -> int:
    """The 32-bit hash Pulsar places a topic by."""
    return zlib.crc32(f"{NAMESPACE}/{topic}".encode())


def _hex(bound: int) -> str:
    return f"0x{min(bound, FULL_RANGE - 1):08x}"


@dataclass(frozen=True)
class Bundles:
    """The sorted boundaries of a namespace's bundles: bundle i is [bounds[i], bounds[i+1])."""

    bounds: tuple[int, ...]

    @classmethod
    def equal(cls, count: int) -> Bundles:
        """`count` bundles of equal range (Pulsar's defaultNumberOfNamespaceBundles)."""
        if not 1 <= count <= FULL_RANGE:
            raise ValueError(f"bundle count must be at least 1, not {count}")
        return cls(tuple(FULL_RANGE * i // count for i in range(count + 1)))

    @classmethod
    def from_names(cls, names: Iterable[str]) -> Bundles:
        """Back from bundle names (what the manager keeps in ZooKeeper)."""
        bounds: set[int] = set()
        for name in names:
            low, high = (int(part, 16) for part in name.split("_"))
            bounds |= {low, FULL_RANGE if high == FULL_RANGE - 1 else high}
        return cls(tuple(sorted(bounds)))

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def names(self) -> list[str]:
        return [self.name(i) for i in range(len(self))]

    def name(self, index: int) -> str:
        return f"{_hex(self.bounds[index])}_{_hex(self.bounds[index + 1])}"

    def index_of(self, topic: str) -> int:
        return bisect.bisect_right(self.bounds, topic_hash(topic)) - 1

    def bundle_of(self, topic: str) -> str:
        return self.name(self.index_of(topic))

    def split(self, bundle: str, algorithm: str = "range_equally_divide", topics: Iterable[str] = ()) -> Bundles:
        """The bundles with `bundle` cut in two: at the middle of its range (range_equally_divide,
        Pulsar's default) or between the two halves of its topics' sorted hashes
        (topic_count_equally_divide; needs two topics with different hashes). Unchanged when the
        range cannot be cut."""
        index = self.names().index(bundle)
        low, high = self.bounds[index], self.bounds[index + 1]
        if algorithm == "range_equally_divide":
            cut = (low + high) // 2
        elif algorithm == "topic_count_equally_divide":
            hashes = sorted(h for h in map(topic_hash, topics) if low <= h < high)
            if len(hashes) < 2 or hashes[0] == hashes[-1]:
                return self
            middle = len(hashes) // 2
            below, above = hashes[middle - 1], hashes[middle]
            cut = max(below + 1, (below + above) // 2) if below != above else above  # Pulsar's example: 0x10, 0x15 -> 0x12
        else:
            raise ValueError(f"split algorithm must be one of {', '.join(SPLIT_ALGORITHMS)}, not {algorithm!r}")
        if not low < cut < high:
            return self
        return Bundles(tuple(sorted({*self.bounds, cut})))
