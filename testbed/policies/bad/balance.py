"""Stages 2 and 3 (5.2, 5.3) and Algorithm 1 that chains them: a migration plan from the loads.

Both stages start from the Longest-Processing-Time greedy rule for multiprocessor scheduling,
which the paper's min-max problem generalises (section 4): the heaviest subscribers move first.

- Dynamic migration (while cov > alpha and mean > beta): take the heaviest broker b and its
  subscribers, heaviest first (u_i = sum_k y_ik lambda_k); the first one whose move is valid goes.
  `ldm` sends it to the least loaded broker; `sdm` to the broker below the mean load that already
  holds the most of its subscription rate (sim_j), so the destination pulls the least new data. A
  move is valid when the destination's load after it does not exceed the source's load before it
  (the paper's text; the pseudo-code's line 17 compares the loads before the move, which the least
  loaded broker always passes).
- Greedy shuffle (cov > gamma and mean > theta): every subscriber, heaviest first, to the broker
  least loaded so far, loads counted with sharing (eq. 5), ties to the one with fewest subscribers.
  Subscribers with no subscription yet (no load, last in that order) go to the broker with the
  fewest subscribers: by load alone they would all land on one broker (283 did in the offline
  simulation, and that broker stayed heaviest once they subscribed). The paper is silent on both.

Two guards the paper leaves implicit, so a round always ends: a subscriber moves at most once per
round (the paper's concern about subscribers bouncing between brokers), and one with no
subscription never moves (it changes no load).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from testbed.policies.bad.config import BalancerConfig
from testbed.policies.bad.load import Loads, cov


@dataclass(frozen=True)
class Move:
    subscriber: int
    source: int
    destination: int
    stage: str  # "ldm" | "sdm" | "gsh"


@dataclass
class Plan:
    """One round of Algorithm 1: the moves in order, and the loads' cov and mean before and after."""

    moves: list[Move] = field(default_factory=list)
    shuffled: bool = False
    cov_before: float = 0.0
    cov_after: float = 0.0
    mean: float = 0.0

    def destinations(self) -> dict[int, tuple[int, int]]:
        """subscriber -> (first source, final destination), the moves a live system executes."""
        found: dict[int, tuple[int, int]] = {}
        for move in self.moves:
            source = found.get(move.subscriber, (move.source, None))[0]
            found[move.subscriber] = (source, move.destination)
        return {i: sd for i, sd in found.items() if sd[0] != sd[1]}


def _destination(loads: Loads, i: int, b: int, scheme: str, mean: float) -> int | None:
    F = loads.F
    if scheme == "ldm":
        order = np.argsort(F, kind="stable")
        return int(order[0]) if order[0] != b else None
    below = np.flatnonzero((F < mean) & (np.arange(F.size) != b))
    if below.size == 0:
        return None
    sim = loads.similarity(i)[below]
    best = below[sim == sim.max()]
    return int(best[np.argmin(F[best])])  # ties: the least loaded


def dynamic_migration(loads: Loads, scheme: str, alpha: float, beta: float, max_moves: int | None = None) -> list[Move]:
    """Algorithm 1, lines 5-25: moves applied to `loads` as they are planned."""
    moves: list[Move] = []
    moved: set[int] = set()
    limit = max_moves if max_moves is not None else loads.broker.size
    while len(moves) < limit and cov(loads.F) > alpha and loads.F.mean() > beta:
        b = int(np.argmax(loads.F))
        candidates = [int(i) for i in loads.attached(b) if int(i) not in moved and loads.subs[int(i)]]
        candidates.sort(key=lambda i: (-loads.subscriber_load(i), i))
        for i in candidates:
            destination = _destination(loads, i, b, scheme, loads.F.mean())
            if destination is not None and loads.F[destination] + loads.added_load(i, destination) <= loads.F[b]:
                loads.move(i, destination)
                moves.append(Move(i, b, destination, scheme))
                moved.add(i)
                break
        else:
            break  # no valid move from the heaviest broker: as balanced as this rule gets
    return moves


def greedy_shuffle(loads: Loads) -> list[Move]:
    """GSH (5.3): every attached subscriber re-placed from scratch, heaviest first, on the least
    loaded broker so far; applied to `loads`, returned as the moves of those that changed broker."""
    attached = [int(i) for i in np.flatnonzero(loads.broker >= 0)]
    attached.sort(key=lambda i: (-loads.subscriber_load(i), i))
    fresh = Loads(loads.brokers, loads.rates)
    counts = np.zeros(loads.brokers, dtype=np.int64)
    for i in attached:
        for k in loads.subs[i]:
            fresh.subscribe(i, k)
        if loads.subscriber_load(i) > 0:
            lightest = np.flatnonzero(fresh.F == fresh.F.min())
            j = int(lightest[np.argmin(counts[lightest])])
        else:
            fewest = np.flatnonzero(counts == counts.min())
            j = int(fewest[np.argmin(fresh.F[fewest])])
        fresh.attach(i, j)
        counts[j] += 1
    moves = []
    for i in attached:
        source, destination = int(loads.broker[i]), int(fresh.broker[i])
        if source != destination:
            loads.move(i, destination)
            moves.append(Move(i, source, destination, "gsh"))
    return moves


def plan(loads: Loads, config: BalancerConfig) -> Plan:
    """Algorithm 1: the shuffle if the loads are extremely skewed, then dynamic migration while
    they are skewed. `loads` ends as the plan leaves it."""
    result = Plan(cov_before=cov(loads.F), mean=float(loads.F.mean()))
    if config.shuffle and result.cov_before > config.gamma and result.mean > config.theta:
        result.moves += greedy_shuffle(loads)
        result.shuffled = True
    if config.migration != "none":
        result.moves += dynamic_migration(loads, config.migration, config.alpha, config.beta, config.max_moves)
    result.cov_after = cov(loads.F)
    return result
