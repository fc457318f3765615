"""Clients attached to a broker the system chose, with no lookup service: where a node's clients
attach first and how they follow the node to another zone. The public API a system built on NATS
reuses (the NATS cluster baseline, testbed/systems/natscluster): the harness writes an `AttachPlan`
(which broker serves each site and each NC proxy's clients), a workload process is started with
`--attach PLAN.json` instead of `--lookup`, builds its clients with `owner=first_broker(...)` and runs
an `AttachWatch` that moves them (`TopicClient.move_to`) when the proxy answering the node changes.

NATS's own practice is that a client connects to a nearby server of the cluster and reconnects to
another when it moves; the plan says which one is "nearby": the broker of the node's zone (`home`)
or the broker nearest the zone's NC proxy by network coordinate (`nearest`)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

ATTACH_POLL_S = 1.0  # how often a mobile node asks which zone's proxy answers it


@dataclass(frozen=True)
class AttachPlan:
    """Which broker (name, nats:// address) serves the clients of each site and of each NC proxy."""

    mode: str  # how the plan was made: home (the zone's broker) or nearest (by coordinate)
    by_site: dict[str, tuple[str, str]] = field(default_factory=dict)
    by_proxy: dict[str, tuple[str, str]] = field(default_factory=dict)
    poll_s: float = ATTACH_POLL_S

    def to_json(self) -> str:
        return json.dumps({"mode": self.mode, "by_site": self.by_site, "by_proxy": self.by_proxy,
                           "poll_s": self.poll_s})

    @classmethod
    def read(cls, path: str | Path) -> AttachPlan:
        data = json.loads(Path(path).read_text())
        return cls(data["mode"], {k: tuple(v) for k, v in data["by_site"].items()},
                   {k: tuple(v) for k, v in data["by_proxy"].items()}, float(data.get("poll_s", ATTACH_POLL_S)))

    def for_proxy(self, proxy: str, site: str) -> tuple[str, str]:
        """The broker for clients answered by `proxy`, else their site's."""
        if proxy in self.by_proxy:
            return self.by_proxy[proxy]
        if site in self.by_site:
            return self.by_site[site]
        raise LookupError(f"attach plan ({self.mode}): no broker for proxy {proxy!r} nor site {site!r}")


async def answering_proxy(timeout: float = 2.0, netns: int | None = None) -> str | None:
    """The NC proxy that answers this node now (its zone's), or None when none does (`netns`: in a
    client host, the node's process, whose network namespace the query leaves from)."""
    from testbed.nc import proxy
    from testbed.systems.pubsub.client import in_node

    try:
        return (await asyncio.to_thread(in_node(lambda: proxy.query(timeout=timeout), netns)))["proxy"]
    except (TimeoutError, OSError, ValueError, KeyError):
        return None


async def first_broker(plan: AttachPlan, site: str, mobile: bool, netns: int | None = None) -> tuple[str, str]:
    """Where a node's clients attach at their start: a mobile node's by the proxy answering it,
    a fixed node's (or one no proxy answers) by its site."""
    proxy = await answering_proxy(netns=netns) if mobile else None
    return plan.for_proxy(proxy or "", site)


class AttachWatch:
    """A mobile node's clients follow it: every `plan.poll_s` the zone's NC proxy is asked who it is;
    when the broker it maps to is not the one in use, every client moves there (make before break)."""

    def __init__(self, node: str, clients: list, plan: AttachPlan, site: str, events, netns: int | None = None):
        self.node, self.clients, self.plan, self.site, self.events = node, clients, plan, site, events
        self.netns = netns
        self.moves = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.plan.poll_s)
            proxy = await answering_proxy(netns=self.netns)
            if proxy is None:
                continue
            broker, address = self.plan.for_proxy(proxy, self.site)
            if all(c.attached_to is None or c.attached_to[1] == address for c in self.clients):
                continue
            self.moves += 1
            self.events.add("reattach", node=self.node, proxy=proxy, to=broker, mode=self.plan.mode,
                            clients=len(self.clients))
            await asyncio.gather(*(c.move_to(broker, address) for c in self.clients), return_exceptions=True)
