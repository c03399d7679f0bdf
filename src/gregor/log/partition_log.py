"""The log of one topic-partition: an ordered list of segments, the last one active.

Append treats a batch as opaque bytes: header checks and CRC (``validate_batches``), producer
sequence checks, base offset rewritten in place, one write. Reads return whole byte ranges of
one segment. On one node the high watermark is the log end offset once the write returns.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.log.file_region import FileRegion
from gregor.log.producer_state import ProducerStateManager
from gregor.log.segment import Segment
from gregor.log.storage_errors import CorruptBatch, PartitionOffline, StorageError, describe
from gregor.protocol import record_batch as rb
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.key_check import InflatedTooLarge, keyless_records
from gregor.protocol.record_batch import InvalidBatch, RecordTooLarge, validate_batches
from gregor.protocol.records import decode_records

log = logging.getLogger(__name__)


# a compressed batch for a compacted topic may inflate to max(this, 8 x max.message.bytes)
MAX_INFLATED_FLOOR = 64 << 20


class RecordErrors(KafkaError):
    """A batch rejected for some of its records: ``record_errors`` holds (batch index, message)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


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
        except OSError as e:
            raise StorageError(f"cannot load {self.topic}-{self.partition}: {describe(e)}") from None
        if start > self.log_start_offset:  # DeleteRecords moved it past a segment start
            self.log_start_offset = min(start, self.log_end_offset)

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
        self.loaded = True

    def open(self, clean_shutdown: bool, recovery_point: int) -> None:
        """Load segments. After an unclean shutdown, every segment at or after the recovery point
        is re-validated batch by batch and a torn tail truncated."""
        self.segments = []
        self.dir.mkdir(parents=True, exist_ok=True)
        names = os.listdir(self.dir)  # one directory read for the three kinds of file below
        for name in names:
            if name.endswith(".cleaned"):
                (self.dir / name).unlink()
        for name in sorted(n for n in names if n.endswith(".log.swap")):
            swap = self.dir / name
            os.replace(swap, swap.with_suffix(""))  # the cleaner crashed after writing: finish the swap
            names.append(name[: -len(".swap")])
        bases = sorted({int(n[: -len(".log")]) for n in names if n.endswith(".log")})
        interval = int(self.config["index.interval.bytes"])
        max_batch = int(self.config["max.message.bytes"])
        now = self.clock()
        truncated_at: int | None = None
        for base in bases:
            if truncated_at is not None:
                # everything after a corrupt batch is unreachable: drop later segments too
                Segment(self.dir, base, interval, now).delete_files()
                continue
            seg = Segment(self.dir, base, interval, int(os.path.getmtime(self.dir / f"{base:020d}.log") * 1000))
            needs_recovery = not clean_shutdown and self._segment_end(bases, base) > recovery_point
            known_end = bases[bases.index(base) + 1] if base != bases[-1] else (
                recovery_point if clean_shutdown and recovery_point > base else None)
            if needs_recovery or not seg.load_indexes(known_end):
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
        snap = self.producer_state.load_snapshot(self.dir) if clean_shutdown else None
        self._snapshot_at = snap
        if snap != leo and not (snap is None and all(s.size == 0 for s in self.segments)):
            self._rebuild_producer_state()
            self._snapshot_at = None
        self.recovery_point = leo
        self.loaded = True
        self.last_flush_ms = now
        # no cleaner checkpoint is kept: after a restart every sealed segment counts as dirty
        self.dirty_since_clean = sum(s.size for s in self.segments[:-1])

    @staticmethod
    def _segment_end(bases: list[int], base: int) -> int:
        i = bases.index(base)
        return bases[i + 1] if i + 1 < len(bases) else 2**63 - 1

    def _rebuild_producer_state(self) -> None:
        self.producer_state = ProducerStateManager()
        for seg in self.segments:
            for h in seg.iter_headers():
                if h.producer_id >= 0:
                    self.producer_state.update(h)

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
        return self.log_end_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def is_compacted(self) -> bool:
        return "compact" in str(self.config["cleanup.policy"])

    # -- append ------------------------------------------------------------------------------
    def append(self, records: bytes) -> AppendResult:
        """Validate and append one produce request's records for this partition.

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
        if h.is_transactional:
            raise KafkaError(ErrorCode.invalid_record, "transactional produce is not supported by this broker")
        if self.is_compacted:
            self._check_keys(records, h)
        dup = self.producer_state.check(h)
        if dup is not None:
            return AppendResult(dup.first_offset, -1, self.log_start_offset, duplicate=True)
        now = self.clock()
        try:
            return self._append_checked(records, h, now)
        except PartitionOffline as e:
            self.offline = e.message
            raise

    def _append_checked(self, records: bytes, h: rb.BatchHeader, now: int) -> AppendResult:
        self._maybe_roll(h.size, now)
        offset = self.log_end_offset
        h.base_offset = offset
        append_time = -1
        if self.config["message.timestamp.type"] == "LogAppendTime":
            append_time = now
            buf = bytearray(records)  # the CRC must be recomputed over the whole batch
            rb.set_base_offset(buf, 0, offset)
            rb.set_partition_leader_epoch(buf, 0, 0)
            rb.set_log_append_time(buf, h, now)
            self.active.append([buf], [h])
        else:
            # only the first 17 bytes change (base offset, leader epoch; not covered by the CRC):
            # write a patched header and the rest of the batch as it came
            head = bytearray(records[: rb.CRC])
            rb.set_base_offset(head, 0, offset)
            rb.set_partition_leader_epoch(head, 0, 0)
            self.active.append([head, memoryview(records)[rb.CRC :]], [h])
        self.producer_state.update(h)
        self._appended(h)
        return AppendResult(offset, append_time, self.log_start_offset)

    def append_batch_unchecked(self, batch: bytes) -> int:
        """Append a batch built by the broker itself (internal topics). Returns its base offset."""
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        try:
            return self._append_unchecked(batch)
        except PartitionOffline as e:
            self.offline = e.message
            raise

    def _append_unchecked(self, batch: bytes) -> int:
        h = rb.read_header(batch, 0)
        now = self.clock()
        self._maybe_roll(h.size, now)
        buf = bytearray(batch)
        offset = self.log_end_offset
        rb.set_base_offset(buf, 0, offset)
        h.base_offset = offset
        self.active.append([buf], [h])
        self._appended(h)
        return offset

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

    def _maybe_roll(self, incoming: int, now: int) -> None:
        act = self.active
        if act.size == 0:
            return
        full = act.size + incoming > int(self.config["segment.bytes"])
        old = now - act.created_ms >= int(self.config["segment.ms"])
        index_full = len(act.index) * 8 >= int(self.config["segment.index.bytes"])
        if full or old or index_full:
            self.roll(now)

    def roll(self, now: int | None = None) -> Segment:
        """Seal the active segment (fsync, indexes) and start a new one. If the new file cannot
        be created (StorageError), the active segment stays as it was."""
        act = self.active
        act.flush()
        seg = Segment(self.dir, self.log_end_offset, int(self.config["index.interval.bytes"]),
                      self.clock() if now is None else now)
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
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0
        self.last_flush_ms = self.clock()

    # -- read --------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, min_one_batch: bool = True, region_above: int = 0) -> ReadResult:
        """Whole batches from ``offset`` within ``max_bytes``; a range of ``region_above`` bytes or
        more (if > 0) comes back as a FileRegion to be sent in chunks, not as bytes.

        A batch whose header cannot be walked (see Segment.iter_headers) answers CORRUPT_MESSAGE
        at its offset, never a skip past it; a failing read is KAFKA_STORAGE_ERROR."""
        self.ensure_loaded()
        if self.offline:
            raise PartitionOffline(self.offline)
        try:
            return self._read(offset, max_bytes, min_one_batch, region_above)
        except CorruptBatch as e:
            raise KafkaError(ErrorCode.corrupt_message,
                             f"{self.topic}-{self.partition}: the batch at or after offset {offset} is "
                             f"corrupt on the broker ({e})") from None
        except OSError as e:
            raise StorageError(f"reading {self.topic}-{self.partition} failed: {describe(e)}") from None

    def _read(self, offset: int, max_bytes: int, min_one_batch: bool, region_above: int) -> ReadResult:
        leo = self.log_end_offset
        if offset == leo:
            return ReadResult(b"", leo, self.log_start_offset)
        if offset < self.log_start_offset or offset > leo:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"offset {offset} is outside [{self.log_start_offset}, {leo}]")
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        while i < len(self.segments):
            seg = self.segments[i]
            pos, h = seg.find_position(offset)
            if h is not None:
                if h.size > max_bytes:
                    # KIP-74: the first batch is served whole even when larger than the limit
                    length, next_offset = (h.size, h.next_offset) if min_one_batch else (0, -1)
                else:
                    # whole batches only: a consumer would drop a trailing partial batch and fetch
                    # it again
                    end, next_offset = seg.last_batch_end(pos, min(seg.size, pos + max_bytes), h)
                    length = end - pos
                if length <= 0:
                    return ReadResult(b"", leo, self.log_start_offset)
                if 0 < region_above <= length:
                    return ReadResult(b"", leo, self.log_start_offset, next_offset,
                                      FileRegion(seg.path, pos, length))
                return ReadResult(seg.pread(pos, length), leo, self.log_start_offset, next_offset)
            i += 1  # offset falls in a gap left by compaction: serve the next segment
        return ReadResult(b"", leo, self.log_start_offset)

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
        self.log_start_offset = max(self.log_start_offset, offset)
        return self.log_start_offset

    def delete_segments_below_start(self) -> int:
        """Delete whole segments whose every record is below the log start offset (not the active one)."""
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._remove_first_segment()
            deleted += 1
        return deleted

    @staticmethod
    def _expired(seg: Segment, now: int, retention_ms: int) -> bool:
        return retention_ms >= 0 and seg.max_timestamp >= 0 and now - seg.max_timestamp > retention_ms

    def _remove_first_segment(self) -> None:
        seg = self.segments.pop(0)
        self._bases.pop(0)
        seg.delete_files()
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        log.info("%s-%d: deleted segment %d by retention; log start offset is now %d",
                 self.topic, self.partition, seg.base_offset, self.log_start_offset)

    def replace_segments(self, old: list[Segment], new: list[Segment]) -> None:
        """Swap cleaned segments in (the cleaner)."""
        idx = self.segments.index(old[0])
        self.segments[idx : idx + len(old)] = new
        self._bases = [s.base_offset for s in self.segments]
