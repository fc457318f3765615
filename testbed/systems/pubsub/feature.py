"""The hooks a topic feature plugs into the pub/sub client and broker: durable topics
(`durable_client`, `durable.DurableTopics`) and message tracking (`tracking_client`) are objects
with these methods, not branches in `client` and `broker`. Every hook's default does nothing; a
feature overrides the ones its protocol needs, and a client or broker calls them in list order.

A feature is chosen per client by what starts it (`workloads.client_features`), so a client without
any pays nothing on its per-message path: the two hooks that sit on that path (`publish`,
`subscription`) replace the plain path once, when the client is built, instead of being asked per
message."""

from __future__ import annotations


class ClientFeature:
    """One feature's part in one publisher or subscriber (`client.TopicClient`)."""

    publish = None  # async (client, ep, seq, due) -> None: how this feature's messages leave (None: plain)
    message_field = None  # (broker) -> str: a JSON member appended to every message's header line

    def bind(self, client) -> None:
        """The client this feature is part of, once it is built (one feature object per client)."""
        self.client = client

    async def started(self, client) -> None:
        """After the client's first attachment: background work (`client._spawn`)."""

    async def attach(self, client, ep) -> None:
        """A new connection `ep`: before a subscriber subscribes to the topic's data."""

    def subscription(self, client, ep) -> tuple[str, object] | None:
        """The subject and callback a subscriber takes its data from, if this feature changes them."""
        return None

    async def subscribed(self, client, ep) -> None:
        """A subscriber's data subscription at `ep` is in place."""

    async def detach(self, client, ep) -> None:
        """The client is leaving `ep` (a move, a lost broker or the end): before its connection drains."""

    async def handover(self, client, old, new) -> None:
        """A move: what this feature still owes goes to `new`, before `new` becomes the endpoint in use."""

    def summary(self) -> dict:
        """Members this feature adds to the client's summary."""
        return {}

    def close(self) -> None:
        """The client closed: files this feature keeps."""


class BrokerFeature:
    """One feature's part in a broker agent (`broker.Broker`)."""

    name = ""  # its member in the broker's status answer

    async def start(self, owned: list[str]) -> None:
        """The broker registered and owns `owned` (topics adopted after a restart)."""

    def acquired(self, topic: str) -> None:
        """The broker now owns `topic` (a move to it, or a first placement)."""

    def released(self, topic: str) -> None:
        """`topic` left this broker."""

    def status(self) -> dict:
        return {}

    async def close(self) -> None:
        """The broker is stopping."""
