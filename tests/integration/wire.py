"""A raw Kafka-protocol client over a plain socket, for tests that need byte-level control."""

from __future__ import annotations

import socket
import struct
from typing import Any

from gregor.protocol import codec


class Wire:
    def __init__(self, bootstrap: str, timeout: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request_bytes(self, api_key: int, version: int, body: dict[str, Any], client_id: str = "wire") -> bytes:
        self.corr += 1
        cid = client_id.encode()
        header = struct.pack(">hhih", api_key, version, self.corr, len(cid)) + cid
        if codec.is_flexible(api_key, version):
            header += b"\x00"
        payload = header + codec.encode_body(codec.build(codec.request_schema(api_key, version), body))
        return struct.pack(">i", len(payload)) + payload

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send_raw(self.request_bytes(api_key, version, body))
        frame = self.recv_frame()
        corr = struct.unpack_from(">i", frame, 0)[0]
        assert corr == self.corr
        flexible_header = api_key != 18 and codec.response_schema(api_key, version).__flexible__
        return codec.decode_response(api_key, version, frame[5 if flexible_header else 4 :])

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
