"""Broker selection policies and the topic manager's Algorithm 1 (paper 3.3, 3.4, 5.5): pure
functions of a `Snapshot` (the brokers' latest reports, the current placement P0 and the topics'
thresholds Lth(t)) that import nothing from the harness.

One module per job:

- `snapshot`: what brokers report and what the manager decides (paper 3.2); `distance`: how d is
  read from Serf's RTT estimate (`one_way` | `rtt`); `latency`: the formulas (W(t), E(t), W(t, b),
  paper 3.2, 3.4.1); `topics`: topic name -> topic class.
- `base`: the `Policy` protocol (rank the brokers for one topic, best first) and shared ranking.
- one module per family: `epulsar` (3.4.1), `allpairs` and `pulsar_hash` (the baselines of 5.5).
- `overload`: the thresholds (3.4.2), which topics an overloaded broker sheds (3.4.3), can_host.
- `repartition`: Algorithm 1 (PerformRepartitioning, PlaceTopics), the same for every ranking policy.
- `pulsar`: Apache Pulsar's load manager ("Achieving Broker Load Balancing with Apache Pulsar"), a
  family with its own state and control loop.
- `control`: what the topic manager runs per run: a `Controller` (Algorithm 1 around a ranking
  policy, or a family's own), and `choose_brokers` (placement from nothing, for the assessment).
- `initial`: where a topic nobody owns goes (at its first lookup, from the asker's coordinate, or
  on the cloud broker).
- `registry`: `POLICIES`, the only list of names; everything offering a choice derives from it.

Every public name is importable from here.
"""

from testbed.policies import latency
from testbed.policies.allpairs import AllPairs
from testbed.policies.base import Policy
from testbed.policies.distance import DEFAULT_DISTANCE, DISTANCES, ONE_WAY, RTT, Distance, get_distance
from testbed.policies.epulsar import EPulsar
from testbed.policies.initial import DEFAULT_INITIAL_PLACEMENT, INITIAL_PLACEMENTS, asker_clients, unowned_broker
from testbed.policies.overload import (NATS_OUTPUT_RATE_THRESHOLD, RESOURCES, Overload, can_host, host_refusal,
                                       overloaded_brokers, topics_to_shed)
from testbed.policies.pulsar_hash import PulsarHash, hash_broker, hash_slot
from testbed.policies.registry import DEFAULT_POLICY, FAMILIES, POLICIES, get_policy
from testbed.policies.repartition import (CanHost, latency_violated, perform_repartitioning, place_topics,
                                         too_little_gain)
from testbed.policies.control import Algorithm1, ControlOptions, Controller, choose_brokers, controller_for
from testbed.policies.pulsar_lm import LoadManagerConfig, PulsarLoadManager
from testbed.policies.topics import topic_class, topic_name

__all__ = ["latency", "Policy", "EPulsar", "AllPairs", "PulsarHash", "hash_broker", "hash_slot", "Overload",
           "NATS_OUTPUT_RATE_THRESHOLD", "RESOURCES", "overloaded_brokers", "topics_to_shed", "can_host", "host_refusal",
           "CanHost",
           "latency_violated", "place_topics", "perform_repartitioning", "too_little_gain", "choose_brokers", "POLICIES", "FAMILIES",
           "DEFAULT_POLICY", "get_policy", "topic_class", "topic_name", "Distance", "DISTANCES", "DEFAULT_DISTANCE",
           "ONE_WAY", "RTT", "get_distance", "INITIAL_PLACEMENTS", "DEFAULT_INITIAL_PLACEMENT", "asker_clients",
           "unowned_broker", "Algorithm1", "ControlOptions", "Controller", "controller_for", "LoadManagerConfig",
           "PulsarLoadManager"]
