"""The group coordinator service as a member of a cluster, without a network: its partitions'
leadership and ISR come from a cluster view the test sets, its writes go to replicated logs whose
high watermark the test moves (the followers' part). What a client sees when leadership moves
under a write, when the ISR is too small, when replication stalls, and why it is refused."""

from __future__ import annotations

import asyncio
import functools
import logging

import pytest

from gregor.cluster.metadata import BrokerEndpoint, ClusterMetadata, PartitionLeadership
from gregor.cluster.topic_admin import TopicAdmin
from gregor.config import BrokerConfig
from gregor.coordinator.group.api import CommitPartition, CommitRequest, ConsumerHeartbeatRequest
from gregor.coordinator.group.locator import ReasonLog, leaderless_reason, offsets_topic_short_of_brokers
from gregor.coordinator.group.service import GroupCoordinatorService
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from gregor.protocol.errors import ErrorCode, KafkaError

ME = 1
GROUP = "billing"
PARTITIONS = 4


class ClusterView(ClusterMetadata):
    """The cluster as the test sets it: live brokers and each partition's leadership."""

    def __init__(self) -> None:
        super().__init__(ME)
        self.live = [1, 2, 3]
        self.partitions: dict[int, PartitionLeadership] = {}

    def brokers(self) -> list[BrokerEndpoint]:
        return [BrokerEndpoint(b, "127.0.0.1", 9000 + b) for b in self.live]

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return next((b for b in self.brokers() if b.node_id == node_id), None)

    def partition(self, topic: str, partition: int) -> PartitionLeadership:
        return self.partitions.get(partition, PartitionLeadership(-1, -1, [], []))


class Replicas:
    """The replication seam as the test plays it: appends go to the leader's log, leadership and
    the ISR are the test's cluster view's."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.on_leadership: list = []
        self.on_high_watermark: list = []

    def append_internal(self, topic: str, partition: int, batch: bytes) -> int:
        return self.node.logs.get(topic, partition).append_batch_unchecked(batch)

    def leads(self, topic: str, partition: int) -> bool:
        return self.node.cluster.partition(topic, partition).leader == ME

    def check_min_isr(self, topic: str, partition: int) -> None:
        need = int(self.node.config["min.insync.replicas"])
        isr = self.node.cluster.partition(topic, partition).isr
        if len(isr) < need:
            raise KafkaError(ErrorCode.not_enough_replicas,
                             f"{topic}-{partition}: ISR {isr} is smaller than min.insync.replicas={need}")


class Node:
    def __init__(self, tmp_path, settings: dict[str, str] | None = None, create: bool = True) -> None:
        self.config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": str(ME),
                                                 "offsets.topic.num.partitions": str(PARTITIONS),
                                                 "group.initial.rebalance.delay.ms": "0", **(settings or {})})
        self.registry = TopicRegistry(self.config.data_dir)
        self.logs = LogManager(self.config.data_dir, self.config.topic_defaults(), self.registry)
        self.logs.startup()
        self.admin = TopicAdmin(self.config, self.registry, self.logs)
        self.admin.create_topic("orders", 1, {})
        self.cluster = ClusterView()
        self.replicas = Replicas(self)
        self.groups = GroupCoordinatorService(self.config, self.registry, self.logs, self.admin.create_topic,
                                              self.cluster, self.replicas,
                                              offsets_replication_factor=self.config["offsets.topic.replication.factor"])
        if create:
            self.admin.create_topic(OFFSETS_TOPIC, PARTITIONS, {"cleanup.policy": "compact"}, internal=True)
            for p in range(PARTITIONS):
                self.logs.make_replicated(self.logs.get(OFFSETS_TOPIC, p))
        self.p = partition_for(GROUP, PARTITIONS)

    def lead(self, isr: list[int] | None = None, epoch: int = 1) -> None:
        self.cluster.partitions[self.p] = PartitionLeadership(ME, epoch, [1, 2, 3], isr or [1, 2, 3])
        self.groups.on_leadership(OFFSETS_TOPIC, self.p, epoch, True)

    def replicate(self) -> None:
        """The followers caught up: the high watermark reaches the log end."""
        plog = self.logs.get(OFFSETS_TOPIC, self.p)
        plog.update_high_watermark(plog.log_end_offset)
        self.groups.on_high_watermark(OFFSETS_TOPIC, self.p, plog.high_watermark)


def aio(test):
    """Run an async test on a fresh event loop (the shard runtime needs a running one)."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))
    return run


def commit(offset: int) -> CommitRequest:
    return CommitRequest(GROUP, -1, "", None, [CommitPartition("orders", 0, offset, -1, "")])


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.logs.shutdown()


@aio
async def test_a_commit_is_answered_only_once_the_isr_has_it(node) -> None:
    node.lead()
    await node.groups.wait_loaded()
    pending = asyncio.ensure_future(node.groups.commit_offsets(commit(5)))
    await asyncio.sleep(0.05)
    assert not pending.done()  # in the leader's log, not yet on the followers
    node.replicate()
    assert (await pending)[("orders", 0)] == ErrorCode.none
    assert await node.groups.fetch_offsets(GROUP, None)


@aio
async def test_a_write_in_flight_when_leadership_is_lost_is_answered_not_coordinator(node) -> None:
    node.lead()
    await node.groups.wait_loaded()
    pending = asyncio.ensure_future(node.groups.commit_offsets(commit(5)))
    await asyncio.sleep(0.05)
    node.cluster.partitions[node.p] = PartitionLeadership(2, 2, [1, 2, 3], [2, 3])
    node.groups.on_leadership(OFFSETS_TOPIC, node.p, 2, False)
    with pytest.raises(KafkaError) as e:
        await pending
    assert e.value.code == ErrorCode.not_coordinator
    # and the next request is told where to go
    with pytest.raises(KafkaError) as e:
        await node.groups.fetch_offsets(GROUP, None)
    assert e.value.code == ErrorCode.not_coordinator
    assert "led by broker 2" in e.value.message


@aio
async def test_a_stable_offset_fetch_refused_by_the_group_is_an_answer_not_a_failed_write(node, caplog) -> None:
    """OffsetFetch with require_stable runs as a write operation; a member check that refuses it
    (an unknown member of a consumer-protocol group, a stale epoch) is its answer. Found by the
    fuzzer: it was taken for a failed write, logged as an error and the shard reloaded."""
    node.lead()
    await node.groups.wait_loaded()
    beat = asyncio.ensure_future(node.groups.consumer_group_heartbeat(ConsumerHeartbeatRequest(
        GROUP, "m1", 0, rebalance_timeout_ms=30000, subscribed_topic_names=["orders"], owned={})))
    await asyncio.sleep(0.05)
    node.replicate()
    member = await asyncio.wait_for(beat, 5)
    assert member.error == ErrorCode.none and member.member_epoch >= 1
    with caplog.at_level(logging.INFO, "gregor.coordinator"):
        for member_id, epoch, code in [("nobody", 3, ErrorCode.unknown_member_id),
                                       ("m1", member.member_epoch + 1, ErrorCode.stale_member_epoch)]:
            with pytest.raises(KafkaError) as e:
                await asyncio.wait_for(node.groups.fetch_offsets(GROUP, None, member_id, epoch,
                                                                 require_stable=True), 5)
            assert e.value.code == code
    assert "coordinator operation failed" not in caplog.text
    assert "reloading" not in caplog.text.lower()
    stable = await asyncio.wait_for(node.groups.fetch_offsets(GROUP, None, "m1", member.member_epoch,
                                                              require_stable=True), 5)
    assert stable == []


@aio
async def test_a_commit_not_replicated_in_time_is_coordinator_not_available(tmp_path, caplog) -> None:
    node = Node(tmp_path, {"offsets.commit.timeout.ms": "100"})
    node.lead()
    await node.groups.wait_loaded()
    with caplog.at_level(logging.INFO, "gregor.coordinator"), pytest.raises(KafkaError) as e:
        await node.groups.commit_offsets(commit(5))
    assert e.value.code == ErrorCode.coordinator_not_available
    assert "offsets.commit.timeout.ms=100" in e.value.message
    assert "offsets.commit.timeout.ms=100" in caplog.text
    node.logs.shutdown()


@aio
async def test_a_write_is_refused_before_it_runs_when_the_isr_is_below_min_insync(tmp_path) -> None:
    node = Node(tmp_path, {"min.insync.replicas": "2"})
    node.lead(isr=[1])
    await node.groups.wait_loaded()
    end = node.logs.get(OFFSETS_TOPIC, node.p).log_end_offset
    with pytest.raises(KafkaError) as e:
        await node.groups.commit_offsets(commit(5))
    assert e.value.code == ErrorCode.coordinator_not_available
    assert "smaller than min.insync.replicas=2" in e.value.message
    assert node.logs.get(OFFSETS_TOPIC, node.p).log_end_offset == end  # nothing written
    node.cluster.partitions[node.p] = PartitionLeadership(ME, 1, [1, 2, 3], [1, 2])
    pending = asyncio.ensure_future(node.groups.commit_offsets(commit(5)))
    await asyncio.sleep(0.05)
    node.replicate()
    assert (await pending)[("orders", 0)] == ErrorCode.none
    node.logs.shutdown()


@aio
async def test_required_acks_1_answers_once_the_leader_has_the_write(tmp_path) -> None:
    node = Node(tmp_path, {"offsets.commit.required.acks": "1"})
    node.lead()
    await node.groups.wait_loaded()
    result = await asyncio.wait_for(node.groups.commit_offsets(commit(5)), 5)
    assert result[("orders", 0)] == ErrorCode.none
    node.logs.shutdown()


@aio
async def test_find_coordinator_reasons(tmp_path) -> None:
    node = Node(tmp_path, create=False)
    node.cluster.live = [2]
    where = node.groups.locate(GROUP)
    assert where.error == ErrorCode.coordinator_not_available and where.node_id == -1
    assert where.reason.startswith("offsets topic needs 3 live brokers (offsets.topic.replication.factor=3), "
                                   "1 registered: 2")
    node.admin.create_topic(OFFSETS_TOPIC, PARTITIONS, {"cleanup.policy": "compact"}, internal=True)
    node.cluster.live = [1, 3]
    node.cluster.partitions[node.p] = PartitionLeadership(-1, 3, [1, 2, 3], [2])
    where = node.groups.locate(GROUP)
    assert where.error == ErrorCode.coordinator_not_available
    assert where.reason.startswith(f"{OFFSETS_TOPIC}-{node.p} has no leader: every ISR replica is offline and "
                                   "unclean.leader.election.enable=false keeps the other replicas out; the group "
                                   "is served again when broker 2 returns")
    node.cluster.partitions[node.p] = PartitionLeadership(3, 4, [1, 2, 3], [3])
    where = node.groups.locate(GROUP)
    assert (where.node_id, where.error) == (3, ErrorCode.none)
    node.lead()
    where = node.groups.locate(GROUP)
    assert where.node_id == ME and where.error == ErrorCode.none
    assert where.reason is None or "is loading" in where.reason
    await node.groups.wait_loaded()
    assert node.groups.locate(GROUP).reason is None
    node.logs.shutdown()


def test_leaderless_reasons_name_what_brings_the_partition_back() -> None:
    assert "being elected from the live ISR replicas [3]" in leaderless_reason(7, [1, 2, 3], [2, 3], [1, 3], False)
    assert "when one of brokers [1, 2] returns" in leaderless_reason(7, [1, 2, 3], [1, 2], [3], False)
    unclean = leaderless_reason(7, [1, 2, 3], [1], [3], True)
    assert "unclean.leader.election.enable=true lets one of [3] take over" in unclean
    assert offsets_topic_short_of_brokers(3, [1, 2, 3]) is None
    assert "set offsets.topic.replication.factor=1" in offsets_topic_short_of_brokers(3, [5])


def test_reason_log_says_a_reason_once_until_it_changes_or_repeats() -> None:
    now = [0.0]
    seen: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("test.reasons")
    logger.addHandler(Capture())
    logger.setLevel(logging.INFO)
    reasons = ReasonLog(logger, repeat_s=60, clock=lambda: now[0])
    for _ in range(100):
        reasons.note("p7", "no leader")
    assert seen == ["no leader"]
    reasons.note("p7", "loading")
    now[0] = 59
    reasons.note("p7", "loading")
    now[0] = 61
    reasons.note("p7", "loading")
    reasons.clear("p7", "served again")
    reasons.clear("p7", "served again")
    assert seen == ["no leader", "loading", "loading", "served again"]
