"""`make bench-migration`: topic migration overheads, enhanced (ePulsar) vs baseline (Pulsar) (paper 5.7, Fig. 7).

Two edge brokers, one client per topic (at most 32 per client process), the real topic manager in
`pingpong` mode moving every topic from one broker to the other each round. Varied: topics, one-way WAN latency between the edge and
the topic manager (the cloud), migration executors. Measured from the manager's and the clients'
own events: per-topic migration time (release sent -> release complete, and from the round's
decision, which adds the wait for an executor) and each client's downtime from its redirect or
disconnect, twice: until it is connected to the new broker (the paper's definition, `reconnect_s`)
and until the new broker has its traffic (ours, `downtime_s`; both workflows end it by the same step,
testbed.systems.pubsub.client). As the paper: Fig. 7a moves 128 topics at once with 16 executors.

The network is scenarios/bench/migration.yaml with the swept WAN latency as its cloud's one-way
delay; the system is assembled by `PubSubSystem`, as in a run. A configuration the paper draws in
both figures (128 topics at 40 ms) is measured once; the baseline runs one executor whatever it is
given (Pulsar migrates sequentially), so its configurations say 1.

Writes results/bench/migration.json (per configuration the medians with 95 % intervals over its
clients or topics, `analysis.stats.median_ci`, the harness's verdict on its clients (publisher
lateness, event-loop lag, CPU idle: `testbed.health`), and every per-topic migration and per-client
downtime) and prints the table; `analysis.bench_figures` draws fig7a.png and fig7b.png from it
(`--figures-only` redraws them). `--quick` (what `make paper` runs, ~5 min on the 2-core VM) keeps
128 topics for Fig. 7a at two WAN latencies, one round each.

`--clients compiled` puts each client process's publishers' data plane in one compiled engine
(testbed.systems.pubsub.engine); `--topics 128` keeps only the configurations with that many topics.

    python -m testbed.systems.pubsub.bench.migration [--quick] [--figures-only] [--clients compiled] [--topics 128]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed import screen
from testbed.screen import Table

from analysis.stats import from_dict, median_ci
from testbed import health
from testbed.experiment import Session
from testbed.procs import TICKS, json_lines, machine_ticks, read_line, stop_group
from testbed.stallprobe import StallProbe
from testbed.systems.pubsub.engine import health_path
from testbed.systems.pubsub.role import ManagerOptions, PubSubSystem
from testbed.scenario.loader import load

OUT = Path("results/bench")
SCENARIO = Path(__file__).resolve().parents[4] / "scenarios" / "bench" / "migration.yaml"
console = screen.console()


def scenario_at(wan_ms: float):
    """SCENARIO with the edge <-> topic manager one-way WAN latency set to `wan_ms`."""
    base = load(SCENARIO)
    cloud = base.infrastructure.cloud.model_copy(update={"one_way": wan_ms / 1e3})
    return base.model_copy(update={"infrastructure": base.infrastructure.model_copy(update={"cloud": cloud})})


PAPER_TOPICS = 128     # Fig. 7a: topics migrated at once (and the most of Fig. 7b)
PAPER_EXECUTORS = 16   # Fig. 7a: the enhanced workflow's migration executors
PAPER_WAN_MS = 40      # Fig. 7b: one-way WAN latency
# Clients per client process: 128 in one asyncio loop made the loop, not the system, set the
# downtime at a migration (the herd of reconnects left publishers 7-40 ms late: saturated).
TOPICS_PER_PROCESS = 32


def client_shares(topics: int) -> list[int]:
    """Topics per client process: as even as possible, at most TOPICS_PER_PROCESS each."""
    processes = max(1, math.ceil(topics / TOPICS_PER_PROCESS))
    return [topics // processes + (1 if i < topics % processes else 0) for i in range(processes)]


def _ci(values: list[float]) -> dict | None:
    return median_ci(values).as_dict() if values else None


def _harness(health_files: list[Path], cpu: list[tuple[float, int, int, int]], since: float, until: float,
             stalls: dict[int, dict] | None = None) -> dict:
    """The saturation guard's verdict (testbed.health) over the measured window: the client
    processes' per-second publisher lateness (merged) and worst event-loop lag, and the machine's
    CPU idle share, steal time and stalls (`stalls`: the stall probe's seconds; a second the
    hypervisor stalled is told apart from load)."""
    seconds: dict = {}
    for path in health_files:
        for line in json_lines(path) if path.exists() else []:
            if since - 1 <= line["s"] < until:
                hist, lag = seconds.setdefault(line["s"], (health.LatenessHistogram(), []))
                hist.merge(line["hist"])
                lag.append(line.get("loop_lag_max_ms", 0.0))
    rows = []
    budget = health.BUDGET.publisher_late_p99_ms
    for second, (hist, lag) in sorted(seconds.items()):
        row = {"elapsed_s": second - since, "publisher_n": hist.n, "publisher_over": hist.over(budget),
               "publisher_hist": hist.as_dict(), "publisher_late_max_ms": hist.max_ms,
               "loop_lag_max_ms": max(lag), **(stalls or {}).get(second, {})}
        mid = second + 0.5
        for (t0, total0, idle0, steal0), (t1, total1, idle1, steal1) in zip(cpu, cpu[1:]):
            if t0 <= mid < t1 and total1 > total0:
                row["cpu_idle"] = (idle1 - idle0) / (total1 - total0)
                row["cpu_steal_ms"] = round(1e3 * (steal1 - steal0) / TICKS / (t1 - t0), 1)  # as the monitor's
        rows.append(row)
    verdict = health.verdict(rows)
    keep = ("valid", "seconds", "saturated_seconds", "machine_seconds", "machine_stall_max_ms", "publisher_late_p99_ms", "publisher_late_max_ms",
            "cpu_idle_min", "cpu_idle_mean")
    return {**{k: verdict[k] for k in keep}, "loop_lag_max_ms": max((r["loop_lag_max_ms"] for r in rows), default=None),
            "describe": health.describe(verdict)}


def one(topics: int, wan_ms: float, workflow: str, executors: int, rounds: int = 2,
        period: float = 6.0, data_plane: str = "python") -> tuple[dict, list[dict], list[dict]]:
    """One configuration: `rounds` migrations of every topic, the publishers' data plane in nats-py
    or in one compiled engine per client process (`data_plane`: python | compiled). Returns its row (medians with 95 %
    intervals, the harness's verdict), every per-topic migration (release sent -> done, and from the
    round's decision) and every client's downtime (both definitions), each tagged with the
    configuration (the columns analysis.bench_figures.fig7 reads)."""
    log_dir = Path(tempfile.mkdtemp(prefix="testbed-bench-mig-"))
    cpu: list[tuple[float, int, int, int]] = []
    stalls: dict[int, dict] = {}
    with Session(scenario_at(wan_ms)) as session:
        probe = StallProbe(session.run_id)
        system = PubSubSystem(session.network, session.topology, log_dir,
                              ManagerOptions(workflow=workflow, executors=executors, period=period, mode="pingpong",
                                             default="bzone1"),
                              monitoring_period=period)
        system.start()
        clients: list[subprocess.Popen] = []
        shares = client_shares(topics)
        events = [log_dir / f"clients-{j}.jsonl" for j in range(len(shares))]
        health_files = [log_dir / f"health-{j}.jsonl" for j in range(len(shares))]
        if data_plane == "compiled":  # the publishers' lateness is the engine's
            health_files = [health_path(path) for path in health_files]
        ready = until = float("inf")
        try:
            probe.start()
            rate = 20.0 if topics <= 32 else 10.0
            for j, share in enumerate(shares):
                argv = [session.network.python, "-m", "testbed.systems.pubsub.multiclient", "--topics", str(share),
                        "--prefix", f"m{j}t", "--name", f"mc{j}", "--lookup", system.lookup_url,
                        "--rate", f"{rate:g}", "--events", str(events[j]), "--health", str(log_dir / f"health-{j}.jsonl"),
                        "--client-engine", data_plane]
                clients.append(session.network.popen("cl1", argv, stdout=subprocess.PIPE, text=True,
                                                     stderr=(log_dir / f"mc-{j}.log").open("ab")))
            for j, client in enumerate(clients):
                if read_line(client, 180) is None:
                    raise RuntimeError(f"clients did not attach (see {log_dir / f'mc-{j}.log'})")
            ready = time.time()
            deadline = time.monotonic() + rounds * period + 120
            while time.monotonic() < deadline:
                cpu.append((time.time(), *machine_ticks()[:3]))
                # Only rounds decided once every client publishes count: a client that is not sending
                # yet would look down until its first message.
                done = [e for e in system.manager_events() if e["type"] == "migrations_done" and
                        e["time"] - e["total_s"] >= ready]
                if len(done) >= rounds:
                    break
                time.sleep(0.5)
            # Every client whose topic moved ends its downtime (up to 20 s: a starved client process
            # took seconds to reattach 128 clients, and a fixed 2 s wait cut those downtimes off).
            moved = sum(1 for e in system.manager_events() if e["type"] == "migration_end" and e.get("ok")
                        and e["time"] >= ready)
            settle = time.monotonic() + 20
            while time.monotonic() < settle:
                time.sleep(0.5)
                cpu.append((time.time(), *machine_ticks()[:3]))
                closed = sum(1 for path in events for e in json_lines(path)
                             if e["type"] == "downtime" and e["start"] >= ready)
                if closed >= moved:
                    break
            until = time.time()
        finally:
            stop_group([c for c in clients if c.poll() is None], 10)
            probe.stop()
            probe.drain(stalls)
            system.stop()
    manager = system.manager_events()
    rounds_at = [e for e in manager if e["type"] == "round" and e.get("migrations") and e["time"] >= ready]
    ends = [e for e in manager if e["type"] == "migration_end" and e["time"] >= ready]
    config = {"n_topics": topics, "wan_one_way_s": wan_ms / 1e3, "workflow": workflow, "executors": executors,
              "clients": data_plane}
    migrations = []
    for end in ends:
        decided = max((r["time"] for r in rounds_at if r["time"] <= end["time"]), default=None)
        migrations.append({**config, "topic": end["topic"], "ok": bool(end.get("ok")),
                           "migration_time_s": end["migration_s"],
                           "completion_s": end["time"] - decided if decided is not None else None})
    downtimes = [{**config, "topic": e.get("topic"), "client": e.get("client"), "reason": e.get("reason"),
                  "downtime_s": e["downtime_s"], "reconnect_s": e.get("reconnect_s")}
                 for path in events for e in json_lines(path) if e["type"] == "downtime" and e["start"] >= ready]
    migration_s = [m["migration_time_s"] for m in migrations]
    completion_s = [m["completion_s"] for m in migrations if m["completion_s"] is not None]
    downtime = [d["downtime_s"] for d in downtimes]
    reconnect = [d["reconnect_s"] for d in downtimes if d["reconnect_s"] is not None]
    failed = [e for e in ends if not e.get("ok")]
    row = {"topics": topics, "wan_ms": wan_ms, "workflow": workflow, "executors": executors, "clients": data_plane,
           "rounds": rounds,
           "migrations": len(ends), "failed": len(failed),
           "migration": _ci(migration_s), "completion": _ci(completion_s), "downtime": _ci(downtime),
           "reconnect": _ci(reconnect),
           "migration_median_s": statistics.median(migration_s) if migration_s else None,
           "completion_median_s": statistics.median(completion_s) if completion_s else None,
           "downtime_median_s": statistics.median(downtime) if downtime else None,
           "reconnect_median_s": statistics.median(reconnect) if reconnect else None,
           "downtime_p95_s": sorted(downtime)[int(0.95 * (len(downtime) - 1))] if downtime else None,
           "downtimes": len(downtime), "harness": _harness(health_files, cpu, ready, until, stalls),
           "client_processes": len(shares),
           "log_dir": str(log_dir)}
    return row, migrations, downtimes


def plan(quick: bool) -> list[tuple[str, int, float, str, int]]:
    """(figure, topics, WAN ms, workflow, executors) per configuration, as the paper sweeps them:
    Fig. 7a at 128 topics and 16 executors over the WAN latency, Fig. 7b at 40 ms over the topics
    and executors. The baseline always runs one executor (the manager ignores more)."""
    wans = (10, PAPER_WAN_MS) if quick else (10, 20, PAPER_WAN_MS, 80)
    topic_counts = (8, PAPER_TOPICS) if quick else (1, 8, 32, PAPER_TOPICS)
    configs = [("7a", PAPER_TOPICS, wan, wf, PAPER_EXECUTORS if wf == "enhanced" else 1)
               for wan in wans for wf in ("enhanced", "baseline")]
    configs += [("7b", n, PAPER_WAN_MS, "enhanced", e) for n in topic_counts for e in (1, 4, PAPER_EXECUTORS)]
    configs += [("7b", n, PAPER_WAN_MS, "baseline", 1) for n in topic_counts]
    return configs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small sweep, 128 topics kept for Fig. 7a (~5 min)")
    parser.add_argument("--clients", choices=("python", "compiled"), default="python",
                        help="the publishers' data plane: nats-py, or the compiled client engine (one per client process)")
    parser.add_argument("--topics", default="", help="only the configurations with these topic counts (e.g. 128)")
    parser.add_argument("--figures-only", action="store_true",
                        help="redraw fig7a.png and fig7b.png from results/bench/migration.json")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    from testbed.systems.pubsub.bench.migration_figures import draw

    if args.figures_only:
        draw(json.loads((OUT / "migration.json").read_text()), OUT)
        return 0
    if os.geteuid() != 0:
        console.print("bench-migration needs root (network namespaces)")
        return 1
    rounds = 1 if args.quick else 2
    started = time.monotonic()
    rows, migrations, downtimes = [], [], []
    measured: dict[tuple, tuple] = {}
    only = {int(n) for n in args.topics.split(",") if n.strip()}
    for figure, topics, wan, workflow, executors in plan(args.quick):
        if only and topics not in only:
            continue
        key = (topics, wan, workflow, executors)
        if key not in measured:
            console.print(f"Fig. {figure}: {topics} topics, WAN {wan} ms, {workflow}, {executors} executors ...")
            measured[key] = one(topics, wan, workflow, executors, rounds=rounds, data_plane=args.clients)
            row = measured[key][0]
            console.print(f"  migrations {row['migrations']} (failed {row['failed']}), per-topic "
                          f"{row['migration_median_s']}, from decision {row['completion_median_s']}, downtime median "
                          f"{row['downtime_median_s']} (to reconnect {row['reconnect_median_s']}) over "
                          f"{row['downtimes']} clients; {row['harness']['describe']}")
        row, moved, down = measured[key]
        rows.append({**row, "figure": figure})
        migrations += [{**m, "figure": figure} for m in moved]
        downtimes += [{**d, "figure": figure} for d in down]
    data = {"time": time.time(), "scenario": str(SCENARIO.relative_to(SCENARIO.parents[2])), "quick": args.quick,
            "clients": args.clients, "wall_s": round(time.monotonic() - started, 1), "rows": rows, "migrations": migrations,
            "downtimes": downtimes}
    (OUT / "migration.json").write_text(json.dumps(data, indent=2))
    draw(data, OUT)
    table = Table("fig", "topics", "WAN ms", "workflow", "executors", "per-topic ms", "from decision ms",
                  "downtime ms (ours)", "to reconnect ms (paper)", "harness",
                  title="Topic migration overheads (paper 5.7), medians [95 % CI]")
    ms = lambda v: from_dict(v).text("{:.0f}", scale=1e3) if v else "-"  # noqa: E731
    for r in rows:
        table.add_row(r["figure"], str(r["topics"]), f"{r['wan_ms']:g}", r["workflow"], str(r["executors"]),
                      ms(r["migration"]), ms(r["completion"]), ms(r["downtime"]), ms(r["reconnect"]),
                      "valid" if r["harness"]["valid"] else f"saturated {r['harness']['saturated_seconds']} s")
    console.print(table)
    console.print(f"written {OUT / 'migration.json'}, fig7a.png, fig7b.png in {data['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
