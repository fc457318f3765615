"""BAD Pub/Sub: what the core may know of it (testbed.plugin)."""

from __future__ import annotations

from testbed.plugin import Benchmark, Figure, System, WorkloadKind
from testbed.systems.bad.schema import Bad, BadControl, channels_have_thresholds

SYSTEM = System(
    name="bad",
    title="BAD Pub/Sub's multistage subscriber balancing (Nguyen et al., DEBS '19)",
    workloads=(WorkloadKind("bad", block="bad", block_model=Bad, validate=channels_have_thresholds, check="checks:bad",
                            offered="load:bad"),),
    client_roles=("subscriber",),
    agent_roles=("subscriber",),
    control={"bad": (BadControl, BadControl(), "BAD's coordinator (workload kind bad), testbed.policies.bad")},
    roles=("role:BadRole",),
    benchmarks=(
        Benchmark(
            "bad",
            program="bench.sim",
            figures="bench.sim_figures",
            minutes=0.5,
            paper_runs=True,
            quick=(),
            about="the offline simulation, 10 brokers x 10,000 subscribers, placement x migration x shuffle "
                  "-> results/bench/bad.json, badsim-fig5..14.png (--quick: a smaller setup)",
            scale="10 brokers, 10,000 subscribers, ~200,000 FE subscriptions, 30 simulated minutes",
            shows=(Figure("bad-sim", images=tuple(f"badsim-fig{n}.png" for n in (13, 12, 11, 14, 5, 6, 7, 8, 9, 10)),
                       section="BAD Pub/Sub, 6.2", title="BAD subscriber load balancing, simulation (10 brokers, 10,000 subscribers; Fig. 5-14)",
                       paper="RND and RR mildly skewed with few migrations; NR extremely skewed and needing the shuffle; LDM "
                             "close to SDM; the shuffle balances at once and needs fewer later migrations; a smaller alpha "
                             "balances better at the cost of more migrations",
                       rule="every one of the six claims' rules holds (bench/sim_figures.py: each could fail; a missing scheme "
                            "fails it)"),)),
        Benchmark(
            "bad-live",
            program="bench.live",
            figures="bench.live_figures",
            minutes=20,
            about="BAD's 11 schemes on the live smoke (scenarios/bad-smoke.yaml) -> results/bench/bad-live.json "
                  "(--schemes nr+ldm,... runs some)",
            scale="scenarios/bad-smoke.yaml per scheme: 4 Atlanta zones, 100 subscribers (60 in zone1), 60 s",
            shows=(Figure("bad-live", images=("bad-live.png", "bad-live-load.png", "bad-live-latency.png"),
                       section="BAD Pub/Sub, 6.1", title="BAD subscriber load balancing on the emulated network (every scheme)",
                       paper="the prototype's claims (6.1.3): NR far more skewed than RND and RR; LDM and SDM fix it; NR needs "
                             "many more migrations; the shuffle fixes an extreme skew early",
                       rule="every testable rule holds (bench/sweep.py), on runs the harness held (saturated <= 5 % of the "
                            "run); not testable when a rule's runs are missing, saturated, or the shuffle never fired"),)),
    ),
)
