"""The MMOG case end to end (paper 5.8.2), on the smoke cut to 3 cities (tests/scenarios/mmog-live.yaml):
mobile players on two edge sites per city, each
publishing its avatar's topic and subscribing to its group's, moving those subscriptions at every
group change; game servers subscribed to their edge site's players; topics placed where ePulsar should
put them; traces and Fig. 9 for one player (root only; about a minute and a half). Also the workload's
plan and area-of-interest rules, without a network."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed import topology
from testbed.policies.distance import get_distance
from tests import browser
from tests.live import ByMachine, held_by_machine, judged_seconds, machine_seconds, run_held, unexplained_seconds
from tests.needs import full_system
from tests.spans import clean_seconds, detection_window, too_few_clean
from testbed.mobility import GroupChange, group_changes
from testbed.systems.pubsub.workloads import MmogClient, _due_between, area_of_interest, mmog_plan, served
from testbed.scenario.loader import ScenarioError, load

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "scenarios" / "mmog-smoke.yaml"
LIVE = ROOT / "tests" / "scenarios" / "mmog-live.yaml"  # the smoke on 3 cities: what this VM carries (see the file)


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


class SlowSubscriber:
    """A subscriber whose close takes a while and counts what it received until closed: the change
    loop's logic alone (the live runs cover the real clients)."""

    def __init__(self, topic, name, trace=None, **kwargs):
        self.topic, self.received, self.closed = topic, 0, False

    async def start(self):
        pass

    async def close(self):
        await asyncio.sleep(0.2)
        self.received, self.closed = 25, True


def test_the_end_of_a_run_lets_a_group_change_under_way_finish_so_its_subscriptions_are_counted(tmp_path):
    """The run ends while a change is closing a subscription: the change completes, so what that
    subscription traced is in the player's count (a cancel halfway left rows uncounted in CI)."""
    args = SimpleNamespace(node="p0", trace_dir=str(tmp_path), lookup="-", site="s", run_id="r", nc_period=1.0, netns_pid=None,
                           rate=10.0, size=100, durable="", track=False, handover=SimpleNamespace(enabled=False))
    plan = {"players": ["p0", "p1", "p2"], "servers": [], "groups": [0, 0, 1],
            "changes": [[0.0, 1, 0, 1], [60.0, 2, 1, 0]], "edges": []}
    client = MmogClient(args, events=None, plan=plan, coord=None)
    client.sub_class, client.publishers = SlowSubscriber, []

    async def run():
        await client.subscribe(1)
        client.start = time.time()
        end = asyncio.Event()
        follow = asyncio.create_task(client.follow_groups(end))
        await asyncio.sleep(0.05)  # the first change is closing avatar 1's subscription
        end.set()
        await asyncio.wait_for(follow, 5)  # the second change, a minute later, is not waited for

    client.events = SimpleNamespace(add=lambda *a, **k: None)
    asyncio.run(run())
    assert client.subscribers == {} and client.received_closed == 25 and len(client.windows) == 1


HARNESS_MAX = 6  # saturated seconds of the harness's own: a few around each migration (its clients reconnect at once)


def mmog_not_held(out: Path, summary: dict) -> str | None:
    """The harness may saturate a few seconds around migrations (every client of a moving topic
    reconnects at once), and the hypervisor stalls the VM now and then; the latencies are judged on
    the other seconds (tests.spans). None when so; else why not: the machine's (`ByMachine`) when it
    is the hypervisor's seconds that leave too few, the harness's own load otherwise (a run it
    saturates, or a client that busy-loops, is not excused by the CPU it left no one)."""
    judged, ours, held = judged_seconds(out), unexplained_seconds(out), machine_seconds(out)
    said = f"{len(ours)} saturated seconds that steal does not explain, of {judged} judged: " \
           f"{summary['harness']['saturated']}"
    if len(ours) > HARNESS_MAX or judged < 25:
        return said
    if judged - len(held) < 25:
        return ByMachine(f"{held_by_machine(held)} of {judged} judged")
    return None


@pytest.fixture(scope="module")
def mmog(tmp_path_factory) -> tuple[Path, Path]:
    """One real run of LIVE (30 s: the first group changes come after 15 s) that the harness held:
    (its directory, the results root). A run that crashed fails; one never held is skipped only when
    the hypervisor's seconds are why (tests.live.run_held)."""
    root = tmp_path_factory.mktemp("mmog")
    _run, out, _summary = run_held([str(LIVE)], root, "mmog-live", mmog_not_held)
    return out, root


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for path in (out / "traces").glob("*.jsonl") for line in path.read_text().splitlines()]


@pytest.mark.long
@full_system
def test_mmog_smoke_runs_end_to_end(mmog):
    out, root = mmog
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["classes"]) == {"avatar"}
    avatar = summary["classes"]["avatar"]
    # every player publishes at the scenario's rate for the run, seen by its game server and its
    # group's players (~80 subscriptions, 5.25 per message)
    scenario = load(out / "scenario.yaml")
    published = scenario.workload.avatars * scenario.workload.rate * scenario.duration
    assert summary["published"] >= 0.95 * published
    assert summary["expected_deliveries"] > 4 * published
    assert 0.99 * summary["expected_deliveries"] <= summary["delivered"] <= 1.01 * summary["expected_deliveries"]
    assert avatar["messages"] == summary["delivered"]
    assert summary["rounds_failed"] == 0

    # every player asked its own edge site's NC proxy
    plan = json.loads((out / "mmog-plan.json").read_text())
    events = _events(out)
    attached = {e["client"]: e["proxy"] for e in events if e["type"] == "player_attached"}
    assert attached == {p: edge["proxy"] for p, edge in zip(plan["players"], plan["edges"])}

    # every message took its configured path: player -> owning broker -> subscriber (player or game
    # server): access delays plus the WonderProxy inter-city delay, plus a few ms of processing;
    # judged on messages sent in seconds the hypervisor left alone
    topo = topology.build(scenario)
    clean = clean_seconds(out)
    excess, configured, measured, consumers, rows = [], [], [], set(), _rows(out)
    for row in rows:
        assert row["topic"] == f"avatar-{row['producer']}" and row["producer"] in plan["players"]
        assert row["consumer"] != row["producer"]
        consumers.add(row["consumer"])
        if int(float(row["send_time"])) not in clean:
            continue
        path_s = (topo.node_rtt(row["producer"], row["broker"]) + topo.node_rtt(row["broker"], row["consumer"])) / 2
        latency = float(row["receive_time"]) - float(row["send_time"])
        configured.append(path_s)
        measured.append(latency)
        excess.append(latency - path_s)
    assert len(rows) == summary["delivered"]
    assert consumers & set(plan["servers"]) and consumers & set(plan["players"])
    # the group changes happened and moved the players' subscriptions (unsubscribe and subscribe)
    kinds = {e["type"] for e in events}
    assert {"group_change", "aoi_change", "acquired", "round", "nc_snapshot"} <= kinds
    planned = [c for c in plan["changes"] if c[0] < scenario.duration - 1.0]
    assert len([e for e in events if e["type"] == "group_change"]) >= len(planned) > 0
    aoi = [e for e in events if e["type"] == "aoi_change"]
    assert {e["client"] for e in aoi} <= set(plan["players"])  # game servers keep their edge site's players
    assert any(e["subscribed"] for e in aoi) and any(e["unsubscribed"] for e in aoi)

    figures = subprocess.run([sys.executable, "-m", "testbed.cli", "figures", str(out), "--out", str(root / "figs")],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert figures.returncode == 0, figures.stderr[-2000:]
    assert (root / "figs" / f"fig9-{out.name}.png").stat().st_size > 10_000
    drawn = json.loads((root / "figs" / "figures.json").read_text())["figures"]
    (fig9,) = [f for f in drawn if Path(f["path"]).name.startswith("fig9-")]
    # one player's area of interest: the avatars of its groups over the run
    assert len(fig9["series"]) >= 2 and set(fig9["series"]) <= set(plan["players"])
    # last, as it may be skipped: a median over 5 s of the published messages, at least, in seconds the
    # hypervisor left alone
    too_few_clean("MMOG path latency medians", out, len(excess), int(5 * published / scenario.duration), len(rows))
    assert 0.0 <= 1e3 * statistics.median(excess) <= 8.0
    assert abs(statistics.median(measured) - statistics.median(configured)) <= 0.010


class Placement:
    """What ePulsar should do with each avatar topic, on the configured network (the topology's
    RTTs, which the coordinates estimate): E(b) = d(player, b) + max over its consumers (its game
    server, the other players of its group at that time) of d(c, b), in the scenario's reading of d
    (`rtt` here). Algorithm 1 leaves a topic where E <= Lth and otherwise moves it to the best-ranked
    broker, so a placement is as good as the policy's when E(used) <= max(Lth, min over b of E(b))."""

    def __init__(self, out: Path, events: list[dict]):
        self.scenario = load(out / "scenario.yaml")
        self.topo = topology.build(self.scenario)
        plan = json.loads((out / "mmog-plan.json").read_text())
        self.players, self.server = plan["players"], {p: e["server"] for p, e in zip(plan["players"], plan["edges"])}
        self.start_groups = dict(zip(self.players, plan["groups"]))
        self.changes = sorted((e["time"], e["avatar"], e["to_group"]) for e in events if e["type"] == "group_change")
        self.brokers = sorted({e["broker"] for e in events if e["type"] == "broker_registered"})
        (topic,) = self.scenario.workload.topics
        self.threshold = topic.threshold
        self.per_rtt = get_distance(self.scenario.control.distance).per_rtt

    def groups(self, t: float) -> dict[str, int]:
        groups = dict(self.start_groups)
        for when, who, to in self.changes:
            if when <= t:
                groups[who] = to
        return groups

    def e(self, player: str, broker: str, t: float) -> float:
        groups = self.groups(t)
        consumers = [self.server[player]] + [q for q in self.players if q != player and groups[q] == groups[player]]
        return self.per_rtt * (self.topo.node_rtt(player, broker) + max(self.topo.node_rtt(c, broker) for c in consumers))

    def excess(self, player: str, broker: str, t: float) -> float:
        """How much worse than the policy's own standard the placement on `broker` is at `t` (s)."""
        return self.e(player, broker, t) - max(self.threshold, min(self.e(player, b, t) for b in self.brokers))

    def settled(self, player: str, t: float, placed: float, window: float) -> bool:
        """Whether the topic's clients have been as they are at `t` for a detection window: since
        its first placement and since the last group change that touched it (its own player's, or
        another player's leaving or joining its group)."""
        if t < placed + window:
            return False
        for when, who, to in self.changes:
            if when <= t < when + window:
                before = self.groups(when - 1e-6)
                if who == player or before[player] in (before[who], to):
                    return False
        return True


def _coordinate_error_s(events: list[dict], t: float) -> float:
    """The 95th percentile of the coordinates' all-pairs error (s) in the latest snapshot before t."""
    snaps = [e for e in events if e["type"] == "nc_snapshot" and e["time"] <= t and e.get("p95_error_ms") is not None]
    return snaps[-1]["p95_error_ms"] / 1e3


def _converged(events: list[dict], t: float) -> bool:
    """Whether the latest coordinate snapshot before t met the run's settle criteria (a CI run's topic
    went 104 ms from the best while every snapshot of its run had same-site errors of 15-59 ms)."""
    snaps = [e for e in events if e["type"] == "nc_snapshot" and e["time"] <= t]
    return bool(snaps) and bool(snaps[-1].get("converged"))


@pytest.mark.long
@full_system
def test_topics_are_placed_where_the_policy_should_put_them(mmog):
    """ePulsar's placement in the MMOG case, judged on the configured network rather than on the
    broker each message happened to use: every migration ends well and goes to a broker within the
    coordinates' error of the best (E sums two estimated distances: twice the run's p95 error) when
    the coordinates it was decided on had settled by the run's own criteria, and once a topic's clients have been as they are for a detection window, at least half of its
    messages go through a broker that meets the policy's standard (`Placement`). A policy that put
    every topic in the cloud (nyc) would be 50 ms over it for most messages. Whether any topic
    migrates is not a claim here: on this network a player's own city's broker stays the best for
    its topic whatever its group (its game server is in that city), so the placements a group change
    asks for are ties (bnyc or cloud, both in nyc) that the coordinates' error breaks either way;
    migrations themselves are judged by the UAV and failover tests."""
    out, _root = mmog
    events = _events(out)
    judge = Placement(out, events)
    window = detection_window(judge.scenario.control)
    moved = [e for e in events if e["type"] == "migration_end"]
    assert all(e["ok"] for e in moved), moved
    for e in moved:
        if not _converged(events, e["time"] - e["duration_s"]):
            continue  # decided on coordinates the run calls unsettled: that would judge them, not the policy
        player = e["topic"].removeprefix("avatar-")
        worse = judge.e(player, e["to_broker"], e["time"]) - min(judge.e(player, b, e["time"]) for b in judge.brokers)
        assert worse <= 2 * _coordinate_error_s(events, e["time"]), (e, worse)
    placed = {e["topic"]: e["time"] for e in events if e["type"] == "initial_placement"}
    assert set(placed) == {f"avatar-{p}" for p in judge.players}
    excess = []
    for row in _rows(out):
        sent = float(row["send_time"])
        if judge.settled(row["producer"], sent, placed[row["topic"]], window) and row["consumer"] == judge.server[row["producer"]]:
            excess.append(judge.excess(row["producer"], row["broker"], sent))
    assert len(excess) >= judge.scenario.workload.rate * len(judge.players), len(excess)  # a second of each, at least
    assert statistics.median(excess) <= 0.0, statistics.median(excess)


@pytest.mark.long
@full_system
@browser.NEEDS_BROWSER
def test_the_view_replays_the_mmog_run_with_the_numbers_of_its_summary(mmog, tmp_path):
    """`testbed view` on the finished MMOG run: players at their cities, topics with their owners,
    migrations marked, summary.json's numbers; the screenshot stays in the run's folder."""
    out, _root = mmog
    summary = json.loads((out / "summary.json").read_text())
    with browser.replay(out) as address, browser.chromium(tmp_path / "profile") as driver:
        driver.get(address)
        browser.wait_until(driver, "return window.tbView && window.tbView.drawn && "
                                   "document.getElementById('recorded').textContent.startsWith('equal')")
        page = browser.check_finished_run(driver, out, summary, _events(out))
        assert page["owners"] == len({e["topic"] for e in _events(out) if e["type"] == "acquired"})
        driver.save_screenshot(str(out / "view-replay.png"))
