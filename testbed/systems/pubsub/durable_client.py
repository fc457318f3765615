"""Durable topics at a client (paper 3.5; the broker's part is `durable.DurableTopics`): a producer's
message counts once the broker acknowledges it stored, and is resent until it is; a consumer takes
its messages from its cursor and acknowledges each one (the protocol: `durable`'s docstring)."""

from __future__ import annotations

import asyncio
import functools
import json
import random
import time
from pathlib import Path

from testbed.procs import percentile
from testbed.systems.pubsub.durable import ACK, ACK_HEADER, ATTACH, DELIVER, MSG_ID_HEADER, PUBLISH
from testbed.systems.pubsub.feature import ClientFeature

RESEND_S = 3.0  # a durable message not acknowledged this long is sent again (to the broker in use)
ATTACH_TIMEOUT_S = 5.0


class DurablePublishing(ClientFeature):
    """A producer of a durable topic. `acks`: one CSV row per acknowledged message (topic, producer,
    seq, sent, acked), the record `bench-durable` reads."""

    def __init__(self, acks: Path | None = None):
        self.client = None
        # (due, first sent, last sent) of every message not acknowledged yet; resent until it is
        self.unacked: dict[int, list[float]] = {}
        self.acked = self.resent = 0
        self.last_acked = -1
        self.ack_latencies: list[float] = []
        self._inbox = f"_INBOX.ack.{random.getrandbits(64):016x}"
        self._acks_file = acks.open("a") if acks else None

    async def publish(self, client, ep, seq: int, due: float) -> None:
        now = time.time()
        entry = self.unacked.get(seq)
        if entry is None:
            self.unacked[seq] = [due, now, now]
        else:
            entry[2] = now
            self.resent += 1
        await ep.nc.publish(f"{PUBLISH}.{client.topic}", client.payload(seq, due, ep.broker),
                            reply=f"{self._inbox}.{seq}", headers={MSG_ID_HEADER: f"{client.name}:{seq}"})

    async def started(self, client) -> None:
        client._spawn(self._resend_loop())

    async def attach(self, client, ep) -> None:
        ep.subs.append(await ep.nc.subscribe(f"{self._inbox}.*", cb=self._on_ack))

    async def handover(self, client, old, new) -> None:
        """Messages not acknowledged yet go to `new` first (the stream drops the copies it has)."""
        for seq, (due, _first, _last) in sorted(self.unacked.items()):
            await self.publish(client, new, seq, due)

    async def _on_ack(self, msg) -> None:
        """The broker stored message `seq` (a quorum of its stream's replicas hold it)."""
        try:
            seq = int(msg.subject.rsplit(".", 1)[1])
        except ValueError:
            return
        entry = self.unacked.pop(seq, None)
        if entry is None:
            return  # a resend's second acknowledgement
        now = time.time()
        self.acked += 1
        self.last_acked = max(self.last_acked, seq)
        self.ack_latencies.append(now - entry[1])
        if self._acks_file is not None:
            self._acks_file.write(f"{self.client.topic},{self.client.name},{seq},{entry[1]!r},{now!r}\n")

    async def _resend_loop(self) -> None:
        """What the broker has not acknowledged within `RESEND_S` is sent again (the broker died, or
        the acknowledgement was lost); the stream drops the copies it already has."""
        while True:
            await asyncio.sleep(RESEND_S / 2)
            ep, now = self.client.current, time.time()
            if ep is None:
                continue
            for seq, (due, _first, last) in sorted(self.unacked.items()):
                if now - last > RESEND_S:
                    try:
                        await self.publish(self.client, ep, seq, due)
                    except Exception:  # noqa: BLE001 - a closing connection: the next broker gets them
                        break

    def summary(self) -> dict:
        return {"acked": self.acked, "unacked": len(self.unacked), "resent": self.resent,
                "ack_p50_s": percentile(self.ack_latencies, 0.5, "higher"),
                "ack_p99_s": percentile(self.ack_latencies, 0.99, "higher")}

    def close(self) -> None:
        if self._acks_file is not None:
            self._acks_file.close()


class DurableSubscription(ClientFeature):
    """A consumer of a durable topic: the broker delivers from this consumer's cursor once asked,
    each message with the storage's acknowledgement subject, which the consumer sends back."""

    def __init__(self):
        self.acks_sent = 0

    def subscription(self, client, ep) -> tuple[str, object]:
        return f"{DELIVER}.{client.topic}.{client.name}", functools.partial(self._deliver, client, ep)

    async def _deliver(self, client, ep, msg) -> None:
        if msg.headers and msg.headers.get(ACK_HEADER):  # acknowledged whatever it holds
            self.acks_sent += 1
            await ep.nc.publish(f"{ACK}.{client.topic}", msg.headers[ACK_HEADER].encode())
        await client._on_msg(ep, msg)

    async def subscribed(self, client, ep) -> None:
        try:
            reply = await ep.nc.request(f"{ATTACH}.{client.topic}", json.dumps({"consumer": client.name}).encode(),
                                        timeout=ATTACH_TIMEOUT_S)
            if not json.loads(reply.data).get("ok"):
                raise ValueError(reply.data.decode(errors="replace"))
        except Exception as error:  # noqa: BLE001 - recorded; the next attachment asks again
            client.events.add("durable_attach_failed", topic=client.topic, client=client.name, broker=ep.broker,
                              error=f"{type(error).__name__}: {error}")


def owes(subscriber, publisher) -> bool:
    """Whether an acknowledged message of `publisher` (same topic, same process) has not reached
    `subscriber` yet: the end of a run waits for these (`workloads.drain`)."""
    producing = publisher.feature(DurablePublishing)
    stats = subscriber.stats.get(publisher.name)
    if producing is None or producing.last_acked < 0 or stats is None:
        return False  # nothing acknowledged, or nothing of it ever owed here (subscribed after)
    if stats.last < producing.last_acked:
        return True
    return any(seq not in producing.unacked for seq in stats.missing if seq <= producing.last_acked)
