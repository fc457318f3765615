"""Bloom filters as Jun and Astley build them (5.1): the k hash functions come from MD5 applications to
the key, each application with its own prefix byte, whose output bits are cut into k equal segments
that each address one of the m bits. Also the paper's accuracy formulas (4.1) and Table 2's filters."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

#: One prefix byte per MD5 application ("a random, unique prefix byte for each application"); fixed so
#: that a filter written by one process is read by another.
PREFIXES = bytes((0x5C, 0xA3, 0x17, 0xE9, 0x3B, 0xD4, 0x68, 0x8F))


def segment_bits(m: int) -> int:
    """Bits of digest per hash function: enough to address m bits (16 for m = 65,536)."""
    return max(1, (m - 1).bit_length())


def positions(key: bytes, m: int, k: int) -> list[int]:
    """The k bit positions (0-based) of `key`: as many MD5 applications as k segments need, the
    concatenated digests read as one big-endian number, segment j its j-th group of bits from the
    left, reduced mod m (a no-op when m is a power of two, as in the paper's filters)."""
    bits = segment_bits(m)
    applications = math.ceil(bits * k / 128)
    if applications > len(PREFIXES):
        raise ValueError(f"k={k} hash functions of {bits} bits need {applications} MD5 applications "
                         f"(at most {len(PREFIXES)})")
    digest = b"".join(hashlib.md5(PREFIXES[i:i + 1] + key).digest() for i in range(applications))
    value, total, mask = int.from_bytes(digest, "big"), 128 * applications, (1 << bits) - 1
    return [((value >> (total - (j + 1) * bits)) & mask) % m for j in range(k)]


class BloomFilter:
    """m bits (bit i is bit i % 8 of byte i // 8), k hash functions, and the keys added so far."""

    def __init__(self, m: int, k: int, bits: bytes | bytearray | None = None, count: int = 0):
        if m < 8 or k < 1:
            raise ValueError(f"a Bloom filter needs m >= 8 bits and k >= 1 (got m={m}, k={k})")
        self.m, self.k, self.count = m, k, count
        self.bits = bytearray(bits) if bits is not None else bytearray((m + 7) // 8)

    def add(self, key: bytes) -> None:
        bits = self.bits
        for p in positions(key, self.m, self.k):
            bits[p >> 3] |= 1 << (p & 7)
        self.count += 1

    def __contains__(self, key: bytes) -> bool:
        bits = self.bits
        return all(bits[p >> 3] >> (p & 7) & 1 for p in positions(key, self.m, self.k))

    def fpp(self) -> float:
        return fpp(self.m, self.k, self.count)


def fpp(m: int, k: int, n: int) -> float:
    """Eq. 1: the false-positive probability of an m-bit filter with k hash functions holding n keys."""
    return (1.0 - (1.0 - 1.0 / m) ** (k * n)) ** k


def efpp(fpps) -> float:
    """Eq. 2 for filters that may differ: the chance that at least one filter of a matching set
    answers a false positive, 1 - prod(1 - fpp_i) (= 1 - (1 - fpp)^|M| for identical filters)."""
    miss = 1.0
    for value in fpps:
        miss *= 1.0 - value
    return 1.0 - miss


@dataclass(frozen=True)
class Filter:
    """A filter configuration: m bits, k hash functions, capacity n keys."""

    m: int
    k: int
    n: int

    @property
    def bytes(self) -> int:
        return (self.m + 7) // 8

    def full_fpp(self) -> float:
        return fpp(self.m, self.k, self.n)


#: Table 2's BF configurations, by buffer limit and accuracy (efpp 1e-5, 0.01, 0.05 with at most two
#: overlapping filters): 10K buffers hold 64 Kbit filters, 135K buffers 1 Mbit ones.
PRESETS = {
    "10K-99.999": Filter(m=65_536, k=16, n=2_521),
    "10K-99": Filter(m=65_536, k=8, n=5_461),
    "10K-95": Filter(m=65_536, k=8, n=7_281),
    "135K-99.999": Filter(m=1_048_576, k=12, n=38_836),
    "135K-99": Filter(m=1_048_576, k=6, n=87_381),
    "135K-95": Filter(m=1_048_576, k=6, n=131_072),
}
