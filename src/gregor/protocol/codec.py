"""Glue over kio, whose types are generated from Kafka's own message schemas.

- ``parse_header``: the request header (v1 or v2), read by hand because it decides which schema
  applies to the rest.
- ``decode_request``: the body, as kio's dataclass for that exact API version.
- ``build``: handlers describe a response as plain dicts with kio's field names, independent of
  the version; ``build`` keeps the fields the target version has and converts milliseconds and
  timestamps to kio's typed fields. Handlers therefore hold one code path for all versions.
- ``response_header``: v0, or v1 for flexible versions (ApiVersions always v0).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
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
    return load_request_schema(api_key, version)


@cache
def response_schema(api_key: int, version: int) -> Any:
    return load_response_schema(api_key, version)


def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_schema(api_key, version).__flexible__)


@cache
def _reader(cls: Any) -> Callable[..., Any]:
    return entity_reader(cls)


@cache
def _writer(cls: Any) -> Callable[..., Any]:
    return entity_writer(cls)


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


def encode_body(obj: Any) -> bytes:
    buf = io.BytesIO()
    writer: Any = _writer
    writer(type(obj))(buf, obj)
    return buf.getvalue()


def response_header(api_key: int, version: int, correlation_id: int) -> bytes:
    if api_key != ApiKey.API_VERSIONS and response_schema(api_key, version).__flexible__:
        return _I32.pack(correlation_id) + b"\x00"
    return _I32.pack(correlation_id)


# ---------------------------------------------------------------------------------------------
# Version-agnostic construction of kio entities from plain dicts.

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def _ms_to_timedelta(v: Any) -> datetime.timedelta:
    if isinstance(v, datetime.timedelta):
        return v
    return datetime.timedelta(milliseconds=int(v))


def _ms_to_datetime(v: Any) -> datetime.datetime | None:
    if v is None or isinstance(v, datetime.datetime):
        return v
    if int(v) < 0:
        return None
    return _EPOCH + datetime.timedelta(milliseconds=int(v))


def _to_uuid(v: Any) -> uuid.UUID | None:
    if v is None or isinstance(v, uuid.UUID):
        return v
    return uuid.UUID(bytes=bytes(v))


def _to_error_code(v: Any) -> ErrorCode:
    return v if isinstance(v, ErrorCode) else ErrorCode(v)


def _non_null_str(v: Any) -> Any:
    return "" if v is None else v


def _non_null_bytes(v: Any) -> Any:
    return b"" if v is None else v


def _identity(v: Any) -> Any:
    return v


def _tuple_of(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def convert(v: Any) -> Any:
        if v is None:
            return None
        return tuple(conv(x) for x in v)

    return convert


def _converter(tp: Any) -> Callable[[Any], Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1 or (isinstance(inner[0], type) and issubclass(inner[0], str | bytes)):
            return _identity  # nullable: None stays None
        return _converter(inner[0])
    if origin is tuple:
        return _tuple_of(_converter(args[0]))
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return lambda v: v if isinstance(v, tp) else build(tp, v)
        if issubclass(tp, ErrorCode):
            return _to_error_code
        if issubclass(tp, datetime.timedelta):
            return _ms_to_timedelta
        if issubclass(tp, datetime.datetime):
            return _ms_to_datetime
        if issubclass(tp, uuid.UUID):
            return _to_uuid
        if issubclass(tp, str):
            return _non_null_str  # a field nullable in newer versions only: null becomes ""
        if issubclass(tp, bytes):
            return _non_null_bytes
    return _identity


@cache
def _plan(cls: type) -> tuple[tuple[str, Callable[[Any], Any], bool], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        plan.append((f.name, _converter(hints[f.name]), has_default))
    return tuple(plan)


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """Construct kio entity ``cls`` from ``data``; keys the version lacks are dropped, missing keys
    take the schema default (or 0 / empty for numbers and lists without one)."""
    kwargs: dict[str, Any] = {}
    for name, conv, has_default in _plan(cls):
        if name in data:
            kwargs[name] = conv(data[name])
        elif not has_default:
            kwargs[name] = conv(_zero_for(cls, name))
    return cls(**kwargs)


@cache
def _zero_for(cls: type, name: str) -> Any:
    tp = typing.get_type_hints(cls)[name]
    origin = typing.get_origin(tp)
    if origin is tuple:
        return ()
    args = typing.get_args(tp)
    if type(None) in args:
        return None
    if isinstance(tp, type):
        if issubclass(tp, bool):
            return False
        if issubclass(tp, ErrorCode):
            return ErrorCode.none
        if issubclass(tp, int | datetime.timedelta):
            return 0
        if issubclass(tp, str):
            return ""
        if issubclass(tp, bytes):
            return b""
        if issubclass(tp, uuid.UUID):
            return uuid.UUID(int=0)
    raise TypeError(f"{cls.__name__}.{name} needs a value")


def build_response(api_key: int, version: int, data: Mapping[str, Any]) -> Any:
    return build(response_schema(api_key, version), data)
