"""bench-capacity's reduction and knee rule on generated rows (pure; no runs, no timing)."""

import pytest

from testbed.systems.pubsub.bench import capacity
from testbed.systems.pubsub.bench.capacity import Point


def row(offered, p50=0.5, p99=2.0, saturated=False, delivered=None, axis="rate", case="uav-swarm", cpu=None):
    point = Point(case, axis, 8, int(offered))
    return {**capacity.asdict(point), "name": point.name, "offered_per_s": offered,
            "delivered_per_s": offered if delivered is None else delivered, "overhead_p50_ms": p50,
            "overhead_p99_ms": p99, "saturated": saturated, "saturated_intervals": [],
            "cpu_by_class": cpu or {"relays": offered / 1e4}}


def test_knee_is_the_last_healthy_point_before_the_first_failure():
    rows = [row(200), row(1000), row(3000, p99=6.0), row(6000)]  # 6000 looks healthy again: noise
    knee = capacity.series_knee(rows)
    assert knee["deliveries_per_s"] == 1000 and knee["reached"]
    assert "overhead p99 6.00 > 5 ms" in knee["reason"]


@pytest.mark.parametrize("bad", [dict(p50=2.5), dict(saturated=True), dict(delivered=800), dict(p50=None, p99=None)])
def test_each_part_of_the_rule_fails_a_point(bad):
    assert capacity.unhealthy(row(1000, **bad))
    assert not capacity.unhealthy(row(1000, p50=2.0, p99=5.0, delivered=900))


def test_a_run_that_stopped_early_fails_both_rules_whatever_it_measured():
    stopped = {**row(1000), "steady_overhead_p50_ms": 0.5, "steady_overhead_p99_ms": 2.0, "steady_saturated_share": 0.0,
               "stopped": "the run's timeline did not advance for 120 s"}
    for rule in ("strict", "steady"):
        assert capacity.unhealthy(stopped, rule)[0].startswith("the run stopped early: the run's timeline")
        assert not capacity.unhealthy({**stopped, "stopped": None}, rule)


def test_a_series_is_over_after_two_points_in_a_row_past_the_knee_by_both_rules():
    steady_ok = dict(steady_overhead_p50_ms=0.5, steady_overhead_p99_ms=3.0, steady_saturated_share=0.0)
    bad, steady_only = row(3000, p99=9.0), {**row(3000, saturated=True), **steady_ok}
    assert not capacity.series_over([row(1000), bad])
    assert capacity.series_over([row(1000), bad, row(6000, p99=40.0)])
    assert not capacity.series_over([bad, row(6000), row(9000, p99=40.0)])  # not in a row
    assert not capacity.series_over([bad, steady_only])  # the steady rule may still find its knee further on


def test_no_failure_is_a_lower_bound_and_no_healthy_point_is_none():
    knee = capacity.series_knee([row(400), row(200)])
    assert knee["deliveries_per_s"] == 400 and not knee["reached"]
    assert capacity.series_knee([row(200, saturated=True)])["deliveries_per_s"] is None


def test_case_knee_is_the_lowest_axis_and_a_ratio_of_the_paper():
    rows = [row(1120), row(2240), row(5600, p50=9.0),
            row(2800, axis="swarms", cpu={"clients": 1.2}), row(5600, axis="swarms", saturated=True)]
    knees = capacity.case_knees(rows, {"uav-swarm": 22_400.0})
    uav = knees["uav-swarm"]
    assert uav["deliveries_per_s"] == 2240 and uav["ratio_of_paper"] == pytest.approx(0.1)
    assert uav["series"]["swarms"]["deliveries_per_s"] == 2800
    assert uav["cpu_by_class_at_knee"] == {"relays": 0.224} and uav["guard_recorded"]


def test_point_row_reads_the_guard_and_falls_back_to_health_rows():
    point = Point("uav-swarm", "rate", 8, 10)
    summary = {"delivered": 22_400, "harness": {"valid": False, "seconds": 20, "publisher_late_p99_ms": 40.0,
                                                "saturated": [{"from_s": 3, "to_s": 9, "cause": "publishers late"}],
                                                "cpu_by_class": {"relays": 0.9, "clients": 0.7}}}
    r = capacity.point_row(point, 1120.0, summary, [], [0.1 * i for i in range(101)], 30.0)
    assert r["saturated"] and r["delivered_per_s"] == 1120 and r["publisher_late_p99_ms"] == 40.0
    assert r["overhead_p50_ms"] == pytest.approx(5.0) and r["overhead_p99_ms"] == pytest.approx(9.9)
    assert "guard: saturated (publishers late)" in capacity.unhealthy(r)
    health = [{"saturated": False, "cpu_by_class": {"relays": 0.5}}, {"saturated": False, "cpu_by_class": {"relays": 1.5}}]
    r = capacity.point_row(point, 1120.0, {"delivered": 2240}, health, [1.0], 2.0)
    assert r["saturated"] is False and r["cpu_by_class"] == {"relays": 1.0} and r["delivered_per_s"] == 1120
    r = capacity.point_row(point, 1120.0, {"delivered": 2240}, [], [1.0], 2.0)
    assert r["saturated"] is None  # a run without the guard: not recorded, not clean


def test_a_point_whose_only_bad_seconds_are_the_machines_is_not_past_the_knee():
    """Seconds in which the VM was stopped as long as the harness was late (steal, or every core's stall
    probe late at once) are not the load's: counted apart, not a failure of the point; one second of
    the load's among them still is."""
    point = Point("uav-swarm", "swarms", 8, 10)
    stalled = {"from_s": 3, "to_s": 4, "by_machine": True, "cause": "the hypervisor held this VM's cores"}
    harness = {"valid": False, "seconds": 20, "saturated_seconds": 1, "machine_seconds": 1, "saturated": [stalled]}
    r = capacity.point_row(point, 1120.0, {"delivered": 22_400, "harness": harness}, [], [1.0] * 100, 20.0)
    assert (r["saturated"], r["machine_seconds"], r["saturated_intervals"]) == (False, 1, [])
    assert capacity.unhealthy(r) == [] and capacity._saturated(r) == "no (+1 s the machine's)"
    ours = {"from_s": 9, "to_s": 10, "by_machine": False, "cause": "publishers late by up to 9 ms"}
    harness = {**harness, "saturated_seconds": 2, "saturated": [stalled, ours]}
    r = capacity.point_row(point, 1120.0, {"delivered": 22_400, "harness": harness}, [], [1.0] * 100, 20.0)
    assert r["saturated"] and capacity.unhealthy(r) == ["guard: saturated (publishers late by up to 9 ms)"]
    health = [{"t": 1, "causes": ["relays"], "saturated": True, "relay_late_max_ms": 9.0, "machine_stall_ms": 9.0}]
    assert capacity.point_row(point, 1120.0, {"delivered": 2240}, health, [1.0], 2.0)["saturated"] is False


def test_configured_path_follows_relinks(tmp_path):
    path = capacity.scenario_copy(Point("uav-swarm", "rate", 2, 20), "20s", "10s", tmp_path)
    scenario, topo = capacity.loaded(path)
    assert scenario.workload.rate == 20 and scenario.duration == 20
    swarm = topo.nodes["swarm1"]
    other = next(s for s in topo.sites if s.startswith("zone") and s != swarm.site)
    timelines = capacity.site_timelines([{"type": "relink", "time": 100.0, "node": "swarm1", "to_site": other}])
    delay = capacity.PathDelay(topo, timelines)
    broker = f"b{swarm.site}"
    base = {"producer": "swarm1-u1", "consumer": "swarm1-u2", "broker": broker, "producer_site": swarm.site,
            "consumer_site": swarm.site}
    # 8 ms access + 0.5 ms broker link, in and out: the configured 17 ms
    assert delay.of({**base, "send_time": 50.0, "receive_time": 50.02}) == pytest.approx(0.017)
    # after the relink the swarm is in another zone: + 15 ms each way to its old broker
    assert delay.of({**base, "send_time": 150.0, "receive_time": 150.05}) == pytest.approx(0.047)
    rows = [{**base, "send_time": 50.0, "receive_time": 50.018}, {**base, "send_time": 60.0, "receive_time": 60.027},
            {**base, "broker": "nobody", "send_time": 1, "receive_time": 2}]
    values, steady, skipped = capacity.overheads_ms(rows, delay, windows=[(59.5, 61.0)])
    assert values == [pytest.approx(1.0), pytest.approx(10.0)] and steady == [pytest.approx(1.0)] and skipped == 1


def test_the_steady_rule_leaves_migration_windows_and_isolated_seconds_out():
    events = [{"type": "migration_start", "time": 10.0, "topic": "a"}, {"type": "migration_end", "time": 10.4, "topic": "a"},
              {"type": "grace_end", "time": 12.0, "topic": "a"}]
    windows = capacity.migration_windows(events)
    assert windows[-1] == (9.5, 13.0)
    health = [{"t": float(t), "cpu_idle": 0.0 if t in (10, 11, 30) else 0.5} for t in range(0, 60)]
    assert capacity.steady_saturated_share(health, windows) == pytest.approx(1 / 56)  # seconds 9-12 overlap
    good = row(1000)
    good.update(steady_overhead_p50_ms=0.5, steady_overhead_p99_ms=3.0, steady_saturated_share=0.02, saturated=True)
    assert capacity.unhealthy(good) and not capacity.unhealthy(good, "steady")
    good["steady_saturated_share"] = 0.2
    assert "outside migrations saturated" in capacity.unhealthy(good, "steady")[0]


def test_mmog_producers_are_placed_by_their_server_s_site(tmp_path):
    path = capacity.scenario_copy(Point("mmog", "rate", 1, 3), "20s", "10s", tmp_path)
    _, topo = capacity.loaded(path)
    delay = capacity.PathDelay(topo, {})
    r = {"producer": "a3", "consumer": "gs2", "broker": "bnyc", "producer_site": "nyc",
         "consumer_site": topo.nodes["gs2"].site, "send_time": 1.0, "receive_time": 1.1}
    expected = 0.0045 + 2 * 0.0005 + topo.site_one_way("nyc", r["consumer_site"]) + 0.0045
    assert delay.of(r) == pytest.approx(expected)


def test_analysis_and_figure_from_generated_rows(tmp_path):
    from analysis.bench_figures import draw

    data = {"rows": [row(1120), row(2240, p99=7.0), row(830, case="mmog")], "paper": {"uav-swarm": 22_400.0,
            "mmog": 87_300.0}, "references": {"nats": {"knee_msgs_per_s": 4e5}, "delayline": {"pkts_per_s": 6e4}},
            "cpus": 2, "how": {"knee_rule": {"overhead_p50_ms": 2.0, "overhead_p99_ms": 5.0}}}
    data.update(capacity.analyse(data))
    assert data["knee"]["uav-swarm"]["deliveries_per_s"] == 1120 and data["knee"]["mmog"]["reached"] is False
    assert (data["nats_msgs_per_s"], data["delayline_pkts_per_s"]) == (4e5, 6e4)  # what testbed.load reads
    (drawn,) = draw("capacity", data, tmp_path)
    assert drawn["path"] == str(tmp_path / "capacity.png") and (tmp_path / "capacity.png").stat().st_size > 10_000
    assert "(ms)" in drawn["ylabel"] and drawn["series"]
    (compiled,) = draw("capacity-compiled", data, tmp_path)  # the sweep through the compiled engine
    assert compiled["path"] == str(tmp_path / "capacity-compiled.png")


def test_set_options_reach_every_point_and_refuse_what_the_sweep_sets(tmp_path):
    """`--set KEY=VALUE` lands in each point's scenario (values read as YAML), and the loader judges it
    there: a mistyped key or value is refused with the copy's file:line before any point runs; a key
    the sweep sets itself, or a malformed option, is refused at once."""
    from testbed.scenario.loader import ScenarioError

    settings = capacity.parse_settings(["control.infeasible_min_gain=5ms", "control.overload.cpu=0.9"])
    assert settings == {"control.infeasible_min_gain": "5ms", "control.overload.cpu": 0.9}
    scenario, _ = capacity.loaded(capacity.scenario_copy(Point("mmog", "rate", 2, 3), "20s", "10s", tmp_path,
                                                         settings=settings))
    assert scenario.control.infeasible_min_gain == pytest.approx(0.005) and scenario.workload.rate == 3
    for bad in (["workload.rate=5"], ["nodes.clients=1"], ["control.settle=1s"], ["gain"], ["control..x=1"]):
        with pytest.raises(ValueError, match="--set"):
            capacity.parse_settings(bad)
    with pytest.raises(ScenarioError, match=r"\.yaml:\d+: control.bogus"):
        capacity.loaded(capacity.scenario_copy(Point("mmog", "rate", 2, 3), "20s", "10s", tmp_path,
                                               settings={"control.bogus": 1}))
    assert capacity.main(["--set", "workload.rate=3"]) == 2
