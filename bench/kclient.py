"""A minimal asyncio Kafka protocol client for the benchmarks: one request in flight per
connection, requests encoded and responses decoded with the schema-generated codec (kio)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from gregor.protocol import codec


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
        header = struct.pack(">hhih", api_key, version, self.corr, len(self.client_id)) + self.client_id
        if codec.is_flexible(api_key, version):
            header += b"\x00"
        payload = header + codec.encode_body(codec.build(codec.request_schema(api_key, version), body))
        return struct.pack(">i", len(payload)) + payload

    async def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.writer.write(self.encode(api_key, version, body))
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        frame = await self.reader.readexactly(size)
        flexible = api_key != 18 and codec.response_schema(api_key, version).__flexible__
        return codec.decode_response(api_key, version, frame[5 if flexible else 4 :])

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
