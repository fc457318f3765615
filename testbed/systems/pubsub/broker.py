"""The broker role: one independent nats-server per broker node (the data plane) and its broker
agent (the control plane's hands on that broker), as docs/design/pubsub-protocol.md describes.

The agent registers the broker in ZooKeeper, owns topics through ephemeral owner nodes, answers
the topic manager on `_ep.cmd.<broker>` (acquire, release in the enhanced and baseline workflows,
status), aggregates its clients' NC reports per topic and writes a BrokerReport to ZooKeeper every
monitoring period. Releasing a topic never loses traffic silently: for a grace period the old
broker forwards what is still published to it to the new owner (and re-sends the redirect), and
bridges the new owner's traffic back to consumers that have not moved yet, which stands in for
the message retention a persistent Pulsar topic gives across a migration.

    python -m testbed.systems.pubsub.broker --node bzone1 --nats nats://10.1.0.2:4222 --zk 10.1.0.1:2181
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import json
import logging
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from testbed.nc.coordinate import Coordinate
from testbed.nc.serf import SerfError, SerfRPC
from testbed.systems.pubsub.client import connect_nats
from testbed.systems.pubsub.durable import DurableTopics, parse_classes
from testbed.systems.pubsub.peers import Peers
from testbed.systems.pubsub.metadata import Metadata, check_topic
from testbed.policies.distance import DEFAULT_DISTANCE, DISTANCES, get_distance
from testbed.policies.snapshot import BrokerReport, coord_to_dict
from testbed.systems.pubsub.reports import (HANDOVER_SUBJECT, NC_REPORT, NC_REPORT_NOW, ClientEntry, Owned, parse_nc_report,
                                            topic_clients, topic_report)
from testbed.systems.pubsub.resources import ResourceSampler

NATS_PORT = 4222
MONITOR_PORT = 8222
FWD_HEADER = "Ep-Fwd"  # set on forwarded copies so that two bridged servers never loop a message
MAX_BUFFER = 10_000  # strays held while a released topic has no new owner yet (baseline)
REDIRECT_EVERY_S = 0.25  # re-sent redirects per topic, at most this often
EARLY_REPORT_GATHER_S = 0.1  # an early report waits this long for the other reports of the same handover


def nats_url(ip: str) -> str:
    return f"nats://{ip}:{NATS_PORT}"


@dataclass
class Grace:
    """A released topic: what still arrives here goes to `target` (broker, address) once known."""

    until: float
    target: tuple[str, str] | None = None
    subs: list = field(default_factory=list)
    buffer: list = field(default_factory=list)
    strays: int = 0
    forwarded: int = 0
    bridged: int = 0
    last_redirect: float = 0.0
    looking_up: bool = False
    released: bool = False  # until the owner node is gone, what arrives here is ordinary traffic


class BrokerAgent:
    def __init__(self, args):
        self.name = args.node
        self.local_url = args.nats
        self.address = args.address or args.nats
        self.site, self.cloud = args.site, args.cloud
        self.report_clients = getattr(args, "report_clients", False)
        self.distance = get_distance(getattr(args, "distance", DEFAULT_DISTANCE))
        self.period, self.grace_s, self.stale_s = args.period, args.grace, 3 * args.nc_period
        self.monitor = args.monitor or f"http://{self.local_url.split('//')[-1].split(':')[0]}:{MONITOR_PORT}/varz"
        self.events_path = Path(args.events) if args.events else None
        self.serf_name = args.serf_name or args.node
        self.meta = Metadata(args.zk, session_timeout=args.session_timeout, on_restored=self._restored_threadsafe,
                             on_fenced=self._fenced_threadsafe)
        self.sampler = ResourceSampler(capacity_bps=args.bandwidth)
        self.owned: dict[str, Owned] = {}
        self.grace: dict[str, Grace] = {}
        self.peers = Peers(f"agent-{self.name}")
        self.counters = {"nc_reports": 0, "malformed": 0, "strays": 0, "forwarded": 0, "bridged": 0,
                         "redirects": 0, "dropped": 0, "reacquired": 0, "lost": 0, "reports_written": 0,
                         "fenced": 0, "early_reports": 0, "nc_reports_now": 0}
        self.last_report: dict | None = None
        self.coord: Coordinate | None = None
        self._varz: tuple[float, int] | None = None
        self._tasks: set[asyncio.Task] = set()
        self._last_wrong: dict[str, float] = {}
        self.handover_topics: set[str] = set()  # owned topics with a handed-over client, for the early report
        self.clouds: list[str] = []  # the cloud brokers' addresses (a topic manager is in one), each period
        self._early: asyncio.Task | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.nc = None
        classes = parse_classes(getattr(args, "durable", None))
        storage = [u for u in (getattr(args, "storage", None) or "").split(",") if u]
        # What a topic feature adds to a broker (`feature.BrokerFeature`): durable topics' storage.
        self.features = [DurableTopics(self, storage, classes, getattr(args, "cloud_site", ""))] if classes and storage else []

    # -- plumbing ---------------------------------------------------------------------------------
    def event(self, kind: str, **data) -> None:
        line = json.dumps({"type": kind, "time": time.time(), "broker": self.name, **data})
        if self.events_path:
            with self.events_path.open("a") as handle:
                handle.write(line + "\n")
        else:
            print(line, flush=True)

    def spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _peer(self, address: str):
        return await self.peers.get(address)

    async def _warm_peers(self) -> None:
        """Connect ahead to every registered broker (`peers.Peers`)."""
        try:
            brokers = await self.zk(self.meta.brokers)
        except Exception:  # noqa: BLE001 - next period
            return
        self.clouds = [info["address"] for info in brokers.values() if info.get("cloud") and info.get("address")]
        self.peers.warm([info.get("address") for name, info in brokers.items() if name != self.name], self.spawn,
                        lambda address, error: self.event("peer_unreachable", address=address,
                                                          error=f"{type(error).__name__}: {error}"))

    async def zk(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    # -- lifecycle --------------------------------------------------------------------------------
    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        # ZooKeeper calls run in threads: enough of them that a burst of concurrent migrations pipelines
        # its WAN round trips over the session instead of waiting for the default handful of workers.
        self.loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=32))
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, stop.set)
        self.nc = await connect_nats(self.local_url, name=f"agent-{self.name}")
        await self.zk(self.meta.start)
        await self.zk(self.meta.ensure_layout)
        await self.zk(self.meta.register_broker, self.name, self.address, self.site, self.cloud)
        for topic in await self.zk(self.meta.adopt, self.name, self.address):
            self.owned[topic] = Owned(since=time.time())
            self.event("adopted", topic=topic)
        await self.nc.subscribe(f"_ep.cmd.{self.name}", cb=self._on_cmd)
        await self.nc.subscribe(f"{NC_REPORT}.>", cb=self._on_nc)
        await self.nc.subscribe(f"{NC_REPORT_NOW}.>", cb=self._on_nc_now)
        for feature in self.features:
            await feature.start(list(self.owned))
        await self.nc.flush()
        self.event("broker_registered", address=self.address, site=self.site, cloud=self.cloud)
        print("ready", flush=True)
        await self._warm_peers()
        reporter = asyncio.create_task(self._report_loop())
        await stop.wait()
        reporter.cancel()
        self.event("broker_counters", **self.counters)  # what the run's analysis counts (monitoring cost)
        for feature in self.features:
            await feature.close()
        await self.peers.close()
        try:
            await self.nc.close()
        except Exception:  # noqa: BLE001 - closing on the way out
            pass
        await self.zk(self.meta.stop)

    # -- commands ---------------------------------------------------------------------------------
    async def _on_cmd(self, msg) -> None:
        self.spawn(self._command(msg))

    async def _command(self, msg) -> None:
        try:
            request = json.loads(msg.data)
            op = request.get("op")
            if op == "acquire":
                answer = await self.acquire(check_topic(request["topic"]))
            elif op == "release":
                answer = await self.release(check_topic(request["topic"]), request.get("to"), request.get("address"))
            elif op == "status":
                answer = self.status()
            else:
                answer = {"ok": False, "error": f"unknown op {op!r}"}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            answer = {"ok": False, "error": f"bad command: {error}"}
        except Exception as error:  # noqa: BLE001 - the caller must get an answer
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        if msg.reply:
            await msg.respond(json.dumps(answer).encode())

    async def acquire(self, topic: str) -> dict:
        started = time.time()
        ok = await self.zk(self.meta.acquire, topic, self.name, self.address)
        if not ok:
            owner = await self.zk(self.meta.owner, topic)
            return {"ok": False, "op": "acquire", "topic": topic, "error": "owned by another broker", "owner": owner}
        if topic not in self.owned:
            self.owned[topic] = Owned(since=time.time())
        grace = self.grace.pop(topic, None)  # the topic came back: no more forwarding
        if grace:
            await self._end_grace(topic, grace)
        for feature in self.features:
            feature.acquired(topic)
        self.event("acquired", topic=topic, zk_s=round(time.time() - started, 6))
        return {"ok": True, "op": "acquired", "topic": topic, "broker": self.name, "address": self.address}

    async def release(self, topic: str, to: str | None, address: str | None) -> dict:
        """Enhanced when `to` and `address` are given (Fig. 2), else baseline (lazy reassignment)."""
        t0 = time.time()
        if topic not in self.owned:
            return {"ok": False, "op": "release", "topic": topic, "error": "not the owner"}
        target = (to, address) if to and address else None
        # The grace subscriptions are in place before anyone is told, so nothing published here is lost;
        # reaching the new owner's server and deleting the owner node go on at the same time.
        setup, released = await asyncio.gather(self._start_grace(topic, target),
                                               self.zk(self.meta.release, topic, self.name), return_exceptions=True)
        if isinstance(released, BaseException):
            raise released  # ZooKeeper unreachable: nothing changed, the caller gets the error
        grace = self.grace.get(topic)  # None: it ended while the new owner's server was being reached
        self.owned.pop(topic, None)
        if grace is not None:
            grace.released = True
        for feature in self.features:
            feature.released(topic)
        t1 = time.time()
        if target and isinstance(setup, BaseException):  # its server cannot be reached: clients stay here
            return await self._unreachable(topic, to, setup, t0)
        control = ({"op": "redirect", "topic": topic, "broker": to, "address": address} if target
                   else {"op": "disconnect", "topic": topic})
        await self.nc.publish(f"_ep.ctl.{topic}", json.dumps(control).encode())
        try:
            await self.nc.flush()
        except Exception as error:  # noqa: BLE001 - the topic is released already: the move must go on
            notify_error = f"{type(error).__name__}: {error}"  # (a client not told is told by its next report)
        else:
            notify_error = None
        t2 = time.time()
        acquired = rolled_back = None
        if target:
            acquired = await self._hand_over(topic, to, address)
            if not acquired:
                rolled_back, owner = await self._take_back(topic)
                acquired = owner == to  # True: the new owner holds it, its answer came too late
        t3 = time.time()
        timing = {"zk_release_s": round(t1 - t0, 6), "notify_s": round(t2 - t1, 6),
                  "new_acquire_s": round(t3 - t2, 6) if target else None, "total_s": round(t3 - t0, 6)}
        workflow = "enhanced" if target else "baseline"
        self.event("released", topic=topic, workflow=workflow, to=to, acquired=acquired, zk_deleted=released,
                   rolled_back=rolled_back, notify_error=notify_error, **timing)
        answer = {"ok": acquired is not False, "op": "released", "topic": topic, "workflow": workflow, "to": to,
                  "acquired": acquired, "rolled_back": rolled_back, "timing": timing}
        if acquired is False:
            answer["error"] = f"{to} did not acquire the topic: " + ("taken back here" if rolled_back else
                                                                      "taking it back failed too, the lookup places it")
        if notify_error:
            answer["notify_error"] = notify_error
        if isinstance(setup, BaseException):  # the new broker's server could not be reached: no bridge
            answer["bridge_error"] = f"{type(setup).__name__}: {setup}"
        return answer

    async def _unreachable(self, topic: str, to: str, error: BaseException, t0: float) -> dict:
        """An enhanced move whose new owner's server could not be reached: taken back before any
        client is told to go there (they publish and receive here meanwhile, as the server does not
        need the owner's record in ZooKeeper to deliver)."""
        rolled_back, owner = await self._take_back(topic)
        why = f"{type(error).__name__}: {error}"
        timing = {"total_s": round(time.time() - t0, 6)}
        self.event("released", topic=topic, workflow="enhanced", to=to, acquired=owner == to, rolled_back=rolled_back,
                   unreachable=why, **timing)
        return {"ok": owner == to, "op": "released", "topic": topic, "workflow": "enhanced", "to": to,
                "acquired": owner == to, "rolled_back": rolled_back, "timing": timing,
                "error": f"{to}'s server could not be reached ({why}): " + ("taken back here" if rolled_back else
                                                                           "taking it back failed too")}

    async def _hand_over(self, topic: str, to: str, address: str) -> bool:
        """Ask the new owner to acquire the released topic (the enhanced workflow's last step)."""
        try:
            peer = await self._peer(address)
            reply = await peer.request(f"_ep.cmd.{to}", json.dumps({"op": "acquire", "topic": topic}).encode(),
                                       timeout=10)
            return bool(json.loads(reply.data).get("ok", False))
        except Exception as error:  # noqa: BLE001 - reported, then the topic is taken back
            self.event("acquire_request_failed", topic=topic, to=to, error=str(error))
            return False

    async def _take_back(self, topic: str) -> tuple[bool, str | None]:
        """A move the new owner did not complete is rolled back: this broker owns the topic again, so
        it is never left without an owner (its clients that followed the redirect are told they are at
        the wrong broker by their next report there, look it up and come back). (taken back, the owner
        when another broker holds it: a new owner whose answer came too late)."""
        try:
            answer = await self.acquire(topic)
        except Exception as error:  # noqa: BLE001 - ZooKeeper unreachable: the lookup places it later
            self.event("take_back_failed", topic=topic, error=f"{type(error).__name__}: {error}")
            return False, None
        owner = (answer.get("owner") or {}).get("broker")
        return bool(answer.get("ok")) or owner == self.name, owner  # (a lookup may have given it back first)

    def status(self) -> dict:
        session_id, password = self.meta.session
        return {"ok": True, "op": "status", "broker": self.name, "address": self.address, "owned": sorted(self.owned),
                "grace": {t: {"target": g.target and g.target[0], "strays": g.strays, "forwarded": g.forwarded,
                              "bridged": g.bridged, "left_s": round(g.until - time.time(), 3)}
                          for t, g in self.grace.items()},
                "clients": {t: len(o.clients) for t, o in self.owned.items()}, "counters": dict(self.counters),
                **{feature.name: feature.status() for feature in self.features},
                "zk_session": {"id": session_id, "password": password.hex()}, "last_report": self.last_report}

    # -- grace: forwarding what still arrives for a released topic --------------------------------
    async def _start_grace(self, topic: str, target: tuple[str, str] | None) -> Grace:
        old = self.grace.pop(topic, None)
        if old:
            await self._end_grace(topic, old)
        grace = Grace(until=time.time() + self.grace_s)
        self.grace[topic] = grace
        self.spawn(self._grace_timer(topic, grace))
        grace.subs.append(await self.nc.subscribe(f"t.{topic}", cb=functools.partial(self._on_stray, topic, grace)))
        await self.nc.flush()
        if target:
            await self._set_target(topic, grace, target)
        return grace

    async def _set_target(self, topic: str, grace: Grace, target: tuple[str, str]) -> None:
        peer = await self._peer(target[1])

        async def back(msg) -> None:  # the new owner's traffic, for consumers still attached here
            if msg.headers and FWD_HEADER in msg.headers:
                return
            grace.bridged += 1
            self.counters["bridged"] += 1
            await self.nc.publish(msg.subject, msg.data, headers={FWD_HEADER: target[0]})

        grace.subs.append(await peer.subscribe(f"t.{topic}", cb=back))
        await peer.flush()
        grace.target = target
        buffered, grace.buffer = grace.buffer, []
        for data in buffered:
            await self._forward(topic, grace, data)

    async def _forward(self, topic: str, grace: Grace, data: bytes) -> None:
        peer = await self._peer(grace.target[1])
        await peer.publish(f"t.{topic}", data, headers={FWD_HEADER: self.name})
        grace.forwarded += 1
        self.counters["forwarded"] += 1

    async def _on_stray(self, topic: str, grace: Grace, msg) -> None:
        if (msg.headers and FWD_HEADER in msg.headers) or not grace.released:
            return  # our own bridged copy, or traffic from before the release (delivered here as usual)
        grace.strays += 1
        self.counters["strays"] += 1
        if grace.target is None:
            if len(grace.buffer) < MAX_BUFFER:
                grace.buffer.append(msg.data)
            else:
                self.counters["dropped"] += 1
            if not grace.looking_up:
                grace.looking_up = True
                self.spawn(self._find_target(topic, grace))
            return
        await self._forward(topic, grace, msg.data)
        await self._redirect(topic, grace)

    async def _redirect(self, topic: str, grace: Grace) -> None:
        now = time.monotonic()
        if grace.target is None or not grace.released or now - grace.last_redirect < REDIRECT_EVERY_S:
            return
        grace.last_redirect = now
        self.counters["redirects"] += 1
        control = {"op": "redirect", "topic": topic, "broker": grace.target[0], "address": grace.target[1]}
        await self.nc.publish(f"_ep.ctl.{topic}", json.dumps(control).encode())

    async def _find_target(self, topic: str, grace: Grace) -> None:
        """Baseline: the new owner is whoever acquires next; ask ZooKeeper until one does."""
        try:
            while self.grace.get(topic) is grace and grace.target is None:
                try:
                    owner = await self.zk(self.meta.owner, topic)
                    if owner and owner.get("broker") != self.name:
                        await self._set_target(topic, grace, (owner["broker"], owner["address"]))
                        await self._redirect(topic, grace)
                        break
                except Exception as error:  # noqa: BLE001 - ZooKeeper or the new owner unreachable: retry
                    self.event("forward_target_failed", topic=topic, error=f"{type(error).__name__}: {error}")
                    await asyncio.sleep(0.5)
                await asyncio.sleep(0.1)
        finally:
            grace.looking_up = False

    async def _grace_timer(self, topic: str, grace: Grace) -> None:
        await asyncio.sleep(max(0.0, grace.until - time.time()))
        if self.grace.get(topic) is grace:
            del self.grace[topic]
            await self._end_grace(topic, grace)

    async def _end_grace(self, topic: str, grace: Grace) -> None:
        for sub in grace.subs:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - a closed peer connection
                pass
        self.counters["dropped"] += len(grace.buffer)
        self.event("grace_end", topic=topic, target=grace.target and grace.target[0], strays=grace.strays,
                   forwarded=grace.forwarded, bridged=grace.bridged, dropped=len(grace.buffer))

    # -- NC reports -------------------------------------------------------------------------------
    async def _on_nc(self, msg) -> bool:
        """A client's NC report; True when it is for a topic this broker owns."""
        topic = msg.subject.split(".", 2)[2]
        try:
            check_topic(topic)
            client, role, coord, rate, byte_rate = parse_nc_report(msg.data)
        except ValueError:
            self.counters["malformed"] += 1
            return
        self.counters["nc_reports"] += 1
        state = self.owned.get(topic)
        if state is not None:
            state.clients[(client, role)] = ClientEntry(role, coord, rate, time.time(), byte_rate)
            return True
        if topic in self.grace:
            await self._redirect(topic, self.grace[topic])
        elif time.monotonic() - self._last_wrong.get(topic, 0.0) > 1.0:
            self._last_wrong[topic] = time.monotonic()
            self.spawn(self._tell_wrong_broker(topic))
        return False

    async def _on_nc_now(self, msg) -> None:
        """A handed-over client's report, sent at once (beyond the paper: testbed.policies.handover):
        the monitoring report is written now, not at the next period, and the topic manager told."""
        self.counters["nc_reports_now"] += 1
        if await self._on_nc(msg):
            self.handover_topics.add(msg.subject.split(".", 2)[2])
            if self._early is None or self._early.done():
                self._early = asyncio.get_running_loop().create_task(self._early_report())

    async def _early_report(self) -> None:
        await asyncio.sleep(EARLY_REPORT_GATHER_S)  # the other clients of the same handover (a swarm's)
        topics, self.handover_topics = sorted(self.handover_topics), set()
        began = time.monotonic()
        try:
            data = await self.build_report(measure=False)
            await self.zk(self.meta.write_report, self.name, data)
            clouds = self.clouds or [b["address"] for b in (await self.zk(self.meta.brokers)).values() if b.get("cloud")]
            notice = json.dumps({"broker": self.name, "topics": topics}).encode()
            for address in clouds:  # the elected manager is in one of them
                nc = self.nc if address == self.address else await self._peer(address)
                await nc.publish(HANDOVER_SUBJECT, notice)
        except Exception as error:  # noqa: BLE001 - the periodic report is the backstop
            self.event("early_report_failed", topics=topics, error=f"{type(error).__name__}: {error}")
            return
        self.counters["early_reports"] += 1
        self.event("early_report", topics=topics, write_s=round(time.monotonic() - began, 6))

    async def _tell_wrong_broker(self, topic: str) -> None:
        """A client reports to a broker that does not own its topic: send it where the topic is.
        Redirected clients may arrive before the acquire that follows the redirect: wait for it first."""
        await asyncio.sleep(1.0)
        if topic in self.owned or topic in self.grace:
            return
        owner = await self.zk(self.meta.owner, topic)
        if owner and owner.get("broker") != self.name:
            control = {"op": "redirect", "topic": topic, "broker": owner["broker"], "address": owner["address"]}
        else:
            control = {"op": "disconnect", "topic": topic}
        self.counters["redirects"] += 1
        await self.nc.publish(f"_ep.ctl.{topic}", json.dumps(control).encode())

    # -- ZooKeeper session loss -------------------------------------------------------------------
    def _restored_threadsafe(self, reacquired: list[str], lost: list[str]) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._restored, reacquired, lost)

    def _restored(self, reacquired: list[str], lost: list[str]) -> None:
        self.counters["reacquired"] += len(reacquired)
        self.counters["lost"] += len(lost)
        for topic in lost:
            self.owned.pop(topic, None)
            self.spawn(self._tell_wrong_broker(topic))
        self.event("zk_session_restored", reacquired=reacquired, lost=lost)

    def _fenced_threadsafe(self, topic: str) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._fenced, topic)

    def _fenced(self, topic: str) -> None:
        """The topic manager judged this broker gone and took `topic` from it (we were paused, or too
        slow to answer its probe): drop it and send its clients to the new owner. (The registration,
        deleted too, is made again by `metadata`: this broker is alive.)"""
        if self.owned.pop(topic, None) is None:
            return
        self.counters["fenced"] += 1
        self.event("ownership_fenced", topic=topic)
        self.spawn(self._tell_wrong_broker(topic))

    # -- monitoring -------------------------------------------------------------------------------
    def _serf_coordinate(self) -> Coordinate | None:
        try:
            with SerfRPC(timeout=1.0) as rpc:
                return rpc.coordinate(self.serf_name)
        except (OSError, SerfError):
            return None

    def _output_rate(self) -> float:
        """Messages/s nats-server delivered since the last report (its /varz out_msgs)."""
        try:
            with urllib.request.urlopen(self.monitor, timeout=1.0) as answer:
                out_msgs = int(json.load(answer)["out_msgs"])
        except (OSError, ValueError, KeyError):
            return 0.0
        now, last = time.monotonic(), self._varz
        self._varz = (now, out_msgs)
        return max(0, out_msgs - last[1]) / max(1e-6, now - last[0]) if last else 0.0

    async def build_report(self, measure: bool = True) -> dict:
        """This broker's monitoring report. `measure` False (an early report after a handover): the
        topics' aggregates are new, the broker's own coordinate, output rate and resource use are the
        last period's (asking Serf and nats-server again took ~0.6 s on a busy VM)."""
        if measure or self.last_report is None:
            self.coord = await asyncio.to_thread(self._serf_coordinate) or self.coord
            rate_out = await asyncio.to_thread(self._output_rate)
            use = self.sampler.sample()
        else:
            last = self.last_report
            rate_out = last["rate_out"]
            use = {"cpu": last["cpu"], "memory": last["memory"], "network": last["network"],
                   "network_in": last["network_in"], "network_out": last["network_out"],
                   "network_bps": last["network_bps"]}
        topics = tuple(topic_report(t, self.name, self.coord, o, self.stale_s, self.distance)
                       for t, o in sorted(self.owned.items()))
        report = BrokerReport(self.name, self.coord, use["cpu"], use["memory"], use["network"], rate_out, topics,
                              use["network_in"], use["network_out"])
        data = report.to_dict()
        data.update(time=time.time(), address=self.address, site=self.site, cloud=self.cloud,
                    network_bps=use["network_bps"], period=self.period, malformed=self.counters["malformed"],
                    distance=self.distance.name)
        data["coord"] = coord_to_dict(self.coord)
        if self.report_clients:  # AllPairs (the naive approach): every client's coordinate, per topic
            data["clients"] = {t: topic_clients(o).to_dict() for t, o in sorted(self.owned.items())}
        return data

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            await self._warm_peers()
            try:
                data = await self.build_report()
                await self.zk(self.meta.write_report, self.name, data)
                self.last_report = data
                self.counters["reports_written"] += 1
            except Exception as error:  # noqa: BLE001 - a missed report is logged, the loop goes on
                self.event("report_failed", error=f"{type(error).__name__}: {error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ePulsar broker agent (runs in a broker node next to its "
                                     "nats-server)", epilog="example: python -m testbed.systems.pubsub.broker --node bzone1 "
                                     "--nats nats://10.1.0.2:4222 --zk 10.1.0.1:2181 --site zone1")
    parser.add_argument("--node", required=True, help="broker name (also its Serf node name)")
    parser.add_argument("--nats", required=True, help="this broker's nats-server, nats://ip:4222")
    parser.add_argument("--address", help="address clients are given (default: --nats)")
    parser.add_argument("--zk", required=True, help="ZooKeeper ip:port")
    parser.add_argument("--site", default="")
    parser.add_argument("--cloud", action="store_true", help="a cloud broker")
    parser.add_argument("--period", type=float, default=5.0, help="monitoring period, seconds")
    parser.add_argument("--nc-period", type=float, default=5.0, help="clients' NC report period, seconds")
    parser.add_argument("--grace", type=float, default=10.0, help="forwarding period after a release, seconds")
    parser.add_argument("--bandwidth", type=float, default=100e6, help="node link capacity, bits/s")
    parser.add_argument("--monitor", help="nats-server /varz URL (default: port 8222 of --nats)")
    parser.add_argument("--serf-name", help="Serf node name if not --node")
    parser.add_argument("--session-timeout", type=float, default=6.0, help="ZooKeeper session timeout, seconds")
    parser.add_argument("--events", help="append events (JSON lines) here instead of stdout")
    parser.add_argument("--distance", default=DEFAULT_DISTANCE, choices=list(DISTANCES),
                        help="reading of d for E(t) and W(t): Serf's RTT estimate / 2 (one_way) or as is (rtt)")
    parser.add_argument("--report-clients", action="store_true",
                        help="add every client's coordinate per topic to the report (the AllPairs policy needs them; "
                             "the report then grows with the number of clients)")
    parser.add_argument("--storage", help="durable topics: this site's storage nodes, nats://ip:4222,...")
    parser.add_argument("--durable", help='durable topic classes as JSON, {"class": {"replicas": 3, "storage": '
                        '"site-local"|"cloud"}} (needs --storage)')
    parser.add_argument("--cloud-site", default="", help="the cloud datacentre's site (cloud storage's tag)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(BrokerAgent(args).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
