"""`testbed exec` into a held run, with real tools through the emulated network: ping against the
configured RTT, iperf3 through a 10 Mbit/s access link, tcpdump seeing the workload's NATS packets;
the exit status is the command's; Ctrl-C ends the hold and leaves nothing behind.

One run of tests/scenarios/hold-access10.yaml is shared by every test, started as a user does
(`testbed run --hold` as a subprocess) and ended by SIGINT in the last test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from testbed import procs, topology
from testbed.emulation import leftovers, runstate
from testbed.probe import evaluate, parse_ping
from testbed.scenario.loader import load
from tests.held import HeldRun, texec
from tests.live import measured_held, probe_beyond_bounds_ms, probe_failures
from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "tests" / "scenarios" / "hold-access10.yaml"
pytestmark = FULL_SYSTEM
MBIT_LOW, MBIT_HIGH = 9.0, 10.0  # iperf3's goodput through a 10 Mbit/s link: headers take 4-5 %
PINGS = 100


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    run = HeldRun(SCENARIO, tmp_path_factory.mktemp("held"), sys.executable, "mininet")
    try:
        run.wait_for(r"\] workload: ", 180)
        # while the swarm publishes: its node's NATS packets, as a user would look at them
        run.tcpdump = texec(run.run_id, "swarm1", "tcpdump", "-n", "-l", "-i", "eth0", "-c", "20", "tcp port 4222",
                            timeout=30)
        run.hint = run.wait_for(r"\] (testbed exec \S+ (\S+) -- ping -c 3 (\S+))", 180)
        state = runstate.known_runs()[run.run_id]
        run.state = state
        run.netns = {os.stat(f"/proc/{pid}/ns/net").st_ino for pid in [*state["nodes"].values(), *state["sites"].values()]}
        run.held_at = time.monotonic()
        yield run
    finally:
        run.end()  # when a test failed before the last one ended the hold


def test_tcpdump_in_a_client_node_sees_the_workloads_nats_packets(held):
    assert held.tcpdump.returncode == 0, held.tcpdump.stderr
    packets = held.tcpdump.stdout.splitlines()
    swarm1 = held.state["ips"]["swarm1"]
    assert len(packets) == 20 and all(".4222" in p and f"{swarm1}." in p for p in packets), held.tcpdump.stdout


def test_the_held_run_prints_a_working_exec_line_and_its_results_are_written(held):
    command, node, address = held.hint.groups()
    assert node in held.state["nodes"] and address in held.state["ips"].values()
    done = subprocess.run([sys.executable, "-m", "testbed.cli", *command.split()[1:]], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0 and "3 received" in done.stdout, done.stdout + done.stderr
    # written before holding: the summary, the end of run.json; the run is still up
    assert held.process.poll() is None
    meta = json.loads((held.out / "run.json").read_text())
    assert meta["complete"] and meta["finished"] > meta["started"]
    assert json.loads((held.out / "summary.json").read_text())["delivered"] > 0


def test_ping_between_two_nodes_matches_the_configured_rtt(held):
    """swarm1 (zone2, 4 ms access) to bzone1 (zone1): within the probe's bounds (testbed.probe)."""
    scenario = load(SCENARIO)
    topo = topology.build(scenario)
    target = held.state["ips"]["bzone1"]
    texec(held.run_id, "swarm1", "ping", "-n", "-c", "3", "-i", "0.2", target)  # ARP and caches warm

    def measure() -> dict:
        done = texec(held.run_id, "swarm1", "ping", "-n", "-c", str(PINGS), "-i", "0.01", "-W", "2",
                     "-w", str(procs.ping_deadline_s(PINGS, 0.01)), target)
        return asdict(evaluate(topo, "swarm1", "bzone1", parse_ping(done.stdout), PINGS))

    pair = measured_held(measure, lambda pair: probe_beyond_bounds_ms([pair]))
    print(f"\nexec ping swarm1 -> bzone1: median {pair['median_ms']} ms, p99 {pair['p99_ms']} ms, "
          f"configured {pair['configured_ms']} ms")
    assert pair["ok"], probe_failures([pair])


def test_iperf3_through_a_10_mbit_access_link(held):
    server_ip = held.state["ips"]["bzone2"]

    def measure() -> float:
        server = subprocess.Popen([sys.executable, "-m", "testbed.cli", "exec", held.run_id, "bzone2", "--",
                                   "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        try:
            for _ in range(20):  # until the server listens
                client = texec(held.run_id, "swarm1", "iperf3", "-c", server_ip, "-t", "4", "-O", "1", "-J")
                # not listening yet: refused (iperf3 -J says so in its JSON, and may exit 0 all the same)
                if "refused" not in client.stdout + client.stderr:
                    break
                time.sleep(0.3)
            assert client.returncode == 0, client.stdout[-2000:] + client.stderr
            result = json.loads(client.stdout)
            assert "sum_received" in result["end"], client.stdout[-3000:]
            return result["end"]["sum_received"]["bits_per_second"] / 1e6
        finally:
            try:
                server.wait(timeout=10)  # -1: it ends after its one client
            except subprocess.TimeoutExpired:
                server.terminate()  # `testbed exec` became iperf3 itself
                server.wait(timeout=10)

    mbps = measured_held(measure, lambda m: max(MBIT_LOW - m, m - MBIT_HIGH), unit="Mbit/s")
    print(f"\nexec iperf3 swarm1 -> bzone2 over a 10 Mbit/s access link: {mbps:.2f} Mbit/s")
    assert MBIT_LOW <= mbps <= MBIT_HIGH


def test_the_exit_status_is_the_commands_and_a_results_folder_names_the_run(held):
    assert texec(held.run_id, "swarm1", "false").returncode == 1
    assert texec(str(held.out), "zone1", "sh", "-c", "exit 7").returncode == 7  # a site router, by the folder
    inside = texec(held.run_id, "swarm1", "sh", "-c", "echo $TESTBED_RUN; ip -o -4 addr show eth0")
    assert inside.stdout.split()[0] == held.run_id and f" {held.state['ips']['swarm1']}/" in inside.stdout


def test_an_unknown_node_or_run_is_refused_with_what_is_there(held):
    done = texec(held.run_id, "h1", "true")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"NODE: run {held.run_id} has no node 'h1'; nodes: ")
    assert all(node in done.stderr for node in held.state["nodes"])
    done = texec("zz00zz", "swarm1", "true")
    assert done.returncode == 2 and f"{held.run_id} (hold-access10)" in done.stderr and done.stderr.count("\n") == 1


def test_sigint_ends_the_hold_and_leaves_nothing(held):
    """Last: the hold's end is a normal end (exit 0, not an interruption), the guard judged only the
    workload's seconds, and nothing of the run is left: processes, namespaces, run files."""
    time.sleep(max(0.0, 3.0 - (time.monotonic() - held.held_at)))  # a hold of some health rows' seconds
    held.process.send_signal(signal.SIGINT)
    assert held.process.wait(timeout=90) == 0, "".join(held.lines[-30:])
    time.sleep(0.5)  # the reader thread's last lines
    assert any("hold ended by SIGINT" in line for line in held.lines)
    meta = json.loads((held.out / "run.json").read_text())
    assert meta["complete"] and "interrupted" not in meta and meta["held_s"] >= 3
    duration = load(SCENARIO).duration
    seconds = [json.loads(line)["elapsed_s"] for line in (held.out / "health.jsonl").read_text().splitlines()]
    assert seconds and max(seconds) <= duration + 1.0  # no held second among them
    assert held.run_id not in runstate.known_runs()
    assert held.run_id not in runstate.tagged_processes().values()
    left = [item for item in leftovers.listing()
            if held.run_id in item.text or (item.kind == "netns" and int(item.key.rsplit("[", 1)[1][:-1]) in held.netns)
            or (item.kind == "file" and leftovers.run_of(Path(item.key[len("file "):])) == held.run_id)]
    assert not left, "\n".join(item.text for item in left)
