"""Where the auto-tuned publisher's requests come from (Balasubramanian et al., sections V and VI):
arrival times, in seconds from the start of the run, drawn before it starts, so every publisher variant
of a run sees the very same arrivals (common random numbers: their latencies differ only by the
publisher).

- poisson: a Poisson process at one rate (section V-B-1, Fig. 8-10).
- steps: piecewise Poisson (Table II, Fig. 11). Table II gives its times without a unit; read as
  milliseconds it is a 1,000 s profile. `TABLE_II` holds it in seconds, and a run scales its times
  (`time_scale`) so it fits in minutes, keeping each step's rate.
- trace: the arrival times of a trace file, sped up by a factor (section VI: the sLS trace as
  recorded, and with inter-arrival times divided by 50). The sLS trace is not public; the shipped
  `sls-synthetic` is a stand-in made by `synthetic_sls` (bursty, with sLS's low mean load).
"""

from __future__ import annotations

import bisect
import random
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "data" / "autotune"
TRACE_NAMES = ("sls-synthetic",)

#: Table II of Balasubramanian et al.: (start s, end s, requests/s), its times read as milliseconds.
TABLE_II = ((0.0, 100.0, 1.75), (100.0, 300.0, 55.0), (300.0, 500.0, 17.5), (500.0, 750.0, 35.0),
            (750.0, 1000.0, 17.5))


def poisson(rate: float, duration: float, rng: random.Random, start: float = 0.0) -> list[float]:
    """Arrival times of a Poisson process at `rate` per second over [start, start + duration)."""
    times, t = [], start
    while True:
        t += rng.expovariate(rate)
        if t >= start + duration:
            return times
        times.append(t)


def steps(profile, duration: float, rng: random.Random, time_scale: float = 1.0) -> list[float]:
    """Piecewise Poisson: `profile` rows (start, end, rate) with times multiplied by `time_scale`;
    what lies past `duration` is cut off."""
    times: list[float] = []
    for begin, end, rate in profile:
        begin, end = begin * time_scale, min(end * time_scale, duration)
        if end > begin:
            times += poisson(rate, end - begin, rng, start=begin)
    return times


def trace_file(name: str) -> Path:
    if name not in TRACE_NAMES:
        raise ValueError(f"unknown trace {name!r}; shipped: {', '.join(TRACE_NAMES)}")
    return TRACES / f"{name}.csv"


def read_trace(path: Path) -> list[float]:
    """A trace's arrival times (seconds, one per line; '#' lines are comments), in order."""
    times = [float(line) for line in Path(path).read_text().splitlines() if line.strip() and not line.startswith("#")]
    if any(b < a for a, b in zip(times, times[1:])):
        raise ValueError(f"{path}: arrival times must not decrease")
    return times


def from_trace(times: list[float], speedup: float, duration: float) -> list[float]:
    """The trace's arrivals with inter-arrival times divided by `speedup`, from its first arrival,
    up to `duration`."""
    if not times:
        return []
    first = times[0]
    scaled = [(t - first) / speedup for t in times]
    return scaled[:bisect.bisect_left(scaled, duration)]


def synthetic_sls(seed: int = 3, duration: float = 10_800.0, base: float = 0.4, burst: float = 2.0,
                  burst_every: float = 90.0, burst_length: float = 10.0) -> list[float]:
    """The stand-in for the sLS trace (Balasubramanian et al., Fig. 3): a two-state Markov-modulated Poisson
    process, `base` requests/s with bursts of `burst` requests/s lasting `burst_length` s on
    average, one every `burst_every` s on average (exponential sojourns). Its mean, ~0.6 requests/s,
    is sLS's low load; x50 it peaks at 100 requests/s. Three hours, so x50 still fills 216 s."""
    rng = random.Random(seed)
    times, t, bursting = [], 0.0, False
    while t < duration:
        stay = rng.expovariate(1 / (burst_length if bursting else burst_every))
        times += poisson(burst if bursting else base, min(stay, duration - t), rng, start=t)
        t += stay
        bursting = not bursting
    return times


def write_trace(path: Path, times: list[float], note: str) -> None:
    lines = [f"# {line}" for line in note.splitlines()] + [f"{t:.6f}" for t in times]
    Path(path).write_text("\n".join(lines) + "\n")


def arrivals(source, duration: float, seed: int) -> list[float]:
    """The run's arrival times for a scenario's `autotune.source` (testbed.systems.autotune.schema.Source)."""
    rng = random.Random(seed)
    if source.kind == "poisson":
        return poisson(source.rate, duration, rng)
    if source.kind == "steps":
        profile = [(s.start, s.end, s.rate) for s in source.steps] if source.steps else TABLE_II
        return steps(profile, duration, rng, source.time_scale)
    return from_trace(read_trace(trace_file(source.trace)), source.speedup, duration)


if __name__ == "__main__":  # python -m testbed.systems.autotune.sources: regenerate the shipped trace
    TRACES.mkdir(parents=True, exist_ok=True)
    write_trace(trace_file("sls-synthetic"), synthetic_sls(),
                "A synthetic stand-in for the sLS write-request trace of seed 003 (Fig. 3), which is not public.\n"
                "Made by testbed.systems.autotune.sources.synthetic_sls(seed=3): arrival times in seconds.")
