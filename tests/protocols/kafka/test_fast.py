"""The hand-written Produce and Fetch encoders, checked byte for byte against kio, and the
hand-written ProduceRequest and FetchRequest decoders, checked against kio's reader.

The reference is the general path the broker uses for every other response:
`messages.encode(messages.build_response(api_key, version, data))`, that is kio's own
dataclasses and writer, generated from Kafka's schemas. Data is random but has the shape
the handlers return (see `_response` in broker/produce.py and broker/fetch.py). Requests
go the other way: written by kio's writer (or by hand, where kio writes nothing, such as
tagged fields), they must decode to what `messages.decode_request` reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import struct
import typing
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.errors import ErrorCode
from weirmq.protocols.kafka.wire import messages
from weirmq.protocols.kafka.wire.fast import (
    FETCH_VERSIONS,
    INLINE_RECORDS_BYTES_MAX,
    PRODUCE_VERSIONS,
    FetchRequestData,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
    decode_fetch_request,
    decode_produce_request,
    encode_fetch_response,
    encode_produce_response,
)

PRODUCE = 0
FETCH = 1
MIB = 1024 * 1024
# kio turns an int-ms timestamp into a datetime, which ends with the year 9999.
DATETIME_MS_MAX = int(
    (datetime.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=datetime.UTC)).timestamp() * 1000
)

i32s = st.integers(-(2**31), 2**31 - 1)
i64s = st.integers(-(2**63), 2**63 - 1)
error_codes = st.sampled_from(list(ErrorCode))
topic_names = st.text(max_size=40)  # any unicode but surrogates, as str.encode() needs
# Topic ids (Produce v13, Fetch v13+); the zero id reads as None, as kio reads it.
topic_ids = st.none() | st.uuids().filter(lambda u: u.int != 0)
messages_text = st.none() | st.text(max_size=200)
append_times = st.just(-1) | st.integers(0, DATETIME_MS_MAX) | st.integers(-(2**63), -1)

produce_partitions = st.fixed_dictionaries(
    {
        "index": i32s,
        "error_code": error_codes,
        "base_offset": i64s,
        "log_append_time": append_times,
        "log_start_offset": i64s,
        "record_errors": st.just([])
        | st.lists(
            st.fixed_dictionaries(
                {"batch_index": i32s, "batch_index_error_message": messages_text}
            ),
            max_size=3,
        ),
        "error_message": messages_text,
    }
)
produce_data = st.fixed_dictionaries(
    {
        "responses": st.lists(
            st.fixed_dictionaries(
                {
                    "name": topic_names,
                    "topic_id": topic_ids,
                    "partition_responses": st.lists(produce_partitions, max_size=4),
                }
            ),
            max_size=4,
        ),
        "throttle_time": st.just(0) | i32s,
    }
)

records: st.SearchStrategy[bytes | memoryview | None] = (
    st.none()
    | st.binary(max_size=300)
    | st.binary(min_size=INLINE_RECORDS_BYTES_MAX - 2, max_size=INLINE_RECORDS_BYTES_MAX + 300)
    | st.binary(max_size=4000).map(lambda b: memoryview(b))
)
fetch_partitions = st.fixed_dictionaries(
    {
        "partition_index": i32s,
        "error_code": error_codes,
        "high_watermark": i64s,
        "last_stable_offset": i64s,
        "log_start_offset": i64s,
        "aborted_transactions": st.none()
        | st.lists(st.fixed_dictionaries({"producer_id": i64s, "first_offset": i64s}), max_size=3),
        "preferred_read_replica": st.just(-1) | i32s,
        "records": records,
    }
)
fetch_data = st.fixed_dictionaries(
    {
        "throttle_time": st.just(0) | i32s,
        "error_code": error_codes,
        "session_id": st.just(0) | i32s,
        "responses": st.lists(
            st.fixed_dictionaries(
                {
                    "topic": topic_names,
                    "topic_id": topic_ids,
                    "partitions": st.lists(fetch_partitions, max_size=4),
                }
            ),
            max_size=4,
        ),
    }
)


def kio_bytes(api_key: int, version: int, data: dict[str, Any]) -> bytes:
    if api_key == FETCH:
        data = with_kio_aborted_transactions(version, data)
    return messages.encode(messages.build_response(api_key, version, data))


def with_kio_aborted_transactions(version: int, data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its aborted transactions as kio objects: `messages.build` converts
    arrays of mappings only when the array is not nullable, and this one is."""
    module = importlib.import_module(messages.response_class(FETCH, version).__module__)

    def convert(aborted: list[dict[str, Any]] | None) -> list[Any] | None:
        if aborted is None:
            return None
        return [module.AbortedTransaction(**a) for a in aborted]

    return {
        **data,
        "responses": [
            {
                **topic,
                "partitions": [
                    {**p, "aborted_transactions": convert(p["aborted_transactions"])}
                    for p in topic["partitions"]
                ],
            }
            for topic in data["responses"]
        ],
    }


def produce_partition(index: int = 0, **fields: Any) -> dict[str, Any]:
    """One partition as the produce handler answers it."""
    return {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": 42,
        "log_append_time": -1,
        "log_start_offset": 0,
        "record_errors": [],
        "error_message": None,
        **fields,
    }


def fetch_partition(index: int = 0, **fields: Any) -> dict[str, Any]:
    """One partition as the fetch handler answers it."""
    return {
        "partition_index": index,
        "error_code": ErrorCode.none,
        "high_watermark": 10,
        "last_stable_offset": 10,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
        **fields,
    }


EVENTS_ID = uuid.UUID("6f1c2b4e-0d3a-4c5b-9e8f-7a6b5c4d3e2f")


def fetch_data_of(*partitions: dict[str, Any]) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": [{"topic": "events", "topic_id": EVENTS_ID, "partitions": list(partitions)}],
    }


# --- Produce ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=produce_data)
def test_produce_matches_kio(version: int, data: dict[str, Any]) -> None:
    assert encode_produce_response(version, data) == kio_bytes(PRODUCE, version, data)


def test_produce_v9_layout() -> None:
    """One partition, spelled out: compact lengths are length + 1, each struct ends in an
    empty tag section."""
    data = {
        "responses": [{"name": "t", "partition_responses": [produce_partition(base_offset=7)]}],
        "throttle_time": 5,
    }
    expected = bytes.fromhex(
        "02"  # one topic
        "0274"  # name "t"
        "02"  # one partition
        "00000000"  # index 0
        "0000"  # error_code none
        "0000000000000007"  # base_offset 7
        "ffffffffffffffff"  # log_append_time: none
        "0000000000000000"  # log_start_offset 0
        "01"  # no record errors
        "00"  # error_message null
        "00"  # partition tags
        "00"  # topic tags
        "00000005"  # throttle_time 5 ms
        "00"  # response tags
    )
    assert encode_produce_response(9, data) == expected
    assert kio_bytes(PRODUCE, 9, data) == expected


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_long_arrays_and_names(version: int) -> None:
    """Lengths past one varint byte (>= 127) in flexible versions; int16/int32 otherwise."""
    data = {
        "responses": [
            {
                "name": "é" * 200,
                "topic_id": EVENTS_ID,
                "partition_responses": [
                    produce_partition(i, error_message="x" * 300 if i % 2 else None)
                    for i in range(300)
                ],
            }
        ],
        "throttle_time": 0,
    }
    assert encode_produce_response(version, data) == kio_bytes(PRODUCE, version, data)


@pytest.mark.parametrize("version", [-1, 0, 1, 2, 14])
def test_produce_rejects_other_versions(version: int) -> None:
    with pytest.raises(ValueError, match=f"v{version}"):
        encode_produce_response(version, {"responses": [], "throttle_time": 0})


# --- Fetch -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=fetch_data)
def test_fetch_matches_kio(version: int, data: dict[str, Any]) -> None:
    parts = encode_fetch_response(version, data)
    assert all(isinstance(part, bytes | memoryview) for part in parts)
    assert b"".join(parts) == kio_bytes(FETCH, version, data)
    # Large records are handed over as they are, never copied.
    for topic in data["responses"]:
        for p in topic["partitions"]:
            if p["records"] is not None and len(p["records"]) > INLINE_RECORDS_BYTES_MAX:
                assert any(part is p["records"] for part in parts)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_one_mib_is_not_copied(version: int) -> None:
    batch = bytes(range(256)) * (4 * 1024)  # 1 MiB: a 3-byte varint length in v12
    data = fetch_data_of(fetch_partition(records=batch), fetch_partition(1, records=None))
    parts = encode_fetch_response(version, data)
    assert b"".join(parts) == kio_bytes(FETCH, version, data)
    assert len(parts) == 3
    assert parts[1] is batch
    assert sum(map(len, parts)) == len(batch) + len(parts[0]) + len(parts[2])


@pytest.mark.parametrize("size", [0, 126, 127, 2**14 - 2, 2**14 - 1, 2**21 - 2, 2**21 - 1, 2**21])
def test_fetch_v12_records_lengths_around_varint_boundaries(size: int) -> None:
    """A compact length is size + 1: one byte below 128, two below 2**14, and so on."""
    data = fetch_data_of(fetch_partition(records=b"\x5a" * size))
    assert b"".join(encode_fetch_response(12, data)) == kio_bytes(FETCH, 12, data)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_empty_null_and_small_records_are_one_buffer(version: int) -> None:
    data = fetch_data_of(
        fetch_partition(0, records=b""),
        fetch_partition(1, records=None),
        fetch_partition(2, records=b"r" * INLINE_RECORDS_BYTES_MAX),
    )
    parts = encode_fetch_response(version, data)
    assert len(parts) == 1
    assert parts[0] == kio_bytes(FETCH, version, data)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_last_records_end_the_list(version: int) -> None:
    """v4-11 have nothing after the last partition's records: no empty buffer follows."""
    data = fetch_data_of(fetch_partition(records=b"b" * (INLINE_RECORDS_BYTES_MAX + 1)))
    parts = encode_fetch_response(version, data)
    assert all(len(part) > 0 for part in parts)
    assert b"".join(parts) == kio_bytes(FETCH, version, data)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_empty_response(version: int) -> None:
    data = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": []}
    assert b"".join(encode_fetch_response(version, data)) == kio_bytes(FETCH, version, data)


@pytest.mark.parametrize("version", [-1, 0, 3, 19])
def test_fetch_rejects_other_versions(version: int) -> None:
    data = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": []}
    with pytest.raises(ValueError, match=f"v{version}"):
        encode_fetch_response(version, data)


# --- ProduceRequest --------------------------------------------------------------------

FIRST_FLEXIBLE_PRODUCE = 9
i16s = st.integers(-(2**15), 2**15 - 1)
produce_requests = st.fixed_dictionaries(
    {
        "transactional_id": st.none() | st.text(max_size=20),
        "acks": st.sampled_from([0, 1, -1]) | i16s,
        "timeout_ms": i32s,
        "topic_data": st.lists(
            st.tuples(
                topic_names,
                st.lists(st.tuples(i32s, st.none() | st.binary(max_size=300)), max_size=3),
                topic_ids,
            ),
            max_size=3,
        ),
    }
)


def kio_request_bytes(version: int, data: dict[str, Any]) -> bytes:
    """The body kio writes for `data` (a `produce_requests` example)."""
    cls = messages.request_class(PRODUCE, version)
    module = importlib.import_module(cls.__module__)
    by_id = version >= 13
    request = cls(
        transactional_id=data["transactional_id"],
        acks=data["acks"],
        timeout=datetime.timedelta(milliseconds=data["timeout_ms"]),
        topic_data=tuple(
            module.TopicProduceData(
                **({"topic_id": topic_id} if by_id else {"name": name}),
                partition_data=tuple(
                    module.PartitionProduceData(index=index, records=records)
                    for index, records in partitions
                ),
            )
            for name, partitions, topic_id in data["topic_data"]
        ),
    )
    return messages.encode(request)


def plain(request: Any) -> ProduceRequest:
    """A decoded request (ours or kio's) with bytes for records, to compare the two."""
    timeout = request.timeout_ms if isinstance(request, ProduceRequest) else request.timeout
    if isinstance(timeout, datetime.timedelta):
        timeout = round(timeout / datetime.timedelta(milliseconds=1))
    return ProduceRequest(
        request.transactional_id,
        int(request.acks),
        int(timeout),
        tuple(
            TopicProduceData(
                getattr(topic, "name", ""),  # v13+: "" from us, no field in kio's
                tuple(
                    PartitionProduceData(
                        int(p.index), None if p.records is None else bytes(p.records)
                    )
                    for p in topic.partition_data
                ),
                getattr(topic, "topic_id", None),
            )
            for topic in request.topic_data
        ),
    )


def decoded_by_both(version: int, frame: bytes, offset: int = 0) -> tuple[Any, Any]:
    """(ours, kio's) for `frame`, each None where that decoder refused it."""
    ours = kios = None
    with contextlib.suppress(messages.DecodeError):
        ours = decode_produce_request(version, frame, offset)
    with contextlib.suppress(messages.DecodeError):
        kios = messages.decode_request(PRODUCE, version, frame, offset)
    return ours, kios


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=produce_requests, prefix=st.binary(max_size=8))
def test_produce_request_decodes_as_kio_reads_it(
    version: int, data: dict[str, Any], prefix: bytes
) -> None:
    body = kio_request_bytes(version, data)
    frame = prefix + body
    ours = decode_produce_request(version, frame, len(prefix))
    assert plain(ours) == plain(messages.decode_request(PRODUCE, version, frame, len(prefix)))
    # Large frames arrive as read-only views of a bytearray; records are views of the frame.
    view = memoryview(bytearray(frame)).toreadonly()
    from_view = decode_produce_request(version, view, len(prefix))
    assert from_view == ours
    for topic in from_view.topic_data:
        for partition in topic.partition_data:
            if partition.records is not None:
                assert partition.records.readonly and partition.records.obj is view.obj
    # Cut short anywhere, the body is refused by both.
    for end in range(len(prefix), len(frame), max(1, len(body) // 30)):
        assert decoded_by_both(version, frame[:end], len(prefix)) == (None, None)


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_corrupted_produce_request_is_refused_or_read_as_kio_reads_it(
    version: int, data: st.DataObject
) -> None:
    body = bytearray(kio_request_bytes(version, data.draw(produce_requests, label="request")))
    changes = data.draw(
        st.lists(st.tuples(st.integers(0, len(body) - 1), st.integers(0, 255)), min_size=1),
        label="changes",
    )
    for position, byte in changes:
        body[position] = byte
    ours, kios = decoded_by_both(version, bytes(body))
    if ours is not None and kios is None:
        # kio refuses every tagged field; Kafka (and we) skip the ones it does not know.
        with pytest.raises(messages.DecodeError, match="tagged field"):
            messages.decode_request(PRODUCE, version, bytes(body), 0)
    elif ours is not None:
        assert plain(ours) == plain(kios)
    elif kios is not None:
        # Only a null array gets past kio (as None, which no handler could iterate).
        assert kios.topic_data is None or any(t.partition_data is None for t in kios.topic_data)


def test_produce_request_null_arrays_and_names_are_refused() -> None:
    head = struct.pack(">hhi", -1, 1, 1000)  # no transactional id, acks=1, timeout
    for body in (
        head + struct.pack(">i", -1),  # null topic array
        head + struct.pack(">ih", 1, -1) + struct.pack(">i", 0),  # null topic name
        head + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", -1),  # null partitions
    ):
        with pytest.raises(messages.DecodeError):
            decode_produce_request(3, body, 0)
    # Flexible: a compact null (0) where an array or a topic name must be.
    for body in (b"\x00" + head[2:] + b"\x00", b"\x00" + head[2:] + b"\x02\x00\x01"):
        with pytest.raises(messages.DecodeError):
            decode_produce_request(9, body, 0)


def test_produce_request_array_longer_than_the_frame_is_refused_at_once() -> None:
    # A compact array claiming ~4 billion topics, as in test_messages: refused, not looped.
    with pytest.raises(messages.DecodeError, match="array"):
        decode_produce_request(9, bytes.fromhex("00ffff00000000808080800f"), 0)


def test_produce_request_tagged_fields_are_skipped_at_every_level() -> None:
    """Each struct of a flexible request ends in a tag section: a count, then per field a
    tag, a size and that many bytes. ProduceRequest defines no tagged field up to v12, and
    Kafka ignores the tags it does not know, as we do; kio refuses them (so the expected
    request is spelled out here rather than read by kio)."""
    tags = b"\x02" + b"\x00\x03abc" + b"\x05\x00"  # two fields: tag 0 "abc", tag 5 empty
    records = b"R" * 200
    body = (
        b"\x03id"  # transactional id "id"
        + struct.pack(">hi", -1, 30_000)
        + b"\x02"  # one topic
        + b"\x02t"  # name "t"
        + b"\x02"  # one partition
        + struct.pack(">i", 4)
        + bytes([(len(records) + 1) & 0x7F | 0x80, (len(records) + 1) >> 7])
        + records
        + tags  # the partition's
        + tags  # the topic's
        + tags  # the request's
    )
    ours = decode_produce_request(FIRST_FLEXIBLE_PRODUCE, body, 0)
    partitions = (PartitionProduceData(4, records),)
    assert plain(ours) == ProduceRequest("id", -1, 30_000, (TopicProduceData("t", partitions),))
    # A tag whose size runs past the end is refused.
    with pytest.raises(messages.DecodeError):
        decode_produce_request(FIRST_FLEXIBLE_PRODUCE, body[:-3] + b"\x01\x00\x09", 0)


@pytest.mark.parametrize("version", [-1, 0, 2, 14])
def test_produce_request_rejects_other_versions(version: int) -> None:
    with pytest.raises(ValueError, match="no fast ProduceRequest decoder"):
        decode_produce_request(version, b"", 0)


# --- FetchRequest ----------------------------------------------------------------------

FIRST_FLEXIBLE_FETCH = 12
fetch_requests = st.fixed_dictionaries(
    {
        "replica_id": i32s,
        "max_wait_ms": st.integers(0, 2**31 - 1),
        "min_bytes": i32s,
        "max_bytes": i32s,
        "isolation_level": st.integers(-128, 127),
        "session_id": i32s,
        "session_epoch": i32s,
        "topics": st.lists(
            st.tuples(
                topic_names,
                st.lists(st.tuples(i32s, i32s, i64s, i32s, i64s, i32s), max_size=3),
                topic_ids,
            ),
            max_size=3,
        ),
        "forgotten": st.lists(
            st.tuples(topic_names, st.lists(i32s, max_size=3), topic_ids), max_size=2
        ),
        "rack_id": st.text(max_size=10),
    }
)


def kio_fetch_bytes(version: int, data: dict[str, Any]) -> bytes:
    """The body kio writes for `data` (a `fetch_requests` example)."""
    cls = messages.request_class(FETCH, version)
    module = importlib.import_module(cls.__module__)

    def make(entity: Any, values: dict[str, Any]) -> Any:
        names = {f.name for f in dataclasses.fields(entity)}
        return entity(**{k: v for k, v in values.items() if k in names})

    topics = tuple(
        make(
            module.FetchTopic,
            {
                "topic": name,
                "topic_id": topic_id,
                "partitions": tuple(
                    make(
                        module.FetchPartition,
                        {
                            "partition": p,
                            "current_leader_epoch": epoch,
                            "fetch_offset": offset,
                            "last_fetched_epoch": last_epoch,
                            "log_start_offset": start,
                            "partition_max_bytes": max_bytes,
                        },
                    )
                    for p, epoch, offset, last_epoch, start, max_bytes in partitions
                ),
            },
        )
        for name, partitions, topic_id in data["topics"]
    )
    forgotten = (
        tuple(
            make(
                module.ForgottenTopic,
                {"topic": name, "topic_id": topic_id, "partitions": tuple(partitions)},
            )
            for name, partitions, topic_id in data["forgotten"]
        )
        if hasattr(module, "ForgottenTopic")
        else ()
    )
    request = make(
        cls,
        {
            "replica_id": data["replica_id"],
            "max_wait": datetime.timedelta(milliseconds=data["max_wait_ms"]),
            "min_bytes": data["min_bytes"],
            "max_bytes": data["max_bytes"],
            "isolation_level": data["isolation_level"],
            "session_id": data["session_id"],
            "session_epoch": data["session_epoch"],
            "topics": topics,
            "forgotten_topics_data": forgotten,
            "rack_id": data["rack_id"],
        },
    )
    return messages.encode(request)


def plain_fetch(request: Any) -> tuple[Any, ...]:
    """What the broker reads of a decoded FetchRequest (ours or kio's), to compare them;
    a field an old version lacks reads as the broker's default for it."""
    return (
        request.max_wait,
        int(request.min_bytes),
        int(request.max_bytes),
        int(request.isolation_level),
        int(getattr(request, "session_id", 0)),
        int(getattr(request, "session_epoch", -1)),
        tuple(
            (
                getattr(topic, "topic", ""),  # v13+: "" from us, no field in kio's
                getattr(topic, "topic_id", None),
                tuple(
                    (
                        int(p.partition),
                        int(getattr(p, "current_leader_epoch", -1)),
                        int(p.fetch_offset),
                        int(p.partition_max_bytes),
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )


def fetch_decoded_by_both(version: int, frame: bytes, offset: int = 0) -> tuple[Any, Any]:
    ours = kios = None
    with contextlib.suppress(messages.DecodeError):
        ours = decode_fetch_request(version, frame, offset)
    with contextlib.suppress(messages.DecodeError):
        kios = messages.decode_request(FETCH, version, frame, offset)
    return ours, kios


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=fetch_requests, prefix=st.binary(max_size=8))
def test_fetch_request_decodes_as_kio_reads_it(
    version: int, data: dict[str, Any], prefix: bytes
) -> None:
    body = kio_fetch_bytes(version, data)
    frame = prefix + body
    ours = decode_fetch_request(version, frame, len(prefix))
    assert isinstance(ours, FetchRequestData)
    assert plain_fetch(ours) == plain_fetch(
        messages.decode_request(FETCH, version, frame, len(prefix))
    )
    view = memoryview(bytearray(frame)).toreadonly()
    assert decode_fetch_request(version, view, len(prefix)) == ours
    # Cut short anywhere, the body is refused by both.
    for end in range(len(prefix), len(frame), max(1, len(body) // 30)):
        assert fetch_decoded_by_both(version, frame[:end], len(prefix)) == (None, None)


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 15, 18])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_corrupted_fetch_request_is_refused_or_read_as_kio_reads_it(
    version: int, data: st.DataObject
) -> None:
    body = bytearray(kio_fetch_bytes(version, data.draw(fetch_requests, label="request")))
    changes = data.draw(
        st.lists(st.tuples(st.integers(0, len(body) - 1), st.integers(0, 255)), min_size=1),
        label="changes",
    )
    for position, byte in changes:
        body[position] = byte
    ours, kios = fetch_decoded_by_both(version, bytes(body))
    if ours is not None and kios is None:
        # kio refuses tagged fields it does not know; Kafka (and we) skip them.
        with pytest.raises(messages.DecodeError, match="tag"):
            messages.decode_request(FETCH, version, bytes(body), 0)
    elif ours is not None:
        assert plain_fetch(ours) == plain_fetch(kios)
    elif kios is not None:
        # Only null arrays or a null rack get past kio, which no handler could use.
        nulls = kios.topics is None or any(t.partitions is None for t in kios.topics)
        nulls = nulls or getattr(kios, "forgotten_topics_data", ()) is None
        nulls = nulls or any(
            f.partitions is None for f in getattr(kios, "forgotten_topics_data", None) or ()
        )
        assert nulls or getattr(kios, "rack_id", "") is None


def test_fetch_request_tagged_fields_are_skipped_and_an_oversized_array_refused() -> None:
    tags = b"\x01" + b"\x00\x03abc"  # one field: tag 0 (cluster_id), 3 bytes
    # fmt: off
    body = (
        struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)
        + struct.pack(">ii", 0, -1)
        + b"\x02" + b"\x02t"  # one topic "t"
        + b"\x02" + struct.pack(">iiqiqi", 3, 7, 42, -1, 0, 65536) + tags  # one partition
        + tags  # the topic's
        + b"\x01"  # no forgotten topics
        + b"\x01"  # rack ""
        + tags  # the request's
    )
    # fmt: on
    ours = decode_fetch_request(FIRST_FLEXIBLE_FETCH, body, 0)
    assert plain_fetch(ours) == (
        datetime.timedelta(milliseconds=500),
        1,
        1 << 20,
        0,
        0,
        -1,
        (("t", None, ((3, 7, 42, 65536),)),),
    )
    with pytest.raises(messages.DecodeError, match="array"):
        decode_fetch_request(FIRST_FLEXIBLE_FETCH, body[:25] + b"\x80\x80\x80\x80\x0f", 0)


@pytest.mark.parametrize("version", [-1, 3, 19])
def test_fetch_request_rejects_other_versions(version: int) -> None:
    with pytest.raises(ValueError, match="no fast FetchRequest decoder"):
        decode_fetch_request(version, b"", 0)


# --- field names -------------------------------------------------------------------------
#
# `messages.build` refuses a field no version has; these encoders do not check (a subset test
# per mapping costs them 30-40%: 0.5 us on a one-partition answer of 1.3 us). They read every
# field they write with `[]`, so a handler that misspells one gets a KeyError; what is left
# to check is that the names they read are Kafka's, and that they read every field they
# should, so that nothing a handler fills is dropped unread but tagged fields (see fast.py).

FieldPath = tuple[str, ...]


class _Reads(dict[str, Any]):
    """A mapping that notes which of its keys are read, by the path of field names to it."""

    def __init__(self, data: dict[str, Any], path: FieldPath, seen: dict[FieldPath, set[str]]):
        super().__init__({k: _noting(v, (*path, k), seen) for k, v in data.items()})
        self.path = path
        self.seen = seen
        seen.setdefault(path, set())

    def __getitem__(self, key: str) -> Any:
        self.seen[self.path].add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.seen[self.path].add(key)
        return super().get(key, default)


def _noting(value: Any, path: FieldPath, seen: dict[FieldPath, set[str]]) -> Any:
    if isinstance(value, dict):
        return _Reads(value, path, seen)
    if isinstance(value, list):
        return [_noting(item, path, seen) for item in value]
    return value


def _full_data(api_key: int) -> dict[str, Any]:
    """Handler-shaped data with every list filled, so that the encoders read all of it."""
    if api_key == PRODUCE:
        error = {"batch_index": 1, "batch_index_error_message": "bad"}
        partition = produce_partition(record_errors=[error], error_message="refused")
        topic = {"name": "t", "topic_id": EVENTS_ID, "partition_responses": [partition]}
        return {"responses": [topic], "throttle_time": 0}
    aborted = [{"producer_id": 7, "first_offset": 3}]
    return fetch_data_of(fetch_partition(aborted_transactions=aborted, records=b"abc"))


def _keys_read(api_key: int, version: int) -> dict[FieldPath, set[str]]:
    seen: dict[FieldPath, set[str]] = {}
    encode: Callable[[int, Any], Any] = (
        encode_produce_response if api_key == PRODUCE else encode_fetch_response
    )
    encode(version, _Reads(_full_data(api_key), (), seen))
    return seen


def _untagged_fields(cls: type[Any], path: FieldPath = ()) -> dict[FieldPath, set[str]]:
    """The names of the fields of `cls` and its entities that are not tagged, by path."""
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if "tag" not in f.metadata]
    found = {path: {f.name for f in fields}}
    for f in fields:
        hint = hints[f.name]
        candidates = {hint, *typing.get_args(hint)}
        candidates |= {typing.get_args(c)[0] for c in candidates if typing.get_origin(c) is tuple}
        for entity in [c for c in candidates if dataclasses.is_dataclass(c)]:
            found |= _untagged_fields(typing.cast(type[Any], entity), (*path, f.name))
    return found


FAST_APIS = [(PRODUCE, v) for v in PRODUCE_VERSIONS] + [(FETCH, v) for v in FETCH_VERSIONS]


@pytest.mark.parametrize(("api_key", "version"), FAST_APIS)
def test_every_key_the_encoders_read_is_a_known_field(api_key: int, version: int) -> None:
    known = messages.response_field_names(api_key)
    for path, names in _keys_read(api_key, version).items():
        assert names <= known[path], (path, names - known[path])


@pytest.mark.parametrize(("api_key", "version"), [(PRODUCE, 13), (FETCH, 18)])
def test_at_their_newest_version_the_encoders_read_every_untagged_field(
    api_key: int, version: int
) -> None:
    assert version in (PRODUCE_VERSIONS if api_key == PRODUCE else FETCH_VERSIONS)
    assert version + 1 not in (PRODUCE_VERSIONS if api_key == PRODUCE else FETCH_VERSIONS)
    expected = _untagged_fields(messages.response_class(api_key, version))
    assert _keys_read(api_key, version) == expected


@pytest.mark.parametrize(("api_key", "version"), FAST_APIS)
def test_what_the_encoders_read_is_what_kio_writes(api_key: int, version: int) -> None:
    """The full data is also byte for byte what the general path writes, which refuses
    names no version has: the data above is a fair sample of what the handlers fill."""
    data = _full_data(api_key)
    if api_key == PRODUCE:
        assert encode_produce_response(version, data) == kio_bytes(api_key, version, data)
    else:
        assert b"".join(encode_fetch_response(version, data)) == kio_bytes(api_key, version, data)
