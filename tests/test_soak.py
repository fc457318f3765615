"""`make bench-soak`'s pure parts: the scenario it runs and how it judges growth (the run itself is
the 30-minute benchmark)."""

from __future__ import annotations

import yaml

from testbed import topology
from testbed.bench import soak
from testbed.scenario.loader import parse_text


def test_the_soak_scenario_kills_each_zone_broker_in_turn_and_validates():
    data = soak.scenario(30, 300, 60, ["bzone1", "bzone2", "bzone3", "bzone4"])
    kills = [(f["at"], f["kill"], f["restart_after"]) for f in data["faults"]]
    assert kills[:5] == [("300s", "bzone1", "60s"), ("600s", "bzone2", "60s"), ("900s", "bzone3", "60s"),
                         ("1200s", "bzone4", "60s"), ("1500s", "bzone1", "60s")]
    assert len(kills) == 5 and data["duration"] == "1800s"
    text = yaml.safe_dump(data, sort_keys=False)
    built = topology.checked(parse_text(text, "soak.yaml"), "soak.yaml")  # a killed broker is back before its next turn
    assert {"bzone1", "bzone2", "bzone3", "bzone4"} <= set(built.nodes)


def rows(minutes: int, grow_per_min: float) -> list[dict]:
    return [{"elapsed_s": float(s), "memory_mb_by_class": {"clients": 100.0 + grow_per_min * s / 60, "serf": 30.0},
             "open_files_by_class": {"clients": 40}} for s in range(0, 60 * minutes, 10)]


def test_a_class_that_grows_past_its_bound_is_named_and_a_flat_one_holds():
    flat = soak.judge(rows(30, 0.0), "memory_mb_by_class")
    assert flat["clients"]["holds"] and flat["serf"]["holds"] and flat["clients"]["growth"] == 0.0
    leaking = soak.judge(rows(30, 1.0), "memory_mb_by_class")  # 1 MB a minute: ~23 MB over the judged span
    assert not leaking["clients"]["holds"] and leaking["serf"]["holds"]
    assert leaking["clients"]["bound"] == 16.0 and abs(leaking["clients"]["slope_per_hour"] - 60.0) < 0.5
    assert soak.judge(rows(30, 0.0), "open_files_by_class")["clients"]["start"] == 40.0
    assert soak.growth_bound(500.0) == 50.0 and soak.growth_bound(20.0) == 16.0
    # the relays may fill their mapped rings, never more
    assert soak.growth_bound(58.0, ceiling=400.0) == 342.0
    walking = soak.judge(rows(30, 1.0), "memory_mb_by_class", {"clients": 200.0})
    assert walking["clients"]["holds"] and walking["clients"]["bound"] == round(200.0 - walking["clients"]["start"], 1)
