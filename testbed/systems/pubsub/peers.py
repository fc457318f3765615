"""Connections from one process to other brokers' nats-servers: the broker agent's (forwarding,
bridging, acquire at the new owner) and the lookup service's (acquire commands, probes). One per
address, shared by concurrent callers, and made ahead for every registered broker, as Pulsar's
brokers keep their admin clients: a migration or a failover then waits for no TCP and NATS
handshake over the WAN (one measured failover spent 240 ms of its 950 ms in one)."""

from __future__ import annotations

import asyncio

from testbed.systems.pubsub.client import connect_nats


class Peers:
    def __init__(self, name: str):
        self.name = name  # the connection name the servers see
        self.connections: dict[str, object] = {}
        self._connecting: dict[str, asyncio.Future] = {}

    async def get(self, address: str):
        """The connection to `address`, made now if there is none (one attempt for all who ask)."""
        nc = self.connections.get(address)
        if nc is not None and not nc.is_closed:
            return nc
        if address not in self._connecting:
            self._connecting[address] = asyncio.ensure_future(connect_nats(address, name=self.name))
        try:
            nc = await asyncio.shield(self._connecting[address])
        finally:
            self._connecting.pop(address, None)
        self.connections[address] = nc
        return nc

    def warm(self, addresses, spawn, unreachable=lambda address, error: None) -> None:
        """Connect ahead to each of `addresses` not connected or connecting yet, in tasks made by
        `spawn`; `unreachable(address, error)` for one that fails (a broker that is gone)."""
        async def quietly(address: str) -> None:
            try:
                await self.get(address)
            except Exception as error:  # noqa: BLE001 - reported; whoever needs it later tries again
                unreachable(address, error)
        for address in addresses:
            if address and address not in self.connections and address not in self._connecting:
                spawn(quietly(address))

    async def close(self) -> None:
        for nc in self.connections.values():
            try:
                await nc.close()
            except Exception:  # noqa: BLE001 - closing on the way out
                pass
