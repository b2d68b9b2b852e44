"""The records of the transaction coordinator's log, `__transaction_state`.

One record per change of a transactional id's state: the key names the id, the value is
its whole newest state, a null value (a tombstone) says the id expired. Replaying the
topic from its start rebuilds every id's state; the log cleaner keeps the newest record
per key, as it does for `__consumer_offsets`.

The key and the value's first fields are Kafka's own (TransactionLogKey v0 and
TransactionLogValue v0), big-endian, strings int16-length-prefixed UTF-8::

    key     version int16 (0), transactional_id string
    value   version int16 (0), producer_id int64, producer_epoch int16,
            transaction_timeout_ms int32, state int8,
            partitions int32 count, each: topic string, int32 count, partition int32 ...
            last_update_timestamp_ms int64, start_timestamp_ms int64

WeirMQ's fields follow (Kafka keeps them elsewhere or has no equivalent on one node)::

            last_producer_id int64, last_producer_epoch int16,
            groups int32 count, each: group string, int32 count of pending offsets,
                each: topic string, partition int32, offset int64, leader_epoch int32,
                      metadata string

`groups` are the consumer groups the transaction added with AddOffsetsToTxn, with the
offsets TxnOffsetCommit gave for each, committed to the group when the transaction
commits (Kafka writes them as transactional records of `__consumer_offsets` instead;
keeping them here makes the coordinator's log the one record of the whole transaction).
Bounds on what a value may hold are the coordinator's (`coordinator.Limits`); decoding
refuses anything malformed with `RecordFormatError`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from ..types import TopicPartition
from .state import PendingOffset, TxnMetadata, TxnState

KEY_VERSION = 0
VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_TIMES = struct.Struct(">qq")
_LAST = struct.Struct(">qh")
_OFFSET = struct.Struct(">iqi")  # partition, offset, leader epoch


class RecordFormatError(ValueError):
    """A key or value that is not in the format above."""


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    version = reader.unpack(_I16)[0]
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown key version {version}")
    txn_id = reader.string()
    reader.end()
    return txn_id


def encode_value(meta: TxnMetadata) -> bytes:
    out = bytearray(
        _HEAD.pack(
            VALUE_VERSION, meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state
        )
    )
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(meta.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out += _I32.pack(len(by_topic))
    for topic, indexes in by_topic.items():
        out += _string(topic) + _I32.pack(len(indexes))
        for index in indexes:
            out += _I32.pack(index)
    out += _TIMES.pack(meta.last_update_ms, meta.start_ms)
    out += _LAST.pack(meta.last_producer_id, meta.last_producer_epoch)
    out += _I32.pack(len(meta.groups))
    for group, offsets in meta.groups.items():
        out += _string(group) + _I32.pack(len(offsets))
        for tp, pending in offsets.items():
            out += _string(tp.topic)
            out += _OFFSET.pack(tp.partition, pending.offset, pending.leader_epoch)
            out += _string(pending.metadata)
    return bytes(out)


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    reader = _Reader(data)
    version, producer_id, epoch, timeout_ms, state_id = reader.unpack(_HEAD)
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown value version {version}")
    try:
        state = TxnState(state_id)
    except ValueError:
        raise RecordFormatError(f"unknown transaction state {state_id}") from None
    partitions: set[TopicPartition] = set()
    for _ in range(reader.count()):
        topic = reader.string()
        for _ in range(reader.count()):
            partitions.add(TopicPartition(topic, reader.unpack(_I32)[0]))
    last_update_ms, start_ms = reader.unpack(_TIMES)
    last_producer_id, last_epoch = reader.unpack(_LAST)
    groups: dict[str, dict[TopicPartition, PendingOffset]] = {}
    for _ in range(reader.count()):
        group = reader.string()
        offsets: dict[TopicPartition, PendingOffset] = {}
        for _ in range(reader.count()):
            topic = reader.string()
            partition, offset, leader_epoch = reader.unpack(_OFFSET)
            offsets[TopicPartition(topic, partition)] = PendingOffset(
                offset, leader_epoch, reader.string()
            )
        groups[group] = offsets
    reader.end()
    return TxnMetadata(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        last_producer_id=last_producer_id,
        last_producer_epoch=last_epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=partitions,
        groups=groups,
        start_ms=start_ms,
        last_update_ms=last_update_ms,
    )


def pairs_of(states: Mapping[str, TxnMetadata | None]) -> list[tuple[bytes, bytes | None]]:
    """(key, value) records for these ids' states; None writes a tombstone."""
    return [
        (encode_key(txn_id), None if meta is None else encode_value(meta))
        for txn_id, meta in states.items()
    ]


def _string(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 0x7FFF:
        raise RecordFormatError(f"string of {len(raw)} bytes is too long")
    return _I16.pack(len(raw)) + raw


class _Reader:
    __slots__ = ("data", "position")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        if self.position + layout.size > len(self.data):
            raise RecordFormatError("record truncated")
        fields = layout.unpack_from(self.data, self.position)
        self.position += layout.size
        return fields

    def count(self) -> int:
        count = self.unpack(_I32)[0]
        # Every element takes at least two bytes: a count past what is left is damage.
        if count < 0 or count * 2 > len(self.data) - self.position:
            raise RecordFormatError(f"bad count {count}")
        return count

    def string(self) -> str:
        length = self.unpack(_I16)[0]
        if length < 0 or self.position + length > len(self.data):
            raise RecordFormatError(f"bad string length {length}")
        raw = self.data[self.position : self.position + length]
        self.position += length
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None

    def end(self) -> None:
        if self.position != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.position} trailing bytes")
