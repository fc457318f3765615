"""`make bench-bad`: BAD Pub/Sub's offline simulation at the paper's size (Nguyen et al., DEBS '19,
6.2.1), run with the same pure policy code the live coordinator uses (testbed.policies.bad).

The workload (one seed, so every scheme sees the same subscribers, subscriptions and rate changes):

- 10 brokers at the centres of 10 k-means zones over the real Atlanta towers (testbed.scenario.zones);
  10,000 subscribers, half around downtown Atlanta (Gaussian, sd 3 km), half at random towers (with
  0.5 km of jitter): the geographic skew that makes nearest placement (`nr`, by distance on
  the zones' projection) put thousands of subscribers on one broker, as in the paper's Fig. 13 (1).
- 10 channels with periods drawn from {5, 10, 20, 30, 60} s, 100 back-end (BE) subscriptions each;
  lambda_k ~ Normal(50, 15) KB/s truncated > 0. With ~20 front-end (FE) subscriptions per subscriber at
  ~50 KB/s, a broker with 1,000 subscribers pushes ~1 GB/s: the mean load crosses beta = 300 MB/s after
  about a third of the subscriptions are in, so balancing has to act while they keep arriving. The
  periods do not enter the load (lambda is a rate already); they are recorded for the record.
- Each subscriber makes U{10..30} FE subscriptions, to distinct BE subscriptions: a channel uniformly,
  then a BE subscription within it by Zipf (s = 1) over its 100: popular subscriptions are shared by
  many subscribers at every broker, rare ones by few, so where a subscriber goes changes the pull
  (eq. 5) and SDM has something to exploit. ~200,000 FE subscriptions in all.
- All subscribers log in at t = 0 (placed in order by the scheme's Placer); subscriptions arrive at
  uniform random times in the first 8 minutes; the run lasts 30 minutes.
- Every minute a quarter of the BE subscriptions are scheduled to raise their rate x3 at a uniform time
  within the next 3 minutes, and to drop back 4-6 minutes later (Loads.set_rate). A subscription
  picked again while raised stays raised until its last drop (a counter), so about three quarters of
  them are raised at a time in the steady state: a load that moves.

The BCS runs Algorithm 1 (testbed.policies.bad.plan) every 10 s on the loads it then measures. Per round
the JSON keeps the measured loads F_j (before the round's moves: what the brokers carried), subscribers
per broker, cov, mean, max, the cov after the plan, the subscribers moved and whether the shuffle fired.

Schemes: {rnd, rr, nr} x {none, ldm, sdm}; nr x {ldm, sdm} + gsh; nr + ldm at alpha 0.05 (the
sensitivity run, against nr-ldm at 0.15). Writes results/bench/bad.json (bad-quick.json) and the figures
(testbed.systems.bad.bench.sim_figures), prints the table and the paper's claims as verdicts.

    python -m testbed.systems.bad.bench.sim [--quick] [--seed N] [--out results/bench/bad.json] [--schemes a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from testbed.policies.bad import BalancerConfig, Loads, Placer, cov, plan
from testbed.policies.bad.config import MB
from testbed.scenario.zones import Projection, mec_zones, towers

OUT = Path("results/bench/bad.json")
KB = 1e3
DOWNTOWN = (33.7537, -84.3863)  # Five Points, Atlanta
PERIODS_S = (5, 10, 20, 30, 60)


@dataclass(frozen=True)
class Setup:
    """The workload's size and shape (6.2.1); `quick` is a small one for the tests."""

    brokers: int = 10
    subscribers: int = 10_000
    channels: int = 10
    per_channel: int = 100  # BE subscriptions per channel
    subs_min: int = 10
    subs_max: int = 30
    zipf_s: float = 1.0
    rate_mean_kb: float = 50.0
    rate_sd_kb: float = 15.0
    hot_share: float = 0.5  # subscribers around downtown; the rest at random towers
    hot_sd_km: float = 3.0
    jitter_km: float = 0.5
    duration_s: float = 1800.0
    arrivals_s: float = 480.0
    round_s: float = 10.0
    change_every_s: float = 60.0
    change_share: float = 0.25
    raise_within_s: float = 180.0
    drop_after_s: tuple[float, float] = (240.0, 360.0)
    factor: float = 3.0
    beta_mb: float = 300.0  # beta = theta (BalancerConfig's reading of the paper)
    gamma: float = 0.5
    seed: int = 1


QUICK = Setup(brokers=3, subscribers=300, channels=3, per_channel=20, duration_s=180.0, arrivals_s=60.0,
              beta_mb=30.0)


@dataclass(frozen=True)
class Scheme:
    name: str
    placement: str
    migration: str = "none"
    shuffle: bool = False
    alpha: float = 0.15


def schemes() -> list[Scheme]:
    """The paper's grid (Fig. 5-12), NR with the shuffle (Fig. 9, 11, 13) and the alpha run (Fig. 14)."""
    grid = [Scheme(f"{p}-{m}", p, m) for p in ("rnd", "rr", "nr") for m in ("none", "ldm", "sdm")]
    return grid + [Scheme("nr-ldm-gsh", "nr", "ldm", True), Scheme("nr-sdm-gsh", "nr", "sdm", True),
                   Scheme("nr-ldm-a0.05", "nr", "ldm", False, 0.05)]


@dataclass
class Workload:
    """Everything random, drawn once from the seed: every scheme replays it."""

    rates: np.ndarray  # base lambda_k, bytes/s
    periods: np.ndarray  # per channel, s
    distances: np.ndarray  # subscribers x brokers, m
    sub_of: np.ndarray  # FE subscriptions in arrival order: subscriber, BE subscription, time
    be_of: np.ndarray
    at: np.ndarray
    changes: list[tuple[float, int, int]]  # (time, k, +1 raise / -1 drop), in time order


def _zipf(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def positions(setup: Setup, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Brokers at the zone centres, subscribers skewed towards downtown; both in metres on one projection."""
    points = towers("atlanta")
    projection = Projection(points)
    zones = mec_zones(setup.brokers, setup.seed)
    brokers = projection.to_xy(np.array([[z.lat, z.lon] for z in zones]))
    hot = int(round(setup.hot_share * setup.subscribers))
    centre = projection.to_xy(np.array(DOWNTOWN))[0]
    around = centre + rng.normal(0.0, setup.hot_sd_km * 1e3, size=(hot, 2))
    spread = projection.to_xy(points[rng.integers(len(points), size=setup.subscribers - hot)])
    spread = spread + rng.normal(0.0, setup.jitter_km * 1e3, size=spread.shape)
    subscribers = np.vstack([around, spread])[rng.permutation(setup.subscribers)]
    return brokers, subscribers


def workload(setup: Setup) -> Workload:
    rng = np.random.default_rng(setup.seed)
    q = setup.channels * setup.per_channel
    rates = np.empty(0)
    while rates.size < q:  # Normal truncated > 0, by rejection
        draw = rng.normal(setup.rate_mean_kb, setup.rate_sd_kb, size=q) * KB
        rates = np.concatenate([rates, draw[draw > 0]])
    rates = rates[:q]
    periods = rng.choice(PERIODS_S, size=setup.channels)
    brokers, subscribers = positions(setup, rng)
    distances = np.sqrt(((subscribers[:, None, :] - brokers[None, :, :]) ** 2).sum(axis=2))
    within = _zipf(setup.per_channel, setup.zipf_s)
    p = np.tile(within, setup.channels) / setup.channels  # channel uniform, Zipf within it
    counts = rng.integers(setup.subs_min, setup.subs_max + 1, size=setup.subscribers)
    be = np.concatenate([rng.choice(q, size=c, replace=False, p=p) for c in counts])
    who = np.repeat(np.arange(setup.subscribers), counts)
    at = rng.uniform(0.0, setup.arrivals_s, size=who.size)
    order = np.argsort(at, kind="stable")
    changes = []
    for start in np.arange(0.0, setup.duration_s, setup.change_every_s):
        for k in rng.choice(q, size=int(round(setup.change_share * q)), replace=False):
            up = start + rng.uniform(0.0, setup.raise_within_s)
            down = up + rng.uniform(*setup.drop_after_s)
            changes += [(float(up), int(k), 1), (float(down), int(k), -1)]
    changes.sort()
    return Workload(rates, periods, distances, who[order], be[order], at[order], changes)


def simulate(setup: Setup, work: Workload, scheme: Scheme) -> dict:
    """One scheme over the workload: placement at t = 0, then the rounds; returns the series and totals."""
    m, n = setup.brokers, setup.subscribers
    config = BalancerConfig(migration=scheme.migration, shuffle=scheme.shuffle, alpha=scheme.alpha,
                            beta=setup.beta_mb * MB, gamma=setup.gamma, theta=setup.beta_mb * MB)
    loads = Loads(m, work.rates, n)
    placer = Placer(scheme.placement, m, seed=setup.seed)
    for i in range(n):
        loads.attach(i, placer.place(work.distances[i]))
    raised = np.zeros(work.rates.size, dtype=np.int64)
    fe, ch = 0, 0
    series = {key: [] for key in ("t", "F", "subscribers", "cov", "mean", "max", "cov_after", "migrations",
                                  "shuffled")}
    rounds = int(round(setup.duration_s / setup.round_s))
    for r in range(1, rounds + 1):
        t = r * setup.round_s
        end = int(np.searchsorted(work.at, t, side="right"))
        for i, k in zip(work.sub_of[fe:end].tolist(), work.be_of[fe:end].tolist()):
            loads.subscribe(i, k)
        fe = end
        while ch < len(work.changes) and work.changes[ch][0] <= t:
            _, k, step = work.changes[ch]
            was = raised[k] > 0
            raised[k] += step
            if was != (raised[k] > 0):
                loads.set_rate(k, work.rates[k] * (setup.factor if raised[k] > 0 else 1.0))
            ch += 1
        F = loads.F.copy()
        series["t"].append(t)
        series["F"].append([round(float(v) / MB, 3) for v in F])
        series["subscribers"].append(loads.counts().tolist())
        series["cov"].append(round(cov(F), 5))
        series["mean"].append(round(float(F.mean()) / MB, 3))
        series["max"].append(round(float(F.max()) / MB, 3))
        result = plan(loads, config)
        series["cov_after"].append(round(result.cov_after, 5))
        series["migrations"].append(len(result.destinations()))
        series["shuffled"].append(result.shuffled)
    drift = float(np.abs(loads.F - loads.recompute()).max()) if m else 0.0
    return {"scheme": asdict(scheme), "config": {k: v for k, v in asdict(config).items()},
            "series": series, "totals": totals(series, setup.duration_s), "recompute_drift": drift,
            "subscriptions": int(sum(len(s) for s in loads.subs))}


def totals(series: dict, duration_s: float) -> dict:
    """Max load (time-mean over the second half, and peak), cov (time-mean over the second half),
    migrations and shuffles over the run."""
    t = np.asarray(series["t"])
    late = t > duration_s / 2
    mx, cv = np.asarray(series["max"]), np.asarray(series["cov"])
    fired = [tt for tt, s in zip(series["t"], series["shuffled"]) if s]
    return {"max_load_mb_s": round(float(mx[late].mean()), 2), "peak_load_mb_s": round(float(mx.max()), 2),
            "cov": round(float(cv[late].mean()), 4), "migrations": int(sum(series["migrations"])),
            "shuffles": len(fired), "first_shuffle_s": fired[0] if fired else None}


def describe(setup: Setup, work: Workload) -> dict:
    nr = np.bincount(np.argmin(work.distances, axis=1), minlength=setup.brokers)
    return {"be_subscriptions": int(work.rates.size), "fe_subscriptions": int(work.sub_of.size),
            "rate_mean_kb_s": round(float(work.rates.mean()) / KB, 2), "channel_periods_s": work.periods.tolist(),
            "rate_changes": len(work.changes) // 2, "nr_subscribers_per_broker": nr.tolist()}


def run(setup: Setup, names: list[str] | None = None, progress=print) -> dict:
    chosen = [s for s in schemes() if names is None or s.name in names]
    if names is not None and len(chosen) != len(names):
        known = {s.name for s in schemes()}
        raise ValueError(f"unknown scheme(s) {sorted(set(names) - known)}; known: {', '.join(sorted(known))}")
    started = time.monotonic()
    work = workload(setup)
    progress(f"workload: {describe(setup, work)} ({time.monotonic() - started:.1f} s)")
    results = {}
    for scheme in chosen:
        begun = time.monotonic()
        results[scheme.name] = simulate(setup, work, scheme)
        tot = results[scheme.name]["totals"]
        progress(f"{scheme.name:>13}: max {tot['max_load_mb_s']:8.1f} MB/s  cov {tot['cov']:.3f}  "
                 f"migrations {tot['migrations']:6d}  shuffles {tot['shuffles']}  "
                 f"({time.monotonic() - begun:.1f} s)")
    return {"setup": asdict(setup), "workload": describe(setup, work), "schemes": results,
            "runtime_s": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 brokers, 300 subscribers, 3 minutes (seconds)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help=f"JSON path (default {OUT}, bad-quick.json)")
    parser.add_argument("--schemes", default=None, help="comma-separated scheme names (default: all)")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument("--figures-only", action="store_true", help="verdicts and figures again from the JSON")
    args = parser.parse_args(argv)
    setup = QUICK if args.quick else Setup()
    setup = Setup(**{**asdict(setup), "seed": args.seed})
    out = args.out or (OUT.with_name("bad-quick.json") if args.quick else OUT)
    if args.figures_only:
        data = json.loads(out.read_text())
    else:
        try:
            data = run(setup, args.schemes.split(",") if args.schemes else None)
        except ValueError as error:
            print(f"bench-bad: {error}", file=sys.stderr)
            return 2
        data["time"] = time.time()
    from testbed.systems.bad.bench import sim_figures as bad_sim

    data["verdicts"] = bad_sim.verdicts(data)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    print(f"wrote {out} (runtime {data['runtime_s']} s)")
    print(bad_sim.table(data))
    for verdict in data["verdicts"]:
        print(f"[{'holds' if verdict['holds'] else 'FAILS'}] {verdict['claim']}: {verdict['numbers']}")
    if not args.no_figures:
        for path in bad_sim.draw(data, out.parent, prefix="badsim-quick-" if args.quick else "badsim-"):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
