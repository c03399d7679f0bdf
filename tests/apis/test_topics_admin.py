"""CreateTopics, DeleteTopics, CreatePartitions (apis/topics_admin.py) in process: each topic is
answered on its own, with Kafka's error codes."""

from __future__ import annotations

import uuid

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


def new_topic(name: str, partitions: int = 1, replication: int = -1, configs: dict[str, str] | None = None,
              assignments: list[list[int]] | None = None) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": replication,
            "assignments": [{"partition_index": i, "broker_ids": b} for i, b in enumerate(assignments or [])],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}


def create(node, *topics: dict, validate_only: bool = False):
    resp = node.call(ApiKey.CREATE_TOPICS, 7, {"topics": list(topics), "timeout": 1000,
                                               "validate_only": validate_only})
    return {t.name: t for t in resp.topics}


def test_create_answers_partitions_configs_and_id(in_process_broker):
    node = in_process_broker
    got = create(node, new_topic("t", 3, configs={"cleanup.policy": "compact", "retention.ms": "1000"}))["t"]
    assert got.error_code == ErrorCode.none and got.num_partitions == 3 and got.replication_factor == 1
    topic = node.services.topics.get("t")
    assert got.topic_id == topic.topic_id and topic.configs == {"cleanup.policy": "compact", "retention.ms": 1000}
    configs = {c.name: (c.value, c.config_source) for c in got.configs}
    assert configs["cleanup.policy"] == ("compact", 1) and configs["retention.ms"] == ("1000", 1)
    assert configs["segment.bytes"] == (str(1 << 30), 5)  # a default
    assert [node.services.logs.get("t", p) is not None for p in range(4)] == [True, True, True, False]


def test_create_errors_per_topic(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("exists", 1, {})
    got = create(node, new_topic("ok"), new_topic("exists"), new_topic("bad name"), new_topic("zero", 0),
                 new_topic("rf3", 1, replication=3), new_topic("conf", configs={"retention.ms": "soon"}),
                 new_topic("unknown-conf", configs={"no.such.config": "1"}),
                 new_topic("other-broker", -1, assignments=[[1]]), new_topic("both", 1, assignments=[[0]]),
                 new_topic("assigned", -1, assignments=[[0], [0]]))
    assert {n: t.error_code for n, t in got.items()} == {
        "ok": ErrorCode.none, "exists": ErrorCode.topic_already_exists, "bad name": ErrorCode.invalid_topic_exception,
        "zero": ErrorCode.invalid_partitions, "rf3": ErrorCode.invalid_replication_factor,
        "conf": ErrorCode.invalid_config, "unknown-conf": ErrorCode.invalid_config,
        "other-broker": ErrorCode.invalid_replica_assignment, "both": ErrorCode.invalid_request,
        "assigned": ErrorCode.none}
    assert all(t.error_message for n, t in got.items() if t.error_code)
    assert node.services.topics.names() == ["assigned", "exists", "ok"]
    assert got["assigned"].num_partitions == 2 and node.services.topics.get("assigned").partitions == 2


def test_a_name_twice_in_one_request_is_invalid(in_process_broker):
    node = in_process_broker
    resp = node.call(ApiKey.CREATE_TOPICS, 7, {"topics": [new_topic("t"), new_topic("t")], "timeout": 1000,
                                               "validate_only": False})
    assert [t.error_code for t in resp.topics] == [ErrorCode.none, ErrorCode.invalid_request]


def test_validate_only_creates_nothing(in_process_broker):
    node = in_process_broker
    got = create(node, new_topic("t", 4), validate_only=True)["t"]
    assert got.error_code == ErrorCode.none and got.num_partitions == 4
    assert node.services.topics.names() == [] and not (node.config.data_dir / "t-0").exists()


def test_partitions_over_the_request_budget_are_a_policy_violation(in_process_broker_factory):
    node = in_process_broker_factory({"topic.creation.max.partitions": "5"})
    got = create(node, new_topic("a", 3), new_topic("b", 3), new_topic("c", 2))
    assert {n: t.error_code for n, t in got.items()} == {
        "a": ErrorCode.none, "b": ErrorCode.policy_violation, "c": ErrorCode.none}


def test_delete_by_name_and_by_id(in_process_broker):
    node = in_process_broker
    a = node.services.topics.create_topic("a", 2, {})
    node.services.topics.create_topic("b", 1, {})
    node.services.topics.create_topic("__consumer_offsets", 1, {}, internal=True)
    unknown = uuid.uuid4()
    resp = node.call(ApiKey.DELETE_TOPICS, 6, {"timeout": 1000, "topics": [
        {"name": None, "topic_id": a.topic_id}, {"name": "b", "topic_id": None},
        {"name": "missing", "topic_id": None}, {"name": None, "topic_id": unknown},
        {"name": "__consumer_offsets", "topic_id": None}]})
    assert [(r.name, r.error_code) for r in resp.responses] == [
        ("a", ErrorCode.none), ("b", ErrorCode.none), ("missing", ErrorCode.unknown_topic_or_partition),
        (None, ErrorCode.unknown_topic_id), ("__consumer_offsets", ErrorCode.topic_authorization_failed)]
    assert resp.responses[0].topic_id == a.topic_id
    assert node.services.topics.names() == ["__consumer_offsets"]
    assert node.services.logs.get("a", 0) is None


def test_delete_disabled(in_process_broker_factory):
    node = in_process_broker_factory({"delete.topic.enable": "false"})
    node.services.topics.create_topic("t", 1, {})
    resp = node.call(ApiKey.DELETE_TOPICS, 5, {"timeout": 1000, "topic_names": ["t"]})
    assert resp.responses[0].error_code == ErrorCode.topic_deletion_disabled
    assert node.services.topics.names() == ["t"]


def test_create_partitions(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 2, {})
    node.services.topics.create_topic("__consumer_offsets", 1, {}, internal=True)

    def grow(name: str, count: int, validate_only: bool = False, assignments=None):
        resp = node.call(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
            {"name": name, "count": count, "assignments": assignments}], "timeout": 1000,
            "validate_only": validate_only})
        return resp.results[0].error_code

    assert grow("t", 4, validate_only=True) == ErrorCode.none and node.services.topics.get("t").partitions == 2
    assert grow("t", 4) == ErrorCode.none and node.services.topics.get("t").partitions == 4
    assert node.services.logs.get("t", 3) is not None
    assert grow("t", 3) == ErrorCode.invalid_partitions
    assert grow("missing", 3) == ErrorCode.unknown_topic_or_partition
    assert grow("__consumer_offsets", 3) == ErrorCode.invalid_request
    assert grow("t", 5, assignments=[{"broker_ids": [2]}]) == ErrorCode.invalid_replica_assignment
    assert node.services.topics.get("t").partitions == 4
