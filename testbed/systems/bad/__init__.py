"""BAD Pub/Sub (Nguyen, Uddin, Venkatasubramanian, DEBS '19) on the emulated network: a back-end data
cluster in the cloud, edge brokers that share subscriptions, a broker coordination server (BCS) that
places and migrates subscribers. Programs that run inside nodes; the harness side is testbed.systems.bad.role.

- `plan`: the workload as data (channels, BE subscriptions, subscribers and their FE
  subscriptions, rate surges), drawn once with the scenario's seed and shared by every process.
- `dataplane`: nats-server as the two tiers: the cloud's server is the hub, each edge broker's
  a leaf node of it. A leaf node forwards its clients' interest upstream once per subject, and
  the hub sends each message across a leaf connection once however many of the leaf's clients
  want it: that is BAD's subscription sharing (3.1), done by nats-server on the hot path.
- `cluster`: the back end: executes every channel at its period and publishes each BE
  subscription's results; reports the rates lambda_k to the BCS.
- `brokerload`: each edge broker's load F_j, measured from its nats-server's byte counters
  (in: results pulled from the hub; out: results pushed to subscribers), reported to the BCS.
- `coordinator`: the BCS: registers subscribers (stage 1 placement), runs Algorithm 1 every
  period (testbed.policies.bad) and orders migrations.
- `subscriber`: a node's subscribers: register, attach, subscribe, re-attach on orders, and
  write one trace row per delivered result.
"""
