"""Real Serf agents in the emulated nodes: start, join, supervise, read coordinates.

Every broker, static client (game server, star node) and NC proxy runs the distribution's `serf`
binary; cloud brokers are the seed nodes (paper section 4). Mobile clients run no agent: they take
their coordinate from the NC proxy of the zone they are attached to. An agent that dies is reported
and restarted, never silently missing.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.nc.coordinate import Coordinate
from testbed.nc.serf import RPC_PORT, SerfError, SerfRPC

SERF_PORT = 7946
AGENT_ROLES = {"cloud", "broker", "nc-proxy", "game-server", "static", "star"}


class AgentError(RuntimeError):
    """Serf is missing or the agents did not form a cluster."""


def agent_nodes(topology) -> list[str]:
    return [n.name for n in topology.nodes.values() if n.role in AGENT_ROLES and not n.mobile]


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

    def rpc(self, node: str) -> SerfRPC:
        return SerfRPC(netns_pid=self.network.nodes[node].pid)

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
        """Every agent's own view of its coordinate (agents that do not answer are left out)."""
        found = {}
        for node in self.agents:
            try:
                with self.rpc(node) as rpc:
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

    def pids(self) -> dict[str, int]:
        return {node: agent.process.pid for node, agent in self.agents.items()}

    def stop(self) -> None:
        for agent in self.agents.values():
            if agent.process.poll() is None:
                agent.process.terminate()
        for agent in self.agents.values():
            try:
                agent.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                agent.process.kill()
                agent.process.wait()
