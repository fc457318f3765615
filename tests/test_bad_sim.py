"""BAD Pub/Sub's offline simulation (seed 004, 6.2): the paper's claims as rules on hand-made JSON (each
rule holds on a paper-like result and fails when one number goes the other way), and a --quick run's
invariants."""

import copy
import json

import pytest

from testbed.systems.bad.bench import sim_figures as bad_sim
from testbed.systems.bad.bench import sim as bad

N = 1000  # subscribers in the hand-made JSON


def _run(cov, migrations, max_load, alpha=0.15, shuffle_round=None, per_round=None, counts=(100, 100)):
    """A scheme's JSON: totals plus a 6-round series; `per_round` migrations, the shuffle in `shuffle_round`."""
    rounds = 6
    per_round = per_round if per_round is not None else [0] * rounds
    shuffled = [r == shuffle_round for r in range(rounds)]
    cov_series = [cov] * rounds
    cov_after = list(cov_series)
    if shuffle_round is not None:
        cov_series[shuffle_round] = 1.2
        cov_after[shuffle_round] = 0.01
    return {"config": {"alpha": alpha},
            "series": {"t": [10.0 * (r + 1) for r in range(rounds)], "cov": cov_series, "cov_after": cov_after,
                       "migrations": per_round, "shuffled": shuffled, "subscribers": [list(counts)] * rounds},
            "totals": {"cov": cov, "migrations": migrations, "max_load_mb_s": max_load,
                       "shuffles": int(shuffle_round is not None)}}


def paper_like() -> dict:
    schemes = {}
    for p in ("rnd", "rr"):
        schemes[f"{p}-none"] = _run(0.05, 0, 1000.0)
        schemes[f"{p}-ldm"] = _run(0.04, 10, 990.0, per_round=[10, 0, 0, 0, 0, 0])
        schemes[f"{p}-sdm"] = _run(0.04, 12, 995.0, per_round=[12, 0, 0, 0, 0, 0])
    schemes["nr-none"] = _run(1.3, 0, 5000.0, counts=(800, 200))
    schemes["nr-ldm"] = _run(0.14, 400, 1300.0, per_round=[300, 50, 30, 20, 0, 0])
    schemes["nr-sdm"] = _run(0.14, 410, 1310.0, per_round=[310, 50, 30, 20, 0, 0])
    for dm in ("ldm", "sdm"):
        schemes[f"nr-{dm}-gsh"] = _run(0.05, 900, 1050.0, shuffle_round=0, per_round=[900, 0, 0, 0, 0, 0])
    schemes["nr-ldm-a0.05"] = _run(0.045, 500, 1100.0, alpha=0.05, per_round=[350, 80, 40, 30, 0, 0])
    return {"setup": {"subscribers": N, "gamma": 0.5, "beta_mb": 300.0}, "schemes": schemes}


def _edit(data, scheme, **totals):
    data = copy.deepcopy(data)
    data["schemes"][scheme]["totals"].update(totals)
    return data


def _later_migrations(data):
    data = copy.deepcopy(data)
    data["schemes"]["nr-ldm-gsh"]["series"]["migrations"] = [900, 200, 0, 0, 0, 0]
    return data


def _no_rebalance(data):
    data = copy.deepcopy(data)
    data["schemes"]["nr-sdm-gsh"]["series"]["cov_after"][0] = 0.4
    return data


FAILING = {
    bad_sim.rule_rnd_rr_mild: lambda d: _edit(d, "rr-sdm", migrations=200),  # > 5 % of 1000 subscribers
    bad_sim.rule_nr_extreme: lambda d: _edit(d, "nr-none", cov=0.3),  # below gamma
    bad_sim.rule_ldm_close_to_sdm: lambda d: _edit(d, "nr-sdm", max_load_mb_s=1500.0),  # 13 % apart
    bad_sim.rule_shuffle_at_once: _later_migrations,  # 200 after the shuffle vs DM alone's 100
    bad_sim.rule_nr_migrates_most: lambda d: _edit(d, "rnd-sdm", migrations=200),  # NR's 410 < 3 x 200
    bad_sim.rule_alpha_sensitivity: lambda d: _edit(d, "nr-ldm-a0.05", migrations=300),
}


@pytest.mark.parametrize("rule", bad_sim.RULES.values(), ids=lambda r: r.__name__)
def test_rule_holds_on_a_paper_like_result_and_fails_when_a_number_turns(rule):
    data = paper_like()
    verdict = rule(data)
    assert verdict["holds"], verdict
    assert verdict["claim"] in bad_sim.RULES
    assert not rule(FAILING[rule](data))["holds"]


def test_shuffle_rule_fails_when_the_round_does_not_balance():
    assert not bad_sim.rule_shuffle_at_once(_no_rebalance(paper_like()))["holds"]


def test_verdicts_say_which_scheme_is_missing():
    data = paper_like()
    del data["schemes"]["nr-ldm-a0.05"]
    verdicts = bad_sim.verdicts(data)
    assert len(verdicts) == len(bad_sim.RULES)
    assert verdicts[-1] == {"claim": bad_sim.RULE_ALPHA_SENSITIVITY, "holds": False,
                            "numbers": {"missing_scheme": "nr-ldm-a0.05"}}


@pytest.fixture(scope="module")
def quick():
    return bad.run(bad.QUICK, progress=lambda line: None)


def test_quick_run_keeps_its_invariants(quick):
    setup = bad.QUICK
    rounds = int(setup.duration_s / setup.round_s)
    assert set(quick["schemes"]) == {s.name for s in bad.schemes()}
    for name, run in quick["schemes"].items():
        series = run["series"]
        assert len(series["t"]) == rounds
        # the incremental F (eq. 5) equals a recomputation from n at the end, to rounding
        assert run["recompute_drift"] <= 1e-9 * max(series["max"]) * 1e6, name
        assert all(sum(c) == setup.subscribers for c in series["subscribers"]), name
        assert run["subscriptions"] == quick["workload"]["fe_subscriptions"], name
    nr_none, nr_ldm = quick["schemes"]["nr-none"], quick["schemes"]["nr-ldm"]
    # every scheme replays the same workload: the same placement gives the same first measurement
    assert nr_none["series"]["F"][0] == nr_ldm["series"]["F"][0]
    assert nr_ldm["totals"]["cov"] < nr_none["totals"]["cov"]
    assert nr_ldm["totals"]["migrations"] > 0 and nr_none["totals"]["migrations"] == 0
    assert quick["workload"]["nr_subscribers_per_broker"] == nr_none["series"]["subscribers"][0]


def test_quick_run_draws_every_figure(quick, tmp_path):
    paths = bad_sim.draw(quick, tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"badsim-fig{n}.png" for n in range(5, 15))
    assert all(p.stat().st_size > 0 for p in paths)


def test_command_line_writes_json_with_verdicts(tmp_path):
    out = tmp_path / "bad.json"
    assert bad.main(["--quick", "--out", str(out), "--no-figures", "--schemes", "nr-none,nr-ldm"]) == 0
    data = json.loads(out.read_text())
    assert set(data["schemes"]) == {"nr-none", "nr-ldm"}
    assert len(data["verdicts"]) == len(bad_sim.RULES)
    assert bad.main(["--quick", "--out", str(out), "--schemes", "nr-bogus"]) == 2


def test_index_table_lists_every_claim_and_scheme():
    data = paper_like()
    for run in data["schemes"].values():
        run["totals"]["peak_load_mb_s"] = 1.1 * run["totals"]["max_load_mb_s"]
    lines = bad_sim.verdict_table(data)
    claims = [line for line in lines if line.endswith("|") and ("| yes |" in line or "| no |" in line)]
    assert len(claims) == len(bad_sim.RULES) and all("| yes |" in c for c in claims)
    assert sum(line.startswith(f"| {name} |") for name in data["schemes"] for line in lines) == len(data["schemes"])
    worse = _edit(data, "nr-none", cov=0.1)
    assert any("| no |" in line for line in bad_sim.verdict_table(worse))
