"""ZooKeeper for an asyncio broker: kazoo's client, with every call awaitable on the event loop
and every watch and session event delivered on the event loop.

kazoo runs its connection (and the session's pings) on threads of its own, so a busy event loop
never lets the session expire; the price is that callbacks arrive on kazoo's threads, and this
module's only job is to hand them over (``call_soon_threadsafe``) in the order kazoo produced
them. No ZooKeeper call blocks the event loop: requests use kazoo's ``*_async`` methods; the
watch recipes, whose constructors make a first synchronous read, are built on a worker thread.

Errors are kazoo's exceptions (``NoNodeError``, ``NodeExistsError``, ``BadVersionError``,
``ConnectionLoss``, ``SessionExpiredError``...), re-exported here so callers need not import kazoo.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (  # noqa: F401 - re-exported for callers
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

log = logging.getLogger(__name__)

__all__ = ["BadVersionError", "ConnectionLoss", "KazooException", "NodeExistsError", "NoNodeError",
           "NotEmptyError", "RolledBackError", "SessionExpiredError", "ZookeeperError", "ZnodeStat",
           "ZkClient", "ZkSession", "Op", "split_connect"]


class ZkSession(enum.Enum):
    CONNECTED = "connected"  # connected, session alive (also after a reconnect within the session)
    SUSPENDED = "suspended"  # connection lost; the session may still be alive on the ensemble
    EXPIRED = "expired"  # the session is gone: its ephemeral nodes were deleted


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a multi-op (``ZkClient.multi``): all apply or none does."""
    kind: str  # "check", "create", "set", "delete"
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False

    @staticmethod
    def check(path: str, version: int) -> Op:
        return Op("check", path, version=version)

    @staticmethod
    def create(path: str, data: bytes, ephemeral: bool = False) -> Op:
        return Op("create", path, data, ephemeral=ephemeral)

    @staticmethod
    def set(path: str, data: bytes, version: int = -1) -> Op:
        return Op("set", path, data, version)

    @staticmethod
    def delete(path: str, version: int = -1) -> Op:
        return Op("delete", path, version=version)


def split_connect(connect: str) -> tuple[str, str]:
    """``zookeeper.connect`` -> (hosts, chroot); chroot is "" or "/path"."""
    hosts, sep, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if sep and chroot.strip("/") else ""


class ZkClient:
    """One ZooKeeper session of this broker, chrooted to ``zookeeper.connect``'s path."""

    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int | None = None) -> None:
        self.connect = connect
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self._kz: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_listeners: list[Callable[[ZkSession], None]] = []
        self._watches: list[DataWatch | ChildrenWatch] = []
        self._closing = False
        self.state = ZkSession.SUSPENDED

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (within ``zookeeper.connection.timeout.ms``) and create the chroot if it does
        not exist yet, as Kafka does. Raises TimeoutError with the ensemble's address if no server
        answers in time."""
        self._loop = asyncio.get_running_loop()
        timeout = self.connection_timeout_ms / 1000
        if self.chroot:
            await self._loop.run_in_executor(None, self._ensure_chroot, timeout)
        kz = KazooClient(hosts=self.hosts + self.chroot, timeout=self.session_timeout_ms / 1000,
                         connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
                         command_retry={"max_tries": 0})
        kz.add_listener(self._on_kazoo_state)
        self._kz = kz
        try:
            await self._loop.run_in_executor(None, self._connect, kz, timeout)
        except TimeoutError:
            await self._loop.run_in_executor(None, self._close_kazoo)
            raise
        self.state = ZkSession.CONNECTED

    def _connect(self, kz: KazooClient, timeout: float) -> None:
        """Start ``kz`` and wait for its session, in short steps so that ``stop()`` (a SIGTERM while
        ZooKeeper does not answer) ends the wait at once rather than at the timeout."""
        connected = kz.start_async()
        deadline = time.monotonic() + timeout
        while not connected.wait(0.1):
            if self._closing or time.monotonic() >= deadline:
                kz.stop()
                kz.close()
                why = "stopped while connecting" if self._closing else "no answer"
                raise TimeoutError(f"no ZooKeeper server at {self.hosts} answered within "
                                   f"{self.connection_timeout_ms} ms (zookeeper.connection.timeout.ms): {why}")

    def _ensure_chroot(self, timeout: float) -> None:
        kz = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
        self._connect(kz, timeout)
        try:
            kz.ensure_path(self.chroot)
        finally:
            kz.stop()
            kz.close()

    async def stop(self) -> None:
        """Close the session: this broker's ephemeral nodes disappear at once."""
        self._closing = True
        for w in self._watches:
            w._stopped = True  # kazoo's recipes check this flag before calling back
        self._watches.clear()
        if self._kz is not None and self._loop is not None:
            # on a daemon thread of its own, not the loop's executor: a close that hangs (ZooKeeper
            # unreachable under load) must not hold up the process's exit, which joins the executor
            loop = self._loop
            done: asyncio.Future[None] = loop.create_future()

            def finish() -> None:
                if not done.done():
                    done.set_result(None)

            def close() -> None:
                try:
                    self._close_kazoo()
                finally:
                    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                        loop.call_soon_threadsafe(finish)

            threading.Thread(target=close, name="zk-close", daemon=True).start()
            await done

    def _close_kazoo(self) -> None:
        if self._kz is not None:
            try:
                self._kz.stop()
                self._kz.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                log.debug("closing the ZooKeeper client failed", exc_info=True)

    @property
    def session_id(self) -> int | None:
        return self._kz.client_id[0] if self._kz is not None and self._kz.client_id else None

    # -- session events ----------------------------------------------------------------------
    def add_session_listener(self, fn: Callable[[ZkSession], None]) -> None:
        """``fn(state)`` on the event loop for every change of the session's state."""
        self._session_listeners.append(fn)

    def _on_kazoo_state(self, state: str) -> None:  # kazoo's thread: must not block
        mapped = {KazooState.CONNECTED: ZkSession.CONNECTED, KazooState.SUSPENDED: ZkSession.SUSPENDED,
                  KazooState.LOST: ZkSession.EXPIRED}[state]
        if self._loop is not None and not self._closing:
            try:
                self._loop.call_soon_threadsafe(self._deliver_state, mapped)
            except RuntimeError:  # the event loop is closed: the process is ending
                pass

    def _deliver_state(self, state: ZkSession) -> None:
        if self._closing:
            return
        previous, self.state = self.state, state
        if state is ZkSession.SUSPENDED:
            log.warning("ZooKeeper connection to %s lost; serving on with the current leadership, "
                        "deciding nothing until it returns", self.hosts)
        elif state is ZkSession.EXPIRED:
            log.warning("ZooKeeper session expired (ZooKeeper did not hear from this broker for "
                        "%d ms); reconnecting with a new session", self.session_timeout_ms)
        elif previous is not ZkSession.CONNECTED:
            log.info("ZooKeeper connection to %s is back", self.hosts)
        for fn in list(self._session_listeners):
            try:
                fn(state)
            except Exception:
                log.exception("ZooKeeper session listener failed")

    # -- requests ----------------------------------------------------------------------------
    @property
    def kazoo(self) -> KazooClient:
        assert self._kz is not None, "ZkClient.start() first"
        return self._kz

    def _await(self, async_result: Any) -> Awaitable[Any]:
        loop = self._loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()

        def done(res: Any) -> None:  # kazoo's thread
            loop.call_soon_threadsafe(_settle, fut, res)

        async_result.rawlink(done)
        return fut

    async def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """(data, stat), or None when the node does not exist."""
        try:
            data, stat = await self._await(self.kazoo.get_async(path))
        except NoNodeError:
            return None
        return data, stat

    async def exists(self, path: str) -> ZnodeStat | None:
        return await self._await(self.kazoo.exists_async(path))

    async def get_children(self, path: str) -> list[str]:
        """Children's names (sorted), or [] when the node does not exist."""
        try:
            return sorted(await self._await(self.kazoo.get_children_async(path)))
        except NoNodeError:
            return []

    async def create(self, path: str, data: bytes = b"", ephemeral: bool = False, makepath: bool = False,
                     sequential: bool = False) -> str:
        """Create a node; NodeExistsError if it exists (the basis of every election here)."""
        return await self._await(
            self.kazoo.create_async(path, data, ephemeral=ephemeral, makepath=makepath, sequence=sequential))

    async def ensure_path(self, path: str) -> None:
        await self._await(self.kazoo.ensure_path_async(path))

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        """Conditional write: BadVersionError unless the node is at ``version`` (-1: any)."""
        return await self._await(self.kazoo.set_async(path, data, version))

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        """Delete a node (NoNodeError if it is gone); ``recursive`` deletes its subtree first."""
        if recursive:
            for child in await self.get_children(path):
                await self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
        try:
            await self._await(self.kazoo.delete_async(path, version))
        except NoNodeError:
            if not recursive:
                raise

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        """Apply all ``ops`` atomically or none. On failure raises the first failing op's error
        (BadVersionError for a failed check or conditional set, NodeExistsError, NoNodeError)."""
        tx = self.kazoo.transaction()
        for op in ops:
            if op.kind == "check":
                tx.check(op.path, op.version)
            elif op.kind == "create":
                tx.create(op.path, op.data, ephemeral=op.ephemeral)
            elif op.kind == "set":
                tx.set_data(op.path, op.data, op.version)
            elif op.kind == "delete":
                tx.delete(op.path, op.version)
            else:
                raise ValueError(f"unknown multi-op {op.kind!r}")
        results = await self._await(tx.commit_async())
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise r
        return list(results)

    # -- watches -----------------------------------------------------------------------------
    async def watch_data(self, path: str, fn: Callable[[bytes | None, ZnodeStat | None], None]) -> Callable[[], None]:
        """``fn(data, stat)`` on the event loop now and at every change of the node (None, None
        while it does not exist); survives reconnects and session expiry. Returns a function that
        stops the watch."""
        handle = _Watch(self, fn)
        # a plain two-parameter function: kazoo counts a bound method's self and would pass a third
        return await handle.start(lambda: DataWatch(self.kazoo, path, lambda data, stat: handle.on_data(data, stat)))

    async def watch_children(self, path: str, fn: Callable[[list[str]], None]) -> Callable[[], None]:
        """``fn(sorted children)`` on the event loop now and at every change; the node is created
        first if missing (a children watch needs it). Returns a function that stops the watch."""
        await self.ensure_path(path)
        handle = _Watch(self, lambda children: fn(sorted(children)))
        return await handle.start(lambda: ChildrenWatch(self.kazoo, path, handle.on_children))


class _Watch:
    """One kazoo watch recipe whose callbacks are handed to the event loop until stopped."""

    def __init__(self, client: ZkClient, fn: Callable[..., None]) -> None:
        self.client = client
        self.fn = fn
        self.stopped = False
        self.recipe: DataWatch | ChildrenWatch | None = None

    def cancelled(self) -> bool:
        return self.stopped or self.client._closing

    # kazoo looks at the callbacks' signatures (a third parameter gets the event): keep them exact
    def on_data(self, data: bytes | None, stat: ZnodeStat | None) -> bool | None:
        return self.on_change(data, stat)

    def on_children(self, children: list[str]) -> bool | None:
        return self.on_change(children)

    def on_change(self, *args: Any) -> bool | None:  # kazoo's thread
        if self.cancelled():
            return False  # tells the recipe to stop watching
        loop = self.client._loop
        assert loop is not None
        loop.call_soon_threadsafe(self.deliver, args)
        return None

    def deliver(self, args: tuple[Any, ...]) -> None:
        if self.cancelled():
            return
        try:
            self.fn(*args)
        except Exception:
            log.exception("ZooKeeper watch callback failed")

    async def start(self, build: Callable[[], DataWatch | ChildrenWatch]) -> Callable[[], None]:
        loop = self.client._loop
        assert loop is not None
        # the recipes read once, synchronously, in their constructor: not on the event loop
        self.recipe = await loop.run_in_executor(None, build)
        self.client._watches.append(self.recipe)
        return self.stop

    def stop(self) -> None:
        self.stopped = True
        if self.recipe is not None:
            self.recipe._stopped = True
            if self.recipe in self.client._watches:
                self.client._watches.remove(self.recipe)


def _settle(fut: asyncio.Future[Any], res: Any) -> None:
    if fut.done():
        return
    try:
        fut.set_result(res.get_nowait())
    except Exception as e:  # noqa: BLE001 - kazoo's result carries the request's exception
        fut.set_exception(e)
