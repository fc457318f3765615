"""The pub/sub system under test, assembled in a running network: ZooKeeper in the cloud node,
a nats-server and a broker agent in every broker and cloud node, the topic manager in the cloud.
`PubSubSystem` is the assembly (runs, benchmarks and tests share it); `PubSubRole` is it as a run's role.

Stops in the reverse order (manager and agents, then servers, then ZooKeeper), and restarts a
nats-server or agent that died, reporting each restart as an event.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import astuple, dataclass, field
from pathlib import Path

from testbed import natsserver
from testbed.emulation.network import HOST_INTF
from testbed.procs import LineCounter, json_lines, read_line, stop_group, wait_or_kill
from testbed.systems.pubsub import balance
from testbed.roles.base import Role, RunContext
from testbed.roles.launch import start_agent, start_nats, start_zookeeper
from testbed.systems.pubsub.broker import MONITOR_PORT, NATS_PORT, nats_url
from testbed.systems.pubsub.durable import CLUSTER_PORT, classes_json, storage_config
from testbed.systems.pubsub.schema import MANAGER, ZOOKEEPER, load_manager
from testbed.tracking.config import TrackingConfig
from testbed.tracking.store import TRACKING_DIR
from testbed.tracking.store import summary as tracking_summary
from testbed.policies.handover import HandoverTrigger
from testbed.policies import (DEFAULT_DISTANCE, DEFAULT_INITIAL_PLACEMENT, DEFAULT_POLICY, LoadManagerConfig, Overload,
                              get_policy)

BROKER_ROLES = ("cloud", "broker")
STATS = f"/sys/class/net/{HOST_INTF}/statistics"  # a node's interface counters
WORKLOADS = {"uav-swarm", "mmog", "hotspot"}  # the scenario workloads this system serves


@dataclass
class ManagerOptions:
    policy: str = DEFAULT_POLICY
    workflow: str = "enhanced"
    executors: int = 16
    period: float = 5.0
    mode: str = "control"
    default: str | None = None
    threshold: float = 0.1
    overload: tuple[float, float, float, float] = astuple(Overload())  # cpu, memory, network, output_rate
    distance: str = DEFAULT_DISTANCE  # the reading of d (testbed.policies.distance); brokers need the same
    initial_placement: str = DEFAULT_INITIAL_PLACEMENT  # where unowned topics start (testbed.policies.initial)
    seed: int = 0  # the scenario's: a policy's random ties (Pulsar's placement)
    infeasible_min_gain: float = 0.0  # beyond the paper: control.infeasible_min_gain (s)
    load_manager: LoadManagerConfig = LoadManagerConfig()  # pulsar-lm's parameters (control.pulsar_lm)
    handover: HandoverTrigger = HandoverTrigger()  # beyond the paper: early rounds (control.handover_trigger)


@dataclass
class PubSubSystem:
    network: object
    topology: object
    log_dir: Path
    manager: ManagerOptions = field(default_factory=ManagerOptions)
    monitoring_period: float = 5.0
    nc_period: float = 5.0
    tracking: TrackingConfig = TrackingConfig()  # message tracking (Jun and Astley): a tracker beside each broker
    tracking_dir: Path | None = None  # where trackers keep their files (default: the run's tracking/)
    durable: str = "{}"  # durable topic classes (testbed.systems.pubsub.durable.classes_json)
    nats_server: str = natsserver.DEFAULT  # which nats-server the brokers and storage nodes run
    zk: object = None
    storage: dict = field(default_factory=dict)  # storage node -> its JetStream nats-server
    servers: dict = field(default_factory=dict)
    agents: dict = field(default_factory=dict)
    trackers: dict = field(default_factory=dict)
    managers: dict = field(default_factory=dict)  # cloud node -> its topic manager (one elected, the others standing by)
    managers_killed: set = field(default_factory=set)  # killed by a fault: not restarted

    @property
    def cloud(self) -> str:
        clouds = [n.name for n in self.topology.nodes.values() if n.role == "cloud"]
        if not clouds:
            raise RuntimeError("the pub/sub system needs a cloud node (ZooKeeper and the topic manager live there)")
        return clouds[0]

    @property
    def lookup_url(self) -> str:
        return nats_url(self.network.ip_of(self.cloud))

    def brokers(self) -> list[str]:
        return [n.name for n in self.topology.nodes.values() if n.role in BROKER_ROLES]

    def storage_nodes(self) -> list[str]:
        return [n.name for n in self.topology.nodes.values() if n.role == "storage"]

    def storage_urls(self, site: str | None = None) -> list[str]:
        """The storage nodes of `site` (all of them if it has none, or for None)."""
        nodes = self.storage_nodes()
        local = [n for n in nodes if self.topology.nodes[n].site == site]
        return [nats_url(self.network.ip_of(n)) for n in (local or nodes)]

    def start(self, say=lambda _m: None) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self.zk = start_zookeeper(self.network, self.cloud, self.log_dir)
        if self.storage_nodes():
            self._start_storage(say)
        for name in self.brokers():
            self._start_broker(name)
        say(f"pub/sub: ZooKeeper in {self.cloud}, {len(self.servers)} nats-server brokers with agents "
            f"in {time.monotonic() - started:.1f}s")
        self._start_manager()
        say(f"pub/sub: topic manager ({self.manager.policy}, {self.manager.workflow}, "
            f"{self.manager.executors} executors, mode {self.manager.mode}, distance {self.manager.distance}, "
            f"start-up {self.manager.initial_placement}) elected in {self.cloud}")

    def _start_storage(self, say, timeout: float = 90.0) -> None:
        """Every storage node's JetStream nats-server, in one cluster; returns once the cluster has a
        meta leader (streams can be created)."""
        began = time.monotonic()
        for name in self.storage_nodes():
            self._start_storage_node(name)
        probe = self.network.popen(self.storage_nodes()[0], [self.network.python, "-m", "testbed.systems.pubsub.durable",
                                                             "--wait", ",".join(self.storage_urls()),
                                                             "--timeout", f"{timeout:g}"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = read_line(probe, timeout + 10)
        wait_or_kill([probe], timeout=5)
        if not line or not line.startswith("ready"):
            raise RuntimeError(f"the storage cluster elected no JetStream leader within {timeout:g}s: {line} "
                               f"(see nats-s*.log)")
        sites = sorted({self.topology.nodes[n].site for n in self.storage_nodes()})
        say(f"storage: {len(self.storage)} JetStream nodes at {', '.join(sites)}, cluster ready in "
            f"{time.monotonic() - began:.1f}s")

    def _start_storage_node(self, name: str) -> None:
        node = self.topology.nodes[name]
        routes = [f"{self.network.ip_of(n)}:{CLUSTER_PORT}" for n in self.storage_nodes() if n != name]
        config = storage_config(name, self.network.ip_of(name), node.site, node.rack, routes,
                                str(self.log_dir / f"jetstream-{name}"), NATS_PORT, MONITOR_PORT, CLUSTER_PORT,
                                sync_on_ack=natsserver.syncs_on_ack(self.nats_server))
        self.storage[name] = start_nats(self.network, name, self.log_dir, config=config, kind="storage",
                                        server=self.nats_server)

    def storage_traffic(self) -> dict:
        """Bytes in and out of every storage node's interface since it came up: what durability
        costs the network (one copy in per message and replica, and the deliveries out)."""
        found = {}
        for name in self.storage_nodes():
            try:
                rx, tx = (int(v) for v in self.network.cmd(name, f"cat {STATS}/rx_bytes {STATS}/tx_bytes").split())
                found[name] = {"rx_bytes": rx, "tx_bytes": tx}
            except (ValueError, RuntimeError, OSError):
                continue  # a node that is down
        return found

    def kill_storage(self, name: str) -> dict:
        """Crash storage node `name` (a scenario fault); what it stored stays on its disk."""
        killed = self.network.crash(name)
        wait_or_kill([self.storage.pop(name)], timeout=5)
        return {"type": "storage_killed", "time": time.time(), "node": name, "killed": killed}

    def restart_storage(self, name: str) -> dict:
        began = time.monotonic()
        self._start_storage_node(name)
        return {"type": "storage_restarted", "time": time.time(), "node": name,
                "start_s": round(time.monotonic() - began, 3)}

    def _start_broker(self, name: str) -> None:
        node = self.topology.nodes[name]
        self.servers[name] = start_nats(self.network, name, self.log_dir, server=self.nats_server)
        durable = None
        if self.storage and self.durable != "{}":
            durable = (self.durable, self.storage_urls(node.site), self.topology.nodes[self.cloud].site)
        self.agents[name] = start_agent(self.network, name, self.zk.hosts, self.log_dir, site=node.site,
                                        cloud=node.role == "cloud", period=self.monitoring_period,
                                        nc_period=self.nc_period, bandwidth=node.access.bandwidth or 1e9,
                                        report_clients=get_policy(self.manager.policy).needs_clients,
                                        distance=self.manager.distance, durable=durable)
        if self.tracking.enabled:
            self.trackers[name] = self._start_tracker(name)

    def _start_tracker(self, name: str, timeout: float = 20.0) -> subprocess.Popen:
        """The message tracker beside `name`'s nats-server (testbed.systems.pubsub.tracker)."""
        directory = (self.tracking_dir or self.log_dir.parent / TRACKING_DIR) / name
        argv = [self.network.python, "-m", "testbed.systems.pubsub.tracker", "--node", name,
                "--nats", nats_url(self.network.ip_of(name)), "--dir", str(directory),
                "--config", json.dumps(self.tracking.to_json())]
        log = (self.log_dir / f"tracker-{name}.log").open("ab")
        process = self.network.popen(name, argv, stdout=subprocess.PIPE, stderr=log, text=True)
        if read_line(process, timeout) != "ready":
            process.kill()
            raise RuntimeError(f"the message tracker in {name} did not start (see {log.name})")
        return process

    def _start_manager(self, timeout: float = 30.0) -> None:
        """A topic manager in every cloud node: the first one's is elected (it starts alone); the
        others stand by in the election and take over when the leader dies."""
        clouds = [n.name for n in self.topology.nodes.values() if n.role == "cloud"]
        self.managers = {self.cloud: self._spawn_manager(self.cloud)}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("type") == "elected" for e in self.manager_events()):
                break
            if self.managers[self.cloud].poll() is not None:
                deadline = 0
            time.sleep(0.1)
        else:
            raise RuntimeError("the topic manager did not start (see manager.log)")
        for node in clouds[1:]:
            self.managers[node] = self._spawn_manager(node)

    def _spawn_manager(self, node: str) -> subprocess.Popen:
        m = self.manager
        cpu, memory, network, output_rate = m.overload
        argv = [self.network.python, "-m", "testbed.systems.pubsub.manager", "--node", node, "--nats", self.lookup_url,
                "--zk", self.zk.hosts, "--policy", m.policy, "--workflow", m.workflow, "--executors", str(m.executors),
                "--period", f"{m.period:g}", "--mode", m.mode, "--threshold", f"{m.threshold:g}",
                "--cpu", f"{cpu:g}", "--memory", f"{memory:g}", "--network", f"{network:g}",
                "--output-rate", f"{output_rate:g}", "--distance", m.distance, "--initial-placement", m.initial_placement,
                "--seed", str(m.seed), "--infeasible-min-gain", f"{m.infeasible_min_gain:g}", *m.load_manager.to_argv(), *(["--default", m.default] if m.default else []),
                *(["--handover-trigger", m.handover.to_json()] if m.handover.enabled else [])]
        suffix = "" if node == self.cloud else f"-{node}"
        log = (self.log_dir / f"manager{suffix}.log").open("ab")
        out = (self.log_dir / f"manager{suffix}.jsonl").open("ab")
        return self.network.popen(node, argv, stdout=out, stderr=log)

    def manager_events(self) -> list[dict]:
        """Every manager's events (the leader's decisions; a standby's election), by time."""
        found = [e for path in sorted(self.log_dir.glob("manager*.jsonl")) for e in json_lines(path)]
        return sorted(found, key=lambda e: e.get("time", 0))

    def kill_manager(self) -> dict:
        """SIGKILL the elected topic manager (a scenario fault): a standby must take over once the
        leader's ZooKeeper session expires; lookups and rounds wait meanwhile."""
        elected = [e for e in self.manager_events() if e.get("type") == "elected"]
        leader = elected[-1]["node"] if elected else self.cloud
        process = self.managers[leader]
        self.managers_killed.add(leader)
        killed = time.time()
        process.kill()
        process.wait(timeout=10)
        return {"type": "manager_killed", "time": killed, "node": leader, "standbys": len(self.managers) - 1}

    def kill(self, name: str) -> dict:
        """Crash broker node `name` for good (a scenario fault): every process in it is killed (its
        nats-server, broker agent and Serf agent) and it is no longer supervised. Its ZooKeeper session
        then expires and the topic manager re-places its topics."""
        if name not in self.servers:
            raise ValueError(f"{name} is not a running broker")
        killed = self.network.crash(name)
        # One not in the node's namespace after all is killed directly. A tracker's filters in memory
        # are lost with it, as Jun and Astley say of a failure before a filter is stored.
        wait_or_kill([self.servers.pop(name), self.agents.pop(name), self.trackers.pop(name, None)], timeout=5)
        return {"type": "broker_killed", "time": time.time(), "node": name, "killed": killed}

    def restart(self, name: str) -> dict:
        """Start a killed broker node again (a fault's `restart_after`): a fresh nats-server, broker
        agent and tracker, which register anew; the topic manager places topics on it as on any."""
        if name in self.servers:
            raise ValueError(f"{name} is running")
        began = time.monotonic()
        self._start_broker(name)
        return {"type": "broker_restarted", "time": time.time(), "node": name,
                "start_s": round(time.monotonic() - began, 3)}

    def kill_zookeeper(self) -> dict:
        """SIGKILL the cloud's ZooKeeper (a scenario fault): sessions and nodes stay on its disk."""
        killed = time.time()
        self.zk.process.kill()
        self.zk.process.wait(timeout=10)
        return {"type": "zookeeper_killed", "time": killed, "node": self.cloud}

    def restore_zookeeper(self, events: list) -> threading.Thread:
        """Start ZooKeeper again with its data, in a thread (the JVM takes seconds; the run's timeline
        goes on); `zookeeper_restarted` is added to `events` once it serves again."""
        began = time.time()

        def start() -> None:
            try:
                took = self.zk.start()
                events.append({"type": "zookeeper_restarted", "time": time.time(), "node": self.cloud,
                               "began": began, "start_s": round(took, 3)})
            except Exception as error:  # noqa: BLE001 - recorded: the rest of the run has no control plane
                events.append({"type": "zookeeper_restart_failed", "time": time.time(), "error": str(error)})

        thread = threading.Thread(target=start, daemon=True)
        thread.start()
        return thread

    def supervise(self) -> list[dict]:
        events = []
        for name, server in list(self.storage.items()):
            if server.poll() is not None:
                self._start_storage_node(name)
                events.append({"type": "storage_restart", "time": time.time(), "node": name, "exit": server.poll()})
        for name in list(self.servers):
            if self.servers[name].poll() is not None or self.agents[name].poll() is not None:
                codes = (self.servers[name].poll(), self.agents[name].poll())
                for process in (self.agents[name], self.servers[name]):  # the agent first
                    stop_group([process])
                self._start_broker(name)
                events.append({"type": "broker_restart", "time": time.time(), "node": name,
                               "nats_exit": codes[0], "agent_exit": codes[1]})
        for node, process in list(self.managers.items()):
            if process.poll() is not None and node not in self.managers_killed:
                # stepped down (its session expired with ZooKeeper away) or crashed: back as a standby
                self.managers[node] = self._spawn_manager(node)
                events.append({"type": "manager_restart", "time": time.time(), "node": node, "exit": process.poll()})
        for name, tracker in list(self.trackers.items()):
            if tracker.poll() is not None and name in self.servers:
                self.trackers[name] = self._start_tracker(name)
                events.append({"type": "tracker_restart", "time": time.time(), "node": name, "exit": tracker.poll()})
        return events

    def stop(self) -> None:
        stop_group([*self.managers.values(), *self.agents.values()])
        stop_group(self.trackers.values(), timeout=30)  # they store what they hold in memory
        stop_group(self.servers.values())
        stop_group(self.storage.values())
        if self.zk is not None:
            self.zk.stop()


class PubSubRole(Role):
    """ePulsar on NATS (paper sections 3-4): ZooKeeper, a broker and its agent per broker node, the
    topic manager; a scenario fault kills a broker node for good."""

    name = "pubsub"

    @classmethod
    def wanted(cls, scenario) -> bool:
        return scenario.workload.kind in WORKLOADS

    def __init__(self, run: RunContext, others: list[Role] = ()):
        super().__init__(run, list(others))
        control = run.scenario.control
        thresholds = {t.threshold for t in run.scenario.workload.topics}
        self.system = PubSubSystem(
            run.network, run.topology, run.logs,
            ManagerOptions(policy=control.policy, workflow=control.migration.workflow,
                           executors=control.migration.executors, period=control.monitoring_period,
                           threshold=min(thresholds),
                           overload=astuple(Overload.from_config(control.overload)),
                           distance=control.distance, initial_placement=control.initial_placement,
                           infeasible_min_gain=control.infeasible_min_gain, seed=run.scenario.seed, load_manager=load_manager(control),
                           handover=control.handover_trigger.config()),
            monitoring_period=control.monitoring_period, nc_period=control.nc_report_period,
            tracking=run.scenario.tracking.config(), tracking_dir=run.out / TRACKING_DIR,
            durable=classes_json(run.scenario.workload.topics), nats_server=run.scenario.nodes.nats_server)
        self.faults: list[dict] = []
        self._migrations = LineCounter(run.logs, "manager.jsonl", b'"migration_end"')

    def start(self) -> None:
        self.system.start(say=self.run.say)

    def kill(self, node: str) -> list[dict]:
        if node == ZOOKEEPER:
            self.faults.append(self.system.kill_zookeeper())
        elif node == MANAGER:
            self.faults.append(self.system.kill_manager())
        elif node in self.system.brokers():
            self.faults.append(self.system.kill(node))
        elif node in self.system.storage:
            self.faults.append(self.system.kill_storage(node))
        else:
            return []
        return [self.faults[-1]]

    def restore(self, node: str) -> list[dict]:
        if node == ZOOKEEPER:
            self._restoring = self.system.restore_zookeeper(self.faults)
            return []
        if node in self.system.storage_nodes():
            self.faults.append(self.system.restart_storage(node))
            return [self.faults[-1]]
        if node not in self.system.brokers():
            return []
        self.faults.append(self.system.restart(node))
        return [self.faults[-1]]

    def pause(self, node: str) -> list[dict]:
        if node not in self.system.brokers():
            return []
        self.faults.append({"type": "broker_paused", "time": time.time(), "node": node,
                            "paused": self.system.network.pause(node)})
        return [self.faults[-1]]

    def resume(self, node: str) -> list[dict]:
        if node not in self.system.brokers():
            return []
        self.faults.append({"type": "broker_resumed", "time": time.time(), "node": node,
                            "resumed": self.system.network.resume(node)})
        return [self.faults[-1]]

    def supervise(self) -> list[dict]:
        return self.system.supervise()

    def progress(self) -> str:
        return f"migrations {self._migrations.count()}"

    def stop(self) -> None:
        if self.system.storage:
            self.storage_traffic = self.system.storage_traffic()
        if getattr(self, "_restoring", None) is not None:
            self._restoring.join(timeout=70)  # a ZooKeeper still starting is stopped with the rest
        self.system.stop()

    def events(self) -> list[dict]:
        """Manager decisions and migrations, broker events, and the faults."""
        found = list(self.system.manager_events()) + self.faults
        for path in sorted(self.run.logs.glob("broker-*.events.jsonl")):
            found.extend(json_lines(path))
        return found

    def summary(self, events: list[dict]) -> dict:
        found = {"balance": balance.summarize(events), "tracking": tracking_summary(self.run.out)}
        traffic = getattr(self, "storage_traffic", None)
        if traffic is not None:
            found["storage"] = {"nodes": len(traffic), "rx_bytes": sum(t["rx_bytes"] for t in traffic.values()),
                                "tx_bytes": sum(t["tx_bytes"] for t in traffic.values()),
                                "streams_moved": sum(1 for e in events if e.get("type") == "stream_moved"),
                                "store_failed": sum(e.get("store_failed", 0) for e in events
                                                    if e.get("type") == "durable_counters")}
        return found

    def end_screen(self, summary: dict) -> list:
        lines = balance.end_screen(summary["balance"])
        st = summary.get("storage")
        if st:
            lines.append(f"storage: {st['nodes']} JetStream nodes took in {st['rx_bytes'] / 1e6:.1f} MB and sent "
                         f"{st['tx_bytes'] / 1e6:.1f} MB; {st['streams_moved']} streams moved with their topic, "
                         f"{st['store_failed']} stores failed at brokers that stopped cleanly (resent by the producers)")
        t = summary.get("tracking")
        if t:
            per = f"{t['bytes_per_message']:.1f} B/message" if t["bytes_per_message"] is not None else "no message"
            lines.append(f"tracking ({t['strategy']}): {t['published']} messages published, {t['histories']} histories "
                         f"on {t['brokers']} brokers, {t['bytes_stored']:,} B stored in {t['stores']} stores "
                         f"({per}), trackers' CPU {t['cpu_s']:.1f} s"
                         + ("" if t["complete"] else f"; INCOMPLETE at {', '.join(t['incomplete'])} "
                                                     "(a tracker fell behind or lost its connection)"))
        return lines
