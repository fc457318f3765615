"""How the paper's d(nc1, nc2) is read from Serf's coordinates: the one home of that choice.

Serf's coordinate distance (`Coordinate.distance_to`) estimates a round-trip time. The paper's d is
"the distance between coordinates" (3.2, Table 1), never halved, and its thresholds Lth(t) are
compared with E(t) = max_p d(p, b) + max_c d(c, b) as they come. Two readings, a scenario's
`control.distance`:

- `rtt`: d is Serf's distance, the paper taken literally. E(t) then adds two round trips, about
  twice the latency a message takes from producer through broker to consumer.
- `one_way`: d is Serf's distance / 2, a one-way latency, so E(t) estimates the producer -> broker ->
  consumer latency the testbed measures (receive time - send time, one shared clock). This is the
  physical reading and the testbed's default.

Every formula of `testbed.policies.latency` is linear in d, so a reading is a scale on every
estimate (E(t), W(t), W(t, b)): a policy's first-ranked broker is the same under both (it minimises
a score); what changes is which topics exceed Lth(t) (Algorithm 1, line 16, hence live migrations)
and the violation ratios of the assessment. `one_way` with Lth is `rtt` with 2 x Lth.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.nc.coordinate import Coordinate


@dataclass(frozen=True)
class Distance:
    """One reading: d = per_rtt x Serf's RTT estimate, in seconds."""

    name: str
    per_rtt: float

    def __call__(self, a: Coordinate, b: Coordinate) -> float:
        """d(a, b) between two coordinates."""
        return self.per_rtt * a.distance_to(b)

    def of_rtt(self, rtt: float) -> float:
        """d for a round-trip time (a configured one, or any RTT-like sum of Serf's terms)."""
        return self.per_rtt * rtt


ONE_WAY = Distance("one_way", 0.5)
RTT = Distance("rtt", 1.0)

# The only list of readings: the scenario schema, the topic manager's and broker agent's --distance
# and the assessment derive theirs from it.
DISTANCES: dict[str, Distance] = {d.name: d for d in (ONE_WAY, RTT)}

DEFAULT_DISTANCE = ONE_WAY.name  # reproduces the testbed's earlier results; `rtt` is the paper's literal d


def get_distance(name: str) -> Distance:
    try:
        return DISTANCES[name]
    except KeyError:
        raise ValueError(f"unknown distance reading {name!r}; known: {', '.join(DISTANCES)}") from None
