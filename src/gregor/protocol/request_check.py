"""A bounded walk over a request body before kio's native reader sees it.

kio decodes requests in native code, fast, but it trusts the counts it reads: a compact array
whose count is 2^32-1 makes it allocate ``count * 8`` bytes before it notices that the frame
ends, and the allocation failure aborts the whole process. Kafka's own generated readers check
every count against the bytes left and fail only the request. This module gives Gregor the same
guarantee without giving up the native reader: for every request schema it compiles (once, from
the same generated metadata kio reads) a checker that walks the bytes and

- bounds every length and count by the bytes that remain (an array of N elements needs at least
  N times its element's smallest encoding), and every request by :data:`MAX_ELEMENTS` array
  elements in all, so what kio allocates is proportional to the frame, which
  ``socket.request.max.bytes`` bounds;
- refuses null for a non-nullable string, bytes or array field, as Kafka's readers do ("non-nullable
  field was serialized as null"), so handlers never see ``None`` where the schema promises a value,
  and a compact string longer than 32767 bytes ("had invalid length"), so no handler takes a
  group id or member id that its ``__consumer_offsets`` record could not hold;
- skips tagged fields it does not know (what tagged fields are for: a newer client may send them),
  and reads a boolean byte other than 0 or 1 as true, as Kafka does.

Only then does kio read the body. The last two points need the bytes changed before kio reads
them (kio refuses both); the walk returns the few edits to make, and the common case, a
well-formed request, costs one pass and no copy. Anything the walk refuses raises
:class:`MalformedRequest`, and the connection that sent it is closed, as Kafka closes it.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from gregor.protocol.kio_schema import field_tag, kafka_type
from gregor.protocol.varint import read_uvarint, write_uvarint

# Every array element of a request counts against this (kio builds one Python object or value
# per element). Real requests stay far below: a Fetch of 10,000 partitions, a CreateTopics of
# 10,000 partitions with their replica lists, an OffsetCommit of 50,000 partitions.
MAX_ELEMENTS = 1_000_000
# The longest string a request may carry (Kafka's generated readers refuse a longer compact string).
STRING_MAX_BYTES = 0x7FFF

_FIXED_SIZE = {
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class MalformedRequest(Exception):
    """The body does not follow its schema; Kafka closes the connection for such a request."""


class _Walk:
    """What one walk carries: the element budget and the edits to make before kio reads."""

    __slots__ = ("budget", "edits")

    def __init__(self) -> None:
        self.budget = MAX_ELEMENTS
        self.edits: list[tuple[int, int, bytes]] = []  # (start, end, replacement), in order


# A checker: (buffer, position, end, walk) -> position after the value.
Check = Callable[[bytes, int, int, _Walk], int]


def _truncated(what: str) -> MalformedRequest:
    return MalformedRequest(f"{what} runs past the end of the request")


def _non_nullable(name: str) -> MalformedRequest:
    return MalformedRequest(f"non-nullable field {name} was serialized as null")


# -- primitives -------------------------------------------------------------------------------

def _fixed(size: int, name: str) -> Check:
    def check(buf: bytes, pos: int, end: int, w: _Walk) -> int:
        pos += size
        if pos > end:
            raise _truncated(name)
        return pos
    check.fixed_size = size  # type: ignore[attr-defined]  # lets arrays of it skip in one step
    return check


def _bool(name: str) -> Check:
    def check(buf: bytes, pos: int, end: int, w: _Walk) -> int:
        if pos >= end:
            raise _truncated(name)
        if buf[pos] > 1:
            w.edits.append((pos, pos + 1, b"\x01"))  # Kafka: any nonzero byte is true
        return pos + 1
    return check


ReadLength = Callable[[bytes, int, int, _Walk], tuple[int, int]]


def _length(name: str, flexible: bool, nullable: bool, width: int) -> ReadLength:
    """A reader of the length or count in front of a string, bytes or array: compact (uvarint of
    n + 1, 0 for null) or legacy (int16 or int32, negative for null). Returns (n, position after
    it), n = -1 for null; null where it is not allowed is malformed."""
    if flexible:
        def compact(buf: bytes, pos: int, end: int, w: _Walk) -> tuple[int, int]:
            n, pos = read_uvarint(buf, pos, end, MalformedRequest)
            if n == 0 and not nullable:
                raise _non_nullable(name)
            return n - 1, pos
        return compact
    unpack, null = (_I16.unpack_from, b"\xff\xff") if width == 2 else (_I32.unpack_from, b"\xff\xff\xff\xff")

    def legacy(buf: bytes, pos: int, end: int, w: _Walk) -> tuple[int, int]:
        if pos + width > end:
            raise _truncated(name)
        (n,) = unpack(buf, pos)
        if n < 0:
            if not nullable:
                raise _non_nullable(name)
            if n != -1:
                w.edits.append((pos, pos + width, null))  # Kafka reads any negative length as null
            return -1, pos + width
        return n, pos + width
    return legacy


def _too_long(name: str, n: int) -> MalformedRequest:
    return MalformedRequest(f"string field {name} had invalid length {n}")


def _sized(name: str, flexible: bool, nullable: bool, short: bool) -> Check:
    """string (int16 length), bytes and records (int32 length), or their compact forms. A compact
    string longer than an int16 length could say (32767 bytes) is malformed, as Kafka's readers
    have it: every string must fit the non-flexible versions and the records it may end up in."""
    length = _length(name, flexible, nullable, 2 if short else 4)
    limit = STRING_MAX_BYTES if short and flexible else None

    def check(buf: bytes, pos: int, end: int, w: _Walk) -> int:
        n, pos = length(buf, pos, end, w)
        if n > 0:
            if limit is not None and n > limit:
                raise _too_long(name, n)
            pos += n
            if pos > end:
                raise _truncated(name)
        return pos
    if flexible:
        check.compact_sized = (nullable, name, short)  # type: ignore[attr-defined]  # inlined by _generate
    return check


def _array(name: str, element: Check, min_size: int, flexible: bool, nullable: bool) -> Check:
    fixed = min_size and getattr(element, "fixed_size", None) == min_size
    length = _length(name, flexible, nullable, 4)

    def check(buf: bytes, pos: int, end: int, w: _Walk) -> int:
        count, pos = length(buf, pos, end, w)
        if count <= 0:
            return pos
        if min_size and count > (end - pos) // min_size:
            raise MalformedRequest(f"array {name} claims {count} elements, more than the request holds")
        w.budget -= count
        if w.budget < 0:
            raise MalformedRequest(f"more than {MAX_ELEMENTS} array elements in one request")
        if fixed:
            return pos + count * min_size  # bounds already checked above
        for _ in range(count):
            pos = element(buf, pos, end, w)
        return pos
    return check


def _nullable_struct(name: str, inner: Check) -> Check:
    """KIP-893: an int8 marker, -1 for null, then the struct."""
    def check(buf: bytes, pos: int, end: int, w: _Walk) -> int:
        if pos >= end:
            raise _truncated(name)
        marker = buf[pos]
        if marker == 0xFF:
            return pos + 1
        if marker != 1:
            raise MalformedRequest(f"invalid null marker {marker} for {name}")
        return inner(buf, pos + 1, end, w)
    return check


# -- structs ----------------------------------------------------------------------------------

@dataclasses.dataclass(slots=True)
class _Compiled:
    check: Check
    min_size: int


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _field(f: dataclasses.Field[Any], hint: Any, flexible: bool) -> _Compiled:
    name = f.name
    tp, nullable = _unwrap_optional(hint)
    if typing.get_origin(tp) is tuple:
        elem_tp, elem_nullable = _unwrap_optional(typing.get_args(tp)[0])
        if dataclasses.is_dataclass(elem_tp):
            inner = struct_checker(typing.cast(type, elem_tp))
            elem = _Compiled(inner.check, inner.min_size)
        else:
            elem = _primitive(name, kafka_type(f), flexible, elem_nullable)
        return _Compiled(_array(name, elem.check, elem.min_size, flexible, nullable), 1 if flexible else 4)
    if dataclasses.is_dataclass(tp):
        inner = struct_checker(tp)  # type: ignore[arg-type]
        if nullable and field_tag(f) is None:
            return _Compiled(_nullable_struct(name, inner.check), 1)
        return inner
    return _primitive(name, kafka_type(f), flexible, nullable)


def _primitive(name: str, kafka_type: str, flexible: bool, nullable: bool) -> _Compiled:
    size = _FIXED_SIZE.get(kafka_type)
    if size is not None:
        return _Compiled(_fixed(size, name), size)
    if kafka_type == "bool":
        return _Compiled(_bool(name), 1)
    if kafka_type in ("string", "bytes", "records"):
        # records may be null in every version (Produce); kio's type says so
        return _Compiled(_sized(name, flexible, nullable or kafka_type == "records", kafka_type == "string"),
                         1 if flexible else (2 if kafka_type == "string" else 4))
    raise NotImplementedError(f"kafka_type {kafka_type!r} in a request schema")


def _merge_fixed(checks: list[tuple[Check, int | None]]) -> list[Check]:
    """Runs of fixed-size fields become one bounds check."""
    out: list[Check] = []
    run = 0
    for check, size in checks:
        if size is not None:
            run += size
            continue
        if run:
            out.append(_fixed(run, "field"))
            run = 0
        out.append(check)
    if run:
        out.append(_fixed(run, "field"))
    return out


def _tagged_section(name: str, known: dict[int, Check]) -> Check:
    def check(buf: bytes, pos: int, end: int, w: _Walk) -> int:
        start = pos
        count, pos = read_uvarint(buf, pos, end, MalformedRequest)
        unknown = False
        kept: list[tuple[int, int]] = []  # byte ranges of the tagged fields kio knows
        for _ in range(count):
            entry = pos
            tag, pos = read_uvarint(buf, pos, end, MalformedRequest)
            size, pos = read_uvarint(buf, pos, end, MalformedRequest)
            stop = pos + size
            if stop > end:
                raise _truncated(f"tagged field {tag} of {name}")
            inner = known.get(tag)
            if inner is None:
                unknown = True
            else:
                if inner(buf, pos, stop, w) > stop:
                    raise _truncated(f"tagged field {tag} of {name}")
                kept.append((entry, stop))
            pos = stop
        if unknown:
            _drop_unknown_tags(buf, start, pos, kept, w)
        return pos
    check.tagged_section = True  # type: ignore[attr-defined]  # an empty one is checked inline
    return check


def _drop_unknown_tags(buf: bytes, start: int, stop: int, kept: list[tuple[int, int]], w: _Walk) -> None:
    """Rewrite a tagged-field section with only the fields kio knows (Kafka keeps the unknown
    ones aside and ignores them). Edits made inside the kept fields are applied here."""
    inner = [e for e in w.edits if start <= e[0] < stop]
    del w.edits[len(w.edits) - len(inner):]
    section = bytearray()
    write_uvarint(section, len(kept))
    for a, b in kept:
        section += apply_edits(buf[a:b], [(s - a, e - a, r) for s, e, r in inner if a <= s < b])
    w.edits.append((start, stop, bytes(section)))


@cache
def struct_checker(cls: type) -> _Compiled:
    flexible = bool(getattr(cls, "__flexible__", False))
    hints = typing.get_type_hints(cls)
    plain: list[tuple[Check, int | None]] = []
    tagged: dict[int, Check] = {}
    min_size = 0
    for f in dataclasses.fields(cls):
        compiled = _field(f, hints[f.name], flexible)
        tag = field_tag(f)
        if tag is not None:
            tagged[tag] = compiled.check
            continue
        plain.append((compiled.check, getattr(compiled.check, "fixed_size", None)))
        min_size += compiled.min_size
    steps = _merge_fixed(plain)
    if flexible:
        steps.append(_tagged_section(cls.__name__, tagged))
        min_size += 1
    if len(steps) == 1 and getattr(steps[0], "fixed_size", None):
        return _Compiled(steps[0], min_size)  # a struct of fixed-size fields: one bounds check
    return _Compiled(_generate(cls.__name__, steps), min_size)


def _generate(name: str, steps: list[Check]) -> Check:
    """One function per struct with its steps written out: fixed-size runs, compact lengths and
    an empty tagged-field section (the common cases) are checked inline, the rest called. This
    keeps the walk at a fraction of kio's own decoding time."""
    lines = ["def check(buf, pos, end, w):"]
    env: dict[str, Any] = {"_truncated": _truncated, "_non_nullable": _non_nullable, "read_uvarint": read_uvarint,
                           "MalformedRequest": MalformedRequest, "_too_long": _too_long}
    for i, step in enumerate(steps):
        fixed = getattr(step, "fixed_size", None)
        compact = getattr(step, "compact_sized", None)
        env[f"s{i}"] = step
        if fixed is not None:
            lines += [f"    pos += {fixed}",
                      "    if pos > end:",
                      f"        raise _truncated({name!r})"]
        elif compact is not None:
            nullable, field, short = compact
            lines += ["    if pos < end and buf[pos] < 0x80:",
                      "        n = buf[pos]",
                      "        pos += 1",
                      "    else:",
                      "        n, pos = read_uvarint(buf, pos, end, MalformedRequest)"]
            if short:
                lines += [f"        if n > {STRING_MAX_BYTES + 1}:",
                          f"            raise _too_long({field!r}, n - 1)"]
            lines += ["    if n:",
                      "        pos += n - 1",
                      "        if pos > end:",
                      f"            raise _truncated({field!r})"]
            if not nullable:
                lines += ["    else:", f"        raise _non_nullable({field!r})"]
        elif getattr(step, "tagged_section", False):
            lines += ["    if pos < end and buf[pos] == 0:",
                      "        pos += 1",
                      "    else:",
                      f"        pos = s{i}(buf, pos, end, w)"]
        else:
            lines.append(f"    pos = s{i}(buf, pos, end, w)")
    lines.append("    return pos")
    exec("\n".join(lines), env)  # noqa: S102 - source built above from the schema, no outside input
    check: Check = env["check"]
    return check


def apply_edits(buf: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray()
    pos = 0
    for start, stop, replacement in sorted(edits):
        out += buf[pos:start]
        out += replacement
        pos = stop
    out += buf[pos:]
    return bytes(out)


def check_request(cls: type, buf: bytes, offset: int) -> bytes:
    """Walk the body of ``cls`` at ``offset``; return the bytes kio may read (``buf`` itself
    unless a field had to be normalised). Raises :class:`MalformedRequest`."""
    w = _Walk()
    struct_checker(cls).check(buf, offset, len(buf), w)
    if w.edits:
        return apply_edits(buf, w.edits)
    return buf
