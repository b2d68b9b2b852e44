"""Hostile requests to the dispatcher: each gets an answer or a closed connection, nothing else.

Two parts, over every API and version the dispatcher advertises (`API_VERSIONS`):

- Nulls where Kafka's schema allows none. kio's reader lets a null (a length of -1) through
  in an array the schema does not declare nullable, and a handler then failed with
  `TypeError: 'NoneType' object is not iterable`, logged as the broker's bug. Kafka's
  generated parser refuses it ("non-nullable field ... was serialized as null") and its
  socket server closes the connection; so does ours. Every array, string and bytes field
  of every request is written as null in turn, by a small schema-driven writer here
  (kio's writer cannot write what the schema forbids). A null where the schema allows one
  must be answered.
- A fuzz run (hypothesis): valid requests written by kio, then cut short, bit-flipped,
  overwritten or given -1 lengths; valid headers followed by random bytes; random frames.
  The dispatcher must answer (now or after stepped time) or raise `CloseConnection`; any
  other exception, or a record logged at ERROR, fails the test. The run is bounded for CI
  (`HOSTILE_EXAMPLES` examples per API, 60 by default: a second or two each); set the
  environment variable higher to fuzz longer.

The connection pump gets the same frames over real sockets in
`test_hostile_connections.py`, and a broker process in
`tests/integration/test_fuzz_every_api.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import io
import logging
import os
import struct
import types
import typing
from collections.abc import Iterator
from typing import Any

import kio.index
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from test_handlers import Client
from test_messages import kio_values

from weirmq.errors import ErrorCode
from weirmq.protocols.kafka.dispatch import API_VERSIONS, CloseConnection, Outcome, Reply
from weirmq.protocols.kafka.wire import messages
from weirmq.settings import Settings
from weirmq.testing import ManualClock, ManualTimers

FieldPath = tuple[str, ...]
ELEMENT = "[]"
"""A path step into the elements of an array (`topics.[]`: a null element of topics)."""
ADVERTISED = [
    (key, version)
    for key, api in sorted(API_VERSIONS.items())
    for version in range(api.min_version, api.max_version + 1)
]
EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "60"))
CORRELATION_ID = 777
ANSWER_ROUNDS_MAX = 20
STEP_MS = 2**31  # past any deadline a request can name (an int32 of milliseconds)
PARTITIONS_PER_REQUEST_MAX = 100
"""Fuzzed CreateTopics / CreatePartitions asking for more are skipped: 100,000 partitions
are accepted today and would take minutes (issue 20, "One CreateTopics blocks everyone")."""
CREATE_TOPICS, CREATE_PARTITIONS, API_VERSIONS_KEY = 19, 37, 18


def _api_id(param: tuple[int, int]) -> str:
    key, version = param
    cls = kio.index.load_request_schema(key, version)
    return f"{cls.__name__.removesuffix('Request')}-v{version}"


# --- a writer of requests with a null anywhere -------------------------------------------


class _Shape(typing.NamedTuple):
    kind: str  # "array", "string", "bytes", "struct", or a fixed-size kafka_type
    nullable: bool
    element: Any  # array: the element's hint; struct: its class
    element_type: str | None  # array of primitives: their kafka_type


_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4}
_FIXED |= {"uint32": 4, "timedelta_i32": 4, "int64": 8, "timedelta_i64": 8}
_FIXED |= {"datetime_i64": 8, "float64": 8, "uuid": 16}


def _shape(hint: Any, kafka_type: str | None) -> _Shape:
    nullable = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    if nullable:
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) is tuple:
        return _Shape("array", nullable, typing.get_args(hint)[0], kafka_type)
    if kafka_type is None:
        return _Shape("struct", nullable, hint, None)
    kind = "bytes" if kafka_type == "records" else kafka_type
    return _Shape(kind, nullable, None, None)


def _fields(cls: type[Any]) -> Iterator[tuple[str, _Shape]]:
    """The fields of `cls` in wire order, tagged fields left out (they are written as none)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("tag") is None:
            yield f.name, _shape(hints[f.name], f.metadata.get("kafka_type"))


def write_body(cls: type[Any], null_at: FieldPath | None = None) -> bytes:
    """A body of `cls` with every array holding one element, every string and bytes empty
    and every number zero; the field at `null_at` written as null, whatever the schema
    says."""
    out = io.BytesIO()
    _write_struct(out, cls, bool(cls.__flexible__), (), null_at)
    return out.getvalue()


def _write_struct(
    out: io.BytesIO, cls: type[Any], flexible: bool, path: FieldPath, null_at: FieldPath | None
) -> None:
    for name, shape in _fields(cls):
        _write_value(out, shape, flexible, (*path, name), null_at)
    if flexible:
        out.write(b"\x00")  # no tagged fields


def _write_value(
    out: io.BytesIO, shape: _Shape, flexible: bool, path: FieldPath, null_at: FieldPath | None
) -> None:
    if path == null_at:
        out.write(_null(shape, flexible))
        return
    kind = shape.kind
    if kind == "array":
        out.write(b"\x02" if flexible else struct.pack(">i", 1))
        element = _element_shape(shape)
        _write_value(out, element, flexible, (*path, ELEMENT), null_at)
    elif kind == "struct":
        if shape.nullable:
            out.write(b"\x01")
        _write_struct(out, shape.element, flexible, path, null_at)
    elif kind == "string":
        out.write(b"\x01" if flexible else b"\x00\x00")
    elif kind == "bytes":
        out.write(b"\x01" if flexible else b"\x00\x00\x00\x00")
    else:
        out.write(bytes(_FIXED[kind]))


def _element_shape(array: _Shape) -> _Shape:
    """An array's element: never nullable (Kafka's arrays hold no nulls)."""
    element = array.element
    if array.element_type is None:
        return _Shape("struct", False, element, None)
    kind = "bytes" if array.element_type == "records" else array.element_type
    return _Shape(kind, False, None, None)


def _null(shape: _Shape, flexible: bool) -> bytes:
    if shape.kind == "struct":
        return b"\xff"
    if flexible:
        return b"\x00"
    return struct.pack(">h" if shape.kind == "string" else ">i", -1)


def null_paths(cls: type[Any]) -> list[tuple[FieldPath, bool]]:
    """Every place that can be written as null, with whether the schema allows it there."""
    found: list[tuple[FieldPath, bool]] = []

    def visit(shape: _Shape, path: FieldPath) -> None:
        if shape.kind in ("array", "string", "bytes") or (
            shape.kind == "struct" and shape.nullable
        ):
            found.append((path, shape.nullable))
        if shape.kind == "array":
            visit(_element_shape(shape), (*path, ELEMENT))
        elif shape.kind == "struct":
            for name, field in _fields(shape.element):
                visit(field, (*path, name))

    visit(_Shape("struct", False, cls, None), ())
    return found


# --- frames ---------------------------------------------------------------------------


def request_frame(
    key: int, version: int, body: bytes, correlation_id: int = CORRELATION_ID
) -> bytes:
    """A request frame (without its size prefix) as a client writes it."""
    flexible = kio.index.load_request_schema(key, version).__flexible__
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    out = io.BytesIO()
    header = header_cls(
        request_api_key=key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="hostile",
    )
    entity_writer(header_cls)(out, header)
    return out.getvalue() + body


def kio_body(request: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(request))(out, request)
    return out.getvalue()


# --- the broker ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def timers() -> ManualTimers:
    return ManualTimers(ManualClock())


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, timers: ManualTimers) -> Iterator[Client]:
    """One broker for the module. Metadata does not auto-create (random names would make
    thousands of topics); everything else is as in production."""
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("hostile") / "data",
        auto_create_topics=False,
        flush_interval_ms=3_600_000,
        group_initial_rebalance_delay_ms=0,
    )
    client = Client(settings, clock=timers.clock, timers=timers)
    client.broker.create_topic("t", 2)
    yield client
    client.close()


class Verdict(typing.NamedTuple):
    answered: bool  # False: CloseConnection
    reason: str


def dispatch(client: Client, timers: ManualTimers, frame: bytes) -> Verdict:
    """What the dispatcher does with `frame`: an answer (waited for, stepping time past
    any deadline) or CloseConnection. Any other exception propagates."""
    try:
        outcome = client.dispatcher.handle(frame, "127.0.0.1")
    except CloseConnection as exc:
        return Verdict(False, str(exc))
    if inspect.isawaitable(outcome):
        try:
            outcome = asyncio.run(_wait_for(outcome, timers))
        except CloseConnection as exc:
            return Verdict(False, str(exc))
    _check_reply(outcome)
    return Verdict(True, "")


async def _wait_for(awaitable: Any, timers: ManualTimers) -> Outcome:
    task = asyncio.ensure_future(awaitable)
    for _ in range(ANSWER_ROUNDS_MAX):
        await asyncio.sleep(0.001)  # a group commit fsync finishes on a thread
        if task.done():
            return task.result()
        timers.advance(STEP_MS)
    task.cancel()
    raise AssertionError(f"no answer after stepping time {ANSWER_ROUNDS_MAX} times")


def _check_reply(outcome: Outcome) -> None:
    if outcome is None:  # acks=0
        return
    assert isinstance(outcome, Reply), outcome
    (size,) = struct.unpack_from(">i", outcome.prefix)
    assert size == outcome.size - 4, "the size prefix does not match the reply"


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """Records logged at ERROR or above while the test runs: a client's mistake must log
    none."""
    caplog.set_level(logging.INFO)
    found: list[logging.LogRecord] = []
    yield found
    found += [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert found == [], [r.getMessage() for r in found]


# --- nulls where the schema allows none ------------------------------------------------


@pytest.mark.parametrize("api", ADVERTISED, ids=_api_id)
def test_the_writer_here_writes_what_kio_reads_back(api: tuple[int, int]) -> None:
    key, version = api
    cls = kio.index.load_request_schema(key, version)
    body = write_body(cls)
    value, size = kio.serial.entity_reader(cls)(body, 0)
    assert size == len(body)
    assert kio_body(value) == body


@pytest.mark.parametrize("api", ADVERTISED, ids=_api_id)
def test_a_null_the_schema_forbids_closes_the_connection(
    api: tuple[int, int], client: Client, timers: ManualTimers, errors: list[Any]
) -> None:
    key, version = api
    cls = kio.index.load_request_schema(key, version)
    forbidden = [path for path, nullable in null_paths(cls) if not nullable]
    for path in forbidden:  # none in Metadata v10-12, where every null is allowed
        frame = request_frame(key, version, write_body(cls, null_at=path))
        if key == API_VERSIONS_KEY:  # the one request answered when malformed
            reply = client.dispatcher.handle(frame)
            assert isinstance(reply, Reply)
            assert b"".join(reply.body)[:2] == struct.pack(">h", ErrorCode.invalid_request)
            continue
        verdict = dispatch(client, timers, frame)
        assert not verdict.answered, f"null {'.'.join(path)} was answered"
        assert "null" in verdict.reason or "-1" in verdict.reason, verdict.reason


@pytest.mark.parametrize("api", ADVERTISED, ids=_api_id)
def test_a_null_the_schema_allows_is_answered(
    api: tuple[int, int], client: Client, timers: ManualTimers, errors: list[Any]
) -> None:
    key, version = api
    cls = kio.index.load_request_schema(key, version)
    assert dispatch(client, timers, request_frame(key, version, write_body(cls))).answered
    for path, nullable in null_paths(cls):
        if nullable:
            frame = request_frame(key, version, write_body(cls, null_at=path))
            verdict = dispatch(client, timers, frame)
            assert verdict.answered, f"null {'.'.join(path)}: {verdict.reason}"


def test_null_topics_of_delete_topics_is_refused_like_kafka(
    client: Client, timers: ManualTimers, errors: list[Any]
) -> None:
    """The case issue 20's fuzzing found (DeleteTopics v1: topic_names = null)."""
    frame = request_frame(20, 1, struct.pack(">ii", -1, 1000))
    verdict = dispatch(client, timers, frame)
    assert verdict == Verdict(
        False,
        "malformed DeleteTopicsRequest v1: non-nullable field topic_names was serialized as null",
    )


# --- the fuzz run ------------------------------------------------------------------------


def _mutations(body: bytes) -> st.SearchStrategy[bytes]:
    """`body` cut short, with bytes overwritten or flipped, or -1 lengths written in."""
    size = len(body)
    if size == 0:
        return st.binary(max_size=16)
    positions = st.integers(0, size - 1)
    cut = st.integers(0, size - 1).map(lambda end: body[:end])
    overwrite = st.lists(st.tuples(positions, st.integers(0, 255)), min_size=1, max_size=4)
    flip = st.lists(st.tuples(positions, st.integers(0, 7)), min_size=1, max_size=4)
    minus_one = st.tuples(positions, st.sampled_from([b"\xff\xff", b"\xff\xff\xff\xff", b"\x00"]))
    return st.one_of(
        cut,
        overwrite.map(lambda changes: _overwrite(body, changes)),
        flip.map(lambda changes: _overwrite(body, [(p, body[p] ^ (1 << b)) for p, b in changes])),
        minus_one.map(lambda change: _splice(body, *change)),
        st.binary(max_size=8).map(lambda tail: body + tail),
    )


def _overwrite(body: bytes, changes: list[tuple[int, int]]) -> bytes:
    out = bytearray(body)
    for position, byte in changes:
        out[position] = byte
    return bytes(out)


def _splice(body: bytes, position: int, raw: bytes) -> bytes:
    return body[:position] + raw + body[position + len(raw) :]


@st.composite
def hostile_frames(draw: st.DrawFn, key: int) -> bytes:
    api = API_VERSIONS[key]
    version = draw(st.integers(api.min_version, api.max_version), label="version")
    cls = kio.index.load_request_schema(key, version)
    how = draw(st.sampled_from(["mutated", "garbage body", "garbage frame"]), label="how")
    if how == "garbage frame":
        return draw(st.binary(min_size=0, max_size=64), label="frame")
    if how == "garbage body":
        body = draw(st.binary(max_size=200), label="body")
    else:
        request = draw(kio_values(cls), label="request")
        body = draw(_mutations(kio_body(request)), label="body")
    _skip_costly(key, version, body)
    return request_frame(key, version, body)


def _skip_costly(key: int, version: int, body: bytes) -> None:
    """Skip a CreateTopics or CreatePartitions that would create many partitions: that
    they take long is known, and not what this test is about."""
    if key not in (CREATE_TOPICS, CREATE_PARTITIONS):
        return
    try:  # never kio's reader alone: a huge count makes it abort the process
        request = messages.decode_request(key, version, body, 0)
    except messages.DecodeError:  # the broker refuses it without creating anything
        return
    if key == CREATE_TOPICS:
        wanted = sum(max(t.num_partitions, len(t.assignments)) for t in request.topics or ())
    else:
        wanted = sum(t.count for t in request.topics or ())
    assume(wanted <= PARTITIONS_PER_REQUEST_MAX)


@pytest.mark.parametrize("key", sorted(API_VERSIONS))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_hostile_request_is_answered_or_closes_the_connection(
    key: int,
    data: st.DataObject,
    client: Client,
    timers: ManualTimers,
    errors: list[Any],
) -> None:
    frame = data.draw(hostile_frames(key), label="frame")
    dispatch(client, timers, frame)


@pytest.mark.parametrize("api", ADVERTISED, ids=_api_id)
def test_a_valid_request_is_still_answered_after_the_fuzzing(
    api: tuple[int, int], client: Client, timers: ManualTimers
) -> None:
    """Run last in this module: the broker the fuzzing hit still answers every API."""
    key, version = api
    cls = kio.index.load_request_schema(key, version)
    assert dispatch(client, timers, request_frame(key, version, write_body(cls))).answered


def test_paths_name_real_fields() -> None:
    """The writer's paths: a known request, spelt out."""
    cls = kio.index.load_request_schema(20, 1)
    assert null_paths(cls) == [(("topic_names",), False), (("topic_names", ELEMENT), False)]
    assert write_body(cls, null_at=("topic_names",)) == struct.pack(">ii", -1, 0)
    assert write_body(cls) == struct.pack(">ih", 1, 0) + bytes(4)
