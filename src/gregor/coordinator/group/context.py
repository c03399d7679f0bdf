"""What the managers of one shard share: configuration, clock, timers, the groups, and the
completions that must wait until the current operation's records are committed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.coordinator.group.consumer_group import ConsumerGroup, TopicId
from gregor.coordinator.group.model import ClassicGroup
from gregor.coordinator.group.share_group import ShareGroup
from gregor.coordinator.group.topic_hashes import TopicHashes
from gregor.coordinator.runtime.committed import CommittedReads
from gregor.coordinator.runtime.result import Deferred
from gregor.coordinator.runtime.shard import Completion
from gregor.coordinator.runtime.timer import Timer


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3_600_000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    # consumer-protocol groups (KIP-848), Kafka's group.consumer.* keys
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    consumer_migration_policy: str = "bidirectional"  # disabled | upgrade | downgrade | bidirectional
    consumer_slow_phase_ms: int = 60_000  # a group outside Stable longer than this is logged with who holds it
    # share groups (KIP-932), Kafka's group.share.* keys
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5_000
    share_max_size: int = 200


@dataclass
class ShardContext:
    partition: int
    config: GroupConfig
    clock: Callable[[], int]
    timer: Timer
    topic_exists: Callable[[str, int], bool] = lambda topic, partition: True
    # topic name -> (topic id, partition count), None if there is no such topic
    topic_metadata: Callable[[str], tuple[TopicId, int] | None] = lambda name: None
    topic_name: Callable[[TopicId], str | None] = lambda topic_id: None
    # topic name -> its KIP-1101 hash (id, partitions, replica racks); None: from topic_metadata,
    # without racks
    topic_hash_of: Callable[[str], int] | None = None
    # a group's own settings (group configs: IncrementalAlterConfigs on the GROUP resource), by key
    group_settings: Callable[[str], dict[str, Any]] = lambda group_id: {}
    groups: dict[str, ClassicGroup] = field(default_factory=dict)
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    share_groups: dict[str, ShareGroup] = field(default_factory=dict)
    completions: list[Completion] = field(default_factory=list)
    membership_version: int = 0  # bumped whenever members or their assignments change
    on_membership_change: Callable[[], object] | None = None
    # what reads may see while writes wait for replication (runtime/committed.py)
    committed_reads: CommittedReads = field(default_factory=CommittedReads)

    def topic_hash(self, name: str) -> int:
        """The topic's metadata hash (metadata_hash.py); 0 if there is no such topic. Without a
        ``topic_hash_of`` (a shard built without a broker), from the topic's id and partition
        count alone (topic_hashes.py without a cluster)."""
        if self.topic_hash_of is None:
            self.topic_hash_of = TopicHashes(self.topic_metadata, None).hash_of
        return self.topic_hash_of(name)

    def membership_changed(self) -> None:
        self.membership_version += 1
        if self.on_membership_change is not None:
            self.on_membership_change()

    def defer(self, fn: Completion) -> None:
        """Run ``fn(None)`` once the current operation's records are committed, or ``fn(error)``
        if they never will be."""
        self.completions.append(fn)

    def answer(self, deferred: Deferred[Any], value: Any) -> None:
        """Complete another request's ``deferred`` answer with ``value`` once the current
        operation's records are committed; fail it with the error if they never will be."""

        def complete(error: BaseException | None) -> None:
            if error is None:
                deferred.complete(value)
            else:
                deferred.fail(error)

        self.completions.append(complete)

