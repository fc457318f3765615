"""One run: choose backend and shaper, bring the network up, drive the mobility timeline, record,
tear down (also after Ctrl-C or SIGTERM; after SIGKILL `testbed clean` finishes the job).

results/<run-id>/ holds the scenario as run, run.json (metadata) and events.jsonl (relinks and
their checks), written as they happen so an interrupted run keeps what it recorded.
"""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import time
from pathlib import Path

import yaml

from testbed import doctor, health, mobility
from testbed import topology as topo_mod
from testbed.emulation import choose, runstate
from testbed.emulation.network import EmulationError, Network
from testbed.monitor import HealthMonitor
from testbed.scenario.model import Scenario

MISSING_WORKLOADS: dict[str, str] = {}
SNAPSHOT_PERIOD_S = 30.0


class BadRunInput(ValueError):
    """The run cannot start as asked (forced backend or shaper missing): exit code 2."""


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived: unwind through the teardown."""


def _raise_interrupted(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


class Session:
    """Context manager owning a running network for a scenario; always tears it down."""

    def __init__(self, scenario: Scenario, backend: str = "auto", shaper: str = "auto", console=None,
                 topology: topo_mod.Topology | None = None, log_dir: Path | None = None):
        self.scenario = scenario
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
        self.reasons = (backend_choice.reason, shaper_choice.reason)
        self.run_id = runstate.new_run_id()
        self.log_dir = log_dir
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
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise_interrupted)
        runstate.register(self.run_id, scenario=self.scenario.name, backend=self.backend, shaper=self.shaper)
        self.say(f"backend {self.backend} ({self.reasons[0]}), shaper {self.shaper} ({self.reasons[1]})")
        self.network = Network(self.topology, self.run_id, backend, self.shaper, seed=self.scenario.seed,
                               progress=self.say, log_dir=self.log_dir)
        started = time.monotonic()
        try:
            self.network.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.say(f"network up: {len(self.topology.sites)} sites, {len(self.topology.nodes)} nodes "
                 f"in {time.monotonic() - started:.1f}s")
        return self

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
            runstate.unregister(self.run_id)
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)


def _write_event(handle, **event) -> None:
    handle.write(json.dumps(event) + "\n")
    handle.flush()


def run(scenario: Scenario, path: Path, backend: str, shaper: str, interactive: bool, results_root: Path,
        console) -> int:
    """Run a scenario as far as the built parts go; returns the exit code."""
    import logging

    logging.getLogger("kazoo").setLevel(logging.ERROR)  # reconnect chatter belongs in logs, not the console
    session = Session(scenario, backend=backend, shaper=shaper, console=console)
    out = results_root / f"{scenario.name}-{session.run_id}"
    session.log_dir = out / "logs"
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    meta = {"run_id": session.run_id, "scenario": scenario.name, "scenario_file": str(path),
            "git_commit": git_commit(), "backend": session.backend, "shaper": session.shaper,
            "machine": platform.node(), "kernel": platform.release(), "seed": scenario.seed, "scale": scenario.scale,
            "started": time.time(), "complete": False}
    (out / "run.json").write_text(json.dumps(meta, indent=2))
    code = 0
    with (out / "events.jsonl").open("a") as events:
        try:
            with session:
                if interactive:
                    from mininet.cli import CLI

                    session.say("interactive: the Mininet CLI on the running network (mobility paused); exit to tear down")
                    CLI(session.network.net)
                else:
                    from testbed.roles.workload import PubSubWorkload
                    from testbed.roles.coordinates import Roles

                    roles = Roles(session.network, session.topology, scenario, out / "logs", say=session.say)
                    workload = None
                    monitor = HealthMonitor(session.run_id, session.network.shaper, out / "logs", out / "health.jsonl")
                    try:
                        roles.start()
                        if PubSubWorkload.supported(scenario):
                            workload = PubSubWorkload(session.network, session.topology, scenario, out,
                                                      session.run_id, say=session.say)
                            workload.start_system()
                        code = _drive(session, roles, events, workload, monitor)
                    finally:
                        monitor.stop()
                        if workload is not None:
                            workload.stop()
                        meta["harness"] = monitor.finish()
                        if workload is not None:
                            _finish_workload(session, workload, events, out, meta)
                        session.say(health.describe(meta["harness"]))
                        roles.stop()
        except Interrupted as why:
            session.say(f"interrupted by {why}: network torn down, results so far kept in {out}")
            meta["interrupted"] = str(why)
            code = 130
        except EmulationError as error:
            session.say(f"failed: {error}")
            code = 1
    meta.update(finished=time.time(), complete=code == 0, handovers_planned=len(session.handovers))
    (out / "run.json").write_text(json.dumps(meta, indent=2))
    session.say(f"results in {out}")
    missing = MISSING_WORKLOADS.get(scenario.workload.kind)
    if code == 0 and missing:
        session.say(f"not built yet: {missing}. This run emulated the network, its coordinates (Serf, NC proxies), "
                    "and the mobility only.")
        return 1
    return code


def _finish_workload(session: Session, workload, events, out: Path, meta: dict) -> None:
    """Merge the system's events into the run's, write the summary and print the end screen."""
    from testbed.roles.workload import summarize

    merged = workload.events()
    for event in merged:
        _write_event(events, **event)
    thresholds = {t.name: t.threshold for t in session.scenario.workload.topics}
    summary = summarize(out / "traces", thresholds, merged, getattr(workload, "summaries", []))
    expected = sum(s.get("expected", 0) for s in getattr(workload, "summaries", []))
    summary["expected_deliveries"] = expected
    summary["harness"] = meta.get("harness")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    meta["summary"] = summary
    if session.console is None:
        return
    from rich.table import Table

    table = Table("topic class", "messages", "p50 ms", "p95 ms", "max ms", "threshold ms", "violation ratio",
                  title=f"{session.scenario.name} ({session.run_id}): end-to-end latency")
    for name, c in summary["classes"].items():
        table.add_row(name, str(c["messages"]), f"{c['p50_ms']:.1f}", f"{c['p95_ms']:.1f}", f"{c['max_ms']:.1f}",
                      f"{c['threshold_ms']:.0f}" if c["threshold_ms"] else "-",
                      f"{100 * c['violation_ratio']:.2f} %" if c["violation_ratio"] is not None else "-")
    session.console.print(table)
    lost = max(0, expected - summary["delivered"])
    if "failover" in summary:
        f = summary["failover"]
        session.console.print(
            f"failover: killed {', '.join(f['brokers_killed'])}; {f['topics_replaced']} topics re-placed; "
            f"{f['clients_recovered']} of {f['clients_lost_broker']} clients back on a broker, downtime "
            + (f"p50 {f['downtime_p50_s']:.2f} s, max {f['downtime_max_s']:.2f} s" if f["downtime_max_s"] else "-"))
    session.console.print(f"migrations {summary['migrations']} (failed {summary['migrations_failed']}), violations "
                          f"detected {summary['violations_detected']}, deliveries {summary['delivered']} of "
                          f"{expected} expected ({lost} not delivered, including those in flight at the stop)")


def _health_note(monitor: HealthMonitor | None) -> str:
    """The progress line's word on the harness: the newest judged second (a few seconds old)."""
    row = monitor.latest() if monitor is not None else None
    if row is None:
        return ""
    if not row["causes"]:
        return ", harness ok"
    return f", harness SATURATED ({', '.join(row['causes'])})"


def _settle(session: Session, roles, events) -> None:
    """Let the coordinates converge for `control.settle`, recording snapshots (marked unconverged)."""
    settle = session.scenario.control.settle
    if not roles.agents or settle <= 0:
        return
    started = time.monotonic()
    session.say(f"settle: {settle:g}s for the network coordinates to converge")
    while True:
        elapsed = time.monotonic() - started
        snap = roles.snapshot()
        snap["phase"] = "settle"
        _write_event(events, **snap)
        for event in roles.supervise():
            _write_event(events, **event)
        error = snap["median_error_ms"]
        session.say(f"settle: {elapsed:4.0f}s of {settle:g}s, {snap['agents']}/{snap['expected']} agents, "
                    f"median NC error {error:.2f} ms" if error is not None else "settle: waiting for coordinates")
        if elapsed >= settle:
            break
        time.sleep(min(5.0, max(0.5, settle - elapsed)))


def _drive(session: Session, roles, events, workload=None, monitor: HealthMonitor | None = None) -> int:
    """Follow the mobility timeline for the scenario's duration; check every handover happened."""
    network, duration = session.network, session.scenario.duration
    _settle(session, roles, events)
    if workload is not None:
        workload.start_clients()
    start, t0 = time.monotonic(), time.time()
    if monitor is not None:
        monitor.start(t0)
    next_snapshot = 0.0
    _write_event(events, type="run_start", time=t0, run_id=session.run_id)
    pending = list(session.handovers)
    faults = sorted(session.scenario.faults, key=lambda f: f.at)
    done = 0
    next_report = 0.0
    progress = workload.progress if workload is not None else None
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= duration:
            break
        while pending and pending[0].time <= elapsed:
            planned = pending.pop(0)
            event = network.relink(planned.node, planned.to_site)
            done += 1
            _write_event(events, type="relink", time=event.time, node=event.node, from_site=event.from_site,
                         to_site=event.to_site, planned_at_s=planned.time, late_s=round(elapsed - planned.time, 4),
                         call_s=round(event.duration_s, 4))
        while faults and faults[0].at <= elapsed:
            fault = faults.pop(0)
            workload.kill_broker(fault.kill, planned_at_s=fault.at)
            roles.kill(fault.kill)
            session.say(f"fault: broker {fault.kill} killed for good at {elapsed:.1f}s")
        for problem in network.check():
            _write_event(events, type="data_path_problem", time=time.time(), detail=problem)
            session.say(f"problem: {problem}")
        for event in roles.supervise() + (workload.supervise() if workload is not None else []):
            _write_event(events, **event)
            session.say(f"restarted: {event}")
        if elapsed >= next_snapshot and roles.agents:
            snap = roles.snapshot()
            snap["phase"] = "run"
            _write_event(events, **snap)
            next_snapshot += SNAPSHOT_PERIOD_S
        if elapsed >= next_report:
            traffic = ""
            if progress is not None:
                rate, migrations = progress()
                traffic = f", {rate:,.0f} deliveries/s, migrations {migrations}"
            session.say(f"running: {elapsed:5.0f}s of {duration:g}s, {duration - elapsed:4.0f}s left, "
                        f"handovers {done}/{len(session.handovers)}{traffic}{_health_note(monitor)}")
            next_report += 10
        wait = min(0.05, (pending[0].time - elapsed) if pending else 0.05)
        time.sleep(max(0.001, wait))
    if monitor is not None:
        monitor.stop()
    _write_event(events, type="run_end", time=time.time(), handovers_done=done, handovers_planned=len(session.handovers))
    for answer in roles.nc_answers():
        _write_event(events, **answer)
    if done != len(session.handovers):
        session.say(f"only {done} of {len(session.handovers)} planned handovers happened")
        return 1
    session.say(f"all {done} planned handovers happened")
    return 0
