"""What the pub/sub workloads offer (testbed.load asks through the manifest): messages/s published
and deliveries/s, from the run's own plan (same seed, same nodes) where the plan draws them."""

from __future__ import annotations

from testbed.load import rate_per_publisher


def uav(scenario, topology) -> tuple[float, float]:
    """Every UAV publishes (the leader follow_leader, each follower sensor_data). Per swarm of m (paper
    5.1.1), the leader's follow_leader reaches m-1 followers and m-1 followers' sensor_data reaches the
    leader: 2(m-1) x rate deliveries."""
    return _totals(uav_by_node(scenario, topology))


def uav_by_node(scenario, topology) -> dict[str, tuple[float, float]]:
    """(messages/s a swarm node sends, messages/s it receives): its m UAVs publish, and its swarm's
    2(m-1) x rate deliveries (see `uav`) all reach it, the swarm being one node."""
    rate = rate_per_publisher(scenario)
    return {n.name: (rate * n.members, rate * 2 * (n.members - 1))
            for n in topology.nodes.values() if n.role == "uav-swarm"}


def _totals(by_node: dict[str, tuple[float, float]]) -> tuple[float, float]:
    return sum(sent for sent, _ in by_node.values()), sum(received for _, received in by_node.values())


def mmog(scenario, topology) -> tuple[float, float]:
    """Every player publishes its avatar's topic; rate x the subscriptions (areas of interest and game servers)."""
    rate = rate_per_publisher(scenario)
    return rate * len(topology.placed("avatar")), rate * mmog_subscriptions(scenario, topology)


def mmog_subscriptions(scenario, topology) -> int:
    """(subscriber, avatar topic) subscriptions at the start, under the run's own plan (same seed, same
    nodes): every player's area of interest, plus each avatar's game server. Group changes move
    avatars between groups of the same sizes on average, so the start is representative of the run."""
    from testbed.mobility import group_changes
    from testbed.systems.pubsub.workloads import area_of_interest

    players = topology.placed("avatar")
    groups, _ = group_changes(scenario, len(players))
    return sum(len(area_of_interest(a, groups)) for a in range(len(players))) + len(players)


def hotspot(scenario, topology) -> tuple[float, float]:
    """(messages/s published, deliveries/s) of the hot-spot plan at its peak, once the surge's
    publishers have joined: every publisher's Zipf rate, times its topic's subscribers."""
    return _totals(hotspot_by_node(scenario, topology))


def hotspot_by_node(scenario, topology) -> dict[str, tuple[float, float]]:
    """(messages/s a static node sends, messages/s it receives) at the plan's peak: its publishers'
    rates, and its subscribers' topics' rates."""
    from collections import defaultdict

    from testbed.systems.pubsub.schema import HOTSPOT_CLASS
    from testbed.systems.pubsub.workloads import hotspot_plan

    plan = hotspot_plan(scenario.workload.hotspot, rate_per_publisher(scenario), topology.placed("static"),
                        scenario.seed, HOTSPOT_CLASS)
    topic_rate, by_node = defaultdict(float), {node: [0.0, 0.0] for node, _ in topology.placed("static")}
    for p in plan["publishers"]:
        topic_rate[p["topic"]] += p["rate"]
        by_node[p["node"]][0] += p["rate"]
    for s in plan["subscribers"]:
        by_node[s["node"]][1] += topic_rate[s["topic"]]
    return {node: (sent, received) for node, (sent, received) in by_node.items()}
