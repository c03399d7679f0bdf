"""Keyed timers (Kafka: CoordinatorTimer). ``schedule(key, ...)`` replaces a timer with the same
key, ``cancel(key)`` removes it; a replaced or cancelled timer never runs.

When a timer fires, its operation is handed to the shard's runtime, which runs it like a request:
at once, between other operations (a shard's operations never interleave on the single-threaded
event loop), and its records, like a request's, are appended and wait in the shard's write queue
until they are committed.

``EventLoopTimer`` uses the asyncio loop; ``ManualTimer`` is driven by a test's clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any, Protocol

Operation = Callable[[], Any]  # runs on the shard; returns a CoordinatorResult (or None)


class Timer(Protocol):
    def schedule(self, key: str, delay_ms: int, operation: Operation) -> None: ...
    def cancel(self, key: str) -> None: ...
    def is_scheduled(self, key: str) -> bool: ...


class EventLoopTimer:
    def __init__(self, submit: Callable[[str, Operation], None]) -> None:
        self._submit = submit  # the runtime: runs the operation as a write on the shard
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, key: str, delay_ms: int, operation: Operation) -> None:
        self.cancel(key)
        loop = asyncio.get_running_loop()

        def fire() -> None:
            if self._handles.get(key) is handle:
                del self._handles[key]
                self._submit(key, operation)

        handle = loop.call_later(max(delay_ms, 0) / 1000, fire)
        self._handles[key] = handle

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, key: str) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class ManualClock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class ManualTimer:
    """Timers for tests: nothing fires until ``due(now)`` is asked for the expired ones."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._timers: dict[str, tuple[int, int, Operation]] = {}
        self._seq = itertools.count()

    def schedule(self, key: str, delay_ms: int, operation: Operation) -> None:
        self._timers[key] = (self.clock() + max(delay_ms, 0), next(self._seq), operation)

    def cancel(self, key: str) -> None:
        self._timers.pop(key, None)

    def is_scheduled(self, key: str) -> bool:
        return key in self._timers

    def deadline(self, key: str) -> int | None:
        t = self._timers.get(key)
        return t[0] if t else None

    def pop_due(self) -> list[tuple[str, Operation]]:
        """Expired timers in deadline order, removed from the set."""
        now = self.clock()
        due = [(d, s, k, op) for k, (d, s, op) in self._timers.items() if d <= now]
        heapq.heapify(due)
        out = []
        while due:
            _d, _s, k, op = heapq.heappop(due)
            if k in self._timers and self._timers[k][2] is op:
                del self._timers[k]
                out.append((k, op))
        return out
