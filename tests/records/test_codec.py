"""`records.codec`: routing's bulk reader and writer (aiokafka's record codec), checked
against kafka-python's record parser, another implementation of the same format, and
against our own `decode_full_records`.

Random batches (keys, values and headers of every size class, so one-, two- and
three-byte varints all occur) must read the same through all three; records written by
`CopyWriter` must read back as exactly those records, with the producer state asked for,
split into batches no larger than asked; a compressed batch is read through the broker's
own bounded decompression.
"""

from __future__ import annotations

import gzip
import struct
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.records import checksum
from weirmq.records.batch import (
    DECOMPRESSED_BYTES_MAX,
    HEADER_BYTES,
    Record,
    decode_full_records,
    encode_batch,
    parse_header,
)
from weirmq.records.codec import CopyWriter, read_records
from weirmq.records.compression import CorruptPayloadError

with warnings.catch_warnings():  # kafka-python 3.0 loads schemas with a deprecated API
    warnings.filterwarnings("ignore", message=r"(read_text|open_text) is deprecated")
    from kafka.record.memory_records import MemoryRecords

pytestmark = pytest.mark.filterwarnings(
    r"ignore:(read_text|open_text) is deprecated:DeprecationWarning"
)

SIZES = st.sampled_from([0, 1, 63, 64, 127, 128, 8191, 8192, 20_000])
BLOBS = SIZES.flatmap(lambda n: st.binary(min_size=n, max_size=n))
RECORDS = st.builds(
    Record,
    value=st.none() | BLOBS,
    key=st.none() | st.binary(max_size=300),
    headers=st.lists(
        st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=200)), max_size=3
    ).map(tuple),
    timestamp_ms=st.integers(1_600_000_000_000, 1_600_000_100_000),
)


def read_with_kafka_python(batch: bytes) -> list[tuple[int, Record]]:
    return [
        (r.offset, Record(r.value, r.key, tuple(r.headers), r.timestamp))
        for b in MemoryRecords(batch)
        for r in b
    ]


def as_records(copies: list) -> list[tuple[int, Record]]:  # type: ignore[type-arg]
    return [(c.offset, Record(c.value, c.key, tuple(c.headers), c.timestamp)) for c in copies]


@settings(max_examples=60, deadline=None)
@given(records=st.lists(RECORDS, min_size=1, max_size=12), data=st.data())
def test_read_and_written_as_kafka_python_reads_them(
    records: list[Record], data: st.DataObject
) -> None:
    batch = encode_batch(records, base_offset=100)
    header, copies = read_records(batch)
    assert header.base_offset == 100
    assert as_records(copies) == read_with_kafka_python(batch) == list(decode_full_records(batch))
    picked = sorted(data.draw(st.sets(st.integers(0, len(copies) - 1), min_size=1)))
    [(written, first, count)] = CopyWriter(7, 0, 1 << 20).write(
        [copies[i] for i in picked], lambda first, count: 40
    )
    assert (first, count) == (0, len(picked))
    assert read_with_kafka_python(written) == [(n, records[i]) for n, i in enumerate(picked)]
    written_header = parse_header(written)
    assert (written_header.producer_id, written_header.producer_epoch) == (7, 0)
    assert written_header.base_sequence == 40


def test_copies_are_split_at_the_size_asked_with_each_batchs_sequence() -> None:
    records = [Record(b"x" * 1000, b"k%d" % i, (), 1_700_000_000_000 + i) for i in range(50)]
    _, copies = read_records(encode_batch(records))
    asked: list[tuple[int, int]] = []

    def sequence(first: int, count: int) -> int:
        asked.append((first, count))
        return first

    out = CopyWriter(3, 1, 10_000).write(copies, sequence)
    assert [(first, count) for _, first, count in out] == asked
    assert len(out) >= 5 and sum(count for _, _, count in out) == 50
    for written, first, count in out:
        assert len(written) <= 10_000 + 1100  # the record that crossed the line stays out
        assert parse_header(written).base_sequence == first
        assert [r for _, r in read_with_kafka_python(written)] == records[first : first + count]


def _gzipped(plain: bytes) -> bytes:
    """`plain` (an uncompressed batch) with its records gzip-compressed."""
    after_crc = struct.pack(">h", 1) + plain[23:HEADER_BYTES] + gzip.compress(plain[HEADER_BYTES:])
    return (
        struct.pack(">qiib", 0, 9 + len(after_crc), 0, 2)
        + struct.pack(">I", checksum.crc32c(after_crc))
        + after_crc
    )


def test_a_compressed_batch_is_read_through_the_brokers_bounded_decompression(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = [Record(b"v%d" % i * 50, b"k", (("h", b"1"),), 1_700_000_000_000) for i in range(30)]
    batch = _gzipped(encode_batch(records))
    _, copies = read_records(batch)
    assert [r for _, r in as_records(copies)] == records
    from weirmq.records import codec

    monkeypatch.setattr(codec, "DECOMPRESSED_BYTES_MAX", 100)  # as if a bomb
    with pytest.raises(CorruptPayloadError, match="exceeds 100 bytes"):
        read_records(batch)
    assert DECOMPRESSED_BYTES_MAX >= 1 << 20
