"""Paper 5.5 assessment on tiny synthetic topologies whose answers are known, and the Spark job.

MMOG: two cities aaa and bbb, 30 ms one-way apart; brokers with 0.5 ms local links, game servers
with 4.5 ms access. Coordinates embed it exactly: city aaa at x = 0, bbb at x = 60 ms (RTT), each
node's height = its access RTT (2 x access one-way). So one-way latencies, estimated and configured,
are 5 ms from a game server to its own city's broker and 35 ms to the other city's.

UAV: zones zone1 and zone2, 15 ms one-way apart, a cloud 40 ms one-way from both; brokers, NC
proxies and the cloud have 0.5 ms local links; a UAV has 8 ms access. Coordinates: zone1 at (0, 0),
zone2 at (30, 0), cloud at (15, sqrt(80^2 - 15^2)) ms so it is 80 ms RTT from both; heights 1 ms.

The hand-worked latencies are one-way (the `one_way` reading of d); the `rtt` reading doubles each.
"""

import csv
import json
import math
import random
import shutil
import time

import pytest

from testbed.nc.coordinate import Coordinate
from testbed.systems.pubsub.bench import figures as micro
from testbed.systems.pubsub.bench import assessment
from testbed.systems.pubsub.bench.assessment import (Infrastructure, TopicSpec, assess, evaluate, infrastructure, load_inputs,
                                       mmog_topics, per_placement, percentile, summarize, uav_topics)
from testbed.policies import ONE_WAY, POLICIES, RTT, hash_broker
from testbed.policies.pulsar_lm.bundles import Bundles
from testbed.topology import Link, Node, Shaping, Site, Topology

MS = 1e-3


def node(name, role, site, access, mobile=False):
    return Node(name, role, site, "10.0.0.1", Shaping(delay=access), mobile)


def xy(x_ms, y_ms, height_ms):
    return Coordinate((x_ms * MS, y_ms * MS), 0.2, 0.0, height_ms * MS)


def mmog_topology():
    topo = Topology("tiny-mmog")
    topo.sites = {"aaa": Site("aaa", "city"), "bbb": Site("bbb", "city")}
    topo.links = [Link("aaa", "bbb", "site", Shaping(delay=0.030))]
    for n in (node("baaa", "broker", "aaa", 0.0005), node("bbbb", "broker", "bbb", 0.0005),
              node("gs1", "game-server", "aaa", 0.0045), node("gs2", "game-server", "bbb", 0.0045),
              node("paaa", "nc-proxy", "aaa", 0.0005), node("pbbb", "nc-proxy", "bbb", 0.0005)):
        topo.nodes[n.name] = n
    coords = {"baaa": xy(0, 0, 1), "paaa": xy(0, 0, 1), "gs1": xy(0, 0, 9),
              "bbbb": xy(60, 0, 1), "pbbb": xy(60, 0, 1), "gs2": xy(60, 0, 9)}
    return topo, coords


def uav_topology():
    topo = Topology("tiny-uav")
    topo.sites = {"zone1": Site("zone1", "zone"), "zone2": Site("zone2", "zone"), "clouddc": Site("clouddc", "cloud")}
    topo.links = [Link("zone1", "zone2", "site", Shaping(delay=0.015)),
                  Link("clouddc", "zone1", "cloud", Shaping(delay=0.040)),
                  Link("clouddc", "zone2", "cloud", Shaping(delay=0.040))]
    for n in (node("bzone1", "broker", "zone1", 0.0005), node("bzone2", "broker", "zone2", 0.0005),
              node("pzone1", "nc-proxy", "zone1", 0.0005), node("pzone2", "nc-proxy", "zone2", 0.0005),
              node("cloud", "cloud", "clouddc", 0.0005), node("swarm1", "uav-swarm", "zone1", 0.008, mobile=True)):
        topo.nodes[n.name] = n
    y = math.sqrt(80 ** 2 - 15 ** 2)
    coords = {"bzone1": xy(0, 0, 1), "pzone1": xy(0, 0, 1), "bzone2": xy(30, 0, 1), "pzone2": xy(30, 0, 1),
              "cloud": xy(15, y, 1)}
    return topo, coords


def test_the_coordinates_embed_the_tiny_topologies():
    for topo, coords in (mmog_topology(), uav_topology()):
        for a in coords:
            for b in coords:
                if a != b:
                    assert coords[a].distance_to(coords[b]) == pytest.approx(topo.node_rtt(a, b), abs=1e-12)


def test_mmog_infrastructure_tables():
    topo, coords = mmog_topology()
    infra = infrastructure("mmog", topo, coords, threshold=0.045)
    assert infra.size == 2 and sorted(infra.brokers) == ["baaa", "bbbb"] and infra.threshold == 0.045
    # game server -> own city's broker: 4.5 + 0.5 = 5 ms; -> other city's: 4.5 + 30 + 0.5 = 35 ms
    expected = {"aaa": {"baaa": 0.005, "bbbb": 0.035}, "bbb": {"baaa": 0.035, "bbbb": 0.005}}
    for on in ("estimate", "configured"):
        for site in expected:
            assert infra.table(on, ONE_WAY)[site] == pytest.approx(expected[site])
            # the tables hold round trips; the paper's literal d reads them as they are
            assert infra.table(on, RTT)[site] == getattr(infra, on)[site]
            assert getattr(infra, on)[site] == pytest.approx({b: 2 * v for b, v in expected[site].items()})
    assert infrastructure("mmog", topo, coords).threshold == 0.100


def test_uav_infrastructure_mirrors_the_nc_proxy():
    topo, coords = uav_topology()
    infra = infrastructure("uav", topo, coords)
    assert infra.size == 2 and sorted(infra.brokers) == ["bzone1", "bzone2", "cloud"] and infra.threshold == 0.040
    # a UAV at zone1 gets pzone1's coordinate (height 1 ms) with the client-proxy RTT 2 x (8 + 0.5) = 17 ms
    # less the proxy's own leg (2 x 1 ms) added: height 1 + 15 = 16 ms, its own access RTT
    assert infra.places["zone1"].height == pytest.approx(0.016)
    # estimate, one-way: to bzone1 (0 + 16 + 1) / 2 = 8.5 ms; bzone2 (30 + 17) / 2 = 23.5 ms;
    # cloud (80 + 17) / 2 = 48.5 ms: exact on this exactly embedded topology
    assert infra.table("estimate", ONE_WAY)["zone1"] == pytest.approx({"bzone1": 0.0085, "bzone2": 0.0235,
                                                                        "cloud": 0.0485})
    # configured: 8 + 0.5 = 8.5 ms; 8 + 15 + 0.5 = 23.5 ms; 8 + 40 + 0.5 = 48.5 ms
    assert infra.table("configured", ONE_WAY)["zone1"] == pytest.approx({"bzone1": 0.0085, "bzone2": 0.0235,
                                                                          "cloud": 0.0485})
    assert infra.table("configured", ONE_WAY)["zone2"] == pytest.approx({"bzone1": 0.0235, "bzone2": 0.0085,
                                                                          "cloud": 0.0485})
    assert infra.configured["zone2"] == pytest.approx({"bzone1": 0.047, "bzone2": 0.017, "cloud": 0.097})
    assert sorted(infrastructure("uav", topo, coords, include_cloud=False).brokers) == ["bzone1", "bzone2"]


def test_mmog_workload_follows_the_groups():
    sites = ["aaa", "bbb", "ccc"]
    topics = mmog_topics(sites, random.Random(5), clients=8, groups=1)
    # one group: every avatar's topic is subscribed by the cities of the 7 others
    again = random.Random(5)
    city = [again.choice(sites) for _ in range(8)]
    assert [t.topic for t in topics] == [f"avatar{i}" for i in range(8)]
    for i, t in enumerate(topics):
        assert t.producers == (city[i],)
        assert t.consumers == tuple(sorted({city[j] for j in range(8) if j != i}))
    full = mmog_topics(sites, random.Random(1))
    assert len(full) == 1024 and all(len(t.producers) == 1 and len(t.consumers) <= 3 for t in full)
    # 128 groups of 8 on average: almost every topic has subscribers
    assert sum(1 for t in full if t.consumers) > 1000


def test_uav_workload():
    topics = uav_topics(["zone1", "zone2"], random.Random(3))
    assert len(topics) == 32
    leader, sensors = topics[0], topics[1]
    assert leader.topic == "swarm0/follow_leader" and sensors.topic == "swarm0/sensor_data"
    assert len(leader.producers) == 1 and len(leader.consumers) == 7
    assert len(sensors.producers) == 7 and len(sensors.consumers) == 1
    assert set(leader.producers + leader.consumers) == set(sensors.producers + sensors.consumers)
    assert len(set(leader.producers + leader.consumers)) == 1  # a swarm flies in one zone


def test_evaluate_counts_pairs_over_the_threshold():
    table = {"a": {"b": 0.005}, "c": {"b": 0.030}, "d": {"b": 0.050}}
    # pairs a-c 35 ms, a-d 55 ms, c-c 60 ms, c-d 80 ms; over 50 ms: 55, 60, 80
    assert evaluate(TopicSpec("t", ("a", "c"), ("c", "d")), "b", table, 0.050) == (pytest.approx(0.080), 4, 3)


SAME, OTHER = 0.005, 0.035  # one-way game server -> broker, same city / other city


def _mmog_expected(spec: TopicSpec, broker: str, threshold: float):
    """Worst latency and violations through `broker`, from the hand table above."""
    city_of = {"baaa": "aaa", "bbbb": "bbb"}
    one_way = [SAME if s == city_of[broker] else OTHER for s in spec.producers]
    worst_p = max(one_way)
    lat = [worst_p + (SAME if s == city_of[broker] else OTHER) for s in spec.consumers]
    return max(lat), sum(x > threshold + 1e-12 for x in lat)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mmog_assessment_known_answers(seed):
    topo, coords = mmog_topology()
    infra = infrastructure("mmog", topo, coords, threshold=0.045)
    rows = assess(infra, seed, distances=("one_way",))
    specs = {t.topic: t for t in assessment.workload(infra, seed) if t.consumers}
    assert len(rows) == len(specs) * len(POLICIES) * 2 and {r["distance"] for r in rows} == {"one_way"}
    for r in rows:
        spec = specs[r["topic"]]
        producer = spec.producers[0]
        own = "baaa" if producer == "aaa" else "bbbb"
        if r["policy"] == "pulsar-hash":
            assert r["broker"] == hash_broker(r["topic"], ["baaa", "bbbb"])
        elif r["policy"] == "pulsar-lm":
            pass  # distance-agnostic: its bundles' spread is checked below
        elif spec.consumers == ("bbb" if producer == "aaa" else "aaa",):
            # subscribers only in the other city: 5 + 35 = 35 + 5 = 40 ms on both brokers; the tie
            # goes to the first name
            assert r["broker"] == "baaa"
        else:
            # subscribers in the producer's city: its broker (10 / 40 ms) beats the other (70 / 40 ms)
            assert r["broker"] == own
        worst, violations = _mmog_expected(spec, r["broker"], 0.045)
        assert r["worst_e2e_s"] == pytest.approx(worst)
        assert r["violations"] == violations and r["pairs"] == len(spec.consumers)
        if r["policy"] in ("epulsar", "allpairs"):
            assert r["violations"] == 0 and r["worst_e2e_s"] <= 0.040 + 1e-12
    _bundles_spread_evenly(rows, ["baaa", "bbbb"])
    places = {(p["policy"], p["evaluated_on"]): p for p in per_placement(rows)}
    for on in ("estimate", "configured"):
        # some group spans both cities: a 40 ms pair; nothing worse for the latency-aware policies
        assert places[("epulsar", on)]["worst_e2e_s"] == pytest.approx(0.040)
        assert places[("allpairs", on)]["worst_e2e_s"] == pytest.approx(0.040)
        assert places[("allpairs", on)]["violation_ratio"] == 0.0
        # some producer city subscriber hashed to the other city: 35 + 35 = 70 ms
        assert places[("pulsar-hash", on)]["worst_e2e_s"] == pytest.approx(0.070)
    # pulsar-hash: the violating pairs are exactly the same-city pairs on the other city's broker
    expected_v = expected_p = 0
    for spec in specs.values():
        _, v = _mmog_expected(spec, hash_broker(spec.topic, ["baaa", "bbbb"]), 0.045)
        expected_v += v
        expected_p += len(spec.consumers)
    assert places[("pulsar-hash", "configured")]["violation_ratio"] == pytest.approx(expected_v / expected_p)
    assert 0.1 < expected_v / expected_p < 0.5


def _bundles_spread_evenly(rows: list[dict], brokers: list[str]) -> None:
    """Pulsar's load manager puts every topic of a bundle on one broker, and (bundles spread evenly
    with no load yet) the 4 bundles over the brokers as evenly as they divide."""
    owners: dict[tuple, set[str]] = {}
    for r in rows:
        if r["policy"] == "pulsar-lm":
            owners.setdefault((r["distance"], r["evaluated_on"], Bundles.equal(4).bundle_of(r["topic"])), set()).add(r["broker"])
    assert owners and all(len(o) == 1 for o in owners.values())
    per_view: dict[tuple, list[str]] = {}
    for (distance, on, _), (broker,) in owners.items():
        per_view.setdefault((distance, on), []).append(broker)
    for placed in per_view.values():
        counts = [placed.count(b) for b in brokers]
        if len(placed) == 4:
            assert max(counts) - min(counts) <= 1


def test_uav_assessment_known_answers():
    topo, coords = uav_topology()
    infra = infrastructure("uav", topo, coords)
    # through the swarm's own zone broker: estimate = configured = 2 x 8.5 = 17 ms;
    # through the other zone's: 47 ms (> 40: violations); through the cloud: 97 ms
    worst = {("own", "estimate"): 0.017, ("own", "configured"): 0.017,
             ("other", "estimate"): 0.047, ("other", "configured"): 0.047,
             ("cloud", "estimate"): 0.097, ("cloud", "configured"): 0.097}
    for seed in range(5):
        specs = {t.topic: t for t in assessment.workload(infra, seed)}
        for r in assess(infra, seed, distances=("one_way",)):
            zone = specs[r["topic"]].producers[0]
            where = "cloud" if r["broker"] == "cloud" else ("own" if r["broker"] == "b" + zone else "other")
            if r["policy"] == "pulsar-hash":
                assert r["broker"] == hash_broker(r["topic"], ["bzone1", "bzone2", "cloud"])
            elif r["policy"] != "pulsar-lm":  # distance-agnostic: its bundles' spread is checked below
                assert where == "own"
            assert r["pairs"] == 7
            assert r["worst_e2e_s"] == pytest.approx(worst[(where, r["evaluated_on"])])
            assert r["violations"] == (0 if where == "own" else 7)
        _bundles_spread_evenly(assess(infra, seed, distances=("one_way",)), ["bzone1", "bzone2", "cloud"])


@pytest.mark.parametrize("seed", [0, 1])
def test_both_readings_side_by_side_same_choices_doubled_latencies(seed):
    """The paper's literal d (rtt) ranks the brokers as one_way does (a uniform scale) but reads every
    pair latency twice as long, so the same choice can violate a threshold it met one way."""
    topo, coords = mmog_topology()
    infra = infrastructure("mmog", topo, coords, threshold=0.045)
    rows = assess(infra, seed)
    assert [r["distance"] for r in rows[:1]] == ["one_way"] and {r["distance"] for r in rows} == {"one_way", "rtt"}
    key = ("policy", "topic", "evaluated_on")
    one = {tuple(r[k] for k in key): r for r in rows if r["distance"] == "one_way"}
    two = {tuple(r[k] for k in key): r for r in rows if r["distance"] == "rtt"}
    assert one.keys() == two.keys()
    for k, r in one.items():
        assert two[k]["broker"] == r["broker"] and two[k]["pairs"] == r["pairs"]
        assert two[k]["worst_e2e_s"] == pytest.approx(2 * r["worst_e2e_s"])
    # the latency-aware policies' 10 ms same-city pairs stay under 45 ms read as 20 ms round trips; their
    # 40 ms cross-city pairs (one way) become 80 ms and violate
    places = {(p["policy"], p["evaluated_on"], p["distance"]): p for p in per_placement(rows)}
    assert places[("epulsar", "configured", "one_way")]["violation_ratio"] == 0.0
    assert 0.0 < places[("epulsar", "configured", "rtt")]["violation_ratio"] < 1.0


def test_every_registered_policy_is_assessed_baselines_first():
    topo, coords = uav_topology()
    rows = assess(infrastructure("uav", topo, coords), 0)
    order = list(dict.fromkeys(r["policy"] for r in rows))
    assert order == list(assessment.POLICY_NAMES) and sorted(order) == sorted(POLICIES)
    assert order[-1] == "epulsar"  # drawn last, on top of the baselines


def test_percentile_and_summary():
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)  # 4 + 0.8 x (5 - 4)
    assert percentile([3.0], 0.95) == 3.0
    placements = [{"kind": "mmog", "topology": "t", "size": 2, "policy": "epulsar", "seed": s, "evaluated_on": "estimate",
                   "distance": "one_way", "worst_e2e_s": w, "pairs": 10, "violations": v, "violation_ratio": v / 10}
                  for s, (w, v) in enumerate([(0.01, 0), (0.02, 1), (0.03, 2), (0.04, 3), (0.05, 4)])]
    [row] = summarize(placements)
    assert row["placements"] == 5 and row["worst_max_s"] == 0.05
    assert row["worst_p95_s"] == pytest.approx(0.048)
    assert row["violation_ratio_mean"] == pytest.approx(0.2)  # (0 + .1 + .2 + .3 + .4) / 5


def test_figures_are_drawn(tmp_path):
    rows = []
    for kind in ("mmog", "uav"):
        for size in (2, 4):
            for policy in assessment.POLICY_NAMES:
                rows.append({"kind": kind, "topology": f"{kind}{size}", "size": size, "policy": policy,
                             "evaluated_on": "estimate", "placements": 3, "worst_max_s": 0.05 * size,
                             "worst_p95_s": 0.04 * size, "violation_ratio_mean": 0.1})
    for path in (micro.fig4(rows, tmp_path / "fig4.png"), micro.fig5(rows, tmp_path / "fig5.png")):
        assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    with pytest.raises(ValueError):
        micro.fig4(rows, tmp_path / "none.png", evaluated_on="configured")
    # both readings: one row of panels each (rows without a distance are the default reading's)
    both = rows + [{**r, "distance": "rtt", "worst_max_s": 2 * r["worst_max_s"]} for r in rows]
    single = micro.fig4(rows, tmp_path / "single.png")
    double = micro.fig4(both, tmp_path / "both.png")
    from PIL import Image

    with Image.open(single) as one, Image.open(double) as two:
        assert two.size[0] == one.size[0] and two.size[1] == 2 * one.size[1]


def test_load_inputs_from_a_scenario_and_from_a_run(tmp_path):
    from pathlib import Path

    from testbed import topology
    from testbed.scenario.loader import load

    scenario_path = Path(__file__).resolve().parent.parent / "scenarios" / "uav-smoke.yaml"
    topo = topology.build(load(scenario_path))
    agents = sorted(n.name for n in topo.nodes.values() if not n.mobile)
    coords = {name: {"vec": [0.001 * i, 0.0], "height": 0.001, "adjustment": 0.0, "error": 0.3}
              for i, name in enumerate(agents)}
    (tmp_path / "inputs.json").write_text(json.dumps({"inputs": [{"scenario": str(scenario_path),
                                                                   "coordinates": coords, "name": "smoke"}]}))
    [infra] = load_inputs(tmp_path / "inputs.json")
    zones = sorted(s.name for s in topo.sites.values() if s.kind == "zone")
    assert infra.kind == "uav" and infra.name == "smoke" and infra.size == len(zones)
    assert sorted(infra.brokers) == sorted(n.name for n in topo.nodes.values() if n.role in ("broker", "cloud"))
    uav = sorted(n.name for n in topo.nodes.values() if n.role == "uav-swarm")[0]
    for zone in zones:
        for b in infra.brokers:
            assert infra.configured[zone][b] == pytest.approx(topo.node_rtt(uav, b, site_a=zone))

    run = tmp_path / "run"
    run.mkdir()
    (run / "scenario.yaml").write_text(scenario_path.read_text())
    shifted = {n: {**c, "vec": [c["vec"][0] + 1.0, 0.0]} for n, c in coords.items()}
    events = [{"type": "run_start"},
              {"type": "nc_snapshot", "converged": True, "coordinates": coords},
              {"type": "nc_snapshot", "converged": False, "coordinates": shifted}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "runs.json").write_text(json.dumps([{"run": "run"}]))
    [from_run] = load_inputs(tmp_path / "runs.json")
    # the converged snapshot wins over the later unconverged one
    assert from_run.brokers == infra.brokers
    assert from_run.name == topo.name


# --- the Spark job --------------------------------------------------------------------------------


def _spark_available():
    if shutil.which("java") is None:
        return "Java is not installed (Spark needs a JRE 8/11/17: apt-get install openjdk-17-jre-headless)"
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install -r requirements.txt)"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_spark_available() is not None, reason=str(_spark_available()))
def test_spark_job_matches_the_local_reduction(spark, tmp_path):
    from testbed.systems.pubsub.bench import assess_spark

    infras: list[Infrastructure] = [infrastructure("mmog", *mmog_topology(), threshold=0.045),
                                    infrastructure("uav", *uav_topology())]
    seeds = 4
    started = time.monotonic()
    rows = assess_spark.run(spark, infras, seeds, tmp_path / "out", partitions=2)
    placements = spark.read.parquet(str(tmp_path / "out" / "placements.parquet")).count()
    elapsed = time.monotonic() - started
    # 4 seeds x 2 topologies x every policy x 2 evaluations x 2 readings of d
    assert placements == 4 * 2 * len(POLICIES) * 2 * 2
    expected = summarize(per_placement(r for infra in infras for s in range(seeds) for r in assess(infra, s)))
    key = ("kind", "topology", "size", "policy", "evaluated_on", "distance")
    by_key = {tuple(r[k] for k in key): r for r in rows}
    assert len(by_key) == len(expected) == 2 * len(POLICIES) * 2 * 2
    for e in expected:
        got = by_key[tuple(e[k] for k in key)]
        assert got["placements"] == e["placements"] == seeds
        for column in ("worst_max_s", "worst_p95_s", "violation_ratio_mean"):
            assert got[column] == pytest.approx(e[column]), column
    # known values: UAV ePulsar configured worst 17 ms, no violations; MMOG pulsar-hash worst 70 ms
    assert by_key[("uav", "tiny-uav", 2, "epulsar", "configured", "one_way")]["worst_max_s"] == pytest.approx(0.017)
    assert by_key[("uav", "tiny-uav", 2, "epulsar", "configured", "one_way")]["violation_ratio_mean"] == 0.0
    assert by_key[("uav", "tiny-uav", 2, "epulsar", "configured", "rtt")]["worst_max_s"] == pytest.approx(0.034)
    assert by_key[("mmog", "tiny-mmog", 2, "pulsar-hash", "estimate", "one_way")]["worst_max_s"] == pytest.approx(0.070)
    with open(tmp_path / "out" / "summary.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 2 * len(POLICIES) * 2 * 2
    from testbed.systems.pubsub.bench.assess_spark import read_summary
    assert read_summary(tmp_path / "out" / "summary.csv")[0]["placements"] == seeds
    print(f"spark job on {seeds} seeds: {elapsed:.1f} s")
