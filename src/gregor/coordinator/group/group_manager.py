"""Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

Each public method is one operation on the shard: it returns a CoordinatorResult holding the
records to write (GroupMetadata records) and the response, possibly deferred (a JoinGroup waits
for the rebalance). Responses to *other* members that an operation completes (the joins that a
rebalance completes, the syncs that the leader's assignment completes) are handed to
``ctx.answer`` / ``ctx.defer`` so that they leave only after this operation's records are
committed.

Membership is the one state that operations change in memory directly, as Kafka's classic
groups do: the in-flight parts (who waits in a JoinGroup, heartbeat deadlines, the generation
being formed) are never persisted, and a GroupMetadata record persists the durable part at the
leader's SyncGroup and when a group becomes empty (or a static member is replaced). Every result
of this manager that carries records therefore says ``replay_records=False`` (Kafka:
replayRecords=false); replaying a GroupMetadata record builds a group from it only when a
partition is loaded.

The rules, states and error codes are Kafka's (GroupCoordinator / the classic part of
GroupMetadataManager); the comments name the cases.
"""

from __future__ import annotations

import logging
import uuid
from typing import TypeVar

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
from gregor.coordinator.group.context import ShardContext
from gregor.coordinator.group.model import ClassicGroup, GroupState, Member
from gregor.coordinator.runtime.result import CoordinatorResult, Deferred, Record
from gregor.protocol.consumer_offsets import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from gregor.protocol.errors import ErrorCode

log = logging.getLogger("gregor.coordinator")

S = GroupState
T = TypeVar("T")


def _result(records: list[Record] | None = None, response: T | Deferred[T] | None = None) -> CoordinatorResult[T]:
    """A membership operation's result: its records persist state already applied in memory."""
    return CoordinatorResult(records if records is not None else [], response, False)


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


def pending_key(group_id: str, member_id: str) -> str:
    return f"pending-{group_id}-{member_id}"


def group_record(group: ClassicGroup, assignments: dict[str, bytes] | None = None) -> Record:
    members = [
        MemberMetadata(
            member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
            session_timeout=m.session_timeout_ms, rebalance_timeout=m.rebalance_timeout_ms,
            subscription=m.metadata_for(group.protocol_name),
            assignment=(assignments or {}).get(m.member_id, m.assignment),
            group_instance_id=m.group_instance_id,
        )
        for m in group.members.values()
    ]
    value = GroupMetadataValue(group.protocol_type or "", group.generation_id, group.protocol_name,
                               group.leader_id, group.state_timestamp_ms, members)
    return (GroupMetadataKey(group.group_id), value)


class GroupManager:
    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.ctx.groups

    def _now(self) -> int:
        return self.ctx.clock()

    # -- JoinGroup ---------------------------------------------------------------------------
    def join_group(self, req: JoinRequest) -> CoordinatorResult[JoinResult]:
        def fail(code: ErrorCode, member_id: str = req.member_id) -> CoordinatorResult[JoinResult]:
            return _result([], JoinResult(error=code, member_id=member_id))

        cfg = self.ctx.config
        if not req.group_id:
            return fail(ErrorCode.invalid_group_id)
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(ErrorCode.invalid_session_timeout)
        unknown_member = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not unknown_member:
                return fail(ErrorCode.unknown_member_id)
            group = ClassicGroup(req.group_id, state_timestamp_ms=self._now())
            self.groups[req.group_id] = group
        if not self._accepts_joining_member(group, req.member_id):
            # Kafka: GROUP_MAX_SIZE_REACHED, and a known member is removed from the group
            records = []
            if req.member_id in group.members:
                records = self._remove_member(group, group.members[req.member_id], "the group is full")
            return _result(records, JoinResult(error=ErrorCode.group_max_size_reached,
                                                         member_id=req.member_id))
        if unknown_member:
            return self._join_unknown_member(group, req)
        return self._join_known_member(group, req)

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.ctx.config.max_size
        if group.is_in(S.EMPTY, S.DEAD):
            return True
        if group.is_in(S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None and member.awaiting_join is not None:
                return True
            return sum(1 for m in group.members.values() if m.awaiting_join is not None) < limit
        return member_id in group.members or len(group.members) < limit

    def _join_unknown_member(self, group: ClassicGroup, req: JoinRequest) -> CoordinatorResult[JoinResult]:
        if group.is_in(S.DEAD):
            return _result([], JoinResult(error=ErrorCode.coordinator_not_available, member_id=""))
        if not group.supports(req.protocol_type, req.protocols):
            return _result([], JoinResult(error=ErrorCode.inconsistent_group_protocol, member_id=""))
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_id = f"{prefix}-{uuid.uuid4()}"
        old_id = group.static_member_id(req.group_instance_id)
        if old_id is not None:
            return self._replace_static_member(group, old_id, new_id, req)
        if req.require_known_member_id and req.group_instance_id is None:
            # KIP-394: hand out a member id; the member joins again with it (static members are
            # identified by their instance id and skip this round trip)
            group.pending_members.add(new_id)
            self.ctx.timer.schedule(pending_key(group.group_id, new_id), req.session_timeout_ms,
                                    lambda: self._expire_pending_member(group.group_id, new_id))
            return _result([], JoinResult(error=ErrorCode.member_id_required, member_id=new_id))
        return self._add_member_and_rebalance(group, new_id, req)

    def _replace_static_member(self, group: ClassicGroup, old_id: str, new_id: str,
                               req: JoinRequest) -> CoordinatorResult[JoinResult]:
        """A static member restarted (unknown member id, known group.instance.id): it takes over
        the old member's place under a new id, fencing the old id; no rebalance in Stable or
        CompletingRebalance (KIP-345)."""
        log.info("Static member %s of group %s rejoins with a new member id %s; old member %s is fenced",
                 req.group_instance_id, group.group_id, new_id, old_id)
        leader_before = group.leader_id
        self.ctx.membership_changed()
        self.ctx.timer.cancel(heartbeat_key(group.group_id, old_id))
        member = group.replace_static_member(old_id, new_id)
        self._update_member(member, req)
        self._schedule_heartbeat(group, member)
        if group.is_in(S.PREPARING_REBALANCE):
            waiting: Deferred[JoinResult] = Deferred()
            member.awaiting_join = waiting
            return _result(self._maybe_complete_join(group), waiting)
        # Stable or CompletingRebalance: answer with the current generation. The old leader id is
        # returned so that the member does not run an assignment nobody would receive.
        response = JoinResult(error=ErrorCode.none, member_id=new_id, generation_id=group.generation_id,
                              protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                              leader=(old_id if leader_before == old_id else leader_before) or "")
        deferred: Deferred[JoinResult] = Deferred()
        self.ctx.answer(deferred, response)
        return _result([group_record(group)], deferred)

    def _join_known_member(self, group: ClassicGroup, req: JoinRequest) -> CoordinatorResult[JoinResult]:
        def fail(code: ErrorCode) -> CoordinatorResult[JoinResult]:
            return _result([], JoinResult(error=code, member_id=req.member_id))

        if group.is_in(S.DEAD):
            return fail(ErrorCode.coordinator_not_available)
        if not group.supports(req.protocol_type, req.protocols):
            return fail(ErrorCode.inconsistent_group_protocol)
        if req.member_id in group.pending_members:
            self.ctx.timer.cancel(pending_key(group.group_id, req.member_id))
            return self._add_member_and_rebalance(group, req.member_id, req)
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            return fail(ErrorCode.fenced_instance_id)
        instance_unknown = req.group_instance_id is not None and req.group_instance_id not in group.static_members
        member = group.members.get(req.member_id)
        if member is None or instance_unknown:
            return fail(ErrorCode.unknown_member_id)
        if group.is_in(S.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, req)
        if group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # the member lost the JoinGroup response: send it again
                return _result([], self._join_result(group, member))
            return self._update_member_and_rebalance(group, member, req)
        if group.is_in(S.STABLE):
            if group.leader_id == member.member_id or not member.matches(req.protocols):
                # a changed subscription, or the leader asking for a new assignment
                return self._update_member_and_rebalance(group, member, req)
            result = self._join_result(group, member)
            result.members = []
            return _result([], result)
        log.warning("Member %s of group %s rejoins in unexpected state %s", req.member_id, group.group_id,
                    group.state.value)
        return fail(ErrorCode.unknown_member_id)

    def _join_result(self, group: ClassicGroup, member: Member) -> JoinResult:
        is_leader = group.leader_id == member.member_id
        members = []
        if is_leader:
            members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "metadata": m.metadata_for(group.protocol_name)} for m in group.members.values()]
        return JoinResult(error=ErrorCode.none, member_id=member.member_id, generation_id=group.generation_id,
                          protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                          leader=group.leader_id or "", members=members)

    @staticmethod
    def _update_member(member: Member, req: JoinRequest) -> None:
        member.protocols = list(req.protocols)
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id = req.client_id
        member.client_host = req.client_host

    def _add_member_and_rebalance(self, group: ClassicGroup, member_id: str,
                                  req: JoinRequest) -> CoordinatorResult[JoinResult]:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, list(req.protocols), is_new=True,
                        awaiting_join=Deferred())
        if group.is_in(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        deferred = member.awaiting_join
        assert deferred is not None
        group.add(member)
        # A new member cannot heartbeat before its JoinGroup returns; it is dropped if the
        # rebalance keeps it waiting longer than the new-member timeout.
        self._schedule_heartbeat(group, member, self.ctx.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")
        records = self._maybe_complete_join(group)
        return _result(records, deferred)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member,
                                     req: JoinRequest) -> CoordinatorResult[JoinResult]:
        self._update_member(member, req)
        if member.awaiting_join is not None:
            self.ctx.answer(member.awaiting_join, JoinResult(error=ErrorCode.rebalance_in_progress,
                                                             member_id=member.member_id))
        member.awaiting_join = deferred = Deferred[JoinResult]()
        self._maybe_prepare_rebalance(group, f"updating metadata for member {member.member_id}"
                                      + (f" ({req.reason})" if req.reason else ""))
        records = self._maybe_complete_join(group)
        return _result(records, deferred)

    # -- rebalancing -------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        """Start a rebalance unless one is under way (PreparingRebalance) or the group is Dead."""
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        """Start a rebalance now (a group converted from a consumer group: migration.py)."""
        self._prepare_rebalance(group, reason)

    def schedule_heartbeat(self, group: ClassicGroup, member: Member) -> None:
        self._schedule_heartbeat(group, member)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self.ctx.timer.cancel(sync_key(group.group_id))
        was_empty = group.is_in(S.EMPTY)
        group.transition(S.PREPARING_REBALANCE, self._now())
        group.rebalance_started_ms = self._now()
        log.info("Preparing to rebalance group %s in state PreparingRebalance with old generation %d "
                 "(__consumer_offsets-%d) (reason: %s)", group.group_id, group.generation_id,
                 self.ctx.partition, reason)
        if was_empty:
            delay = self.ctx.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.new_member_added = False
            self._schedule_initial_join(group, delay, remaining)
        else:
            self.ctx.timer.schedule(join_key(group.group_id), group.rebalance_timeout_ms,
                                    lambda: self._on_join_timeout(group.group_id))

    def _schedule_initial_join(self, group: ClassicGroup, delay: int, remaining: int) -> None:
        """Kafka's InitialDelayedJoin: wait ``delay``; while new members keep arriving, wait again
        (up to the rebalance timeout) so that a starting group rebalances once, not per member.
        Gregor also waits for members that were just handed a member id (MEMBER_ID_REQUIRED) and
        are on their way back: with a zero delay, Kafka completes the first generation with
        whoever happened to be there and rebalances again for each latecomer."""
        group_id = group.group_id

        def expire() -> CoordinatorResult[None]:
            g = self.groups.get(group_id)
            if g is None or not g.is_in(S.PREPARING_REBALANCE):
                return _result()
            if (g.new_member_added or g.pending_members) and remaining > 0:
                g.new_member_added = False
                step = max(min(delay, remaining), 1)
                self._schedule_initial_join(g, step, remaining - step)
                return _result()
            return _result(self._complete_join(g))

        self.ctx.timer.schedule(join_key(group_id), delay, expire)

    def _on_join_timeout(self, group_id: str) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(S.PREPARING_REBALANCE):
            return _result()
        return _result(self._complete_join(group))

    def _maybe_complete_join(self, group: ClassicGroup) -> list[Record]:
        if not group.is_in(S.PREPARING_REBALANCE) or not group.all_joined():
            return []
        if group.generation_id == 0 and group.members and self._in_initial_delay(group):
            return []  # the initial delay decides, as in Kafka
        return self._complete_join(group)

    def _in_initial_delay(self, group: ClassicGroup) -> bool:
        return self.ctx.timer.is_scheduled(join_key(group.group_id)) and self.ctx.config.initial_rebalance_delay_ms > 0

    def _complete_join(self, group: ClassicGroup) -> list[Record]:
        self.ctx.timer.cancel(join_key(group.group_id))
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info("Member %s of group %s did not rejoin in time; removing it", member.member_id,
                         group.group_id)
                self.ctx.timer.cancel(heartbeat_key(group.group_id, member.member_id))
                group.remove(member.member_id)
        if group.is_in(S.DEAD):
            return []
        if group.members and all(m.awaiting_join is None for m in group.members.values()):
            # only static members that did not rejoin: wait another rebalance timeout for them
            self.ctx.timer.schedule(join_key(group.group_id), group.rebalance_timeout_ms,
                                    lambda: self._on_join_timeout(group.group_id))
            return []
        group.generation_id += 1
        group.rebalances += 1
        if group.rebalance_started_ms >= 0:
            group.last_rebalance_ms = self._now() - group.rebalance_started_ms
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(S.EMPTY, self._now())
            log.info("Group %s with generation %d is now empty (__consumer_offsets-%d)", group.group_id,
                     group.generation_id, self.ctx.partition)
            return [group_record(group)]
        group.protocol_name = group.select_protocol()
        leader = group.members.get(group.leader_id or "")
        if leader is None or leader.awaiting_join is None:
            group.leader_id = next(mid for mid, m in group.members.items() if m.awaiting_join is not None)
        group.transition(S.COMPLETING_REBALANCE, self._now())
        log.info("Stabilized group %s generation %d (__consumer_offsets-%d) with %d members", group.group_id,
                 group.generation_id, self.ctx.partition, len(group.members))
        group.pending_sync = set(group.members)
        for member in group.members.values():
            result = self._join_result(group, member)
            deferred = member.awaiting_join
            member.awaiting_join = None
            member.is_new = False
            if deferred is not None:
                self.ctx.answer(deferred, result)
            self._schedule_heartbeat(group, member)
        generation = group.generation_id
        self.ctx.timer.schedule(sync_key(group.group_id), group.rebalance_timeout_ms,
                                lambda: self._on_sync_timeout(group.group_id, generation))
        return []

    def _on_sync_timeout(self, group_id: str, generation: int) -> CoordinatorResult[None]:
        """Members that never sent SyncGroup after a rebalance are removed (Kafka 3.x)."""
        group = self.groups.get(group_id)
        if group is None or generation != group.generation_id or not group.pending_sync:
            return _result()
        if not group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            return _result()
        records: list[Record] = []
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                log.info("Member %s of group %s did not send SyncGroup in time; removing it", member_id, group_id)
                records += self._remove_member(group, member, "sync timeout")
        return _result(records)

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync is not None:
                self.ctx.answer(member.awaiting_sync, SyncResult(error=error))
                member.awaiting_sync = None
                # its session runs again, as after an answered sync (Kafka's propagateAssignment): a
                # heartbeat that expired while it waited was not rescheduled, and a static member
                # that never came back would hold the group in PreparingRebalance for good
                self._schedule_heartbeat(group, member)

    # -- SyncGroup ---------------------------------------------------------------------------
    def sync_group(self, req: SyncRequest) -> CoordinatorResult[SyncResult]:
        def fail(code: ErrorCode) -> CoordinatorResult[SyncResult]:
            return _result([], SyncResult(error=code))

        if not req.group_id:
            return fail(ErrorCode.invalid_group_id)
        group = self.groups.get(req.group_id)
        if group is None:
            return fail(ErrorCode.unknown_member_id)
        if group.is_in(S.DEAD):
            return fail(ErrorCode.coordinator_not_available)
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            return fail(ErrorCode.fenced_instance_id)
        member = group.members.get(req.member_id)
        if member is None:
            return fail(ErrorCode.unknown_member_id)
        if req.generation_id != group.generation_id:
            return fail(ErrorCode.illegal_generation)
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
                req.protocol_name is not None and req.protocol_name != group.protocol_name):
            return fail(ErrorCode.inconsistent_group_protocol)
        if group.is_in(S.EMPTY):
            return fail(ErrorCode.unknown_member_id)
        if group.is_in(S.PREPARING_REBALANCE):
            return fail(ErrorCode.rebalance_in_progress)
        if group.is_in(S.STABLE):
            group.pending_sync.discard(member.member_id)
            self._schedule_heartbeat(group, member)
            return _result([], SyncResult(ErrorCode.none, member.assignment, group.protocol_type,
                                                    group.protocol_name))
        # CompletingRebalance
        deferred: Deferred[SyncResult] = Deferred()
        if member.awaiting_sync is not None:
            self.ctx.answer(member.awaiting_sync, SyncResult(error=ErrorCode.rebalance_in_progress))
        member.awaiting_sync = deferred
        group.pending_sync.discard(member.member_id)
        if group.leader_id != member.member_id:
            return _result([], deferred)
        log.info("Assignment received from leader %s for group %s for generation %d", member.member_id,
                 group.group_id, group.generation_id)
        assignment = {mid: req.assignments.get(mid, b"") for mid in group.members}
        generation = group.generation_id

        def propagate(error: BaseException | None) -> None:
            if error is not None:
                return  # not written: the shard is reloaded, and unloading answers the waiting members
            if group.is_in(S.COMPLETING_REBALANCE) and group.generation_id == generation:
                for mid, m in group.members.items():
                    m.assignment = assignment[mid]
                group.transition(S.STABLE, self._now())
                self.ctx.membership_changed()
                for m in group.members.values():
                    if m.awaiting_sync is not None:
                        d = m.awaiting_sync
                        m.awaiting_sync = None
                        d.complete(SyncResult(ErrorCode.none, m.assignment, group.protocol_type,
                                              group.protocol_name))
                        self._schedule_heartbeat(group, m)
            elif not deferred.done:
                deferred.complete(SyncResult(error=ErrorCode.rebalance_in_progress))

        self.ctx.defer(propagate)
        return _result([group_record(group, assignment)], deferred)

    # -- Heartbeat ---------------------------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest) -> CoordinatorResult[ErrorCode]:
        if not req.group_id:
            return _result([], ErrorCode.invalid_group_id)
        group = self.groups.get(req.group_id)
        if group is None:
            return _result([], ErrorCode.unknown_member_id)
        if group.is_in(S.DEAD):
            return _result([], ErrorCode.coordinator_not_available)
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            return _result([], ErrorCode.fenced_instance_id)
        member = group.members.get(req.member_id)
        if member is None:
            return _result([], ErrorCode.unknown_member_id)
        if req.generation_id != group.generation_id:
            return _result([], ErrorCode.illegal_generation)
        if group.is_in(S.EMPTY):
            return _result([], ErrorCode.unknown_member_id)
        self._schedule_heartbeat(group, member)
        # no records, so nothing to replay or not: the plain result (heartbeats are the hottest path)
        return CoordinatorResult([], ErrorCode.rebalance_in_progress if group.is_in(S.PREPARING_REBALANCE)
                                 else ErrorCode.none)

    def touch(self, group_id: str, member_id: str) -> None:
        """A member's offset commit counts as a heartbeat, as in Kafka."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and member is not None and group.is_in(S.STABLE, S.PREPARING_REBALANCE):
            self._schedule_heartbeat(group, member)

    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        group_id, member_id = group.group_id, member.member_id
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.ctx.timer.schedule(heartbeat_key(group_id, member_id), timeout,
                                lambda: self._on_heartbeat_expired(group_id, member_id))

    def _on_heartbeat_expired(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        if group is None:
            return _result()
        member = group.members.get(member_id)
        if member is None:
            return _result()
        if member.awaiting_join is not None and not member.is_new:
            return _result()  # kept alive while the rebalance waits; rescheduled when it completes
        if member.awaiting_sync is not None:
            return _result()  # the sync timeout decides
        log.info("Member %s in group %s has failed, removing it from the group (session timeout)",
                 member_id, group_id)
        return _result(self._remove_member(group, member, f"removing member {member_id} on heartbeat "
                                                                    "expiration"))

    def _expire_pending_member(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.pending_members:
            return _result()
        log.info("Pending member %s in group %s has been removed after session timeout expiration",
                 member_id, group_id)
        group.pending_members.discard(member_id)
        return _result(self._maybe_complete_join(group))

    # -- LeaveGroup --------------------------------------------------------------------------
    def leave_group(self, req: LeaveRequest) -> CoordinatorResult[LeaveResult]:
        """One member (LeaveGroup v0-v2) or a batch (v3+): the top-level error and one per member."""
        group_id = req.group_id
        if not group_id:
            return _result([], LeaveResult(ErrorCode.invalid_group_id))
        group = self.groups.get(group_id)
        if group is None:
            return _result([], LeaveResult(ErrorCode.none, [
                MemberLeft(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id) for m in req.members]))
        if group.is_in(S.DEAD):
            return _result([], LeaveResult(ErrorCode.coordinator_not_available))
        records: list[Record] = []
        out: list[MemberLeft] = []
        for leaving in req.members:
            member_id, instance_id = leaving.member_id, leaving.group_instance_id
            if member_id and group.is_static_member_fenced(member_id, instance_id):
                out.append(MemberLeft(member_id, instance_id, ErrorCode.fenced_instance_id))
                continue
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self.ctx.timer.cancel(pending_key(group_id, member_id))
                records += self._maybe_complete_join(group)
                out.append(MemberLeft(member_id, instance_id, ErrorCode.none))
                continue
            target = group.members.get(group.static_member_id(instance_id) or member_id)
            if target is None:
                out.append(MemberLeft(member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            log.info("Member %s (group.instance.id %s) in group %s has left, removing it from the group%s",
                     target.member_id, target.group_instance_id, group_id,
                     f" ({leaving.reason})" if leaving.reason else "")
            records += self._remove_member(group, target, f"removing member {target.member_id} on LeaveGroup")
            out.append(MemberLeft(member_id, instance_id, ErrorCode.none))
        return _result(records, LeaveResult(ErrorCode.none, out))

    def _remove_member(self, group: ClassicGroup, member: Member, reason: str) -> list[Record]:
        self.ctx.membership_changed()
        self.ctx.timer.cancel(heartbeat_key(group.group_id, member.member_id))
        if member.awaiting_join is not None:
            self.ctx.answer(member.awaiting_join, JoinResult(error=ErrorCode.unknown_member_id, member_id=""))
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            self.ctx.answer(member.awaiting_sync, SyncResult(error=ErrorCode.unknown_member_id))
            member.awaiting_sync = None
        group.remove(member.member_id)
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
            return self._maybe_complete_join(group)
        if group.is_in(S.PREPARING_REBALANCE):
            return self._maybe_complete_join(group)
        return []

    # -- loading / unloading -----------------------------------------------------------------
    def on_loaded(self) -> None:
        self.ctx.membership_changed()
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
            if len(group.members) > self.ctx.config.max_size and group.is_in(S.STABLE):
                self._prepare_rebalance(group, f"loaded group is over capacity ({self.ctx.config.max_size})")

    def on_unloaded(self) -> None:
        """Fail every waiting member with NOT_COORDINATOR: they find the new coordinator."""
        for group in self.groups.values():
            for member in group.members.values():
                if member.awaiting_join is not None:
                    member.awaiting_join.complete(JoinResult(error=ErrorCode.not_coordinator,
                                                             member_id=member.member_id))
                    member.awaiting_join = None
                if member.awaiting_sync is not None:
                    member.awaiting_sync.complete(SyncResult(error=ErrorCode.not_coordinator))
                    member.awaiting_sync = None
            group.state = S.DEAD
