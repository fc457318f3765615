"""The one live UAV smoke run the UAV, Spark-cluster, tracking and set-threshold tests share: a run
costs half a minute before its first message, so they judge one run rather than three.

It is uav-smoke.yaml with tracking-smoke.yaml's `tracking` block (what tracking-smoke is: the same
scenario with Bloom-filter histories in every broker; tests/test_tracking_live.py checks that), for
30 s (two handovers; topics follow both). While it runs, `testbed topic set-threshold` gives one
topic its own threshold in the run's ZooKeeper, as a user would on a running experiment."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from tests.live import judged_seconds, unexplained_seconds

ROOT = Path(__file__).resolve().parent.parent
NAME = "uav-smoke"
DURATION = "30s"
TOPIC, THRESHOLD = "follow_leader-swarm1", "25ms"  # under the class's 40 ms, over a topic's 17 ms path at home


@dataclass
class UavRun:
    out: Path
    root: Path
    summary: dict
    stdout: str
    set_at: float  # when set-threshold returned (epoch)
    set_output: str
    stored: float | None  # the threshold ZooKeeper held for TOPIC right after


_CACHE: dict[str, UavRun | AssertionError] = {}


#: The capacity the shared run is judged against: a knee just above uav-smoke's 240 deliveries/s, so
#: the run is near it and times the machine first (testbed.machine_speed), against this reference.
KNEE_PER_S = 300.0
RECORDED_SPEED = {"relay_us_per_frame": 5.0, "nats_us_per_delivery": 1.5, "steal_ms": 0.0, "taken_at": 0.0}


def capacity(root: Path) -> Path:
    path = root / "capacity.json"
    path.write_text(json.dumps({"knee": {"uav-swarm": {"deliveries_per_s": KNEE_PER_S, "reached": True}},
                                "cpus": 2, "speed_reference": RECORDED_SPEED}))
    return path


def scenario(root: Path) -> Path:
    data = yaml.safe_load((ROOT / "scenarios" / "uav-smoke.yaml").read_text())
    data["tracking"] = yaml.safe_load((ROOT / "scenarios" / "tracking-smoke.yaml").read_text())["tracking"]
    path = root / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def not_held(out: Path, summary: dict) -> str | None:
    """At 240 deliveries/s the harness is within its budget in most seconds, not all: a few seconds
    just after a migration, when every client of a swarm process reconnects at once (the UAVs of a
    swarm share one process and one core), and a few anywhere, where this VM's timer wakeups and
    the Python clients' event loops make a publisher a few ms late (1-3 such seconds in a run
    measured, up to 13 in one run of twelve, with the CPU 60 % idle; the compiled client data plane
    is what removes them). At most a tenth of the run outside migrations, then; a second in which
    the hypervisor took the VM's cores for at least as long as the harness was late is the
    hypervisor's, not the harness's (`tests.live.explained_by_machine`; its latencies say nothing
    either, so the latency test judges only clean seconds). None when so, else what was not."""
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    t0 = next(e["time"] for e in events if e["type"] == "run_start")
    herds = [(e["time"] - t0 - 0.5, e["time"] - t0 + 2.5) for e in events if e["type"] in ("migration_start",
                                                                                          "migration_end")]
    ours = unexplained_seconds(out)
    elsewhere = [s for s in ours if not any(low <= s <= high for low, high in herds)]
    if judged_seconds(out) < 25 or len(ours) > 6 or len(elsewhere) > 3:
        return f"{judged_seconds(out)} s judged; saturated {summary['harness']['saturated']}; migrations at {herds}"
    return None


ATTEMPTS = 3  # runs made until the harness holds one (each ~70 s; the second and third only when needed)


def shared(root: Callable[[], Path]) -> UavRun:
    """The run, made once per session (`root()` gives its directory then), the first of ATTEMPTS the
    harness held (`not_held`); a failure is kept too, not paid for again by the next test."""
    if NAME not in _CACHE:
        where = root()
        path = scenario(where)
        for attempt in range(ATTEMPTS):
            try:
                run = _run(path, where / f"attempt{attempt}")
            except AssertionError as error:
                _CACHE[NAME] = error
                break
            why = not_held(run.out, run.summary)
            _CACHE[NAME] = run if why is None else AssertionError(f"{attempt + 1} runs, none held by the harness: {why}")
            if why is None:
                break
    if isinstance(_CACHE[NAME], AssertionError):
        raise _CACHE[NAME]
    return _CACHE[NAME]


def _run(path: Path, results: Path) -> UavRun:
    process = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(path), "--duration", DURATION,
                                "--results", str(results), "--capacity", str(capacity(results.parent))],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=ROOT)
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if "topic manager" in line:  # the control plane is up: ZooKeeper serves the run's topics
                run_id = line.split("]")[0].strip("[ ")
                break
        else:
            raise AssertionError("the run did not bring up the pub/sub system:\n" + "".join(lines)[-3000:])
        set_at, set_output, stored = _set_threshold(run_id)
        rest, _ = process.communicate(timeout=600)
    except BaseException:
        process.terminate()  # its own teardown
        process.wait(timeout=120)
        raise
    stdout = "".join(lines) + rest
    assert process.returncode == 0, stdout[-3000:]
    (out,) = results.glob(f"{NAME}-*")
    summary = json.loads((out / "summary.json").read_text())
    return UavRun(out, results, summary, stdout, set_at, set_output, stored)


def _set_threshold(run_id: str) -> tuple[float, str, float | None]:
    """`testbed topic set-threshold` on the running experiment, and what its ZooKeeper then holds."""
    import time

    import functools

    from testbed.emulation import runstate
    from testbed.emulation.netns import connect_in
    from testbed.roles.launch import node_metadata
    from testbed.systems.pubsub.metadata import ZK_PORT

    done = subprocess.run([sys.executable, "-m", "testbed.cli", "topic", "set-threshold", run_id, TOPIC, THRESHOLD],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    set_at = time.time()
    assert done.returncode == 0, done.stdout + done.stderr
    run = runstate.known_runs()[run_id]
    cloud = next(n for n, r in run["roles"].items() if r == "cloud")
    meta = node_metadata(f"{run['ips'][cloud]}:{ZK_PORT}", functools.partial(connect_in, run["nodes"][cloud])).start()
    try:
        return set_at, done.stdout, meta.threshold(TOPIC)
    finally:
        meta.stop()
