"""ZooKeeper for the control plane: a thin kazoo wrapper over the /epulsar layout of
docs/design/pubsub-protocol.md (the server is started by `testbed.roles.launch.ZooKeeperServer`).

Ownership is an ephemeral node created by the owning broker, so ZooKeeper (not the brokers) settles
races: a second acquire fails cleanly. A session loss deletes a broker's ephemeral nodes; the
wrapper remembers what it registered and owned and recreates it on the next session, so a topic is
never left without an owner while its broker is alive.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import SequentialThreadingHandler

logging.getLogger("kazoo").addHandler(logging.NullHandler())  # agents configure logging; testbed.logs routes the harness's

ZK_PORT = 2181
ROOT = "/epulsar"
TOPIC_RE = re.compile(r"^[a-z][a-z0-9_]*(-[a-z0-9]+)?$")


class MetadataError(RuntimeError):
    """ZooKeeper could not be started or reached."""


def check_topic(topic: str) -> str:
    """Topic names become ZooKeeper paths and NATS subjects: no dots, slashes or wildcards."""
    if not isinstance(topic, str) or not TOPIC_RE.match(topic):
        raise ValueError(f"{topic!r} is not a topic name such as 'follow_leader-swarm3'")
    return topic


def _dumps(data) -> bytes:
    return (data if isinstance(data, str) else json.dumps(data, sort_keys=True)).encode()


class Metadata:
    """The /epulsar layout on kazoo. `on_restored(reacquired, lost)` is called (in a kazoo thread)
    after a session loss, once the registration and owned topics have been recreated. `handler`: a
    kazoo handler (the harness passes one that connects inside a node: `roles.launch.node_metadata`)."""

    def __init__(self, hosts: str, handler=None, session_timeout: float = 10.0, on_restored=None,
                 client_id: tuple[int, bytes] | None = None, on_fenced=None):
        self.zk = KazooClient(hosts=hosts, timeout=session_timeout, handler=handler or SequentialThreadingHandler(),
                              client_id=client_id, connection_retry={"max_tries": -1, "delay": 0.2, "max_delay": 1.0})
        self.on_restored = on_restored
        self.on_fenced = on_fenced  # (topic) in a kazoo thread: another client deleted our owner node
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
        reacquired, lost, watches = [], [], []
        with self._lock:
            if self.registration:
                name, data = self.registration
                path = f"{ROOT}/brokers/{name}"
                if self._create_ephemeral(path, data, replace_own=True):
                    watches.append(lambda path=path, data=data: self._watch_registration(path, data))
            for topic, data in list(self.owned.items()):
                path = f"{ROOT}/topics/{topic}/owner"
                if self._create_ephemeral(path, data, replace_own=True):
                    reacquired.append(topic)
                    watches.append(lambda topic=topic, path=path, data=data: self._watch_owner(topic, path, data))
                else:
                    lost.append(topic)
                    self.owned.pop(topic, None)
        self.events.append({"type": "zk_session_restored", "time": time.time(), "reacquired": reacquired,
                            "lost": lost})
        if self.on_restored:
            self.on_restored(reacquired, lost)
        for watch in watches:  # a new session has no watches: fencing must still be noticed
            watch()

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
        path = f"{ROOT}/brokers/{name}"
        with self._lock:
            self.registration = (name, data)
            if not self._create_ephemeral(path, data, replace_own=True):
                raise MetadataError(f"another live broker is registered as {name}")
        self._watch_registration(path, data)

    def _watch_registration(self, path: str, data: dict) -> None:
        """Register again when the registration is deleted by someone else (the topic manager fenced
        this broker, judging it gone): a broker that still runs to see it is alive, and may be given
        topics anew. Its topics are not taken back (their owner nodes' watches give them up)."""
        def changed(event) -> None:
            if self.registration is None or self.registration[1] != data:
                return
            if event.type == "DELETED":
                self.events.append({"type": "zk_registration_fenced", "time": time.time()})
                self.zk.create_async(path, _dumps(data), ephemeral=True, makepath=True)
            self.zk.exists_async(path, watch=changed)
        self.zk.exists(path, watch=changed)

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
        path = f"{ROOT}/topics/{check_topic(topic)}/owner"
        if self._create_ephemeral(path, data, replace_own=True):
            with self._lock:
                self.owned[topic] = data
            self._watch_owner(topic, path, data)
            return True
        return False

    def _watch_owner(self, topic: str, path: str, data: dict) -> None:
        """Tell `on_fenced` when our owner node is deleted by someone else (the topic manager fencing
        a broker it judged gone) while we still hold the topic: a broker that was only slow must give
        the topic up, or it would have two owners. Our own release drops the topic first, so it never
        counts; a watch is one-shot, so any other change re-arms it."""
        def changed(event) -> None:
            with self._lock:
                ours = self.owned.get(topic) == data
                if ours and event.type == "DELETED":
                    self.owned.pop(topic, None)
            if not ours:
                return
            if event.type == "DELETED":
                self.events.append({"type": "zk_owner_fenced", "time": time.time(), "topic": topic})
                if self.on_fenced:
                    self.on_fenced(topic)
            else:
                self.zk.exists_async(path, watch=changed)  # never block kazoo's callback thread
        self.zk.exists(path, watch=changed)

    def fence(self, broker: str) -> list[str]:
        """Take everything from `broker`, judged gone before its session expired: delete its
        registration and the owner nodes naming it (each by version: a node re-created meanwhile is
        left alone). Returns the topics it owned."""
        fenced = []
        for topic in self.topics():
            path = f"{ROOT}/topics/{topic}/owner"
            try:
                raw, stat = self.zk.get(path)
                if json.loads(raw).get("broker") == broker:
                    self.zk.delete(path, version=stat.version)
                    fenced.append(topic)
            except (NoNodeError, BadVersionError, ValueError):
                pass
        try:
            self.zk.delete(f"{ROOT}/brokers/{broker}")
        except NoNodeError:
            pass
        return fenced

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
        self._put(f"{ROOT}/reports/{broker}", report)

    def write_ownership(self, state: dict) -> None:
        """A stateful controller's ownership record (Pulsar's bundle ranges and bundle -> broker): the
        next leader starts from it."""
        self._put(f"{ROOT}/ownership", state)

    def ownership(self) -> dict | None:
        try:
            return json.loads(self.zk.get(f"{ROOT}/ownership")[0])
        except NoNodeError:
            return None

    def _put(self, path: str, value) -> None:
        data = _dumps(value)
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


def ruok(ip: str, port: int = ZK_PORT, timeout: float = 1.0) -> bool:
    """ZooKeeper's liveness word, from inside the node's namespace (used by the agents)."""
    try:
        with socket.create_connection((ip, port), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False
