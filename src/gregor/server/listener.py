"""The Kafka listener: accepts connections on ``listeners``, keeps the set of open ones, closes
idle ones (``connections.max.idle.ms``) and, at shutdown, lets requests in flight finish."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gregor.apis.services import Services
from gregor.config import BrokerConfig
from gregor.security.authenticator import ListenerSecurity
from gregor.server.connection import KafkaConnection, close_idle
from gregor.server.dispatcher import Dispatcher
from gregor.server.limits import ConnectionLimits

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 5.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a TLS handshake not done by then is dropped (a stalled or hostile client)


class Listener:
    """One of the broker's listeners (``listeners``): its security (TLS, SASL) comes with each of
    its connections. The broker's listeners share the connection limits, the dispatcher and the
    set of open connections."""

    def __init__(self, config: BrokerConfig, services: Services, security: ListenerSecurity | None = None,
                 limits: ConnectionLimits | None = None, dispatcher: Dispatcher | None = None,
                 connections: set[KafkaConnection] | None = None) -> None:
        self.config = config
        self.security = security
        self.limits = limits if limits is not None else ConnectionLimits(config)
        self.dispatcher = dispatcher if dispatcher is not None else Dispatcher(services)
        self.connections: set[KafkaConnection] = connections if connections is not None else set()
        self.server: asyncio.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int, serve: bool = True) -> int:
        """Bind (and with ``serve`` listen); returns the bound port. A broker binds before it joins
        its cluster (its registration names the port) and serves once it has joined
        (``start_serving``): a client must never hear from a broker that knows no brokers, no
        leaders and no controller (librdkafka forgets every broker on such an answer)."""
        loop = asyncio.get_running_loop()
        max_request = self.config["socket.request.max.bytes"]
        security = self.security
        ssl_context = security.ssl_context if security is not None else None
        self.server = await loop.create_server(
            lambda: KafkaConnection(self.dispatcher, self.limits, self.connections, max_request, security),
            host, port, reuse_address=True, backlog=1024, start_serving=serve, ssl=ssl_context,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if ssl_context is not None else None)
        if self.limits.max_idle_s is not None:
            self._idle_task = loop.create_task(self._close_idle_connections(self.limits.max_idle_s))
        return self.bound_port

    async def start_serving(self) -> None:
        assert self.server is not None
        await self.server.start_serving()

    @property
    def bound_port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    def stop_accepting(self) -> None:
        if self.server is not None:
            self.server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()

    async def close(self) -> None:
        """Stop accepting, let requests in flight finish (bounded), close every connection."""
        self.stop_accepting()
        if self._idle_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_TIMEOUT_S
        while any(not c.idle for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for c in list(self.connections):
            c.close()

    async def _close_idle_connections(self, max_idle: float) -> None:
        """connections.max.idle.ms: checked every tenth of the limit (at most every second)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(max_idle / 10, 0.01), 1.0))
            close_idle(self.connections, loop.time(), max_idle)
