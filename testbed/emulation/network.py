"""A running emulated network for one topology: build, run processes in nodes, relink, stop.

The backend (backends/: nodes as network namespaces or as Docker containers, both behind the
Mininet API) makes the net and the nodes and runs processes in them; all the rest is built here
the same way on every backend. Every site is a router node holding a Linux bridge (the site's
switch) with the same anycast gateway address and MAC at every site, so a node keeps its address,
gateway and ARP entry when it moves between sites; routers carry a /32 route per node, updated on
relink. Links are shaped in the run's shaper namespace (see shaping.py).
"""

from __future__ import annotations

import functools
import os
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from testbed.emulation import runstate
from testbed.emulation.backends.base import Backend
from testbed.emulation import netns
from testbed.emulation.servers import Server
from testbed.emulation.shaping import SHAPERS, NextHop, ShapedLink, ShaperError, ShaperPerServer
from testbed.topology import GATEWAY_IP, GATEWAY_MAC, Topology

HOST_INTF = "eth0"
BATCH_CHARS = 3500
P2P_BASE = (10, 254)
SHAPER_NODE = "shaper"
RESERVED_NAMES = {SHAPER_NODE}
RESERVED_PREFIX = SHAPER_NODE  # shaper1.., shaper-srv1..: the namespaces of a run over servers

Progress = Callable[[str], None]
# IPv4-only network (no IPv6 chatter on shaped links); TCP buffers large enough for
# bandwidth x delay of WAN-like links (the defaults cap a 40 ms path well below 1 Gbit/s).
# Congestion control: Linux's default (cubic), whatever the machine's own is. A namespace inherits
# the machine's, and with BBR every connection quiet on min-RTT for 10 s cut its window to 4 packets
# for 200 ms (PROBE_RTT), then sent what had piled up at once: every ~10 s a client's messages 180 ms
# late, a drop-tail drop on its access link and a retransmission timeout (3 such stalls in 40 s held
# one swarm's p99 at 7.7 ms).
TCP_CONGESTION = "cubic"
NODE_SYSCTLS = ("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 "
                "net.ipv4.tcp_rmem='4096 131072 33554432' net.ipv4.tcp_wmem='4096 65536 33554432'")
CONGESTION_SYSCTL = f"sysctl -qw net.ipv4.tcp_congestion_control={TCP_CONGESTION}"
ALLOWED_CONGESTION = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


def allow_congestion_control(name: str = TCP_CONGESTION, knob: Path = ALLOWED_CONGESTION) -> str | None:
    """A namespace may only make an algorithm its default if the machine allows it
    (tcp_allowed_congestion_control, set in the root namespace): add `name` to that list when it is
    missing. Returns what was done, or why it could not be (the nodes then keep the machine's own)."""
    try:
        allowed = knob.read_text().split()
        if name in allowed:
            return None
        knob.write_text(" ".join([*allowed, name]) + "\n")
        return f"tcp congestion control: {name} added to the machine's allowed list (was: {' '.join(allowed)})"
    except OSError as error:
        return f"tcp congestion control: {name} cannot be allowed here ({error}): nodes keep the machine's default"


class EmulationError(RuntimeError):
    """The network could not be built or changed as asked."""


@dataclass(frozen=True)
class RelinkEvent:
    time: float  # wall clock, seconds since the epoch
    node: str
    from_site: str
    to_site: str
    duration_s: float  # how long the call took


def _p2p_addresses(index: int) -> tuple[str, str]:
    """A /31 per site link: 10.254.x.y and its neighbour."""
    base = 2 * index
    return (f"{P2P_BASE[0]}.{P2P_BASE[1]}.{base // 256}.{base % 256}",
            f"{P2P_BASE[0]}.{P2P_BASE[1]}.{(base + 1) // 256}.{(base + 1) % 256}")


def _mac(kind: int, index: int) -> str:
    """Deterministic locally administered MACs so routers can hold permanent neighbour entries."""
    return f"02:{kind:02x}:{(index >> 16) & 255:02x}:{(index >> 8) & 255:02x}:{index & 255:02x}:01"


def place(topology: Topology, servers: list[Server]) -> dict[str, Server]:
    """Whole sites on servers (a site's router, broker, NC proxy, storage and clients together, so
    only site links and moved clients cross servers): the sites with most nodes first, each onto
    the server holding fewest nodes so far."""
    if len(servers) > len(topology.sites):
        raise EmulationError(f"{len(servers)} servers for {len(topology.sites)} sites: a server would hold no site")
    count = {site: 1 for site in topology.sites}
    for node in topology.nodes.values():
        count[node.site] += 1
    load = {server.name: 0 for server in servers}
    placement = {}
    for site in sorted(topology.sites, key=lambda s: (-count[s], list(topology.sites).index(s))):
        server = min(servers, key=lambda s: (load[s.name], servers.index(s)))
        placement[site] = server
        load[server.name] += count[site]
    return placement


class Network:
    """An emulated network whose nodes a backend makes (backends.get(name)(run_id, log_dir))."""

    def __init__(self, topology: Topology, run_id: str, backend: Backend, shaper: str, seed: int = 1,
                 progress: Progress = lambda _m: None, log_dir=None, servers: list[Server] | None = None,
                 control_dir: Path | None = None, reachable: dict[str, set[str]] | None = None):
        self.topology = topology
        self.servers = servers or []  # empty: every node on this machine
        self.control_dir = control_dir  # the ssh control sockets of a run over servers
        self.placement: dict[str, Server] = place(topology, self.servers) if self.servers else {}
        self.server_shells: dict[str, object] = {}
        self.reachable = reachable or {}  # mobile node -> the sites its plan moves it to (ports made up front)
        self.run_id = run_id
        self.backend = backend
        self.shaper_kind = shaper
        self.seed = seed
        self.progress = progress
        self.log_dir = log_dir
        self.env = {**os.environ, runstate.ENV_TAG: run_id}
        self.net = None
        self.nodes: dict[str, object] = {}
        self.sites: dict[str, object] = {}
        self.site_links: dict[frozenset, tuple[ShapedLink, str, str]] = {}
        self.access: dict[str, ShapedLink] = {}
        self.cut: set[str] = set()  # sites cut off by a fault (scenario `cut:`)
        self.router_number = {site: number for number, site in enumerate(topology.sites)}  # the shaper's names
        self.node_site: dict[str, str] = {}
        self.relinks: list[RelinkEvent] = []
        self.shaper = None
        self._link_counter = 0
        # Servers whose kernel and file system are not ours: reached over ssh only, the run
        # directory shipped to and gathered from them.
        self.elsewhere = [s for s in self.servers if not s.on_this_machine]
        self.run_files = None
        if self.elsewhere and log_dir is not None:
            from testbed.emulation.runfiles import RunFiles

            self.run_files = RunFiles(self.elsewhere, control_dir, Path(log_dir).parent)

    # -- build -----------------------------------------------------------------------------
    def start(self) -> None:
        """Create sites, nodes and shaped links; configure addresses and routes."""
        # Everything Mininet spawns (node shells, relays) inherits the run tag: `testbed clean` finds it.
        os.environ[runstate.ENV_TAG] = self.run_id
        self.net = self.backend.make_net()
        topo = self.topology
        clash = {n for n in set(topo.nodes) | set(topo.sites) if n in RESERVED_NAMES or
                 (self.servers and n.startswith(RESERVED_PREFIX))}
        if clash:
            raise EmulationError(f"names reserved by the emulator: {', '.join(sorted(clash))}")
        if self.servers:
            on = {s.name: [site for site, at in self.placement.items() if at == s] for s in self.servers}
            self.progress("placement: " + "; ".join(f"{name}: {', '.join(sites)}" for name, sites in on.items()))
        if self.elsewhere:
            netns.forbid_local(f"servers {', '.join(s.name for s in self.elsewhere)} are other machines, "
                               "reached over ssh only (Network.connector, _signal_processes)")
        if self.run_files is not None:
            self.run_files.prepare("logs", "traces")
        self.shaper = self._make_shapers()
        said = allow_congestion_control()
        if said:
            self.progress(said)
        self.progress(f"sites: creating {len(topo.sites)} site routers")
        for index, name in enumerate(topo.sites):
            router = self.net.addHost(name, cls=self._node_class(name), inNamespace=True, ip=None)
            self._configure_router(router)
            self.sites[name] = router
        self.progress(f"site links: {len(topo.links)}")
        for index, link in enumerate(topo.links):
            self._add_site_link(index, link)
        total = len(topo.nodes)
        for count, node in enumerate(topo.nodes.values(), start=1):
            if self.servers:  # a node starts on its site's server (the namespace backend's nodes only)
                host = self.net.addHost(node.name, cls=self._node_class(node.site), inNamespace=True, ip=None)
            else:
                host = self.backend.add_host(self.net, node.name, node.role)
            self.nodes[node.name] = host
            self._configure_host(host, node.ip, count)
            shaped = self._new_link(host, HOST_INTF, self.sites[node.site], f"a-{node.name}", node.access)
            shaped.roaming = node.mobile
            shaped.near_mac, shaped.far_mac = _mac(1, count), GATEWAY_MAC  # the far end: its site's switch
            self.shaper.connect(shaped, near_mac=_mac(1, count))
            for site in sorted(self.reachable.get(node.name, set()) - {node.site}):
                self.shaper.add_port(shaped, self.sites[site])
            self._attach_port(self.sites[node.site], f"a-{node.name}")
            self.access[node.name] = shaped
            self.node_site[node.name] = node.site
            if count % 10 == 0 or count == total:
                self.progress(f"nodes up: {count}/{total}")
        self._install_routes()
        # Node pids let `testbed topic ...` and other tools act inside a running experiment's nodes.
        # A pid on another machine names nothing here: those nodes are listed by server instead.
        # Site routers too: `testbed exec RUN SITE -- ip route` (testbed.emulation.nodeexec).
        runstate.update(self.run_id, nodes={name: node.pid for name, node in self.nodes.items()},
                        sites={name: router.pid for name, router in self.sites.items()},
                        ips={name: self.ip_of(name) for name in self.nodes},
                        roles={name: node.role for name, node in self.topology.nodes.items()},
                        elsewhere={name: server.name for name in [*self.nodes, *self.sites]
                                   if (server := self.server_of(name)) is not None and not server.on_this_machine})

    def _node_class(self, site: str):
        """Mininet's Node here, or a node on the server `site` is placed on."""
        if not self.servers:
            from mininet.node import Node

            return Node
        from testbed.emulation.remote import node_class

        return node_class(self.placement[site], self.control_dir)

    def _make_shapers(self):
        """One shaper namespace, or one per server (each shapes the links whose near end it holds)."""
        if not self.servers:
            return self._make_shaper(SHAPER_NODE, None)
        from testbed.emulation.remote import node_class

        shapers = {}
        for index, server in enumerate(self.servers, start=1):
            shell = self.net.addHost(f"{SHAPER_NODE}-srv{index}", cls=node_class(server, self.control_dir),
                                     inNamespace=False, ip=None)
            self.server_shells[server.name] = shell
            shapers[server.name] = self._make_shaper(f"{SHAPER_NODE}{index}", server)
        for shaper in shapers.values():
            shaper.server_shells = self.server_shells
        return ShaperPerServer(shapers)

    def _make_shaper(self, name: str, server: Server | None):
        from mininet.node import Node

        from testbed.emulation.remote import node_class

        cls = node_class(server, self.control_dir) if server else Node
        shaper_node = self.net.addHost(name, cls=cls, inNamespace=True, ip=None)
        shaper = SHAPERS[self.shaper_kind](self.net, shaper_node, self.run_id, self.env, self.log_dir)
        shaper_node.cmd("ip link set lo up")
        return shaper

    def _new_link(self, near_node, near_intf, far_node, far_intf, shaping) -> ShapedLink:
        self._link_counter += 1
        return ShapedLink(self._link_counter, near_node, near_intf, far_node, far_intf, shaping,
                          seed=self.seed * 100_003 + self._link_counter)

    def _configure_router(self, router) -> None:
        commands = [
            "ip link set lo up",
            NODE_SYSCTLS,
            "sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 "
            "net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0",
            "ip link add br0 type bridge",
            f"ip link set br0 address {GATEWAY_MAC}",
            f"ip addr add {GATEWAY_IP}/32 dev br0",
            "ip link set br0 up",
        ]
        for command in commands:
            out = router.cmd(command)
            if out.strip():
                raise EmulationError(f"site {router.name}: '{command}' failed: {out.strip()}")

    def _attach_port(self, router, port: str) -> None:
        out = router.cmd(f"ip link set {port} master br0 && ip link set {port} up")
        if out.strip():
            raise EmulationError(f"site {router.name}: cannot attach {port} to its switch: {out.strip()}")

    def _add_site_link(self, index: int, link) -> None:
        a, b = self.sites[link.a], self.sites[link.b]
        ip_a, ip_b = _p2p_addresses(index)
        mac_a, mac_b = _mac(2, 2 * index), _mac(2, 2 * index + 1)
        shaped = self._new_link(a, f"p-{link.b}", b, f"p-{link.a}", link.shaping)
        shaped.near_mac, shaped.far_mac = mac_a, mac_b
        self.shaper.connect(shaped, near_mac=mac_a, far_mac=mac_b)
        for router, intf, ip, peer_ip, peer_mac in ((a, f"p-{link.b}", ip_a, ip_b, mac_b),
                                                    (b, f"p-{link.a}", ip_b, ip_a, mac_a)):
            out = router.cmd(f"ip addr add {ip}/31 dev {intf} && "
                             f"ip neigh replace {peer_ip} lladdr {peer_mac} dev {intf} nud permanent")
            if out.strip():
                raise EmulationError(f"site {router.name}: cannot address {intf}: {out.strip()}")
        self.site_links[frozenset((link.a, link.b))] = (shaped, ip_a, ip_b)

    def _configure_host(self, host, ip: str, index: int) -> None:
        self._host_ip = getattr(self, "_host_ip", {})
        self._host_ip[host.name] = (ip, _mac(1, index))

    def _finish_host(self, name: str) -> None:
        host = self.nodes[name]
        ip, _mac_addr = self._host_ip[name]
        # Best effort: a Docker host's /proc/sys is read-only (its sysctls are set when it is created).
        host.cmd(NODE_SYSCTLS + " 2>/dev/null")
        host.cmd(CONGESTION_SYSCTL + " 2>/dev/null")
        commands = [
            "ip link set lo up",
            f"ip addr replace {ip}/32 dev {HOST_INTF}",
            f"ip route replace {GATEWAY_IP}/32 dev {HOST_INTF} scope link",
            f"ip route replace 10.0.0.0/8 via {GATEWAY_IP} dev {HOST_INTF} src {ip}",
            f"ip neigh replace {GATEWAY_IP} lladdr {GATEWAY_MAC} dev {HOST_INTF} nud permanent",
        ]
        for command in commands:
            out = host.cmd(command)
            if out.strip():
                raise EmulationError(f"node {name}: '{command}' failed: {out.strip()}")

    def _way(self, site: str, node: str) -> tuple[str, ShapedLink | None]:
        """How `site`'s router reaches `node` where it is now: ("local", its access link) on the
        site's switch, ("via", the site link) to the node's site, or ("cut", None): dropped."""
        where = self.node_site[node]
        if where == site:
            return "local", self.access[node]
        if site in self.cut or where in self.cut:  # a cut site: silently dropped, as on a dead backhaul
            return "cut", None
        return "via", self.site_links[frozenset((site, where))][0]

    def _route_lines(self, site: str, node: str) -> list[str]:
        """`ip -batch` lines that point `site`'s router at `node` where it is now."""
        ip, mac = self._host_ip[node]
        way, link = self._way(site, node)
        if way == "local":
            return [f"route replace {ip}/32 dev br0", f"neigh replace {ip} lladdr {mac} dev br0 nud permanent"]
        if way == "cut":
            return [f"neigh flush to {ip} dev br0", f"route replace blackhole {ip}/32"]
        _shaped, ip_a, ip_b = self.site_links[frozenset((site, self.node_site[node]))]
        peer_ip = ip_b if link.near_node.name == site else ip_a
        return [f"neigh flush to {ip} dev br0", f"route replace {ip}/32 via {peer_ip} dev p-{self.node_site[node]}"]

    def _next_hop(self, site: str, node: str) -> NextHop | None:
        """The same route for a shaper that routes (shaping.RoutedDelayLineShaper)."""
        way, link = self._way(site, node)
        if way == "local":  # from the switch down the access link, to the node's own address
            return NextHop(link, 1, GATEWAY_MAC, self._host_ip[node][1])
        if way == "cut":
            return None
        forward = link.near_node.name == site
        return NextHop(link, 0 if forward else 1, *((link.near_mac, link.far_mac) if forward
                                                    else (link.far_mac, link.near_mac)))

    def _access_hops(self, nodes) -> list[tuple]:
        """(link, side, (router number, MAC)): each node's access link enters its site's switch."""
        return [(self.access[n], 0, (self.router_number[self.node_site[n]], GATEWAY_MAC)) for n in nodes]

    def _site_link_hops(self) -> list[tuple]:
        """Both ways of every site link enter the router at its other end."""
        return [hop for shaped, _ip_a, _ip_b in self.site_links.values()
                for hop in ((shaped, 0, (self.router_number[shaped.far_node.name], shaped.far_mac)),
                            (shaped, 1, (self.router_number[shaped.near_node.name], shaped.near_mac)))]

    def _route_in_shaper(self, nodes, hops: list[tuple]) -> None:
        """Tell the shaper what the routers now do for `nodes` (a shaper that does not route
        ignores it), after their kernels were told."""
        routes = [(self.router_number[site], self.ip_of(node), self._next_hop(site, node))
                  for node in nodes for site in self.sites]
        self.shaper.route(hops, routes)

    def _ip_batch(self, router, lines: list[str]) -> None:
        """Many route changes in few `ip` calls: `ip -batch` fed by printf, in pieces that fit the
        node shell's line (a pty line holds 4095 characters), so it works on any server."""
        pieces, piece = [], []
        for line in lines:
            if piece and sum(len(x) + 3 for x in piece) + len(line) > BATCH_CHARS:
                pieces.append(piece)
                piece = []
            piece.append(line)
        pieces += [piece] if piece else []
        for piece in pieces:
            out = router.cmd("printf '%s\\n' " + " ".join(shlex.quote(x) for x in piece) + " | ip -force -batch -")
            if "rror" in out or "annot" in out:
                raise EmulationError(f"site {router.name}: route setup failed: {out.strip()}")

    def _install_routes(self) -> None:
        self.progress("routes: installing per-node routes at every site")
        for name in self.nodes:
            self._finish_host(name)
        for site, router in self.sites.items():
            self._ip_batch(router, [line for node in self.nodes for line in self._route_lines(site, node)])
        self._route_in_shaper(self.nodes, self._access_hops(self.nodes) + self._site_link_hops())

    # -- run -------------------------------------------------------------------------------
    @property
    def python(self) -> str:
        """The Python that runs the project inside nodes: the harness's own, or the image's venv."""
        return self.backend.python

    @property
    def namespaces_here(self) -> bool:
        """Is every node a network namespace of this machine's kernel (namespaces, no other server)?
        Then one process can serve many nodes, each socket made inside its node's namespace (the
        client host, the NC reporters); Docker hosts keep a process in each container."""
        return self.backend.name == "mininet" and not self.elsewhere

    def connector(self, node: str) -> Callable[..., socket.socket]:
        """How the harness opens a TCP connection to a service that listens only inside `node`:
        `connect((ip, port), timeout)`. On this machine's kernel it enters the node's namespace
        (netns.connect_in); on another machine's, a relay in the node carries it over the server's
        ssh (remote.connect_through)."""
        pid, server = self.nodes[node].pid, self.server_of(node)
        if server is None or server.on_this_machine:
            return functools.partial(netns.connect_in, pid)
        from testbed.emulation.remote import connect_through

        return functools.partial(connect_through, server.ssh(self.control_dir), pid, self.python)

    def share(self, path: Path) -> None:
        """A file the harness wrote for processes in nodes (a plan, a configuration, the start
        time): also at its path on servers whose file system is not ours."""
        if self.run_files is not None:
            self.run_files.ship(path)

    def gather(self) -> list[str]:
        """What nodes on other servers wrote in the run directory, merged into ours (after their
        processes ended); what could not be gathered."""
        return self.run_files.gather() if self.run_files is not None else []

    def server_feeds(self, log_dir: Path) -> dict[str, subprocess.Popen]:
        """Each server's own monitor (testbed.monitor's `feed`) where its /proc is not ours, its
        lines on the Popen's stdout (ServerFeeds reads them)."""
        return {s.name: self.server_shells[s.name].popen([self.python, "-m", "testbed.monitor", self.run_id, str(log_dir)],
                                                         env=self.env, stdout=subprocess.PIPE,
                                                         stderr=subprocess.DEVNULL, text=True)
                for s in self.elsewhere}

    def popen(self, node: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start a process inside a node (tagged with the run id for cleanup); the returned Popen's
        terminate/kill reach the process in the node on every backend."""
        kwargs.setdefault("env", self.env)
        return self.backend.popen(self.nodes[node], argv, **kwargs)

    def crash(self, node: str) -> list[str]:
        """The node fails for good: SIGKILL every process in it (whichever backend started them, also
        those run through `docker exec`), leaving only the node's own shell or container init so the
        teardown works as usual. Returns the names of what was killed."""
        import signal

        return self._signal_processes(node, signal.SIGKILL)

    def pause(self, node: str) -> list[str]:
        """The node stops answering without failing: SIGSTOP every process in it (its sockets stay
        open, its peers see silence). Returns the names of what was stopped."""
        import signal

        return self._signal_processes(node, signal.SIGSTOP)

    def resume(self, node: str) -> list[str]:
        import signal

        return self._signal_processes(node, signal.SIGCONT)

    def _signal_processes(self, node: str, signum: int) -> list[str]:
        """Send `signum` to every process of the node but the emulator's own shell into it: here, or
        on the node's server when its kernel is not ours (the same code, run there over ssh)."""
        from testbed.emulation.netns import signal_processes

        pid, server = self.nodes[node].pid, self.server_of(node)
        if server is None or server.on_this_machine:
            return signal_processes(pid, signum)
        out = self.server_shells[server.name].cmd(shlex.join(
            [self.python, "-m", "testbed.emulation.netns", "signal", str(pid), str(int(signum))]))
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    def cmd(self, node: str, command: str) -> str:
        """Run a shell command in a node and return its output (trusted, internal commands only)."""
        target = self.nodes.get(node) or self.sites[node]
        return target.cmd(command)

    def ip_of(self, node: str) -> str:
        return self._host_ip[node][0]

    def add_anycast(self, node: str, address: str) -> None:
        """Give a node a service address that every site routes to its own holder (NC proxies)."""
        ip, mac = self._host_ip[node]
        out = self.nodes[node].cmd(f"ip addr replace {address}/32 dev {HOST_INTF}")
        out += self.sites[self.node_site[node]].cmd(
            f"ip route replace {address}/32 dev br0 && ip neigh replace {address} lladdr {mac} dev br0 nud permanent")
        if out.strip():
            raise EmulationError(f"{node}: cannot add anycast address {address}: {out.strip()}")
        self.shaper.route([], [(self.router_number[self.node_site[node]], address,
                                NextHop(self.access[node], 1, GATEWAY_MAC, mac))])

    def server_of(self, node: str) -> Server | None:
        """The server a node's namespace is on (None on one machine); a site's nodes are on its."""
        return getattr(self.nodes.get(node) or self.sites.get(node), "testbed_server", None)

    def site_of(self, node: str) -> str:
        return self.node_site[node]

    def relink(self, node: str, to_site: str) -> RelinkEvent:
        """Move a node's access link to another site's switch; addresses and routes stay."""
        if to_site not in self.sites:
            raise EmulationError(f"relink {node}: unknown site {to_site!r}")
        from_site = self.node_site[node]
        started = time.time()
        t0 = time.monotonic()
        if to_site != from_site:
            if not self.topology.nodes[node].mobile:
                raise EmulationError(f"relink {node}: not a mobile node (mobile: true in the scenario builds its "
                                     "access link to move)")
            shaped = self.access[node]
            self.shaper.move_far_end(shaped, self.sites[to_site])
            self.node_site[node] = to_site
            port = shaped.far_intf
            # Every router at once (one round trip, not one per site), the new site taking the node's
            # port onto its switch and the old one letting it go.
            order = [to_site] + [s for s in self.sites if s not in (to_site, from_site)] + [from_site]
            for site in order:
                lines = [f"ip {line}" for line in self._route_lines(site, node)]
                if site == to_site:
                    lines = [f"ip link set {port} master br0", f"ip link set {port} up"] + lines
                elif site == from_site:
                    lines = [f"ip link set {port} nomaster"] + lines
                self.sites[site].sendCmd(" && ".join(lines))
            problems = [f"{site}: {out.strip()}" for site in order if (out := self.sites[site].waitOutput()).strip()]
            if problems:
                raise EmulationError(f"relink {node} to {to_site}: {'; '.join(problems)}")
            self._route_in_shaper([node], self._access_hops([node]))
        event = RelinkEvent(started, node, from_site, to_site, time.monotonic() - t0)
        self.relinks.append(event)
        return event

    def kill_relay(self, a: str, b: str) -> str:
        """A scenario fault: the relay of the link between sites `a` and `b`, or of node `a`'s access
        link (`b` its site), dies. Returns which link; the shaper's check restarts it."""
        if frozenset((a, b)) in self.site_links:
            shaped = self.site_links[frozenset((a, b))][0]
        elif a in self.access and self.node_site.get(a) == b:
            shaped = self.access[a]
        else:
            raise EmulationError(f"no link between {a} and {b}")
        if self.shaper is None or not self.shaper.kill_relay(shaped):
            raise EmulationError(f"the link {a}-{b} has no relay process to kill (shaper {getattr(self.shaper, 'name', None)})")
        return f"{a}-{b} (link {shaped.index})"

    def cut_site(self, site: str) -> int:
        """A scenario fault: the site is cut off from every other site (its routers drop what would
        cross, both ways; inside the site nodes still reach each other). Returns the routes changed."""
        if site not in self.sites:
            raise EmulationError(f"cut: unknown site {site!r}")
        self.cut.add(site)
        return self._reroute()

    def heal_site(self, site: str) -> int:
        """The cut's end: the site's routes point over its links again. Returns the routes changed."""
        self.cut.discard(site)
        return self._reroute()

    def _reroute(self) -> int:
        """Every router's route to every node, as the cuts now say (one `ip -batch` per router)."""
        changed = 0
        for site, router in self.sites.items():
            lines = [line for node in self.nodes for line in self._route_lines(site, node) if line.startswith("route")]
            self._ip_batch(router, lines)
            changed += len(lines)
        self._route_in_shaper(self.nodes, [])
        return changed

    def check(self) -> list[str]:
        """Problems seen in the data path since the last call (e.g. a delay line that died)."""
        return self.shaper.check() if self.shaper else []

    def stop(self) -> None:
        """Tear everything down: relays, links, node shells (their namespaces go with them)."""
        os.environ.pop(runstate.ENV_TAG, None)
        netns.forbid_local(None)
        if self.net is None:
            return
        if self.shaper:
            for shaped in list(self.access.values()) + [v[0] for v in self.site_links.values()]:
                try:
                    self.shaper.unshape(shaped)
                except (ShaperError, OSError):
                    pass
            self.shaper.stop()
        nodes = list(self.nodes.values()) + list(self.sites.values())
        if self.shaper:
            nodes += self.shaper.nodes()
        nodes += list(self.server_shells.values())
        if self.servers:
            from testbed.emulation.remote import SignalPipe, end_relays

            SignalPipe.close_all()
            end_relays()
        for node in nodes:
            try:
                node.stop(deleteIntfs=False) if hasattr(node, "stop") else node.terminate()
            except Exception:  # noqa: BLE001 - teardown must go on whatever one node does
                try:
                    node.terminate()
                except Exception:  # noqa: BLE001
                    pass
        self.net = None
