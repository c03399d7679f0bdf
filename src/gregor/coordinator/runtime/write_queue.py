"""A shard's pending writes, in log order, each held until the partition's committed offset (its
high watermark) reaches the offset the write ends at (Kafka: DeferredEventQueue).

Releasing a write runs the completions its operation deferred (answers to other members) with
no error, then completes its response. Failing the writes (the shard is unloaded) runs their
completions with the error and fails their responses with it, so nobody waits forever. An
operation that wrote nothing is answered no earlier than the writes before it, so no answer
to a write ever reveals state that is not yet committed.

On one node the high watermark is the log end offset, so a write is committed as soon as it is
appended and the runtime answers it at once, without coming here (no Deferred, no task switch).
Once appends wait for replication, writes wait here until the partition reports a higher
watermark (``release``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from gregor.coordinator.runtime.result import Deferred
from gregor.coordinator.runtime.shard import Completion


class PendingWrite:
    __slots__ = ("completions", "end_offset", "response", "waiter")

    def __init__(self, end_offset: int, response: Any, completions: Sequence[Completion]) -> None:
        self.end_offset = end_offset
        self.response = response
        self.completions = completions
        self.waiter: Deferred[Any] = Deferred()


class WriteQueue:
    def __init__(self) -> None:
        self._pending: deque[PendingWrite] = deque()
        # the end offset of the newest pending write, None when nothing is pending (a plain
        # attribute: the runtime reads it on every operation)
        self.last_offset: int | None = None

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, end_offset: int, response: Any, completions: Sequence[Completion]) -> Deferred[Any]:
        """Hold an operation's answer until ``end_offset`` is committed; returns a Deferred that
        completes with the response when the write is released. ``end_offset`` is not below the
        last pending one (writes are added in log order)."""
        write = PendingWrite(end_offset, response, completions)
        self._pending.append(write)
        self.last_offset = end_offset
        return write.waiter

    def release(self, committed_offset: int) -> None:
        """Release, oldest first, every write that ends at or below ``committed_offset``."""
        pending = self._pending
        while pending and pending[0].end_offset <= committed_offset:
            write = pending.popleft()
            if not pending:
                self.last_offset = None
            for fn in write.completions:
                fn(None)
            write.waiter.complete(write.response)

    def fail_all(self, error: BaseException) -> None:
        """Fail every pending write with ``error``, oldest first (the shard is unloaded: they will
        never be committed here)."""
        pending, self._pending = self._pending, deque()
        self.last_offset = None
        for write in pending:
            for fn in write.completions:
                fn(error)
            write.waiter.fail(error)
