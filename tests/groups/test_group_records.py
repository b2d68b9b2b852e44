"""The coordinator's record formats: Kafka's `__consumer_offsets` keys and values."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weirmq.groups import protocol
from weirmq.groups.records import (
    ConsumerGroupKey,
    ConsumerGroupValue,
    GroupKey,
    GroupValue,
    MemberRecord,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_consumer_group_value,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_key,
    encode_value,
)

names = st.text(min_size=0, max_size=30)
ints32 = st.integers(-(2**31), 2**31 - 1)
ints64 = st.integers(-(2**63), 2**63 - 1)


def test_offset_key_is_kafkas_version_1_layout() -> None:
    key = encode_key(OffsetKey("g", "t", 3))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert decode_key(key) == OffsetKey("g", "t", 3)


def test_offset_value_is_kafkas_version_3_layout() -> None:
    value = encode_value(OffsetValue(42, 5, "meta", 1_700_000_000_000))
    expected = struct.pack(">hqih4sq", 3, 42, 5, 4, b"meta", 1_700_000_000_000)
    assert value == expected


def test_older_offset_values_kafka_wrote_are_read() -> None:
    v1 = struct.pack(">hqh1sqq", 1, 7, 1, b"m", 100, 200)
    assert decode_offset_value(v1) == OffsetValue(7, -1, "m", 100, 200)
    v0 = struct.pack(">hqh0sq", 0, 7, 0, b"", 100)
    assert decode_offset_value(v0) == OffsetValue(7, -1, "", 100)
    assert decode_key(struct.pack(">hh1sh1si", 0, 1, b"g", 1, b"t", 9)) == OffsetKey("g", "t", 9)


def test_keys_of_kinds_not_kept_here_are_skipped_and_garbage_is_refused() -> None:
    # a KIP-848 member record of Kafka's (ConsumerGroupMemberMetadataKey, version 5)
    assert decode_key(b"\x00\x05\x00\x01g\x00\x01m") is None
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x01\x00\x05g")  # string longer than the record
    with pytest.raises(RecordFormatError):
        decode_offset_value(b"\x00\x09" + bytes(20))
    with pytest.raises(RecordFormatError):
        decode_group_value(b"\x00\x07")


members = st.builds(
    MemberRecord,
    names,
    st.none() | names,
    names,
    names,
    ints32,
    ints32,
    st.binary(max_size=20),
    st.binary(max_size=20),
)


@given(
    st.builds(
        GroupValue,
        names,
        ints32,
        st.none() | names,
        st.none() | names,
        ints64,
        st.lists(members, max_size=4).map(tuple),
    )
)
def test_group_values_round_trip(value: GroupValue) -> None:
    assert decode_group_value(encode_value(value)) == value


@given(st.builds(OffsetValue, ints64, ints32, names, ints64))
def test_offset_values_round_trip(value: OffsetValue) -> None:
    assert decode_offset_value(encode_value(value)) == value


@given(names, names, ints32)
def test_keys_round_trip(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_key(OffsetKey(group, topic, partition))) == OffsetKey(
        group, topic, partition
    )
    assert decode_key(encode_key(GroupKey(group))) == GroupKey(group)


def test_consumer_protocol_assignment_and_subscription() -> None:
    parts = [("b", 1), ("a", 2), ("a", 0)]
    encoded = protocol.encode_assignment(parts)
    assert protocol.assigned_partitions(encoded) == (("a", 0), ("a", 2), ("b", 1))
    assert protocol.subscribed_topics(protocol.encode_subscription(["x", "y"])) == {"x", "y"}
    # what clients send is never trusted: garbage reads as empty
    assert protocol.assigned_partitions(b"\x00\x00\x7f\xff\xff\xff") == ()
    assert protocol.subscribed_topics(b"\x00") == frozenset()


@given(names, ints32)
def test_consumer_group_metadata_round_trips_in_kafkas_layout(group: str, epoch: int) -> None:
    key = encode_key(ConsumerGroupKey(group))
    assert key[:2] == b"\x00\x03"  # Kafka's ConsumerGroupMetadataKey version
    assert decode_key(key) == ConsumerGroupKey(group)
    value = encode_value(ConsumerGroupValue(epoch))
    # version 0, the epoch, and an empty tagged-field section (a flexible version)
    assert value == struct.pack(">hi", 0, epoch) + b"\x00"
    assert decode_consumer_group_value(value) == ConsumerGroupValue(epoch)
