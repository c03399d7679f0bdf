"""The group coordinator service: owns one ShardRuntime per ``__consumer_offsets`` partition that
this broker leads, routes each group to its shard (``partition_for``), and runs the group APIs as
named operations on it.

It works the same on one node and in a cluster: shards load when the replication seam says this
broker gained leadership of their partition and unload when it lost it (``on_leadership``; on one
node every partition is led here from the start), their records are appended through the seam
(the runtime's partition writer) and answered when the high watermark covers them
(``on_high_watermark``). Finding a group's coordinator is ``locator.CoordinatorLocator``'s; what
metrics and telemetry read is ``views.GroupViews``'s (``self.views``); the partitions of other
brokers are followed read-only by ``followed_groups.FollowedGroups`` (nothing, on one node).

A shard that fails to load is retried with back-off and reported (FindCoordinator says which
partition and why) instead of leaving its groups looping on COORDINATOR_NOT_AVAILABLE without
explanation.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from gregor.assignment.steering import Steering
from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.group.api import (
    CommitRequest,
    CommitResult,
    ConsumerGroupView,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    DeleteGroupsResult,
    GroupDescription,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    ListGroupsResult,
    OffsetDeleteResult,
    OffsetFetchResult,
    SyncRequest,
    SyncResult,
    TopicPartition,
)
from gregor.coordinator.group.context import GroupConfig
from gregor.coordinator.group.followed_groups import FollowedGroups, NoTimer
from gregor.coordinator.group.locator import (
    RELOAD_BACKOFF_S,
    CoordinatorLocation,
    CoordinatorLocator,
    ReasonLog,
    load_progress_note,
)
from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard, ShardCollaborators
from gregor.coordinator.group.share_group import ShareGroup
from gregor.coordinator.group.share_group_manager import ShareHeartbeatRequest, ShareHeartbeatResult
from gregor.coordinator.group.subscriptions import TopicCatalogue
from gregor.coordinator.group.topic_hashes import TopicHashes
from gregor.coordinator.group.views import GroupViews
from gregor.coordinator.runtime.partition_writer import HighWatermarkListener, PartitionWriter
from gregor.coordinator.runtime.result import CoordinatorResult, Deferred
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState, reload_failed_shards, resolve
from gregor.coordinator.runtime.timer import Timer
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import NO_VERIFICATION, now_ms
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("gregor.coordinator")


class CoordinatorReplicas(PartitionWriter, Protocol):
    """What the coordinator needs of the replication seam: the partition writer, leadership
    events, whether a partition is led here, and the min.insync.replicas check of its writes."""

    on_leadership: list[Callable[[str, int, int, bool], None]]
    on_high_watermark: list[HighWatermarkListener]

    def leads(self, topic: str, partition: int) -> bool: ...

    def check_min_isr(self, topic: str, partition: int) -> None: ...


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
        share_session_timeout_ms=config["group.share.session.timeout.ms"],
        share_heartbeat_interval_ms=config["group.share.heartbeat.interval.ms"],
        share_max_size=config["group.share.max.size"],
    )


class GroupCoordinatorService:
    """``create_topic(name, partitions, configs, internal=True)`` creates ``__consumer_offsets``
    the way the admin API creates topics; ``replicas`` is the replication seam (leadership events,
    appends, high watermarks); ``create_topic_at_start`` creates the topic when the service starts
    (one node: groups are served from the first request) rather than on the first lookup (a
    cluster, as Kafka: the brokers must have joined first); ``offsets_replication_factor`` is the
    replication factor the topic gets here (for FindCoordinator's reasons)."""

    def __init__(self, config: Any, topics: TopicRegistry, logs: LogManager, create_topic: Callable[..., Any],
                 cluster: ClusterMetadata, replicas: CoordinatorReplicas,
                 group_settings: Callable[[str], dict[str, Any]] | None = None,
                 create_topic_at_start: bool = False, offsets_replication_factor: int = 1) -> None:
        self.broker_config = config
        self.group_settings = group_settings if group_settings is not None else (lambda group_id: {})
        self.cluster = cluster
        self.replicas = replicas
        self.reasons = ReasonLog(log)
        self.topics = topics
        self.logs = logs
        self.create_topic = create_topic
        self.create_topic_at_start = create_topic_at_start
        self.config = group_config(config)
        self.runtimes: dict[int, ShardRuntime[GroupCoordinatorShard]] = {}
        self.num_partitions = config["offsets.topic.num.partitions"]
        self._watchdog: asyncio.Task[None] | None = None
        self._membership_version = 0
        # the topics that consumer groups' regular expressions match (one view for every shard)
        self.topic_catalogue = TopicCatalogue(lambda: self.topics.by_name.keys())
        # the partitions led by other brokers, followed read-only (metrics attribution)
        self.followed = FollowedGroups(cluster, logs, self.offsets_partitions, self._loaded_here,
                                       self._make_followed_shard, self._bump_membership,
                                       led_here=lambda p: replicas.leads(OFFSETS_TOPIC, p))
        self.locator = CoordinatorLocator(self, cluster, config, offsets_replication_factor)
        self.views = GroupViews(self, replicas.leads)
        self.topic_hashes = TopicHashes(self._topic_metadata, cluster)
        replicas.on_leadership.append(self.on_leadership)
        replicas.on_high_watermark.append(self.on_high_watermark)

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
        if self.create_topic_at_start:
            self.ensure_topic()
        self.followed.start()
        self._watchdog = asyncio.get_running_loop().create_task(
            reload_failed_shards(self.runtimes.values, RELOAD_BACKOFF_S))

    def _loaded_here(self) -> set[int]:
        return {p for p, rt in self.runtimes.items() if rt.state is ShardState.ACTIVE}

    def offsets_partitions(self) -> int:
        """The partition count of ``__consumer_offsets`` (0 while it does not exist)."""
        topic = self.topics.get(OFFSETS_TOPIC)
        return topic.partitions if topic is not None else 0

    def offsets_topic_config(self, key: str) -> Any:
        topic = self.topics.get(OFFSETS_TOPIC)
        return topic.configs.get(key) if topic is not None else None

    def on_leadership(self, topic: str, partition: int, leader_epoch: int, is_leader: bool) -> None:
        """The seam tells of a real gain or loss of leadership (never of a new epoch alone)."""
        if topic != OFFSETS_TOPIC:
            return
        t = self.topics.get(OFFSETS_TOPIC)
        if t is not None:
            self.num_partitions = t.partitions
        if not is_leader:
            self.unload(partition)
            return
        runtime = self.runtimes.get(partition)
        if runtime is not None and runtime.state is not ShardState.CLOSED:
            return  # loaded or loading already
        self.load(partition)  # followed until its shard is loaded here (followed_groups.py)

    def on_high_watermark(self, topic: str, partition: int, offset: int) -> None:
        if topic == OFFSETS_TOPIC:
            runtime = self.runtimes.get(partition)
            if runtime is not None:
                runtime.on_high_watermark(offset)

    def load(self, partition: int) -> ShardRuntime[GroupCoordinatorShard]:
        """Become coordinator of one partition."""
        plog = self.logs.get(OFFSETS_TOPIC, partition)
        assert plog is not None
        runtime = ShardRuntime(partition, plog, self._make_shard, RECORD_SERDE, self.replicas,
                               codec=self.broker_config["offsets.topic.compression.codec"],
                               label="offsets and group metadata",
                               required_acks=self.broker_config["offsets.commit.required.acks"])
        self.runtimes[partition] = runtime
        runtime.start_loading()
        return runtime

    def unload(self, partition: int) -> None:
        runtime = self.runtimes.pop(partition, None)
        if runtime is not None:
            if runtime.state is ShardState.ACTIVE and runtime.shard is not None:
                # fetches keep being attributed while the partition is followed from its replica
                self.followed.bridge(partition, list(runtime.shard.member_views()), runtime.plog.log_end_offset)
            runtime.unload()
            self._bump_membership()

    def _collaborators(self) -> ShardCollaborators:
        return ShardCollaborators(topic_exists=self._topic_exists, topic_metadata=self._topic_metadata,
                                  topic_hash=self.topic_hashes.hash_of, group_settings=self.group_settings,
                                  catalogue=self.topic_catalogue,
                                  on_membership_change=self._bump_membership)

    def _make_shard(self, partition: int, timer: Timer) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(partition, self.config, now_ms, timer, self._collaborators())

    def _make_followed_shard(self, partition: int) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(partition, self.config, now_ms, NoTimer(),
                                     ShardCollaborators(topic_exists=self._topic_exists,
                                                        topic_metadata=self._topic_metadata))

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

    async def stop(self) -> None:
        await self.followed.stop()
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        for p in list(self.runtimes):
            self.unload(p)

    # -- the shards, as the locator and the views see them ---------------------------------------
    def active_shards(self) -> list[GroupCoordinatorShard]:
        return [rt.shard for rt in self.runtimes.values() if rt.state is ShardState.ACTIVE and rt.shard]

    def active_shard(self, partition: int) -> GroupCoordinatorShard | None:
        rt = self.runtimes.get(partition)
        return rt.shard if rt is not None and rt.state is ShardState.ACTIVE else None

    def shard_status(self, partition: int) -> tuple[str, str | None, str | None]:
        """(state: absent, loading, active, failed or closed; the shard's name; the load error or
        the load progress)."""
        rt = self.runtimes.get(partition)
        if rt is None:
            return "absent", None, None
        if rt.state is ShardState.FAILED:
            return "failed", rt.name, rt.load_error
        if rt.state is ShardState.LOADING:
            return "loading", rt.name, load_progress_note(rt.name, *rt.load_progress)
        return rt.state.value, rt.name, None

    def load_seconds(self) -> dict[int, float]:
        return {p: rt.load_stats[1] for p, rt in sorted(self.runtimes.items())}

    def membership_version(self) -> int:
        return self._membership_version

    # -- routing -----------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return _cached_partition_for(group_id, self.num_partitions)

    def locate(self, group_id: str) -> CoordinatorLocation:
        """FindCoordinator's answer for a group (locator.py)."""
        return self.locator.locate(group_id)

    def _runtime_for(self, group_id: str) -> ShardRuntime[GroupCoordinatorShard]:
        partition = self.partition_for(group_id)
        runtime = self.runtimes.get(partition)
        # a runtime is unloaded when its leadership goes; until then, and while this broker cannot
        # trust its leaderships (a paused broker confirming its session), it coordinates nothing
        if runtime is None or not self.replicas.leads(OFFSETS_TOPIC, partition):
            why = self._not_here(partition) if runtime is None else (
                f"{OFFSETS_TOPIC}-{partition} is loaded here but this broker cannot act as its leader now "
                "(its leadership is going, or it is confirming its ZooKeeper session after a pause)")
            raise self._unavailable(partition, KafkaError(ErrorCode.not_coordinator, why))
        return runtime

    def _not_here(self, partition: int) -> str:
        name = f"{OFFSETS_TOPIC}-{partition}"
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
        if self.broker_config["offsets.commit.required.acks"] != -1:
            return
        try:
            self.replicas.check_min_isr(OFFSETS_TOPIC, partition)
        except KafkaError as e:
            if e.code != ErrorCode.not_enough_replicas:
                return  # leadership moved: the shard answers NOT_COORDINATOR itself
            raise self._unavailable(partition, KafkaError(
                ErrorCode.coordinator_not_available, f"{e.message}; writes wait for a replica to catch up")) from None

    async def _write(self, group_id: str, op: Callable[[GroupCoordinatorShard], CoordinatorResult[Any]],
                     timeout: bool = False, check_isr: bool = True, verification: Any = NO_VERIFICATION) -> Any:
        """Run a write operation on the group's shard and wait for its answer; with ``timeout``
        (commits, heartbeats, leaves: nothing else holds them) at most offsets.commit.timeout.ms
        for the write to be replicated."""
        runtime = self._runtime_for(group_id)
        if check_isr:
            self._writable(runtime.partition)
        try:
            response = runtime.execute(op, verification)
        except KafkaError as e:
            if e.code == ErrorCode.invalid_txn_state:
                raise
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

    async def _read_committed(self, group_id: str, fn: Callable[[GroupCoordinatorShard], Any]) -> Any:
        """A read answered once the writes before it are committed: it runs now, as an operation
        that writes nothing, which the runtime answers no earlier than the writes before it."""
        def op(shard: GroupCoordinatorShard) -> CoordinatorResult[Any]:
            try:
                return CoordinatorResult([], fn(shard))
            except KafkaError as e:  # the read's answer (STALE_MEMBER_EPOCH, ...), not a failed write
                return CoordinatorResult([], e)

        answer = await self._write(group_id, op, timeout=True, check_isr=False)
        if isinstance(answer, KafkaError):
            raise answer
        return answer

    def _read(self, group_id: str, fn: Callable[[GroupCoordinatorShard], Any]) -> Any:
        runtime = self._runtime_for(group_id)
        try:
            return runtime.read(fn)
        except KafkaError as e:
            if e.code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                          ErrorCode.coordinator_load_in_progress):
                raise self._unavailable(runtime.partition, e) from None
            raise

    # -- the group APIs, by name ---------------------------------------------------------------
    # Each raises KafkaError when the group's coordinator cannot answer here (NOT_COORDINATOR,
    # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE); the handlers turn it into the
    # API's error code. Writes are answered once their records are committed.
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

    async def share_group_heartbeat(self, req: ShareHeartbeatRequest) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat (KIP-932): answered once its records are committed."""
        result: ShareHeartbeatResult = await self._write(
            req.group_id, lambda shard: shard.share_group_heartbeat(req), timeout=True)
        return result

    async def describe_share_group(self, group_id: str) -> ShareGroup | None:
        """A copy of the share group as its coordinator holds it once every write before it is
        committed (None: no such group; GROUP_ID_NOT_FOUND-worthy when the id is another kind's)."""
        def view(shard: GroupCoordinatorShard) -> ShareGroup | None:
            group = shard.share_groups.get(group_id)
            if group is None:
                if group_id in shard.consumer_groups or (group_id in shard.groups and shard.groups[group_id].members):
                    raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
                return None
            return copy.deepcopy(group)

        result: ShareGroup | None = await self._read_committed(group_id, view)
        return result

    async def share_offsets_changed(self, group_id: str, added: dict[Any, tuple[str, frozenset[int]]],
                                    removed: set[Any]) -> ErrorCode:
        """The share group's partitions with state, after an operator's reset or deletion (the
        group is created empty if it does not exist); NON_EMPTY_GROUP while it has members."""
        code: ErrorCode = await self._write(group_id, lambda shard: shard.share_offsets_changed(group_id, added,
                                                                                                  removed),
                                            timeout=True)
        return code

    def share_member_assignment(self, group_id: str, member_id: str) -> Any:
        """What the share member is assigned now (topic id -> partitions); None when the group
        or the member is not known here."""
        def read(shard: GroupCoordinatorShard) -> Any:
            group = shard.share_groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            return None if member is None else dict(member.assigned)

        return self._read(group_id, read)

    def steering_problems(self, group_id: str, wanted: Steering) -> list[str]:
        """Why ``wanted`` cannot steer the group now; NOT_COORDINATOR from a broker that does not
        coordinate it (members are known to the coordinator only)."""
        problems: list[str] = self._read(group_id, lambda shard: shard.steering_problems(group_id, wanted))
        return problems

    async def steering_changed(self, group_id: str) -> None:
        """The group's steering changed: a new group epoch, so its next heartbeat reassigns."""
        await self._write(group_id, lambda shard: shard.steering_changed(group_id), timeout=True)

    async def describe_consumer_group(self, group_id: str) -> ConsumerGroupView | None:
        """The consumer-protocol group as its coordinator holds it (None: no such group), answered
        once every write before it is committed, so that it never shows a member epoch or an
        assignment the in-sync replicas do not have (at most offsets.commit.timeout.ms, then
        COORDINATOR_NOT_AVAILABLE, as a write would be)."""
        view: ConsumerGroupView | None = await self._read_committed(
            group_id, lambda shard: shard.consumer_group_view(group_id))
        return view

    async def commit_offsets(self, req: CommitRequest) -> CommitResult:
        """OffsetCommit: one error per partition."""
        errors: CommitResult = await self._write(req.group_id, lambda shard: shard.commit_offsets(req), timeout=True)
        return errors

    async def txn_commit_offsets(self, req: CommitRequest, producer_id: int, producer_epoch: int,
                                 verification: Any = NO_VERIFICATION) -> CommitResult:
        """TxnOffsetCommit: the offsets are written in the producer's transaction (one error per
        partition) and become the group's when the transaction's COMMIT marker arrives.
        ``verification``: the KIP-890 guard (start_txn_verification on the group's partition)."""
        errors: CommitResult = await self._write(
            req.group_id, lambda shard: shard.txn_commit_offsets(req, producer_id, producer_epoch), timeout=True,
            verification=verification)
        return errors

    async def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> None:
        """WriteTxnMarkers to a ``__consumer_offsets`` partition: the marker is written by the
        partition's shard, which commits or drops the producer's pending offsets; answered once
        it is committed. Raises KafkaError NOT_LEADER_OR_FOLLOWER while the shard is not here or
        not loaded (the transaction coordinator retries)."""
        runtime = self.runtimes.get(partition)
        if runtime is None or not self.replicas.leads(OFFSETS_TOPIC, partition):
            raise KafkaError(ErrorCode.not_leader_or_follower, self._not_here(partition))
        try:
            answer = runtime.complete_transaction(producer_id, producer_epoch, coordinator_epoch, commit)
        except KafkaError as e:
            if e.code in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                          ErrorCode.coordinator_not_available):
                raise KafkaError(ErrorCode.not_leader_or_follower, e.message) from None
            raise
        limit_ms = self.broker_config["offsets.commit.timeout.ms"]
        try:
            await asyncio.wait_for(resolve(answer), limit_ms / 1000)
        except TimeoutError:
            raise KafkaError(ErrorCode.request_timed_out, f"{runtime.name}: the marker was not replicated within "
                             f"offsets.commit.timeout.ms={limit_ms}") from None
        except KafkaError as e:
            raise KafkaError(ErrorCode.not_leader_or_follower, e.message) from None

    async def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                            member_id: str | None = None, member_epoch: int = -1,
                            require_stable: bool = False) -> OffsetFetchResult:
        """OffsetFetch: ``partitions`` None for every committed partition; ``member_id`` and
        ``member_epoch`` (v9) are checked against a consumer-protocol group.

        As Kafka's coordinator: without ``require_stable`` (admin tools) the offsets at the
        committed offset of the partition, answered at once; with it (consumers: librdkafka's
        read_committed default, the Java consumer) every offset written, answered once the writes
        before it are committed (a new coordinator's loaded tail too), so a consumer starting while
        commits wait for replication, or right after the coordinator moved, gets the latest
        committed offsets and never an older one."""
        if require_stable:
            stable: OffsetFetchResult = await self._read_committed(
                group_id, lambda shard: shard.fetch_offsets(group_id, partitions, member_id, member_epoch, latest=True))
            return stable
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
        groups = [g for shard in self.active_shards() for g in shard.list_groups(states)]
        loading = any(rt.state is ShardState.LOADING for rt in self.runtimes.values())
        return ListGroupsResult(ErrorCode.coordinator_load_in_progress if loading else ErrorCode.none,
                                sorted(groups, key=lambda g: g.group_id))

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups, one group: NONE, NON_EMPTY_GROUP or GROUP_ID_NOT_FOUND."""
        errors: DeleteGroupsResult = await self._write(group_id, functools.partial(_delete_group, group_id))
        return errors[group_id]

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


def _log_removed(topic: str, shard: str, done: Deferred[int]) -> None:
    try:
        log.info("Removed %d offsets associated with deleted topic %s (%s)", done.result(), topic, shard)
    except Exception as e:  # noqa: BLE001 - the shard moved or failed; its next leader replays the tombstones or not
        log.warning("removing the offsets of deleted topic %s on %s: %s", topic, shard, e)
