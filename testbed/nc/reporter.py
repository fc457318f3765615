"""A mobile client's coordinate loop: ask the zone's NC proxy every period, log each answer.

Runs inside a mobile node. Each line of its output is one answer (time, proxy, access latency,
coordinate) or one miss, so the run can show that the answer follows the node's zone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from testbed.nc.proxy import NC_ANYCAST_IP, NC_PORT, query


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="query the zone's NC proxy periodically")
    parser.add_argument("--node", required=True)
    parser.add_argument("--period", type=float, default=5.0)
    parser.add_argument("--proxy", default=NC_ANYCAST_IP)
    parser.add_argument("--port", type=int, default=NC_PORT)
    args = parser.parse_args(argv)
    ident = 0
    next_due = time.monotonic()
    while True:
        ident += 1
        record = {"type": "nc_query", "time": time.time(), "node": args.node}
        try:
            answer = query(args.proxy, args.port, timeout=min(1.0, args.period), ident=ident)
            coordinate = answer.pop("coordinate")
            record.update(proxy=answer["proxy"], access_s=answer["access_s"], height=coordinate.height,
                          vec=list(coordinate.vec), adjustment=coordinate.adjustment, error=coordinate.error)
        except (TimeoutError, OSError, ValueError) as error:
            record.update(proxy=None, miss=str(error))
        print(json.dumps(record), flush=True)
        next_due += args.period
        time.sleep(max(0.0, next_due - time.monotonic()))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
