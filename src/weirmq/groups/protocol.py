"""The consumer embedded protocol: what Kafka consumers put in JoinGroup and SyncGroup.

The classic coordinator treats a member's subscription (JoinGroup metadata) and
assignment (SyncGroup) as opaque bytes. Some readers need to look inside when the
protocol type is "consumer": lag and the admin views (which member owns a partition),
OffsetDelete (is the group still subscribed to the topic), DescribeGroups of a KIP-848
group, whose assignment is written out in this format for classic tools, and the
migration between the two protocols (a classic member of a consumer group is assigned
by the coordinator from its subscription, and told its assignment in this format).

    ConsumerProtocolSubscription v0-3: version int16, topics [string], user_data bytes,
        owned_partitions [topic string, partitions [int32]] (v1+), generation int32 (v2+),
        rack_id nullable string (v3+)
    ConsumerProtocolAssignment v0-3:   version int16, [topic string, partitions [int32]],
        user_data nullable bytes

Newer versions may append fields; readers stop at what they know, as Kafka's do.
For display and checks, anything unreadable yields an empty result. The migration needs
to know: `parse_subscription` raises RecordFormatError, and the coordinator refuses the
member (as Kafka refuses a subscription it cannot deserialise).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from ..types import TopicPartition
from .records import BufferReader, RecordFormatError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> frozenset[str]:
    """The topics of a ConsumerProtocolSubscription; empty if it does not parse."""
    try:
        reader = BufferReader(metadata)
        reader.i16()
        return frozenset(reader.string() for _ in range(reader.count()))
    except RecordFormatError:
        return frozenset()


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a ConsumerProtocolSubscription says, as far as the coordinator needs it."""

    topics: tuple[str, ...]
    """Sorted, without duplicates."""
    owned: tuple[TopicPartition, ...]
    """Partitions the member still owns as it joins (v1+; empty in v0, whose eager
    members give everything up before they rejoin)."""


def parse_subscription(metadata: bytes) -> Subscription:
    """The subscription; raises RecordFormatError when it does not parse."""
    reader = BufferReader(metadata)
    version = reader.i16()
    if version < 0:
        raise RecordFormatError(f"negative subscription version {version}")
    topics = tuple(sorted({reader.string() for _ in range(reader.count())}))
    reader.bytes_()  # user data
    owned: list[TopicPartition] = []
    if version >= 1:
        for _ in range(reader.count()):
            topic = reader.string()
            owned += [TopicPartition(topic, reader.i32()) for _ in range(reader.count())]
    return Subscription(topics, tuple(sorted(owned)))


def assigned_partitions(assignment: bytes) -> tuple[TopicPartition, ...]:
    """The sorted partitions of a ConsumerProtocolAssignment; empty if it does not parse."""
    try:
        reader = BufferReader(assignment)
        reader.i16()
        found = []
        for _ in range(reader.count()):
            topic = reader.string()
            found += [TopicPartition(topic, reader.i32()) for _ in range(reader.count())]
        return tuple(sorted(found))
    except RecordFormatError:
        return ()


def _string(value: str, out: bytearray) -> None:
    encoded = value.encode()
    out += _I16.pack(len(encoded))
    out += encoded


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    """A version-0 ConsumerProtocolAssignment (no user data)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(_I16.pack(0))
    out += _I32.pack(len(by_topic))
    for topic, numbers in by_topic.items():
        _string(topic, out)
        out += _I32.pack(len(numbers))
        for number in numbers:
            out += _I32.pack(number)
    out += _I32.pack(-1)
    return bytes(out)


def encode_subscription(topics: Iterable[str]) -> bytes:
    """A version-0 ConsumerProtocolSubscription (no user data)."""
    names = sorted(topics)
    out = bytearray(_I16.pack(0))
    out += _I32.pack(len(names))
    for name in names:
        _string(name, out)
    out += _I32.pack(-1)
    return bytes(out)
