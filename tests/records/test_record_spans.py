"""Routing's hand-written record reader and copier (`record_spans`, `copy_batch`), checked
against kafka-python's record parser, another implementation of the same format.

`record_spans` reads every varint inline for speed; `copy_batch` moves records into a new
batch keeping their bytes. Random batches (keys, values and headers of every size class,
so one-, two- and three-byte varints all occur; every codec) must read the same as
kafka-python reads them, and any subset copied must read back as exactly those records.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.records.batch import Record, copy_batch, encode_batch, record_spans

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


@settings(max_examples=60, deadline=None)
@given(records=st.lists(RECORDS, min_size=1, max_size=12), data=st.data())
def test_spans_and_copies_read_as_kafka_python_reads_them(
    records: list[Record], data: st.DataObject
) -> None:
    batch = encode_batch(records, base_offset=100)
    header, payload, spans = record_spans(batch)
    expected = read_with_kafka_python(batch)
    assert [(100 + s.offset_delta, s.key, s.headers) for s in spans] == [
        (offset, r.key, r.headers) for offset, r in expected
    ]
    picked = sorted(data.draw(st.sets(st.integers(0, len(spans) - 1), min_size=1)))
    copy = copy_batch(header, payload, [spans[i] for i in picked], producer_id=7,
                      producer_epoch=0, base_sequence=3)  # fmt: skip
    assert read_with_kafka_python(copy) == [(n, records[i]) for n, i in enumerate(picked)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_read_and_copied_uncompressed(codec: str) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    codecs = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codecs[codec], is_transactional=False,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    records = [Record(b"value-%d" % i * 20, b"k%d" % i, (("h", b"x"),), 1_700_000_000_000 + i)
               for i in range(50)]  # fmt: skip
    for i, r in enumerate(records):
        builder.append(i, r.timestamp_ms, r.key, r.value, list(r.headers))
    batch = bytes(builder.build())
    header, payload, spans = record_spans(batch)
    assert header.codec == codecs[codec] and len(spans) == 50
    copy = copy_batch(header, payload, spans[10:20])
    assert read_with_kafka_python(copy) == list(enumerate(records[10:20]))
