"""The view without a live run: its records from a results folder (the end screen's rules, an event
written twice counted once, only what changed sent again), its refusals (not a run, a port in use,
an address that is not one), its server (the page, Plotly's script from the package, the stream,
the final update on SIGTERM), and the page in headless Chromium on a recorded run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from testbed import health, mobility, topology
from testbed.scenario.loader import load
from testbed.systems.pubsub.workload_role import summarize
from testbed.view import server as server_mod
from testbed.view.live import LiveView
from testbed.view.state import NotARun, RunState
from tests import browser

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000.0
TOPIC = "follow_leader-swarm1"


def _lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)


def _trace(second: int, k: int, latency_s: float, broker: str = "bzone1") -> dict:
    sent = T0 + second + k / 20
    return {"run_id": "abcdef", "topic": TOPIC, "producer": "swarm1-u2", "consumer": "swarm1-u1", "msg_id": f"u2:{k}",
            "track_id": None, "seq": k, "send_time": f"{sent:.6f}", "receive_time": f"{sent + latency_s:.6f}",
            "broker": broker, "producer_site": "zone1", "consumer_site": "zone1"}


def make_run(where: Path, finished: bool = True) -> tuple[Path, dict]:
    """A uav-smoke results folder as a run writes it: swarm1 moves at 3 s, its topic migrates at 4 s,
    second 3 is over the 40 ms threshold; the guard saw one second of steal and one of load."""
    scenario = load(ROOT / "scenarios" / "uav-smoke.yaml")
    built = topology.build(scenario)
    mobility.plan(scenario, built)
    home = built.nodes["swarm1"].site
    away = next(s for s in built.sites if s.startswith("zone") and s != home)
    out = where / "uav-smoke-abcdef"
    out.mkdir(parents=True)
    (out / "scenario.yaml").write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    meta = {"run_id": "abcdef", "scenario": "uav-smoke", "backend": "mininet", "shaper": "shared", "started": T0 - 20,
            "complete": False}
    (out / "run.json").write_text(json.dumps(meta))
    _lines(out / "events.jsonl", [{"type": "run_start", "time": T0, "run_id": "abcdef"},
                                  {"type": "relink", "time": T0 + 3, "node": "swarm1", "from_site": home,
                                   "to_site": away, "planned_at_s": 3.0, "late_s": 0.0, "call_s": 0.01}])
    manager = [{"type": "violation_detected", "time": T0 + 3.8, "topic": TOPIC, "broker": "bzone1", "e_s": 0.05,
                "threshold_s": 0.04},
               {"type": "migration_start", "time": T0 + 4.0, "topic": TOPIC, "from_broker": "bzone1",
                "to_broker": "bzone2", "workflow": "enhanced", "executors": 16},
               {"type": "migration_end", "time": T0 + 4.5, "topic": TOPIC, "from_broker": "bzone1",
                "to_broker": "bzone2", "workflow": "enhanced", "ok": True, "migration_s": 0.5, "duration_s": 0.5}]
    _lines(out / "logs" / "manager.jsonl", manager)
    _lines(out / "logs" / "broker-bzone1.events.jsonl", [{"type": "acquired", "time": T0 - 5, "broker": "bzone1",
                                                          "topic": TOPIC, "zk_s": 0.1}])
    _lines(out / "logs" / "broker-bzone2.events.jsonl", [{"type": "acquired", "time": T0 + 4.4, "broker": "bzone2",
                                                          "topic": TOPIC, "zk_s": 0.1}])
    _lines(out / "traces" / f"{TOPIC}.swarm1-u1.jsonl",
           [_trace(s, k, 0.060 if s == 3 else 0.018 + k / 1000, "bzone2" if s >= 5 else "bzone1")
            for s in range(10) for k in range(20)])
    rows = [{"t": int(T0) + s, "elapsed_s": s, "cpu_steal_ms": {2: 20.0}.get(s, 0.0),
             "publisher_late_max_ms": {2: 5.0, 6: 9.0}.get(s, 0.1), "causes": ["publishers"] if s in (2, 6) else []}
            for s in range(10)]
    _lines(out / "health.jsonl", rows)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()] + manager
    summary = summarize(out / "traces", {"follow_leader": 0.040, "sensor_data": 0.040}, events,
                        [{"sent": 200, "received": 200}])
    summary["harness"] = health.verdict(rows)  # as the run writes it: "valid 8 of 10 s"
    if finished:
        _lines(out / "events.jsonl", manager + [{"type": "run_end", "time": T0 + 10}])  # the merge at the end
        (out / "summary.json").write_text(json.dumps(summary))
        (out / "run.json").write_text(json.dumps({**meta, "finished": T0 + 12, "complete": True}))
    return out, summary


def test_the_records_are_what_the_run_recorded_by_the_end_screen_s_rules(tmp_path):
    out, summary = make_run(tmp_path)
    state = RunState(out)
    state.refresh()
    records = state.store.records
    graph = records["topology"]["graph"]
    assert {s["name"] for s in graph["sites"]} == {"zone1", "zone2", "zone3", "zone4", "clouddc"}
    assert {n["name"] for n in graph["nodes"] if n["mobile"]} == {"swarm1", "swarm2"}
    assert [m[1] for m in records["move"].values()] == ["swarm1"]
    assert sorted(o[2] for o in records["owner"].values()) == ["bzone1", "bzone2"]
    kinds = sorted(m[2] for m in records["mark"].values())
    assert kinds == ["migration", "move", "violation"]
    (migration,) = [m for m in records["mark"].values() if m[2] == "migration"]
    assert migration[:2] == [T0 + 4.0, T0 + 4.5]
    assert records["latency"][f"{TOPIC}|{int(T0) + 3}"][4] == pytest.approx(60.0, abs=0.01)
    assert records["load"][f"bzone2|{int(T0) + 7}"][2] == 20
    verdicts = {int(k) - int(T0): v[1] for k, v in records["guard"].items()}
    assert (verdicts[1], verdicts[2], verdicts[6]) == ("ok", "steal", "saturated")
    assert records["totals"]["classes"] == summary["classes"]
    assert records["totals"]["counts"] == {"deliveries": 200, "migrations": 1, "migrations_failed": 0,
                                           "violations_detected": 1}
    assert records["run"]["meta"]["status"] == "finished"


def test_what_changed_is_all_that_is_sent_again_and_a_half_written_row_waits(tmp_path):
    out, _ = make_run(tmp_path, finished=False)
    state = RunState(out)
    state.refresh()
    _, cursor = state.store.since(0)
    row = json.dumps(_trace(12, 0, 0.020)) + "\n"
    trace = out / "traces" / f"{TOPIC}.swarm1-u1.jsonl"
    with trace.open("a") as handle:
        handle.write(row[:40])
    state.refresh()
    changed, cursor = state.store.since(cursor)
    assert "latency" not in changed
    with trace.open("a") as handle:
        handle.write(row[40:])
    state.refresh()
    changed, _ = state.store.since(cursor)
    assert list(changed["latency"]) == [f"{TOPIC}|{int(T0) + 12}"]
    assert changed["totals"]["counts"]["deliveries"] == 201


def test_an_event_merged_into_events_jsonl_at_the_end_counts_once(tmp_path):
    out, summary = make_run(tmp_path)  # the manager's three events are in both files
    state = RunState(out)
    state.refresh()
    counts = state.store.records["totals"]["counts"]
    assert (counts["migrations"], counts["violations_detected"]) == (summary["migrations"], 1)


def test_a_folder_that_is_not_a_run_is_refused_saying_what_to_give(tmp_path):
    with pytest.raises(NotARun, match="no such folder"):
        RunState(tmp_path / "nowhere")
    with pytest.raises(NotARun, match="neither run.json nor scenario.yaml"):
        RunState(tmp_path)
    cli = subprocess.run([sys.executable, "-m", "testbed.cli", "view", str(tmp_path)], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert cli.returncode == 2 and "not a run's results folder" in cli.stderr


def test_a_scenario_that_cannot_be_rebuilt_is_said_and_the_rest_still_shown(tmp_path):
    out, _ = make_run(tmp_path)
    (out / "scenario.yaml").write_text("name: [unclosed\n")
    state = RunState(out)
    state.refresh()
    assert "cannot be rebuilt" in state.store.records["problem"]["topology"]
    assert state.store.records["totals"]["counts"]["deliveries"] == 200


def test_a_port_in_use_is_refused_with_the_fix_before_anything_starts(tmp_path):
    taken = server_mod.bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(server_mod.ViewAddressError, match="--view-port"):
            server_mod.bind("127.0.0.1", port)
        run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "scenarios/uav-smoke.yaml", "--view",
                              "--view-port", str(port), "--results", str(tmp_path)],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
    finally:
        taken.close()
    assert run.returncode == 2 and f"view port {port} on 127.0.0.1 is in use" in run.stderr, run.stderr
    assert not list(tmp_path.iterdir()), "nothing may start"


def test_the_view_listens_on_loopback_unless_asked_and_warns_when_asked():
    assert server_mod.exposure_warning("127.0.0.1") is None
    assert "reachable from other machines" in server_mod.exposure_warning("0.0.0.0")
    with pytest.raises(server_mod.ViewAddressError, match="not an IP address"):
        server_mod.bind("example.org; rm -rf /", 0)
    with pytest.raises(server_mod.ViewAddressError, match="not a port"):
        server_mod.bind("127.0.0.1", 70000)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=20) as response:
        return response.read()


def test_the_server_serves_the_page_plotly_from_its_package_and_the_records(tmp_path):
    out, _ = make_run(tmp_path)
    with browser.replay(out) as address:
        assert b"testbed view" in _get(address)
        assert len(_get(address + "plotly.min.js")) > 1_000_000
        records = json.loads(_get(address + "api/records"))["records"]
        assert records["totals"]["counts"]["deliveries"] == 200
        with urllib.request.urlopen(address + "api/stream", timeout=20) as stream:
            first = stream.readline().decode()
        assert first.startswith("data: ") and "topology" in json.loads(first[6:])["records"]
    for name in ("index.html", "view.js", "view.css"):
        text = (server_mod.PAGE / name).read_text()
        assert "http://" not in text and "https://" not in text, f"{name} refers to an outside address"


def test_a_bad_query_parameter_is_a_400_naming_it_and_the_server_goes_on(tmp_path):
    """A page's (or a person's) mistake in the query is said back in one line of JSON naming the
    parameter, not answered 500 with the server's traceback."""
    out, _ = make_run(tmp_path)
    bad = {"api/records?cursor=abc": "cursor", "api/records?cursor=-1": "cursor", "api/records?cursor=": "cursor",
           "api/records?cursor=1&cursor=2": "cursor", "api/records?cursr=5": "cursr", "api/stream?cursor=0": "cursor"}
    with browser.replay(out) as address:
        for query, name in bad.items():
            with pytest.raises(urllib.error.HTTPError) as refused:
                _get(address + query)
            body = refused.value.read().decode()
            assert refused.value.code == 400, (query, refused.value.code, body[:300])
            assert body.count("\n") == 0 and json.loads(body)["error"].startswith(f"{name}: "), (query, body)
        answer = json.loads(_get(address + "api/records?cursor=0"))
        assert answer["records"]["totals"]["counts"]["deliveries"] == 200
        assert json.loads(_get(address + f"api/records?cursor={answer['cursor']}"))["records"] == {}


def test_on_sigterm_open_pages_get_the_run_s_last_words_then_the_end(tmp_path):
    out, summary = make_run(tmp_path, finished=False)
    sock = server_mod.bind("127.0.0.1", 0)
    live = LiveView(out, sock)
    received: list[str] = []

    def listen():
        for _ in range(100):
            try:
                with urllib.request.urlopen(live.address + "api/stream", timeout=30) as stream:
                    received.append("connected")
                    for line in stream:
                        received.append(line.decode())
                return
            except OSError:
                threading.Event().wait(0.2)
    listener = threading.Thread(target=listen)
    listener.start()
    try:
        for _ in range(100):
            if received:
                break
            threading.Event().wait(0.1)
        (out / "summary.json").write_text(json.dumps(summary))
        (out / "run.json").write_text(json.dumps({"run_id": "abcdef", "started": T0 - 20, "finished": T0 + 12,
                                                  "complete": True}))
        record = live.stop()
    finally:
        listener.join(timeout=30)
    text = "".join(received)
    assert '"recorded"' in text and '"finished"' in text, text[-2000:]
    assert "event: end" in text
    assert record["address"] == live.address and record["cpu_s"] is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(live.address.rsplit(":", 1)[1].rstrip("/"))), timeout=2)


@browser.NEEDS_BROWSER
def test_the_page_in_chromium_shows_a_recorded_run_and_moves_its_clients_on_the_slider(tmp_path):
    out, summary = make_run(tmp_path)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    with browser.replay(out) as address, browser.chromium(tmp_path / "profile") as driver:
        driver.get(address)
        browser.wait_until(driver, "return window.tbView && window.tbView.drawn && "
                                   "document.getElementById('recorded').textContent.startsWith('equal')")
        browser.check_finished_run(driver, out, summary, events)
        browser.check_moves(driver, events)
        driver.save_screenshot(str(tmp_path / "view.png"))
    assert (tmp_path / "view.png").stat().st_size > 10_000


@browser.NEEDS_BROWSER
def test_nothing_on_the_page_covers_anything_else_at_two_window_sizes(tmp_path):
    """Axis titles clear of their tick labels, legends under the x axis, the toolbar above the plots
    (not on the guard strip), and on the map no label on another or on a marker, as Chromium lays the
    page out, wide and narrow (a resized window places the map's labels again)."""
    out, _ = make_run(tmp_path)
    placed = "return window.tbView && window.tbView.drawn && window.tbView.labelsPlaced > {}"
    with browser.replay(out) as address, browser.chromium(tmp_path / "profile") as driver:
        driver.get(address)
        browser.wait_until(driver, placed.format(0))
        assert browser.overlaps(driver) == []
        before = driver.execute_script("return window.tbView.labelsPlaced")
        driver.set_window_size(900, 1000)
        browser.wait_until(driver, placed.format(before))
        assert browser.overlaps(driver) == []
        assert driver.execute_script("return document.querySelectorAll('#topology .textpoint text').length") > 5


def test_a_run_that_did_not_finish_is_said_in_the_terminal_and_on_the_page(tmp_path):
    from testbed.view.state import folder_note

    out, _ = make_run(tmp_path, finished=False)  # no end recorded, and no controller alive: killed
    state = RunState(out)
    state.refresh()
    assert state.store.records["run"]["meta"]["status"] == "killed"
    assert "without recording its end" in folder_note(out)
    meta = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**meta, "finished": T0 + 5, "interrupted": "SIGINT"}))
    assert folder_note(out) == "the run ended early (SIGINT): the page shows what it recorded"
    cli = subprocess.Popen([sys.executable, "-m", "testbed.cli", "view", str(out), "--port", "0"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = cli.stderr.readline()
    finally:
        cli.terminate()
        cli.wait(timeout=10)
    assert "ended early (SIGINT)" in said
