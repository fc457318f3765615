"""`make bench-scaleout`: the same scenario on this machine and over isolated servers, alternating.

Isolated namespace-servers (`testbed servers up 3 --isolated`) are reached as other machines are:
over ssh, their run directories gathered at the end, a monitor per server feeding the guard. Here
they share this machine's two cores, so the comparison says what spreading costs, not what it
gains: CPU-us per delivery by process class over the run's seconds (as bench-efficiency counts
it), each server's share, the harness's ssh connections, and the guard's verdict of each run.
On real machines the same table shows the gain (each server's cores are its own).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.systems.pubsub.bench.capacity import OUT, _json_lines  # OUT: under results/, each isolated server's own
from testbed.systems.pubsub.bench.efficiency import per_delivery

SCENARIO = Path(__file__).resolve().parents[4] / "scenarios" / "uav-smoke.yaml"


def run_once(scenario: Path, runs: Path, servers: str | None, duration: str) -> Path | None:
    """One `testbed run` (over `servers` when given); its run directory, or None when it failed."""
    from testbed.bench.runs import run_scenario

    extra = ["--duration", duration] + (["--servers", servers] if servers else [])
    made, why = run_scenario(scenario, runs, "mininet", extra=extra)
    if made is None:
        print(f"run failed: {why}", file=sys.stderr)
    return made


def per_server(run_dir: Path, deliveries: int) -> dict:
    """CPU-us per delivery of each server's processes (their own monitors' figures)."""
    cores: dict[str, float] = {}
    for row in _json_lines(run_dir / "health.jsonl"):
        if row.get("elapsed_s", -1) < 1:
            continue
        for name, part in (row.get("servers") or {}).items():
            cores[name] = cores.get(name, 0.0) + sum((part.get("cpu_by_class") or {}).values())
    return {name: round(1e6 * c / deliveries, 1) if deliveries else None for name, c in sorted(cores.items())}


def measure(run_dir: Path, where: str) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    found = per_delivery(run_dir, outside_migrations=False)
    harness = summary.get("harness") or {}
    return {"where": where, "run_dir": str(run_dir), "valid": harness.get("valid"),
            "saturated_seconds": found["saturated_seconds"], "delivered": summary.get("delivered"),
            "expected": summary.get("expected_deliveries"),
            "total_us_per_delivery": found["total_us_per_delivery"],
            "cpu_us_per_delivery": found["cpu_us_per_delivery"], "steal_ms_per_s": found["steal_ms_per_s"],
            "per_server_us_per_delivery": per_server(run_dir, found["deliveries"])}


def cell_of(value: float | None) -> str:
    return f"{value:.0f}" if value is not None else "-"


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from testbed.screen import Table

    from testbed.emulation import servers as servers_mod

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--servers", type=int, default=3, help="isolated namespace-servers (made and removed here)")
    parser.add_argument("--duration", default="60s")
    parser.add_argument("--repeats", type=int, default=1, help="alternating pairs")
    args = parser.parse_args(argv)
    console = Console(width=160)
    if os.geteuid() != 0:
        console.print("bench-scaleout needs root (network namespaces)")
        return 1
    if servers_mod.namespace_servers():
        console.print("namespace-servers are already up: `testbed servers down` first (this bench makes its own)")
        return 1
    made = subprocess.run([sys.executable, "-m", "testbed.cli", "servers", "up", str(args.servers), "--isolated"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        console.print(f"servers up failed: {made.stdout}{made.stderr}")
        return 1
    names = ",".join(sorted(servers_mod.namespace_servers()))
    OUT.mkdir(parents=True, exist_ok=True)
    runs = Path(tempfile.mkdtemp(prefix="scaleout-", dir=OUT))
    rows = []
    try:
        for repeat in range(args.repeats):
            for where, on in (("one machine", None), (f"{args.servers} isolated servers", names)):
                console.print(f"[{repeat + 1}/{args.repeats}] {args.scenario.name} on {where} ({args.duration})")
                run_dir = run_once(args.scenario, runs, on, args.duration)
                rows.append(measure(run_dir, where) if run_dir else {"where": where, "error": "run failed"})
    finally:
        subprocess.run([sys.executable, "-m", "testbed.cli", "servers", "down"], capture_output=True)
    data = {"time": time.time(), "scenario": str(args.scenario), "duration": args.duration, "servers": names,
            "rows": rows}
    out = OUT / "scaleout.json"
    out.write_text(json.dumps(data, indent=1))
    table = Table("where", "guard", "delivered", "CPU-us / delivery", "relays", "clients", "nats-server", "ssh",
                  "kernel-net", "per server (us / delivery)", title=f"scale-out: {args.scenario.name}, {args.duration}")
    for row in rows:
        if "error" in row:
            table.add_row(row["where"], "-", "-", row["error"], *["-"] * 6)
            continue
        by = row["cpu_us_per_delivery"]

        def cell(k, by=by):
            return cell_of(by.get(k))

        table.add_row(row["where"], "valid" if row["valid"] else f"{row['saturated_seconds']} s saturated",
                      f"{row['delivered']} of {row['expected']}", cell_of(row["total_us_per_delivery"]),
                      cell("relays"), cell("clients"), cell("nats-server"), cell("ssh"), cell("kernel-net"),
                      ", ".join(f"{k} {v:.0f}" for k, v in row["per_server_us_per_delivery"].items()) or "-")
    console.print(table)
    console.print(f"written {out}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
