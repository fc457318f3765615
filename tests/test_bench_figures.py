"""Every microbenchmark's figure from the JSON it writes (synthetic here): analysis.bench_figures (the
harness's and Fig. 3b) and ePulsar's Fig. 6 and 7 (testbed/systems/pubsub/bench/), under the file
name `make paper` copies, with its figure number, units and reference lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import bench_figures
from testbed.systems.pubsub.bench import migration_figures, monitoring_figures
from analysis.stats import median_ci
from testbed.bench import overload

ROOT = Path(__file__).resolve().parent.parent


def nc_json():
    accuracy = [{"nodes": n, "rtt_ms": 50.0, "median_error_ms": 1.0 + n / 16, "p95_error_ms": 3.0 + n / 8,
                 "median_relative": 0.02} for n in (2, 4, 8, 16, 32)]
    accuracy += [{"nodes": 8, "rtt_ms": r, "median_error_ms": r * 0.03, "p95_error_ms": r * 0.05,
                  "median_relative": 0.03} for r in (20.0, 100.0, 200.0)]
    return {"paper": {"median_error_ms": 3.5, "median_relative": 0.06, "cpu_percent": 1.0, "rss_mb": 15.0},
            "accuracy": accuracy, "overhead": []}


def monitoring_json():
    rows = [{"policy": p, "topics": t, "clients_per_topic": c, "period_s": 5.0,
             "zk_wire_net_Bps": 40.0 * t * (c if p == "allpairs" else 1)}
            for p in ("epulsar", "allpairs") for t in (1, 8, 32) for c in (1, 4, 16)]
    return {"rows": rows}


def migration_json(enhanced_topics: int = 128):
    """Rows as testbed.systems.pubsub.bench.migration writes them: per configuration the medians with 95 % intervals."""
    ci = lambda center: median_ci([center * (1 + i / 20) for i in range(-5, 6)]).as_dict()  # noqa: E731
    row = lambda fig, n, wan, wf, ex, **data: {"figure": fig, "topics": n, "wan_ms": wan, "workflow": wf,  # noqa: E731
                                                "executors": ex, "harness": {"valid": True}, **data}
    rows = [row("7a", 128, wan, wf, 16 if wf == "enhanced" else 1,
                downtime=ci((0.03 if wf == "enhanced" else 0.1 * wan / 10)),
                reconnect=ci((0.02 if wf == "enhanced" else 0.09 * wan / 10)), completion=ci(1.0))
            for wan in (10, 20, 40, 80) for wf in ("enhanced", "baseline")]
    rows += [row("7b", n, 40, wf, ex, completion=ci(0.05 * n / ex), downtime=ci(0.05))
             for n in (1, 8, 32, 128) for wf, ex in (("enhanced", 1), ("enhanced", 16), ("baseline", 1))]
    rows.append(row("7b", 8, 40, "enhanced", 4, completion=None, downtime=None))  # nothing measured: not drawn
    rows[-2]["harness"] = {"valid": False}
    return {"rows": rows, "downtimes": [], "migrations": []}


def overload_json():
    rows = []
    for path, scale in (("emulated", 1e3), ("direct", 1e4)):
        for size in (1000, 100):
            for i, offered in enumerate((5, 10, 20, 40, 80)):
                rows.append({"path": path, "size": size, "topics": overload.SHAPE[0], "consumers": overload.SHAPE[1],
                             "repeat": 1, "offered": offered * scale, "achieved": offered * scale,
                             "p95_ms": 3.0 if i < 3 else 30.0, "foreign_cpu": 0.5 if i == 1 and size == 100 else 0.0,
                             "broker_cpu": 0.5, "gen_cpu": 0.2, "gen_cpu_max": 0.1, "relay_cpu": 0.3,
                             "relay_cpu_max": 0.2, "machine_busy": 1.0})
    rows.append({**rows[0], "topics": 64, "consumers": 1, "repeat": 0})
    return {"rows": rows, "analysis": overload.analyse(rows, 2),
            "how": {"shape": {"topics": overload.SHAPE[0], "consumers_per_topic": overload.SHAPE[1]},
                    "paths": overload.PATH_TITLES, **overload.figure_facts()}}


def png(info):
    path = Path(info["path"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert info["series"] and info["xlabel"] and "(" in info["ylabel"]
    return path.name


def test_fig3b_6_and_overload_keep_their_names_numbers_and_units(tmp_path):
    (fig3b,) = bench_figures.draw("nc", nc_json(), tmp_path)
    assert png(fig3b) == "fig3b.png" and fig3b["title"].startswith("Fig. 3b") and "(ms)" in fig3b["ylabel"]
    (fig6,) = monitoring_figures.draw(monitoring_json(), tmp_path)
    assert png(fig6) == "fig6.png" and fig6["title"].startswith("Fig. 6") and "bytes/s" in fig6["ylabel"]
    assert len(fig6["series"]) == 6
    (drawn,) = bench_figures.draw("overload-quick", overload_json(), tmp_path)
    assert png(drawn) == "overload-quick.png" and "(ms)" in drawn["ylabel"] and "msg/s" in drawn["xlabel"]
    assert len(drawn["series"]) == 4  # two sizes on each path


def test_fig7_draws_both_downtimes_and_intervals_from_the_rows(tmp_path):
    fig7a, fig7b = migration_figures.draw(migration_json(), tmp_path)
    assert png(fig7a) == "fig7a.png" and fig7a["title"].startswith("Fig. 7a")
    assert "128 topics at once, 16 executors" in fig7a["title"] and "saturated" not in fig7a["title"]
    assert fig7a["series"] == ["Pulsar (baseline), until reconnected (paper)",
                               "Pulsar (baseline), until traffic through the new broker (ours)",
                               "ePulsar (enhanced), until reconnected (paper)",
                               "ePulsar (enhanced), until traffic through the new broker (ours)"]
    assert "95 % CI" in fig7a["ylabel"] and "(ms)" in fig7a["ylabel"]
    assert png(fig7b) == "fig7b.png" and "40 ms" in fig7b["title"] and "saturated in 1 of 12" in fig7b["title"]
    assert "from the decision" in fig7b["ylabel"] and "(ms)" in fig7b["ylabel"]
    # a configuration with nothing measured is left out, not drawn as zero
    assert fig7b["series"] == ["Pulsar (baseline)", "ePulsar (enhanced), 1 executor", "ePulsar (enhanced), 16 executors"]


def test_old_json_without_what_the_figure_reads_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="bench-migration"):
        migration_figures.draw({"rows": []}, tmp_path)
    old = overload_json()
    del old["how"]["max_foreign_cores"]
    with pytest.raises(ValueError, match="--reanalyse"):
        bench_figures.draw("overload", old, tmp_path)


def test_the_command_redraws_every_json_present(tmp_path):
    for name, data in (("nc", nc_json()), ("overload-quick", overload_json())):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    res = subprocess.run([sys.executable, "-m", "analysis.bench_figures", "--dir", str(tmp_path)], capture_output=True,
                         text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["fig3b.png", "overload-quick.png"]
