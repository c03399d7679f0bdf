"""A Kafka protocol client over a plain blocking socket: the one place the clients of this
repository (the admin client, the integration tests, the benchmarks) frame requests and read
responses.

A request body is a plain dict with kio's field names, encoded for the version asked with
Gregor's schema-driven encoder (``gregor.protocol.encoder``: keys the version lacks are ignored,
missing keys take the schema default, so pass ``None`` where a null is meant); a response is
decoded with kio into its dataclass. Nothing is negotiated here: the caller names the version
(the admin client picks it from ApiVersions).

- ``request_header`` / ``request_frame`` / ``decode_response_frame`` (from
  ``gregor.protocol.client_frames``, re-exported): the bytes of a request, for callers with their
  own transport or that send damaged frames on purpose, and a response frame's decoding;
- ``WireClient``: one connection, one request at a time, plus ``send_raw`` and ``recv_frame``
  for byte-level tests.
"""

from __future__ import annotations

import socket
from typing import Any

from gregor.protocol.client_frames import SIZE as _SIZE
from gregor.protocol.client_frames import decode_response_frame, request_frame, request_header

__all__ = ["WireClient", "decode_response_frame", "request_frame", "request_header"]

class WireClient:
    """One blocking connection. ``bootstrap`` is ``host:port``; socket errors are OSErrors (a
    connection the broker closed: ConnectionError)."""

    client_id: str = "wire"
    corr: int = 0  # correlation id of the last request

    def __init__(self, bootstrap: str, timeout: float = 10, client_id: str = "wire") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def request_bytes(self, api_key: int, version: int, body: dict[str, Any], client_id: str | None = None) -> bytes:
        """The next request's frame, not sent (tests damage it first, or send many at once)."""
        self.corr += 1
        return request_frame(api_key, version, self.corr, body, self.client_id if client_id is None else client_id)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        """The next response frame, without its size."""
        (size,) = _SIZE.unpack(self._recv_exact(4))
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
        """Send one request and return its decoded response."""
        self.send_raw(self.request_bytes(api_key, version, body))
        corr, response = decode_response_frame(api_key, version, self.recv_frame())
        if corr != self.corr:
            raise ConnectionError(f"response to request {corr} where {self.corr} was expected")
        return response

    def closed_by_peer(self) -> bool:
        """Whether the broker closed the connection (waits for it up to the socket's timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
