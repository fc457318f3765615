"""The handover trigger live (root only; about a minute and a half): scenarios/uav-border.yaml, one
swarm changing zone every 4 s with `control.handover_trigger` on. The trigger must act (the swarm's
handovers are detected, early rounds move its topics) and must not bounce them: no topic moves back
to the broker it left within the hold, early or periodic round. Timing targets live in `make bench-handover`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testbed import mobility, topology
from testbed.scenario.loader import load
from testbed.systems.pubsub.bench.handover import reaction_chain
from tests.live import run_held
from tests.spans import slack_s
from tests.needs import FULL_SYSTEM

ROOT = Path(__file__).resolve().parent.parent
pytestmark = FULL_SYSTEM + [pytest.mark.long]


def test_the_trigger_moves_a_handed_over_swarms_topics_early_and_never_back_within_the_hold(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios" / "uav-border.yaml").read_text())
    data["duration"] = "30s"  # 7 handovers
    hold = 10.0
    data["control"]["handover_trigger"] = {"enabled": True, "hold": f"{hold:g}s"}
    (tmp_path / "uav-border.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    _, out, summary = run_held([str(tmp_path / "uav-border.yaml")], tmp_path / "runs", "uav-border",
                               lambda out, summary: None)  # a mechanism, judged on any run
    events = sorted((json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()),
                    key=lambda e: e["time"])
    relinks = [e for e in events if e["type"] == "relink"]
    detected = [e for e in events if e["type"] == "handover_detected"]
    early = [e for e in events if e["type"] == "early_round"]
    starts = [e for e in events if e["type"] == "migration_start"]
    assert len(relinks) == 7 and detected and early, (len(relinks), len(detected), len(early))
    topics = {"follow_leader-swarm1", "sensor_data-swarm1"}
    assert any(set(e["topics"]) == topics and e["migrations"] == 2 for e in early)  # the first handover moves both
    # the relinks are the scenario's plan, and each one, and only those, the trigger detected soon after:
    # a poll, the early reports' spacing and a second for the new zone's proxy to answer, plus what
    # the hypervisor held of it; the first one's early round moved both topics to the new zone's broker
    scenario = load(out / "scenario.yaml")
    planned = [(h.node, h.to_site) for h in mobility.plan(scenario, topology.build(scenario))]
    assert [(e["node"], e["to_site"]) for e in relinks] == planned
    trigger = scenario.control.handover_trigger
    t0 = next(e["time"] for e in events if e["type"] == "run_start")
    bound = trigger.poll + trigger.min_interval + 1.0
    for chain, relink in zip(reaction_chain(events), relinks):
        since = relink["time"] - t0
        assert chain["detected"] is not None and chain["detected"] <= bound + slack_s(out, since, since + bound), chain
    assert all(any(0 <= e["time"] - r["time"] <= bound + 1.0 and r["node"] == e["node"] for r in relinks)
               for e in detected), "a handover detected with no relink before it"
    site_broker = {e["site"]: e["broker"] for e in events if e["type"] == "broker_registered"}
    first = [e for e in starts if relinks[0]["time"] <= e["time"] < relinks[1]["time"]]
    assert {(e["topic"], e["to_broker"]) for e in first} == {(t, site_broker[relinks[0]["to_site"]]) for t in topics}
    left: dict[str, tuple[float, str]] = {}  # each topic's last move: (when, the broker it left)
    for start in starts:  # the hold: neither round moves a topic back to the broker it left within it
        when, broker = left.get(start["topic"], (float("-inf"), ""))
        assert start["to_broker"] != broker or start["time"] - when >= hold - 0.5, (start, left)
        left[start["topic"]] = (start["time"], start["from_broker"])
    assert len(starts) <= len(topics) * len(relinks)
    held = [e for e in early if any(str(why).startswith("held") for why in e["kept"].values())]
    assert held, "with a handover every 4 s and a 10 s hold, some early round must have held the topics"
    assert summary["migrations_failed"] == 0
