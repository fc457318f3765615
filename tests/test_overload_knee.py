"""The knee rule of `make bench-overload` (testbed/bench/overload.py) on synthetic sweeps: pure logic, no root."""

import pytest

from testbed.bench.overload import SHAPE, analyse, find_knee, hist_quantile, limited_by, recommend, round_down


def point(offered, p95, achieved=None):
    return {"offered": offered, "achieved": offered if achieved is None else achieved, "p95_ms": p95}


def hockey_stick(knee_at, base=3.0):
    """Flat p95 up to `knee_at`, then latency grows fast: the shape the paper describes."""
    rates = [10e3, 20e3, 50e3, 100e3, 200e3, 400e3, 800e3]
    return [point(r, base * (1.0 if r <= knee_at else 1 + r / knee_at * 3)) for r in rates]


def test_knee_is_the_last_healthy_point_before_latency_rises():
    knee = find_knee(hockey_stick(200e3))
    assert knee["knee"] == 200e3
    assert knee["reached"]
    assert knee["baseline_p95_ms"] == 3.0
    assert knee["limit_p95_ms"] == 6.0
    assert knee["first_bad"]["offered"] == 400e3
    assert "p95" in knee["reason"]


def test_order_of_the_input_does_not_matter():
    assert find_knee(list(reversed(hockey_stick(100e3))))["knee"] == 100e3


def test_a_rise_within_twice_the_baseline_is_not_a_knee():
    series = [point(10e3, 3.0), point(50e3, 4.0), point(100e3, 5.9), point(200e3, 6.1)]
    assert find_knee(series)["knee"] == 100e3


def test_baseline_is_the_lowest_p95_of_the_first_points():
    # A noisy first point must not inflate the baseline: the second one sets it.
    series = [point(10e3, 5.0), point(20e3, 3.0), point(40e3, 5.5), point(80e3, 6.5)]
    knee = find_knee(series)
    assert knee["baseline_p95_ms"] == 3.0
    assert knee["knee"] == 40e3


def test_small_baselines_need_a_real_increase():
    # 0.2 ms -> 0.9 ms is more than 2x but is scheduling jitter: the 1 ms floor keeps it healthy.
    series = [point(10e3, 0.2), point(50e3, 0.9), point(100e3, 1.1), point(200e3, 1.5)]
    knee = find_knee(series)
    assert knee["limit_p95_ms"] == pytest.approx(1.2)
    assert knee["knee"] == 100e3


def test_falling_behind_the_offered_rate_is_a_knee_even_with_flat_latency():
    series = [point(10e3, 3.0), point(100e3, 3.2), point(200e3, 3.3, achieved=180e3)]
    knee = find_knee(series)
    assert knee["knee"] == 100e3
    assert "achieved" in knee["reason"] and "p95" not in knee["reason"]


def test_recovery_after_a_bad_point_does_not_move_the_knee():
    series = [point(10e3, 3.0), point(20e3, 3.1), point(40e3, 9.0), point(80e3, 3.5)]
    assert find_knee(series)["knee"] == 20e3


def test_knee_is_the_offered_rate_the_broker_delivered():
    series = [point(10e3, 3.0, achieved=10.1e3), point(20e3, 3.0, achieved=19.8e3), point(40e3, 30.0)]
    knee = find_knee(series)
    assert knee["knee"] == 20e3 and knee["knee_achieved"] == 19.8e3


def test_sustained_max_is_the_throughput_ceiling_whatever_the_latency():
    series = [point(10e3, 3.0), point(20e3, 30.0), point(40e3, 300.0), point(80e3, 900.0, achieved=50e3)]
    knee = find_knee(series)
    assert knee["knee"] == 10e3 and knee["sustained_max"] == 40e3


def test_no_deterioration_gives_a_lower_bound():
    knee = find_knee([point(r, 3.0) for r in (10e3, 20e3, 40e3)])
    assert knee["knee"] == 40e3 and not knee["reached"] and knee["first_bad"] is None


def test_deteriorated_from_the_start_and_empty_series():
    assert find_knee([point(10e3, 3.0, achieved=5e3), point(20e3, 3.0)])["knee"] is None
    assert find_knee([])["knee"] is None


@pytest.mark.parametrize("value, expected", [(19_992, 19_000), (1_500_000, 1_500_000), (1_549_999, 1_500_000),
                                             (437_512, 430_000), (999, 990), (100_000, 100_000), (0, 0)])
def test_round_down_to_two_significant_figures(value, expected):
    assert round_down(value) == pytest.approx(expected)


def test_recommendation_is_the_lowest_knee_rounded_down():
    knees = {"emulated 1000B run 1": find_knee(hockey_stick(200e3)),
             "emulated 100B run 1": find_knee(hockey_stick(400e3)),
             "emulated 1000B run 2": find_knee([point(r, 3.0) for r in (10e3, 50e3, 187_654)] + [point(400e3, 30.0)])}
    rec = recommend(knees)
    assert rec["knee"] == 187_654 and rec["from"] == "emulated 1000B run 2"
    assert rec["rth_out"] == 180_000
    assert not rec["lower_bound"]
    assert "rounded down" in rec["rule"]


def test_a_series_that_never_deteriorated_only_bounds_the_recommendation():
    rec = recommend({"direct 100B run 1": find_knee([point(r, 0.2) for r in (10e3, 1e6, 2e6)])})
    assert rec["rth_out"] == 2_000_000 and rec["lower_bound"]


def test_recommendation_without_any_knee():
    assert recommend({"x": find_knee([])})["rth_out"] is None


def test_histogram_quantiles():
    growth = 1.01
    hist = {100: 50, 200: 45, 300: 5}
    assert hist_quantile(hist, 0.5, growth) == pytest.approx(growth ** 100.5 / 1e3)
    assert hist_quantile(hist, 0.95, growth) == pytest.approx(growth ** 200.5 / 1e3)
    assert hist_quantile(hist, 0.99, growth) == pytest.approx(growth ** 300.5 / 1e3)
    assert hist_quantile({}, 0.5, growth) is None


def row(**cpu):
    base = {"broker_cpu": 0.3, "gen_cpu": 0.2, "gen_cpu_max": 0.1, "relay_cpu": 0.4, "relay_cpu_max": 0.2,
            "machine_busy": 1.0}
    return {**base, **cpu}


def test_limited_by_names_the_saturated_resource():
    assert limited_by(row(relay_cpu_max=0.95), 2).startswith("shaper")
    assert limited_by(row(gen_cpu_max=0.97), 2).startswith("load generator")
    busy = limited_by(row(relay_cpu=1.1, machine_busy=1.95), 2)
    assert busy.startswith("CPU") and "largest share taken by delay-line relays" in busy
    shared = limited_by(row(machine_busy=1.9, foreign_cpu=0.9), 2)
    assert "largest share taken by other processes" in shared
    assert limited_by(row(), 2).startswith("no resource saturated")


def test_analyse_leaves_out_points_disturbed_by_other_processes():
    def measured(offered, p95, foreign=0.0, size=1000, rep=1):
        return {**row(foreign_cpu=foreign), **point(offered, p95), "path": "emulated", "size": size,
                "topics": SHAPE[0], "consumers": SHAPE[1], "repeat": rep}

    rows = [measured(5e3, 3.0), measured(10e3, 3.1), measured(20e3, 9.0, foreign=0.6), measured(30e3, 3.4),
            measured(40e3, 12.0), measured(5e3, 3.0, size=100), measured(10e3, 3.0, size=100),
            measured(40e3, 3.2, size=100), measured(80e3, 30.0, size=100)]
    out = analyse(rows, 2)
    knee = out["knees"]["emulated 1000B run 1"]
    assert knee["knee"] == 30e3 and knee["excluded"] == [20e3]
    assert out["knees"]["emulated 100B run 1"]["knee"] == 40e3
    assert out["recommendation"]["emulated"]["rth_out"] == 30_000


def test_analyse_gives_no_knee_without_an_undisturbed_low_load_point():
    measured = ((10e3, 3.0, 0.5), (20e3, 3.0, 0.4), (40e3, 3.0, 0.0))  # offered, p95, other processes' cores
    rows = [{**row(foreign_cpu=f), **point(r, p95), "path": "direct", "size": 100, "topics": SHAPE[0],
             "consumers": SHAPE[1], "repeat": 1} for r, p95, f in measured]
    knee = analyse(rows, 2)["knees"]["direct 100B run 1"]
    assert knee["knee"] is None and "disturbed" in knee["reason"]
