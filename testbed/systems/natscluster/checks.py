"""What a scenario may not ask of the NATS cluster baseline: it has no topic manager, no ZooKeeper,
no storage and no tracker, so faults, durable topics and message tracking are refused by name."""

from __future__ import annotations


def natscluster(scenario, built, report) -> None:
    if not any(n.role == "broker" for n in built.nodes.values()):
        report(("infrastructure",), "system natscluster needs broker nodes (an edge site's nats-server) to cluster")
    for i, _fault in enumerate(scenario.faults):
        report(("faults", i), "system natscluster takes no faults yet (its servers are not restarted); "
                              "run the faults under system epulsar")
    for i, topic in enumerate(scenario.workload.topics):
        if topic.durable is not None:
            report(("workload", "topics", i, "durable"), "system natscluster has no durable topics (no JetStream "
                                                          "storage nodes)")
    if scenario.tracking.strategy != "none":
        report(("tracking", "strategy"), "system natscluster has no message tracker")
    if scenario.infrastructure.storage is not None:
        report(("infrastructure", "storage"), "system natscluster runs no storage nodes")
