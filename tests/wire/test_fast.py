"""The hand-written Produce and Fetch encoders, checked byte for byte against kio.

The reference is the general path the broker uses for every other response:
`messages.encode(messages.build_response(api_key, version, data))`, that is kio's own
dataclasses and writer, generated from Kafka's schemas. Data is random but has the shape
the handlers return (see `_response` in broker/produce.py and broker/fetch.py).
"""

from __future__ import annotations

import datetime
import importlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.wire import messages
from weirmq.wire.errors import ErrorCode
from weirmq.wire.fast import (
    FETCH_VERSIONS,
    INLINE_RECORDS_BYTES_MAX,
    PRODUCE_VERSIONS,
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
                {"topic": topic_names, "partitions": st.lists(fetch_partitions, max_size=4)}
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


def fetch_data_of(*partitions: dict[str, Any]) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": [{"topic": "events", "partitions": list(partitions)}],
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
                "partition_responses": [
                    produce_partition(i, error_message="x" * 300 if i % 2 else None)
                    for i in range(300)
                ],
            }
        ],
        "throttle_time": 0,
    }
    assert encode_produce_response(version, data) == kio_bytes(PRODUCE, version, data)


@pytest.mark.parametrize("version", [-1, 0, 1, 2, 13, 14])
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


@pytest.mark.parametrize("version", [-1, 0, 3, 13, 18])
def test_fetch_rejects_other_versions(version: int) -> None:
    data = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": []}
    with pytest.raises(ValueError, match=f"v{version}"):
        encode_fetch_response(version, data)
