"""Classic consumer groups (the JoinGroup/SyncGroup protocol): members and group state.

States and transitions are Kafka's:

    Empty ──join──► PreparingRebalance ──all joined / timeout──► CompletingRebalance
      ▲                 ▲        │                                   │ leader's SyncGroup written
      │                 │        └──no members left──► Empty         ▼
      └──last leaves────┴───────── member change / leader rejoin ── Stable
    any ──group deleted / partition unloaded──► Dead
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gregor.coordinator.group.api import JoinResult, SyncResult
from gregor.coordinator.runtime.result import Deferred
from gregor.protocol.errors import ErrorCode


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                     GroupState.PREPARING_REBALANCE},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: Deferred[JoinResult] | None = None
    awaiting_sync: Deferred[SyncResult] | None = None
    is_new: bool = False

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # got MEMBER_ID_REQUIRED, not joined yet
    state_timestamp_ms: int = -1
    new_member_added: bool = False  # a member joined during the initial delay
    pending_sync: set[str] = field(default_factory=set)  # members expected to SyncGroup
    rebalances: int = 0  # completed since this broker loaded the group (metrics)
    rebalance_started_ms: int = -1
    last_rebalance_ms: int = -1  # how long the last completed rebalance took

    # -- state -------------------------------------------------------------------------------
    def transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # -- members -----------------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = self._pick_leader()
        return member

    def _pick_leader(self) -> str | None:
        for mid, m in self.members.items():
            if m.awaiting_join is not None:
                return mid
        return next(iter(self.members), None)

    def static_member_id(self, instance_id: str | None) -> str | None:
        return self.static_members.get(instance_id) if instance_id is not None else None

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member id that does not match the one registered for its instance id."""
        if instance_id is None:
            return False
        registered = self.static_members.get(instance_id)
        return registered is not None and registered != member_id

    def replace_static_member(self, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        if member.awaiting_join is not None:
            member.awaiting_join.complete(JoinResult(error=ErrorCode.fenced_instance_id, member_id=old_id))
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            member.awaiting_sync.complete(SyncResult(error=ErrorCode.fenced_instance_id))
            member.awaiting_sync = None
        member.member_id = new_id
        self.members[new_id] = member
        assert member.group_instance_id is not None
        self.static_members[member.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.pending_sync.discard(old_id)
        return member

    # -- protocols ---------------------------------------------------------------------------
    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {p for p, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        sets = [{p for p, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most voted wins (ties: the
        first in the candidates' order of the first member), as Kafka does."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        return max(votes, key=lambda n: votes[n])

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]
