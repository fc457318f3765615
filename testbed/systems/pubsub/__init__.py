"""ePulsar on NATS, the programs that run inside nodes (paper sections 3-4): the broker agent
(ownership, per-topic monitoring, migration), the topic manager (Algorithm 1), the lookup service,
the client library and the workload programs. The harness starts them through
`testbed.systems.pubsub.role` and `testbed.systems.pubsub.workload_role`.
"""
