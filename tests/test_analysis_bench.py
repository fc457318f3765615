"""analysis.bench's data: large sizes are generated in chunks that continue one run."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis import bench


def test_chunks_continue_one_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "CHUNK_ROWS", 10_000)
    relinks = bench.write_rows(tmp_path, 25_000)
    traces = pq.read_table(tmp_path / "traces.parquet")
    events = pq.read_table(tmp_path / "events.parquet")
    assert traces.num_rows == 25_000
    kinds = events.column("type").to_pylist()
    assert kinds.count("run_start") == 1 and kinds.count("relink") == relinks
    sends = traces.column("send_time")
    first, last = pc.min_max(sends).values()
    # 25k rows at 24,000 rows/s of the synthetic run: about a second, not three overlapping copies of 0.4 s
    assert last.as_py() - first.as_py() > 0.9
    seqs = traces.column("seq")
    assert pc.max(seqs).as_py() > 0.9 * 25_000 / bench.ROWS_PER_SECOND * bench.RATE  # numbering goes on
