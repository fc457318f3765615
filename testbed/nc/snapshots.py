"""Coordinate snapshots: every agent's coordinate at a moment, with its accuracy against the
configured network, so the placement assessment and the figures can use them and readings taken
before convergence are marked as such.
"""

from __future__ import annotations

import statistics
import time
from itertools import combinations

from testbed.nc.coordinate import Coordinate
from testbed.procs import percentile

CONVERGED_RELATIVE_ERROR = 0.06  # the paper's bound: median per-pair error < 6 % of the RTT


def pair_errors(coordinates: dict[str, Coordinate], topology) -> list[dict]:
    """|estimated - configured| RTT for every pair of agents, in seconds."""
    rows = []
    for a, b in combinations(sorted(coordinates), 2):
        actual = topology.node_rtt(a, b)
        estimate = coordinates[a].distance_to(coordinates[b])
        rows.append({"a": a, "b": b, "actual_s": actual, "estimate_s": estimate, "error_s": abs(estimate - actual),
                     "relative": abs(estimate - actual) / actual if actual else 0.0})
    return rows


def summary(errors: list[dict]) -> dict:
    if not errors:
        return {"pairs": 0, "median_error_ms": None, "p95_error_ms": None, "median_relative": None}
    absolute = [e["error_s"] * 1e3 for e in errors]
    relative = [e["relative"] for e in errors]
    return {"pairs": len(errors), "median_error_ms": statistics.median(absolute),
            "p95_error_ms": percentile(absolute, 0.95, "nearest"), "median_relative": statistics.median(relative)}


def snapshot(coordinates: dict[str, Coordinate], topology, expected: int) -> dict:
    """One event: all coordinates, the accuracy summary, and whether the cluster had converged."""
    stats = summary(pair_errors(coordinates, topology))
    converged = (len(coordinates) == expected and stats["median_relative"] is not None
                 and stats["median_relative"] < CONVERGED_RELATIVE_ERROR)
    return {"type": "nc_snapshot", "time": time.time(), "agents": len(coordinates), "expected": expected,
            "converged": converged, **stats,
            "coordinates": {n: {"vec": list(c.vec), "height": c.height, "adjustment": c.adjustment, "error": c.error}
                            for n, c in coordinates.items()}}
