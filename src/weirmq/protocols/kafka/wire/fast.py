"""Hand-written codecs for the hot path: the Produce request, the Produce and Fetch responses.

`messages.build_response` + `messages.encode` can answer any version of any API, but it
builds a tree of kio dataclasses and writes it field by field through kio's Python writer:
about 30 us for a one-partition ProduceResponse, paid on every produce request. These
encoders write the same bytes straight from the plain data the handlers return (the
mappings described in `messages`), with one precompiled `struct` per fixed run of fields.
Tests check them byte for byte against kio for every version and random data.

Layouts (body only, no response header; ints big-endian; `[x]` is an array of x;
`(tags)` is an empty tagged-field section, one 0 byte, in flexible versions only):

    ProduceResponse  [topic: name (v13+ topic_id:uuid) [partition] (tags)]
                     throttle_time:i32 (tags)
    partition        index:i32 error_code:i16 base_offset:i64 log_append_time:i64
                     v5+ log_start_offset:i64
                     v8+ [record_error: batch_index:i32 message:nullable string (tags)]
                     v8+ error_message:nullable string
                     (tags)
    FetchResponse    throttle_time:i32 v7+ error_code:i16 session_id:i32
                     [topic: name (v13+ topic_id:uuid) [partition] (tags)] (tags)
    partition        partition_index:i32 error_code:i16 high_watermark:i64
                     last_stable_offset:i64 v5+ log_start_offset:i64
                     [aborted: producer_id:i64 first_offset:i64 (tags)] (nullable)
                     v11+ preferred_read_replica:i32
                     records:nullable bytes (tags)

From Produce v13 and Fetch v13 on (KIP-516), topics are named by their 16-byte id
instead of their name, both ways; the decoders give the id (None for the zero id, as kio
reads it) and an empty name, which the handlers look up.

Flexible versions (Produce v9+, Fetch v12+) write lengths as unsigned varints of length+1
(0 is null) and end every structure with a tagged-field section; the others use int16
string lengths, int32 array and bytes lengths, and -1 for null.

Tagged fields are always written empty. That is what kio writes for their default values
(Produce `current_leader`, `node_endpoints`; Fetch `diverging_epoch`, `current_leader`,
`snapshot_id`), and the handlers never fill them; a handler that needs them must answer
through `messages` instead. Other fields follow kio's conversions: a negative
`log_append_time` (or None) is -1, "no timestamp".

A FetchResponse can carry megabytes of records, so it comes back as a list of buffers to
be written in order: the records objects themselves sit in the list, uncopied, between
the bytes of the fields around them. Records up to `INLINE_RECORDS_BYTES_MAX` are copied
into the surrounding bytes instead: copying a few hundred bytes is cheaper than one more
buffer for the transport to gather.

A ProduceRequest carries the same megabytes the other way. `decode_produce_request` reads
it in one pass and returns each partition's records as a read-only view of the request
frame, where kio's reader would first walk the body for `bounds.check_bounds` and then copy
the records into a new `bytes`. Measured on 1 MB requests of 1 KB records: ~100 us of the
~1 ms the broker spends on one request in-process, about half of it the copy. It checks
what the two of them check: every length against the bytes left, UTF-8 strings, tagged
fields that fit; a null array (which kio let through as None) is malformed as well. Tagged
fields are skipped, as Kafka skips the ones it does not know (ProduceRequest defines none
up to v12); kio refused them.

    ProduceRequest   transactional_id:nullable string acks:i16 timeout_ms:i32
                     [topic: name (v13+ topic_id:uuid)
                      [partition: index:i32 records:nullable bytes (tags)] (tags)] (tags)

A FetchRequest is small, but every consumer sends one per poll, so it is the other request
on the hot path: `decode_fetch_request` reads it in one pass (kio's path costs a bounds
walk, the native read and the dataclasses of a tree: about half of a small fetch's time in
the broker). Same checks as for Produce; what the broker does not use (replica id,
forgotten topics of a fetch session, which it declines, the rack) is checked and skipped.

    FetchRequest     (until v14: replica_id:i32) max_wait_ms:i32 min_bytes:i32
                     max_bytes:i32 isolation_level:i8 v7+ session_id:i32 session_epoch:i32
                     [topic: name (v13+ topic_id:uuid) [partition (tags)] (tags)]
                     v7+ [forgotten: name (v13+ topic_id:uuid) [partition:i32] (tags)]
                     v11+ rack_id:string (tags: v15+ replica_state, v17+ its directory
                     id, v18+ the follower's high watermark; a consumer sends none)
    partition        partition:i32 v9+ current_leader_epoch:i32 fetch_offset:i64
                     v12+ last_fetched_epoch:i32 v5+ log_start_offset:i64
                     partition_max_bytes:i32
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .framing import HeaderError, read_uvarint
from .messages import DecodeError

__all__ = [
    "FETCH_VERSIONS",
    "INLINE_RECORDS_BYTES_MAX",
    "PRODUCE_VERSIONS",
    "FetchPartitionData",
    "FetchRequestData",
    "FetchTopicData",
    "PartitionProduceData",
    "ProduceRequest",
    "TopicProduceData",
    "decode_fetch_request",
    "decode_produce_request",
    "encode_fetch_response",
    "encode_produce_response",
]

PRODUCE_VERSIONS: Final = range(3, 14)
FETCH_VERSIONS: Final = range(4, 19)
INLINE_RECORDS_BYTES_MAX: Final = 1024

_PRODUCE_FIRST_FLEXIBLE: Final = 9
_FETCH_FIRST_FLEXIBLE: Final = 12
PRODUCE_FIRST_TOPIC_ID: Final = 13
FETCH_FIRST_TOPIC_ID: Final = 13
"""The first versions that name topics by id only (KIP-516)."""
_FETCH_FIRST_WITHOUT_REPLICA_ID: Final = 15
_ZERO_UUID: Final = bytes(16)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64_I64 = struct.Struct(">qq")
_NULL_I16: Final = _I16.pack(-1)
_NULL_I32: Final = _I32.pack(-1)
_NO_TAGS: Final = b"\x00"
_NULL_COMPACT: Final = b"\x00"  # null string or array in a flexible version

# Produce partition: index, error_code, base_offset, log_append_time[, log_start_offset].
_PRODUCE_PARTITION_V3 = struct.Struct(">ihqq")
_PRODUCE_PARTITION_V5 = struct.Struct(">ihqqq")
# v9+ partition as the handler nearly always answers (no record errors, no message): the
# five fields, an empty compact array, a null compact string, an empty tag section.
_PRODUCE_PARTITION_FLEXIBLE_PLAIN = struct.Struct(">ihqqqBBB")
_PRODUCE_FLEXIBLE_TAIL = struct.Struct(">iB")  # throttle_time, tags

# Fetch: throttle_time[, error_code, session_id]; partition_index, error_code,
# high_watermark, last_stable_offset[, log_start_offset].
_FETCH_HEAD_V4 = struct.Struct(">i")
_FETCH_HEAD_V7 = struct.Struct(">ihi")
_FETCH_PARTITION_V4 = struct.Struct(">ihqq")
_FETCH_PARTITION_V5 = struct.Struct(">ihqqq")
# v12 partition with no aborted transactions: the five fields, a null compact array,
# preferred_read_replica.
_FETCH_PARTITION_FLEXIBLE_PLAIN = struct.Struct(">ihqqqBi")
_NULL_RECORDS_FLEXIBLE: Final = b"\x00\x00"  # null compact bytes, then the partition's tags

# The loops below look lengths under 128 up here, `small[n] if n < 128 else _uvarint(n)`,
# rather than call _uvarint: a Python call is a large part of a partition's cost.
_SMALL_UVARINTS: Final = tuple(bytes((n,)) for n in range(128))


def _uvarint(value: int) -> bytes:
    """Unsigned LEB128, as Kafka writes compact lengths and tag counts."""
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    if value < 0x200000:  # up to 2 MiB of records: two or three bytes, without a loop
        low = (value & 0x7F) | 0x80
        if value < 0x4000:
            return bytes((low, value >> 7))
        return bytes((low, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _legacy_string(value: str) -> bytes:
    encoded = value.encode()
    return _I16.pack(len(encoded)) + encoded


def _legacy_nullable_string(value: str | None) -> bytes:
    return _NULL_I16 if value is None else _legacy_string(value)


def _compact_string(value: str) -> bytes:
    encoded = value.encode()
    return _uvarint(len(encoded) + 1) + encoded


def _compact_nullable_string(value: str | None) -> bytes:
    return _NULL_COMPACT if value is None else _compact_string(value)


# --- Produce request -------------------------------------------------------------------

_ACKS_TIMEOUT = struct.Struct(">hi")
_I32_I32 = struct.Struct(">ii")  # a partition's index and, in legacy versions, records length


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made
# building these a measurable part of a small request. Only one thing writes to them: from
# Produce v13 and Fetch v13 on, the handlers set each topic's name from its id.


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None
    """A read-only view of the request frame: valid while the frame is."""


@dataclass(slots=True)
class TopicProduceData:
    name: str
    """Empty from v13 on, until the handler looks the id up."""
    partition_data: tuple[PartitionProduceData, ...]
    topic_id: uuid.UUID | None = None
    """v13+ only."""


@dataclass(slots=True)
class ProduceRequest:
    """A ProduceRequest of any version in `PRODUCE_VERSIONS`, with kio's field names."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


def decode_produce_request(version: int, frame: bytes | memoryview, offset: int) -> ProduceRequest:
    """The ProduceRequest body of `frame` from `offset` (bytes after it are ignored, as
    `messages.decode_request` ignores them). Raises `DecodeError` if it is malformed."""
    if version not in PRODUCE_VERSIONS:
        raise ValueError(f"no fast ProduceRequest decoder for v{version}")
    reader = _Reader(memoryview(frame).toreadonly(), offset)
    try:
        if version >= _PRODUCE_FIRST_FLEXIBLE:
            return _produce_request_flexible(reader, by_id=version >= PRODUCE_FIRST_TOPIC_ID)
        return _produce_request_legacy(reader)
    except (struct.error, UnicodeDecodeError, HeaderError) as exc:
        raise DecodeError(f"malformed ProduceRequest v{version}: {exc}") from exc


class _Reader:
    """A position in a read-only buffer; every method checks the bytes it needs are there."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def take(self, size: int) -> memoryview:
        start, stop = self.pos, self.pos + size
        if size < 0 or stop > self.end:
            raise DecodeError(f"{size} bytes claimed at {start}, only {self.end - start} left")
        self.pos = stop
        return self.buf[start:stop]

    def count(self, count: int) -> int:
        """An array's element count: never null here, and every element takes a byte."""
        if count < 0 or count > self.end - self.pos:
            raise DecodeError(f"array of {count} elements at {self.pos}")
        return count

    def uvarint(self) -> int:
        pos = self.pos
        if pos < self.end:
            byte = self.buf[pos]
            if byte < 0x80:  # nearly every length and tag count: one byte
                self.pos = pos + 1
                return byte
        value, self.pos = read_uvarint(self.buf, pos, self.end)
        return value

    def i32(self) -> int:
        (value,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(value)

    def legacy_string(self) -> str | None:
        (size,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return None if size == -1 else str(self.take(size), "utf-8")

    def compact_string(self) -> str | None:
        size = self.uvarint() - 1
        return None if size == -1 else str(self.take(size), "utf-8")

    def uuid(self) -> uuid.UUID | None:
        """A topic id; the zero id (Kafka's "none") is None, as kio reads it."""
        raw = bytes(self.take(16))
        return None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)

    def skip_tags(self) -> None:
        for _ in range(self.count(self.uvarint())):
            self.uvarint()  # the tag: ProduceRequest defines none up to v12
            self.take(self.uvarint())


def _produce_request_legacy(r: _Reader) -> ProduceRequest:
    transactional_id = r.legacy_string()
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(r.buf, r.pos)
    (topics,) = _I32.unpack_from(r.buf, r.pos + 6)
    r.pos += 10
    topic_data = []
    for _ in range(r.count(topics)):
        name = r.legacy_string()
        if name is None:
            raise DecodeError(f"null topic name at {r.pos}")
        (partitions,) = _I32.unpack_from(r.buf, r.pos)
        r.pos += 4
        partition_data = []
        for _ in range(r.count(partitions)):
            index, size = _I32_I32.unpack_from(r.buf, r.pos)
            r.pos += 8
            records = None if size == -1 else r.take(size)
            partition_data.append(PartitionProduceData(index, records))
        topic_data.append(TopicProduceData(name, tuple(partition_data)))
    return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topic_data))


def _produce_request_flexible(r: _Reader, *, by_id: bool) -> ProduceRequest:
    transactional_id = r.compact_string()
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(r.buf, r.pos)
    r.pos += 6
    topic_data = []
    for _ in range(r.count(r.uvarint() - 1)):
        topic_id = r.uuid() if by_id else None
        name = "" if by_id else r.compact_string()
        if name is None:
            raise DecodeError(f"null topic name at {r.pos}")
        partition_data = []
        for _ in range(r.count(r.uvarint() - 1)):
            (index,) = _I32.unpack_from(r.buf, r.pos)
            r.pos += 4
            size = r.uvarint() - 1
            records = None if size == -1 else r.take(size)
            r.skip_tags()
            partition_data.append(PartitionProduceData(index, records))
        r.skip_tags()
        topic_data.append(TopicProduceData(name, tuple(partition_data), topic_id))
    r.skip_tags()
    return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topic_data))


# --- Fetch request ---------------------------------------------------------------------

_FETCH_HEAD = struct.Struct(">iiiib")  # replica_id max_wait min_bytes max_bytes isolation
_FETCH_HEAD_V15 = struct.Struct(">iiib")  # the same without replica_id
_FETCH_SESSION = struct.Struct(">ii")
_FETCH_REQUEST_PARTITION_V4 = struct.Struct(">iqi")  # partition fetch_offset partition_max_bytes
_FETCH_REQUEST_PARTITION_V5 = struct.Struct(">iqqi")  # + log_start_offset
_FETCH_REQUEST_PARTITION_V9 = struct.Struct(">iiqqi")  # + current_leader_epoch
_FETCH_REQUEST_PARTITION_V12 = struct.Struct(">iiqiqi")  # + last_fetched_epoch
_NO_LEADER_EPOCH: Final = -1
_NO_SESSION_ID: Final = 0
_FINAL_SESSION_EPOCH: Final = -1


@dataclass(slots=True)
class FetchPartitionData:
    partition: int
    current_leader_epoch: int
    """-1 before v9, which does not send it (no fencing)."""
    fetch_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchTopicData:
    topic: str
    """Empty from v13 on, until the handler looks the id up."""
    partitions: tuple[FetchPartitionData, ...]
    topic_id: uuid.UUID | None = None
    """v13+ only."""


@dataclass(slots=True)
class FetchRequestData:
    """A FetchRequest of any version in `FETCH_VERSIONS`, with kio's field names for what
    the broker reads (`requests.FetchRequest`)."""

    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    """0 before v7, which has no sessions."""
    session_epoch: int
    """-1 (a full fetch without a session) before v7."""
    topics: tuple[FetchTopicData, ...]


def decode_fetch_request(version: int, frame: bytes | memoryview, offset: int) -> FetchRequestData:
    """The FetchRequest body of `frame` from `offset`; raises `DecodeError` if malformed."""
    if version not in FETCH_VERSIONS:
        raise ValueError(f"no fast FetchRequest decoder for v{version}")
    reader = _Reader(memoryview(frame).toreadonly(), offset)
    try:
        return _fetch_request(reader, version)
    except (struct.error, UnicodeDecodeError, HeaderError) as exc:
        raise DecodeError(f"malformed FetchRequest v{version}: {exc}") from exc


def _fetch_request(r: _Reader, version: int) -> FetchRequestData:
    flexible = version >= _FETCH_FIRST_FLEXIBLE
    by_id = version >= FETCH_FIRST_TOPIC_ID
    buf = r.buf
    if version >= _FETCH_FIRST_WITHOUT_REPLICA_ID:  # a follower's id went to a tag
        max_wait_ms, min_bytes, max_bytes, isolation = _FETCH_HEAD_V15.unpack_from(buf, r.pos)
        r.pos += _FETCH_HEAD_V15.size
    else:
        _, max_wait_ms, min_bytes, max_bytes, isolation = _FETCH_HEAD.unpack_from(buf, r.pos)
        r.pos += _FETCH_HEAD.size
    session_id, session_epoch = _NO_SESSION_ID, _FINAL_SESSION_EPOCH
    if version >= 7:
        session_id, session_epoch = _FETCH_SESSION.unpack_from(buf, r.pos)
        r.pos += _FETCH_SESSION.size
    if version >= 12:
        layout = _FETCH_REQUEST_PARTITION_V12
    elif version >= 9:
        layout = _FETCH_REQUEST_PARTITION_V9
    elif version >= 5:
        layout = _FETCH_REQUEST_PARTITION_V5
    else:
        layout = _FETCH_REQUEST_PARTITION_V4
    unpack, size = layout.unpack_from, layout.size
    topics = []
    for _ in range(r.count(r.uvarint() - 1 if flexible else r.i32())):
        topic_id = r.uuid() if by_id else None
        if by_id:
            name: str | None = ""
        else:
            name = r.compact_string() if flexible else r.legacy_string()
        if name is None:
            raise DecodeError(f"null topic name at {r.pos}")
        partitions = []
        for _ in range(r.count(r.uvarint() - 1 if flexible else r.i32())):
            fields = unpack(buf, r.pos)
            r.pos += size
            if version >= 12:
                index, epoch, fetch_offset, _last_epoch, _start, max_partition = fields
            elif version >= 9:
                index, epoch, fetch_offset, _start, max_partition = fields
            elif version >= 5:
                index, fetch_offset, _start, max_partition = fields
                epoch = _NO_LEADER_EPOCH
            else:
                index, fetch_offset, max_partition = fields
                epoch = _NO_LEADER_EPOCH
            if flexible:
                r.skip_tags()
            partitions.append(FetchPartitionData(index, epoch, fetch_offset, max_partition))
        if flexible:
            r.skip_tags()
        topics.append(FetchTopicData(name, tuple(partitions), topic_id))
    if version >= 7:  # forgotten topics: only meaningful in a session, which we decline
        for _ in range(r.count(r.uvarint() - 1 if flexible else r.i32())):
            if by_id:
                r.take(16)
            elif (r.compact_string() if flexible else r.legacy_string()) is None:
                raise DecodeError(f"null topic name at {r.pos}")
            count = r.count(r.uvarint() - 1 if flexible else r.i32())
            r.take(4 * count)
            if flexible:
                r.skip_tags()
    if version >= 11:
        rack = r.compact_string() if flexible else r.legacy_string()
        if rack is None:
            raise DecodeError(f"null rack id at {r.pos}")
    if flexible:
        r.skip_tags()
    max_wait = datetime.timedelta(milliseconds=max_wait_ms)
    return FetchRequestData(
        max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch, tuple(topics)
    )


# --- Produce ---------------------------------------------------------------------------


def encode_produce_response(version: int, data: Mapping[str, Any]) -> bytes:
    """The body of a ProduceResponse of `version` (3..13), byte for byte what
    `messages.encode(messages.build_response(0, version, data))` writes.

    `data` has the shape the produce handler returns; every key it fills is read (the
    ones `version` lacks are ignored). Raises ValueError for an unsupported version.
    """
    if version not in PRODUCE_VERSIONS:
        raise ValueError(f"no fast ProduceResponse encoder for v{version}")
    if version >= _PRODUCE_FIRST_FLEXIBLE:
        return _produce_flexible(data, by_id=version >= PRODUCE_FIRST_TOPIC_ID)
    return _produce_legacy(version, data)


def _produce_legacy(version: int, data: Mapping[str, Any]) -> bytes:
    with_start_offset = version >= 5
    with_errors = version >= 8
    pack = (_PRODUCE_PARTITION_V5 if with_start_offset else _PRODUCE_PARTITION_V3).pack
    pack_i32 = _I32.pack
    topics = data["responses"]
    out = [pack_i32(len(topics))]
    append = out.append
    for topic in topics:
        partitions = topic["partition_responses"]
        append(_legacy_string(topic["name"]))
        append(pack_i32(len(partitions)))
        for p in partitions:
            append_time = p["log_append_time"]
            if append_time is None or append_time < 0:  # no timestamp, as kio reads it
                append_time = -1
            if with_start_offset:
                fields = (p["index"], p["error_code"], p["base_offset"], append_time)
                append(pack(*fields, p["log_start_offset"]))
            else:
                append(pack(p["index"], p["error_code"], p["base_offset"], append_time))
            if with_errors:
                append(_legacy_record_errors(p["record_errors"]))
                append(_legacy_nullable_string(p["error_message"]))
    append(pack_i32(data["throttle_time"]))
    return b"".join(out)


def _legacy_record_errors(errors: Sequence[Mapping[str, Any]]) -> bytes:
    out = [_I32.pack(len(errors))]
    for error in errors:
        out.append(_I32.pack(error["batch_index"]))
        out.append(_legacy_nullable_string(error.get("batch_index_error_message")))
    return b"".join(out)


def _produce_flexible(data: Mapping[str, Any], *, by_id: bool) -> bytes:
    pack_plain = _PRODUCE_PARTITION_FLEXIBLE_PLAIN.pack
    small = _SMALL_UVARINTS
    topics = data["responses"]
    n = len(topics) + 1
    out = [small[n] if n < 128 else _uvarint(n)]
    append = out.append
    for topic in topics:
        partitions = topic["partition_responses"]
        if by_id:
            append(_uuid_bytes(topic["topic_id"]))
        else:
            name = topic["name"].encode()
            n = len(name) + 1
            append(small[n] if n < 128 else _uvarint(n))
            append(name)
        n = len(partitions) + 1
        append(small[n] if n < 128 else _uvarint(n))
        for p in partitions:
            append_time = p["log_append_time"]
            if append_time is None or append_time < 0:  # no timestamp, as kio reads it
                append_time = -1
            fields = (
                p["index"],
                p["error_code"],
                p["base_offset"],
                append_time,
                p["log_start_offset"],
            )
            record_errors = p["record_errors"]
            message = p["error_message"]
            if not record_errors and message is None:
                append(pack_plain(*fields, 1, 0, 0))  # see _PRODUCE_PARTITION_FLEXIBLE_PLAIN
                continue
            append(_PRODUCE_PARTITION_V5.pack(*fields))
            append(_compact_record_errors(record_errors))
            append(_compact_nullable_string(message))
            append(_NO_TAGS)
        append(_NO_TAGS)
    append(_PRODUCE_FLEXIBLE_TAIL.pack(data["throttle_time"], 0))
    return b"".join(out)


def _compact_record_errors(errors: Sequence[Mapping[str, Any]]) -> bytes:
    out = [_uvarint(len(errors) + 1)]
    for error in errors:
        out.append(_I32.pack(error["batch_index"]))
        out.append(_compact_nullable_string(error.get("batch_index_error_message")))
        out.append(_NO_TAGS)
    return b"".join(out)


# --- Fetch -----------------------------------------------------------------------------


def encode_fetch_response(version: int, data: Mapping[str, Any]) -> list[bytes | memoryview]:
    """The body of a FetchResponse of `version` (4..18) as buffers to write in order;
    joined, byte for byte what `messages.encode(messages.build_response(1, version, data))`
    writes. Records longer than INLINE_RECORDS_BYTES_MAX are list items of their own, the
    very objects found in `data`; everything else is in `bytes` between them.

    `data` has the shape the fetch handler returns; every key it fills is read (the ones
    `version` lacks are ignored). Raises ValueError for an unsupported version.
    """
    if version not in FETCH_VERSIONS:
        raise ValueError(f"no fast FetchResponse encoder for v{version}")
    if version >= _FETCH_FIRST_FLEXIBLE:
        return _fetch_flexible(data, by_id=version >= FETCH_FIRST_TOPIC_ID)
    return _fetch_legacy(version, data)


def _fetch_legacy(version: int, data: Mapping[str, Any]) -> list[bytes | memoryview]:
    with_start_offset = version >= 5
    with_replica = version >= 11
    pack_partition = (_FETCH_PARTITION_V5 if with_start_offset else _FETCH_PARTITION_V4).pack
    pack_i32 = _I32.pack
    if version >= 7:
        head = _FETCH_HEAD_V7.pack(data["throttle_time"], data["error_code"], data["session_id"])
    else:
        head = _FETCH_HEAD_V4.pack(data["throttle_time"])
    topics = data["responses"]
    parts: list[bytes | memoryview] = []
    out: list[bytes | memoryview] = [head, pack_i32(len(topics))]
    for topic in topics:
        partitions = topic["partitions"]
        out.append(_legacy_string(topic["topic"]))
        out.append(pack_i32(len(partitions)))
        for p in partitions:
            fields = (p["partition_index"], p["error_code"], p["high_watermark"])
            if with_start_offset:
                out.append(pack_partition(*fields, p["last_stable_offset"], p["log_start_offset"]))
            else:
                out.append(pack_partition(*fields, p["last_stable_offset"]))
            aborted = p["aborted_transactions"]
            out.append(_NULL_I32 if aborted is None else _legacy_aborted(aborted))
            if with_replica:
                out.append(pack_i32(p["preferred_read_replica"]))
            records = p["records"]
            if records is None:
                out.append(_NULL_I32)
                continue
            out.append(pack_i32(len(records)))
            if len(records) <= INLINE_RECORDS_BYTES_MAX:
                out.append(records)
            else:  # close the bytes so far; the records go out as they are
                parts.append(b"".join(out))
                parts.append(records)
                out = []
    if out:  # empty when the last records were listed on their own
        parts.append(b"".join(out))
    return parts


def _legacy_aborted(aborted: Sequence[Mapping[str, Any]]) -> bytes:
    out = [_I32.pack(len(aborted))]
    out += [_I64_I64.pack(a["producer_id"], a["first_offset"]) for a in aborted]
    return b"".join(out)


def _fetch_flexible(data: Mapping[str, Any], *, by_id: bool) -> list[bytes | memoryview]:
    pack_plain = _FETCH_PARTITION_FLEXIBLE_PLAIN.pack
    small = _SMALL_UVARINTS
    topics = data["responses"]
    n = len(topics) + 1
    parts: list[bytes | memoryview] = []
    out: list[bytes | memoryview] = [
        _FETCH_HEAD_V7.pack(data["throttle_time"], data["error_code"], data["session_id"]),
        small[n] if n < 128 else _uvarint(n),
    ]
    for topic in topics:
        partitions = topic["partitions"]
        if by_id:
            out.append(_uuid_bytes(topic["topic_id"]))
        else:
            name = topic["topic"].encode()
            n = len(name) + 1
            out.append(small[n] if n < 128 else _uvarint(n))
            out.append(name)
        n = len(partitions) + 1
        out.append(small[n] if n < 128 else _uvarint(n))
        for p in partitions:
            fields = (
                p["partition_index"],
                p["error_code"],
                p["high_watermark"],
                p["last_stable_offset"],
                p["log_start_offset"],
            )
            aborted = p["aborted_transactions"]
            if aborted is None:
                out.append(pack_plain(*fields, 0, p["preferred_read_replica"]))
            else:
                out.append(_FETCH_PARTITION_V5.pack(*fields))
                out.append(_compact_aborted(aborted))
                out.append(_I32.pack(p["preferred_read_replica"]))
            records = p["records"]
            if records is None:
                out.append(_NULL_RECORDS_FLEXIBLE)
                continue
            n = len(records) + 1
            out.append(small[n] if n < 128 else _uvarint(n))
            if n <= INLINE_RECORDS_BYTES_MAX + 1:
                out.append(records)
            else:  # close the bytes so far; the records go out as they are
                parts.append(b"".join(out))
                parts.append(records)
                out = []
            out.append(_NO_TAGS)
        out.append(_NO_TAGS)
    out.append(_NO_TAGS)
    parts.append(b"".join(out))
    return parts


def _uuid_bytes(topic_id: uuid.UUID | None) -> bytes:
    return _ZERO_UUID if topic_id is None else topic_id.bytes


def _compact_aborted(aborted: Sequence[Mapping[str, Any]]) -> bytes:
    n = len(aborted) + 1
    out = [_SMALL_UVARINTS[n] if n < 128 else _uvarint(n)]
    for a in aborted:
        out.append(_I64_I64.pack(a["producer_id"], a["first_offset"]))
        out.append(_NO_TAGS)
    return b"".join(out)
