"""nats-server as BAD's two tiers (Nguyen et al., 3.1), by configuration only.

The cloud's nats-server is the hub (the back end's side: the data cluster publishes there, the BCS
listens there); every edge broker's nats-server is a leaf node of it. What a leaf node does is what
BAD's broker does for subscription sharing: it forwards its clients' interest to the hub once per
subject, so the hub sends each result across the leaf connection once however many of the leaf's
subscribers hold that subscription, and the leaf fans it out. Chosen over a cluster (routes) because
a route would gossip every subscription to every server and make the brokers one system; over
Python forwarding because every result would then cost an interpreter step at the broker.

Subscription sharing is checked live (tests/test_bad_live.py: two subscribers, one upstream
subscription, one copy across the leaf).
"""

from __future__ import annotations

LEAF_PORT = 7422  # nats-server's default leafnode port


def hub_config(ip: str) -> str:
    """The hub's configuration beyond the flags (address, ports): accept leaf nodes on `ip`."""
    return f"leafnodes {{ listen: \"{ip}:{LEAF_PORT}\" }}\n"


def leaf_config(hub_ip: str) -> str:
    """An edge broker's: a leaf node of the hub at `hub_ip`."""
    return f"leafnodes {{ remotes: [ {{ url: \"nats-leaf://{hub_ip}:{LEAF_PORT}\" }} ] }}\n"
