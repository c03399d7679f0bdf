"""Consumer-protocol groups (KIP-848): the group, its members and their assignments, in memory.

This is the state that replaying the consumer-group records of ``__consumer_offsets`` builds
(``ConsumerGroupManager.replay``); handlers read it and never change it directly, so a loaded
partition and a live one hold the same groups. The rules are Kafka's (the group coordinator's
``modern.consumer`` package):

- The **group epoch** goes up whenever the group's membership or subscriptions (or the partition
  counts of its topics) change; the **target assignment** is computed by a server-side assignor
  for a group epoch (its *assignment epoch*).
- Each **member** converges to its target one heartbeat at a time (``reconciliation``): its
  **member epoch** reaches the assignment epoch once it has revoked what it must give up, and it
  receives a partition only once the previous owner has released it. A partition is therefore
  never owned by two members: ``owners`` maps every assigned or pending-revocation partition to
  the one member holding it.
- The group's state is derived: Empty (no members), Assigning (group epoch ahead of the target),
  Reconciling (a member not yet at the target), Stable.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gregor.protocol.consumer_offsets import ClassicMemberMetadata

TopicId = uuid.UUID
Assignment = dict[TopicId, frozenset[int]]
EMPTY: Assignment = {}

JOIN_EPOCH = 0  # a member joining (or rejoining) the group sends epoch 0
LEAVE_EPOCH = -1  # a member leaving
STATIC_LEAVE_EPOCH = -2  # a static member leaving for now (it comes back with its instance id)

log = logging.getLogger("gregor.coordinator")


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """What a regex subscription resolved to (ConsumerGroupRegularExpressionValue; subscriptions.py)."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


class MemberState(enum.IntEnum):
    """A member's reconciliation state; values as Kafka's ``MemberState`` (written in records)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1  # must revoke partitions before going on
    UNRELEASED_PARTITIONS = 2  # waits for partitions that other members have not released yet
    UNKNOWN = 127


class GroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ConsumerMember:
    """One member: its subscription (persisted in ConsumerGroupMemberMetadata) and its current
    assignment (ConsumerGroupCurrentMemberAssignment)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: the epoch at which each partition held (assigned or pending revocation) was
    # assigned to this member; an offset commit at an older member epoch is accepted for a
    # partition assigned at or before it
    assignment_epochs: dict[tuple[TopicId, int], int] = field(default_factory=dict)
    # a member that joined with the classic protocol (JoinGroup): its session timeout and protocols
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def with_subscription(self, **changes: object) -> ConsumerMember:
        return replace(self, **changes)  # type: ignore[arg-type]

    def same_subscription(self, other: ConsumerMember) -> bool:
        return (self.subscribed_topic_names == other.subscribed_topic_names
                and self.subscribed_topic_regex == other.subscribed_topic_regex)

    def same_metadata(self, other: ConsumerMember) -> bool:
        """Everything ConsumerGroupMemberMetadata holds is the same."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic) == (
                other.instance_id, other.rack_id, other.client_id, other.client_host, other.subscribed_topic_names,
                other.subscribed_topic_regex, other.rebalance_timeout_ms, other.server_assignor, other.classic)

    def same_assignment(self, other: ConsumerMember) -> bool:
        """Everything ConsumerGroupCurrentMemberAssignment holds is the same."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                self.pending_revocation, self.assignment_epochs) == (
                other.member_epoch, other.previous_member_epoch, other.state, other.assigned,
                other.pending_revocation, other.assignment_epochs)

    def assignment_epoch(self, topic_id: TopicId, partition: int) -> int | None:
        """The epoch at which the member was given a partition it holds (assigned or pending
        revocation); None if it does not hold it. A partition whose epoch was never recorded
        (a record written before KIP-1251) counts as assigned at the member's epoch."""
        if partition not in self.assigned.get(topic_id, ()) and partition not in self.pending_revocation.get(
                topic_id, ()):
            return None
        return self.assignment_epochs.get((topic_id, partition), max(self.member_epoch, 0))


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    # partition -> (member id, member epoch) of the member holding it (assigned or pending revocation)
    owners: dict[tuple[TopicId, int], tuple[str, int]] = field(default_factory=dict)
    # topic name -> partition count the target was computed for (ConsumerGroupPartitionMetadata)
    # (derived from the topics, not replayed: Kafka 4.1 writes only the hash below)
    subscription_metadata: dict[str, tuple[TopicId, int]] = field(default_factory=dict)
    # KIP-1101: the hash of the subscribed topics the target assignment was computed for
    # (ConsumerGroupMetadata's MetadataHash); another hash at a heartbeat bumps the group epoch
    metadata_hash: int = 0
    # a ConsumerGroupPartitionMetadata record (Kafka 4.0's, or Gregor's before) is in the log: it
    # is tombstoned with the next epoch
    has_partition_metadata_record: bool = False
    creation_time_ms: int = -1  # KIP-1282: when the group was created (-1: unknown)
    # (topics, their hash, until when it is kept): consumer_group_manager._hash_of
    hash_cache: tuple[dict[str, tuple[TopicId, int]], int, int] | None = None
    # regex -> how many members subscribe to it, and what each regex resolved to
    # (ConsumerGroupRegularExpression records; subscriptions.py)
    regex_subscribers: dict[str, int] = field(default_factory=dict)
    topic_subscribers: dict[str, int] = field(default_factory=dict)  # topic name -> members naming it
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    state_since_ms: int = -1
    # not persisted: what each member last reported owning, since when each member is in its
    # state, how many active members are stable at each epoch (so the state is O(1))
    reported: dict[str, Assignment] = field(default_factory=dict)
    member_since_ms: dict[str, int] = field(default_factory=dict)
    stable_at: dict[int, int] = field(default_factory=dict)
    active: int = 0  # members not away (a static member that left for now is away)
    rebalances: int = 0
    last_state: GroupState = GroupState.EMPTY
    slow_reported_since: int = -2  # the state_since_ms already reported as slow
    steered: Any = None  # how the last target assignment was steered (assignment.steering.Steered)

    # -- derived state -------------------------------------------------------------------------
    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if self.stable_at.get(self.assignment_epoch, 0) < self.active:
            return GroupState.RECONCILING
        return GroupState.STABLE

    def note_state(self, now_ms: int) -> None:
        """Called after every change: remembers when the group's state last changed."""
        state = self.state
        if state is not self.last_state:
            if state is GroupState.ASSIGNING or (state is GroupState.RECONCILING
                                                 and self.last_state is GroupState.STABLE):
                self.rebalances += 1
            self.last_state = state
            self.state_since_ms = now_ms

    def phase(self) -> tuple[str, list[tuple[str, str, int]]]:
        """The group's phase as operators see it, and who holds it there: (phase, [(member id,
        what it has not done yet, since when)]). Closing: members must still revoke partitions
        (before anyone may start them); Starting: members were given partitions they have not yet
        confirmed (by a heartbeat that lists them) or wait for partitions others still hold;
        Assigning: a new target is being computed; Stable; Empty."""
        state = self.state
        if state is GroupState.EMPTY:
            return "Empty", []
        if state is GroupState.ASSIGNING:
            return "Assigning", []
        closing, starting = [], []
        for m in self.members.values():
            since = self.member_since_ms.get(m.member_id, -1)
            if m.pending_revocation:
                closing.append((m.member_id, f"revoke {size_of(m.pending_revocation)} partition(s)", since))
            elif m.state is MemberState.UNRELEASED_PARTITIONS:
                starting.append((m.member_id, "wait for partitions other members still hold", since))
            elif (reported := self.reported.get(m.member_id)) is not None and not is_subset(m.assigned, reported):
                missing = sum(len(ps - reported.get(t, frozenset())) for t, ps in m.assigned.items())
                starting.append((m.member_id, f"confirm {missing} partition(s) it was given", since))
        if closing:
            return "Closing", closing
        if starting:
            return "Starting", starting
        return ("Stable" if state is GroupState.STABLE else "Reconciling"), []

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
        return names

    def all_classic_except(self, member_id: str) -> bool:
        """Every member but ``member_id`` joined with the classic protocol (Kafka:
        allMembersUseClassicProtocolExcept)."""
        return all(m.uses_classic_protocol for mid, m in self.members.items() if mid != member_id)

    def classic_protocols(self) -> set[str] | None:
        """The protocol names every classic member supports (None: no classic member)."""
        common: set[str] | None = None
        for m in self.members.values():
            if m.classic is not None:
                names = {name for name, _ in m.classic.supported_protocols}
                common = names if common is None else common & names
        return common

    def waits_for_unreleased(self, member: ConsumerMember) -> bool:
        """A partition of the member's target that it has not received is still held by another
        member (Kafka: waitingOnUnreleasedPartition)."""
        for topic_id, partitions in self.target_of(member.member_id).items():
            have = member.assigned.get(topic_id, frozenset())
            for p in partitions - have:
                owner = self.owners.get((topic_id, p))
                if owner is not None and owner[0] != member.member_id:
                    return True
        return False

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, EMPTY)

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def partition_epoch(self, topic_id: TopicId, partition: int) -> int:
        """The epoch of the member holding the partition, -1 if free (Kafka: currentPartitionEpoch)."""
        owner = self.owners.get((topic_id, partition))
        return -1 if owner is None else owner[1]

    def owner_of(self, topic_id: TopicId, partition: int) -> str | None:
        owner = self.owners.get((topic_id, partition))
        return None if owner is None else owner[0]

    # -- changes (called by replay only) -------------------------------------------------------
    def put_member(self, member: ConsumerMember, now_ms: int = -1) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            self._count(old, -1)
            self._count_regex(old, -1)
            self._count_topics(old, -1)
        if old is None or old.state is not member.state or old.member_epoch != member.member_epoch:
            self.member_since_ms[member.member_id] = now_ms
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._hold(member)
        self._count(member, 1)
        self._count_regex(member, 1)
        self._count_topics(member, 1)

    def _count(self, member: ConsumerMember, delta: int) -> None:
        if member.member_epoch == STATIC_LEAVE_EPOCH:
            return
        self.active += delta
        if member.state is MemberState.STABLE:
            self.stable_at[member.member_epoch] = self.stable_at.get(member.member_epoch, 0) + delta

    def _count_topics(self, member: ConsumerMember, delta: int) -> None:
        for name in member.subscribed_topic_names:
            n = self.topic_subscribers.get(name, 0) + delta
            if n > 0:
                self.topic_subscribers[name] = n
            else:
                self.topic_subscribers.pop(name, None)

    def _count_regex(self, member: ConsumerMember, delta: int) -> None:
        regex = member.subscribed_topic_regex
        if regex:
            n = self.regex_subscribers.get(regex, 0) + delta
            if n > 0:
                self.regex_subscribers[regex] = n
            else:
                self.regex_subscribers.pop(regex, None)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        old = self.members.pop(member_id, None)
        if old is None:
            return None
        self._release(old)
        self._count(old, -1)
        self._count_regex(old, -1)
        self._count_topics(old, -1)
        self.member_since_ms.pop(member_id, None)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        self.reported.pop(member_id, None)
        return old

    def _hold(self, member: ConsumerMember) -> None:
        """The member's partitions are owned by it. A record giving a partition another member still
        holds is a defect of whatever wrote it, but replay is the only way state is built: raising
        here would make the group's ``__consumer_offsets`` partition unloadable for good (seen
        once, a static member replaced under broker pauses). The later record wins, loudly; the
        next heartbeats reconcile both members against the target assignment."""
        for topic_id, partitions in _both(member):
            for p in partitions:
                held = self.owners.get((topic_id, p))
                if held is not None and held[0] != member.member_id:
                    log.error("group %s: partition %s-%d is given to %s while %s still holds it (at epoch %d); "
                              "the later record wins", self.group_id, topic_id, p, member.member_id, held[0],
                              held[1])
                self.owners[(topic_id, p)] = (member.member_id, member.member_epoch)

    def _release(self, member: ConsumerMember) -> None:
        for topic_id, partitions in _both(member):
            for p in partitions:
                held = self.owners.get((topic_id, p))
                if held is not None and held[0] == member.member_id:
                    del self.owners[(topic_id, p)]


def _both(member: ConsumerMember) -> Iterable[tuple[TopicId, frozenset[int]]]:
    yield from member.assigned.items()
    yield from member.pending_revocation.items()


def assignment_of(pairs: Mapping[TopicId, Iterable[int]]) -> Assignment:
    """An Assignment from topic id -> partitions, without empty topics."""
    return {t: frozenset(ps) for t, ps in pairs.items() if ps}


def size_of(a: Assignment) -> int:
    return sum(len(ps) for ps in a.values())


def contains(a: Assignment, topic_id: TopicId, partition: int) -> bool:
    ps = a.get(topic_id)
    return ps is not None and partition in ps


def is_subset(owned: Assignment | None, of: Assignment) -> bool:
    if owned is None:
        return False
    return all(ps <= of.get(t, frozenset()) for t, ps in owned.items())
