"""Replica placement (cluster/replica_assignment.py) against Kafka's documented examples
(AdminUtils' scaladoc) and the properties Kafka's placement guarantees."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gregor.cluster.replica_assignment import (
    BrokerMetadata,
    assign_new_partitions,
    assign_replicas_to_brokers,
    rack_alternated_brokers,
)
from gregor.protocol.errors import ErrorCode, KafkaError


def brokers(*ids: int, racks: dict[int, str] | None = None) -> list[BrokerMetadata]:
    return [BrokerMetadata(b, (racks or {}).get(b)) for b in ids]


def test_rack_unaware_is_kafkas_table():
    """AdminUtils' table: 5 brokers, 10 partitions, 3 replicas, start index 0."""
    got = assign_replicas_to_brokers(brokers(0, 1, 2, 3, 4), 10, 3, fixed_start_index=0)
    assert got[0] == [0, 1, 2] and got[4] == [4, 0, 1]
    # after one round the followers shift by one more: p5's second replica is broker 2, not 1
    assert got[5] == [0, 2, 3] and got[9] == [4, 1, 2]
    firsts = Counter(r[0] for r in got.values())
    assert all(firsts[b] == 2 for b in range(5))


def test_rack_alternated_list_is_kafkas_example():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_is_kafkas_example():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas_to_brokers(brokers(*racks, racks=racks), 7, 3, fixed_start_index=0)
    assert [got[p] for p in range(6)] == [[0, 3, 1], [3, 1, 5], [1, 5, 4], [5, 4, 2], [4, 2, 0], [2, 0, 3]]
    assert got[6] == [0, 4, 2]  # the second round shifts the followers


@pytest.mark.parametrize("seed", range(20))
def test_rack_aware_spreads_every_partition_over_racks(seed):
    rng = random.Random(seed)
    racks = {b: f"r{b % 3}" for b in range(9)}
    got = assign_replicas_to_brokers(brokers(*racks, racks=racks), 18, 3, rng=rng)
    for replicas in got.values():
        assert len(set(replicas)) == 3
        assert len({racks[b] for b in replicas}) == 3
    # as many replicas as racks, racks of equal size: leaders and replicas even over the brokers
    assert set(Counter(r[0] for r in got.values()).values()) == {2}
    assert set(Counter(b for r in got.values() for b in r).values()) == {6}


def test_rack_aware_with_more_replicas_than_racks_covers_every_rack():
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    got = assign_replicas_to_brokers(brokers(*racks, racks=racks), 8, 3, rng=random.Random(1))
    for replicas in got.values():
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


def test_seeded_assignment_repeats_and_the_start_is_random():
    bs = brokers(1, 2, 3, 4)
    assert assign_replicas_to_brokers(bs, 4, 2, rng=random.Random(7)) == \
        assign_replicas_to_brokers(bs, 4, 2, rng=random.Random(7))
    starts = {assign_replicas_to_brokers(bs, 1, 1, rng=random.Random(s))[0][0] for s in range(40)}
    assert starts == {1, 2, 3, 4}


def test_unsorted_broker_list_is_sorted_by_id():
    assert assign_replicas_to_brokers(brokers(3, 1, 2), 3, 1, fixed_start_index=0) == {0: [1], 1: [2], 2: [3]}


@pytest.mark.parametrize(("n", "rf", "code", "text"), [
    (3, 3, ErrorCode.invalid_replication_factor, "replication factor 3 larger than available brokers: 2"),
    (3, 0, ErrorCode.invalid_replication_factor, "replication factor must be larger than 0"),
    (0, 1, ErrorCode.invalid_partitions, "number of partitions must be larger than 0"),
])
def test_errors_are_kafkas(n, rf, code, text):
    with pytest.raises(KafkaError) as e:
        assign_replicas_to_brokers(brokers(1, 2), n, rf)
    assert e.value.code == code and str(e.value) == text


def test_some_brokers_without_rack_are_refused():
    with pytest.raises(KafkaError, match=r"brokers without broker.rack: \[2\]"):
        assign_replicas_to_brokers(brokers(1, 2, racks={1: "a"}), 1, 1)


def test_added_partitions_continue_from_partition_0s_leader():
    """Kafka's createNewPartitionsAssignment: start where partition 0's leader is, number the
    new partitions after the existing ones, same replication factor."""
    bs = brokers(1, 2, 3)
    existing = assign_replicas_to_brokers(bs, 3, 2, fixed_start_index=1)
    assert existing[0][0] == 2
    added = assign_new_partitions(bs, existing, 5)
    assert sorted(added) == [3, 4] and all(len(r) == 2 and len(set(r)) == 2 for r in added.values())
    assert added == assign_replicas_to_brokers(bs, 2, 2, fixed_start_index=1, start_partition_id=3)
    with pytest.raises(KafkaError) as e:
        assign_new_partitions(bs, existing, 3)
    assert e.value.code == ErrorCode.invalid_partitions
    with pytest.raises(KafkaError) as e:
        assign_new_partitions(brokers(1), existing, 4)
    assert e.value.code == ErrorCode.invalid_replication_factor
