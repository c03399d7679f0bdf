"""Glue over kio, whose types are generated from Kafka's own message schemas.

- ``parse_header``: the request header (v1 or v2), read by hand because it decides which schema
  applies to the rest.
- ``decode_request``: the body, as kio's dataclass for that exact API version, after
  ``request_check`` has walked it with bounded counts.
- ``request_schema`` / ``response_schema``: kio's class for an API version, which
  ``gregor.protocol.encoder`` compiles its writers from (for the inter-broker APIs kio no longer
  has, the class of ``inter_broker_schemas``).
- ``response_header``: v0, or v1 for flexible versions (ApiVersions always v0).
- ``decode_response``: a response body, for clients (the admin client, tests, benchmarks).

Responses are not built here: handlers return plain dicts and ``gregor.protocol.encoder`` writes
them for the negotiated version.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.inter_broker_schemas import SCHEMAS as INTER_BROKER_SCHEMAS
from gregor.protocol.request_check import MalformedRequest, check_request
from gregor.protocol.varint import read_uvarint

_HDR = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class RequestDecodeError(Exception):
    """A request whose bytes do not match its schema."""


@dataclass(slots=True, frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def parse_header_prefix(frame: bytes) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: enough to answer even an undecodable request."""
    if len(frame) < 8:
        raise RequestDecodeError(f"request header truncated ({len(frame)} bytes)")
    api_key, api_version, corr = _HDR.unpack_from(frame, 0)
    return api_key, api_version, corr


def parse_header(frame: bytes, flexible: bool) -> RequestHeader:
    api_key, api_version, corr = parse_header_prefix(frame)
    if len(frame) < 10:
        raise RequestDecodeError("request header truncated before client id")
    (n,) = _I16.unpack_from(frame, 8)
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise RequestDecodeError("client id truncated")
        client_id = frame[pos : pos + n].decode("utf-8", "replace")
        pos += n
    if flexible:
        end = len(frame)
        try:
            count, pos = read_uvarint(frame, pos, end, MalformedRequest)
            for _ in range(count):
                _tag, pos = read_uvarint(frame, pos, end, MalformedRequest)
                size, pos = read_uvarint(frame, pos, end, MalformedRequest)
                pos += size
        except MalformedRequest as e:
            raise RequestDecodeError(f"request header: {e}") from None
        if pos > end:
            raise RequestDecodeError("request header tagged fields truncated")
    return RequestHeader(api_key, api_version, corr, client_id, pos)


@cache
def request_schema(api_key: int, version: int) -> Any:
    try:
        return load_request_schema(api_key, version)
    except KioIndexError:
        if (api_key, version) in INTER_BROKER_SCHEMAS:  # an API kio no longer has (ControlledShutdown)
            return INTER_BROKER_SCHEMAS[api_key, version][0]
        raise


@cache
def response_schema(api_key: int, version: int) -> Any:
    try:
        return load_response_schema(api_key, version)
    except KioIndexError:
        if (api_key, version) in INTER_BROKER_SCHEMAS:
            return INTER_BROKER_SCHEMAS[api_key, version][1]
        raise


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_schema(api_key, version).__flexible__)


@cache
def _reader(cls: Any) -> Callable[..., Any]:
    return entity_reader(cls)


def decode_request(api_key: int, version: int, frame: bytes, offset: int) -> Any:
    """The request body as kio's dataclass. The bytes are walked first with bounded counts
    (``request_check``): whatever the bytes, this raises RequestDecodeError or returns a request
    whose every non-nullable field holds a value."""
    cls = request_schema(api_key, version)
    try:
        frame = check_request(cls, frame, offset)
        obj, size = _reader(cls)(frame, offset)
    except MalformedRequest as e:
        raise RequestDecodeError(f"{ApiKey(api_key).name} v{version}: {e}") from None
    except (SerialError, ValueError, TypeError, UnicodeDecodeError, KeyError, IndexError, OverflowError) as e:
        raise RequestDecodeError(f"{ApiKey(api_key).name} v{version}: {e}") from e
    # Bytes after the body are ignored, as Kafka's request parser ignores them: librdkafka sends
    # fields past their last version (e.g. Metadata v12 with the v8-v10 authorized-operations flag).
    return obj


def decode_response(api_key: int, version: int, data: bytes) -> Any:
    """Decode a response body (tests and tools that talk to brokers)."""
    obj, _ = _reader(response_schema(api_key, version))(data, 0)
    return obj


def response_header(api_key: int, version: int, correlation_id: int) -> bytes:
    if api_key != ApiKey.API_VERSIONS and response_schema(api_key, version).__flexible__:
        return _I32.pack(correlation_id) + b"\x00"
    return _I32.pack(correlation_id)
