"""Pulsar's load manager on hand-worked examples: bundle hashing and splits, the placement
strategies, each shedder and the split rule, and the leader's rounds (shedding, grace, split + unload)."""

from __future__ import annotations

import random
import zlib

import pytest

from testbed.nc.coordinate import Coordinate
from testbed.policies import POLICIES, ControlOptions, LoadManagerConfig, choose_brokers, controller_for
from testbed.policies.distance import ONE_WAY
from testbed.policies.pulsar_lm import bundles as bundles_module
from testbed.policies.pulsar_lm.bundles import FULL_RANGE, Bundles, topic_hash
from testbed.policies.pulsar_lm.leader import LoadManager
from testbed.policies.pulsar_lm.load import BrokerLoad, Rates, TimeAverage
from testbed.policies.pulsar_lm.placement import fewest_bundles, least_long_term_message_rate, least_resource_usage_with_weight
from testbed.policies.pulsar_lm.shedding import (bundles_to_split, overload_shedder, smoothed_usage, threshold_shedder,
                                              uniform_load_shedder)
from testbed.policies.snapshot import BrokerReport, Snapshot, TopicReport

CONFIG = LoadManagerConfig()
ORIGIN = Coordinate((0.0, 0.0), 0.0, 0.0, 0.0)


def load(name, usage=0.0, rate=0.0, throughput=0.0, cpu=0.0):
    return BrokerLoad(name, cpu, 0.0, 0.0, usage, Rates(rate / 2, rate / 2, throughput / 2, throughput / 2))


# -- bundles -----------------------------------------------------------------------------------------
def test_default_bundles_split_the_32_bit_range_in_four_named_as_pulsar_prints_them():
    b = Bundles.equal(4)
    assert b.names() == ["0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000",
                         "0xc0000000_0xffffffff"]
    assert Bundles.from_names(b.names()) == b


def test_a_topic_lives_in_the_bundle_its_full_names_crc32_falls_in():
    assert topic_hash("hot-1") == zlib.crc32(b"persistent://public/default/hot-1")
    b = Bundles.equal(4)
    for topic in ("hot-1", "hot-2", "follow_leader-swarm1", "avatar-player7"):
        index = b.index_of(topic)
        assert b.bounds[index] <= topic_hash(topic) < b.bounds[index + 1]


def test_range_equally_divide_cuts_the_range_in_the_middle():
    b = Bundles.equal(2).split("0x00000000_0x80000000")  # Pulsar's example, on 32 bits: (0, 0x8000) -> 0x4000
    assert b.bounds == (0, 0x40000000, 0x80000000, FULL_RANGE)


def test_topic_count_equally_divide_cuts_between_the_middle_topics(monkeypatch):
    # The blog's example: six topics hashed 0x00..0x25 in [0x0000, 0x8000) split at 0x0012.
    hashes = {f"t{i}": h for i, h in enumerate((0x0000, 0x0005, 0x0010, 0x0015, 0x0020, 0x0025))}
    monkeypatch.setattr(bundles_module, "topic_hash", hashes.__getitem__)
    b = Bundles((0, 0x8000, FULL_RANGE)).split("0x00000000_0x00008000", "topic_count_equally_divide", hashes)
    assert b.bounds == (0, 0x12, 0x8000, FULL_RANGE)


def test_a_bundle_of_one_hash_value_cannot_be_split():
    b = Bundles((0, 1, FULL_RANGE))
    assert b.split("0x00000000_0x00000001") == b


# -- load data ---------------------------------------------------------------------------------------
def test_time_average_is_the_plain_mean_until_full_then_weighs_each_sample_one_nth():
    avg = TimeAverage(samples=2)
    assert avg.update(Rates(10, 0, 0, 0)).rate_in == 10
    assert avg.update(Rates(20, 0, 0, 0)).rate_in == 15
    assert avg.update(Rates(35, 0, 0, 0)).rate_in == 25  # (1 * 15 + 35) / 2


def test_threshold_shedder_smoothing_weighs_history_0_9():
    history = {"a": 0.5}
    assert smoothed_usage({"a": load("a", usage=1.0)}, history, CONFIG)["a"] == pytest.approx(0.55)
    assert smoothed_usage({"b": load("b", usage=0.3)}, history, CONFIG) == {"b": 0.3}  # first sample as is; a is gone


# -- placement ---------------------------------------------------------------------------------------
def test_least_long_term_message_rate_picks_the_lowest_rate_and_skips_the_overloaded():
    brokers = {"a": load("a"), "b": load("b"), "c": load("c", usage=0.9)}
    assert least_long_term_message_rate(["a", "b", "c"], brokers, {"a": 100, "b": 50, "c": 0}, CONFIG,
                                        random.Random(1)) == "b"


def test_least_long_term_message_rate_breaks_ties_at_random_by_the_seed():
    brokers = {"a": load("a"), "b": load("b")}
    picks = {least_long_term_message_rate(["a", "b"], brokers, {"a": 50, "b": 50}, CONFIG, random.Random(s))
             for s in range(20)}
    assert picks == {"a", "b"}
    again = [least_long_term_message_rate(["a", "b"], brokers, {}, CONFIG, random.Random(7)) for _ in range(3)]
    assert len(set(again)) == 1


def test_when_every_broker_is_overloaded_any_may_be_chosen():
    brokers = {"a": load("a", usage=0.9), "b": load("b", usage=0.95)}
    assert least_long_term_message_rate(["a", "b"], brokers, {"a": 1, "b": 9}, CONFIG, random.Random(0)) in {"a", "b"}


def test_bundles_are_spread_evenly_before_the_strategy_looks_at_rates():
    assert fewest_bundles(["a", "b", "c"], {"a": 2, "b": 1, "c": 1}) == ["b", "c"]


def test_least_resource_usage_with_weight_takes_brokers_10_points_below_average():
    # average 0.5: only c (0.2) is at least 0.1 below; with none below, any.
    assert least_resource_usage_with_weight(["a", "b", "c"], {"a": 0.8, "b": 0.5, "c": 0.2}, CONFIG,
                                            random.Random(0)) == "c"
    assert least_resource_usage_with_weight(["a", "b"], {"a": 0.5, "b": 0.5}, CONFIG, random.Random(0)) in {"a", "b"}


# -- shedders ----------------------------------------------------------------------------------------
BUNDLE_RATES = {"x": Rates(0, 0, 150_000, 150_000), "y": Rates(0, 0, 100_000, 100_000), "z": Rates(0, 0, 250_000, 250_000)}


def test_threshold_shedder_unloads_the_biggest_bundles_until_its_excess_is_covered():
    # usage a 0.8, b 0.2, c 0.2 -> average 0.4; a >= 0.4 + 0.1 sheds 0.8 - 0.4 - 0.1 + 0.05 = 35 % of
    # its 1 MB/s = 350 kB/s: z (500 kB/s) alone covers it.
    brokers = {"a": load("a", 0.8, throughput=1_000_000), "b": load("b", 0.2), "c": load("c", 0.2)}
    usage = {"a": 0.8, "b": 0.2, "c": 0.2}
    owned = {"a": ["x", "y", "z"], "b": [], "c": []}
    shed = threshold_shedder(brokers, usage, owned, BUNDLE_RATES, set(), CONFIG)
    assert [(u.broker, u.bundle) for u in shed] == [("a", "z")]
    # z in its grace period: x (300 kB/s) then y (200 kB/s) to reach 350 kB/s.
    shed = threshold_shedder(brokers, usage, owned, BUNDLE_RATES, {"z"}, CONFIG)
    assert [u.bundle for u in shed] == ["x", "y"]


def test_threshold_shedder_leaves_a_broker_with_one_bundle_and_amounts_under_the_minimum():
    brokers = {"a": load("a", 0.8, throughput=1_000_000), "b": load("b", 0.2), "c": load("c", 0.2)}
    usage = {"a": 0.8, "b": 0.2, "c": 0.2}
    assert threshold_shedder(brokers, usage, {"a": ["z"]}, BUNDLE_RATES, set(), CONFIG) == []
    small = {**brokers, "a": load("a", 0.8, throughput=100_000)}  # 35 kB/s < 10 MB / 75
    assert threshold_shedder(small, usage, {"a": ["x", "y", "z"]}, BUNDLE_RATES, set(), CONFIG) == []


def test_threshold_shedder_leaves_a_broker_under_the_average_plus_threshold_however_much_it_carries():
    # a at 0.47 against an average of 0.40: 7 points over, under the 10-point threshold (with the
    # 5-point margin its 10 MB/s would be worth a 200 kB/s unload, above the minimum)
    brokers = {"a": load("a", 0.47, throughput=10_000_000), "b": load("b", 0.4), "c": load("c", 0.33)}
    usage = {"a": 0.47, "b": 0.4, "c": 0.33}
    assert threshold_shedder(brokers, usage, {"a": ["x", "y", "z"], "b": ["w", "v"]}, BUNDLE_RATES, set(), CONFIG) == []
    usage["a"] = 0.56  # 13 points over the average, now 0.43: sheds
    assert [u.broker for u in threshold_shedder(brokers, usage, {"a": ["x", "y", "z"]}, BUNDLE_RATES, set(), CONFIG)]


def test_overload_shedder_sheds_the_excess_over_85_percent_plus_5_points_and_at_least_one_bundle():
    # max use 0.95: (0.95 - 0.85 + 0.05) x 1 MB/s = 150 kB/s; z (500 kB/s) is the biggest: only z.
    brokers = {"a": load("a", 0.95, throughput=1_000_000), "b": load("b", 0.5)}
    shed = overload_shedder(brokers, {"a": ["x", "y", "z"], "b": ["w", "v"]}, BUNDLE_RATES, set(), CONFIG)
    assert [(u.broker, u.bundle) for u in shed] == [("a", "z")]


def test_uniform_load_shedder_moves_what_fits_in_20_percent_of_the_rate_difference():
    # a 1000 msg/s vs b 200: (1000 - 200) / 200 = 400 % > 50 %; budget 0.2 x 800 = 160 msg/s (+ the
    # scaled 1000 msg/s delta, 13.3): z (600) does not fit, x (150) does, then y (100) no longer does.
    brokers = {"a": load("a", rate=1000, throughput=1000), "b": load("b", rate=200, throughput=200)}
    rates = {"x": Rates(75, 75, 0, 0), "y": Rates(50, 50, 0, 0), "z": Rates(300, 300, 0, 0)}
    shed = uniform_load_shedder(brokers, {"a": ["x", "y", "z"], "b": []}, rates, set(), CONFIG)
    assert [(u.broker, u.bundle) for u in shed] == [("a", "x")]
    even = {"a": load("a", rate=250, throughput=1000), "b": load("b", rate=200, throughput=900)}
    assert uniform_load_shedder(even, {"a": ["x", "y"], "b": []}, rates, set(), CONFIG) == []


def test_split_rule_needs_two_topics_a_limit_exceeded_and_room_under_the_cap():
    topics = {"big": ["t1", "t2"], "one": ["t3"], "calm": ["t4", "t5"]}
    long_term = {"big": Rates(300, 200, 0, 0), "one": Rates(900, 900, 0, 0), "calm": Rates(10, 10, 0, 0)}
    splits = bundles_to_split(topics, {}, long_term, 4, CONFIG)  # 500 msg/s > 30000 / 75 = 400
    assert [s.bundle for s in splits] == ["big"] and "rate 500 > 400" in splits[0].reason
    assert bundles_to_split(topics, {}, long_term, CONFIG.max_bundles, CONFIG) == []
    assert [s.bundle for s in bundles_to_split(topics, {"calm": 1001}, {}, 4, CONFIG)] == ["calm"]


# -- the leader --------------------------------------------------------------------------------------
def topic(name, broker, rate=10.0, size=1000.0, consumers=1):
    return TopicReport(name, broker, rate, rate * consumers, 1, consumers, None, None, 0.0, 0.0,
                       rate * size, rate * size * consumers)


def snapshot(placement, usage, rates=None):
    rates = rates or {}
    reports = {b: [] for b in usage}
    for t, b in placement.items():
        reports[b].append(topic(t, b, rates.get(t, 10.0)))
    brokers = {b: BrokerReport(b, ORIGIN, 0.05, 0.01, 0.0, 0.0, tuple(reports[b]), 0.0, usage[b]) for b in usage}
    return Snapshot(brokers, dict(placement), distance=ONE_WAY)


def test_new_topics_of_one_bundle_share_a_broker_and_the_four_bundles_spread_over_four_brokers():
    lm = LoadManager(LoadManagerConfig(), seed=3)
    snap = snapshot({}, {b: 0.0 for b in "abcde"})
    chosen = {t: lm.assign(t, snap) for t in (f"hot-{i}" for i in range(1, 41))}
    by_bundle: dict[str, set[str]] = {}
    for t, b in chosen.items():
        by_bundle.setdefault(lm.bundles.bundle_of(t), set()).add(b)
    assert all(len(owners) == 1 for owners in by_bundle.values())
    assert len({owners.pop() for owners in by_bundle.values()}) == len(by_bundle) == 4


def test_a_round_sheds_the_hot_brokers_biggest_bundles_to_the_idle_brokers():
    # Splits off: the shedder alone moves load. a at 0.9 against b and c at 0.1 (average 0.37) sheds
    # 0.9 - 0.37 - 0.1 + 0.05 = 48 % of its throughput, biggest bundles first: the four bundles of 4
    # and 3 topics (14 of 24 topics, 58 %), to the brokers with the fewest bundles, b and c in turn.
    lm, topics = _all_on_a()
    hot = snapshot({t: "a" for t in topics}, {"a": 0.9, "b": 0.1, "c": 0.1}, {t: 100.0 for t in topics})
    first = lm.round(hot, now=100.0)
    unloads = [e for e in first.events if e["type"] == "bundle_unload"]
    assert [(e["from_broker"], e["to_broker"], len(e["topics"])) for e in unloads] == \
        [("a", "b", 4), ("a", "c", 4), ("a", "c", 3), ("a", "b", 3)]
    assert all(e["by"] == "threshold" for e in unloads)
    assert not [e for e in first.events if e["type"] == "bundle_unload_skipped"]
    assert sorted((m.topic, m.source, m.target) for m in first.migrations) == \
        sorted((t, "a", e["to_broker"]) for e in unloads for t in e["topics"])
    usage = next(e for e in first.events if e["type"] == "lm_usage")
    assert usage["average"] == pytest.approx((0.9 + 0.1 + 0.1) / 3)
    assert lm.round(hot, now=105.0).migrations == []  # before the next shedding period


@pytest.mark.parametrize("target", ["b", "c"])
def test_an_unloaded_bundle_stays_through_its_grace_period_then_may_move_again(target):
    # The brokers that took a's bundles turn hot: within the 30 s grace they keep them, after it they shed.
    lm, topics = _all_on_a()
    first = lm.round(snapshot({t: "a" for t in topics}, {"a": 0.9, "b": 0.1, "c": 0.1}, {t: 100.0 for t in topics}),
                     now=100.0)
    moved = {e["bundle"] for e in first.events if e["type"] == "bundle_unload" and e["to_broker"] == target}
    where = {t: lm.assigned[lm.bundles.bundle_of(t)] for t in topics}
    hot_target = snapshot(where, {"a": 0.1, "b": 0.1, "c": 0.1, target: 0.9}, {t: 100.0 for t in topics})
    assert lm.round(hot_target, now=112.0).migrations == []
    after = lm.round(hot_target, now=140.0)
    again = {e["bundle"] for e in after.events if e["type"] == "bundle_unload"}
    assert again and again <= moved and {m.source for m in after.migrations} == {target}


def test_a_lookup_between_an_unloads_release_and_acquire_gets_the_destination():
    # Baseline workflow: the source releases every topic of the bundle, then each client's lookup
    # lets the destination acquire it. A lookup that finds none of the bundle's topics placed must
    # get the destination chosen at the unload, and the record must still say so once they arrive.
    lm, topics = _all_on_a()
    first = lm.round(snapshot({t: "a" for t in topics}, {"a": 0.9, "b": 0.1, "c": 0.1}, {t: 100.0 for t in topics}),
                     now=100.0)
    unloads = [e for e in first.events if e["type"] == "bundle_unload"]
    in_transit = {t for e in unloads for t in e["topics"]}
    released = snapshot({t: "a" for t in topics if t not in in_transit}, {"a": 0.9, "b": 0.1, "c": 0.1})
    for e in unloads:
        assert {lm.assign(t, released) for t in e["topics"]} == {e["to_broker"]}, e
    arrived = snapshot({t: lm.assigned[lm.bundles.bundle_of(t)] for t in topics}, {"a": 0.1, "b": 0.1, "c": 0.1})
    lm.round(arrived, now=101.0)
    assert {b: sorted(bs) for b, bs in lm.owned(arrived).items()} == \
        {b: sorted(e["bundle"] for e in unloads if e["to_broker"] == b) for b in "bc"} | \
        {"a": sorted(set(lm.bundles.names()) - {e["bundle"] for e in unloads})}


def _all_on_a() -> tuple[LoadManager, list[str]]:
    """A leader (8 bundles, no splits, no smoothing) whose 24 topics all ended up on broker a."""
    config = LoadManagerConfig(bundles=8, shedding_interval=10.0, grace_period=30.0, history=0.0, auto_split=False)
    lm = LoadManager(config, seed=1)
    lm.assigned = {b: "a" for b in lm.bundles.names()}  # e.g. a hash placement before this leader
    return lm, [f"hot-{i}" for i in range(1, 25)]


def test_a_hot_bundle_splits_and_both_halves_go_to_the_idle_brokers():
    config = LoadManagerConfig(bundles=1, split_max_rate=100.0, history=0.0)
    lm = LoadManager(config, seed=2)
    topics = [f"hot-{i}" for i in range(1, 9)]
    placement = {t: "a" for t in topics}
    snap = snapshot(placement, {"a": 0.3, "b": 0.0, "c": 0.0}, {t: 20.0 for t in topics})  # 8 x 40 msg/s = 320 > 100
    decision = lm.round(snap, now=0.0)
    split = next(e for e in decision.events if e["type"] == "bundle_split")
    assert split["bundle"] == "0x00000000_0xffffffff" and len(split["into"]) == 2 and len(lm.bundles) == 2
    unloads = [e for e in decision.events if e["type"] == "bundle_unload"]
    assert [e["bundle"] for e in unloads] == split["into"] and all(e["by"] == "split" for e in unloads)
    assert sorted(e["to_broker"] for e in unloads) == ["b", "c"]  # one half each: neither stays, none doubles up
    assert sorted(m.topic for m in decision.migrations) == sorted(topics)


def test_the_registry_and_the_controller_wiring():
    assert "pulsar-lm" in POLICIES
    family = POLICIES["pulsar-lm"]
    controller = controller_for(family, ControlOptions(seed=5))
    assert isinstance(controller, LoadManager) and controller.workflow == "baseline"
    assert controller_for(POLICIES["epulsar"], ControlOptions()).workflow is None
    snap = snapshot({}, {b: 0.0 for b in "abcdef"})
    placed = choose_brokers([f"hot-{i}" for i in range(30)], snap, family, seed=5)
    assert len(set(placed.values())) == 4  # four bundles, four brokers: load-aware, distance-agnostic


def test_config_round_trips_through_the_managers_command_line():
    import argparse

    config = LoadManagerConfig(shedder="uniform", shedding_interval=5.0, distribute_evenly=False)
    parser = argparse.ArgumentParser()
    LoadManagerConfig.add_arguments(parser)
    assert LoadManagerConfig.from_arguments(parser.parse_args(config.to_argv())) == config
    with pytest.raises(ValueError, match="shedder"):
        LoadManagerConfig(shedder="nope")


def test_the_managers_threshold_is_not_the_shedders():
    """Regression: --lm-threshold (ThresholdShedder's 10 points) once landed in the manager's Lth,
    so a 40 ms UAV topic was judged against 100 ms and never migrated."""
    from testbed.systems.pubsub.role import ManagerOptions
    from testbed.systems.pubsub.manager import parser

    options = ManagerOptions(threshold=0.04)
    argv = ["--node", "cloud", "--nats", "nats://x:4222", "--zk", "x:2181", "--threshold", f"{options.threshold:g}",
            "--seed", "3", *options.load_manager.to_argv()]
    args = parser().parse_args(argv)
    assert args.threshold == 0.04 and LoadManagerConfig.from_arguments(args) == options.load_manager
