"""The hot-spot workload: the plan (Zipf rates, the hot site's share, the surge, the expected
deliveries) and the schema's checks. It runs end to end in tests/test_pulsar_lm_live.py, whose one
run of a cut-down hot-spot smoke serves both Pulsar's load manager and the workload's own claims
(plan, deliveries, surge timing)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from testbed import topology
from testbed.systems.pubsub.workload_role import plan_hotspot
from testbed.scenario.loader import ScenarioError, load, parse_text
from testbed.systems.pubsub.schema import HOTSPOT_CLASS, Hotspot
from testbed.systems.pubsub.workloads import hotspot_expected, hotspot_plan

ROOT = Path(__file__).resolve().parent.parent
NODES = [("a1", "nyc"), ("a2", "nyc"), ("b1", "chi"), ("b2", "chi"), ("c1", "atl")]


def _plan(seed: int = 1, **spec) -> dict:
    fields = {"topics": 3, "zipf": 1.0, "subscribers": 2, "hot_site": "nyc", "hot_share": 0.0, **spec}
    return hotspot_plan(Hotspot(**fields), 12.0, NODES, seed, HOTSPOT_CLASS)


def test_zipf_rates_by_rank():
    # rank k at 12 / k**s: s = 1 -> 12, 6, 4; s = 2 -> 12, 3, 1.333; s = 0 -> all 12
    assert [t["rate"] for t in _plan()["topics"]] == [12.0, 6.0, 4.0]
    assert [t["rate"] for t in _plan(zipf=2.0)["topics"]] == pytest.approx([12.0, 3.0, 4 / 3])
    assert [p["rate"] for p in _plan(zipf=0.0)["publishers"]] == [12.0, 12.0, 12.0]
    assert [t["topic"] for t in _plan()["topics"]] == ["hot-1", "hot-2", "hot-3"]


def test_hot_share_puts_whole_topics_at_the_hot_site():
    plan = _plan(topics=10, subscribers=3, hot_share=0.6)
    local = {t["topic"] for t in plan["topics"] if t["local"]}
    assert len(local) == 6  # round(0.6 x 10)
    hot_nodes = {"a1", "a2"}
    for client in plan["publishers"] + plan["subscribers"]:
        if client["topic"] in local:
            assert client["node"] in hot_nodes
    assert Counter(s["topic"] for s in plan["subscribers"]) == {f"hot-{k}": 3 for k in range(1, 11)}
    elsewhere = {c["node"] for c in plan["publishers"] + plan["subscribers"] if c["topic"] not in local}
    assert elsewhere - hot_nodes  # the other topics reach the other sites


def test_surge_adds_publishers_to_the_most_popular_local_topics():
    plan = _plan(topics=10, hot_share=0.5, surge={"at": "20s", "topics": 2, "publishers": 3})
    local = sorted(t["rank"] for t in plan["topics"] if t["local"])
    surged = [p for p in plan["publishers"] if p["at"] > 0]
    assert len(surged) == 6
    assert Counter(p["topic"] for p in surged) == {f"hot-{local[0]}": 3, f"hot-{local[1]}": 3}
    for p in surged:
        first = next(q for q in plan["publishers"] if q["client"] == f"{p['topic']}-pub")
        assert p["node"] == first["node"] and p["rate"] == first["rate"] and p["at"] == 20.0
        assert 20.0 <= p["start_s"] < 20.0 + 1 / p["rate"]  # spread over one period from `at`
    assert len({p["client"] for p in plan["publishers"]}) == len(plan["publishers"])  # new names
    assert [p["client"] for p in surged[:3]] == [f"hot-{local[0]}-pub{i}" for i in (2, 3, 4)]


def test_plan_is_a_function_of_the_seed():
    spec = {"topics": 20, "hot_share": 0.5, "surge": {"at": "5s", "topics": 2, "publishers": 1}}
    assert _plan(3, **spec) == _plan(3, **spec)
    assert _plan(3, **spec) != _plan(4, **spec)


def test_expected_deliveries_count_surge_publishers_from_their_time():
    # 3 topics at 12, 6, 4 msg/s, 2 subscribers each, all at nyc; hot-1 gains 2 publishers at 5 s.
    plan = _plan(hot_share=1.0, surge={"at": "5s", "topics": 1, "publishers": 2})
    # 10 s: (120 + 60 + 40) x 2 = 440 from the first publishers, 2 x 12 x 5 x 2 = 240 from the surge
    assert hotspot_expected(plan, 10.0) == 440 + 240
    assert hotspot_expected(plan, 5.0) == (60 + 30 + 20) * 2  # the surge has sent nothing yet


def test_no_static_node_at_the_hot_site_is_an_error():
    with pytest.raises(ValueError, match="no static client node at the hot site dal"):
        _plan(hot_site="dal", hot_share=0.5)


@pytest.mark.parametrize("path, local_count, first, peak_s, at_nyc_s, edges", [
    ("scenarios/hotspot-smoke.yaml", 14, [1, 2, 3, 4, 5], 447, 399, 4),
    ("scenarios/hotspot.yaml", 24, [1, 2, 3, 5], 512, 416, 5),
    ("tests/scenarios/hotspot-pulsar-lm.yaml", 14, [1, 2, 3, 4, 5], 223, 199, 4)])
def test_scenario_plans_match_their_arithmetic(path, local_count, first, peak_s, at_nyc_s, edges):
    """The numbers each scenario's comment derives its link bandwidth and Rth_out from."""
    scenario = load(ROOT / path)
    plan = plan_hotspot(scenario, topology.build(scenario))
    local = [t["rank"] for t in plan["topics"] if t["local"]]
    assert len(local) == local_count and local[:len(first)] == first
    readers = Counter(s["topic"] for s in plan["subscribers"])
    peak = sum(p["rate"] * readers[p["topic"]] for p in plan["publishers"])
    at_nyc = sum(p["rate"] * readers[p["topic"]] for p in plan["publishers"] if int(p["topic"][4:]) in local)
    assert round(peak) == peak_s and round(at_nyc) == at_nyc_s and peak < 800
    link = scenario.infrastructure.links.local.bandwidth / (8 * (scenario.workload.message_size + 100))
    assert 0.85 < at_nyc / link < 1.0 and peak / edges / link < 0.3
    assert scenario.control.overload.output_rate == pytest.approx(0.85 * link, rel=0.01)


BAD = """
name: bad
duration: 30s
infrastructure:
  cities: {names: [nyc, chi]}
  cloud: {city: nyc}
nodes:
  clients:
    - {name: hc, role: static, count: 1, site: each}
workload:
  kind: hotspot
  rate: 10/s
  topics: [{name: hot, threshold: 50ms}]
  hotspot:
    topics: 4
    hot_site: lax
    hot_share: 0.5
    surge: {at: 10s, topics: 1, publishers: 1}
"""


def test_hot_site_must_be_a_site(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    with pytest.raises(ScenarioError) as error:
        topology.checked(load(path), str(path))
    assert "bad.yaml:16: workload.hotspot.hot_site: 'lax' is not a site" in str(error.value)


def test_schema_names_the_hotspot_fields():
    with pytest.raises(ScenarioError, match=r"workload.hotspot: surge.topics \(3\) exceeds the hot site's topics \(2 "):
        parse_text(BAD.replace("topics: 1, publishers", "topics: 3, publishers"))
    with pytest.raises(ScenarioError, match="workload: .*needs a hotspot block"):
        parse_text(BAD.replace("kind: hotspot", "kind: mmog"))
    with pytest.raises(ScenarioError, match="topics needs {name: hot"):
        parse_text(BAD.replace("{name: hot, threshold", "{name: avatar, threshold"))
    with pytest.raises(ScenarioError, match=r"workload.hotspot.hot_share: '150%' is not between"):
        parse_text(BAD.replace("hot_share: 0.5", "hot_share: 150%"))
    path = "surge.yaml"
    with pytest.raises(ScenarioError, match="workload.hotspot.surge.at: 40s is not within"):
        topology.checked(parse_text(BAD.replace("at: 10s", "at: 40s").replace("hot_site: lax", "hot_site: nyc"),
                                    path), path)
