"""The auto-tuned publisher live: tests/scenarios/autotune-steps.yaml end to end on the emulated
network, the publisher 140 ms RTT from a real JetStream broker (root; about 30 s). At the paper's
lowest load a publisher tuned from N = 50 brings N down within a second, and its latency with it,
against the same arrivals into a publisher whose N stays at 50; when the load steps up to 35
requests/s, the tuned N goes up (N = 1 could publish only 20 a second) and the latency stays low."""

from __future__ import annotations

import json
from pathlib import Path


from testbed.scenario.loader import load
from tests.live import run_held, unexplained_seconds
from tests.spans import clean_seconds, too_few_clean
from tests.needs import full_system

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "tests" / "scenarios" / "autotune-steps.yaml"
# the scenario's two steps, (start, end) in s from the common start: 1.75, then 35 requests/s
LOW, HIGH = ((s.start, s.end) for s in load(SCENARIO).workload.autotune.source.steps)
JUDGED = {LOW: 5, HIGH: 35}  # requests of a step whose latencies judge its claims: 3 s of the low load, 1 of the high


def _not_held(_out: Path, summary: dict) -> str | None:
    """At most one isolated second over budget: at a few packets a second one late packet is a
    second's p99 (this VM's timer stalls reach a few ms now and then), as the UAV smoke allows;
    seconds that the hypervisor's steal explains are not counted (`tests.live.explained_by_machine`)."""
    return None if len(unexplained_seconds(_out)) <= 1 else str(summary["harness"]["saturated"])


def _n_mean(polls: list[dict], since: float, until: float) -> float:
    """N's time-weighted mean over [since, until) (each poll's N holds until the next poll)."""
    rows = [p for p in polls if since <= p["t"] < until]
    spans = [(b["t"] - a["t"], a["n"]) for a, b in zip(rows, rows[1:])]
    return sum(d * n for d, n in spans) / sum(d for d, _ in spans)


def _mean_ms(latencies: list[float]) -> float:
    return 1e3 * sum(latencies) / len(latencies)


@full_system
def test_a_tuned_publisher_brings_n_down_at_low_load_and_up_at_high_load(tmp_path):
    run, out, summary = run_held([str(SCENARIO), "--backend", "mininet"], tmp_path, "autotune-steps", _not_held,
                                 timeout=300)
    tune = summary["autotune"]
    assert tune["rtt_ms"] == 140.0
    requests = len(json.loads((out / "autotune-arrivals.json").read_text()))
    assert 250 <= requests <= 330  # Poisson 1.75/s over 10 s, then 35/s over 8 s
    for name, v in tune["variants"].items():
        # every request reached the subscriber once; nothing dropped, refused or sent twice
        assert (v["arrived"], v["acked"], v["delivered"]) == (requests,) * 3, (name, v)
        assert v["dropped"] == v["refused"] == v["duplicates"] == v["errors"] == 0, (name, v)
        # the path is real: nothing arrives faster than the 70 ms one-way delay
        assert v["p50_ms"] > 70.0, (name, v)
    start = float((out / "logs" / "autotune-start").read_text())
    polls = {name: [json.loads(line) for line in (out / "logs" / f"autotune-{name}.jsonl").read_text().splitlines()]
             for name in tune["variants"]}
    # latencies of the requests that arrived in seconds the hypervisor did not take
    # (tests.spans.clean_seconds): a stolen second delays every queue in the VM at once.
    # Each claim's margin is 100 ms or more over spreads of tens (measured: fixed 245-325 ms, tuned
    # 80-170 ms at the low load; tuned 150-250 ms at the high one), so a few seconds' worth judge it:
    # JUDGED requests of the tuned variant in each step, or the step's latency claims are not judged
    clean, latency, sent = clean_seconds(out), {}, {}
    for name in tune["variants"]:
        for line in (out / "traces" / f"requests-{name}.sub1.jsonl").read_text().splitlines():
            row = json.loads(line)
            step = LOW if float(row["send_time"]) - start < LOW[1] else HIGH
            sent[name, step] = sent.get((name, step), 0) + 1
            if int(float(row["send_time"])) in clean:
                took = float(row["receive_time"]) - float(row["send_time"])
                latency.setdefault(name, {LOW: [], HIGH: []})[step].append(took)
    fixed, tuned, low = (latency.get(n, {LOW: [], HIGH: []}) for n in ("fixed50", "auto50", "auto1"))
    unjudged = [step for step in (LOW, HIGH) if len(tuned[step]) < JUDGED[step]]
    # 1.75 requests/s: a fixed N = 50 never fills, every request waits T (200 ms); tuned, N falls to
    # 1-2 within a second (from the second on, a mean under 2) and the latency with it.
    # 35 requests/s, 1.75 a poll on average: N = 1 would cap the publisher at 20 a second and its
    # queue would grow by 15 a second (seconds of latency within the step, drops once the 100-request
    # buffer fills); tuned, N averages 2 or more from a second into the step (3 measured) and the
    # latency stays within a poll period or two of the path's (150-160 ms measured)
    assert {p["n"] for p in polls["fixed50"]} == {50}
    first = polls["auto50"][0]["t"]
    assert min(p["n"] for p in polls["auto50"] if p["t"] <= first + 1.0) <= 2  # 50 -> 1-2 within a second
    for name in ("auto50", "auto1"):
        assert _n_mean(polls[name], start + 1, start + LOW[1]) < 2, name
        assert _n_mean(polls[name], start + HIGH[0] + 1, start + HIGH[1]) >= 2, name
    assert all(p["t_poll_s"] >= 0.05 for p in polls["auto50"])
    if LOW not in unjudged:
        assert sorted(fixed[LOW])[len(fixed[LOW]) // 2] > 0.25 and _mean_ms(tuned[LOW]) < _mean_ms(fixed[LOW]) - 100
    if HIGH not in unjudged:
        for name in ("auto50", "auto1"):
            assert _mean_ms(latency[name][HIGH]) < 300, (name, _mean_ms(latency[name][HIGH]))
    # tuned latency does not depend on the starting N (the paper's Fig. 9), at either load
    for step in {LOW, HIGH} - set(unjudged):
        assert abs(_mean_ms(tuned[step]) - _mean_ms(low[step])) < 20, (step, _mean_ms(tuned[step]), _mean_ms(low[step]))
    screen = run.stdout
    assert "auto-tuned publisher, 140 ms RTT to the broker" in screen and "harness: " in screen
    for step in sorted((LOW, HIGH), key=lambda step: step in unjudged):  # counted; last, as one may skip
        too_few_clean(f"auto-tuned latency, step {step}", out, len(tuned[step]), JUDGED[step], sent.get(("auto50", step), 0))
