"""ZooKeeper for the control plane: the server in the cloud node, and a thin kazoo wrapper over the
/epulsar layout of docs/pubsub-protocol.md.

Ownership is an ephemeral node created by the owning broker, so ZooKeeper (not the brokers) settles
races: a second acquire fails cleanly. A session loss deletes a broker's ephemeral nodes; the
wrapper remembers what it registered and owned and recreates it on the next session, so a topic is
never left without an owner while its broker is alive.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import SequentialThreadingHandler

logging.getLogger("kazoo").addHandler(logging.NullHandler())  # agents configure logging; the harness stays quiet

ZK_PORT = 2181
ROOT = "/epulsar"
TOPIC_RE = re.compile(r"^[a-z][a-z0-9_]*(-[a-z0-9]+)?$")
ZK_JARS = ("/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
ZK_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


class MetadataError(RuntimeError):
    """ZooKeeper could not be started or reached."""


def check_topic(topic: str) -> str:
    """Topic names become ZooKeeper paths and NATS subjects: no dots, slashes or wildcards."""
    if not isinstance(topic, str) or not TOPIC_RE.match(topic):
        raise ValueError(f"{topic!r} is not a topic name such as 'follow_leader-swarm3'")
    return topic


# -- the server ------------------------------------------------------------------------------------
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
        probe = Metadata(self.hosts, netns_pid=self.network.nodes[self.node].pid)
        probe.start(timeout=max(1.0, timeout - (time.monotonic() - started)))
        probe.ensure_layout()
        probe.stop()
        return time.monotonic() - started

    def four_letter(self, word: str) -> str | None:
        from testbed.emulation.netns import connect_in

        try:
            with connect_in(self.network.nodes[self.node].pid, (self.ip, ZK_PORT), timeout=1.0) as sock:
                sock.sendall(word.encode())
                chunks = []
                while chunk := sock.recv(4096):
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
        except OSError:
            return None

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

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


# -- the client ------------------------------------------------------------------------------------
class _NetnsHandler(SequentialThreadingHandler):
    """kazoo's handler, with its TCP connections opened inside a node's namespace (harness side)."""

    def __init__(self, pid: int):
        super().__init__()
        self.pid = pid

    def create_connection(self, *args, **kwargs):
        from testbed.roles.inside import entered

        with entered(self.pid):
            return super().create_connection(*args, **kwargs)


def _dumps(data) -> bytes:
    return (data if isinstance(data, str) else json.dumps(data, sort_keys=True)).encode()


class Metadata:
    """The /epulsar layout on kazoo. `on_restored(reacquired, lost)` is called (in a kazoo thread)
    after a session loss, once the registration and owned topics have been recreated."""

    def __init__(self, hosts: str, netns_pid: int | None = None, session_timeout: float = 10.0,
                 on_restored=None, client_id: tuple[int, bytes] | None = None):
        handler = _NetnsHandler(netns_pid) if netns_pid else SequentialThreadingHandler()
        self.zk = KazooClient(hosts=hosts, timeout=session_timeout, handler=handler, client_id=client_id,
                              connection_retry={"max_tries": -1, "delay": 0.2, "max_delay": 1.0})
        self.on_restored = on_restored
        self.registration: tuple[str, dict] | None = None
        self.owned: dict[str, dict] = {}
        self.events: list[dict] = []
        self._lost = False
        self._suspended_at: float | None = None
        self._session_timeout = session_timeout
        self._lock = threading.RLock()
        self.zk.add_listener(self._listener)

    # session --------------------------------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> Metadata:
        try:
            self.zk.start(timeout=timeout)
        except Exception as error:  # kazoo raises its own timeout type
            self.zk.stop()
            raise MetadataError(f"cannot reach ZooKeeper at {self.zk.hosts}: {error}") from error
        return self

    def stop(self) -> None:
        self.zk.stop()
        self.zk.close()

    @property
    def session(self) -> tuple[int, bytes]:
        return self.zk.client_id

    def _listener(self, state) -> None:
        if state == KazooState.LOST:
            self._lost = True
            self.events.append({"type": "zk_session_lost", "time": time.time()})
        elif state == KazooState.SUSPENDED:
            if self._suspended_at is None:
                self._suspended_at = time.monotonic()
                threading.Thread(target=self._watchdog, args=(self._suspended_at,), daemon=True).start()
        elif state == KazooState.CONNECTED:
            self._suspended_at = None
            if self._lost:
                self._lost = False
                self.zk.handler.spawn(self._restore)  # listeners must not block the connection thread

    def _watchdog(self, since: float) -> None:
        """Still disconnected a session timeout later: the session is gone (or unreachable: a
        ZooKeeper that lost its data refuses clients that saw newer transactions), so start a new one."""
        time.sleep(self._session_timeout)
        if self._suspended_at != since or self.zk.state == KazooState.CONNECTED:
            return
        self.events.append({"type": "zk_new_session", "time": time.time(), "after_s": time.monotonic() - since})
        self._lost = True
        try:
            self.zk.stop()
        finally:
            self._suspended_at = None
            self.zk.start_async()

    def _restore(self) -> None:
        reacquired, lost = [], []
        with self._lock:
            if self.registration:
                name, data = self.registration
                self._create_ephemeral(f"{ROOT}/brokers/{name}", data, replace_own=True)
            for topic, data in list(self.owned.items()):
                if self._create_ephemeral(f"{ROOT}/topics/{topic}/owner", data, replace_own=True):
                    reacquired.append(topic)
                else:
                    lost.append(topic)
                    self.owned.pop(topic, None)
        self.events.append({"type": "zk_session_restored", "time": time.time(), "reacquired": reacquired,
                            "lost": lost})
        if self.on_restored:
            self.on_restored(reacquired, lost)

    def _create_ephemeral(self, path: str, data: dict, replace_own: bool = False) -> bool:
        """Create an ephemeral node; True if it is ours now (created, or already ours)."""
        for _ in range(3):
            try:
                self.zk.create(path, _dumps(data), ephemeral=True, makepath=True)
                return True
            except NodeExistsError:
                try:
                    raw, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    return True
                current = json.loads(raw or b"{}")
                if not (replace_own and current.get("broker", current.get("name")) == data.get("broker", data.get("name"))):
                    return False
                try:  # our own node from an expired session: it is going away anyway
                    self.zk.delete(path, version=stat.version)
                except (NoNodeError, BadVersionError):
                    pass
        return False

    def ensure_layout(self) -> None:
        for sub in ("brokers", "topics", "reports"):
            self.zk.ensure_path(f"{ROOT}/{sub}")

    # brokers --------------------------------------------------------------------------------------
    def register_broker(self, name: str, address: str, site: str = "", cloud: bool = False) -> None:
        data = {"name": name, "address": address, "site": site, "cloud": cloud}
        with self._lock:
            self.registration = (name, data)
            if not self._create_ephemeral(f"{ROOT}/brokers/{name}", data, replace_own=True):
                raise MetadataError(f"another live broker is registered as {name}")

    def brokers(self) -> dict[str, dict]:
        found = {}
        for name in self.zk.get_children(f"{ROOT}/brokers") if self.zk.exists(f"{ROOT}/brokers") else []:
            try:
                found[name] = json.loads(self.zk.get(f"{ROOT}/brokers/{name}")[0])
            except (NoNodeError, ValueError):
                pass
        return found

    # ownership ------------------------------------------------------------------------------------
    def acquire(self, topic: str, broker: str, address: str) -> bool:
        """Become the owner of `topic`; False (nothing changed) if another broker owns it."""
        data = {"broker": broker, "address": address}
        # The ZooKeeper round trips run outside the lock, so concurrent migrations pipeline over the
        # session instead of queueing one WAN round trip after another; only the bookkeeping is locked.
        # A node naming this broker from another session is its previous incarnation's: take it over.
        if self._create_ephemeral(f"{ROOT}/topics/{check_topic(topic)}/owner", data, replace_own=True):
            with self._lock:
                self.owned[topic] = data
            return True
        return False

    def adopt(self, broker: str, address: str) -> list[str]:
        """A restarted broker agent takes back the topics its previous session still owns."""
        mine = [t for t in self.topics() if (self.owner(t) or {}).get("broker") == broker]
        return [t for t in mine if self.acquire(t, broker, address)]

    def release(self, topic: str, broker: str) -> bool:
        """Delete the owner node if `broker` owns it; False if it did not."""
        path = f"{ROOT}/topics/{check_topic(topic)}/owner"
        with self._lock:
            self.owned.pop(topic, None)
        try:
            raw, stat = self.zk.get(path)
            if json.loads(raw).get("broker") != broker:
                return False
            self.zk.delete(path, version=stat.version)  # the version check keeps this safe without the lock
            return True
        except (NoNodeError, BadVersionError):
            return False

    def owner(self, topic: str, watch=None) -> dict | None:
        try:
            return json.loads(self.zk.get(f"{ROOT}/topics/{check_topic(topic)}/owner", watch=watch)[0])
        except NoNodeError:
            if watch is not None:
                self.zk.exists(f"{ROOT}/topics/{topic}/owner", watch=watch)
            return None

    def topics(self) -> list[str]:
        return sorted(self.zk.get_children(f"{ROOT}/topics")) if self.zk.exists(f"{ROOT}/topics") else []

    def placement(self) -> dict[str, str]:
        """topic -> owning broker, for every topic that has an owner now."""
        out = {}
        for topic in self.topics():
            owner = self.owner(topic)
            if owner:
                out[topic] = owner["broker"]
        return out

    # thresholds -----------------------------------------------------------------------------------
    def set_threshold(self, topic: str, seconds: float) -> None:
        path = f"{ROOT}/topics/{check_topic(topic)}/threshold"
        value = f"{float(seconds):g}".encode()
        try:
            self.zk.set(path, value)
        except NoNodeError:
            self.zk.create(path, value, makepath=True)

    def threshold(self, topic: str) -> float | None:
        try:
            return float(self.zk.get(f"{ROOT}/topics/{check_topic(topic)}/threshold")[0])
        except (NoNodeError, ValueError):
            return None

    # reports --------------------------------------------------------------------------------------
    def write_report(self, broker: str, report) -> None:
        path, data = f"{ROOT}/reports/{broker}", _dumps(report)
        try:
            self.zk.set(path, data)
        except NoNodeError:
            try:
                self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                self.zk.set(path, data)

    def report(self, broker: str) -> dict | None:
        try:
            return json.loads(self.zk.get(f"{ROOT}/reports/{broker}")[0])
        except (NoNodeError, ValueError):
            return None

    def reports(self) -> dict[str, dict]:
        names = self.zk.get_children(f"{ROOT}/reports") if self.zk.exists(f"{ROOT}/reports") else []
        return {name: r for name in names if (r := self.report(name)) is not None}


def expire_session(hosts: str, session: tuple[int, bytes], netns_pid: int | None = None) -> None:
    """End someone's ZooKeeper session from outside (as a network partition longer than the
    session timeout would): a second client joins the session with its id and password and closes it."""
    thief = Metadata(hosts, netns_pid=netns_pid, client_id=session)
    thief.start()
    thief.stop()


def ruok(ip: str, port: int = ZK_PORT, timeout: float = 1.0) -> bool:
    """ZooKeeper's liveness word, from inside the node's namespace (used by the agents)."""
    try:
        with socket.create_connection((ip, port), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False
