"""`make bench-capacity`: how much load this machine carries before the harness, not the system under
test, sets the latency.

Each point is one real run (`testbed run <copy of the scenario> --results <dir>`, one at a time):
the UAV case (scenarios/uav.yaml) grown two ways, by the publishing rate of 8 swarms and by the
number of swarms at the paper's 200 msg/s, and the MMOG case (scenarios/mmog.yaml) by its rate; every
copy runs for a short duration after a short settle. Per point, from the run's directory:

- offered deliveries/s (testbed.load, the estimate `testbed show` prints) and delivered/s;
- overhead = E2E latency minus the configured path of that message (publisher's access link, the
  site link to the broker it went through, the broker's local link in and out, the site link to the
  subscriber, its access link; mobile clients' sites follow the run's relinks), p50 and p99;
- the saturation guard's verdict, publisher lateness p99 and CPU by process class (summary.json's
  `harness`, health.jsonl).

The knee per series is the largest offered load before the first point that fails the rule
(overhead p50 <= 2 ms, p99 <= 5 ms, the guard clean, >= 90 % delivered); a case's knee is the lowest
of its series' knees (both ways of growing load are valid, so the capacity is what both hold), as a
ratio of the paper's load. A series stops once two points in a row failed both rules (`skipped`).
Physical references in the same run: nats-server alone (bench-overload's `direct` path, its knee)
and one delay-line relay alone (bench_shaper's UDP rate at < 0.1 % loss).

Writes results/bench/capacity.json (--quick: capacity-quick.json, never read by `testbed run`) and
capacity.png (drawn by analysis.bench_figures.capacity), and prints the table and the knees.

    python -m testbed.systems.pubsub.bench.capacity [--quick] [--cases uav,mmog] [--no-references] [--reanalyse]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from testbed import machine_speed
from testbed.health import explained_by_machine, judge, load_saturated, machine_seconds
from testbed.load import STEADY_SATURATED_MAX  # the steady rule's share of bad seconds, one home
from testbed.procs import wait_or_kill

REPO = Path(__file__).resolve().parents[4]
OUT = Path("results/bench")
BASES = {"uav-swarm": REPO / "scenarios" / "uav.yaml", "mmog": REPO / "scenarios" / "mmog.yaml"}
SHORT = {"uav": "uav-swarm", "mmog": "mmog"}
RUN_STOP_S = 120.0  # an interrupted point's run gets this long to tear its network down before SIGKILL
OVERHEAD_P50_MS, OVERHEAD_P99_MS, MIN_DELIVERED = 2.0, 5.0, 0.9  # the knee rule (healthy)
# A series stops after this many points in a row past the knee by both rules: the next ones were 10-150x
# past the machine's capacity (MMOG 100-450 msg/s), livelocked it for many minutes and added nothing.
PAST_KNEE_STOP = 2
CLIENT_ROLES = ("uav-swarm", "game-server", "static", "avatar")


@dataclass(frozen=True)
class Point:
    case: str   # workload kind: uav-swarm | mmog
    axis: str   # what grows: rate (msg/s per publisher) | swarms (UAV swarm nodes)
    count: int  # swarm nodes (uav-swarm) or game servers per city (mmog)
    rate: int   # msg/s per publisher

    @property
    def name(self) -> str:
        return f"cap-{'uav' if self.case == 'uav-swarm' else 'mmog'}-{self.axis}-n{self.count}-r{self.rate}"


FULL = ([Point("uav-swarm", "rate", 8, r) for r in (5, 25, 50, 100, 200, 300)]
        + [Point("uav-swarm", "swarms", n, 200) for n in (1, 2, 4, 8, 12)]
        + [Point("mmog", "rate", 2, r) for r in (3, 10, 20, 30, 100, 300, 450)])
QUICK = ([Point("uav-swarm", "rate", 8, r) for r in (2, 10)] + [Point("uav-swarm", "swarms", n, 20) for n in (1, 4)]
         + [Point("mmog", "rate", 2, r) for r in (3, 10)])


#: The keys each point sets itself: `--set` may not change them.
SWEPT = ("name", "duration", "description", "control.settle", "workload.rate", "workload.client_engine", "nodes")


def parse_settings(settings: list[str]) -> dict[str, object]:
    """`--set KEY=VALUE` options as {dotted key: value} (VALUE read as YAML: 5ms stays a string, 3 a
    number); ValueError names the option that is malformed or changes what the sweep sets."""
    found = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key or any(not part.isidentifier() for part in key.split(".")):
            raise ValueError(f"--set {setting!r}: expected KEY=VALUE with a dotted key, e.g. control.infeasible_min_gain=5ms")
        if any(key == swept or key.startswith(swept + ".") for swept in SWEPT):
            raise ValueError(f"--set {key}: set by each point of the sweep ({', '.join(SWEPT)})")
        try:
            found[key] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            raise ValueError(f"--set {setting!r}: the value is not YAML: {error}") from None
    return found


def apply_settings(data: dict, settings: dict[str, object]) -> None:
    """Set each dotted key in a scenario's data; a missing section is created (the loader then judges
    the whole scenario, unknown keys included)."""
    for key, value in settings.items():
        *sections, last = key.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise ValueError(f"--set {key}: {section} is not a section of the scenario")
        node[last] = value


def scenario_copy(point: Point, duration: str, settle: str, directory: Path, clients: str = "python",
                  settings: dict[str, object] | None = None) -> Path:
    """The base scenario with the point's size, a short duration and settle, the clients' data
    plane (workload.client_engine) and `settings` (`--set`), as a file to run."""
    data = yaml.safe_load(BASES[point.case].read_text())
    apply_settings(data, settings or {})
    data["workload"]["client_engine"] = clients
    data.update(name=point.name, duration=duration,
                description=f"bench-capacity point from {BASES[point.case].name}: {point.axis} axis")
    data["control"]["settle"] = settle
    data["workload"]["rate"] = f"{point.rate}/s"
    data["nodes"]["clients"][0]["count"] = point.count
    path = directory / f"{point.name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def loaded(path: Path):
    """(scenario, topology with mobile nodes at their initial sites), validated like `testbed run`."""
    from testbed import mobility, topology
    from testbed.scenario.loader import load

    scenario = load(path)
    topo = topology.checked(scenario, str(path))
    mobility.plan(scenario, topo)
    return scenario, topo


def offered(path: Path) -> float:
    from testbed import load

    return load.deliveries_per_s(*loaded(path))


# -- overhead over the configured path --------------------------------------------------------------
def site_timelines(events: list[dict]) -> dict[str, tuple[list[float], list[str]]]:
    """Per relinked node, (times, sites it moved to), in time order, from the run's relink events."""
    out: dict[str, tuple[list[float], list[str]]] = {}
    for e in sorted((e for e in events if e.get("type") == "relink"), key=lambda e: e["time"]):
        times, sites = out.setdefault(e["node"], ([], []))
        times.append(float(e["time"]))
        sites.append(e["to_site"])
    return out


class PathDelay:
    """Configured one-way delay of a delivered message, from a trace row (pure once built)."""

    def __init__(self, topology, timelines: dict):
        self.topo, self.timelines = topology, timelines
        self.static_access = {n.site: n.access.delay for n in topology.nodes.values()
                              if n.role in CLIENT_ROLES and not n.mobile}

    def _end(self, name: str, row_site: str, at: float) -> tuple[str, float] | None:
        """(site, access delay) of a client: a node (UAV `swarm1-u2` lives in `swarm1`) at its site at
        that time, or a static client (an MMOG avatar's game server) at the site its row names."""
        node = self.topo.nodes.get(name) or self.topo.nodes.get(name.rsplit("-u", 1)[0])
        if node is None:
            access = self.static_access.get(row_site)
            return (row_site, access) if access is not None else None
        times, sites = self.timelines.get(node.name, ([], []))
        i = bisect.bisect_right(times, at)
        return (sites[i - 1] if i else node.site), node.access.delay

    def of(self, row: dict) -> float | None:
        broker = self.topo.nodes.get(row.get("broker"))
        try:
            send, receive = float(row["send_time"]), float(row["receive_time"])
            producer = self._end(row["producer"], row.get("producer_site", ""), send)
            consumer = self._end(row["consumer"], row.get("consumer_site", ""), receive)
            if broker is None or producer is None or consumer is None:
                return None
            return (producer[1] + self.topo.site_one_way(producer[0], broker.site) + 2 * broker.access.delay
                    + self.topo.site_one_way(broker.site, consumer[0]) + consumer[1])
        except (KeyError, ValueError, TypeError):
            return None


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def migration_windows(events: list[dict], before_s: float = 0.5, after_s: float = 1.0) -> list[tuple[float, float]]:
    """(from, to) epoch seconds around each topic migration: from its start to its grace period's end
    (else its end), widened a little. Inside them latency is the system's migration, and the clients'
    reconnect work is a herd the steady rule leaves out ("outside handover windows")."""
    starts = {}
    windows = []
    for e in sorted(events, key=lambda e: e.get("time", 0)):
        kind, topic = e.get("type"), e.get("topic")
        if kind == "migration_start":
            starts[topic] = float(e["time"])
        elif kind in ("migration_end", "grace_end") and topic in starts:
            windows.append((starts[topic] - before_s, float(e["time"]) + after_s))
    return windows


def _inside(t: float, windows: list[tuple[float, float]]) -> bool:
    return any(low <= t < high for low, high in windows)


def overheads_ms(rows, path: PathDelay, windows: list[tuple[float, float]] = ()) -> tuple[list[float], list[float], int]:
    """(E2E latency - configured path in ms for every row whose path is known, the same for rows sent
    outside `windows`, rows left out)."""
    out, steady, skipped = [], [], 0
    for row in rows:
        delay = path.of(row)
        if delay is None:
            skipped += 1
            continue
        value = 1e3 * (float(row["receive_time"]) - float(row["send_time"]) - delay)
        out.append(value)
        if not _inside(float(row["send_time"]), windows):
            steady.append(value)
    return out, steady, skipped


def steady_saturated_share(health: list[dict], windows: list[tuple[float, float]]) -> float | None:
    """Share of the guard's seconds outside the migration windows that were saturated by the load (not
    by the machine: `health.explained_by_machine`), judged by today's budget."""
    outside = [h for h in health if not any(low < h["t"] + 1 and h["t"] < high for low, high in windows)]
    loaded = [h for h in outside if (causes := judge(h)) and not explained_by_machine({**h, "causes": causes})]
    return len(loaded) / len(outside) if outside else None


# -- one point's row, the knee (pure) ------------------------------------------------------------------
def point_row(point: Point, offered_per_s: float, summary: dict, health: list[dict], overheads: list[float],
              duration_s: float, steady: list[float] | None = None, steady_share: float | None = None) -> dict:
    """What a point measured, from summary.json (with the guard's `harness`), health.jsonl's rows
    and the per-message overheads. `saturated` is None when the run recorded no guard; seconds the
    machine explains (steal, a stalled VM: `health.explained_by_machine`) are not the load's, and are
    counted apart (`machine_seconds`)."""
    harness = summary.get("harness") or {}
    seconds = harness.get("seconds") or duration_s
    cpu = harness.get("cpu_by_class")
    if cpu is None and health:
        classes = {k for h in health for k in (h.get("cpu_by_class") or {})}
        cpu = {k: sum((h.get("cpu_by_class") or {}).get(k, 0.0) for h in health) / len(health) for k in classes}
    if "valid" in harness:
        saturated = not harness["valid"] and (not harness.get("saturated_seconds") or load_saturated(harness))
    elif health:
        saturated = any(h.get("saturated") and not explained_by_machine(h) for h in health)
    else:
        saturated = None
    return {**asdict(point), "name": point.name, "offered_per_s": offered_per_s,
            "delivered_per_s": summary.get("delivered", 0) / seconds if seconds else 0.0,
            "overhead_p50_ms": quantile(overheads, 0.50), "overhead_p99_ms": quantile(overheads, 0.99),
            "messages": len(overheads), "publisher_late_p99_ms": harness.get("publisher_late_p99_ms"),
            "relay_late_max_ms": harness.get("relay_late_max_ms"), "cpu_idle_min": harness.get("cpu_idle_min"),
            "cpu_by_class": cpu or {}, "saturated": saturated, "machine_seconds": machine_seconds(harness),
            "saturated_intervals": [i for i in harness.get("saturated", []) if not i.get("by_machine", i.get("by_steal"))],
            "migrations": summary.get("migrations"),
            "steady_overhead_p50_ms": quantile(steady or [], 0.50), "steady_overhead_p99_ms": quantile(steady or [], 0.99),
            "steady_saturated_share": steady_share}


def unhealthy(row: dict, rule: str = "strict") -> list[str]:
    """Why a point is past the knee (empty: healthy). strict: the issue's rule over the whole run;
    steady: the same outside migration windows, with at most 5 % of those seconds saturated. A run
    that stopped before its end (its timeline stuck, the disk full, interrupted) fails both."""
    stopped = [f"the run stopped early: {row['stopped']}"] if row.get("stopped") else []
    if rule == "steady":
        return stopped + _unhealthy_steady(row)
    why = stopped
    if row["overhead_p50_ms"] is None or row["overhead_p50_ms"] > OVERHEAD_P50_MS:
        why.append(f"overhead p50 {_ms(row['overhead_p50_ms'])} > {OVERHEAD_P50_MS:g} ms")
    if row["overhead_p99_ms"] is None or row["overhead_p99_ms"] > OVERHEAD_P99_MS:
        why.append(f"overhead p99 {_ms(row['overhead_p99_ms'])} > {OVERHEAD_P99_MS:g} ms")
    if row["saturated"]:
        causes = sorted({i.get("cause", "?") for i in row.get("saturated_intervals") or []})
        why.append("guard: saturated" + (f" ({'; '.join(causes)})" if causes else ""))
    if row["delivered_per_s"] < MIN_DELIVERED * row["offered_per_s"]:
        why.append(f"delivered {row['delivered_per_s']:,.0f}/s < {MIN_DELIVERED:.0%} of offered")
    return why


def _unhealthy_steady(row: dict) -> list[str]:
    why = []
    p50, p99 = row.get("steady_overhead_p50_ms"), row.get("steady_overhead_p99_ms")
    if p50 is None or p50 > OVERHEAD_P50_MS:
        why.append(f"steady overhead p50 {_ms(p50)} > {OVERHEAD_P50_MS:g} ms")
    if p99 is None or p99 > OVERHEAD_P99_MS:
        why.append(f"steady overhead p99 {_ms(p99)} > {OVERHEAD_P99_MS:g} ms")
    share = row.get("steady_saturated_share")
    if share is None or share > STEADY_SATURATED_MAX:
        why.append(f"guard: {'-' if share is None else f'{share:.0%}'} of the seconds outside migrations "
                   f"saturated (> {STEADY_SATURATED_MAX:.0%})")
    if row["delivered_per_s"] < MIN_DELIVERED * row["offered_per_s"]:
        why.append(f"delivered {row['delivered_per_s']:,.0f}/s < {MIN_DELIVERED:.0%} of offered")
    return why


def series_knee(rows: list[dict], rule: str = "strict") -> dict:
    """In order of offered load, the last healthy point before the first unhealthy one (a later point
    that looks healthy again does not count). `reached` False: nothing failed, a lower bound."""
    last, first_bad = None, None
    for row in sorted(rows, key=lambda r: r["offered_per_s"]):
        if unhealthy(row, rule):
            first_bad = row
            break
        last = row
    return {"deliveries_per_s": last["offered_per_s"] if last else None, "knee_point": last and last["name"],
            "reached": first_bad is not None, "first_bad": first_bad and first_bad["name"],
            "reason": "; ".join(unhealthy(first_bad, rule)) if first_bad else "no point failed",
            "guard_recorded": all(r["saturated"] is not None for r in rows)}


def case_knees(rows: list[dict], paper: dict[str, float]) -> dict:
    """Per workload kind: each axis's knee, and the case's knee = the lowest of them, by the strict
    rule (what `testbed.load` compares against) and, under "steady", by the steady rule."""
    out = {}
    for case in sorted({r["case"] for r in rows}):
        mine = [r for r in rows if r["case"] == case]
        out[case] = _case_knee(mine, paper.get(case), "strict")
        out[case]["steady"] = _case_knee(mine, paper.get(case), "steady")
    return out


def series_over(rows: list[dict]) -> bool:
    """Whether a series' last PAST_KNEE_STOP points (in the order run) all failed both rules."""
    last = rows[-PAST_KNEE_STOP:]
    return len(last) == PAST_KNEE_STOP and all(unhealthy(r) and unhealthy(r, "steady") for r in last)


def _case_knee(rows: list[dict], paper: float | None, rule: str) -> dict:
    series = {axis: series_knee([r for r in rows if r["axis"] == axis], rule) for axis in sorted({r["axis"] for r in rows})}
    knees = [s["deliveries_per_s"] for s in series.values()]
    knee = None if None in knees else min(knees)
    lowest = min(series, key=lambda a: series[a]["deliveries_per_s"] or 0.0)
    at = next((r for r in rows if r["name"] == series[lowest]["knee_point"]), None)
    return {"deliveries_per_s": knee, "paper_deliveries_per_s": paper, "rule": rule,
            # the most any point delivered: past it delivery stops growing, whatever is offered
            "delivered_max_per_s": max((r["delivered_per_s"] for r in rows), default=None),
            "ratio_of_paper": knee / paper if knee is not None and paper else None,
            "reached": any(s["reached"] for s in series.values()), "limited_by": series[lowest]["reason"],
            "cpu_by_class_at_knee": at["cpu_by_class"] if at else None,
            "guard_recorded": all(s["guard_recorded"] for s in series.values()), "series": series}


def _ms(value) -> str:
    return f"{value:.2f}" if value is not None else "-"


# -- measurement: one run per point, the physical references --------------------------------------
def _json_lines(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a line cut by an interrupted run
    return rows


def run_point(path: Path, results: Path, say, backend: str = "auto", poll_s: float = 15.0) -> Path | None:
    """`testbed run` as a subprocess; its output goes to results/run.log, its last line is shown as
    progress. Returns the run's directory (None when the run wrote none)."""
    results.mkdir(parents=True, exist_ok=True)
    log = results / "run.log"
    argv = [sys.executable, "-m", "testbed.cli", "run", str(path), "--results", str(results), "--backend", backend,
            "--over-capacity"]  # the sweep measures past the last capacity file's ceiling on purpose
    started = time.monotonic()
    shown = started
    with log.open("w") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            while proc.poll() is None:
                time.sleep(1.0)
                if time.monotonic() - shown >= poll_s:
                    shown = time.monotonic()
                    tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
                    say(f"    {time.monotonic() - started:4.0f}s  {tail[0][:110] if tail else ''}")
        except BaseException:  # Ctrl-C reaches the run too from a terminal, a signal to the sweep alone does not
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # the run tears its network down as on Ctrl-C
                wait_or_kill([proc], timeout=RUN_STOP_S)
            raise
    if proc.returncode != 0:
        say(f"    testbed run exited {proc.returncode} (see {log})")
    runs = sorted(results.glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    return runs[-1].parent if runs else None


def measure(spec: Point, directory: Path, duration_s: float, say, backend: str = "auto") -> dict:
    """Run one point and reduce its run directory to a row."""
    scenario_path = directory / f"{spec.name}.yaml"
    offered_per_s = offered(scenario_path)
    say(f"  {spec.name}: offered {offered_per_s:,.0f} deliveries/s")
    run_dir = run_point(scenario_path, directory / spec.name, say, backend)
    if run_dir is None or not (run_dir / "summary.json").exists():
        row = point_row(spec, offered_per_s, {}, [], [], duration_s)
        row["error"] = f"no summary.json (see {directory / spec.name / 'run.log'})"
        return row
    return reduce_point(spec, scenario_path, run_dir, offered_per_s, duration_s)


def reanalysed(row: dict) -> dict:
    """A stored row reduced again from its run directory when that still exists (new fields, new rules)."""
    run_dir = Path(row.get("run_dir") or "")
    if "error" in row or not (run_dir / "summary.json").exists():
        return row
    spec = Point(row["case"], row["axis"], row["count"], row["rate"])
    return reduce_point(spec, run_dir.parent.parent / f"{spec.name}.yaml", run_dir, row["offered_per_s"],
                        row.get("duration_s") or 40.0)


def reduce_point(spec: Point, scenario_path: Path, run_dir: Path, offered_per_s: float, duration_s: float) -> dict:
    """A finished run directory -> the point's row (again, with --reanalyse)."""
    from testbed.systems.pubsub.workload_role import trace_rows

    _, topo = loaded(scenario_path)
    events = _json_lines(run_dir / "events.jsonl")
    path = PathDelay(topo, site_timelines(events))
    windows = migration_windows(events)
    values, steady, skipped = overheads_ms(trace_rows(run_dir / "traces"), path, windows)
    health = _json_lines(run_dir / "health.jsonl")
    row = point_row(spec, offered_per_s, json.loads((run_dir / "summary.json").read_text()), health, values,
                    duration_s, steady, steady_saturated_share(health, windows))
    meta = json.loads((run_dir / "run.json").read_text())
    return {**row, "rows_without_path": skipped, "run_dir": str(run_dir), "backend": meta.get("backend"),
            "shaper": meta.get("shaper"), "stopped": meta.get("stopped") or meta.get("interrupted")}


def nats_alone(quick: bool, say) -> dict:
    """nats-server's own knee without the emulated network: bench-overload's `direct` path (clients
    in the broker's node), 1000 B messages, a short sweep."""
    from testbed.bench import overload
    from testbed.experiment import Session
    from testbed.scenario.loader import load

    rates = (20e3, 100e3, 400e3) if quick else (25e3, 50e3, 100e3, 200e3, 400e3, 800e3, 1.3e6)
    timing = overload.Timing(1.0, 3.0, 1.0) if quick else overload.Timing()
    log_dir = Path(tempfile.mkdtemp(prefix="testbed-bench-capacity-nats-"))
    with Session(load(overload.SCENARIO)) as session:
        broker = overload.LoadedBroker(session, log_dir, 2, 2, timing)
        try:
            rows = overload.sweep([overload.Point("direct", 1000, *overload.SHAPE, r) for r in rates], broker, say,
                                  attempts=1)
        finally:
            broker.stop()
    knee = overload.find_knee(rows)
    return {"knee_msgs_per_s": knee["knee"], "reached": knee["reached"], "reason": knee["reason"],
            "sustained_max": knee["sustained_max"], "log_dir": str(log_dir),
            "rows": [{k: r[k] for k in ("offered", "achieved", "p50_ms", "p95_ms", "p99_ms", "broker_cpu")}
                     for r in rows]}


def delayline_alone(quick: bool) -> dict:
    """One delay-line relay alone: the highest rate of 200 B UDP frames through a 10 ms direction
    with < 0.1 % loss (testbed.emulation.bench_shaper)."""
    from testbed.emulation import bench_shaper

    rates = (20_000, 60_000, 100_000) if quick else (20_000, 40_000, 60_000, 80_000, 100_000, 130_000, 160_000)
    result = bench_shaper.bench_udp(rates, seconds=2 if quick else 3)
    return {"pkts_per_s": result["max_pps_below_0.1pct_loss"], "steps": result["steps"]}


# -- analysis, report ----------------------------------------------------------------------------------
def analyse(data: dict) -> dict:
    """Knees and the keys `testbed.load.read_capacity` reads."""
    refs = data.get("references", {})
    return {"knee": case_knees([r for r in data["rows"] if "error" not in r], data["paper"]),
            "nats_msgs_per_s": (refs.get("nats") or {}).get("knee_msgs_per_s"),
            "delayline_pkts_per_s": (refs.get("delayline") or {}).get("pkts_per_s"),
            "speed_reference": refs.get("speed")}


def _saturated(row: dict) -> str:
    """The table's word for a point's guard: the machine's seconds (steal, a stalled VM) said apart."""
    word = {True: "yes", False: "no", None: "not recorded"}[row["saturated"]]
    held = row.get("machine_seconds") or 0
    return f"{word} (+{held} s the machine's)" if held else word


def report(data: dict, console) -> None:
    from testbed.screen import Table

    table = Table("point", "offered/s", "delivered/s", "overhead p50", "p99 ms", "pub late p99", "saturated",
                  "CPU by class (cores)", title="bench-capacity: harness overhead over the configured path")
    for r in data["rows"]:
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["cpu_by_class"].items(), key=lambda kv: -kv[1])[:4])
        table.add_row(r["name"], f"{r['offered_per_s']:,.0f}", f"{r['delivered_per_s']:,.0f}",
                      _ms(r["overhead_p50_ms"]), _ms(r["overhead_p99_ms"]), _ms(r["publisher_late_p99_ms"]),
                      _saturated(r), r.get("error") or cpu or "-")
    console.print(table)
    for case, strict in data["knee"].items():
        for knee in (strict, strict.get("steady")):
            if knee is None:
                continue
            at = (f"{knee['deliveries_per_s']:,.0f} deliveries/s = {knee['ratio_of_paper']:.3f} x the paper's "
                  f"{knee['paper_deliveries_per_s']:,.0f}" if knee["deliveries_per_s"] is not None
                  else "none (no point held)")
            console.print(f"{case} knee ({knee.get('rule', 'strict')} rule): {at}"
                          f"{'' if knee['reached'] else ' (lower bound: no point failed)'}"
                          f"{'' if knee['guard_recorded'] else ' [saturation guard not recorded by these runs]'}; "
                          f"first failure: {knee['limited_by']}; CPU at the knee: {knee['cpu_by_class_at_knee']}",
                          highlight=False)
    nats, relay = data.get("nats_msgs_per_s"), data.get("delayline_pkts_per_s")
    console.print(f"nats-server alone: {f'{nats:,.0f} msg/s' if nats else 'not measured'}; one delay-line relay "
                  f"alone: {f'{relay:,.0f} frames/s' if relay else 'not measured'} ({data['machine']['cpus']} cores)",
                  highlight=False)
    for case, knee in data["knee"].items():
        if nats and knee["deliveries_per_s"]:
            console.print(f"{case}: the harness carries {knee['deliveries_per_s'] / nats:.1%} of what nats-server "
                          "alone delivers", highlight=False)


def write(data: dict, name: str) -> None:
    from analysis.bench_figures import draw

    data.update(analyse(data))
    (OUT / f"{name}.json").write_text(json.dumps(data, indent=2))
    draw(name, data, OUT)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from testbed.bench.overload import _machine_facts

    console = Console(width=170)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 short points and short references (~10 minutes)")
    parser.add_argument("--cases", default="uav,mmog", help="uav, mmog or both")
    parser.add_argument("--duration", default=None, help="each run's duration (default 40s, --quick 20s)")
    parser.add_argument("--settle", default=None, help="each run's settle (default 15s, --quick 10s)")
    parser.add_argument("--backend", default="auto", choices=["auto", "mininet", "containernet"],
                        help="testbed run --backend (default: what run would choose)")
    parser.add_argument("--no-references", action="store_true", help="skip nats-server and delay line alone")
    parser.add_argument("--reanalyse", action="store_true", help="re-apply the knee rule to the JSON's rows, redraw")
    parser.add_argument("--clients", default="python", choices=["python", "compiled"],
                        help="the clients' data plane (workload.client_engine); compiled writes capacity-compiled.*, "
                             "which runs with the compiled engine are judged against")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a scenario key for every point, e.g. control.infeasible_min_gain=5ms (repeatable); "
                             "writes capacity[-compiled]-set.* so the default knees stay the ones runs are judged by")
    args = parser.parse_args(argv)
    try:
        settings = parse_settings(args.settings)
    except ValueError as error:
        console.print(str(error))
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    name = "capacity-quick" if args.quick else "capacity"  # a smoke run never replaces the full sweep
    name += "" if args.clients == "python" else f"-{args.clients}"  # testbed.load.capacity_file
    name += "-set" if settings else ""
    if args.reanalyse:
        data = json.loads((OUT / f"{name}.json").read_text())
        data["rows"] = [reanalysed(row) for row in data["rows"]]
        write(data, name)
        report(data, console)
        return 0
    if os.geteuid() != 0:
        console.print("bench-capacity needs root (network namespaces)")
        return 1
    cases = [SHORT.get(c.strip()) for c in args.cases.split(",")]
    if None in cases:
        console.print(f"--cases: {args.cases!r}; allowed: uav, mmog")
        return 2
    from testbed.units import parse_duration

    duration, settle = args.duration or ("20s" if args.quick else "40s"), args.settle or ("10s" if args.quick else "15s")
    points = [p for p in (QUICK if args.quick else FULL) if p.case in cases]
    directory = Path(tempfile.mkdtemp(prefix="capacity-", dir=OUT))
    if settings:  # judged once, before any point runs: a mistyped key costs seconds, not a sweep
        from testbed.scenario.loader import ScenarioError

        for case in sorted({p.case for p in points}):
            try:
                loaded(scenario_copy(next(p for p in points if p.case == case), duration, settle, directory,
                                     args.clients, settings))
            except (ScenarioError, ValueError) as error:
                console.print(f"--set {' '.join(args.settings)}: {error}")
                shutil.rmtree(directory, ignore_errors=True)
                return 2
    started = time.monotonic()
    data = {"time": time.time(), "quick": args.quick, "clients": args.clients, "machine": _machine_facts(), "cpus": os.cpu_count(),
            "paper": {case: offered(path) for case, path in BASES.items()},
            "how": {"points": f"testbed run on copies of {', '.join(p.name for p in BASES.values())} in {directory}, "
                              f"duration {duration}, settle {settle}",
                    "overhead": "E2E latency - configured path of the message (access, site link, broker's local "
                                "link in and out, site link, access; mobile clients' sites follow the relinks)",
                    "knee_rule": {"overhead_p50_ms": OVERHEAD_P50_MS, "overhead_p99_ms": OVERHEAD_P99_MS,
                                  "min_delivered": MIN_DELIVERED, "guard": "clean",
                                  "case": "the lowest knee over the case's axes"},
                    "settings": settings,
                    "command": " ".join(["python -m testbed.systems.pubsub.bench.capacity", *(sys.argv[1:] if argv is None else argv)])},
            "references": {}, "rows": []}
    console.print("reference: the machine's speed today (testbed.machine_speed: relay and nats-server on fixed work)")
    data["references"]["speed"] = machine_speed.take().as_dict()
    if not args.no_references:
        console.print("reference: nats-server alone (clients in the broker's node, no links)")
        data["references"]["nats"] = nats_alone(args.quick, console.print)
        console.print("reference: one delay-line relay alone (200 B UDP, 10 ms)")
        data["references"]["delayline"] = delayline_alone(args.quick)
    for i, point in enumerate(points, 1):
        ran = [r for r in data["rows"] if (r["case"], r["axis"]) == (point.case, point.axis) and "error" not in r]
        if series_over(ran):
            data.setdefault("skipped", []).append(point.name)
            console.print(f"[{i}/{len(points)}] {point.name}: skipped, its series' last {PAST_KNEE_STOP} points "
                          "failed both rules")
            continue
        console.print(f"[{i}/{len(points)}] {point.case}, {point.axis} axis: {point.count} nodes at {point.rate} msg/s "
                      f"({time.monotonic() - started:.0f}s so far)")
        scenario_copy(point, duration, settle, directory, args.clients, settings)
        row = measure(point, directory, parse_duration(duration), console.print, args.backend)
        data["rows"].append(row)
        console.print(f"    delivered {row['delivered_per_s']:,.0f}/s, overhead p50 {_ms(row['overhead_p50_ms'])} ms, "
                      f"p99 {_ms(row['overhead_p99_ms'])} ms, saturated {row['saturated']}"
                      + (f"; not healthy: {'; '.join(unhealthy(row))}" if unhealthy(row) else "; healthy"))
        write(data, name)  # an interrupted sweep keeps every point measured so far
    data["took_s"] = time.monotonic() - started
    write(data, name)
    report(data, console)
    console.print(f"written {OUT / name}.json, {OUT / name}.png in {data['took_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
