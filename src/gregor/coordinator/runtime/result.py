"""What a coordinator handler returns: the records to write and the response (Kafka's
CoordinatorResult). The response may be deferred: a JoinGroup waits for the rebalance to
complete, which a later request or timer decides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

Record = tuple[Any, Any]  # (key, value or None for a tombstone)


class Deferred(Generic[T]):
    """A response that is completed later. Plain Python (no event loop), so the state machines
    run in unit tests without one; the runtime bridges it to an asyncio future."""

    __slots__ = ("_callbacks", "_done", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._callbacks: list[Callable[[T], object]] = []

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        if not self._done:
            raise RuntimeError("deferred response is not complete")
        return self._value  # type: ignore[return-value]

    def complete(self, value: T) -> bool:
        if self._done:
            return False
        self._done = True
        self._value = value
        for cb in self._callbacks:
            cb(value)
        self._callbacks.clear()
        return True

    def on_complete(self, cb: Callable[[T], object]) -> None:
        if self._done:
            cb(self._value)  # type: ignore[arg-type]
        else:
            self._callbacks.append(cb)


@dataclass(slots=True)
class CoordinatorResult(Generic[T]):
    records: list[Record] = field(default_factory=list)
    response: T | Deferred[T] | None = None
