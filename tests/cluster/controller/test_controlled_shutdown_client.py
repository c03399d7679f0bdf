"""A stopping broker's controlled shutdown (cluster/controller/shutdown_client.py) over the wire:
ControlledShutdown v3 sent with BrokerClient to the controller's registered endpoint, served by
the broker's dispatcher and handler (apis/controlled_shutdown.py) in front of a real Controller."""

from __future__ import annotations

import asyncio
import contextlib
import types
from collections.abc import AsyncIterator
from typing import Any

from gregor.cluster.controller.shutdown_client import request_controlled_shutdown
from gregor.cluster.zk import znodes
from gregor.server.dispatcher import Dispatcher
from tests.cluster.controller.harness import Cluster, run

FAST = {"controlled.shutdown.retry.backoff.ms": "100", "controlled.shutdown.max.retries": "3"}


class ControllerEndpoint:
    """A listener that serves requests with the broker's dispatcher over a services object that
    holds only the controller (all ControlledShutdown needs)."""

    def __init__(self) -> None:
        self.controller: Any = None
        self.requests = 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dispatcher = Dispatcher(types.SimpleNamespace(metrics=None, config=None, controller=self.controller))  # type: ignore[arg-type]
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                self.requests += 1
                for buf in await dispatcher.handle(frame, "127.0.0.1:1", {}) or []:
                    writer.write(buf)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@contextlib.asynccontextmanager
async def served_controller(connect: str) -> AsyncIterator[tuple[Cluster, Any, ControllerEndpoint]]:
    """A cluster whose controller (broker 9) answers on a real endpoint, and brokers 1 and 2:
    (cluster, broker 1, the endpoint)."""
    endpoint = ControllerEndpoint()
    port = await endpoint.start()
    try:
        async with Cluster(connect, FAST) as c:
            ctl = await c.add(9, port=port)
            endpoint.controller = ctl.controller
            await c.active()
            b1 = await c.add(1, controller=False)
            await c.add(2, controller=False)
            yield c, b1, endpoint
    finally:
        await endpoint.stop()


def test_leadership_moves_before_the_broker_stops(connect):
    async def scenario() -> None:
        async with served_controller(connect) as (c, b1, endpoint):
            await c.create_topic("t", {0: [1, 2], 1: [2, 1]})
            await c.wait_state("t", 0, leader=1, isr=[1, 2])
            await c.wait_state("t", 1, leader=2, isr=[2, 1])
            assert await request_controlled_shutdown(b1.zk, 1, b1.epoch, b1.config)
            s0, s1 = await c.state("t", 0), await c.state("t", 1)
            assert (s0.leader, s0.isr, s1.leader, s1.isr) == (2, [2], 2, [2])
            assert endpoint.requests == 1
    run(scenario())


def test_partitions_that_cannot_move_are_retried_then_given_up(connect):
    async def scenario() -> None:
        async with served_controller(connect) as (c, b1, endpoint):
            await c.create_topic("t", {0: [1, 2]})
            s = await c.wait_state("t", 0, leader=1, isr=[1, 2])
            # its leader dropped 2 from the ISR: nobody else may lead
            await c.admin.set(znodes.state_path("t", 0), s.with_isr([1]).encode(), s.zk_version)
            assert not await request_controlled_shutdown(b1.zk, 1, b1.epoch, b1.config)
            assert endpoint.requests == 3  # controlled.shutdown.max.retries attempts
            assert (await c.state("t", 0)).leader == 1
    run(scenario())


def test_no_controller_or_an_unreachable_one_fails_after_the_retries(connect):
    async def scenario() -> None:
        async with Cluster(connect, FAST) as c:
            b1 = await c.add(1, controller=False)
            assert not await request_controlled_shutdown(b1.zk, 1, b1.epoch, b1.config)  # no /controller
            await c.add(9)  # registered at a port nobody listens on
            await c.active()
            assert not await request_controlled_shutdown(b1.zk, 1, b1.epoch, b1.config)
    run(scenario())


def test_the_controller_itself_shuts_down_directly_and_resigns(connect):
    async def scenario() -> None:
        async with Cluster(connect, FAST) as c:
            me = await c.add(1)
            await c.active()
            other = await c.add(2)
            await c.create_topic("t", {0: [1, 2]})
            await c.wait_state("t", 0, leader=1, isr=[1, 2])
            assert await request_controlled_shutdown(me.zk, 1, me.epoch, me.config, me.controller)
            await c.wait_state("t", 0, leader=2, isr=[2])
            assert not me.controller.is_active
            assert (await c.active()).broker_id == 2 and other.controller.epoch == 2
    run(scenario())
