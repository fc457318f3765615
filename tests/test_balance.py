"""analysis.balance: the series over time and the side-by-side numbers from a hand-made event list,
the run directory's facts (thresholds, surge), and the two figures as PNG."""

from __future__ import annotations

import json

import pytest

from analysis import balance

T0 = 1000.0


def loads(t: float, rnd: int, rates: dict, imbalance) -> dict:
    return {"type": "loads", "time": T0 + t, "round": rnd, "imbalance": imbalance,
            "brokers": {b: {"rate": r, "rate_out": 2 * r, "cpu": 0.1, "memory": 0.1, "network_in": 0.0,
                            "network_out": r / 100, "topics": int(r // 10)} for b, r in rates.items()}}


EVENTS = [
    {"type": "run_start", "time": T0},
    loads(5, 1, {"a": 0, "b": 0}, None),                  # nothing flows: no imbalance
    loads(10, 2, {"a": 30, "b": 10}, 0.5),                # CoV of (30, 10): sd 10 / mean 20
    {"type": "lm_usage", "time": T0 + 10, "round": 2, "brokers": {"a": {"bundles": 3}, "b": {"bundles": 1}}},
    {"type": "bundle_split", "time": T0 + 10.1, "round": 2, "bundle": "0x0_0x8", "broker": "a"},
    {"type": "bundle_unload", "time": T0 + 10.2, "round": 2, "from_broker": "a", "to_broker": "b",
     "topics": ["t1", "t2"], "by": "split"},
    loads(15, 3, {"a": 20, "b": 20}, 0.0),
    {"type": "overload_shed", "time": T0 + 16, "round": 3, "broker": "b", "topics": ["t3"]},
]


def test_over_time_aligns_brokers_bundles_and_imbalance_on_rounds():
    series = balance.over_time(EVENTS, balance.run_start(EVENTS))
    a = series["brokers"]["a"]
    assert a["t_s"] == [5, 10, 15] and a["rate_out"] == [0, 60, 40] and a["topics"] == [0, 3, 2]
    assert a["link_out"] == [0.0, 0.3, 0.2]
    assert a["bundles"] == [None, 3, None]                 # lm_usage only in round 2
    assert series["imbalance"] == [(10, 0.5), (15, 0.0)]   # the round without flow left out
    assert sum(v for _, v in series["imbalance"]) / len(series["imbalance"]) == 0.25
    kinds = [(m["kind"], m["by"], m["broker"], m["topics"]) for m in series["marks"]]
    assert kinds == [("split", None, "a", []), ("unload", "split", "a", ["t1", "t2"]), ("overload shed", None, "b", ["t3"])]


def test_run_start_falls_back_to_run_json_and_fails_without_either():
    assert balance.run_start([{"type": "loads", "time": 5.0}], fallback=2.0) == 2.0
    with pytest.raises(balance.BadRun):
        balance.run_start([])


def summary(imbalance: float, violations: tuple[float, float], downtime: float | None) -> dict:
    """run.json's summary as testbed.systems.pubsub.balance and the trace summary write it."""
    return {"migrations": 4, "classes": {"x": {"messages": 100, "violation_ratio": violations[0]},
                                         "y": {"messages": 300, "violation_ratio": violations[1]}},
            "balance": {"rounds": 10, "imbalance_mean": imbalance, "unloads": 2, "overload_sheds": 1,
                        "downtime_p50_s": downtime, "downtime_max_s": downtime}}


def run(policy: str, run_id: str, **kw) -> dict:
    return {"dir": f"results/{run_id}", "run_id": run_id, "scenario": "hot", "workload": "hotspot", "policy": policy,
            "summary": summary(**kw)}


def test_run_row_pools_topic_classes_and_side_by_side_averages_repeats():
    row = balance.run_row(run("epulsar", "r1", imbalance=0.4, violations=(0.2, 0.0), downtime=0.1))
    assert row["violation_ratio"] == pytest.approx(20 / 400)  # 20 of 100 + 0 of 300
    assert (row["migrations"], row["unloads"], row["sheds"]) == (4, 2, 1)
    rows = [row, balance.run_row(run("epulsar", "r2", imbalance=0.6, violations=(0.0, 0.0), downtime=0.3)),
            balance.run_row(run("pulsar-hash", "r3", imbalance=1.0, violations=(0.4, 0.4), downtime=None))]
    table = balance.side_by_side(rows)
    assert [(r["policy"], r["runs"]) for r in table] == [("epulsar", 2), ("pulsar-hash", 1)]  # registry order
    ep, hashed = table
    assert ep["imbalance_mean"].value == pytest.approx(0.5) and ep["imbalance_mean"].has_interval
    assert ep["violation_ratio"].value == pytest.approx(0.025) and ep["violation_ratio"].low >= 0  # clipped at 0
    assert ep["downtime_p50_s"].value == pytest.approx(0.2)
    assert hashed["downtime_p50_s"] is None and not hashed["imbalance_mean"].has_interval
    lines = balance.markdown_table(table)
    assert "| hot | Pulsar (hash) | 1 | 40.0 % | 1.00 | 4.0 | 2.0 | 1.0 | - | - |" in lines
    assert balance.headline(table).agrees is None  # no paper claim on balance: side by side only


def test_run_without_balance_summary_is_named():
    old = run("epulsar", "old", imbalance=0.1, violations=(0, 0), downtime=None)
    del old["summary"]["balance"]
    with pytest.raises(balance.BadRun, match="results/old/run.json: summary.balance"):
        balance.run_row(old)


def write_run(path, policy: str, events: list[dict]):
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"run_id": path.name, "scenario": "hot", "started": T0 - 3,
                                               "summary": summary(0.25, (0.1, 0.0), 0.2)}))
    (path / "scenario.yaml").write_text(f"name: hot\nworkload: {{kind: hotspot}}\ncontrol:\n  policy: {policy}\n"
                                        "  overload: {network: 0.85, output_rate: 357.0/s}\n")
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (path / "hotspot-plan.json").write_text(json.dumps({"publishers": [{"at": 0.0}, {"at": 25.0}, {"at": 25.0}]}))
    (path / "logs").mkdir()
    (path / "logs" / "hotspot-start").write_text(f"{T0 + 2:.6f}\n")
    return path


def test_load_run_reads_thresholds_and_the_surge_and_draws_both_figures(tmp_path):
    ep = balance.load_run(write_run(tmp_path / "hot-ep", "epulsar", EVENTS))
    assert (ep["policy"], ep["rth_out"], ep["link_threshold"]) == ("epulsar", 357.0, 0.85)
    assert ep["surge_s"] == pytest.approx(27.0)  # 25 s after the workload started, 2 s after run_start
    lm = balance.load_run(write_run(tmp_path / "hot-lm", "pulsar-lm", EVENTS))
    drawn = balance.over_time_figure([lm, ep], tmp_path / "out" / "balance.png")
    assert drawn["series"] == ["ePulsar", "Pulsar (load manager)"]  # registry order, whatever the input order
    table = balance.side_by_side([balance.run_row(ep), balance.run_row(lm)])
    compared = balance.comparison_figure(table, tmp_path / "out" / "compare.png")
    for path in (drawn["path"], compared["path"]):
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_draw_runs_skips_runs_without_loads(tmp_path):
    write_run(tmp_path / "hot-ep", "epulsar", EVENTS)
    write_run(tmp_path / "hot-lm", "pulsar-lm", EVENTS)
    write_run(tmp_path / "old", "epulsar", [{"type": "run_start", "time": T0}])
    drawn, skipped = balance.draw_runs(sorted(tmp_path.iterdir()), tmp_path / "figs")
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert names == ["balance-compare.png", "balance-hot-hot-ep.png", "balance-hot-hot-lm.png", "balance-hot.png"]
    assert len(drawn) == 4 and skipped == []


def test_a_topic_shed_every_round_that_never_moves_says_why():
    """The end screen names a topic ePulsar's overload branch kept shedding without moving it, with why
    each candidate refused (as the round reported it); a topic that moved once is not listed."""
    from testbed.systems.pubsub.balance import end_screen, summarize

    refused = [{"broker": "bzone1", "refused": "output rate 2100 msg/s > Rth_out 2000"},
               {"broker": "bzone2", "refused": "cpu 0.91 > 0.85"}]
    shed = [{"type": "overload_shed", "round": r, "broker": "bzone1", "topics": ["hot-1", "hot-2"],
             "moved": {"hot-1": None, "hot-2": "bzone3" if r == 2 else None},
             "candidates": {"hot-1": refused, "hot-2": []}} for r in range(1, 4)]
    loads = [{"type": "loads", "round": r, "imbalance": 0.5, "brokers": {"bzone1": {"network_out": 0.2}}}
             for r in range(1, 4)]
    balance = summarize([*loads, *shed])
    assert balance["shed_never_moved"] == {"hot-1": {"rounds": 3, "why": "bzone1: output rate 2100 msg/s > Rth_out "
                                                                          "2000; bzone2: cpu 0.91 > 0.85"}}
    assert ("load balance: hot-1 shed in 3 rounds, never moved: bzone1: output rate 2100 msg/s > Rth_out 2000; "
            "bzone2: cpu 0.91 > 0.85") in end_screen(balance)
    unranked = summarize([*loads, {**shed[0], "moved": {"hot-2": None}, "topics": ["hot-2"]}])
    assert unranked["shed_never_moved"]["hot-2"]["why"] == "the policy ranked no broker for it"
