"""A minimal HTTP endpoint for Prometheus on the broker's event loop: GET /metrics."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)


async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b"/"
            if path.split(b"?")[0] in (b"/metrics", b"/"):
                body = generate_latest(registry)
                head = f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\n"
            else:
                body = b"not found\n"
                head = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
            writer.write(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    log.info("metrics on http://%s:%d/metrics", host, server.sockets[0].getsockname()[1])
    return server
