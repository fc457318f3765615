"""The harness's launchers of in-node processes: Serf agents (network coordinates), ZooKeeper, a
nats-server, a broker agent and the lookup service, each started in a node of the running network
and returned once it serves; and ZooKeeper clients for the harness's own process, whose connections
must be opened inside a node's namespace.

The programs themselves (testbed/nc/, testbed/systems/pubsub/) know nothing of the network that
runs them; what they share with this module is their command line and the facts of their protocol
(ports, the ZooKeeper layout), imported from them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.handlers.threading import SequentialThreadingHandler

from testbed import natsserver, plugin
from testbed.nc.coordinate import Coordinate
from testbed.nc.serf import RPC_PORT, SerfError, SerfRPC
from testbed.procs import read_line, stop_group
from testbed.systems.pubsub.broker import MONITOR_PORT, NATS_PORT, nats_url
from testbed.systems.pubsub.metadata import ZK_PORT, Metadata, MetadataError

ZK_JARS = ("/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
ZK_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


# -- Serf agents -------------------------------------------------------------------------------------
# Every broker, static client (game server, star node) and NC proxy runs the distribution's `serf`
# binary; cloud brokers are the seed nodes (paper section 4). Mobile clients run no agent: they take
# their coordinate from the NC proxy of the zone they are attached to. An agent that dies is reported
# and restarted, never silently missing.
SERF_PORT = 7946
AGENT_ROLES = {"cloud", "broker", "nc-proxy", "star"}  # and the systems' client roles that run one (testbed.plugin)


SNAPSHOT_RPC_S = 0.5  # an agent answers its own node's RPC in milliseconds; a paused one never does
#: A whole snapshot's time: the timeout applies to each step of a query, and on an overloaded machine
#: (MMOG at 30 msg/s, the brokers ahead of the agents) 26 slow agents held the run's timeline 55 s.
SNAPSHOT_BUDGET_S, SNAPSHOT_AGENT_S = 2.0, 0.05  # at least 50 ms an agent (a large cluster)


class AgentError(RuntimeError):
    """Serf is missing or the agents did not form a cluster."""


def agent_nodes(topology) -> list[str]:
    roles = AGENT_ROLES | plugin.agent_roles()
    return [n.name for n in topology.nodes.values() if n.role in roles and not n.mobile]


def seed_nodes(topology) -> list[str]:
    """Cloud nodes seed the cluster; a topology without a cloud (a star) uses its first node."""
    seeds = [n.name for n in topology.nodes.values() if n.role == "cloud"]
    return seeds or agent_nodes(topology)[:1]


@dataclass
class Agent:
    node: str
    process: subprocess.Popen
    restarts: int = 0
    started: float = field(default_factory=time.time)


class SerfAgents:
    """The run's Serf cluster."""

    def __init__(self, network, topology, log_dir: Path, profile: str = "lan"):
        if not shutil.which("serf"):
            raise AgentError("serf is not installed (apt-get install serf)")
        self.network = network
        self.topology = topology
        self.log_dir = Path(log_dir)
        self.profile = profile
        self.agents: dict[str, Agent] = {}
        self.events: list[dict] = []

    def _spawn(self, node: str) -> subprocess.Popen:
        ip = self.network.ip_of(node)
        seeds = [self.network.ip_of(s) for s in seed_nodes(self.topology) if s != node]
        argv = ["serf", "agent", f"-node={node}", f"-bind={ip}:{SERF_PORT}", f"-advertise={ip}:{SERF_PORT}",
                f"-rpc-addr=127.0.0.1:{RPC_PORT}", f"-profile={self.profile}", "-log-level=warn",
                "-retry-interval=1s", *[f"-retry-join={s}:{SERF_PORT}" for s in seeds]]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"serf-{node}.log").open("ab")
        return self.network.popen(node, argv, stdout=log, stderr=subprocess.STDOUT)

    def start(self, nodes: list[str] | None = None, progress=lambda _m: None) -> None:
        nodes = nodes if nodes is not None else agent_nodes(self.topology)
        seeds = [n for n in seed_nodes(self.topology) if n in nodes]
        for node in seeds + [n for n in nodes if n not in seeds]:
            self.agents[node] = Agent(node, self._spawn(node))
        progress(f"serf: {len(self.agents)} agents started, seeds {', '.join(seeds)}")

    def rpc(self, node: str, timeout: float = 5.0) -> SerfRPC:
        """A connection to `node`'s agent from the harness (its RPC listens inside the node only)."""
        return SerfRPC(timeout=timeout, connect=self.network.connector(node))

    def wait_joined(self, timeout_s: float = 60.0, progress=lambda _m: None) -> float:
        """Wait until a seed sees every agent alive; returns the seconds it took."""
        started = time.monotonic()
        seed = seed_nodes(self.topology)[0]
        want = set(self.agents)
        alive: set[str] = set()
        while time.monotonic() - started < timeout_s:
            try:
                with self.rpc(seed) as rpc:
                    alive = {m["Name"] for m in rpc.members() if m["Status"] == "alive"}
            except (OSError, SerfError):
                alive = set()
            if want <= alive:
                return time.monotonic() - started
            time.sleep(0.5)
        missing = ", ".join(sorted(want - alive))
        raise AgentError(f"serf agents did not join within {timeout_s:g}s: missing {missing}")

    def coordinates(self) -> dict[str, Coordinate]:
        """Every agent's own view of its coordinate (agents that do not answer within SNAPSHOT_RPC_S,
        or after the snapshot's budget, are left out: a paused node's agent accepts the
        connection and never answers, and the run's timeline, which takes these snapshots, must not
        wait for it)."""
        found = {}
        deadline = time.monotonic() + max(SNAPSHOT_BUDGET_S, SNAPSHOT_AGENT_S * len(self.agents))
        for node in self.agents:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                with self.rpc(node, timeout=min(SNAPSHOT_RPC_S, left)) as rpc:
                    coordinate = rpc.coordinate(node)
            except (OSError, SerfError):
                continue
            if coordinate is not None:
                found[node] = coordinate
        return found

    def supervise(self) -> list[dict]:
        """Restart agents that died; returns one event per restart."""
        events = []
        for agent in self.agents.values():
            code = agent.process.poll()
            if code is not None:
                agent.process = self._spawn(agent.node)
                agent.restarts += 1
                event = {"type": "agent_restart", "time": time.time(), "node": agent.node, "exit_code": code,
                         "restarts": agent.restarts}
                events.append(event)
        self.events.extend(events)
        return events

    def kill(self, node: str) -> bool:
        """A crash for good (a fault of the scenario): SIGKILL if still running, no longer supervised
        or asked."""
        agent = self.agents.pop(node, None)
        if agent is None:
            return False
        if agent.process.poll() is None:
            agent.process.kill()
        agent.process.wait()
        return True

    def restart(self, node: str) -> None:
        """A node killed for good comes back (a fault's restart): a fresh agent, supervised again."""
        if node not in self.agents:
            self.agents[node] = Agent(node, self._spawn(node))

    def pids(self) -> dict[str, int]:
        return {node: agent.process.pid for node, agent in self.agents.items()}

    def stop(self) -> None:
        stop_group([agent.process for agent in self.agents.values()])


# -- ZooKeeper clients of the harness ---------------------------------------------------------------
class NodeHandler(SequentialThreadingHandler):
    """kazoo's handler, with its TCP connections opened from inside a node (node addresses exist
    only there): `connect`, a node's `Network.connector` or `connect_in` of a node's pid."""

    def __init__(self, connect):
        super().__init__()
        self.connect = connect

    def create_connection(self, address, timeout=None, *_args, **_kwargs):
        sock = self.connect(address, timeout)
        if sock.family != socket.AF_UNIX:  # a relay's end (remote.connect_through) sets it on its own
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as kazoo's own handler does
        return sock


def node_metadata(hosts: str, connect, **kwargs) -> Metadata:
    """A `Metadata` client (not started) for the harness, connecting from inside a node (`connect`:
    see NodeHandler)."""
    return Metadata(hosts, handler=NodeHandler(connect), **kwargs)


def expire_session(hosts: str, session: tuple[int, bytes], connect) -> None:
    """End someone's ZooKeeper session from outside (as a network partition longer than the
    session timeout would): a second client joins the session with its id and password and closes it."""
    thief = node_metadata(hosts, connect, client_id=session)
    thief.start()
    thief.stop()


# -- ZooKeeper ---------------------------------------------------------------------------------------
class ZooKeeperServer:
    """A standalone ZooKeeper in one node, its data and log under the run's log directory."""

    def __init__(self, network, node: str, log_dir: Path, heap: str = "256m", tick_ms: int = 500):
        self.network, self.node = network, node
        self.ip = network.ip_of(node)
        self.dir = Path(log_dir) / f"zookeeper-{node}"
        self.heap, self.tick_ms = heap, tick_ms
        self.process: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        return f"{self.ip}:{ZK_PORT}"

    def _config(self) -> Path:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text("\n".join([
            f"tickTime={self.tick_ms}", f"dataDir={self.dir / 'data'}", f"clientPort={ZK_PORT}",
            f"clientPortAddress={self.ip}", "maxClientCnxns=0", "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr,cons", "minSessionTimeout=1000", "maxSessionTimeout=30000",
            "autopurge.purgeInterval=0", ""]))
        self.network.share(cfg)
        return cfg

    def start(self, timeout: float = 60.0) -> float:
        """Start and wait until it answers ruok and a session opens; returns the seconds it took."""
        java = shutil.which("java")
        if not java or not Path(ZK_JARS[1]).exists():
            raise MetadataError("ZooKeeper needs java and the zookeeper package (apt-get install zookeeper)")
        cfg = self._config()
        argv = [java, f"-Xmx{self.heap}", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.net.preferIPv4Stack=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
                "-Dorg.slf4j.simpleLogger.showDateTime=true", "-cp", ":".join(ZK_JARS), ZK_MAIN, str(cfg)]
        log = (self.dir.parent / f"zookeeper-{self.node}.log").open("ab")
        started = time.monotonic()
        self.process = self.network.popen(self.node, argv, stdout=log, stderr=subprocess.STDOUT)
        while time.monotonic() - started < timeout:
            if self.process.poll() is not None:
                raise MetadataError(f"ZooKeeper in {self.node} exited with {self.process.returncode} (see {log.name})")
            if self.four_letter("ruok") == "imok":
                break
            time.sleep(0.1)
        else:
            self.stop()
            raise MetadataError(f"ZooKeeper in {self.node} did not answer ruok within {timeout:g}s")
        # ruok is answered before sessions are served: the probe's first connections may be dropped
        # (kazoo warns; testbed.logs routes that to the run's log files).
        probe = node_metadata(self.hosts, self.network.connector(self.node))
        probe.start(timeout=max(1.0, timeout - (time.monotonic() - started)))
        probe.ensure_layout()
        probe.stop()
        return time.monotonic() - started

    def four_letter(self, word: str) -> str | None:
        try:
            with self.network.connector(self.node)((self.ip, ZK_PORT), 1.0) as sock:
                sock.sendall(word.encode())
                chunks = []
                while chunk := sock.recv(4096):
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
        except OSError:
            return None

    def stop(self) -> None:
        stop_group([self.process], timeout=10)

    def restart(self, wipe: bool = False, timeout: float = 60.0) -> float:
        """Stop and start again; `wipe` drops every session and node (a ZooKeeper that lost its disk)."""
        self.stop()
        if wipe:
            shutil.rmtree(self.dir / "data", ignore_errors=True)
        return self.start(timeout)


def start_zookeeper(network, node: str, log_dir: Path, heap: str = "256m") -> ZooKeeperServer:
    server = ZooKeeperServer(network, node, log_dir, heap=heap)
    server.start()
    return server


# -- brokers -----------------------------------------------------------------------------------------
class BrokerError(RuntimeError):
    """nats-server or its broker agent did not start."""


def start_nats(network, node: str, log_dir: Path, timeout: float = 15.0, config: str | None = None,
               kind: str = "nats", server: str = natsserver.DEFAULT) -> subprocess.Popen:
    """nats-server in `node` on its IP (clients 4222, monitoring 8222); waits until it says INFO.
    `config`: a configuration (its text) that also listens there, for what flags cannot say (leaf nodes,
    JetStream clusters); `kind` names its files, `<kind>-<node>.log|conf` (the monitor's process classes);
    `server`: which nats-server (testbed.natsserver: the scenario's `nodes.nats_server`)."""
    ip = network.ip_of(node)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{kind}-{node}.log"
    argv = [natsserver.binary(server, network.python), "-a", ip, "-p", str(NATS_PORT), "-m", str(MONITOR_PORT), "-n", node, "-l", str(log)]
    if config is not None:
        path = log_dir / f"{kind}-{node}.conf"
        path.write_text(config)
        network.share(path)
        argv += ["-c", str(path)]
    process = network.popen(node, argv, stdout=subprocess.DEVNULL, stderr=log.open("ab"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BrokerError(f"nats-server in {node} exited with {process.returncode} (see {log})")
        try:
            with network.connector(node)((ip, NATS_PORT), 1.0) as sock:
                if sock.recv(4) == b"INFO":
                    return process
        except OSError:
            pass
        time.sleep(0.05)
    process.kill()
    raise BrokerError(f"nats-server in {node} did not accept connections within {timeout:g}s (see {log})")


def start_agent(network, node: str, zk_hosts: str, log_dir: Path, site: str = "", cloud: bool = False,
                period: float = 5.0, grace: float = 10.0, nc_period: float = 5.0, bandwidth: float = 100e6,
                timeout: float = 20.0, report_clients: bool = False, distance: str | None = None,
                durable: tuple[str, list[str], str] | None = None) -> subprocess.Popen:
    """The broker agent in `node` (next to its nats-server); returns once it is registered.
    `report_clients`: also report every client's coordinate (what the AllPairs policy needs);
    `distance`: the reading of d its E(t) and W(t) use (testbed.policies.distance; the manager's);
    `durable`: (durable classes as JSON, its site's storage nodes' URLs, the cloud's site)."""
    log_dir = Path(log_dir)
    argv = [network.python, "-m", "testbed.systems.pubsub.broker", "--node", node, "--nats", nats_url(network.ip_of(node)),
            "--zk", zk_hosts, "--site", site, "--period", f"{period:g}", "--grace", f"{grace:g}",
            "--nc-period", f"{nc_period:g}", "--bandwidth", f"{bandwidth:g}",
            "--events", str(log_dir / f"broker-{node}.events.jsonl"), *(["--cloud"] if cloud else []),
            *(["--report-clients"] if report_clients else []), *(["--distance", distance] if distance else []),
            *(["--durable", durable[0], "--storage", ",".join(durable[1]), "--cloud-site", durable[2]]
              if durable else [])]
    log = (log_dir / f"broker-{node}.log").open("ab")
    process = network.popen(node, argv, stdout=subprocess.PIPE, stderr=log, text=True)
    if read_line(process, timeout) != "ready":
        process.kill()
        raise BrokerError(f"broker agent in {node} did not start (see {log.name})")
    return process


# -- the lookup service --------------------------------------------------------------------------------
def start_lookup(network, node: str, zk_hosts: str, default: str, log_dir: Path, timeout: float = 20.0):
    """The lookup service in the cloud node; returns once it serves `_ep.lookup`."""
    argv = [network.python, "-m", "testbed.systems.pubsub.lookup", "--nats", nats_url(network.ip_of(node)),
            "--zk", zk_hosts, "--default", default]
    log = (Path(log_dir) / f"lookup-{node}.log").open("ab")
    process = network.popen(node, argv, stdout=subprocess.PIPE, stderr=log, text=True)
    if read_line(process, timeout) != "ready":
        process.kill()
        raise RuntimeError(f"lookup service in {node} did not start (see {log.name})")
    return process
