"""The load a scenario offers, and whether this machine has been measured to carry it.

A run whose harness cannot keep up reports the harness's backlog as the system's latency. Before a
run starts, `testbed show` and `testbed run` estimate what the scenario asks for (messages published
per second, deliveries per second, frames per second through the shaper) and compare it with the
capacity `make bench-capacity` measured on this machine (`results/bench/capacity.json`).

Pure: reads a validated Scenario and its topology (`testbed.topology.build`); what a workload offers
comes from its system (the `offered` hook of its manifest, testbed.plugin), the one home of its rules.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from testbed import plugin

if TYPE_CHECKING:  # hints only: the CLI reads CAPACITY_FILE without building the scenario model
    from testbed.scenario.model import Scenario
    from testbed.topology import Topology

CAPACITY_FILE = Path("results/bench/capacity.json")
UNMEASURED = "unmeasured: make bench-capacity"
# One frame carries at most this much TCP payload (1500 B MTU - IP and TCP headers with timestamps).
FRAME_PAYLOAD = 1448
# NATS protocol line (`MSG t.<topic> <sid> <len>`) and the client's JSON head (id, seq, due time,
# producer, site) in front of every message's payload.
MESSAGE_OVERHEAD = 200
# Relay crossings: publisher's access link, a site link, the broker's local link; the same three
# again from the broker to each subscriber.
CROSSINGS_PER_MESSAGE = 3
CROSSINGS_PER_DELIVERY = 3


def rate_per_publisher(scenario: Scenario) -> float:
    """Messages/s of one publisher (a UAV, an avatar): the workload's rate times the scale, as run."""
    return (scenario.workload.rate or 0.0) * scenario.scale


def offered(scenario: Scenario, topology: Topology) -> tuple[float, float]:
    """(messages/s handed to brokers, messages/s handed to subscribers), from the workload kind's own
    estimate (its manifest's `offered`); a run without a workload offers none."""
    kind = plugin.workload_kind(scenario.workload.kind)
    estimate_of = kind and plugin.kind_hook(kind, "offered")
    return estimate_of(scenario, topology) if estimate_of else (0.0, 0.0)


def published_per_s(scenario: Scenario, topology: Topology) -> float:
    return offered(scenario, topology)[0]


def deliveries_per_s(scenario: Scenario, topology: Topology) -> float:
    return offered(scenario, topology)[1]


def offered_by_node(scenario: Scenario, topology: Topology) -> dict[str, tuple[float, float]] | None:
    """{client node: (messages/s it sends, messages/s it receives)} from the workload kind's own
    plan (its manifest's `offered_by_node`); None when the kind declares none."""
    kind = plugin.workload_kind(scenario.workload.kind)
    by_node = kind and plugin.kind_hook(kind, "offered_by_node")
    return by_node(scenario, topology) if by_node else None


@dataclass
class ThinLink:
    """A client's access link narrower than what the node's own messages need in one direction."""

    node: str
    direction: str  # "sends" (up) or "receives" (down): a link has its bandwidth each way
    messages_per_s: float
    offered_bps: float
    capacity_bps: float


def thin_access_links(scenario: Scenario, topology: Topology) -> list[ThinLink]:
    """Client access links that cannot carry what their node sends or receives. A node's own
    messages are the scenario's, whatever a policy places where, so such a run measures a link it
    made too thin, not the system: `validate` and `run` refuse it. Counted as payload plus
    MESSAGE_OVERHEAD only (no TCP/IP headers, no ACKs), a lower bound: a link refused certainly
    cannot carry it. Brokers' and sites' links are not judged: what crosses them depends on where
    topics are placed, and a congested broker link is an experiment of its own (hotspot-smoke.yaml)."""
    by_node = offered_by_node(scenario, topology) or {}
    bits = 8 * (scenario.workload.message_size + MESSAGE_OVERHEAD)
    thin = []
    for name, (sent, received) in by_node.items():
        capacity = topology.nodes[name].access.bandwidth
        for direction, rate in (("sends", sent), ("receives", received)):
            if capacity and rate * bits > capacity:
                thin.append(ThinLink(name, direction, rate, rate * bits, capacity))
    return thin


def frames_per_crossing(message_size: float) -> int:
    """Frames one message puts on a link, conservatively: its data segments (payload plus protocol
    overhead, no two messages coalesced into one segment) plus one ACK back for each (no delayed
    ACKs). Both relays of a link direction pair forward them, so both count."""
    data = math.ceil((message_size + MESSAGE_OVERHEAD) / FRAME_PAYLOAD)
    return 2 * data


def shaper_packets_per_s(scenario: Scenario, topology: Topology) -> float:
    """Frames/s the delay-line relays forward, summed over links: each message crosses the
    publisher's access link, one site link and the broker's local link on its way in, and each
    delivery the broker's local link, one site link and the subscriber's access link on its way out.
    Counting a site link both ways is the worst placement (the broker at another site, as when every
    topic starts on the cloud); ePulsar's edge placement saves those two crossings."""
    crossings = (CROSSINGS_PER_MESSAGE * published_per_s(scenario, topology)
                 + CROSSINGS_PER_DELIVERY * deliveries_per_s(scenario, topology))
    return crossings * frames_per_crossing(scenario.workload.message_size)


@dataclass
class Estimate:
    scenario: str
    kind: str
    published_per_s: float
    deliveries_per_s: float
    shaper_packets_per_s: float
    message_size: float


def estimate(scenario: Scenario, topology: Topology) -> Estimate:
    return Estimate(scenario.name, scenario.workload.kind, published_per_s(scenario, topology),
                    deliveries_per_s(scenario, topology), shaper_packets_per_s(scenario, topology),
                    scenario.workload.message_size)


def capacity_file(client_engine: str, asked: Path = CAPACITY_FILE) -> Path:
    """The capacity a run is judged against: what was asked for, but for the default file the
    one measured with the run's client data plane (`make bench-capacity ARGS="--clients
    compiled"` writes capacity-compiled.json) when it exists."""
    own = CAPACITY_FILE.with_name(f"capacity-{client_engine}.json")
    return own if Path(asked) == CAPACITY_FILE and client_engine != "python" and own.exists() else Path(asked)


def read_capacity(path: Path = CAPACITY_FILE) -> dict | None:
    """The measured capacity (`make bench-capacity`), or None when this machine was not measured.

    Keys used here: `knee[<workload kind>]["deliveries_per_s"]` (the largest load the harness held
    within its error budget; None when no point held), `knee[<kind>]["reached"]` (False: no point
    failed, so the knee is a lower bound), `delayline_pkts_per_s` (one relay alone, < 0.1 % loss),
    `nats_msgs_per_s` (nats-server alone, its output-rate knee), `speed_reference` (how costly fixed
    work was that day: testbed.machine_speed) and `cpus`."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a capacity file ({error}); run make bench-capacity again") from None


@dataclass
class Verdict:
    """The estimate against the measured capacity: `beyond` lists every limit it exceeds."""

    measured: bool
    limits: dict = field(default_factory=dict)  # name -> threshold (None: no threshold measured)
    beyond: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Past what this machine can carry at all, not only past its error budget: more deliveries than
    # any measured run delivered (delivery stops growing there), or more frames than the delay
    # line moves on every core. No run of it can be valid; `validate` and `run` refuse it.
    impossible: list[str] = field(default_factory=list)


HARNESS_KNEE = "harness knee, deliveries/s"
HARNESS_KNEE_STEADY = "harness knee (steady rule), deliveries/s"
# bench-capacity's steady rule tolerates isolated bad seconds (VM timer stalls): at most this share of
# the seconds outside migrations saturated (testbed.systems.pubsub.bench.capacity)
STEADY_SATURATED_MAX = 0.05


def compare(est: Estimate, capacity: dict | None, source: Path = CAPACITY_FILE) -> Verdict:
    """Deliveries/s against the harness's knee for this workload kind; deliveries/s against
    nats-server's own knee (every topic may sit on one broker, as at the start); frames/s against
    the delay line's own rate times the cores (one relay per link direction, each on a core at best)."""
    if capacity is None:
        return Verdict(False, notes=[UNMEASURED])
    verdict = Verdict(True)
    knee = (capacity.get("knee") or {}).get(est.kind) or {}
    harness = HARNESS_KNEE
    if est.kind in (capacity.get("knee") or {}):
        held = knee.get("deliveries_per_s")
        steady = (knee.get("steady") or {}).get("deliveries_per_s")
        if held is None and steady is not None:  # one stalled second fails the strict rule at any load
            harness, held = HARNESS_KNEE_STEADY, steady
            verdict.notes.append(f"no {est.kind} point held by the strict rule (every second within the error "
                                 f"budget) in {source}: judged by the steady rule's knee (outside migrations, at most "
                                 f"{STEADY_SATURATED_MAX:.0%} of the seconds saturated; the run's guard marks those)")
        verdict.limits[harness] = held
        if held is None:
            verdict.notes.append(f"no {est.kind} point held within the error budget in {source}")
        elif not knee.get("reached", True):
            verdict.notes.append(f"the {est.kind} knee is a lower bound: no measured point failed")
    else:
        verdict.notes.append(f"{est.kind}: no knee measured in {source}")
    if capacity.get("nats_msgs_per_s"):
        verdict.limits["nats-server alone, msg/s"] = capacity["nats_msgs_per_s"]
    if capacity.get("delayline_pkts_per_s"):
        verdict.limits["delay line, pkts/s x cores"] = capacity["delayline_pkts_per_s"] * capacity.get("cpus", 1)
    offered = {harness: est.deliveries_per_s, "nats-server alone, msg/s": est.deliveries_per_s,
               "delay line, pkts/s x cores": est.shaper_packets_per_s}
    for name, limit in verdict.limits.items():
        if limit is not None and offered[name] > limit:
            verdict.beyond.append(f"{offered[name]:,.0f} > {name} {limit:,.0f}")
    if knee and verdict.limits.get(harness) is None and est.deliveries_per_s > 0:
        verdict.beyond.append(f"{est.deliveries_per_s:,.0f} deliveries/s: no measured {est.kind} load held")
    ceiling = knee.get("delivered_max_per_s")
    if ceiling and est.deliveries_per_s > ceiling:
        verdict.impossible.append(f"{est.deliveries_per_s:,.0f} deliveries/s > the most any measured {est.kind} "
                                  f"run delivered, {ceiling:,.0f}/s")
    frames = verdict.limits.get("delay line, pkts/s x cores")
    if frames and est.shaper_packets_per_s > frames:
        verdict.impossible.append(f"{est.shaper_packets_per_s:,.0f} frames/s > the delay line on every core, {frames:,.0f}")
    return verdict


def knee(verdict: Verdict) -> float | None:
    """The harness knee a verdict judged by (the strict rule's, else the steady rule's), deliveries/s."""
    return verdict.limits.get(HARNESS_KNEE) or verdict.limits.get(HARNESS_KNEE_STEADY)


def lines(est: Estimate, verdict: Verdict) -> list[str]:
    """What `show` and `run` print."""
    out = [f"offered load: {est.published_per_s:,.0f} msg/s published, {est.deliveries_per_s:,.0f} deliveries/s, "
           f"~{est.shaper_packets_per_s:,.0f} frames/s through the shaper (upper bound)"]
    if verdict.measured:
        limits = ", ".join(f"{k} {v:,.0f}" if v is not None else f"{k} none" for k, v in verdict.limits.items())
        out.append(f"measured capacity: {limits or 'none recorded'}")
        out.append("BEYOND this machine's measured capacity: " + "; ".join(verdict.beyond) if verdict.beyond
                   else "within this machine's measured capacity")
        if verdict.impossible:
            out.append("past what this machine can carry at all: " + "; ".join(verdict.impossible))
    out += verdict.notes
    return out


def as_dict(est: Estimate, verdict: Verdict) -> dict:
    """`show --json`."""
    return {**asdict(est), "capacity": asdict(verdict)}
