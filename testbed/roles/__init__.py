"""The harness side of a run: what runs in each node, started, supervised and stopped.

A role is one concern (`base.Role`); `ROLES` lists them in start order (the coordinates first:
brokers and clients need their Serf agents; the workload last: it needs the system's lookup
service). Adding a system means adding a role here, not editing the experiment.
"""

from __future__ import annotations

from testbed.roles.autotune import AutotuneRole
from testbed.roles.bad import BadRole
from testbed.roles.base import Role, RunContext
from testbed.roles.coordinates import Coordinates
from testbed.roles.pubsub import PubSubRole
from testbed.roles.workload import PubSubWorkload

ROLES: tuple[type[Role], ...] = (Coordinates, PubSubRole, PubSubWorkload, BadRole, AutotuneRole)


def for_run(run: RunContext) -> list[Role]:
    """The roles a run of `run.scenario` needs, in start order (stop them in reverse)."""
    roles: list[Role] = []
    for cls in ROLES:
        if cls.wanted(run.scenario):
            roles.append(cls(run, roles))
    return roles


__all__ = ["ROLES", "Role", "RunContext", "for_run"]
