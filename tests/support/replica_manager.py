"""The cluster's replica manager without processes (tests/replication/): a real log manager over a temporary directory,
ZooKeeper's partition states kept in memory (``FakeStates``: a write can be held in flight, answer
a conflict or get no answer), and a cluster view whose live brokers the test sets. States reach the
replica manager as the metadata cache's watch would deliver them (``Harness.deliver``)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from gregor.cluster.metadata import BrokerEndpoint
from gregor.cluster.partition_states import StateConflict, StateUnavailable
from gregor.cluster.zk.znodes import PartitionState
from gregor.config import BrokerConfig
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import Topic, TopicRegistry
from gregor.protocol.records import build_batch
from gregor.replication.cluster_replicas import ClusterReplicas

ME = 1
TOPIC = "t"


class FakeView:
    def __init__(self) -> None:
        self.on_partition: list[Any] = []
        self.on_brokers: list[Any] = []
        self.on_topic_deleted: list[Any] = []
        # live brokers at closed ports: a fetcher started by a test tries them and backs off
        self.live = {b: BrokerEndpoint(b, "127.0.0.1", 1) for b in (1, 2, 3)}

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return self.live.get(node_id)


class FakeStates:
    """Partition states as ZooKeeper keeps them: a version per state, a zxid per write."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.zxid = 1000
        self.held: asyncio.Event | None = None  # set: writes wait until it is set
        self.unavailable = False  # writes and reads get no answer
        self.lost_answer = False  # writes are applied but their answer is lost
        self.writes: list[PartitionState] = []

    def next_zxid(self) -> int:
        self.zxid += 1
        return self.zxid

    def controller_write(self, partition: int, leader: int, epoch: int, isr: list[int]) -> PartitionState:
        """The controller writes a state (a new leader epoch)."""
        old = self.states.get((TOPIC, partition))
        version = old.zk_version + 1 if old is not None else 0
        st = PartitionState(leader, epoch, list(isr), 1, version, self.next_zxid())
        self.states[(TOPIC, partition)] = st
        return st

    async def write_isr(self, topic: str, partition: int, state: PartitionState) -> PartitionState:
        self.writes.append(state)
        if self.held is not None:
            await self.held.wait()
        if self.unavailable:
            raise StateUnavailable("ConnectionLoss")
        cur = self.states[(topic, partition)]
        if cur.zk_version != state.zk_version:
            raise StateConflict("BadVersion")
        written = state.written(cur.zk_version + 1, self.next_zxid())
        self.states[(topic, partition)] = written
        if self.lost_answer:
            raise StateUnavailable("ConnectionLoss")
        return written

    async def read(self, topic: str, partition: int) -> PartitionState | None:
        if self.unavailable:
            raise StateUnavailable("ConnectionLoss")
        return self.states.get((topic, partition))


class Harness:
    def __init__(self, tmp_path: Any, settings: dict[str, str] | None = None) -> None:
        self.config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": str(ME),
                                                 "replica.lag.time.max.ms": "10000", "min.insync.replicas": "2",
                                                 **(settings or {})})
        self.registry = TopicRegistry(self.config.data_dir)
        self.logs = LogManager(self.config.data_dir, self.config.topic_defaults(), self.registry,
                               hosts_all_partitions=False)
        self.logs.startup()
        self.registry.add_topic(Topic(TOPIC, uuid.uuid4(), 4, {}))
        self.view = FakeView()
        self.store = FakeStates()
        self.failures: list[str] = []
        self.leadership: list[tuple[int, int, bool]] = []  # (partition, epoch, is_leader)
        self.rm = ClusterReplicas(self.config, ME, self.logs, self.registry, self.view, self.store,
                                  self.failures.append)
        self.rm.on_leadership.append(lambda t, p, e, lead: self.leadership.append((p, e, lead)))

    async def start(self, broker_epoch: int | None = None) -> None:
        await self.rm.start()
        self.rm.set_broker_epoch(self.store.next_zxid() if broker_epoch is None else broker_epoch)

    def deliver(self, partition: int, replicas: list[int] | None = None) -> None:
        """The watch delivers the partition's current state."""
        self.rm.partition_changed(TOPIC, partition, replicas or [1, 2, 3], self.store.states.get((TOPIC, partition)))

    def lead(self, partition: int = 0, epoch: int = 1, isr: list[int] | None = None) -> Any:
        self.store.controller_write(partition, ME, epoch, isr or [1, 2, 3])
        self.deliver(partition)
        return self.rm.partitions[(TOPIC, partition)]

    def produce(self, partition: int = 0, records: int = 1, acks: int = -1, timeout_s: float = 5,
                producer: tuple[int, int, int] | None = None) -> Any:
        """``producer``: (producer id, epoch, first sequence) of an idempotent producer's batch."""
        pid, epoch, seq = producer if producer is not None else (-1, -1, -1)
        batch = build_batch([(None, b"x")] * records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        return self.rm.append_records(TOPIC, partition, batch, acks, timeout_s)

    async def close(self) -> None:
        await self.rm.stop()
        self.logs.shutdown()
