"""The auto-tuned publisher's scenario checks: the checks that need the scenario's topology (testbed.topology.checked calls them
through the manifest). `report(field path, message)` records a problem at that field's line."""

from __future__ import annotations


def autotune_nodes(built) -> tuple[str, str, str]:
    """The auto-tuned publisher's three parties: (publisher node, subscriber node, the broker at the
    subscriber's site), as `autotune` guarantees them."""
    publisher = built.placed("publisher")[0][0]
    subscriber, site = built.placed("subscriber")[0]
    broker = next(n.name for n in built.nodes.values() if n.role == "broker" and n.site == site)
    return publisher, subscriber, broker


def autotune(scenario, built, report) -> None:
    """The auto-tuned publisher paper's setting (Balasubramanian et al.): one publisher node (every
    variant runs there), one subscriber node next to the broker it reads from, the broker at the
    subscriber's site; no faults or mobility (the experiment is about the publisher and the path, not
    about the placement)."""
    if scenario.faults:
        report(("faults",), "the autotune workload takes no faults")
    if scenario.mobility.model != "none":
        report(("mobility", "model"), "the autotune workload's nodes do not move")
    publishers, subscribers = built.placed("publisher"), built.placed("subscriber")
    if len(publishers) != 1 or len(subscribers) != 1:
        report(("nodes", "clients"), f"the autotune workload needs one node with role publisher and one with role "
                                     f"subscriber, found {len(publishers)} and {len(subscribers)}")
        return
    site = subscribers[0][1]
    if not any(n.role == "broker" and n.site == site for n in built.nodes.values()):
        report(("nodes", "brokers_per_site"), f"the subscriber's site {site} has no broker to read from")
