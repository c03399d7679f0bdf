"""The benchmarks' asyncio Kafka client: one request in flight per connection, so that one
process drives hundreds of connections. Headers and responses go through
``gregor.admin.wire_client`` (its ``request_header`` and ``decode_response_frame``); this adds the
asyncio transport.

Request bodies are written by kio's writer over an entity built from the dict
(``tests/support/kio_entities.py``), as this client always did, and not by Gregor's encoder like
the other clients: on a small machine the client shares the CPUs with the broker, and with the
encoder (about 4x cheaper per OffsetCommit) bench/coordinator.py's commit figures read 1.6-1.9x
higher against the same broker (measured for issue 11). Keeping the client's cost keeps the
figures comparable with earlier runs; switching is one line in ``encode``.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from tests.support.kio_entities import build, kio_bytes  # noqa: E402

from gregor.admin.wire_client import decode_response_frame, request_header  # noqa: E402
from gregor.protocol import codec  # noqa: E402


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
        payload = request_header(api_key, version, self.corr, self.client_id)
        payload += kio_bytes(build(codec.request_schema(api_key, version), body))
        return struct.pack(">i", len(payload)) + payload

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
