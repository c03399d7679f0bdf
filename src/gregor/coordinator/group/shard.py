"""One shard of the group coordinator: every group of one ``__consumer_offsets`` partition.

Composes the GroupManager (classic membership) and the OffsetManager, answers the read-only
APIs, and replays records. Implements the runtime's CoordinatorShard protocol; ``RECORD_SERDE``
is the record serde the runtime is built with for it.

Replay is the only way persisted state changes, except for classic membership, which the
GroupManager applies in memory itself and writes with ``replay_records=False`` (as Kafka does).
So a commit's offsets, and the group that only stores offsets (Kafka's "simple consumer group"),
come into being when the OffsetCommit record is replayed; deletion and expiry take effect when
their tombstones are; and replaying a GroupMetadata record (only when a partition is loaded)
builds the group from it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gregor.assignment.steering import Steering
from gregor.coordinator.group.api import (
    CommitRequest,
    CommitResult,
    CommittedOffset,
    ConsumerGroupView,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    DeleteGroupsResult,
    GroupDescription,
    GroupPhase,
    GroupSteering,
    GroupSummary,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    ListedGroup,
    MemberView,
    OffsetDeleteResult,
    OffsetFetchResult,
    SyncRequest,
    SyncResult,
    TopicPartition,
)
from gregor.coordinator.group.classic_members import ClassicMembers
from gregor.coordinator.group.consumer_group import ConsumerGroup, TopicId
from gregor.coordinator.group.consumer_group_manager import CONSUMER_GROUP_KEYS, ConsumerGroupManager
from gregor.coordinator.group.context import GroupConfig, ShardContext
from gregor.coordinator.group.group_manager import GroupManager
from gregor.coordinator.group.migration import Downgrade, Upgrade, empty_consumer_group_tombstones
from gregor.coordinator.group.model import ClassicGroup, GroupState, Member
from gregor.coordinator.group.offset_manager import OffsetManager
from gregor.coordinator.group.share_group import ShareGroup
from gregor.coordinator.group.share_group_manager import (
    ShareGroupManager,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
)
from gregor.coordinator.group.subscriptions import TopicCatalogue
from gregor.coordinator.runtime.committed import CommittedReads
from gregor.coordinator.runtime.result import CoordinatorResult, Record
from gregor.coordinator.runtime.shard import Completion, RecordSerde
from gregor.coordinator.runtime.timer import Timer
from gregor.protocol.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from gregor.protocol.consumer_protocol import encode_assignment
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_group_records import SHARE_GROUP_KEYS

log = logging.getLogger("gregor.coordinator")

EXPIRY_TIMER = "offsets-expiration"

RECORD_SERDE = RecordSerde(encode_key, encode_value, decode_key, decode_value, RecordFormatError)


@dataclass(frozen=True)
class ShardCollaborators:
    """What a shard is built with besides its configuration, clock and timer: the topics it may
    commit to and subscribe to, the groups' own settings (group configs, steering), the topics
    consumer groups' regular expressions match, and who hears of membership changes (metrics
    attribution)."""

    topic_exists: Callable[[str, int], bool] = lambda topic, partition: True
    topic_metadata: Callable[[str], tuple[TopicId, int] | None] = lambda name: None
    topic_hash: Callable[[str], int] | None = None  # None: from topic_metadata, without racks
    group_settings: Callable[[str], dict[str, Any]] = lambda group_id: {}
    catalogue: TopicCatalogue | None = None
    on_membership_change: Callable[[], object] | None = None


class GroupCoordinatorShard:
    def __init__(self, partition: int, config: GroupConfig, clock: Any, timer: Timer,
                 collaborators: ShardCollaborators | None = None) -> None:
        c = collaborators if collaborators is not None else ShardCollaborators()
        self.ctx = ShardContext(partition, config, clock, timer, topic_exists=c.topic_exists,
                                topic_metadata=c.topic_metadata, topic_hash_of=c.topic_hash,
                                group_settings=c.group_settings,
                                on_membership_change=c.on_membership_change)
        self.groups_mgr = GroupManager(self.ctx)
        self.offsets_mgr = OffsetManager(self.ctx)
        downgrade = Downgrade(self.ctx, self.groups_mgr)
        self.consumer_mgr = ConsumerGroupManager(self.ctx, c.catalogue, Upgrade(self.ctx), downgrade)
        self.classic_members = ClassicMembers(self.ctx, self.consumer_mgr, downgrade)
        self.share_mgr = ShareGroupManager(self.ctx)

    @property
    def partition(self) -> int:
        return self.ctx.partition

    @property
    def committed_reads(self) -> CommittedReads:
        return self.ctx.committed_reads

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.ctx.groups

    @property
    def consumer_groups(self) -> dict[str, ConsumerGroup]:
        return self.ctx.consumer_groups

    @property
    def share_groups(self) -> dict[str, ShareGroup]:
        return self.ctx.share_groups

    # -- writes (each returns a CoordinatorResult) --------------------------------------------
    def join_group(self, req: JoinRequest) -> CoordinatorResult[JoinResult]:
        if req.group_id in self.share_groups:  # a group id names one group (Kafka: not a classic group)
            return CoordinatorResult([], JoinResult(error=ErrorCode.inconsistent_group_protocol,
                                                    member_id=req.member_id))
        consumer = self.consumer_groups.get(req.group_id)
        if consumer is None:
            return self.groups_mgr.join_group(req)
        # a group id names one group: a classic JoinGroup never creates a second group beside a
        # consumer-protocol one (Kafka: classicGroupJoin)
        if consumer.members:
            return self.classic_members.join(consumer, req)
        cfg = self.ctx.config
        if req.member_id or not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return self.groups_mgr.join_group(req)  # refused as for a group that does not exist
        records = empty_consumer_group_tombstones(self.ctx, self.consumer_mgr, req.group_id)
        result = self.groups_mgr.join_group(req)
        return CoordinatorResult(records + list(result.records), result.response, result.replay_records)

    def sync_group(self, req: SyncRequest) -> CoordinatorResult[SyncResult]:
        consumer = self.consumer_groups.get(req.group_id)
        if consumer is not None and req.group_id:
            if not consumer.members:
                return CoordinatorResult([], SyncResult(error=ErrorCode.unknown_member_id))
            return self.classic_members.sync(consumer, req)
        return self.groups_mgr.sync_group(req)

    def heartbeat(self, req: HeartbeatRequest) -> CoordinatorResult[ErrorCode]:
        consumer = self.consumer_groups.get(req.group_id)
        if consumer is not None and req.group_id:
            return self.classic_members.heartbeat(consumer, req)
        return self.groups_mgr.heartbeat(req)

    def leave_group(self, req: LeaveRequest) -> CoordinatorResult[LeaveResult]:
        consumer = self.consumer_groups.get(req.group_id)
        if consumer is not None and req.group_id:
            return self.classic_members.leave(consumer, req)
        return self.groups_mgr.leave_group(req)

    def consumer_group_heartbeat(self, req: ConsumerHeartbeatRequest) -> CoordinatorResult[ConsumerHeartbeatResult]:
        return self.consumer_mgr.heartbeat(req)

    def share_group_heartbeat(self, req: ShareHeartbeatRequest) -> CoordinatorResult[ShareHeartbeatResult]:
        return self.share_mgr.heartbeat(req)

    def share_offsets_changed(self, group_id: str, added: dict[TopicId, tuple[str, frozenset[int]]],
                              removed: set[TopicId]) -> CoordinatorResult[ErrorCode]:
        return self.share_mgr.offsets_changed(group_id, added, removed)

    def steering_changed(self, group_id: str) -> CoordinatorResult[None]:
        if group_id in self.share_groups:
            return self.share_mgr.steering_changed(group_id)
        return self.consumer_mgr.steering_changed(group_id)

    def steering_problems(self, group_id: str, wanted: Steering) -> list[str]:
        """Why ``wanted`` cannot steer the group's members now (empty: it can)."""
        if group_id in self.share_groups:
            return self.share_mgr.steering_problems(group_id, wanted)
        return self.consumer_mgr.steering_problems(group_id, wanted)

    def commit_offsets(self, req: CommitRequest) -> CoordinatorResult[CommitResult]:
        result = self.offsets_mgr.commit(req)
        if req.member_id and result.records:
            self.groups_mgr.touch(req.group_id, req.member_id)
        return result

    def txn_commit_offsets(self, req: CommitRequest, producer_id: int,
                           producer_epoch: int) -> CoordinatorResult[CommitResult]:
        return self.offsets_mgr.commit_transactional(req, producer_id, producer_epoch)

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> CoordinatorResult[OffsetDeleteResult]:
        return self.offsets_mgr.delete(group_id, partitions)

    def delete_groups(self, group_ids: list[str]) -> CoordinatorResult[DeleteGroupsResult]:
        records: list[Record] = []
        errors: DeleteGroupsResult = {}
        for gid in group_ids:
            share = self.share_groups.get(gid)
            if share is not None:
                if share.members:
                    errors[gid] = ErrorCode.non_empty_group
                else:
                    records += self.offsets_mgr.tombstones_for_group(gid)
                    records += self.share_mgr.delete_group(gid)
                    errors[gid] = ErrorCode.none
                    log.info("Share group %s deleted", gid)
                continue
            consumer = self.consumer_groups.get(gid)
            if consumer is not None:
                if consumer.members:
                    errors[gid] = ErrorCode.non_empty_group
                else:
                    records += self.offsets_mgr.tombstones_for_group(gid)
                    records += self.consumer_mgr.delete_group(gid)
                    errors[gid] = ErrorCode.none
                    log.info("Consumer group %s deleted", gid)
                continue
            group = self.groups.get(gid)
            if group is None or group.is_in(GroupState.DEAD):
                errors[gid] = ErrorCode.group_id_not_found
            elif not group.is_in(GroupState.EMPTY):
                errors[gid] = ErrorCode.non_empty_group
            else:
                records += self.offsets_mgr.tombstones_for_group(gid)
                records.append((GroupMetadataKey(gid), None))
                errors[gid] = ErrorCode.none
                log.info("Group %s deleted with %d offsets", gid, len(self.offsets_mgr.offsets.get(gid, {})))
        return CoordinatorResult(records, errors)

    def delete_topic_offsets(self, topic: str) -> CoordinatorResult[int]:
        records = self.offsets_mgr.tombstones_for_topic(topic)
        return CoordinatorResult(records, len(records))

    def expire_offsets(self) -> CoordinatorResult[int]:
        result = self.offsets_mgr.expire()
        self._schedule_expiry()
        return result

    def _schedule_expiry(self) -> None:
        self.ctx.timer.schedule(EXPIRY_TIMER, self.ctx.config.offsets_retention_check_interval_ms,
                                self.expire_offsets)

    # -- reads -------------------------------------------------------------------------------
    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, member_id: str | None = None,
                      member_epoch: int = -1, latest: bool = False) -> OffsetFetchResult:
        """Committed offsets at the partition's committed offset, or (``latest``) as written."""
        return self.offsets_mgr.fetch(group_id, partitions, member_id, member_epoch, latest)

    def describe_group(self, group_id: str) -> GroupDescription:
        if group_id in self.consumer_groups:  # Kafka: DescribeGroups is for classic groups
            return GroupDescription(group_id, ErrorCode.group_id_not_found, GroupState.DEAD.value, "", "", [])
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, ErrorCode.none, GroupState.DEAD.value, "", "", [])
        stable = group.is_in(GroupState.STABLE)
        members = [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
             "client_host": m.client_host,
             "member_metadata": m.metadata_for(group.protocol_name) if stable else b"",
             "member_assignment": m.assignment if stable else b""}
            for m in group.members.values()
        ]
        return GroupDescription(group_id, ErrorCode.none, group.state.value, group.protocol_type or "",
                                (group.protocol_name or "") if stable else "", members)

    def consumer_group_view(self, group_id: str) -> ConsumerGroupView | None:
        """The consumer-protocol group (None: no group of that id); a classic group of that id is
        GROUP_ID_NOT_FOUND with Kafka's message."""
        group = self.consumer_groups.get(group_id)
        if group is None and group_id in self.groups and not self.groups[group_id].is_in(GroupState.DEAD):
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        return None if group is None else self.consumer_mgr.view(group)

    def list_groups(self, states: set[str] | None) -> list[ListedGroup]:
        """Groups that are not Dead; ``states``: lower-case state names to keep (None: all)."""
        out = []
        for g in self.groups.values():
            if g.is_in(GroupState.DEAD):
                continue
            if states and g.state.value.lower() not in states:
                continue
            out.append(ListedGroup(g.group_id, g.protocol_type or "", g.state.value))
        for c in self.consumer_groups.values():
            if states and c.state.value.lower() not in states:
                continue
            out.append(ListedGroup(c.group_id, "consumer", c.state.value, "consumer"))
        for sg in self.share_groups.values():
            if states and sg.state.lower() not in states:
                continue
            out.append(ListedGroup(sg.group_id, "share", sg.state, "share"))
        return out

    # -- read-only views (metrics, telemetry, fetch attribution) --------------------------------
    def summaries(self) -> Iterator[GroupSummary]:
        """Every group's state, classic groups first, then consumer-protocol and share groups,
        each by id."""
        for group_id, g in sorted(self.groups.items()):
            yield GroupSummary(group_id, g.state.value, len(g.members), g.generation_id, g.rebalances,
                               g.last_rebalance_ms)
        for group_id, c in sorted(self.consumer_groups.items()):
            yield GroupSummary(group_id, c.state.value, len(c.members), c.group_epoch, c.rebalances, -1)
        for group_id, sg in sorted(self.share_groups.items()):
            yield GroupSummary(group_id, sg.state, len(sg.members), sg.group_epoch, 0, -1)

    def phase_of(self, group_id: str) -> GroupPhase | None:
        """A consumer-protocol group's phase and who holds it up (None: no such group here)."""
        c = self.consumer_groups.get(group_id)
        if c is None:
            return None
        phase, holders = c.phase()
        return GroupPhase(group_id, phase, c.state_since_ms,
                          [(mid, c.members[mid].client_id, why, since) for mid, why, since in holders])

    def phases(self) -> Iterator[GroupPhase]:
        for group_id in sorted(self.consumer_groups):
            phase = self.phase_of(group_id)
            if phase is not None:
                yield phase

    def steerings(self) -> Iterator[GroupSteering]:
        """The steering of every consumer-protocol group coordinated here that has any."""
        for group_id in sorted(self.consumer_groups):
            wanted = self.consumer_mgr.steering_of(group_id)
            if wanted.empty:
                continue
            done = self.consumer_groups[group_id].steered
            yield GroupSteering(
                group_id, wanted.frozen,
                len(done.pinned) if done is not None else 0, len(done.waiting) if done is not None else 0,
                len(done.fell_back) if done is not None else 0, len(done.isolated) if done is not None else 0,
                len(done.held_back) if done is not None else 0)

    def committed(self) -> Iterator[CommittedOffset]:
        """Every committed offset, by group, topic and partition."""
        for group_id, offsets in sorted(self.offsets_mgr.offsets.items()):
            for (topic, partition), v in sorted(offsets.items()):
                yield CommittedOffset(group_id, topic, partition, v.offset, v.commit_timestamp)

    def committed_position(self, group_id: str, topic: str, partition: int) -> tuple[int, int] | None:
        """The group's committed offset of the partition and when it was committed (ms)."""
        v = self.offsets_mgr.committed_offsets(group_id).get((topic, partition))
        return (v.offset, v.commit_timestamp) if v is not None else None

    def member_views(self) -> Iterator[MemberView]:
        """The members of the groups that have members, with what each is assigned (classic
        groups: the leader's assignment; consumer-protocol groups: what each member holds), for
        fetch attribution."""
        for group in self.groups.values():
            if group.protocol_type != "consumer" or group.is_in(GroupState.DEAD, GroupState.EMPTY):
                continue
            for m in group.members.values():
                yield MemberView(group.group_id, m.client_id, m.client_host.lstrip("/"), m.assignment, m.member_id)
        for cg in self.consumer_groups.values():
            names = {tid: name for name, (tid, _n) in cg.subscription_metadata.items()}
            for cm in cg.members.values():
                held = [(names[t], sorted(ps)) for t, ps in cm.assigned.items() if t in names]
                yield MemberView(cg.group_id, cm.client_id, cm.client_host.lstrip("/"), encode_assignment(held),
                                 cm.member_id)

    def group_count(self) -> int:
        return len(self.groups) + len(self.consumer_groups) + len(self.share_groups)

    # -- replay ------------------------------------------------------------------------------
    def replay(self, key: Any, value: Any) -> None:
        if isinstance(key, OffsetCommitKey):
            self.offsets_mgr.replay(key, value)
        elif isinstance(key, GroupMetadataKey):
            self._replay_group(key, value)
        elif isinstance(key, CONSUMER_GROUP_KEYS):
            self.consumer_mgr.replay(key, value)
        elif isinstance(key, SHARE_GROUP_KEYS):
            self.share_mgr.replay(key, value)

    def replay_transactional(self, producer_id: int, producer_epoch: int, key: Any, value: Any) -> None:
        if isinstance(key, OffsetCommitKey):
            self.offsets_mgr.replay_transactional(producer_id, key, value)
        else:  # only offsets are written in transactions; anything else applies as written
            self.replay(key, value)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        self.offsets_mgr.replay_end_transaction(producer_id, commit)

    def _replay_group(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        if value is None:
            group = self.groups.pop(key.group, None)
            if group is not None:
                group.state = GroupState.DEAD
                self.ctx.membership_changed()
            return
        # A live group's own writes are not replayed (replay_records=False): a GroupMetadata value
        # arrives here only while the partition loads, and the group is what the record says.
        group = ClassicGroup(key.group, protocol_type=value.protocol_type or None,
                             protocol_name=value.protocol, generation_id=value.generation,
                             leader_id=value.leader, state_timestamp_ms=value.current_state_timestamp)
        for m in value.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                            m.session_timeout, value.protocol_type, [(value.protocol or "", m.subscription)],
                            assignment=m.assignment)
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        self.groups[key.group] = group

    def on_loaded(self) -> None:
        # a group that has offsets but no group metadata exists, Empty (Kafka's loader does the same)
        for group_id in self.offsets_mgr.offsets:
            if group_id not in self.groups and group_id not in self.consumer_groups \
                    and group_id not in self.share_groups:
                self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=-1)
        self.groups_mgr.on_loaded()
        self.consumer_mgr.on_loaded()
        self.share_mgr.on_loaded()
        self._schedule_expiry()
        log.debug("__consumer_offsets-%d holds %d groups", self.partition, len(self.groups))

    def on_unloaded(self) -> None:
        self.groups_mgr.on_unloaded()
        self.ctx.committed_reads.clear()

    def take_completions(self) -> Sequence[Completion]:
        ctx = self.ctx
        out = ctx.completions
        if not out:
            return ()  # most operations defer nothing: no list to swap
        ctx.completions = []
        return out
