"""Transitional: the Serf agents' launcher (`SerfAgents`, `agent_nodes`, ...) is harness code and moved
to `testbed.roles.launch`. This keeps the old imports working until testbed/roles/coordinates.py,
testbed/bench/nc.py and testbed/bench/placement.py import from there; then delete this module.
"""

from __future__ import annotations

NAMES = ("SERF_PORT", "AGENT_ROLES", "AgentError", "Agent", "SerfAgents", "agent_nodes", "seed_nodes")


def __getattr__(name: str):
    if name in NAMES:  # lazily: testbed.roles imports this module while it starts
        from testbed.roles import launch

        return getattr(launch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
