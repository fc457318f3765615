"""`make bench-overload`: calibrate the broker-overload output-rate threshold Rth_out for nats-server
(paper 3.4.2 and 5.4).

The paper profiled Pulsar with the OpenMessaging benchmark and found a broker's aggregate output
message rate strongly correlated with p95 end-to-end latency, deteriorating above 1500K msg/s, so
Rth_out = 1.5M msg/s. Our data plane is one nats-server per broker; this measures the same curve for
it on this machine, through the emulated network (and "direct", the clients in the broker's own node,
to tell the broker's limit from the shaper's):

- one broker node (bzone1, a real nats-server started as the system starts it) and two client
  nodes on the same site (pub1: publishers, sub1: consumers), links of 1 ms (access) and 0.5 ms
  (broker to its switch), no bandwidth cap, so a message crosses 3 ms of links and the delay-line
  relays (one C process per link);
- load from `natsload` (natsload.c next to this file, built with gcc on first use): T topics,
  one producer connection per topic, C consumer connections per topic, each topic at r msg/s,
  so the offered aggregate output rate is T x C x r; open loop (every message carries its due time,
  latency = receive time - due time), message sizes 1000 B (the paper's workloads) and 100 B;
- per point: achieved output rate (messages the consumers received in the window / window), p50,
  p95, p99 latency (merged histograms of the consumer processes), the CPU of nats-server, of every
  generator process, of the relays and of every other process (/proc/<pid>/stat; a point disturbed
  by other work on the shared machine is measured again), nats-server's own out_msgs rate and
  slow-consumer count (/varz, what the broker agent reports).

The network is scenarios/bench/overload.yaml. Only the one nats-server runs (started by
`start_nats`, as the pub/sub system starts each broker's): ZooKeeper, the broker agents and the topic
manager would add their own CPU to the machine the knee is measured on.

`find_knee` and `recommend` (pure) turn each size's sweep into a knee and a recommended Rth_out.
Writes results/bench/overload.json (--quick: overload-quick.json) and prints the table;
`analysis.bench_figures.overload` draws overload.png (overload-quick.png) from it.

    python -m testbed.bench.overload [--quick] [--repeat 2] [--paths emulated,direct] [--reanalyse]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.procs import TICKS, all_process_stats, build_c, cpu_seconds, machine_ticks, read_line

OUT = Path("results/bench")
SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "bench" / "overload.yaml"
SOURCE = Path(__file__).with_name("natsload.c")
BUILD_DIR = Path(__file__).resolve().parents[1] / "emulation" / "_build"  # gitignored, next to the delay line
BINARY = BUILD_DIR / "natsload"
BROKER, PUB, SUB = "bzone1", "pub1", "sub1"  # the nodes of SCENARIO
PAPER_RTH_OUT = 1.5e6  # msg/s, paper 5.4
LINKS_ONE_WAY_MS = 3.0  # pub1 -1 ms- zone1 -0.5 ms- bzone1 -0.5 ms- zone1 -1 ms- sub1
SIZES = (1000, 100)
SHAPE = (16, 4)  # topics, consumers per topic of the main sweep
OTHER_SHAPES = ((64, 1), (4, 16))  # checked around the knee: does output rate alone predict latency?
EMULATED = (5e3, 10e3, 15e3, 20e3, 25e3, 30e3, 40e3, 50e3, 60e3, 80e3, 100e3, 130e3, 160e3, 200e3, 250e3)
DIRECT = (10e3, 25e3, 50e3, 100e3, 150e3, 200e3, 300e3, 400e3, 600e3, 800e3, 1e6, 1.3e6, 1.6e6, 2e6)
RATES = {("emulated", 1000): EMULATED, ("emulated", 100): EMULATED, ("direct", 1000): DIRECT, ("direct", 100): DIRECT}
QUICK_RATES = {("emulated", 1000): (5e3, 20e3, 100e3), ("emulated", 100): (5e3, 20e3, 100e3),
               ("direct", 1000): (10e3, 50e3, 1.3e6), ("direct", 100): (10e3, 50e3, 1.3e6)}
MAX_FOREIGN, ATTEMPTS = 0.25, 3  # other processes' cores that make a point worth measuring again
FACTOR, MIN_INCREASE_MS, MIN_DELIVERED, BASE_POINTS = 2.0, 1.0, 0.95, 2  # the knee rule (find_knee)


# -- the knee (pure) ---------------------------------------------------------------------------------
def find_knee(points: list[dict], factor: float = FACTOR, min_delivered: float = MIN_DELIVERED,
              base_points: int = BASE_POINTS, min_increase_ms: float = MIN_INCREASE_MS) -> dict:
    """The highest output rate before p95 latency deteriorates, for one series (one message size).

    `points`: dicts with `offered` and `achieved` (msg/s) and `p95_ms`. The baseline is the lowest
    p95 of the `base_points` lowest offered rates (low load: the links' delay plus processing). In
    order of offered rate, a point is healthy if p95 <= max(factor x baseline, baseline +
    min_increase_ms) and achieved >= min_delivered x offered (the floor keeps sub-millisecond
    scheduling jitter from counting as deterioration when the baseline is tiny). The knee is the
    output rate of the last healthy point before the first unhealthy one (its offered rate, which the
    broker delivered: `knee_achieved` is what was measured); a later point that looks healthy again
    does not count: past a deterioration, recovery is noise. `reached` is False when no point
    deteriorated, so the knee is only a lower bound. `sustained_max`, for context, is the highest
    offered rate delivered at >= min_delivered whatever its latency (the throughput ceiling)."""
    series = sorted(points, key=lambda p: p["offered"])
    if not series:
        return {"knee": None, "reached": False, "baseline_p95_ms": None, "limit_p95_ms": None,
                "knee_point": None, "first_bad": None, "reason": "no points", "sustained_max": None}
    baseline = min(p["p95_ms"] for p in series[:base_points])
    limit = max(factor * baseline, baseline + min_increase_ms)
    last_good, first_bad, reason = None, None, None
    for p in series:
        slow = p["p95_ms"] > limit
        short = p["achieved"] < min_delivered * p["offered"]
        if slow or short:
            first_bad = p
            reason = " and ".join(([f"p95 {p['p95_ms']:.2f} ms > {limit:.2f} ms (baseline {baseline:.2f} ms)"]
                                   if slow else []) +
                                  ([f"achieved {p['achieved']:.0f} < {min_delivered:.0%} of offered "
                                    f"{p['offered']:.0f}"] if short else []))
            break
        last_good = p
    sustained = [p["offered"] for p in series if p["achieved"] >= min_delivered * p["offered"]]
    return {"knee": last_good["offered"] if last_good else None,
            "knee_achieved": last_good["achieved"] if last_good else None, "reached": first_bad is not None,
            "baseline_p95_ms": baseline, "limit_p95_ms": limit, "knee_point": last_good, "first_bad": first_bad,
            "reason": reason, "sustained_max": max(sustained, default=None)}


def round_down(value: float, digits: int = 2) -> float:
    """`value` rounded down to `digits` significant figures: a threshold must not exceed the knee."""
    if value <= 0:
        return 0.0
    step = 10 ** (math.floor(math.log10(value)) - digits + 1)
    return math.floor(value / step + 1e-9) * step


def recommend(knees: dict) -> dict:
    """Rth_out from per-series knees ({label: find_knee result}): the lowest knee (the threshold is
    one number for every workload, so the heaviest messages set it), rounded down to 2 significant
    figures. A series whose latency never deteriorated only bounds it from below."""
    found = {k: v["knee"] for k, v in knees.items() if v.get("knee")}
    if not found:
        return {"rth_out": None, "rule": "no series had a healthy point", "from": None, "lower_bound": True}
    label = min(found, key=found.get)
    return {"rth_out": round_down(found[label]), "from": label, "knee": found[label],
            "lower_bound": not knees[label]["reached"],
            "rule": (f"knee = output rate of the last point before p95 > max({FACTOR:g} x the low-load "
                     f"p95, low-load p95 + {MIN_INCREASE_MS:g} ms) or achieved < {MIN_DELIVERED:.0%} of offered; "
                     "Rth_out = the lowest knee over message sizes (and repeats), rounded down to 2 significant "
                     "figures")}


def limited_by(row: dict, cores: int) -> str:
    """Which resource ran out at a point, from its CPU shares in cores (one process >= 90 % of a core,
    or the machine >= 75 % busy: with a dozen runnable threads on 2 cores, they then queue).
    On a shared machine the busiest consumer of a saturated machine is named (other processes: work
    that is not this bench's; kernel threads: mostly softirq network processing)."""
    shares = {"nats-server": row["broker_cpu"], "load generators": row["gen_cpu"],
              "delay-line relays": row["relay_cpu"], "kernel threads": row.get("kernel_cpu", 0.0),
              "other processes": row.get("foreign_cpu", 0.0)}
    parts = (", ".join(f"{k} {v:.2f}" for k, v in shares.items()) +
             f" (busiest generator process {row['gen_cpu_max']:.2f}, busiest relay {row['relay_cpu_max']:.2f}); "
             f"machine {row['machine_busy']:.2f} of {cores} cores")
    if row["relay_cpu_max"] >= 0.9:
        return "shaper: a delay-line relay used a whole core; " + parts
    if row["gen_cpu_max"] >= 0.9:
        return "load generator: one generator process used a whole core; " + parts
    if row["machine_busy"] >= 0.75 * cores:  # many runnable threads on 2 cores: they queue for CPU
        top = max(shares, key=shares.get)
        return (f"CPU: {row['machine_busy'] / cores:.0%} of the machine's {cores} cores busy, the largest share "
                f"taken by {top}; " + parts)
    return "no resource saturated (latency rose from queueing/scheduling); " + parts


# -- the load generator --------------------------------------------------------------------------------
def hist_quantile(hist: dict, q: float, growth: float) -> float | None:
    """Quantile (ms) of natsload's merged log histogram (bucket b holds [growth^b, growth^(b+1)) us)."""
    total = sum(hist.values())
    if not total:
        return None
    rank, seen = max(1, math.ceil(q * total)), 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= rank:
            return growth ** (bucket + 0.5) / 1e3
    return None


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """0..n-1 in `parts` contiguous ranges (fewer if n is small)."""
    parts = max(1, min(parts, n))
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(parts)]


# -- measurement (root, emulated network) ---------------------------------------------------------------
def _processes() -> dict[int, tuple[float, bool]]:
    """CPU seconds of every process, and whether it is a kernel thread (ksoftirqd does network work)."""
    return {pid: (stat.ticks / TICKS, stat.kernel_thread) for pid, stat in all_process_stats().items()}


def _machine() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine from /proc/stat."""
    total, idle, *_ = machine_ticks()
    return (total - idle) / TICKS, total / TICKS


def _varz(network) -> dict:
    """nats-server's /varz, fetched from inside the broker's namespace."""
    from testbed.systems.pubsub.broker import MONITOR_PORT

    ip = network.ip_of(BROKER)
    try:
        with network.connector(BROKER)((ip, MONITOR_PORT), 2.0) as sock:
            sock.sendall(f"GET /varz HTTP/1.0\r\nHost: {ip}\r\n\r\n".encode())
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        return json.loads(data.split(b"\r\n\r\n", 1)[1])
    except (OSError, ValueError, IndexError):
        return {}


def _others(a: dict, b: dict, dt: float) -> dict:
    """Cores used during the window by processes that are not this bench's (other work on a shared
    machine), and by kernel threads (softirq network processing, partly this bench's own)."""
    foreign = kernel = 0.0
    for pid, (cpu, kthread) in b["procs"].items():
        if pid in b["mine"]:
            continue
        used = cpu - a["procs"].get(pid, (0.0, kthread))[0]
        if kthread:
            kernel += used
        else:
            foreign += used
    return {"foreign_cpu": foreign / dt, "kernel_cpu": kernel / dt}


@dataclass(frozen=True)
class Point:
    path: str  # "emulated": clients in pub1/sub1, through the shaper; "direct": clients in the broker's node
    size: int
    topics: int
    consumers: int
    offered: float  # aggregate output rate asked for, msg/s

    @property
    def per_topic(self) -> float:
        return self.offered / (self.topics * self.consumers)


@dataclass(frozen=True)
class Timing:
    warmup: float = 2.0
    window: float = 5.0
    grace: float = 2.0


class LoadedBroker:
    """One nats-server in the emulated network and the load generators' plumbing, for a whole sweep:
    `measure(point)` offers a point's load and measures what the broker delivered."""

    def __init__(self, session, log_dir: Path, pubs: int, subs: int, timing: Timing):
        from testbed.roles.launch import start_nats
        from testbed.systems.pubsub.broker import nats_url

        self.network, self.log_dir, self.pubs, self.subs, self.timing = session.network, log_dir, pubs, subs, timing
        self.binary = build_c(SOURCE, BINARY, ("-lm",))  # natsload, compiled on first use
        self.nats = start_nats(self.network, BROKER, log_dir)
        self.server = nats_url(self.network.ip_of(BROKER)).split("//")[1]
        access = self.network.access
        self.relays = {f"{n} access": access[n].relay.pid for n in (BROKER, PUB, SUB)
                       if getattr(access[n], "relay", None) is not None}
        shaper = getattr(self.network, "shaper", None)
        self.all_relays = [link.relay.pid for link in getattr(shaper, "links", {}).values()
                           if getattr(link, "relay", None) is not None]
        self.count = 0

    def stop(self) -> None:
        if self.nats.poll() is None:
            self.nats.terminate()
            self.nats.wait(timeout=10)

    def _spawn(self, node: str, argv: list[str], tag: str) -> subprocess.Popen:
        log = (self.log_dir / f"{tag}.log").open("ab")
        return self.network.popen(node, [str(self.binary), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=log, text=True)

    def measure(self, point: Point) -> dict:
        """One point: subscribers, then publishers, one start instant, CPU sampled at the window's edges."""
        if self.nats.poll() is not None:
            raise RuntimeError(f"nats-server exited ({self.nats.returncode}); see {self.log_dir}")
        self.count += 1
        prefix, t = f"o{self.count}", self.timing
        run_s = t.warmup + t.window
        pairs = point.topics * point.consumers
        pub_node, sub_node = (PUB, SUB) if point.path == "emulated" else (BROKER, BROKER)
        subs = [self._spawn(sub_node, ["sub", "--server", self.server, "--prefix", prefix, "--pairs", f"{a}-{b}",
                                  "--consumers", str(point.consumers), "--window", f"{t.warmup},{t.window}",
                                  "--grace", f"{t.grace}"], f"{prefix}-sub{i}")
                for i, (a, b) in enumerate(_split(pairs, self.subs))]
        procs = list(subs)
        try:
            for proc in subs:
                if read_line(proc, 30) != "ready":
                    raise RuntimeError(f"a subscriber did not connect (see {self.log_dir})")
            pubs = [self._spawn(pub_node, ["pub", "--server", self.server, "--prefix", prefix, "--topics", f"{a}-{b}",
                                      "--ntopics", str(point.topics), "--rate", f"{point.per_topic:.6g}",
                                      "--size", str(point.size), "--run", f"{run_s}"], f"{prefix}-pub{i}")
                    for i, (a, b) in enumerate(_split(point.topics, self.pubs))]
            procs += pubs
            for proc in pubs:
                if read_line(proc, 30) != "ready":
                    raise RuntimeError(f"a publisher did not connect (see {self.log_dir})")
            t0 = time.time_ns() + 300_000_000
            for proc in procs:
                proc.stdin.write(f"{t0}\n")
                proc.stdin.flush()
            edges = []
            for edge in (t.warmup, t.warmup + t.window):
                time.sleep(max(0.0, t0 / 1e9 + edge - time.time()))
                edges.append(self._sample([p.pid for p in pubs], [p.pid for p in subs]))
            results = []
            for proc in procs:
                out, _ = proc.communicate(timeout=run_s + t.grace + 60)
                lines = [line for line in out.splitlines() if line.startswith("{")]
                if not lines:
                    raise RuntimeError(f"a generator printed no result (exit {proc.returncode}; see {self.log_dir})")
                results.append(json.loads(lines[-1]))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return self._row(point, edges, results)

    def _sample(self, pubs: list[int], subs: list[int]) -> dict:
        busy, total = _machine()
        return {"t": time.monotonic(), "procs": _processes(), "harness": cpu_seconds(os.getpid()),
                "mine": {self.nats.pid, os.getpid(), *pubs, *subs, *self.all_relays},
                "nats": cpu_seconds(self.nats.pid), "pubs": [cpu_seconds(p) for p in pubs],
                "subs": [cpu_seconds(p) for p in subs], "relays": {k: cpu_seconds(p) for k, p in self.relays.items()},
                "all_relays": [cpu_seconds(p) for p in self.all_relays], "busy": busy, "total": total,
                "varz": _varz(self.network)}

    def _row(self, point: Point, edges: list[dict], results: list[dict]) -> dict:
        a, b = edges
        dt = b["t"] - a["t"]
        rate = lambda x, y: (y - x) / dt  # noqa: E731
        pubs = [r for r in results if r["role"] == "pub"]
        subs = [r for r in results if r["role"] == "sub"]
        hist: dict[int, int] = {}
        for r in subs:
            for bucket, count in r["hist"].items():
                hist[int(bucket)] = hist.get(int(bucket), 0) + count
        growth = subs[0]["hist_growth"]
        received = sum(r["received_window"] for r in subs)
        gen = [rate(x, y) for x, y in zip(a["pubs"] + a["subs"], b["pubs"] + b["subs"])]
        relays = {k: rate(a["relays"][k], b["relays"][k]) for k in a["relays"]}
        all_relays = [rate(x, y) for x, y in zip(a["all_relays"], b["all_relays"])]
        va, vb = a["varz"], b["varz"]
        sent = sum(r["sent"] for r in pubs)
        row = {**asdict(point), "per_topic_rate": point.per_topic,
               "achieved": received / self.timing.window,
               "delivered": received / (point.offered * self.timing.window),
               "p50_ms": hist_quantile(hist, 0.50, growth), "p95_ms": hist_quantile(hist, 0.95, growth),
               "p99_ms": hist_quantile(hist, 0.99, growth), "max_ms": max((r["max_ms"] for r in subs), default=None),
               "broker_cpu": rate(a["nats"], b["nats"]),
               "gen_cpu": sum(gen), "gen_cpu_max": max(gen, default=0.0),
               "pub_cpu": sum(gen[:len(a["pubs"])]), "sub_cpu": sum(gen[len(a["pubs"]):]),
               "relay_cpu": sum(all_relays), "relay_cpu_max": max(all_relays, default=0.0), "relays_cpu": relays,
               "harness_cpu": rate(a["harness"], b["harness"]),
               **_others(a, b, dt), "machine_busy_ticks": rate(a["busy"], b["busy"]),
               "varz_out_rate": rate(va.get("out_msgs", 0), vb.get("out_msgs", 0)) if va and vb else None,
               "varz_in_rate": rate(va.get("in_msgs", 0), vb.get("in_msgs", 0)) if va and vb else None,
               "slow_consumers": (vb.get("slow_consumers", 0) - va.get("slow_consumers", 0)) if va and vb else None,
               "sent": sent, "expected_deliveries": sent * point.consumers,
               "received_total": sum(r["received_total"] for r in subs),
               "pub_max_lag_s": max((r["max_lag_s"] for r in pubs), default=0.0),
               "closed_connections": sum(r["closed"] for r in results),
               "errors": [r["last_error"] for r in results if r.get("errors")][:3],
               "generators": {"pub": len(pubs), "sub": len(subs)}, "window_s": dt}
        # Busy cores = every process's own CPU time. /proc/stat's tick-sampled total (kept as
        # machine_busy_ticks) misses much of the relays' short, timer-driven bursts on this VM.
        row["machine_busy"] = sum(row[k] for k in ("broker_cpu", "gen_cpu", "relay_cpu", "harness_cpu",
                                                   "kernel_cpu", "foreign_cpu"))
        return row


def _plan(paths: tuple[str, ...], sizes: tuple[int, ...], quick: bool, rates: list[float] | None) -> list[Point]:
    topics, consumers = SHAPE
    table = QUICK_RATES if quick else RATES
    return [Point(path, size, topics, consumers, r) for path in paths for size in sizes
            for r in (rates or table[path, size])]


def sweep(points: list[Point], broker: LoadedBroker, say, max_foreign: float = MAX_FOREIGN,
          attempts: int = ATTEMPTS) -> list[dict]:
    """Measures `points` in order. A point during which other processes used more than `max_foreign`
    cores is measured again (up to `attempts` times, the least disturbed attempt is kept): on a shared
    2-core machine their bursts otherwise show up as broker latency. A series stops after two points
    in a row delivering < 80 % (past saturation every further point only overloads the machine)."""
    rows, short = [], {}
    for point in points:
        key = (point.path, point.size, point.topics, point.consumers)
        if short.get(key, 0) >= 2:
            continue
        tries = [broker.measure(point)]
        while tries[-1]["foreign_cpu"] > max_foreign and len(tries) < attempts:
            say(f"  (other processes used {tries[-1]['foreign_cpu']:.2f} cores: measuring again)")
            time.sleep(2.0)
            tries.append(broker.measure(point))
        row = min(tries, key=lambda r: r["foreign_cpu"])
        row["attempts_foreign_cpu"] = [r["foreign_cpu"] for r in tries]
        rows.append(row)
        short[key] = short.get(key, 0) + 1 if row["delivered"] < 0.8 else 0
        say(f"  {point.path:>8} {point.size:>5} B {point.topics:>3}x{point.consumers:<3} offered {point.offered:>9,.0f}"
            f"  achieved {row['achieved']:>9,.0f}  p50/p95/p99 {_ms(row['p50_ms'])}/{_ms(row['p95_ms'])}/"
            f"{_ms(row['p99_ms'])} ms  nats {row['broker_cpu']:.2f}  gen {row['gen_cpu']:.2f}  "
            f"relays {row['relay_cpu']:.2f}  others {row['foreign_cpu']:.2f}  machine {row['machine_busy']:.2f} cores")
        time.sleep(0.5)
    return rows


def _series_keys(rows: list[dict]) -> list[tuple[str, int, int]]:
    keys = {(r["path"], r["size"], r.get("repeat", 1)) for r in rows
            if (r["topics"], r["consumers"]) == SHAPE and r.get("repeat", 1) > 0}
    return sorted(keys, key=lambda k: (k[0] != "emulated", -k[1], k[2]))


def analyse(rows: list[dict], cores: int) -> dict:
    """Knees per path, message size and repeat (main shape only; each knee names its series, which
    the figure draws); a recommendation per path; what limited each series (the first deteriorated
    point, else the heaviest)."""
    knees = {}
    for path, size, rep in _series_keys(rows):
        series = [r for r in rows if (r["path"], r["size"], r.get("repeat", 1)) == (path, size, rep)
                  and (r["topics"], r["consumers"]) == SHAPE]
        # A point where other processes still used > MAX_FOREIGN cores after every attempt measured
        # the shared machine, not the broker: it is left out (listed in `excluded`).
        clean = [r for r in series if r.get("foreign_cpu", 0.0) <= MAX_FOREIGN]
        low = sorted(series, key=lambda r: r["offered"])[:BASE_POINTS]
        knee = find_knee(clean if any(r in clean for r in low) else [])  # no low-load point: no baseline
        if not any(r in clean for r in low):
            knee["reason"] = "every low-load point was disturbed by other processes"
        knee["excluded"] = [r["offered"] for r in series if r not in clean]
        bad = knee["first_bad"] or max(clean or series, key=lambda r: r["offered"])
        knee["limited_by"] = limited_by(bad, cores)
        knees[f"{path} {size}B run {rep}"] = {"path": path, "size": size, "repeat": rep, **knee}
    by_path = {path: recommend({k: v for k, v in knees.items() if k.startswith(path + " ")})
               for path in sorted({k.split()[0] for k in knees})}
    return {"knees": knees, "recommendation": by_path}


def _machine_facts() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    try:
        nats = subprocess.run(["nats-server", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        nats = "unknown"
    return {"cpus": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
            "load_average_at_start": os.getloadavg(), "nats_server": nats, "python": platform.python_version()}


# -- table, report, figure ------------------------------------------------------------------------------------
def _ms(value) -> str:
    return f"{value:.2f}" if value is not None else "-"


PATH_TITLES = {"emulated": f"through the emulated network ({LINKS_ONE_WAY_MS:g} ms of links, delay-line relays)",
               "direct": "direct: clients in the broker's node (no links, no relays)"}


def figure_facts() -> dict:
    """What analysis.bench_figures.overload reads besides the rows: the main shape, the paths' titles
    stay in `how`; these are the disturbance limit and the paper's threshold (current values: a
    --reanalyse rewrites them with the rule)."""
    return {"max_foreign_cores": MAX_FOREIGN, "paper_rth_out": PAPER_RTH_OUT}


def draw(data: dict, name: str) -> None:
    from analysis.bench_figures import draw as draw_bench

    draw_bench(name, data, OUT)


def table(rows: list[dict], title: str):
    from testbed.screen import Table

    t = Table("path", "size B", "topics x cons", "run", "offered msg/s", "achieved msg/s", "p50 ms", "p95 ms",
              "p99 ms", "nats CPU", "gen CPU (max)", "relay CPU (max)", "others", "machine", "slow cons", title=title)
    for r in rows:
        t.add_row(r["path"], str(r["size"]), f"{r['topics']}x{r['consumers']}", str(r.get("repeat", 1)),
                  f"{r['offered']:,.0f}", f"{r['achieved']:,.0f}", _ms(r["p50_ms"]), _ms(r["p95_ms"]), _ms(r["p99_ms"]),
                  f"{r['broker_cpu']:.2f}", f"{r['gen_cpu']:.2f} ({r['gen_cpu_max']:.2f})",
                  f"{r['relay_cpu']:.2f} ({r['relay_cpu_max']:.2f})", f"{r.get('foreign_cpu', 0):.2f}",
                  f"{r['machine_busy']:.2f}",
                  str(r["slow_consumers"]))
    return t


def report(data: dict, console) -> None:
    console.print(table(data["rows"], "nats-server output rate vs E2E latency (CPU in cores; run 0: other shapes)"))
    for label, knee in data["analysis"]["knees"].items():
        at = f"{knee['knee']:,.0f} msg/s" if knee["knee"] else "none"
        top = f"{knee['sustained_max']:,.0f}" if knee.get("sustained_max") else "-"
        console.print(f"{label}: knee {at}{'' if knee['reached'] else ' (not reached: lower bound)'}; baseline p95 "
                      f"{_ms(knee['baseline_p95_ms'])} ms; first bad: {knee['reason']}; delivered >= "
                      f"{MIN_DELIVERED:.0%} up to {top} msg/s; limited by: {knee['limited_by']}")
    for path, rec in data["analysis"]["recommendation"].items():
        console.print(f"{path}: recommended Rth_out = {rec['rth_out']:,.0f} msg/s (from {rec['from']})"
                      if rec["rth_out"] else f"{path}: no recommendation: {rec['rule']}")
    console.print(f"rule: {next(iter(data['analysis']['recommendation'].values()))['rule']}")


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    console = Console(width=170)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few points, shorter windows (< 2 minutes)")
    parser.add_argument("--repeat", type=int, default=1, help="run the sweep this many times (noisy machines)")
    parser.add_argument("--paths", default="emulated,direct", help="emulated (through the shaper), direct, or both")
    parser.add_argument("--sizes", default=None, help="comma-separated message sizes in bytes (default 1000,100)")
    parser.add_argument("--rates", default=None, help="comma-separated offered output rates in msg/s (every series)")
    parser.add_argument("--pubs", type=int, default=2, help="publisher processes (topics split among them)")
    parser.add_argument("--subs", type=int, default=2, help="consumer processes (connections split among them)")
    parser.add_argument("--no-shapes", action="store_true", help="skip the other topic/consumer shapes")
    parser.add_argument("--reanalyse", action="store_true",
                        help="apply the current knee rule to the rows in results/bench/overload.json, rewrite its "
                             "analysis, redraw (no measurement)")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.reanalyse:
        data = json.loads((OUT / "overload.json").read_text())
        data["analysis"] = {**data["analysis"], **analyse(data["rows"], data["machine"]["cpus"]),
                            "reanalysed": time.time()}
        data["how"].update(figure_facts())
        (OUT / "overload.json").write_text(json.dumps(data, indent=2))
        draw(data, "overload")
        report(data, console)
        return 0
    if os.geteuid() != 0:
        console.print("bench-overload needs root (network namespaces)")
        return 1
    from testbed.experiment import Session
    from testbed.scenario.loader import load

    paths = tuple(args.paths.split(","))
    sizes = tuple(int(v) for v in args.sizes.split(",")) if args.sizes else SIZES
    rates = [float(v) for v in args.rates.split(",")] if args.rates else None
    timing = Timing(1.0, 3.0, 1.0) if args.quick else Timing()
    cores = os.cpu_count() or 1
    facts = _machine_facts()
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="testbed-bench-overload-"))
    rows = []
    with Session(load(SCENARIO)) as session:
        broker = LoadedBroker(session, log_dir, args.pubs, args.subs, timing)
        try:
            for rep in range(1, args.repeat + 1):
                console.print(f"sweep {rep}/{args.repeat}: {SHAPE[0]} topics x {SHAPE[1]} consumers, paths {paths}, "
                              f"sizes {sizes}, window {timing.window:g} s after {timing.warmup:g} s warm-up")
                attempts = 1 if args.quick else ATTEMPTS  # --quick: no re-measuring, to stay under 2 minutes
                for row in sweep(_plan(paths, sizes, args.quick, rates), broker, console.print, attempts=attempts):
                    rows.append({**row, "repeat": rep})
            knees = analyse(rows, cores)["knees"]
            if not args.quick and not args.no_shapes:
                for path in paths:
                    knee = knees.get(f"{path} {sizes[0]}B run 1", {}).get("knee")
                    if not knee:
                        continue
                    console.print(f"{path}: other shapes around the {sizes[0]} B knee ({knee:,.0f} msg/s)")
                    extra = [Point(path, sizes[0], t, c, round_down(f * knee))
                             for t, c in OTHER_SHAPES for f in (0.5, 1.0, 1.5)]
                    rows += [{**row, "repeat": 0} for row in sweep(extra, broker, console.print)]
        finally:
            broker.stop()
        shaper = session.shaper
    analysis = analyse(rows, cores)
    for path in paths:
        main_rows = [r for r in rows if r["path"] == path and r["p95_ms"] and r["repeat"] > 0]
        analysis.setdefault("spearman_output_rate_p95", {})[path] = _spearman([r["achieved"] for r in main_rows],
                                                                             [r["p95_ms"] for r in main_rows])
    data = {"time": time.time(), "took_s": time.monotonic() - started, "quick": args.quick, "machine": facts,
            "how": {"scenario": str(SCENARIO.relative_to(SCENARIO.parents[2])),
                    "scenario_yaml": SCENARIO.read_text(), "links_one_way_ms": LINKS_ONE_WAY_MS, "shaper": shaper,
                    "paths": {p: PATH_TITLES[p] for p in paths},
                    "broker": f"one nats-server ({facts['nats_server']}) in {BROKER}, started by "
                              "testbed.systems.pubsub.broker.start_nats, default settings",
                    "load": f"natsload ({SOURCE.name}): {args.pubs} publisher processes (one connection per topic), "
                            f"{args.subs} consumer processes (one connection per topic x consumer), in {PUB} and "
                            f"{SUB} (emulated) or {BROKER} (direct); open loop, latency = receive time - due time",
                    "shape": {"topics": SHAPE[0], "consumers_per_topic": SHAPE[1], "other_shapes": OTHER_SHAPES},
                    "timing": asdict(timing), "cpu": "cores = CPU seconds (/proc/<pid>/stat) / window seconds",
                    "shared_machine": f"a point during which processes outside the bench used > {MAX_FOREIGN} cores "
                                      f"is measured again, up to {ATTEMPTS} times; the least disturbed is kept",
                    "knee_rule": {"factor": FACTOR, "min_increase_ms": MIN_INCREASE_MS,
                                  "min_delivered": MIN_DELIVERED, "base_points": BASE_POINTS},
                    "command": " ".join(["python -m testbed.bench.overload",
                                         *(sys.argv[1:] if argv is None else argv)]),
                    "log_dir": str(log_dir), **figure_facts()},
            "rows": rows, "analysis": analysis}
    name = "overload-quick" if args.quick else "overload"  # a smoke run never replaces the full sweep
    (OUT / f"{name}.json").write_text(json.dumps(data, indent=2))
    draw(data, name)
    report(data, console)
    console.print(f"written {OUT / name}.json, {OUT / name}.png in {time.monotonic() - started:.0f}s")
    return 0


def _spearman(x: list[float], y: list[float]) -> float | None:
    """Rank correlation (the paper: output rate 'strongly correlated' with p95)."""
    if len(x) < 3:
        return None

    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        for rank, i in enumerate(order):
            out[i] = float(rank)
        return out

    rx, ry = ranks(x), ranks(y)
    try:
        return statistics.correlation(rx, ry)
    except (AttributeError, statistics.StatisticsError):
        return None


if __name__ == "__main__":
    sys.exit(main())
