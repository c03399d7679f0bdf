"""Sparse offset index: 8-byte entries (offset relative to the segment base, file position),
big-endian, one per ``index.interval.bytes`` of log, as in Kafka's ``.index`` files.

Entries live in memory (two arrays, binary-searched) and are written to disk when the segment
is flushed, rolled or closed; an index carries no checksum, so recovery rebuilds it from the log.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

_ENTRY = struct.Struct(">ii")
ENTRY_SIZE = 8


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.rel_offsets = array("i")
        self.positions = array("i")
        self._written = 0  # entries already on disk

    def __len__(self) -> int:
        return len(self.rel_offsets)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self.rel_offsets and rel <= self.rel_offsets[-1]:
            return
        self.rel_offsets.append(rel)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry at or below ``offset``: (absolute offset, position); (base, 0) if none."""
        i = bisect.bisect_right(self.rel_offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.rel_offsets[i], self.positions[i]

    def truncate_to_position(self, position: int) -> None:
        i = bisect.bisect_left(self.positions, position)
        del self.rel_offsets[i:]
        del self.positions[i:]
        self._written = min(self._written, i)
        self.write(full=True)

    def write(self, full: bool = False) -> None:
        if full:
            self._written = 0
        if self._written == len(self.rel_offsets) and not full:
            return
        mode = "r+b" if self.path.exists() and not full else "wb"
        with open(self.path, mode) as f:
            f.seek(self._written * ENTRY_SIZE)
            out = bytearray()
            for i in range(self._written, len(self.rel_offsets)):
                out += _ENTRY.pack(self.rel_offsets[i], self.positions[i])
            f.write(out)
            f.truncate()
        self._written = len(self.rel_offsets)

    def load(self, segment_size: int) -> bool:
        """Read the index file; False if it is missing or inconsistent with the segment."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % ENTRY_SIZE:
            return False
        rel = array("i")
        pos = array("i")
        last_rel, last_pos = -1, -1
        for r, p in _ENTRY.iter_unpack(data):
            if r <= last_rel or p <= last_pos or p >= segment_size:
                return False
            rel.append(r)
            pos.append(p)
            last_rel, last_pos = r, p
        self.rel_offsets, self.positions, self._written = rel, pos, len(rel)
        return True

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
