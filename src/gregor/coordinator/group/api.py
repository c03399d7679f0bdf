"""The group coordinator's contract: the types its operations take and return, in one place.

Read-only views for the broker's other parts (metrics, telemetry) are here too: they read the
coordinator's state through these, never its shards.
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    group_id: str
    topic: str
    partition: int
    offset: int
    commit_timestamp: int
