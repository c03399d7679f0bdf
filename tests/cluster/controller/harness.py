"""Brokers without processes for the controller tests: each "broker" is a ZooKeeper session of its
own (ZkClient) with its registration (BrokerRegistrar) and its Controller, all in the test's
event loop, over a chroot of the session's ZooKeeper server. Killing a broker closes its session
(its ephemeral nodes go at once); expiring one makes ZooKeeper expire its session.

Assertions are on ZooKeeper's nodes, polled until a deadline."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient

from gregor.cluster.controller import Controller
from gregor.cluster.zk import admin as zk_admin
from gregor.cluster.zk import znodes
from gregor.cluster.zk.client import ZkClient
from gregor.cluster.zk.registration import BrokerRegistrar
from gregor.config import BrokerConfig

T = TypeVar("T")
SESSION_MS = 4000


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(_with_timeout(coro))


async def _with_timeout(coro: Awaitable[T]) -> T:
    return await asyncio.wait_for(coro, 120)


class GatedZkClient(ZkClient):
    """A session whose watch notifications can be held back: a broker that has not heard yet of
    what happened in ZooKeeper (a long pause, a slow network), while its requests still work."""

    gated = False

    async def watch_data(self, path, fn):  # type: ignore[override]
        return await super().watch_data(path, lambda *a: None if self.gated else fn(*a))

    async def watch_children(self, path, fn):  # type: ignore[override]
        return await super().watch_children(path, lambda *a: None if self.gated else fn(*a))


@dataclass
class Node:
    broker_id: int
    zk: ZkClient
    registrar: BrokerRegistrar | None
    controller: Controller | None
    alive: bool = True
    config: BrokerConfig | None = None

    @property
    def epoch(self) -> int:
        assert self.registrar is not None
        return self.registrar.broker_epoch


class Cluster:
    def __init__(self, connect: str, settings: dict[str, str] | None = None) -> None:
        self.connect = connect
        self.settings = {"auto.leader.rebalance.enable": "false", **(settings or {})}
        self.nodes: dict[int, Node] = {}
        self.admin = ZkClient(connect, SESSION_MS)

    async def __aenter__(self) -> Cluster:
        await self.admin.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for node in list(self.nodes.values()):
            if node.alive:
                await self.kill(node.broker_id)
        await self.admin.stop()

    async def add(self, broker_id: int, rack: str | None = None, settings: dict[str, str] | None = None,
                  controller: bool = True, zk_class: type[ZkClient] = ZkClient, port: int | None = None,
                  **controller_args: Any) -> Node:
        """Start a broker: session, registration (``port``: the endpoint it registers, by default
        one nobody listens on), and (unless ``controller=False``) its controller."""
        zk = zk_class(self.connect, SESSION_MS)
        await zk.start()
        registrar = BrokerRegistrar(zk, znodes.BrokerRegistration(broker_id, "127.0.0.1", port or 10000 + broker_id,
                                                                  rack))
        await registrar.start(None)
        node = Node(broker_id, zk, registrar, None)
        node.config = BrokerConfig.from_mapping({"node.id": str(broker_id), **self.settings, **(settings or {})})
        if controller:
            node.controller = Controller(zk, broker_id, node.config, **controller_args)
            await node.controller.start()
        self.nodes[broker_id] = node
        return node

    async def kill(self, broker_id: int) -> None:
        """The broker's process dies: its session closes (registration and /controller go)."""
        node = self.nodes[broker_id]
        node.alive = False
        if node.controller is not None:
            await node.controller.queue.close(timeout=0)  # dies in the middle of what it was doing
        await node.zk.stop()
        if node.controller is not None:
            await node.controller.stop()
        if node.registrar is not None:
            await node.registrar.stop()

    async def restart(self, broker_id: int, **kwargs: Any) -> Node:
        if self.nodes[broker_id].alive:
            await self.kill(broker_id)
        return await self.add(broker_id, **kwargs)

    async def expire(self, broker_id: int) -> None:
        """ZooKeeper expires the broker's session (as after a long pause): a second client joins
        the session and closes it, the classic way to expire a session on purpose."""
        node = self.nodes[broker_id]
        session_id, password = node.zk.kazoo.client_id
        loop = asyncio.get_running_loop()

        def close_session() -> None:
            other = KazooClient(hosts=node.zk.hosts, client_id=(session_id, password), timeout=SESSION_MS / 1000)
            other.start(10)
            other.stop()
            other.close()

        await loop.run_in_executor(None, close_session)

    # -- reading ZooKeeper ---------------------------------------------------------------------------
    async def state(self, topic: str, partition: int) -> znodes.PartitionState | None:
        got = await self.admin.get(znodes.state_path(topic, partition))
        return None if got is None else znodes.PartitionState.decode(got[0], got[1].version)

    async def controller_id(self) -> int:
        got = await self.admin.get(znodes.CONTROLLER)
        return -1 if got is None else znodes.decode_controller(got[0])

    async def controller_epoch(self) -> int:
        got = await self.admin.get(znodes.CONTROLLER_EPOCH)
        return -1 if got is None else znodes.decode_controller_epoch(got[0])

    async def active(self, timeout: float = 20) -> Node:
        """The one broker that believes it is the controller, as /controller says."""
        async def check() -> Node | None:
            cid = await self.controller_id()
            actives = [n for n in self.nodes.values() if n.alive and n.controller and n.controller.is_active]
            if len(actives) == 1 and actives[0].broker_id == cid:
                return actives[0]
            return None
        return await eventually(check, timeout, "one active controller")

    async def create_topic(self, name: str, assignment: dict[int, list[int]],
                           configs: dict[str, str] | None = None) -> None:
        await zk_admin.create_topic(self.admin, name, assignment, configs or {}, uuid.uuid4())

    async def wait_state(self, topic: str, partition: int, leader: int, isr: list[int] | None = None,
                         timeout: float = 20) -> znodes.PartitionState:
        async def check() -> znodes.PartitionState | None:
            st = await self.state(topic, partition)
            if st is not None and st.leader == leader and (isr is None or st.isr == isr):
                return st
            return None
        return await eventually(check, timeout, f"{topic}-{partition} led by {leader} with ISR {isr}",
                                lambda: self.state(topic, partition))

    async def settled(self) -> None:
        """Every live controller has processed what it was told so far (watch notifications still
        on their way are not waited for; assertions poll)."""
        await asyncio.sleep(0.2)
        for n in self.nodes.values():
            if n.alive and n.controller is not None:
                await n.controller.wait_idle()


async def eventually(check: Callable[[], Awaitable[T | None]], timeout: float, what: str,
                     describe: Callable[[], Awaitable[Any]] | None = None) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            last = await describe() if describe is not None else None
            raise AssertionError(f"timed out waiting for {what}" + (f"; last seen: {last}" if describe else ""))
        await asyncio.sleep(0.05)


def new_chroot() -> str:
    return f"/controller-test-{uuid.uuid4().hex[:10]}"


class TcpProxy:
    """A TCP relay in front of ZooKeeper for one broker: ``cut()`` drops its connections and
    refuses new ones (the broker's session is suspended, not expired, while ZooKeeper runs),
    ``restore()`` lets it reconnect."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.cut_off = False
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.writers -= {writer, up_writer}

    def cut(self) -> None:
        self.cut_off = True
        for w in list(self.writers):
            w.close()

    def restore(self) -> None:
        self.cut_off = False

    async def stop(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
