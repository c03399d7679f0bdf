"""Sparse time index: 12-byte entries (timestamp int64, offset relative to the segment base int32),
as in Kafka's ``.timeindex``. An entry is added when a batch raises the segment's max timestamp at
an offset-index point, so timestamps in the index only grow."""

from __future__ import annotations

import bisect
import struct
from array import array
from pathlib import Path

from gregor.log.index_file import IndexFile

_ENTRY = struct.Struct(">qi")


class TimeIndex(IndexFile):
    ENTRY = _ENTRY

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path)
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.rel_offsets = array("i")

    def columns(self) -> tuple[array, array]:
        return self.timestamps, self.rel_offsets

    def __len__(self) -> int:
        return len(self.timestamps)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.rel_offsets.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """An offset from which a scan finds the first batch with max timestamp >= ``timestamp``."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self.rel_offsets[i]

    def truncate_to_offset(self, offset: int) -> None:
        i = bisect.bisect_left(self.rel_offsets, offset - self.base_offset)
        del self.timestamps[i:]
        del self.rel_offsets[i:]
        self.write(full=True)

    def load(self) -> bool:
        entries = self.read_entries()
        if entries is None:
            return False
        ts = array("q")
        rel = array("i")
        for t, r in entries:
            if (ts and t <= ts[-1]) or (rel and r < rel[-1]):
                return False
            ts.append(t)
            rel.append(r)
        self.timestamps, self.rel_offsets = ts, rel
        self.loaded(len(ts))
        return True
