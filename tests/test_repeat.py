"""bench-repeat's judgement of one run (pure: a recorded run folder)."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.systems.pubsub.bench import repeat


def _run(tmp_path: Path, saturated: int, failed: int, delivered: int, machine: int = 0) -> Path:
    run = tmp_path / f"uav-{saturated}{failed}{delivered}{machine}"
    run.mkdir()
    harness = {"seconds": 100, "saturated_seconds": saturated, "machine_seconds": machine,
               "validity": f"valid {100 - saturated} of 100 s"}
    (run / "summary.json").write_text(json.dumps({"harness": harness, "expected_deliveries": 10_000,
                                                  "delivered": delivered}))
    ends = [{"type": "migration_end", "ok": i >= failed, "migration_s": 0.6} for i in range(3)]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ends))
    return run


def test_a_run_passes_only_valid_with_every_migration_ok_and_all_but_a_thousandth_delivered(tmp_path):
    good = repeat.judge(_run(tmp_path, saturated=5, failed=0, delivered=9_990))
    assert good["passed"] and good["migration_s"] == [0.6, 0.6, 0.6] and good["validity"] == "valid 95 of 100 s"
    assert "valid 94.0 %" in repeat.judge(_run(tmp_path, saturated=6, failed=0, delivered=10_000))["why"]
    assert repeat.judge(_run(tmp_path, saturated=0, failed=1, delivered=10_000))["why"] == "1 migrations failed"
    assert "delivered 99.890 %" in repeat.judge(_run(tmp_path, saturated=0, failed=0, delivered=9_989))["why"]
    assert not repeat.judge(None)["passed"] and not repeat.judge(tmp_path / "missing")["passed"]


def test_a_run_short_only_by_the_machine_s_seconds_is_not_judged_and_never_passes(tmp_path):
    """6 bad seconds, 2 of them the hypervisor's: 96 % without them, so not judged (run it again);
    with only 1 of them the machine's it is still 95 % short by its own load: failed."""
    unjudged = repeat.judge(_run(tmp_path, saturated=6, failed=0, delivered=10_000, machine=2))
    assert not unjudged["passed"] and unjudged["verdict"] == "not judged" and "96.0 % without them" in unjudged["why"]
    failed = repeat.judge(_run(tmp_path, saturated=7, failed=0, delivered=10_000, machine=1))
    assert not failed["passed"] and failed["verdict"] == "failed"
    both = repeat.judge(_run(tmp_path, saturated=6, failed=1, delivered=10_000, machine=6))
    assert both["verdict"] == "failed" and "1 migrations failed" in both["why"]
    assert repeat.judge(_run(tmp_path, saturated=3, failed=0, delivered=10_000, machine=3))["verdict"] == "passed"
