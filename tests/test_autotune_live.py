"""The auto-tuned publisher live (seed 003, issue 17): `autotune-smoke` end to end on the emulated
network, the publisher 140 ms RTT from a real JetStream broker (root; about 45 s). Under the
paper's lowest load a publisher tuned from N = 50 brings N down within a second, and its latency
with it, against the same arrivals into a publisher whose N stays at 50."""

from __future__ import annotations

import json
from pathlib import Path

from tests.live import run_held, unexplained_seconds
from tests.needs import full_system

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "scenarios" / "autotune-smoke.yaml"


def _not_held(_out: Path, summary: dict) -> str | None:
    """At most one isolated second over budget: at a few packets a second one late packet is a
    second's p99 (this VM's timer stalls reach a few ms now and then), as the UAV smoke allows;
    seconds that the hypervisor's steal explains are not counted (`tests.live.explained_by_steal`)."""
    return None if len(unexplained_seconds(_out)) <= 1 else str(summary["harness"]["saturated"])


@full_system
def test_a_publisher_tuned_from_50_brings_n_and_latency_down_at_low_load(tmp_path):
    run, out, summary = run_held([str(SMOKE), "--backend", "mininet"], tmp_path, "autotune-smoke", _not_held,
                                 timeout=300)
    tune = summary["autotune"]
    assert tune["rtt_ms"] == 140.0
    requests = len(json.loads((out / "autotune-arrivals.json").read_text()))
    assert 30 <= requests <= 80  # Poisson 1.75/s over 30 s
    for name, v in tune["variants"].items():
        # every request reached the subscriber once; nothing dropped, refused or sent twice
        assert (v["arrived"], v["acked"], v["delivered"]) == (requests,) * 3, (name, v)
        assert v["dropped"] == v["refused"] == v["duplicates"] == v["errors"] == 0, (name, v)
        # the path is real: nothing arrives faster than the 70 ms one-way delay
        assert v["p50_ms"] > 70.0, (name, v)
    fixed, tuned, low = (tune["variants"][n] for n in ("fixed50", "auto50", "auto1"))
    # a fixed N = 50 never fills at 1.75/s: every request waits T (200 ms); tuned, N falls to 1-2
    assert fixed["n_mean"] == 50 and tuned["n_mean"] < 3, (fixed, tuned)
    assert fixed["p50_ms"] > 250 and tuned["mean_ms"] < fixed["mean_ms"] - 100, (fixed, tuned)
    # tuned latency does not depend on the starting N (the paper's Fig. 9)
    assert abs(tuned["mean_ms"] - low["mean_ms"]) < 20, (tuned, low)
    polls = [json.loads(line) for line in (out / "logs" / "autotune-auto50.jsonl").read_text().splitlines()]
    first = polls[0]["t"]
    assert min(p["n"] for p in polls if p["t"] <= first + 1.0) <= 2  # 50 -> 1-2 within a second
    assert all(p["t_poll_s"] >= 0.05 for p in polls)
    screen = run.stdout
    assert "auto-tuned publisher, 140 ms RTT to the broker" in screen and "harness: " in screen
