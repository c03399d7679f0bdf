"""A coordinator over an internal topic, as the transaction coordinator (``__transaction_state``)
and the share coordinator (``__share_group_state``) are: one shard runtime per partition of the
topic led here, and the routing of a key to its partition's leader.

- **The topic** is created on the first lookup (Kafka's way), compacted, with the coordinator's
  partition count, segment size and min.insync.replicas (at most the replicas it gets); a lookup
  while fewer brokers are alive than its replication factor is COORDINATOR_NOT_AVAILABLE.
- **Leadership** moves with the partition's: a shard loads when the seam says the partition was
  gained, unloads when it was lost; one that failed to load is retried (``reload_failed_shards``).
- **Writes** run on the key's shard and are answered once the in-sync replicas have the records
  (acks=all); a partition whose ISR is short, a write not replicated in time, or leadership lost
  meanwhile is COORDINATOR_NOT_AVAILABLE (NOT_COORDINATOR when this broker does not lead it), so
  that clients look the coordinator up again.

The group coordinator has its own service (it predates this one and shares the runtime).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.runtime.result import CoordinatorResult, Deferred
from gregor.coordinator.runtime.shard import CoordinatorShard
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState, reload_failed_shards, resolve
from gregor.coordinator.runtime.timer import Timer
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.errors import ErrorCode, KafkaError

S = TypeVar("S", bound=CoordinatorShard)
K = TypeVar("K")

RELOAD_BACKOFF_S = 5.0
WRITE_TIMEOUT_S = 30.0


class TopicCoordinatorService(Generic[S, K]):
    """Subclasses give ``partition_for(key)``, ``_make_shard(partition, timer)`` and what the topic
    is (``topic``, ``label``, the config keys of its partitions, segment size, min ISR and
    replication factor)."""

    topic: str
    label: str  # the shards' name in logs: "transaction metadata"
    partitions_key: str
    segment_bytes_key: str
    min_isr_key: str
    replication_factor_key: str

    def __init__(self, config: Any, topics: TopicRegistry, logs: LogManager, create_topic: Callable[..., Any],
                 cluster: ClusterMetadata, replicas: Any, replication_factor: int, record_serde: Any) -> None:
        self.broker_config = config
        self.topics = topics
        self.logs = logs
        self.create_topic = create_topic
        self.cluster = cluster
        self.replicas = replicas
        self.replication_factor = replication_factor
        self.record_serde = record_serde
        self.runtimes: dict[int, ShardRuntime[S]] = {}
        self._watchdog: asyncio.Task[None] | None = None
        replicas.on_leadership.append(self.on_leadership)
        replicas.on_high_watermark.append(self.on_high_watermark)

    # -- lifecycle ---------------------------------------------------------------------------------
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

    async def wait_loaded(self) -> None:
        for rt in list(self.runtimes.values()):
            await rt.wait_loaded()

    def num_partitions(self) -> int:
        topic = self.topics.get(self.topic)
        return topic.partitions if topic is not None else 0

    def ensure_topic(self) -> None:
        """Create the topic if it does not exist."""
        if self.topics.get(self.topic) is not None:
            return
        cfg = self.broker_config
        min_isr = max(1, min(cfg[self.min_isr_key], self.replication_factor))
        self.create_topic(self.topic, cfg[self.partitions_key], {
            "cleanup.policy": "compact",
            "segment.bytes": str(cfg[self.segment_bytes_key]),
            "min.insync.replicas": str(min_isr),
            "unclean.leader.election.enable": "false",
        }, internal=True)

    # -- leadership --------------------------------------------------------------------------------
    def on_leadership(self, topic: str, partition: int, leader_epoch: int, is_leader: bool) -> None:
        if topic != self.topic:
            return
        if not is_leader:
            self.unload(partition)
            return
        runtime = self.runtimes.get(partition)
        if runtime is not None and runtime.state is not ShardState.CLOSED:
            return
        self.load(partition, leader_epoch)

    def on_high_watermark(self, topic: str, partition: int, offset: int) -> None:
        if topic == self.topic:
            runtime = self.runtimes.get(partition)
            if runtime is not None:
                runtime.on_high_watermark(offset)

    def load(self, partition: int, leader_epoch: int) -> ShardRuntime[S]:
        plog = self.logs.get(self.topic, partition)
        assert plog is not None
        runtime = ShardRuntime(partition, plog, self._make_shard, self.record_serde, self.replicas,
                               label=self.label, required_acks=-1)
        self.runtimes[partition] = runtime
        runtime.start_loading()
        return runtime

    def unload(self, partition: int) -> None:
        runtime = self.runtimes.pop(partition, None)
        if runtime is not None:
            runtime.unload()

    def _make_shard(self, partition: int, timer: Timer) -> S:
        raise NotImplementedError

    # -- routing -----------------------------------------------------------------------------------
    def partition_for(self, key: K) -> int:
        raise NotImplementedError

    def locate(self, key: K) -> tuple[int, ErrorCode, str | None]:
        """The broker coordinating ``key``: (node id, error, reason); creates the topic first."""
        if self.num_partitions() <= 0:
            live = len(self.cluster.brokers())
            if live < self.replication_factor:
                return -1, ErrorCode.coordinator_not_available, (
                    f"{self.topic} needs {self.replication_factor_key}={self.replication_factor} live brokers; "
                    f"{live} are alive")
            try:
                self.ensure_topic()
            except KafkaError as e:
                if e.code not in (ErrorCode.leader_not_available, ErrorCode.topic_already_exists):
                    return -1, ErrorCode.coordinator_not_available, e.message
            if self.num_partitions() <= 0:
                return -1, ErrorCode.coordinator_not_available, f"{self.topic} is being created"
        partition = self.partition_for(key)
        leader = self.cluster.partition(self.topic, partition).leader
        if leader < 0:
            return -1, ErrorCode.coordinator_not_available, f"{self.topic}-{partition} has no leader"
        if leader == self.cluster.node_id:
            runtime = self.runtimes.get(partition)
            if runtime is not None and runtime.state is ShardState.FAILED:
                return -1, ErrorCode.coordinator_not_available, (
                    f"{runtime.name} failed to load here: {runtime.load_error}")
        return leader, ErrorCode.none, None

    def _runtime_for(self, key: K) -> ShardRuntime[S]:
        if self.num_partitions() <= 0:
            raise KafkaError(ErrorCode.coordinator_not_available, f"{self.topic} does not exist yet")
        partition = self.partition_for(key)
        runtime = self.runtimes.get(partition)
        if runtime is None or not self.replicas.leads(self.topic, partition):
            raise KafkaError(ErrorCode.not_coordinator,
                             f"{self.topic}-{partition} is not coordinated by broker {self.cluster.node_id}")
        return runtime

    async def _write(self, key: K, op: Callable[[S], CoordinatorResult[Any]]) -> Any:
        """Run an operation on the key's shard; its answer once its records are replicated.
        KafkaError NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE when it
        cannot."""
        runtime = self._runtime_for(key)
        try:
            self.replicas.check_min_isr(self.topic, runtime.partition)
        except KafkaError as e:
            if e.code == ErrorCode.not_enough_replicas:
                raise KafkaError(ErrorCode.coordinator_not_available, e.message) from None
        response = runtime.execute(op)
        if not isinstance(response, Deferred):
            return response
        try:
            return await asyncio.wait_for(resolve(response), WRITE_TIMEOUT_S)
        except TimeoutError:
            raise KafkaError(ErrorCode.coordinator_not_available,
                             f"{runtime.name}: the write was not replicated within {WRITE_TIMEOUT_S:.0f} s") from None
        except KafkaError as e:
            if e.code == ErrorCode.not_coordinator:
                raise
            raise KafkaError(ErrorCode.coordinator_not_available, e.message) from None
