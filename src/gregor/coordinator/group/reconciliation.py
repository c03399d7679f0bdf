"""A member's next assignment on its way to its target (Kafka: CurrentAssignmentBuilder).

Pure: the member as it is, the target (epoch and partitions), who holds each partition now, and
what the member says it owns; out comes the member as it should be. Revocation comes first: a
member that must give up partitions stays at its epoch (UNREVOKED_PARTITIONS) until its heartbeat
no longer lists them; only then does it move to the target epoch and receive new partitions, and
only those that no other member holds (the rest wait: UNRELEASED_PARTITIONS). So a partition is
never given to a member while another one may still be consuming it.
"""

from __future__ import annotations

from collections.abc import Callable

from gregor.coordinator.group.consumer_group import Assignment, ConsumerMember, MemberState, TopicId
from gregor.protocol.errors import ErrorCode, KafkaError

PartitionEpoch = Callable[[TopicId, int], int]  # -1: nobody holds the partition


def owns_any(owned: Assignment | None, of: Assignment) -> bool:
    """The member still reports owning one of ``of`` (an unknown owned set counts as owning)."""
    if owned is None:
        return True
    for topic_id, partitions in owned.items():
        pending = of.get(topic_id)
        if pending and not pending.isdisjoint(partitions):
            return True
    return False


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment, partition_epoch: PartitionEpoch,
              owned: Assignment | None) -> ConsumerMember:
    """The member's next state towards ``target`` at ``target_epoch``."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        # revoked: on towards the target, from the epoch it is at (Kafka 4.x; an epoch of its own,
        # one above, would be an epoch the group never had)
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # UNKNOWN: start again from nothing
    if owned is None or owned:
        raise KafkaError(ErrorCode.fenced_member_epoch,
                         "The consumer group member is in an unknown state. It must abandon all its partitions "
                         "and rejoin.")
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _epoch(member: ConsumerMember, epoch: int, **changes: object) -> ConsumerMember:
    return member.with_subscription(member_epoch=epoch, previous_member_epoch=member.member_epoch, **changes)


def _next(member: ConsumerMember, epoch: int, target_epoch: int, target: Assignment, partition_epoch: PartitionEpoch,
          owned: Assignment | None) -> ConsumerMember:
    """Kept partitions keep the epoch they were assigned at, and so do the ones to revoke; the
    ones added are assigned at the target epoch (KIP-1251's assignment epochs)."""
    unreleased = False
    assigned: Assignment = {}
    revoking: Assignment = {}
    adding: Assignment = {}
    epochs: dict[tuple[TopicId, int], int] = {}
    for topic_id in target.keys() | member.assigned.keys():
        want = target.get(topic_id, frozenset())
        have = member.assigned.get(topic_id, frozenset())
        keep = have & want
        if keep:
            assigned[topic_id] = keep
        if have - keep:
            revoking[topic_id] = have - keep
        for p in have:
            epochs[(topic_id, p)] = member.assignment_epochs.get((topic_id, p), max(member.member_epoch, 0))
        mine = member.pending_revocation.get(topic_id, frozenset())  # held by this member: not unreleased
        new = [p for p in want - keep if p in mine or partition_epoch(topic_id, p) == -1]
        if len(new) < len(want - keep):
            unreleased = True
        if new:
            adding[topic_id] = frozenset(new)
    if revoking and owns_any(owned, revoking):
        return _epoch(member, epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                      pending_revocation=revoking, assignment_epochs=epochs)
    for topic_id, partitions in adding.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
        for p in partitions:
            epochs[(topic_id, p)] = target_epoch
    epochs = {tp: e for tp, e in epochs.items() if tp[1] in assigned.get(tp[0], ())}
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _epoch(member, target_epoch, state=state, assigned=assigned, pending_revocation={},
                  assignment_epochs=epochs)
