"""Per-topic monitoring at a broker (paper 3.2): clients' NC reports in, one TopicReport per topic out.

A broker keeps only the latest report of each live client of a topic and sends ZooKeeper the
aggregate (centroids, W, E, rates), so what it reports does not grow with the number of clients.
The AllPairs baseline (the paper's naive approach) needs every client's coordinate instead:
`topic_clients` lists them, and a broker agent run with `--report-clients` adds them to its report.
Reports are input from the network: anything malformed is rejected (and counted by the caller).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace

from testbed.nc.coordinate import Coordinate
from testbed.policies import latency
from testbed.policies.distance import Distance
from testbed.policies.snapshot import ClientNC, TopicClients, TopicReport, coord_from_dict

# The NC report subjects: `_ep.nc.<topic>` every period, `_ep.ncnow.<topic>` at once after a handover
# (the same report; testbed.policies.handover), after which the broker writes its monitoring report
# and tells the topic manager on HANDOVER_SUBJECT ({"broker", "topics"}).
NC_REPORT, NC_REPORT_NOW, HANDOVER_SUBJECT = "_ep.nc", "_ep.ncnow", "_ep.handover"


def parse_nc_report(data: bytes) -> tuple[str, str, Coordinate | None, float, float]:
    """(client, role, coordinate or None, rate in msg/s, bytes/s) of an NC report; ValueError if malformed."""
    try:
        message = json.loads(data)
        client, role, rate = message["client"], message["role"], float(message.get("rate", 0.0))
        byte_rate = float(message.get("bytes", 0.0))
        coord = message.get("coord")
        coord = coord_from_dict(coord) if coord is not None else None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not an NC report: {error}") from error
    if not isinstance(client, str) or not 0 < len(client) <= 64 or role not in ("producer", "consumer"):
        raise ValueError("client must be a name, role producer or consumer")
    if not all(math.isfinite(v) and v >= 0 for v in (rate, byte_rate)):
        raise ValueError("rate and bytes must be non-negative numbers")
    if coord is not None:
        check_coordinate(coord)
    return client, role, coord, rate, byte_rate


def check_coordinate(coord: Coordinate) -> Coordinate:
    """A client's coordinate from the network (NC report, lookup request): ValueError unless usable."""
    values = (*coord.vec, coord.height, coord.adjustment, coord.error)
    if not 0 < len(coord.vec) <= 64 or not all(math.isfinite(v) for v in values) or coord.height < 0:
        raise ValueError("coordinate out of range")
    return coord


@dataclass
class ClientEntry:
    """The latest NC report of one client of a topic."""

    role: str
    coord: Coordinate | None
    rate: float
    time: float
    byte_rate: float = 0.0


@dataclass
class Owned:
    """A topic this broker owns: its live clients."""

    since: float
    clients: dict[tuple[str, str], ClientEntry] = field(default_factory=dict)


def _coord_dims(coords: list[Coordinate]) -> list[Coordinate]:
    """Keep the coordinates of the most common dimension (mixed dimensions have no centroid)."""
    if not coords:
        return coords
    dims = [len(c.vec) for c in coords]
    common = max(set(dims), key=dims.count)
    return [c for c in coords if len(c.vec) == common]


def topic_report(topic: str, broker: str, me: Coordinate | None, state: Owned, stale_s: float,
                 distance: Distance) -> TopicReport:
    """The TopicReport of paper 3.2 from the latest report of every live client of the topic, E(t)
    and W(t) in the reading `distance` (the scenario's). Without the broker's own coordinate (or with
    one of another dimension than its clients') E(t) is unknown and reported as NaN."""
    now = time.time()
    for key in [k for k, v in state.clients.items() if now - v.time > stale_s]:
        del state.clients[key]
    entries = list(state.clients.values())
    ps = _coord_dims([e.coord for e in entries if e.role == "producer" and e.coord is not None])
    cs = _coord_dims([e.coord for e in entries if e.role == "consumer" and e.coord is not None])
    rate_in = sum(e.rate for e in entries if e.role == "producer")
    rate_out = sum(e.rate for e in entries if e.role == "consumer")
    dims = len((ps or cs)[0].vec) if (ps or cs) else None
    usable = me if me is not None and dims in (None, len(me.vec)) else None
    report = latency.aggregate(topic, broker, usable, ps, cs, rate_in, rate_out, distance=distance)
    return replace(report, producers=sum(e.role == "producer" for e in entries),
                   consumers=sum(e.role == "consumer" for e in entries),
                   throughput_in=sum(e.byte_rate for e in entries if e.role == "producer"),
                   throughput_out=sum(e.byte_rate for e in entries if e.role == "consumer"))


def topic_clients(state: Owned) -> TopicClients:
    """Every live client's own coordinate (what AllPairs needs; grows with the number of clients).
    Clients without a coordinate yet are left out. Call after `topic_report`, which drops stale clients."""
    def listed(role: str) -> tuple[ClientNC, ...]:
        return tuple(ClientNC(name, e.coord) for (name, r), e in sorted(state.clients.items())
                     if r == role and e.coord is not None)

    return TopicClients(listed("producer"), listed("consumer"))
