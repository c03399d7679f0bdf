"""Share groups (KIP-932): ShareGroupHeartbeat, leaving, the session timeout, and the replay of
the share groups' records (protocol/share_group_records.py).

As for consumer groups, an operation returns the records that say what changes and the response;
the runtime appends and replays them. A heartbeat writes, in Kafka's order: the member's metadata
when it changed, the group epoch when the subscriptions (or their topics) changed, the target
assignment (the share assignor's, steered as the operator says) when the group epoch is ahead of
it, and the member's current assignment when it moved. A share member is never asked to revoke
anything: it takes its target and the assignment epoch at once (Kafka's share groups do the same).

Rules and error codes are Kafka's (GroupMetadataManager.shareGroupHeartbeat)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gregor.assignment import assignors, steering
from gregor.assignment.share import ShareAssignor
from gregor.coordinator.group.consumer_group_manager import _blank, _invalid  # Kafka's checks, as for consumer groups
from gregor.coordinator.group.context import ShardContext
from gregor.coordinator.group.metadata_hash import group_hash
from gregor.coordinator.group.share_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    Assignment,
    ShareGroup,
    ShareMember,
    TopicId,
)
from gregor.coordinator.runtime.result import CoordinatorResult, Record
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_group_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

log = logging.getLogger("gregor.coordinator")

STABLE_STATE = 0  # MemberState.STABLE in the current-assignment record


@dataclass(frozen=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None


@dataclass(frozen=True)
class ShareHeartbeatResult:
    error: ErrorCode
    message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


def session_key(group_id: str, member_id: str) -> str:
    return f"share-session-{group_id}-{member_id}"


def _sorted(a: Assignment) -> dict[TopicId, tuple[int, ...]]:
    return {t: tuple(sorted(ps)) for t, ps in sorted(a.items()) if ps}


def member_record(group_id: str, m: ShareMember) -> Record:
    return (ShareGroupMemberMetadataKey(group_id, m.member_id),
            ShareGroupMemberMetadataValue(m.rack_id, m.client_id, m.client_host, list(m.subscribed_topic_names)))


def current_record(group_id: str, m: ShareMember) -> Record:
    return (ShareGroupCurrentMemberAssignmentKey(group_id, m.member_id),
            ShareGroupCurrentMemberAssignmentValue(m.member_epoch, m.previous_member_epoch, STABLE_STATE,
                                                   _sorted(m.assigned)))


def removal_records(group_id: str, member_id: str) -> list[Record]:
    return [(ShareGroupCurrentMemberAssignmentKey(group_id, member_id), None),
            (ShareGroupTargetAssignmentMemberKey(group_id, member_id), None),
            (ShareGroupMemberMetadataKey(group_id, member_id), None)]


class ShareGroupManager:
    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx

    @property
    def groups(self) -> dict[str, ShareGroup]:
        return self.ctx.share_groups

    # -- ShareGroupHeartbeat -----------------------------------------------------------------------
    def heartbeat(self, req: ShareHeartbeatRequest) -> CoordinatorResult[ShareHeartbeatResult]:
        try:
            self._validate(req)
            if req.member_epoch == LEAVE_EPOCH:
                return self._leave(req)
            return self._heartbeat(req)
        except KafkaError as e:
            log.log(logging.INFO if e.code in (ErrorCode.invalid_request, ErrorCode.group_max_size_reached,
                                               ErrorCode.group_id_not_found) else logging.DEBUG,
                    "[GroupId %s] ShareGroupHeartbeat of member %s (epoch %d, client %s %s): %s: %s", req.group_id,
                    req.member_id, req.member_epoch, req.client_id, req.client_host, e.code.name.upper(), e.message)
            return CoordinatorResult([], ShareHeartbeatResult(e.code, e.message or None, req.member_id or None,
                                                              req.member_epoch))

    def _validate(self, req: ShareHeartbeatRequest) -> None:
        """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid, in its order."""
        if not req.member_id or not req.member_id.strip():
            raise _invalid("MemberId can't be empty.")
        if not req.group_id or not req.group_id.strip():
            raise _invalid("GroupId can't be empty.")
        if _blank(req.rack_id):
            raise _invalid("RackId can't be empty.")
        if req.member_epoch == JOIN_EPOCH:
            if not req.subscribed_topic_names:
                raise _invalid("SubscribedTopicNames must be set in first request.")
        elif req.member_epoch < LEAVE_EPOCH:
            raise _invalid("MemberEpoch is invalid.")

    def _group(self, group_id: str, create: bool) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.ctx.groups.get(group_id)
        if group_id in self.ctx.consumer_groups or (classic is not None and (classic.members or not create)):
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        if not create:
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        return ShareGroup(group_id)  # comes into being when its records are replayed

    def _heartbeat(self, req: ShareHeartbeatRequest) -> CoordinatorResult[ShareHeartbeatResult]:
        records: list[Record] = []
        joining = req.member_epoch == JOIN_EPOCH
        group = self._group(req.group_id, joining)
        member = group.members.get(req.member_id)
        if member is None:
            if not joining:
                raise KafkaError(ErrorCode.unknown_member_id,
                                 f"Member {req.member_id} is not a member of group {group.group_id}.")
            if len(group.members) >= self.max_size(group.group_id):
                raise KafkaError(ErrorCode.group_max_size_reached,
                                 f"The share group has reached its maximum capacity of "
                                 f"{self.max_size(group.group_id)} members.")
            log.info("[GroupId %s] Member %s joins the share group", group.group_id, req.member_id)
            member = ShareMember(req.member_id)
        elif not joining and req.member_epoch != member.member_epoch:
            raise KafkaError(ErrorCode.fenced_member_epoch,
                             f"The share group member has a smaller member epoch ({req.member_epoch}) than the "
                             f"one known by the group coordinator ({member.member_epoch}). The member must "
                             f"abandon all its partitions and rejoin.")
        rejoined = joining and req.member_id in group.members
        updated = member.with_(
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                    if req.subscribed_topic_names is not None else member.subscribed_topic_names),
            client_id=req.client_id, client_host=req.client_host)
        bump = not group.created or updated.subscribed_topic_names != member.subscribed_topic_names \
            or req.member_id not in group.members
        if not updated.same_metadata(member) or req.member_id not in group.members:
            records.append(member_record(group.group_id, updated))
        members_after = dict(group.members)
        members_after[updated.member_id] = updated
        metadata = self._metadata_of(n for m in members_after.values() for n in m.subscribed_topic_names)
        metadata_hash = group_hash({name: self.ctx.topic_hash(name) for name in metadata})
        bump |= metadata_hash != group.metadata_hash
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append((ShareGroupMetadataKey(group.group_id), ShareGroupMetadataValue(group_epoch, metadata_hash)))
            log.info("[GroupId %s] Bumped share group epoch to %d", group.group_id, group_epoch)
        if group_epoch > group.assignment_epoch:
            targets = self._target_assignment(group, group_epoch, members_after, metadata, records)
            target_epoch = group_epoch
        else:
            targets = {mid: group.target_of(mid) for mid in members_after}
            target_epoch = group.assignment_epoch
        target = targets.get(updated.member_id, {})
        reconciled = updated
        if updated.member_epoch != target_epoch or _sorted(updated.assigned) != _sorted(target) or rejoined:
            reconciled = updated.with_(member_epoch=target_epoch, previous_member_epoch=updated.member_epoch,
                                       assigned={t: frozenset(ps) for t, ps in target.items() if ps})
            records.append(current_record(group.group_id, reconciled))
        records += self._initialized_records(group, reconciled, metadata)
        self._schedule_session_timeout(group.group_id, updated.member_id)
        changed = _sorted(reconciled.assigned) != _sorted(member.assigned)
        response = ShareHeartbeatResult(ErrorCode.none, None, updated.member_id, reconciled.member_epoch,
                                        self.heartbeat_interval_ms(group.group_id),
                                        dict(reconciled.assigned) if joining or changed else None)
        return CoordinatorResult(records, response)

    def _initialized_records(self, group: ShareGroup, member: ShareMember,
                             metadata: dict[str, tuple[TopicId, int]]) -> list[Record]:
        """The partitions now assigned that the group's state metadata does not list yet are
        listed (ShareGroupStatePartitionMetadata): the share-partition leaders initialise their
        state on first use; the list is what DescribeShareGroupOffsets and deletion read."""
        names = {tid: name for name, (tid, _n) in metadata.items()}
        new = dict(group.initialized)
        changed = False
        for tid, ps in member.assigned.items():
            name, have = new.get(tid, (names.get(tid, ""), frozenset()))
            if not ps <= have:
                new[tid] = (name or names.get(tid, ""), have | ps)
                changed = True
        if not changed:
            return []
        value = ShareGroupStatePartitionMetadataValue(
            {tid: (name, tuple(sorted(ps))) for tid, (name, ps) in sorted(new.items())}, {})
        return [(ShareGroupStatePartitionMetadataKey(group.group_id), value)]

    def _metadata_of(self, names: Iterable[str]) -> dict[str, tuple[TopicId, int]]:
        out = {}
        for name in sorted(set(names)):
            meta = self.ctx.topic_metadata(name)
            if meta is not None:
                out[name] = meta
        return out

    def _target_assignment(self, group: ShareGroup, epoch: int, members: dict[str, ShareMember],
                           metadata: dict[str, tuple[TopicId, int]], records: list[Record]) -> dict[str, Assignment]:
        specs = {}
        infos = {}
        for mid, m in members.items():
            subscribed = frozenset(metadata[n][0] for n in m.subscribed_topic_names if n in metadata)
            specs[mid] = assignors.MemberSpec(mid, None, m.rack_id, subscribed, group.target_of(mid))
            infos[mid] = steering.MemberInfo(mid, None, m.client_host, specs[mid])
        spec = assignors.GroupSpec(specs, {tid: n for tid, n in metadata.values()})
        steered = steering.steer(spec, infos, dict(metadata), self.steering_of(group.group_id))
        result = ShareAssignor().assign(steered.spec)
        out: dict[str, Assignment] = {}
        for mid in members:
            new = {t: ps for t, ps in result.get(mid, {}).items() if ps}
            out[mid] = new
            if _sorted(new) != _sorted(group.target_of(mid)) or mid not in group.target:
                records.append((ShareGroupTargetAssignmentMemberKey(group.group_id, mid),
                                ShareGroupTargetAssignmentMemberValue(_sorted(new))))
        records.append((ShareGroupTargetAssignmentMetadataKey(group.group_id),
                        ShareGroupTargetAssignmentMetadataValue(epoch)))
        log.info("[GroupId %s] Computed a new share target assignment for epoch %d%s", group.group_id, epoch,
                 "; " + "; ".join(steered.notes) if steered.notes else "")
        return out

    def steering_of(self, group_id: str) -> steering.Steering:
        try:
            return steering.Steering.from_config(self.ctx.group_settings(group_id))
        except steering.SteeringError as e:
            log.warning("[GroupId %s] ignoring the group's steering: %s", group_id, e)
            return steering.Steering()

    def steering_problems(self, group_id: str, wanted: steering.Steering) -> list[str]:
        """Why ``wanted`` cannot steer the share group as it is now (empty: it can): the same
        checks as a consumer group's (pins name existing partitions and members, ...)."""
        group = self.groups[group_id]
        infos = {}
        for mid, m in group.members.items():
            spec = assignors.MemberSpec(mid, None, m.rack_id, frozenset(), group.target_of(mid))
            infos[mid] = steering.MemberInfo(mid, None, m.client_host, spec)
        topics = {}
        for pin in wanted.pins:
            if (meta := self.ctx.topic_metadata(pin.topic)) is not None:
                topics[pin.topic] = meta
        return steering.problems(wanted, topics, infos)

    def steering_changed(self, group_id: str) -> CoordinatorResult[None]:
        """The operator changed the group's steering: a new group epoch, so that the next heartbeat
        computes the target assignment again."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return CoordinatorResult()
        return CoordinatorResult([(ShareGroupMetadataKey(group_id),
                                   ShareGroupMetadataValue(group.group_epoch + 1, group.metadata_hash))])

    # -- leaving and fencing ------------------------------------------------------------------------
    def _leave(self, req: ShareHeartbeatRequest) -> CoordinatorResult[ShareHeartbeatResult]:
        group = self._group(req.group_id, create=False)
        member = group.members.get(req.member_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id,
                             f"Member {req.member_id} is not a member of group {group.group_id}.")
        log.info("[GroupId %s] Member %s left the share group", group.group_id, req.member_id)
        records = self._removal(group, member.member_id)
        return CoordinatorResult(records, ShareHeartbeatResult(ErrorCode.none, None, req.member_id, LEAVE_EPOCH))

    def _removal(self, group: ShareGroup, member_id: str) -> list[Record]:
        self.ctx.timer.cancel(session_key(group.group_id, member_id))
        bump = ShareGroupMetadataValue(group.group_epoch + 1, group.metadata_hash)
        return removal_records(group.group_id, member_id) + [(ShareGroupMetadataKey(group.group_id), bump)]

    def fence(self, group_id: str, member_id: str, reason: str) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return CoordinatorResult()
        log.info("[GroupId %s] Share member %s removed from the group: %s", group_id, member_id, reason)
        return CoordinatorResult(self._removal(group, member_id))

    def session_timeout_ms(self, group_id: str) -> int:
        value = self.ctx.group_settings(group_id).get("share.session.timeout.ms")
        return int(value) if value is not None else self.ctx.config.share_session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.ctx.group_settings(group_id).get("share.heartbeat.interval.ms")
        return int(value) if value is not None else self.ctx.config.share_heartbeat_interval_ms

    def max_size(self, group_id: str) -> int:
        return self.ctx.config.share_max_size

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        timeout = self.session_timeout_ms(group_id)
        self.ctx.timer.schedule(session_key(group_id, member_id), timeout,
                                lambda: self.fence(group_id, member_id, f"no heartbeat in {timeout} ms"))

    def offsets_changed(self, group_id: str, added: dict[TopicId, tuple[str, frozenset[int]]],
                        removed: set[TopicId]) -> CoordinatorResult[ErrorCode]:
        """An operator set (AlterShareGroupOffsets) or deleted (DeleteShareGroupOffsets) the
        start offsets of an empty share group: the partitions with state are listed (or no
        longer); a group that does not exist yet is created empty, as Kafka does. NON_EMPTY_GROUP
        while it has members; GROUP_ID_NOT_FOUND when the id names another kind of group."""
        try:
            group = self._group(group_id, create=True)
        except KafkaError as e:
            return CoordinatorResult([], e.code)
        if group.members:
            return CoordinatorResult([], ErrorCode.non_empty_group)
        records: list[Record] = []
        if not group.created:
            records.append((ShareGroupMetadataKey(group_id), ShareGroupMetadataValue(0, 0)))
        new = {tid: v for tid, v in group.initialized.items() if tid not in removed}
        for tid, (name, ps) in added.items():
            old_name, have = new.get(tid, (name, frozenset()))
            new[tid] = (name or old_name, have | ps)
        if new != group.initialized or not group.created:
            records.append((ShareGroupStatePartitionMetadataKey(group_id), ShareGroupStatePartitionMetadataValue(
                {tid: (name, tuple(sorted(ps))) for tid, (name, ps) in sorted(new.items())}, {})))
        return CoordinatorResult(records, ErrorCode.none)

    def delete_group(self, group_id: str) -> list[Record]:
        return [(ShareGroupStatePartitionMetadataKey(group_id), None),
                (ShareGroupTargetAssignmentMetadataKey(group_id), None),
                (ShareGroupMetadataKey(group_id), None)]

    # -- replay ---------------------------------------------------------------------------------------
    def _replayed(self, group_id: str) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
            self.ctx.groups.pop(group_id, None)  # an empty classic group of that id is replaced
        return group

    def replay(self, key: Any, value: Any) -> None:
        gid = key.group
        group: ShareGroup | None
        if isinstance(key, ShareGroupMetadataKey):
            if value is None:
                self.groups.pop(gid, None)
            else:
                group = self._replayed(gid)
                group.group_epoch, group.metadata_hash, group.created = value.epoch, value.metadata_hash, True
        elif isinstance(key, ShareGroupMemberMetadataKey):
            if value is None:
                group = self.groups.get(gid)
                if group is not None and group.members.pop(key.member_id, None) is not None:
                    self.ctx.membership_changed()
                return
            group = self._replayed(gid)
            old = group.members.get(key.member_id) or ShareMember(key.member_id)
            group.members[key.member_id] = old.with_(rack_id=value.rack_id, client_id=value.client_id,
                                                     client_host=value.client_host,
                                                     subscribed_topic_names=tuple(value.subscribed_topic_names))
            self.ctx.membership_changed()
        elif isinstance(key, ShareGroupTargetAssignmentMetadataKey):
            if value is not None:
                self._replayed(gid).assignment_epoch = value.assignment_epoch
        elif isinstance(key, ShareGroupTargetAssignmentMemberKey):
            group = self.groups.get(gid) if value is None else self._replayed(gid)
            if group is None:
                return
            if value is None:
                group.target.pop(key.member_id, None)
            else:
                group.target[key.member_id] = {t: frozenset(ps) for t, ps in value.topic_partitions.items()}
        elif isinstance(key, ShareGroupCurrentMemberAssignmentKey):
            group = self.groups.get(gid) if value is None else self._replayed(gid)
            if group is None or value is None:
                return
            old = group.members.get(key.member_id) or ShareMember(key.member_id)
            group.members[key.member_id] = old.with_(
                member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                assigned={t: frozenset(ps) for t, ps in value.assigned_partitions.items()})
            self.ctx.membership_changed()
        elif isinstance(key, ShareGroupStatePartitionMetadataKey):
            group = self.groups.get(gid) if value is None else self._replayed(gid)
            if group is not None:
                group.initialized = ({} if value is None else
                                     {t: (name, frozenset(ps)) for t, (name, ps) in value.initialized.items()})

    def on_loaded(self) -> None:
        """Members loaded get a full session to heartbeat to their new coordinator."""
        for group in self.groups.values():
            for member_id in group.members:
                self._schedule_session_timeout(group.group_id, member_id)
