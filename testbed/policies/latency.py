"""The paper's latency formulas (section 3.2, 3.4.1, Table 1) on Serf coordinates: pure functions.

Every function takes the reading of d explicitly (`distance`, a `testbed.policies.distance.Distance`:
`one_way` = Serf's RTT estimate / 2, `rtt` = Serf's distance as the paper writes it) and returns
seconds in that reading. With `one_way`, E(t) = max_p d(p, b) + max_c d(c, b) estimates the one-way
end-to-end pub/sub latency producer -> broker -> consumer, which is what the testbed measures
(receive_time - send_time, every node shares the host's clock); with `rtt` it is the paper's E(t)
read literally (see testbed.policies.distance).

W(t) uses `deviation` rather than the literal d(NC(p), NCP(t)) (they agree when heights and
adjustments are zero): see its docstring for why Serf's heights make the difference.

Topics with no producers (or no consumers) have no centroid on that side: that side contributes 0
to W(t), E(t) and W(t, b), so a one-sided topic is still ranked by its distance to the clients it has.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from testbed.nc.coordinate import Coordinate
from testbed.policies.distance import Distance
from testbed.policies.snapshot import ClientNC, TopicReport


def _coord(x: Coordinate | ClientNC) -> Coordinate:
    return x.coord if isinstance(x, ClientNC) else x


def centroid(coords: Iterable[Coordinate | ClientNC]) -> Coordinate:
    """NC(I) of Table 1: the mean of the vectors, heights, adjustments and errors.

    Serf's distance is ||v1 - v2|| + h1 + h2 (+ adj1 + adj2): the vector is the position in the
    Euclidean core, the height the part of the latency a node adds on every path (its access link),
    the adjustment a per-node correction. Averaging the vectors gives the geometric centre;
    averaging the heights and adjustments too keeps the clients' typical access latency in the
    centroid, so d(centroid, broker) is close to the mean of d(client, broker) instead of leaving
    every client's access link out (a centroid with zero height would underestimate every distance
    by the mean height). The error is averaged only so the result is a complete Coordinate; Serf's
    distance does not use it.
    """
    items = [_coord(c) for c in coords]
    if not items:
        raise ValueError("the centroid of no coordinates is undefined")
    dims = {len(c.vec) for c in items}
    if len(dims) != 1:
        raise ValueError("coordinates of different dimensions")
    n = len(items)
    vec = tuple(sum(c.vec[i] for c in items) / n for i in range(dims.pop()))
    return Coordinate(vec, sum(c.error for c in items) / n, sum(c.adjustment for c in items) / n,
                      sum(c.height for c in items) / n)


def _max_d(coords: Sequence[Coordinate], to: Coordinate, distance: Distance) -> float:
    return max((distance(c, to) for c in coords), default=0.0)


def deviation(client: Coordinate | ClientNC, center: Coordinate, *, distance: Distance) -> float:
    """How much farther (seconds, in the reading `distance`) `client` can be from any broker than
    `center` is: the reading of ||v_client - v_center|| + (h_client - h_center) + (adj_client - adj_center).

    For any broker b, d(client, b) <= d(center, b) + deviation(client, center) (triangle inequality
    on the vectors; the broker's height and adjustment cancel; exact as long as Serf does not drop
    the adjustments, which it does only when the adjusted distance would not be positive). With zero
    heights and adjustments it is d(client, center), the paper's formula. With Serf's heights the
    paper's d(client, center) would count the client's and the centroid's heights (access links)
    although neither lies on the path to a broker twice: a topic with one producer and one consumer
    would get W(t) = h_p + h_c instead of 0, and W(t, b) would exceed E(t) through b by that much.
    """
    c = _coord(client)
    return distance.of_rtt(math.dist(c.vec, center.vec) + (c.height - center.height)
                           + (c.adjustment - center.adjustment))


def deviation_w(producers: Sequence[Coordinate | ClientNC], consumers: Sequence[Coordinate | ClientNC], *,
                distance: Distance, literal: bool = False) -> float:
    """W(t) = max_p dev(NC(p), NCP(t)) + max_c dev(NC(c), NCC(t)), seconds.

    dev is `deviation` (the default), which makes W(t, b) an upper bound of the worst pair through b
    (so ePulsar never calls a broker feasible that AllPairs would not) and exact when all clients of
    a side share one coordinate; `literal=True` uses the paper's d(NC(p), NCP(t)) as written. Both
    are equal when heights and adjustments are zero.
    """
    ps, cs = [_coord(p) for p in producers], [_coord(c) for c in consumers]
    return _w(ps, cs, centroid(ps) if ps else None, centroid(cs) if cs else None, distance, literal)


def _w(ps: Sequence[Coordinate], cs: Sequence[Coordinate], ncp: Coordinate | None, ncc: Coordinate | None,
       distance: Distance, literal: bool) -> float:
    def dev(client: Coordinate, center: Coordinate) -> float:
        return distance(client, center) if literal else deviation(client, center, distance=distance)

    w = max(dev(p, ncp) for p in ps) if ps else 0.0
    return w + (max(dev(c, ncc) for c in cs) if cs else 0.0)


def worst_case_e(producers: Sequence[Coordinate | ClientNC], consumers: Sequence[Coordinate | ClientNC],
                 broker: Coordinate, *, distance: Distance) -> float:
    """E(t) = max_p d(NC(p), NC(P[t])) + max_c d(NC(c), NC(P[t])), seconds."""
    return (_max_d([_coord(p) for p in producers], broker, distance)
            + _max_d([_coord(c) for c in consumers], broker, distance))


def expected_w_tb(report: TopicReport, broker_coord: Coordinate, *, distance: Distance) -> float:
    """W(t, b) = d(NCP(t), NC(b)) + d(NCC(t), NC(b)) + W(t), from the topic's aggregates only (W(t)
    as reported, which must be in the same reading)."""
    w = report.w
    if report.ncp is not None:
        w += distance(report.ncp, broker_coord)
    if report.ncc is not None:
        w += distance(report.ncc, broker_coord)
    return w


def aggregate(topic: str, broker: str, broker_coord: Coordinate | None, producers: Sequence[Coordinate | ClientNC],
              consumers: Sequence[Coordinate | ClientNC], rate_in: float = 0.0, rate_out: float = 0.0, *,
              distance: Distance, literal: bool = False) -> TopicReport:
    """What broker `broker` reports for `topic` from its clients' coordinates (paper 3.2); `literal`
    as in `deviation_w`. Without the broker's coordinate E(t) is unknown: NaN."""
    ps, cs = [_coord(p) for p in producers], [_coord(c) for c in consumers]
    ncp, ncc = centroid(ps) if ps else None, centroid(cs) if cs else None
    e = worst_case_e(ps, cs, broker_coord, distance=distance) if broker_coord is not None else float("nan")
    return TopicReport(topic=topic, broker=broker, rate_in=float(rate_in), rate_out=float(rate_out),
                       producers=len(ps), consumers=len(cs), ncp=ncp, ncc=ncc,
                       w=_w(ps, cs, ncp, ncc, distance, literal), e=e)


def allpairs_worst(producers: Sequence[Coordinate | ClientNC], consumers: Sequence[Coordinate | ClientNC],
                   broker_coord: Coordinate, *, distance: Distance) -> float:
    """The AllPairs baseline's estimate: max over producer-consumer pairs of d(p, b) + d(b, c), seconds.

    The pair latency is a sum of a producer term and a consumer term, so the worst pair is the worst
    producer with the worst consumer: computed as max_p + max_c in O(P + C) rather than O(P * C). It
    equals E(t) through broker b on the individual coordinates; AllPairs differs from ePulsar in
    using every client's coordinate instead of the centroids and W(t). With one side empty, the
    other side's worst term (as E(t)).
    """
    return worst_case_e(producers, consumers, broker_coord, distance=distance)
