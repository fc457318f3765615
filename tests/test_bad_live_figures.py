"""BAD's live sweep in `make paper`, pure: the latency-beside-load note and figure (testbed.systems.bad.bench.live_figures),
the thresholds read back from a run's scenario.yaml (beta drawn on the load figure), and the paper's
BAD steps, figures and index note on hand-made JSON."""

import json

import pytest

from testbed.systems.bad.bench import live_figures as bad_live, sweep as bad_sweep
from testbed import paper, paper_entries, paper_figures, paper_steps


def run(cov_first, cov_last, p50, p95, migrations=0, shuffles=0, saturated=0, run_dir=None):
    return {"ok": True, "run": run_dir, "saturated_seconds": saturated, "seconds": 60, "valid": saturated == 0,
            "classes": {"alerts": {"p50_ms": p50 - 1, "p95_ms": p95 - 2}, "reports": {"p50_ms": p50, "p95_ms": p95}},
            "bad": {"cov_first": cov_first, "cov_last": cov_last, "max_first": 2e5, "max_last": 1e5,
                    "migrations": migrations, "shuffles": shuffles, "reattach_p50_s": 0.064 if migrations else None}}


def sweep(**changes):
    schemes = {"rr+none": run(0.05, 0.05, 30.0, 35.0), "nr+none": run(0.9, 0.9, 26.0, 31.0),
               "nr+ldm": run(0.9, 0.13, 28.0, 33.0, 28), "nr+ldm+gsh": run(0.9, 0.005, 30.5, 34.5, 68, 1)}
    schemes.update(changes)
    return {"scenario": "scenarios/bad-smoke.yaml", "schemes": schemes, "elapsed_s": 300.0}


def test_note_puts_each_schemes_latency_beside_its_balance():
    out = bad_live.latency_vs_load(bad_sweep.rows(sweep()))
    assert [r["scheme"] for r in out["rows"]] == ["rr+none", "nr+none", "nr+ldm", "nr+ldm+gsh"]
    assert out["rows"][2] == {"scheme": "nr+ldm", "cov_last": 0.13, "p50_ms": 28.0, "p95_ms": 33.0}  # worst channel
    note = out["note"]
    assert "p95 31.0-35.0 ms" in note and "lowest p95 nr+none (31.0 ms at cov 0.900)" in note
    assert "best balanced nr+ldm+gsh (cov 0.005, p95 34.5 ms)" in note
    assert "nr+ldm vs NR alone: p50 +2.0 ms, p95 +2.0 ms" in note and "nr+ldm+gsh vs NR alone: p50 +4.5 ms" in note


def test_note_leaves_out_saturated_runs_and_says_so():
    out = bad_live.latency_vs_load(bad_sweep.rows(sweep(**{"nr+none": run(0.9, 0.9, 26.0, 31.0, saturated=20)})))
    assert "nr+none" not in [r["scheme"] for r in out["rows"]]
    assert "vs NR alone" not in out["note"] and "left out (harness saturated): nr+none" in out["note"]
    nothing = bad_sweep.rows(sweep(**{s: {"ok": False, "error": "x"} for s in sweep()["schemes"]}))
    assert bad_live.latency_vs_load(nothing) == {"rows": [], "note": "latency vs load: no scheme's run was held by the harness"}


def test_thresholds_from_the_runs_scenario_and_a_named_error(tmp_path):
    (tmp_path / "scenario.yaml").write_text("control:\n  bad: {alpha: 0.15, beta: 20000.0B/s, gamma: 0.5}\n")
    assert bad_live.thresholds(tmp_path) == {"alpha": 0.15, "beta_Bps": 20000.0}
    (tmp_path / "scenario.yaml").write_text("control:\n  bad: {alpha: 0.15}\n")
    with pytest.raises(ValueError, match=r"scenario.yaml: control.bad.alpha / control.bad.beta unreadable"):
        bad_live.thresholds(tmp_path)


def write_run(directory, beta="20000.0B/s"):
    rounds = [{"type": "bad_round", "round": r, "time": 50.0 + 5 * r, "moves": 27 if r == 1 else 0,
               "loads": {"bzone1": 1.95e5 if r == 0 else 9.8e4, "bzone2": 3.7e4 if r == 0 else 7.2e4}} for r in range(5)]
    directory.mkdir()
    (directory / "events.jsonl").write_text("\n".join(json.dumps(e) for e in rounds))
    (directory / "scenario.yaml").write_text(f"control:\n  bad: {{alpha: 0.15, beta: {beta}}}\n")
    return str(directory)


def test_figures_are_drawn(tmp_path):
    table = bad_sweep.rows(sweep(**{"nr+ldm": run(0.9, 0.13, 28.0, 33.0, 28, run_dir=write_run(tmp_path / "r"))}))
    assert bad_live.tradeoff_figure(table, tmp_path / "t.png").stat().st_size > 10_000
    assert bad_live.tradeoff_figure([], tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()
    assert bad_sweep.load_figure(table, tmp_path / "l.png").stat().st_size > 10_000  # with beta from scenario.yaml
    broken = bad_sweep.rows(sweep(**{"nr+ldm": run(0.9, 0.13, 28.0, 33.0, 28, run_dir=write_run(tmp_path / "b", "fast"))}))
    with pytest.raises(ValueError, match="control.bad.beta"):
        bad_sweep.load_figure(broken, tmp_path / "b.png")


def test_paper_plans_both_bad_steps_and_draws_and_notes_the_live_sweep(tmp_path, monkeypatch):
    names = [todo.name for todo in paper.plan(paper_figures.Options(repeats=1, asides=False))]
    assert "bench bad" in names and "bad-live figures" in names  # drawn from what make bench-bad-live left
    assert next(b for b in paper_figures.run_benches() if b.name == "bad").redraw == "--figures-only"
    monkeypatch.setattr(paper_figures, "BENCH_DIR", tmp_path)
    state = paper_steps.State(paper_figures.Options(out=tmp_path / "paper"))
    state.options.out.mkdir()
    live = next(b for b in paper_figures.system_benches() if b.bench.name == "bad-live")
    assert paper_steps.read_bench_step(live, state).status == "skipped"  # make bench-bad-live not run: never run from here
    data = sweep(**{"nr+ldm": run(0.9, 0.13, 28.0, 33.0, 28, run_dir=write_run(tmp_path / "r"))})
    (tmp_path / "bad-live.json").write_text(json.dumps(data))
    step = paper_steps.read_bench_step(live, state)
    assert step.status == "ok" and step.detail == "; ".join(
        f"wrote {state.options.out / name}" for name in ("bad-live.png", "bad-live-load.png", "bad-live-latency.png"))
    entry = {e.figure: e for e in paper_entries.entries(state)}["bad-live"]
    assert entry.images == ["bad-live.png", "bad-live-load.png", "bad-live-latency.png"]
    assert all((state.options.out / name).stat().st_size > 10_000 for name in entry.images)
    assert entry.notes and entry.notes[0].startswith("latency vs load") and "nr+ldm vs NR alone" in entry.notes[0]
