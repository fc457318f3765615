"""Durable topics at a broker (paper 3.5): what a persistent Pulsar topic does with its bookies, on
a JetStream cluster of storage nodes (docs/design/pubsub-protocol.md, "Durable topics").

A producer of a durable topic publishes `p.<topic>` to the broker it uses, with a reply subject
that names the message (`<inbox>.<seq>`) and the header `Nats-Msg-Id: <producer>:<seq>`. The broker
agent stores it in the topic's stream (subject `s.<topic>`) and answers the reply only once the
stream has acknowledged it, i.e. once a quorum of its replicas hold it: the producer's publish
acknowledgement. A resent message with the same id is stored once (the stream's de-duplication).
The stream's replicas are placed by tags: `site:<site>` (the storage policy's site) and distinct
`rack:` values (the cluster's `unique_tag`).

A consumer attaches with a request on `_ep.attach.<topic>` naming itself; the broker then pulls
from the consumer's durable JetStream consumer (its cursor, kept by the storage cluster, not by the
broker) and delivers each message on `d.<topic>.<consumer>`, with the storage's acknowledgement
subject in the header `Ep-Ack`. The consumer acknowledges by publishing that subject on
`_ep.ack.<topic>` to the broker it uses, which passes it to the storage cluster. What a consumer
has not acknowledged is delivered again (after the consumer's ack wait) by whichever broker it
attaches to next: after a migration or a broker crash it resumes from its acknowledged position.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass

import nats
from nats.js.api import (AckPolicy, ConsumerConfig, DeliverPolicy, Placement, StorageType, StreamConfig)
from nats.js.errors import NotFoundError

from testbed.policies.topics import topic_class
from testbed.systems.pubsub.feature import BrokerFeature

PUBLISH = "p"  # p.<topic>: a producer's durable message, answered once stored
STORED = "s"  # s.<topic>: the subject the topic's stream captures
DELIVER = "d"  # d.<topic>.<consumer>: one consumer's messages, from its cursor
ATTACH = "_ep.attach"  # _ep.attach.<topic> {"consumer": name}: start delivering to it
ACK = "_ep.ack"  # _ep.ack.<topic>, body = the storage's ack subject: a consumer's acknowledgement
ACK_HEADER = "Ep-Ack"
MSG_ID_HEADER = "Nats-Msg-Id"  # JetStream's de-duplication header
JS_ACK_PREFIX = "$JS.ACK."
ATTACH_WAIT_S = 4.0  # an attach is answered within this long (the consumer's cursor is bound by then)
ACK_WAIT_S = 2.0  # a consumer's unacknowledged message is delivered again after this long
STORE_ATTEMPT_S = 1.0  # one store's wait for the stream's acknowledgement
STORE_PAUSE_S = 0.2  # between attempts while the stream has no leader
STORE_GIVE_UP_S = 10.0  # then the message is left to the producer's resend (JetStream elects in ~5 s)
STORE_SAMPLE = 200  # a `store_latency` event per this many messages stored
DUPLICATE_WINDOW_S = 120.0  # how long the stream remembers message ids (a resend within it is dropped)
CLUSTER = "storage"
ACKS_DIR = "acks"  # in a run's directory: producers' acknowledgements, one CSV per producer (topic,producer,seq,sent,acked)
CLUSTER_PORT = 6222  # storage nodes' cluster (route) port
SITE_TAG, RACK_TAG = "site:", "rack:"


@dataclass(frozen=True)
class DurableSpec:
    replicas: int
    storage: str  # site-local | cloud


def parse_classes(text: str | None) -> dict[str, DurableSpec]:
    """`{"follow_leader": {"replicas": 3, "storage": "site-local"}}` (the scenario's durable classes)."""
    return {name: DurableSpec(int(spec["replicas"]), str(spec["storage"]))
            for name, spec in json.loads(text or "{}").items()}


def classes_json(topics) -> str:
    """The scenario's durable topic classes as brokers and clients are told them."""
    return json.dumps({t.name: {"replicas": t.durable.replicas, "storage": t.durable.storage}
                       for t in topics if t.durable is not None}, sort_keys=True)


def stream_name(topic: str) -> str:
    return f"T_{topic}"


def consumer_name(consumer: str) -> str:
    return f"C_{consumer}"


def placement_site(spec: DurableSpec, broker_site: str, cloud_site: str) -> str:
    """Where a topic's replicas live: the owning broker's site (ePulsar) or the cloud datacentre."""
    return cloud_site if spec.storage == "cloud" else broker_site


def storage_config(node: str, ip: str, site: str, rack: int, routes: list[str], store_dir: str,
                   client_port: int, monitor_port: int, cluster_port: int, sync_on_ack: bool = True) -> str:
    """A storage node's nats-server configuration: JetStream on, tagged with its site and rack, in
    the one storage cluster (`routes`: the other storage nodes' cluster addresses, ip:port).
    `sync_on_ack`: a message is on disk before it is acknowledged (`sync_interval: always`, as
    BookKeeper's journalSyncData; a server older than 2.10 has no such setting and syncs every 2 min)."""
    route_list = ", ".join(f'"nats-route://{r}"' for r in routes)
    return (f'server_name: "{node}"\nlisten: "{ip}:{client_port}"\nhttp: "{ip}:{monitor_port}"\n'
            f'server_tags: ["{SITE_TAG}{site}", "{RACK_TAG}{site}-{rack}"]\n'
            f'jetstream {{ store_dir: "{store_dir}", max_memory_store: 64MB, max_file_store: 2GB, '
            f'unique_tag: "{RACK_TAG}"{", sync_interval: always" if sync_on_ack else ""} }}\n'
            f'cluster {{ name: "{CLUSTER}", listen: "{ip}:{cluster_port}", routes: [{route_list}] }}\n')


async def wait_ready(urls: list[str], timeout: float = 60.0) -> float:
    """Seconds until the storage cluster answers JetStream requests (its servers listen and a meta
    leader is elected)."""
    started = time.monotonic()

    async def quiet(_error) -> None:  # refused while the servers start: tried again below
        pass

    while True:
        try:
            nc = await nats.connect(servers=urls, connect_timeout=1, allow_reconnect=False, error_cb=quiet)
            try:
                await nc.jetstream(timeout=2).account_info()
                return time.monotonic() - started
            finally:
                await nc.close()
        except Exception:  # noqa: BLE001 - not listening yet, or no meta leader yet
            if time.monotonic() - started > timeout:
                raise
            await asyncio.sleep(0.2)


class DurableTopics(BrokerFeature):
    """The broker agent's part for durable topics: stores what producers publish, places and moves
    streams by the storage policy, delivers to consumers from their cursors and relays their acks."""

    name = "durable"

    def __init__(self, agent, storage_urls: list[str], classes: dict[str, DurableSpec], cloud_site: str):
        self.agent, self.urls, self.classes, self.cloud_site = agent, storage_urls, classes, cloud_site
        self.nc = None
        self.js = None
        self.streams: dict[str, str] = {}  # topic -> site its stream is placed at (as far as we know)
        self._ensuring: dict[str, asyncio.Future] = {}
        self.pullers: dict[tuple[str, str], asyncio.Task] = {}
        self._store_s: list[float] = []
        self._arrive_s: list[float] = []
        self.counters = {"stored": 0, "duplicates": 0, "store_retries": 0, "store_failed": 0, "delivered": 0, "acks": 0,
                         "streams_created": 0, "streams_moved": 0}

    def spec(self, topic: str) -> DurableSpec | None:
        return self.classes.get(topic_class(topic))

    async def start(self, owned: list[str] = ()) -> None:
        """Connected to the storage cluster; a durable topic the broker adopted gets its stream placed."""
        self.nc = await nats.connect(servers=self.urls, name=f"storage-{self.agent.name}", connect_timeout=2,
                                     max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        self.js = self.nc.jetstream(timeout=5)
        local = self.agent.nc
        await local.subscribe(f"{PUBLISH}.*", cb=self._on_publish)
        await local.subscribe(f"{ATTACH}.*", cb=self._on_attach)
        await local.subscribe(f"{ACK}.*", cb=self._on_ack)
        for topic in owned:
            self.acquired(topic)

    def acquired(self, topic: str) -> None:
        if self.spec(topic):
            self.agent.spawn(self._place_stream(topic))

    async def _place_stream(self, topic: str) -> None:
        """A durable topic this broker now owns has its stream at the storage policy's site for it."""
        try:
            await self.ensure_stream(topic, owner=True)
        except Exception as error:  # noqa: BLE001 - the next publish tries again
            self.agent.event("stream_place_failed", topic=topic, error=f"{type(error).__name__}: {error}")

    def status(self) -> dict:
        return dict(self.counters)

    async def close(self) -> None:
        self.agent.event("durable_counters", **self.counters)
        for task in self.pullers.values():
            task.cancel()
        if self.nc is not None:
            await self.nc.close()

    # -- streams ----------------------------------------------------------------------------------
    async def ensure_stream(self, topic: str, owner: bool = False) -> None:
        """The topic's stream exists; when this broker owns the topic (`owner`) it is also placed at
        the policy's site for this broker (a site-local topic's stream follows its broker)."""
        spec = self.spec(topic)
        want = placement_site(spec, self.agent.site, self.cloud_site)
        if self.streams.get(topic) == want or (not owner and topic in self.streams):
            return
        pending = self._ensuring.get(topic)
        if pending is not None:
            await asyncio.shield(pending)
            return
        future = self._ensuring[topic] = asyncio.get_running_loop().create_future()
        try:
            await self._place(topic, spec, want, owner)
            future.set_result(None)
        except Exception as error:
            future.set_exception(error)
            future.exception()  # retrieved: a failed placement is raised to this caller only
            raise
        finally:
            self._ensuring.pop(topic, None)

    async def _place(self, topic: str, spec: DurableSpec, want: str, owner: bool) -> None:
        name = stream_name(topic)
        started = time.time()
        try:
            info = await self.js.stream_info(name)
        except NotFoundError:
            config = StreamConfig(name=name, subjects=[f"{STORED}.{topic}"], num_replicas=spec.replicas,
                                  storage=StorageType.FILE, duplicate_window=DUPLICATE_WINDOW_S,
                                  placement=Placement(tags=[f"{SITE_TAG}{want}"]))
            try:
                await self.js.add_stream(config)
                self.counters["streams_created"] += 1
                self.agent.event("stream_created", topic=topic, site=want, replicas=spec.replicas,
                                 took_s=round(time.time() - started, 4))
            except Exception:  # noqa: BLE001 - another broker created it meanwhile: take it as it is
                info = await self.js.stream_info(name)
                self.streams[topic] = _placed_at(info)
                return
            self.streams[topic] = want
            return
        at = _placed_at(info)
        self.streams[topic] = at
        if owner and at != want:
            config = info.config
            config.placement = Placement(tags=[f"{SITE_TAG}{want}"])
            try:
                await self.js.update_stream(config)
                self.counters["streams_moved"] += 1
                self.streams[topic] = want
                self.agent.event("stream_moved", topic=topic, frm=at, to=want, messages=info.state.messages,
                                 took_s=round(time.time() - started, 4))
            except Exception as error:  # noqa: BLE001 - served from where it is: remote, but nothing lost
                self.agent.event("stream_move_failed", topic=topic, frm=at, to=want,
                                 error=f"{type(error).__name__}: {error}")

    # -- producers --------------------------------------------------------------------------------
    async def _on_publish(self, msg) -> None:
        self.agent.spawn(self._store(msg))

    async def _store(self, msg) -> None:
        topic = msg.subject[len(PUBLISH) + 1:]
        if self.spec(topic) is None or not msg.reply:
            return
        arrived = time.time()
        try:
            self._arrive_s.append(arrived - float(json.loads(msg.data.split(b"\n", 1)[0])["t"]))
        except (ValueError, KeyError, TypeError):
            pass
        began = time.monotonic()
        headers = msg.headers and {MSG_ID_HEADER: msg.headers.get(MSG_ID_HEADER, "")}
        while True:  # a stream electing a leader (a node died, the stream is moving) answers again in seconds
            try:
                await self.ensure_stream(topic)
                ack = await self.js.publish(f"{STORED}.{topic}", msg.data, stream=stream_name(topic), headers=headers,
                                            timeout=STORE_ATTEMPT_S)
                break
            except Exception as error:  # noqa: BLE001 - not stored yet
                self.counters["store_retries"] += 1
                if time.monotonic() - began > STORE_GIVE_UP_S:  # no acknowledgement: the producer resends
                    self.counters["store_failed"] += 1
                    if self.counters["store_failed"] <= 20:
                        self.agent.event("store_failed", topic=topic, error=f"{type(error).__name__}: {error}")
                    return
                await asyncio.sleep(STORE_PAUSE_S)
        self.counters["duplicates" if ack.duplicate else "stored"] += 1
        self._store_s.append(time.monotonic() - began)
        if len(self._store_s) >= STORE_SAMPLE:  # how long storing takes at the broker, now and then
            took = sorted(self._store_s)
            self._store_s = []
            arrive = sorted(self._arrive_s) or [float("nan")]
            self._arrive_s = []
            self.agent.event("store_latency", count=len(took), p50_s=round(took[len(took) // 2], 6),
                             max_s=round(took[-1], 6), arrive_p50_s=round(arrive[len(arrive) // 2], 6))
        try:
            await self.agent.nc.publish(msg.reply, b"")
        except Exception:  # noqa: BLE001 - the producer left; it resends to its next broker
            pass

    # -- consumers --------------------------------------------------------------------------------
    async def _on_attach(self, msg) -> None:
        topic = msg.subject[len(ATTACH) + 1:]
        try:
            consumer = str(json.loads(msg.data)["consumer"])
            if self.spec(topic) is None or not consumer or any(c in consumer for c in ".*> "):
                raise ValueError("not a durable topic or a bad consumer name")
        except (ValueError, KeyError, TypeError) as error:
            if msg.reply:
                await msg.respond(json.dumps({"ok": False, "error": str(error)}).encode())
            return
        key = (topic, consumer)
        task = self.pullers.get(key)
        bound = asyncio.Event()
        if task is None or task.done():
            self.pullers[key] = asyncio.get_running_loop().create_task(self._deliver(topic, consumer, bound))
        else:
            bound.set()
        try:  # answered once the consumer's cursor exists: what is published from then on reaches it
            await asyncio.wait_for(bound.wait(), ATTACH_WAIT_S)
            answer = {"ok": True}
        except asyncio.TimeoutError:
            answer = {"ok": False, "error": "storage did not answer; delivery starts once it does"}
        if msg.reply:
            await msg.respond(json.dumps(answer).encode())

    async def _deliver(self, topic: str, consumer: str, bound: asyncio.Event) -> None:
        """Pull the consumer's messages from its cursor and deliver them here, until the topic is
        released (`stop`) or the consumer attaches elsewhere (its pulls then go unanswered here)."""
        subject = f"{DELIVER}.{topic}.{consumer}"
        while True:
            try:
                await self.ensure_stream(topic)
                sub = await self.js.pull_subscribe(
                    f"{STORED}.{topic}", durable=consumer_name(consumer), stream=stream_name(topic),
                    config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S,
                                          deliver_policy=DeliverPolicy.NEW, max_ack_pending=10_000))
                break
            except Exception as error:  # noqa: BLE001 - storage not reachable yet: try again
                self.agent.event("consumer_bind_failed", topic=topic, consumer=consumer,
                                 error=f"{type(error).__name__}: {error}")
                await asyncio.sleep(0.5)
        bound.set()
        while True:
            try:
                messages = await sub.fetch(batch=256, timeout=1.0)
            except asyncio.TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - a storage node changing leaders: pull again
                await asyncio.sleep(0.1)
                continue
            for m in messages:
                await self.agent.nc.publish(subject, m.data, headers={ACK_HEADER: m.reply})
            self.counters["delivered"] += len(messages)

    def released(self, topic: str) -> None:
        """The topic left this broker: stop delivering it (what was not acknowledged comes again
        from the next broker)."""
        for key in [k for k in self.pullers if k[0] == topic]:
            self.pullers.pop(key).cancel()

    async def _on_ack(self, msg) -> None:
        subject = msg.data.decode(errors="replace")
        if not subject.startswith(JS_ACK_PREFIX) or any(c in subject for c in "*> \r\n"):
            return
        self.counters["acks"] += 1
        await self.nc.publish(subject, b"+ACK")


def _placed_at(info) -> str | None:
    """The site a stream's placement tags name (None: placed without a site tag)."""
    placement = info.config.placement
    for tag in (placement.tags or []) if placement else []:
        if tag.startswith(SITE_TAG):
            return tag[len(SITE_TAG):]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="wait until a storage cluster serves JetStream (run in a node)")
    parser.add_argument("--wait", required=True, help="storage nodes, nats://ip:4222,...")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    try:
        took = asyncio.run(wait_ready(args.wait.split(","), args.timeout))
    except Exception as error:  # noqa: BLE001 - said on the one line the harness reads
        print(f"failed: {type(error).__name__}: {error}", flush=True)
        return 1
    print(f"ready {took:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
