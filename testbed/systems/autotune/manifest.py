"""The auto-tuned batching publisher: what the core may know of it (testbed.plugin)."""

from __future__ import annotations

from testbed.plugin import System, WorkloadKind
from testbed.systems.autotune.schema import Autotune, one_topic_class

SYSTEM = System(
    name="autotune",
    title="the auto-tuned batching publisher (Balasubramanian et al.)",
    # The experiment is about the publisher and one path, not about placement: no coordinates.
    workloads=(WorkloadKind("autotune", block="autotune", block_model=Autotune, validate=one_topic_class,
                            check="checks:autotune", offered="load:autotune", coordinates=False),),
    client_roles=("publisher", "subscriber"),
    roles=("role:AutotuneRole",),
)
