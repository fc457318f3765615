"""`make bench-nc`: accuracy and overhead of Serf's network coordinates (paper 5.3, Fig. 3b).

Accuracy: a star of N real Serf agents, every node with the same one-way latency to one switch
(actual RTT between any two nodes = 4 x link delay); after convergence, the per-pair error
|estimated - actual| RTT: median, p95, relative to the RTT, and how long convergence took.
Convergence = the first snapshot from which the median relative error stays under 6 % for
`HOLD_S` seconds (testbed.roles.settle). Overhead: CPU % and RSS of the agents while each is queried
every 1 s and every 5 s. The networks are scenarios/nc-accuracy-n<N>.yaml at the asked RTT.

Writes results/bench/nc.json and prints the tables; `analysis.bench_figures.fig3b` draws
results/bench/fig3b.png from it (`--figures-only` redraws it).

    python -m testbed.bench.nc [--quick] [--nodes 2,4,8] [--rtts 20,100] [--figures-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from testbed import screen
from testbed.screen import Table

from analysis.stats import median_ci
from testbed.experiment import Session
from testbed.nc import snapshots
from testbed.procs import cpu_seconds
from testbed.roles.launch import SerfAgents
from testbed.roles.settle import settle
from testbed.scenario.loader import load

OUT = Path("results/bench")
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
console = screen.console()
POLL_S = 2.0
HOLD_S = 10.0
MAX_WAIT_S = 180.0
AFTER_S = 20.0
PAPER = {"median_error_ms": 3.5, "median_relative": 0.06, "cpu_percent": 1.0, "rss_mb": 15.0}


def _star(nodes: int, rtt_ms: float):
    """The shipped scenarios/nc-accuracy-n<N>.yaml at the asked RTT (link delay = RTT / 4); a size
    with no file of its own is the 8-node one with `nodes` nodes."""
    path = SCENARIOS / f"nc-accuracy-n{nodes}.yaml"
    scenario = load(path if path.exists() else SCENARIOS / "nc-accuracy-n8.yaml")
    star = scenario.infrastructure.star.model_copy(update={"nodes": nodes, "link_delay": rtt_ms / 4 / 1e3})
    return scenario.model_copy(update={
        "name": f"nc-accuracy-n{nodes}", "description": f"NC accuracy microbenchmark, {nodes} nodes, actual RTT {rtt_ms:g}ms",
        "infrastructure": scenario.infrastructure.model_copy(update={"star": star})})


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def attempt(nodes: int, rtt_ms: float, log_dir: Path) -> dict:
    """accuracy(), or the row of a size this machine could not run (its agents did not start or join,
    the network did not come up): the sweep goes on and the result says which sizes ran."""
    try:
        return accuracy(nodes, rtt_ms, log_dir)
    except Exception as error:  # noqa: BLE001 - a size that cannot run is a finding, not the end of the sweep
        return {"nodes": nodes, "rtt_ms": rtt_ms, "failed": f"{type(error).__name__}: {error}"[:300], "ok": False}


def largest_size(rows: list[dict], asked: list[int]) -> str:
    """What the node sweep reached, in words: the largest size whose coordinates converged, and every
    asked size that failed or never converged (testbed.bench.nc's rows at 50 ms)."""
    swept = [r for r in rows if r["rtt_ms"] == 50.0]
    converged = [r["nodes"] for r in swept if not r.get("failed") and r.get("convergence_s") is not None]
    failed = [f"{r['nodes']} ({r['failed']})" for r in swept if r.get("failed")]
    slow = [str(r["nodes"]) for r in swept if not r.get("failed") and r.get("convergence_s") is None]
    text = (f"largest cluster converged on this machine: {max(converged)} agents" if converged
            else "no cluster size converged on this machine")
    text += f" (asked: {', '.join(map(str, asked))}; the paper: up to 128)"
    if failed:
        text += f"; could not run: {'; '.join(failed)}"
    if slow:
        text += f"; ran but never converged within {MAX_WAIT_S:g} s: {', '.join(slow)}"
    return text


def accuracy(nodes: int, rtt_ms: float, log_dir: Path) -> dict:
    with Session(_star(nodes, rtt_ms), backend="mininet") as session:
        agents = SerfAgents(session.network, session.topology, log_dir / f"n{nodes}-rtt{rtt_ms:g}")
        agents.start()
        try:
            joined = agents.wait_joined(60)
            settled = settle(lambda: snapshots.snapshot(agents.coordinates(), session.topology, nodes), MAX_WAIT_S,
                             hold=HOLD_S, poll=POLL_S)
            converged_at = settled.converged_at
            history = [(round(elapsed, 1), snap["median_error_ms"], snap["median_relative"])
                       for elapsed, snap in settled.snapshots]
            # After convergence: pool the per-pair errors of several snapshots.
            errors = []
            until = time.monotonic() + (AFTER_S if converged_at is not None else 0)
            while True:
                errors += snapshots.pair_errors(agents.coordinates(), session.topology)
                if time.monotonic() >= until:
                    break
                time.sleep(POLL_S)
            stats = snapshots.summary(errors)
        finally:
            agents.stop()
    return {"nodes": nodes, "rtt_ms": rtt_ms, "join_s": round(joined, 2),
            "convergence_s": round(converged_at, 1) if converged_at is not None else None,
            "median_error_ms": round(stats["median_error_ms"], 3), "p95_error_ms": round(stats["p95_error_ms"], 3),
            "median_relative": round(stats["median_relative"], 4), "pairs": stats["pairs"], "history": history,
            # 95 % bootstrap intervals over the pooled pair errors (pairs of one snapshot share its
            # coordinates, so the interval is a lower bound on the run-to-run spread).
            "median_error_ms_ci": median_ci([e["error_s"] * 1e3 for e in errors]).as_dict() if errors else None,
            "median_relative_ci": median_ci([e["relative"] for e in errors]).as_dict() if errors else None,
            # The paper bounds the error by 3.5 ms in its node sweep and by 6 % of the RTT in its RTT sweep.
            "ok": (converged_at is not None and stats["median_relative"] < PAPER["median_relative"]
                   and (rtt_ms > 50 or stats["median_error_ms"] < PAPER["median_error_ms"]))}


def overhead(nodes: int, period_s: float, log_dir: Path, window_s: float = 30.0) -> dict:
    """Agents' CPU % and RSS while the harness asks every agent for its coordinate every period."""
    with Session(_star(nodes, 50), backend="mininet") as session:
        agents = SerfAgents(session.network, session.topology, log_dir / f"overhead-n{nodes}")
        agents.start()
        try:
            agents.wait_joined(60)
            time.sleep(5)
            pids = agents.pids()
            cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
            started = time.monotonic()
            queries = 0
            while time.monotonic() - started < window_s:
                agents.coordinates()
                queries += len(pids)
                time.sleep(max(0.0, period_s - (time.monotonic() - started) % period_s))
            wall = time.monotonic() - started
            cpu = [(cpu_seconds(p) - cpu0[n]) / wall * 100 for n, p in pids.items()]
            rss = [_rss_mb(p) for p in pids.values()]
        finally:
            agents.stop()
    return {"nodes": nodes, "query_period_s": period_s, "queries": queries, "window_s": round(wall, 1),
            "cpu_percent_mean": round(statistics.mean(cpu), 3), "cpu_percent_max": round(max(cpu), 3),
            "rss_mb_mean": round(statistics.mean(rss), 1), "rss_mb_max": round(max(rss), 1),
            "ok": max(cpu) < PAPER["cpu_percent"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default=None, help="cluster sizes for the 50 ms sweep (default 2,4,8,16,32; "
                        "--quick: 2,4,8 unless given)")
    parser.add_argument("--rtts", default="20,50,100,200", help="actual RTTs (ms) for the 8-node sweep")
    parser.add_argument("--overhead-nodes", default="2,8,32")
    parser.add_argument("--quick", action="store_true", help="a small sweep (CI-sized)")
    parser.add_argument("--figures-only", action="store_true", help="redraw fig3b.png from results/bench/nc.json")
    args = parser.parse_args(argv)
    from analysis.bench_figures import draw

    if args.figures_only:
        draw("nc", directory=OUT)
        return 0
    if os.geteuid() != 0:
        console.print("bench-nc needs root (network namespaces)")
        return 1
    nodes = [int(n) for n in (args.nodes or ("2,4,8" if args.quick else "2,4,8,16,32")).split(",")]
    rtts = [float(r) for r in ("20,100" if args.quick else args.rtts).split(",")]
    over = [int(n) for n in ("2,8" if args.quick else args.overhead_nodes).split(",")]
    log_dir = Path(tempfile.mkdtemp(prefix="testbed-bench-nc-"))
    configs = sorted({(n, 50.0) for n in nodes} | {(8, r) for r in rtts})
    rows = []
    for n, rtt in configs:
        console.print(f"accuracy: {n} nodes, actual RTT {rtt:g} ms ...")
        rows.append(attempt(n, rtt, log_dir))
        console.print(f"  could not run: {rows[-1]['failed']}" if rows[-1].get("failed") else
                      f"  median error {rows[-1]['median_error_ms']} ms, converged after {rows[-1]['convergence_s']} s")
    costs = []
    for n in over:
        for period in (1.0, 5.0):
            console.print(f"overhead: {n} nodes, queried every {period:g} s ...")
            costs.append(overhead(n, period, log_dir))
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"time": time.time(), "machine": os.uname().nodename, "paper": PAPER, "accuracy": rows, "overhead": costs,
              "max_nodes_note": largest_size(rows, nodes)}
    (OUT / "nc.json").write_text(json.dumps(result, indent=2))
    draw("nc", result, OUT)
    table = Table("nodes", "actual RTT ms", "converged after s", "median err ms", "p95 err ms", "median rel %", "ok",
                  title="NC accuracy (paper: < 3.5 ms and < 6 %)")
    for r in rows:
        if r.get("failed"):
            table.add_row(str(r["nodes"]), f"{r['rtt_ms']:g}", "could not run", "-", "-", "-", "NO")
            continue
        table.add_row(str(r["nodes"]), f"{r['rtt_ms']:g}", str(r["convergence_s"]), f"{r['median_error_ms']:.2f}",
                      f"{r['p95_error_ms']:.2f}", f"{100 * r['median_relative']:.2f}", "yes" if r["ok"] else "NO")
    console.print(table)
    console.print(result["max_nodes_note"])
    table = Table("nodes", "query every s", "CPU % mean", "CPU % max", "RSS MB mean", "RSS MB max",
                  title="Serf agent overhead (paper: CPU < 1 %, memory < 15 MB)")
    for c in costs:
        table.add_row(str(c["nodes"]), f"{c['query_period_s']:g}", str(c["cpu_percent_mean"]), str(c["cpu_percent_max"]),
                      str(c["rss_mb_mean"]), str(c["rss_mb_max"]))
    console.print(table)
    console.print(f"written {OUT / 'nc.json'} and {OUT / 'fig3b.png'}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
