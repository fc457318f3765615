"""The auto-tuned batching publisher's control rule (Balasubramanian et al., section IV):
how many waiting requests the Main Publisher Thread (MPT) takes at each poll (N) and how often it
polls (T_poll). Pure: the live publisher (testbed.systems.autotune.publisher) feeds it what it
observed and does what it says; the tests script the observations.

The rule, as section IV gives it (Table I's values are `TuningConfig`'s defaults):

- At each poll (every T_poll), with fewer than N requests waiting, N halves (multiplicative
  decrease, never below N_min) and the timer restarts; once the oldest waiting request has waited
  T (= T_poll^max, the most the MPT waits for N to accumulate), whatever waits goes out anyway.
- With N or more waiting, a batch of N goes out: the MPT reads them and hands each to a worker
  (WT), blocking while no WT is free. That took T_mpt. If the batch was out before the next poll
  was due (T_mpt <= T_poll), N grows by one (additive increase), else it shrinks by one; then
  T_poll = clamp(beta * T_mpt, T_poll^min, T_poll^max).
- The load estimate (eq. 1): lambda_est <- alpha lambda_est + (1 - alpha) lambda_s, lambda_s the
  arrivals per second since the previous poll.
- The broker-side capacity (eq. 2): when a WT's transfer ends (broker's acknowledgement), after
  s_i seconds with n_i WTs transferring, eta_i = n_i / s_i and eta_est <- gamma eta_est +
  (1 - gamma) eta_i; N_max = eta_est. The paper sets N_max to eta_est, a rate, as a number: the
  batch that one second of the broker's estimated capacity carries.

Where the text is silent (its flowchart, Fig. 7, is not in the text):
- Section V says N's "growth and decay is guided by the estimated load" but gives no formula that
  uses lambda_est; N's rule above already follows the load (a poll that finds fewer than N waiting
  halves it). We compute lambda_est by eq. 1 and record it beside N, and invent no other use.
- T is counted from the oldest waiting request's arrival (as a batch timeout such as Kafka's
  linger.ms is), not from the last batch: counted from the last batch, a request arriving after a
  quiet spell would leave at the next poll whatever N is, and a fixed N = 50 would cost nothing at
  1.75 requests/s, against the paper's Fig. 8.
- Without tuning (the paper's Fig. 8 baseline) N is fixed and T_poll is fixed (50 ms in the paper);
  the T rule still applies, so a fixed N larger than the load can fill is still bounded in wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TuningConfig:
    """Table I of Balasubramanian et al.: polling bounds in seconds, filter gains, beta, N_min."""

    t_min: float = 0.050    # T_poll^min
    t_max: float = 0.200    # T_poll^max, and T (the longest wait for N to accumulate)
    alpha: float = 0.5      # load filter gain (eq. 1)
    gamma: float = 0.75     # capacity filter gain (eq. 2)
    beta: float = 1.2       # T_poll = beta * T_mpt, clamped
    n_min: int = 1

    def __post_init__(self):
        if not 0 < self.t_min <= self.t_max:
            raise ValueError(f"need 0 < t_min <= t_max, got {self.t_min:g} and {self.t_max:g}")
        for name in ("alpha", "gamma"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} is a filter gain in [0, 1), got {getattr(self, name):g}")
        if not self.beta >= 1:
            raise ValueError(f"beta must be at least 1 (T_poll follows T_mpt from above), got {self.beta:g}")
        if self.n_min < 1:
            raise ValueError(f"n_min must be at least 1, got {self.n_min}")


def ewma(previous: float | None, sample: float, gain: float) -> float:
    """gain * previous + (1 - gain) * sample; the first sample is its own estimate."""
    return sample if previous is None else gain * previous + (1 - gain) * sample


class Tuner:
    """N and T_poll of one publisher. `tuned=False` is the paper's baseline: N and T_poll fixed."""

    def __init__(self, config: TuningConfig, n_start: int, tuned: bool, poll_s: float):
        if n_start < 1:
            raise ValueError(f"the initial batch size must be at least 1, got {n_start}")
        self.config, self.tuned = config, tuned
        self.n = max(config.n_min, n_start) if tuned else n_start
        self.t_poll = poll_s
        self.lambda_est: float | None = None
        self.eta_est: float | None = None

    @property
    def n_max(self) -> float:
        """The cap on N: eta_est (eq. 2), never below N_min; none before the first acknowledgement."""
        return math.inf if self.eta_est is None else max(self.config.n_min, self.eta_est)

    def poll(self, waiting: int, arrivals: int, interval_s: float, oldest_wait_s: float) -> int:
        """T_poll expired with `waiting` requests in the store, `arrivals` of them new over the
        `interval_s` since the previous poll, the oldest having waited `oldest_wait_s`: how many to
        publish now (0: none, the timer restarts)."""
        if interval_s > 0:
            self.lambda_est = ewma(self.lambda_est, arrivals / interval_s, self.config.alpha)
        if waiting >= self.n:
            return self.n
        if self.tuned:
            self.n = max(self.config.n_min, self.n // 2)
        if waiting > 0 and oldest_wait_s >= self.config.t_max:
            return waiting
        return 0

    def published(self, t_mpt_s: float) -> None:
        """A batch left: the MPT handed its last request to a WT `t_mpt_s` after reading the batch."""
        if not self.tuned:
            return
        grown = self.n + 1 if t_mpt_s <= self.t_poll else self.n - 1
        self.n = int(max(self.config.n_min, min(grown, self.n_max)))
        self.t_poll = max(self.config.t_min, min(self.config.beta * t_mpt_s, self.config.t_max))

    def transferred(self, service_s: float, in_flight: int) -> None:
        """A WT's transfer ended (the broker acknowledged) after `service_s`, with `in_flight` WTs
        transferring at that moment (itself included): a sample of the broker-side capacity."""
        if service_s > 0 and in_flight > 0:
            self.eta_est = ewma(self.eta_est, in_flight / service_s, self.config.gamma)

    def state(self) -> dict:
        """What the poll log records: N, T_poll and the two estimates."""
        return {"n": self.n, "t_poll_s": round(self.t_poll, 6),
                "lambda_est": None if self.lambda_est is None else round(self.lambda_est, 3),
                "eta_est": None if self.eta_est is None else round(self.eta_est, 3)}
