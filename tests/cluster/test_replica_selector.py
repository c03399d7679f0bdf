"""KIP-392 replica selection without a network: which replica a consumer is sent to."""

import pytest

from gregor.config import LEADER_SELECTOR, RACK_AWARE_SELECTOR, BrokerConfig
from gregor.replication.replica_selector import ReplicaView, preferred_read_replica

LEADER = ReplicaView(1, "r1", 100, 0, 0)


def follower(broker_id: int, rack: str | None, leo: int = 100, start: int = 0, since: int = 0) -> ReplicaView:
    return ReplicaView(broker_id, rack, leo, start, since)


def test_no_selector_or_leader_selector_or_no_client_rack_reads_from_the_leader():
    fs = [follower(2, "r2")]
    assert preferred_read_replica(None, "r2", 50, LEADER, fs) is None
    assert preferred_read_replica(LEADER_SELECTOR, "r2", 50, LEADER, fs) is None
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "", 50, LEADER, fs) is None


def test_a_client_in_a_followers_rack_is_sent_to_it():
    fs = [follower(2, "r2"), follower(3, "r3")]
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r3", 50, LEADER, fs) == 3
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r2", 50, LEADER, fs) == 2


def test_the_leader_in_the_clients_rack_wins_and_an_unknown_rack_stays_on_the_leader():
    fs = [follower(2, "r1"), follower(3, "r3")]
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r1", 50, LEADER, fs) is None
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "elsewhere", 50, LEADER, fs) is None


def test_a_replica_that_does_not_hold_the_offset_is_never_chosen():
    fs = [follower(2, "r2", leo=40), follower(3, "r2", leo=100, start=60)]
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r2", 50, LEADER, fs) is None
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r2", 40, LEADER, fs) == 2  # its log end: nothing yet, no error
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r2", 70, LEADER, fs) == 3


def test_the_most_caught_up_replica_in_the_rack_then_the_most_recent_then_the_lowest_id():
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r2", 10, LEADER,
                                  [follower(2, "r2", leo=90), follower(3, "r2", leo=95)]) == 3
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r2", 10, LEADER,
                                  [follower(2, "r2", since=500), follower(3, "r2", since=20)]) == 3
    assert preferred_read_replica(RACK_AWARE_SELECTOR, "r2", 10, LEADER,
                                  [follower(4, "r2"), follower(3, "r2")]) == 3


@pytest.mark.parametrize("value, expected", [
    ("org.apache.kafka.common.replica.RackAwareReplicaSelector", RACK_AWARE_SELECTOR),
    ("RackAwareReplicaSelector", RACK_AWARE_SELECTOR),
    ("LeaderSelector", LEADER_SELECTOR),
])
def test_config_takes_kafkas_class_names(value, expected):
    assert BrokerConfig.from_mapping({"replica.selector.class": value})["replica.selector.class"] == expected


def test_config_refuses_an_unknown_selector_with_the_choices():
    with pytest.raises(Exception, match="RackAwareReplicaSelector"):
        BrokerConfig.from_mapping({"replica.selector.class": "com.example.Mine"})
