"""`make bench-monitoring`: monitoring traffic of one broker, ePulsar vs AllPairs (paper 3.2 and 5.6, Fig. 6).

One edge broker (bzone1: nats-server and the real broker agent) hosts T topics with C clients each
(half producers, half consumers, in one client node), ZooKeeper runs in the cloud node 20 ms away.
The clients are the client library's Publisher and Subscriber, attached to the broker and sending
their NC reports every period (each its own Serf-like coordinate) without publishing data. The
agent aggregates them per topic (ePulsar) or, run with --report-clients as PubSubSystem does for
the AllPairs policy, also lists every client's coordinate, and writes its report to ZooKeeper every
monitoring period.

Measured over a window of exactly N report writes (from just after one write, seen as the report
node's version changing, to just after the N-th next), after every client has reported:
- wire: the bytes the agent's ZooKeeper connection sent (the kernel's per-socket `bytes_sent` and
  `segs_out` from `ss -ti` in the broker's namespace; wire = payload + 66 B of Ethernet, IP and TCP
  headers per segment), minus the same agent's idle rate (no topics) measured before;
- the broker node's interface tx counters (/proc/net/dev) minus their idle rate, as a cross-check
  (they also carry the broker's small NATS traffic to its clients);
- the size of the report itself, read back from ZooKeeper, divided by the period.
The broker has no Serf agent here, so its report carries `"coord": null` (a coordinate adds ~250 B
per report, the same for both policies).

The network is scenarios/bench/monitoring.yaml; the system is assembled by `PubSubSystem`, as in a run.
Writes results/bench/monitoring.json and prints the table; `analysis.bench_figures.fig6` draws
fig6.png from it (`--figures-only` redraws it).

    python -m testbed.systems.pubsub.bench.monitoring [--quick] [--figures-only]
    python -m testbed.systems.pubsub.bench.monitoring clients ...   (the client process, run inside the client node)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path("results/bench")
SCENARIO = Path(__file__).resolve().parents[4] / "scenarios" / "bench" / "monitoring.yaml"
HEADER_BYTES = 66  # Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12, per segment
BROKER, CLIENTS = "bzone1", "cl1"  # nodes of SCENARIO


# -- the client process (inside the client node) ------------------------------------------------------
def _coordinate(rng: random.Random) -> dict:
    """A Serf-like coordinate: 8 dimensions of float64 written in full, as Serf's RPC gives them."""
    return {"vec": [rng.gauss(0.0, 0.01) for _ in range(8)], "height": abs(rng.gauss(1e-4, 5e-5)),
            "adjustment": rng.gauss(0.0, 1e-4), "error": rng.uniform(0.1, 0.6)}


async def _clients(args) -> int:
    from testbed.systems.pubsub.client import Publisher, Subscriber, connect_nats, lookup

    rng = random.Random(args.seed)
    lookup_nc = await connect_nats(args.lookup)
    topics = [f"{args.prefix}{i}" for i in range(1, args.topics + 1)]
    owners = {}
    for topic in topics:  # the topic manager assigns each topic (to the default broker) and it acquires
        answer = await lookup(topic, lookup_nc, timeout=30)
        owners[topic] = (answer["broker"], answer["address"])
    clients = []
    for topic in topics:
        for j in range(args.per_topic):
            fixed = _coordinate(rng)
            common = {"owner": owners[topic], "coord": (lambda c=fixed: c), "nc_period": args.nc_period}
            name = f"{topic}-c{j}"
            clients.append(Publisher(topic, name, 10.0, **common) if j % 2 == 0 else
                           Subscriber(topic, name, keep_latencies=False, **common))
    for start in range(0, len(clients), 32):  # attach (each sends its first NC report at once)
        await asyncio.gather(*(c.start() for c in clients[start:start + 32]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(json.dumps({"ready": True, "clients": len(clients), "owners": sorted({o[0] for o in owners.values()}),
                      "time": time.time()}), flush=True)
    await stop.wait()
    for client in clients:
        await client.close()
    # Hand the topics back (baseline release) so that the next configuration starts from an empty broker.
    released = 0
    peers = {}
    for topic, (broker, address) in owners.items():
        try:
            if address not in peers:
                peers[address] = await connect_nats(address)
            reply = await peers[address].request(f"_ep.cmd.{broker}", json.dumps({"op": "release", "topic": topic})
                                                 .encode(), timeout=10)
            released += bool(json.loads(reply.data).get("ok"))
        except Exception:  # noqa: BLE001 - counted below
            pass
    for nc in [lookup_nc, *peers.values()]:
        await nc.close()
    print(json.dumps({"done": True, "released": released, "topics": len(topics)}), flush=True)
    return 0


# -- measurement (harness side) -------------------------------------------------------------------------
def _zk_socket(network) -> tuple[int, int]:
    """(bytes_sent, segs_out) of the broker agent's ZooKeeper connections."""
    out = network.cmd(BROKER, "ss -tinH state established '( dport = :2181 )'")
    sent = sum(int(v) for v in re.findall(r"bytes_sent:(\d+)", out))
    segs = sum(int(v) for v in re.findall(r"segs_out:(\d+)", out))
    return sent, segs


def _iface_tx(network) -> int:
    total = 0
    for line in network.cmd(BROKER, "cat /proc/net/dev").splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() not in ("lo", "") and rest.split():
            total += int(rest.split()[8])
    return total


def _sample(network) -> dict:
    sent, segs = _zk_socket(network)
    return {"t": time.monotonic(), "payload": sent, "segs": segs, "iface": _iface_tx(network)}


def _rates(a: dict, b: dict) -> dict:
    dt = b["t"] - a["t"]
    payload = (b["payload"] - a["payload"]) / dt
    segs = (b["segs"] - a["segs"]) / dt
    return {"zk_payload_Bps": payload, "zk_wire_Bps": payload + HEADER_BYTES * segs,
            "iface_tx_Bps": (b["iface"] - a["iface"]) / dt, "window_s": dt}


def _version(meta) -> int:
    stat = meta.zk.exists(f"/epulsar/reports/{BROKER}")
    return stat.version if stat else -1


def _after_write(meta, timeout: float) -> int:
    """Waits until the agent writes its next report (the node's version changes); returns the version."""
    start, deadline = _version(meta), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.02)
        if (v := _version(meta)) != start:
            return v
    raise RuntimeError(f"{BROKER} wrote no report within {timeout:g}s")


def _window(network, meta, reports: int, period: float) -> dict:
    """Rates over exactly `reports` report writes: sampled just after one write and just after the
    `reports`-th next (the loop's period drifts a little, so a fixed-length window would catch one
    report more or less)."""
    _after_write(meta, 3 * period)
    samples = [_sample(network)]
    for _ in range(reports):
        _after_write(meta, 3 * period)
        samples.append(_sample(network))
    rates = _rates(samples[0], samples[-1])
    # One wire rate per report period: the samples of the interval the headline gives (analysis.stats).
    rates["zk_wire_Bps_periods"] = [_rates(a, b)["zk_wire_Bps"] for a, b in zip(samples, samples[1:])]
    return rates


def _report_bytes(meta) -> tuple[int, dict]:
    data = meta.zk.get(f"/epulsar/reports/{BROKER}")[0]
    return len(data), json.loads(data)


def measure_policy(policy: str, configs: list[tuple[int, int]], period: float, periods: int, say) -> list[dict]:
    from analysis.stats import mean_ci
    from testbed.experiment import Session
    from testbed.roles.launch import node_metadata
    from testbed.procs import read_line
    from testbed.systems.pubsub.role import ManagerOptions, PubSubSystem
    from testbed.scenario.loader import load

    log_dir = Path(tempfile.mkdtemp(prefix=f"testbed-bench-mon-{policy}-"))
    rows = []
    with Session(load(SCENARIO)) as session:
        network = session.network
        system = PubSubSystem(network, session.topology, log_dir,
                              ManagerOptions(policy=policy, period=period, default=BROKER, threshold=10.0),
                              monitoring_period=period, nc_period=period)
        system.start()
        meta = node_metadata(system.zk.hosts, network.connector(system.cloud)).start()
        try:
            time.sleep(period)  # the agent's first reports
            idle = _window(network, meta, periods, period)
            idle_report, _ = _report_bytes(meta)
            say(f"  {policy}: idle agent -> ZooKeeper {idle['zk_wire_Bps']:.0f} B/s on the wire "
                f"(report {idle_report} B), interface tx {idle['iface_tx_Bps']:.0f} B/s")
            for index, (topics, per_topic) in enumerate(configs):
                argv = [network.python, "-m", "testbed.systems.pubsub.bench.monitoring", "clients", "--topics", str(topics),
                        "--per-topic", str(per_topic), "--prefix", f"m{index}t", "--lookup", system.lookup_url,
                        "--nc-period", f"{period:g}", "--seed", str(index)]
                client = network.popen(CLIENTS, argv, stdout=subprocess.PIPE,
                                       stderr=(log_dir / f"clients-{index}.log").open("ab"), text=True)
                try:
                    ready = read_line(client, 180)
                    if ready is None:
                        raise RuntimeError(f"clients did not attach (see {log_dir}/clients-{index}.log)")
                    owners = json.loads(ready).get("owners")
                    _after_write(meta, 3 * period)  # a report with every client's first NC report in it
                    rates = _window(network, meta, periods, period)
                    size, report = _report_bytes(meta)
                finally:
                    client.terminate()
                    try:
                        done = client.communicate(timeout=60)[0]
                    except subprocess.TimeoutExpired:
                        client.kill()
                        done = client.communicate()[0]
                hosted = [t for t in report.get("topics", ()) if t["topic"].startswith(f"m{index}t")]
                listed = sum(len(c["producers"]) + len(c["consumers"]) for c in report.get("clients", {}).values())
                row = {"policy": policy, "topics": topics, "clients_per_topic": per_topic, "period_s": period,
                       **rates, "zk_wire_net_Bps": rates["zk_wire_Bps"] - idle["zk_wire_Bps"],
                       "zk_wire_net_Bps_ci": mean_ci([v - idle["zk_wire_Bps"]
                                                      for v in rates["zk_wire_Bps_periods"]]).as_dict(),
                       "iface_tx_net_Bps": rates["iface_tx_Bps"] - idle["iface_tx_Bps"],
                       "report_bytes": size, "report_Bps": size / period,
                       "idle_zk_wire_Bps": idle["zk_wire_Bps"], "idle_iface_tx_Bps": idle["iface_tx_Bps"],
                       "idle_report_bytes": idle_report, "topics_in_report": len(hosted),
                       "clients_in_report": sum(t["producers"] + t["consumers"] for t in hosted),
                       "coordinates_listed": listed, "owners": owners,
                       "released": (json.loads(done.strip().splitlines()[-1]).get("released")
                                    if done and done.strip() else None)}
                rows.append(row)
                say(f"  {policy} T={topics} C={per_topic}: wire {row['zk_wire_Bps']:.0f} B/s "
                    f"(net {row['zk_wire_net_Bps']:.0f}), report {size} B every {period:g} s, "
                    f"{row['topics_in_report']} topics / {row['clients_in_report']} clients in the report")
                time.sleep(1.0)
            manager = system.manager_events()
            failed = [e for e in manager if e.get("type") in ("round_failed", "lookup_policy_failed")]
            for row in rows:
                row["manager_failures"] = len(failed)
        finally:
            meta.stop()
            system.stop()
    return rows


# -- table ---------------------------------------------------------------------------------------------
def table(rows: list[dict]):
    from testbed.screen import Table

    t = Table("policy", "topics", "clients/topic", "wire B/s", "wire net B/s", "report B", "report B/s",
              "iface tx net B/s", "clients in report", title="Monitoring traffic of one broker to ZooKeeper (Fig. 6)")
    for r in rows:
        t.add_row(r["policy"], str(r["topics"]), str(r["clients_per_topic"]), f"{r['zk_wire_Bps']:.0f}",
                  f"{r['zk_wire_net_Bps']:.0f}", str(r["report_bytes"]), f"{r['report_Bps']:.0f}",
                  f"{r['iface_tx_net_Bps']:.0f}", str(r["clients_in_report"]))
    return t


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["clients"]:
        parser = argparse.ArgumentParser(prog="testbed.systems.pubsub.bench.monitoring clients")
        parser.add_argument("--topics", type=int, required=True)
        parser.add_argument("--per-topic", type=int, required=True)
        parser.add_argument("--prefix", default="mon")
        parser.add_argument("--lookup", required=True)
        parser.add_argument("--nc-period", type=float, default=5.0)
        parser.add_argument("--seed", type=int, default=0)
        return asyncio.run(_clients(parser.parse_args(argv[1:])))
    from rich.console import Console

    console = Console(width=150)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="topics 1, 8 and clients/topic 1, 4")
    parser.add_argument("--topics", default=None, help="comma-separated topic counts (default 1,8,32)")
    parser.add_argument("--clients", default=None, help="comma-separated clients per topic (default 1,4,16)")
    parser.add_argument("--period", type=float, default=5.0, help="monitoring and NC report period, seconds")
    parser.add_argument("--periods", type=int, default=3, help="measurement window, in periods")
    parser.add_argument("--figures-only", action="store_true",
                        help="redraw fig6.png from results/bench/monitoring.json")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    from testbed.systems.pubsub.bench.monitoring_figures import draw

    if args.figures_only:
        data = json.loads((OUT / "monitoring.json").read_text())
        draw(data, OUT)
        console.print(table(data["rows"]))
        return 0
    if os.geteuid() != 0:
        console.print("bench-monitoring needs root (network namespaces)")
        return 1
    topic_counts = [int(v) for v in (args.topics or ("1,8" if args.quick else "1,8,32")).split(",")]
    per_topic = [int(v) for v in (args.clients or ("1,4" if args.quick else "1,4,16")).split(",")]
    configs = [(t, c) for t in topic_counts for c in per_topic]
    started = time.monotonic()
    rows = []
    for policy in ("epulsar", "allpairs"):
        console.print(f"{policy}: {len(configs)} configurations, period {args.period:g} s, "
                      f"window {args.periods} periods ...")
        rows += measure_policy(policy, configs, args.period, args.periods, console.print)
    data = {"time": time.time(), "took_s": time.monotonic() - started,
            "scenario": str(SCENARIO.relative_to(SCENARIO.parents[2])), "rows": rows}
    (OUT / "monitoring.json").write_text(json.dumps(data, indent=2))
    draw(data, OUT)
    console.print(table(rows))
    console.print(f"written {OUT / 'monitoring.json'}, {OUT / 'fig6.png'} in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
