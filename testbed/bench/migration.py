"""`make bench-migration`: topic migration overheads, enhanced (ePulsar) vs baseline (Pulsar) (paper 5.7, Fig. 7).

Two edge brokers, one client per topic, the real topic manager in `pingpong` mode moving every topic
from one broker to the other each round. Varied: topics, one-way WAN latency between the edge and
the topic manager (the cloud), migration executors. Measured from the manager's and the clients'
own events: per-topic migration time (release sent -> release complete, and from the round's
decision, which adds the wait for an executor) and each client's downtime (redirect or disconnect
-> first message through the new broker).

Writes results/bench/migration.json, fig7a.png, fig7b.png and prints the tables.
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
from testbed.roles.pubsub import ManagerOptions, PubSubSystem, wait_ready
from testbed.scenario.loader import parse_text

OUT = Path("results/bench")
console = Console()


def _scenario(wan_ms: float):
    return parse_text(f"""
name: bench-migration
duration: 10m
infrastructure:
  mec_zones: {{zones: 2, inter_site_rtt: 2ms}}
  cloud: {{one_way: {wan_ms}ms}}
  links: {{access: {{delay: 1ms}}, local: {{delay: 0.5ms}}}}
nodes:
  nc_proxies_per_site: 0
  clients:
    - {{name: cl, role: static, count: 1, site: zone1}}
emulation: {{backend: mininet}}
""")


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def one(topics: int, wan_ms: float, workflow: str, executors: int, rounds: int = 2, period: float = 6.0) -> dict:
    """One configuration: `rounds` migrations of every topic; returns the measured times."""
    log_dir = Path(tempfile.mkdtemp(prefix="testbed-bench-mig-"))
    with Session(_scenario(wan_ms)) as session:
        system = PubSubSystem(session.network, session.topology, log_dir,
                              ManagerOptions(workflow=workflow, executors=executors, period=period, mode="pingpong",
                                             default="bzone1"),
                              monitoring_period=period)
        system.start()
        client = None
        ready = float("inf")
        try:
            rate = 20.0 if topics <= 32 else 10.0
            argv = [sys.executable, "-m", "testbed.systems.pubsub.multiclient", "--topics", str(topics), "--lookup",
                    system.lookup_url, "--rate", f"{rate:g}", "--events", str(log_dir / "clients.jsonl")]
            client = session.network.popen("cl1", argv, stdout=subprocess.PIPE, stderr=(log_dir / "mc.log").open("ab"),
                                           text=True)
            if wait_ready(client, 120) is None:
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
    migration_s, completion_s = [], []
    for end in ends:
        decided = max((r["time"] for r in rounds_at if r["time"] <= end["time"]), default=None)
        migration_s.append(end["migration_s"])
        if decided is not None:
            completion_s.append(end["time"] - decided)
    downtime = [e["downtime_s"] for e in _events(log_dir / "clients.jsonl")
                if e["type"] == "downtime" and e["start"] >= ready]
    failed = [e for e in ends if not e.get("ok")]
    return {"topics": topics, "wan_ms": wan_ms, "workflow": workflow, "executors": executors,
            "migrations": len(ends), "failed": len(failed),
            "migration_median_s": statistics.median(migration_s) if migration_s else None,
            "completion_median_s": statistics.median(completion_s) if completion_s else None,
            "downtime_median_s": statistics.median(downtime) if downtime else None,
            "downtime_p95_s": sorted(downtime)[int(0.95 * (len(downtime) - 1))] if downtime else None,
            "downtimes": len(downtime), "log_dir": str(log_dir)}


def figures(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for workflow, label in (("enhanced", "ePulsar (enhanced)"), ("baseline", "Pulsar (baseline)")):
        series = sorted((r for r in rows if r["figure"] == "7a" and r["workflow"] == workflow and r["downtime_median_s"]),
                        key=lambda r: r["wan_ms"])
        ax.errorbar([r["wan_ms"] for r in series], [1e3 * r["downtime_median_s"] for r in series],
                    yerr=[[0] * len(series), [1e3 * (r["downtime_p95_s"] - r["downtime_median_s"]) for r in series]],
                    marker="o", capsize=3, label=label)
    first = next((r for r in rows if r["figure"] == "7a"), None)
    ax.set_xlabel("one-way WAN latency, edge broker <-> topic manager (ms)")
    ax.set_ylabel("client downtime (ms), median, bar to p95")
    if first:
        ax.set_title(f"Fig. 7a: client downtime, {first['topics']} topics migrated at once, "
                     f"{first['executors']} executors", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "fig7a.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    keys = sorted({(r["workflow"], r["executors"]) for r in rows if r["figure"] == "7b"})
    for workflow, executors in keys:
        series = sorted((r for r in rows if r["figure"] == "7b" and r["workflow"] == workflow
                         and r["executors"] == executors and r["completion_median_s"]), key=lambda r: r["topics"])
        label = f"ePulsar, {executors} executors" if workflow == "enhanced" else "Pulsar (sequential)"
        ax.plot([r["topics"] for r in series], [1e3 * r["completion_median_s"] for r in series], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("topics migrated at once")
    ax.set_ylabel("median per-topic migration time (ms)\nfrom the decision, incl. waiting for an executor")
    ax.set_title("Fig. 7b: per-topic migration time (one-way WAN latency 40 ms)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "fig7b.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small sweep")
    parser.add_argument("--figure-only", action="store_true", help="redraw from results/bench/migration.json")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.figure_only:
        figures(json.loads((OUT / "migration.json").read_text())["rows"])
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
    rows = []
    for figure, topics, wan, workflow, executors in plan:
        console.print(f"Fig. {figure}: {topics} topics, WAN {wan} ms, {workflow}, {executors} executors ...")
        row = one(topics, wan, workflow, executors)
        row["figure"] = figure
        rows.append(row)
        console.print(f"  migrations {row['migrations']} (failed {row['failed']}), per-topic "
                      f"{row['migration_median_s']}, from decision {row['completion_median_s']}, "
                      f"downtime median {row['downtime_median_s']} over {row['downtimes']} clients")
    (OUT / "migration.json").write_text(json.dumps({"time": time.time(), "rows": rows}, indent=2))
    figures(rows)
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
