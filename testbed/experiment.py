"""One run: choose backend and shaper, bring the network up, drive the mobility timeline, record,
tear down (also after Ctrl-C or SIGTERM; after SIGKILL `testbed clean` finishes the job).

results/<run-id>/ holds the scenario as run, run.json (metadata) and events.jsonl (relinks and
their checks), written as they happen so an interrupted run keeps what it recorded.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import sys
import time
from pathlib import Path

import yaml

from testbed import doctor, health, mobility, natsserver, plugin, provenance
from testbed import topology as topo_mod
from testbed.emulation import choose, nodeexec, runstate
from testbed.emulation.network import EmulationError, Network
from testbed.faults import FaultSchedule
from testbed.logs import route_library_logs
from testbed.monitor import HealthMonitor, ServerFeeds
from testbed.scenario.model import Scenario
from testbed.watchdog import TimelineStalled, Watchdog

SNAPSHOT_PERIOD_S = 5.0  # E(t) through the run (analysis.estimates); one RPC per agent
# The run stops while the results disk still has this much free: enough for the summary, the merged
# events and the end screen (tens of MB at most), so what was recorded stays whole and readable.
DISK_RESERVE_B = 64 << 20
DISK_CHECK_S = 1.0


class DiskFull(Exception):
    """The results disk is nearly full: the run stops early, keeping what it recorded."""


def disk_free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def check_disk(path: Path, reserve: int = DISK_RESERVE_B) -> None:
    free = disk_free(path)
    if free < reserve:
        raise DiskFull(f"the results disk ({path}) has {free / 2**20:.0f} MB free, under the "
                       f"{reserve / 2**20:.0f} MB the run keeps for its summary")


class BadRunInput(ValueError):
    """The run cannot start as asked (forced backend or shaper missing): exit code 2."""


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived: unwind through the teardown."""


def _raise_interrupted(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


class Session:
    """Context manager owning a running network for a scenario; always tears it down."""

    def __init__(self, scenario: Scenario, backend: str = "auto", shaper: str = "auto", console=None,
                 topology: topo_mod.Topology | None = None, log_dir: Path | None = None,
                 servers: list | None = None):
        self.scenario = scenario
        self.servers = servers or []  # servers.Server: the run spread over them (docs/guide/multi-host.md)
        self.clock_offsets: dict[str, dict] = {}
        self.console = console
        self.topology = topology or topo_mod.build(scenario)
        self.handovers = mobility.plan(scenario, self.topology)
        backend_choice = choose.choose_backend(backend if backend != "auto" else scenario.emulation.backend)
        if not backend_choice.value:
            raise BadRunInput(backend_choice.reason)
        shaper_choice = choose.choose_shaper(shaper if shaper != "auto" else scenario.emulation.shaper)
        if not shaper_choice.value:
            raise BadRunInput(shaper_choice.reason)
        if scenario.emulation.switch == "ovs":
            raise BadRunInput("emulation.switch: ovs is not supported yet: site switches are Linux bridges inside "
                              "each site's namespace, where Open vSwitch's daemons cannot reach; use switch: bridge")
        self.backend, self.shaper = backend_choice.value, shaper_choice.value
        if self.servers and self.backend != "mininet":
            raise BadRunInput(f"servers: a run over servers uses the mininet backend (network namespaces on each "
                              f"server); {self.backend} is not supported there yet")
        self.reasons = (backend_choice.reason, shaper_choice.reason)
        self.run_id = runstate.new_run_id()
        self.log_dir = log_dir
        self.faults = None  # the run's FaultSchedule once the measured run starts
        self.network: Network | None = None
        self._old_handlers = {}

    def say(self, message: str) -> None:
        if self.console is not None:
            self.console.print(f"[{self.run_id}] {message}", highlight=False, markup=False)

    def __enter__(self) -> Session:
        from testbed.emulation import backends

        backend = backends.get(self.backend)(self.run_id, log_dir=self.log_dir)  # self.backend: its name
        problems = doctor.preflight(len(self.topology.nodes) + len(self.topology.sites))
        problems += backend.preflight(self.topology)
        if problems:
            raise BadRunInput("cannot run here: " + "; ".join(problems))
        control_dir = self._reach_servers() if self.servers else None
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise_interrupted)
        runstate.register(self.run_id, scenario=self.scenario.name, backend=self.backend, shaper=self.shaper)
        self.say(f"backend {self.backend} ({self.reasons[0]}), shaper {self.shaper} ({self.reasons[1]})")
        self.network = Network(self.topology, self.run_id, backend, self.shaper, seed=self.scenario.seed,
                               progress=self.say, log_dir=self.log_dir, servers=self.servers, control_dir=control_dir,
                               reachable=self.reachable())
        started = time.monotonic()
        try:
            self.network.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.say(f"network up: {len(self.topology.sites)} sites, {len(self.topology.nodes)} nodes "
                 f"in {time.monotonic() - started:.1f}s")
        return self

    def reachable(self) -> dict[str, set[str]]:
        """The sites each mobile node's plan moves it to: its access link gets a port to each up front."""
        found: dict[str, set[str]] = {}
        for planned in self.handovers:
            found.setdefault(planned.node, set()).add(planned.to_site)
        return found

    def _reach_servers(self) -> Path:
        """Check every server can carry the run, and measure its clock against ours (one-way
        latency across servers is only as good as that offset): refused beyond CLOCK_LIMIT_S."""
        from testbed.emulation import server_check
        from testbed.emulation import servers as servers_mod

        control_dir = runstate.STATE_DIR / f"ssh-{self.run_id}"
        control_dir.mkdir(parents=True, exist_ok=True)
        project = Path(__file__).resolve().parents[1]
        # Another machine's project and tools are checked too (its version, `testbed doctor` there);
        # a namespace-server runs this very checkout.
        elsewhere = any(not s.on_this_machine for s in self.servers)
        problems = server_check.problems(server_check.survey(self.servers, control_dir, project, sys.executable,
                                                             thorough=elsewhere))
        if problems:
            servers_mod.close(self.servers, control_dir)
            raise BadRunInput("servers: " + "; ".join(problems))
        for server in self.servers:
            offset, error = server_check.clock_offset(server, control_dir, sys.executable)
            self.clock_offsets[server.name] = {"host": server.host, "offset_ms": round(offset * 1e3, 3),
                                               "error_ms": round(error * 1e3, 3)}
            if abs(offset) > server_check.CLOCK_LIMIT_S:
                servers_mod.close(self.servers, control_dir)
                raise BadRunInput(f"servers: {server.name}'s clock is {offset * 1e3:+.1f} ms off ours (more than "
                                  f"{server_check.CLOCK_LIMIT_S * 1e3:g} ms): synchronise the clocks (chrony) first")
        self.say("servers: " + ", ".join(f"{name} clock {c['offset_ms']:+.2f} ms (±{c['error_ms']:.2f})"
                                         for name, c in self.clock_offsets.items()))
        return control_dir

    def server_record(self) -> dict:
        """run.json's `servers`: where each site ran and each server's clock against ours."""
        placement = self.network.placement
        return {s.name: {**self.clock_offsets.get(s.name, {}),
                         "sites": [site for site, at in placement.items() if at == s]} for s in self.servers}

    def _clean_servers(self) -> None:
        """The run's control connections closed, then `testbed clean` of this run on every server."""
        from testbed.emulation import servers as servers_mod

        control_dir = self.network.control_dir if self.network else runstate.STATE_DIR / f"ssh-{self.run_id}"
        servers_mod.close(self.servers, control_dir)
        for note in servers_mod.clean(self.servers, sys.executable, self.run_id, force=True):
            self.say(f"clean {note}")

    def __exit__(self, *_exc) -> None:
        # A second Ctrl-C must not cut the teardown short.
        for sig in self._old_handlers:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if self.network is not None:
                started = time.monotonic()
                self.network.stop()
                self.say(f"network down in {time.monotonic() - started:.1f}s")
        finally:
            from testbed.emulation import cleanup

            cleanup.clean(self.run_id, force=True)
            if self.servers:
                self._clean_servers()
            runstate.unregister(self.run_id)
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)


def _write_event(handle, **event) -> None:
    handle.write(json.dumps(event) + "\n")
    handle.flush()


def run(scenario: Scenario, path: Path, backend: str, shaper: str, interactive: bool, results_root: Path,
        console, topology: topo_mod.Topology | None = None, servers: list | None = None, view=None,
        machine_today: dict | None = None, hold: bool = False) -> int:
    """Run a scenario as far as the built parts go; returns the exit code. `view`: a listening
    socket (testbed.view.server.bind) to serve the live view on, or None; `machine_today`: how fast
    the machine was before the run against its measured capacity (testbed.machine_speed), recorded.
    `hold`: keep the network up after the results until SIGINT, SIGTERM or SIGHUP (`_hold`)."""
    session = Session(scenario, backend=backend, shaper=shaper, console=console, topology=topology,
                      servers=servers)
    out = results_root / f"{scenario.name}-{session.run_id}"
    session.log_dir = out / "logs"
    out.mkdir(parents=True, exist_ok=True)
    route_library_logs(out / "logs")  # kazoo's reconnect chatter belongs in the run's logs, not the console
    (out / "scenario.yaml").write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    code = provenance.head()  # which code made this run: `make paper`'s index names it
    meta = {"run_id": session.run_id, "scenario": scenario.name, "scenario_file": str(path),
            "git_commit": provenance.short(code["commit"]), "git_dirty": code["dirty"],
            "backend": session.backend, "shaper": session.shaper,
            "nats_server": {"choice": scenario.nodes.nats_server,
                            "version": natsserver.version(natsserver.binary(scenario.nodes.nats_server, sys.executable))},
            "system": scenario.system, "label": plugin.label(scenario),
            "machine": platform.node(), "kernel": platform.release(), "seed": scenario.seed, "scale": scenario.scale,
            "started": time.time(), "complete": False}
    if machine_today is not None:
        meta["machine_today"] = machine_today
    (out / "run.json").write_text(json.dumps(meta, indent=2))
    live = None
    if view is not None:
        from testbed.view.live import LiveView

        live = LiveView(out, view)
        session.say(f"view: {live.address} (live; afterwards `testbed view {out}` replays the run)")
    try:
        code = _run_session(session, scenario, out, meta, interactive, hold)
    finally:
        if live is not None:
            meta["view"] = live.stop()
            (out / "run.json").write_text(json.dumps(meta, indent=2))
    return code


def _run_session(session: Session, scenario: Scenario, out: Path, meta: dict, interactive: bool,
                 hold: bool = False) -> int:
    """The run inside its session, after its folder and run.json exist; writes run.json's end."""
    code = 0
    try:
        check_disk(out)
    except DiskFull as why:
        session.say(f"not started: {why}")
        return 1
    with (out / "events.jsonl").open("a") as events:
        try:
            with session:
                if session.servers:
                    meta["servers"] = session.server_record()
                if interactive:
                    from mininet.cli import CLI

                    session.say("interactive: the Mininet CLI on the running network (mobility paused); exit to tear down")
                    CLI(session.network.net)
                else:
                    code = _run_roles(session, scenario, out, events, meta)
                    if hold:
                        _hold(session, out, meta, code)
        except Interrupted as why:
            session.say(f"interrupted by {why}: network torn down, results so far kept in {out}")
            meta["interrupted"] = str(why)
            code = 130
        except EmulationError as error:
            session.say(f"failed: {error}")
            code = 1
        except (DiskFull, TimelineStalled) as why:
            session.say(f"stopped: {why}; network torn down, results so far kept in {out}")
            meta["stopped"] = str(why)
            code = 1
    _write_end(session, out, meta, code)
    session.say(f"results in {out}")
    return code


def _write_end(session: Session, out: Path, meta: dict, code: int) -> None:
    """run.json's end: when the run finished (the first time it is written: a held run's network
    outlives its run), whether it is complete."""
    meta.setdefault("finished", time.time())
    meta.update(complete=code == 0, handovers_planned=len(session.handovers))
    (out / "run.json").write_text(json.dumps(meta, indent=2))


def _hold(session: Session, out: Path, meta: dict, code: int) -> None:
    """`run --hold`: the run's results are written (its processes stopped, so nothing recorded is
    missing) and its network stays up, for `testbed exec`, until SIGINT, SIGTERM or SIGHUP ends the
    hold and the teardown follows as after any run. The guard stopped with the workload: held
    seconds are no run's seconds."""
    _write_end(session, out, meta, code)
    held = time.monotonic()
    network = session.network
    try:
        session.say(f"held: results written to {out}; the network stays up until Ctrl-C or SIGTERM (its "
                    "processes have stopped: start what you need in the nodes)")
        for line in nodeexec.example(session.run_id, {name: network.ip_of(name) for name in network.nodes}):
            session.say(line)
        while True:
            signal.pause()
    except Interrupted as why:
        meta["held_s"] = round(time.monotonic() - held, 1)
        session.say(f"hold ended by {why} after {meta['held_s']:g} s: tearing down")
    (out / "run.json").write_text(json.dumps(meta, indent=2))


def _run_roles(session: Session, scenario: Scenario, out: Path, events, meta: dict) -> int:
    """Start the run's roles, drive the timeline, stop them in reverse, then merge their events
    and summaries (even after an error: what was recorded is kept)."""
    from testbed import roles as roles_mod

    feeds = ServerFeeds(session.network.server_feeds(out / "logs")) if session.network.elsewhere else None
    run = roles_mod.RunContext(session.network, session.topology, scenario, out, session.run_id, say=session.say,
                               rows_elsewhere=feeds.trace_rows if feeds else None)
    roles: list = []
    monitor = HealthMonitor(session.run_id, session.network.shaper, out / "logs", out / "health.jsonl", feeds=feeds)
    try:
        for role in roles_mod.for_run(run):
            roles.append(role)
            role.start()
        return _drive(session, roles, events, monitor)
    finally:
        monitor.stop()
        _stop(session, roles)
        meta["harness"] = monitor.finish()
        if session.network.elsewhere:
            session.say(f"results: gathering the run directories of {len(session.network.elsewhere)} servers")
            for problem in session.network.gather():
                session.say(f"results: not gathered from {problem}")
        meta["faults"] = session.faults.spans if session.faults else []
        _finish(session, roles, events, out, meta)
        session.say(health.describe(meta["harness"]))


def _stop(session: Session, roles: list) -> None:
    """Stop every role, the last started first; one that fails to stop does not keep the others up."""
    for role in reversed(roles):
        try:
            role.stop()
        except Exception as error:  # noqa: BLE001 - reported, and the network teardown follows anyway
            session.say(f"stopping {role.name} failed: {error!r}")


def _finish(session: Session, roles: list, events, out: Path, meta: dict) -> None:
    """Merge the roles' events into the run's, write the summary and print the end screen."""
    merged = sorted((event for role in roles for event in role.events()), key=lambda e: e.get("time", 0))
    for event in merged:
        _write_event(events, **event)
    faults = session.faults.events if session.faults else []  # already written, as they happened
    merged = sorted(merged + faults, key=lambda e: e.get("time", 0))
    summary = {}
    for role in roles:
        summary.update(role.summary(merged))
    if not summary:
        return
    summary["harness"] = meta.get("harness")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    meta["summary"] = summary
    if session.console is not None:
        for role in roles:
            for line in role.end_screen(summary):
                session.console.print(line)
        if session.servers:
            session.console.print(_servers_line(session), highlight=False, markup=False, soft_wrap=True)


def _servers_line(session: Session) -> str:
    """The end screen's word on a run over servers: where sites ran, relinks across, clocks."""
    network = session.network
    across = sum(network.placement[e.from_site] != network.placement[e.to_site] for e in network.relinks
                 if e.from_site != e.to_site)
    where = "; ".join(f"{name} {', '.join(r['sites'])} (clock {r['offset_ms']:+.2f} ms)"
                      for name, r in session.server_record().items())
    return f"servers: {where}; relinks {len(network.relinks)}, {across} across servers"


def _health_note(monitor: HealthMonitor | None) -> str:
    """The progress line's word on the harness: the run's validity so far, as the end screen will
    word it (`health.validity`), and the causes of the newest saturated second if it is recent."""
    if monitor is None or not monitor.rows:
        return ""
    note = f", harness {health.validity(health.verdict(monitor.rows))} so far"
    last = monitor.rows[-1]
    return note + (f" (now: {', '.join(last['causes'])})" if last["causes"] else "")


def _coordinates(roles: list):
    from testbed.roles.coordinates import Coordinates

    return next((role for role in roles if isinstance(role, Coordinates) and role.agents), None)


def _settle(session: Session, roles: list, events) -> None:
    """Let the coordinates converge on `control.settle`'s criterion or its cap, recording snapshots."""
    coordinates = _coordinates(roles)
    if coordinates is not None:
        coordinates.settle(sink=lambda event: _write_event(events, **event))


def _drive(session: Session, roles: list, events, monitor: HealthMonitor | None = None) -> int:
    """Follow the mobility timeline for the scenario's duration; check every handover happened."""
    _settle(session, roles, events)
    for role in roles:
        role.begin()
    start, t0 = time.monotonic(), time.time()
    if monitor is not None:
        monitor.start(t0)
    _write_event(events, type="run_start", time=t0, run_id=session.run_id)
    pending = list(session.handovers)
    faults = FaultSchedule(session.scenario.faults, session.network, roles,
                           write=lambda **e: _write_event(events, **e), say=session.say)
    session.faults = faults  # its spans and events are kept also after an error
    watchdog = Watchdog().start()
    try:
        done = _timeline(session, roles, events, monitor, watchdog, start, pending, faults)
    except TimelineStalled as why:
        _write_event(events, type="run_stopped", time=time.time(), reason=str(why), at_s=round(time.monotonic() - start, 3),
                     stack=watchdog.where)
        raise
    finally:
        watchdog.stop()
    if monitor is not None:
        monitor.stop()
    _write_event(events, type="run_end", time=time.time(), handovers_done=done, handovers_planned=len(session.handovers))
    if done != len(session.handovers):
        session.say(f"only {done} of {len(session.handovers)} planned handovers happened")
        return 1
    session.say(f"all {done} planned handovers happened")
    return 0


def _timeline(session: Session, roles: list, events, monitor: HealthMonitor | None, watchdog: Watchdog, start: float,
              pending: list, faults: FaultSchedule) -> int:
    """The run's main loop: relinks and faults when due, supervision, snapshots and progress, until the
    duration is over; returns the relinks done."""
    network, duration = session.network, session.scenario.duration
    coordinates = _coordinates(roles)
    done = 0
    next_snapshot = next_report = next_disk_check = 0.0
    while True:
        watchdog.beat()
        elapsed = time.monotonic() - start
        if elapsed >= duration:
            break
        if elapsed >= next_disk_check:
            try:
                check_disk(session.log_dir or Path("."))
            except DiskFull as why:
                _write_event(events, type="run_stopped", time=time.time(), reason=str(why), at_s=round(elapsed, 3))
                raise
            next_disk_check = elapsed + DISK_CHECK_S
        while pending and pending[0].time <= elapsed:
            planned = pending.pop(0)
            event = network.relink(planned.node, planned.to_site)
            done += 1
            watchdog.beat()
            across = ({"servers": f"{network.placement[event.from_site].name}->{network.placement[event.to_site].name}"}
                      if network.servers else {})
            _write_event(events, type="relink", time=event.time, node=event.node, from_site=event.from_site,
                         to_site=event.to_site, planned_at_s=planned.time, late_s=round(elapsed - planned.time, 4),
                         call_s=round(event.duration_s, 4), **across)
        faults.step(elapsed)
        for problem in network.check():
            _write_event(events, type="data_path_problem", time=time.time(), detail=problem)
            session.say(f"problem: {problem}")
        for event in [event for role in roles for event in role.supervise()]:
            _write_event(events, **event)
            session.say(f"supervision: {event['type']} {event.get('node') or event.get('process') or ''}".rstrip())
        if elapsed >= next_snapshot and coordinates is not None:
            snap = coordinates.snapshot()
            snap["phase"] = "run"
            _write_event(events, **snap)
            next_snapshot += SNAPSHOT_PERIOD_S
        if elapsed >= next_report:
            traffic = "".join(f", {words}" for words in reversed([role.progress() for role in roles]) if words)
            session.say(f"running: {elapsed:5.0f}s of {duration:g}s, {duration - elapsed:4.0f}s left, "
                        f"handovers {done}/{len(session.handovers)}{traffic}{_health_note(monitor)}")
            next_report += 10
        wait = min(0.05, (pending[0].time - elapsed) if pending else 0.05)
        time.sleep(max(0.001, wait))
    return done
