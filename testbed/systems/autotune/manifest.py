"""The auto-tuned batching publisher: what the core may know of it (testbed.plugin)."""

from __future__ import annotations

from testbed.plugin import Benchmark, Figure, System, WorkloadKind
from testbed.systems.autotune.schema import Autotune, one_topic_class

SYSTEM = System(
    name="autotune",
    title="the auto-tuned batching publisher (Balasubramanian et al.)",
    # The experiment is about the publisher and one path, not about placement: no coordinates.
    workloads=(WorkloadKind("autotune", block="autotune", block_model=Autotune, validate=one_topic_class,
                            check="checks:autotune", offered="load:autotune", coordinates=False),),
    client_roles=("publisher", "subscriber"),
    roles=("role:AutotuneRole",),
    benchmarks=(Benchmark(
                    "autotune",
                    program="bench.live",
                    figures="bench.figures",
                    minutes=20,
                    about="the publisher live: Fig. 8-14, a slow subscriber's drops, RTTs 20-280 ms -> results/bench/autotune.json, "
                          "autotune-fig8..14/rtt/drops.png (--only load-35,slow --reuse runs some)",
                    scale="live: scenarios/autotune.yaml per experiment, the publisher 140 ms RTT from a JetStream broker (20-280 ms "
                          "in the RTT sweep), 4-12 publishers side by side on the same arrivals",
                    shows=(Figure("autotune", images=tuple(f"autotune-fig{n}.png" for n in range(8, 15)) + ("autotune-rtt.png", "autotune-drops.png"),
                               section="Balasubramanian et al., V-VI", title="Publisher auto-tuning: batch size N fixed vs tuned (Fig. 8-14), live",
                               paper="untuned, the best N is 1 at 1.75 requests/s and near 10 at 35 (Fig. 8); tuned, the latency is the same "
                                     "whatever the initial N (Fig. 9, 12, 13) and N averages near the best fixed N (Fig. 10), following load "
                                     "steps (Fig. 11); no input drops with tuning under a slow subscriber (V-B-3); simulated in SimPy with a "
                                     "fixed 140 ms RTT",
                               rule="every testable rule of bench/figures.py holds on live runs: N 1 best at 1.75/s; N 10 within 10 % of the "
                                    "best fixed N at 35/s; N 1 >= 2x the best at 55/s; tuned means within 15 ms or 15 % of each other across "
                                    "initial N (each load, each trace speed); tuned within 15 % of the best fixed N at every load; tuned N's "
                                    "mean within 2x of the best fixed N at 35/s; slow subscriber: fixed N drops > 0, tuned 0 (a saturated run "
                                    "is named beside the verdict)"),)),),
)
