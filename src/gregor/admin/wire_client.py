"""A Kafka protocol client over a plain blocking socket: the one place the clients of this
repository (the admin client, the integration tests, the benchmarks) frame requests and read
responses.

A request body is a plain dict with kio's field names, encoded for the version asked with
Gregor's schema-driven encoder (``gregor.protocol.encoder``: keys the version lacks are ignored,
missing keys take the schema default, so pass ``None`` where a null is meant); a response is
decoded with kio into its dataclass. Nothing is negotiated here: the caller names the version
(the admin client picks it from ApiVersions).

- ``request_header`` / ``request_frame``: the bytes of a request, for callers with their own
  transport (the asyncio client of the benchmarks) or that send damaged frames on purpose;
- ``decode_response_frame``: a response frame (without its size prefix) into its correlation id
  and kio response;
- ``WireClient``: one connection, one request at a time, plus ``send_raw`` and ``recv_frame``
  for byte-level tests.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.encoder import encode

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | bytes | None) -> bytes:
    """Request header v1, or v2 (with an empty tagged-field section) for flexible versions."""
    if client_id is None:
        header = _HEADER.pack(api_key, version, correlation_id, -1)
    else:
        cid = client_id.encode() if isinstance(client_id, str) else client_id
        header = _HEADER.pack(api_key, version, correlation_id, len(cid)) + cid
    if codec.is_flexible(api_key, version):
        header += b"\x00"
    return header


def request_frame(api_key: int, version: int, correlation_id: int, body: dict[str, Any],
                  client_id: str | bytes | None) -> bytes:
    """A whole request as sent: size, header, and ``body`` encoded for ``version``."""
    payload = request_header(api_key, version, correlation_id, client_id)
    payload += encode(codec.request_schema(api_key, version), body)
    return _SIZE.pack(len(payload)) + payload


def decode_response_frame(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, response) of a response frame read after its size. The header is v1 (a
    tagged-field section after the correlation id) for flexible versions, except ApiVersions'."""
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    flexible = api_key != ApiKey.API_VERSIONS and codec.response_schema(api_key, version).__flexible__
    return correlation_id, codec.decode_response(api_key, version, frame[5 if flexible else 4 :])


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
