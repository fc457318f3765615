"""The MMOG smoke scenario end to end (paper 5.8.2): mobile players on two edge sites per city, each
publishing its avatar's topic and subscribing to its group's, moving those subscriptions at every
group change; game servers subscribed to their edge site's players; traces and Fig. 9 for one player
(root only; about a minute). Also the workload's plan and area-of-interest rules, without a network."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import topology
from tests.needs import full_system
from testbed.mobility import GroupChange, group_changes
from testbed.systems.pubsub.workloads import _due_between, area_of_interest, mmog_plan, served
from testbed.scenario.loader import ScenarioError, load

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "scenarios" / "mmog-smoke.yaml"


def test_plan_deals_each_city_s_players_over_its_edge_sites():
    players = [("p1", "nyc"), ("p2", "lax"), ("p3", "nyc"), ("p4", "nyc")]
    servers = [("gs1", "nyc"), ("gs2", "nyc"), ("gs3", "lax"), ("gs4", "lax")]
    proxies = [("pnyc1", "nyc"), ("pnyc2", "nyc"), ("plax", "lax")]
    plan = mmog_plan(players, servers, proxies, [0, 1, 0, 1], [GroupChange(3.0, 2, 0, 1)])
    assert [(e["edge"], e["server"], e["proxy"]) for e in plan["edges"]] == [
        ("nyc-1", "gs1", "pnyc1"), ("lax-1", "gs3", "plax"), ("nyc-2", "gs2", "pnyc2"), ("nyc-1", "gs1", "pnyc1")]
    assert plan["players"] == ["p1", "p2", "p3", "p4"] and plan["changes"] == [[3.0, 2, 0, 1]]
    assert served("gs1", plan) == {0, 3} and served("gs4", plan) == set()  # lax's second edge site: nobody
    with pytest.raises(ValueError, match="p5 is in chi, which has no game server"):
        mmog_plan([("p5", "chi")], servers, proxies, [0], [])


def test_smoke_plan_puts_every_player_on_an_edge_site_of_its_city():
    scenario = load(SMOKE)
    topo = topology.build(scenario)
    players = topo.placed("avatar")
    assert len(players) == 16 and len(topo.placed("game-server")) == len(topo.placed("nc-proxy")) == 10
    plan = mmog_plan(players, topo.placed("game-server"), topo.placed("nc-proxy"),
                     *group_changes(scenario, len(players)))
    for (name, city), edge in zip(players, plan["edges"]):
        assert topo.nodes[name].mobile and edge["site"] == city
        assert topo.nodes[edge["server"]].site == city == topo.nodes[edge["proxy"]].site
        assert edge["proxy"][-1] == edge["edge"][-1]  # the k-th edge site's proxy is the city's k-th
    assert len(plan["changes"]) > 0 and plan == mmog_plan(players, topo.placed("game-server"),
                                                          topo.placed("nc-proxy"), *group_changes(scenario, 16))


def test_players_must_match_the_avatars(tmp_path):
    text = SMOKE.read_text().replace("avatars: 16", "avatars: 15")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ScenarioError, match="15 avatars but 16 player nodes"):
        topology.checked(load(tmp_path / "s.yaml"), str(tmp_path / "s.yaml"))


def test_area_of_interest_is_the_other_avatars_of_the_group():
    groups = [0, 0, 1, 2, 1]
    assert area_of_interest(0, groups) == {1}
    assert area_of_interest(2, groups) == {4}
    assert area_of_interest(3, groups) == set()  # alone in its group: sees nobody


def test_due_between_counts_the_open_loop_schedule():
    assert _due_between(100.0, 30, 100.0, 101.0) == 30
    assert _due_between(100.0, 30, 99.0, 100.5) == 15  # nothing is due before the start
    assert _due_between(100.0, 30, 101.0, 100.0) == 0


@full_system
def test_mmog_smoke_runs_end_to_end(tmp_path):
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "scenarios/mmog-smoke.yaml", "--duration", "30s",
                          "--results", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out,) = tmp_path.glob("mmog-smoke-*")
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["classes"]) == {"avatar"}
    avatar = summary["classes"]["avatar"]
    # every player publishes at the scenario's rate for 30 s, seen by its game server and its group's
    # players (~80 subscriptions, 5.25 per message)
    scenario = load(ROOT / "scenarios" / "mmog-smoke.yaml")
    published = scenario.workload.avatars * scenario.workload.rate * 30
    assert summary["published"] >= 0.95 * published
    assert summary["expected_deliveries"] > 4 * published
    assert 0.99 * summary["expected_deliveries"] <= summary["delivered"] <= 1.01 * summary["expected_deliveries"]
    assert avatar["messages"] == summary["delivered"]
    assert summary["migrations_failed"] == 0

    # every player asked its own edge site's NC proxy
    plan = json.loads((out / "mmog-plan.json").read_text())
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    attached = {e["client"]: e["proxy"] for e in events if e["type"] == "player_attached"}
    assert attached == {p: edge["proxy"] for p, edge in zip(plan["players"], plan["edges"])}

    # every message took its configured path: player -> owning broker -> subscriber (player or game
    # server): access delays plus the WonderProxy inter-city delay, plus a few ms of processing
    topo = topology.build(load(SMOKE))
    excess, configured, consumers = [], [], set()
    for path in (out / "traces").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            assert row["topic"] == f"avatar-{row['producer']}" and row["producer"] in plan["players"]
            assert row["consumer"] != row["producer"]
            consumers.add(row["consumer"])
            path_s = (topo.node_rtt(row["producer"], row["broker"]) + topo.node_rtt(row["broker"], row["consumer"])) / 2
            configured.append(path_s)
            excess.append(float(row["receive_time"]) - float(row["send_time"]) - path_s)
    assert len(excess) == summary["delivered"]
    assert consumers & set(plan["servers"]) and consumers & set(plan["players"])
    assert 0.0 <= 1e3 * statistics.median(excess) <= 8.0
    assert abs(avatar["p50_ms"] - 1e3 * statistics.median(configured)) <= 10.0, avatar

    # the group changes happened and moved the players' subscriptions (unsubscribe and subscribe)
    kinds = {e["type"] for e in events}
    assert {"group_change", "aoi_change", "acquired", "round", "nc_snapshot"} <= kinds
    planned = [c for c in plan["changes"] if c[0] < 29.0]
    assert len([e for e in events if e["type"] == "group_change"]) >= len(planned) > 0
    aoi = [e for e in events if e["type"] == "aoi_change"]
    assert {e["client"] for e in aoi} <= set(plan["players"])  # game servers keep their edge site's players
    assert any(e["subscribed"] for e in aoi) and any(e["unsubscribed"] for e in aoi)

    figures = subprocess.run([sys.executable, "-m", "testbed.cli", "figures", str(out), "--out", str(tmp_path / "figs")],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert figures.returncode == 0, figures.stderr[-2000:]
    assert (tmp_path / "figs" / f"fig9-{out.name}.png").stat().st_size > 10_000
    drawn = json.loads((tmp_path / "figs" / "figures.json").read_text())["figures"]
    (fig9,) = [f for f in drawn if Path(f["path"]).name.startswith("fig9-")]
    # one player's area of interest: the avatars of its groups over the run
    assert len(fig9["series"]) >= 2 and set(fig9["series"]) <= set(plan["players"])
