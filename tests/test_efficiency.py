"""bench-efficiency's reduction (pure): CPU per delivery by class over the steady seconds, steal
apart, migration windows and the settle left out; its points and its figure."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.bench_figures import draw
from testbed.systems.pubsub.bench import efficiency
from testbed.systems.pubsub.bench.capacity import loaded


def _run_dir(tmp_path: Path) -> Path:
    """A run of 6 s: 100 deliveries a second, a migration over second 3, the settle at elapsed -1."""
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    t0 = 1_000
    health = [{"t": t0 + s, "elapsed_s": s + 0.1, "cpu_steal_ms": 10.0 * (s == 4), "cpu_idle": 0.5,
               "cpu_by_class": {"relays": 0.02, "clients": 0.01}, "relay_tx": 400, "saturated": s == 5}
              for s in range(-1, 6)]
    (run / "health.jsonl").write_text("\n".join(json.dumps(h) for h in health))
    events = [{"type": "migration_start", "topic": "t", "time": t0 + 3.6}, {"type": "migration_end", "topic": "t",
                                                                               "time": t0 + 3.7}]
    (run / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events))
    rows = [{"topic": "t", "send_time": t0 + s + i / 100 - 0.01, "receive_time": t0 + s + i / 100}
            for s in range(-1, 6) for i in range(100)]
    (run / "traces" / "sub.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return run


def test_cpu_per_delivery_is_the_steady_seconds_cpu_over_their_deliveries(tmp_path):
    found = efficiency.per_delivery(_run_dir(tmp_path))
    # seconds 0..5 of the workload; 0 (its first, elapsed < 1) and 3 and 4 (the migration's window,
    # 0.5 s before to 1 s after) are left out: 1, 2, 5
    assert found["seconds"] == 3 and found["deliveries"] == 300
    assert abs(found["cpu_us_per_delivery"]["relays"] - 200.0) < 1e-6  # 0.02 cores / 100 per s
    assert abs(found["total_us_per_delivery"] - 300.0) < 1e-6
    assert found["steal_ms_per_s"] == 0.0  # the stolen second was in the migration window
    assert found["relay_tx_per_delivery"] == 4.0 and found["saturated_seconds"] == 1


def test_points_cover_the_paper_fractions_and_mmog():
    uav = [p for p in efficiency.points(efficiency.UAV_LOADS, mmog=True) if p.case == "uav-swarm"]
    assert [p.rate for p in uav] == [10, 20, 50, 100, 200] and all(p.count == 8 for p in uav)
    assert {p.case for p in efficiency.points((0.1,), mmog=True)} == {"uav-swarm", "mmog"}
    assert {p.case for p in efficiency.points((0.1,), mmog=False)} == {"uav-swarm"}


def test_a_scenario_copy_carries_the_shaper_and_validates(tmp_path):
    point = efficiency.points((0.05,), mmog=False)[0]
    path = efficiency.scenario_copy(point, "shared", "20s", "5s", tmp_path)
    scenario, _topo = loaded(path)
    assert scenario.emulation.shaper == "shared" and scenario.workload.rate == 10


def test_the_wakeup_cost_is_measured():
    assert 0.5 < efficiency.wakeup_cost_us(0.05) < 5000


def test_the_figure_stacks_classes_and_marks_the_target(tmp_path):
    found = efficiency.per_delivery(_run_dir(tmp_path))
    rows = [{"case": "uav-swarm", "shaper": s, "offered_per_s": 1120.0, **found} for s in ("delayline", "shared")]
    drawn = draw("efficiency", {"rows": rows, "paper": {"uav-swarm": 22400.0}, "cpus": 2, "target_us": 70.0},
                 tmp_path)
    assert Path(drawn[0]["path"]).exists() and drawn[0]["ylabel"] == "CPU-us per delivered message"
    assert drawn[0]["series"] == ["clients", "relays", "steal"]
