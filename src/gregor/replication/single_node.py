"""The seam on one node: a cluster of one. Every partition is led here at leader epoch 0, this
broker is its only replica and its whole ISR, and the high watermark is the log end offset (an
append is committed when it returns). No replication work is done at all: an append is the log's
append, and acks=all is answered as acks=1 is.

``min.insync.replicas`` is stored and has no effect here (docs/operations.md): a cluster of one
that refused acks=all writes would only stop development setups that copied a production
``server.properties``.

Leadership listeners hear of every partition when ``start`` runs and of each partition created or
deleted later (``topic_created``, ``topic_deleted``, called by the topic admin), as a cluster's
brokers hear of the partitions the controller gives them.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.log.log_manager import LogManager
from gregor.log.partition_log import NO_VERIFICATION
from gregor.log.topic_registry import Topic, TopicRegistry
from gregor.protocol.control_records import build_marker_batch
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.partition import Partition
from gregor.replication.replica_manager import Appended, ReplicaManager

log = logging.getLogger(__name__)

LEADER_EPOCH = 0


class SingleNodeReplicas(ReplicaManager):
    def __init__(self, config: Any, node_id: int, logs: LogManager, registry: TopicRegistry) -> None:
        super().__init__(config, node_id, logs, registry)
        self._parts: dict[tuple[str, int], Partition] = {}
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._started = True
        for topic in sorted(self.registry.by_name.values(), key=lambda t: t.name):
            self.topic_created(topic, range(topic.partitions))

    async def stop(self) -> None:
        self._started = False

    def topic_created(self, topic: Topic, partitions: Any) -> None:
        """Partitions of ``topic`` were created (or the broker started with them): led here."""
        if not self._started:
            return  # start() tells of every partition
        for p in partitions:
            plog = self.logs.get(topic.name, p)
            if plog is not None:
                self._tell_leadership(self._host(topic.name, p, plog), True)

    def topic_deleted(self, name: str) -> None:
        for tp in [tp for tp in self._parts if tp[0] == name]:
            part = self._parts.pop(tp)
            part.is_leader = False
            self._tell_leadership(part, False)

    # -- lookups -----------------------------------------------------------------------------
    def _host(self, topic: str, partition: int, plog: Any) -> Partition:
        part = Partition(topic, partition, plog, [self.node_id], leader=self.node_id, leader_epoch=LEADER_EPOCH,
                         isr=[self.node_id], is_leader=True)
        self._parts[(topic, partition)] = part
        return part

    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        plog = self.logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"partition {topic}-{partition} does not exist")
        part = self._parts.get((topic, partition))
        if part is None or part.log is not plog:  # first use, or a topic deleted and created again
            part = self._host(topic, partition, plog)
        if current_leader_epoch >= 0 and current_leader_epoch != LEADER_EPOCH:
            part.check_epoch(current_leader_epoch)
        return part

    local_partition = leader_partition

    def leads(self, topic: str, partition: int) -> bool:
        return self.logs.get(topic, partition) is not None

    # -- appends -----------------------------------------------------------------------------
    def append_records(self, topic: str, partition: int, records: bytes, acks: int, timeout_s: float,
                       verification: Any = NO_VERIFICATION) -> Appended:
        plog = self.logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"partition {topic}-{partition} does not exist")
        res = plog.append(records, verification=verification)
        self._appended(topic, partition, plog.log_end_offset)
        return res, None

    def append_internal(self, topic: str, partition: int, batch: bytes, verification: Any = NO_VERIFICATION) -> int:
        plog = self.logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"partition {topic}-{partition} is not hosted here")
        base = plog.append_batch_unchecked(batch, LEADER_EPOCH, verification)
        self._appended(topic, partition, plog.log_end_offset)
        return base

    async def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                               coordinator_epoch: int, commit: bool, timeout_s: float) -> int:
        plog = self.leader_partition(topic, partition).log
        batch = build_marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, plog.clock())
        res = plog.append_control(batch, LEADER_EPOCH)
        self._appended(topic, partition, plog.log_end_offset)  # committed: the last stable offset moved
        return res.base_offset

    def _appended(self, topic: str, partition: int, end: int) -> None:
        """The high watermark is the log end: it moved with the append."""
        self.logs.notifier.notify((topic, partition))
        for fn in self.on_high_watermark:
            fn(topic, partition, end)

    # -- followers and DeleteRecords ---------------------------------------------------------
    def follower_fetched(self, part: Partition, replica_id: int, fetch_offset: int, log_start_offset: int) -> None:
        raise KafkaError(ErrorCode.not_leader_or_follower,
                         f"broker {replica_id} is not a replica of {part.topic}-{part.partition}: broker "
                         f"{self.node_id} is a single node")

    async def wait_low_watermark(self, part: Partition, offset: int, timeout_s: float) -> int:
        return part.log.log_start_offset
