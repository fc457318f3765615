"""`make bench-autotune`: the auto-tuned batching publisher (Balasubramanian et al.) on the live
emulated WAN, the paper's Fig. 8-14 as our own, and RTTs beyond its one.

Every experiment is one run of `scenarios/autotune.yaml` with its source (and for some its
variants, subscriber or RTT) changed; the publishers of a run are fed the same arrivals side by
side, so their differences are the publisher's. Experiments:

    load-1.75 .. load-55  Poisson at the paper's four loads, N fixed 1-50 and tuned from 1-50 (Fig. 8, 9; 10 at 35)
    steps                 Table II's profile, time-scaled to 120 s, tuned from 1 and 50 and N fixed 10 (Fig. 11)
    trace-x1, trace-x50   the synthetic sLS trace as is (180 s) and 50x faster (60 s) (Fig. 12-14)
    slow                  a slow subscriber and small buffers at 17.5/s: drops at the input (section V-B-3)
    rtt-20 .. rtt-280     35/s over other RTTs (the 140 ms one is load-35): where the best N goes

Per run and publisher: latency statistics from the traces (mean, percentiles for the boxplots),
drops, refusals, N's time-weighted mean; N over time (1 s means) for the tuned publishers; whether
the harness held the run. Runs land in results/bench/autotune/runs/, the result in
results/bench/autotune.json; testbed.systems.autotune.bench.figures draws it.

    python -m testbed.systems.autotune.bench.live [--only load-35,slow] [--reuse]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from testbed.bench.runs import chosen_experiments, experiment_parser, run_experiments, run_scenario, variant_file
from testbed.procs import json_lines, percentile
from testbed.systems.autotune.sources import TABLE_II

OUT = Path("results/bench")
BASE = Path("scenarios/autotune.yaml")
LOADS = (1.75, 17.5, 35.0, 55.0)  # requests/s, Fig. 8-9's panels
RTTS_MS = (20, 70, 280)  # beyond the paper; 140 ms is the base scenario
STEPS_SCALE = 0.12  # Table II's 1,000 s -> 120 s
ACCESS_AND_LOCAL_RTT_MS = 3.0  # 2 x (1 ms access + 0.5 ms local) in the base scenario
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def _variants(batches, tuned_from) -> list[dict]:
    return ([{"name": f"fixed{n}", "batch": n} for n in batches]
            + [{"name": f"auto{n}", "batch": n, "tuned": True} for n in tuned_from])


def experiments() -> dict[str, dict]:
    """Name -> changes to the base scenario (dotted paths into the YAML)."""
    found = {f"load-{rate:g}": {"workload.autotune.source": {"kind": "poisson", "rate": f"{rate:g}/s"}} for rate in LOADS}
    found["steps"] = {"duration": "120s", "workload.autotune.source": {"kind": "steps", "time_scale": STEPS_SCALE},
                      "workload.autotune.variants": _variants([10], [1, 50])}
    found["trace-x1"] = {"duration": "180s", "workload.autotune.source": {"kind": "trace", "trace": "sls-synthetic"}}
    found["trace-x50"] = {"workload.autotune.source": {"kind": "trace", "trace": "sls-synthetic", "speedup": 50}}
    found["slow"] = {"workload.autotune.source": {"kind": "poisson", "rate": "17.5/s"},
                     "workload.autotune.subscriber": {"pull_interval": "0.5s", "pull_time": "40ms"},
                     "workload.autotune.broker_buffer": 20, "workload.autotune.input_buffer": 50,
                     "workload.autotune.variants": _variants([10, 50], [10, 50])}
    for rtt in RTTS_MS:
        found[f"rtt-{rtt}"] = {"infrastructure.mec_zones.inter_site_rtt": f"{rtt - ACCESS_AND_LOCAL_RTT_MS:g}ms",
                               "workload.autotune.source": {"kind": "poisson", "rate": "35/s"},
                               "workload.autotune.variants": _variants([1, 2, 5, 10, 20, 50], [1, 50])}
    return found


def n_series(rows: list[dict], start: float, bucket_s: float = 1.0) -> list[list[float]]:
    """[[t s since start, mean N, mean lambda_est]] per bucket: N over time as the figures plot it."""
    buckets: dict[int, list[dict]] = {}
    for r in rows:
        if r["t"] >= start:
            buckets.setdefault(int((r["t"] - start) // bucket_s), []).append(r)
    out = []
    for k in sorted(buckets):
        rs = buckets[k]
        lam = [r["lambda_est"] for r in rs if r.get("lambda_est") is not None]
        out.append([k * bucket_s, round(sum(r["n"] for r in rs) / len(rs), 3),
                    round(sum(lam) / len(lam), 3) if lam else None])
    return out


def run_one(path: Path, runs: Path, backend: str) -> dict:
    run_dir, error = run_scenario(path, runs, backend)
    if run_dir is None or not (run_dir / "summary.json").exists():
        return {"ok": False, "error": error or f"{run_dir} has no summary.json"}
    summary = json.loads((run_dir / "summary.json").read_text())
    harness, tune = summary.get("harness", {}), summary["autotune"]
    start = min((e["time"] for e in json_lines(run_dir / "events.jsonl") if e.get("type") == "run_start"), default=0.0)
    variants = {}
    for name, v in tune["variants"].items():
        latencies = sorted(float(r["receive_time"]) - float(r["send_time"])
                           for r in json_lines(next((run_dir / "traces").glob(f"*-{name}.*.jsonl"), Path("/nonexistent"))))
        stats = {f"q{round(q * 100):02d}_ms": 1e3 * percentile(latencies, q) if latencies else None for q in QUANTILES}
        polls = list(json_lines(run_dir / "logs" / f"autotune-{name}.jsonl"))
        variants[name] = {**v, **stats, "series": n_series(polls, start) if v["tuned"] else None}
    return {"ok": True, "run": str(run_dir), "valid": harness.get("valid"), "seconds": harness.get("seconds"),
            "saturated_seconds": harness.get("saturated_seconds"), "rtt_ms": tune["rtt_ms"], "source": tune["source"],
            "subscriber": tune["subscriber"], "arrivals": len(json.loads((run_dir / "autotune-arrivals.json").read_text())),
            "duration_s": float(yaml.safe_load((run_dir / "scenario.yaml").read_text())["duration"].rstrip("s"))
            if (run_dir / "scenario.yaml").exists() else None,
            "variants": variants, "profile": step_profile(tune["source"])}


def step_profile(source: dict) -> list[list[float]] | None:
    """A steps source's profile as the figure draws it: [start s, requests/s], closed by the end."""
    if source.get("kind") != "steps":
        return None
    scale = source.get("time_scale", 1.0)
    rows = [(s["start"], s["end"], s["rate"]) for s in source["steps"]] if source.get("steps") else TABLE_II
    return [[start * scale, rate] for start, _end, rate in rows] + [[rows[-1][1] * scale, rows[-1][2]]]


def _progress(r: dict) -> str:
    best = min((v for v in r["variants"].values() if v["mean_ms"] is not None), key=lambda v: v["mean_ms"],
               default=None)
    return (f"best {'tuned from' if best and best['tuned'] else 'N ='} {best and best['batch']}: "
            f"{best and best['mean_ms']:.0f} ms; drops {sum(v['dropped'] or 0 for v in r['variants'].values())}")


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__.splitlines()[0], OUT / "autotune.json")
    parser.add_argument("--base", type=Path, default=BASE)
    args = parser.parse_args(argv)
    todo = experiments()
    chosen, results = chosen_experiments(parser, args, todo)
    return run_experiments(
        args, chosen, results,
        lambda name, work: variant_file(args.base, f"autotune-{name.replace('.', '')}", todo[name], work),
        run_one, _progress, "testbed.systems.autotune.bench.figures", extra={"base": str(args.base)})

if __name__ == "__main__":
    sys.exit(main())
