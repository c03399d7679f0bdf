"""What the offset and time indexes share: two parallel columns in memory, written to their file
as fixed-size big-endian entries, appending only the entries not yet on disk."""

from __future__ import annotations

import os
import struct
from array import array
from pathlib import Path


class IndexFile:
    ENTRY: struct.Struct

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written = 0  # entries already on disk

    def columns(self) -> tuple[array, array]:
        raise NotImplementedError

    def write(self, full: bool = False) -> None:
        first, second = self.columns()
        if full:
            self._written = 0
        elif self._written == len(first):
            return
        if not len(first):  # an empty index is no file (the index of an empty segment)
            self.path.unlink(missing_ok=True)
            return
        mode = "r+b" if self.path.exists() and not full else "wb"
        pack = self.ENTRY.pack
        with open(self.path, mode) as f:
            f.seek(self._written * self.ENTRY.size)
            out = bytearray()
            for i in range(self._written, len(first)):
                out += pack(first[i], second[i])
            f.write(out)
            f.truncate()
        self._written = len(first)

    def read_entries(self) -> list[tuple[int, int]] | None:
        """The file's entries, or None when it is missing or not a whole number of entries."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) % self.ENTRY.size:
            return None
        return list(self.ENTRY.iter_unpack(data))

    def loaded(self, count: int) -> None:
        self._written = count

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
