"""One verdict: a run's validity reads the same in the progress line, the end screen, summary.json,
the view's badge and the figures' titles, because each takes it from `health.validity` over the same
judged seconds (a run with saturated seconds, recorded: pure, no live run)."""

from __future__ import annotations

import json
from pathlib import Path

from analysis import traces
from testbed import health
from testbed.experiment import _health_note
from testbed.view.state import RunState

T0 = 1_000


def _rows() -> list[dict]:
    """60 judged seconds, 13 of them saturated in four spells (early, and the last of them late)."""
    bad = {4, 5, 6, 7, 9, 10, 23, 24, 31, 32, 57, 58, 59}
    return [{"t": T0 + s, "elapsed_s": float(s), "cpu_idle": 0.3,
             "causes": ["publishers"] if s in bad else [], "publisher_late_max_ms": 9.0 if s in bad else 0.1}
            for s in range(60)]


def _recorded_run(tmp_path: Path, rows: list[dict]) -> Path:
    run = tmp_path / "uav-smoke-abc123"
    run.mkdir()
    (run / "health.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    verdict = health.verdict(rows)
    (run / "run.json").write_text(json.dumps({"run_id": "abc123", "harness": verdict, "complete": True}))
    (run / "summary.json").write_text(json.dumps({"harness": verdict}))
    return run


class Monitor:  # what the progress line reads of the health monitor
    def __init__(self, rows):
        self.rows = rows


def test_every_place_shows_the_same_validity_of_a_run_with_saturated_seconds(tmp_path):
    rows = _rows()
    run = _recorded_run(tmp_path, rows)
    expected = "valid 47 of 60 s"
    summary = json.loads((run / "summary.json").read_text())["harness"]
    assert summary["validity"] == expected and summary["valid"] is False
    assert health.describe(summary).startswith(f"harness: {expected}; SATURATED 13 s")  # the end screen
    # the progress line is cumulative: after t=40 s a later clean second does not hide t=4-7 s
    assert _health_note(Monitor(rows[:41])) == ", harness valid 31 of 41 s so far"
    assert _health_note(Monitor(rows)) == f", harness {expected} so far (now: publishers)"
    state = RunState(run)
    state.refresh()
    guard = state.store.records["guard"]
    assert guard[str(T0 + 59)][6] == expected and guard[str(T0 + 40)][6] == "valid 31 of 41 s"
    assert guard[str(T0 + 40)][1] == "ok"  # that second itself was within budget
    assert traces.harness_note(traces.run_metadata(run)).startswith(f"harness {expected}")  # the figures' note


def test_a_valid_run_reads_valid_everywhere(tmp_path):
    rows = [dict(r, causes=[]) for r in _rows()]
    run = _recorded_run(tmp_path, rows)
    state = RunState(run)
    state.refresh()
    assert state.store.records["guard"][str(T0 + 59)][6] == "valid 60 of 60 s"
    assert traces.harness_note(traces.run_metadata(run)) == "harness valid 60 of 60 s"
    assert health.describe(health.verdict(rows)).startswith("harness: valid 60 of 60 s (within budget")
