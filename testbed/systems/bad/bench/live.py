"""`make bench-bad-live`: BAD's schemes on the live emulated network (Nguyen et al., DEBS '19).

The same scenario (`scenarios/bad-smoke.yaml` by default: 100 subscribers, 60 of them in zone1)
runs once per scheme, placement x migration (+ the shuffle), with everything else equal (seed,
subscribers, subscriptions, surges); per scheme it records what the run's summary says (cov and
max broker load at the first round with every subscriber and at the last, migrations, shuffles,
re-attach time, latency per channel) and whether the harness held (the run's own saturation
guard). Runs land in results/bench/bad-live/runs/, the table in results/bench/bad-live.json.

    python -m testbed.systems.bad.bench.live [--scenario scenarios/bad-smoke.yaml] [--schemes nr+ldm,rr+none,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from testbed.bench.runs import run_scenario

OUT = Path("results/bench")
SCHEMES = ("rnd+none", "rnd+ldm", "rnd+sdm", "rr+none", "rr+ldm", "rr+sdm",
           "nr+none", "nr+ldm", "nr+sdm", "nr+ldm+gsh", "nr+sdm+gsh")


def scheme_control(scheme: str) -> dict:
    """`nr+ldm+gsh` -> {placement: nr, migration: ldm, shuffle: true}."""
    parts = scheme.split("+")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "gsh"):
        raise ValueError(f"{scheme!r} is not placement+migration[+gsh], e.g. nr+ldm+gsh")
    return {"placement": parts[0], "migration": parts[1], "shuffle": len(parts) == 3}


def variant(scenario: Path, scheme: str, out: Path) -> Path:
    """The scenario with control.bad set to `scheme` (validated by the run itself)."""
    data = yaml.safe_load(scenario.read_text())
    data.setdefault("control", {}).setdefault("bad", {}).update(scheme_control(scheme))
    path = out / f"{scenario.stem}-{scheme.replace('+', '-')}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_one(path: Path, runs: Path, backend: str) -> dict:
    run_dir, error = run_scenario(path, runs, backend)
    if run_dir is None:
        return {"ok": False, "error": error}
    summary = json.loads((run_dir / "summary.json").read_text())
    harness = summary.get("harness", {})
    return {"ok": True, "run": str(run_dir), "bad": summary["bad"], "classes": summary["classes"],
            "valid": harness.get("valid"), "saturated_seconds": harness.get("saturated_seconds"),
            "seconds": harness.get("seconds")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=Path("scenarios/bad-smoke.yaml"))
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    parser.add_argument("--backend", default="mininet")
    parser.add_argument("--out", type=Path, default=OUT / "bad-live.json")
    args = parser.parse_args(argv)
    schemes = [s for s in args.schemes.split(",") if s]
    for scheme in schemes:
        scheme_control(scheme)
    work = args.out.parent / "bad-live"
    runs = work / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    results, started = {}, time.monotonic()
    for n, scheme in enumerate(schemes, 1):
        t = time.monotonic()
        results[scheme] = run_one(variant(args.scenario, scheme, work), runs, args.backend)
        r = results[scheme]
        line = (f"cov {r['bad']['cov_first']:.3f} -> {r['bad']['cov_last']:.3f}, {r['bad']['migrations']} migrations, "
                f"saturated {r['saturated_seconds']} of {r['seconds']} s" if r["ok"] else f"FAILED: {r['error'][-200:]}")
        print(f"[{n}/{len(schemes)}] {scheme}: {line} ({time.monotonic() - t:.0f} s)", flush=True)
    args.out.write_text(json.dumps({"scenario": str(args.scenario), "schemes": results,
                                    "elapsed_s": round(time.monotonic() - started, 1)}, indent=1))
    print(f"-> {args.out}")
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
