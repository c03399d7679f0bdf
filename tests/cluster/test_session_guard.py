"""SessionGuard without a network: a loop that did not run for a third of the session timeout is
not trusted until a ZooKeeper answer shows this session still owns the registration."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from gregor.cluster.zk.client import ConnectionLoss
from gregor.cluster.zk.session_guard import SessionGuard


class ScriptedZk:
    """exists() answers from a script: an exception to raise or an ephemeral owner (None: no node)."""

    def __init__(self, session_id: int, answers: list[Any]) -> None:
        self.session_id = session_id
        self.session_timeout_ms = 1500  # a pause of more than 0.5 s is noticed
        self.answers = answers
        self.asked = 0

    async def exists(self, path: str) -> Any:
        self.asked += 1
        answer = self.answers.pop(0) if self.answers else self.session_id
        if isinstance(answer, Exception):
            raise answer
        return None if answer is None else SimpleNamespace(ephemeralOwner=answer)


async def _until(cond: Any, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


def test_a_running_loop_is_trusted_without_asking_zookeeper():
    async def run() -> None:
        zk = ScriptedZk(7, [])
        guard = SessionGuard(zk, "/brokers/ids/1", zk.session_timeout_ms)  # type: ignore[arg-type]
        await guard.start()
        for _ in range(10):
            assert guard.trusted()
            await asyncio.sleep(0.1)
        await guard.stop()
        assert zk.asked == 0 and guard.doubts == 0

    asyncio.run(run())


def test_a_pause_is_noticed_by_the_first_request_after_it_and_lifted_by_a_confirmation():
    async def run() -> None:
        zk = ScriptedZk(7, [ConnectionLoss(), ConnectionLoss(), None, 6, 7])  # lost, lost, no node, old session, ok
        guard = SessionGuard(zk, "/brokers/ids/1", zk.session_timeout_ms)  # type: ignore[arg-type]
        await guard.start()
        time.sleep(0.7)  # the loop does not run (as under SIGSTOP)
        assert not guard.trusted()  # before the ticker has run
        assert not guard.trusted()
        await _until(guard.trusted)
        assert zk.asked == 5 and guard.doubts == 1
        await guard.stop()

    asyncio.run(run())


def test_a_pause_is_noticed_by_the_ticker_too():
    async def run() -> None:
        zk = ScriptedZk(7, [None] * 3)
        guard = SessionGuard(zk, "/brokers/ids/1", zk.session_timeout_ms)  # type: ignore[arg-type]
        await guard.start()
        time.sleep(0.7)
        await asyncio.sleep(0.15)  # the ticker runs first
        assert guard.doubts == 1
        assert not guard.trusted()
        await _until(guard.trusted)
        await guard.stop()

    asyncio.run(run())


def test_stopping_while_in_doubt_leaves_nothing_running():
    async def run() -> None:
        zk = ScriptedZk(7, [None] * 1000)
        guard = SessionGuard(zk, "/brokers/ids/1", zk.session_timeout_ms)  # type: ignore[arg-type]
        await guard.start()
        time.sleep(0.7)
        assert not guard.trusted()
        await guard.stop()
        assert guard.trusted()  # stopped: nothing to doubt any more
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    asyncio.run(run())
