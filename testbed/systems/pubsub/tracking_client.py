"""Message tracking at a client (Jun and Astley; the broker's part is `tracker`): a publisher stamps
every message with a tracking id from a clock the broker's tracker keeps in step, and a subscriber
tells the tracker when it attaches to and leaves a broker, so the tracker's maps know who got what."""

from __future__ import annotations

import json
import time

from testbed.systems.pubsub.feature import ClientFeature
from testbed.tracking.msgid import IdClock

# A subscriber tells its broker's tracker when it attaches and leaves, and the tracker tells a
# publisher its clock's correction.
TRACK_ATTACH, TRACK_DETACH, TRACK_SKEW, TRACK_TIME = ("_ep.track.attach", "_ep.track.detach", "_ep.track.skew",
                                                     "_ep.track.time")
TIME_TIMEOUT_S = 1.0


class TrackedPublishing(ClientFeature):
    """`clock_offset_s`: how far this publisher's id clock is off the broker's (a test's injected
    skew, which the broker's tracker corrects)."""

    def __init__(self, clock_offset_s: float = 0.0):
        self.clock_offset_s = clock_offset_s
        self.client = None
        self.ids: IdClock | None = None

    def message_field(self, broker: str) -> str:
        """The tracking id as the message leaves through `broker` ("r" in its header line)."""
        return f',"r":"{self.ids.next(broker, time.time()).hex()}"'

    def bind(self, client) -> None:
        super().bind(client)
        self.ids = IdClock(client.name, self.clock_offset_s)

    async def attach(self, client, ep) -> None:
        # The skew adjustment (Jun and Astley, 3.2): initialised from the broker's clock at connection time,
        # then corrected by the broker's tracker whenever a timestamp is out of its tolerance.
        ep.subs.append(await ep.nc.subscribe(f"{TRACK_SKEW}.{client.name}", cb=self._on_skew))
        try:
            asked = time.time()
            reply = await ep.nc.request(TRACK_TIME, b"", timeout=TIME_TIMEOUT_S)
            self.ids.sync(float(json.loads(reply.data)["t_ms"]), (asked + time.time()) / 2)
        except Exception as error:  # noqa: BLE001 - no tracker answered: corrections will come per message
            client.events.add("clock_sync_failed", client=client.name, broker=ep.broker, error=type(error).__name__)

    async def _on_skew(self, msg) -> None:
        try:
            self.ids.adjust(int(json.loads(msg.data)["adjust_ms"]))
        except (ValueError, KeyError, TypeError):
            return
        self.client.events.add("skew_corrected", client=self.client.name, delta_ms=self.ids.delta_ms)


class TrackedSubscription(ClientFeature):
    """Told before subscribing (the tracker learns of us before any message reaches us) and after
    unsubscribing (no message reaches us after it)."""

    async def attach(self, client, ep) -> None:
        await ep.nc.publish(TRACK_ATTACH, _attachment(client))
        await ep.nc.flush()

    async def detach(self, client, ep) -> None:
        try:
            await ep.subs[-1].unsubscribe()  # the data subscription, taken last (`Subscriber._on_attach`)
            await ep.nc.flush(timeout=5)
            await ep.nc.publish(TRACK_DETACH, _attachment(client))
        except Exception:  # noqa: BLE001 - the old broker may be gone; its map keeps us (a superset)
            pass


def _attachment(client) -> bytes:
    return json.dumps({"subscriber": client.name, "topic": client.topic}).encode()
