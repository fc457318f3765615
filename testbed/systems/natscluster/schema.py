"""The NATS cluster baseline's scenario keys: `control.natscluster`."""

from __future__ import annotations

from typing import Literal

from testbed.scenario.fields import Strict

ATTACH_MODES = ("home", "nearest")


class NatsClusterControl(Strict):
    """How clients pick their server in the route cluster. `home`: the broker of the node's zone (a
    mobile node reattaches to its new zone's broker after a handover, NATS's "connect to a nearby
    server"); `nearest`: the broker nearest the zone's NC proxy by network coordinate (Vivaldi through
    Serf, as the ePulsar paper estimates latency), taken once the coordinates settled."""

    attach: Literal[ATTACH_MODES] = "home"


def mode(scenario) -> str:
    """The run's variant, for its label (`natscluster/home`)."""
    return scenario.control.natscluster.attach
