"""ePulsar's pub/sub: what the core may know of it (testbed.plugin)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from testbed.plugin import System, WorkloadKind
from testbed.systems.pubsub.schema import Hotspot, hotspot_topics, needs_rate_and_topics

PUBSUB_FEATURES = ("durable", "tracking")

SYSTEM = System(
    name="pubsub",
    title="ePulsar's edge-aware topic placement on network coordinates, its baselines and Pulsar's load manager",
    workloads=(
        WorkloadKind("uav-swarm", validate=needs_rate_and_topics, offered="load:uav", features=PUBSUB_FEATURES),
        WorkloadKind("mmog", validate=needs_rate_and_topics, check="checks:mmog", offered="load:mmog",
                     features=("tracking",),
                     refuses={"durable": "its area-of-interest subscriptions open and close at every group change, "
                                         "and a durable cursor would replay what a player missed meanwhile"}),
        WorkloadKind("hotspot", block="hotspot", block_model=Hotspot, validate=hotspot_topics, check="checks:hotspot",
                     offered="load:hotspot", features=PUBSUB_FEATURES),
    ),
    client_roles=("uav-swarm", "game-server", "avatar", "static"),
    agent_roles=("game-server", "static"),
    workload_fields={"avatars": (Annotated[int, Field(ge=1, le=100_000)], 1),  # the MMOG's avatars, one per player
                     "groups": (Annotated[int, Field(ge=1, le=10_000)], 1)},  # and the groups they play in
    roles=("role:PubSubRole", "workload_role:PubSubWorkload"),
)
