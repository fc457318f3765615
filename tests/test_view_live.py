"""The live view of a real run, in headless Chromium: `testbed run --view` prints the page's address
at the start; the page shows the run as it goes (the guard judging, latency series growing each
second, the status "running"), and when the run ends it holds the run's last words: status
finished, every move and migration, and numbers equal to summary.json's. The run's validity is not
judged here (the browser shares the two cores with the run): what is judged is what the page shows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import browser
from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [*FULL_SYSTEM, pytest.mark.long, browser.NEEDS_BROWSER]

POINTS = "return (document.getElementById('latency').data || []).filter(t => t.mode === 'lines')" \
         ".reduce((n, t) => n + t.x.length, 0)"


def test_the_live_view_follows_a_uav_run_and_ends_with_its_summary(tmp_path):
    argv = [sys.executable, "-m", "testbed.cli", "run", "scenarios/uav-smoke.yaml", "--duration", "30s", "--settle", "5s",
            "--view", "--view-port", "0", "--results", str(tmp_path / "results")]
    run = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    try:
        for line in run.stdout:
            output.append(line)
            found = browser.ADDRESS.search(line) if "view:" in line else None
            if found:
                break
        assert found, "".join(output)
        with browser.chromium(tmp_path / "profile") as driver:
            driver.get(found.group(1))
            browser.wait_until(driver, "return document.getElementById('run-status').textContent === 'running' && "
                                       "window.tbView.drawn", timeout=60)
            first = browser.wait_until(driver, POINTS, timeout=90)  # the workload has begun
            time.sleep(4)
            assert driver.execute_script(POINTS) > first, "the latency series did not grow while the run went on"
            live = browser.shown(driver)
            assert live["guard"] != "guard: not judging yet" and live["sites"], live
            (tmp_path / "live.png").write_bytes(driver.get_screenshot_as_png())
            browser.wait_until(driver, "return window.tbView.ended", timeout=240)
            (out,) = (tmp_path / "results").glob("uav-smoke-*")
            summary = json.loads((out / "summary.json").read_text())
            events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
            browser.check_finished_run(driver, out, summary, events)
            browser.check_moves(driver, events)
            (out / "view-live.png").write_bytes((tmp_path / "live.png").read_bytes())
            driver.save_screenshot(str(out / "view-end.png"))
        output.extend(run.stdout)
        assert run.wait(timeout=120) == 0, "".join(output)[-3000:]
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=120)
    meta = json.loads((out / "run.json").read_text())
    assert meta["view"]["address"] == found.group(1) and meta["view"]["cpu_s"] > 0
    alive = subprocess.run(["pgrep", "-f", f"testbed.view.server {out}"], capture_output=True, text=True)
    assert not alive.stdout.strip(), "the view's server outlived its run"
