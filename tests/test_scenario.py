"""Scenario schema: shipped scenarios validate, round trips, units, and bad inputs with file:line."""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed import topology, units
from testbed.scenario import cities, zones
from testbed.scenario.loader import ScenarioError, load, parse_text
from testbed.scenario.model import Scenario
from testbed.topology import checked as check
from tests.texts import MINIMAL

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted(glob.glob(str(ROOT / "scenarios" / "*.yaml")))



@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: Path(p).name)
def test_shipped_scenarios_validate(path):
    scenario = load(path)
    check(scenario, path)
    assert topology.build(scenario).nodes


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: Path(p).name)
def test_each_shipped_scenario_as_run_loads_again_to_the_same(path):
    """A run writes its scenario with every field resolved (results/<run>/scenario.yaml); the
    analysis and `testbed compare` load that file again."""
    import yaml

    from testbed.scenario.loader import parse_text

    scenario = load(path)
    again = parse_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False), "as-run.yaml")
    assert again == scenario


def test_required_scenarios_are_shipped():
    names = {Path(p).stem for p in SCENARIOS}
    assert {"uav", "uav-smoke", "mmog", "mmog-smoke"} <= names


def test_uav_matches_the_paper():
    s = load(ROOT / "scenarios/uav.yaml")
    assert s.infrastructure.mec_zones.zones == 4
    assert s.infrastructure.mec_zones.inter_site_rtt == pytest.approx(0.030)
    assert s.infrastructure.cloud.one_way == pytest.approx(0.040)
    (swarms,) = s.nodes.clients
    assert (swarms.count, swarms.members) == (8, 8)
    assert s.workload.rate == 200 and s.workload.message_size == 1000
    assert {t.threshold for t in s.workload.topics} == {0.040}
    assert s.mobility.speed == 50 and s.duration == 600


def test_mmog_matches_the_paper():
    s = load(ROOT / "scenarios/mmog.yaml")
    assert s.infrastructure.cities.names == ["nyc", "atl", "chi", "dal", "lax"]
    assert s.infrastructure.cloud.city == "nyc"
    assert (s.workload.avatars, s.workload.rate, s.workload.message_size) == (64, 300, 998)
    assert s.workload.topics[0].threshold == pytest.approx(0.1)
    assert (s.mobility.stay.min, s.mobility.stay.max) == (30, 60)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: Path(p).name)
def test_round_trip(path):
    scenario = load(path)
    dumped = yaml.safe_dump(scenario.model_dump(mode="json"))
    assert parse_text(dumped) == scenario


def test_scale_multiplies_counts_and_keeps_names_valid():
    scenario = load(ROOT / "scenarios/uav.yaml").with_scale(0.5)
    assert len([n for n in topology.build(scenario).nodes.values() if n.mobile]) == 4
    with pytest.raises(Exception, match="exceed 8 characters"):
        parse_text(MINIMAL + "nodes:\n  clients:\n    - {name: swarmabc, role: uav-swarm, count: 20}\n")


@pytest.mark.parametrize(
    "text,parser,expected",
    [("40ms", units.parse_duration, 0.04), ("1.5s", units.parse_duration, 1.5), ("10m", units.parse_duration, 600),
     ("500us", units.parse_duration, 5e-4), ("100Mbit", units.parse_bandwidth, 1e8), ("1Gbit", units.parse_bandwidth, 1e9),
     ("1KB", units.parse_size, 1000), ("4KiB", units.parse_size, 4096), ("998B", units.parse_size, 998),
     ("200/s", units.parse_rate, 200), ("1.5M/s", units.parse_rate, 1.5e6), ("50m/s", units.parse_speed, 50),
     ("36km/h", units.parse_speed, 10), ("0.5%", units.parse_fraction, 0.005)],
)
def test_units(text, parser, expected):
    assert parser(text) == pytest.approx(expected)


BAD_INPUTS = [
    # (description, text, expected one-line error: line and message fragment)
    ("bad rate unit", MINIMAL.replace("rate: 200/s", "rate: 20O/s"),
     "<string>:8: workload.rate: '20O/s' is not a rate such as '200/s'"),
    ("bad duration unit", MINIMAL.replace("duration: 10s", "duration: 10 parsecs"),
     "<string>:2: duration: '10 parsecs' is not a duration such as '40ms'"),
    ("bare number duration", MINIMAL.replace("duration: 10s", "duration: 10"),
     "<string>:2: duration: 10 is not a duration such as '40ms' (the unit is missing)"),
    ("negative delay", MINIMAL.replace("cloud: {one_way: 40ms}", "cloud: {one_way: -40ms}"),
     "<string>:5: infrastructure.cloud.one_way: a duration must not be negative, got -0.04"),
    ("unknown key", MINIMAL + "colour: red\n", "<string>:11: colour: unknown key 'colour'"),
    ("unknown nested key", MINIMAL.replace("zones: 2,", "zone: 2,"),
     "<string>:4: infrastructure.mec_zones.zone: unknown key 'zone'; allowed: towers, zones, inter_site_rtt"),
    ("duplicate key", MINIMAL + "seed: 1\nseed: 2\n", "<string>:12: seed: duplicate key 'seed' (first on line 11)"),
    ("duplicate client name", MINIMAL + "nodes:\n  clients:\n    - {name: sw, role: uav-swarm, count: 1}\n"
     "    - {name: sw, role: uav-swarm, count: 1}\n", "<string>:11: nodes: duplicate name 'sw' in clients"),
    ("shell metacharacters in a name", MINIMAL + "nodes:\n  clients:\n    - {name: 'a;rm -rf', role: uav-swarm, count: 1}\n",
     "<string>:13: nodes.clients[0].name: 'a;rm -rf' is not a valid name"),
    ("name too long", MINIMAL + "nodes:\n  clients:\n    - {name: averylongname, role: uav-swarm, count: 1}\n",
     "<string>:13: nodes.clients[0].name: 'averylongname' is not a valid name: use 1-8 characters"),
    ("unknown city", MINIMAL.replace("mec_zones: {zones: 2, inter_site_rtt: 30ms}", "cities: {names: [nyc, gotham]}")
     .replace("cloud: {one_way: 40ms}", "cloud: {city: nyc}"),
     "<string>:4: infrastructure.cities.names[1]: 'gotham' is not a known city"),
    ("missing threshold", MINIMAL.replace("- {name: follow_leader, threshold: 40ms}", "- {name: follow_leader}"),
     "<string>:10: workload.topics[0].threshold: is required but missing"),
    ("rate of zero", MINIMAL.replace("rate: 200/s", "rate: 0/s"), "<string>:8: workload.rate: a rate must be greater than zero"),
    ("empty file", "", "<string>:1: the file is empty"),
    ("not a mapping", "- a\n- b\n", "<string>:1: the top level must be a mapping"),
    ("tabs", MINIMAL.replace("  kind: uav-swarm", "\tkind: uav-swarm"), "<string>:7: tab character"),
    ("bad YAML", "name: [unclosed\n", "<string>:2: not valid YAML"),
    ("loss above 100%", MINIMAL.replace("cloud: {one_way: 40ms}", "cloud: {one_way: 40ms}\n  links: {site: {loss: 150%}}"),
     "<string>:6: infrastructure.links.site.loss: '150%' is not between 0% and 100%"),
    ("bandwidth unit", MINIMAL.replace("cloud: {one_way: 40ms}", "cloud: {one_way: 40ms}\n  links: {site: {bandwidth: 100 furlongs}}"),
     "<string>:6: infrastructure.links.site.bandwidth: '100 furlongs' is not a bandwidth such as '100Mbit'"),
    ("unknown policy", MINIMAL + "control: {policy: magic}\n", "<string>:11: control.policy: 'magic': input should be"),
    ("unknown nats-server", MINIMAL + "nodes: {nats_server: latest}\n",
     "<string>:11: nodes.nats_server: 'latest': input should be 'pypi' or 'debian'"),
    ("missing infrastructure", "name: t\nduration: 10s\n", "<string>:1: infrastructure: is required but missing"),
    ("two infrastructure kinds", MINIMAL.replace("cloud: {one_way: 40ms}", "cloud: {one_way: 40ms}\n  star: {nodes: 2, link_delay: 1ms}"),
     "<string>:3: infrastructure: give exactly one of mec_zones, cities or star"),
]


@pytest.mark.parametrize("name,text,expected", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_error_names_line_and_field(name, text, expected):
    with pytest.raises(ScenarioError) as info:
        parse_text(text)
    first = str(info.value).splitlines()[0]
    assert first.startswith(expected), first
    assert "\n" not in str(info.value.problems[0])


def test_more_zones_than_towers(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(MINIMAL.replace("zones: 2,", "zones: 5000,"))
    with pytest.raises(ScenarioError) as info:
        check(load(path), str(path))
    assert str(info.value) == f"{path}:4: infrastructure.mec_zones.zones: 5000 zones but the atlanta data has only 698 towers"


def test_override_of_unknown_site(tmp_path):
    path = tmp_path / "o.yaml"
    path.write_text(MINIMAL.replace("cloud: {one_way: 40ms}", "cloud: {one_way: 40ms}\n  overrides:\n    - {between: [zone1, zone9], delay: 5ms}"))
    with pytest.raises(ScenarioError, match=r"o.yaml:7: infrastructure.overrides\[0\].between: 'zone9' is not a site"):
        check(load(path), str(path))


@pytest.mark.parametrize("fault,expected", [
    ("{at: 5s, kill: cloud}", "'cloud': the cloud node holds ZooKeeper and the topic manager"),
    ("{at: 5s, kill: bzone9}", "'bzone9': not a broker node or a client node; brokers: bzone1, bzone2"),
    ("{at: 10s, kill: bzone1}", "10s is not within the run's duration (10s)"),
])
def test_faults_name_an_edge_broker_within_the_run(tmp_path, fault, expected):
    path = tmp_path / "f.yaml"
    path.write_text(MINIMAL + f"faults:\n  - {fault}\n")
    with pytest.raises(ScenarioError) as info:
        check(load(path), str(path))
    assert str(info.value).startswith(f"{path}:12: faults[0].") and expected in str(info.value), str(info.value)


def test_cli_exit_codes(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(MINIMAL.replace("rate: 200/s", "rate: 20O/s"))
    result = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip() == f"{bad}:8: workload.rate: '20O/s' is not a rate such as '200/s'"
    # the scenarios as files (this machine's measured capacity, if any, would refuse the paper-size ones)
    good = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", "--capacity", str(tmp_path / "unmeasured.json"),
                           *SCENARIOS], capture_output=True, text=True, cwd=ROOT)
    assert good.returncode == 0, good.stderr


def test_kmeans_zones_identical_for_a_seed():
    assert zones.mec_zones.__wrapped__(4, seed=7) == zones.mec_zones.__wrapped__(4, seed=7)  # computed twice, not cached
    assert [z.towers for z in zones.mec_zones(4, seed=7)] and sum(z.towers for z in zones.mec_zones(4, 7)) == 698


def test_zones_are_those_k_means_gave_on_every_thread():
    """uav-smoke's zones (4, seed 3) as OpenMP's threads gave them before the fit ran on one thread."""
    assert [(z.lat, z.lon, z.towers) for z in zones.mec_zones.__wrapped__(4, 3)] == [
        (33.964352, -84.577566, 134), (33.888401, -84.236117, 168), (33.762597, -84.487134, 209),
        (33.59654, -84.403244, 187)]


def test_zone_sites_are_centroids_of_their_towers():
    points = zones.towers()
    for zone in zones.mec_zones(3, seed=1):
        assert 33.45 <= zone.lat <= 34.10 and -84.75 <= zone.lon <= -84.05
    assert len(points) == 698


def test_city_matrix_equals_the_data():
    import csv

    with (ROOT / "testbed/data/wonderproxy/us_city_rtt_16.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 120
    name_to_code = {v: k for k, v in cities.CITY_CODES.items()}
    scenario = parse_text(MINIMAL.replace("mec_zones: {zones: 2, inter_site_rtt: 30ms}",
                                          f"cities: {{names: [{', '.join(cities.CITY_CODES)}]}}")
                          .replace("cloud: {one_way: 40ms}", "cloud: {city: nyc}"))
    topo = topology.build(scenario)
    for row in rows:
        a, b = name_to_code[row["city_a"]], name_to_code[row["city_b"]]
        assert topo.site_rtt(a, b) == pytest.approx(float(row["rtt_ms"]) / 1000, abs=1e-9)


def test_scenario_model_is_frozen():
    scenario = load(ROOT / "scenarios/uav-smoke.yaml")
    assert isinstance(scenario, Scenario)
    with pytest.raises(Exception):
        scenario.seed = 3


def test_a_zookeeper_fault_needs_restart_after_and_a_broker_fault_refuses_it(tmp_path):
    import yaml as _yaml

    base = _yaml.safe_load((Path(__file__).resolve().parent.parent / "scenarios" / "failover-smoke.yaml").read_text())
    cases = [([{"at": "20s", "kill": "zookeeper"}], "kill: zookeeper needs restart_after"),
             ([{"at": "20s", "kill": "manager", "restart_after": "5s"}], "restart_after goes with kill: zookeeper or a broker"),
             ([{"at": "20s", "pause": "bzone1", "resume_after": "2s", "restart_after": "5s"}],
              "restart_after goes with kill: zookeeper or a broker"),
             ([{"at": "20s", "kill": "swarm1", "restart_after": "5s"}], "a client node is killed for good"),
             ([{"at": "40s", "kill": "zookeeper", "restart_after": "20s"}], "back at 60s, not within the run's duration"),
             ([{"at": "20s", "kill": "zookeeperx", "restart_after": "5s"}], "is not a valid name"),
             ([{"at": "20s", "pause": "bzone1"}], "resume_after goes with pause, and a pause needs it"),
             ([{"at": "20s", "kill": "bzone1", "pause": "bzone2", "resume_after": "3s"}], "give exactly one of kill, pause"),
             ([{"at": "20s"}], "give exactly one of kill, pause, relay and cut"),
             ([{"at": "20s", "pause": "cloud", "resume_after": "3s"}], "only edge brokers can be paused"),
             ([{"at": "20s", "pause": "swarm1", "resume_after": "3s"}], "'swarm1': not a broker node"),
             ([{"at": "45s", "pause": "bzone1", "resume_after": "5s"}], "back at 50s, not within the run's duration"),
             ([{"at": "10s", "pause": "bzone1", "resume_after": "15s"}, {"at": "20s", "kill": "bzone1"}],
              "bzone1 is hit again at 20s but it is back only at 25s: faults on one part must not overlap"),
             ([{"at": "10s", "kill": "bzone1", "restart_after": "10s"}, {"at": "15s", "pause": "bzone1", "resume_after": "3s"}],
              r"faults\[1\]\.at: bzone1 is hit again at 15s but it is back only at 20s"),
             ([{"at": "10s", "kill": "bzone1"}, {"at": "30s", "kill": "bzone1", "restart_after": "3s"}],
              r"faults\[1\]\.at: bzone1 is hit again at 30s but it is not back"),
             ([{"at": "10s", "relay": ["zone1", "zone9"]}], "no link between 'zone1' and 'zone9'"),
             ([{"at": "10s", "kill": "manager"}], "killing the topic manager needs a standby: nodes.cloud_brokers of 2"),
             ([{"at": "10s", "relay": ["swarm1", "zone2"]}], "no link between 'swarm1' and 'zone2'"),
             ([{"at": "10s", "relay": ["zone1"]}], "relay"),
             ([{"at": "10s", "relay": ["zone1", "zone2"], "kill": "bzone1"}], "give exactly one of kill, pause, relay and cut"),
             ([{"at": "10s", "cut": "zone1"}], "heal_after goes with cut, and a cut needs it"),
             ([{"at": "10s", "cut": "zone9", "heal_after": "5s"}], "'zone9' is not a site; sites: clouddc, zone1, zone2"),
             ([{"at": "40s", "cut": "zone1", "heal_after": "10s"}], r"faults\[0\]\.heal_after: back at 50s"),
             ([{"at": "10s", "kill": "bzone1", "heal_after": "5s"}], "heal_after goes with cut")]
    for faults, expected in cases:
        path = tmp_path / "f.yaml"
        path.write_text(_yaml.safe_dump({**base, "faults": faults}, sort_keys=False))
        with pytest.raises(ScenarioError, match=expected) as error:
            topology.checked(load(path), str(path))
        assert str(error.value).startswith(f"{path}:"), str(error.value)
    path.write_text(_yaml.safe_dump({**base, "faults": [{"at": "20s", "kill": "zookeeper", "restart_after": "8s"},
                                                        {"at": "20s", "pause": "bzone2", "resume_after": "3s"},
                                                        {"at": "20s", "relay": ["zone1", "zone2"]},
                                                        {"at": "20s", "relay": ["swarm1", "zone1"]},
                                                        {"at": "30s", "kill": "swarm1"}]}))
    assert topology.checked(load(path), str(path)) is not None
