"""The servers a run is spread over, and how the harness reaches them: ssh, nothing else.

A server is `[user@]host` (an address or a name resolved here). The harness reaches each with
`ssh`, multiplexed over one control connection per server, with the user's own ssh setup or the
config file of the namespace-servers below. On each server the project must sit at the same path
as here, set up with `make setup` (docs/guide/multi-host.md).

Namespace-servers make several "servers" on one machine, so that the remote path (sshd, ssh,
VXLAN between server addresses) is exercised for real without a second machine: each is a
network namespace with its own sshd, on a management bridge of this machine. `testbed servers up
3` makes them and records them in /run/testbed/servers.json; `--servers tbs1,tbs2,tbs3` then
names them, and `testbed servers down` removes them.

A server's sshd serves each connection from a process of its own, which outlives the listener and
holds the server's namespace after its name is deleted. Once the management link is gone the
client's end of the connection cannot reach it any more, so that process would wait forever: a
connection is ended before the link, and `down` ends every process in a server's namespace.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.emulation import runstate

SERVER_RE = re.compile(r"(?:(?P<user>[a-z_][a-z0-9_-]{0,31})@)?(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252})")
REGISTRY = runstate.STATE_DIR / "servers.json"
NS_DIR = runstate.STATE_DIR / "servers"
NS_PREFIX = "tbs"  # namespace-server names: tbs1, tbs2, ...
MGMT_BRIDGE = "tbmgmt"
MGMT_NET = "10.253.0"  # namespace-servers' management network: .1 here, .11, .12, ... the servers
MGMT_MTU = 9000  # VXLAN adds 50 bytes: emulated frames of 1500 bytes cross whole (server_check.MIN_UNDERLAY_MTU)
SSH_TIMEOUT_S = 10
PRIVSEP_DIR = Path("/run/sshd")  # sshd's privilege-separation directory


class ServerError(RuntimeError):
    """A server cannot be reached or used as asked (said with what to fix)."""


@dataclass(frozen=True)
class Server:
    name: str  # as the user wrote it (tbs1, vm2.lab, 192.168.1.12)
    host: str  # the address ssh and VXLAN use
    user: str = "root"
    ssh_config: str | None = None  # an ssh config file, or None for the user's own
    on_this_machine: bool = False  # a namespace-server: same kernel, /proc and file system as the harness
    pid_namespace: int | None = None  # an isolated namespace-server's PID namespace (its processes are not ours)

    def ssh(self, control_dir: Path | None) -> list[str]:
        """The ssh command line up to the remote command: one multiplexed connection per server
        (its socket in `control_dir`), or without `control_dir` a connection that ends with the
        command."""
        argv = ["ssh", "-q", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}"]
        if control_dir is not None:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/%h", "-o", "ControlPersist=30"]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        return argv + [f"{self.user}@{self.host}"]


def parse(text: str, where: str = "--servers", least: int = 2) -> list[Server]:
    """`a,b,c` into servers: namespace-servers by name from the registry, others as [user@]host. A
    run needs `least` two (one server is an ordinary run); a check takes one."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if len(names) < least:
        raise ValueError(f"{where}: name two servers or more (got {text!r}); one server is an ordinary run" if least > 1
                         else f"{where}: name a server")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: a server is named twice in {text!r}")
    registry = namespace_servers()
    servers = []
    for name in names:
        if name in registry:
            servers.append(registry[name])
            continue
        match = SERVER_RE.fullmatch(name)
        if not match:
            raise ValueError(f"{where}: {name!r} is not [user@]host")
        host = match["host"]
        try:
            address = socket.gethostbyname(host)
        except OSError:
            hint = f" (namespace-servers: `testbed servers up {len(names)}` first)" if name.startswith(NS_PREFIX) else ""
            raise ValueError(f"{where}: cannot resolve {host!r}{hint}") from None
        servers.append(Server(name, address, match["user"] or "root"))
    return servers


def namespace_servers() -> dict[str, Server]:
    try:
        return {s["name"]: Server(**s) for s in json.loads(REGISTRY.read_text())}
    except (OSError, ValueError, TypeError):
        return {}


# -- reaching a server -------------------------------------------------------------------------
def run(server: Server, command: str, control_dir: Path | None, timeout: float = 30.0) -> str:
    """A command on the server (its root namespace); its output, or ServerError with it."""
    try:
        done = subprocess.run(server.ssh(control_dir) + [command], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ServerError(f"server {server.name}: '{command}' did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        raise ServerError(f"server {server.name} ({server.user}@{server.host}): '{command}' failed "
                          f"({done.returncode}): {(done.stderr or done.stdout).strip()[-400:]}")
    return done.stdout


def clean(servers: list[Server], python: str, run_id: str | None, force: bool) -> list[str]:
    """`testbed clean` on every server (a crashed run's nodes, relays and links there); `force` also
    takes down runs whose harness is alive, as the local clean does. Each over a connection of its
    own: that clean removes the run's control directory, so it must not run through it."""
    notes = []
    argv = [python, "-m", "testbed.cli", "clean"] + (["--force"] if force else []) + ([run_id] if run_id else [])
    for server in servers:
        try:
            out = run(server, shlex.join(argv), None, timeout=120)
            notes.append(f"{server.name}: {out.strip().splitlines()[-1] if out.strip() else 'clean'}")
        except ServerError as error:
            notes.append(str(error))
    return notes


def close(servers: list[Server], control_dir: Path) -> None:
    """End the control connections (ControlPersist would keep them a while) and remove their
    directory. A connection whose socket is already gone cannot be asked to exit: it is killed."""
    for server in servers:
        subprocess.run(server.ssh(control_dir)[:-1] + ["-O", "exit", f"{server.user}@{server.host}"],
                       capture_output=True, timeout=10)
    runstate.end([master.pid for master in control_masters(control_dir)])
    shutil.rmtree(control_dir, ignore_errors=True)


def master_host(title: str, control_dir: Path) -> str | None:
    """The host of an ssh control connection (its process title is `ssh: <ControlPath> [mux]`)
    whose socket lies under `control_dir`; None for any other process."""
    prefix = f"ssh: {control_dir}/"
    if not (title.startswith(prefix) and title.endswith(" [mux]")):
        return None
    return title[len(prefix):-len(" [mux]")].rsplit("/", 1)[-1]


def control_masters(control_dir: Path) -> list[runstate.Process]:
    """The ssh control connections whose sockets lie under `control_dir`."""
    return [p for p in runstate.processes() if master_host(p.title, control_dir)]


# -- namespace-servers on this machine ---------------------------------------------------------
def _ip(*args: str, netns: str | None = None) -> None:
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise ServerError(f"'{' '.join(argv)}' failed: {done.stderr.strip()}")


def up(count: int, isolated: bool = False) -> list[Server]:
    """Make `count` namespace-servers, each a network namespace with its own sshd on the management
    bridge, reachable as root with a key made for them (recorded in REGISTRY). `isolated`: each also
    has its own PID and mount namespaces (isolation.py) and is used as another machine would be."""
    if not 2 <= count <= 20:
        raise ValueError(f"servers up: 2 to 20 servers (got {count})")
    if namespace_servers():
        raise ServerError(f"namespace-servers are already up ({', '.join(namespace_servers())}); "
                          "`testbed servers down` first")
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.access(sshd, os.X_OK):
        raise ServerError("namespace-servers need sshd: apt-get install openssh-server")
    taken = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    if f" {MGMT_NET}." in taken:
        raise ServerError(f"the namespace-servers' management network {MGMT_NET}.0/24 is already in use here")
    NS_DIR.mkdir(parents=True, exist_ok=True)
    if not PRIVSEP_DIR.exists():
        PRIVSEP_DIR.mkdir()
        (NS_DIR / "made-privsep-dir").touch()  # `down` removes it again
    key, host_key = NS_DIR / "id_ed25519", NS_DIR / "host_ed25519"
    for path in (key, host_key):
        if not path.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    ssh_config = NS_DIR / "ssh_config"
    ssh_config.write_text(f"Host {MGMT_NET}.*\n  IdentityFile {key}\n  StrictHostKeyChecking no\n"
                          "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    servers = []
    try:
        _ip("link", "add", MGMT_BRIDGE, "mtu", str(MGMT_MTU), "type", "bridge")
        _ip("addr", "add", f"{MGMT_NET}.1/24", "dev", MGMT_BRIDGE)
        _ip("link", "set", MGMT_BRIDGE, "up")
        for index in range(1, count + 1):
            name, address = f"{NS_PREFIX}{index}", f"{MGMT_NET}.{10 + index}"
            _ip("netns", "add", name)
            _ip("link", "add", f"{MGMT_BRIDGE}{index}", "mtu", str(MGMT_MTU), "type", "veth", "peer", "name", "mgmt0",
                "mtu", str(MGMT_MTU), "netns", name)
            _ip("link", "set", f"{MGMT_BRIDGE}{index}", "master", MGMT_BRIDGE, "up")
            _ip("addr", "add", f"{address}/24", "dev", "mgmt0", netns=name)
            _ip("link", "set", "mgmt0", "up", netns=name)
            _ip("link", "set", "lo", "up", netns=name)
            config = NS_DIR / f"sshd-{name}.conf"
            config.write_text(f"ListenAddress {address}\nHostKey {host_key}\nPidFile {NS_DIR}/sshd-{name}.pid\n"
                              f"AuthorizedKeysFile {key}.pub\nPermitRootLogin prohibit-password\n"
                              "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nUseDNS no\n"
                              "StrictModes no\nMaxSessions 500\nMaxStartups 500\n")
            if isolated:
                servers.append(_start_isolated(name, address, sshd, config, [config, host_key, Path(f"{key}.pub")],
                                               ssh_config))
            else:
                subprocess.run(["ip", "netns", "exec", name, sshd, "-f", str(config)], check=True)
                servers.append(Server(name, address, "root", str(ssh_config), on_this_machine=True))
        REGISTRY.write_text(json.dumps([asdict(s) for s in servers]))
        for server in servers:
            _wait_ssh(server)
    except BaseException:
        down()
        raise
    return servers


def _start_isolated(name: str, address: str, sshd: str, config: Path, keep: list[Path], ssh_config: Path) -> Server:
    """The server's sshd as the first process of its own PID and mount namespaces (in the
    foreground: it is that namespace's init, and the namespace ends with it)."""
    from testbed.emulation import isolation

    project = Path(__file__).resolve().parents[2]
    log = (NS_DIR / f"sshd-{name}.log").open("w")
    launcher = subprocess.Popen(
        ["ip", "netns", "exec", name, "unshare", "--pid", "--mount", "--fork", "--mount-proc", "--propagation", "private",
         sys.executable, "-m", isolation.__name__, str(project), *map(str, keep), "--", sshd, "-D", "-f", str(config)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd="/")
    log.close()
    deadline = time.monotonic() + 5
    while True:  # `unshare` itself holds the new namespace for its children: that is the server's
        try:
            inode = int(os.readlink(f"/proc/{launcher.pid}/ns/pid_for_children").split("[")[1].rstrip("]"))
            if inode != os.stat("/proc/self/ns/pid").st_ino:
                break
        except (OSError, IndexError, ValueError):
            pass
        if launcher.poll() is not None or time.monotonic() > deadline:
            raise ServerError(f"namespace-server {name}: its isolated sshd did not start: "
                              f"{(NS_DIR / f'sshd-{name}.log').read_text().strip()[-400:]}")
        time.sleep(0.02)
    return Server(name, address, "root", str(ssh_config), pid_namespace=inode)


def isolated_pid_namespaces() -> set[int]:
    """The PID namespaces of the isolated namespace-servers that are up: their processes are
    another machine's (this kernel shows them in /proc all the same)."""
    return {s.pid_namespace for s in namespace_servers().values() if s.pid_namespace}


def _wait_ssh(server: Server, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        done = subprocess.run(server.ssh(None) + ["true"], capture_output=True, text=True)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise ServerError(f"namespace-server {server.name}: sshd does not answer: {done.stderr.strip()}")
        time.sleep(0.2)


def _named_namespaces() -> dict[int, str]:
    """Namespace-servers' named network namespaces: inode -> name."""
    found = {}
    for path in Path("/run/netns").glob(f"{NS_PREFIX}*"):
        if re.fullmatch(rf"{NS_PREFIX}\d+", path.name):
            try:
                found[os.stat(path).st_ino] = path.name
            except OSError:
                pass
    return found


def local_addresses(tcp_table: str) -> set[tuple[str, int]]:
    """Local (address, port) of the sockets in /proc/<pid>/net/tcp's text (addresses are stored
    as little-endian hex)."""
    found = set()
    for line in tcp_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 1 and ":" in fields[1]:
            address, port = fields[1].split(":")
            found.add((socket.inet_ntoa(bytes.fromhex(address)[::-1]), int(port, 16)))
    return found


def is_server_sshd(process: runstate.Process) -> bool:
    """An sshd of a namespace-server: its listener (its config lies in NS_DIR), or the process
    of one connection (a socket on port 22 of the management network in its namespace)."""
    if not process.title.startswith("sshd"):
        return False
    if f"-f {NS_DIR}/" in process.title:
        return True
    try:
        table = Path(f"/proc/{process.pid}/net/tcp").read_text()
    except OSError:
        return False
    return any(address.startswith(f"{MGMT_NET}.") and address != f"{MGMT_NET}.1" and port == 22
               for address, port in local_addresses(table))


def server_processes(orphans_only: bool) -> dict[str, list[runstate.Process]]:
    """Every process in a namespace-server's network namespace, by server (a server whose name
    was deleted is `netns [inode]`). `orphans_only`: only those whose name is gone."""
    named = _named_namespaces()
    everything = runstate.processes(everywhere=True)
    # This machine's own namespace is never a server's, whoever connects to whom.
    orphaned = {p.netns for p in everything if is_server_sshd(p)} - set(named) - {runstate.init_netns()}
    spaces = orphaned if orphans_only else orphaned | set(named)
    mine = runstate.ancestors()
    found: dict[str, list[runstate.Process]] = {}
    for process in everything:
        if process.netns in spaces and process.pid not in mine:
            found.setdefault(named.get(process.netns, f"netns [{process.netns}]"), []).append(process)
    return found


def _end_servers(orphans_only: bool) -> list[str]:
    removed = []
    for server, processes in sorted(server_processes(orphans_only).items()):
        runstate.end([p.pid for p in processes])
        what = f"namespace-server {server}" if server.startswith(NS_PREFIX) else f"orphaned namespace-server session, {server}"
        removed.append(f"{what}: ended " + ", ".join(f"{p.pid} ({p.title[:60]})" for p in processes))
    return removed


def end_orphans() -> list[str]:
    """End the processes of namespace-servers whose name is gone (a connection that outlived
    `servers down`, or a `down` that was cut short); servers that are up are left alone."""
    return _end_servers(orphans_only=True)


def down() -> list[str]:
    """Remove the namespace-servers: the connections to them, every process in their namespaces
    (sshd's listener and the processes of its connections), the namespaces and the management
    bridge, their keys and configs."""
    removed = []
    for master in control_masters(runstate.STATE_DIR):
        host = master_host(master.title, runstate.STATE_DIR)
        if host.startswith(f"{MGMT_NET}."):
            runstate.end([master.pid])
            removed.append(f"ssh connection to {host} ({master.pid})")
    removed += _end_servers(orphans_only=False)
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for name in names:
        if re.fullmatch(rf"{NS_PREFIX}\d+", name):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            removed.append(f"namespace {name}")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for veth in re.findall(rf"^\d+: ({MGMT_BRIDGE}\d+)@", links, re.M):
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
    if subprocess.run(["ip", "link", "del", MGMT_BRIDGE], capture_output=True).returncode == 0:
        removed.append(f"bridge {MGMT_BRIDGE}")
    if (NS_DIR / "made-privsep-dir").exists() and not _other_sshd():
        shutil.rmtree(PRIVSEP_DIR, ignore_errors=True)
    REGISTRY.unlink(missing_ok=True)
    shutil.rmtree(NS_DIR, ignore_errors=True)  # keys, configs: made again by the next `up`
    return removed


def _other_sshd() -> bool:
    """An sshd that is not a namespace-server's runs here (it needs PRIVSEP_DIR)."""
    return any(p.title.startswith("sshd") and "[listener]" in p.title for p in runstate.processes(everywhere=True))
