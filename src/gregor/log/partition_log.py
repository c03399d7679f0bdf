"""The log of one topic-partition: an ordered list of segments, the last one active.

Append treats a batch as opaque bytes: header checks and CRC (``validate_batches``), producer
sequence checks, base offset and leader epoch rewritten in place, one write. Reads return whole
byte ranges of one segment.

High watermark: on one node (``replicated`` False) it is the log end offset once the write
returns. A replicated log keeps it apart, moved by the replica manager (``update_high_watermark``):
consumers read below it (``read(max_offset=...)``), followers up to the log end. Replication
also uses the leader epoch cache (``epochs``), the follower's append of the leader's batches as
they are (``append_as_follower``) and truncation (``truncate_to``, ``truncate_fully_and_start_at``).

Transactions (docs/transactions.md, "The partition side"): transactional batches go through the
producer state like idempotent ones and open their producer's transaction; a marker written for
the transaction coordinator (``append_control``) closes it, and an abort is recorded in the
marker's segment's transaction index. ``last_stable_offset`` bounds read_committed fetches, and
``aborted_transactions`` lists the aborted transactions overlapping a fetched range.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from gregor.log.file_region import FileRegion
from gregor.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from gregor.log.producer_state import ProducerInfo, ProducerStateManager
from gregor.log.segment import Segment
from gregor.log.storage_errors import CorruptBatch, PartitionOffline, StorageError, describe
from gregor.log.transaction_index import AbortedTxn
from gregor.protocol import control_records
from gregor.protocol import record_batch as rb
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.key_check import InflatedTooLarge, keyless_records
from gregor.protocol.record_batch import InvalidBatch, RecordTooLarge, validate_batches
from gregor.protocol.records import decode_records

log = logging.getLogger(__name__)


# a compressed batch for a compacted topic may inflate to max(this, 8 x max.message.bytes)
MAX_INFLATED_FLOOR = 64 << 20
# offsets in a segment's index are 32-bit, relative to its base: a follower rolls before that
MAX_RELATIVE_OFFSET = 2**31 - 1
_I32 = struct.Struct(">i")


class UnexpectedAppendOffset(KafkaError):
    """A follower append whose first batch starts below the log end offset (Kafka's
    UnexpectedAppendOffsetException), with code OFFSET_OUT_OF_RANGE. ``first_offset`` and
    ``last_offset`` are those of that batch: when the log is empty and the batch holds its end
    offset (the leader's log start was inside that batch), the fetcher starts the log at
    ``first_offset`` (``truncate_fully_and_start_at``) and appends again."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(ErrorCode.offset_out_of_range, message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class RecordErrors(KafkaError):
    """A batch rejected for some of its records: ``record_errors`` holds (batch index, message)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


NO_VERIFICATION: Any = object()  # PartitionLog.append: no KIP-890 verification required


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    duplicate: bool = False


@dataclass(slots=True)
class ReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    next_offset: int = -1  # one past the last record returned (-1: nothing returned)
    region: FileRegion | None = None  # set instead of records for reads of region_above bytes or more


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def replica_batches(buf: bytes | bytearray | memoryview) -> tuple[list[rb.BatchHeader], list[int]]:
    """The whole batches of a fetch response's record set from a leader: their headers and
    partition leader epochs. A trailing partial batch is left out. Each batch is checked as
    ``validate_batches`` checks a produced one (length, magic, CRC-32C), except what a leader's
    log may legitimately hold: no size limit (the leader accepted the batch), and a record count
    below ``last_offset_delta + 1`` (a batch rewritten by compaction keeps its offsets). InvalidBatch
    otherwise."""
    headers: list[rb.BatchHeader] = []
    epochs: list[int] = []
    end = len(buf)
    mv = memoryview(buf)
    pos = 0
    while end - pos >= rb.LOG_OVERHEAD:
        length = _I32.unpack_from(mv, pos + rb.LENGTH)[0]
        if length < rb.HEADER_SIZE - rb.LOG_OVERHEAD:
            raise InvalidBatch(f"record batch length {length} at byte {pos} is smaller than its header")
        if pos + rb.LOG_OVERHEAD + length > end:
            break  # a partial batch: the fetch response ended inside it
        h = rb.read_header(mv, pos)
        if h.last_offset_delta < 0 or h.records_count < 0 or h.records_count > h.last_offset_delta + 1:
            raise InvalidBatch(f"record batch at byte {pos} counts {h.records_count} records with last "
                               f"offset delta {h.last_offset_delta}")
        stored = int.from_bytes(mv[pos + rb.CRC : pos + rb.CRC + 4], "big")
        if crc32c.crc32c(mv[pos + rb.ATTRIBUTES : pos + h.size]) != stored:
            raise InvalidBatch(f"record batch CRC mismatch at byte {pos}")
        headers.append(h)
        epochs.append(_I32.unpack_from(mv, pos + rb.PARTITION_LEADER_EPOCH)[0])
        pos += h.size
    return headers, epochs


class PartitionLog:
    def __init__(self, directory: Path, topic: str, partition: int, config: dict[str, Any],
                 clock: Callable[[], int] = now_ms) -> None:
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.producer_state = ProducerStateManager()
        self.log_start_offset = 0
        self.recovery_point = 0  # offsets below this are fsynced
        self.unflushed_messages = 0
        self.last_flush_ms = clock()
        self.dirty_since_clean = 0  # bytes appended since the last compaction (cleaner's hint)
        self.loaded = False  # segments read (see open_lazily)
        self._lazy_leo = 0
        self.offline: str | None = None  # why the partition is offline (see storage_errors)
        self._snapshot_at: int | None = None  # offset of the producer snapshot on disk
        self._replicated = False
        self._hwm = 0  # the high watermark of a replicated log (see ``high_watermark``)
        self._epochs = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)  # loaded by ``open``
        self.truncations = 0  # counts truncations: the cleaner drops a rewrite that raced one

    # -- lifecycle ---------------------------------------------------------------------------
    def open_lazily(self, log_end_offset: int, log_start_offset: int) -> None:
        """After a clean shutdown: take the offsets from the checkpoints and read nothing; the
        segments are loaded on first use (``ensure_loaded``), so an idle partition costs no file
        access at start-up."""
        self.loaded = False
        self._lazy_leo = log_end_offset
        self.log_start_offset = log_start_offset
        self.recovery_point = log_end_offset

    def ensure_loaded(self) -> None:
        if self.loaded:
            return
        if self.offline:
            raise PartitionOffline(self.offline)
        start = self.log_start_offset
        try:
            self.open(clean_shutdown=True, recovery_point=self._lazy_leo)
            self.restore_log_start_offset(start)
        except OSError as e:
            raise StorageError(f"cannot load {self.topic}-{self.partition}: {describe(e)}") from None

    def restore_log_start_offset(self, start: int) -> None:
        """At load: the checkpointed log start offset, where DeleteRecords moved it past a
        segment's start (never beyond the log end that was loaded)."""
        if start > self.log_start_offset:
            self.log_start_offset = min(start, self.log_end_offset)
            self._epochs.truncate_from_start(self.log_start_offset, durable=False)
            if self._hwm < self.log_start_offset:
                self._hwm = self.log_start_offset

    def create_files(self) -> None:
        """A new, empty partition's directory and first segment file (no descriptor kept). Runs
        in a worker thread when many partitions are created; ``open_new`` follows."""
        self.dir.mkdir(parents=True, exist_ok=True)
        Segment(self.dir, 0, int(self.config["index.interval.bytes"]), self.clock())

    def open_new(self) -> None:
        """The in-memory state of a partition whose files ``create_files`` made: no file access."""
        self.segments = [Segment(self.dir, 0, int(self.config["index.interval.bytes"]), self.clock(), size=-1)]
        self.segments[0].size = 0
        self._bases = [0]
        self.log_start_offset = 0
        self.recovery_point = 0
        self._hwm = 0
        self._epochs = LeaderEpochCache(self.dir / LEADER_EPOCH_CHECKPOINT)
        self.loaded = True

    def open(self, clean_shutdown: bool, recovery_point: int) -> None:
        """Load segments. After an unclean shutdown, every segment at or after the recovery point
        is re-validated batch by batch and a torn tail truncated. Then the leader epoch cache
        (``_load_epochs``) and the producer state."""
        self.segments = []
        self.dir.mkdir(parents=True, exist_ok=True)
        names = os.listdir(self.dir)  # one directory read for the three kinds of file below
        for name in names:
            if name.endswith((".cleaned", ".txnindex.tmp")):
                (self.dir / name).unlink()
        for name in sorted(n for n in names if n.endswith(".log.swap")):
            swap = self.dir / name
            os.replace(swap, swap.with_suffix(""))  # the cleaner crashed after writing: finish the swap
            names.append(name[: -len(".swap")])
        bases = sorted({int(n[: -len(".log")]) for n in names if n.endswith(".log")})
        txn_files = {n for n in names if n.endswith(".txnindex")}
        interval = int(self.config["index.interval.bytes"])
        max_batch = int(self.config["max.message.bytes"])
        now = self.clock()
        truncated_at: int | None = None
        recovered: list[Segment] = []
        for base in bases:
            if truncated_at is not None:
                # everything after a corrupt batch is unreachable: drop later segments too
                Segment(self.dir, base, interval, now).delete_files()
                continue
            seg = Segment(self.dir, base, interval, int(os.path.getmtime(self.dir / f"{base:020d}.log") * 1000),
                          txn_index=f"{base:020d}.txnindex" in txn_files)
            needs_recovery = not clean_shutdown and self._segment_end(bases, base) > recovery_point
            known_end = bases[bases.index(base) + 1] if base != bases[-1] else (
                recovery_point if clean_shutdown and recovery_point > base else None)
            if needs_recovery or not seg.load_indexes(known_end):
                recovered.append(seg)
                cut = seg.recover(max_batch)
                if cut:
                    log.warning("%s-%d: truncated %d bytes of torn or corrupt data from segment %d",
                                self.topic, self.partition, cut, base)
                    truncated_at = seg.next_offset
            self.segments.append(seg)
        if not self.segments:
            self.segments.append(Segment(self.dir, 0, interval, now))
        self._bases = [s.base_offset for s in self.segments]
        self.log_start_offset = self.segments[0].base_offset
        leo = self.log_end_offset
        end = self.active.next_offset  # (``leo`` is not the loaded log's end: ``loaded`` is still False)
        self._load_epochs(recovered, end)
        self._hwm = min(max(self._hwm, self.log_start_offset), end)
        snap = self.producer_state.load_snapshot(self.dir) if clean_shutdown else None
        self._snapshot_at = snap
        if snap != leo and not (snap is None and all(s.size == 0 for s in self.segments)):
            self._rebuild_producer_state(rebuild_txn_indexes=True)
            self._snapshot_at = None
        self.recovery_point = leo
        self.loaded = True
        self.last_flush_ms = now
        # no cleaner checkpoint is kept: after a restart every sealed segment counts as dirty
        self.dirty_since_clean = sum(s.size for s in self.segments[:-1])

    def _load_epochs(self, recovered: list[Segment], end: int) -> None:
        """The leader epoch cache from ``leader-epoch-checkpoint``, completed with the epochs of
        the batches of the segments recovery re-read (entries assigned after the last flush are
        written lazily, see leader_epoch_cache). A missing or corrupt file is rebuilt from the
        partition leader epoch of every batch of the log (16 bytes read per batch; once: the
        rebuilt cache is written at the next flush or close). Then, as Kafka at load, entries at
        or past the log end offset are dropped (an unclean shutdown may have cut the log below
        them) and the first entry moved up to the log start offset."""
        path = self.dir / LEADER_EPOCH_CHECKPOINT
        cache = LeaderEpochCache.load(path)
        scan = recovered
        if cache is None:
            corrupt = path.exists()
            cache = LeaderEpochCache(path)
            cache.dirty = corrupt  # a corrupt file is replaced even if the log has no batch
            scan = self.segments
        for seg in scan:
            if seg.size:
                for epoch, base in seg.iter_epochs():
                    if epoch > cache.latest_epoch:
                        cache.assign(epoch, base, durable=False)
        cache.truncate_from_end(end)
        cache.truncate_from_start(self.log_start_offset, durable=False)
        self._epochs = cache

    @staticmethod
    def _segment_end(bases: list[int], base: int) -> int:
        i = bases.index(base)
        return bases[i + 1] if i + 1 < len(bases) else 2**63 - 1

    def _rebuild_producer_state(self, rebuild_txn_indexes: bool = False) -> None:
        """The producer state from the batch headers of the whole log (and the one record of each
        control batch). ``rebuild_txn_indexes``: after a crash, each segment's transaction index
        is rewritten from the aborts found in it where it differs."""
        state = self.producer_state = ProducerStateManager()
        for seg in self.segments:
            aborted: list[AbortedTxn] = []
            for h in seg.iter_headers():
                if h.producer_id < 0:
                    continue
                if not h.is_control:
                    state.update(h)
                    continue
                txn = self._replay_marker(seg, h)
                if txn is not None:
                    aborted.append(txn)
            if rebuild_txn_indexes and aborted != seg.txn_index.entries:
                log.info("%s-%d: transaction index of segment %d rebuilt (%d aborted transactions)",
                         self.topic, self.partition, seg.base_offset, len(aborted))
                seg.txn_index.replace(aborted)

    def _replay_marker(self, seg: Segment, h: rb.BatchHeader) -> AbortedTxn | None:
        """A control batch read back from the log: the transaction it ends (its aborted
        transaction, if it aborted one). A marker that cannot be read ends nothing (logged)."""
        data = seg.pread(h.position, h.size)
        at = h.position
        h.position = 0
        try:
            marker = control_records.read_marker(data, h)
        except (InvalidBatch, IndexError) as e:
            log.error("%s-%d: the control batch at offset %d cannot be read (%s); ignored", self.topic,
                      self.partition, h.base_offset, e)
            return None
        finally:
            h.position = at
        if marker is None:
            return None
        return self.producer_state.complete_txn(h.producer_id, h.producer_epoch, marker.coordinator_epoch,
                                                h.base_offset, h.max_timestamp, marker.commit)

    def close(self) -> None:
        """Flush what was written since the last flush and write the producer snapshot if the
        state changed: an idle partition costs nothing. Raises StorageError (the partition then
        needs recovery at the next start)."""
        if not self.loaded:
            return
        try:
            if self.offline:
                raise PartitionOffline(self.offline)
            for seg in self.segments:
                seg.flush()
            try:
                self._epochs.flush()
            except OSError as e:
                raise StorageError(f"writing the leader epoch checkpoint of {self.topic}-{self.partition} "
                                   f"failed: {describe(e)}") from None
            leo = self.log_end_offset
            if self._snapshot_at != leo and not (self._snapshot_at is None and self.size_bytes == 0):
                self.producer_state.write_snapshot(self.dir, leo)
                self._snapshot_at = leo
        finally:
            self.close_files()

    def close_files(self) -> None:
        for seg in self.segments:
            seg.close()

    # -- properties --------------------------------------------------------------------------
    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        if not self.loaded:
            return self._lazy_leo
        return self.active.next_offset

    @property
    def high_watermark(self) -> int:
        """The log end offset on one node; a replicated log's own value (``update_high_watermark``)."""
        if self._replicated:
            return self._hwm
        return self.log_end_offset

    @property
    def replicated(self) -> bool:
        """Set by the replica manager when the partition is replicated: from then on the high
        watermark is kept apart from the log end offset (clamped into [log start, log end] now)."""
        return self._replicated

    @replicated.setter
    def replicated(self, value: bool) -> None:
        self._replicated = value
        if value:
            self._hwm = min(max(self._hwm, self.log_start_offset), self.log_end_offset)

    def update_high_watermark(self, offset: int) -> bool:
        """Set the high watermark of a replicated log, clamped into [log start offset, log end
        offset] (Kafka's Log.updateHighWatermark: it may move down, e.g. on a follower after the
        leader's value). Returns whether it changed."""
        hw = self.log_start_offset if offset < self.log_start_offset else min(offset, self.log_end_offset)
        if hw == self._hwm:
            return False
        self._hwm = hw
        return True

    @property
    def last_stable_offset(self) -> int:
        """Kafka's last stable offset: the first offset of the earliest transaction that is ongoing
        or whose marker the high watermark has not passed yet (at least the log start offset),
        bounded by the high watermark. read_committed consumers read below it."""
        hw = self.high_watermark
        state = self.producer_state
        if not self.loaded:
            self.ensure_loaded()  # the snapshot may hold ongoing transactions
            hw = self.high_watermark
        if not state.ongoing and not state.unreplicated:
            return hw
        state.on_high_watermark(hw)
        first = state.first_unstable_offset()
        if first is None:
            return hw
        return min(max(first, self.log_start_offset), hw)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [fetch_offset,
        upper_bound_offset) (Kafka's collectAbortedTransactions): the transaction indexes of the
        segment holding ``fetch_offset`` and of the later ones, until an entry's last stable
        offset reaches the bound. Most segments have no index and cost nothing."""
        self.ensure_loaded()
        if upper_bound_offset <= fetch_offset:
            return []
        found: list[AbortedTxn] = []
        i = max(bisect.bisect_right(self._bases, fetch_offset) - 1, 0)
        try:
            for seg in self.segments[i:]:
                if seg.txn_index.collect(fetch_offset, upper_bound_offset, found):
                    break
        except OSError as e:
            raise StorageError(f"reading the transaction index of {self.topic}-{self.partition} failed: "
                               f"{describe(e)}") from None
        return [(t.producer_id, t.first_offset) for t in found]

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of the ongoing transactions, earliest first."""
        self.ensure_loaded()
        return self.producer_state.ongoing_transactions()

    def producers(self) -> list[ProducerInfo]:
        """The producers with state here (DescribeProducers): id, epoch, last sequence, last
        timestamp, coordinator epoch of the last marker, start offset of the ongoing transaction."""
        self.ensure_loaded()
        return self.producer_state.producer_infos()

    def set_high_watermark_from_checkpoint(self, offset: int) -> None:
        """The high watermark read from ``replication-offset-checkpoint`` at start-up (clamped)."""
        self.update_high_watermark(offset)

    @property
    def epochs(self) -> LeaderEpochCache:
        """The leader epoch cache (the log is loaded first if it was opened lazily)."""
        self.ensure_loaded()
        return self._epochs

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def is_compacted(self) -> bool:
        return "compact" in str(self.config["cleanup.policy"])

    # -- append ------------------------------------------------------------------------------
    def append(self, records: bytes, leader_epoch: int = 0, verification: Any = NO_VERIFICATION) -> AppendResult:
        """Validate and append one produce request's records for this partition, stamped with
        ``leader_epoch`` (recorded in the leader epoch cache when it is a new epoch).
        ``verification``: the guard of the KIP-890 check of a transactional batch with its
        coordinator (producer_state.start_verification; None: its transaction was ongoing here),
        or NO_VERIFICATION when none is required.

        A storage failure raises StorageError with the log exactly as before the call (nothing
        acknowledged is ever unreadable), or PartitionOffline."""
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        max_bytes = int(self.config["max.message.bytes"])
        try:
            headers = validate_batches(records, max_bytes + rb.LOG_OVERHEAD)
        except RecordTooLarge as e:
            raise KafkaError(ErrorCode.message_too_large, str(e)) from None
        except InvalidBatch as e:
            raise KafkaError(ErrorCode.corrupt_message, str(e)) from None
        if len(headers) != 1:
            raise KafkaError(ErrorCode.invalid_record,
                             f"a produce request must hold exactly one record batch per partition, "
                             f"got {len(headers)}")
        h = headers[0]
        if h.is_control:
            raise KafkaError(ErrorCode.invalid_record, "clients may not produce control batches")
        if h.is_transactional and (h.producer_id < 0 or h.base_sequence == rb.NO_SEQUENCE):
            raise KafkaError(ErrorCode.invalid_record,
                             "a transactional batch must carry a producer id and a base sequence")
        if self.is_compacted:
            self._check_keys(records, h)
        dup = self.producer_state.check(h)
        if dup is not None:
            return AppendResult(dup.first_offset, -1, self.log_start_offset, duplicate=True)
        if verification is not NO_VERIFICATION:
            self.producer_state.check_verification(h, verification)
        now = self.clock()
        try:
            return self._append_checked(records, h, now, leader_epoch)
        except PartitionOffline as e:
            self.offline = e.message
            raise

    def _append_checked(self, records: bytes, h: rb.BatchHeader, now: int, leader_epoch: int) -> AppendResult:
        self._maybe_roll(h.size, now)
        offset = self.log_end_offset
        h.base_offset = offset
        append_time = -1
        if self.config["message.timestamp.type"] == "LogAppendTime":
            append_time = now
            buf = bytearray(records)  # the CRC must be recomputed over the whole batch
            rb.set_base_offset(buf, 0, offset)
            rb.set_partition_leader_epoch(buf, 0, leader_epoch)
            rb.set_log_append_time(buf, h, now)
            self.active.append([buf], [h])
        else:
            # only the first 17 bytes change (base offset, leader epoch; not covered by the CRC):
            # write a patched header and the rest of the batch as it came
            head = bytearray(records[: rb.CRC])
            rb.set_base_offset(head, 0, offset)
            rb.set_partition_leader_epoch(head, 0, leader_epoch)
            self.active.append([head, memoryview(records)[rb.CRC :]], [h])
        if leader_epoch > self._epochs.latest_epoch:
            self._new_epoch(leader_epoch, offset)
        self.producer_state.update(h)
        self._appended(h)
        return AppendResult(offset, append_time, self.log_start_offset)

    def _new_epoch(self, epoch: int, offset: int) -> None:
        """The first batch of a new leader epoch was written at ``offset``. The cache entry is
        written with the next flush (the batch carries the epoch, so recovery rebuilds the entry
        if a crash comes first); a failed write (only when old entries had to be removed) is
        retried then, never the append's failure."""
        try:
            self._epochs.assign(epoch, offset, durable=False)
        except OSError as e:
            log.error("%s-%d: writing the leader epoch checkpoint failed (%s); retried at the next flush",
                      self.topic, self.partition, describe(e))

    def append_control(self, batch: bytes, leader_epoch: int = 0) -> AppendResult:
        """Append a transaction marker (a control batch built by protocol/control_records.py) for
        the transaction coordinator, stamped with ``leader_epoch``: checked against the producer
        state (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED), then written; it ends the
        producer's ongoing transaction here, and an abort is added to the transaction index of
        the segment it went to. INVALID_RECORD for anything but one marker batch. Storage
        failures as ``append``."""
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        try:
            (h,) = validate_batches(batch, 2**31 - 1)
            if not (h.is_control and h.is_transactional) or h.producer_id < 0:
                raise InvalidBatch("not a transactional control batch with a producer id")
            marker = control_records.read_marker(batch, h)
            if marker is None:
                raise InvalidBatch("the control batch holds no transaction marker")
        except (InvalidBatch, ValueError) as e:
            raise KafkaError(ErrorCode.invalid_record, f"{self.topic}-{self.partition}: not a transaction "
                             f"marker: {e}") from None
        state = self.producer_state
        state.check_marker(h.producer_id, h.producer_epoch, marker.coordinator_epoch)
        try:
            offset = self._append_unchecked(batch, leader_epoch)
        except PartitionOffline as e:
            self.offline = e.message
            raise
        aborted = state.complete_txn(h.producer_id, h.producer_epoch, marker.coordinator_epoch, offset,
                                     h.max_timestamp, marker.commit)
        if aborted is not None:
            self.active.txn_index.append(aborted)
        return AppendResult(offset, -1, self.log_start_offset)

    def append_batch_unchecked(self, batch: bytes, leader_epoch: int = 0, verification: Any = NO_VERIFICATION) -> int:
        """Append a batch built by the broker itself (internal topics), stamped with
        ``leader_epoch``. Returns its base offset. ``verification``: as for ``append`` (a group
        coordinator's transactional offsets, verified with the transaction coordinator)."""
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        if verification is not NO_VERIFICATION:
            self.producer_state.check_verification(rb.read_header(batch, 0), verification)
        try:
            offset = self._append_unchecked(batch, leader_epoch)
        except PartitionOffline as e:
            self.offline = e.message
            raise
        if batch[rb.ATTRIBUTES + 1] & rb.CONTROL_BIT:
            # a coordinator's own marker (the group coordinator ending a producer's offsets in a
            # transaction): its transaction ends here as on the followers that copy it
            h = rb.read_header(batch, 0)
            if h.producer_id >= 0:
                h.base_offset = offset
                self._follow_marker(self.active, memoryview(batch), h)
        return offset

    def _append_unchecked(self, batch: bytes, leader_epoch: int) -> int:
        h = rb.read_header(batch, 0)
        now = self.clock()
        self._maybe_roll(h.size, now)
        buf = bytearray(batch)
        offset = self.log_end_offset
        rb.set_base_offset(buf, 0, offset)
        rb.set_partition_leader_epoch(buf, 0, leader_epoch)
        h.base_offset = offset
        self.active.append([buf], [h])
        if leader_epoch > self._epochs.latest_epoch:
            self._new_epoch(leader_epoch, offset)
        if h.producer_id >= 0 and not h.is_control:
            # (a coordinator's transactional batch, e.g. TxnOffsetCommit's, opens its transaction)
            self.producer_state.update(h)
        self._appended(h)
        return offset

    # -- follower append ---------------------------------------------------------------------
    def append_as_follower(self, records: bytes) -> int:
        """Append the record set of a fetch response from the partition's leader, byte for byte:
        offsets and partition leader epochs stay as the leader wrote them, control and
        transactional batches included. Returns the new log end offset.

        Each whole batch's header and CRC are checked (``replica_batches``); a trailing partial
        batch (a fetch response may end inside one) is ignored. The first batch must start at or
        after the log end offset, else UnexpectedAppendOffset (OFFSET_OUT_OF_RANGE); a batch
        starting after it is accepted as Kafka does, since compaction on the leader leaves offset
        gaps. Offsets must grow from batch to batch (CORRUPT_MESSAGE otherwise). The leader epoch
        cache takes each batch's epoch, the producer state each batch's producer fields; segments
        roll and flush as for any append. Per batch work only, never per record.

        A storage failure raises StorageError (or PartitionOffline); the batches written before
        it stay (the log end offset tells the fetcher where to go on)."""
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        try:
            headers, epochs = replica_batches(records)
        except InvalidBatch as e:
            raise KafkaError(ErrorCode.corrupt_message,
                             f"{self.topic}-{self.partition}: invalid batch from the leader: {e}") from None
        leo = self.log_end_offset
        if not headers:
            return leo
        first = headers[0]
        if first.base_offset < leo:
            raise UnexpectedAppendOffset(
                f"{self.topic}-{self.partition}: the first batch from the leader holds offsets "
                f"{first.base_offset}-{first.last_offset}, below the log end offset {leo}",
                first.base_offset, first.last_offset)
        expected = leo
        for h in headers:
            if h.base_offset < expected:
                raise KafkaError(ErrorCode.corrupt_message,
                                 f"{self.topic}-{self.partition}: offsets from the leader go back from "
                                 f"{expected - 1} to {h.base_offset}")
            expected = h.next_offset
        try:
            self._append_replica(memoryview(records), headers, epochs)
        except PartitionOffline as e:
            self.offline = e.message
            raise
        return self.log_end_offset

    def _append_replica(self, data: memoryview, headers: list[rb.BatchHeader], epochs: list[int]) -> None:
        """Write the batches in runs that fit the active segment (one write per run), rolling a
        new segment at a run's first offset when needed."""
        now = self.clock()
        segment_bytes = int(self.config["segment.bytes"])
        cache = self._epochs
        i, n = 0, len(headers)
        messages = 0
        while i < n:
            first = headers[i]
            self._maybe_roll(first.size, now, first.base_offset)
            act = self.active
            if first.last_offset - act.base_offset > MAX_RELATIVE_OFFSET:  # (an empty one is left as is)
                act = self.roll(now, first.base_offset)
            start = first.position
            room = max(segment_bytes - act.size, first.size)
            end = start + first.size
            j = i + 1
            while j < n:
                h = headers[j]
                if h.position + h.size - start > room or h.last_offset - act.base_offset > MAX_RELATIVE_OFFSET:
                    break
                end = h.position + h.size
                j += 1
            run = headers[i:j]
            for h in run:
                h.position -= start  # positions relative to the buffer written
            written = data[start:end]
            act.append([written], run)
            for h, epoch in zip(run, epochs[i:j], strict=True):
                if epoch != cache.latest_epoch and epoch >= 0:
                    self._new_epoch(epoch, h.base_offset)
                if h.producer_id >= 0:
                    if h.is_control:
                        self._follow_marker(act, written, h)
                    else:
                        self.producer_state.update(h)
                messages += h.records_count
            self.dirty_since_clean += end - start
            i = j
        self.unflushed_messages += messages
        if self.unflushed_messages >= int(self.config["flush.messages"]):
            self.flush()

    def _follow_marker(self, seg: Segment, buf: memoryview, h: rb.BatchHeader) -> None:
        """A marker copied from the leader: its transaction ends here as it did there (no checks:
        the leader made them), and an abort goes into the segment's transaction index."""
        try:
            marker = control_records.read_marker(buf, h)
        except (InvalidBatch, IndexError) as e:
            log.error("%s-%d: the control batch at offset %d from the leader cannot be read (%s); ignored",
                      self.topic, self.partition, h.base_offset, e)
            return
        if marker is None:
            return
        aborted = self.producer_state.complete_txn(h.producer_id, h.producer_epoch, marker.coordinator_epoch,
                                                   h.base_offset, h.max_timestamp, marker.commit)
        if aborted is not None:
            seg.txn_index.append(aborted)

    def _appended(self, h: rb.BatchHeader) -> None:
        """Bookkeeping after any append: flush policy and the cleaner's dirty count."""
        self.unflushed_messages += h.records_count
        self.dirty_since_clean += h.size
        if self.unflushed_messages >= int(self.config["flush.messages"]):
            self.flush()

    def _check_keys(self, records: bytes, h: rb.BatchHeader) -> None:
        # keys read in place, the batch inflated into a bounded map (a decompression bomb costs
        # at most that bound): see protocol/key_check.py
        limit = max(MAX_INFLATED_FLOOR, 8 * int(self.config["max.message.bytes"]))
        try:
            missing = keyless_records(records, h, limit)
        except InflatedTooLarge as e:
            raise KafkaError(ErrorCode.message_too_large, str(e)) from None
        except Exception as e:  # noqa: BLE001 - any decode failure is a corrupt batch
            raise KafkaError(ErrorCode.corrupt_message, f"cannot decode records: {e}") from None
        if missing:
            # Kafka's LogValidator names each offending record (Produce v8+ record_errors): the
            # client fails those with INVALID_RECORD and the rest of the batch with
            # INVALID_DIFFERENT_RECORD, so they can be sent again
            msg = f"compacted topic {self.topic}-{self.partition} cannot accept a record without a key"
            raise RecordErrors(ErrorCode.invalid_record, msg, [(i, msg) for i in missing])

    def _maybe_roll(self, incoming: int, now: int, base_offset: int | None = None) -> None:
        act = self.active
        if act.size == 0:
            return
        full = act.size + incoming > int(self.config["segment.bytes"])
        old = now - act.created_ms >= int(self.config["segment.ms"])
        index_full = len(act.index) * 8 >= int(self.config["segment.index.bytes"])
        if full or old or index_full:
            self.roll(now, base_offset)

    def roll(self, now: int | None = None, base_offset: int | None = None) -> Segment:
        """Seal the active segment (fsync, indexes) and start a new one at ``base_offset``
        (default: the log end offset; a follower's append may start past it). If the new file
        cannot be created (StorageError), the active segment stays as it was."""
        act = self.active
        act.flush()
        seg = Segment(self.dir, self.log_end_offset if base_offset is None else base_offset,
                      int(self.config["index.interval.bytes"]), self.clock() if now is None else now)
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        return seg

    def flush(self) -> None:
        """fsync what was appended since the last flush. PartitionOffline if that fails."""
        if not self.loaded:
            return
        if self.offline:
            raise PartitionOffline(self.offline)
        try:
            self.active.flush()  # a segment is fsynced when rolled: only the active one can be behind
        except PartitionOffline as e:
            self.offline = e.message
            raise
        self.unflushed_messages = 0
        self.last_flush_ms = self.clock()
        if self._epochs.dirty:
            # new entries first: the recovery point must not pass an entry that is not on disk
            try:
                self._epochs.flush()
            except OSError as e:
                log.error("%s-%d: writing the leader epoch checkpoint failed (%s); the recovery point "
                          "stays at %d", self.topic, self.partition, describe(e), self.recovery_point)
                return
        self.recovery_point = self.log_end_offset

    # -- read --------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, min_one_batch: bool = True, region_above: int = 0,
             max_offset: int | None = None) -> ReadResult:
        """Whole batches from ``offset`` within ``max_bytes``; a range of ``region_above`` bytes or
        more (if > 0) comes back as a FileRegion to be sent in chunks, not as bytes.

        ``max_offset``: only batches ending at or below it (every offset < ``max_offset``) are
        returned; consumers of a replicated log pass the high watermark, followers None (the log
        end). An offset in [log start, log end] is valid whatever the bound: at or past the bound
        the answer is empty, as Kafka's. ``high_watermark`` in the result is the log's.

        A batch whose header cannot be walked (see Segment.iter_headers) answers CORRUPT_MESSAGE
        at its offset, never a skip past it; a failing read is KAFKA_STORAGE_ERROR."""
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        try:
            return self._read(offset, max_bytes, min_one_batch, region_above, max_offset)
        except CorruptBatch as e:
            raise KafkaError(ErrorCode.corrupt_message,
                             f"{self.topic}-{self.partition}: the batch at or after offset {offset} is "
                             f"corrupt on the broker ({e})") from None
        except OSError as e:
            raise StorageError(f"reading {self.topic}-{self.partition} failed: {describe(e)}") from None

    def _read(self, offset: int, max_bytes: int, min_one_batch: bool, region_above: int,
              max_offset: int | None) -> ReadResult:
        leo = self.log_end_offset
        hw = self._hwm if self._replicated else leo
        if offset == leo:
            return ReadResult(b"", hw, self.log_start_offset)
        if offset < self.log_start_offset or offset > leo:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"offset {offset} is outside [{self.log_start_offset}, {leo}]")
        if max_offset is not None and offset >= max_offset:
            return ReadResult(b"", hw, self.log_start_offset)
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        while i < len(self.segments):
            seg = self.segments[i]
            pos, h = seg.find_position(offset)
            if h is not None:
                limit = seg.size
                if max_offset is not None and seg.next_offset > max_offset:
                    if h.next_offset > max_offset:
                        return ReadResult(b"", hw, self.log_start_offset)
                    limit = self._position_below(seg, max_offset)
                if h.size > max_bytes:
                    # KIP-74: the first batch is served whole even when larger than the limit
                    length, next_offset = (h.size, h.next_offset) if min_one_batch else (0, -1)
                else:
                    # whole batches only: a consumer would drop a trailing partial batch and fetch
                    # it again
                    end, next_offset = seg.last_batch_end(pos, min(limit, pos + max_bytes), h)
                    length = end - pos
                if length <= 0:
                    return ReadResult(b"", hw, self.log_start_offset)
                if 0 < region_above <= length:
                    return ReadResult(b"", hw, self.log_start_offset, next_offset,
                                      FileRegion(seg.path, pos, length))
                return ReadResult(seg.pread(pos, length), hw, self.log_start_offset, next_offset)
            i += 1  # offset falls in a gap left by compaction: serve the next segment
        return ReadResult(b"", hw, self.log_start_offset)

    @staticmethod
    def _position_below(seg: Segment, max_offset: int) -> int:
        """End position of the last batch of ``seg`` ending at or below ``max_offset``."""
        pos, h = seg.find_position(max_offset - 1)
        if h is None:
            return seg.size
        return pos + h.size if h.next_offset <= max_offset else pos

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
        self.ensure_loaded()
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            h = seg.find_timestamp(timestamp)
            if h is None:
                continue
            data = seg.pread(h.position, h.size)
            h.position = 0
            for r in decode_records(data, h):
                ts = h.max_timestamp if h.attributes & rb.TIMESTAMP_TYPE_BIT else r.timestamp
                if ts >= timestamp and r.offset >= self.log_start_offset:
                    return r.offset, ts
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the largest timestamp (ListOffsets -3).
        The segments' max timestamps pick the segment and its time index's last entry the batch
        (no scan); only that one batch is decoded to find the record in it (KAFKA-16310: the
        record's own offset, not the batch's last)."""
        self.ensure_loaded()
        best = self._max_timestamp_batch_indexed() or self._max_timestamp_batch_scanned()
        if best is None:
            return None
        seg, h = best
        if h.attributes & rb.TIMESTAMP_TYPE_BIT:  # LogAppendTime: every record has the batch's time
            return max(h.base_offset, self.log_start_offset), h.max_timestamp
        data = seg.pread(h.position, h.size)
        h.position = 0
        try:
            recs = [r for r in decode_records(data, h) if r.offset >= self.log_start_offset]
        except Exception:  # noqa: BLE001 - an undecodable batch: fall back to its header
            return h.last_offset, h.max_timestamp
        if not recs:
            return h.last_offset, h.max_timestamp
        top = max(r.timestamp for r in recs)
        return next(r.offset for r in recs if r.timestamp == top), top

    def _max_timestamp_batch_indexed(self) -> tuple[Segment, rb.BatchHeader] | None:
        live = [s for s in self.segments if s.max_timestamp >= 0 and s.next_offset > self.log_start_offset]
        if not live:
            return None
        top = max(s.max_timestamp for s in live)
        seg = next(s for s in live if s.max_timestamp == top)  # the first segment reaching it
        if not len(seg.time_index) or seg.time_index.timestamps[-1] != top:
            return None
        _, h = seg.find_position(seg.time_index.base_offset + seg.time_index.rel_offsets[-1])
        if h is None or h.max_timestamp != top or h.last_offset < self.log_start_offset:
            return None
        return seg, h

    def _max_timestamp_batch_scanned(self) -> tuple[Segment, rb.BatchHeader] | None:
        best: tuple[Segment, rb.BatchHeader] | None = None
        for seg in self.segments:
            for h in seg.iter_headers():
                if h.last_offset >= self.log_start_offset and (best is None or h.max_timestamp > best[1].max_timestamp):
                    best = (seg, h)
        return best

    # -- retention ---------------------------------------------------------------------------
    def delete_old_segments(self, now: int | None = None) -> int:
        """Retention by time and size (cleanup.policy contains delete). Returns segments deleted."""
        if "delete" not in str(self.config["cleanup.policy"]) or not self.loaded or self.offline:
            return 0
        now = self.clock() if now is None else now
        retention_ms = int(self.config["retention.ms"])
        retention_bytes = int(self.config["retention.bytes"])
        deleted = 0
        total = self.size_bytes
        while len(self.segments) > 1 or (self.active.size > 0 and self._expired(self.active, now, retention_ms)):
            seg = self.segments[0]
            by_time = retention_ms >= 0 and seg.size > 0 and self._expired(seg, now, retention_ms)
            by_size = retention_bytes >= 0 and total - seg.size >= retention_bytes
            if not (by_time or by_size):
                break
            if self._replicated and self._upper_bound(0) > self._hwm:
                break  # as Kafka: never delete what is not below the high watermark
            if seg is self.active:
                self.roll(now)
            total -= seg.size
            self._remove_first_segment()
            deleted += 1
        return deleted

    def advance_log_start_offset(self, offset: int) -> int:
        """DeleteRecords: records below ``offset`` become unreadable (the log start offset only
        moves forward). The caller persists the new start offset (log-start-offset-checkpoint)
        before ``delete_segments_below_start`` removes the segments now wholly below it."""
        self.ensure_loaded()
        if "delete" not in str(self.config["cleanup.policy"]):
            raise KafkaError(ErrorCode.policy_violation,
                             f"records of {self.topic}-{self.partition} cannot be deleted: cleanup.policy is "
                             f"{self.config['cleanup.policy']}")
        if offset < 0 or offset > self.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"offset {offset} is outside [0, {self.high_watermark}] (the high watermark)")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._epochs.truncate_from_start(offset, durable=False)
        return self.log_start_offset

    def delete_segments_below_start(self) -> int:
        """Delete whole segments whose every record is below the log start offset (not the active one)."""
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._remove_first_segment()
            deleted += 1
        return deleted

    def _upper_bound(self, i: int) -> int:
        """One past the last offset segment ``i`` may hold: the next segment's base, or the log end."""
        return self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self.log_end_offset

    @staticmethod
    def _expired(seg: Segment, now: int, retention_ms: int) -> bool:
        return retention_ms >= 0 and seg.max_timestamp >= 0 and now - seg.max_timestamp > retention_ms

    def _remove_first_segment(self) -> None:
        seg = self.segments.pop(0)
        self._bases.pop(0)
        seg.delete_files()
        if self.segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
            self._epochs.truncate_from_start(self.log_start_offset, durable=False)
        log.info("%s-%d: deleted segment %d by retention; log start offset is now %d",
                 self.topic, self.partition, seg.base_offset, self.log_start_offset)

    def replace_segments(self, old: list[Segment], new: list[Segment]) -> None:
        """Swap cleaned segments in (the cleaner)."""
        idx = self.segments.index(old[0])
        self.segments[idx : idx + len(old)] = new
        self._bases = [s.base_offset for s in self.segments]

    # -- truncation (replication) ------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove every record at or after ``offset`` (a follower's divergent tail, KIP-101/279):
        the segment holding it is cut there (file, offset index, time index; a batch straddling
        ``offset`` goes whole) and fsynced, later segments deleted; the leader epoch cache loses
        its entries from the new log end on (written at once), the high watermark and the
        recovery point are clamped to it, and the producer state is rebuilt from the log if a
        removed batch carried a producer id. Below the first segment: ``truncate_fully_and_start_at``.
        Returns False, changing nothing but epoch entries past the end, if ``offset`` >= the log
        end offset. StorageError/PartitionOffline on a failing disk."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.topic}-{self.partition} to a negative offset ({offset})")
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        leo = self.log_end_offset
        try:
            if offset >= leo:
                # an epoch assigned at become-leader with no batch written may still be there
                self._epochs.truncate_from_end(leo)
                return False
            if self.segments[0].base_offset > offset:
                self.truncate_fully_and_start_at(offset)
                return True
            self._truncate(offset)
        except PartitionOffline as e:
            self.offline = e.message
            raise
        except OSError as e:
            raise StorageError(f"truncating {self.topic}-{self.partition} to {offset} failed: {describe(e)}") from None
        log.info("%s-%d: truncated to offset %d (log end offset was %d)", self.topic, self.partition,
                 self.log_end_offset, leo)
        return True

    def _truncate(self, offset: int) -> None:
        i = bisect.bisect_right(self._bases, offset) - 1
        removed = self.segments[i + 1 :]
        dropped = self.segments[i].truncate_to_offset(offset)
        producers = any(h.producer_id >= 0 for h in dropped)
        for seg in removed:
            producers = producers or any(h.producer_id >= 0 for h in seg.iter_headers())
            seg.delete_files()
        del self.segments[i + 1 :]
        del self._bases[i + 1 :]
        if removed:
            _fsync_dir(self.dir)
        self.truncations += 1
        end = self.log_end_offset  # below ``offset`` if a batch straddled it
        self._epochs.truncate_from_end(end)
        self.log_start_offset = min(self.log_start_offset, end)
        self.recovery_point = min(self.recovery_point, end)
        self._hwm = min(self._hwm, end)
        self.unflushed_messages = 0  # what is left was flushed: the cut segment was fsynced
        # a snapshot past the new end describes removed batches; with producer batches removed,
        # none describes this log any more
        ProducerStateManager.delete_snapshots_above(self.dir, -1 if producers else end)
        if producers:
            self._rebuild_producer_state()
            self._snapshot_at = None
        elif self._snapshot_at is not None and self._snapshot_at > end:
            self._snapshot_at = None

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (a follower whose log ends
        below the leader's log start offset, or whose first batch from the leader starts below
        its own log start): log start offset, log end offset, recovery point and high watermark
        all become ``offset``; the leader epoch cache and the producer state are emptied (the
        epoch checkpoint written at once, snapshots deleted)."""
        if offset < 0:
            raise ValueError(f"cannot start {self.topic}-{self.partition} at a negative offset ({offset})")
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        try:
            for seg in self.segments:
                seg.delete_files()
            self.segments = []
            self._bases = []
            seg = Segment(self.dir, offset, int(self.config["index.interval.bytes"]), self.clock(), size=0)
            self.segments = [seg]
            self._bases = [offset]
            _fsync_dir(self.dir)
            self.truncations += 1
            self.log_start_offset = self.recovery_point = self._hwm = offset
            self.unflushed_messages = 0
            self.dirty_since_clean = 0
            self.producer_state = ProducerStateManager()
            ProducerStateManager.delete_snapshots_above(self.dir, -1)
            self._snapshot_at = None
            self._epochs.clear()
        except OSError as e:
            self.offline = (f"{self.topic}-{self.partition}: starting the log over at {offset} failed: "
                            f"{describe(e)}")
            raise PartitionOffline(self.offline) from None
        log.info("%s-%d: emptied, now starting at offset %d", self.topic, self.partition, offset)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
