"""The NATS cluster baseline: what the core may know of it (testbed.plugin)."""

from __future__ import annotations

from testbed.plugin import System
from testbed.systems.natscluster.schema import NatsClusterControl

SYSTEM = System(
    name="natscluster",
    title="NATS's own route cluster over every broker node, clients on their home or nearest server (baseline)",
    runs=("uav-swarm", "mmog"),  # the pub/sub system's UAV and MMOG workloads (their schema, checks and offered load)
    check="checks:natscluster",
    settings="schema:mode",
    control={"natscluster": (NatsClusterControl, NatsClusterControl(),
                             "where clients attach in NATS's route cluster")},
    roles=("role:NatsClusterRole", "role:NatsClusterWorkload"),
)
