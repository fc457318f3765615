"""BAD Pub/Sub: what the core may know of it (testbed.plugin)."""

from __future__ import annotations

from testbed.plugin import System, WorkloadKind
from testbed.systems.bad.schema import Bad, BadControl, channels_have_thresholds

SYSTEM = System(
    name="bad",
    title="BAD Pub/Sub's multistage subscriber balancing (Nguyen et al., DEBS '19)",
    workloads=(WorkloadKind("bad", block="bad", block_model=Bad, validate=channels_have_thresholds, check="checks:bad",
                            offered="load:bad"),),
    client_roles=("subscriber",),
    agent_roles=("subscriber",),
    control={"bad": (BadControl, BadControl(), "BAD's coordinator (workload kind bad), testbed.policies.bad")},
    roles=("role:BadRole",),
)
