"""One client connection: frames in, requests handled one after another, responses out in
request order (Kafka clients rely on it; the broker also mutes a connection while it works on
its request, which gives natural back-pressure).

Bad input never takes the broker down: an oversized or negative size prefix, an undecodable
header, an unknown API key or a malformed body closes this connection with a log line naming the
client; every other connection carries on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.encoder import encode
from gregor.protocol.errors import ErrorCode
from gregor.protocol.framing import FrameDecoder, FrameError
from gregor.server.dispatcher import REGISTRY, RequestContext, api_versions_body

if TYPE_CHECKING:
    from gregor.broker import Broker

log = logging.getLogger(__name__)

_ids = itertools.count(1)
MAX_QUEUED_FRAMES = 64
API_VERSIONS_V0_UNSUPPORTED = 0


class CloseConnection(Exception):
    pass


class KafkaConnection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.id = next(_ids)
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
        self.queue: deque[bytes] = deque()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._wakeup = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._reading_paused = False
        self._closed = False
        self._worker: asyncio.Task[None] | None = None
        self.state: dict[object, object] = {}  # RequestContext.connection_state

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # asyncio's or uvloop's TCP transport
        assert self.transport is not None
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.transport.set_write_buffer_limits(high=4 * 1024 * 1024)
        self.broker.connections.add(self)
        self._worker = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            self._abort()
            return
        if frames:
            self.queue.extend(frames)
            self._wakeup.set()
            if len(self.queue) >= MAX_QUEUED_FRAMES and self.transport and not self._reading_paused:
                self.transport.pause_reading()
                self._reading_paused = True

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._wakeup.set()
        self._can_write.set()
        self.broker.connections.discard(self)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- work --------------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while not self._closed:
                if not self.queue:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                frame = self.queue.popleft()
                if self._reading_paused and len(self.queue) < MAX_QUEUED_FRAMES // 2 and self.transport:
                    self.transport.resume_reading()
                    self._reading_paused = False
                response = await self.handle(frame)
                if response is not None and not self._closed and self.transport is not None:
                    for buf in response:
                        self.transport.write(buf)
                    if not self._can_write.is_set():
                        await self._can_write.wait()
        except CloseConnection:
            self._abort()
        except Exception:
            log.exception("unexpected error on connection from %s; closing it", self.peer)
            self._abort()

    def _abort(self) -> None:
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        self._abort()

    @property
    def idle(self) -> bool:
        return not self.queue

    async def handle(self, frame: bytes) -> list[bytes] | None:
        """Answer one request frame; returns the buffers of the size-prefixed response (None: no
        response)."""
        try:
            api_key, version, corr = codec.parse_header_prefix(frame)
        except codec.RequestDecodeError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            raise CloseConnection from None
        reg = REGISTRY.get(api_key)
        if reg is None:
            log.warning("closing connection from %s: unknown API key %d", self.peer, api_key)
            raise CloseConnection
        if not reg.min_version <= version <= reg.max_version:
            return self._unsupported_version(api_key, version, corr)
        try:
            header = codec.parse_header(frame, codec.is_flexible(api_key, version))
            request = codec.decode_request(api_key, version, frame, header.body_offset)
        except codec.RequestDecodeError as e:
            log.warning("closing connection from %s: malformed request: %s", self.peer, e)
            raise CloseConnection from None
        ctx = RequestContext(self.broker, header, self.peer.rsplit(":", 1)[0], self.state)
        started = time.perf_counter()
        try:
            result = await reg.handler(ctx, request)
        except CloseConnection:
            raise
        except Exception:
            log.exception("%s v%d from %s (client %s) failed", ApiKey(api_key).name, version, self.peer,
                          header.client_id)
            result = self._error_body(api_key, version, ErrorCode.unknown_server_error)
            if result is None:
                raise CloseConnection from None
        if self.broker.metrics_enabled:
            self.broker.metrics.request(api_key, time.perf_counter() - started)
        if result is None:
            return None
        head = codec.response_header(api_key, version, corr)
        if isinstance(result, list):
            size = len(head) + sum(len(b) for b in result)
            return [size.to_bytes(4, "big") + head, *result]
        body = result if isinstance(result, bytes) else encode(codec.response_schema(api_key, version), result)
        return [(len(head) + len(body)).to_bytes(4, "big") + head + body]

    def _unsupported_version(self, api_key: int, version: int, corr: int) -> list[bytes]:
        if api_key == ApiKey.API_VERSIONS:
            # Kafka answers with a v0 response carrying UNSUPPORTED_VERSION and its versions, so
            # that the client can retry with one it has in common.
            body = encode(codec.response_schema(api_key, API_VERSIONS_V0_UNSUPPORTED),
                          api_versions_body(ErrorCode.unsupported_version))
            return [(4 + len(body)).to_bytes(4, "big") + corr.to_bytes(4, "big", signed=True) + body]
        result = self._error_body(api_key, version, ErrorCode.unsupported_version)
        if result is None:
            log.warning("closing connection from %s: %s v%d is not supported", self.peer,
                        ApiKey(api_key).name, version)
            raise CloseConnection
        body = encode(codec.response_schema(api_key, version), result)
        head = codec.response_header(api_key, version, corr)
        return [(len(head) + len(body)).to_bytes(4, "big") + head + body]

    @staticmethod
    def _error_body(api_key: int, version: int, code: ErrorCode) -> dict[str, Any] | None:
        """A response carrying ``code`` at the top level, where the schema has such a field."""
        try:
            cls = codec.response_schema(api_key, version)
        except Exception:  # noqa: BLE001 - kio has no schema for that version
            return None
        if "error_code" not in getattr(cls, "__dataclass_fields__", {}):
            return None
        return {"error_code": code}
