"""analysis.estimates: E(t) from a run's coordinate snapshots against the configured network (pure,
plus one small run directory converted and reduced without Spark)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from analysis import estimates, traces
from testbed import topology as topology_mod
from testbed.scenario.loader import parse_text
from tests.texts import MINIMAL

# MINIMAL: zones 1 and 2 (30 ms RTT apart), each a broker and an NC proxy; a cloud 40 ms one-way away.
TOPOLOGY = topology_mod.build(parse_text(MINIMAL, "t.yaml"))


def coordinate(x_ms: float, y_ms: float = 0.0) -> dict:
    return {"vec": [x_ms / 1e3, y_ms / 1e3] + [0.0] * 6, "height": 0.0, "adjustment": 0.0, "error": 0.1}


def snap(at: float, phase: str, proxy_offset_ms: float) -> dict:
    """Brokers placed right; each NC proxy `proxy_offset_ms` away from its broker (true: 2 x access)."""
    zone_rtt = TOPOLOGY.node_rtt("bzone1", "bzone2") * 1e3
    return {"type": "nc_snapshot", "time": at, "phase": phase,
            "coordinates": {"bzone1": coordinate(0), "pzone1": coordinate(0, proxy_offset_ms),
                            "bzone2": coordinate(zone_rtt), "pzone2": coordinate(zone_rtt, proxy_offset_ms)}}


EVENTS = [snap(90.0, "settle", 20.0), {"type": "settle_end", "time": 95.0, "settled": False, "waited_s": 15.0,
                                       "cap_s": 15.0, "same_site_max_error_ms": 18.0, "median_error_ms": 3.0},
          {"type": "run_start", "time": 100.0}, snap(105.0, "run", 3.0)]


def test_each_snapshot_is_measured_against_the_configured_rtt_from_the_workload_start():
    per_snapshot, per_pair = estimates.measure(EVENTS, TOPOLOGY)
    assert [(s["time_s"], s["phase"], s["pairs"], s["same_site_pairs"]) for s in per_snapshot] == \
        [(-10.0, "settle", 6, 2), (5.0, "run", 6, 2)]
    local = [p for p in per_pair if p["same_site"] and p["time_s"] == -10.0]
    configured = TOPOLOGY.node_rtt("bzone1", "pzone1") * 1e3
    assert {(p["a"], p["b"]) for p in local} == {("bzone1", "pzone1"), ("bzone2", "pzone2")}
    assert all(p["configured_ms"] == pytest.approx(configured) and p["estimated_ms"] == pytest.approx(20.0)
               for p in local)
    assert per_snapshot[0]["same_site_max_error_ms"] == pytest.approx(20.0 - configured)
    assert per_snapshot[1]["same_site_max_error_ms"] == pytest.approx(abs(3.0 - configured))
    assert estimates.settle_end(EVENTS)["time_s"] == -5.0


def test_a_run_directory_gets_both_tables_the_figure_and_a_summary_line(tmp_path):
    (tmp_path / "scenario.yaml").write_text(MINIMAL)
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    traces.convert_run(tmp_path)
    result = estimates.reduce(tmp_path, tmp_path / "tables")
    assert pq.read_table(result["tables"]["estimates"]).num_rows == 2
    assert pq.read_table(result["tables"]["estimate_pairs"]).num_rows == 12
    assert (tmp_path / "tables" / "estimates.png").stat().st_size > 10_000
    line = estimates.format_lines(result)[0]
    assert line.startswith("estimates: UNSETTLED at the 15 s cap (same-site worst 18.0 ms, median 3.0 ms); "
                           "during the run (1 snapshots) median |error|")


def test_a_run_without_snapshots_has_no_estimates(tmp_path):
    (tmp_path / "scenario.yaml").write_text(MINIMAL)
    (tmp_path / "events.jsonl").write_text(json.dumps({"type": "run_start", "time": 1.0}) + "\n")
    traces.convert_run(tmp_path)
    assert estimates.reduce(tmp_path, tmp_path / "tables") is None and estimates.format_lines(None) == []
