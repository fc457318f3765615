"""The NC proxy (paper section 4): a mobile client's network coordinate, served by its zone's gateway.

Mobile clients run no Serf agent (Vivaldi does not settle for moving nodes). They ask the NC proxy
of the zone they are attached to, which answers with its own Serf coordinate with the client-proxy
access latency added to the height. Every zone's proxy listens on the same anycast address, routed
by each site to its own proxy, so a client always reaches the proxy of the zone it is in now and
the answer changes when the client is relinked. The proxy measures the access latency itself: it
answers a query with probes, and the smallest probe round trip is the client-proxy RTT; Serf heights
are RTTs, so that RTT (less the proxy's own leg) goes into the height (see client_coordinate).

Protocol (JSON over UDP, port 7400): client {"op":"query","id":n} -> proxy {"op":"probe","id":n,"t":..}
-> client echoes it as "probe-ack" (three times) -> proxy {"op":"coord","id":n,"proxy":name,"access_s":..,"coord":{..}}.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from testbed.nc.coordinate import Coordinate
from testbed.nc.serf import SerfError, SerfRPC

NC_ANYCAST_IP = "10.255.255.253"
NC_PORT = 7400
REFRESH_S = 1.0
PROBES = 3  # the access latency is the smallest of a few probe round trips: processing noise only adds
RESEND_S = 0.25  # a client resends its query this often until answered (an answer takes PROBES round trips)


def _coord_dict(c: Coordinate) -> dict:
    return {"Vec": list(c.vec), "Error": c.error, "Adjustment": c.adjustment, "Height": c.height}


def client_coordinate(proxy: Coordinate, client_proxy_rtt: float) -> Coordinate:
    """The proxy's coordinate with the client's access latency in the height, in Serf's RTT units.

    The proxy's own height stands for its own leg to the site; the client's leg is the measured
    client-proxy RTT less that, so the height becomes RTT - h_proxy (never below the proxy's)."""
    return proxy.with_extra_height(max(0.0, client_proxy_rtt - 2 * proxy.height))


class ProxyService:
    """Serve this node's coordinate to mobile clients, with their access latency in the height."""

    def __init__(self, node: str, listen: str, port: int = NC_PORT):
        self.node = node
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((listen, port))
        self.coordinate: Coordinate | None = None
        self.fetched = 0.0
        self.answered = 0
        self.rejected = 0
        self.samples: dict[tuple, list[float]] = {}

    def _refresh(self) -> None:
        if time.monotonic() - self.fetched < REFRESH_S and self.coordinate is not None:
            return
        try:
            with SerfRPC() as rpc:
                self.coordinate = rpc.coordinate(self.node) or self.coordinate
            self.fetched = time.monotonic()
        except (OSError, SerfError):
            pass  # keep serving the last coordinate; the agent supervisor restarts the agent

    def handle(self, data: bytes, peer) -> None:
        try:
            message = json.loads(data)
            op, ident = message["op"], int(message["id"])
        except (ValueError, KeyError, TypeError):
            self.rejected += 1
            return
        if op == "query":
            reply = {"op": "probe", "id": ident, "t": time.monotonic()}
        elif op == "probe-ack":
            try:
                rtt = time.monotonic() - float(message["t"])
            except (KeyError, TypeError, ValueError):
                self.rejected += 1
                return
            key = (peer, ident)
            samples = self.samples.setdefault(key, [])
            samples.append(rtt)
            if len(samples) < PROBES:
                self.sock.sendto(json.dumps({"op": "probe", "id": ident, "t": time.monotonic()}).encode(), peer)
                return
            del self.samples[key]
            if len(self.samples) > 10_000:  # abandoned queries must not grow without bound
                self.samples.clear()
            self._refresh()
            if self.coordinate is None:
                return
            reply = {"op": "coord", "id": ident, "proxy": self.node, "access_s": min(samples) / 2,
                     "coord": _coord_dict(client_coordinate(self.coordinate, min(samples)))}
            self.answered += 1
        else:
            self.rejected += 1
            return
        self.sock.sendto(json.dumps(reply).encode(), peer)

    def serve_forever(self) -> None:
        while True:
            data, peer = self.sock.recvfrom(2048)
            self.handle(data, peer)


def query(proxy_ip: str = NC_ANYCAST_IP, port: int = NC_PORT, timeout: float = 1.0, ident: int = 1,
          resend_s: float = RESEND_S) -> dict:
    """Ask the zone's proxy for this client's coordinate; raises TimeoutError when nobody answers.
    The query is sent again every `resend_s` until an answer comes (UDP: a query or probe lost, or
    cut by a relink while in flight, would otherwise cost the whole timeout; the next zone's proxy
    answers the resent one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = json.dumps({"op": "query", "id": ident}).encode()
        now = time.monotonic()
        deadline, resend_at = now + timeout, now
        while now < deadline:
            if now >= resend_at:
                sock.sendto(request, (proxy_ip, port))
                resend_at = now + resend_s
            sock.settimeout(max(1e-3, min(deadline, resend_at) - now))
            try:
                data, peer = sock.recvfrom(2048)
            except socket.timeout:
                now = time.monotonic()
                continue
            now = time.monotonic()
            message = json.loads(data)
            if message.get("id") != ident:
                continue
            if message["op"] == "probe":
                sock.sendto(json.dumps({"op": "probe-ack", "id": ident, "t": message["t"]}).encode(), peer)
            elif message["op"] == "coord":
                message["coordinate"] = Coordinate.from_rpc(message["coord"])
                return message
    raise TimeoutError(f"no NC proxy answered at {proxy_ip}:{port}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NC proxy service (runs inside an NC proxy node)")
    parser.add_argument("--node", required=True, help="this node's Serf name")
    parser.add_argument("--listen", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=NC_PORT)
    parser.add_argument("--query", action="store_true", help="act as a client: query once and print JSON")
    args = parser.parse_args(argv)
    if args.query:
        answer = query(args.listen if args.listen != "0.0.0.0" else NC_ANYCAST_IP, args.port)
        answer.pop("coordinate")
        print(json.dumps(answer))
        return 0
    service = ProxyService(args.node, args.listen, args.port)
    print("ready", flush=True)
    try:
        service.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
