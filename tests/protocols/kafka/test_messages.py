"""Request decoding and response building, checked against kio's own reader and writer.

Requests are written the way a client writes them (kio's header and body writers) and must
come back through our header parser and `decode_request` unchanged. Responses are built
from plain data, the way handlers write them, and must read back with kio's reader as the
object we meant. Random kio objects come from `kio_values`, which walks a class's type
hints; kio registers hypothesis strategies for its primitive types but not for `Records`.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioRequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from weirmq.errors import ErrorCode
from weirmq.protocols.kafka.dispatch import API_VERSIONS
from weirmq.protocols.kafka.wire import messages
from weirmq.protocols.kafka.wire.framing import parse_request_header

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
MS = datetime.timedelta(milliseconds=1)

# Versions the broker speaks, and the first flexible version of each (Kafka's JSON schemas).
VERSIONS = {
    0: range(3, 13),  # Produce
    1: range(4, 13),  # Fetch
    2: range(1, 11),  # ListOffsets
    3: range(0, 13),  # Metadata
    18: range(0, 5),  # ApiVersions
    22: range(0, 6),  # InitProducerId
    23: range(2, 5),  # OffsetForLeaderEpoch
}
FIRST_FLEXIBLE = {0: 9, 1: 12, 2: 6, 3: 9, 18: 3, 22: 2, 23: 4}
ALL_VERSIONS = [(key, version) for key, versions in VERSIONS.items() for version in versions]


def _api_id(param: tuple[int, int]) -> str:
    key, version = param
    return f"{messages.request_class(key, version).__name__.removesuffix('Request')}-v{version}"


# --- random kio objects ------------------------------------------------------------------


def _is_entity(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def kio_values(hint: Any) -> st.SearchStrategy[Any]:
    """Values of a kio type hint, nested entities and nullable arrays included."""
    if _is_entity(hint):
        hints = typing.get_type_hints(hint)
        fields = {f.name: kio_values(hints[f.name]) for f in dataclasses.fields(hint)}
        return st.builds(hint, **fields)
    origin = typing.get_origin(hint)
    if origin is tuple:
        element, _ellipsis = typing.get_args(hint)
        return st.lists(kio_values(element), max_size=3).map(tuple)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(
            *(st.none() if arg is type(None) else kio_values(arg) for arg in typing.get_args(hint))
        )
    if hint is Records:
        return st.binary(max_size=64)
    return st.from_type(hint)


def _kio_bytes(value: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(value))(out, value)
    return out.getvalue()


def _kio_read(cls: type[Any], data: bytes) -> Any:
    value, size = entity_reader(cls)(data, 0)
    assert size == len(data)
    return value


# --- flexible versions -------------------------------------------------------------------


@pytest.mark.parametrize("api", ALL_VERSIONS, ids=_api_id)
def test_request_is_flexible_follows_kafka(api: tuple[int, int]) -> None:
    key, version = api
    assert messages.request_is_flexible(key, version) is (version >= FIRST_FLEXIBLE[key])


@pytest.mark.parametrize("api", ALL_VERSIONS, ids=_api_id)
def test_response_header_is_flexible_follows_kafka(api: tuple[int, int]) -> None:
    key, version = api
    # ApiVersions answers always use header v0, so that any client can read them.
    expected = key != 18 and version >= FIRST_FLEXIBLE[key]
    assert messages.response_header_is_flexible(key, version) is expected


@pytest.mark.parametrize(("key", "version"), [(999, 0), (-1, 0), (3, 999), (3, -1)])
def test_unknown_api_or_version_is_not_flexible(key: int, version: int) -> None:
    assert messages.request_is_flexible(key, version) is False


def test_classes_are_kio_classes_of_the_right_api_and_version() -> None:
    for key, version in ALL_VERSIONS:
        for cls in (messages.request_class(key, version), messages.response_class(key, version)):
            assert (cls.__api_key__, cls.__version__) == (key, version)
    assert messages.request_class(3, 12) is messages.request_class(3, 12)


# --- requests: a client's frame comes back as the client's object ----------------------------


@pytest.mark.parametrize("api", ALL_VERSIONS, ids=_api_id)
@settings(max_examples=20, deadline=None)
@given(
    data=st.data(),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.one_of(st.none(), st.text(max_size=20)),
)
def test_request_written_by_kio_parses_and_decodes(
    api: tuple[int, int], data: st.DataObject, correlation_id: int, client_id: str | None
) -> None:
    key, version = api
    cls = messages.request_class(key, version)
    request = data.draw(kio_values(cls), label="request")
    header_class = KioRequestHeaderV2 if cls.__flexible__ else KioRequestHeaderV1
    header_bytes = _kio_bytes(
        header_class(
            request_api_key=key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        )
    )
    body = _kio_bytes(request)
    assert messages.encode(request) == body
    frame = header_bytes + body

    header = parse_request_header(frame, messages.request_is_flexible)
    assert (header.api_key, header.api_version) == (key, version)
    assert (header.correlation_id, header.client_id) == (correlation_id, client_id)
    assert header.body_offset == len(header_bytes)
    assert messages.decode_request(key, version, frame, header.body_offset) == request
    # Large frames reach the decoder as read-only views of a bytearray.
    view = memoryview(bytearray(frame)).toreadonly()
    assert messages.decode_request(key, version, view, header.body_offset) == request

    # Any body cut short fails as a DecodeError: every byte of a body is needed.
    for end in range(header.body_offset, len(frame), max(1, len(body) // 40)):
        with pytest.raises(messages.DecodeError):
            messages.decode_request(key, version, frame[:end], header.body_offset)


GARBAGE_APIS = [(0, 3), (0, 9), (0, 12), (1, 4), (1, 12), (2, 1), (2, 10), (3, 0), (3, 12)]
GARBAGE_APIS += [(18, 3), (22, 5), (23, 2), (23, 4)]


def _decodes_or_fails_cleanly(key: int, version: int, body: bytes, offset: int) -> None:
    try:
        request = messages.decode_request(key, version, body, offset)
    except messages.DecodeError:
        return
    assert isinstance(request, messages.request_class(key, version))


@pytest.mark.parametrize("api", GARBAGE_APIS, ids=_api_id)
@settings(max_examples=150, deadline=None)
@given(body=st.binary(max_size=200), offset=st.integers(0, 210))
def test_garbage_body_is_a_decode_error_or_a_request(
    api: tuple[int, int], body: bytes, offset: int
) -> None:
    key, version = api
    _decodes_or_fails_cleanly(key, version, body, offset)


@pytest.mark.parametrize("api", GARBAGE_APIS, ids=_api_id)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_corrupted_body_is_a_decode_error_or_a_request(
    api: tuple[int, int], data: st.DataObject
) -> None:
    """Corrupting a valid body gets much further into the parser than random bytes do."""
    key, version = api
    cls = messages.request_class(key, version)
    body = bytearray(_kio_bytes(data.draw(kio_values(cls), label="request")))
    changes = data.draw(
        st.lists(st.tuples(st.integers(0, len(body) - 1), st.integers(0, 255)), min_size=1),
        label="changes",
    )
    for position, byte in changes:
        body[position] = byte
    _decodes_or_fails_cleanly(key, version, bytes(body), 0)


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        # A compact array claiming ~4 billion topics: kio alone would try to allocate 32 GB.
        (0, 9, "00ffff00000000808080800f"),
        # An int32 array count of 2**31-1 in four bytes.
        (3, 1, "7fffffff"),
        (1, 4, "ffffffff" + "00000000" * 3 + "7fffffff"),
    ],
)
def test_lengths_beyond_the_frame_are_refused_before_kio_allocates(
    key: int, version: int, body: str
) -> None:
    with pytest.raises(messages.DecodeError, match="claimed"):
        messages.decode_request(key, version, bytes.fromhex(body), 0)


# --- responses: plain data -> kio objects -> bytes -----------------------------------------

RESPONSE_VERSIONS = [
    (key, version)
    for key, api in sorted(API_VERSIONS.items())
    for version in range(api.min_version, api.max_version + 1)
]


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def plain_data(entity: Any, leave_out: Callable[[], bool]) -> tuple[dict[str, Any], Any]:
    """`entity` written the way a handler writes a response: mappings and lists, times as int
    ms (a null timestamp as -1). A field with a default is left out when `leave_out()` says
    so; the second value is the object that data stands for, with those fields defaulted."""
    data: dict[str, Any] = {}
    meant: dict[str, Any] = {}
    for f in dataclasses.fields(entity):
        default = _default(f)
        if default is not dataclasses.MISSING and leave_out():
            meant[f.name] = default
            continue
        value = getattr(entity, f.name)
        data[f.name], meant[f.name] = _plain_value(value, f.metadata.get("kafka_type"), leave_out)
    return data, type(entity)(**meant)


def _plain_value(
    value: Any, kafka_type: str | None, leave_out: Callable[[], bool]
) -> tuple[Any, Any]:
    if dataclasses.is_dataclass(value):
        return plain_data(value, leave_out)
    if isinstance(value, tuple):
        pairs = [_plain_value(item, kafka_type, leave_out) for item in value]
        return [data for data, _ in pairs], tuple(meant for _, meant in pairs)
    if kafka_type == "datetime_i64":
        return (-1 if value is None else (value - EPOCH) // MS), value
    if isinstance(value, datetime.timedelta):
        return value // MS, value
    return value, value


def _agrees(value: Any, data: Any) -> bool:
    """Whether kio `value` holds what plain `data` says, for the fields its version has."""
    if isinstance(data, Mapping):
        names = {f.name for f in dataclasses.fields(value)}
        return all(_agrees(getattr(value, k), v) for k, v in data.items() if k in names)
    if isinstance(data, list):
        return len(value) == len(data) and all(map(_agrees, value, data))
    if isinstance(value, datetime.timedelta):
        return bool(value == data * MS)
    if isinstance(value, datetime.datetime):
        return bool((value - EPOCH) // MS == data)
    if value is None and data == -1:  # a null timestamp
        return True
    return bool(value == data)


def _entity_class(cls: type[Any], *path: str) -> type[Any]:
    """The entity class at `path` of field names below `cls` (through lists and None)."""
    for name in path:
        hint = typing.get_type_hints(cls)[name]
        candidates = {hint, *typing.get_args(hint)}
        candidates |= {typing.get_args(c)[0] for c in candidates if typing.get_origin(c) is tuple}
        (cls,) = [c for c in candidates if _is_entity(c)]
    return cls


@pytest.mark.parametrize("api", RESPONSE_VERSIONS, ids=_api_id)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_response_from_plain_data_reads_back_as_the_object_meant(
    api: tuple[int, int], data: st.DataObject
) -> None:
    key, version = api
    cls = messages.response_class(key, version)
    original = data.draw(kio_values(cls), label="response")
    rng = data.draw(st.randoms(use_true_random=False), label="rng")
    plain, meant = plain_data(original, leave_out=lambda: rng.random() < 0.25)

    built = messages.build_response(key, version, plain)
    assert built == meant
    assert messages.build(cls, plain) == meant
    body = messages.encode(built)
    assert body == _kio_bytes(meant)
    assert _kio_read(cls, body) == meant


def test_plain_data_with_nothing_left_out_means_the_original() -> None:
    cls = messages.response_class(0, 12)
    original = cls(
        responses=(),
        throttle_time=datetime.timedelta(milliseconds=5),
    )
    assert plain_data(original, leave_out=lambda: False) == (
        {"responses": [], "throttle_time": 5, "node_endpoints": []},
        original,
    )


# What each handler fills in (broker/produce.py, fetch.py, offsets.py, metadata.py and the
# dispatcher's ApiVersions answer), every field it sets, including those only newer versions
# have. Each must build for every version advertised.
TOPIC_ID = uuid.UUID("5f1c7a4e-2b9d-4c3a-8e6f-0a1b2c3d4e5f")
NO_AUTHORIZED_OPERATIONS = -(2**31)
_TOPIC_ID = uuid.UUID("3f9d4c1e-52b1-4a5e-9a47-1c0c8f0e2b6d")
_OFFSET_FETCH_TOPIC = {
    "name": "t",
    "partitions": [
        {
            "partition_index": 0,
            "committed_offset": 42,
            "committed_leader_epoch": -1,
            "metadata": "",
            "error_code": ErrorCode.none,
        }
    ],
}
_DESCRIBED_PARTITIONS = {"topic_id": _TOPIC_ID, "topic_name": "t", "partitions": [0, 1]}

HANDLER_DATA: dict[int, dict[str, Any]] = {
    0: {
        "responses": [
            {
                "name": "orders",
                "topic_id": uuid.UUID("0f9e8d7c-6b5a-4938-8271-605f4e3d2c1b"),
                "partition_responses": [
                    {
                        "index": 0,
                        "error_code": ErrorCode.none,
                        "base_offset": 41,
                        "log_append_time": -1,
                        "log_start_offset": 0,
                        "record_errors": [],
                        "error_message": None,
                    },
                    {
                        "index": 1,
                        "error_code": ErrorCode.none,
                        "base_offset": 7,
                        "log_append_time": 1_700_000_000_123,
                        "log_start_offset": 3,
                        "record_errors": [],
                        "error_message": None,
                    },
                    {
                        "index": 9,
                        "error_code": ErrorCode.unknown_topic_or_partition,
                        "base_offset": -1,
                        "log_append_time": -1,
                        "log_start_offset": -1,
                        "record_errors": [],
                        "error_message": None,
                    },
                ],
            }
        ],
        "throttle_time": 0,
    },
    1: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": [
            {
                "topic": "orders",
                "topic_id": uuid.UUID("0f9e8d7c-6b5a-4938-8271-605f4e3d2c1b"),
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": ErrorCode.none,
                        "high_watermark": 42,
                        "last_stable_offset": 42,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": b"\x00" * 61,
                    },
                    {
                        "partition_index": 1,
                        "error_code": ErrorCode.offset_out_of_range,
                        "high_watermark": 10,
                        "last_stable_offset": 10,
                        "log_start_offset": 5,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": b"",
                    },
                ],
            }
        ],
    },
    2: {
        "throttle_time": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": ErrorCode.none,
                        "timestamp": 1_700_000_000_000,
                        "offset": 17,
                        "leader_epoch": 0,
                    },
                    {
                        "partition_index": 1,
                        "error_code": ErrorCode.none,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": 0,
                    },
                ],
            }
        ],
    },
    3: {
        "throttle_time": 0,
        "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
        "cluster_id": "weirmq-test-cluster",
        "controller_id": 1,
        "topics": [
            {
                "error_code": ErrorCode.none,
                "name": "orders",
                "topic_id": TOPIC_ID,
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": ErrorCode.none,
                        "partition_index": 0,
                        "leader_id": 1,
                        "leader_epoch": 0,
                        "replica_nodes": [1],
                        "isr_nodes": [1],
                        "offline_replicas": [],
                    },
                    {
                        "error_code": ErrorCode.kafka_storage_error,
                        "partition_index": 1,
                        "leader_id": -1,
                        "leader_epoch": 0,
                        "replica_nodes": [1],
                        "isr_nodes": [],
                        "offline_replicas": [1],
                    },
                ],
                "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
            },
            {
                "error_code": ErrorCode.unknown_topic_or_partition,
                "name": "missing",
                "topic_id": None,
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
            },
        ],
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        "error_code": ErrorCode.none,
    },
    8: {
        "throttle_time": 0,
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "error_code": ErrorCode.none}]}
        ],
    },
    9: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "topics": [_OFFSET_FETCH_TOPIC],
        "groups": [
            {"group_id": "g", "topics": [_OFFSET_FETCH_TOPIC], "error_code": ErrorCode.none}
        ],
    },
    10: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "node_id": 0,
        "host": "127.0.0.1",
        "port": 9092,
        "coordinators": [
            {
                "key": "g",
                "node_id": 0,
                "host": "127.0.0.1",
                "port": 9092,
                "error_code": ErrorCode.none,
                "error_message": None,
            }
        ],
    },
    11: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "generation_id": 1,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": "m-1",
        "skip_assignment": False,
        "member_id": "m-1",
        "members": [{"member_id": "m-1", "group_instance_id": None, "metadata": b"\x00\x01"}],
    },
    12: {"throttle_time": 0, "error_code": ErrorCode.none},
    13: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "members": [{"member_id": "m-1", "group_instance_id": None, "error_code": ErrorCode.none}],
    },
    14: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignment": b"\x00\x00",
    },
    15: {
        "throttle_time": 0,
        "groups": [
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": "g",
                "group_state": "Stable",
                "protocol_type": "consumer",
                "protocol_data": "range",
                "members": [
                    {
                        "member_id": "m-1",
                        "group_instance_id": None,
                        "client_id": "c",
                        "client_host": "/127.0.0.1",
                        "member_metadata": b"\x00",
                        "member_assignment": b"\x00",
                    }
                ],
                "authorized_operations": NO_AUTHORIZED_OPERATIONS,
            }
        ],
    },
    16: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "groups": [
            {
                "group_id": "g",
                "protocol_type": "consumer",
                "group_state": "Stable",
                "group_type": "classic",
            }
        ],
    },
    18: {
        "error_code": ErrorCode.none,
        "api_keys": [
            {"api_key": key, "min_version": api.min_version, "max_version": api.max_version}
            for key, api in sorted(API_VERSIONS.items())
        ],
        "throttle_time": 0,
    },
    22: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "producer_id": 4000,
        "producer_epoch": 0,
    },
    23: {
        "throttle_time": 0,
        "topics": [
            {
                "topic": "orders",
                "partitions": [
                    {
                        "error_code": ErrorCode.none,
                        "partition": 0,
                        "leader_epoch": 0,
                        "end_offset": 42,
                    },
                    {
                        "error_code": ErrorCode.unknown_topic_or_partition,
                        "partition": 5,
                        "leader_epoch": -1,
                        "end_offset": -1,
                    },
                ],
            }
        ],
    },
    # The admin APIs (weirmq.broker.admin), one success and one refusal each.
    19: {
        "throttle_time": 0,
        "topics": [
            {
                "name": "orders",
                "topic_id": TOPIC_ID,
                "error_code": ErrorCode.none,
                "error_message": None,
                "topic_config_error_code": ErrorCode.none,
                "num_partitions": 3,
                "replication_factor": 1,
                "configs": [
                    {
                        "name": "retention.ms",
                        "value": "1000",
                        "read_only": False,
                        "config_source": 1,
                        "is_sensitive": False,
                    }
                ],
            },
            {
                "name": "orders",
                "topic_id": None,
                "error_code": ErrorCode.topic_already_exists,
                "error_message": "topic 'orders' already exists",
                "topic_config_error_code": ErrorCode.none,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": [],
            },
        ],
    },
    20: {
        "throttle_time": 0,
        "responses": [
            {
                "name": "orders",
                "topic_id": TOPIC_ID,
                "error_code": ErrorCode.none,
                "error_message": None,
            },
            {
                "name": "missing",
                "topic_id": None,
                "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": "unknown topic 'missing'",
            },
        ],
    },
    21: {
        "throttle_time": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {"partition_index": 0, "low_watermark": 12, "error_code": ErrorCode.none},
                    {
                        "partition_index": 1,
                        "low_watermark": -1,
                        "error_code": ErrorCode.offset_out_of_range,
                    },
                ],
            }
        ],
    },
    32: {
        "throttle_time": 0,
        "results": [
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "resource_type": 2,
                "resource_name": "orders",
                "configs": [
                    {
                        "name": "retention.ms",
                        "value": "1000",
                        "read_only": False,
                        "config_source": 1,
                        "is_sensitive": False,
                        "synonyms": [
                            {"name": "retention.ms", "value": "1000", "source": 1},
                            {"name": "log.retention.ms", "value": "604800000", "source": 5},
                        ],
                        "config_type": 5,
                        "documentation": "segments older than this are deleted",
                    }
                ],
            },
            {
                "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": "unknown topic 'missing'",
                "resource_type": 2,
                "resource_name": "missing",
                "configs": [],
            },
        ],
    },
    33: {
        "throttle_time": 0,
        "responses": [
            {
                "error_code": ErrorCode.invalid_config,
                "error_message": "unknown topic config 'x'",
                "resource_type": 2,
                "resource_name": "orders",
            }
        ],
    },
    35: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "results": [
            {
                "error_code": ErrorCode.none,
                "log_dir": "/var/lib/weirmq",
                "topics": [
                    {
                        "name": "orders",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "partition_size": 4096,
                                "offset_lag": 0,
                                "is_future_key": False,
                            }
                        ],
                    }
                ],
                "total_bytes": 1 << 40,
                "usable_bytes": 1 << 39,
            }
        ],
    },
    37: {
        "throttle_time": 0,
        "results": [
            {"name": "orders", "error_code": ErrorCode.none, "error_message": None},
            {
                "name": "missing",
                "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": "unknown topic 'missing'",
            },
        ],
    },
    42: {"throttle_time": 0, "results": [{"group_id": "g", "error_code": ErrorCode.none}]},
    44: {
        "throttle_time": 0,
        "responses": [
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "resource_type": 2,
                "resource_name": "orders",
            }
        ],
    },
    47: {
        "error_code": ErrorCode.none,
        "throttle_time": 0,
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "error_code": ErrorCode.none}]}
        ],
    },
    60: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": "Zm9vYmFyYmF6cXV4cXV1eA",
        "controller_id": 1,
        "brokers": [
            {"broker_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None, "is_fenced": False}
        ],
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    },
    68: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": "m-1",
        "member_epoch": 3,
        "heartbeat_interval": 5000,
        "assignment": {"topic_partitions": [{"topic_id": _TOPIC_ID, "partitions": [0, 1]}]},
    },
    69: {
        "throttle_time": 0,
        "groups": [
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": "g",
                "group_state": "stable",
                "group_epoch": 3,
                "assignment_epoch": 3,
                "assignor_name": "uniform",
                "members": [
                    {
                        "member_id": "m-1",
                        "instance_id": None,
                        "rack_id": None,
                        "member_epoch": 3,
                        "client_id": "c",
                        "client_host": "/127.0.0.1",
                        "subscribed_topic_names": ["t"],
                        "subscribed_topic_regex": None,
                        "assignment": {"topic_partitions": [_DESCRIBED_PARTITIONS]},
                        "target_assignment": {"topic_partitions": [_DESCRIBED_PARTITIONS]},
                        "member_type": -1,
                    }
                ],
                "authorized_operations": NO_AUTHORIZED_OPERATIONS,
            }
        ],
    },
    48: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "app"}],
                "values": [{"key": "producer_byte_rate", "value": 1024.0}],
            }
        ],
    },
    49: {
        "throttle_time": 0,
        "entries": [
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "entity": [{"entity_type": "client-id", "entity_name": None}],
            }
        ],
    },
    76: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": "m-1",
        "member_epoch": 2,
        "heartbeat_interval": 5000,
        "assignment": {"topic_partitions": [{"topic_id": _TOPIC_ID, "partitions": [0, 1]}]},
    },
    77: {
        "throttle_time": 0,
        "groups": [
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": "g",
                "group_state": "Stable",
                "group_epoch": 2,
                "assignment_epoch": 2,
                "assignor_name": "simple",
                "members": [
                    {
                        "member_id": "m-1",
                        "rack_id": None,
                        "member_epoch": 2,
                        "client_id": "c",
                        "client_host": "/127.0.0.1",
                        "subscribed_topic_names": ["t"],
                        "assignment": {"topic_partitions": [_DESCRIBED_PARTITIONS]},
                    }
                ],
                "authorized_operations": NO_AUTHORIZED_OPERATIONS,
            }
        ],
    },
    78: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "acquisition_lock_timeout": 30000,
        "responses": [
            {
                "topic_id": _TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "acknowledge_error_code": ErrorCode.none,
                        "acknowledge_error_message": None,
                        "current_leader": {"leader_id": 1, "leader_epoch": 0},
                        "records": b"",
                        "acquired_records": [
                            {"first_offset": 0, "last_offset": 4, "delivery_count": 1}
                        ],
                    }
                ],
            }
        ],
        "node_endpoints": [],
    },
    79: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": [
            {
                "topic_id": _TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": ErrorCode.invalid_record_state,
                        "error_message": "not held",
                        "current_leader": {"leader_id": 1, "leader_epoch": 0},
                    }
                ],
            }
        ],
        "node_endpoints": [],
    },
    # The single-node cluster APIs (apis/cluster.py).
    34: {
        "throttle_time": 0,
        "results": [
            {
                "topic_name": "orders",
                "partitions": [
                    {"partition_index": 0, "error_code": ErrorCode.none},
                    {"partition_index": 1, "error_code": ErrorCode.log_dir_not_found},
                ],
            }
        ],
    },
    43: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "replica_election_results": [
            {
                "topic": "orders",
                "partition_result": [
                    {
                        "partition_id": 0,
                        "error_code": ErrorCode.election_not_needed,
                        "error_message": "the leader is already the preferred and only replica",
                    }
                ],
            }
        ],
    },
    45: {
        "throttle_time": 0,
        "allow_replication_factor_change": True,
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": [
            {
                "name": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": ErrorCode.invalid_replica_assignment,
                        "error_message": "broker 2 is not registered",
                    }
                ],
            }
        ],
    },
    46: {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "topics": []},
    55: {
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": [
            {
                "topic_name": "__cluster_metadata",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "leader_id": 1,
                        "leader_epoch": 1,
                        "high_watermark": 0,
                        "current_voters": [
                            {
                                "replica_id": 1,
                                "replica_directory_id": None,
                                "log_end_offset": 0,
                                "last_fetch_timestamp": 1_700_000_000_123,
                                "last_caught_up_timestamp": 1_700_000_000_123,
                            }
                        ],
                        "observers": [],
                    }
                ],
            }
        ],
        "nodes": [
            {
                "node_id": 1,
                "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}],
            }
        ],
    },
    74: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "config_resources": [{"resource_name": "orders", "resource_type": 2}],
    },
    75: {
        "throttle_time": 0,
        "topics": [
            {
                "error_code": ErrorCode.none,
                "name": "orders",
                "topic_id": uuid.UUID("0f9e8d7c-6b5a-4938-8271-605f4e3d2c1b"),
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": ErrorCode.none,
                        "partition_index": 0,
                        "leader_id": 1,
                        "leader_epoch": 0,
                        "replica_nodes": [1],
                        "isr_nodes": [1],
                        "eligible_leader_replicas": [],
                        "last_known_elr": [],
                        "offline_replicas": [],
                    }
                ],
                "topic_authorized_operations": 3576,
            }
        ],
        "next_cursor": {"topic_name": "orders", "partition_index": 1},
    },
    # What apis/transactions.py fills in: both shapes of AddPartitionsToTxn (v0-3 and v4+).
    24: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "results_by_topic_v3_and_below": [
            {
                "name": "orders",
                "results_by_partition": [
                    {"partition_index": 0, "partition_error_code": ErrorCode.none}
                ],
            }
        ],
        "results_by_transaction": [
            {
                "transactional_id": "tx",
                "topic_results": [
                    {
                        "name": "orders",
                        "results_by_partition": [
                            {"partition_index": 0, "partition_error_code": ErrorCode.none}
                        ],
                    }
                ],
            }
        ],
    },
    25: {"throttle_time": 0, "error_code": ErrorCode.none},
    26: {"throttle_time": 0, "error_code": ErrorCode.none},
    28: {
        "throttle_time": 0,
        "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "error_code": ErrorCode.none}]}
        ],
    },
    61: {
        "throttle_time": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "active_producers": [
                            {
                                "producer_id": 4000,
                                "producer_epoch": 1,
                                "last_sequence": 9,
                                "last_timestamp": 1_700_000_000_000,
                                "coordinator_epoch": 0,
                                "current_txn_start_offset": 40,
                            }
                        ],
                    }
                ],
            }
        ],
    },
    65: {
        "throttle_time": 0,
        "transaction_states": [
            {
                "error_code": ErrorCode.none,
                "transactional_id": "tx",
                "transaction_state": "Ongoing",
                "transaction_timeout": 60_000,
                "transaction_start_time": 1_700_000_000_000,
                "producer_id": 4000,
                "producer_epoch": 1,
                "topics": [{"topic": "orders", "partitions": [0, 1]}],
            }
        ],
    },
    66: {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "unknown_state_filters": ["Nope"],
        "transaction_states": [
            {"transactional_id": "tx", "producer_id": 4000, "transaction_state": "Ongoing"}
        ],
    },
}


def test_handler_data_covers_every_api_advertised() -> None:
    assert HANDLER_DATA.keys() == API_VERSIONS.keys()


@pytest.mark.parametrize("api", RESPONSE_VERSIONS, ids=_api_id)
def test_what_handlers_fill_in_builds_for_every_version(api: tuple[int, int]) -> None:
    key, version = api
    cls = messages.response_class(key, version)
    built = messages.build_response(key, version, HANDLER_DATA[key])
    assert type(built) is cls
    assert _agrees(built, HANDLER_DATA[key])
    assert _kio_read(cls, messages.encode(built)) == built


# --- responses: one conversion at a time ---------------------------------------------------

INIT_PRODUCER_ID = 22
PRODUCE_VERSIONS = [api for api in RESPONSE_VERSIONS if api[0] == 0]
FETCH_VERSIONS = [api for api in RESPONSE_VERSIONS if api[0] == 1]
BASE_OFFSET = 0x0102030405060708  # a pattern that cannot be mistaken for its neighbours


@pytest.mark.parametrize("version", range(6))
@pytest.mark.parametrize("throttle_time", [0, 250, 2**31 - 1])
def test_throttle_time_in_ms_becomes_a_timedelta(version: int, throttle_time: int) -> None:
    data: dict[str, Any] = {"throttle_time": throttle_time, "error_code": ErrorCode.none}
    data |= {"producer_id": 4000, "producer_epoch": 3}
    built = messages.build_response(INIT_PRODUCER_ID, version, data)
    assert built.throttle_time == datetime.timedelta(milliseconds=throttle_time)
    # InitProducerIdResponse starts with throttle_time_ms, an int32 in every version.
    assert messages.encode(built)[:4] == struct.pack(">i", throttle_time)
    # A timedelta, as kio has it, is taken as it is.
    data["throttle_time"] = datetime.timedelta(milliseconds=throttle_time)
    assert messages.build_response(INIT_PRODUCER_ID, version, data) == built


def _produce_data(log_append_time: Any) -> dict[str, Any]:
    partition = {
        "index": 0,
        "error_code": ErrorCode.none,
        "base_offset": BASE_OFFSET,
        "log_append_time": log_append_time,
        "record_errors": [],
    }
    topic = {"name": "t", "topic_id": uuid.UUID(int=7), "partition_responses": [partition]}
    return {"responses": [topic]}


def _only_partition(response: Any) -> Any:
    ((partition,),) = [topic.partition_responses for topic in response.responses]
    return partition


@pytest.mark.parametrize("api", PRODUCE_VERSIONS, ids=_api_id)
@pytest.mark.parametrize("log_append_time", [0, 1, 1_700_000_000_123, 253_402_300_799_999])
def test_produce_log_append_time_ms_is_written_as_that_int64(
    api: tuple[int, int], log_append_time: int
) -> None:
    key, version = api
    built = messages.build_response(key, version, _produce_data(log_append_time))
    assert _only_partition(built).log_append_time == EPOCH + log_append_time * MS
    body = messages.encode(built)
    # base_offset and log_append_time_ms are adjacent int64s in every version we speak.
    assert struct.pack(">qq", BASE_OFFSET, log_append_time) in body
    # kio's reader goes through float seconds, exact to the microsecond only below 2**33 s
    # (the year 2242): the far end of the range is checked in the bytes alone.
    if log_append_time < 2**33 * 1000:
        decoded = _kio_read(messages.response_class(key, version), body)
        assert _only_partition(decoded) == _only_partition(built)


@pytest.mark.parametrize("api", PRODUCE_VERSIONS, ids=_api_id)
@pytest.mark.parametrize("no_timestamp", [-1, -2, None])
def test_produce_log_append_time_minus_one_is_null(
    api: tuple[int, int], no_timestamp: int | None
) -> None:
    key, version = api
    built = messages.build_response(key, version, _produce_data(no_timestamp))
    assert _only_partition(built).log_append_time is None
    body = messages.encode(built)
    assert struct.pack(">qq", BASE_OFFSET, -1) in body
    assert _only_partition(_kio_read(messages.response_class(key, version), body)) == (
        _only_partition(built)
    )


def _metadata_topic(name: str | None, topic_id: uuid.UUID | None, **more: Any) -> dict[str, Any]:
    topic = {"error_code": ErrorCode.none, "name": name, "topic_id": topic_id}
    return topic | {"is_internal": False, "partitions": []} | more


@pytest.mark.parametrize("version", [10, 11, 12])
def test_metadata_topic_ids_are_uuids(version: int) -> None:
    data: dict[str, Any] = {
        "throttle_time": 0,
        "brokers": [],
        "topics": [_metadata_topic("orders", TOPIC_ID)],
    }
    if version >= 12:  # a topic asked for by an id we do not know: named by id only
        unknown = uuid.UUID(int=1)
        data["topics"].append(_metadata_topic(None, unknown, error_code=ErrorCode.unknown_topic_id))
    built = messages.build_response(3, version, data)
    assert built.topics[0].topic_id == TOPIC_ID
    body = messages.encode(built)
    assert TOPIC_ID.bytes in body
    decoded = _kio_read(messages.response_class(3, version), body)
    assert decoded == built
    if version >= 12:
        assert (decoded.topics[1].name, decoded.topics[1].topic_id) == (None, uuid.UUID(int=1))


@pytest.mark.parametrize("version", range(10))
def test_metadata_before_topic_ids_drops_them(version: int) -> None:
    data = {"throttle_time": 0, "brokers": [], "topics": [_metadata_topic("orders", TOPIC_ID)]}
    built = messages.build_response(3, version, data)
    assert not hasattr(built.topics[0], "topic_id")
    assert TOPIC_ID.bytes not in messages.encode(built)


def test_nested_lists_become_tuples_at_every_level() -> None:
    def partition(index: int, replicas: list[int]) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "partition_index": index,
            "leader_id": replicas[0],
            "leader_epoch": 0,
            "replica_nodes": replicas,
            "isr_nodes": replicas[:1],
            "offline_replicas": [],
        }

    data = {
        "throttle_time": 0,
        "brokers": [{"node_id": n, "host": f"b{n}", "port": 9092 + n} for n in (1, 2, 3)],
        "topics": [
            _metadata_topic("a", TOPIC_ID, partitions=[partition(0, [1, 2]), partition(1, [3])]),
            _metadata_topic("b", None, partitions=[partition(0, [2, 3, 1])]),
        ],
    }
    built = messages.build_response(3, 12, data)
    assert isinstance(built.brokers, tuple)
    assert isinstance(built.topics, tuple)
    assert [[p.replica_nodes for p in t.partitions] for t in built.topics] == [
        [(1, 2), (3,)],
        [(2, 3, 1)],
    ]
    assert [[p.isr_nodes for p in t.partitions] for t in built.topics] == [[(1,), (3,)], [(2,)]]
    assert _kio_read(type(built), messages.encode(built)) == built


def test_fields_left_out_take_the_schema_defaults() -> None:
    cls = messages.response_class(0, 12)
    built = messages.build_response(0, 12, _produce_data(-1))
    partition = _only_partition(built)
    assert built.throttle_time == datetime.timedelta(0)
    assert built.node_endpoints == ()
    assert partition.log_start_offset == -1
    assert partition.error_message is None
    leader_class = _entity_class(cls, "responses", "partition_responses", "current_leader")
    assert partition.current_leader == leader_class(leader_id=-1, leader_epoch=-1)
    assert _kio_read(cls, messages.encode(built)) == built


def test_a_partial_nested_mapping_takes_defaults_for_the_rest() -> None:
    data = _produce_data(-1)
    data["responses"][0]["partition_responses"][0]["current_leader"] = {"leader_id": 3}
    built = messages.build_response(0, 12, data)
    current_leader = _only_partition(built).current_leader
    assert (current_leader.leader_id, current_leader.leader_epoch) == (3, -1)
    assert _kio_read(type(built), messages.encode(built)) == built


def _fetch_data(aborted_transactions: Any) -> dict[str, Any]:
    partition = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "high_watermark": 10,
        "last_stable_offset": 10,
        "aborted_transactions": aborted_transactions,
        "records": b"",
    }
    topic = {"topic": "t", "topic_id": uuid.UUID(int=7), "partitions": [partition]}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "responses": [topic]}


def _aborted(response: Any) -> Any:
    (((partition,),),) = [[t.partitions for t in response.responses]]
    return partition.aborted_transactions


@pytest.mark.parametrize("api", FETCH_VERSIONS, ids=_api_id)
def test_fetch_aborted_transactions_build_from_mappings(api: tuple[int, int]) -> None:
    key, version = api
    cls = messages.response_class(key, version)
    aborted_class = _entity_class(cls, "responses", "partitions", "aborted_transactions")
    mappings = [{"producer_id": 7, "first_offset": 100}, {"producer_id": 8, "first_offset": 3}]
    built = messages.build_response(key, version, _fetch_data(mappings))
    assert _aborted(built) == (
        aborted_class(producer_id=7, first_offset=100),
        aborted_class(producer_id=8, first_offset=3),
    )
    assert _kio_read(cls, messages.encode(built)) == built


@pytest.mark.parametrize("api", FETCH_VERSIONS, ids=_api_id)
def test_fetch_aborted_transactions_take_built_objects_too(api: tuple[int, int]) -> None:
    key, version = api
    cls = messages.response_class(key, version)
    aborted_class = _entity_class(cls, "responses", "partitions", "aborted_transactions")
    ready = aborted_class(producer_id=7, first_offset=100)
    mixed = [ready, {"producer_id": 8, "first_offset": 3}]
    built = messages.build_response(key, version, _fetch_data(mixed))
    assert _aborted(built) == (ready, aborted_class(producer_id=8, first_offset=3))
    assert _aborted(messages.build_response(key, version, _fetch_data((ready,)))) == (ready,)
    assert _kio_read(cls, messages.encode(built)) == built


@pytest.mark.parametrize("api", FETCH_VERSIONS, ids=_api_id)
@pytest.mark.parametrize(("aborted", "expected"), [(None, None), ([], ())])
def test_fetch_aborted_transactions_null_and_empty(
    api: tuple[int, int], aborted: list[Any] | None, expected: tuple[Any, ...] | None
) -> None:
    key, version = api
    built = messages.build_response(key, version, _fetch_data(aborted))
    assert _aborted(built) == expected
    assert _aborted(_kio_read(messages.response_class(key, version), messages.encode(built))) == (
        expected
    )


def test_build_takes_already_built_entities_in_any_list() -> None:
    cls = messages.response_class(0, 9)
    topic_class = _entity_class(cls, "responses")
    from_data = messages.build_response(0, 9, _produce_data(5))
    (topic,) = from_data.responses
    assert isinstance(topic, topic_class)
    assert messages.build_response(0, 9, {"responses": [topic]}) == from_data


@pytest.mark.parametrize(
    ("key", "version", "data", "missing"),
    [
        (0, 9, {"throttle_time": 0}, "responses"),
        (22, 4, {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": 1}, "epoch"),
        (
            0,
            9,
            {"responses": [{"name": "t", "partition_responses": [{"index": 0}]}]},
            "base_offset",
        ),
        (1, 12, _fetch_data(None) | {"responses": [{"topic": "t"}]}, "partitions"),
    ],
)
def test_a_missing_required_field_is_a_type_error(
    key: int, version: int, data: dict[str, Any], missing: str
) -> None:
    with pytest.raises(TypeError, match=missing):
        messages.build_response(key, version, data)


# --- responses: names no version has ------------------------------------------------------

PRODUCE = 0
METADATA = 3
PRODUCE_KEYS = [version for key, version in PRODUCE_VERSIONS]


def _produce_full(**partition: Any) -> dict[str, Any]:
    """A ProduceResponse with something at every level: record errors, current leader."""
    record_error = {"batch_index": 2, "batch_index_error_message": "too old"}
    data = _produce_data(-1)
    data["responses"][0]["partition_responses"][0] |= {
        "log_start_offset": 0,
        "record_errors": [record_error],
        "error_message": "some records refused",
        "current_leader": {"leader_id": 3, "leader_epoch": 7},
        **partition,
    }
    return data | {"throttle_time": 0}


def test_a_field_no_version_has_is_an_error_at_the_top_level() -> None:
    data = {"throttle_time": 0, "brokers": [], "topics": [], "throttle_time_ms": 5}
    for version in range(API_VERSIONS[METADATA].max_version + 1):
        with pytest.raises(messages.UnknownFieldError) as caught:
            messages.build_response(METADATA, version, data)
        error = caught.value
        assert isinstance(error, TypeError)
        assert (error.where, error.unknown) == ("MetadataResponse", ("throttle_time_ms",))
        assert "no version of MetadataResponse (API key 3) has field 'throttle_time_ms'" in str(
            error
        )
        assert error.__notes__ == ["'throttle_time_ms': did you mean 'throttle_time'?"]


def _set_at(data: dict[str, Any], path: tuple[str, ...], name: str) -> None:
    """Add field `name` to the first mapping at `path` (field names) in `data`."""
    for step in path:
        data = data[step][0] if isinstance(data[step], list) else data[step]
    data[name] = 1


@pytest.mark.parametrize(
    ("path", "entity", "first_version"),
    [
        ((), "ProduceResponse", 3),
        (("responses",), "TopicProduceResponse", 3),
        (("responses", "partition_responses"), "PartitionProduceResponse", 3),
        (("responses", "partition_responses", "record_errors"), "BatchIndexAndErrorMessage", 8),
        (("responses", "partition_responses", "current_leader"), "LeaderIdAndEpoch", 10),
    ],
)
def test_a_field_no_version_has_is_an_error_at_every_depth(
    path: tuple[str, ...], entity: str, first_version: int
) -> None:
    data = _produce_full()
    _set_at(data, path, "misspelt")
    for version in PRODUCE_KEYS:
        if version < first_version:
            # The version drops the whole field, unread: nothing in it reaches the client,
            # and the versions that send it check its names.
            messages.build_response(PRODUCE, version, data)
            continue
        with pytest.raises(messages.UnknownFieldError, match="'misspelt'") as caught:
            messages.build_response(PRODUCE, version, data)
        assert caught.value.where == ".".join(("ProduceResponse", *path))
        assert caught.value.entity == entity


@pytest.mark.parametrize("version", PRODUCE_KEYS)
def test_a_misspelt_optional_field_is_refused_not_defaulted(version: int) -> None:
    """The case this check exists for: log_start_offset has a default, so without it the
    misspelt field would be dropped and every version would answer -1."""
    data = _produce_data(-1)
    data["responses"][0]["partition_responses"][0]["log_start_ofset"] = 5
    with pytest.raises(messages.UnknownFieldError, match="'log_start_ofset'") as caught:
        messages.build_response(PRODUCE, version, data)
    assert caught.value.__notes__ == ["'log_start_ofset': did you mean 'log_start_offset'?"]


def test_all_unknown_fields_of_an_object_are_named_at_once() -> None:
    data = _produce_full(zeta=1, alpha=2)
    with pytest.raises(messages.UnknownFieldError, match="has fields 'alpha', 'zeta'"):
        messages.build_response(PRODUCE, 12, data)


def test_a_field_only_newer_versions_have_is_dropped_by_older_ones() -> None:
    data = _produce_full()  # log_start_offset v5+, record errors v8+, current_leader v10+
    old = messages.build_response(PRODUCE, 3, data)
    partition = _only_partition(old)
    for name in ("log_start_offset", "record_errors", "error_message", "current_leader"):
        assert not hasattr(partition, name)
    new = _only_partition(messages.build_response(PRODUCE, 12, data))
    assert (new.current_leader.leader_id, new.current_leader.leader_epoch) == (3, 7)
    assert new.record_errors[0].batch_index_error_message == "too old"


def test_fields_of_versions_newer_than_we_advertise_are_known_too() -> None:
    """The names are those of every version kio has: Metadata v13 adds a top-level
    error_code, Fetch v13 names topics by id. Both build on the versions we speak."""
    assert API_VERSIONS[METADATA].max_version < 13
    assert "error_code" in messages.response_field_names(METADATA)[()]
    data = {"throttle_time": 0, "brokers": [], "topics": [], "error_code": ErrorCode.none}
    assert messages.build_response(METADATA, 12, data).topics == ()
    fetch = _fetch_data(None)
    fetch["responses"][0]["topic_id"] = TOPIC_ID
    assert messages.build_response(1, 12, fetch).responses[0].topic == "t"


def test_field_names_are_the_union_over_versions_at_each_path() -> None:
    names = messages.response_field_names(PRODUCE)
    assert names is messages.response_field_names(PRODUCE)  # computed once
    assert names[("responses", "partition_responses")] == {
        "index",
        "error_code",
        "base_offset",
        "log_append_time",
        "log_start_offset",  # v5+
        "record_errors",  # v8+
        "error_message",  # v8+
        "current_leader",  # v10+
    }
    assert names[("responses", "partition_responses", "current_leader")] == {
        "leader_id",
        "leader_epoch",
    }
    assert names[("node_endpoints",)] == {"node_id", "host", "port", "rack"}
