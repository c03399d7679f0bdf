"""One client connection: frames in, requests handled one after another, responses out in
request order (Kafka clients rely on it; the broker also mutes a connection while it works on
its request, which gives natural back-pressure).

Bad input never takes the broker down: an oversized or negative size prefix, an undecodable
header, an unknown API key or a malformed body closes this connection with a log line naming the
client; every other connection carries on.

Memory a connection can hold is bounded whatever its peer does: reading pauses once
``MAX_QUEUED_FRAMES`` requests or ``MAX_QUEUED_BYTES`` are waiting (plus the one frame being read);
no further request is worked on while the transport holds more than ``WRITE_HIGH_WATER`` unsent
bytes (a peer that never reads stops being served, and is closed after connections.max.idle.ms);
large fetched ranges are read ``SEND_CHUNK`` bytes at a time as the socket drains. Limits across
connections (counts, queued.max.request.bytes, idle expiry) are in server/limits.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from typing import Any

from gregor.apis.handler import AUTHENTICATOR, CLOSE_AFTER_RESPONSE, LISTENER, PRINCIPAL, CloseConnection
from gregor.log.file_region import FileRegion
from gregor.protocol.framing import FrameDecoder, FrameError
from gregor.security.authenticator import AUTHENTICATION_TIMEOUT_S, Authenticator, ListenerSecurity
from gregor.server.dispatcher import Dispatcher
from gregor.server.limits import ConnectionLimits

log = logging.getLogger(__name__)

_ids = itertools.count(1)
MAX_QUEUED_FRAMES = 64
MAX_QUEUED_BYTES = 1 << 20
WRITE_HIGH_WATER = 1 << 20
SEND_CHUNK = 256 * 1024

# reasons reading is paused
_QUEUE_FULL, _NO_MEMORY, _NO_SLOT = 1, 2, 4
_FETCH = 1  # the api key of Fetch, the first byte pair of its frame


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatcher: Dispatcher, limits: ConnectionLimits, connections: set[Any],
                 max_request_bytes: int, security: ListenerSecurity | None = None) -> None:
        self.dispatcher = dispatcher
        self.security = security
        self.max_request_bytes = max_request_bytes
        self._auth: Authenticator | None = None
        self._auth_deadline: asyncio.TimerHandle | None = None
        self.connections = connections  # every open connection of the listener
        self.id = next(_ids)
        self.pool = limits.pool
        self.quotas = limits.quotas
        self.decoder = FrameDecoder(max_request_bytes, self._reserve)
        self.queue: deque[bytes] = deque()
        self._queued_bytes = 0
        self._held = 0  # bytes reserved in the request pool: queued, in progress and partial frames
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.host = "?"
        self._loop = asyncio.get_running_loop()
        self.last_active = self._loop.time()
        self.busy = False  # a request is being worked on
        self._waiting_fetch = False  # ... and it is a Fetch (a long poll)
        self.active = False  # counted against max.connections and served
        self._counted_ip = False
        self._paused = 0  # bit set of reasons reading is paused
        self._wakeup = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closed = False
        self._worker: asyncio.Task[None] | None = None
        self.state: dict[object, object] = {}  # RequestContext.connection_state

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # asyncio's or uvloop's TCP transport
        assert self.transport is not None
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = str(peer[0]) if peer else "?"
        if not self.quotas.admit_ip(self.host):
            log.info("closing connection from %s: the address already has max.connections.per.ip=%d",
                     self.peer, self.quotas.limit_for(self.host))
            self._abort()
            return
        self._counted_ip = True
        if self.security is not None and not self._secure(transport):
            return
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.connections.add(self)
        if self.quotas.has_slot():
            self._activate()
        elif len(self.quotas.waiting) < self.quotas.max_waiting:
            # as behind Kafka's blocked acceptor: the connection waits unread for a free slot
            self._pause(_NO_SLOT)
            self.quotas.waiting.append(self)
        else:
            log.info("closing connection from %s: max.connections=%d reached and %d connections waiting",
                     self.peer, self.quotas.max_connections, len(self.quotas.waiting))
            self._abort()

    def _secure(self, transport: asyncio.BaseTransport) -> bool:
        """The listener's security for this connection: its TLS principal, or on a SASL listener
        the authenticator (requests bounded by sasl.server.max.receive.size until it completes,
        and the connection closed if it has not within AUTHENTICATION_TIMEOUT_S)."""
        security = self.security
        assert security is not None
        self.state[LISTENER] = security.listener
        if security.ssl_context is not None:
            try:
                self.state[PRINCIPAL] = security.tls_principal(transport)
            except ValueError as e:  # no ssl.principal.mapping.rules rule matched
                log.info("closing TLS connection from %s: %s", self.peer, e)
                self._abort()
                return False
        if security.sasl is not None:
            self._auth = self.state[AUTHENTICATOR] = Authenticator(security.sasl)
            self.decoder.max_frame_bytes = min(self.max_request_bytes, security.sasl.max_receive_size)
            self._auth_deadline = self._loop.call_later(AUTHENTICATION_TIMEOUT_S, self._authentication_timed_out)
        return True

    def _authentication_timed_out(self) -> None:
        if self._auth is not None and not self._auth.authenticated and not self._closed:
            log.info("closing connection from %s: no SASL authentication within %.0f s", self.peer,
                     AUTHENTICATION_TIMEOUT_S)
            self._abort()

    def _after_request(self) -> bool:
        """After a request was answered: False if the connection must close now (a failed
        authentication, a refused handshake)."""
        if self.state.pop(CLOSE_AFTER_RESPONSE, False):
            self._abort()
            return False
        auth = self._auth
        if auth is not None and auth.authenticated and self.decoder.max_frame_bytes != self.max_request_bytes:
            self.decoder.max_frame_bytes = self.max_request_bytes
            if self._auth_deadline is not None:
                self._auth_deadline.cancel()
                self._auth_deadline = None
        return True

    def _activate(self) -> None:
        self.active = True
        self.quotas.active += 1
        self.last_active = self._loop.time()
        self._resume(_NO_SLOT)
        self._worker = self._loop.create_task(self._run())

    def data_received(self, data: bytes) -> None:
        self.last_active = self._loop.time()
        self._take(data)

    def _take(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            self._abort()
            return
        if frames:
            self.queue.extend(frames)
            self._queued_bytes += sum(len(f) for f in frames)
            self._wakeup.set()
            if len(self.queue) >= MAX_QUEUED_FRAMES or self._queued_bytes >= MAX_QUEUED_BYTES:
                self._pause(_QUEUE_FULL)
        if self.decoder.blocked and not self._closed:
            # queued.max.request.bytes reached: read nothing more until a request is answered
            self._pause(_NO_MEMORY)
            self.pool.wait(self._memory_available)

    def _memory_available(self) -> None:
        if self._closed:
            return
        self._resume(_NO_MEMORY)
        self._take(b"")  # parse what is already buffered; may block again

    def _reserve(self, size: int) -> bool:
        if not self.pool.try_reserve(size):
            return False
        self._held += size
        return True

    def _release(self, size: int) -> None:
        if not self._closed:
            self._held -= size
            self.pool.release(size)

    def _pause(self, reason: int) -> None:
        if not self._paused and self.transport is not None:
            self.transport.pause_reading()
        self._paused |= reason

    def _resume(self, reason: int) -> None:
        if self._paused & reason:
            self._paused &= ~reason
            if not self._paused and self.transport is not None and not self._closed:
                self.transport.resume_reading()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self.busy and self._waiting_fetch and self._worker is not None:
            # a Fetch long poll: nobody is left to read its answer, so it stops waiting now (other
            # requests finish: an append or a coordinator write must not stop half way)
            self._worker.cancel()
        for value in list(self.state.values()):
            closed = getattr(value, "connection_closed", None)  # what lives as long as the connection
            if closed is not None:
                closed()
        self._wakeup.set()
        self._can_write.set()
        self.connections.discard(self)
        self.pool.forget(self._memory_available)
        held, self._held = self._held, 0
        if held:
            self.pool.release(held)
        if self._counted_ip:
            self._counted_ip = False
            self.quotas.release_ip(self.host)
        if self.active:
            self.active = False
            self.quotas.active -= 1
            while self.quotas.waiting and self.quotas.has_slot():
                nxt = self.quotas.waiting.popleft()
                if not nxt._closed:
                    nxt._activate()
        elif self._paused & _NO_SLOT:
            try:
                self.quotas.waiting.remove(self)
            except ValueError:
                pass

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self.last_active = self._loop.time()
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
                self._queued_bytes -= len(frame)
                if (self._paused & _QUEUE_FULL and len(self.queue) < MAX_QUEUED_FRAMES // 2
                        and self._queued_bytes < MAX_QUEUED_BYTES // 2):
                    self._resume(_QUEUE_FULL)
                self.busy = True
                self._waiting_fetch = len(frame) >= 2 and frame[0] == 0 and frame[1] == _FETCH
                try:
                    response = await self.dispatcher.handle(frame, self.peer, self.state)
                finally:
                    self.busy = False
                    self.last_active = self._loop.time()
                    self._release(len(frame))
                del frame
                if response is None:
                    if self._auth is not None and not self._after_request():
                        return
                    continue
                if len(response) == 1 and not isinstance(response[0], FileRegion):
                    # the common case (every response but a large fetch): no coroutine of its own
                    if not self._closed and self.transport is not None:
                        self.transport.write(response[0])
                        if not self._can_write.is_set():
                            await self._can_write.wait()
                else:
                    await self._send(response)
                if self._auth is not None and not self._after_request():
                    return
        except CloseConnection:
            self._abort()
        except Exception:
            log.exception("unexpected error on connection from %s; closing it", self.peer)
            self._abort()

    async def _send(self, response: list[bytes | FileRegion]) -> None:
        """Write a response; file regions are read in chunks, each after the socket drained, and
        nothing more is worked on while the transport holds more than its high-water mark."""
        try:
            for buf in response:
                if self._closed or self.transport is None:
                    return
                if not isinstance(buf, FileRegion):
                    self.transport.write(buf)
                    continue
                done = 0
                while done < buf.length:
                    if not self._can_write.is_set():
                        await self._can_write.wait()
                        if self._closed:
                            return
                    chunk = buf.read(done, min(SEND_CHUNK, buf.length - done))
                    if not chunk:
                        log.error("segment data for a fetch response to %s vanished; closing the connection",
                                  self.peer)
                        raise CloseConnection
                    self.transport.write(chunk)
                    done += len(chunk)
                self.last_active = self._loop.time()
            if not self._can_write.is_set():
                await self._can_write.wait()
        finally:
            for buf in response:
                if isinstance(buf, FileRegion):
                    buf.close()

    def _abort(self) -> None:
        self._closed = True
        if self._auth_deadline is not None:
            self._auth_deadline.cancel()
            self._auth_deadline = None
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        self._abort()

    @property
    def idle(self) -> bool:
        return not self.queue


def close_idle(connections: set[Any], now: float, max_idle: float) -> int:
    """Close connections that read and wrote nothing for ``max_idle`` seconds and are not working
    on a request; returns how many. As in Kafka, one waiting for request memory is not exempt."""
    n = 0
    for c in list(connections):
        if c.active and not c.busy and not c._closed and now - c.last_active > max_idle:
            log.info("closing connection from %s: idle for more than connections.max.idle.ms", c.peer)
            c.close()
            n += 1
    return n
