"""The seam in a ZooKeeper cluster: the replicas this broker hosts and its role in each, leader
or follower, as Kafka 2.8's ReplicaManager and Partition play them on LeaderAndIsr.

Partition states come from ZooKeeper (the metadata cache's ``on_partition``; Gregor's brokers
read the controller's decisions there instead of receiving LeaderAndIsr requests). A broker acts
on a state only for its current registration, as Kafka's brokers act only on a LeaderAndIsr that
carries their current broker epoch:

- **Not registered** (starting, or its ZooKeeper session expired): no role at all. A broker that
  restarted within its previous session's lifetime reads states that still name it leader; it
  neither leads nor follows until it has registered.
- **Leader** only when the state naming it was written after its registration (the state node's
  zxid is above the broker epoch, the registration's zxid). A leadership written for an earlier
  registration is the controller's to confirm: it treats a restarted broker as one that failed
  and returned, and writes a new leader epoch; until then this broker waits (produce answers
  NOT_LEADER_OR_FOLLOWER).
- **Follower** of any other leader: fetches from it (replica_fetcher.py).

As leader:
- appends are stamped with the leader epoch; each follower's log end and log start come from its
  Fetch (``follower_fetched``); the high watermark is the smallest log end over the *maximal* ISR
  (the ISR and a change not yet known to be taken, Kafka's maximalIsr), and so is the
  min.insync.replicas check: a replica being added counts before ZooKeeper says so, a replica
  being removed until it does, and a write whose outcome was lost with the connection counts both
  ways until a read of the state settles it;
- a follower that has not been caught up for ``replica.lag.time.max.ms`` leaves the ISR, one whose
  log end reaches the high watermark and the start of this leader epoch rejoins; both are
  conditional writes of the state node (``PartitionStateStore``): a conflict means the controller
  changed the state first, and the leader reads it and follows it, never taking its own change as
  made;
- acks=all appends wait until the high watermark covers them.

Listeners hear only of real changes of role (``on_leadership``): a new leader epoch while leading
(the controller bumps it on every ISR shrink it makes) is applied without unloading anything.

A storage failure (a full disk when the leader epoch checkpoint is written, a failed append,
truncation or log creation) is a failure of the broker's only log directory: every role is given
up at once and ``on_log_dir_failure`` is called (the broker halts, as Kafka halts a broker whose
last log directory failed, so that the controller moves its leaderships to healthy replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from gregor.cluster.metadata import BrokerEndpoint
from gregor.cluster.partition_states import PartitionStateStore, StateConflict, StateUnavailable
from gregor.cluster.zk.znodes import PartitionState
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import NO_VERIFICATION
from gregor.log.storage_errors import StorageError
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol import record_batch as rb
from gregor.protocol.control_records import build_marker_batch
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.partition import FollowerState, Partition, TopicPartition
from gregor.replication.replica_fetcher import ReplicaFetcher
from gregor.replication.replica_manager import Appended, ReplicaManager

log = logging.getLogger(__name__)

PartitionListener = Callable[[str, int, list[int], PartitionState | None], None]


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class ClusterView(Protocol):
    """What the replica manager reads of the cluster (the ZooKeeper metadata cache)."""

    on_partition: list[PartitionListener]
    on_brokers: list[Callable[[dict[int, BrokerEndpoint]], None]]
    on_topic_deleted: list[Callable[[str], None]]

    def broker(self, node_id: int) -> BrokerEndpoint | None: ...


class ClusterReplicas(ReplicaManager):
    def __init__(self, config: Any, node_id: int, logs: LogManager, registry: TopicRegistry, view: ClusterView,
                 store: PartitionStateStore, on_log_dir_failure: Callable[[str], None] | None = None) -> None:
        super().__init__(config, node_id, logs, registry)
        self.view = view
        self.store = store
        self.on_log_dir_failure = on_log_dir_failure or (lambda reason: None)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.states: dict[TopicPartition, PartitionState] = {}  # the latest state read of each hosted partition
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.broker_epoch = -1  # the registration's zxid; -1 while not registered
        self.lag_max_ms = int(config["replica.lag.time.max.ms"])
        self.failed: str | None = None  # why the log directory failed
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self._shutting_down = False
        self._stopped = False
        self._waiting_noted: set[TopicPartition] = set()
        # False while this broker cannot be sure it is still registered (its process was paused:
        # cluster/zk/session_guard.py): it then leads nothing
        self.trusted: Callable[[], bool] = lambda: True

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.view.on_partition.append(self.partition_changed)
        self.view.on_topic_deleted.append(self.topic_deleted)
        self.view.on_brokers.append(self.brokers_changed)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._isr_maintenance_loop()))
        self._tasks.append(loop.create_task(self._hwm_checkpoint_loop()))

    def set_broker_epoch(self, broker_epoch: int) -> None:
        """This broker registered (its epoch), or lost its registration (-1: the session expired)."""
        if broker_epoch == self.broker_epoch:
            return
        self.broker_epoch = broker_epoch
        if broker_epoch < 0:
            log.warning("broker %d is not registered (ZooKeeper session expired): giving up every role until it "
                        "is registered again and the controller has confirmed its leaderships", self.node_id)
        for part in list(self.partitions.values()):
            self._apply(part)

    def begin_controlled_shutdown(self) -> None:
        self._shutting_down = True
        for part in list(self.partitions.values()):
            st = self.states.get(part.tp)
            if not part.is_leader and (st is None or self.node_id not in st.isr):
                self._stop_fetching(part)

    async def stop_fetching(self) -> None:
        self._shutting_down = True
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        for f in fetchers:
            await f.stop()

    async def stop(self) -> None:
        self._stopped = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.stop_fetching()
        for part in self.partitions.values():
            self._fail_waiters(part, ErrorCode.not_leader_or_follower)
        self.write_hwm_checkpoint()

    def write_hwm_checkpoint(self) -> None:
        try:
            self.logs.write_hwm_checkpoint()
        except OSError as e:
            log.error("cannot write replication-offset-checkpoint: %s", e)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- states from the controller ------------------------------------------------------------
    def partition_changed(self, topic: str, partition: int, replicas: list[int], state: PartitionState | None) -> None:
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
        known = self.states.get(tp)
        if known is not None and state.zk_version < known.zk_version:
            return  # an older read delivered late
        self.states[tp] = state
        self._apply(part)

    def _apply(self, part: Partition) -> None:
        """Take the role the latest state gives this broker's current registration."""
        if self._stopped or self.failed is not None:
            return
        st = self.states.get(part.tp)
        if st is None:
            return
        me = self.node_id
        if st.leader == me and self.broker_epoch >= 0 and st.mzxid > self.broker_epoch:
            self._waiting_noted.discard(part.tp)
            if part.is_leader and part.leader_epoch == st.leader_epoch:
                self._adopt_isr(part, st)
            else:
                self._become_leader(part, st)
            return
        changed = part.is_leader or st.leader != part.leader or st.leader_epoch != part.leader_epoch
        if part.is_leader:
            self._demote(part)
        self._adopt(part, st)
        if self.broker_epoch < 0:
            self._stop_fetching(part)
            return
        if st.leader == me:
            # a leadership of an earlier registration of this broker: the controller confirms it
            # (a new leader epoch) or moves it; nothing is served meanwhile
            self._stop_fetching(part)
            if part.tp not in self._waiting_noted:
                self._waiting_noted.add(part.tp)
                log.info("%s-%d: led by this broker at epoch %d in a state written before it registered; waiting "
                         "for the controller", part.topic, part.partition, st.leader_epoch)
            return
        self._waiting_noted.discard(part.tp)
        if self._shutting_down:
            # leaving the cluster: never start fetching, and stop once leadership moved or this
            # broker left the ISR (Kafka's StopReplica), so that no leader takes it back
            if changed or me not in st.isr:
                self._stop_fetching(part)
            return
        if changed or not self._fetching(part):
            self._become_follower(part)

    @staticmethod
    def _adopt(part: Partition, st: PartitionState) -> None:
        part.leader, part.leader_epoch, part.isr = st.leader, st.leader_epoch, list(st.isr)
        part.state_version, part.controller_epoch = st.zk_version, st.controller_epoch

    def _adopt_isr(self, part: Partition, st: PartitionState) -> None:
        """A newer state at the leader's own epoch: an ISR change (this leader's, or one whose
        outcome it was waiting to learn)."""
        if st.zk_version <= part.state_version:
            return
        if part.isr != list(st.isr):
            log.info("%s-%d: ISR %s -> %s (read back)", part.topic, part.partition, part.isr, st.isr)
        self._adopt(part, st)
        if part.isr_write is None:
            part.pending_isr = None  # whatever was pending is settled by this read
        self._maybe_advance_hwm(part)
        self._complete_waiters(part)

    def _open(self, topic: str, partition: int, replicas: list[int]) -> Partition | None:
        plog = self.logs.get(topic, partition)
        if plog is None:
            t = self.registry.get(topic)
            if t is None:
                log.error("cannot host %s-%d: the topic is not known here yet", topic, partition)
                return None
            try:
                plog = self.logs.create_partition_log(t, partition)
            except (OSError, StorageError) as e:
                self.storage_failed(f"creating the replica of {topic}-{partition}", e)
                return None
        self.logs.make_replicated(plog)
        part = Partition(topic, partition, plog, list(replicas))
        self.partitions[part.tp] = part
        return part

    def _become_leader(self, part: Partition, st: PartitionState) -> None:
        was_leader = part.is_leader
        self._stop_fetching(part)
        self._adopt(part, st)
        part.pending_isr = None
        plog = part.log
        try:
            plog.ensure_loaded()
            part.epoch_start_offset = plog.log_end_offset
            plog.epochs.assign(st.leader_epoch, plog.log_end_offset)
        except (OSError, StorageError) as e:
            part.is_leader = False
            self.storage_failed(f"becoming the leader of {part.topic}-{part.partition} at epoch {st.leader_epoch}", e)
            return
        part.is_leader = True
        now = now_ms()
        part.followers = {r: FollowerState(last_caught_up_ms=now if r in part.isr else 0, last_fetch_ms=now)
                          for r in part.replicas if r != self.node_id}
        log.info("%s-%d: leader at epoch %d (ISR %s, log end %d, high watermark %d)%s", part.topic, part.partition,
                 st.leader_epoch, st.isr, plog.log_end_offset, plog.high_watermark,
                 " (a new epoch while leading)" if was_leader else "")
        self._maybe_advance_hwm(part)
        if not was_leader:
            self._tell_leadership(part, True)

    def _demote(self, part: Partition) -> None:
        part.is_leader = False
        part.followers = {}
        part.pending_isr = None
        self._fail_waiters(part, ErrorCode.not_leader_or_follower)
        self._tell_leadership(part, False)

    def _become_follower(self, part: Partition) -> None:
        self._stop_fetching(part)
        leader = self.view.broker(part.leader) if part.leader >= 0 else None
        if leader is not None:
            self._fetcher_for(leader).add(part)
            log.info("%s-%d: follower of broker %d at epoch %d", part.topic, part.partition, part.leader,
                     part.leader_epoch)
        else:
            log.warning("%s-%d: no live leader (leader %d, ISR %s)", part.topic, part.partition, part.leader,
                        part.isr)

    def _fetching(self, part: Partition) -> bool:
        f = self.fetchers.get(part.leader)
        return f is not None and f.has(part.tp)

    def _fetcher_for(self, leader: BrokerEndpoint) -> ReplicaFetcher:
        f = self.fetchers.get(leader.node_id)
        if f is not None and (f.leader.host, f.leader.port) != (leader.host, leader.port):
            self._retire(f)
            f = None
        if f is None:
            f = self.fetchers[leader.node_id] = ReplicaFetcher(self, leader, self.config)
            f.start()
        return f

    def _retire(self, f: ReplicaFetcher) -> None:
        self.fetchers.pop(f.leader.node_id, None)
        self._spawn(f.stop())

    def _stop_fetching(self, part: Partition) -> None:
        for f in self.fetchers.values():
            f.remove(part.tp)

    def brokers_changed(self, live: dict[int, BrokerEndpoint]) -> None:
        """Fetchers of brokers that are gone stop (the controller moves their leaderships); a
        follower whose leader's broker (re)appeared starts fetching."""
        for node_id, f in list(self.fetchers.items()):
            if node_id not in live:
                self._retire(f)
        for part in list(self.partitions.values()):
            if not part.is_leader and part.leader in live and not self._fetching(part):
                self._apply(part)

    def topic_deleted(self, topic: str) -> None:
        for tp, part in list(self.partitions.items()):
            if tp[0] == topic:
                self._drop(part, delete=False)  # the topic admin deletes the files

    def _drop(self, part: Partition, delete: bool) -> None:
        self._stop_fetching(part)
        if part.is_leader:
            self._demote(part)
        self._fail_waiters(part, ErrorCode.not_leader_or_follower)
        self.partitions.pop(part.tp, None)
        self.states.pop(part.tp, None)
        if delete:
            self.logs.delete_partition_log(part.topic, part.partition)

    # -- storage failures --------------------------------------------------------------------
    def storage_failed(self, what: Any, error: BaseException) -> None:
        """The log directory failed: every role is given up at once and the broker is told
        (``on_log_dir_failure``: it halts, so that its leaderships move to healthy replicas)."""
        if self.failed is not None:
            return
        where = f"{what.topic}-{what.partition}" if isinstance(what, Partition) else str(what)
        self.failed = f"{where}: {getattr(error, 'message', None) or error}"
        log.critical("the log directory %s failed (%s): this broker gives up every partition it hosts",
                     self.logs.data_dir, self.failed)
        for part in list(self.partitions.values()):
            self._stop_fetching(part)
            if part.is_leader:
                self._demote(part)
        for f in list(self.fetchers.values()):
            self._retire(f)
        try:
            self.on_log_dir_failure(self.failed)
        except Exception:
            log.exception("the log directory failure handler failed")

    # -- the leader's side -------------------------------------------------------------------
    def _not_hosted(self, topic: str, partition: int) -> KafkaError:
        t = self.registry.get(topic)
        if t is None or not 0 <= partition < t.partitions:
            return KafkaError(ErrorCode.unknown_topic_or_partition, f"partition {topic}-{partition} does not exist")
        return KafkaError(ErrorCode.not_leader_or_follower,
                          f"broker {self.node_id} has no replica of {topic}-{partition}")

    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            raise self._not_hosted(topic, partition)
        part.check_epoch(current_leader_epoch)  # first, as Kafka's getLocalLog
        if not part.is_leader or not self.trusted():
            why = (" (its log directory failed)" if self.failed else
                   " (it is confirming its ZooKeeper session after a pause)" if part.is_leader else "")
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.node_id} is not the leader of {topic}-{partition}{why} "
                             f"(leader: {part.leader})")
        return part

    def local_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            raise self._not_hosted(topic, partition)
        part.check_epoch(current_leader_epoch)
        return part

    def min_isr(self, topic: str) -> int:
        t = self.registry.get(topic)
        v = t.configs.get("min.insync.replicas") if t is not None else None
        return int(v) if v is not None else int(self.config["min.insync.replicas"])

    def check_min_isr(self, topic: str, partition: int) -> None:
        self._check_min_isr(self.leader_partition(topic, partition))

    def _check_min_isr(self, part: Partition) -> None:
        need = self.min_isr(part.topic)
        isr = part.maximal_isr
        if len(isr) < need:
            raise KafkaError(ErrorCode.not_enough_replicas,
                             f"{part.topic}-{part.partition}: ISR {isr} is smaller than min.insync.replicas={need}")

    def append_records(self, topic: str, partition: int, records: bytes, acks: int, timeout_s: float,
                       verification: Any = NO_VERIFICATION) -> Appended:
        part = self.leader_partition(topic, partition)
        if acks == -1:
            try:
                self._check_min_isr(part)
            except KafkaError:
                _note_refused(part, records)
                raise
        try:
            res = part.log.append(records, leader_epoch=part.leader_epoch, verification=verification)
        except StorageError as e:
            self.storage_failed(part, e)
            raise
        except KafkaError as e:
            if e.code is ErrorCode.out_of_order_sequence_number:
                _gap_after_refusal(part, records, e)
            raise
        if part.refused_sequences:
            _note_appended(part, records)
        self.logs.notifier.notify(part.tp)  # followers long-polling
        required = part.log.log_end_offset
        self._maybe_advance_hwm(part)
        if acks != -1:
            return res, None
        return res, self.wait_replicated(part, required, timeout_s)

    def append_internal(self, topic: str, partition: int, batch: bytes, verification: Any = NO_VERIFICATION) -> int:
        part = self.leader_partition(topic, partition)
        try:
            base = part.log.append_batch_unchecked(batch, leader_epoch=part.leader_epoch, verification=verification)
        except StorageError as e:
            self.storage_failed(part, e)
            raise
        self.logs.notifier.notify(part.tp)
        self._maybe_advance_hwm(part)
        return base

    async def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                               coordinator_epoch: int, commit: bool, timeout_s: float) -> int:
        part = self.leader_partition(topic, partition)
        self._check_min_isr(part)
        plog = part.log
        batch = build_marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, plog.clock())
        try:
            res = plog.append_control(batch, leader_epoch=part.leader_epoch)
        except StorageError as e:
            self.storage_failed(part, e)
            raise
        self.logs.notifier.notify(part.tp)  # followers long-polling
        required = plog.log_end_offset
        self._maybe_advance_hwm(part)
        code = await self.wait_replicated(part, required, timeout_s)
        if code != ErrorCode.none:
            raise KafkaError(code, f"{topic}-{partition}: the transaction marker of producer {producer_id} at offset "
                                   f"{res.base_offset}: {code.name}")
        return res.base_offset

    async def wait_replicated(self, part: Partition, required: int, timeout_s: float) -> ErrorCode:
        """acks=all: NONE once the high watermark reaches ``required`` with the maximal ISR at
        least min.insync.replicas; NOT_ENOUGH_REPLICAS_AFTER_APPEND if it is smaller by then;
        NOT_LEADER_OR_FOLLOWER if leadership is lost first; REQUEST_TIMED_OUT."""
        if part.log.high_watermark >= required:
            return self._completion(part)
        if not part.is_leader:
            return ErrorCode.not_leader_or_follower
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        entry = (required, fut)
        part.waiters.append(entry)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            if not fut.done():
                fut.cancel()
            with contextlib.suppress(ValueError):
                part.waiters.remove(entry)

    def _completion(self, part: Partition) -> ErrorCode:
        if len(part.maximal_isr) < self.min_isr(part.topic):
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    def _fail_waiters(self, part: Partition, code: ErrorCode) -> None:
        for _, fut in part.waiters:
            if not fut.done():
                fut.set_result(code)
        part.waiters.clear()
        for _, sfut in part.start_waiters:
            if not sfut.done():
                sfut.set_exception(KafkaError(code, f"{part.topic}-{part.partition}: leadership moved"))
        part.start_waiters.clear()

    def _complete_waiters(self, part: Partition) -> None:
        hwm = part.log.high_watermark
        if part.waiters and any(req <= hwm for req, _ in part.waiters):
            code = self._completion(part)
            for req, fut in part.waiters:
                if req <= hwm and not fut.done():
                    fut.set_result(code)

    def follower_fetched(self, part: Partition, replica_id: int, fetch_offset: int, log_start_offset: int) -> None:
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
        fs.log_start_offset = log_start_offset
        fs.last_fetch_leader_leo = leo
        fs.last_fetch_ms = now
        if (replica_id not in part.maximal_isr and fetch_offset >= part.log.high_watermark
                and fetch_offset >= part.epoch_start_offset):
            self._change_isr(part, sorted({*part.isr, replica_id}), f"broker {replica_id} caught up")
        self._maybe_advance_hwm(part)
        if part.start_waiters:
            self._check_start_waiters(part)

    def _maybe_advance_hwm(self, part: Partition) -> None:
        if not part.is_leader:
            return
        plog = part.log
        hwm = plog.log_end_offset
        me = self.node_id
        for r in part.maximal_isr:
            if r == me:
                continue
            fs = part.followers.get(r)
            if fs is None or fs.log_end_offset < 0:
                return  # an ISR member not heard from at this epoch holds the high watermark
            hwm = min(hwm, fs.log_end_offset)
        if hwm > plog.high_watermark and plog.update_high_watermark(hwm):
            self._complete_waiters(part)
            self._tell_high_watermark(part, plog.high_watermark)

    def follower_high_watermark(self, part: Partition, leader_hwm: int) -> None:
        """A follower's high watermark: the leader's, bounded by what it has."""
        if part.is_leader:
            return
        if part.log.update_high_watermark(min(leader_hwm, part.log.log_end_offset)):
            self._tell_high_watermark(part, part.log.high_watermark)

    # -- DeleteRecords: every replica's log start ----------------------------------------------
    def _low_watermark(self, part: Partition) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start over this log and the live
        replicas (one that has not fetched at this epoch counts as unknown, -1)."""
        low = part.log.log_start_offset
        for r, fs in part.followers.items():
            if self.view.broker(r) is not None and fs.log_start_offset < low:
                low = fs.log_start_offset
        return low

    def _check_start_waiters(self, part: Partition) -> None:
        low = self._low_watermark(part)
        for offset, fut in part.start_waiters:
            if offset <= low and not fut.done():
                fut.set_result(None)

    async def wait_low_watermark(self, part: Partition, offset: int, timeout_s: float) -> int:
        if not part.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{part.topic}-{part.partition}: leadership moved")
        if self._low_watermark(part) >= offset:
            return self._low_watermark(part)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (offset, fut)
        part.start_waiters.append(entry)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            raise KafkaError(ErrorCode.request_timed_out,
                             f"{part.topic}-{part.partition}: not every replica's log start reached {offset} in time "
                             f"(low watermark {self._low_watermark(part)})") from None
        finally:
            with contextlib.suppress(ValueError):
                part.start_waiters.remove(entry)
        return self._low_watermark(part)

    # -- ISR changes ---------------------------------------------------------------------------
    async def _isr_maintenance_loop(self) -> None:
        interval = max(self.lag_max_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            now = now_ms()
            for part in list(self.partitions.values()):
                if not part.is_leader or part.isr_write is not None:
                    continue
                if part.pending_isr is not None:  # a write whose outcome was lost: read it back
                    part.isr_write = asyncio.get_running_loop().create_task(self._settle_pending(part))
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

    def _change_isr(self, part: Partition, new_isr: list[int], why: str) -> None:
        if (part.isr_write is not None or part.pending_isr is not None or not part.is_leader
                or new_isr == part.isr or not new_isr):
            return
        part.pending_isr = list(new_isr)
        part.isr_write = asyncio.get_running_loop().create_task(self._write_isr(part, list(new_isr), why))

    async def _write_isr(self, part: Partition, new_isr: list[int], why: str) -> None:
        epoch, old = part.leader_epoch, list(part.isr)
        proposal = PartitionState(self.node_id, epoch, new_isr, part.controller_epoch, part.state_version)
        try:
            try:
                written = await self.store.write_isr(part.topic, part.partition, proposal)
            except StateConflict:
                # nothing was written: the controller changed the state first; follow it
                log.info("%s-%d: ISR change %s -> %s lost a race (the state changed); reading it again",
                         part.topic, part.partition, old, new_isr)
                if part.leader_epoch == epoch:
                    part.pending_isr = None
                await self._reread(part)
                return
            except StateUnavailable as e:
                log.warning("%s-%d: the ISR change %s -> %s got no answer from ZooKeeper (%s); counting both ISRs "
                            "until a read says which holds", part.topic, part.partition, old, new_isr, e)
                return
            if not part.is_leader or part.leader_epoch != epoch:
                return
            part.pending_isr = None
            if written.zk_version > part.state_version:
                self._adopt(part, written)
                known = self.states.get(part.tp)
                if known is None or written.zk_version > known.zk_version:
                    self.states[part.tp] = written
            log.info("%s-%d: ISR %s -> %s (%s)", part.topic, part.partition, old, new_isr, why)
            self._maybe_advance_hwm(part)
            self._complete_waiters(part)
        finally:
            part.isr_write = None

    async def _settle_pending(self, part: Partition) -> None:
        """A pending ISR change whose write got no answer: the state read back settles it."""
        try:
            await self._reread(part)
        finally:
            part.isr_write = None

    async def _reread(self, part: Partition) -> None:
        try:
            st = await self.store.read(part.topic, part.partition)
        except StateUnavailable:
            return  # the watch delivers the state once ZooKeeper is back
        if st is None or self.partitions.get(part.tp) is not part:
            return
        # the state read settles a pending change either way: it is in it, or it was not applied
        part.pending_isr = None
        known = self.states.get(part.tp)
        if known is None or st.zk_version >= known.zk_version:
            self.states[part.tp] = st
        self._apply(part)


# -- a gap left by a refused batch ---------------------------------------------------------------
# An idempotent producer pipelines its batches: with batch N refused NOT_ENOUGH_REPLICAS before it
# was appended, batch N+1 may arrive after a replica rejoined the ISR and pass the check, to find
# its sequence one batch ahead. Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER, and librdkafka then
# bumps its producer epoch for every partition, re-sending under the new epoch the batches of
# other partitions whose answers it had lost (a leader that moved, a connection that broke), which
# the old leader may have written: duplicates. The gap is this broker's own doing, so it is
# answered as the batch before it was, NOT_ENOUGH_REPLICAS (retriable): the producer sends both
# again, in order, under the same epoch, and the duplicates are recognised.

def _header(records: bytes) -> rb.BatchHeader | None:
    try:
        h = rb.read_header(records, 0)
    except rb.InvalidBatch:  # the append validates the batch and says what is wrong with it
        return None
    return h if h.producer_id >= 0 and h.base_sequence >= 0 else None


def _note_refused(part: Partition, records: bytes) -> None:
    h = _header(records)
    if h is None:
        return
    known = part.refused_sequences.get(h.producer_id)
    if known is None or known[0] != h.producer_epoch or h.base_sequence < known[1]:
        part.refused_sequences[h.producer_id] = (h.producer_epoch, h.base_sequence)


def _gap_after_refusal(part: Partition, records: bytes, error: KafkaError) -> None:
    h = _header(records)
    refused = part.refused_sequences.get(h.producer_id) if h is not None else None
    if h is None or refused is None or refused[0] != h.producer_epoch or h.base_sequence <= refused[1]:
        return
    if part.log.producer_state.expected_sequence(h.producer_id, h.producer_epoch) != refused[1]:
        return
    raise KafkaError(ErrorCode.not_enough_replicas,
                     f"{part.topic}-{part.partition}: producer {h.producer_id}'s batch with sequence {refused[1]}, "
                     f"before this one ({h.base_sequence}), was refused for want of in-sync replicas; send it "
                     "first") from error


def _note_appended(part: Partition, records: bytes) -> None:
    h = _header(records)
    if h is not None:
        refused = part.refused_sequences.get(h.producer_id)
        if refused is not None and (refused[0] != h.producer_epoch or h.base_sequence <= refused[1]):
            del part.refused_sequences[h.producer_id]  # the refused batch got in: the gap is closed
