"""Topic administration in ZooKeeper (cluster/zk_admin.py): Kafka's nodes and JSON, Kafka's
errors, manual assignment validation, and rack-aware placement over the registered brokers."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from gregor.cluster.replica_assignment import assign_replicas_to_brokers
from gregor.cluster.zk import admin as zk_admin
from gregor.cluster.zk import znodes
from gregor.protocol.errors import ErrorCode, KafkaError
from tests.cluster.controller.harness import Cluster, run


def code_of(fn, *args) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        fn(*args)
    return e.value.code


@pytest.mark.parametrize(("assignment", "text"), [
    ({0: [1, 1]}, "duplicate brokers in the replicas of partition 0"),
    ({0: [1, 4]}, "partition 0: broker(s) 4 are not registered"),
    ({0: [1, 2], 1: [3]}, "same number of replicas"),
    ({0: [1], 2: [2]}, "consecutive 0-based"),
    ({0: []}, "partition 0 has no replicas"),
    ({}, "no partitions"),
])
def test_manual_assignment_errors(assignment, text):
    with pytest.raises(KafkaError) as e:
        zk_admin.validate_replica_assignment(assignment, {1, 2, 3})
    assert e.value.code == ErrorCode.invalid_replica_assignment and text in str(e.value)


def test_manual_assignment_accepted():
    zk_admin.validate_replica_assignment({0: [1, 2], 1: [2, 3], 2: [3, 1]}, {1, 2, 3})


def test_added_partitions_assignment():
    existing = {0: [1, 2], 1: [2, 1]}
    assert zk_admin.validate_added_partitions([[2, 3], [3, 1]], existing, 4, {1, 2, 3}) == {2: [2, 3], 3: [3, 1]}
    assert code_of(zk_admin.validate_added_partitions, [[2, 3]], existing, 4, {1, 2, 3}) == \
        ErrorCode.invalid_replica_assignment  # two partitions added, one assignment
    assert code_of(zk_admin.validate_added_partitions, [[2, 9]], existing, 3, {1, 2, 3}) == \
        ErrorCode.invalid_replica_assignment
    assert code_of(zk_admin.validate_added_partitions, [[2]], existing, 3, {1, 2, 3}) == \
        ErrorCode.invalid_replica_assignment
    assert code_of(zk_admin.validate_added_partitions, [], existing, 2, {1, 2, 3}) == ErrorCode.invalid_partitions


def test_topic_nodes_are_kafkas_and_errors_too(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            zk = c.admin
            tid = uuid.uuid4()
            await zk_admin.create_topic(zk, "a.b", {0: [1, 2], 1: [2, 1]}, {"cleanup.policy": "compact"}, tid)
            data, _ = await zk.get(znodes.topic_path("a.b"))
            assert json.loads(data) == {"version": 2, "topic_id": znodes.encode_topic_id(tid),
                                        "partitions": {"0": [1, 2], "1": [2, 1]},
                                        "adding_replicas": {}, "removing_replicas": {}}
            data, _ = await zk.get(znodes.topic_config_path("a.b"))
            assert json.loads(data) == {"version": 1, "config": {"cleanup.policy": "compact"}}
            topic = await zk_admin.read_topic(zk, "a.b")
            assert (topic.assignment, topic.topic_id, topic.configs, topic.marked_for_deletion,
                    topic.replication_factor) == ({0: [1, 2], 1: [2, 1]}, tid, {"cleanup.policy": "compact"}, False, 2)
            assert await zk_admin.read_topic(zk, "nope") is None

            async def error(coro) -> ErrorCode:
                with pytest.raises(KafkaError) as e:
                    await coro
                return e.value.code

            assert await error(zk_admin.create_topic(zk, "a.b", {0: [1]}, {}, None)) == ErrorCode.topic_already_exists
            assert await error(zk_admin.create_topic(zk, "a_b", {0: [1]}, {}, None)) == \
                ErrorCode.invalid_topic_exception  # collides with a.b
            assert await error(zk_admin.create_topic(zk, "bad/name", {0: [1]}, {}, None)) == \
                ErrorCode.invalid_topic_exception
            # a pending deletion blocks the name
            await zk_admin.create_topic(zk, "gone", {0: [1]}, {}, None)
            await zk_admin.request_delete(zk, "gone")
            assert (await zk_admin.read_topic(zk, "gone")).marked_for_deletion
            assert await error(zk_admin.create_topic(zk, "gone", {0: [1]}, {}, None)) == ErrorCode.topic_already_exists
            assert await error(zk_admin.request_delete(zk, "nope")) == ErrorCode.unknown_topic_or_partition

            # partitions are added on the condition that nothing changed since read
            await zk_admin.add_partitions(zk, "a.b", {**topic.assignment, 2: [1, 2]}, topic.version)
            assert (await zk_admin.read_topic(zk, "a.b")).assignment[2] == [1, 2]
            assert await error(zk_admin.add_partitions(zk, "a.b", {**topic.assignment, 2: [2, 1], 3: [1, 2]},
                                                       topic.version)) == ErrorCode.invalid_partitions
            fresh = await zk_admin.read_topic(zk, "a.b")
            assert fresh.topic_id == tid
            assert await error(zk_admin.add_partitions(zk, "a.b", {0: [2, 1], 1: [2, 1], 2: [1, 2], 3: [1, 2]},
                                                       fresh.version)) == ErrorCode.invalid_partitions
            assert await error(zk_admin.add_partitions(zk, "nope", {0: [1]}, 0)) == \
                ErrorCode.unknown_topic_or_partition

            # configs are replaced as a whole
            await zk_admin.set_topic_config(zk, "a.b", {"retention.ms": "5"})
            assert (await zk_admin.read_topic(zk, "a.b")).configs == {"retention.ms": "5"}
            assert await error(zk_admin.set_topic_config(zk, "nope", {})) == ErrorCode.unknown_topic_or_partition
    run(scenario())


def test_a_config_left_by_an_older_topic_is_replaced(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.admin.create(znodes.topic_config_path("t"), znodes.encode_topic_config({"x": "1"}), makepath=True)
            await zk_admin.create_topic(c.admin, "t", {0: [1]}, {}, None)
            assert (await zk_admin.read_topic(c.admin, "t")).configs == {}
    run(scenario())


def test_rack_aware_placement_over_the_registered_brokers(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
            for b, rack in racks.items():
                await c.add(b, rack=rack, controller=False)
            brokers = await zk_admin.live_brokers(c.admin)
            assert [(b.broker_id, b.rack) for b in brokers] == sorted(racks.items())
            assignment = assign_replicas_to_brokers(brokers, 12, 3, rng=random.Random(3))
            for replicas in assignment.values():
                assert {racks[b] for b in replicas} == {"a", "b", "c"}
            await c.kill(6)
            assert [b.broker_id for b in await zk_admin.live_brokers(c.admin)] == [1, 2, 3, 4, 5]
    run(scenario())
