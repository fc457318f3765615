"""`make bench-durable`: durable topics (ePulsar paper 3.5) live: what storing costs in latency,
network and CPU by where the replicas are and how many, and whether anything acknowledged is lost
across migrations and crashes.

Experiments (each one run; the runs land in results/bench/durable/runs/):

    latency-none, latency-local-r1, latency-local-r3, latency-cloud-r1, latency-cloud-r3
        scenarios/durable-smoke.yaml's topology (2 zones and the cloud, 3 storage racks at each: 9
        storage nodes) with its swarm flying from zone1 to zone2 at 12 s (seed 10, 1000 m/s: its
        topics migrate) and no faults, both topic classes stored as named (none: NATS core, nothing
        stored; local: at the owning broker's site, ePulsar; cloud: in the cloud datacentre, as a
        cloud-centric Pulsar places its bookies). (uav-smoke's 4 zones need 15 storage nodes: with
        R3 the machine's two cores were saturated for 57 of 60 s.)
    latency-local-r1-debian, latency-local-r3-debian
        latency-local-r1/r3 on Debian's nats-server 2.9.10 (`nodes.nats_server: debian`), which syncs
        its store every 2 minutes, where the default 2.15.1 syncs before acknowledging: what the
        sync costs the acknowledgement
    loss-none, loss-r1-enhanced, loss-r3-enhanced, loss-r1-baseline, loss-r3-baseline
        the same flight, then the broker the topics migrated to (bzone2) killed at 25 s and a
        storage node of zone1 (where they fail over to) at 38 s for 6 s, per replica count
        (site-local) and migration workflow; loss-none is the same run without durability

Per run: publish-acknowledgement latency quantiles (the producers' acks/), end-to-end latency
quantiles (traces/), the audit of acknowledged messages against deliveries
(testbed.systems.pubsub.durability), resends and duplicates, migrations, storage nodes' traffic and CPU,
and whether the harness held the run. Result: results/bench/durable.json; testbed.systems.pubsub.bench.durable_figures
draws it.

    python -m testbed.systems.pubsub.bench.durable [--only latency-local-r3,loss-r3-enhanced] [--reuse]
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

from testbed.bench.runs import chosen_experiments, experiment_parser, run_experiments, run_scenario, variant_file
from testbed.procs import json_lines, percentile

OUT = Path("results/bench")
BASE = Path("scenarios/durable-smoke.yaml")
FLIGHT = {"seed": 10, "mobility": {"model": "random-waypoint", "speed": "1000m/s"}}  # zone1 -> zone2 at 12 s
FAULTS = [{"at": "25s", "kill": "bzone2"}, {"at": "38s", "kill": "s1zone1", "restart_after": "6s"}]
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


def _topics(durable: dict | None) -> list[dict]:
    return [{"name": name, "threshold": "40ms", **({"durable": durable} if durable else {})}
            for name in ("follow_leader", "sensor_data")]


def experiments() -> dict[str, tuple[Path, dict]]:
    """name -> (base scenario, its changes)."""
    found = {}
    for name, durable in (("none", None), ("local-r1", {"replicas": 1, "storage": "site-local"}),
                          ("local-r3", {"replicas": 3, "storage": "site-local"}),
                          ("cloud-r1", {"replicas": 1, "storage": "cloud"}),
                          ("cloud-r3", {"replicas": 3, "storage": "cloud"})):
        found[f"latency-{name}"] = (BASE, {**FLIGHT, "faults": [], "workload.topics": _topics(durable)})
    for replicas in (1, 3):  # the same on Debian's nats-server 2.9, which syncs to disk every 2 min, not per ack
        found[f"latency-local-r{replicas}-debian"] = (BASE, {
            **FLIGHT, "faults": [], "nodes.nats_server": "debian",
            "workload.topics": _topics({"replicas": replicas, "storage": "site-local"})})
    found["loss-none"] = (BASE, {**FLIGHT, "faults": FAULTS, "workload.topics": _topics(None)})
    for workflow in ("enhanced", "baseline"):
        for replicas in (1, 3):
            found[f"loss-r{replicas}-{workflow}"] = (BASE, {
                **FLIGHT, "faults": FAULTS, "workload.topics": _topics({"replicas": replicas, "storage": "site-local"}),
                "control.migration": {"workflow": workflow}})
    return found


def _quantiles_ms(values: list[float]) -> dict:
    values = sorted(values)
    return {f"q{round(q * 100):02d}_ms": round(1e3 * percentile(values, q), 3) if values else None for q in QUANTILES}


def _ack_latencies(run_dir: Path) -> list[float]:
    found = []
    for path in (run_dir / "acks").glob("*.csv"):
        with path.open(newline="") as handle:
            found += [float(r[4]) - float(r[3]) for r in csv.reader(handle) if len(r) == 5]
    return found


def _e2e_latencies(run_dir: Path) -> list[float]:
    return [float(r["receive_time"]) - float(r["send_time"]) for path in (run_dir / "traces").glob("*.jsonl")
            for r in json_lines(path)]


def _storage_cores(run_dir: Path) -> float | None:
    """Mean cores the storage nodes' nats-servers used while the workload ran (health.jsonl)."""
    rows = [r.get("cpu_by_class", {}).get("storage", 0.0) for r in json_lines(run_dir / "health.jsonl")
            if "cpu_by_class" in r]
    return round(statistics.fmean(rows), 4) if rows else None


def run_one(path: Path, runs: Path, backend: str) -> dict:
    run_dir, error = run_scenario(path, runs, backend)
    if run_dir is None or not (run_dir / "summary.json").exists():
        return {"ok": False, "error": error or f"{run_dir} has no summary.json"}
    summary = json.loads((run_dir / "summary.json").read_text())
    harness, storage = summary.get("harness", {}), summary.get("storage") or {}
    durable = summary.get("durable")
    return {"ok": True, "run": str(run_dir), "valid": harness.get("valid"),
            "saturated_seconds": harness.get("saturated_seconds"),
            "migrations": summary.get("migrations"), "published": summary.get("published"),
            "delivered": summary.get("delivered"), "expected": summary.get("expected_deliveries"),
            "faults": [e.get("type") for e in json_lines(run_dir / "events.jsonl")
                       if e.get("type") in ("broker_killed", "storage_killed")],
            "durable": durable, "ack": _quantiles_ms(_ack_latencies(run_dir)), "e2e": _quantiles_ms(_e2e_latencies(run_dir)),
            "storage_mb": round((storage.get("rx_bytes", 0) + storage.get("tx_bytes", 0)) / 1e6, 3) if storage else None,
            "streams_moved": storage.get("streams_moved"), "storage_cores": _storage_cores(run_dir)}


def _progress(r: dict) -> str:
    d = r["durable"] or {}
    return (f"ack p50 {r['ack']['q50_ms']} ms, e2e p50 {r['e2e']['q50_ms']} ms; "
            + (f"{d.get('lost')} of {d.get('owed')} acknowledged lost" if d else
               f"{r['delivered']} of {r['expected']} delivered"))


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__.splitlines()[0], OUT / "durable.json")
    args = parser.parse_args(argv)
    todo = experiments()
    chosen, results = chosen_experiments(parser, args, todo)
    return run_experiments(args, chosen, results,
                           lambda name, work: variant_file(todo[name][0], f"durable-{name}", todo[name][1], work),
                           run_one, _progress, "testbed.systems.pubsub.bench.durable_figures")

if __name__ == "__main__":
    sys.exit(main())
