"""Classic members in a consumer-protocol group (KIP-848's mixed groups; Kafka: GroupMetadataManager's
classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup,
classicGroupLeaveToConsumerGroup).

A consumer (JoinGroup protocol type "consumer") that speaks the classic protocol joins a group that
consumer-protocol members hold, and the group serves it as one of its members:

- **JoinGroup** is its heartbeat with a full request: its subscription and the partitions it owns
  come from its ConsumerProtocolSubscription; the group epoch, the server-side target assignment
  and its reconciliation follow exactly as for a consumer-protocol member
  (``ConsumerGroupManager.advance``). The answer makes it a follower (no leader, no members to
  assign) at generation = its member epoch.
- **SyncGroup** answers its current assignment as a ConsumerProtocolAssignment. It never lists a
  partition another member still holds, so a partition never has two owners.
- **Heartbeat** answers REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch moved
  on, it must revoke partitions (a cooperative member gives up what its next SyncGroup no longer
  lists, then rejoins), or partitions it waited for were released. A member that does not rejoin
  (or sync) within its rebalance timeout is fenced; its session timeout is its JoinGroup's.
- **LeaveGroup** removes it, with a new group epoch.

The member is written as ConsumerGroupMemberMetadata with its classicMemberMetadata (session
timeout, protocols), so a reloaded partition serves it on.
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import Protocol

from gregor.coordinator.group.api import (
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    MemberLeft,
    SyncRequest,
    SyncResult,
)
from gregor.coordinator.group.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicId,
)
from gregor.coordinator.group.consumer_group_manager import (
    ConsumerGroupManager,
    classic_join_key,
    classic_sync_key,
    current_assignment_record,
    member_record,
    removal_records,
    target_record,
)
from gregor.coordinator.group.context import ShardContext
from gregor.coordinator.group.model import ClassicGroup
from gregor.coordinator.runtime.result import CoordinatorResult, Record
from gregor.protocol.consumer_offsets import ClassicMemberMetadata
from gregor.protocol.consumer_protocol import (
    MalformedSubscription,
    Subscription,
    decode_subscription,
    encode_assignment,
)
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.coordinator")

PROTOCOL_TYPE = "consumer"


def decodable(protocols: list[tuple[str, bytes]]) -> bool:
    try:
        for _name, metadata in protocols:
            decode_subscription(metadata)
        return bool(protocols)
    except MalformedSubscription:
        return False


def encode_assignment_for(member: ConsumerMember, assigned: Assignment, names: dict[TopicId, str]) -> bytes:
    """The member's assignment as a ConsumerProtocolAssignment, in the version of its subscription
    (versions 0-3 have the same fields)."""
    topics = sorted((names[t], sorted(ps)) for t, ps in assigned.items() if t in names and ps)
    data = encode_assignment(topics)
    version = 0
    if member.classic is not None and member.classic.supported_protocols:
        try:
            version = min(decode_subscription(member.classic.supported_protocols[0][1]).version, 3)
        except MalformedSubscription:
            version = 0
    return struct.pack(">h", version) + data[2:]


# -- the classic APIs on a consumer-protocol group ----------------------------------------------
class DowngradeOnReplace(Protocol):
    """A classic static member took the place of the last consumer-protocol member: the group may
    become a classic group (migration.Downgrade)."""

    def replaced(self, consumer: ConsumerGroupManager, group: ConsumerGroup, replaced: ConsumerMember,
                 joining: ConsumerMember, resubscribed: bool, records: list[Record]) -> ClassicGroup | None: ...


class ClassicMembers:
    def __init__(self, ctx: ShardContext, consumer: ConsumerGroupManager,
                 downgrade: DowngradeOnReplace | None = None) -> None:
        self.ctx = ctx
        self.consumer = consumer
        self.downgrade = downgrade  # migration.Downgrade (None: a group is never downgraded here)

    @staticmethod
    def _names_of(group: ConsumerGroup) -> dict[TopicId, str]:
        return {tid: name for name, (tid, _n) in group.subscription_metadata.items()}

    def _owned(self, sub: Subscription) -> Assignment:
        owned: dict[TopicId, set[int]] = {}
        for topic, partitions in sub.owned:
            meta = self.ctx.topic_metadata(topic)
            if meta is not None:
                owned.setdefault(meta[0], set()).update(partitions)
        return {t: frozenset(ps) for t, ps in owned.items() if ps}

    def _member_of(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember, then the member must be a classic one."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member with instance id {instance_id} is not a member of group {group.group_id}.")
            if member.member_id != member_id:
                raise KafkaError(ErrorCode.fenced_instance_id,
                                 f"Static member {member_id} with instance id {instance_id} was fenced by member "
                                 f"{member.member_id}.")
        if not member.uses_classic_protocol:
            raise KafkaError(ErrorCode.unknown_member_id,
                             f"Member {member.member_id} does not use the classic protocol.")
        return member

    # -- JoinGroup ----------------------------------------------------------------------------
    def join(self, group: ConsumerGroup, req: JoinRequest) -> CoordinatorResult[JoinResult]:
        try:
            return self._join(group, req)
        except KafkaError as e:
            log.info("[GroupId %s] JoinGroup of classic member %s (client %s %s) to the consumer group: %s: %s",
                     req.group_id, req.member_id, req.client_id, req.client_host, e.code.name.upper(), e.message)
            return CoordinatorResult([], JoinResult(error=e.code, member_id=req.member_id))

    def _join(self, group: ConsumerGroup, req: JoinRequest) -> CoordinatorResult[JoinResult]:
        cfg = self.ctx.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            raise KafkaError(ErrorCode.invalid_session_timeout, "")
        unknown = req.member_id == ""
        member_id = str(uuid.uuid4()) if unknown else req.member_id
        if len(group.members) >= cfg.consumer_max_size and member_id not in group.members \
                and group.static_member(req.group_instance_id) is None:
            raise KafkaError(ErrorCode.group_max_size_reached,
                             f"The consumer group has reached its maximum capacity of {cfg.consumer_max_size} "
                             f"members.")
        common = group.classic_protocols()
        names = {name for name, _ in req.protocols}
        if req.protocol_type != PROTOCOL_TYPE or not names or (common is not None and not common & names):
            raise KafkaError(ErrorCode.inconsistent_group_protocol,
                             f"Member {member_id}'s protocols are not supported.")
        try:
            sub = decode_subscription(req.protocols[0][1])
        except MalformedSubscription as e:
            raise KafkaError(ErrorCode.inconsistent_group_protocol,
                             f"Member {member_id}'s ConsumerProtocolSubscription cannot be read: {e}.") from e
        if unknown and req.require_known_member_id and req.group_instance_id is None:
            log.info("[GroupId %s] Dynamic member with unknown member id joins the consumer group. Created a "
                     "new member id %s and requesting the member to rejoin with this id.", group.group_id, member_id)
            return CoordinatorResult([], JoinResult(error=ErrorCode.member_id_required, member_id=member_id))
        records: list[Record] = []
        replaced = group.static_member(req.group_instance_id)
        member = self._joining_member(group, req, member_id, unknown, records)
        if replaced is not None and replaced.member_id == member_id:
            replaced = None
        updated = member.with_subscription(
            instance_id=req.group_instance_id, rack_id=sub.rack_id or member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms, server_assignor=None,
            subscribed_topic_names=tuple(sorted(set(sub.topics))), subscribed_topic_regex=None,
            client_id=req.client_id, client_host=req.client_host,
            classic=ClassicMemberMetadata(req.session_timeout_ms, list(req.protocols)))
        owned = self._owned(sub)
        reconciled = self.consumer.advance(group, member, updated, owned, False, records)
        if replaced is not None and (downgraded := self._downgrade(group, replaced, member, reconciled, records)):
            return CoordinatorResult(records, JoinResult(
                error=ErrorCode.none, member_id=member_id, generation_id=downgraded.generation_id,
                protocol_type=PROTOCOL_TYPE, protocol_name=req.protocols[0][0], leader="", members=[]), False)
        group.reported[member_id] = owned
        timer = self.ctx.timer
        timer.cancel(classic_join_key(group.group_id, member_id))
        self.consumer._schedule_session_timeout(group.group_id, member_id, req.session_timeout_ms)
        timer.schedule(classic_sync_key(group.group_id, member_id), max(req.rebalance_timeout_ms, 0),
                       lambda: self.consumer.fence(group.group_id, member_id,
                                                   "the member failed to sync within timeout"))
        protocol = req.protocols[0][0]
        log.debug("[GroupId %s] Classic member %s joined at epoch %d (%s)", group.group_id, member_id,
                  reconciled.member_epoch, reconciled.state.name)
        return CoordinatorResult(records, JoinResult(
            error=ErrorCode.none, member_id=member_id, generation_id=reconciled.member_epoch,
            protocol_type=PROTOCOL_TYPE, protocol_name=protocol, leader="", members=[]))

    def _downgrade(self, group: ConsumerGroup, replaced: ConsumerMember, member: ConsumerMember,
                   reconciled: ConsumerMember, records: list[Record]) -> ClassicGroup | None:
        """The static member replaced the last consumer-protocol member: the group may become a
        classic group (Kafka: validateOnlineDowngradeWithReplacedMemberId; migration.py). Its
        state is then applied in memory and the records are not replayed."""
        if self.downgrade is None:
            return None
        resubscribed = reconciled.subscribed_topic_names != member.subscribed_topic_names
        return self.downgrade.replaced(self.consumer, group, replaced, reconciled, resubscribed, records)

    def _joining_member(self, group: ConsumerGroup, req: JoinRequest, member_id: str, unknown: bool,
                        records: list[Record]) -> ConsumerMember:
        if req.group_instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                log.info("[GroupId %s] Classic member %s joins the consumer group", group.group_id, member_id)
                return ConsumerMember(member_id)
            if not member.uses_classic_protocol:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} does not use the classic protocol.")
            return member
        existing = group.static_member(req.group_instance_id)
        if existing is None and not unknown:
            raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {req.group_instance_id} is unknown.")
        if existing is None:
            log.info("[GroupId %s] Static classic member %s with instance id %s joins the consumer group",
                     group.group_id, member_id, req.group_instance_id)
            return ConsumerMember(member_id)
        if existing.member_id == member_id:
            if not existing.uses_classic_protocol:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {member_id} does not use the classic protocol.")
            return existing
        if not unknown:
            raise KafkaError(ErrorCode.fenced_instance_id,
                             f"Static member {member_id} with instance id {req.group_instance_id} was fenced by "
                             f"member {existing.member_id}.")
        # a static member restarted: it takes the old member's place and target (KIP-345)
        new = existing.with_subscription(member_id=member_id)
        records += removal_records(group.group_id, existing.member_id)
        records.append(member_record(group.group_id, new))
        records.append(target_record(group.group_id, member_id, group.target_of(existing.member_id)))
        records.append(current_assignment_record(group.group_id, new))
        self.consumer._cancel_timers(group.group_id, existing.member_id)
        log.info("[GroupId %s] Static member with instance id %s rejoins as %s, replacing %s", group.group_id,
                 req.group_instance_id, member_id, existing.member_id)
        return new

    # -- SyncGroup ----------------------------------------------------------------------------
    def sync(self, group: ConsumerGroup, req: SyncRequest) -> CoordinatorResult[SyncResult]:
        try:
            member = self._member_of(group, req.member_id, req.group_instance_id)
            if req.generation_id != member.member_epoch:
                raise KafkaError(ErrorCode.illegal_generation,
                                 f"The request generation id {req.generation_id} is not equal to the member epoch "
                                 f"{member.member_epoch} of member {member.member_id}.")
            assert member.classic is not None
            protocol = member.classic.supported_protocols[0][0]
            if req.protocol_type is not None and req.protocol_type != PROTOCOL_TYPE:
                raise KafkaError(ErrorCode.inconsistent_group_protocol,
                                 f"The protocol type {req.protocol_type} from member {member.member_id} request "
                                 f"is not equal to the group protocol type {PROTOCOL_TYPE}.")
            if req.protocol_name is not None and req.protocol_name != protocol:
                raise KafkaError(ErrorCode.inconsistent_group_protocol,
                                 f"The protocol name {req.protocol_name} from member {member.member_id} request "
                                 f"is not equal to the protocol name {protocol} returned in the join response.")
            self._raise_if_rebalancing(group, member)
        except KafkaError as e:
            log.debug("[GroupId %s] SyncGroup of classic member %s: %s: %s", req.group_id, req.member_id,
                      e.code.name.upper(), e.message)
            return CoordinatorResult([], SyncResult(error=e.code))
        self.ctx.timer.cancel(classic_sync_key(group.group_id, member.member_id))
        self.consumer._schedule_session_timeout(group.group_id, member.member_id, member.classic.session_timeout_ms)
        data = encode_assignment_for(member, member.assigned, self._names_of(group))
        return CoordinatorResult([], SyncResult(ErrorCode.none, data, PROTOCOL_TYPE, protocol))

    def _raise_if_rebalancing(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A new rebalance: the member must rejoin to catch up (unless it is revoking, which it
        learns from this very SyncGroup; Kafka: throwIfRebalanceInProgress)."""
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._schedule_join_timeout(group, member)
            raise KafkaError(ErrorCode.rebalance_in_progress,
                             f"A new rebalance is triggered in group {group.group_id} and member "
                             f"{member.member_id} should rejoin to catch up.")

    def _schedule_join_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        key = classic_join_key(group.group_id, member.member_id)
        if self.ctx.timer.is_scheduled(key):
            return
        group_id, member_id = group.group_id, member.member_id
        self.ctx.timer.schedule(key, max(member.rebalance_timeout_ms, 0), lambda: self.consumer.fence(
            group_id, member_id, "the classic member failed to join within the rebalance timeout"))

    # -- Heartbeat ----------------------------------------------------------------------------
    def heartbeat(self, group: ConsumerGroup, req: HeartbeatRequest) -> CoordinatorResult[ErrorCode]:
        try:
            member = self._member_of(group, req.member_id, req.group_instance_id)
            if req.generation_id != member.member_epoch:
                raise KafkaError(ErrorCode.illegal_generation, "")
        except KafkaError as e:
            return CoordinatorResult([], e.code)
        assert member.classic is not None
        self.consumer._schedule_session_timeout(group.group_id, member.member_id, member.classic.session_timeout_ms)
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not group.waits_for_unreleased(member))):
            self._schedule_join_timeout(group, member)
            return CoordinatorResult([], ErrorCode.rebalance_in_progress)
        return CoordinatorResult([], ErrorCode.none)

    # -- LeaveGroup ---------------------------------------------------------------------------
    def leave(self, group: ConsumerGroup, req: LeaveRequest) -> CoordinatorResult[LeaveResult]:
        out: list[MemberLeft] = []
        leaving: list[ConsumerMember] = []
        for who in req.members:
            try:
                if who.group_instance_id is None:
                    member = self._member_of(group, who.member_id, None)
                else:
                    static = group.static_member(who.group_instance_id)
                    if static is None:
                        raise KafkaError(ErrorCode.unknown_member_id, "")
                    member = static
                    if who.member_id and who.member_id != member.member_id:
                        raise KafkaError(ErrorCode.fenced_instance_id, "")
                    if not member.uses_classic_protocol:
                        raise KafkaError(ErrorCode.unknown_member_id, "")
            except KafkaError as e:
                out.append(MemberLeft(who.member_id, who.group_instance_id, e.code))
                continue
            log.info("[GroupId %s] Classic member %s (instance id %s) left the consumer group through LeaveGroup%s",
                     group.group_id, member.member_id, member.instance_id,
                     f" ({who.reason})" if who.reason else "")
            if all(m.member_id != member.member_id for m in leaving):
                leaving.append(member)
            out.append(MemberLeft(member.member_id, who.group_instance_id, ErrorCode.none))
        records = self.consumer.removal(group, leaving) if leaving else []
        return CoordinatorResult(records, LeaveResult(ErrorCode.none, out))
