"""The records of `__transaction_state`: round trips, and damage refused with
RecordFormatError (never another exception: the broker skips such a record at load)."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.transactions.records import (
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    pairs_of,
)
from weirmq.transactions.state import PendingOffset, TxnMetadata, TxnState
from weirmq.types import TopicPartition

I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=20)
partitions = st.builds(TopicPartition, names, I32)
pending = st.builds(PendingOffset, I64, I32, st.text(max_size=30))


@st.composite
def metadata(draw: st.DrawFn) -> TxnMetadata:
    return TxnMetadata(
        transactional_id=draw(names),
        producer_id=draw(I64),
        producer_epoch=draw(I16),
        last_producer_id=draw(I64),
        last_producer_epoch=draw(I16),
        timeout_ms=draw(I32),
        state=draw(st.sampled_from(TxnState)),
        partitions=draw(st.sets(partitions, max_size=8)),
        groups=draw(
            st.dictionaries(names, st.dictionaries(partitions, pending, max_size=4), max_size=3)
        ),
        start_ms=draw(I64),
        last_update_ms=draw(I64),
    )


@settings(max_examples=300)
@given(metadata())
def test_round_trip(meta: TxnMetadata) -> None:
    key, value = encode_key(meta.transactional_id), encode_value(meta)
    assert decode_key(key) == meta.transactional_id
    assert decode_value(meta.transactional_id, value) == meta


def test_pairs_of_writes_tombstones() -> None:
    meta = TxnMetadata("a", 1, 2, -1, -1, 1000, TxnState.EMPTY)
    assert pairs_of({"a": meta, "b": None}) == [
        (encode_key("a"), encode_value(meta)),
        (encode_key("b"), None),
    ]


def test_key_and_value_layout_are_kafkas() -> None:
    """TransactionLogKey v0 and the first fields of TransactionLogValue v0."""
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    meta = TxnMetadata("tx", 7, 3, -1, -1, 60_000, TxnState.ONGOING, {TopicPartition("t", 2)})
    meta.start_ms, meta.last_update_ms = 11, 12
    value = encode_value(meta)
    assert value[:17] == struct.pack(">hqhib", 0, 7, 3, 60_000, 1)
    assert value[17:].startswith(struct.pack(">ih", 1, 1) + b"t" + struct.pack(">ii", 1, 2))


def test_unknown_versions_and_states_are_refused() -> None:
    meta = TxnMetadata("a", 1, 2, -1, -1, 1000, TxnState.EMPTY)
    value = encode_value(meta)
    with pytest.raises(RecordFormatError, match="version"):
        decode_key(b"\x00\x01" + encode_key("a")[2:])
    with pytest.raises(RecordFormatError, match="version"):
        decode_value("a", b"\x00\x01" + value[2:])
    bad_state = bytearray(value)
    bad_state[16] = 9
    with pytest.raises(RecordFormatError, match="state"):
        decode_value("a", bytes(bad_state))


def test_too_long_a_string_is_refused_on_encode() -> None:
    with pytest.raises(RecordFormatError):
        encode_key("x" * 0x8000)


@settings(max_examples=200)
@given(metadata(), st.data())
def test_truncated_or_extended_values_are_refused(meta: TxnMetadata, data: st.DataObject) -> None:
    value = encode_value(meta)
    cut = data.draw(st.integers(0, len(value) - 1))
    with pytest.raises(RecordFormatError):
        decode_value("x", value[:cut])
    with pytest.raises(RecordFormatError):
        decode_value("x", value + data.draw(st.binary(min_size=1, max_size=8)))


@settings(max_examples=500)
@given(metadata(), st.data())
def test_damaged_values_decode_or_raise_record_format_error(
    meta: TxnMetadata, data: st.DataObject
) -> None:
    damaged = bytearray(encode_value(meta))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(damaged) - 1))
        damaged[position] = data.draw(st.integers(0, 255))
    try:
        decoded = decode_value("x", bytes(damaged))
    except RecordFormatError:
        return
    assert isinstance(decoded, TxnMetadata)


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_record_format_error(raw: bytes) -> None:
    for decode in (decode_key, lambda b: decode_value("x", b)):
        with contextlib.suppress(RecordFormatError):
            decode(raw)


def test_huge_counts_are_refused_before_allocating() -> None:
    meta = TxnMetadata("a", 1, 2, -1, -1, 1000, TxnState.EMPTY)
    value = bytearray(encode_value(meta))
    value[17:21] = struct.pack(">i", 2**31 - 1)  # the partitions' topic count
    with pytest.raises(RecordFormatError, match="count"):
        decode_value("a", bytes(value))
    value[17:21] = struct.pack(">i", -1)
    with pytest.raises(RecordFormatError, match="count"):
        decode_value("a", bytes(value))


def test_invalid_utf8_is_refused() -> None:
    with pytest.raises(RecordFormatError, match="UTF-8"):
        decode_key(b"\x00\x00\x00\x02\xff\xfe")
