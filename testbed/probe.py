"""`testbed probe`: build the network, ping every pair of interest, compare with the configuration.

Users run it to trust the network before an experiment. A pair passes when the measured median
RTT is within max(0.5 ms, 2 %) of the configured RTT and the p99 is at most 3 ms above it (plus
the configured jitter).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict, dataclass
from itertools import combinations

from testbed import procs
from testbed.experiment import BadRunInput, Session
from testbed.topology import Topology

_TIME = re.compile(r"icmp_seq=(\d+) .*time=([0-9.]+) ms")


@dataclass
class PairResult:
    a: str
    b: str
    configured_ms: float
    median_ms: float | None
    p99_ms: float | None
    sent: int
    received: int
    ok: bool
    tolerance_ms: float
    servers: str = ""  # "tbs1-tbs2": the servers of both ends, in a run over servers
    p99_bound_ms: float | None = None  # the highest p99 that passes: configured + 3 ms + 3x the links' jitter
    # The RTTs' summary as ping prints it (min/avg/max/mdev; mdev is their standard deviation): what
    # `make bench-calibration` compares with the measured paths a scenario's links stand for.
    min_ms: float | None = None
    mean_ms: float | None = None
    max_ms: float | None = None
    mdev_ms: float | None = None


def pairs_of_interest(topology: Topology) -> list[tuple[str, str]]:
    """One representative node per site (its broker when there is one) for every pair of sites,
    plus every pair of nodes sharing a site with a non-trivial access link; a star: all pairs."""
    if len(topology.sites) == 1:
        return list(combinations(topology.nodes, 2))
    representative: dict[str, str] = {}
    for node in topology.nodes.values():
        current = representative.get(node.site)
        if current is None or (topology.nodes[current].role != "broker" and node.role in ("broker", "cloud")):
            representative[node.site] = node.name
    pairs = list(combinations(sorted(representative.values(), key=lambda n: list(topology.sites).index(topology.nodes[n].site)), 2))
    for node in topology.nodes.values():
        if node.role not in ("broker", "cloud", "nc-proxy") and representative.get(node.site) not in (None, node.name):
            pairs.append((node.name, representative[node.site]))
    return pairs


def parse_ping(output: str) -> list[float]:
    return [float(m.group(2)) for m in _TIME.finditer(output)]


def evaluate(topology: Topology, a: str, b: str, rtts_ms: list[float], sent: int, site_a: str | None = None,
             site_b: str | None = None) -> PairResult:
    configured = topology.node_rtt(a, b, site_a, site_b) * 1e3
    jitter_ms = 2e3 * topology.path_jitter(a, b)  # both directions of every link on the path
    tolerance, p99_bound = max(0.5, 0.02 * configured), configured + 3.0 + 3 * jitter_ms
    if not rtts_ms:
        return PairResult(a, b, configured, None, None, sent, 0, False, tolerance, p99_bound_ms=p99_bound)
    median, p99 = statistics.median(rtts_ms), procs.percentile(rtts_ms, 0.99, "nearest")
    ok = abs(median - configured) <= tolerance and p99 <= p99_bound
    return PairResult(a, b, configured, median, p99, sent, len(rtts_ms), ok, tolerance, p99_bound_ms=p99_bound,
                      min_ms=min(rtts_ms), mean_ms=statistics.fmean(rtts_ms), max_ms=max(rtts_ms),
                      mdev_ms=statistics.pstdev(rtts_ms))


def measure(session: Session, pairs: list[tuple[str, str]], count: int, interval_s: float = 0.01) -> dict:
    """Ping all pairs at once (each pair its own ping process), return raw RTT lists by pair. Each
    ping waits for its `count` replies until a deadline (a reply a VM stall held back still counts;
    ping keeps probing meanwhile, so `sent` may exceed `count` without any loss)."""
    processes = {}
    for a, b in pairs:
        argv = ["ping", "-n", "-c", str(count), "-i", f"{interval_s:g}", "-W", "2",
                "-w", str(procs.ping_deadline_s(count, interval_s)), session.network.ip_of(b)]
        processes[(a, b)] = session.network.popen(a, argv, text=True)
    results = {}
    for pair, process in processes.items():
        out, _ = process.communicate(timeout=count * interval_s + 30)
        results[pair] = parse_ping(out)
    return results


def main(scenario, backend: str, shaper: str, count: int, as_json: bool, console, topology=None,
         servers: list | None = None) -> int:
    with Session(scenario, backend=backend, shaper=shaper, console=None if as_json else console,
                 topology=topology, servers=servers) as session:
        topology = session.topology
        pairs = pairs_of_interest(topology)
        if not as_json:
            console.print(f"probe: {len(pairs)} pairs, {count} pings each")
        # A first short round warms ARP and caches so the measurement sees the steady state.
        measure(session, pairs, 3)
        raw = measure(session, pairs, count)
        results = [evaluate(topology, a, b, raw[(a, b)], count) for a, b in pairs]
        if session.servers:
            network = session.network
            for r in results:
                r.servers = "-".join(network.server_of(n).name for n in (r.a, r.b))
    failed = [r for r in results if not r.ok]
    if as_json:
        print(json.dumps({"scenario": scenario.name, "backend": session.backend, "shaper": session.shaper,
                          "clock_offsets": session.clock_offsets, "pairs": [asdict(r) for r in results], "ok": not failed}, indent=2))
    else:
        from testbed.screen import Table

        table = Table("pair", *(["servers"] if session.servers else []), "configured ms", "median ms", "p99 ms",
                      "received", "within bounds", title=f"RTT probe ({session.backend}, {session.shaper})")
        for r in results:
            table.add_row(f"{r.a} <-> {r.b}", *([r.servers] if session.servers else []), f"{r.configured_ms:.3f}",
                          f"{r.median_ms:.3f}" if r.median_ms is not None else "-",
                          f"{r.p99_ms:.3f}" if r.p99_ms is not None else "-", f"{r.received}/{r.sent}",
                          "[green]yes[/green]" if r.ok else "[red]NO[/red]")
        console.print(table)
        console.print(f"{len(results) - len(failed)}/{len(results)} pairs within max(0.5 ms, 2 %) at p50 and +3 ms at p99")
    return 1 if failed else 0


__all__ = ["main", "BadRunInput", "measure", "evaluate", "pairs_of_interest"]
