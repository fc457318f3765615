"""BAD Pub/Sub live: the workload plan, the scenario's checks, subscription sharing on real
nats-servers (a hub and a leaf), and one run of tests/scenarios/bad-ldm.yaml (the smoke cut to 14 s;
the file says what changed and why) shared by the end-to-end claims: nearest-broker placement,
load-based migration judged on the loads the subscribers measured, every result delivered, the back
end's surges (root; about 45 s)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from testbed import topology
from testbed.policies.bad import cov
from testbed.scenario.loader import ScenarioError, load
from testbed.systems.bad.brokerload import load_between
from testbed.systems.bad.dataplane import LEAF_PORT, hub_config, leaf_config
from testbed.systems.bad.plan import bad_plan, factor_at, results_at
from tests import claims
from tests.live import explained_by_machine, judged_seconds, run_held, unexplained_seconds
from tests.needs import NATS_SERVER, full_system, needs_nats_server

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "scenarios" / "bad-smoke.yaml"
LDM_SCENARIO = ROOT / "tests" / "scenarios" / "bad-ldm.yaml"  # the smoke cut to 14 s for the live run


def smoke_plan():
    scenario = load(SMOKE)
    topo = topology.build(scenario)
    nodes = [(n.name, n.site, n.members) for n in topo.nodes.values() if n.role == "subscriber"]
    return scenario, bad_plan(scenario.workload.bad, scenario.workload.message_size, nodes, scenario.seed,
                              scenario.duration)


def test_plan_draws_subscriptions_and_surges_from_the_scenario():
    scenario, plan = smoke_plan()
    spec = scenario.workload.bad
    assert len(plan["be"]) == sum(c.subscriptions for c in spec.channels) == 20
    assert len(plan["subscribers"]) == 100 and len({s["id"] for s in plan["subscribers"]}) == 100
    assert all(spec.subscriptions.min <= len(s["subs"]) <= spec.subscriptions.max for s in plan["subscribers"])
    alerts = plan["be"][0]
    assert (alerts["subject"], alerts["topic"], alerts["rate"]) == ("bad.r.alerts.1", "alerts-1", 1000.0)
    # Zipf 1 within a channel: parameter 1 of a channel is held by more subscribers than its last
    held = [sum(k in s["subs"] for s in plan["subscribers"]) for k in range(len(plan["be"]))]
    assert held[0] > held[3] and held[4] > held[9]
    # a surge every 20 s within the 60 s run, each over a quarter of the 20 BE subscriptions, 15 s long
    assert [(s["at"], s["until"], len(s["subs"])) for s in plan["surges"]] == [(20.0, 35.0, 5), (40.0, 55.0, 5)]
    k = plan["surges"][0]["subs"][0]
    assert factor_at(plan, k, 19.9) == 1.0 and factor_at(plan, k, 20.0) == 3.0 and factor_at(plan, k, 35.0) in (1.0, 3.0)
    assert results_at(plan, k, 25.0) == 3 * plan["be"][k]["results"]
    assert plan == smoke_plan()[1]  # the seed decides


@pytest.mark.parametrize("old, new, message", [
    ("kind: bad", "kind: none", "workload kind 'bad' needs a bad block, and only it takes one"),
    ("    - {name: alerts, threshold: 50ms}\n", "", "every channel needs a threshold in topics: add {name: alerts"),
    ("subscriptions: {min: 2, max: 5}", "subscriptions: {min: 6, max: 5}", "subscriptions.max must not be smaller than subscriptions.min"),
    ("beta: 20KB/s", "beta: 20KB", "is not a data rate such as '20KB/s'"),
])
def test_bad_scenarios_are_refused_with_the_field(tmp_path, old, new, message):
    (tmp_path / "s.yaml").write_text(SMOKE.read_text().replace(old, new))
    with pytest.raises(ScenarioError) as error:
        load(tmp_path / "s.yaml")
    assert "s.yaml:" in str(error.value) and message in str(error.value), str(error.value)


def test_bad_workload_needs_subscribers_and_takes_no_faults(tmp_path):
    text = SMOKE.read_text().replace("role: subscriber", "role: static") + "faults:\n  - {at: 10s, kill: zone1}\n"
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ScenarioError) as error:
        topology.checked(load(tmp_path / "s.yaml"), str(tmp_path / "s.yaml"))
    assert "needs client nodes with role: subscriber" in str(error.value)
    assert "does not take faults" in str(error.value)


def test_broker_load_from_two_counter_samples():
    before = {"time": 10.0, "in_bytes": 1000, "out_bytes": 5000}
    after = {"time": 12.0, "in_bytes": 3000, "out_bytes": 11000, "connections": 4}
    assert load_between(before, after) == {"in": 1000.0, "out": 3000.0, "F": 4000.0, "since": 10.0, "until": 12.0,
                                           "connections": 4}


def _varz(port: int, path: str = "varz") -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=2) as answer:
        return json.load(answer)


@needs_nats_server
def test_a_leaf_broker_shares_one_upstream_subscription_between_its_subscribers(tmp_path):
    """BAD's subscription sharing, by nats-server: two subscribers of one BE subscription at
    a leaf broker make one subscription at the hub, each result crosses the leaf connection once,
    and the leaf's load is (1 + 2) x the result bytes (eq. 5)."""
    import nats

    ports = {"hub": (24822, 28822), "leaf": (24823, 28823)}
    (tmp_path / "hub.conf").write_text(hub_config("127.0.0.1"))
    (tmp_path / "leaf.conf").write_text(leaf_config("127.0.0.1"))
    servers = []
    try:
        for name, (port, monitor) in ports.items():
            servers.append(subprocess.Popen([NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor),
                                             "-c", str(tmp_path / f"{name}.conf"), "-l", str(tmp_path / f"{name}.log")]))

        async def scenario():
            for _ in range(50):  # the leaf connects to the hub's LEAF_PORT
                await asyncio.sleep(0.1)
                try:
                    if _varz(28822, "leafz")["leafnodes"] == 1:
                        break
                except OSError:
                    pass
            a = await nats.connect("nats://127.0.0.1:24823")
            b = await nats.connect("nats://127.0.0.1:24823")
            got = []

            async def keep(msg):
                got.append(msg.subject)
            for client in (a, b):
                await client.subscribe("bad.r.alerts.1", cb=keep)
                await client.flush()
            await a.subscribe("bad.r.alerts.2", cb=keep)
            await a.flush()

            def upstream() -> list[str]:
                return [s for s in _varz(28822, "leafz?subs=1")["leafs"][0]["subscriptions_list"]
                        if s.startswith("bad.r.")]
            await _until(lambda: len(upstream()) == 2)  # the leaf has forwarded the interest to the hub
            before = {**_varz(28823), "time": time.time()}
            hub = await nats.connect("nats://127.0.0.1:24822")
            for _ in range(5):
                await hub.publish("bad.r.alerts.1", b"r" * 1000)
            await hub.flush()
            await _until(lambda: len(got) >= 10 and _varz(28823)["out_bytes"] - before["out_bytes"] >= 10000)
            after = {**_varz(28823), "time": time.time()}
            leafz = _varz(28822, "leafz?subs=1")["leafs"]
            for client in (a, b, hub):
                await client.close()
            return got, leafz, before, after

        got, leafz, before, after = asyncio.run(scenario())
        assert LEAF_PORT == 7422 and len(leafz) == 1
        upstream = [s for s in leafz[0]["subscriptions_list"] if s.startswith("bad.r.")]
        assert sorted(upstream) == ["bad.r.alerts.1", "bad.r.alerts.2"]  # one per subject, not per subscriber
        assert leafz[0]["out_msgs"] == 5 and leafz[0]["out_bytes"] == 5000  # each result crossed once
        assert got.count("bad.r.alerts.1") == 10  # and reached both subscribers
        pulled, pushed = after["in_bytes"] - before["in_bytes"], after["out_bytes"] - before["out_bytes"]
        assert (pulled, pushed) == (5000, 10000)  # I_j = lambda, O_j = n_jk lambda: F_j = (1 + 2) lambda
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)


async def _until(held, timeout_s: float = 15.0) -> None:
    """Wait for `held()` (what the test then judges), not a fixed time a stalled VM can outlast; the
    judgement after it still fails when it never held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if held():
                return
        except (OSError, KeyError, IndexError):
            pass
        await asyncio.sleep(0.05)


def _not_held(out: Path, summary: dict) -> str | None:
    """Nearly every second judged and within budget (at most three the hypervisor's steal does not
    explain): the claims count results and bytes, not latencies, but a harness that fell behind for
    longer could drop results at a slow subscriber or shift a window's counts. And the coordinates
    settled by the scenario's criterion, or nr placed by estimates that said nothing yet."""
    settle_end = next(json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()
                      if '"settle_end"' in line)
    if not settle_end["settled"]:
        return f"coordinates unsettled at the {settle_end['cap_s']:g} s cap: {settle_end['unmet']}"
    ours = unexplained_seconds(out)
    if judged_seconds(out) < 10 or len(ours) > 3:
        return f"{judged_seconds(out)} s judged; saturated {summary['harness']['saturated']}"
    return None


@pytest.fixture(scope="module")
def ldm_run(tmp_path_factory):
    """(run directory, summary, events, plan, deliveries) of one run of LDM_SCENARIO the harness held."""
    _run, out, summary = run_held([str(LDM_SCENARIO), "--backend", "mininet"], tmp_path_factory.mktemp("bad"),
                                  "bad-ldm", _not_held, timeout=300)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    deliveries = [json.loads(line) for path in (out / "traces").glob("*.jsonl")
                  for line in path.read_text().splitlines()]
    return out, summary, events, json.loads((out / "bad-plan.json").read_text()), deliveries


def fresh_deviations(out: Path, events: list[dict]) -> tuple[list[float], int]:
    """|measured - eq. 5| / eq. 5 of every fresh measurement (summary's measured_vs_model) whose window,
    since the round before, no second the machine held touched (steal or a stalled VM: it shifts a
    window's bytes; the harness's own lateness does not excuse a window); and how many were left out."""
    health = [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines() if line.strip()]
    stalled = [h["t"] for h in health if h.get("causes") and explained_by_machine(h)]
    rounds = sorted((e for e in events if e["type"] == "bad_round"), key=lambda e: e["time"])
    clean, left_out = [], 0
    for before, now in zip([None, *rounds], rounds):
        since = before["time"] if before else now["time"] - 10.0
        for broker, fresh in (now.get("fresh") or {}).items():
            if not fresh or not now["model"].get(broker):
                continue
            if any(since - 1.0 <= t <= now["time"] for t in stalled):
                left_out += 1
            else:
                clean.append(abs(now["measured"][broker] - now["model"][broker]) / now["model"][broker])
    return clean, left_out


def measured_loads(deliveries: list[dict], since: float, until: float, size: float) -> dict[str, float]:
    """Each broker's F_j (eq. 5) over [since, until), bytes/s, counted from what its subscribers
    received: every result it pushed (O_j), and every distinct result it pulled from the hub (I_j)."""
    pushed: Counter = Counter()
    pulled: dict[str, set] = {}
    for d in deliveries:
        if since <= float(d["receive_time"]) < until:
            pushed[d["broker"]] += 1
            pulled.setdefault(d["broker"], set()).add((d["topic"], d["seq"]))
    return {b: (pushed[b] + len(pulled[b])) * size / (until - since) for b in pulled}


@full_system
def test_nr_placement_is_skewed_and_ldm_evens_the_measured_load(ldm_run):
    _out, summary, events, plan, deliveries = ldm_run
    bad = summary["bad"]
    assert not [e for e in events if e["type"] == "bad_process_died"]  # no coordinator round crashed it
    placements = [e for e in events if e["type"] == "bad_placed"]
    placed = {e["subscriber"]: e["broker"] for e in placements}
    assert len(placed) == 100
    # nr is the nearest by the estimates it had when the subscriber registered (ties: lowest index)
    wrong = [e for e in placements if e["estimates_ms"][e["broker"]] != min(e["estimates_ms"].values())]
    assert not wrong, wrong[:3]
    # nr: subscribers on the broker nearest by Serf's estimates. At least 60 of zone1's 70 (the
    # downtown's three nodes of 20, a neighbour node of 10) on zone1's broker; in all at least 70 of
    # 100 on their own zone's (a zone of one subscriber node may still be misjudged, see the
    # scenario). A placement blind to distance puts ~25 on their own zone's broker.
    site = {s["id"]: s["site"] for s in plan["subscribers"]}
    brokers_site = {n.name: n.site for n in topology.build(load(LDM_SCENARIO)).nodes.values()}
    at_home = [s for s in placed if brokers_site[placed[s]] == site[s]]
    assert sum(site[s] == "zone1" for s in at_home) >= 60 and len(at_home) >= 70, placed
    # eq. 5 over that placement: the paper's "extremely skewed" NR; judged when the coordinator's
    # first round came after the last subscriber registered (a round that came before moved some
    # of them already, and the first round with every subscriber then sees LDM's mix, not NR's)
    last_placed = max(e["time"] for e in placements)
    nr_skew = "NR's placement is extremely skewed (eq. 5 cov > 0.5)"
    if not [e for e in events if e["type"] == "bad_migration" and e["time"] < last_placed]:
        with claims.judge(nr_skew):
            assert bad["cov_first"] > 0.5
    else:
        claims.not_exercised(nr_skew, "the coordinator moved subscribers before the last one registered")
    # eq. 5 is what the brokers measure: nats-server's byte counters over windows that no move or
    # rate change touched (after each, a broker's next round or two go by the model: 4 to 17 such
    # measurements in six runs), within a few tenths of a percent (whole executions per window),
    # judged over the windows no saturated second touched (a stalled VM shifts a window's bytes:
    # 4-40 % in one CI run whose every fresh window had 150-230 ms of steal a second)
    assert bad["fresh_samples"] >= 4, bad
    clean, stalled = fresh_deviations(_out, events)
    if len(clean) < 4:  # judged last, as it may skip
        unjudged_windows = (f"{len(clean)} fresh windows clear of the machine's seconds, {stalled} touched by them "
                            f"(median over all {bad['measured_vs_model']:.3f})")
    else:
        unjudged_windows = None
        with claims.judge("measured F_j is eq. 5"):
            assert float(np.median(clean)) < 0.03, (clean, bad)
    # LDM ends less skewed, measured from what the subscribers received in the last 4 s (two
    # executions of every channel): it stops at alpha (0.15) or when no move is valid, and a move or
    # a surge within the window shifts the cov by a few hundredths; without migrations it stays ~0.8
    end = next(e["time"] for e in events if e["type"] == "run_end")
    loads = measured_loads(deliveries, end - 4.5, end - 0.5, plan["message_size"])
    assert len(loads) == 4 and cov(np.array(list(loads.values()))) < 0.25, loads
    assert bad["migrations"] > 0
    # every order was carried out (but one the coordinator's last round sent while the subscribers
    # were stopping: re-attaching takes ~0.4 s)
    migrated = Counter(e["subscriber"] for e in events if e["type"] == "bad_migration" and e["time"] < end - 1)
    reattached = Counter(e["client"] for e in events if e["type"] == "bad_reattached")
    assert migrated and all(reattached[s] >= n for s, n in migrated.items()), (migrated, reattached)
    if unjudged_windows is not None:  # with the machine's windows counted there were enough: theirs
        claims.unjudged("measured F_j is eq. 5", unjudged_windows, attributed_to_machine=len(clean) + stalled >= 4)


@full_system
def test_every_subscriber_gets_every_result_and_moved_ones_through_their_new_broker(ldm_run):
    _out, summary, events, plan, deliveries = ldm_run
    bad = summary["bad"]
    # every subscriber process handed back its counts: losses are counted over all 100, and what they
    # counted is what the traces hold
    assert bad["reported"] == len(plan["subscribers"]) and bad["received"] == len(deliveries) == summary["delivered"]
    assert bad["lost"] == 0
    received: dict[str, set] = {}
    for d in deliveries:
        received.setdefault(d["consumer"], set()).add(d["broker"])
    assert set(received) == {s["id"] for s in plan["subscribers"]}
    # a subscriber moved 5 s or more before the end got results through its new broker (every
    # channel executes at least every 2 s)
    end = next(e["time"] for e in events if e["type"] == "run_end")
    final = {e["subscriber"]: e for e in sorted((e for e in events if e["type"] == "bad_migration"),
                                                 key=lambda e: e["time"])}
    settled = [e for e in final.values() if e["time"] < end - 5]
    missed = {e["subscriber"]: (e["time"], e["destination"], received[e["subscriber"]]) for e in settled
              if e["destination"] not in received[e["subscriber"]]}
    assert settled and not missed, (end, missed)


@full_system
def test_the_back_end_yields_each_execution_whole_surges_included(ldm_run):
    """Every execution of every BE subscription reached its subscribers with all its records, and
    those in a surge with `factor` times as many (read from the records' scheduled times; an
    execution within 0.3 s of a surge's start or end is left out, the run's clock and the back
    end's start differ by tens of ms, and so is one in the last second, whose records may still be
    on their way when the subscribers stop)."""
    _out, _summary, events, plan, deliveries = ldm_run
    t0 = next(e["time"] for e in events if e["type"] == "run_start")
    end = next(e["time"] for e in events if e["type"] == "run_end")
    index = {be["topic"]: k for k, be in enumerate(plan["be"])}
    executions: dict[tuple[int, float], set] = {}
    for d in deliveries:
        executions.setdefault((index[d["topic"]], float(d["send_time"])), set()).add(int(d["seq"]))
    edges = [t for s in plan["surges"] for t in (s["at"], s["until"])]
    judged = {(k, due): seqs for (k, due), seqs in executions.items()
              if due < end - 1 and all(abs(due - t0 - t) > 0.3 for t in edges)}
    wrong = {(k, round(due - t0, 2)): (len(seqs), results_at(plan, k, due - t0)) for (k, due), seqs in judged.items()
             if len(seqs) != results_at(plan, k, due - t0)}
    assert not wrong, wrong
    surged = [(k, due) for k, due in judged if factor_at(plan, k, due - t0) > 1]
    assert plan["surges"] and surged
