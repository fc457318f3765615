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

from testbed import topology
from testbed.emulation import cleanup, installed
from testbed.emulation.backends.containernet import image_problems
from testbed.probe import pairs_of_interest
from testbed.scenario.loader import load
from tests.live import judged_seconds, measured_held, probe_beyond_bounds_ms, probe_failures
from tests.needs import containernet_missing

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
def harness(cn_python):
    problems = image_problems({"cloud", "broker", "nc-proxy", "client"})
    if problems:
        containernet_missing("; ".join(problems))
    install = installed.find_containernet()
    if not install.usable:
        containernet_missing(install.describe())
    return cn_python


def test_testbed_finds_containernet_and_re_runs_itself_there(harness):
    """What `make doctor` and `make scenario` do: this venv's testbed, which cannot import Containernet."""
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "doctor", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["backend"] == "containernet", report["backend_reason"]
    (found,) = [c for c in report["checks"] if c["name"] == "Containernet"]
    assert found["ok"] and "re-ran itself" in found["detail"]


def test_the_pub_sub_system_runs_in_containers_and_survives_a_broker_crash(harness, tmp_path):
    """ZooKeeper, nats-servers, broker agents, Serf, NC proxies and the swarm all in Docker hosts;
    bzone1's container loses every process at 25 s and its topics are re-placed. Run as a user
    would: this venv's testbed (re-run under Containernet), default arguments, so `--results` is
    the relative `results` (issue 21: it reached ZooKeeper relative, inside the read-only mount)."""
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(ROOT / "scenarios/failover-smoke.yaml")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out,) = (tmp_path / "results").glob("failover-smoke-*")
    assert json.loads((out / "run.json").read_text())["backend"] == "containernet"
    summary = json.loads((out / "summary.json").read_text())
    print(f"\ncontainernet failover: {summary['failover']}, delivered {summary['delivered']} of "
          f"{summary['expected_deliveries']}")
    assert summary["expected_deliveries"] > 1000 and summary["delivered"] >= 0.9 * summary["expected_deliveries"]
    assert summary["rounds_failed"] == 0
    # the harness judged the run in containers as it does on namespaces: health rows for the workload's
    # seconds, CPU per class (processes started by `docker exec` are the host's processes too)
    harness = summary["harness"]
    print(f"containernet harness: {harness['validity']}, cpu by class {harness['cpu_by_class']}")
    assert judged_seconds(out) >= 10 and harness["seconds"] >= 10 and harness["stalls_measured"]
    assert harness["cpu_by_class"].get("clients", 0) > 0 and harness["cpu_by_class"].get("relays", 0) > 0
    # Every topic of the one swarm sits on bzone1 (its zone) when it is killed; they are re-placed by
    # fencing the dead broker (not migrated: nothing is left to release), and every member's client
    # of every topic comes back. The counts come from the scenario, not from an old run.
    scenario = load(ROOT / "scenarios/failover-smoke.yaml")
    (swarms,) = scenario.nodes.clients
    topics = swarms.count * len(scenario.workload.topics)
    failover = summary["failover"]
    assert failover["topics_replaced"] == topics
    assert failover["clients_lost_broker"] == failover["clients_recovered"] == topics * swarms.members
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    (killed,) = [e for e in events if e["type"] == "broker_killed"]
    assert {"nats-server", "serf"} <= set(killed["killed"]) and "bash" not in killed["killed"]
    assert not cleanup.docker_containers(None)


def _mmog_smoke():
    path = ROOT / "scenarios/mmog-smoke.yaml"
    return topology.checked(load(path), str(path))


def _probe_pairs(done: subprocess.CompletedProcess) -> list[dict]:
    try:
        return json.loads(done.stdout)["pairs"]
    except (ValueError, KeyError):
        return []


@pytest.mark.quiet
def test_probe_on_docker_hosts_is_within_bounds(harness):
    """Every pair the probe picks on mmog-smoke's Docker hosts, within the probe's own bounds; measured
    again while the hypervisor stole (a stall delays every ping in flight), as the namespace probes are."""
    def probe() -> subprocess.CompletedProcess:
        return subprocess.run([harness, "-m", "testbed.cli", "probe", "scenarios/mmog-smoke.yaml", "--backend",
                               "containernet", "--count", "30", "--json"], capture_output=True, text=True, cwd=ROOT,
                              timeout=600)

    done = measured_held(probe, lambda done: probe_beyond_bounds_ms(_probe_pairs(done)))
    assert done.returncode in (0, 1) and _probe_pairs(done), done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["backend"] == "containernet"
    assert len(result["pairs"]) == len(pairs_of_interest(_mmog_smoke()))
    assert result["ok"], "pairs beyond the probe's bounds:\n" + probe_failures(result["pairs"])
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
