"""Producer id allocation for InitProducerId. Ids are handed out from blocks whose upper bound is
persisted before any id of the block is used, so a restart (even after a crash) never hands out
an id twice."""

from __future__ import annotations

from pathlib import Path

from gregor.atomic_file import write_atomically

BLOCK = 1000


class ProducerIdManager:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "producer-id-block"
        self._next = 0
        self._limit = 0

    def load(self) -> None:
        try:
            self._next = self._limit = int(self.path.read_text().strip())
        except FileNotFoundError:
            self._next = self._limit = 0

    async def allocate(self) -> int:
        """InitProducerId's id (in a cluster a ZooKeeper block may have to be claimed first)."""
        return self.next_id()

    def next_id(self) -> int:
        if self._next >= self._limit:
            self._limit = self._next + BLOCK
            write_atomically(self.path, f"{self._limit}\n".encode())
        pid = self._next
        self._next += 1
        return pid
