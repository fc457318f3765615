"""Trace analysis: Parquet conversion, the Spark jobs on data with known answers, figures, the CLI.

One SparkSession (local[2]) for the module; the Spark tests skip with the reason when Java or
pyspark is missing. The conversion and figure tests need neither.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis import figures, traces

T0 = 1_795_000_000.0


# ---------------------------------------------------------------------------------------- helpers

def row(topic, producer, consumer, seq, send, latency, run_id="r1", **extra):
    return {"run_id": run_id, "topic": topic, "producer": producer, "consumer": consumer,
            "msg_id": f"{producer}:{seq}", "seq": seq, "send_time": send, "receive_time": send + latency,
            "broker": "bzone1", "producer_site": "zone1", "consumer_site": "zone1", **extra}


def event(kind, time, run_id="r1", **fields):
    base = {f.name: None for f in traces.EVENT_SCHEMA}
    base.update(run_id=run_id, type=kind, time=time, **fields)
    return base


def write_run(root: Path, rows: list[dict], events: list[dict], complete=True, interrupted=None,
              cut_last_line=False, workload="uav-swarm", figures_=("fig8",)) -> Path:
    root.mkdir(parents=True)
    meta = {"run_id": "r1", "scenario": "uav-test", "git_commit": "abc1234", "backend": "mininet",
            "shaper": "delayline", "machine": "vm", "seed": 7, "scale": 1.0, "complete": complete}
    if interrupted:
        meta["interrupted"] = interrupted
    (root / "run.json").write_text(json.dumps(meta))
    (root / "scenario.yaml").write_text(
        "name: uav-test\nseed: 7\nduration: 20s\nscale: 1.0\n"
        "infrastructure:\n  cloud: {name: cloud, one_way: 0.04s}\n"
        f"workload:\n  kind: {workload}\n  topics:\n  - {{name: follow_leader, threshold: 0.04s}}\n"
        "  - {name: sensor_data, threshold: 40ms}\n"
        "control:\n  policy: epulsar\n  migration: {workflow: enhanced, executors: 16}\n"
        f"outputs:\n  figures: {list(figures_)}\n")
    (root / "events.jsonl").write_text("".join(json.dumps({k: v for k, v in e.items() if v is not None}) + "\n"
                                               for e in events))
    (root / "traces").mkdir()
    by_consumer: dict[str, list[str]] = {}
    for r in rows:
        by_consumer.setdefault(r["consumer"], []).append(json.dumps(r))
    for i, (consumer, lines) in enumerate(sorted(by_consumer.items())):
        text = "\n".join(lines) + "\n"
        if cut_last_line and i == 0:
            text += lines[-1][: len(lines[-1]) // 2]  # the writer was killed mid-line
        (root / "traces" / f"{consumer}.jsonl").write_text(text)
    return root


def fixed_latency_rows():
    """3 topics, 10 msg/s for 5 s, fixed latencies 10, 20 and 50 ms."""
    rows = []
    for topic, latency in (("follow_leader-swarm1", 0.010), ("follow_leader-swarm2", 0.020),
                           ("sensor_data-swarm1", 0.050)):
        producer = topic.split("-")[1] + "-u1"
        rows += [row(topic, producer, topic.split("-")[1] + "-u2", i, T0 + i / 10, latency) for i in range(50)]
    return rows


# ---------------------------------------------------------------------------------------- conversion

def test_conversion_keeps_the_rows_of_a_truncated_file_and_marks_the_run_partial(tmp_path):
    rows = fixed_latency_rows()
    run = write_run(tmp_path / "uav-test-r1", rows, [event("run_start", T0)], complete=False,
                    interrupted="SIGTERM", cut_last_line=True)
    with (run / "events.jsonl").open("a") as handle:
        handle.write('{"type": "relink", "ti')
    result = traces.convert_run(run)
    assert result.trace_rows == len(rows)          # the cut line was an extra copy: every complete row kept
    assert result.partial and result.truncated_files == ["traces/swarm1-u2.jsonl", "events.jsonl"]
    assert result.event_rows == 1
    table = pq.read_table(result.traces)
    assert table.schema.equals(traces.TRACE_PARQUET_SCHEMA) and table.num_rows == len(rows)
    meta = traces.parquet_run_metadata(result.traces)
    assert meta["partial"] is True and meta["status"] == "interrupted" and meta["interrupted"] == "SIGTERM"
    assert meta["git_commit"] == "abc1234" and meta["backend"] == "mininet" and len(meta["scenario_hash"]) == 16
    kv = pq.read_metadata(result.events).metadata
    assert kv[b"testbed.partial"] == b"True" and kv[b"testbed.scenario"] == b"uav-test"
    run_row = traces.read_run(run)
    assert run_row["partial"] and run_row["status"] == "interrupted" and run_row["seed"] == 7
    assert run_row["thresholds"] == {"follow_leader": 0.04, "sensor_data": 0.04}
    assert run_row["workflow"] == "enhanced" and run_row["wan_one_way_s"] == pytest.approx(0.04)
    assert not traces.needs_conversion(run)


def test_rows_the_client_writes_convert_with_every_column(tmp_path):
    """The trace schema has one home (testbed.systems.pubsub.trace_schema): what the subscriber's fast
    writer puts in a file is what the conversion reads, every column filled."""
    from testbed.systems.pubsub.client import TraceWriter

    run = write_run(tmp_path / "uav-test-r1", [], [event("run_start", T0)])
    writer = TraceWriter(run / "traces" / "swarm1-u2.jsonl")
    prefix, suffix = writer.row_affixes("r1", "follow_leader-swarm1", "swarm1-u2", "bzone1", "zone1", "zone2")
    writer.write_delivery(prefix, "swarm1-u1", "swarm1-u1:4", 4, T0, T0 + 0.02, suffix)
    writer.close()
    table = pq.read_table(traces.convert_run(run).traces)
    assert table.schema.equals(traces.TRACE_PARQUET_SCHEMA) and table.num_rows == 1
    (got,) = table.to_pylist()
    assert got == {"run_id": "r1", "topic": "follow_leader-swarm1", "producer": "swarm1-u1", "consumer": "swarm1-u2",
                   "msg_id": "swarm1-u1:4", "track_id": None, "seq": 4, "send_time": T0, "receive_time": pytest.approx(T0 + 0.02),
                   "broker": "bzone1", "producer_site": "zone1", "consumer_site": "zone2",
                   "producer_site_at_send": "zone1", "consumer_site_at_receive": "zone2"}  # nobody moved


def test_conversion_skips_bad_lines_fills_ids_and_reads_a_complete_run(tmp_path):
    rows = fixed_latency_rows()[:5]
    run = write_run(tmp_path / "uav-test-r1", rows, [event("run_start", T0), event("relink", T0 + 1, node="swarm1")])
    path = run / "traces" / "swarm1-u2.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    del first["msg_id"], first["run_id"]
    lines[0] = json.dumps(first)
    path.write_text("\n".join(lines[:2] + ["not json", '{"topic": "x"}'] + lines[2:]))  # no final newline
    result = traces.convert_run(run)
    assert result.trace_rows == 5 and result.skipped_lines == 2 and result.truncated_files == []
    assert result.partial  # lines were lost
    first_row = pq.read_table(result.traces).to_pylist()[0]
    assert first_row["msg_id"] == "swarm1-u1:0" and first_row["run_id"] == "r1"
    events = pq.read_table(result.events).to_pylist()
    assert [e["type"] for e in events] == ["run_start", "relink"] and events[1]["node"] == "swarm1"
    clean = write_run(tmp_path / "clean", fixed_latency_rows(), [])
    assert not traces.convert_run(clean).partial


def test_trace_rows_say_where_each_end_was_from_the_relink_events(tmp_path):
    """A client writes its initial site once; the conversion places each end at its node's site at the
    send (producer) and receive (consumer) time, from the run's relink events (issue 13 item 9)."""
    rows = [row("follow_leader-swarm1", "swarm1-u1", "swarm1-u2", i, T0 + i, 0.5) for i in range(8)]
    rows += [row("follow_leader-swarm10", "swarm10-u1", "swarm10-u2", i, T0 + i, 0.01) for i in range(8)]
    rows += [row("avatar-3", "a3", "gs2", i, T0 + i, 0.01, producer_site="nyc", consumer_site="lax") for i in range(2)]
    moves = [event("run_start", T0),
             event("relink", T0 + 2.0, node="swarm1", from_site="zone1", to_site="zone2"),
             event("relink", T0 + 5.2, node="swarm1", from_site="zone2", to_site="zone3"),
             event("relink", T0 + 3.0, node="swarm1-u", to_site="zone9")]  # no client is named swarm1-u-...
    run = write_run(tmp_path / "uav-test-r1", rows, moves)
    table = pq.read_table(traces.convert_run(run).traces).to_pylist()
    swarm1 = sorted((r["seq"], r["producer_site"], r["producer_site_at_send"], r["consumer_site_at_receive"])
                    for r in table if r["producer"] == "swarm1-u1")
    # seq k is sent at T0 + k and received at T0 + k + 0.5: the consumer at 5.5 s is already in zone3
    assert [s[2] for s in swarm1] == ["zone1", "zone1", "zone2", "zone2", "zone2", "zone2", "zone3", "zone3"]
    assert [s[3] for s in swarm1] == ["zone1", "zone1", "zone2", "zone2", "zone2", "zone3", "zone3", "zone3"]
    assert {s[1] for s in swarm1} == {"zone1"}  # the original column: the initial site, kept
    assert {(r["producer_site_at_send"], r["consumer_site_at_receive"]) for r in table
            if r["producer"] == "swarm10-u1"} == {("zone1", "zone1")}  # swarm10 is not a client of swarm1
    assert {(r["producer_site_at_send"], r["consumer_site_at_receive"]) for r in table
            if r["producer"] == "a3"} == {("nyc", "lax")}  # static game servers stay where they were


def test_old_format_parquet_is_converted_again(tmp_path):
    run = write_run(tmp_path / "uav-test-r1", fixed_latency_rows()[:3], [event("run_start", T0)])
    traces.convert_run(run)
    assert not traces.needs_conversion(run)
    run_file = traces.outputs(run)["run"]
    table = pq.read_table(run_file)
    meta = json.loads(table.schema.metadata[b"testbed.run"])
    meta["format_version"] = "1"
    pq.write_table(table.replace_schema_metadata({b"testbed.run": json.dumps(meta).encode()}), run_file)
    assert traces.needs_conversion(run)


# ---------------------------------------------------------------------------------------- figures

def _check_png(info, fig_number):
    path = Path(info["path"])
    assert path.exists() and path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert info["title"].startswith(f"Fig. {fig_number}")
    assert "(ms)" in info["ylabel"] and info["xlabel"]
    assert info["series"]


def test_figures_render_pngs_with_labelled_axes(tmp_path):
    e2e = [{"topic": f"{cls}-swarm{s}", "t_s": float(t), "p50_s": 0.02 + 0.001 * s,
            "p95_s": 0.025 + (0.03 if 10 <= t < 13 else 0), "max_s": 0.03}
           for s in (1, 2, 3) for cls in ("follow_leader", "sensor_data") for t in range(30)]
    moves = [{"node": "swarm2", "t_s": 10.0}]
    info = figures.fig8(e2e, tmp_path / "fig8.png", relinks=moves, threshold_s=0.04, topic_class="follow_leader")
    _check_png(info, 8)
    assert info["series"] == ["follow_leader-swarm1", "follow_leader-swarm2", "follow_leader-swarm3"]
    assert "time" in info["xlabel"] and "(s)" in info["xlabel"]

    aoi = [{"consumer": "avatar1", "producer": f"avatar{p}", "t_s": float(t), "p50_s": 0.03, "p95_s": 0.04 + 0.01 * p,
            "max_s": 0.05} for p in (2, 3, 4) for t in range(p * 5, p * 5 + 20)]
    _check_png(figures.fig9(aoi, tmp_path / "fig9.png", threshold_s=0.1), 9)

    faults = [{"kind": "cut", "target": "zone1", "from_s": 14.0, "to_s": 20.0},
              {"kind": "kill", "target": "bzone2", "from_s": 25.0, "to_s": None}]
    info = figures.fig8(e2e, tmp_path / "fig8-faults.png", relinks=moves, threshold_s=0.04, faults=faults)
    assert {"fault: zone1 cut off", "fault: bzone2 killed", "swarm2: relink (zone change)"} <= set(info["legend"])
    info = figures.fig9(aoi, tmp_path / "fig9-faults.png", threshold_s=0.1, faults=faults[:1])
    assert "fault: zone1 cut off" in info["legend"]

    migrations = [{"workflow": wf, "wan_one_way_s": wan,
                   "downtime_s": (0.01 if wf == "enhanced" else 4) * wan * (1 + i / 10),
                   "migration_time_s": 0.1 * n / ex, "n_topics": n, "executors": ex}
                  for wf, ex in (("enhanced", 16), ("enhanced", 4), ("baseline", 1))
                  for wan in (0.01, 0.04, 0.1) for n in (16, 64, 128) for i in range(3)]
    info = figures.fig7a(migrations, tmp_path / "fig7a.png")
    _check_png(info, "7a")
    assert info["series"] == ["Pulsar (baseline)", "ePulsar (enhanced)"]
    assert "128 topics at once, 16 executors" in info["title"]
    info = figures.fig7b(migrations, tmp_path / "fig7b.png")
    _check_png(info, "7b")
    assert info["series"] == ["Pulsar (baseline)", "ePulsar (enhanced), 4 executors",
                              "ePulsar (enhanced), 16 executors"]
    assert "40 ms" in info["title"]


# ---------------------------------------------------------------------------------------- Spark jobs

def frame(spark, rows, schema):
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema) for r in rows],
                                 schema=", ".join(f"{f.name} {_SQL[str(f.type)]}" for f in schema))


_SQL = {"string": "string", "double": "double", "int64": "bigint", "bool": "boolean"}


def trace_frame(spark, rows):
    return frame(spark, rows, traces.TRACE_SCHEMA)


def event_frame(spark, events):
    return frame(spark, events, traces.EVENT_SCHEMA)


def by(rows, *keys):
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r.asDict() for r in rows}


def test_summary_and_violation_ratio_have_exact_percentiles(spark):
    from analysis import jobs

    tr = trace_frame(spark, fixed_latency_rows())
    out = by(jobs.summary(tr, {"follow_leader": 0.015, "sensor_data": 0.040}).collect(), "topic_class")
    fl, sd = out["follow_leader"], out["sensor_data"]
    assert (fl["topics"], fl["messages"], sd["topics"], sd["messages"]) == (2, 100, 1, 50)
    assert fl["p50_s"] == pytest.approx(0.010, abs=1e-6) and fl["max_s"] == pytest.approx(0.020, abs=1e-6)
    assert fl["p95_s"] == pytest.approx(0.020, abs=1e-6)
    assert sd["p50_s"] == pytest.approx(0.050, abs=1e-6) and sd["max_s"] == pytest.approx(0.050, abs=1e-6)
    assert (fl["violations"], fl["violation_ratio"]) == (50, 0.5) and sd["violation_ratio"] == 1.0

    # Per run and policy: thresholds as a frame, two runs.
    both = trace_frame(spark, fixed_latency_rows() + [dict(r, run_id="r2") for r in fixed_latency_rows()])
    thresholds = spark.createDataFrame(
        [("r1", "epulsar", "follow_leader", 0.015), ("r1", "epulsar", "sensor_data", 0.040),
         ("r2", "pulsar-hash", "follow_leader", 0.030), ("r2", "pulsar-hash", "sensor_data", 0.060)],
        "run_id string, policy string, topic_class string, threshold_s double")
    ratios = by(jobs.violation_ratio(both, thresholds).collect(), "policy", "topic_class")
    assert ratios[("epulsar", "follow_leader")]["violation_ratio"] == 0.5
    assert ratios[("epulsar", "sensor_data")]["violation_ratio"] == 1.0
    assert ratios[("pulsar-hash", "follow_leader")]["violation_ratio"] == 0.0
    assert ratios[("pulsar-hash", "sensor_data")]["violations"] == 0


def test_e2e_over_time_buckets_relative_to_the_run_start(spark):
    from analysis import jobs

    tr = trace_frame(spark, fixed_latency_rows())
    out = jobs.e2e_over_time(tr, 1.0).collect()
    assert len(out) == 15  # 3 topics x 5 one-second buckets
    assert all(r["messages"] == 10 for r in out)
    assert sorted({r["bucket"] for r in out}) == [0, 1, 2, 3, 4]
    for r in out:
        expected = {"follow_leader-swarm1": 0.010, "follow_leader-swarm2": 0.020,
                    "sensor_data-swarm1": 0.050}[r["topic"]]
        assert r["p50_s"] == pytest.approx(expected, abs=1e-6) and r["max_s"] == pytest.approx(expected, abs=1e-6)
    ev = event_frame(spark, [event("run_start", T0 - 2.0)])
    shifted = jobs.e2e_over_time(tr, 2.0, ev).collect()
    assert sorted({(r["bucket"], r["t_s"]) for r in shifted}) == [(1, 2.0), (2, 4.0), (3, 6.0)]
    assert sum(r["messages"] for r in shifted) == 150


def _relink_rows():
    rows = []
    for i in range(200):  # 10 msg/s for 20 s
        t = T0 + i / 10
        rows.append(row("follow_leader-swarm1", "swarm1-u1", "swarm1-u2", i, t,
                        0.060 if T0 + 10 <= t < T0 + 12.5 else 0.020))
        rows.append(row("sensor_data-swarm1", "swarm1-u3", "swarm1-u1", i, t,
                        0.055 if T0 + 10 <= t < T0 + 11.0 else 0.020))
        rows.append(row("follow_leader-swarm10", "swarm10-u1", "swarm10-u2", i, t, 0.090))  # not swarm1's
        rows.append(row("follow_leader-swarm2", "swarm2-u1", "swarm2-u2", i, t, 0.020))
        rows.append(row("follow_leader-swarm3", "swarm3-u1", "swarm3-u2", i, t, 0.070 if t >= T0 + 15 else 0.020))
    return rows


def test_time_above_threshold_after_relink(spark):
    from analysis import jobs

    tr = trace_frame(spark, _relink_rows())
    ev = event_frame(spark, [event("run_start", T0), event("relink", T0 + 10, node="swarm1", to_site="zone2"),
                             event("relink", T0 + 5, node="swarm2"), event("relink", T0 + 15, node="swarm3")])
    out = by(jobs.time_above_threshold_after_relink(tr, ev, 0.040).collect(), "node", "topic")
    assert set(out) == {("swarm1", "follow_leader-swarm1"), ("swarm1", "sensor_data-swarm1"),
                        ("swarm2", "follow_leader-swarm2"), ("swarm3", "follow_leader-swarm3")}
    fl = out[("swarm1", "follow_leader-swarm1")]
    assert fl["time_above_s"] == pytest.approx(2.5, abs=1e-6) and fl["closed"] and fl["messages_above"] == 25
    assert fl["t_s"] == pytest.approx(10.0) and fl["to_site"] == "zone2"
    assert out[("swarm1", "sensor_data-swarm1")]["time_above_s"] == pytest.approx(1.0, abs=1e-6)
    assert out[("swarm2", "follow_leader-swarm2")]["time_above_s"] == 0.0
    never = out[("swarm3", "follow_leader-swarm3")]  # never back under the threshold: up to the last send
    assert not never["closed"] and never["time_above_s"] == pytest.approx(4.9, abs=1e-6)

    per_relink = by(jobs.time_above_threshold_after_relink(tr, ev, {"follow_leader": 0.04, "sensor_data": 0.04},
                                                           by="relink").collect(), "node")
    assert per_relink["swarm1"]["time_above_s"] == pytest.approx(2.5, abs=1e-6)
    assert (per_relink["swarm1"]["topics"], per_relink["swarm1"]["topics_above"]) == (2, 2)
    assert per_relink["swarm1"]["closed"] and not per_relink["swarm3"]["closed"]
    moves = jobs.relinks(ev, tr).orderBy("t_s").collect()
    assert [(m["node"], m["t_s"]) for m in moves] == [("swarm2", 5.0), ("swarm1", 10.0), ("swarm3", 15.0)]


def test_losses_duplicates_and_reordering_from_seq(spark):
    from analysis import jobs

    order = [0, 1, 2, 4, 5, 5, 7, 6, 9]  # 3 and 8 lost, 5 twice, 6 after 7
    rows = [row("avatar-1", "avatar1", "avatar2", seq, T0 + k / 10, 0.01) for k, seq in enumerate(order)]
    rows += [row("avatar-1", "avatar1", "avatar3", seq, T0 + seq / 10, 0.01) for seq in range(10)]
    tr = trace_frame(spark, rows)
    per_consumer = by(jobs.losses(tr, per_consumer=True).collect(), "consumer")
    a2 = per_consumer["avatar2"]
    assert (a2["first_seq"], a2["last_seq"], a2["expected"], a2["received"], a2["unique"]) == (0, 9, 10, 9, 8)
    assert (a2["lost"], a2["duplicates"], a2["reordered"]) == (2, 1, 1)
    assert (per_consumer["avatar3"]["lost"], per_consumer["avatar3"]["reordered"]) == (0, 0)
    (producer,) = jobs.losses(tr).collect()
    assert (producer["consumers"], producer["expected"], producer["lost"], producer["duplicates"],
            producer["reordered"]) == (2, 20, 2, 1, 1)
    assert producer["loss_ratio"] == pytest.approx(0.1)


def test_migration_downtime_pairs_starts_ends_and_downtimes(spark):
    from analysis import jobs

    ev = event_frame(spark, [
        event("migration_start", 100.0, topic="a", from_broker="bzone1", to_broker="bzone2"),
        event("migration_start", 100.0, topic="b"),
        event("migration_end", 100.05, topic="a"),
        event("downtime", 100.08, topic="a", client="c1", duration_s=0.03),
        event("migration_end", 100.07, topic="b"),
        event("migration_start", 200.0, topic="a"),
        event("migration_end", 200.2, topic="a"),
        event("downtime", 200.3, topic="a", client="c1", duration_s=0.10),
        event("downtime", 200.31, topic="a", client="c2", duration_s=0.12),
        event("migration_start", 300.0, topic="c", migration_id="m7", workflow="baseline", wan_one_way_s=0.01),
        event("migration_end", 300.4, topic="c", migration_id="m7"),
        event("downtime", 300.9, topic="c", client="c3", duration_s=0.6, migration_id="m7"),
    ])
    runs = spark.createDataFrame([("r1", "enhanced", 16, 0.04)],
                                 "run_id string, workflow string, executors bigint, wan_one_way_s double")
    out = by(jobs.migration_downtime(ev, runs).collect(), "topic", "start_time")
    assert len(out) == 4
    first = out[("a", 100.0)]
    assert first["migration_time_s"] == pytest.approx(0.05) and first["downtime_s"] == pytest.approx(0.03)
    assert (first["from_broker"], first["to_broker"], first["downtime_clients"]) == ("bzone1", "bzone2", 1)
    assert (first["workflow"], first["executors"], first["wan_one_way_s"]) == ("enhanced", 16, 0.04)
    assert first["n_topics"] == 3
    second = out[("a", 200.0)]
    assert second["migration_time_s"] == pytest.approx(0.2) and second["downtime_s"] == pytest.approx(0.12)
    assert second["downtime_clients"] == 2
    b = out[("b", 100.0)]
    assert b["migration_time_s"] == pytest.approx(0.07) and b["downtime_s"] is None and b["downtime_clients"] == 0
    c = out[("c", 300.0)]
    assert (c["migration"], c["workflow"], c["wan_one_way_s"]) == ("m7", "baseline", 0.01)
    assert c["migration_time_s"] == pytest.approx(0.4) and c["downtime_s"] == pytest.approx(0.6)


def test_aoi_latency_follows_the_avatars_in_the_area_of_interest(spark):
    from analysis import jobs

    rows = [row("avatar-2", "avatar2", "avatar1", i, T0 + i / 10, 0.030) for i in range(30)]       # 0-3 s
    rows += [row("avatar-3", "avatar3", "avatar1", i, T0 + 2 + i / 10, 0.060) for i in range(30)]  # 2-5 s
    rows += [row("avatar-2", "avatar2", "avatar4", i, T0 + i / 10, 0.500) for i in range(30)]      # other client
    tr = trace_frame(spark, rows)
    assert jobs.representative_consumer(tr).first()["consumer"] == "avatar1"
    out = jobs.aoi_latency(tr, "avatar1").collect()
    buckets = {}
    for r in out:
        buckets.setdefault(r["producer"], []).append(r["bucket"])
        assert r["p50_s"] == pytest.approx(0.030 if r["producer"] == "avatar2" else 0.060, abs=1e-6)
    assert {p: sorted(b) for p, b in buckets.items()} == {"avatar2": [0, 1, 2], "avatar3": [2, 3, 4]}


def test_aoi_marks_are_the_consumer_s_group_changes_and_its_topics_migrations(spark):
    from analysis import jobs

    rows = [row("avatar-2", "avatar2", "avatar1", i, T0 + i / 10, 0.030) for i in range(30)]
    rows += [row("avatar-3", "avatar3", "avatar4", i, T0 + i / 10, 0.030) for i in range(30)]
    events = [event("run_start", T0), event("group_change", T0 + 1.5, client="avatar1"),
              event("group_change", T0 + 1.7, client="avatar4"),
              event("migration_end", T0 + 2.0, topic="avatar-2"), event("migration_end", T0 + 2.5, topic="avatar-3")]
    out = [r.asDict() for r in jobs.aoi_marks(trace_frame(spark, rows), event_frame(spark, events), "avatar1").collect()]
    assert [(r["kind"], round(r["t_s"], 6), r["topic"]) for r in out] == [
        ("group_change", 1.5, None), ("migration", 2.0, "avatar-2")]  # not avatar4's, not a topic it never got


def test_cli_reduce_and_figures_on_a_partial_run(spark, tmp_path, capsys):
    from analysis.__main__ import main

    rows = _relink_rows()
    events = [event("run_start", T0), event("relink", T0 + 10, node="swarm1", from_site="zone1", to_site="zone2"),
              event("migration_start", T0 + 12.0, topic="follow_leader-swarm1"),
              event("migration_end", T0 + 12.3, topic="follow_leader-swarm1")]
    run = write_run(tmp_path / "uav-test-r1", rows, events, cut_last_line=True)
    assert main(["reduce", str(run), "--master", "local[2]"]) == 0
    printed = capsys.readouterr().out
    assert "partial" in printed and "follow_leader" in printed
    summary = pq.read_table(run / "tables" / "summary.parquet").to_pylist()
    assert sum(r["messages"] for r in summary) == len(rows)
    migrations = pq.read_table(run / "tables" / "migrations.parquet").to_pylist()
    assert migrations[0]["migration_time_s"] == pytest.approx(0.3, abs=1e-6)
    assert main(["figures", str(run), "--out", str(tmp_path / "figs")]) == 0
    (png,) = (tmp_path / "figs").glob("fig8-*.png")
    assert png.stat().st_size > 10_000
    index = json.loads((tmp_path / "figs" / "figures.json").read_text())
    assert "partial run" in index["figures"][0]["title"]
    marks = pq.read_table(run / "tables" / "migration_marks.parquet").to_pylist()
    assert [(m["topic"], round(m["t_s"], 6)) for m in marks] == [("follow_leader-swarm1", 12.3)]
    assert "swarm1: topic migration" in index["figures"][0]["legend"]  # Fig. 8 marks it
    assert main(["figures", str(run), "--out", str(tmp_path / "none"), "--only", "fig9"]) == 2
