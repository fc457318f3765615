"""The paper's formulas, the policies and Algorithm 1, worked by hand.

Coordinates are 2-D with zero height and adjustment unless a test says otherwise, so Serf's
distance is the Euclidean distance (an RTT) and, in the one-way reading the hand-worked numbers use,
d = distance / 2. Positions are written in milliseconds of RTT: c(60) is the point (0.060 s, 0).
The `rtt` reading (d = Serf's distance) doubles every estimate and changes no policy's first choice
(test_the_rtt_reading_doubles_every_estimate_and_keeps_the_choices).
"""

import math
import random
from collections import Counter
from functools import partial

import pytest

from testbed.nc.coordinate import Coordinate
from testbed.policies import latency
from testbed.policies.distance import DEFAULT_DISTANCE, DISTANCES, ONE_WAY, RTT, get_distance
from testbed.policies.latency import centroid
from testbed.policies.snapshot import (BrokerReport, ClientNC, Migration, Snapshot, TopicClients, TopicReport)
from testbed.policies import (POLICIES, AllPairs, EPulsar, Overload, Policy, PulsarHash, can_host, host_refusal,
                                     choose_brokers, get_policy, hash_broker, hash_slot, latency_violated,
                                     overloaded_brokers, perform_repartitioning, place_topics, topics_to_shed)

MS = 1e-3

# The hand-worked numbers below are one-way (d = Serf's RTT / 2).
d = ONE_WAY
aggregate = partial(latency.aggregate, distance=ONE_WAY)
allpairs_worst = partial(latency.allpairs_worst, distance=ONE_WAY)
deviation = partial(latency.deviation, distance=ONE_WAY)
deviation_w = partial(latency.deviation_w, distance=ONE_WAY)
expected_w_tb = partial(latency.expected_w_tb, distance=ONE_WAY)
worst_case_e = partial(latency.worst_case_e, distance=ONE_WAY)
OneWaySnapshot = partial(Snapshot, distance=ONE_WAY)


def c(x_ms, y_ms=0.0, height_ms=0.0, adjustment_ms=0.0):
    return Coordinate((x_ms * MS, y_ms * MS), 0.5, adjustment_ms * MS, height_ms * MS)


# --- formulas -------------------------------------------------------------------------------------


def test_d_is_half_the_serf_rtt():
    # 3-4-5 triangle: RTT = sqrt(30^2 + 40^2) = 50 ms, so d = 25 ms one-way
    assert c(0).distance_to(c(30, 40)) == pytest.approx(0.050)
    assert d(c(0), c(30, 40)) == pytest.approx(0.025)
    # heights add to the RTT: 50 + 4 + 6 = 60 ms RTT -> 30 ms one-way
    assert d(c(0, height_ms=4), c(30, 40, height_ms=6)) == pytest.approx(0.030)


def test_centroid_is_the_mean_of_every_component():
    a = Coordinate((0.0, 0.0), 0.1, 0.001, 0.002)
    b = Coordinate((0.040, 0.0), 0.3, 0.003, 0.004)
    e = Coordinate((0.020, 0.060), 0.5, -0.001, 0.006)
    m = centroid([a, b, e])
    # vec ((0 + 40 + 20) / 3, (0 + 0 + 60) / 3) = (20, 20) ms; error (0.1+0.3+0.5)/3 = 0.3;
    # adjustment (1 + 3 - 1) / 3 = 1 ms; height (2 + 4 + 6) / 3 = 4 ms
    assert m.vec == pytest.approx((0.020, 0.020))
    assert m.error == pytest.approx(0.3)
    assert m.adjustment == pytest.approx(0.001)
    assert m.height == pytest.approx(0.004)
    assert centroid([ClientNC("x", a)]) == a
    with pytest.raises(ValueError):
        centroid([])


# Topic T: producers at x = 0 and 20, consumers at x = 100 and 120 (ms of RTT, on a line).
PRODUCERS = [c(0), c(20)]
CONSUMERS = [c(100), c(120)]
BROKERS = {"ba": c(0), "bb": c(60), "bc": c(200)}


def test_deviation_w_by_hand():
    # NCP = 10, NCC = 110; max distance to its centroid is 10 ms RTT on each side -> 5 ms one-way each
    assert deviation_w(PRODUCERS, CONSUMERS) == pytest.approx(0.010)
    assert deviation_w(PRODUCERS, CONSUMERS, literal=True) == pytest.approx(0.010)
    # 2-D: producers (0,0) and (40,0) -> NCP (20,0), both 20 away -> 10 ms;
    # consumers (0,60) and (0,100) -> NCC (0,80), both 20 away -> 10 ms; W = 20 ms
    assert deviation_w([c(0, 0), c(40, 0)], [c(0, 60), c(0, 100)]) == pytest.approx(0.020)
    # one side empty: only the other side counts
    assert deviation_w(PRODUCERS, []) == pytest.approx(0.005)


def test_deviation_with_heights_counts_only_the_excess_over_the_centroid():
    # one producer and one consumer with 8 ms access heights: each is its own centroid, so W = 0;
    # the literal d(NC(p), NCP) would be (0 + 8 + 8) / 2 = 8 ms per side -> 16 ms
    p, q = c(0, height_ms=8), c(50, height_ms=8)
    assert deviation_w([p], [q]) == pytest.approx(0.0)
    assert deviation_w([p], [q], literal=True) == pytest.approx(0.016)
    # heights 2 and 10 at x = 0 and 40: centroid x = 20, height 6;
    # excess of the second = (20 + 10 - 6) / 2 = 12 ms; of the first (20 + 2 - 6) / 2 = 8 ms
    center = centroid([c(0, height_ms=2), c(40, height_ms=10)])
    assert deviation(c(40, height_ms=10), center) == pytest.approx(0.012)
    assert deviation(c(0, height_ms=2), center) == pytest.approx(0.008)


def test_worst_case_e_by_hand():
    # broker at (0, 30): producers (0,0) -> 30 ms RTT, (40,0) -> 50 ms RTT: worst one-way 25 ms;
    # consumers (0,60) -> 30, (0,100) -> 70 ms RTT: worst one-way 35 ms; E = 60 ms
    assert worst_case_e([c(0, 0), c(40, 0)], [c(0, 60), c(0, 100)], c(0, 30)) == pytest.approx(0.060)
    # on the line: broker bb at 60: producers 60 and 40 away -> 30 ms; consumers 40 and 60 -> 30 ms
    assert worst_case_e(PRODUCERS, CONSUMERS, BROKERS["bb"]) == pytest.approx(0.060)


def test_expected_w_tb_by_hand():
    report = aggregate("T", "bc", BROKERS["bc"], PRODUCERS, CONSUMERS, rate_in=10, rate_out=20)
    # NCP = 10, NCC = 110, W(T) = 10 ms
    assert report.ncp.vec == pytest.approx((0.010, 0.0)) and report.ncc.vec == pytest.approx((0.110, 0.0))
    assert (report.producers, report.consumers, report.rate_in, report.rate_out) == (2, 2, 10.0, 20.0)
    assert report.w == pytest.approx(0.010)
    # E(T) on bc (x = 200): producers 200 away -> 100 ms, consumers 100 away -> 50 ms: 150 ms
    assert report.e == pytest.approx(0.150)
    # W(T, ba) = d(10, 0) + d(110, 0) + W = 5 + 55 + 10 = 70 ms
    assert expected_w_tb(report, BROKERS["ba"]) == pytest.approx(0.070)
    # W(T, bb) = d(10, 60) + d(110, 60) + W = 25 + 25 + 10 = 60 ms
    assert expected_w_tb(report, BROKERS["bb"]) == pytest.approx(0.060)
    # W(T, bc) = d(10, 200) + d(110, 200) + W = 95 + 45 + 10 = 150 ms
    assert expected_w_tb(report, BROKERS["bc"]) == pytest.approx(0.150)


def test_allpairs_worst_by_hand_and_against_brute_force():
    # through ba (x=0): worst producer 20 -> 10 ms, worst consumer 120 -> 60 ms: 70 ms
    assert allpairs_worst(PRODUCERS, CONSUMERS, BROKERS["ba"]) == pytest.approx(0.070)
    assert allpairs_worst(PRODUCERS, CONSUMERS, BROKERS["bb"]) == pytest.approx(0.060)
    assert allpairs_worst(PRODUCERS, CONSUMERS, BROKERS["bc"]) == pytest.approx(0.150)
    rng = random.Random(3)
    for _ in range(50):
        ps = [Coordinate(tuple(rng.uniform(-0.05, 0.05) for _ in range(3)), 0.1, 0.0, rng.uniform(0, 0.005))
              for _ in range(rng.randint(1, 5))]
        cs = [Coordinate(tuple(rng.uniform(-0.05, 0.05) for _ in range(3)), 0.1, 0.0, rng.uniform(0, 0.005))
              for _ in range(rng.randint(1, 5))]
        b = Coordinate(tuple(rng.uniform(-0.05, 0.05) for _ in range(3)), 0.1, 0.0, rng.uniform(0, 0.005))
        brute = max(d(p, b) + d(b, q) for p in ps for q in cs)
        assert allpairs_worst(ps, cs, b) == pytest.approx(brute)
        # the centroid estimate never promises less than the real worst pair (deviation is an excess)
        report = aggregate("t", "b", b, ps, cs)
        assert expected_w_tb(report, b) >= brute - 1e-12


def test_single_client_sides_make_w_tb_equal_e():
    # one producer and one consumer, with heights: W(t, b) is exactly the pair's latency through b
    p, q, b = c(0, height_ms=8), c(30, 40, height_ms=4), c(30, 0, height_ms=1)
    report = aggregate("t", "b", b, [p], [q])
    # d(p, b) = (30 + 8 + 1) / 2 = 19.5 ms; d(q, b) = (40 + 4 + 1) / 2 = 22.5 ms; total 42 ms
    assert report.e == pytest.approx(0.042)
    assert expected_w_tb(report, b) == pytest.approx(0.042)


# --- JSON -----------------------------------------------------------------------------------------


def _snapshot() -> Snapshot:
    report = aggregate("T", "bc", BROKERS["bc"], PRODUCERS, CONSUMERS, rate_in=10, rate_out=20)
    lonely = TopicReport("U", "ba", 0.0, 0.0, 0, 0, None, None, 0.0, 0.0)
    return OneWaySnapshot({"ba": BrokerReport("ba", BROKERS["ba"], 0.5, 0.25, 0.125, 0.0, (lonely,)),
                     "bb": BrokerReport("bb", BROKERS["bb"]),
                     "bc": BrokerReport("bc", BROKERS["bc"], rate_out=20.0, topics=(report,))},
                    {"T": "bc", "U": "ba"}, {"T": 0.100, "U": 0.050})


def test_json_round_trips():
    snap = _snapshot()
    again = Snapshot.from_json(snap.to_json())
    assert again == snap
    assert again.report("T").ncp == snap.report("T").ncp
    assert Migration.from_json(Migration("T", "bc", "bb").to_json()) == Migration("T", "bc", "bb")
    clients = TopicClients((ClientNC("p", c(1)),), (ClientNC("q", c(2, height_ms=3)),))
    assert TopicClients.from_json(clients.to_json()) == clients
    # Serf's RPC keys are accepted too
    assert BrokerReport.from_dict({"broker": "x", "coord": {"Vec": [0.1], "Error": 1.0, "Adjustment": 0.0,
                                                            "Height": 0.001}}).coord.height == 0.001


# --- policies -------------------------------------------------------------------------------------


def test_registry():
    assert list(POLICIES) == ["epulsar", "allpairs", "pulsar-hash", "pulsar-lm"]  # ours, the baselines, then seed 001
    assert all(isinstance(p, Policy) for p in POLICIES.values())
    assert get_policy("epulsar").latency_aware and not get_policy("pulsar-hash").latency_aware
    # only AllPairs ranks on every client's coordinate, so only it makes brokers report them
    assert [name for name, p in POLICIES.items() if p.needs_clients] == ["allpairs"]
    with pytest.raises(ValueError, match="unknown policy"):
        get_policy("random")


def test_pulsar_hash_is_stable():
    # sha1("a") = 86f7e437faa5a7fc... -> h / 2^64 = 0.52722; with 4 brokers floor(0.52722 * 4) = 2
    assert hash_slot("a", 4) == 2
    # sorted broker list [b0, b1, b2, b3] -> slot 2 is b2, whatever order the brokers come in
    assert hash_broker("a", ["b3", "b1", "b2", "b0"]) == "b2"
    assert hash_broker("a", ["b0", "b1", "b2", "b3"]) == "b2"
    # sha1("avatar0") = 0be1ceac... -> 0.04641 -> slot 0 of any count up to 21
    assert hash_slot("avatar0", 16) == 0 and hash_slot("avatar0", 21) == 0 and hash_slot("avatar0", 22) == 1


def test_pulsar_hash_is_uniform():
    counts = Counter(hash_broker(f"topic{i}", ["b0", "b1", "b2", "b3", "b4"]) for i in range(20_000))
    assert set(counts) == {"b0", "b1", "b2", "b3", "b4"}
    assert all(abs(n - 4000) <= 200 for n in counts.values()), counts  # within 5 %


def test_pulsar_hash_ranks_the_rest_by_load():
    snap = OneWaySnapshot({"b0": BrokerReport("b0", c(0), rate_out=500.0), "b1": BrokerReport("b1", c(0), rate_out=100.0),
                     "b2": BrokerReport("b2", c(0), rate_out=0.0), "b3": BrokerReport("b3", c(0), rate_out=300.0)},
                    {})
    # "a" hashes to b2 (above); then least loaded: b1 (100), b3 (300), b0 (500)
    assert PulsarHash().feasible_brokers("a", snap) == ["b2", "b1", "b3", "b0"]


def _topic_snapshot(threshold: float) -> Snapshot:
    report = aggregate("T", "bc", BROKERS["bc"], PRODUCERS, CONSUMERS)
    return OneWaySnapshot({name: BrokerReport(name, coord, topics=(report,) if name == "bc" else ())
                     for name, coord in BROKERS.items()}, {"T": "bc"}, {"T": threshold})


def _clients() -> dict:
    return {"T": TopicClients(tuple(ClientNC(f"p{i}", p) for i, p in enumerate(PRODUCERS)),
                              tuple(ClientNC(f"c{i}", q) for i, q in enumerate(CONSUMERS)))}


def test_epulsar_ranking_and_fallback():
    # W(T, b): bb 60 ms, ba 70 ms, bc 150 ms (test_expected_w_tb_by_hand)
    assert EPulsar().feasible_brokers("T", _topic_snapshot(0.065)) == ["bb"]
    assert EPulsar().feasible_brokers("T", _topic_snapshot(0.100)) == ["bb", "ba"]
    assert EPulsar().feasible_brokers("T", _topic_snapshot(0.070)) == ["bb", "ba"]  # <= Lth is feasible
    # nothing under 50 ms: every broker, ranked by W(T, b)
    assert EPulsar().feasible_brokers("T", _topic_snapshot(0.050)) == ["bb", "ba", "bc"]
    # a topic nobody reports: every broker, least loaded first (all 0 here: by name)
    assert EPulsar().feasible_brokers("new", _topic_snapshot(0.050)) == ["ba", "bb", "bc"]


def test_epulsar_and_allpairs_choose_the_same_broker():
    # AllPairs worst through ba 70, bb 60, bc 150 ms: the same values and order as W(T, b) on a line
    snap = _topic_snapshot(0.100)
    assert AllPairs().feasible_brokers("T", snap, _clients()) == ["bb", "ba"]
    assert choose_brokers(["T"], snap, POLICIES["allpairs"], _clients()) == {"T": "bb"}
    assert choose_brokers(["T"], snap, POLICIES["epulsar"]) == {"T": "bb"}
    assert AllPairs().feasible_brokers("T", _topic_snapshot(0.050), _clients()) == ["bb", "ba", "bc"]
    with pytest.raises(ValueError, match="individual client coordinates"):
        AllPairs().feasible_brokers("T", snap)


def test_epulsar_is_conservative_where_allpairs_is_exact():
    # producers at (0, +-30), consumer at (100, 0); broker at (50, 0)
    ps, cs, b = [c(0, 30), c(0, -30)], [c(100, 0)], c(50, 0)
    # exact worst: producer sqrt(50^2 + 30^2) = 58.31 ms RTT -> 29.15; consumer 50 -> 25: 54.15 ms
    exact = (math.hypot(50, 30) + 50) / 2 * MS
    assert allpairs_worst(ps, cs, b) == pytest.approx(exact)
    # ePulsar: NCP = (0, 0), W = 30 / 2 = 15 ms; W(t, b) = 25 + 25 + 15 = 65 ms
    report = aggregate("t", "x", b, ps, cs)
    assert expected_w_tb(report, b) == pytest.approx(0.065)
    snap = OneWaySnapshot({"b": BrokerReport("b", b, topics=(report,))}, {"t": "b"}, {"t": 0.060})
    clients = {"t": TopicClients(tuple(ClientNC(str(i), p) for i, p in enumerate(ps)), (ClientNC("q", cs[0]),))}
    # with Lth = 60 ms AllPairs finds b feasible (54 ms); ePulsar's 65 ms is not, so it falls back to
    # ranking all brokers -- the same single broker here
    assert AllPairs().scores("t", snap, clients)["b"] <= 0.060 < EPulsar().scores("t", snap)["b"]
    assert EPulsar().feasible_brokers("t", snap) == ["b"]


# --- Algorithm 1 ----------------------------------------------------------------------------------


def _report(topic, broker, producers, consumers, rate_in, rate_out):
    return aggregate(topic, broker, BROKERS[broker], producers, consumers, rate_in, rate_out)


def _cluster(bb_rate_out: float = 0.0) -> Snapshot:
    """ba (x = 0) is over Rth_out = 1500 msg/s; T on bc violates its 100 ms threshold.

    T:  producers 0, 20; consumers 100, 120; on bc: E = 150 ms > 100. W(T, .): bb 60, ba 70, bc 150.
    t2: producer 0, consumer 40 (W = 0); W(t2, ba) = 0 + 20 = 20, bb = 30 + 10 = 40, bc = 100 + 80 = 180.
    t3, t4: clients at 0 and 10, on ba.
    ba rate_out = 900 + 600 + 500 = 2000 > 1500.
    """
    t1 = _report("T", "bc", PRODUCERS, CONSUMERS, 10, 20)
    t2 = _report("t2", "ba", [c(0)], [c(40)], 100, 900)
    t3 = _report("t3", "ba", [c(0)], [c(10)], 50, 600)
    t4 = _report("t4", "ba", [c(0)], [c(10)], 10, 500)
    t5 = _report("t5", "bb", [c(60)], [c(60)], 100, bb_rate_out)
    brokers = {"ba": BrokerReport("ba", BROKERS["ba"], 0.30, 0.30, 0.30, 2000.0, (t2, t3, t4)),
               "bb": BrokerReport("bb", BROKERS["bb"], 0.05, 0.05, 0.05, bb_rate_out, (t5,)),
               "bc": BrokerReport("bc", BROKERS["bc"], 0.01, 0.01, 0.01, 20.0, (t1,))}
    placement = {"T": "bc", "t2": "ba", "t3": "ba", "t4": "ba", "t5": "bb"}
    return OneWaySnapshot(brokers, placement, {t: 0.100 for t in placement})


LIMITS = Overload(output_rate=1500.0)


def test_overload_and_latency_detection():
    snap = _cluster()
    assert overloaded_brokers(snap, LIMITS) == ["ba"]
    assert latency_violated("T", snap)  # 150 ms > 100 ms
    assert not any(latency_violated(t, snap) for t in ("t2", "t3", "t4", "t5"))
    # just moved to bb, which has not reported it yet: bc's stale E(T) does not count
    moved = OneWaySnapshot(snap.brokers, {**snap.placement, "T": "bb"}, snap.thresholds)
    assert moved.report("T").broker == "bc" and not latency_violated("T", moved)
    # shed by decreasing Rout (in + out): t2 (1000) -> rate_out 2000 - 900 = 1100 <= 1500: done
    assert topics_to_shed("ba", snap, LIMITS) == ["t2"]
    # with Rth_out = 600: t2 -> 1100, t3 (650) -> 500 <= 600
    assert topics_to_shed("ba", snap, Overload(output_rate=600.0)) == ["t2", "t3"]
    assert topics_to_shed("bb", snap, LIMITS) == []


def test_resource_trigger_targets_a_proportional_message_rate():
    snap = _cluster()
    hot = BrokerReport("ba", BROKERS["ba"], cpu=0.95, rate_out=100.0, topics=snap.brokers["ba"].topics)
    snap = OneWaySnapshot({**snap.brokers, "ba": hot}, snap.placement, snap.thresholds)
    # message rate (in + out) on ba: t2 1000 + t3 650 + t4 510 = 2160; CPU 95 % -> target
    # 2160 * 0.85 / 0.95 = 1932.6; shedding t2 leaves 1160 <= 1932.6
    assert overloaded_brokers(snap, LIMITS) == ["ba"]
    assert topics_to_shed("ba", snap, LIMITS) == ["t2"]
    # with a 40 % CPU threshold: target 2160 * 0.40 / 0.95 = 909.5: t2 (-> 1160), t3 (-> 510 <= 909.5)
    assert topics_to_shed("ba", snap, Overload(cpu=0.4, output_rate=1500.0)) == ["t2", "t3"]
    # memory 90 % and rate_out 2000 at once: the memory target 2160 * 0.85 / 0.90 = 2040 and
    # Rth_out = 1500 are both met after t2 (1160 msg/s, rate_out 1100) ...
    both = BrokerReport("ba", BROKERS["ba"], memory=0.90, rate_out=2000.0, topics=hot.topics)
    snap2 = OneWaySnapshot({**snap.brokers, "ba": both}, snap.placement, snap.thresholds)
    assert topics_to_shed("ba", snap2, LIMITS) == ["t2"]
    # ... while Rth_out = 1000 also needs t3 (rate_out 1100 - 600 = 500)
    assert topics_to_shed("ba", snap2, Overload(output_rate=1000.0)) == ["t2", "t3"]


def test_can_host_projects_rate_and_resources():
    snap = _cluster(bb_rate_out=1000.0)
    placement = dict(snap.placement)
    # bb: 1000 + t2's 900 = 1900 > 1500
    assert not can_host("bb", "t2", placement, snap, LIMITS)
    # bb: 1000 + T's 20 = 1020
    assert can_host("bb", "T", placement, snap, LIMITS)
    # ba still holds t2, t3, t4 (2000) -> cannot host (not even its own t2)
    assert not can_host("ba", "t2", placement, snap, LIMITS)
    # once t2 is placed elsewhere, ba projects 1100 and can take t2 back? 1100 + 900 = 2000: no;
    # but it can take T: 1100 + 20 = 1120
    placement["t2"] = "bc"
    assert can_host("ba", "T", placement, snap, LIMITS)
    # resources: bb uses 5 % for its 1100 msg/s (t5: 100 in + 1000 out) -> 0.05/1100 per msg/s;
    # adding t2 (1000 msg/s) -> 0.05 + 1000 * 0.05 / 1100 = 0.0955 <= 0.85 (Rth_out out of the way)
    assert can_host("bb", "t2", dict(snap.placement), snap, Overload(output_rate=1e9))
    # with a CPU threshold of 9 %: 0.0955 > 0.09
    assert not can_host("bb", "t2", dict(snap.placement), snap, Overload(cpu=0.09, output_rate=1e9))
    # an idle broker scales by the cluster's average cost per msg/s:
    # ba 0.30/2160 = 0.0001389, bb 0.05/1100 = 0.0000455, bc 0.01/30 = 0.0003333 -> mean 0.0001726;
    # + t2's 1000 msg/s -> 0.1726
    idle = OneWaySnapshot({**snap.brokers, "bd": BrokerReport("bd", c(0))}, snap.placement, snap.thresholds)
    assert can_host("bd", "t2", dict(snap.placement), idle, Overload(cpu=0.18, output_rate=1e9))
    assert not can_host("bd", "t2", dict(snap.placement), idle, Overload(cpu=0.17, output_rate=1e9))


def test_perform_repartitioning_moves_the_violator_and_sheds_the_overload():
    snap = _cluster()
    # T (violated): candidates [bb (60), ba (70)]; t2 (shed): [ba (20), bb (40)]. Both have 2; by name T first.
    # T -> bb (bb 0 + 20). t2 -> ba? ba still 2000 -> no; bb: 20 + 900 = 920 <= 1500, and bb's
    # 5 % for 100 msg/s (t5) grows to 0.05 + 0.0005 * (30 + 1000) = 0.565 <= 0.85 -> bb.
    assert perform_repartitioning(snap, POLICIES["epulsar"], LIMITS) == [Migration("T", "bc", "bb"),
                                                                         Migration("t2", "ba", "bb")]


def test_a_topic_no_candidate_can_host_stays():
    snap = _cluster(bb_rate_out=1000.0)
    # T -> bb (1000 + 20 = 1020); t2 -> ba (2000) no, bb (1020 + 900) no; bc (180 ms) not feasible: stays
    assert perform_repartitioning(snap, POLICIES["epulsar"], LIMITS) == [Migration("T", "bc", "bb")]


def test_a_shed_topic_that_stays_says_why_every_candidate_refused():
    """ePulsar's overload branch reports each shed topic's candidates in the policy's order, each
    with why it could not host (the numbers of `test_a_topic_no_candidate_can_host_stays`)."""
    from testbed.policies.control import Algorithm1, ControlOptions

    decision = Algorithm1(POLICIES["epulsar"], ControlOptions(overload=LIMITS)).round(_cluster(bb_rate_out=1000.0), 0.0)
    assert decision.migrations == [Migration("T", "bc", "bb")]
    (shed,) = decision.events
    assert shed["broker"] == "ba" and shed["topics"] == ["t2"] and shed["moved"] == {"t2": None}
    assert shed["candidates"] == {"t2": [{"broker": "ba", "refused": "output rate 2000 msg/s > Rth_out 1500"},
                                         {"broker": "bb", "refused": "output rate 1920 msg/s > Rth_out 1500"}]}
    moving = Algorithm1(POLICIES["epulsar"], ControlOptions(overload=LIMITS)).round(_cluster(), 0.0).events[0]
    assert moving["moved"] == {"t2": "bb"} and moving["candidates"]["t2"][-1] == {"broker": "bb", "refused": None}
    snap = _cluster(bb_rate_out=1000.0)  # bb's CPU with t2: 0.0955 (`test_can_host_projects_rate_and_resources`)
    assert host_refusal("bb", "t2", dict(snap.placement), snap, Overload(cpu=0.09, output_rate=1e9)) == "cpu 0.10 > 0.09"


def test_pulsar_hash_ignores_latency_but_sheds_load():
    snap = _cluster()
    # T's violation is not a trigger; t2 is shed from ba. sha1("t2") = 2a5bd027... -> 0.165 -> slot 0
    # of 3: ba, its own overloaded broker; then the least loaded: bb (rate_out 0) before bc (20)
    assert hash_broker("t2", ["ba", "bb", "bc"]) == "ba"
    assert PulsarHash().feasible_brokers("t2", snap) == ["ba", "bb", "bc"]
    assert perform_repartitioning(snap, POLICIES["pulsar-hash"], LIMITS) == [Migration("t2", "ba", "bb")]


def test_place_topics_places_the_most_constrained_topic_first():
    # "a-two" can go to bb or ba, "z-one" only to bb (latency); bb has room for one of them.
    two = _report("a-two", "bc", [c(40)], [c(40)], 0, 800)   # W: bb 20, ba 40, bc 160 ms
    one = _report("z-one", "bc", [c(60)], [c(70)], 0, 800)   # W: bb 5, ba 65, bc 135 ms
    brokers = {"ba": BrokerReport("ba", BROKERS["ba"]), "bb": BrokerReport("bb", BROKERS["bb"]),
               "bc": BrokerReport("bc", BROKERS["bc"], rate_out=1600.0, topics=(two, one))}
    snap = OneWaySnapshot(brokers, {"a-two": "bc", "z-one": "bc"}, {"a-two": 0.050, "z-one": 0.050})
    policy = POLICIES["epulsar"]
    assert policy.feasible_brokers("a-two", snap) == ["bb", "ba"]
    assert policy.feasible_brokers("z-one", snap) == ["bb"]

    def check(b, t, p, m):
        return can_host(b, t, p, m, LIMITS)

    # z-one (1 candidate) first -> bb (800); a-two: bb 800 + 800 = 1600 > 1500 -> ba
    assert place_topics(["a-two", "z-one"], snap.placement, snap, policy, check) == {"z-one": "bb", "a-two": "ba"}
    # without the sort, a-two would have taken bb and z-one would have nowhere to go.
    # Both violate 50 ms on bc (E = 160 and 135 ms), so Algorithm 1 moves both:
    assert latency_violated("a-two", snap) and latency_violated("z-one", snap)
    assert perform_repartitioning(snap, policy, LIMITS) == [Migration("a-two", "bc", "ba"),
                                                            Migration("z-one", "bc", "bb")]


def test_overload_from_scenario_config():
    from testbed.systems.pubsub.schema import Overload as ScenarioOverload

    assert Overload.from_config(ScenarioOverload()) == Overload(0.85, 0.85, 0.85, 20_000.0)
    assert ONE_WAY(c(0), c(2)) == pytest.approx(0.001)


# --- the reading of d -----------------------------------------------------------------------------


def test_the_readings_and_their_registry():
    assert list(DISTANCES) == ["one_way", "rtt"] and DEFAULT_DISTANCE == "one_way"
    # 3-4-5 triangle with heights 4 and 6: Serf's RTT estimate 50 + 10 = 60 ms
    a, b = c(0, height_ms=4), c(30, 40, height_ms=6)
    assert RTT(a, b) == pytest.approx(0.060) and ONE_WAY(a, b) == pytest.approx(0.030)
    assert RTT.of_rtt(0.080) == 0.080 and ONE_WAY.of_rtt(0.080) == 0.040
    assert get_distance("rtt") is RTT
    with pytest.raises(ValueError, match="unknown distance reading"):
        get_distance("half")


def test_the_rtt_reading_doubles_every_estimate_and_keeps_the_choices():
    """Every formula is linear in d: the paper's literal reading doubles E(t), W(t) and W(t, b), so a
    policy's first choice stays and only the comparison with Lth(t) changes."""
    one = latency.aggregate("T", "bc", BROKERS["bc"], PRODUCERS, CONSUMERS, distance=ONE_WAY)
    two = latency.aggregate("T", "bc", BROKERS["bc"], PRODUCERS, CONSUMERS, distance=RTT)
    assert two.e == pytest.approx(2 * one.e) == pytest.approx(0.300) and two.w == pytest.approx(2 * one.w)
    for b in BROKERS.values():
        assert latency.expected_w_tb(two, b, distance=RTT) == pytest.approx(2 * latency.expected_w_tb(one, b, distance=ONE_WAY))
        assert (latency.allpairs_worst(PRODUCERS, CONSUMERS, b, distance=RTT)
                == pytest.approx(2 * latency.allpairs_worst(PRODUCERS, CONSUMERS, b, distance=ONE_WAY)))
    assert latency.deviation(c(40, height_ms=10), c(20, height_ms=6), distance=RTT) == pytest.approx(0.024)

    def snapshot(reading, report, threshold):
        return Snapshot({name: BrokerReport(name, coord, topics=(report,) if name == "bc" else ())
                         for name, coord in BROKERS.items()}, {"T": "bc"}, {"T": threshold}, distance=reading)

    # Lth = 100 ms: one-way, W(T, .) = bb 60, ba 70 ms are feasible; literally 120 and 140 ms: none is,
    # so every broker is ranked, and the first choice is bb either way
    assert EPulsar().feasible_brokers("T", snapshot(ONE_WAY, one, 0.100)) == ["bb", "ba"]
    assert EPulsar().feasible_brokers("T", snapshot(RTT, two, 0.100)) == ["bb", "ba", "bc"]
    assert AllPairs().feasible_brokers("T", snapshot(RTT, two, 0.100), _clients())[0] == "bb"
    # E(T) on bc: 150 ms one-way, 300 ms literally: violated under both at 100 ms; at 200 ms only literally
    assert latency_violated("T", snapshot(ONE_WAY, one, 0.100)) and latency_violated("T", snapshot(RTT, two, 0.100))
    assert not latency_violated("T", snapshot(ONE_WAY, one, 0.200)) and latency_violated("T", snapshot(RTT, two, 0.200))
    assert Snapshot.from_json(snapshot(RTT, two, 0.1).to_json()).distance is RTT


# --- handover-aware placement (beyond the paper) ----------------------------------------------------


def test_an_early_round_moves_only_the_concerned_violated_topics_and_holds_a_return():
    from testbed.policies.handover import early_round

    snap = _cluster()  # T on bc violates (E 150 ms > 100); ba is overloaded, t2 would be shed by a full round
    ep = POLICIES["epulsar"]
    moves, why = early_round(["T"], snap, ep, {}, now=100.0, hold_s=10.0, thresholds=LIMITS)
    assert moves == [Migration("T", "bc", "bb")] and why == {}  # t2's overload is the periodic round's
    back = {"T": (95.0, "bb")}  # T came from bb 5 s ago: going back there is ping-pong
    moves, why = early_round(["T", "t3", "gone"], snap, ep, back, now=100.0, hold_s=10.0, thresholds=LIMITS)
    assert moves == [] and why == {"T": "held: would return to bb, which it left 5.0 s ago (hold 10 s)",
                                   "t3": "E(t) within its threshold", "gone": "not placed"}
    assert early_round(["T"], snap, ep, {"T": (89.0, "bb")}, now=100.0, hold_s=10.0, thresholds=LIMITS)[0]  # hold over
    onwards = {"T": (99.0, "ba")}  # T left ba 1 s ago: a move on to bb (a third zone) is followed at once
    assert early_round(["T"], snap, ep, onwards, now=100.0, hold_s=10.0, thresholds=LIMITS)[0] == [Migration("T", "bc", "bb")]
    full = _cluster(bb_rate_out=1490.0)  # bb cannot take T (1490 + 20 > 1500); ba is full: T stays
    assert early_round(["T"], full, ep, {}, 100.0, 10.0, LIMITS) == ([], {"T": "no better broker can host it"})


def test_a_client_reports_early_when_its_coordinate_moved_at_most_once_per_interval():
    from testbed.policies.handover import EarlyReports, HandoverTrigger, coordinate_moved

    assert coordinate_moved(c(0), c(12), 0.005, ONE_WAY)       # d = 6 ms > 5 ms
    assert not coordinate_moved(c(0), c(10), 0.005, ONE_WAY)   # d = 5 ms: not more
    assert coordinate_moved(c(0), c(6), 0.005, RTT)            # the rtt reading doubles d
    assert not coordinate_moved(None, c(50), 0.005, ONE_WAY)   # never reported: nothing to compare
    assert not coordinate_moved(c(0, height_ms=20), c(0, height_ms=20), 0.005, ONE_WAY)  # heights alone: no move
    assert coordinate_moved(c(0, height_ms=8), c(0, height_ms=20), 0.005, ONE_WAY)       # access 12 ms longer
    limit = EarlyReports(1.0)
    assert [limit.allow(t) for t in (0.0, 0.5, 0.99, 1.0, 1.5, 2.1)] == [True, False, False, True, False, True]
    trigger = HandoverTrigger(True, 0.002, 0.25, 0.5, 8.0)
    assert HandoverTrigger.from_json(trigger.to_json()) == trigger and HandoverTrigger.from_json(None).enabled is False


def _infeasible(on: str) -> Snapshot:
    """"far" (producer at 0, consumer at 200 ms RTT) on broker `on`: every broker of the line 0-60-200
    scores W = 100 ms one-way, over its 50 ms threshold; "near" (0 and 60) on bc: W bc 170, ba/bb 30 ms,
    over its 20 ms threshold too, but ba gains 140 ms."""
    far = _report("far", on, [c(0)], [c(200)], 10, 10)
    near = _report("near", "bc", [c(0)], [c(60)], 10, 10)
    brokers = {b: BrokerReport(b, BROKERS[b], topics=tuple(t for t in (far, near) if t.broker == b)) for b in BROKERS}
    return OneWaySnapshot(brokers, {"far": on, "near": "bc"}, {"far": 0.050, "near": 0.020})


def test_an_infeasible_topic_moves_only_for_the_gain_asked():
    """Algorithm 1 as written moves a topic no broker can serve to the lowest-scoring broker, by any
    margin (a tie broken by name here; estimates a millisecond apart on the live system): with
    `min_gain` such a move must gain that much, and the topic stays, reported in `kept`."""
    from testbed.policies import too_little_gain
    from testbed.policies.control import Algorithm1, ControlOptions

    epulsar, snap = POLICIES["epulsar"], _infeasible("bb")
    assert EPulsar().scores("far", snap) == pytest.approx({"ba": 0.100, "bb": 0.100, "bc": 0.100})
    assert perform_repartitioning(snap, epulsar, LIMITS) == [Migration("far", "bb", "ba"), Migration("near", "bc", "ba")]
    kept: set[str] = set()
    assert perform_repartitioning(snap, epulsar, LIMITS, min_gain=0.005, kept=kept) == [Migration("near", "bc", "ba")]
    assert kept == {"far"}
    assert too_little_gain("far", snap, epulsar, 0.005) and not too_little_gain("near", snap, epulsar, 0.005)
    assert too_little_gain("near", snap, epulsar, 0.141)  # 140 ms gained < 141 asked: stays
    assert not too_little_gain("far", snap, epulsar, 0.0)  # 0: Algorithm 1 as written
    # AllPairs ranks on every client's coordinate and is kept the same way
    clients = {"far": TopicClients((ClientNC("p", c(0)),), (ClientNC("s", c(200)),)),
               "near": TopicClients((ClientNC("p", c(0)),), (ClientNC("s", c(60)),))}
    assert perform_repartitioning(snap, POLICIES["allpairs"], LIMITS, clients=clients, min_gain=0.005) \
        == [Migration("near", "bc", "ba")]
    # the controller takes it from its options and says which topics it kept
    decision = Algorithm1(epulsar, ControlOptions(overload=LIMITS, infeasible_min_gain=0.005)).round(snap, 0.0)
    assert decision.migrations == [Migration("near", "bc", "ba")]
    assert decision.events == [{"type": "infeasible_kept", "topics": ["far"], "min_gain_s": 0.005}]
    assert Algorithm1(epulsar, ControlOptions(overload=LIMITS)).round(snap, 0.0).events == []
