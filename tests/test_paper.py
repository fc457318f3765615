"""`testbed paper`'s parts that need neither root nor Spark: headline numbers from the benchmark JSON
shapes, the index (missing inputs listed, never dropped), the --policy override and run reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from analysis import experiment_headlines, headlines, traces
from analysis.paper_index import Entry, write_index
from testbed import paper, paper_entries, paper_figures, paper_steps
from testbed.systems.pubsub import claims
from testbed.systems.pubsub.bench import figures as micro
from testbed.cli import app, with_policy
from testbed.scenario.loader import load

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------- bench JSON shapes

def nc_json():
    acc = [{"nodes": n, "rtt_ms": 50.0, "median_error_ms": e, "median_relative": e / 50}
           for n, e in ((2, 1.9), (8, 1.8), (32, 2.9))]
    acc += [{"nodes": 8, "rtt_ms": r, "median_error_ms": r * 0.04, "median_relative": 0.04} for r in (20.0, 200.0)]
    cost = [{"nodes": 8, "query_period_s": 1.0, "cpu_percent_max": 0.3, "rss_mb_mean": 14.2, "rss_mb_max": 14.9}]
    return {"time": 1.0, "machine": "vm", "accuracy": acc, "overhead": cost}


def placement_json(epulsar_worst=0.025, mmog=None, distance=None):
    """Fig. 4/5 summary rows; `mmog` = {policy: (worst_max_s, violation_ratio_mean)} at every MMOG size."""
    mmog = mmog or {"epulsar": (0.090, 0.010), "allpairs": (0.088, 0.004), "pulsar-hash": (0.160, 0.350)}
    rows = []
    for kind, sizes in (("uav", (2, 8)), ("mmog", (3, 12))):
        for size in sizes:
            per_policy = mmog if kind == "mmog" else {"epulsar": (epulsar_worst, 0.0), "allpairs": (0.024, 0.0),
                                                      "pulsar-hash": (0.097, 0.8)}
            for policy, (worst, ratio) in per_policy.items():
                rows.append({"kind": kind, "size": size, "policy": policy, "evaluated_on": "estimate",
                             "worst_max_s": worst, "worst_p95_s": worst, "violation_ratio_mean": ratio,
                             **({"distance": distance} if distance else {})})
    return {"time": 2.0, "seeds": 1000, "summary": rows}


def monitoring_json(epulsar_16=5000.0):
    rows = []
    for policy, rates in (("epulsar", {1: 2900.0, 4: 4950.0, 16: epulsar_16}),
                          ("allpairs", {1: 5400.0, 4: 13800.0, 16: 39700.0})):
        rows += [{"policy": policy, "topics": t, "clients_per_topic": c, "zk_wire_net_Bps": r * t / 32}
                 for t in (1, 32) for c, r in rates.items()]
    return {"time": 3.0, "rows": rows}


def migration_json(enhanced_80_ms: float = 59, baseline_80_ms: float = 511):
    """testbed.systems.pubsub.bench.migration's rows: medians with 95 % intervals (here +-5 %) per configuration."""
    ci = lambda v: {"value": v, "low": 0.95 * v, "high": 1.05 * v, "n": 128, "level": 0.95}  # noqa: E731
    rows = [{"figure": "7a", "topics": 128, "executors": 16 if wf == "enhanced" else 1, "wan_ms": w, "workflow": wf,
             "downtime": ci(d / 1000), "reconnect": ci(0.8 * d / 1000), "completion": ci(1.0),
             "harness": {"valid": True}}
            for w, e, b in ((10, 51, 91), (80, enhanced_80_ms, baseline_80_ms)) for wf, d in (("enhanced", e), ("baseline", b))]
    rows += [{"figure": "7b", "topics": n, "wan_ms": 40, "workflow": "enhanced", "executors": e,
              "completion": ci(n * 0.17 / e), "downtime": ci(0.05)} for n in (8, 128) for e in (1, 4, 16)]
    rows += [{"figure": "7b", "topics": n, "wan_ms": 40, "workflow": "baseline", "executors": 1,
              "completion": ci(n * 0.127), "downtime": ci(0.27)} for n in (8, 128)]
    return {"time": 4.0, "rows": rows}


def test_headlines_from_the_bench_json_shapes():
    fig3b = headlines.ours_fig3b(nc_json())
    assert fig3b.agrees is True and "1.8-2.9 ms for 2-32 nodes" in fig3b.ours and "4.0 % of the RTT" in fig3b.ours
    assert fig3b.numbers["median_error_ms_max"] == 2.9

    fig5 = micro.ours_fig5(placement_json())
    assert fig5.agrees is True and "ePulsar 25 ms" in fig5.ours and "Pulsar (hash) 80.0 %" in fig5.ours
    assert micro.ours_fig5(placement_json(epulsar_worst=0.041)).agrees is False  # above the 40 ms threshold
    fig4 = micro.ours_fig4(placement_json())
    assert fig4.agrees is True and "3-12 cities" in fig4.ours and fig4.scale == "2 topologies x 1000 placements"

    fig6 = micro.ours_fig6(monitoring_json())
    assert fig6.agrees is True and "ePulsar 2,900/4,950/5,000 B/s" in fig6.ours and "7.9x at 16 clients" in fig6.ours
    assert micro.ours_fig6(monitoring_json(epulsar_16=9000.0)).agrees is False  # grows with clients

    fig7a = micro.ours_fig7a(migration_json())
    assert fig7a.agrees is True and "ePulsar 10 ms 51 ms [48, 54] (n=128); 80 ms 59 ms" in fig7a.ours
    assert "to reconnected (paper): ePulsar 10 ms 41 ms" in fig7a.ours and "Pulsar 10 ms 91 ms" in fig7a.ours
    assert fig7a.scale == "128 topics at once (as the paper), 16 executors"
    assert micro.ours_fig7a(migration_json(enhanced_80_ms=495)).agrees is False  # intervals overlap at 80 ms
    assert micro.ours_fig7a(migration_json(baseline_80_ms=95)).agrees is False  # apart, but the gap shrinks
    fig7b = micro.ours_fig7b(migration_json())
    assert fig7b.agrees is True and "128 topics" in fig7b.ours and "1.36 s [1.29, 1.43] (n=128) (16 executors)" in fig7b.ours
    assert fig7b.numbers["baseline_s"] == pytest.approx(16.256)


def test_headlines_raise_missing_input_for_empty_json():
    for fig, (_name, extract) in headlines.BENCH_HEADLINES.items():
        with pytest.raises(headlines.MissingInput):
            extract({})
    with pytest.raises(headlines.MissingInput):
        micro.ours_fig7a({"rows": [r for r in migration_json()["rows"] if r["workflow"] == "enhanced"]})


def test_fig4_rule_passes_fails_and_is_not_testable_below_the_threshold():
    """Hash's violations well above ePulsar's, ePulsar's close to AllPairs' (4b), at the sizes where
    some placement can exceed 100 ms at all."""
    ok = micro.ours_fig4(placement_json())
    assert ok.verdict == "yes" and "Pulsar (hash) 35.0 %, AllPairs 0.4 %, ePulsar 1.0 %" in ok.ours
    far = placement_json(mmog={"epulsar": (0.150, 0.200), "allpairs": (0.088, 0.004), "pulsar-hash": (0.160, 0.350)})
    assert micro.ours_fig4(far).verdict == "no"  # ePulsar violates 20 points more often than AllPairs
    near = placement_json(mmog={"epulsar": (0.090, 0.010), "allpairs": (0.088, 0.004), "pulsar-hash": (0.160, 0.060)})
    assert micro.ours_fig4(near).agrees is False  # hash only 5 points above ePulsar: not "well above"
    bounded = placement_json(mmog={"epulsar": (0.060, 0.0), "allpairs": (0.058, 0.0), "pulsar-hash": (0.078, 0.0)})
    fig4 = micro.ours_fig4(bounded)
    assert fig4.verdict == "not testable" and fig4.agrees is None and "exceeds 100 ms" in fig4.untestable
    # Both distance readings side by side: the one that can violate decides, the text names both.
    both = placement_json(distance="rtt")
    both["summary"] += placement_json(mmog={"epulsar": (0.06, 0.0), "allpairs": (0.058, 0.0),
                                            "pulsar-hash": (0.078, 0.0)}, distance="one_way")["summary"]
    fig4 = micro.ours_fig4(both)
    assert fig4.verdict == "yes" and "rtt distances: worst-case" in fig4.ours and "one_way distances:" in fig4.ours
    assert "(not testable there)" in fig4.ours


def test_fig5_rule_passes_fails_and_is_not_testable_below_the_threshold():
    assert micro.ours_fig5(placement_json()).verdict == "yes"
    assert micro.ours_fig5(placement_json(epulsar_worst=0.041)).verdict == "no"
    bounded = placement_json(epulsar_worst=0.030)
    for r in bounded["summary"]:
        if r["kind"] == "uav":
            r.update(worst_max_s=min(r["worst_max_s"], 0.035), violation_ratio_mean=0.0)
    assert micro.ours_fig5(bounded).verdict == "not testable"


def comparison(scenario="uav-smoke", cls="follow_leader", threshold=0.04, ep_p95=0.03, bound=0.097, relinks=5,
               windows_long=0, within=0.97, after_change=3):
    """A compare_runs result in miniature: what the experiment headlines read."""
    violations = [{"scenario": scenario, "policy": p, "topic_class": c, "threshold_s": threshold, "messages": 100,
                   "violations": v, "violation_ratio": v / 100, "p50_s": threshold / 2,
                   "p95_s": ep_p95 if p == "epulsar" else threshold * 2}
                  for p, v in (("epulsar", 10), ("pulsar-hash", 80), ("allpairs", 12)) for c in (cls, "other")]
    return {"violations": violations, "reaction_s": 10.0,
            "runs": [{"scenario": scenario, "policy": p, "latency_bound_s": bound, "bound_path": "a@x -> b@y -> a@x",
                      "migrations": m} for p, m in (("epulsar", 10), ("allpairs", 0))],
            "recovery": [{"scenario": scenario, "policy": "epulsar", "relinks": relinks, "median_s": 2.5}],
            "handovers": [{"scenario": scenario, "policy": "epulsar", "relinks": relinks, "windows_long": windows_long,
                           "windows_open": 1, "longest_window_s": 12.0 if windows_long else 6.5,
                           "messages_outside": 900, "within_outside": round(900 * within),
                           "within_ratio_outside": within}],
            "reactions": [{"scenario": scenario, "policy": "epulsar", "changes": 20, "migrations": 5,
                           "migrations_after_change": after_change}]}


def test_fig8_rule_passes_fails_and_is_not_testable():
    fig8 = experiment_headlines.ours_fig8(comparison(), "uav-smoke", "follow_leader", "smoke")
    assert fig8.ours.startswith("follow_leader messages: ePulsar 10.0 % above 40 ms")
    assert fig8.ours.index("ePulsar") < fig8.ours.index("AllPairs") < fig8.ours.index("Pulsar (hash)")
    assert "median 2.5 s above after a zone change (5 changes), 10 migrations;" in fig8.ours
    assert "AllPairs 12.0 % above 40 ms (p50 20 ms, p95 80 ms), 0 migrations;" in fig8.ours
    assert "5 handovers, longest window 6.5 s (0 over 10.0 s = reports and rounds; 1 cut short before it)" in fig8.ours
    assert "97.0 % of 900 messages within their threshold outside the windows" in fig8.ours
    assert fig8.verdict == "yes"
    assert experiment_headlines.ours_fig8(comparison(windows_long=1), "uav-smoke").verdict == "no"  # a window over 10 s
    measured = comparison()
    measured["handovers"][0]["window_limit_s"] = 11.07  # the runs' migrations took up to 1.07 s (p95)
    assert ("(0 over 11.1 s = 10 s of reports and rounds + 1.1 s of migration, as the runs measured; 1 cut short "
            "before it)") in experiment_headlines.ours_fig8(measured, "uav-smoke").ours
    assert experiment_headlines.ours_fig8(comparison(within=0.90), "uav-smoke").verdict == "no"     # too many violations outside
    bounded = experiment_headlines.ours_fig8(comparison(bound=0.035), "uav-smoke")
    assert bounded.verdict == "not testable" and "bounds E2E latency at 35 ms (a@x -> b@y -> a@x) < 40 ms" in bounded.untestable
    still = experiment_headlines.ours_fig8(comparison(relinks=0), "uav-smoke")
    assert still.verdict == "not testable" and "no handover" in still.untestable
    no_epulsar = comparison()
    no_epulsar["violations"] = [r for r in no_epulsar["violations"] if r["policy"] != "epulsar"]
    assert experiment_headlines.ours_fig8(no_epulsar, "uav-smoke").verdict == "-"
    with pytest.raises(headlines.MissingInput):
        experiment_headlines.ours_fig8(comparison(), "mmog-smoke")


def test_experiment_headlines_give_the_interval_over_repeats():
    """Each repeat is one sample: the pooled ratio first, then the runs' mean with its 95 % t interval."""
    from analysis.compare_runs import with_intervals

    result = comparison()
    per_run = [{**r, "run_id": f"{r['policy']}-{i}", "violation_ratio": r["violation_ratio"] + delta,
                "p95_s": r["p95_s"] + delta}
               for r in result["violations"] for i, delta in enumerate((-0.02, 0.02))]
    with_intervals(result["violations"], per_run)
    fig8 = experiment_headlines.ours_fig8(result, "uav-smoke", "follow_leader", "smoke")
    # two samples 10 +- 2 %: mean 10.0, half-width t(0.975, 1) * 2.83 / 1.41 = 25.4 points, cut at 0 %
    assert "ePulsar 10.0 % (runs' mean 10.0 % [0.0, 35.4] (n=2)) above 40 ms" in fig8.ours
    assert fig8.numbers["epulsar"]["violation_ratio_ci"]["n"] == 2
    single = comparison()
    with_intervals(single["violations"], [{**r, "run_id": "x"} for r in single["violations"]])
    assert "ePulsar 10.0 % (n=1 run) above" in experiment_headlines.ours_fig8(single, "uav-smoke", "follow_leader").ours


def test_fig9_rule_passes_fails_and_is_not_testable():
    def fig9(**kw):
        return experiment_headlines.ours_fig9(comparison(scenario="mmog-smoke", cls="avatar", threshold=0.1, **kw), "mmog-smoke",
                                   "avatar")

    ok = fig9(ep_p95=0.05, bound=0.15)
    assert ok.verdict == "yes" and "3 of 5 migrations within 10 s of a group change" in ok.ours
    assert fig9(ep_p95=0.05, bound=0.15, after_change=0).verdict == "no"  # no migration follows a group change
    assert fig9(ep_p95=0.10, bound=0.15).verdict == "no"                   # p95 at the threshold is not below it
    bounded = fig9(ep_p95=0.05, bound=0.078)  # latency bounded: the verdict rests on the migrations
    assert bounded.verdict == "yes" and "below the threshold by construction" in bounded.ours
    assert fig9(ep_p95=0.05, bound=0.078, after_change=0).verdict == "no"
    still = comparison(scenario="mmog-smoke", cls="avatar", threshold=0.1, ep_p95=0.05, bound=0.078)
    still["reactions"][0].update(migrations=0, migrations_after_change=0)
    never = experiment_headlines.ours_fig9(still, "mmog-smoke", "avatar")
    assert never.verdict == "not testable" and "78 ms" in never.untestable and "never migrated" in never.untestable


def test_pooled_violations_rule_passes_fails_and_is_not_testable():
    pooled = experiment_headlines.ours_violations(comparison())
    assert "uav-smoke: ePulsar 10.0 %, AllPairs 12.0 %, Pulsar (hash) 80.0 %" in pooled.ours and pooled.verdict == "yes"
    worse = comparison()
    worse["violations"] = [dict(r, violations=90) if r["policy"] == "epulsar" else r for r in worse["violations"]]
    assert experiment_headlines.ours_violations(worse).verdict == "no"
    assert experiment_headlines.ours_violations(comparison(bound=0.03)).verdict == "not testable"


def test_every_figure_has_a_rule_and_a_claim():
    assert set(headlines.AGREEMENT_RULES) == set(headlines.PAPER)
    for bench in paper_figures.system_benches():  # a system's benchmark brings its own
        for figure in bench.bench.shows:
            assert figure.entry not in headlines.PAPER and figure.rule and figure.paper and figure.section
    assert "95 %" in headlines.AGREEMENT_RULES["fig8"] and "10 points" in claims.FIG4.rule


# ---------------------------------------------------------------------------------------- the index

def test_index_lists_missing_inputs_and_failures(tmp_path):
    (tmp_path / "fig3b.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    entries = [
        Entry("fig3b", images=["fig3b.png"], headline=headlines.ours_fig3b(nc_json()), source="results/bench/nc.json"),
        Entry("fig6", images=["fig6.png"], missing=["results/bench/monitoring.json (make bench-monitoring)"]),
        Entry("fig8", images=["fig8.png"], failed=["run scenarios/uav-smoke.yaml --policy allpairs (exit 1)"],
              scale="uav-smoke"),
    ]
    about = {"command": "testbed paper --reuse", "machine": "vm (2 CPUs)", "scale": "smoke scale", "wall_s": 120,
             "finished": "2026-01-01 00:00:00", "steps": [{"name": "bench nc", "status": "ok", "seconds": 3,
                                                           "detail": "redrawn"}]}
    md_path, html_path = write_index(tmp_path, entries, about)
    md, page = md_path.read_text(), html_path.read_text()
    assert "| [Fig. 3b](#fig3b) | median per-pair error" in md and "| 5.3 | yes |" in md and "| ok |" in md
    assert "- Fig. 6: missing: results/bench/monitoring.json (make bench-monitoring)" in md
    assert "- Fig. 6: missing: fig6.png not rendered" in md
    assert "- Fig. 8: failed: run scenarios/uav-smoke.yaml --policy allpairs (exit 1)" in md
    assert "![fig3b.png](fig3b.png)" in md and "![fig6.png]" not in md and "*(no PNG)*" in md
    assert "in 2.0 min on vm (2 CPUs)" in md and "**Scale.** smoke scale" in md
    assert "<img src='fig3b.png'" in page and "fig6.png not rendered" in page and page.count("<h2 id=") == 3
    assert "&lt;" not in md and "Pulsar&#x27;s" not in md  # markdown is not HTML-escaped
    headline_rows = md.split("## Headline numbers")[1].split("## Missing")[0]
    statuses = [line.rsplit("|", 2)[-2].strip() for line in headline_rows.splitlines() if line.startswith("| [Fig.")]
    assert statuses == ["ok", "missing", "failed"]


def test_index_says_not_testable_and_why(tmp_path):
    (tmp_path / "fig9.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    still = comparison(scenario="mmog-smoke", cls="avatar", threshold=0.1, bound=0.078)
    still["reactions"][0].update(migrations=0, migrations_after_change=0)
    bounded = experiment_headlines.ours_fig9(still, "mmog-smoke", "avatar")
    md_path, html_path = write_index(tmp_path, [Entry("fig9", images=["fig9.png"], headline=bounded)], {})
    md = md_path.read_text()
    assert "| 5.8.2 | not testable |" in md
    assert "- **agrees:** not testable: the configured topology bounds E2E latency at 78 ms" in md
    assert "not testable: the configured topology" in html_path.read_text()


def test_entries_mark_absent_bench_json_as_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(paper_figures, "BENCH_DIR", tmp_path)
    (tmp_path / "nc.json").write_text(json.dumps(nc_json()))
    (tmp_path / "migration.json").write_text(json.dumps({"time": 1.0, "rows": []}))
    state = paper_steps.State(paper_figures.Options(out=tmp_path / "paper"))
    state.steps.append(paper_steps.Step("bench monitoring (fig6)", "failed", detail="exit 1", figures=("fig6",)))
    by_fig = {e.figure: e for e in paper_entries.entries(state)}
    assert list(by_fig) == ["fig3b", "fig4", "fig5", "fig4-jitter", "fig6", "fig7a", "fig7b", "bad-sim", "fig8-smoke", "fig9", "fig8",
                            "fig9-one_way", "fig9-jitter", "violations", "load-balancing", "tracking", "handover", "durable",
                            "bad-live", "autotune"]  # the systems' long benchmarks last, in registry order
    assert by_fig["bad-sim"].missing == [f"{tmp_path / 'bad.json'} (make bench-bad)"]
    assert by_fig["bad-live"].missing == [f"{tmp_path / 'bad-live.json'} (make bench-bad-live)"]
    assert by_fig["tracking"].missing == [f"{tmp_path / 'tracking.json'} (make bench-tracking)"]
    assert by_fig["autotune"].missing == [f"{tmp_path / 'autotune.json'} (make bench-autotune)"]
    assert by_fig["load-balancing"].headline is None and "no runs with a load summary" in by_fig["load-balancing"].missing
    assert by_fig["fig3b"].headline is not None and not by_fig["fig3b"].missing
    assert by_fig["fig4"].headline is None and "placement.json (make bench-placement)" in by_fig["fig4"].missing[0]
    assert by_fig["fig6"].failed == ["bench monitoring (fig6) (exit 1)"]
    assert "no Fig. 7a rows" in by_fig["fig7a"].missing[0]
    assert any("PySpark" in m for m in by_fig["fig8"].missing) and by_fig["violations"].missing
    assert by_fig["fig8-smoke"].scale.startswith("mechanism check, not comparable")
    assert by_fig["fig8"].images == ["fig8-comparable.png", "fig8-comparable-p95.png"]
    assert by_fig["fig9-one_way"].images == ["fig9-one_way.png", "fig9-one_way-p95.png"]
    alone = {e.figure: e for e in paper_entries.entries(paper_steps.State(paper_figures.Options(out=tmp_path / "p2", asides=False)))}
    assert "fig8-smoke" not in alone and alone["fig8"].images == ["fig8.png", "fig8-p95.png"]


# ---------------------------------------------------------------------------------------- --policy

def test_policy_override_is_validated_and_lands_in_the_run_metadata(tmp_path):
    scenario = load(REPO / "scenarios" / "uav-smoke.yaml")
    changed = with_policy(scenario, "pulsar-hash")
    assert changed.control.policy == "pulsar-hash" and scenario.control.policy == "epulsar"
    assert changed.control.settle == scenario.control.settle and changed.workload == scenario.workload
    with pytest.raises(ValueError, match="'hashing' is not a policy; allowed: epulsar, allpairs, pulsar-hash"):
        with_policy(scenario, "hashing")
    # testbed.experiment writes the scenario as run like this; the analysis reads the policy back from it.
    run_dir = tmp_path / "uav-smoke-abc123"
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(changed.model_dump(mode="json"), sort_keys=False))
    (run_dir / "run.json").write_text(json.dumps({"run_id": "abc123", "complete": True, "started": 5.0, "seed": 4}))
    assert traces.run_metadata(run_dir)["policy"] == "pulsar-hash"
    (run_dir / "traces").mkdir()
    (run_dir / "traces" / "t.jsonl").write_text("{}\n")
    assert paper_steps.reusable_run(tmp_path, "uav-smoke", "pulsar-hash") == run_dir
    assert paper_steps.reusable_run(tmp_path, "uav-smoke", "epulsar") is None
    assert paper_steps.reusable_run(tmp_path, "uav-smoke", "pulsar-hash", seed=4) == run_dir
    assert paper_steps.reusable_run(tmp_path, "uav-smoke", "pulsar-hash", seed=3) is None  # another repeat
    assert paper_steps.reusable_run(tmp_path, "uav-smoke", "pulsar-hash", seed=4, distance="one_way") == run_dir
    assert paper_steps.reusable_run(tmp_path, "uav-smoke", "pulsar-hash", seed=4, distance="rtt") is None
    # the same flights on another system under test (--system) are not a run of the policy
    other = changed.model_copy(update={"system": "natscluster"})
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(other.model_dump(mode="json"), sort_keys=False))
    assert paper_steps.reusable_run(tmp_path, "uav-smoke", "pulsar-hash") is None


def test_plan_runs_every_policy_once_per_repeat_before_the_next_repeat(monkeypatch, tmp_path):
    from testbed import load

    monkeypatch.setattr(load, "capacity_file", lambda *_: tmp_path / "capacity-compiled.json")  # not measured
    names = [todo.name for todo in paper.plan(paper_figures.Options(repeats=2, policies=("epulsar", "allpairs")))]
    runs = [n for n in names if "(repeat" in n]
    assert len(runs) == 2 * (2 * 2 + 2 + 1) and all("(repeat 1/2)" in n for n in runs[:7])
    # the other systems that run a workload fly the same experiment, a series beside the policies
    assert [n for n in runs if "--system" in n][:2] == [
        "run scenarios/uav-smoke.yaml --system natscluster (repeat 1/2)",
        "run scenarios/mmog-smoke.yaml --system natscluster (repeat 1/2)"]
    assert not [t for t in paper.plan(paper_figures.Options(repeats=1, systems=())) if "--system" in t.name]
    assert [n for n in runs if "hotspot" in n] == [  # the hot spot under the balance policies asked for
        f"run scenarios/hotspot-smoke.yaml --policy epulsar (repeat {r}/2)" for r in (1, 2)]
    assert names[-6:] == ["load balancing figures and table", "tracking figures", "handover figures",
                          "durable figures", "bad-live figures", "autotune figures"]  # long benchmarks, read when present
    assert names[-12:-6] == ["run scenarios/uav-comparable.yaml --policy epulsar", "PySpark comparison of the comparable run",
                          "run scenarios/mmog-smoke.yaml --policy epulsar --distance one_way",
                          "PySpark comparison of the one_way run",
                          "run scenarios/mmog-smoke.yaml --policy epulsar --jitter measured",
                          "PySpark comparison of the jitter run"]
    assert "uav-comparable" not in " ".join(t.name for t in paper.plan(paper_figures.Options(repeats=1, asides=False)))


def test_run_seed_overrides_the_scenario_and_its_topology():
    from testbed.cli import _load

    scenario, topology = _load(REPO / "scenarios" / "uav-smoke.yaml", seed=9)
    assert scenario.seed == 9 and load(REPO / "scenarios" / "uav-smoke.yaml").seed == 3


def test_cli_rejects_bad_policy_and_scale_before_running_anything():
    runner = CliRunner()
    result = runner.invoke(app, ["run", str(REPO / "scenarios" / "uav-smoke.yaml"), "--policy", "random"])
    assert result.exit_code == 2 and "Invalid value for '--policy': 'random': input should be 'epulsar'" in result.output
    result = runner.invoke(app, ["paper", "--scale", "huge"])
    assert result.exit_code == 2 and "paper: Invalid value for '--scale': 'huge'; allowed: smoke, full" in result.output
    result = runner.invoke(app, ["paper", "--policies", "epulsar,fastest"])
    assert result.exit_code == 2 and "paper: Invalid value for '--policies': fastest" in result.output


def test_figures_paper_is_the_paper_command(monkeypatch):
    seen = []
    monkeypatch.setattr(paper, "main", lambda options: seen.append(options) or 0)
    runner = CliRunner()
    assert runner.invoke(app, ["figures", "--paper"]).exit_code == 0
    assert runner.invoke(app, ["paper", "--reuse", "--policies", "epulsar,pulsar-hash"]).exit_code == 0
    alias, direct = seen
    assert alias.out == Path("results/paper") and alias.policies == paper_figures.POLICIES and not alias.reuse
    assert direct.reuse and direct.policies == ("epulsar", "pulsar-hash") and direct.scale == "smoke"


def test_bench_headlines_give_their_intervals():
    """Fig. 3b: bootstrap over pair errors; Fig. 4/5: t over placements; Fig. 6: t over report periods."""
    from analysis.stats import mean_ci, median_ci

    nc = nc_json()
    for r in nc["accuracy"]:
        r["median_error_ms_ci"] = median_ci([r["median_error_ms"] * f for f in (0.8, 1.0, 1.2)]).as_dict()
        r["median_relative_ci"] = median_ci([r["median_relative"] * f for f in (0.8, 1.0, 1.2)]).as_dict()
    assert "(largest: 2.90 ms [2.32, 3.48] (n=3) at 32 nodes" in headlines.ours_fig3b(nc).ours
    placement = placement_json()
    for r in placement["summary"]:
        r.update(placements=1000, violation_ratio_std=0.1)
    # hash at 12 cities: 35 % +- 1.96 * 10 / sqrt(1000) = 0.62 points
    assert "Pulsar (hash) 35.0 % [34.4, 35.6] (n=1000)" in micro.ours_fig4(placement).ours
    monitoring = monitoring_json()
    for r in monitoring["rows"]:
        r["zk_wire_net_Bps_ci"] = mean_ci([r["zk_wire_net_Bps"] - 100, r["zk_wire_net_Bps"] + 100]).as_dict()
    assert "at 16 clients, mean over report periods: ePulsar 5,000 B/s [3,729, 6,271] (n=2)" in \
        micro.ours_fig6(monitoring).ours


def test_runs_under_two_readings_of_d_are_not_pooled():
    from analysis.compare_runs import label_readings

    def run(scenario, distance):
        return {"scenario": scenario, "distance": distance, "run": {"scenario": scenario}}

    mixed = [run("mmog-smoke", "one_way"), run("mmog-smoke", "rtt"), run("uav-smoke", "one_way")]
    label_readings(mixed)
    assert [u["run"]["scenario"] for u in mixed] == ["mmog-smoke (d=one_way)", "mmog-smoke (d=rtt)", "uav-smoke"]
    assert mixed[1]["scenario"] == "mmog-smoke (d=rtt)"


def test_fig7_gives_no_verdict_on_saturated_configurations():
    """A latency measured while the harness was saturated is the machine's: Fig. 7's rules say so."""
    data = migration_json()
    assert micro.ours_fig7a(data).verdict == "yes"
    data["rows"][0]["harness"] = {"valid": False}
    fig7a = micro.ours_fig7a(data)
    assert fig7a.verdict == "not testable" and "saturated in 1 of the 4 configurations" in fig7a.untestable
    bad = migration_json()
    for r in bad["rows"]:
        if r["figure"] == "7b" and r["topics"] == 128:
            r["harness"] = {"valid": False}
    assert micro.ours_fig7b(bad).verdict == "not testable"


def test_intervals_stay_within_what_the_quantity_can_take():
    from analysis.stats import mean_ci

    ratio = mean_ci([0.27, 0.0], bounds=(0.0, 1.0))  # one repeat without a handover: t reaches below 0
    assert ratio.low == 0.0 and ratio.high == 1.0 and ratio.value == 0.135
    assert mean_ci([0.27, 0.0]).low < 0


def test_harness_notes_are_listed_without_marking_the_figure_missing(tmp_path):
    (tmp_path / "fig9.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    fig9 = experiment_headlines.ours_fig9(comparison(scenario="mmog-smoke", cls="avatar", threshold=0.1, bound=0.15),
                                          "mmog-smoke", "avatar")
    entry = Entry("fig9", images=["fig9.png"], headline=fig9,
                  notes=["epulsar run ab12cd: harness saturated for 4 s; 240 of 14292 messages left out of the verdict"])
    assert entry.status(tmp_path) == "ok"
    md = write_index(tmp_path, [entry], {})[0].read_text()
    assert "- Fig. 9: note: epulsar run ab12cd: harness saturated for 4 s" in md and "| ok |" in md


@pytest.mark.parametrize("steady, scenario, said", [
    (22_400, "scenarios/uav.yaml", "at its own size (the steady knee through the compiled engine, 22,400"),
    (11_200, "scenarios/uav-comparable.yaml", "rate scaled to 5 msg/s: the steady knee through the compiled engine "
                                              "is 11,200 deliveries/s, below the paper's 22,400"),
    (None, "scenarios/uav-comparable.yaml", "is not measured"),
])
def test_fig8_runs_the_papers_own_size_where_the_capacity_through_the_engine_holds_it(tmp_path, steady, scenario, said):
    """make paper's Fig. 8 aside: uav.yaml (22,400 deliveries/s through the compiled engine) when
    bench-capacity's steady knee through the engine reaches the paper's load, else the same flight at
    5 msg/s, and its index entry says which and why."""
    capacity = tmp_path / "capacity-compiled.json"
    if steady is not None:
        capacity.write_text(json.dumps({"knee": {"uav-swarm": {"deliveries_per_s": 2_800, "paper_deliveries_per_s": 22_400,
                                                               "steady": {"deliveries_per_s": steady}}}}))
    aside = paper_figures.fig8_aside(capacity)
    assert (aside.name, aside.figure, aside.scenario) == ("comparable", "fig8", scenario)
    assert said in aside.note
    if scenario == paper_figures.PAPER_UAV:  # the paper's load is only carried through the engine
        assert yaml.safe_load((paper_figures.REPO / scenario).read_text())["workload"]["client_engine"] == "compiled"
