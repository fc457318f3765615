"""Confidence intervals: the one home for how the index, the tables and the figures say "x [lo, hi], n".

The unit of an interval is what varies independently between samples: a run with its own seed
(`testbed paper --repeats N`), a random placement (Fig. 4, 5), a topic migrated (Fig. 7). Messages
of one run are not independent (they share the run's placements and load), so a run's messages
never count as n on their own.

    mean_ci([0.31, 0.36, 0.33])      # Interval(value=0.333, low=0.27, high=0.40, n=3): Student's t
    median_ci(downtimes_s)           # Interval around the median: percentile bootstrap, fixed seed
    interval.text("{:.1f}", scale=100, unit=" %")   # '33.3 % [26.9, 39.8] (n=3)'

With fewer than two samples there is no interval: `low` and `high` are None and the text says n=1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    value: float
    low: float | None
    high: float | None
    n: int
    level: float = LEVEL

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def half_width(self) -> float | None:
        return (self.high - self.low) / 2 if self.has_interval else None

    def text(self, fmt: str = "{:.1f}", scale: float = 1.0, unit: str = "") -> str:
        """'12.3 ms [11.0, 13.9] (n=5)', or '12.3 ms (n=1, no interval)'."""
        value = fmt.format(self.value * scale) + unit
        if not self.has_interval:
            return f"{value} (n={self.n}, no interval)"
        return f"{value} [{fmt.format(self.low * scale)}, {fmt.format(self.high * scale)}] (n={self.n})"

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "level": self.level}


def _clean(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def _clipped(interval: Interval, bounds: tuple[float, float] | None) -> Interval:
    """The interval cut to what the quantity can take (a ratio 0..1, a latency >= 0): with a few
    repeats a t interval reaches past them, and a negative violation ratio says nothing."""
    if bounds is None or not interval.has_interval:
        return interval
    low, high = bounds
    return Interval(interval.value, max(low, interval.low), min(high, interval.high), interval.n, interval.level)


def mean_ci(values: Sequence[float], level: float = LEVEL, bounds: tuple[float, float] | None = None) -> Interval:
    """The mean with Student's t interval: right for a few independent repeats of roughly normal
    values; `bounds` cuts it to the quantity's range."""
    from scipy import stats

    xs = _clean(values)
    if not xs:
        raise ValueError("mean_ci: no values")
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return Interval(mean, None, None, len(xs), level)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    half = stats.t.ppf((1 + level) / 2, len(xs) - 1) * sd / math.sqrt(len(xs))
    return _clipped(Interval(mean, mean - half, mean + half, len(xs), level), bounds)


def mean_ci_from(mean: float, sd: float | None, n: int, level: float = LEVEL) -> Interval:
    """The same t interval from a summary (mean, sample standard deviation, n): for tables that
    kept the moments, not the samples (e.g. 1000 placements reduced by Spark)."""
    from scipy import stats

    if n < 2 or sd is None:
        return Interval(mean, None, None, n, level)
    half = stats.t.ppf((1 + level) / 2, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, level)


def bootstrap_ci(values: Sequence[float], statistic: Callable = None, level: float = LEVEL,
                 seed: int = 0) -> Interval:
    """`statistic` (default the median) with a percentile-bootstrap interval: for medians and
    skewed samples (downtimes, latencies), where t intervals do not apply. The seed is fixed so a
    redraw from the same JSON gives the same interval."""
    import numpy as np

    xs = np.asarray(_clean(values))
    if xs.size == 0:
        raise ValueError("bootstrap_ci: no values")
    statistic = statistic or np.median
    value = float(statistic(xs))
    if xs.size < 2:
        return Interval(value, None, None, int(xs.size), level)
    rng = np.random.default_rng(seed)
    draws = rng.choice(xs, size=(BOOTSTRAP_RESAMPLES, xs.size), replace=True)
    resampled = np.apply_along_axis(statistic, 1, draws)
    low, high = np.quantile(resampled, [(1 - level) / 2, (1 + level) / 2])
    return Interval(value, float(low), float(high), int(xs.size), level)


def median_ci(values: Sequence[float], level: float = LEVEL, seed: int = 0) -> Interval:
    return bootstrap_ci(values, None, level, seed)


def from_dict(data: dict | None) -> Interval | None:
    """An Interval written by `Interval.as_dict` (e.g. into a benchmark's JSON), or None."""
    if not data:
        return None
    return Interval(data["value"], data.get("low"), data.get("high"), data.get("n", 0), data.get("level", LEVEL))


__all__ = ["Interval", "mean_ci", "mean_ci_from", "median_ci", "bootstrap_ci", "from_dict", "LEVEL"]
