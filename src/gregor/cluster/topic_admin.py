"""Topic operations (create, delete, add partitions, alter configs) beside the topic registry
they change: the admin APIs, auto-creation and the internal topics all create topics here.

Files first, then the registry: a crash in between leaves directories of no registered topic,
removed at the next start. Deletion renames the partition directories to ``-delete`` ones first
(see LogManager.mark_deleted), so it needs no free space and is crash-safe.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gregor.cluster.dynamic_configs import apply_list_op
from gregor.config import BrokerConfig, ConfigError, parse_topic_config
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import PartitionLog
from gregor.log.storage_errors import StorageError, describe
from gregor.log.topic_registry import Topic, TopicRegistry, validate_topic_name
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

MAX_PARTITIONS = 100_000


class TopicAdmin:
    """Topics on one node: every partition's only replica is this broker. ``on_created``
    listeners hear of each topic created or grown here (``(topic, new partition numbers)``: the
    single node's replica manager leads them), ``on_deleted`` of each deleted topic (the
    coordinator removes its offsets)."""

    def __init__(self, config: BrokerConfig, registry: TopicRegistry, logs: LogManager) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.registry = registry
        self.logs = logs
        self.on_created: list[Callable[[Topic, range], None]] = []
        self.on_deleted: list[Callable[[str], None]] = []
        self._creating: set[str] = set()  # topics whose files a worker thread is making
        self._deleting: set[str] = set()  # topics whose files are being deleted

    # -- the registry, read ------------------------------------------------------------------
    def get(self, name: str) -> Topic | None:
        return self.registry.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self.registry.by_id.get(topic_id)

    def all(self) -> list[Topic]:
        """Every topic, by name."""
        return sorted(self.registry.by_name.values(), key=lambda t: t.name)

    def names(self) -> list[str]:
        return sorted(self.registry.by_name)

    # -- operations --------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: dict[str, str | None],
                     validate_only: bool = False, internal: bool = False) -> Topic | None:
        """Create a topic at once (auto-creation, internal topics: few partitions). CreateTopics
        uses ``create_topic_async``. Files first, then the registry: a crash in between leaves
        directories of no registered topic, removed at the next start."""
        partitions, parsed = self._check_new_topic(name, partitions, configs)
        if validate_only:
            return None
        topic = self.registry.new_topic(name, partitions, parsed, internal=internal)
        self._commit_topic(topic, self.logs.build_logs(topic))
        return topic

    async def create_topic_async(self, name: str, partitions: int, configs: dict[str, str | None],
                                 validate_only: bool = False, replication_factor: int = -1,
                                 assignments: dict[int, list[int]] | None = None,
                                 timeout_s: float = 30.0) -> Topic | None:
        """CreateTopics: the partitions' files are made in a worker thread, so that the event loop
        keeps serving other requests; answered once they exist and the registry is saved. (The
        replication factor and assignments can only name this broker here; ``ZkTopicAdmin`` uses
        them.)"""
        self._check_one_broker(replication_factor, list((assignments or {}).values()))
        partitions, parsed = self._check_new_topic(name, partitions, configs)
        if validate_only:
            return None
        topic = self.registry.new_topic(name, partitions, parsed)
        self._creating.add(name)
        try:
            logs = await asyncio.to_thread(self.logs.build_logs, topic)
        finally:
            self._creating.discard(name)
        self._commit_topic(topic, logs)
        return topic

    def _check_one_broker(self, replication_factor: int, assignments: list[list[int]]) -> None:
        if any(list(a) != [self.node_id] for a in assignments):
            raise KafkaError(ErrorCode.invalid_replica_assignment, f"this cluster has one broker ({self.node_id})")
        if replication_factor not in (-1, 1):
            raise KafkaError(ErrorCode.invalid_replication_factor,
                             f"replication factor {replication_factor} is larger than the 1 available broker")

    def replication_factor_of(self, replication_factor: int, assignments: dict[int, list[int]] | None) -> int:
        """The replication factor a CreateTopics answer reports."""
        return 1

    def _check_new_topic(self, name: str, partitions: int,
                         configs: dict[str, str | None]) -> tuple[int, dict[str, Any]]:
        validate_topic_name(name)
        if self.registry.get(name) is not None or name in self._creating:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic '{name}' already exists")
        if name in self._deleting:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic '{name}' is marked for deletion")
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise KafkaError(ErrorCode.invalid_partitions, f"number of partitions must be 1..{MAX_PARTITIONS}")
        return partitions, self.parse_topic_configs(configs)

    def _commit_topic(self, topic: Topic, logs: list[PartitionLog]) -> None:
        try:
            self.registry.add_topic(topic)
        except OSError as e:
            self.logs.discard(logs)
            raise StorageError(f"cannot save the topic registry: {describe(e)}") from None
        self.logs.register(logs)
        log.info("created topic %s with %d partitions, configs %s", topic.name, topic.partitions, topic.configs)
        self._tell_created(topic, range(topic.partitions))

    def _tell_created(self, topic: Topic, partitions: range) -> None:
        for listener in self.on_created:
            try:
                listener(topic, partitions)
            except Exception:
                log.exception("topic %s: a creation listener failed", topic.name)

    @staticmethod
    def parse_topic_configs(configs: dict[str, str | None]) -> dict[str, Any]:
        parsed: dict[str, Any] = {}
        for k, v in configs.items():
            if v is None:
                continue
            try:
                parsed[k] = parse_topic_config(k, v)
            except ConfigError as e:
                raise KafkaError(ErrorCode.invalid_config, str(e)) from None
        return parsed

    def delete_topic(self, name: str) -> Topic:
        """Delete a topic, all steps at once (DeleteTopics uses ``delete_topic_async``)."""
        topic, dirs = self._begin_delete(name)
        try:
            self.logs.purge_sync(topic, dirs)
        finally:
            self._deleting.discard(name)
        return topic

    async def delete_topic_async(self, name: str) -> Topic:
        """DeleteTopics: forget the topic, then rename its partition directories to ``-delete``
        ones and delete their files in a worker thread (the space is free when this returns), then
        save the registry. Needs no free space; see LogManager.mark_deleted for crash safety."""
        topic, dirs = self._begin_delete(name)
        try:
            await self.logs.purge(topic, dirs)
        finally:
            self._deleting.discard(name)
        return topic

    def _begin_delete(self, name: str) -> tuple[Topic, list[Path]]:
        if not self.config["delete.topic.enable"]:
            raise KafkaError(ErrorCode.topic_deletion_disabled, "delete.topic.enable is false")
        topic = self.registry.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
        if topic.internal:
            raise KafkaError(ErrorCode.topic_authorization_failed, f"internal topic '{name}' cannot be deleted")
        self._deleting.add(name)
        dirs = self.forget_topic(topic)
        log.info("deleted topic %s", name)
        return topic, dirs

    def forget_topic(self, topic: Topic) -> list[Path]:
        """Out of the registry, its logs closed and their directories marked for deletion, the
        listeners told; returns the directories to purge."""
        self.registry.forget(topic.name)
        dirs = self.logs.delete_logs(topic)
        for listener in self.on_deleted:
            try:
                listener(topic.name)
            except Exception:  # the topic is gone whatever a listener makes of it
                log.exception("topic %s: a deletion listener failed", topic.name)
        return dirs

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self.registry.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
        if topic.internal:
            raise KafkaError(ErrorCode.invalid_request, f"partitions of internal topic '{name}' are fixed")
        if count <= topic.partitions:
            raise KafkaError(ErrorCode.invalid_partitions,
                             f"topic '{name}' has {topic.partitions} partitions; the new count must be larger")
        if count > MAX_PARTITIONS:
            raise KafkaError(ErrorCode.invalid_partitions, f"number of partitions must be at most {MAX_PARTITIONS}")
        if validate_only:
            return
        self._commit_partitions(topic, count, self.logs.build_logs(dataclasses.replace(topic, partitions=count),
                                                                   topic.partitions))

    async def add_partitions_async(self, name: str, count: int, validate_only: bool = False,
                                   assignments: list[list[int]] | None = None) -> None:
        """CreatePartitions: as ``add_partitions``, the new files made in a worker thread. (Manual
        ``assignments`` can only name this broker here; ``ZkTopicAdmin`` uses them.)"""
        self._check_one_broker(-1, assignments or [])
        self.add_partitions(name, count, validate_only=True)
        if validate_only:
            return
        topic = self.registry.get(name)
        assert topic is not None
        old = topic.partitions
        if name in self._creating:
            raise KafkaError(ErrorCode.invalid_request, f"partitions of '{name}' are being created")
        self._creating.add(name)
        try:
            logs = await asyncio.to_thread(self.logs.build_logs, dataclasses.replace(topic, partitions=count), old)
        finally:
            self._creating.discard(name)
        if self.registry.get(name) is not topic or topic.partitions != old:  # deleted meanwhile
            self.logs.discard(logs)
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' changed during the request")
        self._commit_partitions(topic, count, logs)

    def _commit_partitions(self, topic: Topic, count: int, logs: list[PartitionLog]) -> None:
        old = topic.partitions
        topic.partitions = count
        try:
            self.registry.save()
        except OSError as e:
            topic.partitions = old
            self.logs.discard(logs)
            raise StorageError(f"cannot save the topic registry: {describe(e)}") from None
        self.logs.register(logs)
        log.info("topic %s now has %d partitions (was %d)", topic.name, count, old)
        self._tell_created(topic, range(old, count))

    def alter_topic_configs(self, name: str, configs: dict[str, Any], incremental_ops: dict[str, int] | None,
                            validate_only: bool) -> None:
        topic = self.registry.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
        new = apply_config_ops(dict(topic.configs) if incremental_ops is not None else {}, configs,
                               incremental_ops, self.parse_topic_configs)
        if validate_only:
            return
        self.set_topic_configs(topic, new)

    async def alter_topic_configs_async(self, name: str, configs: dict[str, Any],
                                        incremental_ops: dict[str, int] | None, validate_only: bool) -> None:
        """AlterConfigs / IncrementalAlterConfigs on a topic (a cluster writes ZooKeeper)."""
        self.alter_topic_configs(name, configs, incremental_ops, validate_only)

    def set_topic_configs(self, topic: Topic, parsed: dict[str, Any]) -> None:
        """Make ``parsed`` the topic's overrides here: registry, saved, and the logs reconfigured."""
        topic.configs = parsed
        self.registry.save()
        self.logs.reconfigure(topic)


def apply_config_ops(new: dict[str, Any], configs: dict[str, Any], incremental_ops: dict[str, int] | None,
                     convert: Callable[[dict[str, str | None]], dict[str, Any]]) -> dict[str, Any]:
    """Apply AlterConfigs (every op a SET) or IncrementalAlterConfigs' SET, DELETE, APPEND and
    SUBTRACT to the overrides ``new`` (changed and returned); ``convert`` turns a set value into
    the stored form (parsing and validating it)."""
    for k, v in configs.items():
        op = incremental_ops.get(k, 0) if incremental_ops is not None else 0
        if op == 1:  # DELETE
            new.pop(k, None)
        elif op == 0:  # SET
            new.update(convert({k: v}))
        elif op in (2, 3):  # APPEND, SUBTRACT (KIP-339): list configs only
            new.update(convert({k: apply_list_op(k, op, v, new.get(k), TOPIC_LIST_DEFAULTS)}))
        else:
            raise KafkaError(ErrorCode.invalid_request, f"unknown config operation {op} on {k}")
    return new


# Topic configs of type LIST, with Kafka's defaults (the starting point of an APPEND when the topic
# has no override)
TOPIC_LIST_DEFAULTS = {"cleanup.policy": "delete", "follower.replication.throttled.replicas": "",
                       "leader.replication.throttled.replicas": ""}
