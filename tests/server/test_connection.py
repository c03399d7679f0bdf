"""Connections (server/connection.py, server/listener.py) over real sockets on 127.0.0.1: request
order, bad input, back-pressure and the connection limits, with the broker's services in process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.records import build_batch
from gregor.server.connection import MAX_QUEUED_FRAMES
from gregor.server.listener import Listener
from tests.support.in_process import request_frame, split_response

API_VERSIONS = {"client_software_name": "test", "client_software_version": "1"}


@contextlib.asynccontextmanager
async def serving(node) -> AsyncIterator[Listener]:
    listener = Listener(node.config, node.services)
    await listener.start("127.0.0.1", 0)
    try:
        yield listener
    finally:
        await listener.close()


async def connect(port: int, receive_buffer: int | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=1 << 22)


def sized(frame: bytes) -> bytes:
    return len(frame).to_bytes(4, "big") + frame


async def read_response(reader: asyncio.StreamReader, timeout: float = 5) -> bytes:
    size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), timeout), "big")
    return size.to_bytes(4, "big") + await asyncio.wait_for(reader.readexactly(size), timeout)


async def closed_by_broker(reader: asyncio.StreamReader, timeout: float = 5) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except ConnectionResetError:
        return True


async def api_versions(reader, writer, corr: int) -> int:
    writer.write(sized(request_frame(ApiKey.API_VERSIONS, 3, API_VERSIONS, correlation_id=corr)))
    got, resp = split_response(ApiKey.API_VERSIONS, 3, [await read_response(reader)])
    assert resp.error_code == 0
    return got


def test_pipelined_requests_are_answered_in_request_order(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    n = 3 * MAX_QUEUED_FRAMES  # more than a connection queues: reading pauses and resumes

    async def run() -> None:
        async with serving(node) as listener:
            reader, writer = await connect(listener.bound_port)
            frames = [request_frame(ApiKey.API_VERSIONS, 3, API_VERSIONS, correlation_id=i) if i % 2 else
                      request_frame(ApiKey.METADATA, 12, {"topics": [{"name": "t", "topic_id": None}]},
                                    correlation_id=i) for i in range(n)]
            writer.write(b"".join(sized(f) for f in frames))
            got = []
            for i in range(n):
                key = ApiKey.API_VERSIONS if i % 2 else ApiKey.METADATA
                corr, resp = split_response(key, 3 if i % 2 else 12, [await read_response(reader)])
                got.append(corr)
                if key == ApiKey.METADATA:
                    assert [t.name for t in resp.topics] == ["t"]
            assert got == list(range(n))
            (conn,) = listener.connections
            assert conn.idle
            writer.close()

    node.run(run())


def test_bad_input_closes_only_its_connection(in_process_broker_factory):
    node = in_process_broker_factory({"socket.request.max.bytes": "10000"})

    async def run() -> None:
        async with serving(node) as listener:
            good_r, good_w = await connect(listener.bound_port)
            for prefix in ((-1).to_bytes(4, "big", signed=True), (10001).to_bytes(4, "big")):
                bad_r, bad_w = await connect(listener.bound_port)
                bad_w.write(prefix)
                assert await closed_by_broker(bad_r)
                bad_w.close()
            bad_r, bad_w = await connect(listener.bound_port)
            bad_w.write(sized((999).to_bytes(2, "big") + b"\x00\x00\x00\x00\x00\x01\xff\xff"))  # unknown API
            assert await closed_by_broker(bad_r)
            assert await api_versions(good_r, good_w, 42) == 42
            assert len(listener.connections) == 1
            good_w.close()

    node.run(run())


def test_a_peer_that_does_not_read_stops_being_served(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    batch = build_batch([(None, b"x" * 250_000)])
    node.services.logs.get("t", 0).append(batch)
    fetch = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1,
             "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                       "partition_max_bytes": 1 << 20}]}]}
    n = 40  # 10 MB of responses: more than the socket buffers and the transport's high-water mark

    async def run() -> None:
        loop = asyncio.get_running_loop()
        async with serving(node) as listener:
            # a plain socket, so that nothing reads it until the test does
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.setblocking(False)
                await loop.sock_connect(sock, ("127.0.0.1", listener.bound_port))
                await loop.sock_sendall(sock, b"".join(
                    sized(request_frame(ApiKey.FETCH, 12, fetch, correlation_id=i)) for i in range(n)))
                await asyncio.sleep(0.5)
                (conn,) = listener.connections
                assert len(conn.queue) > n // 2  # requests wait: nothing is answered into a full buffer
                received = bytearray()

                async def take(count: int) -> bytes:
                    while len(received) < count:
                        chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 5)
                        assert chunk, "closed by the broker"
                        received.extend(chunk)
                    out = bytes(received[:count])
                    del received[:count]
                    return out

                for i in range(n):
                    head = await take(4)
                    corr, resp = split_response(ApiKey.FETCH, 12, [head + await take(int.from_bytes(head, "big"))])
                    assert corr == i and resp.responses[0].partitions[0].records == batch
                assert conn.idle

    node.run(run())


def test_max_connections_per_ip(in_process_broker_factory):
    node = in_process_broker_factory({"max.connections.per.ip": "1"})

    async def run() -> None:
        async with serving(node) as listener:
            first_r, first_w = await connect(listener.bound_port)
            assert await api_versions(first_r, first_w, 1) == 1
            second_r, second_w = await connect(listener.bound_port)
            assert await closed_by_broker(second_r)
            assert await api_versions(first_r, first_w, 2) == 2
            first_w.close()
            await asyncio.sleep(0.1)
            third_r, third_w = await connect(listener.bound_port)
            assert await api_versions(third_r, third_w, 3) == 3
            third_w.close()

    node.run(run())


def test_beyond_max_connections_a_connection_waits_for_a_free_slot(in_process_broker_factory):
    node = in_process_broker_factory({"max.connections": "1"})

    async def run() -> None:
        async with serving(node) as listener:
            first_r, first_w = await connect(listener.bound_port)
            assert await api_versions(first_r, first_w, 1) == 1
            second_r, second_w = await connect(listener.bound_port)
            second_w.write(sized(request_frame(ApiKey.API_VERSIONS, 3, API_VERSIONS, correlation_id=2)))
            waiting = asyncio.ensure_future(read_response(second_r))
            await asyncio.sleep(0.3)
            assert not waiting.done()  # accepted, not read
            first_w.close()
            corr, _ = split_response(ApiKey.API_VERSIONS, 3, [await waiting])
            assert corr == 2
            second_w.close()

    node.run(run())


def test_idle_connections_are_closed(in_process_broker_factory):
    node = in_process_broker_factory({"connections.max.idle.ms": "200"})

    async def run() -> None:
        async with serving(node) as listener:
            reader, writer = await connect(listener.bound_port)
            assert await api_versions(reader, writer, 1) == 1
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await closed_by_broker(reader, timeout=3)
            assert loop.time() - started >= 0.15
            assert not listener.connections
            writer.close()

    node.run(run())


def test_a_long_poll_stops_waiting_when_its_connection_closes(in_process_broker):
    """A Fetch waiting for data (max wait 30 s) on a connection the client closes stops at once:
    nobody is left to read its answer."""
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    fetch = {"replica_id": -1, "max_wait": 30_000, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1,
             "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                       "partition_max_bytes": 1 << 20}]}]}

    async def run() -> None:
        async with serving(node) as listener:
            reader, writer = await connect(listener.bound_port)
            writer.write(sized(request_frame(ApiKey.FETCH, 12, fetch, correlation_id=1)))
            await writer.drain()
            conn = await wait_until(lambda: next((c for c in listener.connections if c.busy), None))
            worker = conn._worker
            writer.close()
            await asyncio.wait_for(asyncio.shield(asyncio.ensure_future(_done(worker))), 2)
            assert worker.cancelled()

    asyncio.run(run())


async def wait_until(cond, timeout: float = 5):
    deadline = asyncio.get_running_loop().time() + timeout
    while (v := cond()) is None or v is False:
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)
    return v


async def _done(task) -> None:
    with contextlib.suppress(BaseException):
        await task
