"""Stage 1, initial placement (5.1): which broker a subscriber that has just registered gets,
before the coordinator knows its subscriptions.

- `nr`: the nearest broker. The paper allows geographic distance or network latency; live runs
  give the estimated RTT from network coordinates (the subscriber's and each broker's Serf
  coordinate), the offline simulation geographic distance.
- `rr`: round robin, an equal number of subscribers per broker.
- `rnd`: a broker drawn at random with the scenario's seed.

The paper's "least loaded" placement is left out as the paper leaves it out: subscribers that
arrive together with no subscriptions all land on one broker.
"""

from __future__ import annotations

import numpy as np

from testbed.policies.bad.config import PLACEMENTS


class Placer:
    """Places subscribers one at a time, in the order they register."""

    def __init__(self, kind: str, brokers: int, seed: int = 0):
        if kind not in PLACEMENTS:
            raise ValueError(f"unknown placement {kind!r}; known: {', '.join(PLACEMENTS)}")
        if brokers < 1:
            raise ValueError("placement needs at least one broker")
        self.kind, self.brokers = kind, brokers
        self._next = 0
        self._rng = np.random.default_rng(seed)

    def place(self, distances=None) -> int:
        """The broker for the next subscriber; `distances[j]` (to broker j) is needed by `nr`, whose
        ties go to the lowest index."""
        if self.kind == "nr":
            if distances is None or len(distances) != self.brokers:
                raise ValueError(f"nr placement needs a distance to each of the {self.brokers} brokers")
            return int(np.argmin(distances))
        if self.kind == "rr":
            self._next += 1
            return (self._next - 1) % self.brokers
        return int(self._rng.integers(self.brokers))
