"""BAD's live sweep read back (testbed.systems.bad.bench.sweep), pure: the table, the paper's claims as rules
(each holding, failing, or not testable), the index headline and the figures, on hand-made JSON."""

import json

from testbed.systems.bad.bench import sweep as bad_sweep


def run(cov_first, cov_last, migrations=0, shuffles=0, saturated=0, run_dir=None):
    return {"ok": True, "run": run_dir, "saturated_seconds": saturated, "seconds": 60, "valid": saturated == 0,
            "classes": {"alerts": {"p50_ms": 30.0, "p95_ms": 33.0}, "reports": {"p50_ms": 31.0, "p95_ms": 35.0}},
            "bad": {"cov_first": cov_first, "cov_last": cov_last, "max_first": 2e5, "max_last": 1e5,
                    "migrations": migrations, "shuffles": shuffles, "reattach_p50_s": 0.063 if migrations else None}}


def sweep(**changes):
    schemes = {"rnd+none": run(0.1, 0.1), "rnd+ldm": run(0.1, 0.1), "rnd+sdm": run(0.1, 0.1, 1),
               "rr+none": run(0.05, 0.05), "rr+ldm": run(0.05, 0.05), "rr+sdm": run(0.05, 0.05),
               "nr+none": run(1.2, 1.2), "nr+ldm": run(1.1, 0.13, 30), "nr+sdm": run(1.0, 0.12, 28),
               "nr+ldm+gsh": run(1.1, 0.05, 60, 1), "nr+sdm+gsh": run(1.0, 0.06, 58, 1)}
    schemes.update(changes)
    return {"scenario": "scenarios/bad-smoke.yaml", "schemes": schemes}


def verdicts(data):
    return [v["holds"] for v in bad_sweep.rules(bad_sweep.rows(data))]


def test_every_claim_holds_on_a_paper_like_sweep():
    assert verdicts(sweep()) == [True, True, True, True]
    headline = bad_sweep.headline(bad_sweep.rows(sweep()), "smoke")
    assert headline.agrees and headline.ours.startswith("4 of 4 testable claims hold; NR alone cov 1.20")


def test_each_claim_can_fail():
    assert verdicts(sweep(**{"nr+none": run(0.15, 0.15)}))[0] is False  # NR not more skewed than RND
    assert verdicts(sweep(**{"nr+ldm": run(1.1, 0.4, 30)}))[1] is False  # LDM left it above alpha
    assert verdicts(sweep(**{"rr+ldm": run(0.3, 0.1, 40)}))[2] is False  # RR migrated more than NR
    assert verdicts(sweep(**{"nr+sdm+gsh": run(1.0, 0.3, 58, 1)}))[3] is False  # the shuffle ended worse
    assert "FAILS" in bad_sweep.headline(bad_sweep.rows(sweep(**{"nr+ldm": run(1.1, 0.4, 30)})), "x").ours


def test_saturated_missing_or_vacuous_runs_make_a_claim_not_testable():
    assert verdicts(sweep(**{"nr+none": run(1.2, 1.2, saturated=10)}))[0] is None  # 10 of 60 s > 5 %
    assert verdicts(sweep(**{"nr+none": run(1.2, 1.2, saturated=2)}))[0] is True   # 2 of 60 s is held
    broken = sweep(**{"rr+none": {"ok": False, "error": "boom"}})
    assert verdicts(broken)[0] is None and "failed: boom" in "\n".join(bad_sweep.markdown_table(bad_sweep.rows(broken)))
    assert verdicts(sweep(**{"nr+ldm+gsh": run(1.1, 0.05, 60, 0)}))[3] is None  # the shuffle never fired


def test_table_and_figures(tmp_path):
    rounds = [{"type": "bad_round", "round": r, "time": 100.0 + 5 * r, "moves": 3 if r == 1 else 0,
               "loads": {"bzone1": 2e5 if r == 0 else 9e4, "bzone2": 2e4 if r == 0 else 8e4}} for r in range(4)]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "events.jsonl").write_text("\n".join(json.dumps(e) for e in rounds))
    table = bad_sweep.rows(sweep(**{"nr+ldm": run(1.1, 0.13, 30, run_dir=str(tmp_path / "run"))}))
    lines = bad_sweep.markdown_table(table)
    assert len(lines) == 2 + 11 and "| nr+ldm | 1.100 -> 0.130 | 200 -> 100 | 30 | 0 | 63 | 31.0 / 35.0 | valid |" in lines
    assert bad_sweep.sweep_figure(table, tmp_path / "s.png").stat().st_size > 10_000
    assert bad_sweep.load_figure(table, tmp_path / "l.png").stat().st_size > 10_000
    assert bad_sweep.load_figure(bad_sweep.rows(sweep()), tmp_path / "none.png") is None  # no run directories
