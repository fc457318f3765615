"""Where a topic nobody owns goes: at its first lookup, or after its owner died (a scenario's
`control.initial_placement`).

The paper does not say where a new topic starts; its topics are placed by the policy (3.4) from the
coordinates their clients report. Two start-ups:

- `first_lookup` (default): the lookup request carries the asking client's coordinate and role, and
  the policy places the topic from it, the asker as the topic's only producer (or only consumer).
  The topic starts near its first client instead of waiting for a report and a round.
- `cloud`: the topic starts on the cloud broker (the manager's default broker) until its first
  report and the next round move it: about one monitoring period plus a report period.

A topic the brokers already report (an orphan's carried report, a topic planned again) is placed by
the policy from its report either way; a latency-agnostic policy (pulsar-hash) needs no coordinate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from testbed.policies import latency
from testbed.policies.base import Policy
from testbed.policies.pulsar_hash import hash_broker
from testbed.policies.snapshot import ClientNC, Snapshot, TopicClients

INITIAL_PLACEMENTS = ("first_lookup", "cloud")  # the only list: the scenario schema and --initial-placement
DEFAULT_INITIAL_PLACEMENT = "first_lookup"


def asker_clients(client: ClientNC, role: str) -> TopicClients:
    """The topic's clients as its first lookup knows them: the asker alone, on its side."""
    if role not in ("producer", "consumer"):
        raise ValueError(f"role must be producer or consumer, not {role!r}")
    return TopicClients((client,), ()) if role == "producer" else TopicClients((), (client,))


def unowned_broker(topic: str, snapshot: Snapshot, policy: Policy, cloud: str, *, initial: str,
                   clients: Mapping[str, TopicClients] | None = None, asker: TopicClients | None = None) -> str:
    """The broker for `topic`, which nobody owns now (its first lookup, or its owner died).

    Reported (its report in the snapshot, and for a policy that `needs_clients` its clients too) or
    a latency-agnostic policy: the policy's first choice. Otherwise, with `initial="first_lookup"`
    and the asker's coordinate: the policy's first choice on a report made from the asker alone
    (`asker_clients`); else `cloud` (or, without it, the topic's hash broker).
    """
    if initial not in INITIAL_PLACEMENTS:
        raise ValueError(f"initial placement must be one of {', '.join(INITIAL_PLACEMENTS)}, not {initial!r}")
    clients = clients or {}
    reported = snapshot.report(topic) is not None and (not policy.needs_clients or topic in clients)
    if reported or not policy.latency_aware:
        return policy.feasible_brokers(topic, snapshot, clients)[0]
    if initial == "first_lookup" and asker is not None and _fits(asker, snapshot):
        report = latency.aggregate(topic, "", None, asker.producers, asker.consumers, distance=snapshot.distance)
        view = replace(snapshot, carried={**snapshot.carried, topic: report})
        return policy.feasible_brokers(topic, view, {**clients, topic: asker})[0]
    return cloud if cloud in snapshot.brokers else hash_broker(topic, snapshot.brokers)


def _fits(asker: TopicClients, snapshot: Snapshot) -> bool:
    """The asker's coordinates have the brokers' dimension (Serf's is fixed; a mismatch is a client
    bug, and a distance between them is undefined)."""
    dims = {len(r.coord.vec) for r in snapshot.brokers.values() if r.coord is not None}
    mine = {len(c.coord.vec) for c in (*asker.producers, *asker.consumers)}
    return bool(mine) and len(dims) == 1 and mine == dims
