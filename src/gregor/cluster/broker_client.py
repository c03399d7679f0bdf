"""A broker's connection to another broker (Kafka's NetworkClient for one destination): replica
fetchers and controlled shutdown use it.

One asyncio connection, opened on first use and reopened after a failure; requests are answered
in order (Kafka brokers answer a connection's requests in order), so several may be in flight.
Every failure (refused, reset, timed out, a response that does not decode) surfaces as
``BrokerUnreachable`` and closes the connection; the caller decides when to try again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from typing import Any

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.client_frames import SIZE, decode_response_frame, request_frame
from gregor.security.client import ClientSecurity
from gregor.security.sasl import SaslAuthenticationError
from gregor.security.sasl.plain import plain_client_token
from gregor.security.sasl.scram import ScramClient

log = logging.getLogger(__name__)


class BrokerUnreachable(ConnectionError):
    pass


REAUTH_AT = 0.85  # a connection whose SASL session has a lifetime is replaced at 85% of it
REAUTH_MARGIN_S = 1.0  # ... and at least this long before it ends (half the lifetime at most)


def renew_after_s(lifetime_ms: int) -> float:
    """When a connection whose SASL session lasts ``lifetime_ms`` is replaced: at 85% of it, but at
    least a second before its end (at most half-way), so that a request sent just before the
    renewal is still inside the session when a loaded broker reads it (a 2 s session left 300 ms)."""
    lifetime = lifetime_ms / 1000
    return lifetime - max(lifetime * (1 - REAUTH_AT), min(REAUTH_MARGIN_S, lifetime / 2))


# The security every broker-to-broker connection of this process uses (the inter-broker
# listener's: TLS, SASL), set once by the cluster's assembly; None: PLAINTEXT.
_inter_broker_security: ClientSecurity | None = None


def set_inter_broker_security(security: ClientSecurity | None) -> None:
    global _inter_broker_security
    _inter_broker_security = security


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, security: ClientSecurity,
                       client_id: str, timeout: float, who: str) -> int:
    """SaslHandshake v1 and SaslAuthenticate v2 rounds for ``security``'s mechanism on a new
    connection (the admin client does the same); returns the session lifetime the broker gave
    (ms, 0: none). Raises BrokerUnreachable with the server's message when the broker refuses."""
    mechanism = security.sasl_mechanism
    assert mechanism is not None

    async def round_trip(api_key: int, version: int, corr: int, body: dict[str, Any]) -> Any:
        writer.write(request_frame(api_key, version, corr, body, client_id))
        head = await asyncio.wait_for(reader.readexactly(4), timeout)
        (size,) = SIZE.unpack(head)
        frame = await asyncio.wait_for(reader.readexactly(size), timeout)
        return decode_response_frame(api_key, version, frame)[1]

    try:
        hs = await round_trip(ApiKey.SASL_HANDSHAKE, 1, 1, {"mechanism": mechanism})
        if hs.error_code:
            raise BrokerUnreachable(f"{who} refused SASL mechanism {mechanism} (error {hs.error_code}; it serves "
                                    f"{', '.join(hs.mechanisms) or 'none'})")
        corr = 2
        lifetime_ms = 0

        async def step(token: bytes) -> bytes:
            nonlocal corr, lifetime_ms
            r = await round_trip(ApiKey.SASL_AUTHENTICATE, 2, corr, {"auth_bytes": token})
            corr += 1
            if r.error_code:
                raise BrokerUnreachable(f"authentication to {who} as {security.username} failed: {r.error_message}")
            lifetime = r.session_lifetime
            lifetime_ms = int(lifetime.total_seconds() * 1000) if hasattr(lifetime, "total_seconds") else int(lifetime)
            return bytes(r.auth_bytes)

        if mechanism == "PLAIN":
            await step(plain_client_token(security.username, security.password))
        else:
            scram = ScramClient(mechanism, security.username, security.password)
            server_first = await step(scram.first())
            scram.verify(await step(scram.final(server_first)))
        return lifetime_ms
    except SaslAuthenticationError as e:
        raise BrokerUnreachable(f"authentication to {who} failed: {e}") from None
    except (TimeoutError, OSError, asyncio.IncompleteReadError) as e:
        raise BrokerUnreachable(f"authentication to {who} failed: {e or type(e).__name__}") from None


class BrokerClient:
    def __init__(self, node_id: int, host: str, port: int, client_id: str,
                 request_timeout_ms: int = 30000, max_frame_bytes: int = 200 * 1024 * 1024,
                 security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.security = security if security is not None else _inter_broker_security
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.max_frame_bytes = max_frame_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._pending: deque[tuple[int, int, int, asyncio.Future[Any]]] = deque()
        self._reading: asyncio.Task[None] | None = None
        self._corr = itertools.count(1)
        self._session_ends: float | None = None  # monotonic; when to authenticate a new connection

    def __repr__(self) -> str:
        return f"broker {self.node_id} ({self.host}:{self.port})"

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None:
                return self._writer
            security = self.security
            tls = security.ssl_context if security is not None else None
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, ssl=tls, server_hostname=self.host if tls else None),
                    self.request_timeout)
            except (TimeoutError, OSError) as e:  # ssl.SSLError is an OSError
                raise BrokerUnreachable(f"cannot connect to {self}: {e or type(e).__name__}") from None
            self._session_ends = None
            if security is not None and security.sasl_mechanism:
                try:
                    lifetime_ms = await authenticate(reader, writer, security, self.client_id, self.request_timeout,
                                                     str(self))
                except BrokerUnreachable:
                    writer.close()
                    raise
                if lifetime_ms > 0:  # KIP-368: a new session (a new connection) before this one ends
                    self._session_ends = time.monotonic() + renew_after_s(lifetime_ms)
            self._reader, self._writer = reader, writer
            self._reading = asyncio.get_running_loop().create_task(self._read_responses(reader))
            return writer

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send one request and return its decoded response (kio dataclass)."""
        if self._session_ends is not None and time.monotonic() >= self._session_ends and not self._pending:
            # the broker closes a connection whose SASL session ended (connections.max.reauth.ms):
            # authenticate a new one first (nothing is in flight on this one)
            self._fail(BrokerUnreachable(f"{self}: SASL session renewed"))
        writer = await self._connect()
        corr = next(self._corr) & 0x7FFFFFFF
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((corr, api_key, version, fut))
        try:
            writer.write(request_frame(api_key, version, corr, body, self.client_id))
            return await asyncio.wait_for(fut, self.request_timeout)
        except TimeoutError:
            self._fail(BrokerUnreachable(f"{self} did not answer within {self.request_timeout:.0f} s"))
            raise BrokerUnreachable(f"{self} did not answer within {self.request_timeout:.0f} s") from None
        except (OSError, RuntimeError) as e:
            self._fail(BrokerUnreachable(f"{self}: {e}"))
            raise BrokerUnreachable(f"{self}: {e}") from None

    async def _read_responses(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = SIZE.unpack(head)
                if not 4 <= size <= self.max_frame_bytes:
                    raise BrokerUnreachable(f"{self} sent a frame of {size} bytes")
                frame = await reader.readexactly(size)
                if not self._pending:
                    raise BrokerUnreachable(f"{self} answered a request that was not sent")
                corr, api_key, version, fut = self._pending.popleft()
                got, response = decode_response_frame(api_key, version, frame)
                if got != corr:
                    raise BrokerUnreachable(f"{self} answered request {got} where {corr} was expected")
                if not fut.done():
                    fut.set_result(response)
        except asyncio.CancelledError:
            raise
        except BrokerUnreachable as e:
            self._fail(e)
        except (OSError, asyncio.IncompleteReadError) as e:
            self._fail(BrokerUnreachable(f"connection to {self} lost: {e or type(e).__name__}"))
        except Exception as e:  # noqa: BLE001 - an undecodable response ends the connection
            self._fail(BrokerUnreachable(f"{self} sent a response that does not decode: {e}"))

    def _fail(self, error: BrokerUnreachable) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        reading, self._reading = self._reading, None
        if reading is not None and reading is not asyncio.current_task():
            reading.cancel()
        if writer is not None:
            writer.close()
        while self._pending:
            *_, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(error)

    async def close(self) -> None:
        reading = self._reading
        self._fail(BrokerUnreachable(f"connection to {self} closed"))
        if reading is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await reading


class BrokerClients:
    """One client per broker for a part that talks to whichever broker leads something (the
    telemetry sink, the followed groups): ``for_broker`` returns the client of a broker's current
    endpoint, replacing the client when the broker came back at another address."""

    def __init__(self, client_id: str, request_timeout_ms: int) -> None:
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self._clients: dict[int, BrokerClient] = {}

    async def for_broker(self, node_id: int, host: str, port: int) -> BrokerClient:
        client = self._clients.get(node_id)
        if client is not None and (client.host, client.port) == (host, port):
            return client
        if client is not None:
            await client.close()
        client = self._clients[node_id] = BrokerClient(node_id, host, port, self.client_id,
                                                       request_timeout_ms=self.request_timeout_ms)
        return client

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
        self._clients.clear()
