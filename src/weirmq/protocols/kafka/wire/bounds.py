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
per field its tag, its size and its bytes. A nullable struct (not an array's element) is
preceded by a presence byte, -1 for null.

The walk also refuses what Kafka's generated parsers refuse and kio lets through: null (a
length of -1) in a field the schema does not declare nullable at that version ("non-nullable
field topics was serialized as null", Kafka's words), a length below -1, an array element
that is null, a string longer than 32767 bytes. kio marks nullable fields `X | None`;
anything else is not. Without this, kio hands a handler `None` where its type says a
tuple, and the handler fails with a TypeError: a client's mistake logged as the broker's
bug. Kafka answers such a request by closing the connection (`RequestContext.parseRequest`
throws InvalidRequestException, `SocketServer` closes the channel), and so does the
dispatcher, for every DecodeError. What to check is decided per field when the class's
plan is made, once per class; a request pays one comparison for each null it holds.
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
_STRING_BYTES_MAX = 0x7FFF
"""Kafka's strings are at most this long, however their length is written."""
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class BoundsError(ValueError):
    """The body claims more than it holds, or does not parse as its schema."""


class _Field(NamedTuple):
    kind: str  # a _FIXED_BYTES key, "string", "bytes", or "entity"
    array: bool
    entity: _Plan | None
    nullable: bool  # the array (for an array), else the string or bytes, may be null
    name: str


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
        described = _describe(f.name, hints[f.name], f.metadata.get("kafka_type"))
        tag = f.metadata.get("tag")
        if tag is None:
            fields.append(described)
        else:
            tagged[int(tag)] = described
    plan = _Plan(bool(cls.__flexible__), tuple(fields), tagged)
    _PLANS[cls] = plan
    return plan


def _describe(name: str, hint: Any, kafka_type: str | None) -> _Field:
    nullable = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    if nullable:  # X | None: kio's way of saying the schema's nullableVersions hold
        (hint, *_rest) = [a for a in typing.get_args(hint) if a is not type(None)]
    args = typing.get_args(hint)
    array = typing.get_origin(hint) is tuple
    element = args[0] if array else hint
    if kafka_type is None:
        assert isinstance(element, type) and dataclasses.is_dataclass(element), hint
        return _Field("entity", array, _plan(element), nullable, name)
    if kafka_type == "records":
        kafka_type = "bytes"
    assert kafka_type in _FIXED_BYTES or kafka_type in ("string", "bytes"), kafka_type
    return _Field(kafka_type, array, None, nullable, name)


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
        return _walk_one(field, field.nullable, flexible, buf, pos, end)
    count, pos = _length(flexible, buf, pos, end, _INT32)
    if count <= 0:
        if count < 0 and not field.nullable:
            raise BoundsError(f"non-nullable field {field.name} was serialized as null")
        return pos
    fixed = _FIXED_BYTES.get(field.kind)
    if fixed is not None:
        return _need(count * fixed, pos, end)
    _need(count, pos, end)  # every element takes at least one byte
    for _ in range(count):  # the elements of an array are never null
        pos = _walk_one(field, False, flexible, buf, pos, end)
    return pos


def _walk_one(
    field: _Field, nullable: bool, flexible: bool, buf: bytes | memoryview, pos: int, end: int
) -> int:
    kind = field.kind
    if field.entity is not None:
        if nullable:  # one struct, not an array's: a presence byte comes first
            present, pos = _presence(field, buf, pos, end)
            if not present:
                return pos
        return _walk(field.entity, buf, pos, end)
    fixed = _FIXED_BYTES.get(kind)
    if fixed is not None:
        return _need(fixed, pos, end)
    size, pos = _length(flexible, buf, pos, end, _INT16 if kind == "string" else _INT32)
    if size < 0:
        if not nullable:
            raise BoundsError(f"non-nullable field {field.name} was serialized as null")
        return pos
    if size > _STRING_BYTES_MAX and kind == "string":  # only a compact length gets here
        raise BoundsError(f"string field {field.name} had invalid length {size}")
    return _need(size, pos, end)


def _presence(field: _Field, buf: bytes | memoryview, pos: int, end: int) -> tuple[bool, int]:
    """Whether a nullable struct is there, and the position after its presence byte.

    Kafka reads any negative byte as null; kio only -1, and anything else as present.
    Bytes the two read differently (-128..-2) are refused, so what is checked here is
    what kio reads."""
    stop = _need(1, pos, end)
    marker = buf[pos]
    if marker >= 0x80 and marker != 0xFF:
        raise BoundsError(f"presence byte {marker - 256} of {field.name}")
    return marker != 0xFF, stop


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
