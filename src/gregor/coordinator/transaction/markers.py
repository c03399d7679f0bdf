"""Writing a transaction's markers in its partitions (Kafka's TransactionMarkerChannelManager and
its request completion handler).

Once a PrepareCommit/PrepareAbort record is committed, the shard hands the transaction's markers
to the service, which gives them to ``MarkerChannel.send``: the channel writes a COMMIT or ABORT
control batch in every partition of the transaction, through the partition's leader: this broker
(``LocalMarkers``, the same code the WriteTxnMarkers handler runs) or another one (a
WriteTxnMarkers request). A partition is retried (0.1 s, then up to 1 s apart) until its leader
has written the marker; a partition whose topic no longer exists is dropped, as Kafka drops a
partition without a leader endpoint whose topic is gone. When every partition is done the
channel calls ``complete(markers, dropped)``, which writes CompleteCommit/CompleteAbort.

A leader that answers INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED has seen a newer
coordinator (or producer epoch): this coordinator stops sending for the transaction, as Kafka's
does; the newer coordinator completes it. Sending stops too when the shard is unloaded
(``cancel_partition``): the next coordinator hands the markers over again when it loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gregor.cluster.broker_client import BrokerClients, BrokerUnreachable
from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.transaction.api import TopicPartition, TxnMarkers, by_topic
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.coordinator.transaction")

WRITE_TXN_MARKERS_VERSION = 1
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.1, 1.0
MARKER_TIMEOUT_S = 30.0

# answers after which a partition is tried again (Kafka's retriable ones for markers)
RETRIABLE = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
    ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.leader_not_available,
    ErrorCode.unknown_server_error,
})
# answers that say a newer coordinator or producer epoch exists: stop sending this transaction's markers
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced,
                    ErrorCode.producer_fenced})


class MarkerReplicas(Protocol):
    async def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                               coordinator_epoch: int, commit: bool, timeout_s: float) -> int: ...


class OffsetsMarkers(Protocol):
    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> None: ...


class LocalMarkers:
    """Markers written in partitions this broker leads: a data partition's through the replication
    seam (appended as its leader and answered once the in-sync replicas have it), a
    ``__consumer_offsets`` partition's through its group coordinator shard, which commits or drops
    the producer's pending offsets (Kafka's handleWriteTxnMarkersRequest)."""

    def __init__(self, replicas: MarkerReplicas, groups: OffsetsMarkers) -> None:
        self.replicas = replicas
        self.groups = groups

    async def write(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                    partitions: list[TopicPartition],
                    timeout_s: float = MARKER_TIMEOUT_S) -> dict[TopicPartition, ErrorCode]:
        async def one(tp: TopicPartition) -> ErrorCode:
            topic, partition = tp
            try:
                if topic == OFFSETS_TOPIC:
                    await self.groups.complete_transaction(partition, producer_id, producer_epoch,
                                                           coordinator_epoch, commit)
                else:
                    await self.replicas.write_txn_marker(topic, partition, producer_id, producer_epoch,
                                                         coordinator_epoch, commit, timeout_s)
            except KafkaError as e:
                log.debug("marker for producer %d in %s-%d: %s (%s)", producer_id, topic, partition, e.code.name,
                          e.message)
                return e.code
            return ErrorCode.none

        codes = await asyncio.gather(*(one(tp) for tp in partitions))
        return dict(zip(partitions, codes, strict=True))


class MarkerChannel:
    """``complete(markers, dropped)`` is awaited once every marker of a transaction is written."""

    def __init__(self, cluster: ClusterMetadata, topics: TopicRegistry, local: LocalMarkers,
                 complete: Callable[[TxnMarkers, frozenset[TopicPartition]], Awaitable[Any]],
                 clients: BrokerClients) -> None:
        self.cluster = cluster
        self.topics = topics
        self.local = local
        self.complete = complete
        self._clients = clients  # the service's connections to other brokers (it closes them)
        self._tasks: dict[tuple[str, int, int], asyncio.Task[None]] = {}  # (transactional id, pid, epoch)
        self._partition_of: dict[tuple[str, int, int], int] = {}  # the __transaction_state partition

    def send(self, markers: TxnMarkers, state_partition: int) -> None:
        """Start writing ``markers`` (the shard's send_markers: only queues the work)."""
        key = (markers.transactional_id, markers.producer_id, markers.producer_epoch)
        if key in self._tasks:
            return  # already being written (a reload handed them over again)
        task = asyncio.get_running_loop().create_task(self._deliver(markers))
        self._tasks[key] = task
        self._partition_of[key] = state_partition
        task.add_done_callback(functools.partial(self._forget_task, key))

    def _forget_task(self, key: tuple[str, int, int], _task: asyncio.Task[None]) -> None:
        self._tasks.pop(key, None)
        self._partition_of.pop(key, None)

    def in_flight(self) -> int:
        return len(self._tasks)

    async def written(self, transactional_id: str, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the markers of the id's transactions being written
        here are written and the transactions completed; False if none were being written or
        they did not finish in time."""
        tasks = [task for key, task in self._tasks.items() if key[0] == transactional_id]
        if not tasks:
            return False
        _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        return not pending

    def cancel_partition(self, state_partition: int) -> None:
        """The ``__transaction_state`` partition is no longer coordinated here: stop its sends."""
        for key, p in list(self._partition_of.items()):
            if p == state_partition:
                task = self._tasks.get(key)
                if task is not None:
                    task.cancel()

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    # -- one transaction ---------------------------------------------------------------------------
    async def _deliver(self, markers: TxnMarkers) -> None:
        remaining = set(markers.partitions)
        dropped: set[TopicPartition] = set()
        backoff = FIRST_BACKOFF_S
        attempts = 0
        while remaining:
            attempts += 1
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                topic = self.topics.get(tp[0])
                if topic is None or not 0 <= tp[1] < topic.partitions:
                    dropped.add(tp)
                    continue
                leader = self.cluster.partition(*tp).leader
                if leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            remaining -= dropped
            answers = await asyncio.gather(*(self._write(markers, leader, tps) for leader, tps in by_leader.items()))
            for codes in answers:
                for tp, code in codes.items():
                    if code == ErrorCode.none:
                        remaining.discard(tp)
                    elif code in FENCED:
                        log.info("Stopped sending the markers of %s (producer id %d, epoch %d): %s-%d answered %s, "
                                 "a newer coordinator or producer epoch exists", markers.transactional_id,
                                 markers.producer_id, markers.producer_epoch, tp[0], tp[1], code.name)
                        return
                    elif code not in RETRIABLE:
                        log.error("Marker for %s (producer id %d) in %s-%d answered %s; retrying",
                                  markers.transactional_id, markers.producer_id, tp[0], tp[1], code.name)
            if remaining:
                if attempts in (10, 100) or attempts % 1000 == 0:
                    log.warning("The markers of %s (producer id %d, epoch %d) still wait for %s after %d attempts",
                                markers.transactional_id, markers.producer_id, markers.producer_epoch,
                                sorted(remaining), attempts)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        await self.complete(markers, frozenset(dropped))

    async def _write(self, markers: TxnMarkers, leader: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        if leader == self.cluster.node_id:
            return await self.local.write(markers.producer_id, markers.producer_epoch, markers.coordinator_epoch,
                                          markers.commit, partitions)
        broker = self.cluster.broker(leader)
        if broker is None:
            return dict.fromkeys(partitions, ErrorCode.not_leader_or_follower)
        body = {"markers": [{
            "producer_id": markers.producer_id, "producer_epoch": markers.producer_epoch,
            "transaction_result": markers.commit, "coordinator_epoch": markers.coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic(partitions).items()]}]}
        try:
            client = await self._clients.for_broker(broker.node_id, broker.host, broker.port)
            response = await client.request(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body)
        except BrokerUnreachable as e:
            log.debug("WriteTxnMarkers to broker %d failed: %s", leader, e)
            return dict.fromkeys(partitions, ErrorCode.not_leader_or_follower)
        out: dict[TopicPartition, ErrorCode] = {}
        for m in response.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = ErrorCode(p.error_code)
        for tp in partitions:
            out.setdefault(tp, ErrorCode.unknown_server_error)
        return out
