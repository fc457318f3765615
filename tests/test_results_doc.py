"""The snippets of docs/guide/results.md run as printed, against a run folder whose answers are known:
a reader who copies them gets what the page says."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis import traces
from tests.test_analysis import T0, event, fixed_latency_rows, write_run

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "guide" / "results.md"
PRINTED_RUN = "results/uav-smoke-h4mraq"


def snippet(language: str, marker: str) -> str:
    """The page's one `language` code block that contains `marker`."""
    (code,) = [b for b in re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), re.S) if marker in b]
    return code


def run_snippet(code: str, run: Path) -> dict:
    assert PRINTED_RUN in code, "the snippet no longer reads the run folder the page names"
    namespace: dict = {}
    exec(compile(code.replace(PRINTED_RUN, str(run)), str(PAGE), "exec"), namespace)
    return namespace


@pytest.fixture
def run(tmp_path) -> Path:
    """A converted run: 3 topics at 10 msg/s for 5 s with fixed latencies of 10, 20 and 50 ms, its
    harness saturated for the first second after the run's start."""
    folder = write_run(tmp_path / "uav-test-r1", fixed_latency_rows(), [event("run_start", T0)])
    meta = json.loads((folder / "run.json").read_text())
    meta["harness"] = {"valid": False, "seconds": 5, "saturated_seconds": 1, "validity": "valid 4 of 5 s",
                       "saturated": [{"from_s": 0.0, "to_s": 1.0, "cause": "publishers late"}]}
    (folder / "run.json").write_text(json.dumps(meta))
    traces.convert_run(folder)
    return folder


def test_the_pandas_snippet_leaves_out_the_saturated_second_and_gives_the_latencies(run, capsys):
    got = run_snippet(snippet("python", "import pandas"), run)
    held = got["held"]
    assert len(got["traces"]) == 150 and len(held) == 120   # 10 messages per topic sent in the bad second
    by_class = held.groupby("topic_class").latency_ms
    assert by_class.size().to_dict() == {"follow_leader": 80, "sensor_data": 40}
    # epoch seconds as float64 keep ~0.2 us: latencies come out within 0.001 ms
    assert by_class.max().to_dict() == pytest.approx({"follow_leader": 20.0, "sensor_data": 50.0}, abs=1e-3)
    assert by_class.min().to_dict() == pytest.approx({"follow_leader": 10.0, "sensor_data": 50.0}, abs=1e-3)
    assert "valid 4 of 5 s - 150 deliveries, 30 in saturated seconds" in capsys.readouterr().out


def test_the_pyarrow_snippet_gives_each_topics_median(run):
    medians = {row["topic"]: row["latency_ms_approximate_median"]
               for row in run_snippet(snippet("python", "import pyarrow.compute"), run)["medians"].to_pylist()}
    assert medians == pytest.approx({"follow_leader-swarm1": 10.0, "follow_leader-swarm2": 20.0,
                                     "sensor_data-swarm1": 50.0})


def test_the_spark_snippet_counts_and_ranks_each_class(spark, run):
    rows = {r["topic_class"]: r for r in run_snippet(snippet("python", "SparkSession"), run)["by_class"].collect()}
    assert {k: r["messages"] for k, r in rows.items()} == {"follow_leader": 100, "sensor_data": 50}
    assert rows["sensor_data"]["p95_ms"] == pytest.approx(50.0) and rows["follow_leader"]["p95_ms"] == pytest.approx(20.0)


def test_the_conversion_command_writes_the_parquet_files_the_snippets_read(tmp_path):
    folder = write_run(tmp_path / "uav-test-r1", fixed_latency_rows(), [event("run_start", T0)])
    (command,) = [line for line in snippet("sh", "analysis").splitlines() if line.strip()]
    assert command.startswith(".venv/bin/python -m analysis convert ") and PRINTED_RUN in command
    argv = [sys.executable, *shlex.split(command.replace(PRINTED_RUN, str(folder)))[1:]]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert pq.read_metadata(folder / "traces.parquet").num_rows == 150
    assert pq.read_table(folder / "run.parquet").column("trace_rows").to_pylist() == [150]
