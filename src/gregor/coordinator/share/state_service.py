"""The share coordinator (KIP-932): one shard per ``__share_group_state`` partition led here, on
the generic runtime, as the group and transaction coordinators over their topics.

- **The topic** is created on first use (a share-partition leader reading its state, or
  FindCoordinator for a share key) with share.coordinator.state.topic.num.partitions
  partitions, compacted (each share-partition's latest ShareSnapshot is its state),
  min.insync.replicas share.coordinator.state.topic.min.isr (at most the replicas it gets).
- **Leadership** moves with the partition's: loaded when gained, unloaded when lost.
- **Writes** are answered once the in-sync replicas have the record (acks=all), so a share-
  partition leader answers an acknowledgement only once it survives the loss of a broker.
- **Routing**: a share-partition's key "group:topicId:partition" maps to a partition as Kafka's
  (protocol/share_state_records.py), and the partition's leader is its coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.runtime.partition_writer import HighWatermarkListener, PartitionWriter
from gregor.coordinator.runtime.result import CoordinatorResult, Deferred
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState, reload_failed_shards, resolve
from gregor.coordinator.runtime.timer import Timer
from gregor.coordinator.share.state_shard import RECORD_SERDE, PartitionState, ShareStateShard
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import now_ms
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_state_records import SHARE_STATE_TOPIC, PersistedBatch, SharePartitionKey, partition_for

log = logging.getLogger("gregor.coordinator.share")

RELOAD_BACKOFF_S = 5.0
WRITE_TIMEOUT_S = 30.0


@functools.lru_cache(maxsize=65536)
def _cached_partition_for(key: SharePartitionKey, partitions: int) -> int:
    return partition_for(key, partitions)


class ShareStateService:
    def __init__(self, config: Any, topics: TopicRegistry, logs: LogManager, create_topic: Callable[..., Any],
                 cluster: ClusterMetadata, replicas: Any, replication_factor: int) -> None:
        self.broker_config = config
        self.topics = topics
        self.logs = logs
        self.create_topic = create_topic
        self.cluster = cluster
        self.replicas: PartitionWriter = replicas
        self._leads = replicas.leads
        self._check_min_isr = replicas.check_min_isr
        self.replication_factor = replication_factor
        self.runtimes: dict[int, ShardRuntime[ShareStateShard]] = {}
        self._watchdog: asyncio.Task[None] | None = None
        replicas.on_leadership.append(self.on_leadership)
        hw: list[HighWatermarkListener] = replicas.on_high_watermark
        hw.append(self.on_high_watermark)

    async def start(self) -> None:
        self._watchdog = asyncio.get_running_loop().create_task(
            reload_failed_shards(self.runtimes.values, RELOAD_BACKOFF_S))

    async def stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        for p in list(self.runtimes):
            self.unload(p)

    def num_partitions(self) -> int:
        topic = self.topics.get(SHARE_STATE_TOPIC)
        return topic.partitions if topic is not None else 0

    def ensure_topic(self) -> None:
        if self.topics.get(SHARE_STATE_TOPIC) is not None:
            return
        cfg = self.broker_config
        min_isr = max(1, min(cfg["share.coordinator.state.topic.min.isr"], self.replication_factor))
        self.create_topic(SHARE_STATE_TOPIC, cfg["share.coordinator.state.topic.num.partitions"], {
            "cleanup.policy": "compact",
            "segment.bytes": str(cfg["share.coordinator.state.topic.segment.bytes"]),
            "min.insync.replicas": str(min_isr),
            "unclean.leader.election.enable": "false",
        }, internal=True)

    # -- leadership ---------------------------------------------------------------------------------
    def on_leadership(self, topic: str, partition: int, leader_epoch: int, is_leader: bool) -> None:
        if topic != SHARE_STATE_TOPIC:
            return
        if not is_leader:
            self.unload(partition)
            return
        runtime = self.runtimes.get(partition)
        if runtime is not None and runtime.state is not ShardState.CLOSED:
            return
        plog = self.logs.get(SHARE_STATE_TOPIC, partition)
        assert plog is not None
        runtime = ShardRuntime(partition, plog, self._make_shard, RECORD_SERDE, self.replicas,
                               label="share-group state", required_acks=-1)
        self.runtimes[partition] = runtime
        runtime.start_loading()

    def on_high_watermark(self, topic: str, partition: int, offset: int) -> None:
        if topic == SHARE_STATE_TOPIC:
            runtime = self.runtimes.get(partition)
            if runtime is not None:
                runtime.on_high_watermark(offset)

    def unload(self, partition: int) -> None:
        runtime = self.runtimes.pop(partition, None)
        if runtime is not None:
            runtime.unload()

    def _make_shard(self, partition: int, timer: Timer) -> ShareStateShard:
        return ShareStateShard(partition, now_ms)

    # -- routing ------------------------------------------------------------------------------------
    def partition_for(self, key: SharePartitionKey) -> int:
        return _cached_partition_for(key, self.num_partitions())

    def locate(self, key: SharePartitionKey) -> tuple[int, ErrorCode, str | None]:
        """The broker coordinating ``key``: (node id, error, reason); creates the topic first."""
        if self.num_partitions() <= 0:
            live = len(self.cluster.brokers())
            if live < self.replication_factor:
                return -1, ErrorCode.coordinator_not_available, (
                    f"{SHARE_STATE_TOPIC} needs share.coordinator.state.topic.replication.factor="
                    f"{self.replication_factor} live brokers; {live} are alive")
            try:
                self.ensure_topic()
            except KafkaError as e:
                if e.code not in (ErrorCode.leader_not_available, ErrorCode.topic_already_exists):
                    return -1, ErrorCode.coordinator_not_available, e.message
            if self.num_partitions() <= 0:
                return -1, ErrorCode.coordinator_not_available, f"{SHARE_STATE_TOPIC} is being created"
        partition = self.partition_for(key)
        leader = self.cluster.partition(SHARE_STATE_TOPIC, partition).leader
        if leader < 0:
            return -1, ErrorCode.coordinator_not_available, f"{SHARE_STATE_TOPIC}-{partition} has no leader"
        return leader, ErrorCode.none, None

    def _runtime_for(self, key: SharePartitionKey) -> ShardRuntime[ShareStateShard]:
        if self.num_partitions() <= 0:
            raise KafkaError(ErrorCode.coordinator_not_available, f"{SHARE_STATE_TOPIC} does not exist yet")
        partition = self.partition_for(key)
        runtime = self.runtimes.get(partition)
        if runtime is None or not self._leads(SHARE_STATE_TOPIC, partition):
            raise KafkaError(ErrorCode.not_coordinator,
                             f"{SHARE_STATE_TOPIC}-{partition} is not coordinated by broker {self.cluster.node_id}")
        return runtime

    async def _write(self, key: SharePartitionKey,
                     op: Callable[[ShareStateShard], CoordinatorResult[KafkaError | None]]) -> None:
        runtime = self._runtime_for(key)
        try:
            self._check_min_isr(SHARE_STATE_TOPIC, runtime.partition)
        except KafkaError as e:
            if e.code == ErrorCode.not_enough_replicas:
                raise KafkaError(ErrorCode.coordinator_not_available, e.message) from None
        response = runtime.execute(op)
        if isinstance(response, Deferred):
            try:
                response = await asyncio.wait_for(resolve(response), WRITE_TIMEOUT_S)
            except TimeoutError:
                raise KafkaError(ErrorCode.coordinator_not_available,
                                 f"{runtime.name}: the write was not replicated within {WRITE_TIMEOUT_S:.0f} s"
                                 ) from None
            except KafkaError as e:
                if e.code == ErrorCode.not_coordinator:
                    raise
                raise KafkaError(ErrorCode.coordinator_not_available, e.message) from None
        if isinstance(response, KafkaError):
            raise response

    # -- the state APIs (each raises KafkaError when it cannot answer here) -----------------------
    async def read(self, key: SharePartitionKey) -> PartitionState | None:
        runtime = self._runtime_for(key)
        state: PartitionState | None = runtime.read(lambda shard: shard.read(key))
        return state

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[PersistedBatch]) -> None:
        await self._write(key, lambda shard: shard.write(key, state_epoch, leader_epoch, start_offset, batches))

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        await self._write(key, lambda shard: shard.initialize(key, state_epoch, start_offset))

    async def delete(self, key: SharePartitionKey) -> None:
        await self._write(key, lambda shard: CoordinatorResult(shard.delete([key]).records, None))

    async def wait_loaded(self) -> None:
        for rt in list(self.runtimes.values()):
            await rt.wait_loaded()
