"""NATS's own geo-distribution as a baseline system under test: every broker node's nats-server joined
in one route cluster (interest propagated over the routes, as a NATS cluster is deployed), no topic
manager, no ZooKeeper, no migrations. Clients attach to their zone's server (`home`) or to the one
nearest their zone's NC proxy by network coordinate (`nearest`), and follow a mobile node to its new
zone's server. It runs the pub/sub system's UAV workload with the same clients (testbed.systems.pubsub
client library, `--attach` instead of a lookup), so the two systems are compared on the same flights.

Modules: manifest (what the core may know), schema (`control.natscluster`), checks (what a scenario
must not ask of it), role (the cluster and the workload's attach plan).
"""
