"""Metadata (apis/metadata.py) in process: all topics, named topics, auto-creation, topic ids."""

from __future__ import annotations

import uuid

from gregor.apis.metadata import TOPIC_OPERATIONS
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


def metadata(node, topics: list[dict] | None, allow_auto: bool = True, version: int = 12, **extra):
    return node.call(ApiKey.METADATA, version, {"topics": topics, "allow_auto_topic_creation": allow_auto, **extra})


def test_all_topics_with_this_broker_as_leader_of_every_partition(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("b", 2, {})
    node.services.topics.create_topic("a", 1, {})
    resp = metadata(node, None)
    assert resp.cluster_id == node.services.cluster.cluster_id and resp.controller_id == 0
    assert [(b.node_id, b.rack) for b in resp.brokers] == [(0, None)]
    assert [(t.name, t.error_code, t.is_internal) for t in resp.topics] == [
        ("a", ErrorCode.none, False), ("b", ErrorCode.none, False)]
    b = resp.topics[1]
    assert b.topic_id == node.services.topics.get("b").topic_id
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in b.partitions] == [
        (0, 0, (0,), (0,)), (1, 0, (0,), (0,))]


def test_a_requested_topic_is_auto_created_with_num_partitions(in_process_broker_factory):
    node = in_process_broker_factory({"num.partitions": "3"})
    resp = metadata(node, [{"name": "new", "topic_id": None}])
    (topic,) = resp.topics
    assert topic.error_code == ErrorCode.none and len(topic.partitions) == 3
    assert node.services.topics.get("new").partitions == 3
    assert node.services.logs.get("new", 2) is not None


def test_no_auto_creation_when_the_request_or_the_broker_says_no(in_process_broker_factory):
    on = in_process_broker_factory()
    (topic,) = metadata(on, [{"name": "new", "topic_id": None}], allow_auto=False).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition and on.services.topics.get("new") is None
    off = in_process_broker_factory({"auto.create.topics.enable": "false"})
    (topic,) = metadata(off, [{"name": "new", "topic_id": None}]).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition and off.services.topics.names() == []


def test_an_invalid_name_is_not_created(in_process_broker):
    node = in_process_broker
    (topic,) = metadata(node, [{"name": "no/slash", "topic_id": None}]).topics
    assert topic.error_code == ErrorCode.invalid_topic_exception
    assert node.services.topics.names() == []


def test_topics_by_id(in_process_broker):
    node = in_process_broker
    t = node.services.topics.create_topic("t", 1, {})
    unknown = uuid.uuid4()
    resp = metadata(node, [{"name": None, "topic_id": t.topic_id}, {"name": None, "topic_id": unknown}])
    assert [(x.name, x.topic_id, x.error_code) for x in resp.topics] == [
        ("t", t.topic_id, ErrorCode.none), (None, unknown, ErrorCode.unknown_topic_id)]


def test_authorized_operations_only_when_asked(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    (asked,) = metadata(node, [{"name": "t", "topic_id": None}], include_topic_authorized_operations=True).topics
    (plain,) = metadata(node, [{"name": "t", "topic_id": None}]).topics
    assert asked.topic_authorized_operations == TOPIC_OPERATIONS
    assert plain.topic_authorized_operations == -(2**31)


def test_v0_empty_list_means_every_topic(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    assert [t.name for t in metadata(node, [], version=0).topics] == ["t"]
    assert [t.name for t in metadata(node, [], version=1).topics] == []
