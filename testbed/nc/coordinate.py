"""A Serf network coordinate and its distance, computed exactly as Serf's Vivaldi client does
(hashicorp/serf coordinate.DistanceTo): the Euclidean distance of the vectors plus both heights,
plus both adjustments when that sum stays positive. Pure: no sockets, no harness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Coordinate:
    """A Serf network coordinate; distances in seconds."""

    vec: tuple[float, ...]
    error: float
    adjustment: float
    height: float

    @classmethod
    def from_rpc(cls, data: dict) -> Coordinate:
        return cls(tuple(float(v) for v in data["Vec"]), float(data["Error"]), float(data["Adjustment"]),
                   float(data["Height"]))

    def raw_distance_to(self, other: Coordinate) -> float:
        if len(self.vec) != len(other.vec):
            raise ValueError("coordinates of different dimensions")
        return math.dist(self.vec, other.vec) + self.height + other.height

    def distance_to(self, other: Coordinate) -> float:
        """Estimated RTT in seconds, as `serf rtt` reports it."""
        dist = self.raw_distance_to(other)
        adjusted = dist + self.adjustment + other.adjustment
        return adjusted if adjusted > 0.0 else dist

    def with_extra_height(self, seconds: float) -> Coordinate:
        """The NC proxy's answer: its coordinate with the client's access latency in the height."""
        return Coordinate(self.vec, self.error, self.adjustment, self.height + seconds)
