"""`make bench-emulation`: accuracy, shaper throughput, bring-up/teardown and relink figures.

Prints a table and writes results/bench/emulation.json. Targets: median RTT within
max(0.5 ms, 2 %) and p99 within +3 ms for 10-200 ms over 1-3 hops; >= 40,000 pkt/s of 200-byte
UDP with < 0.1 % loss and TCP >= 500 Mbit/s through the user-space shaper; 50 hosts on 10
switches up and pingable in <= 30 s, down in <= 10 s, no leftovers; a moved host reaches its
peers over the new path within 200 ms of the relink call. The networks are
scenarios/bench/emulation-{accuracy,bringup,relink}.yaml.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

from testbed import screen
from testbed.screen import Table

from testbed import probe, procs
from testbed.emulation import runstate
from testbed.experiment import Session
from testbed.scenario.loader import load

OUT = Path("results/bench/emulation.json")
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios" / "bench"
ACCURACY, BRINGUP, MOBILE = (SCENARIOS / f"emulation-{name}.yaml" for name in ("accuracy", "bringup", "relink"))
ACCURACY_RTT_MS = 40.0  # the configured RTT of every path in ACCURACY as written
console = screen.console()


def accuracy_scenario(rtt_ms: float):
    """ACCURACY with every path's RTT `rtt_ms`: the client access delays and the inter-site RTT scaled
    (1 hop: node -> its site gateway; 2 hops: node -> node on one switch; 3 hops: across two sites)."""
    base, factor = load(ACCURACY), rtt_ms / ACCURACY_RTT_MS
    infra, nodes = base.infrastructure, base.nodes
    zones = infra.mec_zones.model_copy(update={"inter_site_rtt": infra.mec_zones.inter_site_rtt * factor})
    clients = [group.model_copy(update={"access": group.access.model_copy(update={"delay": group.access.delay * factor})})
               for group in nodes.clients]
    return base.model_copy(update={"infrastructure": infra.model_copy(update={"mec_zones": zones}),
                                   "nodes": nodes.model_copy(update={"clients": clients})})


def _ping(session: Session, node: str, target_ip: str, count: int) -> list[float]:
    process = session.network.popen(node, ["ping", "-n", "-c", str(count), "-i", "0.01", "-W", "2",
                                           "-w", str(procs.ping_deadline_s(count, 0.01)), target_ip], text=True)
    out, _ = process.communicate(timeout=count * 0.01 + 30)
    return probe.parse_ping(out)


def accuracy(shaper: str, count: int = 100) -> list[dict]:
    from testbed.topology import GATEWAY_IP

    rows = []
    for rtt_ms in (10, 40, 100, 200):
        with Session(accuracy_scenario(rtt_ms), shaper=shaper) as session:
            ip = session.network.ip_of
            cases = {1: ("one1", GATEWAY_IP), 2: ("two1", ip("two2")), 3: ("thra1", ip("thrb1"))}
            for node, target in cases.values():
                _ping(session, node, target, 3)
            for hops, (node, target) in cases.items():
                values = _ping(session, node, target, count)
                median = statistics.median(values) if values else float("nan")
                p99 = procs.percentile(values, 0.99, "nearest") if values else float("nan")
                tolerance = max(0.5, 0.02 * rtt_ms)
                rows.append({"shaper": shaper, "configured_ms": rtt_ms, "hops": hops, "received": len(values),
                             "median_ms": round(median, 3), "p99_ms": round(p99, 3),
                             "median_error_ms": round(median - rtt_ms, 3),
                             "ok": abs(median - rtt_ms) <= tolerance and p99 <= rtt_ms + 3})
    return rows


def bringup() -> dict:
    """50 hosts on 10 switches: time to up-and-pingable end to end, teardown time, leftovers."""
    scenario = load(BRINGUP)
    started = time.monotonic()
    session = Session(scenario)
    session.__enter__()
    try:
        built = time.monotonic() - started
        names = list(session.topology.nodes)
        first = names[0]
        pending = set(names[1:])
        while pending and time.monotonic() - started < 60:
            processes = {n: session.network.popen(first, ["ping", "-n", "-c", "1", "-W", "1", session.network.ip_of(n)])
                         for n in pending}
            pending = {n for n, p in processes.items() if p.wait() != 0}
        pingable = time.monotonic() - started
        run_id = session.run_id
        hosts = len(names)
    finally:
        down_started = time.monotonic()
        session.__exit__(None, None, None)
        teardown = time.monotonic() - down_started
    leftovers = [p for p, r in runstate.tagged_processes().items() if r == run_id]
    return {"hosts": hosts, "switches": len(session.topology.sites), "build_s": round(built, 2),
            "up_and_pingable_s": round(pingable, 2), "unreachable": len(pending), "teardown_s": round(teardown, 2),
            "leftover_processes": len(leftovers),
            "ok": not pending and pingable <= 30 and teardown <= 10 and not leftovers}


_REPLY = re.compile(r"^\[(\d+\.\d+)\].*icmp_seq=(\d+) .*time=([0-9.]+) ms")


def relink(trials: int = 6, servers: list | None = None) -> dict:
    """Continuous 2 ms pings from the moving host to the zone-2 broker while it moves zone1 <-> zone2
    (on `servers`: zone1 and zone2 on different ones, the move across them)."""
    scenario = load(MOBILE)
    reach_ms, call_ms, settled_ok = [], [], []
    with Session(scenario, servers=servers) as session:
        net = session.network
        if servers and net.placement["zone1"] == net.placement["zone2"]:
            raise RuntimeError("relink bench: zone1 and zone2 were placed on one server")
        target = net.ip_of("bzone2")
        for trial in range(trials):
            to_site = "zone2" if trial % 2 == 0 else "zone1"
            expected = session.topology.node_rtt("uav1", "bzone2", site_a=to_site) * 1e3
            pinger = net.popen("uav1", ["ping", "-D", "-n", "-i", "0.002", "-W", "1", target], text=True)
            time.sleep(0.5)
            call = time.time()
            event = net.relink("uav1", to_site)
            time.sleep(1.0)
            pinger.terminate()
            out, _ = pinger.communicate(timeout=5)
            replies = [(float(m.group(1)), float(m.group(3))) for m in map(_REPLY.match, out.splitlines()) if m]
            # First reply *sent* after the call that came back over the new path (RTT near the new one).
            after = [(t, rtt) for t, rtt in replies if t - rtt / 1e3 >= call and abs(rtt - expected) < 3]
            reach_ms.append(round((after[0][0] - call) * 1e3, 1) if after else None)
            call_ms.append(round(event.duration_s * 1e3, 1))
            probe_rtt = statistics.median(r for _t, r in replies[-20:]) if replies else float("nan")
            settled_ok.append(abs(probe_rtt - expected) <= max(0.5, 0.02 * expected))
    reached = [r for r in reach_ms if r is not None]
    return {"trials": trials, "relink_call_ms": call_ms, "reach_new_path_ms": reach_ms,
            "max_reach_ms": max(reached) if reached else None, "next_probe_shows_new_delay": all(settled_ok),
            "ok": len(reached) == trials and max(reached) <= 200 and all(settled_ok)}


def servers_main(names: str) -> int:
    """`make bench-servers`: the relink bench on this machine and across namespace-servers, side by side."""
    from testbed.emulation import servers as servers_mod

    servers = servers_mod.parse(names)
    results = {"machine": os.uname().nodename, "time": time.time(), "servers": names}
    for where, on in (("one machine", None), ("across servers", servers)):
        console.print(f"relink: {where}")
        results[where] = relink(servers=on)
    out = OUT.with_name("relink-servers.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    table = Table("where", "relink call ms (median, max)", "new path answers after ms (median, max)", "ok",
                  title="relink: uav1 zone1 <-> zone2, 6 moves")
    for where in ("one machine", "across servers"):
        r = results[where]
        reached = [x for x in r["reach_new_path_ms"] if x is not None]
        table.add_row(where, f"{statistics.median(r['relink_call_ms']):.0f}, {max(r['relink_call_ms']):.0f}",
                      f"{statistics.median(reached):.0f}, {max(reached):.0f}" if reached else "-",
                      "yes" if r["ok"] else "NO")
    console.print(table)
    console.print(f"written {out}")
    return 0 if all(results[w]["ok"] for w in ("one machine", "across servers")) else 1


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--servers":
        return servers_main(sys.argv[2])
    if os.geteuid() != 0:
        console.print("bench-emulation needs root (network namespaces)")
        return 1
    results: dict = {"machine": os.uname().nodename, "kernel": os.uname().release, "time": time.time()}
    from testbed.emulation import choose

    shapers = ["delayline"] + (["netem"] if choose.netem_available() else [])
    console.print(f"accuracy: shapers {', '.join(shapers)} (netem {'present' if 'netem' in shapers else 'absent on this kernel'})")
    results["accuracy"] = [row for shaper in shapers for row in accuracy(shaper)]
    console.print("shaper throughput (user-space delay line)")
    from testbed.emulation import bench_shaper

    results["shaper"] = bench_shaper.run_shaper_benchmark()
    console.print("bring-up: 50 hosts on 10 switches")
    results["bringup"] = bringup()
    console.print("relink")
    results["relink"] = relink()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))
    table = Table("shaper", "configured ms", "hops", "median ms", "p99 ms", "error ms", "ok", title="RTT accuracy")
    for row in results["accuracy"]:
        table.add_row(row["shaper"], str(row["configured_ms"]), str(row["hops"]), str(row["median_ms"]),
                      str(row["p99_ms"]), str(row["median_error_ms"]), "yes" if row["ok"] else "NO")
    console.print(table)
    console.print("shaper:", json.dumps(results["shaper"], indent=1))
    console.print("bring-up:", results["bringup"])
    console.print("relink:", results["relink"])
    console.print(f"written {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
