"""A mobile client's coordinate loop: ask the zone's NC proxy every period, log each answer.

Runs inside a mobile node (`--node NAME`, lines on stdout), or, where every node is a namespace of
this machine, once for all mobile nodes (`--nodes FILE`: [{"node", "pid", "out"}]): a thread per
node, each inside its node's network namespace for good, so each query still leaves through the
node's own link (one process instead of one per mobile node: 64 at MMOG's size). Each line is one
answer (time, proxy, access latency, coordinate) or one miss, so the run can show that the answer
follows the node's zone.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from testbed.nc.proxy import NC_ANYCAST_IP, NC_PORT, query
from testbed.procs import enter_netns


def report(node: str, period: float, proxy: str, port: int, write) -> None:
    """Ask every `period` s, forever; `write(line)` each answer or miss."""
    ident = 0
    next_due = time.monotonic()
    while True:
        ident += 1
        record = {"type": "nc_query", "time": time.time(), "node": node}
        try:
            answer = query(proxy, port, timeout=min(1.0, period), ident=ident)
            coordinate = answer.pop("coordinate")
            record.update(proxy=answer["proxy"], access_s=answer["access_s"], height=coordinate.height,
                          vec=list(coordinate.vec), adjustment=coordinate.adjustment, error=coordinate.error)
        except (TimeoutError, OSError, ValueError) as error:
            record.update(proxy=None, miss=str(error))
        write(json.dumps(record))
        next_due += period
        time.sleep(max(0.0, next_due - time.monotonic()))


def report_from(spec: dict, period: float, proxy: str, port: int) -> None:
    """One node's loop in this thread, inside the node's namespace, its lines to its own file."""
    enter_netns(spec["pid"])
    with open(spec["out"], "a", buffering=1) as out:
        report(spec["node"], period, proxy, port, lambda line: out.write(line + "\n"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="query the zone's NC proxy periodically")
    parser.add_argument("--node", help="this node (the process runs inside it; lines on stdout)")
    parser.add_argument("--nodes", type=Path, help='every mobile node: JSON [{"node", "pid", "out"}]')
    parser.add_argument("--period", type=float, default=5.0)
    parser.add_argument("--proxy", default=NC_ANYCAST_IP)
    parser.add_argument("--port", type=int, default=NC_PORT)
    args = parser.parse_args(argv)
    if (args.node is None) == (args.nodes is None):
        parser.error("give --node or --nodes")
    if args.node:
        report(args.node, args.period, args.proxy, args.port, lambda line: print(line, flush=True))
        return 0
    specs = json.loads(args.nodes.read_text())
    # phases spread over a period: the nodes started together would otherwise ask all at once
    for spec in specs:
        threading.Thread(target=report_from, args=(spec, args.period, args.proxy, args.port), name=spec["node"],
                         daemon=True).start()
        time.sleep(args.period / max(1, len(specs)))
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
