"""bench-tracking's replay, claims and figures (seed 002): pure data in, verdicts and PNGs out."""

from __future__ import annotations

from testbed.systems.pubsub.bench import tracking_figures
from testbed.systems.pubsub.bench.tracking import TABLE_2, Case, replay


def test_the_replay_reproduces_table_2s_full_buffer_column_and_the_storage_mechanism():
    """At the paper's 5,000 msg/s, 64 Kbit filters of 2,521 keys fill in 0.5 s (stored full within
    T_p = 1 s), 1 Mbit ones of 38,836 keys do not; every subscriber's filter is stored partly full
    each T_p, so T_p = 1 s stores far more per message than T_p = 8 s."""
    small = replay(Case("bloom", "10K", "99.999", 1.0), seconds=6, window_from=2)
    big = replay(Case("bloom", "135K", "99.999", 1.0), seconds=6, window_from=2)
    big8 = replay(Case("bloom", "135K", "99.999", 8.0), seconds=20, window_from=4)
    log = replay(Case("log", "10K", tp=1.0), seconds=6, window_from=2)
    assert small["stores_full"] and not big["stores_full"]
    assert big["bytes_per_message"] > 3 * big8["bytes_per_message"]
    assert small["gzip_ratio_full"] > 0.9 > 0.6 > log["gzip_ratio"]  # full filters do not compress, logs do
    assert 35 < log["bytes_per_message"] < 45  # ~2 records of 20 B per message: publisher and ~1 delivery
    assert len(TABLE_2) == 21 and len({c.label for c in TABLE_2}) == 21


def _result(bf_delta: float, log_delta: float, fp: int = 10, fn: int = 0) -> dict:
    runs = []
    for round_no in (1, 2):
        for label, delta in (("NULL", 0.0), ("BF 99.999% 10K Tp=1", bf_delta), ("ASYNC 10K Tp=1", log_delta)):
            runs.append({"label": label, "round": round_no, "ok": True, "valid": True, "messages": 1000,
                         "mean_ms": 3.0 + delta + 0.01 * round_no, "p99_ms": 5.0 + delta, "tracker_cpu_s": 1.0,
                         "bytes_per_message": 100.0, "forces": 10, "gzip_ratio": 0.5})
    replay_rows = [{"label": "BF 99.999% 135K Tp=1", "strategy": "bloom", "bytes_per_message": 10_000.0,
                    "gzip_bytes_per_message": 60.0, "gzip_ratio": 0.006, "gzip_ratio_full": None, "stores_full": False,
                    "stores_per_s": 400.0, "recorder_us_per_message": 12.0},
                   {"label": "BF 99.999% 135K Tp=8", "strategy": "bloom", "bytes_per_message": 1_700.0,
                    "gzip_bytes_per_message": 40.0, "gzip_ratio": 0.02, "gzip_ratio_full": 0.95, "stores_full": True,
                    "stores_per_s": 60.0, "recorder_us_per_message": 11.0},
                   {"label": "ASYNC 10K Tp=1", "strategy": "log", "bytes_per_message": 40.0,
                    "gzip_bytes_per_message": 11.0, "gzip_ratio": 0.27, "gzip_ratio_full": 0.27, "stores_full": True,
                    "stores_per_s": 20.0, "recorder_us_per_message": 2.0}]
    accuracy = {"ok": True, "messages": 9000, "false_negatives": fn, "false_positives": fp, "negative_tests": 50_000,
                "expected_false_positives": 10.0,
                "calibration": [{"efpp_from": 0.0, "efpp_to": 1e-8, "tests": 30_000, "false_positives": 0,
                                 "expected": 1e-5},
                                {"efpp_from": 1e-3, "efpp_to": 3e-3, "tests": 20_000, "false_positives": fp,
                                 "expected": 10.0}]}
    return {"live": {"rate_msgs_per_s": 300, "runs": runs}, "paper_load": {"rate": 5000},
            "replay": {"configs": replay_rows, "paper_full": {"BF 99.999% 135K Tp=1": False,
                                                              "BF 99.999% 135K Tp=8": True}},
            "accuracy": accuracy}


def _verdicts(result: dict) -> dict:
    return {r["claim"].split(":")[0]: r["holds"] for r in tracking_figures.rules(result)}


def test_each_claim_can_hold_and_can_fail():
    assert _verdicts(_result(bf_delta=0.02, log_delta=0.8)) == {"Fig. 3": True, "Fig. 4-5": True, "Fig. 4": True,
                                                                 "Table 2": True, "traceback": True}
    failing = _verdicts(_result(bf_delta=0.02, log_delta=0.03, fp=40, fn=1))
    assert failing["Fig. 3"] is False and failing["traceback"] is False
    assert _verdicts(_result(bf_delta=0.02, log_delta=-0.8))["Fig. 3"] is False  # a log faster than NULL is close
    result = _result(0.0, 0.5)
    for run in result["live"]["runs"]:
        run["valid"] = run["label"] != "NULL"  # no NULL run the harness held: nothing to compare with
    assert _verdicts(result)["Fig. 3"] is None


def test_figures_table_and_headline(tmp_path):
    result = _result(0.02, 0.8)
    made = tracking_figures.draw(result, tmp_path, "tracking")
    assert len(made) == 4 and all((tmp_path / f"tracking-{n}.png").stat().st_size > 5000
                                   for n in ("fig3", "fig4", "fig5", "fp"))
    table = tracking_figures.markdown_table(result)
    assert any(line.startswith("| ASYNC 10K Tp=1 | 2/2 | 3.81") for line in table)
    head = tracking_figures.headline(result, "test")
    assert head.agrees is True and "Fig. 3 holds" in head.ours
