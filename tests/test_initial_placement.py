"""Where a topic nobody owns starts (testbed.policies.initial), worked by hand.

Brokers on a line, positions in ms of RTT: bzone1 at 0, bzone2 at 60, cloud at 200 (the default).
A client at 55 is nearest bzone2 (d = 2.5 ms one-way), then bzone1 (27.5 ms), then the cloud (72.5).
"""

import pytest

from testbed.nc.coordinate import Coordinate
from testbed.policies import (DEFAULT_INITIAL_PLACEMENT, INITIAL_PLACEMENTS, ONE_WAY, POLICIES, RTT, asker_clients,
                              hash_broker, latency, unowned_broker)
from testbed.policies.snapshot import BrokerReport, ClientNC, Snapshot, TopicClients

MS = 1e-3
BROKERS = {"bzone1": 0, "bzone2": 60, "cloud": 200}


def c(x_ms: float, dims: int = 2) -> Coordinate:
    return Coordinate((x_ms * MS,) + (0.0,) * (dims - 1), 0.5, 0.0, 0.0)


def snapshot(distance=ONE_WAY, topics=()) -> Snapshot:
    return Snapshot({b: BrokerReport(b, c(x), topics=tuple(t for t in topics if t.broker == b))
                     for b, x in BROKERS.items()}, {t.topic: t.broker for t in topics}, distance=distance)


def asker(x_ms: float, role: str = "producer", dims: int = 2) -> TopicClients:
    return asker_clients(ClientNC("uav1", c(x_ms, dims)), role)


def test_the_default_is_the_first_lookup():
    assert INITIAL_PLACEMENTS == ("first_lookup", "cloud") and DEFAULT_INITIAL_PLACEMENT == "first_lookup"


@pytest.mark.parametrize("policy", ["epulsar", "allpairs"])
@pytest.mark.parametrize("role", ["producer", "consumer"])
@pytest.mark.parametrize("distance", [ONE_WAY, RTT])
def test_first_lookup_places_a_new_topic_next_to_its_first_client(policy, role, distance):
    chosen = unowned_broker("t", snapshot(distance), POLICIES[policy], "cloud", initial="first_lookup",
                            asker=asker(55, role))
    assert chosen == "bzone2"
    assert unowned_broker("t", snapshot(distance), POLICIES[policy], "cloud", initial="first_lookup",
                          asker=asker(10, role)) == "bzone1"


@pytest.mark.parametrize("policy", ["epulsar", "allpairs"])
def test_the_cloud_start_up_and_a_lookup_without_a_coordinate_start_on_the_cloud(policy):
    assert unowned_broker("t", snapshot(), POLICIES[policy], "cloud", initial="cloud", asker=asker(55)) == "cloud"
    assert unowned_broker("t", snapshot(), POLICIES[policy], "cloud", initial="first_lookup") == "cloud"
    # no cloud broker alive: the topic's hash broker rather than nowhere
    assert (unowned_broker("t", snapshot(), POLICIES[policy], "gone", initial="cloud")
            == hash_broker("t", list(BROKERS)))


def test_a_coordinate_of_another_dimension_is_not_used():
    assert unowned_broker("t", snapshot(), POLICIES["epulsar"], "cloud", initial="first_lookup",
                          asker=asker(55, dims=3)) == "cloud"


def test_a_latency_agnostic_policy_hashes_whatever_the_start_up():
    for initial in INITIAL_PLACEMENTS:
        assert (unowned_broker("t", snapshot(), POLICIES["pulsar-hash"], "cloud", initial=initial, asker=asker(55))
                == hash_broker("t", list(BROKERS)))


def test_a_reported_topic_goes_where_its_report_says_not_where_the_asker_is():
    # t's clients (reported by bzone1, say before it died) sit at 0: bzone1 wins over the asker's bzone2
    report = latency.aggregate("t", "bzone1", c(0), [c(0)], [c(0)], distance=ONE_WAY)
    snap = snapshot(topics=(report,))
    for initial in INITIAL_PLACEMENTS:
        assert unowned_broker("t", snap, POLICIES["epulsar"], "cloud", initial=initial, asker=asker(55)) == "bzone1"


def test_the_asker_must_be_a_producer_or_a_consumer_and_the_start_up_known():
    with pytest.raises(ValueError, match="role"):
        asker_clients(ClientNC("x", c(0)), "boss")
    with pytest.raises(ValueError, match="initial placement"):
        unowned_broker("t", snapshot(), POLICIES["epulsar"], "cloud", initial="later")
