"""The benchmarks' asyncio Kafka client: one request in flight per connection. Requests are
framed and responses decoded by ``gregor.admin.wire_client`` (the blocking client's functions);
this adds only the asyncio transport, so that one process drives hundreds of connections."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from gregor.admin.wire_client import decode_response_frame, request_frame


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id.encode()
        self.corr = 0

    @classmethod
    async def open(cls, bootstrap: str, client_id: str = "bench") -> Connection:
        host, port = bootstrap.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 24)
        return cls(reader, writer, client_id)

    def encode(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        self.corr += 1
        return request_frame(api_key, version, self.corr, body, self.client_id)

    async def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.writer.write(self.encode(api_key, version, body))
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        _corr, response = decode_response_frame(api_key, version, await self.reader.readexactly(size))
        return response

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
