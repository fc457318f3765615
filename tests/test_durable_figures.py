"""testbed.systems.pubsub.bench.durable_figures: each rule can fail, the table and the figures come from the JSON alone,
and every bench experiment is a valid scenario."""

from __future__ import annotations

import copy
from pathlib import Path

from testbed.systems.pubsub.bench import durable_figures
from testbed import topology
from testbed.systems.pubsub.bench import durable as bench
from testbed.bench.runs import variant_file
from testbed.scenario.loader import load


def _run(ack50: float | None, lost: int | None = 0, moved: int = 2, mb: float = 10.0) -> dict:
    q = {f"q{p:02d}_ms": (None if ack50 is None else ack50 * f) for p, f in
         ((5, 0.8), (25, 0.9), (50, 1.0), (75, 1.1), (95, 1.5), (99, 2.0))}
    e2e = {k: (v or 20.0) + 10.0 for k, v in q.items()}
    durable = None if lost is None else {"acknowledged": 100, "owed": 200, "delivered": 200 - lost, "lost": lost,
                                         "lost_first": [], "resent": 3, "duplicates": 2, "unacked": 0}
    return {"ok": True, "valid": True, "saturated_seconds": 0, "migrations": 3, "published": 100, "delivered": 200,
            "expected": 200, "faults": ["broker_killed"], "durable": durable, "ack": q, "e2e": e2e, "storage_mb": mb,
            "streams_moved": moved, "storage_cores": 0.05}


def _result() -> dict:
    return {"experiments": {"latency-none": _run(None, None), "latency-local-r1": _run(12.0, mb=10.0),
                            "latency-local-r3": _run(16.0, mb=30.0), "latency-cloud-r1": _run(95.0),
                            "latency-cloud-r3": _run(100.0), "loss-none": _run(None, None),
                            "loss-r3-enhanced": _run(16.0), "loss-r3-baseline": _run(16.0)}}


def test_every_rule_holds_on_a_good_result_and_each_can_fail():
    good = _result()
    verdicts = durable_figures.rules(good)
    assert len(verdicts) == 4 and all(v["holds"] for v in verdicts), verdicts
    breakers = {
        "remote round trip": lambda r: r["experiments"]["latency-cloud-r3"]["ack"].update(q50_ms=40.0),
        "lose no acknowledged": lambda r: r["experiments"]["loss-r3-baseline"]["durable"].update(lost=1),
        "moves with": lambda r: r["experiments"]["loss-r3-enhanced"].update(streams_moved=0),
        "cost the storage network": lambda r: r["experiments"]["latency-local-r3"].update(storage_mb=12.0),
    }
    for words, breaker in breakers.items():
        broken = copy.deepcopy(good)
        breaker(broken)
        failed = [v for v in durable_figures.rules(broken) if not v["holds"]]
        assert len(failed) == 1 and words in failed[0]["claim"], (words, failed)
    assert durable_figures.headline(good, "smoke").agrees


def test_the_table_and_figures_come_from_the_json(tmp_path):
    result = _result()
    table = "\n".join(durable_figures.markdown_table(result))
    assert "| latency-local-r3 | valid | 16.0 |" in table and "| loss-r3-baseline | valid | 3 | broker_killed |" in table
    assert "| loss-none | valid | 3 | broker_killed | - | - | 200 | - | - | - | 0 of 200 |" in table
    drawn = durable_figures.draw(result, tmp_path)
    assert [Path(p).name for p in drawn] == ["durable-latency.png", "durable-cost.png"]
    assert all(Path(p).stat().st_size > 10_000 for p in drawn)


def test_every_experiment_is_a_valid_scenario(tmp_path):
    found = bench.experiments()
    assert set(durable_figures.LATENCY + durable_figures.LOSS) == set(found)
    for name, (base, changes) in found.items():
        path = variant_file(base, f"durable-{name}", changes, tmp_path)
        built = topology.checked(load(path), str(path))
        assert len(built.placed("storage")) == 3 * len(built.sites)  # three racks at every zone and the cloud
