"""The emulated network with real namespaces and packets (root only; CI runs them as root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import probe, topology
from testbed.emulation import installed, network, runstate
from testbed.experiment import Session
from testbed.scenario.loader import ScenarioError, parse_text
from tests.live import measured_held

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(not installed.mininet_importable()[0], reason="Mininet is not installed (apt-get install mininet)"),
]

STAR = """\
name: star
duration: 30s
infrastructure:
  star: {nodes: 2, link_delay: 10ms}
emulation: {backend: mininet}
"""

THREE_SITES = """\
name: three
duration: 30s
infrastructure:
  cities: {names: [nyc, chi, atl], access_latency: 2ms}
  cloud: {city: nyc}
  links:
    local: {delay: 1ms}
nodes:
  nc_proxies_per_site: 0
  clients:
    - {name: gs, role: game-server, count: 1, site: each}
emulation: {backend: mininet}
"""

MOBILE = """\
name: mobile
duration: 30s
infrastructure:
  mec_zones: {zones: 3, inter_site_rtt: 30ms}
  cloud: {one_way: 40ms}
  links:
    access: {delay: 5ms}
    local: {delay: 1ms}
nodes:
  nc_proxies_per_site: 0
  clients:
    - {name: uav, role: uav-swarm, count: 1, mobile: true, site: zone1}
emulation: {backend: mininet}
"""


def namespaces() -> set[int]:
    """Inodes of every network namespace a process holds (the root one included)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.add(os.stat(entry / "ns" / "net").st_ino)
            except OSError:
                pass
    return found


def run_namespaces(run_id: str) -> set[int]:
    """Network namespaces held by the run's own (tagged) processes, the root one excluded."""
    root = os.stat("/proc/self/ns/net").st_ino
    found = set()
    for pid, rid in runstate.tagged_processes().items():
        if rid == run_id:
            try:
                found.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
            except OSError:
                pass
    return found - {root}


def rtts(session: Session, a: str, b: str, count: int = 30) -> list[float]:
    return probe.measure(session, [(a, b)], count)[(a, b)]


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def path_off_ms(rtt: float, expected: float) -> float:
    """How far (ms) a median RTT is outside what says the path is the configured one: never less
    than configured (a frame leaves a delay line at most 120 us early), up to 2 ms more (four
    crossings per RTT on a VM whose timer wakeups land 0.1-7 ms late when the host is busy; the
    next wrong path is 30 ms away). The delay line's accuracy itself (median within 0.5 ms) is
    `make bench-emulation`'s to judge, on a quiet machine."""
    return max(rtt - expected - 2.0, expected - 0.5 - rtt)


@pytest.mark.quiet
def test_two_hosts_with_20ms_path_measure_40ms_rtt():
    scenario = parse_text(STAR)
    with Session(scenario) as session:
        rtts(session, "n1", "n2", 3)
        measured = measured_held(lambda: rtts(session, "n1", "n2", 50), lambda m: path_off_ms(median(m), 40.0))
        # Linux's default congestion control in every node, not the machine's (BBR's PROBE_RTT stalls)
        congestion = {session.network.cmd(n, "sysctl -n net.ipv4.tcp_congestion_control").strip() for n in ("n1", "n2")}
    assert len(measured) == 50
    assert path_off_ms(median(measured), 40.0) <= 0, median(measured)
    assert congestion == {network.TCP_CONGESTION} == {"cubic"}


@pytest.mark.quiet
def test_three_site_matrix_matches_the_scenario():
    scenario = parse_text(THREE_SITES)
    topo = topology.build(scenario)
    with Session(scenario, topology=topo) as session:
        pairs = probe.pairs_of_interest(topo)
        probe.measure(session, pairs, 3)

        def measure() -> list:
            raw = probe.measure(session, pairs, 40)
            return [probe.evaluate(topo, a, b, raw[(a, b)], 40) for a, b in pairs]
        results = measured_held(measure, lambda rs: max(path_off_ms(r.median_ms, r.configured_ms)
                                                        if r.median_ms is not None else 1e9 for r in rs))
    assert len(results) >= 6
    for r in results:
        assert r.received == 40, r
        assert path_off_ms(r.median_ms, r.configured_ms) <= 0, r


def test_a_killed_shared_relay_is_restarted_with_every_link_and_its_outage_recorded():
    """The one process relaying every link dies (SIGKILL, as an OOM kill would): the shaper's check
    starts it again with every link, says so, and hands the outage to the guard (`health`), so the
    run is marked invalid; the network then carries pings at the configured RTT again."""
    scenario = parse_text(STAR)
    with Session(scenario, shaper="shared") as session:
        shaper = session.network.shaper
        assert shaper.name == "shared"
        links = len(shaper.links)
        assert links >= 2 and len(rtts(session, "n1", "n2", 3)) == 3
        killed_at = time.time()
        shaper.relay.kill()
        shaper.relay.wait()
        problems = session.network.check()
        assert problems[0].startswith("the shared delay line exited with -9")
        assert sum("restarted in the shared relay" in p for p in problems) == links, problems
        outages = shaper.health()["outages"]
        assert len(outages) == links and all(since <= killed_at + 0.5 and ended >= killed_at
                                              for since, ended in outages), outages
        measured = measured_held(lambda: median(rtts(session, "n1", "n2", 20)), lambda m: path_off_ms(m, 40.0))
    assert path_off_ms(measured, 40.0) <= 0, measured


def forwarded_by_routers(session: Session) -> int:
    """IPv4 packets the site routers' kernels forwarded so far (ForwDatagrams, each namespace's own)."""
    total = 0
    for router in session.network.sites.values():
        names, values = [line.split() for line in router.cmd("grep '^Ip:' /proc/net/snmp").splitlines()[:2]]
        total += int(values[names.index("ForwDatagrams")])
    return total


def test_the_routed_shaper_moves_frames_hop_to_hop_itself_and_the_routers_forward_none():
    """`routed` (the default without netem): pings over a site link and two routers cross the
    relay once each way, the routers' kernels forwarding nothing, at the configured RTT; the same
    pings through the `shared` relay pass through the routers (the measure can see it). A killed
    relay comes back with its routing tables, and routes again."""
    scenario = parse_text(THREE_SITES)
    topo = topology.build(scenario)
    a, b = "gs1", "gs3"  # nyc and atl
    expected = probe.evaluate(topo, a, b, [1.0], 1).configured_ms
    with Session(scenario, topology=topo, shaper="shared") as session:
        before = forwarded_by_routers(session)
        assert len(rtts(session, a, b, 10)) == 10
        assert forwarded_by_routers(session) - before >= 20  # 10 requests and 10 replies, each routed
    with Session(scenario, topology=topo) as session:
        shaper = session.network.shaper
        assert shaper.name == "routed"
        shaper.health()
        before = forwarded_by_routers(session)
        assert len(rtts(session, a, b, 10)) == 10
        moved, deadline = 0, time.monotonic() + 10.0  # the relay's counts come in its health lines, once a while
        while moved < 40 and time.monotonic() < deadline:
            time.sleep(0.1)
            moved += shaper.health()["forwarded"]
        assert forwarded_by_routers(session) == before
        assert moved >= 40  # each of 20 packets moved at both routers of its path (and more on the way)
        shaper.relay.kill()
        shaper.relay.wait()
        assert any("restarted in the shared relay" in p for p in session.network.check())
        measured = measured_held(lambda: median(rtts(session, a, b, 20)), lambda m: path_off_ms(m, expected))
        assert forwarded_by_routers(session) == before
    assert path_off_ms(measured, expected) <= 0, (measured, expected)


@pytest.mark.quiet
def test_relink_changes_the_measured_rtt():
    scenario = parse_text(MOBILE)
    topo = topology.build(scenario)
    # zone1 broker from zone1: 2*(5+1) = 12 ms; from zone2 add the 30 ms inter-site RTT.
    def measured(session, b: str, expected: float) -> float:
        return measured_held(lambda: median(rtts(session, "uav1", b)), lambda m: path_off_ms(m, expected))

    with Session(scenario, topology=topo) as session:
        assert session.network.site_of("uav1") == "zone1"
        before = measured(session, "bzone1", 12.0)
        session.network.relink("uav1", "zone2")
        after = measured(session, "bzone1", 42.0)
        home = measured(session, "bzone2", 12.0)
    assert path_off_ms(before, 12.0) <= 0 and path_off_ms(after, 42.0) <= 0 and path_off_ms(home, 12.0) <= 0, \
        (before, after, home)


def test_a_cut_site_reaches_nothing_outside_until_healed_and_a_move_during_the_cut_follows_it():
    """`cut: zone1` (issue 19): nothing crosses between zone1 and any other site, both ways, while
    zone1's nodes still reach each other; after the heal every path has its RTT again. A node that
    moves into the cut site during the cut is cut off with it, and back when it heals."""
    scenario = parse_text(MOBILE)
    topo = topology.build(scenario)

    def rtt_ms(session, a: str, b: str, expected: float) -> float:  # judged when quiet
        return measured_held(lambda: median(rtts(session, a, b, 10)), lambda m: path_off_ms(m, expected))

    with Session(scenario, topology=topo) as session:
        network = session.network
        rtts(session, "uav1", "bzone2", 3)
        assert network.cut_site("zone1") > 0
        assert rtts(session, "uav1", "bzone2", 5) == [] and rtts(session, "bzone2", "uav1", 5) == []
        assert rtts(session, "uav1", "cloud", 5) == []
        assert path_off_ms(rtt_ms(session, "uav1", "bzone1", 12.0), 12.0) <= 0  # inside the site
        assert median(rtts(session, "bzone2", "bzone3", 10)) > 0  # the rest of the network is whole
        network.relink("uav1", "zone2")
        assert path_off_ms(rtt_ms(session, "uav1", "bzone2", 12.0), 12.0) <= 0
        assert rtts(session, "uav1", "bzone1", 5) == []
        network.relink("uav1", "zone1")
        assert rtts(session, "uav1", "bzone2", 5) == []
        network.heal_site("zone1")
        healed = rtt_ms(session, "uav1", "bzone2", 42.0)
    assert path_off_ms(healed, 42.0) <= 0, healed


def test_bad_link_parameters_are_rejected_at_validation():
    with pytest.raises(ScenarioError, match="must not be negative"):
        parse_text(STAR.replace("link_delay: 10ms", "link_delay: -10ms"))
    with pytest.raises(ScenarioError, match="not between 0% and 100%"):
        parse_text(STAR.replace("emulation:", "  links: {access: {loss: 101%}}\nemulation:"))


def test_kill_9_then_clean_leaves_nothing(tmp_path):
    scenario_file = tmp_path / "long.yaml"
    scenario_file.write_text(STAR.replace("duration: 30s", "duration: 10m"))
    process = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scenario_file), "--results", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    run_id = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "network up" in line:
            run_id = line.split("]")[0].strip("[ ")
            break
    assert run_id, "the run did not come up"
    tagged = [pid for pid, rid in runstate.tagged_processes().items() if rid == run_id]
    assert len(tagged) >= 4  # node shells and relays
    held = run_namespaces(run_id)
    assert len(held) >= 3  # two nodes, the hub site, the shaper
    process.send_signal(signal.SIGKILL)
    process.wait()
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "clean", run_id], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    time.sleep(0.5)
    assert not [pid for pid, rid in runstate.tagged_processes().items() if rid == run_id]
    assert not (held & namespaces())
    assert run_id not in runstate.known_runs()
    again = subprocess.run([sys.executable, "-m", "testbed.cli", "clean", run_id], capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0 and "removed 0" in again.stdout


def test_clean_rejects_a_bad_run_id():
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "clean", "x;rm -rf /"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "is not a run id" in out.stderr


def test_a_normal_run_leaves_nothing_behind():
    scenario = parse_text(STAR)
    with Session(scenario) as session:
        run_id = session.run_id
        held = run_namespaces(run_id)
        assert len(held) >= 3
    assert not [p for p, r in runstate.tagged_processes().items() if r == run_id]
    assert not (held & namespaces())


def test_sigterm_tears_down_and_keeps_what_was_recorded(tmp_path):
    scenario_file = tmp_path / "long.yaml"
    scenario_file.write_text(STAR.replace("duration: 30s", "duration: 10m"))
    process = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scenario_file), "--results", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    run_id = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "median NC error" in line:  # a coordinate snapshot has been recorded
            run_id = line.split("]")[0].strip("[ ")
            break
    assert run_id, "the run did not come up"
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 130, out
    assert not [pid for pid, rid in runstate.tagged_processes().items() if rid == run_id]
    (run_dir,) = tmp_path.glob(f"star-{run_id}")
    meta = __import__("json").loads((run_dir / "run.json").read_text())
    assert meta["interrupted"] == "SIGTERM" and meta["complete"] is False
    assert (run_dir / "events.jsonl").read_text().strip()


def test_the_nodes_congestion_control_is_added_to_the_machines_allowed_list_only_when_missing(tmp_path):
    """A namespace can make cubic its default only if the machine allows it: added once, kept, and a
    machine that refuses the write is said (the nodes then keep the machine's default)."""
    knob = tmp_path / "tcp_allowed_congestion_control"
    knob.write_text("reno bbr\n")
    assert "added" in network.allow_congestion_control("cubic", knob)
    assert knob.read_text().split() == ["reno", "bbr", "cubic"]
    assert network.allow_congestion_control("cubic", knob) is None
    assert "cannot be allowed" in network.allow_congestion_control("cubic", tmp_path / "missing" / "knob")
