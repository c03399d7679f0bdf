"""What a shard's reads may see while its writes wait for replication: the state at the committed
offset (Kafka's coordinators read through timeline snapshots at the last committed offset).

A shard's state is its replayed records, and a write is replayed as it is appended, before the
in-sync replicas have it. A read (OffsetFetch) must not reveal such a write: if the leader fails
first, the next leader does not have it. ``CommittedReads`` keeps, for every key a pending write
changed, the value the key had before (in the order of the writes); a read takes the value before
the oldest pending change, and once the committed offset passes a write its entries go.

The runtime says which write is being replayed (``pending``: the offset the write ends at while it
is not committed, -1 otherwise) and when the committed offset moves (``committed``). On one node
every write is committed by its own append: ``pending`` stays -1 and nothing is kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

ABSENT: Any = object()  # a key that had no value before the pending change


class CommittedReads:
    __slots__ = ("_order", "_undo", "pending")

    def __init__(self) -> None:
        self.pending = -1  # the end offset of the uncommitted write being replayed (-1: none)
        self._undo: dict[Hashable, deque[tuple[int, Any]]] = {}
        self._order: deque[tuple[int, Hashable]] = deque()

    def changing(self, key: Hashable, before: Any) -> None:
        """``key`` is about to change from ``before`` (ABSENT: it had no value) by the write being
        replayed; kept only when that write is not committed."""
        offset = self.pending
        if offset < 0:
            return
        entries = self._undo.get(key)
        if entries is None:
            entries = self._undo[key] = deque()
        elif entries[-1][0] == offset:
            return  # changed earlier in the same write: the value before the write is kept
        entries.append((offset, before))
        self._order.append((offset, key))

    def value(self, key: Hashable, current: Any) -> Any:
        """The committed value of ``key`` (ABSENT: none), given its current one."""
        entries = self._undo.get(key)
        return entries[0][1] if entries else current

    def changed_keys(self) -> Iterable[Hashable]:
        """The keys some pending write changed."""
        return self._undo.keys()

    def committed(self, offset: int) -> None:
        """Writes ending at or below ``offset`` are committed: forget what they changed."""
        order = self._order
        while order and order[0][0] <= offset:
            _, key = order.popleft()
            entries = self._undo[key]
            entries.popleft()
            if not entries:
                del self._undo[key]

    def clear(self) -> None:
        self._undo.clear()
        self._order.clear()
        self.pending = -1

    def __len__(self) -> int:
        return len(self._order)
