"""Whether this broker may trust its view of the cluster after its process did not run for a while.

A broker whose process is paused (SIGSTOP, a VM or container frozen, swapped out) for longer than
its ZooKeeper session has lost its session without knowing it: when it resumes, its event loop
may answer the requests waiting in its sockets before kazoo's thread has reconnected and heard
that the session expired (a few hundred ms), from a state that is no longer its own; the
controller moved its leaderships, a new group coordinator took commits. Kafka has the same
window; Gregor closes it.

``SessionGuard`` notices that the event loop did not run for a third of the session timeout (a
session can expire after two thirds of it without a ping from the client, and the pause may have
begun just after one). From then on ``trusted()`` is False until a ZooKeeper round trip confirms
that this broker's registration is still owned by its current session: ZooKeeper answers a
session in order, after delivering the watches that fired before, so an answer proves the
session alive and the view of the cluster as current as before the pause. While it is not
trusted, the replica manager acts as leader of nothing (produce, fetch and the coordinators
answer NOT_LEADER_OR_FOLLOWER or NOT_COORDINATOR; clients retry). If the session did expire,
the confirmation comes only after the broker has registered again, by which time it has given
up every leadership of its previous registration.

A loop that was only busy (a long synchronous step) is treated the same way: it costs one round
trip to ZooKeeper, and it is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gregor.cluster.zk.client import ConnectionLoss, SessionExpiredError, ZkClient

log = logging.getLogger(__name__)

TICK_S = 0.1


class SessionGuard:
    def __init__(self, zk: ZkClient, registration_path: str, session_timeout_ms: int) -> None:
        self.zk = zk
        self.path = registration_path
        self.pause_s = max(session_timeout_ms / 3000, 5 * TICK_S)
        self._last_tick = time.monotonic()
        self._doubt: asyncio.Task[None] | None = None  # confirming the session
        self._ticker: asyncio.Task[None] | None = None
        self._running = False
        self.doubts = 0  # how many times a pause was noticed (for tests and logs)

    async def start(self) -> None:
        self._running = True
        self._last_tick = time.monotonic()
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        self._running = False
        for task in (self._ticker, self._doubt):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def trusted(self) -> bool:
        """False from the moment a pause is noticed until the session has been confirmed. Cheap:
        called for every leader-side request."""
        if self._doubt is not None:
            return False
        if not self._running:
            return True
        gap = time.monotonic() - self._last_tick
        if gap > self.pause_s:
            self._begin_doubt(gap)
            return False
        return True

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            gap = now - self._last_tick
            if gap > self.pause_s and self._doubt is None:
                self._begin_doubt(gap)
            self._last_tick = now

    def _begin_doubt(self, gap: float) -> None:
        self.doubts += 1
        self._last_tick = time.monotonic()
        log.warning("this broker did not run for %.1f s (paused or blocked): it leads nothing until ZooKeeper "
                    "confirms that its session is still alive", gap)
        self._doubt = asyncio.get_running_loop().create_task(self._confirm(time.monotonic()))

    async def _confirm(self, since: float) -> None:
        try:
            while True:
                try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
                    async with asyncio.timeout(self.zk.session_timeout_ms / 1000):
                        stat = await self.zk.exists(self.path)
                except (ConnectionLoss, SessionExpiredError, TimeoutError):
                    stat = None
                if stat is not None and stat.ephemeralOwner == self.zk.session_id:
                    break
                await asyncio.sleep(TICK_S)
            log.info("ZooKeeper confirmed this broker's session after %.2f s: leading again",
                     time.monotonic() - since)
        finally:
            self._doubt = None
