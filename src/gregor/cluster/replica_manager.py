"""The replicas this broker hosts in a cluster, and their roles: leader or follower.

Partition state comes from ZooKeeper (``ZkClusterMetadata.on_partition``); this module turns it into
become-leader / become-follower, as Kafka's ReplicaManager does on LeaderAndIsr:

- **Leader**: appends stamp its leader epoch; each follower's log end offset is learnt from its
  Fetch (``follower_fetched``); the high watermark is the smallest log end offset in the ISR; a
  follower that has not been caught up for ``replica.lag.time.max.ms`` leaves the ISR and one
  whose log end reaches the high watermark (and the start of the current leader epoch) rejoins it.
  ISR changes are conditional writes of the partition's state node with the version last seen
  (``BadVersion``: someone else, the controller, changed it first; re-read, decide again).
  ``acks=all`` appends wait until the high watermark covers them.
- **Follower**: the replica fetcher of its leader's broker (``replica_fetcher.py``) truncates a
  divergent tail (OffsetForLeaderEpoch) and then copies the leader's batches.

Listeners of ``on_leadership(topic, partition, leader_epoch, is_leader)`` hear every change of
this broker's role (the group coordinator loads and unloads ``__consumer_offsets`` shards), and
``on_high_watermark(topic, partition, offset)`` every advance of a local high watermark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.cluster.metadata import BrokerEndpoint
from gregor.cluster.replica_fetcher import ReplicaFetcher
from gregor.cluster.zk import znodes as zn
from gregor.cluster.zk.client import BadVersionError, KazooException, ZkClient
from gregor.cluster.zk_metadata import ZkClusterMetadata
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import AppendResult, PartitionLog
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""
    log_end_offset: int = -1  # unknown until it fetches
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


@dataclass
class Partition:
    topic: str
    partition: int
    log: PartitionLog
    replicas: list[int]
    leader: int = zn.NO_LEADER
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    zk_version: int = -1
    controller_epoch: int = 0
    is_leader: bool = False
    epoch_start_offset: int = 0  # the log end when this broker became leader (ISR rejoin floor)
    followers: dict[int, FollowerState] = field(default_factory=dict)
    waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)
    isr_write: asyncio.Task[None] | None = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def state(self) -> zn.PartitionState:
        return zn.PartitionState(self.leader, self.leader_epoch, list(self.isr), self.controller_epoch,
                                 self.zk_version)


class ReplicaManager:
    def __init__(self, config: Any, node_id: int, zk: ZkClient, metadata: ZkClusterMetadata,
                 logs: LogManager, registry: TopicRegistry) -> None:
        self.config = config
        self.node_id = node_id
        self.zk = zk
        self.metadata = metadata
        self.logs = logs
        self.registry = registry
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.on_leadership: list[Callable[[str, int, int, bool], None]] = []
        self.on_high_watermark: list[Callable[[str, int, int], None]] = []
        self.lag_max_ms = int(config["replica.lag.time.max.ms"])
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.metadata.on_partition.append(self.partition_changed)
        self.metadata.on_topic_deleted.append(self.topic_deleted)
        self.metadata.on_brokers.append(self.brokers_changed)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._isr_expiry_loop()))
        self._tasks.append(loop.create_task(self._hwm_checkpoint_loop()))

    async def stop(self) -> None:
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for f in list(self.fetchers.values()):
            await f.stop()
        self.fetchers.clear()
        for part in self.partitions.values():
            self._fail_waiters(part, ErrorCode.not_leader_or_follower)
        self.write_hwm_checkpoint()

    def write_hwm_checkpoint(self) -> None:
        try:
            self.logs.write_hwm_checkpoint()
        except OSError as e:
            log.error("cannot write replication-offset-checkpoint: %s", e)

    # -- state from ZooKeeper ------------------------------------------------------------------
    def partition_changed(self, topic: str, partition: int, replicas: list[int],
                          state: zn.PartitionState | None) -> None:
        tp = (topic, partition)
        part = self.partitions.get(tp)
        if self.node_id not in replicas:
            if part is not None:
                self._drop(part, delete=True)
            return
        if part is not None and self.logs.get(topic, partition) is not part.log:
            # the topic was deleted and created again: the replica of the old one is gone
            self._drop(part, delete=False)
            part = None
        if part is None:
            part = self._open(topic, partition, replicas)
            if part is None:
                return
        part.replicas = list(replicas)
        if state is None:
            return
        if state.zk_version < part.zk_version:
            return  # stale
        if state.leader == self.node_id:
            if not part.is_leader or state.leader_epoch != part.leader_epoch:
                self._become_leader(part, state)
            else:  # an ISR change (our own, or the controller's) at the same epoch
                self._adopt(part, state)
                self._maybe_advance_hwm(part)
        else:
            changed = part.is_leader or state.leader != part.leader or state.leader_epoch != part.leader_epoch
            self._adopt(part, state)
            if changed:
                self._become_follower(part)

    def _adopt(self, part: Partition, state: zn.PartitionState) -> None:
        part.leader, part.leader_epoch, part.isr = state.leader, state.leader_epoch, list(state.isr)
        part.zk_version, part.controller_epoch = state.zk_version, state.controller_epoch

    def _open(self, topic: str, partition: int, replicas: list[int]) -> Partition | None:
        plog = self.logs.get(topic, partition)
        if plog is None:
            t = self.registry.get(topic)
            if t is None:
                log.error("cannot host %s-%d: the topic is not known here yet", topic, partition)
                return None
            try:
                plog = self.logs.create_partition_log(t, partition)
            except OSError as e:
                log.error("cannot create the replica of %s-%d: %s", topic, partition, e)
                return None
        self.logs.make_replicated(plog)
        part = Partition(topic, partition, plog, list(replicas))
        self.partitions[part.tp] = part
        return part

    def _become_leader(self, part: Partition, state: zn.PartitionState) -> None:
        was_leader = part.is_leader
        self._stop_fetching(part)
        self._adopt(part, state)
        part.is_leader = True
        plog = part.log
        plog.ensure_loaded()
        part.epoch_start_offset = plog.log_end_offset
        plog.epochs.assign(state.leader_epoch, plog.log_end_offset)
        now = now_ms()
        part.followers = {r: FollowerState(last_caught_up_ms=now if r in part.isr else 0, last_fetch_ms=now)
                          for r in part.replicas if r != self.node_id}
        log.info("%s-%d: leader at epoch %d (ISR %s, log end %d, high watermark %d)", part.topic, part.partition,
                 state.leader_epoch, state.isr, plog.log_end_offset, plog.high_watermark)
        self._maybe_advance_hwm(part)
        if was_leader:
            log.info("%s-%d: new leader epoch %d while leading", part.topic, part.partition, state.leader_epoch)
        self._tell_leadership(part, True)  # also for a new epoch: listeners write with it

    def _become_follower(self, part: Partition) -> None:
        was_leader = part.is_leader
        part.is_leader = False
        part.followers = {}
        self._fail_waiters(part, ErrorCode.not_leader_or_follower)
        self._stop_fetching(part)
        leader = self.metadata.broker(part.leader) if part.leader >= 0 else None
        if self._stopping:
            pass  # leaving the cluster (after a controlled shutdown): never fetch, never rejoin an ISR
        elif leader is not None:
            self._fetcher_for(leader).add(part)
            log.info("%s-%d: follower of broker %d at epoch %d", part.topic, part.partition, part.leader,
                     part.leader_epoch)
        else:
            log.warning("%s-%d: no live leader (leader %d, ISR %s)", part.topic, part.partition, part.leader,
                        part.isr)
        if was_leader:
            self._tell_leadership(part, False)

    def _tell_leadership(self, part: Partition, is_leader: bool) -> None:
        for fn in list(self.on_leadership):
            try:
                fn(part.topic, part.partition, part.leader_epoch, is_leader)
            except Exception:
                log.exception("leadership listener failed for %s-%d", part.topic, part.partition)

    def _fetcher_for(self, leader: BrokerEndpoint) -> ReplicaFetcher:
        f = self.fetchers.get(leader.node_id)
        if f is not None and (f.leader.host, f.leader.port) != (leader.host, leader.port):
            self._spawn_stop(f)
            f = None
        if f is None:
            f = self.fetchers[leader.node_id] = ReplicaFetcher(self, leader, self.config)
            f.start()
        return f

    def _spawn_stop(self, f: ReplicaFetcher) -> None:
        self.fetchers.pop(f.leader.node_id, None)
        asyncio.get_running_loop().create_task(f.stop())

    def _stop_fetching(self, part: Partition) -> None:
        for f in self.fetchers.values():
            f.remove(part.tp)

    def brokers_changed(self, live: dict[int, BrokerEndpoint]) -> None:
        """A follower whose leader's broker (re)appeared starts fetching; fetchers of brokers that
        are gone stop (the controller will move leadership)."""
        for node_id, f in list(self.fetchers.items()):
            if node_id not in live:
                self._spawn_stop(f)
        for part in self.partitions.values():
            if not part.is_leader and part.leader >= 0 and part.leader in live:
                f = self._fetcher_for(live[part.leader])
                if not f.has(part.tp):
                    f.add(part)

    def topic_deleted(self, topic: str) -> None:
        for tp, part in list(self.partitions.items()):
            if tp[0] == topic:
                self._drop(part, delete=False)  # the topic admin deletes the files

    def _drop(self, part: Partition, delete: bool) -> None:
        self._stop_fetching(part)
        self._fail_waiters(part, ErrorCode.not_leader_or_follower)
        if part.is_leader:
            part.is_leader = False
            self._tell_leadership(part, False)
        self.partitions.pop(part.tp, None)
        if delete:
            self.logs.delete_partition_log(part.topic, part.partition)

    # -- the leader's side -------------------------------------------------------------------
    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it, else NOT_LEADER_OR_FOLLOWER; a client's
        ``current_leader_epoch`` (KIP-320) older than ours is FENCED_LEADER_EPOCH, newer is
        UNKNOWN_LEADER_EPOCH."""
        part = self.partitions.get((topic, partition))
        if part is None or not part.is_leader:
            leader = part.leader if part is not None else self.metadata.partition(topic, partition).leader
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.node_id} is not the leader of {topic}-{partition} (leader: {leader})")
        check_epoch(part, current_leader_epoch)
        return part

    def local_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        """A replica hosted here, leader or follower (fetch from a follower, KIP-392)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.node_id} has no replica of {topic}-{partition}")
        check_epoch(part, current_leader_epoch)
        return part

    def min_isr(self, topic: str) -> int:
        t = self.registry.get(topic)
        v = t.configs.get("min.insync.replicas") if t is not None else None
        return int(v) if v is not None else int(self.config["min.insync.replicas"])

    def append(self, topic: str, partition: int, records: bytes, acks: int) -> tuple[Partition, AppendResult, int]:
        """Append a producer's batch as leader: (partition, result, offset the high watermark must
        reach for acks=all). NOT_ENOUGH_REPLICAS before anything is written when acks=all and the
        ISR is smaller than min.insync.replicas."""
        part = self.leader_partition(topic, partition)
        if acks == -1:
            need = self.min_isr(topic)
            if len(part.isr) < need:
                raise KafkaError(ErrorCode.not_enough_replicas,
                                 f"{topic}-{partition}: ISR {part.isr} is smaller than min.insync.replicas={need}")
        res = part.log.append(records, leader_epoch=part.leader_epoch)
        required = part.log.log_end_offset
        self._maybe_advance_hwm(part)
        return part, res, required

    def append_internal(self, topic: str, partition: int, batch: bytes) -> int:
        """A batch the broker built itself (the coordinator's records), as leader."""
        part = self.leader_partition(topic, partition)
        base = part.log.append_batch_unchecked(batch, leader_epoch=part.leader_epoch)
        self._maybe_advance_hwm(part)
        return base

    async def wait_replicated(self, part: Partition, required: int, timeout_s: float) -> ErrorCode:
        """acks=all: NONE once the high watermark reaches ``required`` with the ISR at least
        min.insync.replicas; NOT_ENOUGH_REPLICAS_AFTER_APPEND if it is smaller by then;
        NOT_LEADER_OR_FOLLOWER if leadership is lost first; REQUEST_TIMED_OUT."""
        if part.log.high_watermark >= required:
            return self._completion(part)
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        part.waiters.append((required, fut))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            if not fut.done():
                fut.cancel()
            with contextlib.suppress(ValueError):
                part.waiters.remove((required, fut))

    def _completion(self, part: Partition) -> ErrorCode:
        if len(part.isr) < self.min_isr(part.topic):
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def _fail_waiters(self, part: Partition, code: ErrorCode) -> None:
        for _, fut in part.waiters:
            if not fut.done():
                fut.set_result(code)
        part.waiters.clear()

    def follower_fetched(self, part: Partition, replica_id: int, fetch_offset: int) -> None:
        """A follower's Fetch at ``fetch_offset``: everything below it is on the follower."""
        fs = part.followers.get(replica_id)
        if fs is None:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {replica_id} is not a replica of {part.topic}-{part.partition}")
        now = now_ms()
        leo = part.log.log_end_offset
        if fetch_offset >= leo:
            fs.last_caught_up_ms = now
        elif fetch_offset >= fs.last_fetch_leader_leo:
            fs.last_caught_up_ms = max(fs.last_caught_up_ms, fs.last_fetch_ms)
        fs.log_end_offset = fetch_offset
        fs.last_fetch_leader_leo = leo
        fs.last_fetch_ms = now
        if (replica_id not in part.isr and fetch_offset >= part.log.high_watermark
                and fetch_offset >= part.epoch_start_offset):
            self._change_isr(part, sorted({*part.isr, replica_id}), f"broker {replica_id} caught up")
        self._maybe_advance_hwm(part)

    def _maybe_advance_hwm(self, part: Partition) -> None:
        if not part.is_leader:
            return
        plog = part.log
        hwm = plog.log_end_offset
        for r in part.isr:
            if r == self.node_id:
                continue
            fs = part.followers.get(r)
            if fs is None or fs.log_end_offset < 0:
                return  # an ISR member not heard from yet holds the high watermark
            hwm = min(hwm, fs.log_end_offset)
        if hwm > plog.high_watermark and plog.update_high_watermark(hwm):
            self._high_watermark_moved(part)

    def _high_watermark_moved(self, part: Partition) -> None:
        hwm = part.log.high_watermark
        if part.waiters:
            done = [(req, fut) for req, fut in part.waiters if req <= hwm]
            if done:
                code = self._completion(part)
                for _req, fut in done:
                    if not fut.done():
                        fut.set_result(code)
        self.logs.notifier.notify(part.tp)  # consumers long-polling for data below the new mark
        for fn in self.on_high_watermark:
            fn(part.topic, part.partition, hwm)

    def follower_high_watermark(self, part: Partition, leader_hwm: int) -> None:
        """A follower's high watermark: the leader's, bounded by what it has."""
        if part.log.update_high_watermark(min(leader_hwm, part.log.log_end_offset)):
            self._high_watermark_moved(part)

    async def _isr_expiry_loop(self) -> None:
        interval = max(self.lag_max_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            now = now_ms()
            for part in list(self.partitions.values()):
                if not part.is_leader or part.isr_write is not None:
                    continue
                lagging = [r for r in part.isr if r != self.node_id
                           and now - part.followers.get(r, FollowerState()).last_caught_up_ms > self.lag_max_ms]
                if lagging:
                    self._change_isr(part, [r for r in part.isr if r not in lagging],
                                     f"broker(s) {lagging} not caught up for {self.lag_max_ms} ms")

    async def _hwm_checkpoint_loop(self) -> None:
        interval = int(self.config["replica.high.watermark.checkpoint.interval.ms"]) / 1000
        while True:
            await asyncio.sleep(interval)
            entries = self.logs.hwm_checkpoint_entries()  # on the loop, where the logs change
            if entries is not None:
                await asyncio.to_thread(self.logs.write_hwm_entries, entries)

    # -- ISR changes: conditional writes of the state node -----------------------------------
    def _change_isr(self, part: Partition, new_isr: list[int], why: str) -> None:
        if part.isr_write is not None or not part.is_leader or new_isr == part.isr or not new_isr:
            return
        part.isr_write = asyncio.get_running_loop().create_task(self._write_isr(part, new_isr, why))

    async def _write_isr(self, part: Partition, new_isr: list[int], why: str) -> None:
        try:
            epoch, old = part.leader_epoch, part.isr
            state = part.state().with_isr(new_isr)
            try:
                stat = await self.zk.set(zn.state_path(part.topic, part.partition), state.encode(), part.zk_version)
            except BadVersionError:
                log.info("%s-%d: ISR change %s -> %s lost a race (the state changed); re-reading",
                         part.topic, part.partition, old, new_isr)
                got = await self.zk.get(zn.state_path(part.topic, part.partition))
                if got is not None:
                    st = zn.PartitionState.decode(got[0], got[1].version)
                    self.metadata.remember_state(part.topic, part.partition, st)
                    part.isr_write = None
                    self.partition_changed(part.topic, part.partition, part.replicas, st)
                return
            except KazooException as e:
                log.warning("%s-%d: cannot change the ISR %s -> %s without ZooKeeper (%s); keeping %s",
                            part.topic, part.partition, old, new_isr, type(e).__name__, old)
                return
            if not part.is_leader or part.leader_epoch != epoch:
                return
            part.isr = list(new_isr)
            part.zk_version = stat.version
            self.metadata.remember_state(part.topic, part.partition, part.state())
            log.info("%s-%d: ISR %s -> %s (%s)", part.topic, part.partition, old, new_isr, why)
            self._maybe_advance_hwm(part)
            if part.waiters and part.log.high_watermark >= min(r for r, _ in part.waiters):
                self._high_watermark_moved(part)
        finally:
            part.isr_write = None


def check_epoch(part: Partition, current_leader_epoch: int) -> None:
    if current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch:
        return
    if current_leader_epoch < part.leader_epoch:
        raise KafkaError(ErrorCode.fenced_leader_epoch,
                         f"{part.topic}-{part.partition}: leader epoch {current_leader_epoch} is older than "
                         f"the current {part.leader_epoch}")
    raise KafkaError(ErrorCode.unknown_leader_epoch,
                     f"{part.topic}-{part.partition}: leader epoch {current_leader_epoch} is newer than "
                     f"this broker's {part.leader_epoch}")
