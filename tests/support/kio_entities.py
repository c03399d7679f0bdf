"""kio entities built from plain dicts and written with kio's own writer: the reference that the
encoders Gregor runs (``gregor.protocol.encoder``, ``gregor.protocol.fetch_response``) are checked
against byte for byte, a way to give tests kio objects, and the request writer of the benchmarks'
client (``bench/kclient.py``, which keeps its cost so that its figures stay comparable).

``build(cls, data)`` takes the dicts handlers return (kio's field names, any version):
keys the version lacks are dropped, missing keys take the schema default (or zero, empty, or null
for a nullable field without one), milliseconds become kio's timedeltas and datetimes, bytes its
UUIDs.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import typing
import uuid
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from kio.serial import entity_writer

from gregor.protocol import codec
from gregor.protocol.errors import ErrorCode


def kio_bytes(obj: Any) -> bytes:
    """``obj`` (a kio entity) as kio's writer encodes it."""
    buf = io.BytesIO()
    writer: Any = _writer(type(obj))
    writer(buf, obj)
    return buf.getvalue()


@cache
def _writer(cls: Any) -> Callable[..., Any]:
    return entity_writer(cls)



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
    return build(codec.response_schema(api_key, version), data)
