"""BAD's scenario checks: the checks that need the scenario's topology (testbed.topology.checked calls them
through the manifest). `report(field path, message)` records a problem at that field's line."""

from __future__ import annotations


def bad(scenario, built, report) -> None:
    """BAD (Nguyen et al.) needs subscriber nodes, edge brokers to attach them to and the cloud's back end;
    its brokers hold subscriber connections this system does not recover, so no broker faults."""
    if not built.placed("subscriber"):
        report(("nodes", "clients"), "the bad workload needs client nodes with role: subscriber")
    if not built.placed("broker"):
        report(("nodes", "brokers_per_site"), "the bad workload needs edge brokers (brokers_per_site >= 1)")
    if not built.placed("cloud"):
        report(("infrastructure", "cloud"), "the bad workload needs a cloud node (the back end and the coordinator)")
    if scenario.faults:
        report(("faults",), "the bad workload does not take faults: its subscribers are not failed over")
