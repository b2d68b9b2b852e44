"""Kafka record batches (message format v2): the unit the broker validates, stores and serves.

A batch on the wire and on disk is::

    offset  size  field
         0     8  baseOffset            assigned by the broker
         8     4  batchLength           bytes after this field (batch size = 12 + batchLength)
        12     4  partitionLeaderEpoch  assigned by the broker
        16     1  magic                 always 2
        17     4  crc                   CRC-32C of bytes 21 .. end
        21     2  attributes            codec (bits 0-2), timestamp type (3),
                                        transactional (4), control (5)
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount
        61     .  records (compressed as a whole when the codec is not none)

The CRC deliberately leaves out baseOffset and partitionLeaderEpoch, so the broker assigns
both by rewriting the first sixteen bytes, without re-checksumming or touching the records:
the hot path never parses a record. Only LogAppendTime topics rewrite a covered field
(maxTimestamp), and so recompute the CRC. Either way only a new header is built
(`stamped_header`); the bytes after it are stored straight from the producer's buffer.

Records are parsed only where a single record matters (the first record at or after a
timestamp); `encode_batch` builds uncompressed batches for the broker's own writes and for
tests and benchmarks.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import ErrorCode, KafkaError
from . import checksum
from .compression import decompress

LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
HEADER_BYTES = 61
MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD
MAGIC = 2
CRC_START = 21  # the CRC covers attributes .. end of batch
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_BASE_OFFSET_AND_LENGTH = struct.Struct(">qi")

# A bound on what one batch may decompress to when records must be looked at.
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024


class InvalidRecordError(KafkaError):
    """Framing, magic or CRC is wrong: Kafka's CORRUPT_MESSAGE."""

    code = ErrorCode.corrupt_message


class MessageTooLargeError(KafkaError):
    """One batch is larger than the topic's max.message.bytes."""

    code = ErrorCode.message_too_large


class RecordListTooLargeError(KafkaError):
    """The batches of one append do not fit in a log segment."""

    code = ErrorCode.record_list_too_large


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 batch, at byte `position` of some buffer.

    A NamedTuple rather than a frozen dataclass: it is built once per batch on the
    produce and fetch paths, and measured 3x cheaper to construct.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the header at `position`; the caller has checked that 61 bytes are there."""
    return BatchHeader._make((position, *_HEADER.unpack_from(buf, position)))


def read_base_offset_and_size(
    buf: bytes | bytearray | memoryview, position: int
) -> tuple[int, int]:
    """(baseOffset, batch size) of the batch at `position`: the 12 bytes a scan needs."""
    base_offset, batch_length = _BASE_OFFSET_AND_LENGTH.unpack_from(buf, position)
    return base_offset, LOG_OVERHEAD + batch_length


_LENGTH = struct.Struct(">i")
_RECORD_COUNT = struct.Struct(">i")
_RECORD_COUNT_AT = HEADER_BYTES - 4


def count_records(buf: bytes | bytearray | memoryview) -> int:
    """Records in the whole batches of `buf` (batches already validated: stored data).

    Reads two header fields per batch, for metrics on the fetch path; a partial batch at
    the end is not counted."""
    total, position, end = 0, 0, len(buf)
    while position + HEADER_BYTES <= end:
        total += _RECORD_COUNT.unpack_from(buf, position + _RECORD_COUNT_AT)[0]
        position += LOG_OVERHEAD + _LENGTH.unpack_from(buf, position + 8)[0]
    return total


def crc_ok(buf: bytes | bytearray | memoryview, position: int, size: int) -> bool:
    """Whether the stored CRC of the batch at `position` matches its bytes."""
    view = memoryview(buf)
    (stored,) = _CRC.unpack_from(view, position + 17)
    return bool(stored == checksum.crc32c(view[position + CRC_START : position + size]))


def check_batch(buf: bytes | bytearray | memoryview, position: int, end: int) -> BatchHeader | str:
    """Validate the framing, magic and CRC of the batch at `position` (buffer ends at `end`).

    Returns the header, or a sentence saying what is wrong. Recovery uses this form: a
    bad batch there is a fact to act on (truncate or take the partition offline), not an
    error to answer a client with. (On the produce path: one unpack, one CRC call.)
    """
    if end - position < HEADER_BYTES:
        return f"{end - position} bytes at position {position}, less than a batch header"
    header = BatchHeader._make((position, *_HEADER.unpack_from(buf, position)))
    if header.magic != MAGIC:
        return f"magic {header.magic} at position {position}, expected {MAGIC}"
    if header.batch_length < MIN_BATCH_LENGTH:
        return f"batch length {header.batch_length} at position {position} is below the minimum"
    stop = position + LOG_OVERHEAD + header.batch_length
    if stop > end:
        return f"batch at position {position} runs past the end of its buffer"
    if header.last_offset_delta < 0 or header.records_count < 0:
        return f"negative record count or offset delta at position {position}"
    if checksum.crc32c(memoryview(buf)[position + CRC_START : stop]) != header.crc:
        return f"CRC mismatch in batch at position {position}"
    return header


def validate_batches(
    buf: bytes | bytearray | memoryview, *, max_batch_bytes: int
) -> list[BatchHeader]:
    """Validate a producer's record set: one or more whole v2 batches, nothing else.

    Raises the Kafka error a producer should see; on error nothing is to be written.
    """
    end = len(buf)
    if end == 0:
        raise InvalidRecordError("empty record set")
    headers = []
    position = 0
    while position < end:
        checked = check_batch(buf, position, end)
        if isinstance(checked, str):
            if end - position >= LOG_OVERHEAD:
                _base, size = read_base_offset_and_size(buf, position)
                if size > max_batch_bytes:
                    raise MessageTooLargeError(
                        f"batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}"
                    )
            raise InvalidRecordError(checked)
        if checked.size > max_batch_bytes:
            raise MessageTooLargeError(
                f"batch of {checked.size} bytes exceeds max.message.bytes {max_batch_bytes}"
            )
        if checked.records_count != checked.last_offset_delta + 1:
            raise InvalidRecordError(
                f"batch at position {position} declares {checked.records_count} records "
                f"but a last offset delta of {checked.last_offset_delta}"
            )
        headers.append(checked)
        position += checked.size
    return headers


def stamped_header(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> bytes:
    """The first bytes of the batch at `header.position` of `buf` as the broker stores them;
    the rest of the batch, from `header.position + len(result)`, is stored unchanged.

    Normally that is 16 bytes: the assigned baseOffset and leader epoch around the batch's
    own batchLength, none of them under the CRC. With `log_append_time_ms` (LogAppendTime
    topics) it is the whole 61-byte header with that time as maxTimestamp, the timestamp
    type bit set, and the CRC recomputed over the new header fields and the unchanged
    records after them. Building only the header is what lets an append write the
    producer's bytes as they are, instead of copying every byte to patch a few.
    """
    position = header.position
    if log_append_time_ms is None:
        return _OFFSET_LENGTH_EPOCH.pack(base_offset, header.batch_length, leader_epoch)
    view = memoryview(buf)
    head = bytearray(view[position : position + HEADER_BYTES])
    _OFFSET_LENGTH_EPOCH.pack_into(head, 0, base_offset, header.batch_length, leader_epoch)
    _ATTRIBUTES.pack_into(head, 21, header.attributes | ATTR_LOG_APPEND_TIME)
    _MAX_TIMESTAMP.pack_into(head, 35, log_append_time_ms)
    records = view[position + HEADER_BYTES : position + header.size]
    _CRC.pack_into(head, 17, checksum.crc32c(records, checksum.crc32c(head[CRC_START:])))
    return bytes(head)


# --- records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a producer sends it; `timestamp_ms` is absolute."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = 0


def _zigzag_varint(value: int, out: bytearray) -> None:
    value = (value << 1) ^ (value >> 63)
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(buf: bytes, position: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if position >= len(buf) or shift > 63:
            raise InvalidRecordError("truncated or overlong varint in a record")
        byte = buf[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), position


def _nullable_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        _zigzag_varint(-1, out)
    else:
        _zigzag_varint(len(value), out)
        out += value


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
    leader_epoch: int = 0,
) -> bytes:
    """Encode an uncompressed v2 batch (the broker's own writes, tests, benchmarks)."""
    assert records, "a batch holds at least one record"
    assert attributes & ATTR_CODEC_MASK == 0, "encode_batch writes uncompressed batches only"
    base_ts = min(r.timestamp_ms for r in records)
    max_ts = max(r.timestamp_ms for r in records)
    body = bytearray()
    for delta, rec in enumerate(records):
        one = bytearray(b"\x00")  # record attributes: unused
        _zigzag_varint(rec.timestamp_ms - base_ts, one)
        _zigzag_varint(delta, one)
        _nullable_bytes(rec.key, one)
        _nullable_bytes(rec.value, one)
        _zigzag_varint(len(rec.headers), one)
        for name, hvalue in rec.headers:
            _nullable_bytes(name.encode(), one)
            _nullable_bytes(hvalue, one)
        _zigzag_varint(len(one), body)
        body += one
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        len(records) - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    ) + bytes(body)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return (
        struct.pack(">qiib", base_offset, batch_length, leader_epoch, MAGIC)
        + _CRC.pack(checksum.crc32c(after_crc))
        + after_crc
    )


def record_timestamps(batch: bytes | memoryview) -> Iterator[tuple[int, int]]:
    """(offset, timestamp_ms) of every record of one whole batch, decompressing if needed.

    LogAppendTime batches carry one timestamp for all records: the batch's maxTimestamp.
    """
    header = parse_header(batch)
    if header.is_log_append_time:
        for delta in range(header.last_offset_delta + 1):
            yield header.base_offset + delta, header.max_timestamp
        return
    for offset_delta, ts_delta, _payload, _position, _end in _records(header, batch):
        yield header.base_offset + offset_delta, header.base_timestamp + ts_delta


def decode_records(batch: bytes | memoryview) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of one whole batch, decompressing if needed.

    For the broker's own logs (the group coordinator replays its records); headers are
    skipped."""
    header = parse_header(batch)
    for offset_delta, _ts_delta, payload, position, end in _records(header, batch):
        key, position = _read_nullable(payload, position, end)
        value, position = _read_nullable(payload, position, end)
        yield header.base_offset + offset_delta, key, value


def decode_full_records(batch: bytes | memoryview) -> Iterator[tuple[int, Record]]:
    """(offset, record) of every record of one whole batch, headers included,
    decompressing if needed; timestamps absolute (LogAppendTime: the batch's).

    For the broker's routing, which copies records into other logs."""
    header = parse_header(batch)
    log_append_time = header.is_log_append_time
    for offset_delta, ts_delta, payload, position, end in _records(header, batch):
        key, position = _read_nullable(payload, position, end)
        value, position = _read_nullable(payload, position, end)
        count, position = _read_varint(payload, position)
        if count < 0 or count > end - position:
            raise InvalidRecordError(f"a record claims {count} headers")
        headers = []
        for _ in range(count):
            name, position = _read_nullable(payload, position, end)
            if name is None:
                raise InvalidRecordError("a record header has a null name")
            hvalue, position = _read_nullable(payload, position, end)
            headers.append((name.decode("utf-8", errors="replace"), hvalue))
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + ts_delta
        yield (
            header.base_offset + offset_delta,
            Record(value=value, key=key, headers=tuple(headers), timestamp_ms=timestamp),
        )


def _records(
    header: BatchHeader, batch: bytes | memoryview
) -> Iterator[tuple[int, int, bytes, int, int]]:
    """(offset delta, timestamp delta, payload, where the record's key starts, where the
    record ends) of each record of one whole batch, the payload decompressed if needed."""
    payload = decompress(
        header.codec,
        memoryview(batch)[HEADER_BYTES : header.size],
        max_bytes=DECOMPRESSED_BYTES_MAX,
    )
    position = 0
    for _ in range(header.records_count):
        length, position = _read_varint(payload, position)
        record_end = position + length
        if record_end > len(payload):
            raise InvalidRecordError("record runs past the end of its batch")
        position += 1  # record attributes
        ts_delta, position = _read_varint(payload, position)
        offset_delta, position = _read_varint(payload, position)
        yield offset_delta, ts_delta, payload, position, record_end
        position = record_end


def _read_nullable(payload: bytes, position: int, end: int) -> tuple[bytes | None, int]:
    length, position = _read_varint(payload, position)
    if length < 0:
        return None, position
    if position + length > end:
        raise InvalidRecordError("record field runs past the end of its record")
    return bytes(payload[position : position + length]), position + length
