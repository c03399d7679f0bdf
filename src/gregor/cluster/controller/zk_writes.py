"""The controller's ZooKeeper reads and its fenced writes.

Every write is a multi-op that starts with ``check(/controller_epoch, version read when
elected)``: once another broker has been elected (and has incremented the epoch), every write of
this one fails, whatever it believes. A failed multi does not say which op failed, so a
BadVersion is told apart by reading ``/controller_epoch``: moved -> ``ControllerMoved`` (the
controller resigns), unchanged -> the state node changed since it was read (a partition leader
shrank or expanded the ISR), and the caller re-reads and decides again.

Requests that fail because the connection dropped are retried once it is back (kazoo queues them
while it reconnects), as Kafka's retryRequestUntilConnected does; writes only as long as this
broker is still the controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from gregor.cluster.controller.context import ControllerContext, TopicPartition
from gregor.cluster.zk import znodes
from gregor.cluster.zk.client import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    Op,
    SessionExpiredError,
    ZkClient,
    ZnodeStat,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class ControllerMoved(Exception):
    """Another broker is the controller now (or this one stopped being it)."""


class ControllerZk:
    def __init__(self, zk: ZkClient, ctx: ControllerContext, still_active: Callable[[], bool]) -> None:
        self.zk = zk
        self.ctx = ctx
        self.still_active = still_active

    async def call(self, make: Callable[[], Awaitable[T]], write: bool = False) -> T:
        """Run one request, again after connection losses (a write: only while this broker is
        still the controller). A session expiry ends reads too: the events after it start over."""
        delay = 0.05
        while True:
            try:
                return await make()
            except (ConnectionLoss, SessionExpiredError) as e:
                if write and not self.still_active():
                    raise ControllerMoved(f"ZooKeeper request failed ({type(e).__name__}) after resigning") from None
                if isinstance(e, SessionExpiredError):
                    raise
                log.debug("ZooKeeper request failed (%s); retrying", type(e).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    # -- reads -----------------------------------------------------------------------------------
    async def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        return await self.call(lambda: self.zk.get(path))

    async def children(self, path: str) -> list[str]:
        return await self.call(lambda: self.zk.get_children(path))

    async def read_states(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, znodes.PartitionState | None]:
        """Each partition's state node (None: no node)."""
        tps = list(tps)

        async def one(tp: TopicPartition) -> znodes.PartitionState | None:
            path = znodes.state_path(*tp)
            got = await self.get(path)
            if got is None:
                return None
            return znodes.PartitionState.decode(got[0], got[1].version, path, got[1].mzxid)

        states = await asyncio.gather(*(one(tp) for tp in tps))
        return dict(zip(tps, states, strict=True))

    # -- fenced writes -----------------------------------------------------------------------------
    async def fenced(self, ops: list[Op]) -> list[Any]:
        """``ops`` after the controller epoch check, atomically. Raises ControllerMoved when the
        epoch moved, else the failing op's error (BadVersionError, NodeExistsError, NoNodeError...).
        Returns the results of ``ops`` (without the check's)."""
        if not self.still_active():
            raise ControllerMoved("not the controller any more")
        guard = Op.check(znodes.CONTROLLER_EPOCH, self.ctx.epoch_zk_version)
        try:
            results = await self.call(lambda: self.zk.multi([guard, *ops]), write=True)
        except BadVersionError:
            await self.raise_if_moved()
            raise
        except NoNodeError:
            await self.raise_if_moved()
            raise
        return results[1:]

    async def raise_if_moved(self) -> None:
        got = await self.get(znodes.CONTROLLER_EPOCH)
        if got is None or got[1].version != self.ctx.epoch_zk_version:
            epoch = znodes.decode_controller_epoch(got[0]) if got is not None else None
            raise ControllerMoved(f"the controller epoch is {epoch} now; this controller was elected with "
                                  f"{self.ctx.epoch}")

    async def update_states(self, states: dict[TopicPartition, znodes.PartitionState]
                            ) -> tuple[dict[TopicPartition, znodes.PartitionState], list[TopicPartition],
                                       dict[TopicPartition, Exception]]:
        """Write each state on the condition that its node is at ``state.zk_version``.
        Returns (written, with their new versions; to retry: the node changed since it was read;
        failed: e.g. the node is gone)."""
        async def one(tp: TopicPartition, st: znodes.PartitionState) -> Any:
            try:
                (stat,) = await self.fenced([Op.set(znodes.state_path(*tp), st.encode(), st.zk_version)])
            except (BadVersionError, NoNodeError) as e:
                return e
            return stat

        items = list(states.items())
        outcomes = await asyncio.gather(*(one(tp, st) for tp, st in items), return_exceptions=True)
        written: dict[TopicPartition, znodes.PartitionState] = {}
        retry: list[TopicPartition] = []
        failed: dict[TopicPartition, Exception] = {}
        moved: ControllerMoved | None = None
        for (tp, st), out in zip(items, outcomes, strict=True):
            if isinstance(out, ControllerMoved):
                moved = out
            elif isinstance(out, BadVersionError):
                retry.append(tp)
            elif isinstance(out, BaseException):
                if not isinstance(out, Exception):
                    raise out
                failed[tp] = out
            else:
                written[tp] = st.written(out.version, out.mzxid)
        if moved is not None:
            raise moved
        return written, retry, failed

    async def create_states(self, states: dict[TopicPartition, znodes.PartitionState]
                            ) -> tuple[dict[TopicPartition, znodes.PartitionState], dict[TopicPartition, Exception]]:
        """Create the state nodes of new partitions (and their parents). Returns (created,
        failed: NodeExistsError when a state node exists already)."""
        async def parent(path: str) -> None:
            try:
                await self.fenced([Op.create(path, b"")])
            except (NodeExistsError, NoNodeError):  # there already / topic gone (then the state fails)
                pass

        await asyncio.gather(*(parent(path) for path in sorted({znodes.partitions_path(t) for t, _ in states})))
        await asyncio.gather(*(parent(znodes.partition_path(*tp)) for tp in sorted(states)))

        async def one(tp: TopicPartition, st: znodes.PartitionState) -> znodes.PartitionState:
            await self.fenced([Op.create(znodes.state_path(*tp), st.encode())])
            return znodes.PartitionState(st.leader, st.leader_epoch, list(st.isr), st.controller_epoch, 0)

        items = list(states.items())
        outcomes = await asyncio.gather(*(one(tp, st) for tp, st in items), return_exceptions=True)
        created: dict[TopicPartition, znodes.PartitionState] = {}
        failed: dict[TopicPartition, Exception] = {}
        moved: ControllerMoved | None = None
        for (tp, _), out in zip(items, outcomes, strict=True):
            if isinstance(out, ControllerMoved):
                moved = out
            elif isinstance(out, znodes.PartitionState):
                created[tp] = out
            elif isinstance(out, Exception):
                failed[tp] = out
            else:
                raise out
        if moved is not None:
            raise moved
        return created, failed
