"""The record-batch codec, checked against an independent implementation (kio's).

kio's reader truncates record timestamps to whole seconds, so the cross-checks use
timestamps on second boundaries.
"""

from __future__ import annotations

import datetime
import gzip
import io
import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch
from kio.records.schema import Record as KioRecord
from kio.records.schema import RecordHeader as KioHeader
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from weirmq.errors import ErrorCode
from weirmq.records.batch import (
    HEADER_BYTES,
    InvalidRecordError,
    MessageTooLargeError,
    Record,
    check_batch,
    encode_batch,
    parse_header,
    record_timestamps,
    stamped_header,
    validate_batches,
)
from weirmq.records.compression import GZIP, LZ4, SNAPPY, ZSTD

records_strategy = st.lists(
    st.builds(
        Record,
        value=st.one_of(st.none(), st.binary(max_size=300)),
        key=st.one_of(st.none(), st.binary(max_size=40)),
        headers=st.lists(
            st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
            max_size=3,
        ).map(tuple),
        timestamp_ms=st.integers(0, 2_000_000_000).map(lambda s: s * 1000),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(records_strategy, st.integers(0, 2**40))
def test_encode_batch_reads_back_with_kio(records: list[Record], base_offset: int) -> None:
    data = encode_batch(records, base_offset=base_offset)
    batch, size = read_batch(data, 0)  # kio verifies the CRC and every length
    assert size == len(data)
    assert batch.base_offset == base_offset
    assert len(batch.records) == len(records)
    for i, (ours, theirs) in enumerate(zip(records, batch.records, strict=True)):
        assert theirs.offset == base_offset + i
        assert theirs.key == ours.key
        assert theirs.value == ours.value
        assert int(theirs.timestamp.timestamp() * 1000) == ours.timestamp_ms
        assert [(h.key, h.value) for h in theirs.headers] == [
            (name.encode(), value) for name, value in ours.headers
        ]
    assert [ts for _, ts in record_timestamps(data)] == [r.timestamp_ms for r in records]


def _kio_batch(values: list[bytes], start_s: int = 1_700_000_000) -> bytes:
    records = tuple(
        KioRecord(
            attributes=i8(0),
            timestamp=TZAwareMicros.parse(
                datetime.datetime.fromtimestamp(start_s + i, datetime.UTC)
            ),
            offset=i64(i),
            key=b"k%d" % i,
            value=v,
            headers=(KioHeader(key=b"h", value=b"x"),),
        )
        for i, v in enumerate(values)
    )
    buf = io.BytesIO()
    write_new_batch(
        buf,
        NewRecordBatch(
            producer_id=i64(7),
            producer_epoch=i16(1),
            base_sequence=i32(0),
            records=records,
            attributes=i16(0),
        ),
    )
    return buf.getvalue()


def test_kio_written_batch_validates_and_parses() -> None:
    data = _kio_batch([b"a", b"bb", b"ccc"])
    (header,) = validate_batches(data, max_batch_bytes=1 << 20)
    assert header.records_count == 3
    assert header.last_offset_delta == 2
    assert header.producer_id == 7
    assert header.size == len(data)
    assert [ts for _, ts in record_timestamps(data)] == [
        1_700_000_000_000,
        1_700_000_001_000,
        1_700_000_002_000,
    ]


def _stamped(
    record_set: bytes, position: int, offset: int, epoch: int, append_time: int | None = None
) -> bytes:
    """The batch at `position` as stored: its stamped header, then its own bytes after it."""
    header = parse_header(record_set, position)
    head = stamped_header(record_set, header, offset, epoch, append_time)
    return head + record_set[position + len(head) : position + header.size]


def test_stamping_offset_and_epoch_keeps_the_crc_valid() -> None:
    original = encode_batch([Record(b"x"), Record(b"y")])
    head = stamped_header(original, parse_header(original), 123456789, 9)
    assert len(head) == 16  # baseOffset, batchLength, leader epoch: the records are not copied
    data = _stamped(original, 0, 123456789, 9)
    assert data[16:] == original[16:]
    header = check_batch(data, 0, len(data))
    assert not isinstance(header, str)
    assert (header.base_offset, header.partition_leader_epoch) == (123456789, 9)
    batch, _ = read_batch(data, 0)
    assert [r.offset for r in batch.records] == [123456789, 123456790]


def test_stamping_a_batch_in_the_middle_of_a_record_set() -> None:
    first = encode_batch([Record(b"a")])
    second = encode_batch([Record(b"b"), Record(b"c")], base_offset=77)
    data = _stamped(first + second, len(first), 5, 2)
    assert data[16:] == second[16:]
    header = check_batch(data, 0, len(data))
    assert not isinstance(header, str)
    assert (header.base_offset, header.partition_leader_epoch) == (5, 2)


def test_log_append_time_rewrites_max_timestamp_and_crc() -> None:
    original = encode_batch([Record(b"x", timestamp_ms=5), Record(b"y", timestamp_ms=9)])
    data = _stamped(original, 0, 42, 0, 777_000)
    assert data[HEADER_BYTES:] == original[HEADER_BYTES:]  # only the header is rebuilt
    header = check_batch(data, 0, len(data))
    assert not isinstance(header, str)
    assert header.is_log_append_time and header.max_timestamp == 777_000
    assert header.base_offset == 42
    assert list(record_timestamps(data)) == [(42, 777_000), (43, 777_000)]


def test_several_batches_in_one_record_set() -> None:
    data = encode_batch([Record(b"a")]) + encode_batch([Record(b"b"), Record(b"c")])
    headers = validate_batches(data, max_batch_bytes=1 << 20)
    assert [h.records_count for h in headers] == [1, 2]
    assert headers[1].position == headers[0].size


def _bad(data: bytes | bytearray, code: ErrorCode, match: str, limit: int = 1 << 20) -> None:
    with pytest.raises((InvalidRecordError, MessageTooLargeError), match=match) as info:
        validate_batches(data, max_batch_bytes=limit)
    assert info.value.code == code


def test_invalid_record_sets_get_precise_errors() -> None:
    good = encode_batch([Record(b"hello"), Record(b"world")])
    _bad(b"", ErrorCode.corrupt_message, "empty")
    _bad(good[:-1], ErrorCode.corrupt_message, "past the end")
    _bad(good + good[:20], ErrorCode.corrupt_message, "less than a batch header")
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    _bad(flipped, ErrorCode.corrupt_message, "CRC")
    magic = bytearray(good)
    magic[16] = 1
    _bad(magic, ErrorCode.corrupt_message, "magic")
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 10)
    _bad(short, ErrorCode.corrupt_message, "below the minimum")
    _bad(good, ErrorCode.message_too_large, "max.message.bytes", limit=len(good) - 1)
    # A count that disagrees with lastOffsetDelta, with a CRC that matches it.
    liar = bytearray(good)
    struct.pack_into(">i", liar, 57, 5)
    struct.pack_into(">I", liar, 17, crc32c(bytes(liar[21:])))
    _bad(liar, ErrorCode.corrupt_message, "declares 5 records")


def _compressed(codec: int, compress: object) -> bytes:
    """An uncompressed batch re-packed with its records compressed by `compress`."""
    plain = encode_batch([Record(b"v%d" % i, timestamp_ms=1000 + 10 * i) for i in range(5)])
    assert callable(compress)
    payload = bytes(compress(plain[HEADER_BYTES:]))
    after_crc = bytearray(plain[21:HEADER_BYTES] + payload)
    struct.pack_into(">h", after_crc, 0, codec)
    head = struct.pack(">qiib", 0, 9 + len(after_crc), 0, 2)
    return head + struct.pack(">I", crc32c(bytes(after_crc))) + bytes(after_crc)


def _xerial(data: bytes) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(data))
    header = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    return header + struct.pack(">i", len(block)) + block


@pytest.mark.parametrize(
    ("codec", "compress"),
    [
        (GZIP, gzip.compress),
        (SNAPPY, _xerial),
        (SNAPPY, cramjam.snappy.compress_raw),
        (LZ4, cramjam.lz4.compress),
        (ZSTD, cramjam.zstd.compress),
    ],
)
def test_record_timestamps_of_compressed_batches(codec: int, compress: object) -> None:
    data = _compressed(codec, compress)
    (header,) = validate_batches(data, max_batch_bytes=1 << 20)
    assert header.codec == codec
    assert list(record_timestamps(data)) == [(i, 1000 + 10 * i) for i in range(5)]
