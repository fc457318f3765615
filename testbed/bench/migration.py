"""`make bench-migration`: topic migration overheads, enhanced (ePulsar) vs baseline (Pulsar) (paper 5.7, Fig. 7).

Two edge brokers, one client per topic, the real topic manager in `pingpong` mode moving every topic
from one broker to the other each round. Varied: topics, one-way WAN latency between the edge and
the topic manager (the cloud), migration executors. Measured from the manager's and the clients'
own events: per-topic migration time (release sent -> release complete, and from the round's
decision, which adds the wait for an executor) and each client's downtime (redirect or disconnect
-> first message through the new broker).

The network is scenarios/bench/migration.yaml with the swept WAN latency as its cloud's one-way
delay; the system is assembled by `PubSubSystem`, as in a run.

Writes results/bench/migration.json (per configuration its medians, and every per-topic migration
and per-client downtime) and prints the table; `analysis.bench_figures` draws fig7a.png and
fig7b.png from it (`--figures-only` redraws them).

    python -m testbed.bench.migration [--quick] [--figures-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from testbed.experiment import Session
from testbed.procs import json_lines, read_line
from testbed.roles.pubsub import ManagerOptions, PubSubSystem
from testbed.scenario.loader import load

OUT = Path("results/bench")
SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "bench" / "migration.yaml"
console = Console()


def scenario_at(wan_ms: float):
    """SCENARIO with the edge <-> topic manager one-way WAN latency set to `wan_ms`."""
    base = load(SCENARIO)
    cloud = base.infrastructure.cloud.model_copy(update={"one_way": wan_ms / 1e3})
    return base.model_copy(update={"infrastructure": base.infrastructure.model_copy(update={"cloud": cloud})})


def one(topics: int, wan_ms: float, workflow: str, executors: int, rounds: int = 2,
        period: float = 6.0) -> tuple[dict, list[dict], list[dict]]:
    """One configuration: `rounds` migrations of every topic. Returns its row of medians, every
    per-topic migration (release sent -> done, and from the round's decision) and every client's
    downtime, each tagged with the configuration (the columns analysis.figures.fig7a/7b read)."""
    log_dir = Path(tempfile.mkdtemp(prefix="testbed-bench-mig-"))
    with Session(scenario_at(wan_ms)) as session:
        system = PubSubSystem(session.network, session.topology, log_dir,
                              ManagerOptions(workflow=workflow, executors=executors, period=period, mode="pingpong",
                                             default="bzone1"),
                              monitoring_period=period)
        system.start()
        client = None
        ready = float("inf")
        try:
            rate = 20.0 if topics <= 32 else 10.0
            argv = [session.network.python, "-m", "testbed.systems.pubsub.multiclient", "--topics", str(topics),
                    "--lookup", system.lookup_url, "--rate", f"{rate:g}", "--events", str(log_dir / "clients.jsonl")]
            client = session.network.popen("cl1", argv, stdout=subprocess.PIPE, stderr=(log_dir / "mc.log").open("ab"),
                                           text=True)
            if read_line(client, 120) is None:
                raise RuntimeError(f"clients did not attach (see {log_dir / 'mc.log'})")
            ready = time.time()
            deadline = time.monotonic() + rounds * period + 90
            while time.monotonic() < deadline:
                # Only rounds decided once every client publishes count: a client that is not sending
                # yet would look down until its first message.
                done = [e for e in system.manager_events() if e["type"] == "migrations_done" and
                        e["time"] - e["total_s"] >= ready]
                if len(done) >= rounds:
                    break
                time.sleep(0.5)
            time.sleep(2.0)  # the last clients reattach
        finally:
            if client is not None and client.poll() is None:
                client.terminate()
                client.wait(timeout=10)
            system.stop()
    manager = system.manager_events()
    rounds_at = [e for e in manager if e["type"] == "round" and e.get("migrations") and e["time"] >= ready]
    ends = [e for e in manager if e["type"] == "migration_end" and e["time"] >= ready]
    config = {"n_topics": topics, "wan_one_way_s": wan_ms / 1e3, "workflow": workflow, "executors": executors}
    migrations = []
    for end in ends:
        decided = max((r["time"] for r in rounds_at if r["time"] <= end["time"]), default=None)
        migrations.append({**config, "topic": end["topic"], "ok": bool(end.get("ok")),
                           "migration_time_s": end["migration_s"],
                           "completion_s": end["time"] - decided if decided is not None else None})
    downtimes = [{**config, "topic": e.get("topic"), "client": e.get("client"), "reason": e.get("reason"),
                  "downtime_s": e["downtime_s"]}
                 for e in json_lines(log_dir / "clients.jsonl") if e["type"] == "downtime" and e["start"] >= ready]
    migration_s = [m["migration_time_s"] for m in migrations]
    completion_s = [m["completion_s"] for m in migrations if m["completion_s"] is not None]
    downtime = [d["downtime_s"] for d in downtimes]
    failed = [e for e in ends if not e.get("ok")]
    row = {"topics": topics, "wan_ms": wan_ms, "workflow": workflow, "executors": executors,
           "migrations": len(ends), "failed": len(failed),
           "migration_median_s": statistics.median(migration_s) if migration_s else None,
           "completion_median_s": statistics.median(completion_s) if completion_s else None,
           "downtime_median_s": statistics.median(downtime) if downtime else None,
           "downtime_p95_s": sorted(downtime)[int(0.95 * (len(downtime) - 1))] if downtime else None,
           "downtimes": len(downtime), "log_dir": str(log_dir)}
    return row, migrations, downtimes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small sweep")
    parser.add_argument("--figures-only", action="store_true",
                        help="redraw fig7a.png and fig7b.png from results/bench/migration.json")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    from analysis.bench_figures import draw

    if args.figures_only:
        draw("migration", directory=OUT)
        return 0
    if os.geteuid() != 0:
        console.print("bench-migration needs root (network namespaces)")
        return 1
    wans = (10, 40) if args.quick else (10, 20, 40, 80)
    topic_counts = (1, 8) if args.quick else (1, 8, 32, 128)
    fig7a_topics = 8 if args.quick else 32
    plan = [("7a", fig7a_topics, wan, wf, 16) for wan in wans for wf in ("enhanced", "baseline")]
    plan += [("7b", n, 40, "enhanced", e) for n in topic_counts for e in (1, 4, 16)]
    plan += [("7b", n, 40, "baseline", 1) for n in topic_counts]
    rows, migrations, downtimes = [], [], []
    for figure, topics, wan, workflow, executors in plan:
        console.print(f"Fig. {figure}: {topics} topics, WAN {wan} ms, {workflow}, {executors} executors ...")
        row, moved, down = one(topics, wan, workflow, executors)
        rows.append({**row, "figure": figure})
        migrations += [{**m, "figure": figure} for m in moved]
        downtimes += [{**d, "figure": figure} for d in down]
        console.print(f"  migrations {row['migrations']} (failed {row['failed']}), per-topic "
                      f"{row['migration_median_s']}, from decision {row['completion_median_s']}, "
                      f"downtime median {row['downtime_median_s']} over {row['downtimes']} clients")
    data = {"time": time.time(), "scenario": str(SCENARIO.relative_to(SCENARIO.parents[2])), "rows": rows,
            "migrations": migrations, "downtimes": downtimes}
    (OUT / "migration.json").write_text(json.dumps(data, indent=2))
    draw("migration", data, OUT)
    table = Table("fig", "topics", "WAN ms", "workflow", "executors", "per-topic ms", "from decision ms",
                  "downtime ms (median)", title="Topic migration overheads (paper 5.7)")
    ms = lambda v: f"{1e3 * v:.0f}" if v is not None else "-"  # noqa: E731
    for r in rows:
        table.add_row(r["figure"], str(r["topics"]), f"{r['wan_ms']:g}", r["workflow"], str(r["executors"]),
                      ms(r["migration_median_s"]), ms(r["completion_median_s"]), ms(r["downtime_median_s"]))
    console.print(table)
    console.print(f"written {OUT / 'migration.json'}, fig7a.png, fig7b.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
