"""Runs one coordinator shard against its partition (Kafka: CoordinatorRuntime, one shard of it).

Generic: the runtime knows a shard only through the ``CoordinatorShard`` protocol and its records
only through the ``RecordSerde`` it is given (runtime/shard.py). Classic groups plug in today;
consumer-protocol groups and share groups plug in the same way, without changes here.

- **Loading** replays the partition from its log start to its end (runtime/loader.py). While
  loading, the shard's operations fail with COORDINATOR_LOAD_IN_PROGRESS; a load that fails
  leaves the shard FAILED (COORDINATOR_NOT_AVAILABLE, with the reason) until it is reloaded.
- **Writing**: an operation (a request, or a timer that fired) runs on the shard and returns a
  CoordinatorResult. Its records are appended to the partition as one batch and, unless the
  result says their state is already applied (``replay_records=False``), replayed into the shard.
  The write then waits in the shard's write queue (runtime/write_queue.py) until the partition's
  committed offset reaches the offset it ends at; releasing it runs the completions the
  operation deferred (shard.take_completions) and answers it. An operation that wrote nothing
  is answered once the writes before it are released.
- **The committed offset** is the partition's high watermark (its log end offset with
  ``required_acks=1``, Kafka's offsets.commit.required.acks). Records are appended through the
  partition writer (runtime/partition_writer.py: the replication seam in the broker), the same on
  one node and in a cluster. On one node an append moves the high watermark itself, so a write is
  committed by its own append and answered within ``execute``, without entering the queue: the
  response comes back as it is, with no Deferred and no task switch. In a cluster the high
  watermark lags the append, the partition reports each new one to ``on_high_watermark``, and
  ``execute`` hands back a Deferred meanwhile.
- **Failures**: if an operation raises or its append fails, the completions it deferred run with
  the error and the shard is reloaded from its log rather than rolled back.
- **Unloading** fails the pending writes and every waiting request with NOT_COORDINATOR, and
  drops the state.

Operations of a shard never interleave, without a queue of operations: each runs to completion
on the single-threaded event loop (the append is synchronous). What waits, in log order, is the
writes. Reads (``read``) see the state at the committed offset: the shard keeps what reads may
see apart from what pending writes changed (runtime/committed.py), as Kafka's reads go through
timeline snapshots at the committed offset.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from gregor.coordinator.runtime import loader
from gregor.coordinator.runtime.partition_writer import PartitionWriter
from gregor.coordinator.runtime.result import CoordinatorResult, Deferred, Record
from gregor.coordinator.runtime.shard import Completion, CoordinatorShard, RecordSerde, TransactionalShard
from gregor.coordinator.runtime.timer import EventLoopTimer, Timer
from gregor.coordinator.runtime.write_queue import WriteQueue
from gregor.log.partition_log import NO_VERIFICATION, PartitionLog
from gregor.protocol.control_records import build_marker_batch
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.record_batch import TRANSACTIONAL_BIT
from gregor.protocol.records import build_batch

log = logging.getLogger("gregor.coordinator")

S = TypeVar("S", bound=CoordinatorShard)


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


class ShardRuntime(Generic[S]):
    """``make_shard(partition, timer)`` builds the shard for each load; ``serde`` writes and reads
    its records; ``writer`` appends them to ``plog``'s partition as its leader. ``label`` names
    what is loaded, for the log ("offsets and group metadata"). ``required_acks`` 1 answers a
    write once the leader has it (the log end), -1 once the high watermark covers it."""

    def __init__(self, partition: int, plog: PartitionLog, make_shard: Callable[[int, Timer], S],
                 serde: RecordSerde, writer: PartitionWriter, codec: int = 0, label: str = "records",
                 required_acks: int = -1) -> None:
        self.partition = partition
        self.plog = plog
        self.topic = plog.topic
        self.name = f"{plog.topic}-{partition}"
        self.make_shard = make_shard
        self.serde = serde
        self.writer = writer
        self.codec = codec
        self.label = label
        self.required_acks = required_acks
        self.state = ShardState.CLOSED
        self.timer: EventLoopTimer | None = None
        self.shard: S | None = None
        self.writes = WriteQueue()
        self.load_error: str | None = None
        self.load_stats: tuple[int, float] = (0, 0.0)  # records read, seconds
        self.load_progress: tuple[int, int] = (0, 0)  # offsets read of the partition, offsets to read
        self._load_task: asyncio.Task[None] | None = None

    # -- loading -----------------------------------------------------------------------------
    def start_loading(self) -> asyncio.Task[None]:
        self.timer = EventLoopTimer(self._run_timer)
        self.shard = self.make_shard(self.partition, self.timer)
        self.state = ShardState.LOADING
        self._load_task = asyncio.get_running_loop().create_task(self._load(self.shard))
        return self._load_task

    async def _load(self, shard: S) -> None:
        started = time.perf_counter()
        try:
            count = await loader.load(self.plog, shard, self.serde, self.name,
                                      lambda: self.state is ShardState.LOADING and self.shard is shard,
                                      self._loaded_so_far, committed=self.committed_offset())
            if count is None:
                return  # unloaded meanwhile
            seconds = time.perf_counter() - started
            self.load_stats = (count, seconds)
            end = self.plog.log_end_offset
            if end > self.committed_offset():
                # a new leader's tail its followers may not have yet: what waits for the writes
                # before it (stable reads, answers to operations that write nothing) waits for it too
                self.writes.add(end, None, ())
            self.state = ShardState.ACTIVE
            self.load_error = None
            shard.on_loaded()
            log.info("Finished loading %s from %s in %d milliseconds (%d records)", self.label, self.name,
                     int(seconds * 1000), count)
        except Exception as e:  # noqa: BLE001 - a shard that cannot load must not take the broker down
            self.state = ShardState.FAILED
            self.load_error = f"{type(e).__name__}: {e}"
            log.exception("Loading %s failed; its operations answer COORDINATOR_NOT_AVAILABLE until it is "
                          "reloaded", self.name)

    def _loaded_so_far(self, done: int, total: int) -> None:
        self.load_progress = (done, total)

    async def wait_loaded(self) -> None:
        if self._load_task is not None:
            await asyncio.shield(self._load_task)

    # -- unloading ---------------------------------------------------------------------------
    def unload(self) -> None:
        if self.timer is not None:
            self.timer.cancel_all()
        self.writes.fail_all(KafkaError(ErrorCode.not_coordinator, f"{self.name} is no longer loaded here"))
        if self.shard is not None:
            self.shard.on_unloaded()
        self.state = ShardState.CLOSED
        self.shard = None
        log.info("Unloaded %s", self.name)

    def reload(self) -> None:
        log.warning("Reloading %s from its log", self.name)
        self.unload()
        self.start_loading()

    # -- operations --------------------------------------------------------------------------
    def check_available(self) -> S:
        if self.state is ShardState.LOADING:
            raise KafkaError(ErrorCode.coordinator_load_in_progress, f"{self.name} is loading")
        if self.state is ShardState.FAILED:
            raise KafkaError(ErrorCode.coordinator_not_available, f"{self.name} failed to load: {self.load_error}")
        if self.state is not ShardState.ACTIVE or self.shard is None:
            raise KafkaError(ErrorCode.not_coordinator, f"{self.name} is not loaded here")
        return self.shard

    def execute(self, op: Callable[[S], CoordinatorResult[Any]], verification: Any = NO_VERIFICATION) -> Any:
        """Run a write operation; returns its response, or a Deferred of it while its write waits
        to be committed or its answer waits for other requests (``resolve`` awaits either).
        ``verification``: the KIP-890 guard of a write in a producer's transaction; if a marker
        ended that transaction since, nothing is written and KafkaError INVALID_TXN_STATE raised."""
        shard = self.check_available()
        try:
            result = op(shard)
        except Exception:
            log.exception("coordinator operation failed on %s", self.name)
            self._abandon(shard.take_completions(), "coordinator operation failed; reloading")
            raise
        return self._write(shard, result, verification)

    def read(self, fn: Callable[[S], Any]) -> Any:
        return fn(self.check_available())

    def committed_offset(self) -> int:
        """The end of what is committed: the high watermark (the log end with required_acks=1)."""
        return self.plog.log_end_offset if self.required_acks == 1 else self.plog.high_watermark

    def on_high_watermark(self, offset: int) -> None:
        """The partition's committed offset is now ``offset``: reads see the writes it covers, and
        those writes are released."""
        committed = self.committed_offset()
        if self.shard is not None:
            self.shard.committed_reads.committed(committed)
        self.writes.release(committed)

    def _write(self, shard: S, result: CoordinatorResult[Any], verification: Any = NO_VERIFICATION) -> Any:
        completions = shard.take_completions()
        records = result.records
        writes = self.writes
        if records:
            try:
                end = self._append(records, result.producer_id, result.producer_epoch, verification)
            except KafkaError as e:
                if e.code != ErrorCode.invalid_txn_state:
                    log.exception("appending to %s failed", self.name)
                    raise self._abandon(completions, "coordinator write failed; reloading") from None
                for fn in completions:  # refused before anything was written: the state is as it was
                    fn(e)
                raise
            except Exception:
                log.exception("appending to %s failed", self.name)
                raise self._abandon(completions, "coordinator write failed; reloading") from None
            committed = end <= self.committed_offset()  # one node: by its own append
            if result.replay_records:
                replay: Callable[[Any, Any], None] = shard.replay
                if result.producer_id >= 0:
                    replay = self._transactional_replay(shard, result.producer_id, result.producer_epoch)
                if committed:
                    for key, value in records:
                        replay(key, value)
                else:  # reads keep seeing what the keys had until the write is committed
                    reads = shard.committed_reads
                    reads.pending = end
                    try:
                        for key, value in records:
                            replay(key, value)
                    finally:
                        reads.pending = -1
            if writes.last_offset is None and committed:
                # committed already (one node) and nothing older waits: answer now
                for fn in completions:
                    fn(None)
                return result.response
        elif writes.last_offset is None:  # nothing written, nothing waiting: answer now
            for fn in completions:
                fn(None)
            return result.response
        else:
            end = writes.last_offset
        waiter = writes.add(end, result.response, completions)
        writes.release(self.committed_offset())
        return waiter

    @staticmethod
    def _transactional_replay(shard: S, producer_id: int, producer_epoch: int) -> Callable[[Any, Any], None]:
        if not isinstance(shard, TransactionalShard):
            raise TypeError(f"{type(shard).__name__} does not take records in transactions")
        return lambda key, value: shard.replay_transactional(producer_id, producer_epoch, key, value)

    def complete_transaction(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                             commit: bool) -> Any:
        """Write a transaction's marker (WriteTxnMarkers to this partition) and replay it into the
        shard: the producer's pending records are committed or dropped. Returns None once the
        marker is committed, or a Deferred of None meanwhile (Kafka: scheduleTransactionCompletion)."""
        shard = self.check_available()
        if not isinstance(shard, TransactionalShard):
            raise KafkaError(ErrorCode.invalid_request, f"{self.name} takes no transaction markers")
        batch = build_marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, time.time_ns() // 1_000_000)
        try:
            end = self.writer.append_internal(self.topic, self.partition, batch) + 1
        except Exception:
            log.exception("appending a transaction marker to %s failed", self.name)
            raise self._abandon((), "coordinator write failed; reloading") from None
        committed = end <= self.committed_offset()
        reads = shard.committed_reads
        if not committed:
            reads.pending = end
        try:
            shard.replay_end_transaction(producer_id, producer_epoch, commit)
        finally:
            reads.pending = -1
        if self.writes.last_offset is None and committed:
            return None
        waiter = self.writes.add(end, None, ())
        self.writes.release(self.committed_offset())
        return waiter

    def _abandon(self, completions: Sequence[Completion], reason: str) -> KafkaError:
        """An operation or its append failed: fail what it deferred, reload the shard."""
        error = KafkaError(ErrorCode.not_coordinator, reason)
        for fn in completions:
            fn(error)
        self.reload()
        return error

    def _append(self, records: list[Record], producer_id: int = -1, producer_epoch: int = -1,
                verification: Any = NO_VERIFICATION) -> int:
        """Append ``records`` as one batch (a transactional one of ``producer_id``); returns the
        offset the batch ends at."""
        encode_key, encode_value = self.serde.encode_key, self.serde.encode_value
        pairs = [(encode_key(k), encode_value(v)) for k, v in records]
        batch = build_batch(pairs, timestamp=time.time_ns() // 1_000_000, codec=self.codec, producer_id=producer_id,
                            producer_epoch=producer_epoch, attributes=TRANSACTIONAL_BIT if producer_id >= 0 else 0)
        if verification is NO_VERIFICATION:
            base = self.writer.append_internal(self.topic, self.partition, batch)
        else:
            base = self.writer.append_internal(self.topic, self.partition, batch, verification)
        return base + len(pairs)

    def _run_timer(self, key: str, operation: Callable[[], CoordinatorResult[Any] | None]) -> None:
        shard = self.shard
        if self.state is not ShardState.ACTIVE or shard is None:
            return
        try:
            result = operation()
        except Exception:
            log.exception("timer %s failed on %s", key, self.name)
            self._abandon(shard.take_completions(), f"timer {key} failed; reloading")
            return
        try:
            self._write(shard, result if result is not None else CoordinatorResult())
        except KafkaError:
            pass  # the append failed and the shard is reloading; logged above


async def reload_failed_shards(runtimes: Callable[[], Iterable[ShardRuntime[Any]]], backoff_s: float) -> None:
    """Forever: every ``backoff_s``, reload the shards whose load failed (a coordinator
    service's watchdog; a failed shard answers COORDINATOR_NOT_AVAILABLE until then)."""
    while True:
        await asyncio.sleep(backoff_s)
        for rt in list(runtimes()):
            if rt.state is ShardState.FAILED:
                rt.reload()


async def resolve(response: Any) -> Any:
    """Wait for a response that may be deferred (possibly a Deferred of a Deferred: a write
    waiting to be committed whose answer waits for a rebalance). Raises the error of a failed one."""
    while isinstance(response, Deferred):
        if not response.done:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def wake(_d: Deferred[Any], fut: asyncio.Future[None] = fut) -> None:
                if not fut.done():
                    fut.set_result(None)

            response.add_done_callback(wake)
            await fut
        response = response.result()
    return response
