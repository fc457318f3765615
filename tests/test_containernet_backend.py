"""The containernet backend end to end: Docker hosts, shaped links, probe, kill -9 + clean.

Runs the harness with the interpreter that has Containernet ($TESTBED_CONTAINERNET_PYTHON, else
/opt/cn-venv/bin/python); skips, naming what is missing, where that is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.emulation import cleanup
from testbed.emulation.docker_engine import image_exists
from tests.test_containernet_backend_env import cn_python  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.containernet

STAR = """
name: cnstar
duration: 10m
infrastructure:
  star: {nodes: 2, link_delay: 10ms}
emulation: {backend: containernet}
"""


@pytest.fixture(scope="module")
def harness(cn_python):  # noqa: F811
    missing = [f"testbed/{r}:latest" for r in ("cloud", "broker", "nc-proxy", "client")
               if not image_exists(f"testbed/{r}:latest")]
    if missing:
        pytest.skip(f"images missing: {', '.join(missing)} (make images)")
    check = subprocess.run([cn_python, "-c", "import testbed.cli"], capture_output=True, text=True, cwd=ROOT)
    if check.returncode != 0:
        pytest.skip(f"the project is not installed in {cn_python} (pip install -e . there)")
    return cn_python


def test_probe_on_docker_hosts_is_within_bounds(harness):
    out = subprocess.run([harness, "-m", "testbed.cli", "probe", "scenarios/mmog-smoke.yaml", "--backend", "containernet",
                          "--count", "30", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["backend"] == "containernet" and result["ok"]
    assert len(result["pairs"]) == 15
    assert not cleanup.docker_containers(None)


def test_kill_9_then_clean_removes_the_containers(harness, tmp_path):
    scenario = tmp_path / "cnstar.yaml"
    scenario.write_text(STAR)
    process = subprocess.Popen([harness, "-m", "testbed.cli", "run", str(scenario), "--results", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    run_id = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "network up" in line:
            run_id = line.split("]")[0].strip("[ ")
            break
    assert run_id, "the run did not come up"
    assert len(cleanup.docker_containers(run_id)) == 2
    process.kill()
    process.wait()
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "clean", run_id], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "container tb" in out.stdout
    assert not cleanup.docker_containers(run_id)
