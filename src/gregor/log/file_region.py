"""A byte range of a segment file, sent later in bounded chunks instead of being read whole.

A large Fetch answer is not read into memory at once: the fetch handler keeps (file, position,
length) and the connection reads it 256 KiB at a time as the socket drains (server/connection.py).
The region opens a descriptor of its own when it is created, in the same event-loop step that
chose the byte range, so what it sends is what was chosen: retention deleting the segment,
compaction swapping a rewritten file in, or a descriptor cache closing the segment's own
descriptor do not change the open file (POSIX keeps an unlinked or replaced file readable through
an open descriptor). The log appends only past the chosen range, so those bytes are immutable,
except on a replicated log truncated by its follower role meanwhile (``PartitionLog.truncate_to``):
then the range may end early (the connection closes when the data vanished, as Kafka fails such a
send) or hold the new batches written in place.
"""

from __future__ import annotations

import os
from pathlib import Path


class FileRegion:
    __slots__ = ("fd", "position", "length")

    def __init__(self, path: Path | str, position: int, length: int) -> None:
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes from ``offset`` within the region (relative to its start)."""
        return os.pread(self.fd, size, self.position + offset)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:  # a region dropped unsent (connection gone) must not leak its fd
        self.close()
