"""Topic operations (cluster/topic_admin.py) over real storage: create, validate, delete, add
partitions, alter configs; internal topics protected; every change survives a restart."""

from __future__ import annotations

import asyncio

import pytest

from gregor.cluster.topic_admin import MAX_PARTITIONS
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import build_batch

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def error_of(fn, *args, **kwargs) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        fn(*args, **kwargs)
    return e.value.code


def test_create_makes_files_and_registry_entry_that_survive_a_restart(storage):
    admin = storage.open({"num.partitions": "3"})
    topic = admin.create_topic("t", -1, {"retention.ms": "1000", "compression.type": "lz4"})
    assert topic.partitions == 3 and not topic.internal
    assert topic.configs == {"retention.ms": 1000, "compression.type": "lz4"}  # parsed; passthrough kept
    assert all((storage.data_dir / f"t-{p}" / "partition.metadata").exists() for p in range(3))
    assert admin.logs.get("t", 2).config["retention.ms"] == 1000
    again = storage.reopen(admin)
    assert again.get("t").topic_id == topic.topic_id and again.get("t").configs == topic.configs
    assert again.get_by_id(topic.topic_id).name == "t" and again.names() == ["t"]
    assert [t.name for t in again.all()] == ["t"] and again.logs.get("t", 2) is not None


def test_internal_topics(storage):
    admin = storage.open()
    offsets = admin.create_topic("__consumer_offsets", 2, {}, internal=True)
    assert offsets.internal
    assert error_of(admin.delete_topic, "__consumer_offsets") == ErrorCode.topic_authorization_failed
    assert error_of(admin.add_partitions, "__consumer_offsets", 5) == ErrorCode.invalid_request
    assert admin.get("__consumer_offsets").partitions == 2
    assert storage.reopen(admin).get("__consumer_offsets").internal


@pytest.mark.parametrize("name,partitions,configs,code", [
    ("", 1, {}, ErrorCode.invalid_topic_exception),
    ("..", 1, {}, ErrorCode.invalid_topic_exception),
    ("a" * 250, 1, {}, ErrorCode.invalid_topic_exception),
    ("sp ace", 1, {}, ErrorCode.invalid_topic_exception),
    ("t", 0, {}, ErrorCode.invalid_partitions),
    ("t", MAX_PARTITIONS + 1, {}, ErrorCode.invalid_partitions),
    ("t", 1, {"retention.ms": "-2"}, ErrorCode.invalid_config),
    ("t", 1, {"cleanup.policy": "shred"}, ErrorCode.invalid_config),
    ("t", 1, {"no.such.config": "1"}, ErrorCode.invalid_config),
])
def test_invalid_topics_are_refused_before_any_file_is_made(storage, name, partitions, configs, code):
    admin = storage.open()
    assert error_of(admin.create_topic, name, partitions, configs) == code
    assert admin.names() == [] and [p.name for p in storage.data_dir.iterdir() if not p.name.startswith(".")] == []


def test_duplicates_and_validate_only(storage):
    admin = storage.open()
    assert admin.create_topic("t", 2, {}, validate_only=True) is None
    assert admin.names() == [] and not (storage.data_dir / "t-0").exists()
    admin.create_topic("t", 1, {})
    assert error_of(admin.create_topic, "t", 1, {}) == ErrorCode.topic_already_exists

    async def create_twice_at_once():
        return await asyncio.gather(admin.create_topic_async("u", 4, {}), admin.create_topic_async("u", 4, {}),
                                    return_exceptions=True)

    first, second = asyncio.run(create_twice_at_once())
    assert first.partitions == 4 and isinstance(second, KafkaError)
    assert second.code == ErrorCode.topic_already_exists
    assert admin.names() == ["t", "u"]


def test_delete_then_recreate_starts_empty(storage):
    admin = storage.open()
    deleted: list[str] = []
    admin.on_deleted.append(deleted.append)
    old = admin.create_topic("t", 2, {})
    admin.logs.get("t", 0).append(build_batch([(None, b"v")] * 5))
    assert admin.delete_topic("t").topic_id == old.topic_id
    assert deleted == ["t"] and admin.names() == [] and admin.logs.get("t", 0) is None
    assert not any(storage.data_dir.glob("t-*"))
    assert error_of(admin.delete_topic, "t") == ErrorCode.unknown_topic_or_partition
    new = admin.create_topic("t", 1, {})
    assert new.topic_id != old.topic_id and admin.logs.get("t", 0).log_end_offset == 0
    again = storage.reopen(admin)
    assert again.get("t").topic_id == new.topic_id and again.logs.get("t", 0).log_end_offset == 0


def test_delete_async_and_disabled(storage):
    admin = storage.open()
    admin.create_topic("t", 3, {})
    assert asyncio.run(admin.delete_topic_async("t")).name == "t"
    assert admin.names() == [] and not any(storage.data_dir.glob("t-*"))
    disabled = storage.reopen(admin, {"delete.topic.enable": "false"})
    disabled.create_topic("u", 1, {})
    assert error_of(disabled.delete_topic, "u") == ErrorCode.topic_deletion_disabled
    assert disabled.names() == ["u"]


def test_add_partitions(storage):
    admin = storage.open()
    admin.create_topic("t", 2, {"retention.ms": "5000"})
    admin.add_partitions("t", 3, validate_only=True)
    assert admin.get("t").partitions == 2 and admin.logs.get("t", 2) is None
    admin.add_partitions("t", 3)
    assert admin.get("t").partitions == 3 and admin.logs.get("t", 2).config["retention.ms"] == 5000
    asyncio.run(admin.add_partitions_async("t", 5))
    assert admin.get("t").partitions == 5 and admin.logs.get("t", 4) is not None
    assert error_of(admin.add_partitions, "t", 5) == ErrorCode.invalid_partitions
    assert error_of(admin.add_partitions, "t", MAX_PARTITIONS + 1) == ErrorCode.invalid_partitions
    assert error_of(admin.add_partitions, "missing", 2) == ErrorCode.unknown_topic_or_partition
    assert storage.reopen(admin).get("t").partitions == 5


def test_alter_configs_replace_or_apply_operations(storage):
    admin = storage.open()
    admin.create_topic("t", 1, {"retention.ms": "1000", "segment.bytes": "100000"})
    admin.alter_topic_configs("t", {"retention.ms": "2000"}, None, validate_only=False)  # AlterConfigs
    assert admin.get("t").configs == {"retention.ms": 2000}
    assert admin.logs.get("t", 0).config["segment.bytes"] == 1 << 30  # back to the default
    admin.alter_topic_configs("t", {"cleanup.policy": "compact", "retention.ms": None},
                              {"cleanup.policy": APPEND, "retention.ms": DELETE}, validate_only=False)
    assert admin.get("t").configs == {"cleanup.policy": "delete,compact"}  # APPEND starts from the default
    admin.alter_topic_configs("t", {"cleanup.policy": "delete"}, {"cleanup.policy": SUBTRACT}, validate_only=False)
    assert admin.get("t").configs == {"cleanup.policy": "compact"}
    assert admin.logs.get("t", 0).config["cleanup.policy"] == "compact"
    admin.alter_topic_configs("t", {"max.message.bytes": "10"}, {"max.message.bytes": SET}, validate_only=True)
    assert admin.get("t").configs == {"cleanup.policy": "compact"}
    assert error_of(admin.alter_topic_configs, "t", {"retention.ms": "1"}, {"retention.ms": APPEND},
                    validate_only=False) == ErrorCode.invalid_config
    assert error_of(admin.alter_topic_configs, "t", {"retention.ms": "x"}, None,
                    validate_only=False) == ErrorCode.invalid_config
    assert error_of(admin.alter_topic_configs, "t", {"retention.ms": "1"}, {"retention.ms": 7},
                    validate_only=False) == ErrorCode.invalid_request
    assert error_of(admin.alter_topic_configs, "missing", {}, None,
                    validate_only=False) == ErrorCode.unknown_topic_or_partition
    assert storage.reopen(admin).get("t").configs == {"cleanup.policy": "compact"}
