"""The systems under test, one folder each: its manifest (what the core may know of it, read by
testbed.plugin), its schema fragment, checks, offered load and harness roles, and the programs that run
inside nodes (never imported by the harness's own process except for their pure parts).

Adding a system is one folder and one line here (docs/adding-a-system.md).
"""

SYSTEMS = (
    "testbed.systems.pubsub",  # ePulsar's edge-aware pub/sub with its UAV, MMOG and hot-spot workloads
    "testbed.systems.bad",  # BAD Pub/Sub's multistage balancing (Nguyen et al., DEBS '19)
    "testbed.systems.autotune",  # the auto-tuned batching publisher (Balasubramanian et al.)
    "testbed.systems.natscluster",  # NATS's own route cluster over every broker node (a baseline)
)
