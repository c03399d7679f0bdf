"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, and retention (expiry).

Offsets are state over records: a commit returns OffsetCommit records and the runtime's replay
puts them in ``offsets``; deletion and expiry return tombstones. A commit for a group that does
not exist (generation -1: assign mode, or a group that only stores offsets) creates nothing
itself: replaying its first OffsetCommit record creates the group, Empty and without a protocol
type (Kafka's "simple consumer group").

Who may commit (Kafka's rules):
- generation -1 and no member id ("assign mode", or a group that only stores offsets): allowed
  when the group does not exist or is Empty;
- a member of the group: its member id and generation must match; REBALANCE_IN_PROGRESS while the
  group is CompletingRebalance; commits during PreparingRebalance are accepted.

Offsets in a transaction (TxnOffsetCommit, KIP-98/KIP-447): written as OffsetCommit records in a
transactional batch of the producer, they wait in ``pending`` (per producer id, per group) until
the transaction's marker reaches this partition: COMMIT makes them the committed offsets, unless a
plain commit of the same partition was written after them (the newest write wins, as Kafka keeps
the commit with the higher record offset); ABORT drops them. While a group has pending offsets for
a partition, a ``require_stable`` OffsetFetch answers UNSTABLE_OFFSET_COMMIT for it, and they do
not expire. Who may commit in a transaction (Kafka's validateOffsetCommit with isTransactional):
as OffsetCommit, but a classic group's state is not enforced (no REBALANCE_IN_PROGRESS), a commit
without member id and generation is accepted, and a stale consumer-protocol epoch is
ILLEGAL_GENERATION (the zombie of KIP-447 is fenced).

Retention (``offsets.retention.minutes``, KIP-211): offsets of a group with members never expire;
an Empty group's offsets expire that long after the group became empty (after their commit for a
group that never had members); a commit with an explicit retention time (OffsetCommit v2-v4)
expires at its own expire timestamp. An Empty group left with no offsets is deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gregor.coordinator.group.api import (
    CommitRequest,
    CommitResult,
    OffsetDeleteResult,
    OffsetFetchResult,
    TopicPartition,
)
from gregor.coordinator.group.consumer_group import ConsumerGroup, TopicId
from gregor.coordinator.group.context import ShardContext
from gregor.coordinator.group.model import ClassicGroup, GroupState
from gregor.coordinator.group.subscriptions import subscribed_topics as members_subscriptions
from gregor.coordinator.runtime.committed import ABSENT
from gregor.coordinator.runtime.result import CoordinatorResult, Record
from gregor.protocol.consumer_offsets import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue
from gregor.protocol.consumer_protocol import MalformedSubscription, decode_subscription
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.coordinator")

_OFFSET = "offset"  # the committed-reads key of a committed offset: (_OFFSET, group, topic, partition)

class OffsetManager:
    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx
        self.offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}
        # transactional offsets not yet committed or aborted: producer id -> group -> partition -> value
        self.pending: dict[int, dict[str, dict[TopicPartition, OffsetCommitValue]]] = {}
        self.open_transactions: dict[str, set[int]] = {}  # group -> producer ids with pending offsets

    # -- OffsetCommit ------------------------------------------------------------------------
    def commit(self, req: CommitRequest) -> CoordinatorResult[CommitResult]:
        error = self._refusal(req, transactional=False)
        if error is not None:
            return _every_partition(req, error)
        records, errors = self._offset_records(req, req.retention_ms, check_topics=True)
        return CoordinatorResult(records, errors)

    # -- TxnOffsetCommit ---------------------------------------------------------------------
    def commit_transactional(self, req: CommitRequest, producer_id: int,
                             producer_epoch: int) -> CoordinatorResult[CommitResult]:
        """TxnOffsetCommit: the offsets are written in the producer's transaction and become the
        group's committed offsets when its COMMIT marker arrives."""
        error = self._refusal(req, transactional=True)
        if error is not None:
            return _every_partition(req, error)
        records, errors = self._offset_records(req, -1, check_topics=False)
        return CoordinatorResult(records, errors, producer_id=producer_id, producer_epoch=producer_epoch)

    def _refusal(self, req: CommitRequest, transactional: bool) -> ErrorCode | None:
        """Why the committer may not commit (Kafka's validateOffsetCommit, ``transactional`` for
        TxnOffsetCommit); None: it may."""
        consumer = self.ctx.consumer_groups.get(req.group_id)
        if consumer is not None:
            error, why = _validate_consumer_member(consumer, req, self.ctx.topic_metadata,
                                                   self.ctx.config.offset_metadata_max_bytes)
            if error is None:
                return None
            if transactional:
                if error == ErrorCode.stale_member_epoch:
                    error = ErrorCode.illegal_generation  # Kafka answers a zombie's TxnOffsetCommit so
                log.info("[GroupId %s] TxnOffsetCommit of member %s at epoch %d refused: %s%s", req.group_id,
                         req.member_id, req.generation_id, error.name, f" ({why})" if why else "")
            elif error in (ErrorCode.stale_member_epoch, ErrorCode.illegal_generation):
                member = consumer.members[req.member_id]
                log.info("[GroupId %s] OffsetCommit of member %s refused: epoch %d, member epoch %d (%s)%s",
                         req.group_id, member.member_id, req.generation_id, member.member_epoch,
                         member.state.name, f": {why}" if why else "")
            return error
        group = self.ctx.groups.get(req.group_id)
        if group is None:
            # with a generation: a member of a group that no longer exists (or of an older
            # coordinator); without: a group that only stores offsets, created by replaying them
            return ErrorCode.illegal_generation if req.generation_id >= 0 else None
        return self._validate_transactional_member(group, req) if transactional else self._validate_member(group, req)

    def _offset_records(self, req: CommitRequest, retention_ms: int,
                        check_topics: bool) -> tuple[list[Record], CommitResult]:
        """The OffsetCommit records of an accepted commit and each partition's answer: metadata
        too large is refused, and (``check_topics``) a partition that does not exist."""
        now = self.ctx.clock()
        expire = now + retention_ms if retention_ms >= 0 else -1
        records: list[Record] = []
        errors: CommitResult = {}
        limit = self.ctx.config.offset_metadata_max_bytes
        for p in req.partitions:
            tp = (p.topic, p.partition)
            metadata = p.metadata or ""
            if len(metadata.encode()) > limit:
                errors[tp] = ErrorCode.offset_metadata_too_large
            elif check_topics and not self.ctx.topic_exists(p.topic, p.partition):
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                errors[tp] = ErrorCode.none
                records.append((OffsetCommitKey(req.group_id, p.topic, p.partition),
                                OffsetCommitValue(p.offset, metadata, now, p.leader_epoch, expire)))
        return records, errors

    @staticmethod
    def _validate_transactional_member(group: ClassicGroup, req: CommitRequest) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if req.generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            if group.is_static_member_fenced(req.member_id, req.group_instance_id):
                return ErrorCode.fenced_instance_id
            if req.member_id not in group.members:
                return ErrorCode.unknown_member_id
            if req.generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        return None  # the group's state is not enforced for transactional commits

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether a transaction holds offsets of ``tp`` for the group not yet committed or aborted."""
        for pid in self.open_transactions.get(group_id, ()):
            if tp in self.pending.get(pid, {}).get(group_id, {}):
                return True
        return False

    @staticmethod
    def _validate_member(group: ClassicGroup, req: CommitRequest) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            return ErrorCode.fenced_instance_id
        if req.generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None  # the group only stores offsets here
        if req.member_id not in group.members:
            return ErrorCode.unknown_member_id
        if req.generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return None

    # -- OffsetFetch -------------------------------------------------------------------------
    def fetch(self, group_id: str, partitions: list[TopicPartition] | None, member_id: str | None = None,
              member_epoch: int = -1, latest: bool = False) -> OffsetFetchResult:
        """Committed offsets. OffsetFetch v9 names the member asking: for a consumer-protocol group
        it must be a member at its epoch (Kafka's ConsumerGroup.validateOffsetFetch), else
        UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH; without a member (admin tools, older clients)
        anyone may read. Classic groups do not check the member, as in Kafka. The offsets are
        those at the partition's committed offset, or (``latest``) every one written."""
        consumer = self.ctx.consumer_groups.get(group_id)
        if consumer is not None and (member_id or member_epoch >= 0):  # Kafka: null and -1; "" too here
            member = consumer.members.get(member_id or "")
            if member is None:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} is not a member of group {group_id}.")
            if member_epoch != member.member_epoch and member.uses_classic_protocol:
                raise KafkaError(ErrorCode.illegal_generation,
                                 f"Generation {member_epoch} of classic member {member_id} is not its current "
                                 f"generation {member.member_epoch}.")
            if member_epoch != member.member_epoch:
                raise KafkaError(ErrorCode.stale_member_epoch,
                                 f"The member epoch {member_epoch} of member {member_id} is stale: the member "
                                 f"is at epoch {member.member_epoch}.")
        committed = self.offsets.get(group_id, {}) if latest else self.committed_offsets(group_id)
        rows: OffsetFetchResult = (sorted(committed.items()) if partitions is None
                                   else [(tp, committed.get(tp)) for tp in partitions])
        if latest and group_id in self.open_transactions:
            # a stable read: partitions a transaction holds offsets of wait for its marker
            rows = [(tp, ErrorCode.unstable_offset_commit if self.has_pending(group_id, tp) else v)
                    for tp, v in rows]
        return rows

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, OffsetCommitValue]:
        """The group's offsets at the committed offset of the partition: a commit whose record the
        in-sync replicas do not have yet is not visible (it may be lost with its leader)."""
        current = self.offsets.get(group_id, {})
        reads = self.ctx.committed_reads
        if not len(reads):
            return current
        out = dict(current)
        for key in reads.changed_keys():
            if isinstance(key, tuple) and key[0] == _OFFSET and key[1] == group_id:
                tp = (key[2], key[3])
                v = reads.value(key, ABSENT)
                if v is ABSENT:
                    out.pop(tp, None)
                else:
                    out[tp] = v
        return out

    # -- OffsetDelete ------------------------------------------------------------------------
    def delete(self, group_id: str, partitions: list[TopicPartition]) -> CoordinatorResult[OffsetDeleteResult]:
        """OffsetDelete: the offsets of topics the group's members do not subscribe to go;
        the others are GROUP_SUBSCRIBED_TO_TOPIC (a classic group's while it has members, a
        consumer-protocol group's by its members' subscriptions, names and regexes)."""
        consumer = self.ctx.consumer_groups.get(group_id)
        group = self.ctx.groups.get(group_id)
        if consumer is not None:
            subscribed = members_subscriptions(consumer.members.values(), consumer.resolved_regexes)
        elif group is None or group.is_in(GroupState.DEAD):
            return CoordinatorResult([], OffsetDeleteResult(ErrorCode.group_id_not_found))
        else:
            subscribed = set() if group.is_in(GroupState.EMPTY) else subscribed_topics(group)
        committed = self.offsets.get(group_id, {})
        records: list[Record] = []
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            if tp[0] in subscribed:
                errors[tp] = ErrorCode.group_subscribed_to_topic
                continue
            errors[tp] = ErrorCode.none
            if tp in committed:
                records.append((OffsetCommitKey(group_id, tp[0], tp[1]), None))
        return CoordinatorResult(records, OffsetDeleteResult(ErrorCode.none, errors))

    def tombstones_for_group(self, group_id: str) -> list[Record]:
        return [(OffsetCommitKey(group_id, t, p), None) for (t, p) in self.offsets.get(group_id, {})]

    def tombstones_for_topic(self, topic: str) -> list[Record]:
        return [(OffsetCommitKey(g, t, p), None) for g, offs in self.offsets.items() for (t, p) in offs if t == topic]

    # -- retention ---------------------------------------------------------------------------
    def expire(self) -> CoordinatorResult[int]:
        start = time.perf_counter()
        now = self.ctx.clock()
        retention = self.ctx.config.offsets_retention_ms
        records: list[Record] = []
        removed = 0
        for group_id in list(set(self.offsets) | set(self.ctx.groups)):
            group = self.ctx.groups.get(group_id)
            committed = self.offsets.get(group_id, {})
            if group is not None and not group.is_in(GroupState.EMPTY, GroupState.DEAD):
                continue  # a group with members keeps its offsets
            consumer = self.ctx.consumer_groups.get(group_id)
            if consumer is not None and consumer.members:
                continue
            expired = []
            for tp, v in committed.items():
                if group_id in self.open_transactions and self.has_pending(group_id, tp):
                    continue  # a transaction may still commit it
                if v.expire_timestamp >= 0:
                    due = now >= v.expire_timestamp
                elif group is not None and group.protocol_type and group.state_timestamp_ms >= 0:
                    due = now - group.state_timestamp_ms >= retention
                else:
                    due = now - v.commit_timestamp >= retention
                if due:
                    expired.append(tp)
            for tp in expired:
                records.append((OffsetCommitKey(group_id, tp[0], tp[1]), None))
            removed += len(expired)
            if group is not None and len(expired) == len(committed):
                records.append((GroupMetadataKey(group_id), None))
                log.info("Group %s transitioned to Dead in generation %d", group_id, group.generation_id)
        elapsed_ms = int((time.perf_counter() - start) * 1000)
        log.info("Removed %d expired offsets in %d milliseconds. (__consumer_offsets-%d)", removed, elapsed_ms,
                 self.ctx.partition)
        return CoordinatorResult(records, removed)

    # -- replay ------------------------------------------------------------------------------
    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if key.group in self.open_transactions:
            # written after a transaction's offsets of the same partition: the newer write wins
            self._supersede(key.group, (key.topic, key.partition))
        self._put(key.group, (key.topic, key.partition), value)

    def _put(self, group_id: str, tp: TopicPartition, value: OffsetCommitValue | None) -> None:
        reads = self.ctx.committed_reads
        if reads.pending >= 0:
            reads.changing((_OFFSET, group_id, tp[0], tp[1]), self.offsets.get(group_id, {}).get(tp, ABSENT))
        if value is None:
            group_offsets = self.offsets.get(group_id)
            if group_offsets is not None:
                group_offsets.pop(tp, None)
                if not group_offsets:
                    del self.offsets[group_id]
            return
        self.offsets.setdefault(group_id, {})[tp] = value
        if group_id not in self.ctx.groups and group_id not in self.ctx.consumer_groups:
            # offsets of a group without membership: the group exists, Empty, as in Kafka
            self.ctx.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=-1)

    def _supersede(self, group_id: str, tp: TopicPartition) -> None:
        for pid in list(self.open_transactions.get(group_id, ())):
            by_group = self.pending.get(pid, {})
            offsets = by_group.get(group_id)
            if offsets is not None:
                offsets.pop(tp, None)

    def replay_transactional(self, producer_id: int, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        """An OffsetCommit record of producer ``producer_id``'s transaction: pending until its marker."""
        if value is None:  # not written by Kafka's coordinators; applied as a plain tombstone
            self.replay(key, value)
            return
        self.pending.setdefault(producer_id, {}).setdefault(key.group, {})[(key.topic, key.partition)] = value
        self.open_transactions.setdefault(key.group, set()).add(producer_id)
        if key.group not in self.ctx.groups and key.group not in self.ctx.consumer_groups:
            self.ctx.groups[key.group] = ClassicGroup(key.group, state_timestamp_ms=-1)

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended on this partition: its offsets are committed or dropped."""
        by_group = self.pending.pop(producer_id, None)
        if by_group is None:
            return
        for group_id, offsets in by_group.items():
            open_ = self.open_transactions.get(group_id)
            if open_ is not None:
                open_.discard(producer_id)
                if not open_:
                    del self.open_transactions[group_id]
            if commit:
                for tp, value in offsets.items():
                    self._put(group_id, tp, value)


def _every_partition(req: CommitRequest, code: ErrorCode) -> CoordinatorResult[CommitResult]:
    """A commit refused as a whole: ``code`` for each of its partitions, nothing written."""
    return CoordinatorResult([], {(p.topic, p.partition): code for p in req.partitions})


def _validate_consumer_member(group: ConsumerGroup, req: CommitRequest,
                              topic_metadata: Callable[[str], tuple[TopicId, int] | None],
                              metadata_limit: int) -> tuple[ErrorCode | None, str]:
    """A commit to a consumer-protocol group (Kafka's ConsumerGroup.validateOffsetCommit): from
    outside the group (epoch -1) only while it is empty; else from a member. A classic member of
    the group commits at its generation (its member epoch) with any version, and a wrong one is
    ILLEGAL_GENERATION. A consumer-protocol member needs OffsetCommit v9 (the epoch); its epoch
    may be older than its current one (KIP-1251, Kafka 4.3: a commit sent just before the member
    moved on to a new epoch) as long as every partition committed is one it holds and was given
    at or before that epoch; a newer epoch, or a partition it does not hold or got later, is
    STALE_MEMBER_EPOCH for the whole request."""
    if req.generation_id < 0 and not group.members:
        return None, ""
    member = group.members.get(req.member_id)
    if member is None:
        return ErrorCode.unknown_member_id, ""
    if member.uses_classic_protocol:
        return (ErrorCode.illegal_generation, "") if req.generation_id != member.member_epoch else (None, "")
    if req.api_version < 9:
        return ErrorCode.unsupported_version, ""
    received = req.generation_id
    if received == member.member_epoch:
        return None, ""
    if received > member.member_epoch:
        return ErrorCode.stale_member_epoch, (f"the received member epoch {received} is larger than the member "
                                              f"epoch {member.member_epoch}")
    for p in req.partitions:
        if len((p.metadata or "").encode()) > metadata_limit:
            continue  # answered OFFSET_METADATA_TOO_LARGE, not checked (as Kafka)
        meta = topic_metadata(p.topic)
        assigned_at = member.assignment_epoch(meta[0], p.partition) if meta is not None else None
        if assigned_at is None:
            return ErrorCode.stale_member_epoch, f"partition {p.topic}-{p.partition} is not assigned to the member"
        if received < assigned_at:
            return ErrorCode.stale_member_epoch, (f"partition {p.topic}-{p.partition} was assigned at epoch "
                                                  f"{assigned_at}, after the received epoch {received}")
    return None, ""


def subscribed_topics(group: ClassicGroup) -> set[str]:
    """Topics in the members' consumer-protocol subscriptions; unreadable metadata counts as no topics."""
    topics: set[str] = set()
    if group.protocol_type != "consumer":
        return topics
    for m in group.members.values():
        try:
            topics.update(decode_subscription(m.metadata_for(group.protocol_name)).topics)
        except MalformedSubscription:
            continue
    return topics
