"""Request decoding and response encoding through kio, for every version we advertise.

kio generates one frozen dataclass per API, version and direction from Kafka's JSON
schemas, with a native reader and a Python writer. Handlers should not have to know which
of a dozen versions they are answering, so a response is written as plain data, a mapping
from kio field names to values (nested lists as lists of mappings), and `build` turns that
into the dataclass of the exact version asked for:

- fields the version does not have are dropped (so a handler can always fill `throttle_time`
  or `log_start_offset`, and v0 simply never sees them);
- fields the data leaves out take the schema's default;
- ints become the timedelta or datetime values kio expects for `timedelta_i32` and
  `datetime_i64` fields (-1 is "no timestamp").

The plan of each class (its fields, which are nested, which need conversion) is computed
once and cached: building costs a dict lookup and a constructor call per object.
Hot responses (Produce, Fetch) get hand-written encoders in `wire.fast`, checked byte for
byte against this path in tests.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from .bounds import BoundsError, check_bounds

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class DecodeError(Exception):
    """A request body that does not parse as the version its header names."""


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


def request_is_flexible(api_key: int, version: int) -> bool:
    """Whether the request header is v2 (has tagged fields). Unknown APIs: False."""
    try:
        return bool(request_class(api_key, version).__flexible__)
    except Exception:  # unknown to kio: the header is parsed as v1 and the request refused
        return False


def response_header_is_flexible(api_key: int, version: int) -> bool:
    header = response_class(api_key, version).__header_schema__
    return bool(header.__flexible__)


class _Field(typing.NamedTuple):
    name: str
    nested: type[Any] | None  # element class when the field is a tuple of entities
    single: type[Any] | None  # class when the field is one nested entity
    convert: Callable[[Any], Any] | None


_READERS: dict[type[Any], Callable[[Any, int], tuple[Any, int]]] = {}
_WRITERS: dict[type[Any], Callable[[Any, Any], None]] = {}
_PLANS: dict[type[Any], tuple[_Field, ...]] = {}


def _reader(cls: type[Any]) -> Callable[[Any, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Callable[[Any, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def decode_request(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> Any:
    """The request body of `frame` from `offset`, as kio's dataclass for that version.

    The body's lengths are checked against the frame first (`bounds.check_bounds`): kio's
    native reader would otherwise try to allocate whatever a malformed length claims."""
    cls = request_class(api_key, version)
    buf = frame if isinstance(frame, bytes) else frame.toreadonly()
    try:
        check_bounds(cls, buf, offset)
    except BoundsError as exc:
        raise DecodeError(f"malformed {cls.__name__} v{version}: {exc}") from exc
    try:
        value, _size = _reader(cls)(buf, offset)
    except Exception as exc:  # kio raises several types for malformed input
        raise DecodeError(f"malformed {cls.__name__} v{version}: {exc}") from exc
    return value


def encode(entity: Any) -> bytes:
    """Serialize a kio request or response body (without the frame header)."""
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


# --- building responses from plain data ------------------------------------------------


def _ms_to_timedelta(value: Any) -> Any:
    return datetime.timedelta(milliseconds=value) if isinstance(value, int) else value


def _ms_to_datetime(value: Any) -> Any:
    if isinstance(value, int):
        return None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)
    return value


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "timedelta_i32": _ms_to_timedelta,
    "timedelta_i64": _ms_to_timedelta,
    "datetime_i64": _ms_to_datetime,
}


def _plan(cls: type[Any]) -> tuple[_Field, ...]:
    cached = _PLANS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = _strip_none(hints[f.name])
        nested: type[Any] | None = None
        single: type[Any] | None = None
        if typing.get_origin(hint) is tuple:
            (element, *_rest) = typing.get_args(hint)
            if isinstance(element, type) and dataclasses.is_dataclass(element):
                nested = element
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            single = hint
        convert = _CONVERTERS.get(f.metadata.get("kafka_type", ""))
        plan.append(_Field(f.name, nested, single, convert))
    _PLANS[cls] = result = tuple(plan)
    return result


def _strip_none(hint: Any) -> Any:
    """`X | None` -> `X`: a nullable field is built like a required one when not None."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner, *_rest) = [a for a in typing.get_args(hint) if a is not type(None)]
        return inner
    return hint


def build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """An instance of kio class `cls` from `data`; see the module docstring."""
    kwargs: dict[str, Any] = {}
    for name, nested, single, convert in _plan(cls):
        if name not in data:
            continue
        value = data[name]
        if nested is not None and value is not None:
            value = tuple(
                build(nested, item) if isinstance(item, Mapping) else item for item in value
            )
        elif single is not None and isinstance(value, Mapping):
            value = build(single, value)
        elif convert is not None:
            value = convert(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def build_response(api_key: int, version: int, data: Mapping[str, Any]) -> Any:
    return build(response_class(api_key, version), data)


def field_names(cls: type[Any]) -> Sequence[str]:
    return [f.name for f in _plan(cls)]
