"""What Gregor reads of kio's generated schema classes, in one place.

kio generates one frozen dataclass per message version and, as its documentation puts it, makes
all the details of the encoding introspectable on it: the class says whether the version is
flexible (``__flexible__``), each field's Python type says whether it is nullable (``X | None``),
an array (``tuple[X, ...]``) or a struct (another schema dataclass), and each field's metadata
holds its ``kafka_type`` (``"int32"``, ``"string"``, ``"records"``, ...; primitives only) and, for a
tagged field, its ``tag``. The request walk (``request_check``) and the response encoder
(``encoder``) compile themselves from these public attributes, through this module, and never
from kio's private helpers: a kio release that changes them fails
``tests/protocol/test_encoder.py`` (byte for byte against kio's own writer) and
``tests/protocol/test_request_check.py``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class FieldShape:
    """How one field of a schema class is encoded."""

    type_: Any  # the value's type; for an array the element's (a schema class for structs)
    is_array: bool
    is_struct: bool  # a schema dataclass (or an array of them)
    nullable: bool  # the value may be null (for an array: the array itself)
    kafka_type: str | None  # primitives and arrays of primitives; None for structs
    tag: int | None  # tagged fields only


def is_flexible(cls: Any) -> bool:
    return bool(cls.__flexible__)


def kafka_type(f: dataclasses.Field[Any]) -> str:
    """The field's Kafka type (``metadata["kafka_type"]``); primitives and their arrays only."""
    value = f.metadata["kafka_type"]
    if not isinstance(value, str):
        raise TypeError(f"field {f.name}: kafka_type {value!r} is not a string")
    return value


def field_tag(f: dataclasses.Field[Any]) -> int | None:
    """The tag of a tagged field, None for a field in the fixed part."""
    tag = f.metadata.get("tag")
    return None if tag is None else int(tag)


def _without_none(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {tp!r} in a schema class")
        return inner[0], len(args) == 2
    return tp, False


def field_shape(f: dataclasses.Field[Any]) -> FieldShape:
    """The shape of a field of a kio schema class (whose annotations are types, not strings)."""
    if isinstance(f.type, str):
        raise TypeError(f"field {f.name}: postponed annotation {f.type!r}; kio's classes use types")
    tp, nullable = _without_none(f.type)
    is_array = typing.get_origin(tp) is tuple
    if is_array:
        tp, _ = _without_none(typing.get_args(tp)[0])
    is_struct = dataclasses.is_dataclass(tp)
    return FieldShape(tp, is_array, is_struct, nullable, None if is_struct else kafka_type(f), field_tag(f))
