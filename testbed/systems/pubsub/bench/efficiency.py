"""`make bench-efficiency`: CPU per delivered message, by process class, for two shapers side by side.

The figure that says how far this machine is from the paper's load: a delivered message costs CPU in
the relays (the shaper), the clients, nats-server, ZooKeeper, Serf, the harness; the paper's UAV load
on two cores needs the total under ~70 us. Each point is one real run (`testbed run` on a copy of
scenarios/uav.yaml or mmog.yaml, bench-capacity's points) per shaper, the shapers alternating run by
run (A B, then B A at the next repeat) so drift on this noisy VM falls on both alike. Per run:

- CPU-us per delivery by class: the monitor's per-second CPU by process class (health.jsonl), summed
  over the workload's seconds outside migration windows, over the deliveries received in those
  seconds (traces). Steal (the hypervisor holding the VM's cores) is not process CPU: it is reported
  beside, per second and per delivery;
- context switches per delivery: /proc/stat's machine-wide count over the whole run;
- the cost of one wakeup on this VM, measured before each run (two processes passing a byte through
  pipes: CPU per hand-over, Python's own few us included).

Writes results/bench/efficiency.json (--quick: efficiency-quick.json) and efficiency.png (drawn by
analysis.bench_figures.efficiency), and prints the table.

    python -m testbed.systems.pubsub.bench.efficiency [--quick] [--shapers shared,routed] [--repeats 1] [--loads 0.05,0.1]
    python -m testbed.systems.pubsub.bench.efficiency --shapers routed --clients python,compiled --loads 0.25,0.5
    python -m testbed.systems.pubsub.bench.efficiency --shapers routed --clients compiled --servers pypi,debian
    python -m testbed.systems.pubsub.bench.efficiency --shapers routed --clients compiled/per-node,compiled --loads 1
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import yaml

from testbed import natsserver
from testbed.health import explained_by_machine
from testbed.systems.pubsub.bench.capacity import BASES, OUT, Point, _json_lines, migration_windows, offered, run_point

PAPER_UAV_RATE = 200  # msg/s per swarm publisher at 8 swarms: scenarios/uav.yaml, the paper's UAV load
UAV_LOADS = (0.05, 0.1, 0.25, 0.5, 1.0)
QUICK_LOADS = (0.05, 0.1)
MMOG_RATES = (10, 30)  # msg/s per game server, 2 per city (bench-capacity's MMOG axis)
CLIENTS = ("python", "compiled", "compiled/per-node", "compiled/per-machine")  # --clients' values
TARGET_US = 70.0  # the paper's load on two cores: the whole cost of a delivery must stay under this
#: The classes must account for the machine's busy time within this share in every row (else the
#: per-delivery figure is not what the machine spent, and the benchmark fails).
UNACCOUNTED_MAX = 0.05


def points(loads: tuple[float, ...], mmog: bool) -> list[Point]:
    uav = [Point("uav-swarm", "rate", 8, max(1, round(PAPER_UAV_RATE * f))) for f in loads]
    return uav + ([Point("mmog", "rate", 2, r) for r in MMOG_RATES] if mmog else [])


def scenario_copy(point: Point, shaper: str, duration: str, settle: str, directory: Path, clients: str = "python",
                  server: str = natsserver.DEFAULT) -> Path:
    """The base scenario at the point's size with `shaper`, the `clients`' data plane (nats-py or
    the compiled engine; `compiled/per-node`: an engine and a process per client node, not one client
    host for all: `workload.client_processes`) and the brokers' nats-`server` (testbed.natsserver), a
    short duration and settle."""
    data = yaml.safe_load(BASES[point.case].read_text())
    engine, _, processes = clients.partition("/")
    short = {"python": "py", "compiled": "c", "per-node": "-node", "per-machine": "-host", "": ""}  # names: <= 40 chars
    name = f"eff-{'uav' if point.case == 'uav-swarm' else 'mmog'}-r{point.rate}-{shaper}-{short[engine]}{short[processes]}-{server}"
    data.update(name=name, duration=duration,
                description=f"bench-efficiency point from {BASES[point.case].name} through the {shaper} shaper")
    data["control"]["settle"] = settle
    data["workload"]["rate"] = f"{point.rate}/s"
    data["nodes"]["clients"][0]["count"] = point.count
    data.setdefault("emulation", {})["shaper"] = shaper
    data["workload"]["client_engine"] = engine
    data["workload"]["client_processes"] = processes or "auto"
    data["nodes"]["nats_server"] = server
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def wakeup_cost_us(seconds: float = 0.3) -> float:
    """CPU-us one process spends to wake another and be woken (a byte each way through pipes),
    per hand-over: what every frame crossing a relay pays at least once."""
    ping, pong = os.pipe(), os.pipe()
    child = os.fork()
    if child == 0:
        try:
            while os.read(ping[0], 1) == b"x":
                os.write(pong[1], b"x")
        finally:
            os._exit(0)
    before, children_before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rounds, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        os.write(ping[1], b"x")
        os.read(pong[0], 1)
        rounds += 1
    os.write(ping[1], b"q")
    os.waitpid(child, 0)
    after, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    for fd in (*ping, *pong):
        os.close(fd)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
           + children.ru_utime - children_before.ru_utime + children.ru_stime - children_before.ru_stime)
    return 1e6 * cpu / (2 * rounds) if rounds else float("nan")


def context_switches() -> int:
    with open("/proc/stat") as stat:
        return next(int(line.split()[1]) for line in stat if line.startswith("ctxt "))


def per_delivery(run_dir: Path, outside_migrations: bool = True) -> dict:
    """CPU-us per delivery by class over the workload's steady seconds (see the module's doc), or
    over all its seconds (`outside_migrations=False`: a short run with migrations has few steady ones).
    CPU and deliveries are counted over the same seconds: a row without CPU (a run recorded before
    every second had its share, `testbed.monitor.spread`) leaves its deliveries out too. The classes
    add up to what the machine spent (`cpu_busy`); the rest is the unaccounted share."""
    events = _json_lines(run_dir / "events.jsonl")
    windows = migration_windows(events) if outside_migrations else []
    steady = [h for h in _json_lines(run_dir / "health.jsonl")
              if h.get("elapsed_s", -1) >= 1 and not any(low < h["t"] + 1 and h["t"] < high for low, high in windows)]
    seconds = [h for h in steady if h.get("cpu_by_class") is not None]
    received = sorted(float(r["receive_time"]) for r in _trace_rows(run_dir))
    # a health row's `t` is the second [t, t + 1) it describes (testbed.monitor)
    deliveries = sum(bisect.bisect_left(received, h["t"] + 1) - bisect.bisect_left(received, h["t"]) for h in seconds)
    classes = sorted({k for h in seconds for k in h["cpu_by_class"]})
    core_seconds = {k: sum(h["cpu_by_class"].get(k, 0.0) for h in seconds) for k in classes}
    steal_ms = sum(h.get("cpu_steal_ms") or 0.0 for h in seconds)
    total = sum(core_seconds.values())
    busy = sum(h["cpu_busy"] for h in seconds if h.get("cpu_busy") is not None)
    us = (lambda x: 1e6 * x / deliveries) if deliveries else (lambda x: None)
    return {"seconds": len(seconds), "seconds_without_cpu": len(steady) - len(seconds), "deliveries": deliveries,
            "deliveries_per_s": deliveries / len(seconds) if seconds else 0.0,
            "cpu_us_per_delivery": {k: us(v) for k, v in core_seconds.items()},
            "total_us_per_delivery": us(total),
            "busy_us_per_delivery": us(busy) if busy else None,
            "unaccounted_share": (busy - total) / busy if busy else None,
            "steal_ms_per_s": steal_ms / len(seconds) if seconds else None,
            "steal_us_per_delivery": us(steal_ms / 1e3),
            "relay_tx_per_delivery": (sum(h.get("relay_tx") or 0 for h in seconds) / deliveries) if deliveries else None,
            "saturated_seconds": sum(bool(h.get("saturated")) for h in seconds),
            "machine_seconds": sum(bool(h.get("saturated")) and explained_by_machine(h) for h in seconds),
            "cpu_idle_mean": (sum(h["cpu_idle"] for h in seconds) / len(seconds)) if seconds else None}


def _trace_rows(run_dir: Path):
    from testbed.systems.pubsub.workload_role import trace_rows

    return trace_rows(run_dir / "traces")


def measure(point: Point, shaper: str, directory: Path, duration: str, settle: str, say, backend: str,
            clients: str = "python", label: str | None = None, server: str = natsserver.DEFAULT) -> dict:
    """One run at `point`; its row names the configuration `label` (default: the shaper)."""
    path = scenario_copy(point, shaper, duration, settle, directory, clients, server)
    wakeup = wakeup_cost_us()
    switches = context_switches()
    run_dir = run_point(path, directory / path.stem / str(time.time_ns()), say, backend)
    switches = context_switches() - switches
    row = {"case": point.case, "rate": point.rate, "count": point.count, "shaper": label or shaper, "clients": clients,
           "nats_server": server, "offered_per_s": offered(path), "wakeup_us": wakeup}
    if run_dir is None or not (run_dir / "summary.json").exists():
        return {**row, "error": f"no summary.json (see {directory / path.stem})"}
    summary = json.loads((run_dir / "summary.json").read_text())
    found = per_delivery(run_dir, outside_migrations=point.case != "mmog")  # MMOG's group changes move topics
    found["counted"] = "steady seconds" if point.case != "mmog" else "all seconds"  # every round: no steady second
    total = summary.get("delivered") or 0
    return {**row, **found, "run_dir": str(run_dir), "valid": (summary.get("harness") or {}).get("valid"),
            "context_switches_per_delivery": switches / total if total else None,
            "shaper_run": json.loads((run_dir / "run.json").read_text()).get("shaper")}


def paper_fraction(row: dict, paper: dict) -> float | None:
    base = paper.get(row["case"])
    return row["offered_per_s"] / base if base else None


def report(data: dict, console) -> None:
    from testbed.screen import Table

    table = Table(title="CPU-us per delivered message by process class (steady seconds; steal beside)")
    classes = sorted({k for r in data["rows"] if "error" not in r for k in r["cpu_us_per_delivery"]})
    for column in ("case", "x paper", "shaper", "deliv/s", *classes, "total", "unacc.", "steal", "ctxsw", "wakeup us",
                   "sat s"):
        table.add_column(column, justify="right")
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    for r in data["rows"]:
        if "error" in r:
            table.add_row(r["case"], "-", r["shaper"], r["error"][:60])
            continue
        frac = paper_fraction(r, data["paper"])
        table.add_row(r["case"], "-" if frac is None else f"{frac:.2f}", r["shaper"], f"{r['deliveries_per_s']:,.0f}",
                      *(fmt(r["cpu_us_per_delivery"].get(k)) for k in classes), fmt(r["total_us_per_delivery"]),
                      _share(r.get("unaccounted_share")), fmt(r["steal_us_per_delivery"]), fmt(r["context_switches_per_delivery"]), fmt(r["wakeup_us"]),
                      f"{r['saturated_seconds']}/{r['seconds']}")
    console.print(table)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f} %"


def unaccounted(rows: list[dict]) -> list[str]:
    """The rows whose classes do not add up to the machine's busy time (within UNACCOUNTED_MAX)."""
    return [f"{r['case']} at {r['rate']} msg/s ({r['shaper']}): {_share(r.get('unaccounted_share'))} of the machine's "
            f"busy time in no class" for r in rows if "error" not in r
            and (r.get("unaccounted_share") is None or abs(r["unaccounted_share"]) > UNACCOUNTED_MAX)]


def write(data: dict, name: str) -> None:
    from analysis.bench_figures import draw

    (OUT / f"{name}.json").write_text(json.dumps(data, indent=1))
    draw(name, data, OUT)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from testbed.bench.overload import _machine_facts

    console = Console(width=170)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"UAV at {QUICK_LOADS} of the paper's load, no MMOG")
    parser.add_argument("--shapers", default="shared,routed", help="the shapers compared, alternating")
    parser.add_argument("--clients", default="python",
                        help="the clients' data planes compared (python, compiled: workload.client_engine; "
                             "compiled/per-node: a process and an engine per client node), alternating")
    parser.add_argument("--servers", default=natsserver.DEFAULT,
                        help=f"the brokers' nats-servers compared ({', '.join(natsserver.CHOICES)}: nodes.nats_server), "
                             "alternating")
    parser.add_argument("--loads", default=None, help="fractions of the paper's UAV load (default 0.05,0.1,0.25,0.5,1)")
    parser.add_argument("--no-mmog", action="store_true", help="UAV points only")
    parser.add_argument("--repeats", type=int, default=1, help="alternating pairs per point")
    parser.add_argument("--duration", default=None, help="each run's duration (default 30s, --quick 20s)")
    parser.add_argument("--settle", default="10s", help="each run's settle cap")
    parser.add_argument("--backend", default="mininet", choices=["auto", "mininet", "containernet"])
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        console.print("bench-efficiency needs root (network namespaces)")
        return 1
    shapers = [s.strip() for s in args.shapers.split(",") if s.strip()]
    from testbed.emulation.shaping import SHAPERS

    if not shapers or any(s not in SHAPERS for s in shapers):
        console.print(f"--shapers: {args.shapers!r}; known: {', '.join(SHAPERS)}")
        return 2
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if not clients or any(c not in CLIENTS for c in clients):
        console.print(f"--clients: {args.clients!r}; known: {', '.join(CLIENTS)}")
        return 2
    servers = [c.strip() for c in args.servers.split(",") if c.strip()]
    if not servers or any(c not in natsserver.CHOICES for c in servers):
        console.print(f"--servers: {args.servers!r}; known: {', '.join(natsserver.CHOICES)}")
        return 2
    # a configuration: (shaper, clients, nats-server), labelled by what varies (the shaper if nothing does)
    axes = [(shapers, lambda s: s), (clients, lambda c: c), (servers, lambda v: f"nats {v}")]
    configs = [(s, c, v, "+".join(name(x) for (values, name), x in zip(axes, (s, c, v)) if len(values) > 1) or s)
               for s in shapers for c in clients for v in servers]
    loads = tuple(float(x) for x in args.loads.split(",")) if args.loads else (QUICK_LOADS if args.quick else UAV_LOADS)
    todo = points(loads, mmog=not (args.quick or args.no_mmog))
    duration = args.duration or ("20s" if args.quick else "30s")
    name = "efficiency-quick" if args.quick else "efficiency"
    OUT.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="efficiency-", dir=OUT))
    data = {"time": time.time(), "quick": args.quick, "machine": _machine_facts(), "cpus": os.cpu_count(),
            "paper": {case: offered(path) for case, path in BASES.items()}, "target_us": TARGET_US,
            "how": {"runs": f"testbed run on copies of {', '.join(p.name for p in BASES.values())} in {directory}, "
                            f"duration {duration}, settle {args.settle}, configurations alternating "
                            f"{[label for *_, label in configs]}",
                    "per_delivery": "health.jsonl CPU by class over the workload's seconds outside migration windows, "
                                    "over the deliveries received in the same seconds; the classes add up to the "
                                    "machine's busy time (cores less exact idle and steal), the rest is 'unacc.' "
                                    "(interrupts on idle cores); steal apart; context switches machine-wide",
                    "command": " ".join(["python -m testbed.systems.pubsub.bench.efficiency", *(sys.argv[1:] if argv is None else argv)])},
            "rows": []}
    started, runs = time.monotonic(), len(todo) * len(configs) * args.repeats
    for i, point in enumerate(todo):
        for repeat in range(args.repeats):
            order = configs if (i + repeat) % 2 == 0 else configs[::-1]
            for shaper, client, server, label in order:
                done = len(data["rows"]) + 1
                console.print(f"[{done}/{runs}] {point.case} at {point.rate} msg/s x {point.count}, shaper {shaper}, "
                              f"clients {client}, nats-server {server} ({time.monotonic() - started:.0f}s so far)")
                row = measure(point, shaper, directory, duration, args.settle, console.print, args.backend, client, label,
                              server)
                row["repeat"] = repeat
                data["rows"].append(row)
                if "error" not in row:
                    console.print(f"    {row['deliveries_per_s']:,.0f} deliveries/s, {row['total_us_per_delivery'] or 0:.1f} "
                                  f"CPU-us each (relays {row['cpu_us_per_delivery'].get('relays') or 0:.1f}, "
                                  f"clients {row['cpu_us_per_delivery'].get('clients') or 0:.1f}), "
                                  f"steal {row['steal_ms_per_s'] or 0:.0f} ms/s")
                write(data, name)  # an interrupted sweep keeps every run measured so far
    data["took_s"] = time.monotonic() - started
    write(data, name)
    report(data, console)
    console.print(f"written {OUT / name}.json, {OUT / name}.png in {data['took_s']:.0f}s")
    short = unaccounted(data["rows"])
    for line in short:
        console.print(f"CPU does not add up: {line}")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
