"""The harness side of a run: what runs in each node, started, supervised and stopped.

A role is one concern (`base.Role`). The core's own role, the coordinates, starts first (brokers and
clients need their Serf agents); then the roles of the scenario's system under test (`system:`), in
the order its manifest lists them (a workload after the service it looks topics up in). Adding a system
means listing its roles in its manifest (testbed.plugin), not editing the experiment.
"""

from __future__ import annotations

from testbed import plugin
from testbed.roles.base import Role, RunContext
from testbed.roles.coordinates import Coordinates


def classes() -> list[type[Role]]:
    """Every role a run may start, in start order."""
    return [Coordinates, *plugin.role_classes()]


def for_run(run: RunContext) -> list[Role]:
    """The roles a run of `run.scenario` needs, in start order (stop them in reverse)."""
    roles: list[Role] = []
    for cls in [Coordinates, *plugin.role_classes(getattr(run.scenario, "system", None))]:
        if cls.wanted(run.scenario):
            roles.append(cls(run, roles))
    return roles


__all__ = ["Role", "RunContext", "classes", "for_run"]
