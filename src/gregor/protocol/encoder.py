"""Encode responses (and the requests of Gregor's own clients) straight from plain dicts, without
building kio objects.

kio decodes requests in native code, but its writer is pure Python with per-value type checks;
on the coordinator's hot paths (commits, heartbeats, joins) encoding a response with it cost
more than handling the request. This module compiles, once per schema class, a list of small
closures from the metadata kio generates on its schema classes (field order, ``kafka_type``,
nullability, tags, defaults, flexible versions; read through ``kio_schema``) and runs them over
the handler's dict. Keys a version does not have are ignored; missing keys take the schema
default, or Kafka's (zero, empty) where the schema has none. Millisecond integers are accepted
where kio wants timedeltas or datetimes, bytes where it wants UUIDs.

``tests/protocol/test_encoder.py`` checks it byte for byte against kio's writer for every
response version Gregor serves and for the requests its clients send.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from gregor.protocol.kio_schema import FieldShape, field_shape, is_flexible
from gregor.protocol.varint import write_uvarint

Out = bytearray
Write = Callable[[Out, Any], None]

_FIXED = {
    "int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"), "uint8": struct.Struct(">B"), "uint16": struct.Struct(">H"),
    "uint32": struct.Struct(">I"), "uint64": struct.Struct(">Q"), "float64": struct.Struct(">d"),
    "error_code": struct.Struct(">h"), "timedelta_i32": struct.Struct(">i"), "timedelta_i64": struct.Struct(">q"),
    "datetime_i64": struct.Struct(">q"),
}
_ZERO_UUID = b"\x00" * 16
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def _to_ms(v: Any) -> int:
    if isinstance(v, datetime.timedelta):
        return round(v.total_seconds() * 1000)
    if isinstance(v, datetime.datetime):
        return round(v.timestamp() * 1000)
    return int(v)


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> Write:
    fixed = _FIXED.get(kafka_type)
    if fixed is not None:
        pack = fixed.pack
        if kafka_type.startswith(("timedelta", "datetime")):
            if nullable:  # datetime: null is -1
                return lambda out, v: out.extend(pack(-1 if v is None else _to_ms(v)))
            return lambda out, v: out.extend(pack(_to_ms(v)))
        return lambda out, v: out.extend(pack(v))
    if kafka_type == "bool":
        return lambda out, v: out.append(1 if v else 0)
    if kafka_type == "uuid":
        def write_uuid(out: Out, v: Any) -> None:
            if v is None:
                out += _ZERO_UUID
            else:
                out += v.bytes if isinstance(v, uuid.UUID) else bytes(v)
        return write_uuid
    if kafka_type in ("string", "bytes", "records"):
        is_str = kafka_type == "string"
        empty = "" if is_str else b""
        if flexible:
            def write_compact(out: Out, v: Any) -> None:
                if v is None:
                    if nullable:
                        out.append(0)
                        return
                    v = empty  # null in a version where the field is not nullable yet
                b = v.encode() if is_str else v
                write_uvarint(out, len(b) + 1)
                out += b
            return write_compact
        size = struct.Struct(">h" if is_str else ">i").pack

        def write_legacy(out: Out, v: Any) -> None:
            if v is None:
                if nullable:
                    out += size(-1)
                    return
                v = empty
            b = v.encode() if is_str else v
            out += size(len(b))
            out += b
        return write_legacy
    raise NotImplementedError(f"kafka_type {kafka_type!r}")


def _array(item: Write, flexible: bool) -> Write:
    if flexible:
        def write_compact_array(out: Out, items: Any) -> None:
            if items is None:
                out.append(0)
                return
            write_uvarint(out, len(items) + 1)
            for x in items:
                item(out, x)
        return write_compact_array
    pack = struct.Struct(">i").pack

    def write_array(out: Out, items: Any) -> None:
        if items is None:
            out += pack(-1)
            return
        out += pack(len(items))
        for x in items:
            item(out, x)
    return write_array


def _default_of(f: dataclasses.Field[Any], kafka_type: str, shape: FieldShape) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    if shape.is_array:
        return ()
    if shape.is_struct:
        return {}
    if kafka_type in ("string",):
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return None
    return 0


def _is_default(value: Any, default: Any) -> bool:
    if isinstance(default, datetime.timedelta | datetime.datetime):
        return _to_ms(value) == _to_ms(default)
    if isinstance(default, uuid.UUID):
        return value is None or (value.bytes if isinstance(value, uuid.UUID) else bytes(value)) == default.bytes
    if value is None or default is None:
        return value is default
    if isinstance(default, tuple) and isinstance(value, list | tuple):
        return len(value) == 0 and len(default) == 0
    try:
        return bool(value == default)
    except Exception:  # noqa: BLE001 - incomparable: not a default
        return False


@cache
def entity_encoder(cls: Any) -> Write:
    flexible = is_flexible(cls)
    plain: list[tuple[str, Write, Any]] = []
    tagged: list[tuple[int, str, Write, Any]] = []
    for f in dataclasses.fields(cls):
        shape = field_shape(f)
        tag = shape.tag
        kafka_type = shape.kafka_type or "struct"
        nullable = tag is None and shape.nullable
        write: Write
        if shape.is_struct and not shape.is_array:
            inner = entity_encoder(shape.type_)
            if nullable:
                def w_nullable(out: Out, v: Any, inner: Write = inner) -> None:
                    if v is None:
                        out += b"\xff"  # KIP-893 null struct marker (int8 -1)
                    else:
                        out += b"\x01"
                        inner(out, v)
                write = w_nullable
            else:
                write = inner
        elif shape.is_struct:
            write = _array(entity_encoder(shape.type_), flexible)
        elif shape.is_array:
            write = _array(_primitive(kafka_type, flexible, False), flexible)
        else:
            write = _primitive(kafka_type, flexible, nullable)
        default = _default_of(f, kafka_type, shape)
        if tag is not None:
            tagged.append((tag, f.name, write, default))
        else:
            plain.append((f.name, write, default))
    tagged.sort()

    def encode(out: Out, data: Any) -> None:
        if not isinstance(data, Mapping):
            data = _as_mapping(data)
        get = data.get
        for name, write, default in plain:
            write(out, get(name, default))
        if not flexible:
            return
        fields_out = []
        for tag, name, write, default in tagged:
            if name not in data or _is_default(data[name], default):
                continue
            buf = bytearray()
            write(buf, data[name])
            fields_out.append((tag, buf))
        write_uvarint(out, len(fields_out))
        for tag, buf in fields_out:
            write_uvarint(out, tag)
            write_uvarint(out, len(buf))
            out += buf

    return encode


def _as_mapping(obj: Any) -> Mapping[str, Any]:
    """kio entities (e.g. kept from a request) are accepted where dicts are expected."""
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise TypeError(f"cannot encode {type(obj).__name__} as an entity")


def encode(cls: type, data: Mapping[str, Any]) -> bytes:
    out = bytearray()
    entity_encoder(cls)(out, data)
    return bytes(out)
