"""The results disk filling up mid-run (issue 19): the run stops with a clear message, what it wrote
stays readable, the network is torn down. The results live on a small tmpfs of the test's own,
which a thread fills while the run is under way."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed.experiment import DISK_RESERVE_B, DiskFull, check_disk, disk_free
from tests.needs import FULL_SYSTEM, full_system

ROOT = Path(__file__).resolve().parent.parent


def test_check_disk_refuses_below_the_reserve(tmp_path):
    free = disk_free(tmp_path)
    check_disk(tmp_path, reserve=0)
    with pytest.raises(DiskFull, match=r"MB free, under the \d+ MB the run keeps"):
        check_disk(tmp_path, reserve=free + (1 << 30))


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill_once_delivering(mount: Path, leave: int, stop: threading.Event) -> threading.Thread:
    """Fills the disk up to `leave` bytes free once the run's workload delivers (its events say
    run_start and a trace file has rows): mid-run by the run's own clock, not after a wall-clock
    guess that a slow bring-up would overtake."""
    def delivering() -> bool:
        events = list(mount.glob("uav-smoke-*/events.jsonl"))
        return bool(events) and '"run_start"' in events[0].read_text() and any(
            path.stat().st_size > 0 for path in mount.glob("uav-smoke-*/traces/*.jsonl"))

    def fill() -> None:
        while not delivering():
            if stop.wait(0.2):
                return
        time.sleep(2.0)  # a few seconds of traces and health rows to keep
        with (mount / "filler").open("wb") as handle:
            while disk_free(mount) > leave:
                handle.write(b"\0" * (1 << 20))
                handle.flush()

    thread = threading.Thread(target=fill, daemon=True)
    thread.start()
    return thread


@full_system
def test_a_disk_filling_mid_run_stops_the_run_and_keeps_what_it_recorded(small_disk):
    assert FULL_SYSTEM  # the marks above: root, Mininet, serf, nats-server, Java
    stop = threading.Event()
    filler = _fill_once_delivering(small_disk, DISK_RESERVE_B // 2, stop)
    # No settle wait: where topics sit does not matter to what a full disk must do to the run.
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "scenarios/uav-smoke.yaml", "--backend", "mininet",
                          "--settle", "0s", "--results", str(small_disk)], capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    stop.set()
    filler.join(timeout=5)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "stopped: the results disk" in run.stdout and "Traceback" not in run.stdout + run.stderr
    (out,) = small_disk.glob("uav-smoke-*")
    meta = json.loads((out / "run.json").read_text())
    assert meta["complete"] is False and "MB free" in meta["stopped"]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]  # every line whole
    (stopped,) = [e for e in events if e["type"] == "run_stopped"]
    assert 0 < stopped["at_s"] < 60
    assert json.loads((out / "summary.json").read_text())["delivered"] > 0  # the summary still written
    for path in (out / "traces").glob("*.jsonl"):  # traces readable up to their last whole line
        lines = path.read_text().splitlines()
        for line in lines[:-1]:
            json.loads(line)
    left = subprocess.run([sys.executable, "-m", "testbed.cli", "clean", meta["run_id"]], capture_output=True, text=True,
                          cwd=ROOT)  # this run's (the other worker's live run is not ours to judge)
    assert "removed 0 leftover" in left.stdout, left.stdout
