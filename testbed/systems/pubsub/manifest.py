"""ePulsar's pub/sub: what the core may know of it (testbed.plugin)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from testbed.plugin import Benchmark, Experiment, FaultTarget, Figure, System, WorkloadKind
from testbed.policies.distance import DEFAULT_DISTANCE
from testbed.policies.initial import DEFAULT_INITIAL_PLACEMENT
from testbed.policies.registry import DEFAULT_POLICY
from testbed.scenario.fields import DistanceName, Duration, InitialPlacement, PolicyName, PositiveDuration
from testbed.systems.pubsub.claims import FIG4, FIG4_JITTER, FIG5, FIG6, FIG7A, FIG7B
from testbed.systems.pubsub.schema import (MANAGER, ZOOKEEPER, HandoverTrigger, Hotspot, Migration, Overload, PulsarLm,
                                           check_control, hotspot_topics, needs_rate_and_topics)

PUBSUB_FEATURES = ("durable", "tracking")

SYSTEM = System(
    name="epulsar",  # the system under test a scenario names (`system: epulsar`); its folder is pubsub/
    title="ePulsar's edge-aware topic placement on network coordinates, its baselines and Pulsar's load manager",
    workloads=(
        WorkloadKind("uav-swarm", validate=needs_rate_and_topics, check="checks:uav", offered="load:uav",
                     offered_by_node="load:uav_by_node", features=PUBSUB_FEATURES,
                     experiment=Experiment(
                         "fig8", "UAV swarms (Fig. 8)",
                         {"smoke": "scenarios/uav-smoke.yaml", "full": "scenarios/uav.yaml"},
                         "paper: 4 zones, 8 swarms of 8 UAVs, 200 msg/s of 1 KB each, 50 m/s, 10 min",
                         smoke_note="mechanism check, not comparable with the paper (faster flight, shorter run); ")),
        WorkloadKind("mmog", validate=needs_rate_and_topics, check="checks:mmog", offered="load:mmog",
                     features=("tracking",),
                     experiment=Experiment(  # Fig. 9 is one avatar's area of interest (5.8.2), not a game server's
                         "fig9", "MMOG (Fig. 9)", {"smoke": "scenarios/mmog-smoke.yaml", "full": "scenarios/mmog.yaml"},
                         "paper: 5 cities, 64 avatars, 300 msg/s of 998 B, group change after U(30 s, 60 s), 10 min",
                         one_consumer=True),
                     refuses={"durable": "its area-of-interest subscriptions open and close at every group change, "
                                    "and a durable cursor would replay what a player missed meanwhile"}),
        WorkloadKind("hotspot", block="hotspot", block_model=Hotspot, validate=hotspot_topics, check="checks:hotspot",
                     offered="load:hotspot", offered_by_node="load:hotspot_by_node", features=PUBSUB_FEATURES,
                     experiment=Experiment(  # the paper has no balance figure: ePulsar vs Pulsar's load manager
                         "load-balancing", "hot spot",
                         {"smoke": "scenarios/hotspot-smoke.yaml", "full": "scenarios/hotspot.yaml"}, balance=True)),
    ),
    client_roles=("uav-swarm", "game-server", "avatar", "static"),
    agent_roles=("game-server", "static"),
    workload_fields={"avatars": (Annotated[int, Field(ge=1, le=100_000)], 1),  # the MMOG's avatars, one per player
                     "groups": (Annotated[int, Field(ge=1, le=10_000)], 1),  # and the groups they play in
                     # the clients' data plane: nats-py, or the node's compiled engine (engine.py)
                     "client_engine": (Literal["python", "compiled"], "python"),
                     # with the compiled engine: one client host for every client node of a machine
                     # (clienthost.py), or a process and an engine per node; auto: per machine where it can
                     "client_processes": (Literal["auto", "per-machine", "per-node"], "auto")},
    roles=("role:PubSubRole", "workload_role:PubSubWorkload"),
    # the topic manager's keys, flat under `control` as scenarios have always written them; refused
    # (testbed.scenario.owners) when another system is under test
    control={
        "policy": (PolicyName, DEFAULT_POLICY, "the topic manager's placement policy (testbed.policies.registry)"),
        "distance": (DistanceName, DEFAULT_DISTANCE,
                     "how d is read from Serf's RTT estimate: `one_way` halves it, `rtt` takes it as the paper "
                     "writes d (testbed.policies.distance)"),
        "initial_placement": (InitialPlacement, DEFAULT_INITIAL_PLACEMENT,
                              "where a topic starts: `first_lookup`, placed by the policy from the first asking "
                              "client's coordinate; `cloud`, on the cloud broker until its first report and round "
                              "(testbed.policies.initial)"),
        "infeasible_min_gain": (Duration, 0.0,
                                "beyond the paper (0: Algorithm 1 as written): a violating topic that no broker can "
                                "serve within its threshold moves only when the best broker's estimate beats its own "
                                "broker's by at least this much (testbed.policies.repartition.too_little_gain)"),
        "monitoring_period": (PositiveDuration, 5.0, "how often a broker reports its topics to ZooKeeper (paper 3.2)"),
        "migration": (Migration, Migration(), "the migration workflow (`enhanced`: ePulsar's Fig. 2; `baseline`: "
                                              "Pulsar's) and its pool of executors"),
        "overload": (Overload, Overload(), "broker overload thresholds (paper 3.4.2; testbed.policies.overload)"),
        "pulsar_lm": (PulsarLm, PulsarLm(), "Pulsar's load manager (policy pulsar-lm), testbed.policies.pulsar_lm.config"),
        "handover_trigger": (HandoverTrigger, HandoverTrigger(),
                             "beyond the paper: early reports and rounds on handovers (testbed.policies.handover)"),
    },
    validate_control=check_control,
    fault_targets=(
        FaultTarget(ZOOKEEPER, "kills the cloud's ZooKeeper (SIGKILL) and starts it again, with its data, "
                                 "`restart_after` later: the control plane is gone meanwhile, the data plane is not",
                    restart=True, why="the run has no control plane without it"),
        FaultTarget(MANAGER, "kills the elected topic manager for good; with two or more cloud brokers a standby "
                               "manager (one in every cloud node) is elected once the leader's ZooKeeper session "
                               "expires", restart=False, why="a manager has standbys", check="checks:manager_fault"),
    ),
    benchmarks=(
        # the ePulsar paper's microbenchmarks (5.5-5.7), each quick enough for `make paper` to run
        Benchmark("placement", program="bench.placement", figures="bench.figures", minutes=8, paper_runs=True,
                  about="broker selection policies over 1000 random placements (paper 5.5) -> results/bench/"
                        "placement.json, fig4/fig5.png (--quick: 200 placements)",
                  shows=(FIG4, FIG5)),
        Benchmark("placement-jitter", program="bench.placement", figures="bench.figures", minutes=6, paper_runs=True,
                  args=("--jitter", "measured"),
                  about="Fig. 4 again with every inter-city link varying as WonderProxy's pings did (cities.jitter: "
                        "measured) -> results/bench/placement-jitter.json, fig4-jitter.png (--quick: 200 placements)",
                  shows=(FIG4_JITTER,)),
        Benchmark("monitoring", program="bench.monitoring", figures="bench.figures", minutes=10, paper_runs=True,
                  about="monitoring traffic of one broker to ZooKeeper, ePulsar vs AllPairs (paper 5.6) -> "
                        "results/bench/monitoring.json, fig6.png",
                  shows=(FIG6,)),
        Benchmark("migration", program="bench.migration", figures="bench.figures", minutes=10, paper_runs=True,
                  about="topic migration overheads, enhanced vs baseline (paper 5.7) -> results/bench/migration.json, "
                        "fig7a/b.png",
                  shows=(FIG7A, FIG7B)),
        # this machine's capacity for the UAV and MMOG workloads: `testbed run` warns past it (testbed.load)
        Benchmark("capacity", program="bench.capacity", minutes=26,
                  about="load the harness carries within its error budget: UAV and MMOG knees vs the paper's load, "
                        "nats-server and the delay line alone -> results/bench/capacity.json, capacity.png (--quick; "
                        "--clients compiled -> capacity-compiled.*)"),
        Benchmark("efficiency", program="bench.efficiency", minutes=25,
                  about="CPU-us per delivered message by process class at fractions of the paper's UAV load and MMOG "
                        "points, shapers (--shapers routed,shared,delayline) or client data planes alternating run by run -> "
                        "results/bench/efficiency.json, efficiency.png (--quick)"),
        Benchmark("connections", program="bench.connections", minutes=2,
                  about="the compiled engine's own CPU with MMOG's ~1,200 connections at 3 msg/s per publisher on "
                        "loopback, engine binaries (--binary, repeatable) alternating run by run -> results/bench/"
                        "connections.json"),
        Benchmark("repeat", program="bench.repeat", minutes=40,
                  about="the paper's UAV case (--scenario) run 3 times back to back (--runs, --duration 10m), each "
                        "valid >= 95 % of its seconds, no migration failed, >= 99.9 % delivered -> results/bench/"
                        "repeat.json"),
        Benchmark("scaleout", program="bench.scaleout", minutes=6,
                  about="the same scenario on this machine and over 3 isolated namespace-servers (reached as other "
                        "machines are), alternating: CPU-us per delivery by class and per server, the guard's "
                        "verdicts -> results/bench/scaleout.json"),
        Benchmark(
            "tracking",
            program="bench.tracking",
            figures="bench.tracking_figures",
            minutes=23,
            about="message tracking (Jun and Astley): Table 2's storage at the paper's load replayed, latency per "
                  "strategy live, traceback vs the traces -> results/bench/tracking.json, tracking-fig3/4/5, "
                  "tracking-fp.png (--quick: 5.5 min)",
            scale="live: one broker at 300 msg/s (scenarios/bench/tracking.yaml); storage: the paper's 5,000 msg/s "
                  "replayed through the same recorder; accuracy: scenarios/tracking-smoke.yaml",
            shows=(Figure("tracking", images=("tracking-fig3.png", "tracking-fig4.png", "tracking-fig5.png", "tracking-fp.png"),
                       section="Jun and Astley, 5.3", title="Message tracking: Bloom-filter histories vs a log vs none (Fig. 3-5)",
                       paper="with 10K buffers Bloom filters cost little latency over no tracking while the log is significantly "
                             "slower (Fig. 3); filters do not compress, logs do (Fig. 4-5); partially full filters (a small T_p) "
                             "cost Bloom filters storage; efpp = 1 - (1 - fpp)^|M| (eq. 2)",
                       rule="every testable rule of bench/tracking_figures.py holds: Fig. 3 on runs the harness held, each "
                            "strategy against NULL's run of the same round (close: 0.1 ms or 5 %); full filters keep >= 90 % "
                            "under gzip, logs <= 60 %; T_p 1 s stores >= 3x T_p 8 s; Table 2's full-filter column; no false "
                            "negative and false positives within eq. 2's expectation + 4 sigma"),)),
        Benchmark(
            "handover",
            program="bench.handover",
            figures="bench.handover_figures",
            minutes=40,
            about="beyond the paper: Fig. 8's post-handover windows with the handover trigger off and on, same flights "
                  "alternating, with when each step of the reaction came; ping-pong on a zone border; the monitoring "
                  "it adds -> results/bench/handover.json, handover.png",
            scale="live: scenarios/uav-smoke.yaml with seeds 3 and 5, trigger off then on; scenarios/uav-border.yaml "
                  "(one swarm changing zone every 4 s) off and on; scenarios/uav-comparable.yaml (the paper's 8 swarms, "
                  "10 min) off and on",
            shows=(Figure("handover", images=("handover.png",), section="beyond the paper (the loop of 4 and 5.8.1)",
                          title="Handover-aware placement: early reports and rounds close Fig. 8's windows",
                          paper="none: the paper reacts at its periodic loop only, so a swarm that changes zone stays above "
                                "its threshold until the next NC report, the next monitoring round (5 s each) and the "
                                "migration",
                          rule="with the trigger, the post-handover windows' median <= 1.5 s and max <= 3 s on the same "
                               "flights (uav-smoke and uav-comparable, each judged alone); on a zone border at most one "
                               "topic migration per handover"),)),
        Benchmark(
            "durable",
            program="bench.durable",
            figures="bench.durable_figures",
            minutes=20,
            about="durable topics (ePulsar 3.5) live: ack and E2E latency by storage placement and replicas, storage "
                  "traffic and CPU, zero loss across migrations and crashes -> results/bench/durable.json, "
                  "durable-latency/cost.png (--only loss-r3-enhanced --reuse runs some)",
            scale="live: scenarios/uav-smoke.yaml per storage placement and replica count (3 storage racks per site "
                  "and in the cloud); zero loss: the same runs with a broker and a storage node killed, per workflow",
            shows=(Figure("durable", images=("durable-latency.png", "durable-cost.png"),
                       section="3.5", title="Durable topics: storage nodes on the broker's own edge site (live, no figure in the paper)",
                       paper="a persistent topic is acknowledged once stored on one or more storage nodes; ePulsar picks them on "
                             "the broker's own site, on distinct racks, so no remote round trip sits in the critical path",
                       rule="every testable rule of bench/durable_figures.py holds: cloud R3's ack p50 exceeds site-local R3's by "
                            ">= 80 % of the cloud RTT; 0 acknowledged messages lost with 3 replicas across a broker and a "
                            "storage-node kill, both workflows; site-local streams move with their topic; R3 > 1.5x R1's storage "
                            "traffic (a saturated run is named beside the verdict)"),)),
    ),
)
