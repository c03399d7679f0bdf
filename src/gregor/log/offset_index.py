"""Sparse offset index: 8-byte entries (offset relative to the segment base, file position),
big-endian, one per ``index.interval.bytes`` of log, as in Kafka's ``.index`` files.

Entries live in memory (two arrays, binary-searched) and are written to disk when the segment
is flushed, rolled or closed; an index carries no checksum, so recovery rebuilds it from the log.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from pathlib import Path

from gregor.log.index_file import IndexFile

_ENTRY = struct.Struct(">ii")


class OffsetIndex(IndexFile):
    ENTRY = _ENTRY

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path)
        self.base_offset = base_offset
        self.rel_offsets = array("i")
        self.positions = array("i")

    def columns(self) -> tuple[array, array]:
        return self.rel_offsets, self.positions

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
        self.write(full=True)

    def load(self, segment_size: int) -> bool:
        """Read the index file; False if it is missing or inconsistent with the segment."""
        entries = self.read_entries()
        if entries is None:
            return False
        rel = array("i")
        pos = array("i")
        last_rel, last_pos = -1, -1
        for r, p in entries:
            if r <= last_rel or p <= last_pos or p >= segment_size:
                return False
            rel.append(r)
            pos.append(p)
            last_rel, last_pos = r, p
        self.rel_offsets, self.positions = rel, pos
        self.loaded(len(rel))
        return True
