"""BAD Pub/Sub's multistage balancing (seed 004), pure: hand-worked examples of the load formula
(eq. 5), the cov trigger (eq. 6-8), LDM, SDM, the greedy shuffle and Algorithm 1."""

import numpy as np
import pytest

from testbed.policies.bad import BalancerConfig, Loads, Placer, cov, dynamic_migration, greedy_shuffle, plan


def loads_of(rates, brokers, placement):
    """`placement`: [(broker, [BE subscriptions])] per subscriber, in order."""
    loads = Loads(brokers, rates)
    for i, (j, ks) in enumerate(placement):
        for k in ks:
            loads.subscribe(i, k)
        loads.attach(i, j)
    return loads


# rates 10, 20, 30; broker 0 serves subscribers 0 {0,1}, 1 {0,2}, 2 {1}; broker 1 serves 3 {2}
EXAMPLE = ([10.0, 20.0, 30.0], 3, [(0, [0, 1]), (0, [0, 2]), (0, [1]), (1, [2])])


def test_load_formula_counts_one_pull_per_shared_subscription():
    loads = loads_of(*EXAMPLE)
    # broker 0: n = (2, 2, 1) -> (1+2)10 + (1+2)20 + (1+1)30 = 150; broker 1: (1+1)30 = 60
    assert loads.F.tolist() == [150.0, 60.0, 0.0]
    assert loads.recompute().tolist() == [150.0, 60.0, 0.0]
    assert loads.counts().tolist() == [3, 1, 0]


def test_subscribing_after_attaching_and_leaving_update_the_load():
    loads = loads_of(*EXAMPLE)
    loads.subscribe(3, 0)  # broker 1 now pulls and pushes k=0 too: + 2 x 10
    assert loads.F[1] == 80.0
    loads.subscribe(3, 0)  # y_ik is binary: the same subscription twice changes nothing
    assert loads.F[1] == 80.0
    loads.detach(2)  # subscriber 2 {1} leaves broker 0: n_01 2 -> 1, one push less
    assert loads.F[0] == 130.0
    assert loads.F.tolist() == loads.recompute().tolist()


def test_rate_change_reaches_every_broker_holding_it():
    loads = loads_of(*EXAMPLE)
    loads.set_rate(2, 40.0)  # k=2 at broker 0 (n=1) and broker 1 (n=1): each +2 x 10
    assert loads.F.tolist() == [170.0, 80.0, 0.0]
    assert loads.F.tolist() == loads.recompute().tolist()


def test_added_load_and_similarity():
    loads = loads_of(*EXAMPLE)
    # subscriber 1 {0,2} to broker 1, which holds k=2: push 10 + 30, pull only k=0's 10
    assert loads.added_load(1, 1) == 50.0
    assert loads.added_load(1, 2) == 80.0
    assert loads.subscriber_load(1) == 40.0
    # held by others: broker 0 (subscriber 0 holds k=0; nobody else k=2) 10, broker 1 30, broker 2 0
    assert loads.similarity(1).tolist() == [10.0, 30.0, 0.0]


def test_cov_is_population_sigma_over_mean():
    assert cov([1.0, 1.0, 1.0]) == 0.0
    assert cov([0.0, 0.0]) == 0.0
    assert cov([150.0, 60.0, 0.0]) == pytest.approx(np.std([150, 60, 0]) / 70.0)  # 0.8806


def test_ldm_moves_the_heaviest_subscriber_to_the_least_loaded_broker_until_no_valid_move():
    loads = loads_of(*EXAMPLE)
    moves = dynamic_migration(loads, "ldm", alpha=0.1, beta=0.0)
    # round 1: broker 0's heaviest is subscriber 1 (u=40) -> broker 2 (added 80 <= 150). Loads
    # (80, 60, 80), cov 0.129 > 0.1; then broker 0's subscribers 0 (30) and 2 (20) to broker 1
    # would make it 120 and 100 > 80: no valid move, the round ends.
    assert [(m.subscriber, m.source, m.destination) for m in moves] == [(1, 0, 2)]
    assert loads.F.tolist() == [80.0, 60.0, 80.0]


def test_ldm_does_nothing_below_alpha_or_beta():
    loads = loads_of(*EXAMPLE)
    assert dynamic_migration(loads, "ldm", alpha=0.9, beta=0.0) == []  # cov 0.88 <= 0.9
    assert dynamic_migration(loads, "ldm", alpha=0.1, beta=70.0) == []  # mean 70 <= 70


def test_sdm_prefers_the_below_mean_broker_sharing_most_of_the_subscription_rate():
    # Three brokers: 0 heavy, 1 and 2 light; broker 2 already holds k=1 (rate 20), broker 1 none of
    # subscriber 0's. LDM takes the least loaded (broker 1); SDM the one sharing k=1 (broker 2).
    rates = [10.0, 20.0, 5.0]
    placement = [(0, [0, 1]), (0, [0, 1]), (0, [0]), (1, [2]), (2, [1])]
    ldm, sdm = loads_of(rates, 3, placement), loads_of(rates, 3, placement)
    assert ldm.F.tolist() == [100.0, 10.0, 40.0]  # (1+3)10 + (1+2)20; 2 x 5; 2 x 20; mean 50
    first_ldm = dynamic_migration(ldm, "ldm", alpha=0.1, beta=0.0, max_moves=1)[0]
    first_sdm = dynamic_migration(sdm, "sdm", alpha=0.1, beta=0.0, max_moves=1)[0]
    assert (first_ldm.subscriber, first_ldm.destination) == (0, 1)
    assert (first_sdm.subscriber, first_sdm.destination) == (0, 2)
    # SDM's destination pulls nothing new for k=1: 40 + 2 x 10 + 20 = 80; LDM's 10 + 2 x 10 + 2 x 20 = 70
    assert sdm.F[2] == 80.0 and ldm.F[1] == 70.0


def test_a_subscriber_moves_at_most_once_and_empty_ones_never():
    loads = loads_of([10.0], 2, [(0, [0]), (0, [0]), (0, []), (0, [0])])
    moves = dynamic_migration(loads, "ldm", alpha=0.0, beta=0.0)
    assert len({m.subscriber for m in moves}) == len(moves)
    assert 2 not in {m.subscriber for m in moves}


def test_greedy_shuffle_is_lpt_with_sharing():
    # Four subscribers with no sharing, loads 7, 5, 4, 3 (x2 with the pull): LPT on 2 brokers gives
    # {7, 3} and {5, 4}: loads 20 and 18; all start on broker 0.
    rates = [7.0, 5.0, 4.0, 3.0]
    loads = loads_of(rates, 2, [(0, [0]), (0, [1]), (0, [2]), (0, [3])])
    moves = greedy_shuffle(loads)
    assert sorted(loads.F.tolist()) == [18.0, 20.0]
    assert loads.broker.tolist() == [0, 1, 1, 0]
    assert [(m.subscriber, m.destination, m.stage) for m in moves] == [(1, 1, "gsh"), (2, 1, "gsh")]


def test_greedy_shuffle_spreads_subscribers_without_subscriptions():
    loads = loads_of([5.0], 2, [(0, [0]), (0, []), (0, []), (0, [])])
    greedy_shuffle(loads)
    # the loaded one to broker 0, the empty ones by subscriber count: 1, 0 -> 1, 1 -> 2, 1 -> 2, 2
    assert loads.counts().tolist() == [2, 2]
    even = loads_of([5.0, 5.0], 2, [(0, [0]), (0, [1]), (0, []), (0, [])])
    greedy_shuffle(even)  # after the two loaded ones the loads tie: the empty ones alternate
    assert even.counts().tolist() == [2, 2]


def test_algorithm1_shuffles_only_when_extremely_skewed():
    loads = loads_of(*EXAMPLE)  # cov 0.88
    calm = plan(loads_of(*EXAMPLE), BalancerConfig(migration="none", shuffle=True, gamma=0.9, theta=0.0))
    assert not calm.shuffled and calm.moves == []
    result = plan(loads, BalancerConfig(migration="ldm", shuffle=True, alpha=0.1, beta=0.0, gamma=0.5, theta=0.0))
    assert result.shuffled and result.cov_after < result.cov_before
    assert loads.F.tolist() == loads.recompute().tolist()
    for i, (source, destination) in result.destinations().items():
        assert loads.broker[i] == destination and source != destination


def test_placements():
    assert [Placer("rr", 3).place() for _ in range(1)] == [0]
    rr = Placer("rr", 3)
    assert [rr.place() for _ in range(5)] == [0, 1, 2, 0, 1]
    assert Placer("nr", 3).place([5.0, 1.0, 1.0]) == 1
    a, b = Placer("rnd", 4, seed=3), Placer("rnd", 4, seed=3)
    assert [a.place() for _ in range(20)] == [b.place() for _ in range(20)]
    with pytest.raises(ValueError, match="distance"):
        Placer("nr", 3).place()
    with pytest.raises(ValueError, match="unknown placement"):
        Placer("ll", 3)
    with pytest.raises(ValueError, match="unknown migration"):
        BalancerConfig(migration="bogus")


def test_coordinator_uses_fresh_measurements_and_the_model_where_a_move_made_them_stale():
    """The BCS (testbed.systems.bad.coordinator) without a network: placement, then one round."""
    from testbed.policies.snapshot import coord_to_dict
    from testbed.nc.coordinate import Coordinate
    from testbed.systems.bad.coordinator import Coordinator
    from testbed.systems.pubsub.client import EventLog

    plan = {"be": [{"rate": 10.0}, {"rate": 20.0}],
            "subscribers": [{"id": f"s{i}", "subs": [i % 2]} for i in range(4)]}
    brokers = [{"name": "b1", "address": "nats://a:4222"}, {"name": "b2", "address": "nats://b:4222"}]
    near_b1 = Coordinate(vec=(0.0,) * 8, error=0.1, adjustment=0.0, height=1e-5)
    far = Coordinate(vec=(0.05,) + (0.0,) * 7, error=0.1, adjustment=0.0, height=1e-5)
    bcs = Coordinator(plan, brokers, "nr", BalancerConfig(migration="ldm", alpha=0.1, beta=0.0), 0, EventLog(),
                      broker_coordinates=lambda: [near_b1, far])
    assert bcs.register({"id": "nobody"})["error"].startswith("unknown subscriber")
    assert "ask again" in bcs.register({"id": "s0"})["error"]  # nr needs the subscriber's coordinate
    for i in range(4):
        assert bcs.register({"id": f"s{i}", "coord": coord_to_dict(near_b1)}) == {"broker": "b1", "address": "nats://a:4222"}
    # b1 holds all four: n = (2, 2) -> (1+2)10 + (1+2)20 = 90; b2 0. b1 reports 100 measured over a
    # window that began after its last change (fresh); b2 reports a window from before (stale).
    bcs.on_load({"broker": "b1", "F": 100.0, "since": bcs.changed[0] + 1})
    bcs.on_load({"broker": "b2", "F": 55.0, "since": bcs.changed[1] - 1})
    orders = bcs.round()
    (event,) = [e for e in bcs.events.items if e["type"] == "bad_round"]
    assert event["loads"] == {"b1": 100.0, "b2": 0.0} and event["model"] == {"b1": 90.0, "b2": 0.0}
    assert event["fresh"] == {"b1": True, "b2": False}
    assert orders and all(source == "b1" and destination == "b2" for _, source, destination, _ in orders)
    assert [e["subscriber"] for e in bcs.events.items if e["type"] == "bad_migration"] == [o[0] for o in orders]
