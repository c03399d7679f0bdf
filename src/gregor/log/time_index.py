"""Sparse time index: 12-byte entries (timestamp int64, offset relative to the segment base int32),
as in Kafka's ``.timeindex``. An entry is added when a batch raises the segment's max timestamp at
an offset-index point, so timestamps in the index only grow."""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

_ENTRY = struct.Struct(">qi")
ENTRY_SIZE = 12


class TimeIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.rel_offsets = array("i")
        self._written = 0

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

    def write(self, full: bool = False) -> None:
        if full:
            self._written = 0
        if self._written == len(self.timestamps) and not full:
            return
        mode = "r+b" if self.path.exists() and not full else "wb"
        with open(self.path, mode) as f:
            f.seek(self._written * ENTRY_SIZE)
            out = bytearray()
            for i in range(self._written, len(self.timestamps)):
                out += _ENTRY.pack(self.timestamps[i], self.rel_offsets[i])
            f.write(out)
            f.truncate()
        self._written = len(self.timestamps)

    def load(self) -> bool:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % ENTRY_SIZE:
            return False
        ts = array("q")
        rel = array("i")
        for t, r in _ENTRY.iter_unpack(data):
            if (ts and t <= ts[-1]) or (rel and r < rel[-1]):
                return False
            ts.append(t)
            rel.append(r)
        self.timestamps, self.rel_offsets, self._written = ts, rel, len(ts)
        return True

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
