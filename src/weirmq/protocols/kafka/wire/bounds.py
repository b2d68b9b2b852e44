"""A structural check of a request body before kio decodes it.

kio's native reader reserves memory for every array as soon as it reads the array's
length, before reading a single element. A request of a dozen bytes that claims four
billion topics therefore makes it ask for tens of gigabytes, and a failed allocation in
native code aborts the whole process: one malformed frame from any client would kill the
broker. Kafka's own decoder refuses a length that exceeds the bytes left in the request.

`check_bounds` walks the body with the same schema kio uses (its generated dataclasses:
field order, `kafka_type` metadata, nested entities, tagged fields of flexible versions)
and checks every length against the bytes that remain, without building anything. Only a
body that fits is handed to kio, so no length kio reads can exceed the frame, which is
itself bounded by `max_request_bytes`. The walk visits each field once, so its cost grows
with the body, not with what the body claims.

Encodings (Kafka's): non-flexible versions use int16 string lengths, int32 bytes lengths
and int32 array counts, -1 for null; flexible versions use unsigned varints holding
length + 1 (0 for null), and end each struct with a tagged-field section: a count, then
per field its tag, its size and its bytes.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from typing import Any, NamedTuple

from .framing import HeaderError, read_uvarint

_FIXED_BYTES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class BoundsError(ValueError):
    """The body claims more than it holds, or does not parse as its schema."""


class _Field(NamedTuple):
    kind: str  # a _FIXED_BYTES key, "string", "bytes", or "entity"
    array: bool
    entity: _Plan | None


class _Plan(NamedTuple):
    flexible: bool
    fields: tuple[_Field, ...]
    tagged: dict[int, _Field]


_PLANS: dict[type[Any], _Plan] = {}


def _plan(cls: type[Any]) -> _Plan:
    cached = _PLANS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    fields: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for f in dataclasses.fields(cls):
        described = _describe(hints[f.name], f.metadata.get("kafka_type"))
        tag = f.metadata.get("tag")
        if tag is None:
            fields.append(described)
        else:
            tagged[int(tag)] = described
    plan = _Plan(bool(cls.__flexible__), tuple(fields), tagged)
    _PLANS[cls] = plan
    return plan


def _describe(hint: Any, kafka_type: str | None) -> _Field:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        # X | None: nullability is in the encoding, not the plan
        (hint, *_rest) = [a for a in typing.get_args(hint) if a is not type(None)]
    args = typing.get_args(hint)
    array = typing.get_origin(hint) is tuple
    element = args[0] if array else hint
    if kafka_type is None:
        assert isinstance(element, type) and dataclasses.is_dataclass(element), hint
        return _Field("entity", array, _plan(element))
    if kafka_type == "records":
        kafka_type = "bytes"
    assert kafka_type in _FIXED_BYTES or kafka_type in ("string", "bytes"), kafka_type
    return _Field(kafka_type, array, None)


def check_bounds(cls: type[Any], buf: bytes | memoryview, offset: int) -> None:
    """Raise `BoundsError` unless the body of kio class `cls` at `offset` fits `buf`."""
    try:
        _walk(_plan(cls), buf, offset, len(buf))
    except (IndexError, struct.error) as exc:
        raise BoundsError(f"truncated {cls.__name__}") from exc


def _walk(plan: _Plan, buf: bytes | memoryview, pos: int, end: int) -> int:
    flexible = plan.flexible
    for field in plan.fields:
        pos = _walk_field(field, flexible, buf, pos, end)
    if flexible:
        pos = _walk_tagged(plan, buf, pos, end)
    return pos


def _walk_tagged(plan: _Plan, buf: bytes | memoryview, pos: int, end: int) -> int:
    count, pos = _uvarint(buf, pos, end)
    _need(count, pos, end)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        stop = _need(size, pos, end)
        field = plan.tagged.get(tag)
        if field is not None and _walk_field(field, True, buf, pos, stop) != stop:
            raise BoundsError(f"tagged field {tag} does not fill its {size} bytes")
        pos = stop
    return pos


def _walk_field(field: _Field, flexible: bool, buf: bytes | memoryview, pos: int, end: int) -> int:
    if not field.array:
        return _walk_one(field, flexible, buf, pos, end)
    count, pos = _length(flexible, buf, pos, end, _INT32)
    if count <= 0:
        return pos
    fixed = _FIXED_BYTES.get(field.kind)
    if fixed is not None:
        return _need(count * fixed, pos, end)
    _need(count, pos, end)  # every element takes at least one byte
    for _ in range(count):
        pos = _walk_one(field, flexible, buf, pos, end)
    return pos


def _walk_one(field: _Field, flexible: bool, buf: bytes | memoryview, pos: int, end: int) -> int:
    kind = field.kind
    if field.entity is not None:
        return _walk(field.entity, buf, pos, end)
    fixed = _FIXED_BYTES.get(kind)
    if fixed is not None:
        return _need(fixed, pos, end)
    size, pos = _length(flexible, buf, pos, end, _INT16 if kind == "string" else _INT32)
    return _need(max(size, 0), pos, end)


def _length(
    flexible: bool, buf: bytes | memoryview, pos: int, end: int, fixed: struct.Struct
) -> tuple[int, int]:
    """A length or count: -1 means null; anything below is malformed."""
    if flexible:
        raw, pos = _uvarint(buf, pos, end)
        return raw - 1, pos
    stop = _need(fixed.size, pos, end)
    (value,) = fixed.unpack_from(buf, pos)
    if value < -1:
        raise BoundsError(f"negative length {value}")
    return value, stop


def _uvarint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos, end)
    except HeaderError as exc:
        raise BoundsError(str(exc)) from exc


def _need(size: int, pos: int, end: int) -> int:
    stop = pos + size
    if stop > end:
        raise BoundsError(f"{size} bytes claimed at {pos}, only {end - pos} left")
    return stop
