"""What brokers report and what the topic manager decides: small frozen dataclasses shared by the
live control plane (reports go through ZooKeeper as JSON) and the offline assessment.

Times are in seconds, rates in messages per second, resource use as a fraction of capacity (0..1).
A coordinate is written as {"vec": [...], "height": h, "adjustment": a, "error": e}, the same keys
as the coordinate snapshots of testbed.nc.snapshots.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from testbed.nc.coordinate import Coordinate
from testbed.policies.distance import Distance, get_distance


def coord_to_dict(c: Coordinate | None) -> dict | None:
    if c is None:
        return None
    return {"vec": list(c.vec), "height": c.height, "adjustment": c.adjustment, "error": c.error}


def coord_from_dict(data: dict | None) -> Coordinate | None:
    """Accepts this module's keys and Serf's RPC keys (Vec, Height, Adjustment, Error)."""
    if data is None:
        return None
    if "Vec" in data:
        return Coordinate.from_rpc(data)
    return Coordinate(tuple(float(v) for v in data["vec"]), float(data.get("error", 0.0)),
                      float(data.get("adjustment", 0.0)), float(data.get("height", 0.0)))


class _Json:
    """to_json/from_json on top of each class's to_dict/from_dict."""

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)  # type: ignore[attr-defined]

    @classmethod
    def from_json(cls, text: str | bytes):
        return cls.from_dict(json.loads(text))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ClientNC(_Json):
    """One client's coordinate as it reports it to the broker of its topic."""

    name: str
    coord: Coordinate

    def to_dict(self) -> dict:
        return {"name": self.name, "coord": coord_to_dict(self.coord)}

    @classmethod
    def from_dict(cls, data: dict) -> ClientNC:
        return cls(data["name"], coord_from_dict(data["coord"]))


@dataclass(frozen=True)
class TopicClients(_Json):
    """The individual coordinates of a topic's clients: only the AllPairs baseline needs them (its
    monitoring traffic grows with the number of clients, which is what ePulsar's aggregation avoids)."""

    producers: tuple[ClientNC, ...]
    consumers: tuple[ClientNC, ...]

    def to_dict(self) -> dict:
        return {"producers": [c.to_dict() for c in self.producers], "consumers": [c.to_dict() for c in self.consumers]}

    @classmethod
    def from_dict(cls, data: dict) -> TopicClients:
        return cls(tuple(ClientNC.from_dict(c) for c in data["producers"]),
                   tuple(ClientNC.from_dict(c) for c in data["consumers"]))


@dataclass(frozen=True)
class TopicReport(_Json):
    """What a broker reports per hosted topic (paper 3.2); its size does not depend on the client count.

    rate_in / rate_out: messages/s received from producers / delivered to consumers.
    ncp / ncc: centroids of the producers' / consumers' coordinates (None when there are none).
    w: W(t), the maximum deviation from the centroids; e: E(t), the worst-case end-to-end latency
    through this broker (both in seconds, in the reading of d the broker runs with: the scenario's
    `control.distance`, see testbed.policies.distance).
    """

    topic: str
    broker: str
    rate_in: float
    rate_out: float
    producers: int
    consumers: int
    ncp: Coordinate | None
    ncc: Coordinate | None
    w: float
    e: float
    throughput_in: float = 0.0  # bytes/s received from producers (rate x message size, as clients report)
    throughput_out: float = 0.0  # bytes/s delivered to consumers

    @property
    def load(self) -> float:
        """Rout(t) of paper 3.4.3: the topic's incoming plus outgoing message rate."""
        return self.rate_in + self.rate_out

    def to_dict(self) -> dict:
        return {"topic": self.topic, "broker": self.broker, "rate_in": self.rate_in, "rate_out": self.rate_out,
                "producers": self.producers, "consumers": self.consumers, "ncp": coord_to_dict(self.ncp),
                "ncc": coord_to_dict(self.ncc), "w": self.w, "e": self.e, "throughput_in": self.throughput_in,
                "throughput_out": self.throughput_out}

    @classmethod
    def from_dict(cls, data: dict) -> TopicReport:
        return cls(data["topic"], data["broker"], float(data["rate_in"]), float(data["rate_out"]),
                   int(data["producers"]), int(data["consumers"]), coord_from_dict(data.get("ncp")),
                   coord_from_dict(data.get("ncc")), float(data["w"]), float(data["e"]),
                   float(data.get("throughput_in", 0.0)), float(data.get("throughput_out", 0.0)))


@dataclass(frozen=True)
class BrokerReport(_Json):
    """A broker's periodic report: its coordinate, resource use (fractions), output rate, topics.
    `network` is bytes in + out over the link's capacity (ePulsar's one network figure);
    `network_in` / `network_out` each direction over it (Pulsar's bandwidth in and out)."""

    broker: str
    coord: Coordinate
    cpu: float = 0.0
    memory: float = 0.0
    network: float = 0.0
    rate_out: float = 0.0
    topics: tuple[TopicReport, ...] = ()
    network_in: float = 0.0
    network_out: float = 0.0

    @property
    def load(self) -> float:
        """Total message rate (in + out) of the reported topics."""
        return sum(t.load for t in self.topics)

    def to_dict(self) -> dict:
        return {"broker": self.broker, "coord": coord_to_dict(self.coord), "cpu": self.cpu, "memory": self.memory,
                "network": self.network, "rate_out": self.rate_out, "topics": [t.to_dict() for t in self.topics],
                "network_in": self.network_in, "network_out": self.network_out}

    @classmethod
    def from_dict(cls, data: dict) -> BrokerReport:
        return cls(data["broker"], coord_from_dict(data["coord"]), float(data.get("cpu", 0.0)),
                   float(data.get("memory", 0.0)), float(data.get("network", 0.0)), float(data.get("rate_out", 0.0)),
                   tuple(TopicReport.from_dict(t) for t in data.get("topics", ())), float(data.get("network_in", 0.0)),
                   float(data.get("network_out", 0.0)))


@dataclass(frozen=True)
class Snapshot(_Json):
    """The topic manager's input M and P0: every broker's latest report, the current placement
    (topic -> broker, as ZooKeeper records ownership), each topic's threshold Lth(t) in seconds, and
    the reading of d (`distance`) that the reports' E(t) and W(t) are in and that the policies rank
    with (always given: a snapshot read with another reading than its reports would compare
    one-way latencies with round trips)."""

    brokers: dict[str, BrokerReport]
    placement: dict[str, str]
    thresholds: dict[str, float] = field(default_factory=dict)
    # The last report of topics whose owner died: their clients' centroids still say where they
    # are, so the topic is re-placed near them rather than wherever a first lookup would put it.
    carried: dict[str, TopicReport] = field(default_factory=dict)
    distance: Distance = field(kw_only=True)

    def report(self, topic: str) -> TopicReport | None:
        """The topic's report from the broker that owns it (else from any broker that reports it)."""
        return self.reports().get(topic)

    def reports(self) -> dict[str, TopicReport]:
        """topic -> its report (the owner's when several brokers report it, e.g. during a migration).
        Computed once per snapshot (a snapshot is not changed after it is built)."""
        cached = self.__dict__.get("_reports")
        if cached is None:
            cached = dict(self.carried)
            for broker in self.brokers.values():
                for report in broker.topics:
                    if report.topic not in cached or self.placement.get(report.topic) == broker.broker:
                        cached[report.topic] = report
            object.__setattr__(self, "_reports", cached)
        return cached

    def to_dict(self) -> dict:
        return {"brokers": {name: b.to_dict() for name, b in self.brokers.items()}, "placement": dict(self.placement),
                "thresholds": dict(self.thresholds), "distance": self.distance.name}

    @classmethod
    def from_dict(cls, data: dict) -> Snapshot:
        return cls({name: BrokerReport.from_dict(b) for name, b in data["brokers"].items()}, dict(data["placement"]),
                   {t: float(v) for t, v in data.get("thresholds", {}).items()},
                   distance=get_distance(data["distance"]))


@dataclass(frozen=True)
class Migration(_Json):
    """Move `topic` from `source` to `target` (one reconfiguration command of Algorithm 1)."""

    topic: str
    source: str
    target: str

    def to_dict(self) -> dict:
        return {"topic": self.topic, "source": self.source, "target": self.target}

    @classmethod
    def from_dict(cls, data: dict) -> Migration:
        return cls(data["topic"], data["source"], data["target"])


@dataclass
class Decision:
    """One control round's moves and what to report about them (JSON-ready dicts with a "type")."""

    migrations: list[Migration] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
