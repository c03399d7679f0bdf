"""A broker without sockets: its storage opened on a data directory, its services called directly
on one event loop. Requests are built from plain dicts with kio's field names and go through the
same encoder and decoder as on the wire, so a handler sees exactly what a client's bytes give."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from gregor.apis import REGISTRY
from gregor.apis.handler import RequestContext
from gregor.apis.services import Services
from gregor.broker import Broker
from gregor.config import BrokerConfig
from gregor.log.file_region import FileRegion
from gregor.protocol import codec
from gregor.protocol.encoder import encode

CLIENT_ID = "in-process-test"


def request_header(api_key: int, version: int, correlation_id: int = 1, client_id: str | None = CLIENT_ID,
                   flexible: bool | None = None) -> bytes:
    """Request header v1, or v2 (with an empty tagged-field section) for flexible versions
    (``flexible=None``: as the schema says; give it for versions kio has no schema for)."""
    head = api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + correlation_id.to_bytes(4, "big", signed=True)
    if client_id is None:
        head += (-1).to_bytes(2, "big", signed=True)
    else:
        raw = client_id.encode()
        head += len(raw).to_bytes(2, "big") + raw
    if (codec.is_flexible(api_key, version) if flexible is None else flexible):
        head += b"\x00"
    return head


def request_frame(api_key: int, version: int, body: dict[str, Any], correlation_id: int = 1,
                  client_id: str | None = CLIENT_ID) -> bytes:
    """A request frame as the connection hands it to the dispatcher (without its size prefix)."""
    return request_header(api_key, version, correlation_id, client_id) + encode(
        codec.request_schema(api_key, version), body)


def decode_request(api_key: int, version: int, body: dict[str, Any]) -> tuple[codec.RequestHeader, Any]:
    """The header and the kio request object the dispatcher would pass to the handler."""
    frame = request_frame(api_key, version, body)
    header = codec.parse_header(frame, codec.is_flexible(api_key, version))
    return header, codec.decode_request(api_key, version, frame, header.body_offset)


def response_body(api_key: int, version: int, result: Any) -> bytes:
    """A handler's answer (dict, bytes or list of buffers) as the response body bytes."""
    if isinstance(result, dict):
        return encode(codec.response_schema(api_key, version), result)
    if isinstance(result, bytes):
        return result
    return b"".join(b.read(0, b.length) if isinstance(b, FileRegion) else b for b in result)


def split_response(api_key: int, version: int, buffers: list[Any]) -> tuple[int, Any]:
    """The dispatcher's size-prefixed response buffers as (correlation id, kio response object)."""
    data = b"".join(buffers)
    size = int.from_bytes(data[:4], "big")
    assert size == len(data) - 4, (size, len(data))
    head = codec.response_header(api_key, version, 0)
    return int.from_bytes(data[4:8], "big", signed=True), codec.decode_response(api_key, version, data[4 + len(head):])


class InProcessBroker:
    """``Broker(config)`` with ``open_storage()`` done (config: ``settings`` over Kafka's defaults,
    the first rebalance not delayed); ``start_groups()`` loads the group coordinator when a test
    needs it. ``close()`` stops what was started and closes the logs."""

    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.config = BrokerConfig.from_mapping(
            {"log.dirs": str(data_dir), "group.initial.rebalance.delay.ms": "0", **(settings or {})})
        self.broker = self.run(self._open())
        self.groups_started = False

    async def _open(self) -> Broker:
        broker = Broker(self.config)
        broker.open_storage()
        return broker

    @property
    def services(self) -> Services:
        return self.broker.services

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def start_groups(self) -> None:
        self.run(self.broker.replicas.start())  # leadership of the partitions there are (one node: all)
        self.run(self.broker.groups.start())
        self.run(self.broker.groups.wait_loaded())
        self.groups_started = True

    def context(self, api_key: int, version: int, client_host: str = "127.0.0.1",
                connection_state: dict[Any, Any] | None = None) -> RequestContext:
        header = codec.RequestHeader(api_key, version, 1, CLIENT_ID, 0)
        return RequestContext(self.services, header, client_host, {} if connection_state is None else connection_state)

    def handle(self, api_key: int, version: int, body: dict[str, Any],
               connection_state: dict[Any, Any] | None = None) -> Any:
        """The handler's own answer (a dict, body bytes, a list of buffers, or None)."""
        header, request = decode_request(api_key, version, body)
        ctx = RequestContext(self.services, header, "127.0.0.1", {} if connection_state is None else connection_state)
        return self.run(REGISTRY[api_key].handler(ctx, request))

    def call(self, api_key: int, version: int, body: dict[str, Any],
             connection_state: dict[Any, Any] | None = None) -> Any:
        """The answer as the client decodes it (a kio response object), or None (no response)."""
        result = self.handle(api_key, version, body, connection_state)
        if result is None:
            return None
        return codec.decode_response(api_key, version, response_body(api_key, version, result))

    def close(self) -> None:
        if self.groups_started:
            self.run(self.broker.groups.stop())
        self.broker.logs.shutdown()
        self.run(_cancel_pending())
        self.run(self.loop.shutdown_asyncgens())
        self.loop.close()


async def _cancel_pending() -> None:
    """As asyncio.run ends: what is still pending (a closed connection's worker) is cancelled."""
    pending = asyncio.all_tasks() - {asyncio.current_task()}
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


class ServedBroker:
    """An in-process broker listening on 127.0.0.1 (an ephemeral port) with its event loop in a
    background thread, for blocking clients such as the admin tools. While it serves, the test
    reaches the broker only through ``on_loop``."""

    def __init__(self, node: InProcessBroker) -> None:
        from gregor.server.listener import Listener

        self.node = node
        self.listener = Listener(node.config, node.services)
        self.port: int = node.run(self.listener.start("127.0.0.1", 0))
        node.services.cluster.set_endpoint("127.0.0.1", self.port)
        self._thread = threading.Thread(target=node.loop.run_forever, name="in-process-broker", daemon=True)
        self._thread.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the broker's loop (between requests) and return what it returns."""
        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.node.loop).result(10)

    def stop(self) -> None:
        self.node.loop.call_soon_threadsafe(self.node.loop.stop)
        self._thread.join(10)
        self.node.run(self.listener.close())
