"""One log segment: ``<base offset, 20 digits>.log`` holding RecordBatch v2 bytes exactly as they
travel on the wire, with its ``.index`` and ``.timeindex``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from gregor.log.offset_index import OffsetIndex
from gregor.log.time_index import TimeIndex
from gregor.protocol import record_batch as rb
from gregor.protocol.record_batch import BatchHeader, InvalidBatch

# Every segment keeps its descriptor open (reads are pread on it); a partition with thousands of
# segments therefore needs a matching open-files limit, as Kafka does.


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval: int, created_ms: int) -> None:
        self.dir = directory
        self.base_offset = base_offset
        stem = segment_name(base_offset)
        self.path = directory / f"{stem}.log"
        self.index = OffsetIndex(directory / f"{stem}.index", base_offset)
        self.time_index = TimeIndex(directory / f"{stem}.timeindex", base_offset)
        self.index_interval = index_interval
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset  # one past the last offset in the segment
        self.max_timestamp = -1
        self.created_ms = created_ms
        self._since_index = 0
        self.deleted = False

    # -- writing -----------------------------------------------------------------------------
    def append(self, buffers: list[bytes | bytearray | memoryview], headers: list[BatchHeader]) -> int:
        """Append batches whose offsets are already assigned, given as consecutive buffers
        (written with one writev); returns the file position."""
        position = self.size
        total = sum(len(b) for b in buffers)
        written = os.writev(self.fd, buffers)
        while written < total:  # short write (rare): finish with the remainder
            rest = b"".join(bytes(b) for b in buffers)[written:]
            written += os.write(self.fd, rest)
        self._track(headers, position)
        self.size += total
        return position

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
        os.fsync(self.fd)
        self.index.write()
        self.time_index.write()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # -- reading -----------------------------------------------------------------------------
    def pread(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def iter_headers(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchHeader]:
        """Batch headers from ``start_position``; stops at the end or at a torn tail."""
        end = self.size if end_position is None else end_position
        pos = start_position
        while end - pos >= rb.HEADER_SIZE:
            raw = os.pread(self.fd, rb.HEADER_SIZE, pos)
            try:
                h = rb.read_header(raw, 0)
            except InvalidBatch:
                return
            if pos + h.size > end:
                return
            h.position = pos
            yield h
            pos += h.size

    def find_position(self, offset: int) -> tuple[int, BatchHeader | None]:
        """File position of the batch holding ``offset`` (or the first batch after it)."""
        _, pos = self.index.lookup(offset)
        for h in self.iter_headers(pos):
            if h.last_offset >= offset:
                return h.position, h
        return self.size, None

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
        for h in self.iter_headers(pos, limit):
            end, next_offset = h.position + h.size, h.next_offset
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
            os.ftruncate(self.fd, pos)
            self.size = pos
        self.index.write(full=True)
        self.time_index.write(full=True)
        return truncated

    def _next_valid(self, pos: int, expected: int, max_batch_bytes: int,
                    crc_fn: Callable[[bytes], int]) -> BatchHeader | None:
        if self.size - pos < rb.HEADER_SIZE:
            return None
        raw = os.pread(self.fd, rb.HEADER_SIZE, pos)
        try:
            h = rb.read_header(raw, 0)
        except InvalidBatch:
            return None
        if h.size > max(max_batch_bytes, rb.HEADER_SIZE) + rb.LOG_OVERHEAD or pos + h.size > self.size:
            return None
        if h.base_offset < expected or h.last_offset_delta < 0:
            return None
        body = os.pread(self.fd, h.size - rb.ATTRIBUTES, pos + rb.ATTRIBUTES)
        stored = int.from_bytes(raw[rb.CRC : rb.CRC + 4], "big")
        if crc_fn(body) != stored:
            return None
        h.position = pos
        return h

    def load_indexes(self) -> bool:
        """Clean start: read the index files and the last batch; False if they must be rebuilt."""
        if not self.index.load(self.size) or not self.time_index.load():
            return False
        if self.size == 0:
            return True
        _, pos = self.index.lookup(2**62)
        last = None
        for h in self.iter_headers(pos):
            last = h
        if last is None or last.position + last.size != self.size:
            return False
        self.next_offset = last.next_offset
        self.max_timestamp = self.time_index.timestamps[-1] if len(self.time_index) else -1
        self._since_index = self.size - pos
        return True

    def truncate_to_offset(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (a batch straddling it is dropped whole)."""
        pos, _h = self.find_position(offset)
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.index.truncate_to_position(pos)
        self.time_index.truncate_to_offset(offset)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        for h in self.iter_headers(0):
            self.next_offset = h.next_offset
            self.max_timestamp = max(self.max_timestamp, h.max_timestamp)

    def delete_files(self) -> None:
        self.close()
        self.deleted = True
        for p in (self.path, self.index.path, self.time_index.path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
