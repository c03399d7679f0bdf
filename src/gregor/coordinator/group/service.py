"""The group coordinator service: owns one ShardRuntime per ``__consumer_offsets`` partition,
routes each group to its shard (``partition_for``), and creates the topic at start-up.

Handlers call it by name (``join_group``, ``sync_group``, ``heartbeat``, ``leave_group``,
``commit_offsets``, ``fetch_offsets``, ``delete_offsets``, ``describe_group``, ``list_groups``,
``delete_group``, ``coordinator_status``) with the types of ``group/api.py``; metrics and
telemetry read it through the read-only views (``group_summaries``, ``committed_offsets``, ...).

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
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from gregor.assignment.steering import Steering
from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.group.api import (
    CommitRequest,
    CommitResult,
    CommittedOffset,
    ConsumerGroupView,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    DeleteGroupsResult,
    GroupDescription,
    GroupPhase,
    GroupSummary,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    ListGroupsResult,
    MemberView,
    OffsetDeleteResult,
    OffsetFetchResult,
    SyncRequest,
    SyncResult,
    TopicPartition,
)
from gregor.coordinator.group.context import GroupConfig
from gregor.coordinator.group.followed_groups import FollowedGroups, NoTimer
from gregor.coordinator.group.locator import (
    CoordinatorLocation,
    ReasonLog,
    leaderless_reason,
    load_progress_note,
    offsets_topic_short_of_brokers,
)
from gregor.coordinator.group.model import GroupState
from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard
from gregor.coordinator.group.subscriptions import TopicCatalogue
from gregor.coordinator.runtime.result import CoordinatorResult, Deferred
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState, resolve
from gregor.coordinator.runtime.timer import Timer
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from gregor.protocol.consumer_protocol import encode_assignment
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.coordinator")

RELOAD_BACKOFF_S = 5.0


@functools.lru_cache(maxsize=65536)
def _cached_partition_for(group_id: str, partitions: int) -> int:
    return partition_for(group_id, partitions)


def _delete_group(group_id: str, shard: GroupCoordinatorShard) -> CoordinatorResult[DeleteGroupsResult]:
    return shard.delete_groups([group_id])


def group_config(config: Any) -> GroupConfig:
    return GroupConfig(
        min_session_timeout_ms=config["group.min.session.timeout.ms"],
        max_session_timeout_ms=config["group.max.session.timeout.ms"],
        initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
        max_size=config["group.max.size"],
        offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
        offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
        consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
        consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
        consumer_max_size=config["group.consumer.max.size"],
        consumer_assignors=tuple(config["group.consumer.assignors"]),
        consumer_migration_policy=config["group.consumer.migration.policy"],
        consumer_slow_phase_ms=config["group.consumer.slow.phase.ms"],
    )


class GroupCoordinatorService:
    """``create_topic(name, partitions, configs, internal=True)`` creates ``__consumer_offsets``
    the way the admin API creates topics."""

    def __init__(self, config: Any, topics: TopicRegistry, logs: LogManager,
                 create_topic: Callable[..., Any], cluster: ClusterMetadata | None = None,
                 group_settings: Callable[[str], dict[str, Any]] | None = None) -> None:
        self.broker_config = config
        self.group_settings = group_settings if group_settings is not None else (lambda group_id: {})
        self.cluster = cluster if cluster is not None else ClusterMetadata(config["node.id"])
        self.reasons = ReasonLog(log)
        self.topics = topics
        self.logs = logs
        self.create_topic = create_topic
        self.config = group_config(config)
        self.runtimes: dict[int, ShardRuntime[GroupCoordinatorShard]] = {}
        self.num_partitions = config["offsets.topic.num.partitions"]
        self._watchdog: asyncio.Task[None] | None = None
        self._membership_version = 0
        # the topics that consumer groups' regular expressions match (one view for every shard)
        self.topic_catalogue = TopicCatalogue(lambda: self.topics.by_name.keys())
        # in a cluster: shards follow leadership of their partitions (attach_replication)
        self._append_internal: Callable[[str, int, bytes], int] | None = None
        # in a cluster: every other partition's groups, followed read-only (metrics attribution)
        self.followed: FollowedGroups | None = None

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
            if topic is None:  # in a cluster the topic is created asynchronously
                return
        if topic.partitions != wanted:
            log.warning("%s has %d partitions but offsets.topic.num.partitions=%d; the topic's count is used, "
                        "as changing it would move every group", OFFSETS_TOPIC, topic.partitions, wanted)
        self.num_partitions = topic.partitions

    async def start(self) -> None:
        if self._append_internal is None:  # one node: coordinator of every partition
            self.ensure_topic()
            for p in range(self.num_partitions):
                self.load(p)
        if self.followed is not None:
            self.followed.start()
        self._watchdog = asyncio.get_running_loop().create_task(self._reload_failed())

    def attach_replication(self, append_internal: Callable[[str, int, bytes], int]) -> None:
        """In a cluster: a shard is loaded when this broker becomes leader of its partition and
        unloaded when it stops being leader (``on_leadership``); its writes are appended by the
        leader (``append_internal``) and answered when the high watermark covers them
        (``on_high_watermark``)."""
        self._append_internal = append_internal
        self.followed = FollowedGroups(self.cluster, self.logs, self._offsets_partitions, self._loaded_here,
                                       self._make_followed_shard, self._bump_membership)

    def _loaded_here(self) -> set[int]:
        return {p for p, rt in self.runtimes.items() if rt.state is ShardState.ACTIVE}

    def _offsets_partitions(self) -> int:
        topic = self.topics.get(OFFSETS_TOPIC)
        return topic.partitions if topic is not None else 0

    def on_leadership(self, topic: str, partition: int, leader_epoch: int, is_leader: bool) -> None:
        if topic != OFFSETS_TOPIC:
            return
        t = self.topics.get(OFFSETS_TOPIC)
        if t is not None:
            self.num_partitions = t.partitions
        self.unload(partition)
        if is_leader:  # followed until its shard is loaded here (followed_groups.py)
            self.load(partition)

    def on_high_watermark(self, topic: str, partition: int, offset: int) -> None:
        if topic == OFFSETS_TOPIC:
            runtime = self.runtimes.get(partition)
            if runtime is not None:
                runtime.on_high_watermark(offset)

    def load(self, partition: int) -> ShardRuntime[GroupCoordinatorShard]:
        """Become coordinator of one partition (on one node: of all of them)."""
        plog = self.logs.get(OFFSETS_TOPIC, partition)
        assert plog is not None
        notify = self.logs.notifier.notify
        append_internal = self._append_internal
        # offsets.commit.required.acks=1: a write is answered once the leader has it
        leader_only = append_internal is not None and self.broker_config["offsets.commit.required.acks"] == 1
        runtime = ShardRuntime(partition, plog, self._make_shard, RECORD_SERDE,
                               committed_offset=(lambda: plog.log_end_offset) if leader_only else None,
                               codec=self.broker_config["offsets.topic.compression.codec"],
                               on_append=lambda: notify((OFFSETS_TOPIC, partition)),
                               label="offsets and group metadata",
                               append=(None if append_internal is None
                                       else lambda batch: append_internal(OFFSETS_TOPIC, partition, batch)))
        self.runtimes[partition] = runtime
        runtime.start_loading()
        return runtime

    def unload(self, partition: int) -> None:
        runtime = self.runtimes.pop(partition, None)
        if runtime is not None:
            if self.followed is not None and runtime.state is ShardState.ACTIVE and runtime.shard is not None:
                # fetches keep being attributed while the partition is followed from its replica
                self.followed.bridge(partition, list(_members_of(runtime.shard)), runtime.plog.log_end_offset)
            runtime.unload()
            self._bump_membership()

    def _make_shard(self, partition: int, timer: Timer) -> GroupCoordinatorShard:
        from gregor.log.partition_log import now_ms

        shard = GroupCoordinatorShard(partition, self.config, now_ms, timer, topic_exists=self._topic_exists,
                                      topic_metadata=self._topic_metadata)
        shard.ctx.group_settings = self.group_settings
        shard.consumer_mgr.regexes.catalogue = self.topic_catalogue
        shard.ctx.on_membership_change = self._bump_membership
        return shard

    def _make_followed_shard(self, partition: int) -> GroupCoordinatorShard:
        from gregor.log.partition_log import now_ms

        return GroupCoordinatorShard(partition, self.config, now_ms, NoTimer(), topic_exists=self._topic_exists,
                                     topic_metadata=self._topic_metadata)

    def _bump_membership(self) -> None:
        self._membership_version += 1

    def _topic_exists(self, topic: str, partition: int) -> bool:
        t = self.topics.get(topic)
        return t is not None and 0 <= partition < t.partitions

    def _topic_metadata(self, topic: str) -> tuple[uuid.UUID, int] | None:
        t = self.topics.get(topic)
        return None if t is None else (t.topic_id, t.partitions)

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
        if self.followed is not None:
            await self.followed.stop()
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        for p in list(self.runtimes):
            self.unload(p)

    # -- routing -----------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return _cached_partition_for(group_id, self.num_partitions)

    def _runtime_for(self, group_id: str) -> ShardRuntime[GroupCoordinatorShard]:
        partition = self.partition_for(group_id)
        runtime = self.runtimes.get(partition)
        if runtime is None:
            raise self._unavailable(partition, KafkaError(ErrorCode.not_coordinator, self._not_here(partition)))
        return runtime

    def _not_here(self, partition: int) -> str:
        name = f"{OFFSETS_TOPIC}-{partition}"
        if not self.cluster.clustered:
            return f"{name} is not loaded here"
        leader = self.cluster.partition(OFFSETS_TOPIC, partition).leader
        if leader == self.cluster.node_id:
            return f"{name} is led here and its shard is about to be loaded"
        if leader < 0:
            return f"{name} has no leader now (FindCoordinator says why)"
        return f"{name} is led by broker {leader}, not by broker {self.cluster.node_id}: ask FindCoordinator again"

    def _unavailable(self, partition: int, error: KafkaError) -> KafkaError:
        """Log, once per situation, why a request for ``partition`` was refused."""
        self.reasons.note(("refused", partition, error.code),
                          f"group requests for {OFFSETS_TOPIC}-{partition} answered "
                          f"{error.code.name.upper()}: {error.message}", logging.INFO)
        return error

    def _writable(self, partition: int) -> None:
        """offsets.commit.required.acks=-1 (Kafka's acks=all for the coordinator's writes): refuse a
        write before it runs when the partition's ISR is smaller than min.insync.replicas, as Kafka
        does (NOT_ENOUGH_REPLICAS, which the group APIs answer as COORDINATOR_NOT_AVAILABLE)."""
        if not self.cluster.clustered or self.broker_config["offsets.commit.required.acks"] != -1:
            return
        topic = self.topics.get(OFFSETS_TOPIC)
        need = int((topic.configs.get("min.insync.replicas") if topic is not None else None)
                   or self.broker_config["min.insync.replicas"])
        isr = self.cluster.partition(OFFSETS_TOPIC, partition).isr
        if len(isr) < need:
            raise self._unavailable(partition, KafkaError(
                ErrorCode.coordinator_not_available,
                f"{OFFSETS_TOPIC}-{partition}: ISR [{', '.join(map(str, isr))}] is smaller than "
                f"min.insync.replicas={need}; writes wait for a replica to catch up"))

    async def _write(self, group_id: str, op: Callable[[GroupCoordinatorShard], CoordinatorResult[Any]],
                     timeout: bool = False) -> Any:
        """Run a write operation on the group's shard and wait for its answer; with ``timeout``
        (commits, heartbeats, leaves: nothing else holds them) at most offsets.commit.timeout.ms
        for the write to be replicated."""
        runtime = self._runtime_for(group_id)
        self._writable(runtime.partition)
        try:
            response = runtime.execute(op)
        except KafkaError as e:
            raise self._unavailable(runtime.partition, e) from None
        if not isinstance(response, Deferred):
            return response
        if not timeout:
            return await resolve(response)
        limit_ms = self.broker_config["offsets.commit.timeout.ms"]
        try:
            return await asyncio.wait_for(resolve(response), limit_ms / 1000)
        except TimeoutError:
            raise self._unavailable(runtime.partition, KafkaError(
                ErrorCode.coordinator_not_available,
                f"{runtime.name}: the write was not replicated to the ISR within offsets.commit.timeout.ms="
                f"{limit_ms}")) from None

    def _read(self, group_id: str, fn: Callable[[GroupCoordinatorShard], Any]) -> Any:
        runtime = self._runtime_for(group_id)
        try:
            return runtime.read(fn)
        except KafkaError as e:
            if e.code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                          ErrorCode.coordinator_load_in_progress):
                raise self._unavailable(runtime.partition, e) from None
            raise

    def _active_shards(self) -> list[GroupCoordinatorShard]:
        return [rt.shard for rt in self.runtimes.values() if rt.state is ShardState.ACTIVE and rt.shard]

    # -- the group APIs, by name ---------------------------------------------------------------
    # Each raises KafkaError when the group's coordinator cannot answer here (NOT_COORDINATOR,
    # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE); the handlers turn it into the
    # API's error code. Writes are answered once their records are committed.
    def coordinator_status(self, group_id: str) -> tuple[ErrorCode, str | None]:
        """For FindCoordinator: can this broker coordinate the group right now? A loading
        partition counts as coordinated here (its requests answer COORDINATOR_LOAD_IN_PROGRESS)."""
        try:
            self._runtime_for(group_id).check_available()
        except KafkaError as e:
            if e.code == ErrorCode.coordinator_load_in_progress:
                return ErrorCode.none, None
            return e.code, e.message
        return ErrorCode.none, None

    def locate(self, group_id: str) -> CoordinatorLocation:
        """FindCoordinator's answer for a group: the broker that coordinates it, or why none does
        (coordinator/group/locator.py); the reasons go to the log once per situation."""
        if not self.cluster.clustered:
            code, message = self.coordinator_status(group_id)
            return CoordinatorLocation(self.partition_for(group_id), -1 if code else self.cluster.node_id,
                                       code, message)
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return self._offsets_topic_missing()
        self.reasons.clear("offsets-topic", f"{OFFSETS_TOPIC} exists; groups can be coordinated")
        self.num_partitions = topic.partitions
        partition = self.partition_for(group_id)
        lp = self.cluster.partition(OFFSETS_TOPIC, partition)
        if lp.leader < 0:
            live = [b.node_id for b in self.cluster.brokers()]
            unclean = topic.configs.get("unclean.leader.election.enable")
            if unclean is None:
                unclean = self.broker_config["unclean.leader.election.enable"]
            reason = leaderless_reason(partition, lp.replicas, lp.isr, live, unclean in (True, "true"))
            self.reasons.note(("leaderless", partition), reason)
            return CoordinatorLocation(partition, -1, ErrorCode.coordinator_not_available, reason)
        self.reasons.clear(("leaderless", partition), f"{OFFSETS_TOPIC}-{partition} is led by broker {lp.leader} "
                           "again; its groups can be coordinated")
        if lp.leader != self.cluster.node_id:
            return CoordinatorLocation(partition, lp.leader, ErrorCode.none)
        runtime = self.runtimes.get(partition)
        if runtime is None:  # elected here a moment ago: the shard starts loading at once
            return CoordinatorLocation(partition, lp.leader, ErrorCode.none)
        if runtime.state is ShardState.FAILED:
            reason = (f"{runtime.name} failed to load here (retried every {RELOAD_BACKOFF_S:.0f} s): "
                      f"{runtime.load_error}")
            self.reasons.note(("failed", partition), reason)
            return CoordinatorLocation(partition, -1, ErrorCode.coordinator_not_available, reason)
        note = (load_progress_note(runtime.name, *runtime.load_progress)
                if runtime.state is ShardState.LOADING else None)
        return CoordinatorLocation(partition, lp.leader, ErrorCode.none, note)

    def _offsets_topic_missing(self) -> CoordinatorLocation:
        rf = self.broker_config["offsets.topic.replication.factor"]
        live = [b.node_id for b in self.cluster.brokers()]
        reason = offsets_topic_short_of_brokers(rf, live)
        if reason is not None:
            self.reasons.note("offsets-topic", reason)
            return CoordinatorLocation(-1, -1, ErrorCode.coordinator_not_available, reason)
        try:
            self.ensure_topic()
            reason = f"{OFFSETS_TOPIC} is being created"
        except KafkaError as e:
            reason = f"{OFFSETS_TOPIC} is being created: {e.message}"
        self.reasons.note("offsets-topic", reason, logging.INFO)
        return CoordinatorLocation(-1, -1, ErrorCode.coordinator_not_available, reason)

    async def join_group(self, req: JoinRequest) -> JoinResult:
        """JoinGroup: answered when the rebalance completes (or at once with an error)."""
        result: JoinResult = await self._write(req.group_id, lambda shard: shard.join_group(req))
        return result

    async def sync_group(self, req: SyncRequest) -> SyncResult:
        """SyncGroup: answered when the leader's assignment is written."""
        result: SyncResult = await self._write(req.group_id, lambda shard: shard.sync_group(req))
        return result

    async def heartbeat(self, req: HeartbeatRequest) -> ErrorCode:
        code: ErrorCode = await self._write(req.group_id, lambda shard: shard.heartbeat(req), timeout=True)
        return code

    async def leave_group(self, req: LeaveRequest) -> LeaveResult:
        result: LeaveResult = await self._write(req.group_id, lambda shard: shard.leave_group(req), timeout=True)
        return result

    async def consumer_group_heartbeat(self, req: ConsumerHeartbeatRequest) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848): answered once its records are committed."""
        result: ConsumerHeartbeatResult = await self._write(
            req.group_id, lambda shard: shard.consumer_group_heartbeat(req), timeout=True)
        return result

    def steering_problems(self, group_id: str, wanted: Steering) -> list[str]:
        """Why ``wanted`` cannot steer the group now; NOT_COORDINATOR from a broker that does not
        coordinate it (members are known to the coordinator only)."""
        problems: list[str] = self._read(group_id, lambda shard: shard.consumer_mgr.steering_problems(group_id,
                                                                                                    wanted))
        return problems

    async def steering_changed(self, group_id: str) -> None:
        """The group's steering changed: a new group epoch, so its next heartbeat reassigns."""
        await self._write(group_id, lambda shard: shard.steering_changed(group_id), timeout=True)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroupView | None:
        """The consumer-protocol group as its coordinator holds it (None: no such group)."""
        view: ConsumerGroupView | None = self._read(group_id, lambda shard: shard.consumer_group_view(group_id))
        return view

    async def commit_offsets(self, req: CommitRequest) -> CommitResult:
        """OffsetCommit: one error per partition."""
        errors: CommitResult = await self._write(req.group_id, lambda shard: shard.commit_offsets(req), timeout=True)
        return errors

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, member_id: str | None = None,
                      member_epoch: int = -1) -> OffsetFetchResult:
        """OffsetFetch: ``partitions`` None for every committed partition; ``member_id`` and
        ``member_epoch`` (v9) are checked against a consumer-protocol group."""
        rows: OffsetFetchResult = self._read(
            group_id, lambda shard: shard.fetch_offsets(group_id, partitions, member_id, member_epoch))
        return rows

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> OffsetDeleteResult:
        result: OffsetDeleteResult = await self._write(group_id,
                                                       lambda shard: shard.delete_offsets(group_id, partitions))
        return result

    def describe_group(self, group_id: str) -> GroupDescription:
        description: GroupDescription = self._read(group_id, lambda shard: shard.describe_group(group_id))
        return description

    def list_groups(self, states: set[str] | None = None) -> ListGroupsResult:
        """ListGroups over every loaded partition; ``states``: lower-case state names to keep.
        While a partition loads the error is COORDINATOR_LOAD_IN_PROGRESS (the list may lack its
        groups)."""
        groups = [g for shard in self._active_shards() for g in shard.list_groups(states)]
        loading = any(rt.state is ShardState.LOADING for rt in self.runtimes.values())
        return ListGroupsResult(ErrorCode.coordinator_load_in_progress if loading else ErrorCode.none,
                                sorted(groups, key=lambda g: g.group_id))

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups, one group: NONE, NON_EMPTY_GROUP or GROUP_ID_NOT_FOUND."""
        errors: DeleteGroupsResult = await self._write(group_id, functools.partial(_delete_group, group_id))
        return errors[group_id]

    # -- read-only views (metrics, telemetry) -------------------------------------------------
    # In a cluster the views also read the followed partitions (followed_groups.py): every broker
    # knows every group's members and committed offsets, so it can attribute the fetches it serves
    # and report the lag of the partitions it leads. A group's state is reported by its
    # coordinator only (``include_followed`` for the telemetry rows' state column).
    def _member_shards(self) -> list[GroupCoordinatorShard]:
        shards = self._active_shards()
        if self.followed is not None:
            shards.extend(self.followed.shards())
        return shards

    def group_summaries(self, include_followed: bool = False) -> Iterator[GroupSummary]:
        shards = self._member_shards() if include_followed else self._active_shards()
        for shard in shards:
            for group_id, g in sorted(shard.groups.items()):
                yield GroupSummary(group_id, g.state.value, len(g.members), g.generation_id, g.rebalances,
                                   g.last_rebalance_ms)
            for group_id, c in sorted(shard.consumer_groups.items()):
                yield GroupSummary(group_id, c.state.value, len(c.members), c.group_epoch, c.rebalances, -1)

    def group_phase(self, group_id: str) -> GroupPhase | None:
        """The consumer-protocol group's phase, if this broker coordinates it (None otherwise)."""
        try:
            group = self._read(group_id, lambda shard: shard.consumer_groups.get(group_id))
        except KafkaError:
            return None
        if group is None:
            return None
        phase, holders = group.phase()
        return GroupPhase(group_id, phase, group.state_since_ms,
                          [(mid, group.members[mid].client_id, why, since) for mid, why, since in holders])

    def group_phases(self) -> Iterator[GroupPhase]:
        """The phase of every consumer-protocol group coordinated here."""
        for shard in self._active_shards():
            for group_id, c in sorted(shard.consumer_groups.items()):
                phase, holders = c.phase()
                yield GroupPhase(group_id, phase, c.state_since_ms,
                                 [(mid, c.members[mid].client_id, why, since) for mid, why, since in holders])

    def committed_offsets(self) -> Iterator[CommittedOffset]:
        """Every group's committed offsets of the partitions led here (on one node: all)."""
        clustered = self.cluster.clustered
        me = self.cluster.node_id
        led: dict[tuple[str, int], bool] = {}
        for shard in self._member_shards():
            for group_id, offsets in sorted(shard.offsets_mgr.offsets.items()):
                for (topic, partition), v in sorted(offsets.items()):
                    if clustered:
                        here = led.get((topic, partition))
                        if here is None:
                            here = led[(topic, partition)] = self.cluster.partition(topic, partition).leader == me
                        if not here:
                            continue
                    yield CommittedOffset(group_id, topic, partition, v.offset, v.commit_timestamp)

    def committed_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        p = self.partition_for(group_id)
        runtime = self.runtimes.get(p)
        shard = (runtime.shard if runtime is not None and runtime.state is ShardState.ACTIVE
                 else self.followed.shard(p) if self.followed is not None else None)
        if shard is None:
            return None
        v = shard.offsets_mgr.offsets.get(group_id, {}).get((topic, partition))
        return v.offset if v is not None else None

    def consumer_members(self) -> Iterator[MemberView]:
        """Members of consumer groups that are neither Empty nor Dead (in a cluster: of every group,
        and of a partition this broker just stopped coordinating, its last view until it is
        followed again)."""
        for shard in self._member_shards():
            yield from _members_of(shard)
        if self.followed is not None:
            yield from self.followed.bridged_members()

    def load_seconds(self) -> dict[int, float]:
        """How long the last load of each partition took."""
        return {p: rt.load_stats[1] for p, rt in sorted(self.runtimes.items())}

    def membership_version(self) -> int:
        """Changes whenever any group's members or assignments change, or a shard is loaded or
        unloaded (metrics attribution caches on it)."""
        return self._membership_version

    def on_topic_deleted(self, topic: str) -> None:
        """Remove committed offsets of a deleted topic (Kafka: handleDeletedPartitions)."""
        removed = 0
        for rt in self.runtimes.values():
            if rt.state is not ShardState.ACTIVE:
                continue
            count = rt.execute(lambda s: s.delete_topic_offsets(topic))
            if isinstance(count, Deferred):  # a replicated shard: counted once the ISR has the tombstones
                count.add_done_callback(functools.partial(_log_removed, topic, rt.name))
            else:
                removed += count
        log.info("Removed %d offsets associated with deleted topic %s", removed, topic)


def _members_of(shard: GroupCoordinatorShard) -> Iterator[MemberView]:
    """The members of a shard's groups with what each is assigned (classic groups: the leader's
    assignment; consumer-protocol groups: what each member holds), for fetch attribution."""
    for group in shard.groups.values():
        if group.protocol_type != "consumer" or group.is_in(GroupState.DEAD, GroupState.EMPTY):
            continue
        for m in group.members.values():
            yield MemberView(group.group_id, m.client_id, m.client_host.lstrip("/"), m.assignment)
    for cg in shard.consumer_groups.values():
        names = {tid: name for name, (tid, _n) in cg.subscription_metadata.items()}
        for cm in cg.members.values():
            held = [(names[t], sorted(ps)) for t, ps in cm.assigned.items() if t in names]
            if held:
                yield MemberView(cg.group_id, cm.client_id, cm.client_host.lstrip("/"), encode_assignment(held))


def _log_removed(topic: str, shard: str, done: Deferred[int]) -> None:
    try:
        log.info("Removed %d offsets associated with deleted topic %s (%s)", done.result(), topic, shard)
    except Exception as e:  # noqa: BLE001 - the shard moved or failed; its next leader replays the tombstones or not
        log.warning("removing the offsets of deleted topic %s on %s: %s", topic, shard, e)
