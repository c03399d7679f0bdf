"""The group coordinator's contract, in one place: the requests its operations take, the results
they return (GroupCoordinatorService's named methods, and the shard's), and the read-only views
that the broker's other parts (metrics, telemetry) read instead of the shards.

Field names follow Kafka's request and response schemas; ``client_host`` is Kafka's
``InetAddress.toString()`` form ("/127.0.0.1"). Plain data: nothing here knows a shard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gregor.protocol.consumer_offsets import OffsetCommitValue
from gregor.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]


# -- JoinGroup --------------------------------------------------------------------------------
@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's order of preference
    client_id: str
    client_host: str
    require_known_member_id: bool = True  # JoinGroup v4+ (KIP-394)
    reason: str | None = None


@dataclass
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    # to the leader only: member_id, group_instance_id, metadata of every member
    members: list[dict[str, Any]] = field(default_factory=list)
    skip_assignment: bool = False


# -- SyncGroup --------------------------------------------------------------------------------
@dataclass
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]  # the leader's, by member id; empty from followers


@dataclass
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


# -- Heartbeat, LeaveGroup --------------------------------------------------------------------
@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(slots=True)
class LeavingMember:
    member_id: str  # "" for a static member named by its instance id
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass
class LeaveRequest:
    group_id: str
    members: list[LeavingMember]  # one (LeaveGroup v0-v2) or a batch (v3+)


@dataclass(slots=True)
class MemberLeft:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass
class LeaveResult:
    error: ErrorCode
    members: list[MemberLeft] = field(default_factory=list)


# -- ConsumerGroupHeartbeat (KIP-848) -----------------------------------------------------------
@dataclass
class ConsumerHeartbeatRequest:
    """ConsumerGroupHeartbeat. ``None`` fields were not sent (the member sends only what changed);
    ``owned`` maps topic id -> partitions the member owns."""

    group_id: str
    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: dict[Any, frozenset[int]] | None = None


@dataclass
class ConsumerHeartbeatResult:
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[Any, frozenset[int]] | None = None  # topic id -> partitions; None: unchanged


@dataclass
class ConsumerMemberView:
    """A consumer-protocol member as ConsumerGroupDescribe and ``gregor groups describe`` show it.
    Assignments map topic id -> sorted partitions."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    state: str  # Stable, UnrevokedPartitions, UnreleasedPartitions, Unknown, Left (a static member away)
    state_since_ms: int
    assigned: dict[Any, list[int]]
    target: dict[Any, list[int]]
    pending_revocation: dict[Any, list[int]]  # must still be revoked (the phase "Closing")
    pending_assignment: dict[Any, list[int]]  # in its target, not yet given (held by another member)
    unconfirmed: dict[Any, list[int]]  # given, not yet reported owned by its heartbeat (the phase "Starting")
    classic: bool = False  # a classic-protocol member (JoinGroup/SyncGroup) of the consumer group


@dataclass
class ConsumerGroupView:
    group_id: str
    state: str  # Empty, Assigning, Reconciling, Stable
    state_since_ms: int
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ConsumerMemberView]
    topic_names: dict[Any, str]  # topic id -> name, for the topics the group subscribes to


# -- OffsetCommit, OffsetFetch, OffsetDelete --------------------------------------------------
@dataclass
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass
class CommitRequest:
    group_id: str
    generation_id: int  # -1: a commit from outside the group's membership (assign mode)
    member_id: str
    group_instance_id: str | None
    partitions: list[CommitPartition]
    retention_ms: int = -1  # OffsetCommit v2-v4; -1: the broker's offsets.retention.minutes
    api_version: int = 9  # OffsetCommit's; consumer-protocol members must use v9+


CommitResult = dict[TopicPartition, ErrorCode]


# the committed values as stored (offset, leader_epoch, metadata, ...); None: nothing committed
# ErrorCode.unstable_offset_commit: a stable read of a partition a transaction holds offsets of
OffsetFetchResult = list[tuple[TopicPartition, OffsetCommitValue | ErrorCode | None]]


@dataclass
class OffsetDeleteResult:
    error: ErrorCode
    partitions: dict[TopicPartition, ErrorCode] = field(default_factory=dict)


# -- DescribeGroups, ListGroups, DeleteGroups -------------------------------------------------
@dataclass
class GroupDescription:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol_name: str
    # member_id, group_instance_id, client_id, client_host, member_metadata, member_assignment
    members: list[dict[str, Any]]


@dataclass(slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer" (KIP-848), ListGroups v5


@dataclass
class ListGroupsResult:
    error: ErrorCode  # COORDINATOR_LOAD_IN_PROGRESS while a partition loads (the list may be short)
    groups: list[ListedGroup]


DeleteGroupsResult = dict[str, ErrorCode]


# -- read-only views (metrics, telemetry) -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class GroupSummary:
    """A group's state for metrics and telemetry."""

    group_id: str
    state: str
    members: int
    generation: int
    rebalances: int  # completed since this broker loaded the group
    last_rebalance_ms: int  # duration of the last completed rebalance, -1 if none


@dataclass(frozen=True, slots=True)
class MemberView:
    """A member of a consumer group that has members, for fetch attribution."""

    group_id: str
    client_id: str
    client_host: str  # without Kafka's leading "/"
    assignment: bytes  # ConsumerProtocolAssignment bytes as the leader sent them
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class GroupSteering:
    """How an operator steers a consumer-protocol group (its ``gregor.assignment.*`` configs) and
    what its last target assignment made of it: pins held by their member, waiting for an absent
    member, or given to the others meanwhile (fallback); isolated members; frozen or not, and the
    members held back by the freeze."""

    group_id: str
    frozen: bool
    pinned: int
    waiting: int
    fell_back: int
    isolated: int
    held_back: int


@dataclass(frozen=True, slots=True)
class GroupPhase:
    """A consumer-protocol group's phase (Stable, Closing, Starting, Assigning, Reconciling,
    Empty), since when its state last changed, and the members that hold it up: (member id,
    client id, what it has not done yet, since when)."""

    group_id: str
    phase: str
    since_ms: int
    holders: list[tuple[str, str, str, int]]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    group_id: str
    topic: str
    partition: int
    offset: int
    commit_timestamp: int
