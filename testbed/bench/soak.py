"""`make bench-soak`: a long run of the UAV smoke (mobility, both swarms) with a broker crashed and
restarted every few minutes, watching whether anything grows: the resident memory and the open
file descriptors of every class of process.

The run is `scenarios/uav-smoke.yaml` at `--minutes` (30), its zone brokers killed in turn every
`--kill-every` (5 min) and restarted `--down-for` (60 s) later. Its health monitor samples memory
per process class every second and open files every 10 s (testbed.monitor). A class is judged over
the run after `WARM_UP_S`: its level at the start (median of the first `WINDOW_S`) against its level
at the end (median of the last `WINDOW_S`), with the bound `growth_bound` says; the least-squares
slope is reported beside it. Deliveries against the expected count say what the crashes lost (the
data plane is at-most-once: nothing is acknowledged to a publisher, so nothing acknowledged can be
lost until durable topics exist). Result: results/bench/soak.json, soak.png.

    python -m testbed.bench.soak [--minutes 30] [--kill-every 300] [--down-for 60]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from testbed.bench.runs import run_scenario
from testbed.procs import json_lines

OUT = Path("results/bench")
BASE = Path("scenarios/uav-smoke.yaml")
WARM_UP_S = 120.0  # caches, JIT and connection pools fill in the first minutes
WINDOW_S = 180.0   # the start and end levels are medians over this long
SETTLE_S = 15.0


def growth_bound(start: float, ceiling: float | None = None) -> float:
    """How much a class may grow from start to end of a soak: 10 % of its start level, and at
    least 16 MB of memory or 16 descriptors (a restarted JVM or Python process settles at a
    slightly different size; a leak of one buffer or socket per message or per crash grows past
    this within minutes at 160 messages/s and one crash every 5 min). A class with a `ceiling` may
    grow up to it: the delay-line relays map their rings whole at start (MAP_NORESERVE) and the
    pages become resident as a queue that never empties walks through them, so their resident
    memory rises towards the mapping and cannot pass it."""
    return max(0.10 * start, 16.0, (ceiling - start) if ceiling is not None else 0.0)


def scenario(minutes: float, kill_every: float, down_for: float, brokers: list[str]) -> dict:
    """uav-smoke for `minutes`, its brokers killed in turn every `kill_every` s from the first on."""
    data = yaml.safe_load(BASE.read_text())
    duration = 60.0 * minutes
    faults, at, turn = [], kill_every, 0
    while at + down_for < duration - 10.0:
        faults.append({"at": f"{at:g}s", "kill": brokers[turn % len(brokers)], "restart_after": f"{down_for:g}s"})
        at, turn = at + kill_every, turn + 1
    data.update(name="soak", duration=f"{duration:g}s", faults=faults,
                description=f"uav-smoke for {minutes:g} min, a zone broker killed every {kill_every:g} s for {down_for:g} s")
    data.pop("outputs", None)
    return data


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


def _slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value), per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx, my = sum(t for t, _ in points) / n, sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 3600.0 * sum((t - mx) * (v - my) for t, v in points) / var if var else None


def judge(rows: list[dict], key: str, ceilings: dict[str, float] | None = None) -> dict:
    """Per class of `rows[*][key]` (a {class: value} per sample): start, end, growth, bound (with
    `ceilings[class]` where one is known), slope."""
    end_s = max((r["elapsed_s"] for r in rows), default=0.0)
    series: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        if row["elapsed_s"] < WARM_UP_S:
            continue
        for name, value in (row.get(key) or {}).items():
            series.setdefault(name, []).append((row["elapsed_s"], float(value)))
    out = {}
    for name, points in sorted(series.items()):
        start = _median([v for t, v in points if t < WARM_UP_S + WINDOW_S])
        end = _median([v for t, v in points if t >= end_s - WINDOW_S])
        if start is None or end is None:
            continue
        bound = growth_bound(start, (ceilings or {}).get(name))
        out[name] = {"start": round(start, 1), "end": round(end, 1), "max": round(max(v for _, v in points), 1),
                     "growth": round(end - start, 1), "bound": round(bound, 1),
                     "slope_per_hour": None if (s := _slope_per_hour(points)) is None else round(s, 1),
                     "holds": end - start <= bound}
    return out


def measure(run_dir: Path) -> dict:
    rows = list(json_lines(run_dir / "health.jsonl"))
    summary = json.loads((run_dir / "summary.json").read_text())
    meta = json.loads((run_dir / "run.json").read_text())
    mapped = max((r.get("relays_mapped_mb") or 0.0 for r in rows), default=0.0)
    memory = judge(rows, "memory_mb_by_class", {"relays": mapped} if mapped else None)
    files = judge(rows, "open_files_by_class")
    failover = summary.get("failover", {})
    return {"run": str(run_dir), "seconds": len(rows), "complete": meta.get("complete"), "relays_mapped_mb": mapped,
            "harness_valid": summary["harness"]["valid"], "saturated_seconds": summary["harness"]["saturated_seconds"],
            "faults": meta.get("faults", []), "memory_mb": memory, "open_files": files,
            "holds": all(c["holds"] for c in memory.values()) and all(c["holds"] for c in files.values()),
            "published": summary.get("published"), "delivered": summary.get("delivered"),
            "expected": summary.get("expected_deliveries"),
            "downtime_p50_s": failover.get("downtime_p50_s"), "downtime_max_s": failover.get("downtime_max_s"),
            "clients_lost_broker": failover.get("clients_lost_broker"),
            "clients_recovered": failover.get("clients_recovered"),
            "brokers_restarted": len(failover.get("brokers_restarted", []))}


def figure(result: dict, run_dir: Path, out: Path) -> None:
    """Memory and open files per class over the soak, the crashes marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(json_lines(run_dir / "health.jsonl"))
    fig, axes = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    for ax, key, label in ((axes[0], "memory_mb_by_class", "resident memory (MB)"),
                           (axes[1], "open_files_by_class", "open file descriptors")):
        names = sorted({n for r in rows for n in (r.get(key) or {})})
        for name in names:
            points = [(r["elapsed_s"] / 60.0, r[key][name]) for r in rows if name in (r.get(key) or {})]
            ax.plot([t for t, _ in points], [v for _, v in points], linewidth=1.0, label=name)
        for i, fault in enumerate(result["faults"]):
            ax.axvspan(fault["from_s"] / 60.0, (fault["to_s"] or fault["from_s"]) / 60.0, color="red", alpha=0.15,
                       linewidth=0, label="broker killed until its restart" if i == 0 else None)
        ax.axvline(WARM_UP_S / 60.0, color="grey", linestyle=":", label="end of warm-up")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[1].set_xlabel("time since run start (min)")
    verdict = "no class grew past its bound" if result["holds"] else "a class grew past its bound"
    axes[0].set_title(f"Soak: {result['seconds'] / 60:.0f} min of uav-smoke with broker crashes ({verdict})")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kill-every", type=float, default=300.0, help="seconds between broker crashes")
    parser.add_argument("--down-for", type=float, default=60.0, help="seconds until a crashed broker restarts")
    parser.add_argument("--backend", default="mininet")
    parser.add_argument("--out", type=Path, default=OUT / "soak.json")
    args = parser.parse_args(argv)
    if args.minutes * 60.0 < WARM_UP_S + 2 * WINDOW_S:
        parser.error(f"--minutes must leave a warm-up and two windows: at least {(WARM_UP_S + 2 * WINDOW_S) / 60:g}")
    runs = args.out.parent / "soak" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    path = args.out.parent / "soak" / "soak.yaml"
    path.write_text(yaml.safe_dump(scenario(args.minutes, args.kill_every, args.down_for,
                                            ["bzone1", "bzone2", "bzone3", "bzone4"]), sort_keys=False))
    print(f"soak: {args.minutes:g} min of {BASE} with a broker crash every {args.kill_every:g} s "
          f"(scenario {path}); the run's own progress is in its directory under {runs}", flush=True)
    began = time.time()
    run_dir, why = run_scenario(path, runs, args.backend)
    if run_dir is None:
        print(f"soak: the run failed: {why}", file=sys.stderr)
        return 1
    result = {"time": time.time(), "took_s": round(time.time() - began, 1), "minutes": args.minutes,
              "kill_every_s": args.kill_every, "down_for_s": args.down_for, **measure(run_dir)}
    figure(result, run_dir, args.out.with_suffix(".png"))
    args.out.write_text(json.dumps(result, indent=1))
    for key, unit in (("memory_mb", "MB"), ("open_files", "fds")):
        for name, c in result[key].items():
            print(f"  {key:10s} {name:14s} {c['start']:8.1f} -> {c['end']:8.1f} {unit} (growth {c['growth']:+.1f}, "
                  f"bound {c['bound']:.1f}, slope {c['slope_per_hour']}/h): {'holds' if c['holds'] else 'GROWS'}")
    print(f"soak: {'holds' if result['holds'] else 'GROWTH PAST A BOUND'}; harness "
          f"{'valid' if result['harness_valid'] else 'saturated %d s' % result['saturated_seconds']}; "
          f"delivered {result['delivered']} of {result['expected']}; wrote {args.out}")
    return 0 if result["holds"] else 1


if __name__ == "__main__":
    sys.exit(main())
