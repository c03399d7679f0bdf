"""A share group (KIP-932) as its records replay it: members with their subscriptions, the group
epoch, the target assignment and each member's current assignment.

Share groups hand out records, not partitions, so nothing is revoked: a member takes its target
assignment, and the group's assignment epoch, at its next heartbeat. States are Kafka's: Empty
(no members) and Stable; Dead once deleted."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

TopicId = uuid.UUID
Assignment = dict[TopicId, frozenset[int]]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)

    def with_(self, **changes: object) -> ShareMember:
        return replace(self, **changes)  # type: ignore[arg-type]

    def same_metadata(self, other: ShareMember) -> bool:
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names) == (
            other.rack_id, other.client_id, other.client_host, other.subscribed_topic_names)


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # topic id -> (name, partitions) whose share-partition state was initialised
    initialized: dict[TopicId, tuple[str, frozenset[int]]] = field(default_factory=dict)
    created: bool = False  # its ShareGroupMetadata record was replayed

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        return {n for m in self.members.values() for n in m.subscribed_topic_names}

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, {})

    def members_of(self, topic_id: TopicId, partition: int) -> list[str]:
        """The members whose current assignment holds the partition."""
        return [m.member_id for m in self.members.values() if partition in m.assigned.get(topic_id, ())]
