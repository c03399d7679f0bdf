"""A client's side of the wire format: a request's bytes (header and body) and a response
frame's correlation id and decoded body. Used by every client in this repository (the admin
client, the tests, the benchmarks) and by brokers talking to each other (replica fetchers,
controlled shutdown).

A request body is a plain dict with kio's field names, encoded for the version asked with
Gregor's schema-driven encoder (``gregor.protocol.encoder``: keys the version lacks are ignored,
missing keys take the schema default, so pass ``None`` where a null is meant); a response is
decoded with kio into its dataclass.
"""

from __future__ import annotations

import struct
from typing import Any

from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.encoder import encode

SIZE = struct.Struct(">i")
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
    return SIZE.pack(len(payload)) + payload


def decode_response_frame(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, response) of a response frame read after its size. The header is v1 (a
    tagged-field section after the correlation id) for flexible versions, except ApiVersions'."""
    (correlation_id,) = SIZE.unpack_from(frame, 0)
    flexible = api_key != ApiKey.API_VERSIONS and codec.response_schema(api_key, version).__flexible__
    return correlation_id, codec.decode_response(api_key, version, frame[5 if flexible else 4 :])
