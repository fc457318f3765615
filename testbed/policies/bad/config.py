"""The multistage balancer's choices and thresholds, with the paper's values where it gives them.

The paper (6.2.2) runs dynamic migration with alpha = 0.15 (0.05 in the sensitivity run) and
beta = 300 MB/s in its simulation; it gives no value for the shuffle's gamma and theta, only that
the shuffle answers an "extremely skewed" load. We take gamma = 0.5 (a broker at 1.5x the mean is
common under NR, never under RND/RR with thousands of subscribers) and theta = beta: the shuffle
then fires only where dynamic migration would too.
"""

from __future__ import annotations

from dataclasses import dataclass

PLACEMENTS = ("nr", "rr", "rnd")  # stage 1 (5.1): nearest broker, round robin, random
MIGRATIONS = ("none", "ldm", "sdm")  # stage 2 (5.2): none, load-based, similarity-based

MB = 1e6  # the paper's MB/s (decimal: its loads are data volumes per second)


@dataclass(frozen=True)
class BalancerConfig:
    """Stages 2 and 3 of Algorithm 1. Loads are in bytes per second, as brokers measure them."""

    migration: str = "ldm"
    shuffle: bool = False
    alpha: float = 0.15  # dynamic migration when cov > alpha ...
    beta: float = 300 * MB  # ... and the mean load > beta (the simulation's 300 MB/s)
    gamma: float = 0.5  # the shuffle when cov > gamma ...
    theta: float | None = None  # ... and the mean load > theta (None: beta)
    max_moves: int | None = None  # per round; None: at most one per subscriber

    def __post_init__(self):
        if self.theta is None:
            object.__setattr__(self, "theta", self.beta)
        if self.migration not in MIGRATIONS:
            raise ValueError(f"unknown migration {self.migration!r}; known: {', '.join(MIGRATIONS)}")
        for name in ("alpha", "beta", "gamma", "theta"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be a number >= 0")
