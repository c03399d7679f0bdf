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

import functools
import logging
from collections.abc import Callable
from typing import Any

from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.runtime.result import CoordinatorResult
from gregor.coordinator.runtime.timer import Timer
from gregor.coordinator.runtime.topic_service import TopicCoordinatorService
from gregor.coordinator.share.state_shard import RECORD_SERDE, PartitionState, ShareStateShard
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import now_ms
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.errors import KafkaError
from gregor.protocol.share_state_records import SHARE_STATE_TOPIC, PersistedBatch, SharePartitionKey, partition_for

log = logging.getLogger("gregor.coordinator.share")


@functools.lru_cache(maxsize=65536)
def _cached_partition_for(key: SharePartitionKey, partitions: int) -> int:
    return partition_for(key, partitions)


class ShareStateService(TopicCoordinatorService[ShareStateShard, SharePartitionKey]):
    topic = SHARE_STATE_TOPIC
    label = "share-group state"
    partitions_key = "share.coordinator.state.topic.num.partitions"
    segment_bytes_key = "share.coordinator.state.topic.segment.bytes"
    min_isr_key = "share.coordinator.state.topic.min.isr"
    replication_factor_key = "share.coordinator.state.topic.replication.factor"

    def __init__(self, config: Any, topics: TopicRegistry, logs: LogManager, create_topic: Callable[..., Any],
                 cluster: ClusterMetadata, replicas: Any, replication_factor: int) -> None:
        super().__init__(config, topics, logs, create_topic, cluster, replicas, replication_factor, RECORD_SERDE)

    def _make_shard(self, partition: int, timer: Timer) -> ShareStateShard:
        return ShareStateShard(partition, now_ms)

    def partition_for(self, key: SharePartitionKey) -> int:
        return _cached_partition_for(key, self.num_partitions())

    async def _apply(self, key: SharePartitionKey,
                     op: Callable[[ShareStateShard], CoordinatorResult[KafkaError | None]]) -> None:
        response = await self._write(key, op)
        if isinstance(response, KafkaError):
            raise response

    # -- the state APIs (each raises KafkaError when it cannot answer here) -----------------------
    async def read(self, key: SharePartitionKey) -> PartitionState | None:
        runtime = self._runtime_for(key)
        state: PartitionState | None = runtime.read(lambda shard: shard.read(key))
        return state

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[PersistedBatch]) -> None:
        await self._apply(key, lambda shard: shard.write(key, state_epoch, leader_epoch, start_offset, batches))

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        await self._apply(key, lambda shard: shard.initialize(key, state_epoch, start_offset))

    async def delete(self, key: SharePartitionKey) -> None:
        await self._apply(key, lambda shard: CoordinatorResult(shard.delete([key]).records, None))
