"""Request decoding and response encoding through kio, for every version we advertise.

kio generates one frozen dataclass per API, version and direction from Kafka's JSON
schemas, with a native reader and a Python writer. Handlers should not have to know which
of a dozen versions they are answering, so a response is written as plain data, a mapping
from kio field names to values (nested lists as lists of mappings), and `build` turns that
into the dataclass of the exact version asked for:

- fields the version does not have are dropped (so a handler can always fill `throttle_time`
  or `log_start_offset`, and v0 simply never sees them);
- a field that no version has is an `UnknownFieldError`, at any depth: a misspelt optional
  field would otherwise be dropped by every version, and the client would get the default
  without anyone noticing;
- fields the data leaves out take the schema's default;
- ints become the timedelta or datetime values kio expects for `timedelta_i32` and
  `datetime_i64` fields (-1 is "no timestamp").

"Has" is by name and place: the names known for an entity are the union of its field names
over every version kio has of that API and direction (not only those we advertise), nested
entities matched by the path of field names that leads to them (`topics.partitions` in
MetadataResponse): kio generates a separate class per version, and the path is what a
handler writes. A field the version lacks is dropped whole, without looking inside it;
the versions that have it check the names in it, and nothing in it reaches the client.

The plan of each class (its fields, which are nested, which need conversion) is computed
once and cached: building costs a subset check of the data's names against the class's own
fields and a constructor call per object, ~5% more than without the check. Only data that
names a field the class lacks (an older version, a mistake) looks further, at other
versions' names: newest version first (handlers write what current versions have), one
version at a time, stopping as soon as every name is found. A version's classes cost 1-5 ms
to load, all of an API's 13-60 ms (measured); Metadata's handler writes a v13 field
(`error_code`) and a v8-10 one (`cluster_authorized_operations`) on every version, so a
first Metadata v12 answer loads v13, v11 and v10 besides its own, not all fourteen. Only a
name that no version has loads them all (to say so, with the nearest name). The names found
are kept, so later answers pay one subset check.

kio itself (its index of classes, its readers and writers: ~15 ms of imports, measured) is
imported on the first request, not when the broker starts: every client's first request
(ApiVersions) pays it once.

Hot responses (Produce, Fetch) get hand-written encoders in `wire.fast`, checked byte for
byte against this path in tests; they do not check names (tests check what they read).
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import io
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

from kio.static.constants import EntityType

from .bounds import BoundsError, check_bounds

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_VERSION_PROBE_MAX = 20
"""Versions 0..this of an API are asked of kio for other versions' field names (kio 0.6.5
stops at Fetch v18); `_NamesSoFar` asserts the class being built is among them."""


class DecodeError(Exception):
    """A request body that does not parse as the version its header names."""


class UnknownFieldError(TypeError):
    """Data for `build` names a field that no version of the API has at that place.

    A TypeError, as kio's constructor raises for a missing required field: both are a
    handler writing the wrong shape, never something a client sent."""

    def __init__(self, where: str, entity: str, api: str, unknown: Sequence[str]) -> None:
        self.where = where  # "MetadataResponse.topics.partitions"
        self.entity = entity  # the kio class being built there: "MetadataResponsePartition"
        self.api = api  # "MetadataResponse (API key 3)"
        self.unknown = tuple(unknown)
        names = ", ".join(map(repr, self.unknown))
        super().__init__(
            f"{where}: no version of {api} has field {names} (building {entity})"
            if len(self.unknown) == 1
            else f"{where}: no version of {api} has fields {names} (building {entity})"
        )


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    return _load_class(EntityType.request, api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    return _load_class(EntityType.response, api_key, version)


@cache
def api_name(api_key: int) -> str:
    """Kafka's name of an API key ("Produce", "ListOffsets"), from kio's table of them."""
    from kio.schema.index import api_key_map  # see the docstring

    name = api_key_map.get(api_key)
    if name is None:
        return f"Unknown{api_key}"
    return "".join(word.capitalize() for word in name.split("_"))


def _load_class(kind: EntityType, api_key: int, version: int) -> type[Any]:
    """kio's class; raises kio's `KioIndexError` for a version or API it does not have."""
    from kio.index import load_request_schema, load_response_schema  # see the docstring

    load = load_request_schema if kind is EntityType.request else load_response_schema
    return load(api_key, version)


def _has_class(kind: EntityType, api_key: int, version: int) -> bool:
    from kio.index import KioIndexError

    try:
        _load_class(kind, api_key, version)
    except KioIndexError:  # not a version kio has: they may start above 0
        return False
    return True


def request_is_flexible(api_key: int, version: int) -> bool:
    """Whether the request header is v2 (has tagged fields). Unknown APIs: False."""
    try:
        return bool(request_class(api_key, version).__flexible__)
    except Exception:  # unknown to kio: the header is parsed as v1 and the request refused
        return False


def response_header_is_flexible(api_key: int, version: int) -> bool:
    header = response_class(api_key, version).__header_schema__
    return bool(header.__flexible__)


FieldPath = tuple[str, ...]
"""Field names from a top-level class down to a nested entity: `("topics", "partitions")`."""
FieldNamesByPath = Mapping[FieldPath, frozenset[str]]


class _Field(typing.NamedTuple):
    name: str
    nested: _Plan | None  # plan of the elements when the field is a tuple of entities
    single: _Plan | None  # plan of the entity when the field is one nested entity
    convert: Callable[[Any], Any] | None


class _Plan(typing.NamedTuple):
    """How to build one kio class at one place in a message."""

    cls: type[Any]
    own: frozenset[str]  # the field names of `cls` itself
    fields: tuple[_Field, ...]
    root: type[Any]  # the class `build` was asked for, whose versions give the union
    path: FieldPath  # where `cls` sits below `root`
    api: str  # for errors: "MetadataResponse (API key 3)"
    where: str  # for errors: "MetadataResponse.topics.partitions"


_READERS: dict[type[Any], Callable[[Any, int], tuple[Any, int]]] = {}
_WRITERS: dict[type[Any], Callable[[Any, Any], None]] = {}
_PLANS: dict[type[Any], _Plan] = {}


def _reader(cls: type[Any]) -> Callable[[Any, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        from kio.serial import entity_reader  # see the module docstring

        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Callable[[Any, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        from kio.serial import entity_writer

        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def decode_request(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> Any:
    """The request body of `frame` from `offset`, as kio's dataclass for that version.

    The body's lengths are checked against the frame first (`bounds.check_bounds`): kio's
    native reader would otherwise try to allocate whatever a malformed length claims. The
    same walk refuses a null where the schema allows none, which kio would let through
    as None into a field typed as a tuple or a string."""
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


def _plan(cls: type[Any]) -> _Plan:
    cached = _PLANS.get(cls)
    if cached is None:
        cached = _PLANS[cls] = _plan_at(cls, cls, ())
    return cached


def _plan_at(cls: type[Any], root: type[Any], path: FieldPath) -> _Plan:
    """The plan of `cls`, found at `path` below `root`. A class that kio shares between
    two places gets a plan for each: the known names belong to the place (`path`)."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        nested_cls, single_cls = _entity_of(hints[f.name])
        below = (*path, f.name)
        nested = None if nested_cls is None else _plan_at(nested_cls, root, below)
        single = None if single_cls is None else _plan_at(single_cls, root, below)
        convert = _CONVERTERS.get(f.metadata.get("kafka_type", ""))
        fields.append(_Field(f.name, nested, single, convert))
    where = ".".join((root.__name__, *path))
    own = frozenset(f.name for f in fields)
    return _Plan(cls, own, tuple(fields), root, path, _api_name(root), where)


def _entity_of(hint: Any) -> tuple[type[Any] | None, type[Any] | None]:
    """(element class, None) for a tuple of entities, (None, class) for one entity, else
    (None, None). `X | None` counts as X."""
    hint = _strip_none(hint)
    if typing.get_origin(hint) is tuple:
        (element, *_rest) = typing.get_args(hint)
        if isinstance(element, type) and dataclasses.is_dataclass(element):
            return element, None
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return None, hint
    return None, None


# --- the field names of other versions -------------------------------------------------


def response_field_names(api_key: int) -> FieldNamesByPath:
    """The field names of the responses of `api_key` at each path (`()` is the top level),
    over every version kio has: the names `build_response` accepts."""
    return _field_names(EntityType.response, api_key)


@cache
def _field_names(kind: EntityType, api_key: int) -> FieldNamesByPath:
    return _names_by_path(_versions(kind, api_key))


def _names_by_path(classes: Sequence[type[Any]]) -> FieldNamesByPath:
    """The union of the field names of `classes` at each path below them."""
    known: dict[FieldPath, set[str]] = {}
    pending: list[tuple[FieldPath, type[Any]]] = [((), c) for c in classes]
    while pending:  # Kafka's schemas nest a few levels deep, never recursively
        path, cls = pending.pop()
        names = known.setdefault(path, set())
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            names.add(f.name)
            pending += [((*path, f.name), c) for c in _entity_of(hints[f.name]) if c is not None]
    return types.MappingProxyType({path: frozenset(names) for path, names in known.items()})


@cache
def _versions(kind: EntityType, api_key: int) -> tuple[type[Any], ...]:
    return tuple(
        _load_class(kind, api_key, version)
        for version in range(_VERSION_PROBE_MAX + 1)
        if _has_class(kind, api_key, version)
    )


class _NamesSoFar:
    """The field names at each path of the versions of one class's API loaded so far.

    Starts with the class's own names; `covers` loads further versions, newest first, only
    while a name asked about is still missing. Newest first because handlers write what
    current versions have: a field only newer versions have is found at once, one that
    only older versions had (Metadata's `cluster_authorized_operations`, v8-10) after the
    versions since it went. A header or an entity built on its own has no other versions."""

    def __init__(self, root: type[Any]) -> None:
        self.names: dict[FieldPath, set[str]] = {}
        self._lock = threading.Lock()
        self._add(root)
        kind = getattr(root, "__type__", None)
        self._pending: list[tuple[EntityType, int, int]] = []
        if kind in (EntityType.request, EntityType.response):
            version = root.__version__
            assert 0 <= version <= _VERSION_PROBE_MAX, f"{root.__qualname__}: version not probed"
            self._pending = [
                (kind, root.__api_key__, v)
                for v in range(_VERSION_PROBE_MAX, -1, -1)
                if v != version
            ]

    def covers(self, path: FieldPath, wanted: set[str]) -> bool:
        """Whether every name in `wanted` is a field at `path` in some version. When not,
        every version has been loaded: `names` holds all their names."""
        with self._lock:  # brokers on several threads (tests) may build the same class
            while not wanted <= self.names.get(path, set()):
                if not self._pending:
                    return False
                kind, api_key, version = self._pending.pop(0)
                if _has_class(kind, api_key, version):
                    self._add(_load_class(kind, api_key, version))
            return True

    def _add(self, cls: type[Any]) -> None:
        for path, names in _names_by_path((cls,)).items():
            self.names.setdefault(path, set()).update(names)


_NAMES_SO_FAR: dict[type[Any], _NamesSoFar] = {}


def _names_so_far(root: type[Any]) -> _NamesSoFar:
    found = _NAMES_SO_FAR.get(root)
    if found is None:
        found = _NAMES_SO_FAR[root] = _NamesSoFar(root)
    return found


def _api_name(cls: type[Any]) -> str:
    if getattr(cls, "__type__", None) in (EntityType.request, EntityType.response):
        return f"{cls.__name__} (API key {cls.__api_key__})"
    return cls.__name__


def _strip_none(hint: Any) -> Any:
    """`X | None` -> `X`: a nullable field is built like a required one when not None."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner, *_rest) = [a for a in typing.get_args(hint) if a is not type(None)]
        return inner
    return hint


def build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """An instance of kio class `cls` from `data`; see the module docstring.

    Raises UnknownFieldError for a field no version has, TypeError for a required field
    left out."""
    return _build(_plan(cls), data)


def _build(plan: _Plan, data: Mapping[str, Any]) -> Any:
    if not plan.own.issuperset(data):  # the one check per object: no set is made
        _check_other_versions(plan, data)
    kwargs: dict[str, Any] = {}
    for name, nested, single, convert in plan.fields:
        if name not in data:
            continue
        value = data[name]
        if nested is not None and value is not None:
            value = tuple(
                _build(nested, item) if isinstance(item, Mapping) else item for item in value
            )
        elif single is not None and isinstance(value, Mapping):
            value = _build(single, value)
        elif convert is not None:
            value = convert(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return plan.cls(**kwargs)


def _check_other_versions(plan: _Plan, data: Mapping[str, Any]) -> None:
    """`data` names fields `plan.cls` lacks: fine if another version has them there (they
    are dropped), else UnknownFieldError."""
    so_far = _names_so_far(plan.root)
    wanted = set(data)
    if so_far.covers(plan.path, wanted):
        return
    known = so_far.names.get(plan.path, set())  # every version's, now that all are loaded
    unknown = sorted(wanted - known)
    error = UnknownFieldError(plan.where, plan.cls.__name__, plan.api, unknown)
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        if close:
            error.add_note(f"{name!r}: did you mean {close[0]!r}?")
    raise error


def build_response(api_key: int, version: int, data: Mapping[str, Any]) -> Any:
    return build(response_class(api_key, version), data)


def field_names(cls: type[Any]) -> Sequence[str]:
    return [f.name for f in _plan(cls).fields]
