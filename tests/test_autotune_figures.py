"""`make bench-autotune`'s experiments and figures, on data made here: every experiment's scenario
validates, each claim's rule can fail as well as hold, and the figures are drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.systems.autotune.bench import figures as figs
from testbed import topology
from testbed.systems.autotune.bench import live as bench
from testbed.scenario.loader import load

ROOT = Path(__file__).resolve().parent.parent


def test_every_experiment_is_a_valid_scenario(tmp_path):
    for name, changes in bench.experiments().items():
        path = bench.variant_file(ROOT / "scenarios" / "autotune.yaml", f"autotune-{name.replace('.', '')}", changes,
                                  tmp_path)
        scenario = load(path)
        built = topology.checked(scenario, str(path))
        if name.startswith("rtt-"):
            assert built.node_rtt("pub1", "bzone1") == pytest.approx(int(name[4:]) / 1e3)
    assert bench.step_profile({"kind": "steps", "time_scale": 0.12})[:2] == [[0.0, 1.75], [12.0, 55.0]]
    assert bench.step_profile({"kind": "poisson"}) is None


def test_n_series_is_one_mean_per_second():
    rows = [{"t": 100.2, "n": 4, "lambda_est": 10.0}, {"t": 100.7, "n": 6, "lambda_est": 20.0}, {"t": 101.1, "n": 1}]
    assert bench.n_series(rows, start=100.0) == [[0.0, 5.0, 15.0], [1.0, 1.0, None]]


def variant(batch, tuned, mean, dropped=0, n_mean=None):
    q = {f"q{p:02d}_ms": mean * f for p, f in ((5, 0.8), (25, 0.9), (50, 1.0), (75, 1.1), (95, 1.3))}
    return {"batch": batch, "tuned": tuned, "mean_ms": mean, "p50_ms": mean, "p95_ms": mean * 1.3, "dropped": dropped,
            "refused": 0, "n_mean": n_mean if n_mean is not None else (batch if not tuned else 8.0),
            "series": [[0.0, batch, 30.0], [1.0, 8.0, 35.0]] if tuned else None, **q}


def run(fixed: dict, tuned: dict, valid=True, **extra):
    variants = {f"fixed{n}": variant(n, False, m) for n, m in fixed.items()}
    variants.update({f"auto{n}": variant(n, True, m) for n, m in tuned.items()})
    return {"ok": True, "valid": valid, "saturated_seconds": 0 if valid else 9, "rtt_ms": 140.0, "arrivals": 2000,
            "source": {"kind": "poisson"}, "subscriber": {"pull_interval": "0.5s", "pull_time": "0.04s"},
            "variants": variants, "profile": None, **extra}


def paper_like() -> dict:
    tuned = {1: 100.0, 10: 104.0, 50: 108.0}
    experiments = {
        "load-1.75": run({1: 100, 2: 270, 10: 290, 50: 295}, tuned),
        "load-17.5": run({1: 180, 2: 120, 10: 150, 50: 280}, tuned),
        "load-35": run({1: 9000, 2: 300, 5: 115, 10: 112, 20: 160, 50: 250}, tuned),
        "load-55": run({1: 20000, 2: 5000, 5: 130, 10: 120, 50: 240}, {1: 125.0, 50: 130.0}),
        "trace-x1": run({1: 100, 50: 290}, tuned), "trace-x50": run({1: 400, 10: 150, 50: 260}, {1: 140.0, 50: 150.0}),
        "steps": run({10: 150}, {1: 110.0, 50: 115.0}, profile=[[0.0, 1.75], [12.0, 55.0], [120.0, 17.5]]),
        "slow": run({10: 900, 50: 950}, {10: 700, 50: 720}),
        "rtt-20": run({1: 9000, 2: 60, 5: 40, 10: 45}, {1: 42.0, 50: 44.0}, rtt_ms=20.0),
    }
    for name, v in experiments["slow"]["variants"].items():
        v["dropped"] = 0 if v["tuned"] else 40
    return {"time": 0, "experiments": experiments}


def test_paper_like_results_hold_every_rule():
    verdicts = figs.rules(paper_like())
    assert len(verdicts) == 9 and all(v["holds"] for v in verdicts), [v for v in verdicts if not v["holds"]]
    line = figs.headline(paper_like(), "test")
    assert line.agrees is True and "Fig. 8" in line.ours


def test_each_rule_can_fail():
    result = paper_like()
    e = result["experiments"]
    e["load-1.75"]["variants"]["fixed2"]["mean_ms"] = 90.0          # N = 2 beats N = 1 at 1.75/s
    e["load-35"]["variants"]["fixed10"]["mean_ms"] = 200.0          # N = 10 far from the best at 35/s
    e["load-55"]["variants"]["fixed1"]["mean_ms"] = 150.0           # N = 1 not slow at 55/s
    e["load-17.5"]["variants"]["auto50"]["mean_ms"] = 300.0         # tuned depends on the initial N ...
    e["trace-x1"]["variants"]["auto50"]["mean_ms"] = 300.0
    e["trace-x50"]["variants"]["auto50"]["mean_ms"] = 400.0
    for v in e["load-35"]["variants"].values():
        if v["tuned"]:
            v["n_mean"] = 40.0                                       # ... N far from the best fixed N
    e["slow"]["variants"]["auto10"]["dropped"] = 3                   # the tuned publisher drops too
    e["load-1.75"]["valid"] = False
    verdicts = {v["claim"].split(":")[0]: v for v in figs.rules(result)}
    assert not any(v["holds"] for v in verdicts.values()), verdicts
    assert "harness saturated in: load-1.75" in verdicts["Fig. 8"]["evidence"]
    assert figs.headline(result, "test").agrees is False


def test_missing_results_are_said_not_judged():
    with pytest.raises(figs.MissingInput):
        figs.headline({}, "test")
    assert figs.rules({"experiments": {"load-35": {"ok": False, "error": "x"}}}) == []
    assert "failed" in "\n".join(figs.markdown_table({"experiments": {"load-35": {"ok": False, "error": "x"}}}))


def test_figures_are_drawn(tmp_path):
    drawn = figs.draw(paper_like(), tmp_path)
    names = sorted(p.name for p in tmp_path.glob("*.png"))
    assert names == sorted(figs.FIGURES), (names, drawn)
    table = figs.markdown_table(paper_like())
    assert any("| load-35 | 140 | valid | fixed10 | 10 |" in line for line in table)
    assert any(line.startswith("| 20 | 5 |") for line in table)  # best fixed N over RTTs
