"""The controller's events and its queue (Kafka's ControllerEventManager): ZooKeeper watches,
timers and requests only put events; one task takes them one at a time, so that the controller's
decisions never interleave, even though each awaits ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
ShutdownResult = tuple[ErrorCode, list[TopicPartition]]


@dataclass(frozen=True, slots=True)
class Event:
    """Base of the events; those that carry a caller's future answer it when preempted."""

    def preempt(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Startup(Event):
    pass


@dataclass(frozen=True, slots=True)
class ControllerChange(Event):  # /controller's data changed: maybe another broker is controller
    pass


@dataclass(frozen=True, slots=True)
class Reelect(Event):  # /controller is gone (or this broker's session is back): elect
    pass


@dataclass(frozen=True, slots=True)
class Expire(Event):  # this broker's session expired: it is not the controller any more
    pass


@dataclass(frozen=True, slots=True)
class BrokerChange(Event):  # /brokers/ids children
    pass


@dataclass(frozen=True, slots=True)
class TopicChange(Event):  # /brokers/topics children
    pass


@dataclass(frozen=True, slots=True)
class PartitionModifications(Event):  # /brokers/topics/<t> data: partitions added
    topic: str


@dataclass(frozen=True, slots=True)
class TopicDeletion(Event):  # /admin/delete_topics children
    pass


@dataclass(frozen=True, slots=True)
class TopicUncleanLeaderElectionEnable(Event):  # /config/topics/<t> enables unclean election
    topic: str


@dataclass(frozen=True, slots=True)
class AutoPreferredReplicaLeaderElection(Event):  # the leader rebalance timer
    pass


@dataclass(frozen=True, slots=True)
class ControlledShutdown(Event):
    broker_id: int
    broker_epoch: int
    result: asyncio.Future[ShutdownResult] = field(compare=False)

    def preempt(self) -> None:
        if not self.result.done():
            self.result.set_result((ErrorCode.not_controller, []))


class EventQueue:
    """Events processed in order, one at a time, by one task."""

    def __init__(self, process: Callable[[Event], Awaitable[None]]) -> None:
        self._process = process
        self._events: deque[Event] = deque()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-events")

    def put(self, event: Event) -> None:
        if self._closed:
            event.preempt()
            return
        self._events.append(event)
        self._idle.clear()
        self._wakeup.set()

    def clear_and_put(self, event: Event) -> None:
        """Drop the events not yet processed (answering those that wait) and put ``event``."""
        while self._events:
            self._events.popleft().preempt()
        self.put(event)

    def __len__(self) -> int:
        return len(self._events)

    async def _run(self) -> None:
        while True:
            if not self._events:
                self._idle.set()
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            event = self._events.popleft()
            try:
                await self._process(event)
            except asyncio.CancelledError:
                event.preempt()
                raise
            except Exception:
                log.exception("controller event %s failed", type(event).__name__)
            finally:
                event.preempt()  # a no-op when the event answered its caller

    async def wait_idle(self) -> None:
        """Until every event put so far has been processed."""
        while not self._idle.is_set() or self._events:
            await self._idle.wait()
            await asyncio.sleep(0)

    async def close(self, timeout: float = 10.0) -> None:
        """Drop the waiting events, let the one in progress finish (within ``timeout``), stop."""
        self._closed = True
        while self._events:
            self._events.popleft().preempt()
        task, self._task = self._task, None
        if task is None:
            return
        self._wakeup.set()
        try:
            await asyncio.wait_for(self._wait_current(), timeout)
        except TimeoutError:
            log.warning("controller event still running after %.0f s; cancelling it", timeout)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    async def _wait_current(self) -> None:
        while not self._idle.is_set():
            await self._idle.wait()
