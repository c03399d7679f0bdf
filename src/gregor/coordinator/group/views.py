"""The group coordinator as metrics, telemetry and fetch attribution read it: read-only views over
the shards loaded here and the partitions followed from other brokers (followed_groups.py), each
asked through the shard's own view methods.

Every broker knows every group's members and committed offsets this way, so it can attribute the
fetches it serves and report the lag of the partitions it leads. A group's state is reported by
its coordinator only (``include_followed`` for the telemetry rows' state column). On one node every
partition is coordinated here and nothing is followed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from gregor.coordinator.group.api import CommittedOffset, GroupPhase, GroupSteering, GroupSummary, MemberView
from gregor.coordinator.group.followed_groups import FollowedGroups
from gregor.coordinator.group.shard import GroupCoordinatorShard


class ShardDirectory(Protocol):
    """What the views need of the service: its shards, by partition."""

    followed: FollowedGroups

    def active_shards(self) -> list[GroupCoordinatorShard]: ...

    def active_shard(self, partition: int) -> GroupCoordinatorShard | None: ...

    def partition_for(self, group_id: str) -> int: ...

    def load_seconds(self) -> dict[int, float]: ...

    def membership_version(self) -> int: ...


class GroupViews:
    """``leads(topic, partition)``: whether this broker leads a data partition (lag is reported by
    the partition's leader)."""

    def __init__(self, shards: ShardDirectory, leads: Callable[[str, int], bool]) -> None:
        self.shards = shards
        self.leads = leads

    def _member_shards(self) -> list[GroupCoordinatorShard]:
        return self.shards.active_shards() + list(self.shards.followed.shards())

    def group_summaries(self, include_followed: bool = False) -> Iterator[GroupSummary]:
        shards = self._member_shards() if include_followed else self.shards.active_shards()
        for shard in shards:
            yield from shard.summaries()

    def group_phase(self, group_id: str) -> GroupPhase | None:
        """The consumer-protocol group's phase, if this broker coordinates it (None otherwise)."""
        shard = self.shards.active_shard(self.shards.partition_for(group_id))
        return shard.phase_of(group_id) if shard is not None else None

    def group_phases(self) -> Iterator[GroupPhase]:
        """The phase of every consumer-protocol group coordinated here."""
        for shard in self.shards.active_shards():
            yield from shard.phases()

    def group_steerings(self) -> Iterator[GroupSteering]:
        """The operator steering of every consumer-protocol group coordinated here."""
        for shard in self.shards.active_shards():
            yield from shard.steerings()

    def committed_offsets(self) -> Iterator[CommittedOffset]:
        """Every group's committed offsets of the partitions led here."""
        led: dict[tuple[str, int], bool] = {}
        for shard in self._member_shards():
            for c in shard.committed():
                here = led.get((c.topic, c.partition))
                if here is None:
                    here = led[(c.topic, c.partition)] = self.leads(c.topic, c.partition)
                if here:
                    yield c

    def committed_position(self, group_id: str, topic: str, partition: int) -> tuple[int, int] | None:
        """The group's committed offset of the partition and its commit timestamp (ms)."""
        p = self.shards.partition_for(group_id)
        shard = self.shards.active_shard(p) or self.shards.followed.shard(p)
        return shard.committed_position(group_id, topic, partition) if shard is not None else None

    def consumer_members(self) -> Iterator[MemberView]:
        """Members of consumer groups that are neither Empty nor Dead (in a cluster: of every group,
        and of a partition this broker just stopped coordinating, its last view until it is
        followed again)."""
        for shard in self._member_shards():
            yield from shard.member_views()
        yield from self.shards.followed.bridged_members()

    def load_seconds(self) -> dict[int, float]:
        """How long the last load of each partition took."""
        return self.shards.load_seconds()

    def membership_version(self) -> int:
        """Changes whenever any group's members or assignments change, or a shard is loaded or
        unloaded (metrics attribution caches on it)."""
        return self.shards.membership_version()
