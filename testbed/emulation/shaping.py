"""Shaped links: every emulated link passes through the run's shaper namespace.

A link between interface X on node A and interface Y on node B is two veth pairs,
A:X <-> shaper:l<N>a and shaper:l<N>b <-> B:Y, and the shaper namespace delays what crosses
between l<N>a and l<N>b: with `netem` (tc qdiscs plus mirred redirects) where the kernel has
sch_netem, otherwise with the user-space delay line, which schedules each frame at its kernel
receive timestamp plus the delay: one relay process for every link (`shared`, the default) or one
per link (`delayline`).

A mobile node's access link roams: l<N>b leads to a bridge of its own in the shaper namespace
(m<N>), with a port towards each site the node may reach (l<N>p<k>, made up front for the sites
its mobility plan visits). Relinking switches which port is on the bridge: one command, while the
relay, its shaping, and node A's interface, addresses and routes stay as they are.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from testbed import procs

if TYPE_CHECKING:  # a hint only: the CLI's help lists SHAPERS without building the scenario model
    from testbed.topology import Shaping

READY_TIMEOUT_S = 5.0
MAX_PORTS = 32  # sites one roaming link can switch between (its ports' VXLAN ids hold 5 bits)


class ShaperError(RuntimeError):
    """A link could not be shaped (relay failed to start, tc refused a qdisc)."""


@dataclass(frozen=True)
class NextHop:
    """Where a router sends an address: into `link` in direction `side` (0: from its near end to
    its far end, 1: back), from Ethernet address `src` to `dst`."""

    link: "ShapedLink"
    side: int
    src: str
    dst: str


@dataclass
class ShapedLink:
    """One emulated link and its shaping (the same parameters in both directions)."""

    index: int
    near_node: object  # mininet node that keeps its interface (host or site router)
    near_intf: str
    far_node: object  # mininet node on the far end (a site router); changes on relink
    far_intf: str
    shaping: Shaping
    seed: int
    mininet_links: list = field(default_factory=list)
    relay: subprocess.Popen | None = None
    roaming: bool = False  # a mobile node's access link: its far end switches between sites (`ports`)
    ports: dict = field(default_factory=dict)  # far node name -> the shaper's port towards it
    near_mac: str = ""  # the Ethernet addresses of the interfaces at its ends (routing in the shaper)
    far_mac: str = ""

    @property
    def shaper_a(self) -> str:
        return f"l{self.index}a"

    @property
    def shaper_b(self) -> str:
        return f"l{self.index}b"

    @property
    def switch(self) -> str:
        """A roaming link's bridge in the shaper namespace, between the relay and the sites' ports."""
        return f"m{self.index}"


def _preset_intf_class():
    """A Mininet Intf that only brings itself up: the veth was created with its MAC already set,
    and Mininet's default config would take it down and up again with three more commands."""
    from mininet.link import Intf

    class PresetIntf(Intf):
        def config(self, mac=None, ip=None, ifconfig=None, up=True, **_params):
            self.mac = mac
            if up:
                self.cmd(f"ip link set {self.name} up")
            return {}

    return PresetIntf


def _link_class(shells: dict | None = None, vni: int = 0):
    """A Mininet Link whose veth pair is made by the shaper node, directly into the other node.

    Containernet creates pairs in the host's namespace first (where `eth0` exists and two runs
    would collide on names); from the shaper's namespace, with the peer sent straight into the
    other node's namespace by pid, nothing of ours ever appears in the host's namespace. Across
    servers (`shells`: each server's own shell) the pair is a VXLAN with id `vni` (remote.py)."""
    from mininet.link import Link

    class ShaperLink(Link):
        @classmethod
        def makeIntfPair(cls, intfname1, intfname2, addr1=None, addr2=None, node1=None, node2=None,
                         deleteIntfs=True):
            if _server(node1) != _server(node2):
                from testbed.emulation.remote import vxlan_pair

                try:
                    vxlan_pair(shells, node1, intfname1, addr1, node2, intfname2, addr2, vni)
                except RuntimeError as error:
                    raise ShaperError(str(error)) from None
                return
            out = node1.cmd(f"ip link add name {intfname1} address {addr1} type veth "
                            f"peer name {intfname2} address {addr2} netns {node2.pid}")
            if out.strip():
                raise ShaperError(f"cannot create veth {node1.name}:{intfname1} <-> {node2.name}:{intfname2}: "
                                  f"{out.strip()}")

    return ShaperLink


def _server(node) -> str | None:
    """The server a node lives on (remote.py's nodes), None on this machine."""
    server = getattr(node, "testbed_server", None)
    return server.name if server else None


class Shaper:
    """Common part: builds the two veth pairs; subclasses shape the middle."""

    name = "none"

    def __init__(self, net, shaper_node, run_id: str, env: dict[str, str], log_dir: Path | None = None):
        self.net = net
        self.node = shaper_node
        self.run_id = run_id
        self.env = env
        self.log_dir = log_dir or Path(tempfile.gettempdir()) / f"testbed-{run_id}"
        self.server_shells: dict[str, object] = {}  # set by a network spread over servers
        # IPv4-only network: the shaper's own IPv6 chatter would otherwise reach the hosts.
        shaper_node.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")

    # -- structure -------------------------------------------------------------------------
    def connect(self, link: ShapedLink, near_mac: str | None = None, far_mac: str | None = None) -> None:
        """Create both pairs (the far one a VXLAN when the far node is on another server) and shape
        the middle. A roaming link's relay ends on its own bridge instead, and the far node is the
        first of its ports (`move_far_end`)."""
        Link = _link_class(self.server_shells, link.index)
        intf = _preset_intf_class()
        # The shaper node creates both pairs: a container's own shell lives in another PID namespace,
        # where `ip link ... netns <pid>` would name the wrong process.
        link.mininet_links.append(Link(self.node, link.near_node, intfName1=link.shaper_a,
                                       intfName2=link.near_intf, addr1=_shaper_mac(link.index, 1),
                                       addr2=near_mac or _shaper_mac(link.index, 0), intf=intf))
        if link.roaming:
            i = link.index
            out = self.node.cmd(f"ip link add {link.switch} type bridge && ip link set {link.switch} up && "
                                f"ip link add {link.shaper_b} address {_shaper_mac(i, 2)} type veth peer name l{i}m && "
                                f"ip link set l{i}m master {link.switch} && ip link set l{i}m up && "
                                f"ip link set {link.shaper_b} up")
            if out.strip():
                raise ShaperError(f"cannot make the roaming switch of link {i}: {out.strip()}")
            self.add_port(link, link.far_node, far_mac)
            self._switch(link, None, link.far_node)
        else:
            link.mininet_links.append(Link(self.node, link.far_node, intfName1=link.shaper_b,
                                           intfName2=link.far_intf, addr1=_shaper_mac(link.index, 2),
                                           addr2=far_mac or _shaper_mac(link.index, 3), intf=intf))
        self.shape(link)

    def add_port(self, link: ShapedLink, far_node, far_mac: str | None = None) -> None:
        """A roaming link's port towards `far_node` (a site it may move to), made before it is needed
        and left off its switch: a move then only switches ports, and its relay keeps running."""
        if far_node.name in link.ports:
            return
        number = len(link.ports)
        if number >= MAX_PORTS:
            raise ShaperError(f"link {link.index}: more than {MAX_PORTS} sites to roam to")
        port = f"l{link.index}p{number}"
        Link = _link_class(self.server_shells, (1 << 23) | (link.index << 5) | number)
        Link(self.node, far_node, intfName1=port, intfName2=link.far_intf, addr1=_shaper_mac(link.index, 4 + number),
             addr2=far_mac or _shaper_mac(link.index, 3), intf=_preset_intf_class())
        link.ports[far_node.name] = port

    def _switch(self, link: ShapedLink, old_far_node, new_far_node) -> None:
        off = f"ip link set {link.ports[old_far_node.name]} nomaster && " if old_far_node is not None else ""
        out = self.node.cmd(off + f"ip link set {link.ports[new_far_node.name]} master {link.switch}")
        if out.strip():
            raise ShaperError(f"link {link.index}: cannot switch to {new_far_node.name}: {out.strip()}")

    def move_far_end(self, link: ShapedLink, new_far_node) -> None:
        """Relink: the roaming link's switch takes the port towards `new_far_node` instead of the
        current one (made now if it was not made up front); the relay and its shaping stay."""
        if not link.roaming:
            raise ShaperError(f"link {link.index} ({link.near_node.name}) was not built to move")
        self.add_port(link, new_far_node)
        self._switch(link, link.far_node, new_far_node)
        link.far_node = new_far_node

    def nodes(self) -> list:
        """The namespaces the shaper runs in (one per server)."""
        return [self.node]

    def stop(self) -> None:
        """After the last unshape: collect what is still exiting."""

    # -- shaping ---------------------------------------------------------------------------
    def shape(self, link: ShapedLink) -> None:
        raise NotImplementedError

    def unshape(self, link: ShapedLink) -> None:
        raise NotImplementedError

    def check(self) -> list[str]:
        """Problems seen since the last call (e.g. a relay that died, and was restarted)."""
        return []

    def kill_relay(self, link: ShapedLink) -> bool:
        """A scenario fault: the process forwarding `link` dies (SIGKILL); False where the shaper has
        no such process (netem lives in the kernel)."""
        return False

    def route(self, hops: list[tuple], routes: list[tuple]) -> None:
        """What the routers do, for a shaper that does it itself (`routed`): `hops` are (link,
        side, (router number, interface MAC) or None), the router a direction's frames enter;
        `routes` are (router number, IPv4 address, NextHop or None where the router drops it: a
        cut). The other shapers leave routing to the routers' kernels."""

    def health(self) -> dict | None:
        """The shaper's own timeliness since the last call, for the saturation guard
        ({"tx", "over_budget", "late_max_ms", "harness_drops"}), or None where it is not measured."""
        return None


class UserSpaceShaper(Shaper):
    """What both delay-line shapers share: the relay binary, the links they relay, the relays'
    counters for the guard, and the outages of relays that died."""

    def __init__(self, net, shaper_node, run_id: str, env: dict[str, str], log_dir: Path | None = None):
        super().__init__(net, shaper_node, run_id, env, log_dir)
        from testbed.emulation import delayline

        self.delayline = delayline
        self.binary = delayline.ensure_built()
        self.links: dict[int, ShapedLink] = {}
        self._counters = RelayCounters()
        self.outages: list[tuple[float, float]] = []  # (from, to) epoch s a dead relay's link forwarded nothing

    def _options(self, link: ShapedLink) -> list[str]:
        """The link's relay options: its shaping, the same both ways."""
        s = link.shaping
        direction = self.delayline.Direction(delay_s=s.delay, jitter_s=s.jitter, loss=s.loss,
                                             rate_bps=s.bandwidth or 0.0)
        return self.delayline.link_options(link.shaper_a, link.shaper_b, direction, direction, seed=link.seed)


class DelayLineShaper(UserSpaceShaper):
    """User-space delay line: one relay process per link, both directions."""

    name = "delayline"

    def __init__(self, net, shaper_node, run_id: str, env: dict[str, str], log_dir: Path | None = None):
        super().__init__(net, shaper_node, run_id, env, log_dir)
        self.dying: list[subprocess.Popen] = []  # killed relays not collected yet
        self._alive_at: dict[int, float] = {}  # each relay's last sign of life (check)

    def shape(self, link: ShapedLink) -> None:
        argv = [str(self.binary), *self._options(link), *self.delayline.process_options(f"tb-{self.run_id}")]
        # stderr goes to a file: a pipe nobody reads could fill up and block the relay.
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"delayline-{link.index}.log"
        with log_path.open("ab") as log:
            relay = self.node.popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=log, text=True)
        line = procs.read_line(relay, READY_TIMEOUT_S)
        if line != "ready":
            relay.kill()
            relay.wait()
            raise ShaperError(f"delay line for link {link.index} did not start: {(line or '').strip()} "
                              f"{_tail(log_path)}")
        link.relay = relay
        self.links[link.index] = link

    def unshape(self, link: ShapedLink) -> None:
        relay, link.relay = link.relay, None
        self.links.pop(link.index, None)
        if relay and relay.poll() is None:
            # The relay holds no state worth a graceful exit; SIGKILL makes relinking fast. Its exit
            # is collected later (check, stop): a relink does not wait the ~30 ms it takes to die.
            relay.kill()
            self.dying.append(relay)
        self.dying = [p for p in self.dying if p.poll() is None]

    def stop(self) -> None:
        for relay in self.dying:
            try:
                relay.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.dying = []

    def check(self) -> list[str]:
        """A relay that died is restarted at once (the experiment calls this every 50 ms): its link
        forwarded nothing from its last sign of life until then, an emulation error the saturation
        guard marks (`outages`, drained by `health`)."""
        problems = []
        now = time.time()
        for link in list(self.links.values()):
            if link.relay and link.relay.poll() is not None:
                code = link.relay.returncode
                err = _tail(self.log_dir / f"delayline-{link.index}.log").strip()
                down_from = self._alive_at.get(link.index, now)
                try:
                    self.shape(link)
                    restarted = time.time()
                    self.outages.append((down_from, restarted))
                    problems.append(f"delay line of link {link.index} ({link.near_node.name}:{link.near_intf}) "
                                    f"exited with {code}: {err}; restarted, the link forwarded nothing for "
                                    f"{1e3 * (restarted - down_from):.0f} ms")
                except ShaperError as error:
                    self.links.pop(link.index)
                    self.outages.append((down_from, float("inf")))
                    problems.append(f"delay line of link {link.index} exited with {code}: {err}; restart failed: {error}")
            elif link.relay:
                self._alive_at[link.index] = now
        return problems

    def kill_relay(self, link: ShapedLink) -> bool:
        if link.relay is None or link.relay.poll() is not None:
            return False
        link.relay.kill()
        return True


    def health(self) -> dict:
        relays = [(link.relay, self.log_dir / f"delayline-{link.index}.log") for link in self.links.values()
                  if link.relay is not None]
        found = self._counters.poll(relays)
        found["outages"], self.outages = self.outages, []
        return found


class SharedDelayLineShaper(UserSpaceShaper):
    """User-space delay line, one process for every link of this shaper namespace (delayline.c's
    --control mode): links are added and removed by lines on its stdin. One timer then serves
    every link with a frame due, where per-link relays each wake for their own frames (ModelNet's
    one-core-for-all-pipes, without collapsing paths: each hop keeps its own queue, loss, jitter
    and rate, and every hop is still a frame crossing the relay)."""

    name = "shared"

    def __init__(self, net, shaper_node, run_id: str, env: dict[str, str], log_dir: Path | None = None):
        super().__init__(net, shaper_node, run_id, env, log_dir)
        self.relay: subprocess.Popen | None = None
        self.log_path = self.log_dir / "delayline-shared.log"
        self._replies = b""
        self._alive_at = time.time()
        self.down: dict[int, float] = {}  # link index -> since when it forwards nothing (killed, gone)

    # -- the process and its control lines -------------------------------------------------
    def _start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = self.delayline.shared_command(self.binary, tag=f"tb-{self.run_id}")
        with self.log_path.open("ab") as log:  # stderr to a file: a pipe nobody reads could block it
            relay = self.node.popen(argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=log, bufsize=0)
        self.relay, self._replies = relay, b""
        if self._line(READY_TIMEOUT_S) != "ready":
            relay.kill()
            relay.wait()
            self.relay = None
            raise ShaperError(f"the shared delay line did not start: {_tail(self.log_path)}")
        self._alive_at = time.time()

    def _line(self, timeout: float) -> str | None:
        """The relay's next stdout line (read unbuffered: a `gone` line may come with a reply)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._replies:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.relay.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.relay.stdout.fileno(), 4096)
            if not chunk:
                return None
            self._replies += chunk
        line, self._replies = self._replies.split(b"\n", 1)
        return line.decode(errors="replace").strip()

    def _ask(self, command: str) -> tuple[bool, str]:
        """(ok, why) of one control line."""
        return self._ask_all([command])[0]

    def _ask_all(self, commands: list[str]) -> list[tuple[bool, str]]:
        """(ok, why) of each control line, written together and answered in order (a relink's
        routes in one round trip); `gone` lines met on the way mark their links down."""
        answers = []
        for start in range(0, len(commands), 200):  # well inside a pipe's buffer
            chunk = commands[start:start + 200]
            try:
                self.relay.stdin.write("".join(f"{c}\n" for c in chunk).encode())
            except (BrokenPipeError, OSError) as error:
                return answers + [(False, f"the shared delay line does not listen: {error}")] * (len(commands) - len(answers))
            for command in chunk:
                while True:
                    line = self._line(READY_TIMEOUT_S)
                    if line is None:
                        why = f"the shared delay line did not answer '{command}': {_tail(self.log_path)}"
                        return answers + [(False, why)] * (len(commands) - len(answers))
                    word, _, rest = line.partition(" ")
                    number, _, why = rest.partition(" ")
                    if word != "gone":
                        answers.append((word == "ok", why))
                        break
                    self.down.setdefault(int(number), time.time())
        return answers

    def _alive(self) -> bool:
        return self.relay is not None and self.relay.poll() is None

    def _add(self, link: ShapedLink) -> None:
        ok, why = self._ask(" ".join(["add", str(link.index), *self._options(link)]))
        if not ok:
            raise ShaperError(f"the shared delay line refused link {link.index} "
                              f"({link.near_node.name}:{link.near_intf}): {why}")

    # -- the Shaper interface ----------------------------------------------------------------
    def shape(self, link: ShapedLink) -> None:
        if not self._alive():
            self._start()
        self._add(link)
        self.links[link.index] = link

    def unshape(self, link: ShapedLink) -> None:
        if self.links.pop(link.index, None) is not None and self._alive():
            self._ask(f"del {link.index}")
        self.down.pop(link.index, None)

    def stop(self) -> None:
        relay, self.relay = self.relay, None
        if relay is not None and relay.poll() is None:
            relay.terminate()
        procs.wait_or_kill([relay])

    def kill_relay(self, link: ShapedLink) -> bool:
        """The relay of one link dies: here its part of the shared process is dropped, with the
        frames it held (killing the process would cut every link), and `check` puts it back."""
        if link.index not in self.links or link.index in self.down or not self._alive():
            return False
        ok, _ = self._ask(f"del {link.index}")
        if ok:
            self.down[link.index] = time.time()
        return ok

    def check(self) -> list[str]:
        """A dead process is restarted with every link, a dropped link put back, at once (the
        experiment calls this every 50 ms): what forwarded nothing meanwhile is an outage the
        saturation guard marks (`outages`, drained by `health`)."""
        problems, now = [], time.time()
        if self.relay is not None and not self._alive():
            code = self.relay.returncode
            problems.append(f"the shared delay line exited with {code}: {_tail(self.log_path)}")
            for index in self.links:
                self.down.setdefault(index, self._alive_at)
            try:
                self._start()
            except ShaperError as error:
                self.outages.append((self._alive_at, float("inf")))
                return problems + [f"restart failed: {error}"]
        elif self._alive():
            self._alive_at = now
        for index, since in sorted(self.down.items()):
            link = self.links.get(index)
            if link is None:
                self.down.pop(index)
                continue
            try:
                self._add(link)
            except ShaperError as error:
                self.links.pop(index)
                self.outages.append((since, float("inf")))
                problems.append(f"link {index} could not be relayed again: {error}")
            else:
                restored = time.time()
                self.outages.append((since, restored))
                problems.append(f"delay line of link {index} ({link.near_node.name}:{link.near_intf}) "
                                f"restarted in the shared relay; the link forwarded nothing for "
                                f"{1e3 * (restored - since):.0f} ms")
            self.down.pop(index, None)
        return problems

    def health(self) -> dict:
        found = self._counters.poll([(self.relay, self.log_path)] if self.relay is not None else [])
        found["outages"], self.outages = self.outages, []
        return found


class RoutedDelayLineShaper(SharedDelayLineShaper):
    """The shared delay line doing the site routers' forwarding itself, as ModelNet's core moves
    each packet through all of its pipes: a frame due to leave a hop into a router goes straight
    onto the router's next hop (addresses rewritten, TTL - 1), so a path costs one receive and one
    send in the relay instead of one of each per hop plus each router's kernel. Every hop keeps
    its own delay, jitter, loss, rate and queue; frames the routers' tables do not cover (ARP, a
    router's own address) still go through the router. The tables come from the network
    (`route`) whenever its routes change, and are sent again to a restarted relay."""

    name = "routed"

    def __init__(self, net, shaper_node, run_id: str, env: dict[str, str], log_dir: Path | None = None):
        super().__init__(net, shaper_node, run_id, env, log_dir)
        self.tables: dict[tuple, str] = {}  # ("hop", link, side) | ("route", router, ip) -> its line

    def _start(self) -> None:
        super()._start()
        self._send(list(self.tables.values()))

    def route(self, hops: list[tuple], routes: list[tuple]) -> None:
        lines = {}
        for link, side, target in hops:
            where = f"{target[0]} {target[1]}" if target else "-"
            lines[("hop", link.index, side)] = f"hop {link.index} {side} {where}"
        for router, ip, hop in routes:
            where = f"{hop.link.index} {hop.side} {hop.src} {hop.dst}" if hop else "-"
            lines[("route", router, ip)] = f"route {router} {ip} {where}"
        self.tables.update(lines)
        if self._alive():
            self._send(list(lines.values()))

    def _send(self, lines: list[str]) -> None:
        refused = [f"'{line}': {why}" for line, (ok, why) in zip(lines, self._ask_all(lines)) if not ok]
        if refused:
            raise ShaperError(f"the shared delay line refused {len(refused)} routing lines, first {refused[0]}")


class NetemShaper(Shaper):
    """tc netem on both shaper-side interfaces, frames handed across with mirred redirects."""

    name = "netem"

    def shape(self, link: ShapedLink) -> None:
        s = link.shaping
        spec = f"delay {s.delay * 1e6:.0f}us"
        if s.jitter:
            spec += f" {s.jitter * 1e6:.0f}us distribution normal"
        if s.loss:
            spec += f" loss {s.loss * 100:.6f}%"
        if s.bandwidth:
            limit_bytes = max(64_000, s.bandwidth / 8 * max(s.delay, 0.001))
            spec += f" rate {s.bandwidth:.0f}bit limit {int(limit_bytes // 1500) + 10}"
        else:
            spec += " limit 100000"
        for a, b in ((link.shaper_a, link.shaper_b), (link.shaper_b, link.shaper_a)):
            commands = [
                f"tc qdisc replace dev {b} root netem {spec}",
                f"tc qdisc replace dev {a} ingress",
                f"tc filter replace dev {a} parent ffff: protocol all prio 1 u32 match u32 0 0 "
                f"action mirred egress redirect dev {b}",
            ]
            for command in commands:
                out = self.node.cmd(command)
                if out.strip():
                    raise ShaperError(f"tc refused '{command}': {out.strip()}")

    def unshape(self, link: ShapedLink) -> None:
        for intf in (link.shaper_a, link.shaper_b):
            self.node.cmd(f"tc qdisc del dev {intf} ingress 2>/dev/null; tc qdisc del dev {intf} root 2>/dev/null")


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def _shaper_mac(index: int, end: int) -> str:
    """MACs of the veth ends the emulator owns; mininet wants both ends' addresses or neither."""
    return f"02:03:{(index >> 16) & 255:02x}:{(index >> 8) & 255:02x}:{index & 255:02x}:{end:02x}"


class RelayCounters:
    """Per-relay counter deltas from the lines relays write to their logs on SIGUSR1.

    Each call first reads the answers to the previous call's signals, then signals again, so
    nothing waits for a relay; the figures lag by one call (the monitor allows for it). A relay
    restarted by a relink starts counting from zero in the same log: a counter that went down is
    a new relay, its whole value the delta."""

    FIELDS = ("tx", "late_budget", "kernel_drops", "tx_err", "rx_err")

    def __init__(self):
        self.offsets: dict[Path, int] = {}
        self.last: dict[Path, dict] = {}

    def poll(self, relays: list[tuple[subprocess.Popen, Path]]) -> dict:
        total = {"tx": 0, "over_budget": 0, "late_max_ms": 0.0, "harness_drops": 0, "relays": 0, "forwarded": 0}
        for relay, log in relays:
            line = self._last_line(log)
            if line is not None:
                now = {f: sum(d.get(f, 0) for d in (line.get("ab", {}), line.get("ba", {}))) for f in self.FIELDS}
                now["forwarded"] = line.get("forwarded", 0)  # moved hop to hop by a relay that routes
                before = self.last.get(log, dict.fromkeys(now, 0))
                fresh = now["tx"] < before["tx"]
                delta = {f: now[f] - (0 if fresh else before[f]) for f in now}
                self.last[log] = now
                total["tx"] += delta["tx"]
                total["forwarded"] += delta["forwarded"]
                total["over_budget"] += delta["late_budget"]
                total["harness_drops"] += delta["kernel_drops"] + delta["tx_err"] + delta["rx_err"]
                worst = max(line.get(d, {}).get("late_window_max_us", 0) for d in ("ab", "ba")) / 1e3
                total["late_max_ms"] = max(total["late_max_ms"], worst)
                total["relays"] += 1
            if relay.poll() is None:
                try:
                    relay.send_signal(signal.SIGUSR1)
                except ProcessLookupError:
                    pass
        return total

    def _last_line(self, log: Path) -> dict | None:
        try:
            with log.open("rb") as handle:
                handle.seek(self.offsets.get(log, 0))
                data = handle.read()
                self.offsets[log] = handle.tell()
        except OSError:
            return None
        for raw in reversed(data.splitlines()):
            if raw.startswith(b"{"):
                try:
                    return json.loads(raw)
                except ValueError:
                    continue
        return None


class ShaperPerServer:
    """A network spread over servers has a shaper on each: a link is shaped by the one on its near
    node's server (its far end may be a VXLAN to another server). Same interface as a Shaper."""

    def __init__(self, shapers: dict[str, Shaper]):
        self.shapers = shapers
        self.name = next(iter(shapers.values())).name

    def _of(self, link: ShapedLink) -> Shaper:
        return self.shapers[_server(link.near_node)]

    def connect(self, link: ShapedLink, near_mac: str | None = None, far_mac: str | None = None) -> None:
        self._of(link).connect(link, near_mac=near_mac, far_mac=far_mac)

    def move_far_end(self, link: ShapedLink, new_far_node) -> None:
        self._of(link).move_far_end(link, new_far_node)

    def add_port(self, link: ShapedLink, far_node, far_mac: str | None = None) -> None:
        self._of(link).add_port(link, far_node, far_mac)

    def unshape(self, link: ShapedLink) -> None:
        self._of(link).unshape(link)

    def kill_relay(self, link: ShapedLink) -> bool:
        return self._of(link).kill_relay(link)

    def nodes(self) -> list:
        return [shaper.node for shaper in self.shapers.values()]

    def route(self, hops: list[tuple], routes: list[tuple]) -> None:
        """Each server's shaper routes between the links it holds: a hop goes to its link's shaper,
        a route to the shaper holding its next link (the others forget it: their frames for that
        address go through the router, whichever server holds the next link)."""
        for shaper in self.shapers.values():
            shaper.route([hop for hop in hops if self._of(hop[0]) is shaper],
                         [(router, ip, hop if hop is not None and self._of(hop.link) is shaper else None)
                          for router, ip, hop in routes])

    def stop(self) -> None:
        for shaper in self.shapers.values():
            shaper.stop()

    def check(self) -> list[str]:
        return [problem for shaper in self.shapers.values() for problem in shaper.check()]

    def health(self) -> dict | None:
        found = [h for h in (shaper.health() for shaper in self.shapers.values()) if h is not None]
        if not found:
            return None
        total = {key: sum(h.get(key, 0) for h in found)
                 for key in ("tx", "over_budget", "harness_drops", "relays", "forwarded")}
        total["late_max_ms"] = max(h.get("late_max_ms", 0.0) for h in found)
        total["outages"] = [o for h in found for o in h.get("outages", [])]
        return total


SHAPERS = {"routed": RoutedDelayLineShaper, "shared": SharedDelayLineShaper, "delayline": DelayLineShaper,
           "netem": NetemShaper}
