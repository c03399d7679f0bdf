"""One log segment: ``<base offset, 20 digits>.log`` holding RecordBatch v2 bytes exactly as they
travel on the wire, with its ``.index``, ``.timeindex`` and ``.txnindex`` (the transactions aborted
by markers in it, log/transaction_index.py; most segments have none)."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from gregor.log.offset_index import OffsetIndex
from gregor.log.storage_errors import FD_CACHE, CorruptBatch, PartitionOffline, StorageError, describe
from gregor.log.time_index import TimeIndex
from gregor.log.transaction_index import TransactionIndex
from gregor.protocol import record_batch as rb
from gregor.protocol.record_batch import BatchHeader, InvalidBatch

log = logging.getLogger(__name__)

# Segments hold no descriptor of their own: ``FD_CACHE`` opens them on demand and keeps the most
# recently used ones open (``log.segment.open.files.max``).

_MAGIC = 16  # byte of the magic in a batch header
_EPOCH_PREFIX = struct.Struct(">qii")  # base offset, batch length, partition leader epoch


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval: int, created_ms: int,
                 size: int | None = None, txn_index: bool | None = None) -> None:
        """``size``: the file's size when the caller knows it (0: a new segment, whose file is
        created here, and a stale transaction index removed); otherwise it is read with stat(2),
        creating the file if it is missing. ``txn_index``: whether a ``.txnindex`` file exists,
        when the caller knows (None: looked for on first use)."""
        self.dir = directory
        self.base_offset = base_offset
        stem = segment_name(base_offset)
        self.path = directory / f"{stem}.log"
        self.index = OffsetIndex(directory / f"{stem}.index", base_offset)
        self.time_index = TimeIndex(directory / f"{stem}.timeindex", base_offset)
        self.index_interval = index_interval
        if size is None:
            try:
                size = os.stat(self.path).st_size
            except FileNotFoundError:
                size = 0
                self._create()
        elif size == 0:
            self._create()
            if txn_index is None:
                (directory / f"{stem}.txnindex").unlink(missing_ok=True)
                txn_index = False
        self.txn_index = TransactionIndex(directory / f"{stem}.txnindex", txn_index)
        self.size = size
        self.next_offset = base_offset  # one past the last offset in the segment
        self.max_timestamp = -1
        self.created_ms = created_ms
        self._since_index = 0
        self.deleted = False
        self.unflushed = False  # written since the last fsync
        self._reported: set[int] = set()  # corrupt positions already logged
        self._data_corrupt = False  # a header walk from the start met a corrupt batch

    def _create(self) -> None:
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError as e:
            raise StorageError(f"cannot create segment {self.path}: {describe(e)}") from None

    def open_fd(self) -> int:
        """Called by the descriptor cache. Never creates the file: a segment deleted under a late
        reader (the cleaner's thread) must not come back as an empty file."""
        return os.open(self.path, os.O_RDWR | os.O_APPEND)

    @contextlib.contextmanager
    def _fd(self) -> Iterator[int]:
        fd = FD_CACHE.acquire(self)
        try:
            yield fd
        finally:
            FD_CACHE.release(self)

    # -- writing -----------------------------------------------------------------------------
    def append(self, buffers: list[bytes | bytearray | memoryview], headers: list[BatchHeader]) -> int:
        """Append batches whose offsets are already assigned, given as consecutive buffers
        (written with one writev); returns the file position.

        All or nothing: if the write fails (ENOSPC after a short write, EIO...), the file is
        truncated back to its size before the call and StorageError raised; the segment is then
        exactly as before. If even the truncation fails, PartitionOffline is raised."""
        position = self.size
        total = sum(len(b) for b in buffers)
        try:
            fd = FD_CACHE.acquire(self)
        except OSError as e:  # opening the file failed: nothing was written
            raise StorageError(f"cannot open {self.path}: {describe(e)}") from None
        try:  # (no context manager on this path: produce and every coordinator write pass here)
            written = os.writev(fd, buffers)
            while written < total:  # short write: finish with the remainder (or fail)
                rest = b"".join(bytes(b) for b in buffers)[written:]
                n = os.write(fd, rest)
                if n <= 0:
                    raise OSError(errno.EIO, "write returned 0")
                written += n
        except OSError as e:
            self._roll_back(fd, position, e)
        finally:
            FD_CACHE.release(self)
        self.unflushed = True
        self._track(headers, position)
        self.size += total
        return position

    def _roll_back(self, fd: int, position: int, cause: OSError) -> None:
        try:
            os.ftruncate(fd, position)
        except OSError as e:
            log.error("%s: append failed (%s) and truncating back to %d failed too (%s): "
                      "taking the partition offline", self.path, describe(cause), position, describe(e))
            raise PartitionOffline(f"append to {self.path} failed ({describe(cause)}) and could not be "
                                   f"rolled back ({describe(e)}); the partition is offline") from None
        raise StorageError(f"append to {self.path} failed: {describe(cause)}") from None

    def _track(self, headers: list[BatchHeader], position: int) -> None:
        for h in headers:
            pos = position + h.position
            if self._since_index >= self.index_interval or not len(self.index):
                self.index.append(h.base_offset, pos)
                self._since_index = 0
            self._since_index += h.size
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.time_index.maybe_append(h.max_timestamp, h.base_offset)
            self.next_offset = h.next_offset

    def flush(self) -> None:
        """fsync the data (if written since the last flush), then write the indexes' new entries.

        A failed fsync is PartitionOffline: after it the kernel may have dropped the dirty pages,
        so what is on disk is unknown, and only recovery at the next start can tell."""
        if self.unflushed:
            try:
                with self._fd() as fd:
                    os.fsync(fd)
            except OSError as e:
                log.error("%s: fsync failed (%s): taking the partition offline", self.path, describe(e))
                raise PartitionOffline(f"fsync of {self.path} failed: {describe(e)}") from None
            self.unflushed = False
        if self.txn_index.unflushed:
            try:
                self.txn_index.flush()
            except OSError as e:
                log.error("%s: writing its transaction index failed (%s): taking the partition offline",
                          self.path, describe(e))
                raise PartitionOffline(f"writing the transaction index of {self.path} failed: {describe(e)}") from None
        self.write_indexes()

    def write_indexes(self) -> None:
        """Write the indexes' new entries. A failure loses nothing: the entries stay in memory and
        are written at the next flush; a missing or torn index file is rebuilt from the log at
        start-up, and a shorter one only makes the index sparser."""
        try:
            self.index.write()
            self.time_index.write()
        except OSError as e:
            log.warning("%s: writing its index failed (%s); it will be written later", self.path, describe(e))

    def close(self) -> None:
        FD_CACHE.drop(self)

    # -- reading -----------------------------------------------------------------------------
    def pread(self, position: int, size: int) -> bytes:
        fd = FD_CACHE.acquire(self)
        try:
            return os.pread(fd, size, position)
        finally:
            FD_CACHE.release(self)

    def iter_headers(self, start_position: int = 0, end_position: int | None = None,
                     strict: bool = False, report: bool = True) -> Iterator[BatchHeader]:
        """Batch headers from ``start_position`` to ``end_position`` (a batch crossing it is not
        yielded; default: the segment's end).

        The segment's ``size`` bytes are known to be whole batches (recovery checked them, or they
        were appended whole), so a header inside them that cannot be walked (a length smaller than
        a header, or running past the segment's end) is corruption: ``strict`` raises CorruptBatch,
        otherwise the walk stops there and the corruption is logged (once per position). A header
        whose length is sound but whose other fields are damaged (magic, counts: CRC-covered) is
        yielded, so that its stored bytes reach the client, whose CRC check reports them."""
        size = self.size
        end = size if end_position is None else min(end_position, size)
        pos = start_position
        with self._fd() as fd:
            while pos < end:
                raw = os.pread(fd, rb.HEADER_SIZE, pos)
                problem = self._header_problem(raw, pos, size)
                if problem is not None:
                    self._corrupt(pos, problem, strict, report)
                    return
                h = _read_header_any_magic(raw)
                if pos + h.size > end:
                    return
                h.position = pos
                yield h
                pos += h.size

    def _header_problem(self, raw: bytes, pos: int, size: int) -> str | None:
        if len(raw) < rb.HEADER_SIZE:
            return f"{size - pos} bytes left, less than a batch header"
        length = int.from_bytes(raw[8:12], "big", signed=True)
        if length < rb.HEADER_SIZE - rb.LOG_OVERHEAD:
            return f"batch length {length} is smaller than a batch header"
        if pos + rb.LOG_OVERHEAD + length > size:
            return f"batch length {length} runs past the segment's end ({size} bytes)"
        return None

    def _corrupt(self, pos: int, problem: str, strict: bool, report: bool = True) -> None:
        if report and pos not in self._reported:
            self._reported.add(pos)
            log.error("%s: corrupt record batch at position %d: %s", self.path, pos, problem)
        if strict:
            raise CorruptBatch(self.path, pos, problem)

    def find_position(self, offset: int) -> tuple[int, BatchHeader | None]:
        """File position of the batch holding ``offset`` (or the first batch after it).
        CorruptBatch if a batch header on the way cannot be walked."""
        _, pos = self.index.lookup(offset)
        try:
            return self._find_from(pos, offset, report=pos == 0)
        except CorruptBatch:
            if pos == 0 or self._data_corrupt or not self._reindex():
                raise
        _, pos = self.index.lookup(offset)
        return self._find_from(pos, offset)

    def _find_from(self, pos: int, offset: int, report: bool = True) -> tuple[int, BatchHeader | None]:
        for h in self.iter_headers(pos, strict=True, report=report):
            if h.last_offset >= offset:
                return h.position, h
        return self.size, None

    def _walks_cleanly(self) -> list[BatchHeader] | None:
        try:
            return list(self.iter_headers(0, strict=True))
        except CorruptBatch:
            return None

    def _reindex(self) -> bool:
        """An index entry led into the middle of a batch. If the batch headers walk cleanly from
        the segment's start, the index (not the data) was wrong: rebuild it from them."""
        headers = self._walks_cleanly()
        if headers is None:
            self._data_corrupt = True  # the data is corrupt: no further whole-segment walks
            return False
        log.warning("%s: its index pointed into a batch; rebuilt from the batch headers", self.path)
        next_offset = self.next_offset
        self.index = OffsetIndex(self.index.path, self.base_offset)
        self.time_index = TimeIndex(self.time_index.path, self.base_offset)
        self._since_index = 0
        self.max_timestamp = -1
        self._track(headers, 0)
        self.next_offset = max(self.next_offset, next_offset)
        try:
            self.index.write(full=True)
            self.time_index.write(full=True)
        except OSError as e:
            log.warning("%s: writing its rebuilt index failed (%s)", self.path, describe(e))
        return True

    def last_batch_end(self, start: int, limit: int, first: BatchHeader) -> tuple[int, int]:
        """(end position, next offset) of the last whole batch that starts at or after ``start``
        (where batch ``first`` starts) and ends at or before ``limit``; (start, first's base offset)
        if none does. Walks from the nearest index entry: a few batch headers, never the data."""
        import bisect

        i = bisect.bisect_right(self.index.positions, limit) - 1
        if i >= 0 and self.index.positions[i] > start:
            pos = self.index.positions[i]
            end, next_offset = pos, self.base_offset + self.index.rel_offsets[i]  # index entries are batch starts
        else:
            pos = end = start
            next_offset = first.base_offset
        try:
            for h in self.iter_headers(pos, limit, strict=True):
                end, next_offset = h.position + h.size, h.next_offset
        except CorruptBatch:
            pass  # serve the whole batches before it; the next read starts at the corruption
        return end, next_offset

    def find_timestamp(self, timestamp: int) -> BatchHeader | None:
        """First batch whose max timestamp is at or after ``timestamp``."""
        _, pos = self.index.lookup(self.time_index.lookup(timestamp))
        for h in self.iter_headers(pos):
            if h.max_timestamp >= timestamp:
                return h
        return None

    # -- recovery ----------------------------------------------------------------------------
    def recover(self, max_batch_bytes: int) -> int:
        """Validate every batch (CRC included), rebuild both indexes, truncate a torn or corrupt
        tail. Returns the number of bytes truncated."""
        import crc32c

        self.index = OffsetIndex(self.index.path, self.base_offset)
        self.time_index = TimeIndex(self.time_index.path, self.base_offset)
        self._since_index = 0
        self.max_timestamp = -1
        self.next_offset = self.base_offset
        pos = 0
        expected = self.base_offset
        while True:
            h = self._next_valid(pos, expected, max_batch_bytes, crc32c.crc32c)
            if h is None:
                break
            self._track([h], 0)
            pos += h.size
            expected = h.next_offset
        truncated = self.size - pos
        if truncated:
            with self._fd() as fd:
                os.ftruncate(fd, pos)
            self.size = pos
        try:
            self.index.write(full=True)
            self.time_index.write(full=True)
        except OSError as e:  # written at the next flush (from entry 0: ``full`` reset the count)
            log.warning("%s: writing its rebuilt index failed (%s)", self.path, describe(e))
        return truncated

    def _next_valid(self, pos: int, expected: int, max_batch_bytes: int,
                    crc_fn: Callable[[bytes], int]) -> BatchHeader | None:
        if self.size - pos < rb.HEADER_SIZE:
            return None
        raw = self.pread(pos, rb.HEADER_SIZE)
        try:
            h = rb.read_header(raw, 0)
        except InvalidBatch:
            return None
        if h.size > max(max_batch_bytes, rb.HEADER_SIZE) + rb.LOG_OVERHEAD or pos + h.size > self.size:
            return None
        if h.base_offset < expected or h.last_offset_delta < 0:
            return None
        body = self.pread(pos + rb.ATTRIBUTES, h.size - rb.ATTRIBUTES)
        stored = int.from_bytes(raw[rb.CRC : rb.CRC + 4], "big")
        if crc_fn(body) != stored:
            return None
        h.position = pos
        return h

    def load_indexes(self, end_offset: int | None = None) -> bool:
        """Clean start: read the index files and the last batch; False if they must be rebuilt.

        ``end_offset``: the offset after this segment's last batch when known otherwise (the next
        segment's base, or the log end offset checkpointed at the clean shutdown). If a corrupt
        batch stops the walk to the last batch, the segment is kept as stored (reads of the corrupt
        batch answer CORRUPT_MESSAGE) instead of being truncated, as a clean start never truncates."""
        if self.size == 0:  # nothing to index, whatever the files say (an empty index has none)
            return True
        if not self.index.load(self.size) or not self.time_index.load():
            return False
        _, pos = self.index.lookup(2**62)
        last = None
        try:
            for h in self.iter_headers(pos, strict=True):
                last = h
        except CorruptBatch:
            if end_offset is None or self._walks_cleanly() is not None:
                return False  # or the index, not the data, is wrong: rebuild it
            self.next_offset = end_offset
            self.max_timestamp = self.time_index.timestamps[-1] if len(self.time_index) else -1
            self._since_index = self.index_interval  # the next append gets an index entry
            return True
        if last is None or last.position + last.size != self.size:
            return False
        self.next_offset = last.next_offset
        self.max_timestamp = self.time_index.timestamps[-1] if len(self.time_index) else -1
        self._since_index = self.size - pos
        return True

    def truncate_to_offset(self, offset: int) -> list[BatchHeader]:
        """Drop every batch holding an offset at or after ``offset`` (a batch straddling it is
        dropped whole) from the file and both indexes, and fsync the file. Returns the headers of
        the dropped batches. Walks only the dropped batches and those after the last index entry
        left, never the whole segment."""
        pos, first = self.find_position(offset)
        if first is None:
            return []
        dropped = list(self.iter_headers(pos))
        with self._fd() as fd:
            os.ftruncate(fd, pos)
            self.size = pos
            try:
                os.fsync(fd)
            except OSError as e:
                raise PartitionOffline(f"fsync of {self.path} after truncating it failed: {describe(e)}") from None
        self.unflushed = False
        self.index.truncate_to_position(pos)
        self.time_index.truncate_to_offset(first.base_offset)
        self.txn_index.truncate_to(first.base_offset)
        # the time index holds an entry for every batch that raised the maximum timestamp
        self.max_timestamp = self.time_index.timestamps[-1] if len(self.time_index) else -1
        if len(self.index):
            last_pos = self.index.positions[-1]
            self.next_offset = self.base_offset + self.index.rel_offsets[-1]  # an entry is a batch start
        else:
            last_pos = 0
            self.next_offset = self.base_offset
        for h in self.iter_headers(last_pos, pos):
            self.next_offset = h.next_offset
        self._since_index = pos - last_pos if len(self.index) else 0
        return dropped

    def iter_epochs(self) -> Iterator[tuple[int, int]]:
        """(partition leader epoch, base offset) of every batch, reading 16 bytes per batch
        (rebuilding a leader epoch cache). Stops at a header that cannot be walked."""
        size = self.size
        pos = 0
        with self._fd() as fd:
            while pos + _EPOCH_PREFIX.size <= size:
                base, length, epoch = _EPOCH_PREFIX.unpack(os.pread(fd, _EPOCH_PREFIX.size, pos))
                if length < rb.HEADER_SIZE - rb.LOG_OVERHEAD or pos + rb.LOG_OVERHEAD + length > size:
                    return
                yield epoch, base
                pos += rb.LOG_OVERHEAD + length

    def delete_files(self) -> None:
        self.close()
        self.deleted = True
        self.txn_index.forget()
        for p in (self.path, self.index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def _read_header_any_magic(raw: bytes) -> BatchHeader:
    """The header of a batch whose length was checked; a damaged magic byte is read as 2 so that
    the batch is still served as stored (its CRC tells the client)."""
    if raw[_MAGIC] != rb.MAGIC_V2:
        fixed = bytearray(raw)
        fixed[_MAGIC] = rb.MAGIC_V2
        return rb.read_header(fixed, 0)
    return rb.read_header(raw, 0)
