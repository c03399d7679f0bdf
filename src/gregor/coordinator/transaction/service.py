"""The transaction coordinator service: one shard per ``__transaction_state`` partition led here,
on the generic runtime (as the group coordinator's shards over ``__consumer_offsets``), the
routing of a transactional id to its shard, and the markers (markers.py).

- **The topic** is created on the first lookup (FindCoordinator for a transaction, or an
  InitProducerId with a transactional id), as Kafka does, with
  transaction.state.log.num.partitions partitions, compacted, min.insync.replicas
  transaction.state.log.min.isr (at most the replicas it gets).
- **Leadership**: the replication seam says when a partition's leadership is gained (load the
  shard, with the partition's leader epoch as the coordinator epoch written in every marker) or
  lost (unload; the marker sends of its transactions stop, and the next coordinator hands them
  over again when it loads).
- **Writes** are answered once the in-sync replicas have the record (the runtime's committed
  offset is the high watermark), as Kafka appends transaction state with acks=all; a write not
  replicated within ``transaction.state.log`` 's request timeout answers COORDINATOR_NOT_AVAILABLE.
- **Producer ids** for new transactional ids come from the broker's producer id manager (one
  node: a local block; a cluster: blocks in ZooKeeper), asked for before the operation runs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol

from gregor.cluster.broker_client import BrokerClients, BrokerUnreachable
from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.runtime.partition_writer import HighWatermarkListener, PartitionWriter
from gregor.coordinator.runtime.result import CoordinatorResult
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState
from gregor.coordinator.runtime.timer import Timer
from gregor.coordinator.runtime.topic_service import TopicCoordinatorService
from gregor.coordinator.transaction.api import (
    AddPartitionsResult,
    EndTxnResult,
    InitProducerIdResult,
    ListTransactionsResult,
    TopicPartition,
    TransactionConfig,
    TransactionDescription,
    TxnMarkers,
    by_topic,
)
from gregor.coordinator.transaction.markers import LocalMarkers, MarkerChannel
from gregor.coordinator.transaction.shard import RECORD_SERDE, TransactionCoordinatorShard
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import now_ms
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.transaction_log import TRANSACTION_STATE_TOPIC, partition_for

log = logging.getLogger("gregor.coordinator.transaction")

VERIFY_VERSION = 4  # AddPartitionsToTxn between brokers (batched, verify_only)
ADD_V2_VERSION = 5  # ... and adding for a transactions V2 producer (KIP-890 part 2)
CONCURRENT_WAIT_S = 0.5  # how long a request may wait for the previous transaction's markers
# how long a V2 producer's end of its next transaction waits for the last one's markers (in a
# cluster they are replicated by other brokers): Kafka would answer it PRODUCER_FENCED, fatal to
# the producer, so it waits as long as a client waits for an answer
NEXT_END_WAIT_S = 10.0


@functools.lru_cache(maxsize=65536)
def _cached_partition_for(transactional_id: str, partitions: int) -> int:
    return partition_for(transactional_id, partitions)


class TransactionReplicas(PartitionWriter, Protocol):
    on_leadership: list[Callable[[str, int, int, bool], None]]
    on_high_watermark: list[HighWatermarkListener]

    def leads(self, topic: str, partition: int) -> bool: ...

    def check_min_isr(self, topic: str, partition: int) -> None: ...


class ProducerIds(Protocol):
    async def allocate(self) -> int: ...


class TransactionCoordinatorService(TopicCoordinatorService[TransactionCoordinatorShard, str]):
    topic = TRANSACTION_STATE_TOPIC
    label = "transaction metadata"
    partitions_key = "transaction.state.log.num.partitions"
    segment_bytes_key = "transaction.state.log.segment.bytes"
    min_isr_key = "transaction.state.log.min.isr"
    replication_factor_key = "transaction.state.log.replication.factor"

    def __init__(self, config: Any, topics: TopicRegistry, logs: LogManager, create_topic: Callable[..., Any],
                 cluster: ClusterMetadata, replicas: TransactionReplicas, producer_ids: ProducerIds,
                 local_markers: LocalMarkers, replication_factor: int) -> None:
        self.producer_ids = producer_ids
        self.config = TransactionConfig.from_mapping({key: config[key] for key in TransactionConfig.KEYS})
        self.epochs: dict[int, int] = {}  # coordinator epoch (leader epoch) of each loaded partition
        self.local_markers = local_markers
        # connections to other brokers: markers (WriteTxnMarkers) and verification (AddPartitionsToTxn)
        self._clients = BrokerClients(f"gregor-{cluster.node_id}-txn", 30_000)
        self.markers = MarkerChannel(cluster, topics, local_markers, self._markers_written, self._clients)
        super().__init__(config, topics, logs, create_topic, cluster, replicas, replication_factor, RECORD_SERDE)

    # -- lifecycle ---------------------------------------------------------------------------
    async def stop(self) -> None:
        await super().stop()
        await self.markers.stop()
        await self._clients.close()

    def load(self, partition: int, leader_epoch: int) -> ShardRuntime[TransactionCoordinatorShard]:
        self.epochs[partition] = leader_epoch  # the coordinator epoch of the shard about to be made
        return super().load(partition, leader_epoch)

    def unload(self, partition: int) -> None:
        self.markers.cancel_partition(partition)
        super().unload(partition)

    def _make_shard(self, partition: int, timer: Timer) -> TransactionCoordinatorShard:
        def send(markers: TxnMarkers, partition: int = partition) -> None:
            self.markers.send(markers, partition)

        return TransactionCoordinatorShard(partition, self.config, now_ms, timer,
                                           coordinator_epoch=self.epochs.get(partition, 0), send_markers=send)

    # -- routing -----------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return _cached_partition_for(transactional_id, self.num_partitions())

    def locate(self, transactional_id: str) -> tuple[int, ErrorCode, str | None]:
        """FindCoordinator for a transactional id: (node id, error, reason)."""
        if not transactional_id:
            return -1, ErrorCode.invalid_request, "empty transactional id"
        return super().locate(transactional_id)

    async def _write_after_markers(self, transactional_id: str,
                                   op: Callable[[TransactionCoordinatorShard], CoordinatorResult[Any]],
                                   concurrent: Callable[[Any], bool], wait_s: float = CONCURRENT_WAIT_S) -> Any:
        """``_write``, but an answer of CONCURRENT_TRANSACTIONS while this broker is writing the
        markers of the id's previous transaction waits for them (at most CONCURRENT_WAIT_S) and
        runs the operation again: a producer that begins its next transaction right after a
        commit (the markers take a few milliseconds) then waits that long, not its client's retry
        backoff. The answer is what Kafka's would be once the client retried."""
        answer = await self._write(transactional_id, op)
        if concurrent(answer) and await self.markers.written(transactional_id, wait_s):
            answer = await self._write(transactional_id, op)
        return answer

    def _read(self, transactional_id: str, fn: Callable[[TransactionCoordinatorShard], Any]) -> Any:
        return self._runtime_for(transactional_id).read(fn)

    # -- the APIs ------------------------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int,
                               expected_epoch: int) -> InitProducerIdResult:
        new_id = -1
        if self._read(transactional_id, lambda s: s.needs_new_producer_id(transactional_id)):
            new_id = await self.producer_ids.allocate()
        result: InitProducerIdResult = await self._write_after_markers(
            transactional_id, lambda s: s.init_producer_id(transactional_id, timeout_ms, expected_producer_id,
                                                           expected_epoch, new_id),
            lambda r: r.error == ErrorCode.concurrent_transactions)
        return result

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition], verify_only: bool = False,
                             tv2: bool = False) -> AddPartitionsResult:
        result: AddPartitionsResult = await self._write_after_markers(
            transactional_id, lambda s: s.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                                         verify_only, tv2),
            lambda r: ErrorCode.concurrent_transactions in (r.error, *r.partitions.values()))
        return result

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], add: bool = False) -> dict[TopicPartition, ErrorCode]:
        """KIP-890's check before a producer's first transactional batch in a partition: whether
        each partition is in the producer's ongoing transaction, asked of its coordinator (here,
        or another broker with AddPartitionsToTxn v4 ``verify_only``). The coordinator's codes
        (NONE, TRANSACTION_ABORTABLE, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING,
        CONCURRENT_TRANSACTIONS, ...), or NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE when it
        cannot be asked now. ``add`` (transactions V2, KIP-890 part 2): the partitions join the
        ongoing transaction instead of being checked (AddPartitionsToTxn v5 from a leader)."""
        node, code, _reason = self.locate(transactional_id)
        if code:
            return dict.fromkeys(partitions, code)
        if node == self.cluster.node_id:
            try:
                result = await self.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                                   verify_only=not add, tv2=add)
            except KafkaError as e:
                return dict.fromkeys(partitions, e.code)
            return {tp: result.partitions.get(tp, result.error) for tp in partitions}
        return await self._verify_remotely(node, transactional_id, producer_id, producer_epoch, partitions, add)

    async def _verify_remotely(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int,
                               partitions: list[TopicPartition], add: bool) -> dict[TopicPartition, ErrorCode]:
        broker = self.cluster.broker(node)
        if broker is None:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                  "producer_epoch": producer_epoch, "verify_only": not add,
                                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic(partitions).items()]}]}
        try:
            client = await self._clients.for_broker(broker.node_id, broker.host, broker.port)
            response = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_V2_VERSION if add else VERIFY_VERSION,
                                            body)
        except BrokerUnreachable as e:
            log.debug("verifying %s's partitions with broker %d failed: %s", transactional_id, node, e)
            return dict.fromkeys(partitions, ErrorCode.not_coordinator)
        if response.error_code:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        out: dict[TopicPartition, ErrorCode] = {}
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for r in t.results_by_partition:
                    out[(t.name, r.partition_index)] = ErrorCode(r.partition_error_code)
        return {tp: out.get(tp, ErrorCode.unknown_server_error) for tp in partitions}

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_partition: int) -> ErrorCode:
        code: ErrorCode = await self._write_after_markers(
            transactional_id, lambda s: s.add_offsets(transactional_id, producer_id, producer_epoch, group_partition),
            lambda c: c == ErrorCode.concurrent_transactions)
        return code

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      tv2: bool = False) -> EndTxnResult:
        new_id = -1
        if tv2 and self._read(transactional_id, lambda s: s.needs_new_producer_id(transactional_id)):
            new_id = await self.producer_ids.allocate()
        # While the last transaction's markers are being written, a retried end is answered
        # CONCURRENT_TRANSACTIONS and a V2 producer's next end (at the epoch the last one gave)
        # PRODUCER_FENCED, as Kafka's would: both are answered once the markers are written
        # instead, as they would be then (franz-go aborts right after a commit when its produces
        # were refused, and PRODUCER_FENCED is fatal to it).
        next_end = tv2 and self._read(transactional_id, lambda s: s.ends_next_transaction(
            transactional_id, producer_id, producer_epoch))
        result: EndTxnResult = await self._write_after_markers(
            transactional_id, lambda s: s.end_txn(transactional_id, producer_id, producer_epoch, commit, tv2, new_id),
            lambda r: r.error in (ErrorCode.concurrent_transactions, ErrorCode.producer_fenced),
            NEXT_END_WAIT_S if next_end else CONCURRENT_WAIT_S)
        return result

    async def _markers_written(self, markers: TxnMarkers, dropped: frozenset[TopicPartition]) -> None:
        """Every marker is written: CompleteCommit/CompleteAbort. Retried for as long as the shard
        that prepared the transaction is still the one loaded here (a broker confirming its
        ZooKeeper session after a pause does not act as leader for a moment, nothing moved);
        once it is unloaded or reloaded, its next load hands the markers over again, as Kafka's
        coordinator retries an append that found the coordinator unavailable."""
        partition = self.partition_for(markers.transactional_id)
        runtime = self.runtimes.get(partition)
        backoff = 0.05
        while True:
            try:
                await self._write(markers.transactional_id, lambda s: s.complete_markers(
                    markers.transactional_id, markers.producer_id, markers.producer_epoch, dropped))
                return
            except KafkaError as e:
                current = self.runtimes.get(partition)
                if runtime is None or current is not runtime or runtime.state in (ShardState.CLOSED,
                                                                                    ShardState.FAILED):
                    log.info("Completing %s's transaction after its markers: %s (%s); the coordinator that loads "
                             "%s-%d next completes it", markers.transactional_id, e.code.name, e.message,
                             TRANSACTION_STATE_TOPIC, partition)
                    return
                log.debug("Completing %s's transaction after its markers: %s (%s); retrying",
                          markers.transactional_id, e.code.name, e.message)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    def describe(self, transactional_id: str) -> TransactionDescription:
        try:
            description: TransactionDescription = self._read(
                transactional_id, lambda s: s.describe_transaction(transactional_id))
        except KafkaError as e:
            return TransactionDescription(transactional_id, e.code)
        return description

    def list_transactions(self, states: list[str], producer_ids: list[int], duration_ms: int = -1,
                          pattern: str | None = None) -> ListTransactionsResult:
        out = ListTransactionsResult([])
        unknown: list[str] = []
        for rt in self.runtimes.values():
            if rt.state is not ShardState.ACTIVE or rt.shard is None:
                continue
            part = rt.shard.list_transactions(states, producer_ids, duration_ms, pattern)
            out.transactions.extend(part.transactions)
            unknown = part.unknown_state_filters
        return ListTransactionsResult(sorted(out.transactions, key=lambda t: t.transactional_id), unknown)

    def loading(self) -> bool:
        return any(rt.state is ShardState.LOADING for rt in self.runtimes.values())
