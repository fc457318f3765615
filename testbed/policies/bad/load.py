"""Broker load in BAD Pub/Sub (section 4), kept incrementally.

A broker j holds one back-end (BE) subscription k for all the front-end (FE) subscriptions of its
subscribers that share it (subscription sharing, 3.1): it pulls k's results once (z_jk lambda_k
in, eq. 1-2) and pushes them to each of its n_jk subscribers (n_jk lambda_k out, eq. 3-4). So

    F_j = sum_k z_jk (1 + n_jk) lambda_k                                            (eq. 5)

with z_jk = 1 iff n_jk > 0. `Loads` keeps n (brokers x BE subscriptions) and F, and updates both
in O(subscriptions of one subscriber) when a subscriber attaches, subscribes, leaves or moves:
the live coordinator and the offline simulation at the paper's 10,000 subscribers share it.
"""

from __future__ import annotations

import numpy as np


def cov(loads) -> float:
    """Coefficient of variation sigma / mu of broker loads (eq. 6-8, population sigma); 0 when idle."""
    loads = np.asarray(loads, dtype=float)
    mean = loads.mean() if loads.size else 0.0
    return float(loads.std() / mean) if mean > 0 else 0.0


class Loads:
    """Who is attached where, who subscribes to what, and every broker's F_j (eq. 5).

    `rates[k]` is lambda_k (bytes/s of results of BE subscription k); subscribers are 0..n-1 and
    brokers 0..m-1; `broker[i]` is -1 for a subscriber not attached.
    """

    def __init__(self, brokers: int, rates, subscribers: int = 0):
        self.rates = np.asarray(rates, dtype=float).copy()
        self.n = np.zeros((brokers, self.rates.size), dtype=np.int64)
        self.F = np.zeros(brokers)
        self.broker = np.full(subscribers, -1, dtype=np.int64)
        self.subs: list[set[int]] = [set() for _ in range(subscribers)]

    @property
    def brokers(self) -> int:
        return self.n.shape[0]

    def _grow(self, i: int) -> None:
        if i >= self.broker.size:
            self.broker = np.concatenate([self.broker, np.full(i + 1 - self.broker.size, -1, dtype=np.int64)])
            self.subs.extend(set() for _ in range(i + 1 - len(self.subs)))

    def _add(self, j: int, k: int) -> None:
        self.F[j] += self.rates[k] * (2 if self.n[j, k] == 0 else 1)  # first FE: pull (in) + push (out)
        self.n[j, k] += 1

    def _remove(self, j: int, k: int) -> None:
        self.n[j, k] -= 1
        self.F[j] -= self.rates[k] * (2 if self.n[j, k] == 0 else 1)

    def attach(self, i: int, j: int) -> None:
        """Subscriber i attaches to broker j (it may hold subscriptions already)."""
        self._grow(i)
        if self.broker[i] >= 0:
            raise ValueError(f"subscriber {i} is already attached to broker {self.broker[i]}")
        self.broker[i] = j
        for k in self.subs[i]:
            self._add(j, k)

    def detach(self, i: int) -> None:
        """Subscriber i leaves (logs out): its FE subscriptions leave its broker's load."""
        j = int(self.broker[i])
        if j >= 0:
            for k in self.subs[i]:
                self._remove(j, k)
            self.broker[i] = -1

    def subscribe(self, i: int, k: int) -> None:
        """Subscriber i adds an FE subscription to BE subscription k (y_ik = 1)."""
        self._grow(i)
        if k in self.subs[i]:
            return
        self.subs[i].add(k)
        if self.broker[i] >= 0:
            self._add(int(self.broker[i]), k)

    def move(self, i: int, j: int) -> None:
        """Subscriber i migrates to broker j (a no-op when it is there already)."""
        if self.broker[i] != j:
            self.detach(i)
            self.attach(i, j)

    def set_rate(self, k: int, rate: float) -> None:
        """lambda_k changes (a channel's results grow or shrink): every broker holding k follows."""
        held = self.n[:, k] > 0
        self.F[held] += (rate - self.rates[k]) * (1 + self.n[held, k])
        self.rates[k] = rate

    def recompute(self) -> np.ndarray:
        """F from scratch (eq. 5), to check the increments and to clear their rounding."""
        self.F = ((self.n > 0) + self.n) @ self.rates
        return self.F

    def subscriber_load(self, i: int) -> float:
        """u_i = sum_k y_ik lambda_k (Algorithm 1, line 8): what i adds to any broker's push."""
        return float(sum(self.rates[k] for k in self.subs[i]))

    def added_load(self, i: int, j: int) -> float:
        """How much F_j grows if subscriber i (not at j) attaches to j: its push, plus the pull of
        the BE subscriptions j does not hold yet."""
        return float(sum(self.rates[k] * (2 if self.n[j, k] == 0 else 1) for k in self.subs[i]))

    def similarity(self, i: int) -> np.ndarray:
        """sim_j = sum of lambda_k over i's subscriptions that broker j already holds (Algorithm 1,
        line 10), for every broker; i's own broker counts i's own subscriptions as held."""
        ks = np.fromiter(self.subs[i], dtype=np.int64, count=len(self.subs[i]))
        if ks.size == 0:
            return np.zeros(self.brokers)
        held = self.n[:, ks] > 0
        own = int(self.broker[i])
        if own >= 0:  # held by others at i's broker, not by i alone
            held[own] = self.n[own, ks] > 1
        return held @ self.rates[ks]

    def attached(self, j: int) -> np.ndarray:
        return np.flatnonzero(self.broker == j)

    def counts(self) -> np.ndarray:
        """Subscribers per broker."""
        return np.bincount(self.broker[self.broker >= 0], minlength=self.brokers)
