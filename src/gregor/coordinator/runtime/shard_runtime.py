"""Runs one coordinator shard against its ``__consumer_offsets`` partition.

- **Loading** replays the partition from its log start to its end, batch by batch, however large
  the partition or its batches are (reads ask for at least one whole batch, so there is no load
  buffer to outgrow). While loading, the shard's groups answer COORDINATOR_LOAD_IN_PROGRESS. The
  loader yields to the event loop between batches, so the broker keeps serving.
- **Writing**: an operation returns a CoordinatorResult; its records are appended to the partition
  as one batch, then replayed into the shard, then the completions it deferred run, then the
  response is released. An operation therefore answers only once its records are in the log.
  If the append fails, the shard is reloaded from the log rather than rolled back.
- **Unloading** drops the state and fails every waiting request with NOT_COORDINATOR.

Operations run to completion one at a time: the append is synchronous and the event loop is
single-threaded, so a shard's operations are serialised without a queue. (A queue per shard
becomes necessary once appends wait for replication.)
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

from gregor.coordinator.group.shard import GroupCoordinatorShard
from gregor.coordinator.runtime.result import CoordinatorResult, Deferred
from gregor.coordinator.runtime.timer import EventLoopTimer, Timer
from gregor.log.partition_log import PartitionLog
from gregor.protocol.consumer_offsets import RecordFormatError, decode_key, decode_value, encode_key, encode_value
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import build_batch, iter_batches, iter_key_values

log = logging.getLogger("gregor.coordinator")

LOAD_READ_BYTES = 1 << 20
Operation = Callable[[GroupCoordinatorShard], CoordinatorResult[Any]]


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


class ShardRuntime:
    def __init__(self, partition: int, plog: PartitionLog,
                 make_shard: Callable[[int, Timer], GroupCoordinatorShard], codec: int = 0,
                 on_append: Callable[[], None] = lambda: None) -> None:
        self.partition = partition
        self.plog = plog
        self.make_shard = make_shard
        self.codec = codec
        self.on_append = on_append
        self.state = ShardState.CLOSED
        self.timer: EventLoopTimer | None = None
        self.shard: GroupCoordinatorShard | None = None
        self.load_error: str | None = None
        self.load_stats: tuple[int, float] = (0, 0.0)  # records replayed, seconds
        self._load_task: asyncio.Task[None] | None = None

    # -- loading -----------------------------------------------------------------------------
    def start_loading(self) -> asyncio.Task[None]:
        self.timer = EventLoopTimer(self._run_timer)
        self.shard = self.make_shard(self.partition, self.timer)
        self.state = ShardState.LOADING
        self._load_task = asyncio.get_running_loop().create_task(self._load())
        return self._load_task

    async def _load(self) -> None:
        """Replay = apply the newest value of every key, in log order. Records are first reduced
        to the last value per key (what compaction would keep), then decoded and replayed once
        each: a partition of a million commits to a few thousand keys decodes a few thousand."""
        assert self.shard is not None
        started = time.perf_counter()
        count = 0
        latest: dict[bytes, bytes | None] = {}
        try:
            offset = self.plog.log_start_offset
            end = self.plog.log_end_offset
            while offset < end:
                data = self.plog.read(offset, LOAD_READ_BYTES).records
                if not data:
                    break
                for h in iter_batches(data):
                    if h.next_offset <= offset:
                        continue
                    if not h.is_control:
                        for key, value in iter_key_values(data, h):
                            if key is not None:
                                latest.pop(key, None)  # keep log order of the newest write
                                latest[key] = value
                                count += 1
                    offset = h.next_offset
                await asyncio.sleep(0)  # let the broker serve others between reads
                if self.state is not ShardState.LOADING:
                    return  # unloaded meanwhile
            for key_bytes, value_bytes in latest.items():
                self._replay_raw(key_bytes, value_bytes)
            seconds = time.perf_counter() - started
            self.load_stats = (count, seconds)
            self.state = ShardState.ACTIVE
            self.load_error = None
            self.shard.on_loaded()
            log.info("Finished loading offsets and group metadata from __consumer_offsets-%d in %d milliseconds "
                     "(%d records, %d groups)", self.partition, int(seconds * 1000), count, len(self.shard.groups))
        except Exception as e:  # noqa: BLE001 - a shard that cannot load must not take the broker down
            self.state = ShardState.FAILED
            self.load_error = f"{type(e).__name__}: {e}"
            log.exception("Loading __consumer_offsets-%d failed; its groups answer COORDINATOR_NOT_AVAILABLE "
                          "until it is reloaded", self.partition)

    def _replay_raw(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        assert self.shard is not None
        try:
            key = decode_key(key_bytes)
            value = decode_value(key, value_bytes)
        except RecordFormatError as e:
            log.warning("__consumer_offsets-%d: skipping undecodable record with key %r (%s)", self.partition,
                        key_bytes[:64], e)
            return
        self.shard.replay(key, value)

    async def wait_loaded(self) -> None:
        if self._load_task is not None:
            await asyncio.shield(self._load_task)

    # -- unloading ---------------------------------------------------------------------------
    def unload(self) -> None:
        if self.timer is not None:
            self.timer.cancel_all()
        if self.shard is not None:
            self.shard.on_unloaded()
        self.state = ShardState.CLOSED
        self.shard = None
        log.info("Unloaded __consumer_offsets-%d", self.partition)

    def reload(self) -> None:
        log.warning("Reloading __consumer_offsets-%d from its log", self.partition)
        self.unload()
        self.start_loading()

    # -- operations --------------------------------------------------------------------------
    def check_available(self) -> GroupCoordinatorShard:
        if self.state is ShardState.LOADING:
            raise KafkaError(ErrorCode.coordinator_load_in_progress,
                             f"__consumer_offsets-{self.partition} is loading")
        if self.state is ShardState.FAILED:
            raise KafkaError(ErrorCode.coordinator_not_available,
                             f"__consumer_offsets-{self.partition} failed to load: {self.load_error}")
        if self.state is not ShardState.ACTIVE or self.shard is None:
            raise KafkaError(ErrorCode.not_coordinator, f"__consumer_offsets-{self.partition} is not loaded here")
        return self.shard

    def execute(self, op: Operation) -> Any:
        """Run a write operation; returns its response or a Deferred for it."""
        shard = self.check_available()
        try:
            result = op(shard)
        except Exception:
            log.exception("coordinator operation failed on __consumer_offsets-%d", self.partition)
            shard.ctx.take_after_commit()
            self.reload()
            raise
        self._commit(shard, result)
        return result.response

    def read(self, fn: Callable[[GroupCoordinatorShard], Any]) -> Any:
        return fn(self.check_available())

    def _commit(self, shard: GroupCoordinatorShard, result: CoordinatorResult[Any]) -> None:
        if result.records:
            try:
                self._append(result.records)
            except Exception:
                log.exception("appending to __consumer_offsets-%d failed", self.partition)
                shard.ctx.take_after_commit()
                self.reload()
                raise KafkaError(ErrorCode.not_coordinator, "coordinator write failed; reloading") from None
            for key, value in result.records:
                shard.replay(key, value)
        for fn in shard.ctx.take_after_commit():
            fn()

    def _append(self, records: list[tuple[Any, Any]]) -> None:
        now = time.time_ns() // 1_000_000
        pairs = [(encode_key(k), encode_value(v)) for k, v in records]
        self.plog.append_batch_unchecked(build_batch(pairs, timestamp=now, codec=self.codec))
        self.on_append()

    def _run_timer(self, key: str, operation: Callable[[], Any]) -> None:
        if self.state is not ShardState.ACTIVE or self.shard is None:
            return
        try:
            result = operation()
        except Exception:
            log.exception("timer %s failed on __consumer_offsets-%d", key, self.partition)
            self.shard.ctx.take_after_commit()
            self.reload()
            return
        if isinstance(result, CoordinatorResult):
            try:
                self._commit(self.shard, result)
            except KafkaError:
                pass


async def resolve(response: Any) -> Any:
    """Wait for a deferred response."""
    if not isinstance(response, Deferred):
        return response
    if response.done:
        return response.result()
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def done(value: Any) -> None:
        if not fut.done():
            fut.set_result(value)

    response.on_complete(done)
    return await fut
