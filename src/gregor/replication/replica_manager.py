"""The replication seam: the partitions this broker hosts, as everything above ``log/`` sees them
(Kafka's ReplicaManager and Partition).

One interface, two implementations: ``SingleNodeReplicas`` (single_node.py: every partition is
led here at epoch 0, the ISR is this broker, the high watermark is the log end) and
``ClusterReplicas`` (cluster_replicas.py: leaders and followers as the ZooKeeper controller
decides). Handlers, the coordinators and the telemetry writer use only this interface and never
ask which one they have:

- lookups with leader-epoch checks (KIP-320): ``leader_partition`` (only the leader answers:
  produce, ListOffsets, OffsetForLeaderEpoch, DeleteRecords, a follower's Fetch) and
  ``local_partition`` (any replica: a consumer's Fetch from a follower, KIP-392);
- appends: ``append_records`` (a producer's batch: acks, min.insync.replicas, the acks=all wait),
  ``append_internal`` (a batch the broker built itself: the coordinators' records, telemetry) and
  ``write_txn_marker`` (a transaction marker the transaction coordinator asks this leader to
  write, with acks=all, as Kafka's WriteTxnMarkers appends with origin COORDINATOR);
- follower bookkeeping: ``follower_fetched`` (a follower's fetch offset and log start);
- DeleteRecords: ``delete_records`` and ``wait_low_watermark`` (every replica's log start);
- listeners: ``on_leadership(topic, partition, leader_epoch, is_leader)`` for every real gain or
  loss of leadership (a new leader epoch of a partition already led here is not one: the
  coordinator shards load and unload on these), and ``on_high_watermark(topic, partition, offset)``
  for every advance of a local high watermark (the coordinators answer their writes on these);
- the lifecycle: ``start``, ``begin_controlled_shutdown``, ``stop_fetching``, ``stop``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from gregor.log.log_manager import LogManager
from gregor.log.partition_log import NO_VERIFICATION, AppendResult
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.partition import Partition

log = logging.getLogger(__name__)

LeadershipListener = Callable[[str, int, int, bool], None]
HighWatermarkListener = Callable[[str, int, int], None]
# what an append hands back: its result, and for acks=all something to await for the error code
# the producer gets (None: answered now)
Appended = tuple[AppendResult, Awaitable[ErrorCode] | None]

REPLICATION_ERRORS = {
    ErrorCode.not_enough_replicas_after_append: "written, but the ISR shrank below min.insync.replicas",
    ErrorCode.request_timed_out: "the in-sync replicas did not all confirm the write within the request's timeout",
    ErrorCode.not_leader_or_follower: "leadership moved before the in-sync replicas confirmed the write",
}


class ReplicaManager(ABC):
    def __init__(self, config: Any, node_id: int, logs: LogManager, registry: TopicRegistry) -> None:
        self.config = config
        self.node_id = node_id
        self.logs = logs
        self.registry = registry
        self.on_leadership: list[LeadershipListener] = []
        self.on_high_watermark: list[HighWatermarkListener] = []

    # -- lifecycle ---------------------------------------------------------------------------
    @abstractmethod
    async def start(self) -> None:
        """Take the roles this broker has now (listeners hear of every partition led here)."""

    def begin_controlled_shutdown(self) -> None:
        """The broker is about to ask the controller to move its leaderships away: from now on
        a partition this broker no longer leads or is no longer in the ISR of is not fetched.
        Nothing on one node."""
        return None

    async def stop_fetching(self) -> None:
        """Stop following (Kafka's StopReplica after a controlled shutdown). Nothing on one node."""
        return None

    @abstractmethod
    async def stop(self) -> None:
        """Stop: waiting appends answered NOT_LEADER_OR_FOLLOWER, fetchers stopped, high
        watermarks checkpointed."""

    # -- lookups -----------------------------------------------------------------------------
    @abstractmethod
    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it: UNKNOWN_TOPIC_OR_PARTITION when it does not
        exist, NOT_LEADER_OR_FOLLOWER when another broker leads it; a ``current_leader_epoch``
        (KIP-320) that is not this broker's is FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH, checked
        first, as Kafka does (a new leader that has not learnt its election yet answers
        UNKNOWN_LEADER_EPOCH, which the asker retries at once)."""

    @abstractmethod
    def local_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        """A replica hosted here, leader or follower (a consumer's fetch from a follower)."""

    def leads(self, topic: str, partition: int) -> bool:
        try:
            self.leader_partition(topic, partition)
        except KafkaError:
            return False
        return True

    def check_min_isr(self, topic: str, partition: int) -> None:
        """NOT_ENOUGH_REPLICAS when an acks=all write to the partition would be refused now (the
        coordinators check their own writes before running them). Nothing on one node."""
        return None

    # -- appends -----------------------------------------------------------------------------
    @abstractmethod
    def append_records(self, topic: str, partition: int, records: bytes, acks: int, timeout_s: float,
                       verification: Any = NO_VERIFICATION) -> Appended:
        """A producer's batch, appended as leader. With acks=all, NOT_ENOUGH_REPLICAS before
        anything is written when the ISR is smaller than min.insync.replicas; the awaitable
        returned answers once the high watermark covers the batch (NONE,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER).
        ``verification``: the KIP-890 guard of a transactional batch (start_txn_verification)."""

    def start_txn_verification(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                               epoch_bump: bool = False) -> Any:
        """Before a producer's transactional batch is appended (KIP-890): None when it belongs to
        the producer's transaction ongoing in the partition (same epoch), else the guard its
        append must bring once the coordinator confirmed the partition is in the transaction (see
        log/producer_state.py). ``epoch_bump``: the producer runs transactions V2."""
        state = self.leader_partition(topic, partition).log.producer_state
        return state.start_verification(producer_id, producer_epoch, epoch_bump)

    @abstractmethod
    def append_internal(self, topic: str, partition: int, batch: bytes, verification: Any = NO_VERIFICATION) -> int:
        """A batch the broker built itself (coordinator records, telemetry), appended as leader
        with the leader epoch; returns its base offset. ``verification``: the KIP-890 guard of a
        coordinator's transactional batch (TxnOffsetCommit), as for ``append_records``."""

    @abstractmethod
    async def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                               coordinator_epoch: int, commit: bool, timeout_s: float) -> int:
        """Write the marker ending ``producer_id``'s transaction on the partition (commit or
        abort) as its leader and wait until the high watermark covers it (acks=all); returns the
        marker's offset. Raises KafkaError: the leadership errors of ``leader_partition``
        (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER), NOT_ENOUGH_REPLICAS before writing,
        INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED from the producer state,
        KAFKA_STORAGE_ERROR, then NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT or
        NOT_LEADER_OR_FOLLOWER while waiting (the coordinator retries: a marker written twice
        ends nothing the second time)."""

    # -- followers ---------------------------------------------------------------------------
    @abstractmethod
    def follower_fetched(self, part: Partition, replica_id: int, fetch_offset: int, log_start_offset: int) -> None:
        """A follower's Fetch of ``part`` at ``fetch_offset`` (everything below it is on the
        follower) with its log start offset; NOT_LEADER_OR_FOLLOWER for a broker that is not a
        replica."""

    # -- DeleteRecords -----------------------------------------------------------------------
    def delete_records(self, topic: str, partition: int, offset: int) -> Partition:
        """Move the leader's log start offset to ``offset`` (-1: the high watermark), in memory;
        the caller checkpoints it, deletes the segments below it and then waits for the replicas
        (``wait_low_watermark``). POLICY_VIOLATION, OFFSET_OUT_OF_RANGE, and the leadership errors
        of ``leader_partition``."""
        part = self.leader_partition(topic, partition)
        plog = part.log
        plog.advance_log_start_offset(plog.high_watermark if offset == -1 else offset)
        return part

    @abstractmethod
    async def wait_low_watermark(self, part: Partition, offset: int, timeout_s: float) -> int:
        """Until every live replica's log start offset reaches ``offset``; the low watermark
        (the smallest of them). REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER as KafkaError."""

    # -- listeners ---------------------------------------------------------------------------
    def _tell_leadership(self, part: Partition, is_leader: bool) -> None:
        for fn in list(self.on_leadership):
            try:
                fn(part.topic, part.partition, part.leader_epoch, is_leader)
            except Exception:
                log.exception("leadership listener failed for %s-%d", part.topic, part.partition)

    def _tell_high_watermark(self, part: Partition, offset: int) -> None:
        self.logs.notifier.notify(part.tp)  # consumers long-polling for data below the new mark
        for fn in self.on_high_watermark:
            fn(part.topic, part.partition, offset)
