"""Dynamic broker and group configs (cluster/dynamic_configs.py): Kafka's layering, which keys
may change, persistence across restarts, and the topic defaults they change at once."""

from __future__ import annotations

import logging

import pytest

from gregor.cluster.dynamic_configs import FILE, DynamicConfigs
from gregor.config import ConfigError
from gregor.protocol.errors import ErrorCode, KafkaError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT = 2, 3, 4, 5


def dynamic(admin) -> DynamicConfigs:
    d = DynamicConfigs(admin.config, 0, admin.logs, admin.registry)
    d.load()
    return d


def error_of(fn, *args) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        fn(*args)
    return e.value.code


def test_per_broker_wins_over_cluster_default_over_static(storage):
    admin = storage.open({"log.retention.ms": "1000"})
    admin.create_topic("t", 1, {})
    admin.create_topic("own", 1, {"retention.ms": "5"})
    d = dynamic(admin)
    assert d.source_of("log.retention.ms") == STATIC_BROKER and d.source_of("log.segment.bytes") == DEFAULT
    d.alter_broker("", [("log.retention.ms", "2000", SET)], incremental=True, validate_only=False)
    assert admin.config.retention_ms == 2000 and d.source_of("log.retention.ms") == DYNAMIC_DEFAULT_BROKER
    d.alter_broker("0", [("log.retention.ms", "3000", SET)], incremental=True, validate_only=False)
    assert admin.config.retention_ms == 3000 and d.source_of("log.retention.ms") == DYNAMIC_BROKER
    # topics without their own value follow at once; a topic override still wins
    assert admin.logs.get("t", 0).config["retention.ms"] == 3000
    assert admin.logs.get("own", 0).config["retention.ms"] == 5
    d.alter_broker("0", [("log.retention.ms", None, DELETE)], incremental=True, validate_only=False)
    assert admin.config.retention_ms == 2000 and admin.logs.get("t", 0).config["retention.ms"] == 2000


def test_dynamic_values_are_applied_again_after_a_restart(storage):
    admin = storage.open()
    d = dynamic(admin)
    d.alter_broker("0", [("log.segment.bytes", "100000", SET), ("num.io.threads", "16", SET)], incremental=True,
                   validate_only=False)
    d.alter_group("g", [("consumer.session.timeout.ms", "50000", SET)], validate_only=False)
    again = storage.reopen(admin)
    assert again.config["log.segment.bytes"] == 1 << 30  # a fresh config: static values only
    d2 = dynamic(again)
    assert again.config["log.segment.bytes"] == 100000 and d2.dynamic_value("num.io.threads") == "16"
    assert d2.described_inert(None) == [("num.io.threads", "16", DYNAMIC_BROKER)]
    assert d2.group_config("g") == ({**d2.group_defaults(), "consumer.session.timeout.ms": "50000"},
                                    {"consumer.session.timeout.ms": "50000"})


def test_validate_only_and_non_incremental_alter(storage):
    admin = storage.open()
    d = dynamic(admin)
    d.alter_broker("0", [("log.retention.ms", "1", SET)], incremental=False, validate_only=True)
    assert d.per_broker == {} and not (storage.data_dir / FILE).exists()
    d.alter_broker("0", [("log.retention.ms", "1", SET), ("log.cleanup.policy", "compact", APPEND)],
                   incremental=True, validate_only=False)
    assert d.per_broker == {"log.retention.ms": "1", "log.cleanup.policy": "delete,compact"}
    d.alter_broker("0", [("log.roll.ms", "50", SET)], incremental=False, validate_only=False)  # replaces the layer
    assert d.per_broker == {"log.roll.ms": "50"} and admin.config.roll_ms == 50


@pytest.mark.parametrize("resource,key,value,op", [
    ("0", "listeners", "PLAINTEXT://:1", SET),  # read at start-up only
    ("0", "no.such.key", "1", SET),
    ("0", "log.retention.ms", "soon", SET),
    ("0", "log.retention.ms", None, SET),
    ("0", "log.retention.ms", "1", 9),
    ("", "sasl.jaas.config", "x", SET),  # per broker only
    ("7", "log.retention.ms", "1", SET),  # another broker
])
def test_refused_broker_changes_change_nothing(storage, resource, key, value, op):
    admin = storage.open()
    d = dynamic(admin)
    assert error_of(d.alter_broker, resource, [(key, value, op)], True, False) == ErrorCode.invalid_request
    assert d.per_broker == {} and d.cluster_default == {} and not (storage.data_dir / FILE).exists()


def test_group_configs_are_range_checked(storage):
    admin = storage.open()
    d = dynamic(admin)
    assert d.group_config("g") == (d.group_defaults(), {})
    assert d.group_defaults()["consumer.session.timeout.ms"] == 45000
    for entry in [("consumer.session.timeout.ms", "1000", SET), ("consumer.heartbeat.interval.ms", "x", SET),
                  ("share.auto.offset.reset", "middle", SET), ("no.such", "1", SET),
                  ("consumer.session.timeout.ms", "50000", APPEND)]:
        assert error_of(d.alter_group, "g", [entry], False) == ErrorCode.invalid_config
    assert error_of(d.alter_group, "", [("share.auto.offset.reset", "earliest", SET)], False) == \
        ErrorCode.invalid_request
    assert d.groups == {}


def test_an_unreadable_file_refuses_to_start_and_a_stale_key_is_skipped(storage, caplog):
    admin = storage.open()
    (storage.data_dir / FILE).write_text("{not json")
    with pytest.raises(ConfigError, match=FILE):
        dynamic(admin)
    (storage.data_dir / FILE).write_text('{"version": 1, "broker": {"listeners": "PLAINTEXT://:1", '
                                         '"log.retention.ms": "42"}}')
    with caplog.at_level(logging.WARNING):
        d = dynamic(admin)
    assert d.per_broker == {"log.retention.ms": "42"} and admin.config.retention_ms == 42
    assert "ignoring listeners" in caplog.text
