"""The group coordinator service: owns one ShardRuntime per ``__consumer_offsets`` partition,
routes each group to its shard (``partition_for``), and creates the topic at start-up.

On a single node every partition is led here, so every group has a coordinator: a group can
never hash to a partition "whose leader is gone". A shard that fails to load is retried with
back-off and reported (FindCoordinator says which partition and why) instead of leaving its
groups looping on COORDINATOR_NOT_AVAILABLE without explanation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from gregor.coordinator.group.api import CommittedOffset, GroupSummary, MemberView
from gregor.coordinator.group.context import GroupConfig
from gregor.coordinator.group.model import GroupState
from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState, resolve
from gregor.coordinator.runtime.timer import Timer
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.coordinator")

RELOAD_BACKOFF_S = 5.0


@functools.lru_cache(maxsize=65536)
def _cached_partition_for(group_id: str, partitions: int) -> int:
    return partition_for(group_id, partitions)


def group_config(config: Any) -> GroupConfig:
    return GroupConfig(
        min_session_timeout_ms=config["group.min.session.timeout.ms"],
        max_session_timeout_ms=config["group.max.session.timeout.ms"],
        initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
        max_size=config["group.max.size"],
        offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
        offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
    )


class GroupCoordinatorService:
    """``create_topic(name, partitions, configs, internal=True)`` creates ``__consumer_offsets``
    the way the admin API creates topics."""

    def __init__(self, config: Any, topics: TopicRegistry, logs: LogManager,
                 create_topic: Callable[..., Any]) -> None:
        self.broker_config = config
        self.topics = topics
        self.logs = logs
        self.create_topic = create_topic
        self.config = group_config(config)
        self.runtimes: dict[int, ShardRuntime[GroupCoordinatorShard]] = {}
        self.num_partitions = config["offsets.topic.num.partitions"]
        self._watchdog: asyncio.Task[None] | None = None
        self._membership_version = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def ensure_topic(self) -> None:
        topic = self.topics.get(OFFSETS_TOPIC)
        wanted = self.broker_config["offsets.topic.num.partitions"]
        if topic is None:
            self.create_topic(OFFSETS_TOPIC, wanted, {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.broker_config["offsets.topic.segment.bytes"]),
            }, internal=True)
            topic = self.topics.get(OFFSETS_TOPIC)
        assert topic is not None
        if topic.partitions != wanted:
            log.warning("%s has %d partitions but offsets.topic.num.partitions=%d; the topic's count is used, "
                        "as changing it would move every group", OFFSETS_TOPIC, topic.partitions, wanted)
        self.num_partitions = topic.partitions

    async def start(self) -> None:
        self.ensure_topic()
        for p in range(self.num_partitions):
            self.load(p)
        self._watchdog = asyncio.get_running_loop().create_task(self._reload_failed())

    def load(self, partition: int) -> ShardRuntime[GroupCoordinatorShard]:
        """Become coordinator of one partition (on one node: of all of them)."""
        plog = self.logs.get(OFFSETS_TOPIC, partition)
        assert plog is not None
        notify = self.logs.notifier.notify
        runtime = ShardRuntime(partition, plog, self._make_shard, RECORD_SERDE,
                               codec=self.broker_config["offsets.topic.compression.codec"],
                               on_append=lambda: notify((OFFSETS_TOPIC, partition)),
                               label="offsets and group metadata")
        self.runtimes[partition] = runtime
        runtime.start_loading()
        return runtime

    def unload(self, partition: int) -> None:
        runtime = self.runtimes.pop(partition, None)
        if runtime is not None:
            runtime.unload()
            self._bump_membership()

    def _make_shard(self, partition: int, timer: Timer) -> GroupCoordinatorShard:
        from gregor.log.partition_log import now_ms

        shard = GroupCoordinatorShard(partition, self.config, now_ms, timer, topic_exists=self._topic_exists)
        shard.ctx.on_membership_change = self._bump_membership
        return shard

    def _bump_membership(self) -> None:
        self._membership_version += 1

    def _topic_exists(self, topic: str, partition: int) -> bool:
        t = self.topics.get(topic)
        return t is not None and 0 <= partition < t.partitions

    async def wait_loaded(self) -> None:
        for rt in list(self.runtimes.values()):
            await rt.wait_loaded()

    async def _reload_failed(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_BACKOFF_S)
            for rt in list(self.runtimes.values()):
                if rt.state is ShardState.FAILED:
                    rt.reload()

    async def stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        for p in list(self.runtimes):
            self.unload(p)

    # -- routing -----------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return _cached_partition_for(group_id, self.num_partitions)

    def runtime_for(self, group_id: str) -> ShardRuntime[GroupCoordinatorShard]:
        runtime = self.runtimes.get(self.partition_for(group_id))
        if runtime is None:
            raise KafkaError(ErrorCode.not_coordinator, f"group {group_id!r} is not coordinated here")
        return runtime

    def status(self, group_id: str) -> tuple[ErrorCode, str | None]:
        """For FindCoordinator: can this broker coordinate the group right now?"""
        try:
            self.runtime_for(group_id).check_available()
        except KafkaError as e:
            if e.code == ErrorCode.coordinator_load_in_progress:
                return ErrorCode.none, None  # the coordinator is here; requests will say "loading"
            return e.code, e.message
        return ErrorCode.none, None

    async def write(self, group_id: str, op: Callable[[GroupCoordinatorShard], Any]) -> Any:
        return await resolve(self.runtime_for(group_id).execute(op))

    def read(self, group_id: str, fn: Callable[[GroupCoordinatorShard], Any]) -> Any:
        return self.runtime_for(group_id).read(fn)

    def active_shards(self) -> list[GroupCoordinatorShard]:
        return [rt.shard for rt in self.runtimes.values() if rt.state is ShardState.ACTIVE and rt.shard]

    # -- read-only views (metrics, telemetry) -------------------------------------------------
    def group_summaries(self) -> Iterator[GroupSummary]:
        for shard in self.active_shards():
            for group_id, g in sorted(shard.groups.items()):
                yield GroupSummary(group_id, g.state.value, len(g.members), g.generation_id, g.rebalances,
                                   g.last_rebalance_ms)

    def committed_offsets(self) -> Iterator[CommittedOffset]:
        for shard in self.active_shards():
            for group_id, offsets in sorted(shard.offsets_mgr.offsets.items()):
                for (topic, partition), v in sorted(offsets.items()):
                    yield CommittedOffset(group_id, topic, partition, v.offset, v.commit_timestamp)

    def committed_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        runtime = self.runtimes.get(self.partition_for(group_id))
        if runtime is None or runtime.state is not ShardState.ACTIVE or runtime.shard is None:
            return None
        v = runtime.shard.offsets_mgr.offsets.get(group_id, {}).get((topic, partition))
        return v.offset if v is not None else None

    def consumer_members(self) -> Iterator[MemberView]:
        """Members of consumer groups that are neither Empty nor Dead."""
        for shard in self.active_shards():
            for group in shard.groups.values():
                if group.protocol_type != "consumer" or group.is_in(GroupState.DEAD, GroupState.EMPTY):
                    continue
                for m in group.members.values():
                    yield MemberView(group.group_id, m.client_id, m.client_host.lstrip("/"), m.assignment)

    def load_seconds(self) -> dict[int, float]:
        """How long the last load of each partition took."""
        return {p: rt.load_stats[1] for p, rt in sorted(self.runtimes.items())}

    def membership_version(self) -> int:
        """Changes whenever any group's members or assignments change, or a shard is loaded or
        unloaded (metrics attribution caches on it)."""
        return self._membership_version

    @property
    def loading(self) -> bool:
        return any(rt.state is ShardState.LOADING for rt in self.runtimes.values())

    def on_topic_deleted(self, topic: str) -> None:
        """Remove committed offsets of a deleted topic (Kafka: handleDeletedPartitions)."""
        removed = 0
        for rt in self.runtimes.values():
            if rt.state is ShardState.ACTIVE:
                removed += rt.execute(lambda s: s.delete_topic_offsets(topic))
        log.info("Removed %d offsets associated with deleted topic %s", removed, topic)
