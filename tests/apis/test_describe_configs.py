"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs (apis/describe_configs.py) in process:
topic, broker and group resources, with Kafka's config sources."""

from __future__ import annotations

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

TOPIC, BROKER, GROUP = 2, 4, 32
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT, GROUP_CONFIG = 1, 2, 3, 4, 5, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def describe(node, resource_type: int, name: str, keys: list[str] | None = None, synonyms: bool = False):
    resp = node.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": False})
    (result,) = resp.results
    return result


def values(result) -> dict[str, tuple[str | None, int]]:
    return {c.name: (c.value, c.config_source) for c in result.configs}


def alter(node, resource_type: int, name: str, configs: dict[str, str | None], validate_only: bool = False):
    resp = node.call(ApiKey.ALTER_CONFIGS, 2, {"validate_only": validate_only, "resources": [
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}]})
    return resp.responses[0].error_code


def incremental(node, resource_type: int, name: str, ops: list[tuple[str, int, str | None]]):
    resp = node.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}]})
    return resp.responses[0].error_code


def test_topic_configs_say_where_each_value_comes_from(in_process_broker_factory):
    node = in_process_broker_factory({"log.retention.hours": "1"})
    node.services.topics.create_topic("t", 1, {"cleanup.policy": "compact"})
    got = values(describe(node, TOPIC, "t"))
    assert got["cleanup.policy"] == ("compact", DYNAMIC_TOPIC)
    assert got["retention.ms"] == ("3600000", DEFAULT)  # log.retention.ms is not set: its own default
    assert got["segment.bytes"] == (str(1 << 30), DEFAULT)
    assert values(describe(node, TOPIC, "t", ["cleanup.policy"])) == {"cleanup.policy": ("compact", DYNAMIC_TOPIC)}
    synonyms = describe(node, TOPIC, "t", ["cleanup.policy"], synonyms=True).configs[0].synonyms
    assert [(s.name, s.value, s.source) for s in synonyms] == [
        ("cleanup.policy", "compact", DYNAMIC_TOPIC), ("log.cleanup.policy", "delete", DEFAULT)]


def test_unknown_resources(in_process_broker):
    node = in_process_broker
    assert describe(node, TOPIC, "missing").error_code == ErrorCode.unknown_topic_or_partition
    assert describe(node, BROKER, "7").error_code == ErrorCode.invalid_request
    assert describe(node, GROUP, "").error_code == ErrorCode.invalid_request
    assert describe(node, 99, "x").error_code == ErrorCode.invalid_request


def test_broker_configs_static_and_default(in_process_broker_factory):
    node = in_process_broker_factory({"num.partitions": "4"})
    got = describe(node, BROKER, "0", ["num.partitions", "delete.topic.enable"])
    assert values(got) == {"num.partitions": ("4", STATIC_BROKER), "delete.topic.enable": ("true", DEFAULT)}
    assert all(c.read_only for c in got.configs)  # neither can change at run time


def test_alter_topic_configs_replaces_every_override(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {"cleanup.policy": "compact", "retention.ms": "1000"})
    assert alter(node, TOPIC, "t", {"retention.ms": "5000"}, validate_only=True) == ErrorCode.none
    assert node.services.topics.get("t").configs == {"cleanup.policy": "compact", "retention.ms": 1000}
    assert alter(node, TOPIC, "t", {"retention.ms": "5000"}) == ErrorCode.none
    assert node.services.topics.get("t").configs == {"retention.ms": 5000}
    assert node.services.logs.get("t", 0).config["retention.ms"] == 5000
    assert alter(node, TOPIC, "t", {"retention.ms": "never"}) == ErrorCode.invalid_config
    assert alter(node, TOPIC, "missing", {"retention.ms": "1"}) == ErrorCode.unknown_topic_or_partition


def test_incremental_topic_configs(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {"retention.ms": "1000"})
    assert incremental(node, TOPIC, "t", [("cleanup.policy", APPEND, "compact")]) == ErrorCode.none
    assert node.services.topics.get("t").configs == {"retention.ms": 1000, "cleanup.policy": "delete,compact"}
    assert incremental(node, TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete"),
                                          ("retention.ms", DELETE, None)]) == ErrorCode.none
    assert node.services.topics.get("t").configs == {"cleanup.policy": "compact"}
    assert incremental(node, TOPIC, "t", [("retention.ms", APPEND, "5")]) == ErrorCode.invalid_config
    assert incremental(node, TOPIC, "t", [("retention.ms", 9, "5")]) == ErrorCode.invalid_request


def test_dynamic_broker_configs_per_broker_and_cluster_default(in_process_broker):
    node = in_process_broker
    assert incremental(node, BROKER, "", [("log.retention.ms", SET, "7000")]) == ErrorCode.none
    assert values(describe(node, BROKER, "0", ["log.retention.ms"])) == {
        "log.retention.ms": ("7000", DYNAMIC_DEFAULT_BROKER)}
    assert values(describe(node, BROKER, "")) == {"log.retention.ms": ("7000", DYNAMIC_DEFAULT_BROKER)}
    assert incremental(node, BROKER, "0", [("log.retention.ms", SET, "9000")]) == ErrorCode.none
    assert values(describe(node, BROKER, "0", ["log.retention.ms"])) == {"log.retention.ms": ("9000", DYNAMIC_BROKER)}
    node.services.topics.create_topic("t", 1, {})
    assert values(describe(node, TOPIC, "t", ["retention.ms"])) == {"retention.ms": ("9000", DYNAMIC_BROKER)}
    # a key read only at start-up cannot change
    assert incremental(node, BROKER, "0", [("listeners", SET, "PLAINTEXT://:1")]) == ErrorCode.invalid_request
    assert incremental(node, BROKER, "0", [("log.retention.ms", SET, "soon")]) == ErrorCode.invalid_request


def test_group_configs(in_process_broker):
    node = in_process_broker
    assert values(describe(node, GROUP, "g", ["consumer.session.timeout.ms"])) == {
        "consumer.session.timeout.ms": ("45000", DEFAULT)}
    assert incremental(node, GROUP, "g", [("consumer.session.timeout.ms", SET, "50000")]) == ErrorCode.none
    assert values(describe(node, GROUP, "g", ["consumer.session.timeout.ms"])) == {
        "consumer.session.timeout.ms": ("50000", GROUP_CONFIG)}
    assert incremental(node, GROUP, "g", [("consumer.session.timeout.ms", SET, "1")]) == ErrorCode.invalid_config
    assert incremental(node, GROUP, "g", [("no.such", SET, "1")]) == ErrorCode.invalid_config
    # AlterConfigs replaces every override of the group
    assert alter(node, GROUP, "g", {"share.auto.offset.reset": "earliest"}) == ErrorCode.none
    assert node.services.dynamic_configs.group_config("g")[1] == {"share.auto.offset.reset": "earliest"}
