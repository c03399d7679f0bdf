"""One partition as this broker hosts it (Kafka's Partition): its log, its role (leader,
follower, or neither), the leader epoch and ISR it acts on, and, while it leads, what it knows of
its followers.

The same object serves both implementations of the seam (replica_manager.py): on one node every
partition is led here at epoch 0 with this broker as its only replica; in a cluster the replica
manager keeps it current from the controller's decisions.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gregor.log.partition_log import PartitionLog
from gregor.protocol.errors import ErrorCode, KafkaError

TopicPartition = tuple[str, int]
NO_LEADER = -1


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica), from the follower's Fetch."""

    log_end_offset: int = -1  # unknown until it fetches at this leader epoch
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


@dataclass(eq=False, slots=True)
class Partition:
    topic: str
    partition: int
    log: PartitionLog
    replicas: list[int]
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    is_leader: bool = False
    # the log end offset when this broker became leader at ``leader_epoch`` (Kafka's
    # leaderEpochStartOffset): a follower rejoins the ISR only once it has reached it, and ListOffsets
    # answers OFFSET_NOT_AVAILABLE while the high watermark is below it
    epoch_start_offset: int = 0
    followers: dict[int, FollowerState] = field(default_factory=dict)
    # acks=all appends waiting for the high watermark: (offset it must reach, future of the answer)
    waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)
    # an ISR change written (or being written) but not yet known to have been taken: the high
    # watermark and min.insync.replicas count over the current ISR and this one together (Kafka's
    # maximal ISR), so that neither a pending expansion nor a write whose outcome was lost with
    # the connection lets the high watermark pass a replica ZooKeeper may already list
    pending_isr: list[int] | None = None
    # DeleteRecords waiting for every live replica's log start: (offset it must reach, future)
    start_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    # the cluster's bookkeeping of the state this role comes from (unused on one node)
    state_version: int = -1
    controller_epoch: int = 0
    isr_write: asyncio.Task[None] | None = None
    # idempotent producers whose batch was refused NOT_ENOUGH_REPLICAS before it was appended:
    # producer id -> (producer epoch, that batch's first sequence) (ClusterReplicas.append_records)
    refused_sequences: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR and the pending change together (Kafka's maximalIsr)."""
        if self.pending_isr is None:
            return self.isr
        return sorted(set(self.isr) | set(self.pending_isr))

    def check_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320: a request's ``current_leader_epoch`` older than this replica's is
        FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH (-1: not checked)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.fenced_leader_epoch,
                             f"{self.topic}-{self.partition}: leader epoch {current_leader_epoch} is older than "
                             f"the current {self.leader_epoch}")
        raise KafkaError(ErrorCode.unknown_leader_epoch,
                         f"{self.topic}-{self.partition}: leader epoch {current_leader_epoch} is newer than "
                         f"this broker's {self.leader_epoch}")
