"""The broker: wires configuration, topic registry, logs and listener together, and holds the
topic operations the admin APIs share (create, delete, add partitions, alter configs)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from pathlib import Path
from typing import Any

from gregor.cluster.producer_ids import ProducerIdManager
from gregor.cluster.topics import Topic, TopicRegistry, validate_topic_name
from gregor.config import BrokerConfig, ConfigError, parse_topic_config
from gregor.dynamic_configs import DynamicConfigs, apply_list_op
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import PartitionLog
from gregor.log.storage_errors import FD_CACHE, StorageError, describe
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.server.dispatcher import load_all_apis

log = logging.getLogger(__name__)

MAX_PARTITIONS = 100_000


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.data_dir: Path = config.data_dir
        self.topics = TopicRegistry(self.data_dir)
        self._creating: set[str] = set()  # topics whose files a worker thread is making
        self._deleting: set[str] = set()  # topics whose files are being deleted
        FD_CACHE.capacity = config["log.segment.open.files.max"]
        self.logs = LogManager(self.data_dir, config.topic_defaults(), self.topics)
        self.producer_ids = ProducerIdManager(self.data_dir)
        self.dynamic_configs = DynamicConfigs(self)  # configs altered at run time (admin APIs)
        self.cluster_id = ""
        self.connections: set[Any] = set()
        from gregor.server.limits import ConnectionLimits

        self.limits = ConnectionLimits(config)
        self.server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        from gregor.coordinator.group.service import GroupCoordinatorService

        self.coordinator = GroupCoordinatorService(config, self.topics, self.logs, self.create_topic)
        from gregor.metrics.registry import BrokerMetrics

        self.metrics = BrokerMetrics(self)
        # off (no endpoint and no telemetry): nothing is counted on the hot paths
        self.metrics_enabled = bool(config["metrics.listener"]) or config["telemetry.interval.ms"] > 0
        from gregor.metrics.telemetry import TelemetryWriter

        self.telemetry = TelemetryWriter(self)
        self.metrics_server: asyncio.Server | None = None
        load_all_apis()

    # -- lifecycle ---------------------------------------------------------------------------
    def open_storage(self) -> None:
        self.dynamic_configs.load()  # before the logs: dynamic broker configs are topic defaults
        self.logs.startup()
        self.producer_ids.load()
        self.cluster_id = self._load_cluster_id()

    def _load_cluster_id(self) -> str:
        meta = self.data_dir / "meta.properties"
        values: dict[str, str] = {}
        if meta.exists():
            for line in meta.read_text().splitlines():
                if "=" in line and not line.startswith("#"):
                    k, v = line.split("=", 1)
                    values[k.strip()] = v.strip()
        configured = self.config["cluster.id"]
        stored = values.get("cluster.id")
        if stored and configured and stored != configured:
            raise ConfigError(f"cluster.id={configured} does not match {stored} stored in {meta}")
        if stored and values.get("node.id") and int(values["node.id"]) != self.node_id:
            raise ConfigError(f"node.id={self.node_id} does not match node.id={values['node.id']} in {meta}")
        cid = stored or configured or _random_cluster_id()
        if not stored:
            meta.write_text(f"version=1\ncluster.id={cid}\nnode.id={self.node_id}\n")
        return cid

    async def start(self) -> None:
        from gregor.server.connection import KafkaConnection

        self.open_storage()
        await self.coordinator.start()
        if self.config["telemetry.interval.ms"] > 0:
            self.telemetry.ensure_topic()
        host, port = self.config.listener()
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: KafkaConnection(self), host, port, reuse_address=True,
                                               backlog=1024)
        self._tasks.append(loop.create_task(self._housekeeping()))
        if self.limits.max_idle_s is not None:
            self._tasks.append(loop.create_task(self._close_idle_connections(self.limits.max_idle_s)))
        if self.config["metrics.listener"]:
            from gregor.metrics.http import parse_listener, serve_metrics

            mhost, mport = parse_listener(self.config["metrics.listener"])
            self.metrics_server = await serve_metrics(self.metrics.registry, mhost, mport)
        log.info("Gregor broker %d (cluster %s) listening on %s:%d, data in %s", self.node_id,
                 self.cluster_id, host, self.bound_port, self.data_dir)

    @property
    def bound_port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded), flush, close the logs."""
        if self.server is not None:
            self.server.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        deadline = asyncio.get_running_loop().time() + 5.0
        while any(not c.idle for c in self.connections) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for c in list(self.connections):
            c.close()
        await self.coordinator.stop()
        self.logs.shutdown()
        log.info("broker %d stopped cleanly", self.node_id)

    async def _close_idle_connections(self, max_idle: float) -> None:
        """connections.max.idle.ms: checked every tenth of the limit (at most every second)."""
        from gregor.server.connection import close_idle

        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(max_idle / 10, 0.01), 1.0))
            close_idle(self.connections, loop.time(), max_idle)

    async def _housekeeping(self) -> None:
        """Time-based flushes, checkpoints and retention, on Kafka's schedules."""
        loop = asyncio.get_running_loop()
        retention_every = self.config["log.retention.check.interval.ms"] / 1000
        next_retention = loop.time() + retention_every
        next_checkpoint = loop.time() + 60
        cleaner_every = self.config["log.cleaner.backoff.ms"] / 1000
        next_clean = loop.time() + cleaner_every
        next_sample = loop.time()
        telemetry_every = self.config["telemetry.interval.ms"] / 1000
        next_telemetry = loop.time() + telemetry_every
        while True:
            await asyncio.sleep(0.1)
            self.logs.flush_due()
            now = loop.time()
            if self.metrics_enabled and now >= next_sample:
                next_sample = now + 1.0
                self.metrics.sample_offsets()
            if telemetry_every > 0 and now >= next_telemetry:
                next_telemetry = now + telemetry_every
                try:
                    self.telemetry.write()
                except Exception:  # noqa: BLE001 - telemetry must never stop the broker
                    log.exception("writing consumption telemetry failed")
            if now >= next_retention:
                next_retention = now + retention_every
                self.logs.enforce_retention()
            if now >= next_clean and self.config["log.cleaner.enable"]:
                next_clean = now + self.config["log.cleaner.backoff.ms"] / 1000  # dynamic config
                await self.logs.clean_due()
            if now >= next_checkpoint:
                next_checkpoint = now + 60
                self.logs.write_checkpoints()

    # -- topic operations --------------------------------------------------------------------
    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get(topic, partition)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str | None],
                     validate_only: bool = False, internal: bool = False) -> Topic | None:
        """Create a topic at once (auto-creation, internal topics: few partitions). CreateTopics
        uses ``create_topic_async``. Files first, then the registry: a crash in between leaves
        directories of no registered topic, removed at the next start."""
        partitions, parsed = self._check_new_topic(name, partitions, configs)
        if validate_only:
            return None
        topic = self.topics.new_topic(name, partitions, parsed, internal=internal)
        self._commit_topic(topic, self.logs.build_logs(topic))
        return topic

    async def create_topic_async(self, name: str, partitions: int, configs: dict[str, str | None],
                                 validate_only: bool = False) -> Topic | None:
        """CreateTopics: the partitions' files are made in a worker thread, so that the event loop
        keeps serving other requests; answered once they exist and the registry is saved."""
        partitions, parsed = self._check_new_topic(name, partitions, configs)
        if validate_only:
            return None
        topic = self.topics.new_topic(name, partitions, parsed)
        self._creating.add(name)
        try:
            logs = await asyncio.to_thread(self.logs.build_logs, topic)
        finally:
            self._creating.discard(name)
        self._commit_topic(topic, logs)
        return topic

    def _check_new_topic(self, name: str, partitions: int,
                         configs: dict[str, str | None]) -> tuple[int, dict[str, Any]]:
        validate_topic_name(name)
        if self.topics.get(name) is not None or name in self._creating:
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
            self.topics.add_topic(topic)
        except OSError as e:
            self.logs.discard(logs)
            raise StorageError(f"cannot save the topic registry: {describe(e)}") from None
        self.logs.register(logs)
        log.info("created topic %s with %d partitions, configs %s", topic.name, topic.partitions, topic.configs)

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
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
        if topic.internal:
            raise KafkaError(ErrorCode.topic_authorization_failed, f"internal topic '{name}' cannot be deleted")
        self.topics.forget(name)
        self._deleting.add(name)
        dirs = self.logs.delete_logs(topic)
        self.coordinator.on_topic_deleted(name)
        log.info("deleted topic %s", name)
        return topic, dirs

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
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

    async def add_partitions_async(self, name: str, count: int, validate_only: bool = False) -> None:
        """CreatePartitions: as ``add_partitions``, the new files made in a worker thread."""
        self.add_partitions(name, count, validate_only=True)
        if validate_only:
            return
        topic = self.topics.get(name)
        assert topic is not None
        old = topic.partitions
        if name in self._creating:
            raise KafkaError(ErrorCode.invalid_request, f"partitions of '{name}' are being created")
        self._creating.add(name)
        try:
            logs = await asyncio.to_thread(self.logs.build_logs, dataclasses.replace(topic, partitions=count), old)
        finally:
            self._creating.discard(name)
        if self.topics.get(name) is not topic or topic.partitions != old:  # deleted meanwhile
            self.logs.discard(logs)
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' changed during the request")
        self._commit_partitions(topic, count, logs)

    def _commit_partitions(self, topic: Topic, count: int, logs: list[PartitionLog]) -> None:
        old = topic.partitions
        topic.partitions = count
        try:
            self.topics.save()
        except OSError as e:
            topic.partitions = old
            self.logs.discard(logs)
            raise StorageError(f"cannot save the topic registry: {describe(e)}") from None
        self.logs.register(logs)
        log.info("topic %s now has %d partitions (was %d)", topic.name, count, old)

    def alter_topic_configs(self, name: str, configs: dict[str, Any], incremental_ops: dict[str, int] | None,
                            validate_only: bool) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
        new = dict(topic.configs) if incremental_ops is not None else {}
        for k, v in configs.items():
            op = incremental_ops.get(k, 0) if incremental_ops is not None else 0
            if op == 1:  # DELETE
                new.pop(k, None)
            elif op == 0:  # SET
                new.update(self.parse_topic_configs({k: v}))
            elif op in (2, 3):  # APPEND, SUBTRACT (KIP-339): list configs only
                new.update(self.parse_topic_configs({k: apply_list_op(k, op, v, new.get(k), TOPIC_LIST_DEFAULTS)}))
            else:
                raise KafkaError(ErrorCode.invalid_request, f"unknown config operation {op} on {k}")
        if validate_only:
            return
        topic.configs = new
        self.topics.save()
        self.logs.reconfigure(topic)


# Topic configs of type LIST, with Kafka's defaults (the starting point of an APPEND when the topic
# has no override)
TOPIC_LIST_DEFAULTS = {"cleanup.policy": "delete", "follower.replication.throttled.replicas": "",
                       "leader.replication.throttled.replicas": ""}


def _random_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
