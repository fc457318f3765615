"""`make bench-handover`: handover-aware placement (beyond the paper: testbed.policies.handover) against
the paper's periodic control loop, on the same flights.

Each pair of runs is one UAV flight (scenarios/uav-smoke.yaml, same seed; and the paper's own case,
scenarios/uav-comparable.yaml: 8 swarms for 10 minutes) with the handover trigger
off (the paper: a swarm stays above its threshold until the next NC report, the next monitoring round
and the migration) and on (the swarm reports at once, its broker writes its report, the topic manager
runs an early round for its topics). The runs alternate, so the machine's noise falls on both. A
border flight (scenarios/uav-border.yaml: one swarm changing zone every 4 s) with the trigger on and
off measures ping-pong: topic migrations per handover of the topic's node. Per run: the post-handover windows (Fig. 8's, from
the run's reduced `time_above` table: from a relink until the node's topics are back under their
threshold), the share of messages over the threshold, migrations, and the monitoring cost (NC reports
sent at once and monitoring reports written early, against the periodic ones). Result:
results/bench/handover.json; testbed.systems.pubsub.bench.handover_figures draws and judges it.

    python -m testbed.systems.pubsub.bench.handover [--only trigger-s3,periodic-s3] [--reuse]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from testbed.bench.runs import chosen_experiments, experiment_parser, run_experiments, run_scenario, variant_file
from testbed.procs import json_lines

OUT = Path("results/bench")
FLIGHT = Path("scenarios/uav-smoke.yaml")
COMPARABLE = Path("scenarios/uav-comparable.yaml")  # the paper's UAV case: 8 swarms, 10 min
BORDER = Path("scenarios/uav-border.yaml")
SEEDS = (3, 5)
ON = {"control.handover_trigger": {"enabled": True}}
OFF = {"control.handover_trigger": {"enabled": False}}


def experiments() -> dict[str, tuple[Path, dict]]:
    """name -> (base scenario, its changes); each flight's periodic run before its triggered one."""
    found = {}
    for seed in SEEDS:
        found[f"periodic-s{seed}"] = (FLIGHT, {"seed": seed, **OFF})
        found[f"trigger-s{seed}"] = (FLIGHT, {"seed": seed, **ON})
    found["border-periodic"] = (BORDER, OFF)
    found["border-trigger"] = (BORDER, ON)
    found["comparable-periodic"] = (COMPARABLE, OFF)
    found["comparable-trigger"] = (COMPARABLE, ON)
    return found


def windows(run_dir: Path) -> list[dict]:
    """Fig. 8's post-handover windows of one run: per relink, the longest of its topics' time above
    the threshold (analysis.jobs.time_above_threshold_after_relink, as `make paper` reduces it)."""
    from analysis.reduce import reduce_run
    from analysis.spark import session

    spark = session()
    reduce_run(spark, str(run_dir))
    rows = [r.asDict() for r in spark.read.parquet(str(run_dir / "tables" / "time_above.parquet")).collect()]
    per_relink: dict[tuple, dict] = {}
    for r in rows:
        key = (r["node"], r["relink_time"])
        entry = per_relink.setdefault(key, {"node": r["node"], "t_s": r["t_s"], "window_s": 0.0, "closed": True})
        entry["window_s"] = max(entry["window_s"], r["time_above_s"] or 0.0)
        entry["closed"] = entry["closed"] and bool(r["closed"])
    return sorted(per_relink.values(), key=lambda w: w["t_s"])


CHAIN = ("detected", "reported", "round", "moved")  # the reaction's steps, in the order they follow a relink


def reaction_chain(events: list[dict]) -> list[dict]:
    """Per relink, when each step of the trigger's reaction came, in seconds after it: the node's
    clients saw the new coordinate (`handover_detected`), its broker wrote the early report, the
    manager's early round for its topics, and the last of its topics' migrations ended. A step that
    did not come before the node's next relink is None (the periodic loop has no early steps)."""
    relinks = sorted((e for e in events if e.get("type") == "relink"), key=lambda e: e["time"])
    chains = []
    for k, relink in enumerate(relinks):
        node, began = relink["node"], relink["time"]
        until = min((r["time"] for r in relinks[k + 1:] if r["node"] == node), default=float("inf"))

        def first(kind: str, concerns) -> float | None:
            times = [e["time"] for e in events if e.get("type") == kind and began <= e["time"] < until and concerns(e)]
            return round(min(times) - began, 3) if times else None

        mine = f"-{node}"
        moved: dict[str, float] = {}  # each of its topics' first move after the relink
        for e in events:
            if e.get("type") == "migration_end" and began <= e["time"] < until and e.get("topic", "").endswith(mine):
                moved[e["topic"]] = min(moved.get(e["topic"], e["time"]), e["time"])
        chains.append({"node": node, "t": round(began, 3),
                       "detected": first("handover_detected", lambda e: e.get("node") == node),
                       "reported": first("early_report", lambda e: any(t.endswith(mine) for t in e.get("topics", ()))),
                       "round": first("early_round", lambda e: any(t.endswith(mine) for t in e.get("topics", ()))),
                       "moved": round(max(moved.values()) - began, 3) if moved else None})
    return chains


def monitoring(run_dir: Path) -> dict:
    """NC reports and monitoring reports, periodic and early, summed over the brokers' counters."""
    totals: dict[str, int] = {}
    for path in (run_dir / "logs").glob("broker-*.events.jsonl"):
        for event in json_lines(path):
            if event.get("type") == "broker_counters":
                for key in ("nc_reports", "nc_reports_now", "reports_written", "early_reports"):
                    totals[key] = totals.get(key, 0) + int(event.get(key, 0))
    return totals


def run_one(path: Path, runs: Path, backend: str) -> dict:
    run_dir, error = run_scenario(path, runs, backend)
    if run_dir is None or not (run_dir / "summary.json").exists():
        return {"ok": False, "error": error or f"{run_dir} has no summary.json"}
    summary = json.loads((run_dir / "summary.json").read_text())
    harness = summary.get("harness", {})
    events = list(json_lines(run_dir / "events.jsonl"))
    found = windows(run_dir)
    sizes = [w["window_s"] for w in found]
    messages = sum(c["messages"] for c in summary.get("classes", {}).values())
    above = sum(round(c["messages"] * (c["violation_ratio"] or 0.0)) for c in summary.get("classes", {}).values())
    relinks = [e for e in events if e.get("type") == "relink"]
    handovers = len(relinks)
    # a handover concerns the moving node's topics (a swarm's follow_leader-<swarm> and sensor_data-<swarm>)
    topics = {p.name.split(".", 1)[0] for p in (run_dir / "traces").glob("*.jsonl")}
    concerned = sum(sum(t.endswith(f"-{e['node']}") for t in topics) for e in relinks)
    return {"ok": True, "run": str(run_dir), "valid": harness.get("valid"),
            "saturated_seconds": harness.get("saturated_seconds"), "handovers": handovers,
            "windows": found, "window_median_s": statistics.median(sizes) if sizes else None,
            "window_max_s": max(sizes) if sizes else None, "windows_open": sum(not w["closed"] for w in found),
            "messages": messages, "above": above, "above_ratio": above / messages if messages else None,
            "migrations": summary.get("migrations"),
            "topic_handovers": concerned,  # a topic migration per concerned topic per handover is the most that follows
            "migrations_per_handover": (summary.get("migrations") or 0) / concerned if concerned else None,
            "early_rounds": sum(e.get("type") == "early_round" for e in events),
            "detected": sum(e.get("type") == "handover_detected" for e in events),
            "chain": reaction_chain(events), "monitoring": monitoring(run_dir)}


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__.splitlines()[0], OUT / "handover.json")
    args = parser.parse_args(argv)
    todo = experiments()
    chosen, results = chosen_experiments(parser, args, todo)
    return run_experiments(
        args, chosen, results, lambda name, work: variant_file(todo[name][0], f"handover-{name}", todo[name][1], work),
        run_one, lambda r: (f"{r['handovers']} handovers, windows median {r['window_median_s']} s, max "
                            f"{r['window_max_s']} s; {r['migrations']} migrations, {r['early_rounds']} early rounds"),
        "testbed.systems.pubsub.bench.handover_figures")

if __name__ == "__main__":
    sys.exit(main())
