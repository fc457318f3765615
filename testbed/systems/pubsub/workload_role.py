"""The pub/sub workload role: the scenario's client processes, and the end-of-run summary (p50/p95/max
latency per topic class, violation ratio, migrations, failed manager rounds, losses).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from testbed.policies.topics import topic_class
from testbed.procs import LineCounter, json_lines, percentile, read_line
from testbed.systems.pubsub import durability, engine
from testbed.roles.base import Role, RunContext, newly_dead
from testbed.systems.pubsub.role import WORKLOADS, PubSubRole, PubSubSystem
from testbed.systems.pubsub.durable import classes_json

#: How long the clients have, together, to stop and print their summaries before they are killed (a
#: group change cut after `workloads.CHANGE_GRACE_S`, a durable drain of up to `DRAIN_MAX_S`, and the
#: rest of the way out on a busy machine).
STOP_S = 30.0
ATTACH_S = 180.0  # how long the clients have, together, to attach and say so


class ClientHost:
    """The harness's side of a client host (`clienthost`: every client node of this machine in one
    process, one engine): its plan written, the process started, its lines read as they come (which
    nodes are ready, failed or crashed; their summaries), a node crashed, everything stopped."""

    def __init__(self, network, nodes: list[dict], out: Path):
        plan = out / "client-host.json"
        plan.write_text(json.dumps({"health": str(out / "logs" / "health-clients.jsonl"), "nodes": nodes}))
        log = (out / "logs" / "client-host.log").open("ab")
        # in this machine's namespace: the host enters each node's for its sockets
        self.process = subprocess.Popen([sys.executable, "-m", "testbed.systems.pubsub.clienthost", str(plan)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                        env=network.env)
        log.close()
        self.nodes = [n["node"] for n in nodes]
        self.ready: set[str] = set()
        self.failed: dict[str, str] = {}
        self.crashed: set[str] = set()
        self.summaries: list[dict] = []
        self._said = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="client-host", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                said = json.loads(line)
            except ValueError:
                continue
            with self._said:
                node = said.get("node")
                if said.get("ready"):
                    self.ready.add(node)
                elif "failed" in said:
                    self.failed[node] = said["failed"]
                elif said.get("crashed"):
                    self.crashed.add(node)
                elif "sent" in said:
                    self.summaries.append(said)
                self._said.notify_all()
        with self._said:
            self._said.notify_all()

    def wait_ready(self, timeout: float) -> list[str]:
        """The nodes not ready after `timeout` s (or once one failed, or the host exited)."""
        deadline = time.monotonic() + timeout
        with self._said:
            while (len(self.ready) < len(self.nodes) and not self.failed and self._reader.is_alive()
                   and time.monotonic() < deadline):
                self._said.wait(max(0.01, min(1.0, deadline - time.monotonic())))
            return [n for n in self.nodes if n not in self.ready]

    def crash(self, node: str) -> None:
        self.process.stdin.write(f"crash {node}\n")
        self.process.stdin.flush()

    def gone(self) -> dict[str, int | str]:
        """Nodes whose program ended badly: why (a failure), or the host's exit status (it died)."""
        with self._said:
            gone: dict[str, int | str] = dict(self.failed)
        code = self.process.poll()
        if code is not None and code != 0:
            gone.update({n: code for n in self.nodes if n not in gone and n not in self.crashed})
        return gone

    def stop(self, timeout: float) -> None:
        """Every node stopped (each says its summary on the way out); killed after `timeout` s."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(5.0)


def release_start(start_path: Path, network) -> None:
    """Write the common start time for the workload processes waiting on `start_path` (also on
    servers whose file system is not ours) and return just before it: the run's clock (its
    run_start event) starts just before the first message, so that message lands in the first time
    bucket; planned times are counted from `start`, 50 ms later."""
    start = time.time() + 1.0
    partial = start_path.with_suffix(".tmp")
    partial.write_text(f"{start:.6f}")
    partial.replace(start_path)  # atomic: a process polling the file never reads half a number
    network.share(start_path)
    time.sleep(max(0.0, start - time.time() - 0.05))


class PubSubWorkload(Role):
    """The scenario's clients: every swarm (uav-swarm), player and game server (mmog) or static client
    node (hotspot) in this machine's one client host (`ClientHost`, the compiled engine's default), or
    a process of its own per node, publishing and subscribing through the pub/sub role's lookup service."""

    name = "workload"

    @classmethod
    def wanted(cls, scenario) -> bool:
        return scenario.workload.kind in WORKLOADS

    def __init__(self, run: RunContext, others: list[Role] = ()):
        super().__init__(run, list(others))
        self.network, self.topology, self.scenario = run.network, run.topology, run.scenario
        self.out, self.run_id, self.say = Path(run.out), run.run_id, run.say
        self.processes: dict[str, subprocess.Popen] = {}
        self.hosted: list[dict] = []  # client nodes that run in the machine's client host (`ClientHost`)
        self.host: ClientHost | None = None
        self.crashed: list[dict] = []  # client_killed events (scenario faults)
        self._reported: set[str] = set()  # processes whose exit supervise() has reported
        self.summaries: list[dict] = []
        self._deliveries = LineCounter(self.out / "traces", "*.jsonl")
        self._last_progress = (time.monotonic(), 0)

    @property
    def system(self) -> PubSubSystem:
        return self.find(PubSubRole).system

    def begin(self) -> None:
        self.start_clients()

    def progress(self) -> str:
        """Deliveries per second since the last call (trace rows written)."""
        elsewhere = self.run.rows_elsewhere() if self.run.rows_elsewhere else 0  # counted by the servers' monitors
        now, delivered = time.monotonic(), self._deliveries.count() + elsewhere
        then, before = self._last_progress
        self._last_progress = (now, delivered)
        return f"{(delivered - before) / max(1e-3, now - then):,.0f} deliveries/s"

    def start_clients(self) -> None:
        """One workload process per swarm (uav-swarm), player or game-server (mmog) node; returns when every
        client has attached (mmog: and the common start time is written)."""
        if self.scenario.workload.client_engine == "compiled":
            engine.ensure_built()  # here, once, and with its reason if it cannot be (not in every client node)
        if self.scenario.workload.kind == "mmog":
            self._start_mmog()
            return
        if self.scenario.workload.kind == "hotspot":
            self._start_hotspot()
            return
        scenario = self.scenario
        rate = scenario.workload.rate * scenario.scale
        for node in self.topology.nodes.values():
            if node.role != "uav-swarm":
                continue
            self._launch(node, "uav", ["--members", str(node.members)], rate)
        self._wait_attached()
        self.say(f"workload: {len(self.processes) + len(self.hosted)} swarms publishing at {rate:g} msg/s per UAV"
                 + (" (compiled client engine)" if scenario.workload.client_engine == "compiled" else "")
                 + self._processes_said())

    def _start_mmog(self) -> None:
        """One process per player and per game server (paper 5.8.2); they share a plan (each player's
        edge site, game server and NC proxy; groups; group changes) and start publishing together at
        the time written to logs/mmog-start once all are ready."""
        from testbed.mobility import group_changes
        from testbed.systems.pubsub.workloads import mmog_plan

        scenario = self.scenario
        rate = scenario.workload.rate * scenario.scale
        players, servers = self.topology.placed("avatar"), self.topology.placed("game-server")
        if not players or not servers:
            raise RuntimeError("mmog workload: the scenario needs player (role avatar) and game-server nodes")
        plan = mmog_plan(players, servers, self.topology.placed("nc-proxy"), *group_changes(scenario, len(players)))
        plan_path, start_path = self.out / "mmog-plan.json", self.out / "logs" / "mmog-start"
        plan_path.write_text(json.dumps(plan))
        self.network.share(plan_path)
        start_path.unlink(missing_ok=True)
        own = ["--plan", str(plan_path), "--start-file", str(start_path)]
        for name, edge in zip(plan["players"], plan["edges"]):
            where = ["--proxy-ip", self.network.ip_of(edge["proxy"])] if edge["proxy"] else []
            self._launch(self.topology.nodes[name], "mmog", own + where, rate)
        for name in plan["servers"]:
            self._launch(self.topology.nodes[name], "mmog", own, rate)
        self._wait_attached()
        release_start(start_path, self.network)
        edges = len({e["edge"] for e in plan["edges"]})
        self.say(f"workload: {len(plan['players'])} players on {edges} edge sites ({len(plan['servers'])} game "
                 f"servers) in {scenario.workload.groups} groups publishing at {rate:g} msg/s each, "
                 f"{len(plan['changes'])} group changes planned" + self._processes_said())

    def _start_hotspot(self) -> None:
        """One process per static client node holding its publishers and subscribers of the shared
        plan (Zipf rates, the hot site's share, the surge: testbed.systems.pubsub.workloads.hotspot_plan);
        all start publishing at the time written to logs/hotspot-start once every client is attached."""
        scenario = self.scenario
        rate = scenario.workload.rate * scenario.scale
        plan = plan_hotspot(scenario, self.topology)
        plan_path, start_path = self.out / "hotspot-plan.json", self.out / "logs" / "hotspot-start"
        plan_path.write_text(json.dumps(plan))
        self.network.share(plan_path)
        start_path.unlink(missing_ok=True)
        used = {c["node"] for c in plan["publishers"] + plan["subscribers"]}
        for name, _ in self.topology.placed("static"):
            if name in used:
                self._launch(self.topology.nodes[name], "hotspot", ["--plan", str(plan_path), "--start-file",
                                                                    str(start_path)], rate)
        self._wait_attached()
        release_start(start_path, self.network)
        spec, surge = scenario.workload.hotspot, scenario.workload.hotspot.surge
        self.say(f"workload: {spec.topics} topics (Zipf {spec.zipf:g}, rank 1 at {rate:g} msg/s), "
                 f"{spec.hot_topics()} at {spec.hot_site}, {len(plan['subscribers'])} subscribers on "
                 f"{len(self.processes) + len(self.hosted)} nodes"
                 + (f"; surge at {surge.at:g}s: {surge.topics} topics x {surge.publishers} publishers" if surge else "")
                 + self._processes_said())

    def per_machine(self) -> bool:
        """Do the client nodes run in one client host (`ClientHost`)? With the compiled engine, on
        namespaces of this machine (`workload.client_processes`: auto, or per-machine, which is an
        error elsewhere rather than quietly per node)."""
        wanted = self.scenario.workload.client_processes
        if wanted == "per-machine" and not self.network.namespaces_here:
            raise RuntimeError("workload.client_processes: per-machine needs every node to be a namespace of this "
                               "machine (mininet, no other server); use auto or per-node here")
        return (wanted != "per-node" and self.scenario.workload.client_engine == "compiled"
                and self.network.namespaces_here)

    def _processes_said(self) -> str:
        if not self.hosted:
            return f"; {len(self.processes)} client processes"
        return f"; one client host for {len(self.hosted)} nodes (2 processes)"

    def _launch(self, node, kind: str, own: list[str], rate: float) -> None:
        """One workload process in `node` (`python -m testbed.systems.pubsub.workloads <kind>`), or the
        node's place in the client host (`per_machine`): its own arguments, then what every workload
        process takes (rate, lookup, traces, events, health)."""
        logs, trigger = self.out / "logs", self.scenario.control.handover_trigger
        argv = [kind, "--node", node.name, *own,
                "--rate", f"{rate:g}", "--size", f"{self.scenario.workload.message_size:.0f}",
                *self.attach_args(node), "--trace-dir", str(self.out / "traces"),
                "--events", str(logs / f"clients-{node.name}.jsonl"), "--run-id", self.run_id,
                "--site", node.site, "--coord", "proxy" if node.mobile else "serf",
                "--nc-period", f"{self.scenario.control.nc_report_period:g}",
                "--health", str(logs / f"health-{node.name}.jsonl"),
                "--client-engine", self.scenario.workload.client_engine,
                *(["--track"] if self.scenario.tracking.strategy != "none" else []),
                "--durable", classes_json(self.scenario.workload.topics), "--distance", self.scenario.control.distance,
                *(["--handover-trigger", trigger.config().to_json()] if trigger.enabled else [])]
        if self.per_machine():
            self.hosted.append({"node": node.name, "pid": self.network.nodes[node.name].pid, "argv": argv})
            return
        log = (logs / f"workload-{node.name}.log").open("ab")
        self.processes[node.name] = self.network.popen(
            node.name, [self.network.python, "-m", "testbed.systems.pubsub.workloads", *argv],
            stdout=subprocess.PIPE, stderr=log, text=True)

    def attach_args(self, node) -> list[str]:
        """How `node`'s clients find their brokers: through the pub/sub role's lookup service. A
        system without one overrides this (`--attach PLAN.json`, testbed.systems.pubsub.attach)."""
        return ["--lookup", self.system.lookup_url]

    def _wait_attached(self) -> None:
        """Every client says it is attached, within one deadline for all (they start together): on a
        machine far past its capacity they livelocked at their start, and a wait per client came to
        64 x 120 s."""
        if self.hosted:
            self.host = ClientHost(self.network, self.hosted, self.out)
            missing = self.host.wait_ready(ATTACH_S)
            if missing:
                failed = "; ".join(f"{n}: {why}" for n, why in self.host.failed.items())
                raise RuntimeError(f"client host: {len(missing)} of {len(self.hosted)} nodes did not attach "
                                   f"({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''})"
                                   + (f"; {failed}" if failed else "") + " (see logs/client-host.log)")
            return
        deadline = time.monotonic() + ATTACH_S
        for name, process in self.processes.items():
            if read_line(process, max(0.1, deadline - time.monotonic())) is None:
                raise RuntimeError(f"workload in {name} did not attach (see logs/workload-{name}.log)")

    def kill(self, node: str) -> list[dict]:
        """A scenario fault: the client node's workload process crashes (SIGKILL of everything in the
        node); not restarted. Its clients' traffic ends there; the others' must go on."""
        if self.host is not None and node in self.host.nodes:
            self._reported.add(node)
            self.host.crash(node)
            self.crashed.append({"type": "client_killed", "time": time.time(), "node": node,
                                 "killed": [f"{node}'s clients in the client host"]})
            return [self.crashed[-1]]
        if node not in self.processes:
            return []
        self._reported.add(node)  # the crash is this event, not also a `workload_died`
        self.crashed.append({"type": "client_killed", "time": time.time(), "node": node,
                             "killed": self.network.crash(node)})
        return [self.crashed[-1]]

    def supervise(self) -> list[dict]:
        # exit 0 is a client process that finished its duration, not a crash
        died = [{"type": "workload_died", "time": time.time(), "node": name, "exit_code": code}
                for name, code in newly_dead(self.processes, self._reported) if code != 0]
        if self.host is not None:
            for name, why in self.host.gone().items():
                if name not in self._reported:
                    self._reported.add(name)
                    died.append({"type": "workload_died", "time": time.time(), "node": name,
                                 **({"exit_code": why} if isinstance(why, int) else {"error": why})})
        return died

    def stop(self) -> None:
        """Stop the clients; each prints its summary line (sent, received, expected) on the way out.
        They stop together, so one deadline for all: one that hangs costs STOP_S, not STOP_S each."""
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + STOP_S
        for process in self.processes.values():
            try:
                out, _ = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
                for line in (out or "").splitlines():
                    if line.startswith("{") and '"sent"' in line:
                        self.summaries.append(json.loads(line))
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()  # reaped, its pipe closed
        self.processes = {}
        if self.host is not None:
            self.host.stop(STOP_S)
            self.summaries.extend(self.host.summaries)

    def events(self) -> list[dict]:
        """Client events (lookups, redirects, downtimes), and the clients killed by faults."""
        found = list(self.crashed)
        for path in sorted((self.out / "logs").glob("clients-*.jsonl")):
            found.extend(json_lines(path))
        return found

    def summary(self, events: list[dict]) -> dict:
        thresholds = {t.name: t.threshold for t in self.scenario.workload.topics}
        summary = summarize(self.out / "traces", thresholds, events, self.summaries)
        summary["expected_deliveries"] = sum(s.get("expected", 0) for s in self.summaries)
        found = durability.audit(self.out)
        if found is not None:
            found.update({k: sum(s.get(k, 0) for s in self.summaries) for k in ("unacked", "resent", "duplicates")})
            summary["durable"] = found
        return summary

    def end_screen(self, summary: dict) -> list:
        from testbed.screen import Table

        table = Table("topic class", "messages", "p50 ms", "p95 ms", "max ms", "threshold ms", "violation ratio",
                      title=f"{self.scenario.name} ({self.run_id}): end-to-end latency")
        for name, c in summary["classes"].items():
            table.add_row(name, str(c["messages"]), f"{c['p50_ms']:.1f}", f"{c['p95_ms']:.1f}", f"{c['max_ms']:.1f}",
                          f"{c['threshold_ms']:.0f}" if c["threshold_ms"] else "-",
                          f"{100 * c['violation_ratio']:.2f} %" if c["violation_ratio"] is not None else "-")
        lines = [table]
        expected = summary["expected_deliveries"]
        lost = max(0, expected - summary["delivered"])
        if "failover" in summary:
            f = summary["failover"]
            hit = ", ".join([f"killed {b}" for b in f["brokers_killed"]] + [f"paused {b}" for b in f["brokers_paused"]]
                            + [f"restarted {b}" for b in f.get("brokers_restarted", [])])
            lines.append(
                f"failover: {hit}; {f['topics_replaced']} topics re-placed; "
                f"{f['clients_recovered']} of {f['clients_lost_broker']} clients back on a broker, downtime "
                + (f"p50 {f['downtime_p50_s']:.2f} s, max {f['downtime_max_s']:.2f} s" if f["downtime_max_s"] else "-")
                + (f"; fenced {', '.join(f['brokers_fenced'])} after a probe of {f['fence_probe_s']:.2f} s"
                   if f["brokers_fenced"] else "")
                + (f"; {len(f['ownership_fenced'])} topics given up by the paused broker on resuming"
                   if f["ownership_fenced"] else ""))
        if "manager_handover" in summary:
            h = summary["manager_handover"]
            lines.append(f"topic manager in {h['killed']} killed: " + (
                f"{h['elected']} elected {h['gap_s']:.1f} s later, {h['rounds_after']} rounds since" if h["elected"]
                else f"no standby took over ({h['standbys']} standing by)"))
        d = summary.get("durable")
        if d:
            lines.append(f"durable topics: {d['acknowledged']} messages acknowledged; {d['delivered']} of the {d['owed']} "
                         f"owed to subscribers delivered, {d['lost']} acknowledged lost"
                         + (f" ({', '.join(d['lost_first'][:3])} ...)" if d["lost"] else "")
                         + f"; {d['resent']} resent, {d['duplicates']} duplicates dropped, {d['unacked']} not "
                           f"acknowledged at the stop")
        for c in summary.get("client_crashes", []):
            lines.append(f"client {c['node']} killed: its last message sent {c['last_sent_s']} s and received "
                         f"{c['last_received_s']} s after the crash; the other clients delivered {c['others_after']} "
                         f"messages after it against {c['others_before']} in as long before")
        for c in summary.get("site_cuts", []):
            lines.append(
                f"site {c['site']} cut off " + (f"for {c['cut_s']:.1f} s" if c["cut_s"] else "to the end") +
                f": {c['delivered_during']} deliveries during the cut ({c['delivered_before']} in as long before); "
                f"{c['clients_recovered']} of {c['clients_lost_broker']} clients that lost their broker back on one"
                + (f", downtime p50 {c['downtime_p50_s']:.2f} s, max {c['downtime_max_s']:.2f} s" if c["downtime_max_s"]
                   else "")
                + (f", the last {c['back_after_heal_s']:.2f} s after the heal" if c["back_after_heal_s"] is not None
                   else ""))
        if "zookeeper_outage" in summary:
            z = summary["zookeeper_outage"]
            lines.append(
                "ZooKeeper killed: " + (f"back after {z['down_s']:.1f} s (its start {z['start_s']:.1f} s)"
                                         if z["down_s"] else "never back") +
                f"; {z['delivered_while_down']} deliveries while down ({z['delivered_before']} in as long before); "
                f"the manager's next round came {z['first_round_after_s']} s after the kill ({z['rounds_failed']} "
                f"failed, {z['rounds_after']} after the restart); "
                f"{z['orphans_replaced']} topics re-placed, {z['broker_restarts']} broker restarts")
        expected_failures = summary.get("zookeeper_outage", {}).get("rounds_failed", 0)  # no control plane then
        if summary["rounds_failed"] > expected_failures:
            lines.append(f"[red]the topic manager failed {summary['rounds_failed'] - expected_failures} rounds "
                         f"(round_failed in events.jsonl): the system under test did not work as designed[/red]")
        lines.append(f"migrations {summary['migrations']} (failed {summary['migrations_failed']}), violations "
                     f"detected {summary['violations_detected']}, deliveries {summary['delivered']} of "
                     f"{expected} expected ({lost} not delivered, including those in flight at the stop)")
        return lines


def plan_hotspot(scenario, topology) -> dict:
    """The hot-spot plan of a scenario as run (its seed, its static client nodes, rate x scale)."""
    from testbed.systems.pubsub.schema import HOTSPOT_CLASS
    from testbed.systems.pubsub.workloads import hotspot_plan

    return hotspot_plan(scenario.workload.hotspot, scenario.workload.rate * scenario.scale, topology.placed("static"),
                        scenario.seed, HOTSPOT_CLASS)


def trace_rows(trace_dir: Path):
    for path in sorted(Path(trace_dir).glob("*.jsonl")):
        yield from json_lines(path)


def summarize(trace_dir: Path, thresholds: dict[str, float], events: list[dict], summaries: list[dict]) -> dict:
    """One screen: latency per topic class, violation ratio, migrations, losses."""
    by_class: dict[str, list[float]] = {}
    outage = zookeeper_outage(events)
    around = [0, 0]  # deliveries while ZooKeeper was down, and in as long a time just before
    for row in trace_rows(trace_dir):
        try:
            received = float(row["receive_time"])
            latency = received - float(row["send_time"])
        except (KeyError, ValueError):
            continue
        by_class.setdefault(topic_class(row["topic"]), []).append(latency)
        if outage and outage["down_s"]:
            if outage["killed"] <= received < outage["killed"] + outage["down_s"]:
                around[0] += 1
            elif outage["killed"] - outage["down_s"] <= received < outage["killed"]:
                around[1] += 1
    classes = {}
    for name, values in sorted(by_class.items()):
        values.sort()
        threshold = thresholds.get(name)
        classes[name] = {"messages": len(values), "p50_ms": 1e3 * percentile(values, 0.5),
                         "p95_ms": 1e3 * percentile(values, 0.95, "lower"), "max_ms": 1e3 * values[-1],
                         "threshold_ms": 1e3 * threshold if threshold else None,
                         "violation_ratio": (sum(v > threshold for v in values) / len(values)) if threshold else None}
    migrations = [e for e in events if e.get("type") == "migration_end"]
    sent = sum(s.get("sent", 0) for s in summaries)
    received = sum(s.get("received", 0) for s in summaries)
    summary = {"classes": classes, "migrations": len(migrations),
               "migrations_failed": sum(not m.get("ok") for m in migrations),
               # of those, the ones the old owner took back: no topic was left without an owner
               "migrations_rolled_back": sum(bool(m.get("rolled_back")) for m in migrations),
               "violations_detected": sum(e.get("type") == "violation_detected" for e in events),
               "rounds_failed": sum(e.get("type") == "round_failed" for e in events),
               "published": sent, "delivered": received}
    if any(e.get("type") in ("broker_killed", "broker_paused") for e in events):
        summary["failover"] = failover(events)
    if any(e.get("type") == "client_killed" for e in events):
        summary["client_crashes"] = client_crashes(events, trace_dir)
    if any(e.get("type") == "site_cut" for e in events):
        summary["site_cuts"] = site_cuts(events, trace_dir)
    handover = manager_handover(events)
    if handover:
        summary["manager_handover"] = handover
    if outage:
        outage["delivered_while_down"], outage["delivered_before"] = around
        summary["zookeeper_outage"] = outage
    return summary


def client_crashes(events: list[dict], trace_dir: Path) -> list[dict]:
    """Per client node killed by a fault: the last message it sent and received (as the traces saw
    them; its clients are `<node>` or `<node>-<member>`), and what the other clients delivered in as
    long a time before and after the crash (the others must not notice)."""
    out = []
    rows = list(trace_rows(trace_dir))
    end = max((float(r["receive_time"]) for r in rows), default=0.0)
    for crash in (e for e in events if e.get("type") == "client_killed"):
        node, at = crash["node"], crash["time"]
        span = max(0.0, end - at)

        def mine(name) -> bool:
            return name == node or str(name).startswith(f"{node}-")
        ours = [r for r in rows if mine(r["producer"]) or mine(r["consumer"])]
        others = [float(r["receive_time"]) for r in rows if not (mine(r["producer"]) or mine(r["consumer"]))]
        out.append({"node": node, "time": at, "killed": crash.get("killed", []),
                    "last_sent_s": max((float(r["send_time"]) - at for r in ours if mine(r["producer"])), default=None),
                    "last_received_s": max((float(r["receive_time"]) - at for r in ours if mine(r["consumer"])),
                                           default=None),
                    "others_before": sum(at - span <= t < at for t in others),
                    "others_after": sum(at <= t <= at + span for t in others)})
    return out


def site_cuts(events: list[dict], trace_dir: Path) -> list[dict]:
    """Per site cut off (`cut:`): how long, what was delivered during the cut against as long a time
    before it, which clients lost their broker from the cut on and how long each was without one,
    and when the last of them was back, counted from the heal."""
    received = sorted(float(r["receive_time"]) for r in trace_rows(trace_dir) if "receive_time" in r)
    out = []
    for cut in (e for e in events if e.get("type") == "site_cut"):
        at, site = cut["time"], cut["site"]
        healed = next((e["time"] for e in events if e.get("type") == "site_healed" and e.get("site") == site
                       and e["time"] >= at), None)
        span = (healed if healed is not None else (received[-1] if received else at)) - at
        lost = {(e["topic"], e["client"], e.get("role")) for e in events
                if e.get("type") == "broker_lost" and e.get("time", 0) >= at}
        downs = [e for e in events if e.get("type") == "downtime" and e.get("start", 0) >= at]
        values = sorted(e["downtime_s"] for e in downs)
        last_back = max((e["end"] for e in downs), default=None)
        out.append({"site": site, "time": at, "cut_s": round(span, 3) if healed is not None else None,
                    "delivered_during": sum(at <= t < at + span for t in received),
                    "delivered_before": sum(at - span <= t < at for t in received),
                    "clients_lost_broker": len(lost),
                    "clients_recovered": len(lost & {(e["topic"], e["client"], e.get("role")) for e in downs}),
                    "downtime_p50_s": percentile(values, 0.5), "downtime_max_s": values[-1] if values else None,
                    "back_after_heal_s": round(last_back - healed, 3) if healed and last_back else None})
    return out


def manager_handover(events: list[dict]) -> dict | None:
    """The elected topic manager killed (kill: manager): which standby took over and after how
    long (the leader's ZooKeeper session), and the control plane's rounds after it."""
    killed = next((e for e in events if e.get("type") == "manager_killed"), None)
    if killed is None:
        return None
    elected = next((e for e in events if e.get("type") == "elected" and e.get("time", 0) > killed["time"]), None)
    return {"killed": killed["node"], "time": killed["time"], "standbys": killed.get("standbys"),
            "elected": elected["node"] if elected else None,
            "gap_s": round(elected["time"] - killed["time"], 3) if elected else None,
            "rounds_after": sum(e.get("type") == "round" for e in events if e.get("time", 0) > killed["time"])}


def zookeeper_outage(events: list[dict]) -> dict | None:
    """A ZooKeeper fault (kill: zookeeper): how long the control plane was gone (SIGKILL to serving
    again, None if it never came back), and what it cost the control plane: the manager's rounds
    (failed, or waiting for it), topics re-placed, brokers restarted (the data plane carries on:
    the caller counts its deliveries)."""
    killed = next((e for e in events if e.get("type") == "zookeeper_killed"), None)
    if killed is None:
        return None
    back = next((e for e in events if e.get("type") == "zookeeper_restarted"), None)
    end = back["time"] if back else float("inf")
    during = [e for e in events if killed["time"] <= e.get("time", 0) <= end]
    return {"killed": killed["time"], "down_s": round(back["time"] - killed["time"], 3) if back else None,
            "start_s": back.get("start_s") if back else None,
            "rounds_failed": sum(e.get("type") == "round_failed" for e in during),
            # a round due while ZooKeeper is down waits for it (kazoo retries) rather than failing
            "first_round_after_s": next((round(e["time"] - killed["time"], 3) for e in events
                                         if e.get("type") == "round" and e.get("time", 0) > killed["time"]), None),
            "rounds_after": sum(e.get("type") == "round" for e in events if back and e.get("time", 0) > end),
            "broker_restarts": sum(e.get("type") == "broker_restart" for e in during),
            "orphans_replaced": sum(e.get("type") == "orphan_replaced" for e in events if e.get("time", 0) >= killed["time"])}


def failover(events: list[dict]) -> dict:
    """What killed brokers cost: topics re-placed, and each client's downtime from losing its broker
    to its first message through the new owner (clients still without a broker at the end are counted)."""
    lost = {(e["topic"], e["client"], e.get("role")) for e in events if e.get("type") == "broker_lost"}
    downs = [e for e in events if e.get("type") == "downtime" and e.get("reason") == "broker_lost"]
    recovered = {(e["topic"], e["client"], e.get("role")) for e in downs}
    values = sorted(e["downtime_s"] for e in downs)
    fenced = [e for e in events if e.get("type") == "broker_fenced"]
    return {"brokers_killed": sorted(e["node"] for e in events if e.get("type") == "broker_killed"),
            "brokers_paused": sorted(e["node"] for e in events if e.get("type") == "broker_paused"),
            "brokers_restarted": sorted(e["node"] for e in events if e.get("type") == "broker_restarted"),
            "topics_replaced": len({e["topic"] for e in events if e.get("type") == "orphan_replaced" and e.get("broker")}),
            "clients_lost_broker": len(lost), "clients_recovered": len(lost & recovered),
            "downtime_p50_s": percentile(values, 0.5),
            "downtime_max_s": values[-1] if values else None,
            # fast failover: the topic manager probed a broker its clients lost and fenced it
            "brokers_fenced": sorted({e["broker"] for e in fenced}),
            "fence_probe_s": max((e["probe_s"] for e in fenced), default=None),
            "ownership_fenced": sorted(e["topic"] for e in events if e.get("type") == "ownership_fenced")}
