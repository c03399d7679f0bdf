"""Which kind of group serves a request, and the conversions between classic and consumer-protocol
groups (KIP-848's migration; Kafka: GroupMetadataManager's getOrMaybeCreateClassicGroup,
maybeDeleteEmptyConsumerGroup, convertToConsumerGroup, convertToClassicGroup).

A group id names one group, of one kind: a classic group (``ctx.groups``) or a consumer-protocol
group (``ctx.consumer_groups``), never both. The classic APIs (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) reach a consumer-protocol group through here:

- an **empty** consumer group is replaced by a classic group when a classic member joins, and an
  empty classic group by a consumer group when a consumer-protocol member joins, whatever
  ``group.consumer.migration.policy`` says (Kafka: conversions of empty groups are always
  allowed); committed offsets stay;
- a consumer group **with members** serves classic members itself (``classic_members``);
- **online upgrade**: a consumer-protocol member joining a classic group with members converts it
  (policy ``upgrade`` or ``bidirectional``, protocol type "consumer", every member's metadata
  readable): the classic members become classic members of the consumer group, keeping their
  assignment, and rejoin (their Heartbeat answers REBALANCE_IN_PROGRESS, the group epoch moved);
- **online downgrade**: when the last consumer-protocol member leaves and classic members remain
  (policy ``downgrade`` or ``bidirectional``), the group becomes a classic group and rebalances.
"""

from __future__ import annotations

import logging
import struct

from gregor.coordinator.group.api import JoinResult, SyncResult
from gregor.coordinator.group.classic_members import PROTOCOL_TYPE, decodable, encode_assignment_for
from gregor.coordinator.group.consumer_group import ConsumerGroup, ConsumerMember, MemberState, TopicId
from gregor.coordinator.group.consumer_group_manager import (
    ConsumerGroupManager,
    current_assignment_record,
    epoch_record,
    member_record,
    removal_records,
    target_record,
)
from gregor.coordinator.group.context import ShardContext
from gregor.coordinator.group.group_manager import (
    GroupManager,
    group_record,
    heartbeat_key,
    join_key,
    pending_key,
    sync_key,
)
from gregor.coordinator.group.metadata_hash import group_hash
from gregor.coordinator.group.model import ClassicGroup, GroupState, Member
from gregor.coordinator.runtime.result import Record
from gregor.protocol.consumer_offsets import (
    ClassicMemberMetadata,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
)
from gregor.protocol.errors import ErrorCode

log = logging.getLogger("gregor.coordinator")


def empty_consumer_group_tombstones(ctx: ShardContext, consumer: ConsumerGroupManager, group_id: str) -> list[Record]:
    """An empty consumer group makes way for a classic one: its records are tombstoned (committed
    offsets stay) and it is dropped from memory now, since the classic JoinGroup that replaces it
    applies its own state in memory (its result is not replayed; Kafka: removeGroup)."""
    group = ctx.consumer_groups.get(group_id)
    if group is None or group.members:
        return []
    records = consumer.delete_group(group_id)
    consumer.forget(group_id)
    log.info("[GroupId %s] Converting the empty consumer group to a classic group", group_id)
    return records


# -- online upgrade: a classic group with members becomes a consumer group -----------------------
# the clients' own assignors: their assignments' user data is nothing the server-side assignor
# needs (librdkafka's cooperative-sticky leader copies each member's sticky user data into its
# assignment; Kafka 4 refuses to upgrade any group with assignment user data, such a group too)
BUILT_IN_ASSIGNORS = frozenset({"range", "roundrobin", "sticky", "cooperative-sticky"})


def upgrade_problem(ctx: ShardContext, classic: ClassicGroup) -> str | None:
    """Why the classic group cannot become a consumer group now (None: it can; Kafka:
    validateOnlineUpgrade, and the embedded protocol must be readable)."""
    policy = ctx.config.consumer_migration_policy
    if policy not in ("upgrade", "bidirectional"):
        return f"the online upgrade is disabled (group.consumer.migration.policy={policy})"
    if classic.protocol_type != PROTOCOL_TYPE:
        return "the group does not use the consumer embedded protocol"
    if len(classic.members) > ctx.config.consumer_max_size:
        return "the group size exceeds the consumer group maximum size"
    for m in classic.members.values():
        if not decodable([(name, meta) for name, meta in m.protocols]):
            return f"the embedded consumer protocol of member {m.member_id} is malformed"
        user_data = assignment_user_data(m.assignment)
        if user_data is None:
            return f"the embedded consumer protocol of member {m.member_id} is malformed (its assignment)"
        if user_data and classic.protocol_name not in BUILT_IN_ASSIGNORS:
            return (f"an unsupported custom assignor is in use (member {m.member_id}'s assignment carries user "
                    f"data, which would be lost). Please switch to a default assignor before re-attempting the "
                    f"upgrade")
    return None


def assignment_user_data(data: bytes) -> bytes | None:
    """The user data of a ConsumerProtocolAssignment (b"" for none, and for a member that never
    synced); None when it cannot be read (Kafka refuses the upgrade in both cases: the
    partitions the member holds would be unknown, or a custom assignor's data lost)."""
    if not data:
        return b""
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", data, pos)
            if ln < 0 or pos + 2 + ln > len(data):
                return None
            data[pos + 2:pos + 2 + ln].decode()
            pos += 2 + ln
            (m,) = struct.unpack_from(">i", data, pos)
            if m < 0:
                return None
            pos += 4 + 4 * m
            if pos > len(data):
                return None
        (ln,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if ln < 0:
            return b""
        if pos + ln > len(data):
            return None
        return data[pos:pos + ln]
    except (struct.error, UnicodeDecodeError):
        return None


def upgrade(ctx: ShardContext, classic: ClassicGroup, records: list[Record]) -> ConsumerGroup:
    """The consumer group the classic group becomes (Kafka: convertToConsumerGroup,
    ConsumerGroup.fromClassicGroup): every member a classic member at the group's generation,
    Stable, holding its last assignment (and what its last JoinGroup says it owns, so that a
    cooperative member caught in a rebalance keeps its partitions until it revokes them). The
    records (the classic group tombstoned, the consumer group's records) go to ``records``; the
    group returned is what replaying them builds, for the heartbeat that converts it to go on.
    Nothing else changes here: the heartbeat may still be refused (the classic group then stays
    as it was); once it is taken, ``complete_upgrade``."""
    from gregor.protocol.consumer_protocol import decode_assignment, decode_subscription

    gid, gen = classic.group_id, classic.generation_id
    now = ctx.clock()
    records.append((GroupMetadataKey(gid), None))

    group = ConsumerGroup(gid, group_epoch=gen, assignment_epoch=gen, state_since_ms=now)
    claimed: set[tuple[TopicId, int]] = set()

    def ids(pairs: list[tuple[str, list[int]]]) -> dict[TopicId, set[int]]:
        out: dict[TopicId, set[int]] = {}
        for topic, partitions in pairs:
            meta = ctx.topic_metadata(topic)
            if meta is None:
                continue
            for p in partitions:
                if 0 <= p < meta[1] and (meta[0], p) not in claimed:
                    claimed.add((meta[0], p))
                    out.setdefault(meta[0], set()).add(p)
        return out

    members = []
    for m in classic.members.values():
        protocol = classic.protocol_name or m.protocols[0][0]
        sub = decode_subscription(m.metadata_for(protocol) or m.protocols[0][1])
        held = ids(decode_assignment(m.assignment) + sub.owned)
        assigned = {t: frozenset(ps) for t, ps in held.items() if ps}
        member = ConsumerMember(
            m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=tuple(sorted(set(sub.topics))),
            rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=gen, previous_member_epoch=gen,
            state=MemberState.STABLE, assigned=assigned,
            assignment_epochs={(t, p): gen for t, ps in assigned.items() for p in ps},
            classic=ClassicMemberMetadata(m.session_timeout_ms, list(m.protocols)))
        group.target[m.member_id] = assigned
        group.put_member(member, now)
        members.append(member)
    records += [member_record(gid, m) for m in members]
    # the members' topics as they are now, so that the first heartbeat does not rebalance again
    group.subscription_metadata = {t: meta for t in sorted({t for m in members for t in m.subscribed_topic_names})
                                   if (meta := ctx.topic_metadata(t)) is not None}
    group.metadata_hash = group_hash({t: ctx.topic_hash(t) for t in group.subscription_metadata})
    group.creation_time_ms = now
    records.append(epoch_record(gid, gen, group.metadata_hash, now))
    records += [target_record(gid, m.member_id, m.assigned) for m in members]
    records.append((ConsumerGroupTargetAssignmentMetadataKey(gid),
                    ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=gen)))
    records += [current_assignment_record(gid, m) for m in members]
    log.info("[GroupId %s] Converting the classic group with %d members (generation %d) to a consumer group",
             gid, len(members), gen)
    return group


def complete_upgrade(ctx: ShardContext, consumer: ConsumerGroupManager, classic: ClassicGroup,
                     group: ConsumerGroup) -> None:
    """The heartbeat that upgrades the group was taken: in-flight joins and syncs of the classic
    group learn that another rebalance is under way, its timers stop, and every converted member
    gets its session timeout (its classic one; Kafka: convertToConsumerGroup), so that one that
    never comes back is fenced."""
    gid = classic.group_id
    for m in classic.members.values():
        if m.awaiting_join is not None:
            ctx.answer(m.awaiting_join, JoinResult(error=ErrorCode.rebalance_in_progress, member_id=m.member_id))
            m.awaiting_join = None
        if m.awaiting_sync is not None:
            ctx.answer(m.awaiting_sync, SyncResult(error=ErrorCode.rebalance_in_progress))
            m.awaiting_sync = None
        ctx.timer.cancel(heartbeat_key(gid, m.member_id))
    for member_id in classic.pending_members:
        ctx.timer.cancel(pending_key(gid, member_id))
    ctx.timer.cancel(join_key(gid))
    ctx.timer.cancel(sync_key(gid))
    for member in group.members.values():
        if member.classic is not None and member.member_id in classic.members:
            consumer._schedule_session_timeout(gid, member.member_id, member.classic.session_timeout_ms)


class Upgrade:
    """The online upgrade as the consumer-group manager uses it (given to it by the shard, as
    ``Downgrade``): why a classic group cannot be converted, the conversion, and its completion once
    the heartbeat that converts it is taken."""

    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx

    def problem(self, classic: ClassicGroup) -> str | None:
        return upgrade_problem(self.ctx, classic)

    def convert(self, classic: ClassicGroup, records: list[Record]) -> ConsumerGroup:
        return upgrade(self.ctx, classic, records)

    def complete(self, consumer: ConsumerGroupManager, classic: ClassicGroup, group: ConsumerGroup) -> None:
        complete_upgrade(self.ctx, consumer, classic, group)


# -- online downgrade: only classic members are left ---------------------------------------------
def holdings(member: ConsumerMember) -> dict[TopicId, frozenset[int]]:
    """What the member may hold now: its current assignment and the partitions it has still to
    revoke. The members' holdings never overlap (a partition goes to its next owner only once
    revoked), so a classic group whose members hold these gives no partition two owners, whatever
    SyncGroup answers before its first rebalance completes."""
    out = dict(member.assigned)
    for t, ps in member.pending_revocation.items():
        out[t] = out.get(t, frozenset()) | ps
    return {t: ps for t, ps in out.items() if ps}


def downgrade_problem(ctx: ShardContext, size: int) -> str | None:
    """Why the group (of ``size`` members once converted) cannot become a classic group now
    (Kafka: validateOnlineDowngradeWithFencedMember, validateOnlineDowngradeWithReplacedMemberId)."""
    policy = ctx.config.consumer_migration_policy
    if policy not in ("downgrade", "bidirectional"):
        return f"the online downgrade is disabled (group.consumer.migration.policy={policy})"
    if size > ctx.config.max_size:
        return "its size is greater than group.max.size"
    return None


class Downgrade:
    """The consumer group becomes a classic group again (Kafka: convertToClassicGroup,
    ClassicGroup.fromConsumerGroup) when only classic members would remain:

    - the last consumer-protocol member leaves or is fenced (``__call__``): the classic group
      rebalances;
    - a static member coming back with the classic protocol replaces the last consumer-protocol
      member (``replaced``): the new member takes the old one's place and partitions, and the
      group rebalances only if the subscription changed or a reconciliation was under way.

    The classic group is built in memory here, and its records (the consumer group's tombstones,
    then the GroupMetadata record of the classic group, Stable, each member holding what it holds
    now: ``holdings``; Kafka writes the target assignment, which a restart before the rebalance
    would hand out while previous owners still hold it) are not replayed."""

    def __init__(self, ctx: ShardContext, classic: GroupManager) -> None:
        self.ctx, self.classic = ctx, classic

    def __call__(self, consumer: ConsumerGroupManager, group: ConsumerGroup,
                 leaving: ConsumerMember) -> list[Record] | None:
        gid = group.group_id
        if leaving.uses_classic_protocol or not group.all_classic_except(leaving.member_id) \
                or len(group.members) <= 1:
            return None
        problem = downgrade_problem(self.ctx, len(group.members) - 1)
        if problem is not None:
            log.info("[GroupId %s] Cannot downgrade the consumer group to a classic group because %s", gid, problem)
            return None
        rest = [m for mid, m in group.members.items() if mid != leaving.member_id]
        records = [r for m in group.members.values() for r in removal_records(gid, m.member_id)]
        log.info("[GroupId %s] Downgrading the consumer group to a classic group: member %s left and %d classic "
                 "members remain", gid, leaving.member_id, len(rest))
        self._convert(consumer, group, rest, records, f"Downgrade group {gid} from consumer to classic.")
        return records

    def replaced(self, consumer: ConsumerGroupManager, group: ConsumerGroup, replaced: ConsumerMember,
                 joining: ConsumerMember, resubscribed: bool, records: list[Record]) -> ClassicGroup | None:
        """A classic static member (``joining``, as its JoinGroup reconciled it) replaced
        ``replaced``; if that was the last consumer-protocol member, the group becomes a classic
        group (returned; None: it stays a consumer group). ``records`` already replace the member."""
        gid = group.group_id
        if replaced.uses_classic_protocol or not group.all_classic_except(replaced.member_id):
            return None
        problem = downgrade_problem(self.ctx, len(group.members))
        if problem is not None:
            log.info("[GroupId %s] Cannot downgrade the consumer group to a classic group because %s", gid, problem)
            return None
        rest = [joining if mid == replaced.member_id else m for mid, m in group.members.items()]
        records += [r for mid in group.members if mid != replaced.member_id for r in removal_records(gid, mid)]
        records += removal_records(gid, joining.member_id)
        settled = all(m.state is MemberState.STABLE and m.member_epoch == group.group_epoch
                      and holdings(m) == group.target_of(replaced.member_id if m is joining else m.member_id)
                      for m in rest)
        reason = None
        if resubscribed:
            reason = f"Downgrade group {gid} from consumer to classic for static member replacement with a " \
                     f"different subscription."
        elif not settled:
            reason = f"Downgrade group {gid} from consumer to classic while its members reconcile."
        log.info("[GroupId %s] Downgrading the consumer group to a classic group: static member %s (instance id "
                 "%s) replaced the last consumer-protocol member %s", gid, joining.member_id, joining.instance_id,
                 replaced.member_id)
        return self._convert(consumer, group, rest, records, reason)

    def _convert(self, consumer: ConsumerGroupManager, group: ConsumerGroup, members: list[ConsumerMember],
                 records: list[Record], rebalance: str | None) -> ClassicGroup:
        ctx, gid = self.ctx, group.group_id
        classic = ClassicGroup(gid, state=GroupState.STABLE, protocol_type=PROTOCOL_TYPE,
                               generation_id=group.group_epoch, state_timestamp_ms=ctx.clock())
        names = {tid: name for name, (tid, _n) in group.subscription_metadata.items()}
        for m in members:
            assert m.classic is not None
            classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                               m.classic.session_timeout_ms, PROTOCOL_TYPE, list(m.classic.supported_protocols)))
        classic.protocol_name = classic.select_protocol()
        for m in members:
            classic.members[m.member_id].assignment = encode_assignment_for(m, holdings(m), names)
        records += consumer.delete_group(gid)
        records.append(group_record(classic))
        consumer.forget(gid)
        ctx.groups[gid] = classic
        for member in classic.members.values():
            self.classic.schedule_heartbeat(classic, member)
        if rebalance is not None:
            self.classic.prepare_rebalance(classic, rebalance)
        ctx.membership_changed()
        return classic
