"""A client of Serf's RPC protocol (msgpack over TCP).

Only what the testbed needs: handshake, `members`, `get-coordinate`. The coordinate value type and
its distance live in `testbed.nc.coordinate`, so pure code can use them without an RPC client.
"""

from __future__ import annotations

import socket

import msgpack

from testbed.nc.coordinate import Coordinate

RPC_PORT = 7373


class SerfError(RuntimeError):
    """The agent answered with an error, or did not answer."""


class SerfRPC:
    """One connection to an agent's RPC listener (127.0.0.1:7373 inside the agent's node)."""

    def __init__(self, host: str = "127.0.0.1", port: int = RPC_PORT, timeout: float = 5.0,
                 connect=socket.create_connection):
        """`connect(address, timeout)` opens the TCP connection: the harness passes one that does so
        inside the agent's node (`testbed.emulation.netns.connect_in`); inside a node, the default."""
        self._sock = connect((host, port), timeout)
        self._unpacker = msgpack.Unpacker(raw=False)
        self._seq = 0
        self._call("handshake", {"Version": 1})

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SerfRPC:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _next(self):
        while True:
            for item in self._unpacker:
                return item
            chunk = self._sock.recv(65536)
            if not chunk:
                raise SerfError("agent closed the RPC connection")
            self._unpacker.feed(chunk)

    def _call(self, command: str, body: dict | None = None, has_body: bool = False):
        seq, self._seq = self._seq, self._seq + 1
        payload = msgpack.packb({"Command": command, "Seq": seq})
        if body is not None:
            payload += msgpack.packb(body)
        self._sock.sendall(payload)
        header = self._next()
        if header.get("Error"):
            raise SerfError(f"{command}: {header['Error']}")
        if header.get("Seq") != seq:
            raise SerfError(f"{command}: answer out of sequence ({header.get('Seq')} != {seq})")
        return self._next() if has_body else None

    def members(self) -> list[dict]:
        return self._call("members", has_body=True)["Members"]

    def coordinate(self, node: str) -> Coordinate | None:
        answer = self._call("get-coordinate", {"Node": node}, has_body=True)
        return Coordinate.from_rpc(answer["Coord"]) if answer.get("Ok") else None
