"""`records.recompress`: a batch rewritten into a topic's compression.type.

Source batches are compressed here by other libraries than the module's (stdlib gzip,
python-lz4's linked-block frames, zstandard, snappy both raw and xerial-framed), so the
module is shown to read what producers send. Every source codec goes to every target
codec, and the result must validate with the broker's own `validate_batches`, carry a
valid CRC, keep every header field but length, CRC and the codec bits, and decode to the
same records through two decoders: the broker's `decode_full_records` and kafka-python's
record parser (which decompresses with python-snappy, lz4 and zstandard, not cramjam).
"""

from __future__ import annotations

import gzip
import struct
import warnings
from collections.abc import Callable

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.records import checksum
from weirmq.records.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    HEADER_BYTES,
    InvalidRecordError,
    Record,
    crc_ok,
    decode_full_records,
    encode_batch,
    parse_header,
    validate_batches,
)
from weirmq.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, CorruptPayloadError
from weirmq.records.recompress import CODECS, recompress_batch

with warnings.catch_warnings():  # kafka-python 3.0 loads schemas with a deprecated API
    warnings.filterwarnings("ignore", message=r"(read_text|open_text) is deprecated")
    from kafka.record.memory_records import MemoryRecords

pytestmark = pytest.mark.filterwarnings(
    r"ignore:(read_text|open_text) is deprecated:DeprecationWarning"
)

MAX_BATCH_BYTES = 8 * 1024 * 1024


def _xerial(data: bytes) -> bytes:
    """snappy-java framing with small (1 KiB) blocks, so several blocks occur."""
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for start in range(0, len(data), 1024):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + 1024]))
        out += struct.pack(">i", len(block)) + block
    return out


SOURCES: dict[str, tuple[int, Callable[[bytes], bytes]]] = {
    "uncompressed": (NONE, lambda data: data),
    "gzip": (GZIP, gzip.compress),
    "snappy-xerial": (SNAPPY, _xerial),
    "snappy-raw": (SNAPPY, lambda data: bytes(cramjam.snappy.compress_raw(data))),
    # python-lz4's default is linked blocks: a producer may send them, Kafka reads them.
    "lz4": (LZ4, lambda data: lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB)),
    "zstd": (ZSTD, zstandard.ZstdCompressor().compress),
}


def _records(n: int = 40, size: int = 1000) -> list[Record]:
    return [
        Record(
            value=(b'{"n": %d, "text": "' % i).ljust(size - 2, b"x") + b'"}',
            key=None if i % 7 == 0 else b"key-%d" % (i % 5),
            headers=(("trace", b"t-%d" % i), ("empty", None)),
            timestamp_ms=1_700_000_000_000 + 3 * i,
        )
        for i in range(n)
    ]


def _source(records: list[Record], name: str, *, attributes: int = 0, **fields: int) -> bytes:
    """A producer's batch of `records` compressed by the `name` source's library."""
    codec, compress = SOURCES[name]
    plain = encode_batch(records, attributes=attributes, **fields)
    after_crc = bytearray(plain[21:HEADER_BYTES] + compress(plain[HEADER_BYTES:]))
    struct.pack_into(">h", after_crc, 0, attributes | codec)
    head = plain[:8] + struct.pack(">i", 9 + len(after_crc)) + plain[12:17]
    return head + struct.pack(">I", checksum.crc32c(bytes(after_crc))) + bytes(after_crc)


def _kafka_python(batch: bytes) -> list[tuple[int, Record]]:
    return [
        (r.offset, Record(r.value, r.key, tuple(r.headers), r.timestamp))
        for b in MemoryRecords(batch)
        for r in b
    ]


def _check_rewritten(source: bytes, out: bytes, target: str) -> None:
    """`out` is `source` in `target`: valid, same header fields, same records."""
    (header,) = validate_batches(out, max_batch_bytes=MAX_BATCH_BYTES)
    assert crc_ok(out, 0, len(out))
    before = parse_header(source)
    assert header.codec == CODECS[target]
    assert header.attributes & ~ATTR_CODEC_MASK == before.attributes & ~ATTR_CODEC_MASK
    keep = ("base_offset", "partition_leader_epoch", "magic", "last_offset_delta")
    keep += ("base_timestamp", "max_timestamp", "producer_id", "producer_epoch")
    keep += ("base_sequence", "records_count")
    assert [getattr(header, f) for f in keep] == [getattr(before, f) for f in keep]
    expected = list(decode_full_records(source))
    assert list(decode_full_records(out)) == expected
    if not header.is_log_append_time:  # kafka-python reports LogAppendTime differently
        assert _kafka_python(out) == expected


@pytest.mark.parametrize("target", list(CODECS))
@pytest.mark.parametrize("source_name", list(SOURCES))
def test_every_codec_is_rewritten_into_every_other(source_name: str, target: str) -> None:
    source = _source(
        _records(),
        source_name,
        base_offset=0,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=17,
    )
    out = recompress_batch(source, target)
    if SOURCES[source_name][0] == CODECS[target]:
        assert out is None
        return
    assert out is not None
    _check_rewritten(source, out, target)
    # And back: the round trip through `target` gives the same records again.
    back = recompress_batch(out, source_name.split("-")[0])
    if back is not None:
        _check_rewritten(source, back, source_name.split("-")[0])


@pytest.mark.parametrize("target", ["gzip", "snappy", "lz4", "zstd"])
def test_transactional_and_log_append_time_batches_keep_their_attributes(target: str) -> None:
    attributes = ATTR_TRANSACTIONAL | ATTR_LOG_APPEND_TIME
    source = _source(_records(5), "uncompressed", attributes=attributes, producer_id=9)
    out = recompress_batch(memoryview(source), target)
    assert out is not None
    _check_rewritten(source, out, target)
    assert parse_header(out).is_transactional and parse_header(out).is_log_append_time


def test_a_control_batch_is_left_as_it_is() -> None:
    # A transaction marker: key (version, type), value (version, coordinator epoch).
    marker = Record(value=b"\x00\x00\x00\x00\x00\x05", key=b"\x00\x00\x00\x01")
    source = encode_batch([marker], attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL, producer_id=1)
    assert recompress_batch(source, "zstd") is None


def test_lz4_frames_have_independent_blocks_as_kafkas_java_client_requires() -> None:
    # Large enough for several 64 KiB blocks; FLG bit 5 is block independence.
    source = _source(_records(300), "uncompressed")
    out = recompress_batch(source, "lz4")
    assert out is not None
    frame = out[HEADER_BYTES:]
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20, "linked blocks: Kafka's Java client refuses them"
    _check_rewritten(source, out, "lz4")


@pytest.mark.parametrize(
    ("target", "levels"),
    [("gzip", [-1, 1, 9]), ("lz4", [1, 9, 17]), ("zstd", [-131072, -5, 1, 3, 22])],
)
def test_every_level_kafka_accepts_is_used(target: str, levels: list[int]) -> None:
    source = _source(_records(), "uncompressed")
    sizes = set()
    for level in levels:
        out = recompress_batch(source, target, level=level)
        assert out is not None
        _check_rewritten(source, out, target)
        sizes.add(len(out))
    assert len(sizes) > 1, "the level changed nothing: it is not passed to the library"


@pytest.mark.parametrize(
    ("target", "level"), [("gzip", 0), ("gzip", 10), ("lz4", 0), ("lz4", 18), ("zstd", 23)]
)
def test_levels_kafka_refuses_are_refused(target: str, level: int) -> None:
    with pytest.raises(ValueError, match="outside Kafka's range"):
        recompress_batch(_source(_records(2), "uncompressed"), target, level=level)


def test_a_level_for_a_codec_without_one_is_ignored() -> None:
    source = _source(_records(2), "gzip")
    assert recompress_batch(source, "snappy", level=5) == recompress_batch(source, "snappy")


@pytest.mark.parametrize("codec", ["producer", "none", "brotli"])
def test_only_real_codec_names_are_targets(codec: str) -> None:
    with pytest.raises(ValueError, match="cannot recompress"):
        recompress_batch(_source(_records(2), "uncompressed"), codec)


def test_a_damaged_batch_is_refused_before_anything_is_written() -> None:
    source = bytearray(_source(_records(3), "gzip"))
    source[-3] ^= 0xFF
    with pytest.raises(InvalidRecordError, match="CRC mismatch"):
        recompress_batch(bytes(source), "zstd")
    with pytest.raises(InvalidRecordError, match="and more"):
        recompress_batch(_source(_records(3), "gzip") * 2, "zstd")


def _gzip_batch_around(plain: bytes, records: bytes) -> bytes:
    """`plain`'s header (a CRC-valid gzip batch) around `records`, whatever they hold."""
    after_crc = bytearray(plain[21:HEADER_BYTES] + gzip.compress(records))
    struct.pack_into(">h", after_crc, 0, GZIP)
    head = plain[:8] + struct.pack(">i", 9 + len(after_crc)) + plain[12:17]
    return head + struct.pack(">I", checksum.crc32c(bytes(after_crc))) + bytes(after_crc)


@pytest.mark.parametrize(
    ("records", "refusal"),
    [
        (encode_batch(_records(2))[HEADER_BYTES:], "truncated or overlong record length"),
        (encode_batch(_records(3))[HEADER_BYTES:][:-10], "runs past"),
        (encode_batch(_records(3))[HEADER_BYTES:] + b"\x00\x00", "2 bytes follow"),
    ],
)
def test_a_payload_that_decompresses_but_is_not_the_declared_records_is_refused(
    records: bytes, refusal: str
) -> None:
    # CRC-valid gzip batches declaring three records whose payload holds something else:
    # recompressing must not give them a fresh, valid CRC in another codec.
    liar = _gzip_batch_around(encode_batch(_records(3)), records)
    with pytest.raises(InvalidRecordError, match=refusal):
        recompress_batch(liar, "lz4")


def test_a_payload_that_does_not_decompress_is_refused() -> None:
    plain = encode_batch(_records(3))
    not_gzip = bytearray(_gzip_batch_around(plain, plain[HEADER_BYTES:]))
    not_gzip[HEADER_BYTES : HEADER_BYTES + 2] = b"PK"
    struct.pack_into(">I", not_gzip, 17, checksum.crc32c(bytes(not_gzip[21:])))
    with pytest.raises(CorruptPayloadError):
        recompress_batch(bytes(not_gzip), "lz4")


BLOBS = st.sampled_from([0, 1, 127, 128, 5000, 70_000]).flatmap(
    lambda n: st.binary(min_size=n, max_size=n)
)
RECORDS = st.builds(
    Record,
    value=st.none() | BLOBS,
    key=st.none() | st.binary(max_size=200),
    headers=st.lists(
        st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=50)), max_size=2
    ).map(tuple),
    timestamp_ms=st.integers(1_600_000_000_000, 1_600_000_100_000),
)


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(RECORDS, min_size=1, max_size=8),
    source_name=st.sampled_from(list(SOURCES)),
    targets=st.lists(st.sampled_from(list(CODECS)), min_size=1, max_size=3),
    transactional=st.booleans(),
)
def test_any_chain_of_recompressions_keeps_the_batch(
    records: list[Record], source_name: str, targets: list[str], transactional: bool
) -> None:
    attributes = ATTR_TRANSACTIONAL if transactional else 0
    source = _source(records, source_name, attributes=attributes, producer_id=7, base_sequence=0)
    current = source
    for target in targets:
        out = recompress_batch(current, target)
        if out is None:
            assert parse_header(current).codec == CODECS[target]
            continue
        _check_rewritten(source, out, target)
        current = out
