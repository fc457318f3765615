"""`make paper`'s variants beside the paper's own figures, without root or Spark: Fig. 4 and Fig. 9 with
measured jitter on the inter-city links (each its own entry and verdict), and Fig. 3b's node sweep up
to 32 agents with convergence time and accuracy per size, a size that could not run said so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from analysis import bench_figures, headlines
from testbed import cli, paper, paper_entries, paper_figures, paper_steps
from testbed.bench import nc
from testbed.systems.pubsub.bench import placement

REPO = Path(__file__).resolve().parents[1]
MMOG_SMOKE = "scenarios/mmog-smoke.yaml"


# ---------------------------------------------------------------------------------------- measured jitter

def test_jitter_override_varies_every_inter_city_link_and_refuses_a_scenario_without_cities():
    constant, built = cli._load(REPO / MMOG_SMOKE)
    measured, jittered = cli._load(REPO / MMOG_SMOKE, jitter="measured")
    assert constant.infrastructure.cities.jitter == "none" and measured.infrastructure.cities.jitter == "measured"
    assert all(link.shaping.jitter == 0 for link in built.links)
    assert any(link.shaping.jitter > 0 for link in jittered.links)  # the measured spread, on the links it built
    assert [link.shaping.delay for link in built.links] == [link.shaping.delay for link in jittered.links]
    with pytest.raises(ValueError, match="--jitter: the scenario has no infrastructure.cities"):
        cli.with_jitter(cli._load(REPO / "scenarios/uav-smoke.yaml")[0], "measured", Path("uav-smoke.yaml"))


def test_fig9_with_measured_jitter_is_an_aside_of_its_own_on_the_same_smoke():
    aside = next(a for a in paper_figures.asides() if a.figure == "fig9-jitter")
    assert aside.scenario == MMOG_SMOKE == paper_figures.SCALES["smoke"][aside.kind]  # the smoke Fig. 9 compares
    assert aside.overrides == ["--jitter", "measured"]
    names = [t.name for t in paper.plan(paper_figures.Options(repeats=1, only=("fig9-jitter",)))]
    assert names == [f"run {MMOG_SMOKE} --policy epulsar --jitter measured", "PySpark comparison of the jitter run"]
    assert "--jitter measured" in paper_figures.scale_statement(paper_figures.Options(repeats=1), [])
    assert headlines.PAPER["fig9-jitter"].section == headlines.PAPER["fig9"].section
    assert "fig9-jitter" in headlines.AGREEMENT_RULES


def _run_dir(root: Path, name: str, jitter: str | None) -> Path:
    run_dir = root / name
    (run_dir / "traces").mkdir(parents=True)
    (run_dir / "traces" / "t.jsonl").write_text("{}\n")
    (run_dir / "run.json").write_text(json.dumps({"complete": True, "started": 5.0, "seed": 11}))
    cities = {"names": ["nyc", "atl"], **({"jitter": jitter} if jitter else {})}
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({"infrastructure": {"cities": cities},
                                                           "control": {"policy": "epulsar", "distance": "rtt"}}))
    return run_dir


def test_a_run_with_constant_links_is_never_reused_for_the_jitter_aside(tmp_path):
    constant = _run_dir(tmp_path, "mmog-smoke-aaa111", None)  # written before the option: constant links
    assert paper_steps.reusable_run(tmp_path, "mmog-smoke", "epulsar", 11, "rtt", "none") == constant
    assert paper_steps.reusable_run(tmp_path, "mmog-smoke", "epulsar", 11, "rtt", "measured") is None
    jittered = _run_dir(tmp_path, "mmog-smoke-bbb222", "measured")
    assert paper_steps.reusable_run(tmp_path, "mmog-smoke", "epulsar", 11, "rtt", "measured") == jittered


def test_fig4_with_measured_jitter_runs_the_placement_program_with_its_flag_into_files_of_its_own(tmp_path,
                                                                                               monkeypatch):
    bench = next(b for b in paper_figures.run_benches() if b.name == "placement-jitter")
    assert bench.module == "testbed.systems.pubsub.bench.placement" and bench.args == ("--jitter", "measured")
    assert bench.figures == ("fig4-jitter",) and bench.images == ("fig4-jitter.png", "fig4-jitter_configured.png")
    argvs = []
    monkeypatch.setattr(paper_steps, "_subprocess", lambda argv: argvs.append(argv) or 0)
    monkeypatch.setattr(paper_figures, "BENCH_DIR", tmp_path)
    (tmp_path / "paper").mkdir()
    paper_steps.bench_step(bench, paper_steps.State(paper_figures.Options(out=tmp_path / "paper", quick=True)))
    assert argvs[-1][-4:] == ["testbed.systems.pubsub.bench.placement", "--jitter", "measured", "--quick"]
    constant, measured = placement.FILES["none"], placement.FILES["measured"]
    assert constant.result.name == "placement.json" and measured.result.name == "placement-jitter.json"
    assert {constant.inputs, constant.scenarios, constant.spark}.isdisjoint({measured.inputs, measured.scenarios,
                                                                             measured.spark})
    assert placement.mmog_scenario(5, jitter="measured").infrastructure.cities.jitter == "measured"
    assert placement.mmog_scenario(5).infrastructure.cities.jitter == "none"


def test_the_jitter_entries_have_their_own_verdict_beside_the_constant_links(tmp_path, monkeypatch):
    from tests.test_paper import placement_json

    monkeypatch.setattr(paper_figures, "BENCH_DIR", tmp_path)
    (tmp_path / "placement.json").write_text(json.dumps(placement_json()))
    hashed_close = {"epulsar": (0.150, 0.30), "allpairs": (0.150, 0.30), "pulsar-hash": (0.160, 0.35)}
    (tmp_path / "placement-jitter.json").write_text(json.dumps(placement_json(mmog=hashed_close)))
    by_fig = {e.figure: e for e in paper_entries.entries(paper_steps.State(paper_figures.Options(out=tmp_path / "p")))}
    assert by_fig["fig4"].headline.verdict == "yes" and by_fig["fig4-jitter"].headline.verdict == "no"
    assert by_fig["fig4-jitter"].images == ["fig4-jitter.png", "fig4-jitter_configured.png"]
    assert by_fig["fig9-jitter"].images == ["fig9-jitter.png", "fig9-jitter-p95.png"]
    assert by_fig["fig9-jitter"].missing and by_fig["fig9"].missing  # no runs here: said, never dropped


# ---------------------------------------------------------------------------------------- Fig. 3b up to 32 nodes

def _nc(rows: list[dict]) -> dict:
    return {"time": 1.0, "paper": nc.PAPER, "accuracy": rows, "overhead": [],
            "max_nodes_note": nc.largest_size(rows, sorted({r["nodes"] for r in rows}))}


def _row(nodes: int, converged: float | None, error: float = 2.0, rtt: float = 50.0) -> dict:
    return {"nodes": nodes, "rtt_ms": rtt, "convergence_s": converged, "median_error_ms": error,
            "p95_error_ms": 2 * error, "median_relative": error / rtt, "ok": converged is not None}


def test_the_node_sweep_says_the_largest_size_that_converged_and_each_that_did_not():
    failed = {"nodes": 32, "rtt_ms": 50.0, "failed": "TimeoutError: 31 of 32 agents joined", "ok": False}
    rows = [_row(2, 12.0), _row(8, 30.5), _row(16, None), failed, _row(8, 20.0, rtt=100.0)]
    note = nc.largest_size(rows, [2, 8, 16, 32])
    assert note.startswith("largest cluster converged on this machine: 8 agents (asked: 2, 8, 16, 32")
    assert "could not run: 32 (TimeoutError: 31 of 32 agents joined)" in note
    assert "never converged within 180 s: 16" in note
    assert nc.largest_size([_row(2, 5.0), _row(32, 90.0)], [2, 32]).startswith(
        "largest cluster converged on this machine: 32 agents")
    assert nc.largest_size([failed], [32]).startswith("no cluster size converged")


def test_fig3b_s_entry_has_convergence_and_accuracy_per_size(tmp_path, monkeypatch):
    failed = {"nodes": 32, "rtt_ms": 50.0, "failed": "TimeoutError: 31 of 32 agents joined", "ok": False}
    data = _nc([_row(2, 12.0, 1.5), _row(16, 75.5, 2.5), failed, _row(8, 20.0, 4.0, rtt=100.0)])
    table = headlines.fig3b_table(data)
    assert table[2:] == ["| 2 | 12 s | 1.50 ms | 3.00 ms | 3.00 % | yes |",
                         "| 16 | 75.5 s | 2.50 ms | 5.00 ms | 5.00 % | yes |",
                         "| 32 | could not run: TimeoutError: 31 of 32 agents joined | - | - | - | no |"]
    assert headlines.ours_fig3b(data).scale.startswith("2-16 nodes")  # the failed size is no accuracy row
    monkeypatch.setattr(paper_figures, "BENCH_DIR", tmp_path)
    (tmp_path / "nc.json").write_text(json.dumps(data))
    entry = {e.figure: e for e in paper_entries.entries(paper_steps.State(paper_figures.Options(out=tmp_path / "p")))}
    assert entry["fig3b"].table == table and entry["fig3b"].notes[-1] == data["max_nodes_note"]
    (drawn,) = bench_figures.draw("nc", data, tmp_path)  # the failed size marked, not a crash
    assert "convergence time (s)" in drawn["ylabel"] and "could not run / never converged" in drawn["series"]


def test_even_the_quick_paper_sweeps_the_cluster_up_to_32_agents():
    bench = next(b for b in paper_figures.BENCHES if b.name == "nc")
    assert bench.quick[bench.quick.index("--nodes") + 1].split(",")[-1] == "32"


def test_a_variant_s_figures_are_titled_as_siblings_of_the_paper_s(tmp_path):
    from analysis import figures

    aoi = [{"consumer": "gs1", "producer": "a1", "t_s": float(t), "p50_s": 0.03, "p95_s": 0.05, "max_s": 0.06}
           for t in range(10)]
    aside = next(a for a in paper_figures.asides() if a.figure == "fig9-jitter")
    drawn = figures.fig9_policies([{"policy": "epulsar", "aoi": aoi, "threshold_s": 0.1}], tmp_path / "fig9.png",
                                  variant=aside.variant)
    assert drawn["title"].startswith("Fig. 9 (measured jitter): ")
    assert figures.fig9_policies([{"policy": "epulsar", "aoi": aoi, "threshold_s": 0.1}],
                                 tmp_path / "plain.png")["title"].startswith("Fig. 9: ")
    assert placement.FILES["measured"].variant == "measured jitter" and placement.FILES["none"].variant == ""
