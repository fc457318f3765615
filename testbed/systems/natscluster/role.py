"""The NATS cluster baseline's harness roles: the route cluster, and the UAV workload attached to it.

`NatsClusterRole` starts one nats-server in every broker node (the cloud's and each edge site's) with
a `cluster {}` block routing to every other one (a full mesh of routes: NATS's own cluster, interest
propagated over the routes), and waits until each server sees every other. No topic manager, no
ZooKeeper, no broker agent: a message published at one server reaches the subscribers of every
server through the routes.

`NatsClusterWorkload` is the pub/sub system's workload role (UAV swarms, MMOG players and game
servers) with the lookup replaced by an attach
plan (testbed.systems.pubsub.attach): which broker serves each zone and each NC proxy's clients,
written once the coordinates settled and given to every client process as `--attach`.
"""

from __future__ import annotations

import json
import time

from testbed.nc.coordinate import Coordinate
from testbed.policies.distance import get_distance
from testbed.procs import stop_group
from testbed.roles.base import Role, RunContext, newly_dead
from testbed.roles.coordinates import Coordinates
from testbed.roles.launch import start_nats
from testbed.systems.natscluster.manifest import SYSTEM
from testbed.systems.pubsub.attach import AttachPlan
from testbed.systems.pubsub.broker import MONITOR_PORT, nats_url
from testbed.systems.pubsub.workload_role import PubSubWorkload

RUNS = SYSTEM.runs  # the workload kinds this system runs
SERVER_ROLES = ("cloud", "broker")  # the nodes whose nats-server joins the cluster
CLUSTER_NAME = "geo"
ROUTE_PORT = 6222
ROUTES_S = 30.0  # how long the servers have to see each other


def cluster_config(ip: str, others: list[str]) -> str:
    """A server's cluster block: listen for routes on its own address, route to every other server."""
    routes = ", ".join(f'"nats-route://{other}:{ROUTE_PORT}"' for other in others)
    return f'cluster {{ name: "{CLUSTER_NAME}", listen: "{ip}:{ROUTE_PORT}", routes: [{routes}] }}\n'


def attach_plan(mode: str, brokers: dict[str, tuple[str, str]], proxies: dict[str, str],
                coords: dict[str, Coordinate], distance) -> AttachPlan:
    """`brokers`: edge broker node -> (site, address); `proxies`: NC proxy node -> site; `coords`: Serf
    coordinates by node. home: a site's (and its proxies') broker is the one at the site; nearest: a
    proxy's is the broker whose coordinate is nearest the proxy's (a client's coordinate is its
    proxy's plus its access height, so the nearest broker to the proxy is the nearest to the client);
    a proxy without a coordinate keeps its site's broker."""
    by_site = {site: (name, address) for name, (site, address) in sorted(brokers.items())}
    by_proxy = {proxy: by_site[site] for proxy, site in proxies.items() if site in by_site}
    if mode == "nearest":
        for proxy in proxies:
            known = [(distance(coords[proxy], coords[b]), b) for b in sorted(brokers) if proxy in coords and b in coords]
            if known:
                broker = min(known)[1]
                by_proxy[proxy] = (broker, brokers[broker][1])
    return AttachPlan(mode, by_site, by_proxy)


class NatsClusterRole(Role):
    """nats-server in every broker node, one route cluster."""

    name = "natscluster"

    @classmethod
    def wanted(cls, scenario) -> bool:
        return scenario.workload.kind in RUNS

    def __init__(self, run: RunContext, others: list[Role] = ()):
        super().__init__(run, list(others))
        self.network, self.topology, self.scenario = run.network, run.topology, run.scenario
        self.servers: dict = {}
        self._reported: set[str] = set()
        self.routes_s: float | None = None

    @property
    def nodes(self) -> list[str]:
        return [n.name for n in self.topology.nodes.values() if n.role in SERVER_ROLES]

    def start(self) -> None:
        ips = {node: self.network.ip_of(node) for node in self.nodes}
        began = time.monotonic()
        for node, ip in ips.items():
            config = cluster_config(ip, [other for n, other in ips.items() if n != node])
            self.servers[node] = start_nats(self.network, node, self.run.logs, config=config,
                                            server=self.scenario.nodes.nats_server)
        self._wait_routes(ips)
        self.routes_s = time.monotonic() - began
        self.run.say(f"natscluster: {len(ips)} nats-servers in one route cluster in {self.routes_s:.1f}s "
                     f"(attach: {self.scenario.control.natscluster.attach})")

    def _routes(self, node: str, ip: str) -> set[str]:
        """The servers `node`'s nats-server has a route to (its /routez, through the node's network)."""
        with self.network.connector(node)((ip, MONITOR_PORT), 1.0) as sock:
            sock.sendall(b"GET /routez HTTP/1.0\r\nHost: x\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        body = json.loads(data.split(b"\r\n\r\n", 1)[1])
        return {r.get("remote_name") or r.get("remote_id") for r in body.get("routes") or []}

    def _wait_routes(self, ips: dict[str, str]) -> None:
        deadline = time.monotonic() + ROUTES_S
        missing = dict.fromkeys(ips)
        while time.monotonic() < deadline:
            for node, ip in ips.items():
                try:
                    seen = len(self._routes(node, ip))
                except (OSError, ValueError, IndexError):
                    seen = 0
                if seen >= len(ips) - 1:
                    missing.pop(node, None)
            if not missing:
                return
            time.sleep(0.2)
        raise RuntimeError(f"natscluster: {', '.join(missing)} did not see every other server's route within "
                           f"{ROUTES_S:g}s (see logs/nats-*.log)")

    def supervise(self) -> list[dict]:
        return [{"type": "broker_died", "time": time.time(), "node": name, "exit_code": code}
                for name, code in newly_dead(self.servers, self._reported)]

    def stop(self) -> None:
        stop_group(self.servers.values())
        self.servers = {}

    def summary(self, events: list[dict]) -> dict:
        reattached = [e for e in events if e.get("type") == "reattach"]
        return {"natscluster": {"servers": len(self.nodes), "attach": self.scenario.control.natscluster.attach,
                                "routes_s": round(self.routes_s, 3) if self.routes_s is not None else None,
                                "reattached": len(reattached)}}

    def end_screen(self, summary: dict) -> list:
        s = summary.get("natscluster") or {}
        return [f"NATS cluster: {s.get('servers')} servers in one route cluster, clients attached {s.get('attach')}; "
                f"{s.get('reattached')} reattachments of a moving node to another server; no placement control plane, no migrations"]


class NatsClusterWorkload(PubSubWorkload):
    """The pub/sub system's UAV and MMOG workloads, their clients attached by the plan instead of a lookup."""

    @classmethod
    def wanted(cls, scenario) -> bool:
        return scenario.workload.kind in RUNS

    @property
    def system(self) -> NatsClusterRole:
        return self.find(NatsClusterRole)

    def begin(self) -> None:
        self.plan_path = self.out / "attach-plan.json"
        self.plan_path.write_text(self.plan().to_json())
        self.network.share(self.plan_path)
        super().begin()

    def plan(self) -> AttachPlan:
        nodes = self.topology.nodes.values()
        brokers = {n.name: (n.site, nats_url(self.network.ip_of(n.name))) for n in nodes if n.role == "broker"}
        proxies = {n.name: n.site for n in nodes if n.role == "nc-proxy"}
        mode = self.scenario.control.natscluster.attach
        coordinates = self.find(Coordinates)
        coords = coordinates.agents.coordinates() if mode == "nearest" and coordinates and coordinates.agents else {}
        return attach_plan(mode, brokers, proxies, coords, get_distance(self.scenario.control.distance))

    def attach_args(self, node) -> list[str]:
        return ["--attach", str(self.plan_path)]
