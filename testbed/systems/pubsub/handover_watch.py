"""A client process's handover detection (beyond the paper: testbed.policies.handover). The clients
of a process live on one node and share its coordinate (`client.shared_query`), so one watch polls
it every `poll_s`; when it moved by more than `min_change_s` since the watch last acted (a handover:
the new zone's NC proxy answers), every client reports at once, at most once per `min_interval_s`."""

from __future__ import annotations

import asyncio
import inspect
import time

from testbed.policies.distance import Distance
from testbed.policies.handover import EarlyReports, HandoverTrigger, coordinate_change, coordinate_moved
from testbed.policies.snapshot import coord_from_dict


class HandoverWatch:
    def __init__(self, node: str, clients: list, trigger: HandoverTrigger, distance: Distance, events):
        self.node, self.clients, self.trigger, self.distance, self.events = node, clients, trigger, distance, events
        self.limit = EarlyReports(trigger.min_interval_s)
        self.reference = None  # the coordinate the clients last reported early (or the first one seen)
        self.triggered = 0

    async def _coordinate(self):
        fetch = self.clients[0].coord_fn if self.clients else None
        if fetch is None:
            return None
        try:
            value = fetch()
            if inspect.isawaitable(value):
                value = await value
        except Exception:  # noqa: BLE001 - a proxy that does not answer: the next poll asks again
            return None
        return coord_from_dict(value) if isinstance(value, dict) else value

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.trigger.poll_s)
            now = await self._coordinate()
            if now is None:
                continue
            if self.reference is None:
                self.reference = now
                continue
            if not coordinate_moved(self.reference, now, self.trigger.min_change_s, self.distance):
                continue
            if not self.limit.allow(time.monotonic()):
                continue
            moved = coordinate_change(self.reference, now, self.distance)
            self.reference = now
            self.triggered += 1
            await asyncio.gather(*(c.report_now() for c in self.clients), return_exceptions=True)
            self.events.add("handover_detected", node=self.node, moved_ms=round(1e3 * moved, 3),
                            clients=len(self.clients))
