"""What a coordinator operation returns: the records to write and the response (Kafka's
CoordinatorResult), and the Deferred that a response may be.

A response may be deferred: a JoinGroup waits for the rebalance to complete, which a later
request or timer decides. ``Deferred`` is plain Python (no event loop), so the state machines
run in unit tests without one; the runtime bridges it to asyncio (``resolve``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

Record = tuple[Any, Any]  # (key, value or None for a tombstone), as the shard's record serde knows them


class Deferred(Generic[T]):
    """A response completed later, with a value (``complete``) or an error (``fail``)."""

    __slots__ = ("_callbacks", "_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Deferred[T]], object]] = []

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        """The value; raises the error of a failed Deferred."""
        if not self._done:
            raise RuntimeError("deferred response is not complete")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def complete(self, value: T) -> bool:
        """Complete with ``value``; False (and nothing changes) if already done."""
        if self._done:
            return False
        self._value = value
        self._finish()
        return True

    def fail(self, error: BaseException) -> bool:
        """Complete with an error that ``result()`` raises; False if already done."""
        if self._done:
            return False
        self._error = error
        self._finish()
        return True

    def _finish(self) -> None:
        self._done = True
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    def add_done_callback(self, cb: Callable[[Deferred[T]], object]) -> None:
        """Call ``cb(self)`` once done (at once if it already is)."""
        if self._done:
            cb(self)
        else:
            self._callbacks.append(cb)


@dataclass(slots=True)
class CoordinatorResult(Generic[T]):
    """``records`` to append to the shard's partition, as one batch, and the ``response``.

    ``replay_records``: whether the runtime replays the records into the shard after appending
    them (Kafka's replayRecords). True for almost every operation: replay is how persisted
    state changes. False when the operation has already applied the records' state in memory
    itself, which is how classic group membership is written (as in Kafka): a GroupMetadata
    record persists what the group's state machine already holds, and replaying it would
    rebuild the live group from its persisted part only.

    ``producer_id`` and ``producer_epoch``: the records are written in that producer's ongoing
    transaction (Kafka's scheduleTransactionalWriteOperation).
    """

    records: list[Record] = field(default_factory=list)
    response: T | Deferred[T] | None = None
    replay_records: bool = True
    # a write in a producer's transaction (TxnOffsetCommit): a transactional batch of that producer,
    # replayed through the shard's replay_transactional and made final by the transaction's marker
    producer_id: int = -1
    producer_epoch: int = -1
