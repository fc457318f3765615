"""A run spread over three namespace-servers (each a network namespace with its own sshd): nodes
made over ssh, links between servers as VXLAN on the management network, relinks across servers,
a crashed run cleaned on every server by `testbed clean --servers`, and connections that outlive a
server ended by `servers down` and `testbed clean`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.emulation import runstate
from testbed.emulation import servers as servers_mod
from tests import claims
from tests.live import measured_held, probe_beyond_bounds_ms
from tests.needs import FULL_SYSTEM

pytestmark = FULL_SYSTEM + [pytest.mark.long, pytest.mark.skipif(not shutil.which("sshd"), reason="needs sshd (openssh-server)")]

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "scenarios" / "uav-smoke.yaml"
SERVERS = "tbs1,tbs2,tbs3"


def _testbed(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


# Namespace-servers leave nothing behind: a connection still open when `servers down` runs is
# ended with them, and the process of a connection that outlived a server's name (its namespace
# held by sshd alone, unreachable once the management link is gone) is found and ended by
# `testbed clean` and by `servers down`. These come first in the file: they make and remove their
# own two servers before the module's three are up (one file, so one worker owns the names).


def _servers_up(count: int, *options: str) -> dict:
    """`count` namespace-servers of this test's own (never someone else's that are already up)."""
    if servers_mod.namespace_servers():
        pytest.skip("namespace-servers are already up (someone else's): not touching them")
    made = _testbed("servers", "up", str(count), *options)
    assert made.returncode == 0, made.stdout + made.stderr
    return servers_mod.namespace_servers()


@pytest.fixture
def two_servers():
    yield _servers_up(2)
    _testbed("servers", "down")


def _connect(server: servers_mod.Server, control_dir: Path | None) -> subprocess.Popen:
    """A connection that stays open: a command that waits, over a control connection or not."""
    return subprocess.Popen(server.ssh(control_dir) + ["sleep 300"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _servers_sshd() -> list[runstate.Process]:
    return [p for p in runstate.processes() if servers_mod.is_server_sshd(p)]


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_servers_down_ends_the_connections_open_to_them(two_servers, tmp_path):
    control_dir = runstate.STATE_DIR / f"ssh-{runstate.new_run_id()}"
    control_dir.mkdir(parents=True)
    clients = [_connect(two_servers["tbs1"], control_dir), _connect(two_servers["tbs2"], None)]
    try:
        _until(lambda: len(_servers_sshd()) >= 4 and servers_mod.control_masters(control_dir))  # listeners, connections
        down = _testbed("servers", "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert "ssh connection to 10.253.0.11" in down.stdout and "namespace-server tbs2: ended" in down.stdout
        assert _servers_sshd() == [] and servers_mod.control_masters(control_dir) == []
        for client in clients:
            assert client.wait(timeout=10) != 0  # its connection was ended, not left waiting
    finally:
        for client in clients:
            client.kill()
        shutil.rmtree(control_dir, ignore_errors=True)


def test_a_connection_that_outlived_its_servers_name_is_ended_by_clean(two_servers):
    """The way `servers down` used to go: the listener killed, the name and the link deleted, a
    connection's sshd left holding an unnamed namespace."""
    client = _connect(two_servers["tbs1"], None)
    try:
        _until(lambda: len(servers_mod.server_processes(orphans_only=False).get("tbs1", [])) >= 2)
        runstate.end([int((servers_mod.NS_DIR / "sshd-tbs1.pid").read_text())])
        subprocess.run(["ip", "netns", "del", "tbs1"], check=True)
        subprocess.run(["ip", "link", "del", f"{servers_mod.MGMT_BRIDGE}1"], check=True)
        orphans = servers_mod.server_processes(orphans_only=True)
        assert len(orphans) == 1 and all(name.startswith("netns [") for name in orphans), orphans
        clean = _testbed("clean", runstate.new_run_id())  # a run that never was: only the orphan is its to end
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert "orphaned namespace-server session, netns [" in clean.stdout and "sshd: " in clean.stdout
        assert servers_mod.server_processes(orphans_only=True) == {}
        assert "tbs2" in servers_mod.server_processes(orphans_only=False)  # a server that is up is left alone
    finally:
        client.kill()


@pytest.fixture(scope="module")
def servers():
    """Three isolated namespace-servers: their own processes, /tmp, /run/testbed and results/, so
    the harness reaches them as it would other machines, over ssh only."""
    yield _servers_up(3, "--isolated")
    down = _testbed("servers", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not servers_mod.namespace_servers()
    assert "tbmgmt" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not servers_mod.NS_DIR.exists()


def test_servers_check_passes_namespace_servers_and_says_what_fails(servers):
    """`testbed servers check` asks what a run needs, over ssh: all of it holds on namespace-servers
    (isolated ones, as other machines are); a server whose underlay cannot carry VXLAN whole and one
    ssh cannot reach are each named with the check that failed."""

    ok = _testbed("servers", "check", "tbs1", "tbs2", "tbs3", "--json", timeout=300)
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    findings = json.loads(ok.stdout)["findings"]
    assert {f["check"] for f in findings if f["server"] == "tbs1"} == {
        "ssh", "root", "project", "version", "tools", "MTU to tbs2", "MTU to tbs3", "clock"}
    assert all(f["ok"] for f in findings), findings
    subprocess.run(["ip", "-n", "tbs3", "link", "set", "mgmt0", "mtu", "1500"], check=True)
    try:
        small = _testbed("servers", "check", "tbs1", "tbs3", "--json", timeout=300)
    finally:
        subprocess.run(["ip", "-n", "tbs3", "link", "set", "mgmt0", "mtu", str(servers_mod.MGMT_MTU)], check=True)
    failed = [f for f in json.loads(small.stdout)["findings"] if not f["ok"]]
    assert small.returncode == 1 and [(f["server"], f["check"]) for f in failed] == [("tbs3", "MTU to tbs1")], failed
    assert "MTU 1500; VXLAN needs 1550" in failed[0]["detail"]
    unreachable = _testbed("servers", "check", "root@10.253.0.99", "--json", timeout=120)  # no server answers there
    (only,) = json.loads(unreachable.stdout)["findings"]
    assert unreachable.returncode == 1 and only["check"] == "ssh" and "passwordless ssh" in only["detail"], only
    table = _testbed("servers", "check", "tbs1", timeout=300)  # as a user reads it
    assert table.returncode == 0 and "every check passed" in table.stdout, table.stdout


ECHO = ("import socket\ns = socket.create_server(('127.0.0.1', 0))\nprint(s.getsockname()[1], flush=True)\n"
        "while True:\n    c, _ = s.accept()\n    while d := c.recv(65536):\n        c.sendall(d)\n    c.close()")


def test_a_service_inside_a_server_is_reached_through_ssh_as_another_machines_would_be(servers):
    """remote.connect_through (what the harness uses for nodes on machines whose namespaces it cannot
    enter): a socket to a service listening only inside the server, carried by a relay over ssh; a
    refused connection is an error with the reason; a closed socket leaves no relay behind."""
    from testbed.emulation import remote

    server = servers["tbs1"]
    inside = 1  # the server's sshd: the first process of its own PID namespace, in its network namespace
    echo = subprocess.Popen(["ip", "netns", "exec", "tbs1", sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    try:
        port = int(echo.stdout.readline())
        ssh = server.ssh(None)
        with remote.connect_through(ssh, inside, sys.executable, ("127.0.0.1", port)) as sock:
            payload = bytes(range(256)) * 400  # 100 KB each way, in pieces
            sock.sendall(payload)
            got = b""
            while len(got) < len(payload):
                got += sock.recv(65536)
            assert got == payload
        with pytest.raises(ConnectionError, match="refused"):
            remote.connect_through(ssh, inside, sys.executable, ("127.0.0.1", 1))
        _until(lambda: (remote._reap(), not remote._relays)[1])  # every relay's ssh ended with its socket
    finally:
        echo.kill()
        echo.wait()
        remote.end_relays()


def test_a_faults_signal_reaches_a_nodes_processes_by_the_code_run_on_the_server(servers):
    """`python -m testbed.emulation.netns signal PID SIGNUM` over ssh (how a crash reaches a node on
    a machine whose kernel is not ours): every process in PID's network namespace but PID itself,
    with the pids the server gave (its own PID namespace's)."""
    ssh = servers["tbs1"].ssh(None)

    def there(command: str) -> str:
        done = subprocess.run(ssh + [command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done
        return done.stdout

    def state(pid: str) -> str:  # R/S while it lives; "" once gone (or "Z" until its parent reaps it)
        return there(f"cut -d' ' -f3 /proc/{pid}/stat 2>/dev/null || true").strip()

    # a node (a namespace and its shell) and a process in it, made on the server
    holder, member = there("unshare -n sleep 300 >/dev/null 2>&1 & h=$!; sleep 0.5; "
                           "nsenter -t $h -n sleep 299 >/dev/null 2>&1 & m=$!; sleep 0.5; echo $h $m").split()
    try:
        said = there(" ".join([sys.executable, "-m", "testbed.emulation.netns", "signal", holder, str(int(signal.SIGTERM))]))
        assert said.split() == ["sleep"], said
        _until(lambda: state(member) in ("", "Z"))
        assert state(holder) in ("R", "S")  # the node's shell is left
    finally:
        there(f"kill -9 {holder} {member} 2>/dev/null || true")


def _left_on_servers(names) -> list[str]:
    """Every process in the servers' namespaces but their sshd listeners."""
    left = []
    for name in names:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "[listener]" not in cmdline and not cmdline.startswith(("sshd: ", "unshare --pid")):
                left.append(f"{name}: {cmdline}")
    return left


#: The NTP-style error bound (half the shortest of 20 round trips through the server's ssh channel)
#: a namespace-server on this kernel must reach: its clock offset is judged against the true one (0,
#: the same clock), within that bound, and the bound itself against this
CLOCK_ERROR_MAX_MS = 2.0


def _clock_off_ms(offsets: dict) -> float:
    """How far the worst server's clock estimate is from the truth (namespace-servers share this
    machine's clock: offset 0) beyond its own error bound, or its bound beyond CLOCK_ERROR_MAX_MS."""
    return max([max(abs(c["offset_ms"]) - c["error_ms"], c["error_ms"] - CLOCK_ERROR_MAX_MS)
                for c in offsets.values()] or [1e9])


def _beyond_bounds_ms(done: subprocess.CompletedProcess) -> float:
    """How far the probe's worst pair is beyond its bounds (median within its tolerance, p99 within
    its p99 bound: `tests.live.probe_beyond_bounds_ms`), or its worst clock estimate beyond its own
    (`_clock_off_ms`), ms; <= 0 when both held, and a probe that printed no pairs is far off."""
    try:
        result = json.loads(done.stdout)
        pairs, clock = result["pairs"], _clock_off_ms(result["clock_offsets"])
    except (ValueError, KeyError):
        return 1e9
    if done.returncode == 0:
        return clock
    return max(clock, probe_beyond_bounds_ms(pairs))


@pytest.mark.quiet
def test_probe_across_three_servers_holds_the_configured_rtts(servers):
    """Every pair of sites, most of them on different servers, within the probe's bounds; each
    server's clock measured against ours (here the same kernel clock: near zero)."""
    probe = measured_held(lambda: _testbed("probe", str(SMOKE), "--servers", SERVERS, "--count", "100", "--json"),
                          _beyond_bounds_ms)
    assert probe.returncode == 0, probe.stdout[-3000:] + probe.stderr[-3000:]
    result = json.loads(probe.stdout)
    assert result["ok"] and len(result["pairs"]) >= 10
    across = [p for p in result["pairs"] if p["servers"].split("-")[0] != p["servers"].split("-")[1]]
    assert len(across) >= 5, result["pairs"]
    assert set(result["clock_offsets"]) == set(servers)
    # namespace-servers share this machine's clock: the true offset is 0, within each estimate's bound,
    # and the bound is what a round trip on one kernel gives (measured again when the hypervisor stole)
    assert _clock_off_ms(result["clock_offsets"]) <= 0, result["clock_offsets"]


def test_an_isolated_servers_processes_and_files_are_its_own(servers):
    """What makes an isolated namespace-server another machine: it sees only its own processes and
    its own /tmp; the harness's process table leaves its processes out (`everywhere` shows them)."""
    ssh = servers["tbs1"].ssh(None)
    seen = subprocess.run(ssh + ["cat /proc/1/cmdline | tr '\\0' ' '; echo; echo mine > /tmp/tb-isolated; ls /tmp"],
                          capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0 and seen.stdout.startswith("sshd:"), seen
    assert not Path("/tmp/tb-isolated").exists()  # its /tmp is not ours
    def listener(p):
        return p.title.startswith("sshd:") and "sshd-tbs1.conf" in p.title

    assert not any(listener(p) for p in runstate.processes())
    assert any(listener(p) for p in runstate.processes(everywhere=True))


IN_FLIGHT_S = 1.0  # a message sent this long before its broker died may still have been on its way


def _trace_gaps(out: Path) -> list[dict]:
    """Every run of sequence numbers a consumer never got from a producer, with when the first and
    the last of them were due (sequence numbers are due evenly between the two received around them)."""
    gaps = []
    for trace in (out / "traces").glob("*.jsonl"):
        by_producer: dict[str, list[tuple[int, float]]] = {}
        for line in trace.read_text().splitlines():
            row = json.loads(line)
            by_producer.setdefault(row["producer"], []).append((row["seq"], float(row["send_time"])))
            topic = row["topic"]
        for seen in by_producer.values():
            seen.sort()
            for (a, due_a), (b, due_b) in zip(seen, seen[1:]):
                if b > a + 1:
                    step = (due_b - due_a) / (b - a)
                    gaps.append({"topic": topic, "trace": trace.name, "lost": b - a - 1,
                                 "first_due": due_a + step, "last_due": due_b - step})
    return gaps


def _failover_outages(events: list[dict]) -> dict[str, tuple[float, float]]:
    """Each topic whose broker died under it: from the first client that lost it to the last that
    got traffic through the new broker."""
    lost = [e for e in events if e["type"] == "broker_lost"]
    ends = [e for e in events if e["type"] == "downtime" and e["reason"] == "broker_lost"]
    return {topic: (min(e["time"] for e in lost if e["topic"] == topic),
                    max([e["end"] for e in ends if e["topic"] == topic], default=float("-inf")))
            for topic in {e["topic"] for e in lost}}


def test_a_run_over_three_servers_relinks_across_them_and_loses_nothing_outside_a_failover(servers, tmp_path):
    """The smoke over three isolated servers, a broker killed on one of them: nodes reached over ssh
    only (a local shortcut would raise netns.LocalShortcut and fail the run), every server's CPU in
    the guard's rows, and the traces and logs the nodes wrote there gathered into the run folder."""
    scenario = tmp_path / "uav-smoke.yaml"
    scenario.write_text(SMOKE.read_text() + "faults:\n  - {at: 4s, kill: bzone3}\n")
    run = _testbed("run", str(scenario), "--servers", SERVERS, "--duration", "15s", "--results", str(tmp_path))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out,) = tmp_path.glob("uav-smoke-*")
    meta = json.loads((out / "run.json").read_text())
    assert meta["complete"] and set(meta["servers"]) == set(servers)
    sites = [site for server in meta["servers"].values() for site in server["sites"]]
    assert sorted(sites) == sorted(set(sites)) and all(meta["servers"][s]["sites"] for s in servers)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    relinks = [e for e in events if e["type"] == "relink"]
    crossed = [e for e in relinks if e["servers"].split("->")[0] != e["servers"].split("->")[1]]
    assert crossed, relinks
    (killed,) = [e for e in events if e["type"] == "broker_killed"]
    assert killed["node"] == "bzone3" and "nats-server" in killed["killed"], killed  # signalled on its server
    summary = json.loads((out / "summary.json").read_text())
    assert summary["expected_deliveries"] > 2000, summary
    # Whether bzone3 holds a topic when it dies depends on where the coordinates place the swarms: if
    # it did, what its consumers lost is exactly what was due during that topic's failover; else nothing.
    gaps = _trace_gaps(out)
    assert sum(g["lost"] for g in gaps) == summary["expected_deliveries"] - summary["delivered"], (gaps, summary)
    outages = _failover_outages(events)
    assert set(outages) == {e["topic"] for e in events if e["type"] == "orphan_replaced"}, outages
    if outages:
        claims.judged("a failover across servers loses only what was due during it")
    else:
        claims.not_exercised("a failover across servers loses only what was due during it",
                             "bzone3 held no topic when it was killed (the coordinates placed the swarms elsewhere): "
                             "only 'nothing lost' was judged")
    assert all(g["topic"] in outages and outages[g["topic"]][0] - IN_FLIGHT_S <= g["first_due"]
               and g["last_due"] <= outages[g["topic"]][1] for g in gaps), (gaps, outages)
    assert sorted(p.name for p in (out / "traces").glob("*.jsonl"))  # written on the servers, gathered here
    assert (out / "logs" / "health-swarm1.jsonl").exists() and (out / "logs" / "broker-bzone1.events.jsonl").exists()
    rows = [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines()]
    assert rows and all(set(r.get("servers", {})) == set(servers) for r in rows[1:-1]), rows[:3]
    assert any(r.get("publisher_n") for r in rows)  # the clients' lateness came through the servers' feeds
    assert "across servers" in run.stdout and "results: not gathered" not in run.stdout
    assert _left_on_servers(servers) == []
    assert not (runstate.STATE_DIR / f"ssh-{meta['run_id']}").exists()  # its ssh control sockets went too


def test_a_killed_run_is_cleaned_on_every_server(servers, tmp_path):
    """SIGKILL the harness mid-run: `testbed clean RUN --servers ...` leaves no process of the run
    anywhere, and the servers hold nothing but their sshd; `testbed gather` then brings what the
    nodes wrote there."""
    harness = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(SMOKE), "--servers", SERVERS,
                                "--results", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    run_id, deadline = None, time.monotonic() + 240
    for line in harness.stdout:
        if run_id is None and line.startswith("[") and "]" in line:
            run_id = line[1:line.index("]")]
        if "settle:" in line or time.monotonic() > deadline:
            break
    assert run_id and harness.poll() is None
    os.kill(harness.pid, signal.SIGKILL)
    harness.wait()
    assert run_id in runstate.tagged_processes().values()  # what the dead harness left behind
    clean = _testbed("clean", run_id, "--servers", SERVERS)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    for name in servers:
        assert f"{name}: clean" in clean.stdout, clean.stdout
    time.sleep(1)
    assert run_id not in runstate.tagged_processes().values()
    assert not (runstate.STATE_DIR / f"ssh-{run_id}").exists()
    assert _left_on_servers(servers) == []
    # what the nodes wrote on their servers is still there: gathered afterwards
    (out,) = tmp_path.glob(f"uav-smoke-{run_id}")
    gathered = _testbed("gather", str(out), "--servers", SERVERS)
    assert gathered.returncode == 0 and "3 of 3 servers" in gathered.stdout, gathered.stdout + gathered.stderr
    assert "Server is ready" in (out / "logs" / "nats-bzone1.log").read_text()  # nats-server's own log, written there
