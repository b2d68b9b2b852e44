"""The records of the group coordinator's log, in Kafka's own `__consumer_offsets` format.

Every change the coordinator must remember is one record of the internal topic
`__consumer_offsets`; replaying the topic from its start rebuilds the state. The key says
what the record is about and the value its newest state; a null value (a tombstone) says
it is gone. Keys and values open with an int16 version, as in Kafka, so a tool that
decodes Kafka's topic decodes ours:

    OffsetCommitKey   (key version 1)   group string, topic string, partition int32
    OffsetCommitValue (value version 3) offset int64, leader_epoch int32, metadata string,
                                        commit_timestamp int64
    GroupMetadataKey  (key version 2)   group string
    GroupMetadataValue(value version 3) protocol_type string, generation int32,
                                        protocol nullable string, leader nullable string,
                                        current_state_timestamp int64,
                                        members [member_id, group_instance_id (nullable),
                                        client_id, client_host, rebalance_timeout int32,
                                        session_timeout int32, subscription bytes,
                                        assignment bytes]
    ConsumerGroupMetadataKey   (key version 3)   group string
    ConsumerGroupMetadataValue (value version 0) epoch int32, then an empty tagged-field
                                                 section (one zero byte: the value is a
                                                 "flexible" version in Kafka's schema)

Strings are int16-length-prefixed UTF-8 (-1 for null), bytes int32-length-prefixed.
Reading also accepts the older versions Kafka wrote (offset key 0, offset values 1 and 2
with an expire timestamp, group values 0-2), so that the format stays a superset of
Kafka's. KIP-848 groups keep their committed offsets and their group epoch here (a
consumer group's record says the group is of that kind, which is what makes a migration
between the two protocols durable; see coordinator.py); their members are not stored.
Kafka's other KIP-848 and share-group keys (versions 4 and up) are skipped on replay.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
CONSUMER_GROUP_KEY_VERSION = 3
CONSUMER_GROUP_VALUE_VERSION = 0


class RecordFormatError(ValueError):
    """A key or value that is not one of the formats above."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A KIP-848 group's metadata record (Kafka's ConsumerGroupMetadataKey)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupValue:
    """Kafka's ConsumerGroupMetadataValue: the group epoch."""

    epoch: int


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1
    """Only in version-1 values (a client-chosen retention, gone since Kafka 2.1)."""


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...]


Key = OffsetKey | GroupKey | ConsumerGroupKey
Value = OffsetValue | GroupValue | ConsumerGroupValue


# --- writing ---------------------------------------------------------------------------


def _string(value: str | None, out: bytearray) -> None:
    if value is None:
        out += _I16.pack(-1)
        return
    encoded = value.encode()
    out += _I16.pack(len(encoded))
    out += encoded


def _bytes(value: bytes, out: bytearray) -> None:
    out += _I32.pack(len(value))
    out += value


def encode_key(key: Key) -> bytes:
    out = bytearray()
    if isinstance(key, OffsetKey):
        out += _I16.pack(OFFSET_KEY_VERSION)
        _string(key.group_id, out)
        _string(key.topic, out)
        out += _I32.pack(key.partition)
    elif isinstance(key, ConsumerGroupKey):
        out += _I16.pack(CONSUMER_GROUP_KEY_VERSION)
        _string(key.group_id, out)
    else:
        out += _I16.pack(GROUP_KEY_VERSION)
        _string(key.group_id, out)
    return bytes(out)


def encode_value(value: Value) -> bytes:
    out = bytearray()
    if isinstance(value, OffsetValue):
        out += _I16.pack(OFFSET_VALUE_VERSION)
        out += _I64.pack(value.offset)
        out += _I32.pack(value.leader_epoch)
        _string(value.metadata, out)
        out += _I64.pack(value.commit_timestamp_ms)
        return bytes(out)
    if isinstance(value, ConsumerGroupValue):
        out += _I16.pack(CONSUMER_GROUP_VALUE_VERSION)
        out += _I32.pack(value.epoch)
        out += b"\x00"  # no tagged fields
        return bytes(out)
    out += _I16.pack(GROUP_VALUE_VERSION)
    _string(value.protocol_type, out)
    out += _I32.pack(value.generation)
    _string(value.protocol, out)
    _string(value.leader, out)
    out += _I64.pack(value.current_state_timestamp_ms)
    out += _I32.pack(len(value.members))
    for member in value.members:
        _string(member.member_id, out)
        _string(member.group_instance_id, out)
        _string(member.client_id, out)
        _string(member.client_host, out)
        out += _I32.pack(member.rebalance_timeout_ms)
        out += _I32.pack(member.session_timeout_ms)
        _bytes(member.subscription, out)
        _bytes(member.assignment, out)
    return bytes(out)


# --- reading ---------------------------------------------------------------------------


class BufferReader:
    """Big-endian fields from the front of a buffer; anything short or malformed raises
    RecordFormatError (also used for the consumer protocol's bytes, protocol.py)."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.buf):
            raise RecordFormatError("record shorter than its format")
        part = self.buf[self.pos : self.pos + size]
        self.pos += size
        return part

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def nullable_string(self) -> str | None:
        size = self.i16()
        if size == -1:
            return None
        try:
            return self._take(size).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError("string is not UTF-8") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordFormatError("null where a string is required")
        return value

    def count(self) -> int:
        """An array length; -1 (null) reads as empty."""
        count = self.i32()
        if count > len(self.buf) - self.pos:  # each element takes at least one byte
            raise RecordFormatError("array longer than its record")
        return max(count, 0)

    def bytes_(self) -> bytes:
        size = self.i32()
        return b"" if size == -1 else self._take(size)


def decode_key(data: bytes) -> Key | None:
    """The key, or None for key versions this coordinator does not keep (Kafka's other
    KIP-848 and share-group records, versions 4 and up): replay skips those."""
    reader = BufferReader(data)
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.string(), reader.string(), reader.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.string())
    if version == CONSUMER_GROUP_KEY_VERSION:
        return ConsumerGroupKey(reader.string())
    if version < 0:
        raise RecordFormatError(f"negative key version {version}")
    return None


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = BufferReader(data)
    version = reader.i16()
    if version == 0:
        return OffsetValue(reader.i64(), -1, reader.string(), reader.i64())
    if version == 1:
        offset, metadata, committed, expire = (
            reader.i64(),
            reader.string(),
            reader.i64(),
            reader.i64(),
        )
        return OffsetValue(offset, -1, metadata, committed, expire)
    if version == 2:
        return OffsetValue(reader.i64(), -1, reader.string(), reader.i64())
    if version == 3:
        return OffsetValue(reader.i64(), reader.i32(), reader.string(), reader.i64())
    raise RecordFormatError(f"unknown offset value version {version}")


def decode_consumer_group_value(data: bytes) -> ConsumerGroupValue:
    """A ConsumerGroupMetadataValue; fields after the epoch (tagged fields, the metadata
    hash of newer versions) are not needed here and are not read."""
    reader = BufferReader(data)
    version = reader.i16()
    if version < 0:
        raise RecordFormatError(f"negative consumer group value version {version}")
    return ConsumerGroupValue(reader.i32())


def decode_group_value(data: bytes) -> GroupValue:
    reader = BufferReader(data)
    version = reader.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown group value version {version}")
    protocol_type = reader.string()
    generation = reader.i32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp = reader.i64() if version >= 2 else -1
    members = []
    for _ in range(reader.count()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id, client_host = reader.string(), reader.string()
        rebalance_timeout = reader.i32() if version >= 1 else -1
        session_timeout = reader.i32()
        if version == 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberRecord(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                reader.bytes_(),
                reader.bytes_(),
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))
