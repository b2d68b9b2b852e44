"""The consumer embedded protocol: what Kafka consumers put in JoinGroup and SyncGroup.

The classic coordinator treats a member's subscription (JoinGroup metadata) and
assignment (SyncGroup) as opaque bytes. Three readers need to look inside when the
protocol type is "consumer": lag and the admin views (which member owns a partition),
OffsetDelete (is the group still subscribed to the topic), and DescribeGroups of a
KIP-848 group, whose assignment is written out in this format for classic tools.

    ConsumerProtocolSubscription v0-3: version int16, topics [string], user_data bytes,
        owned_partitions [topic string, partitions [int32]] (v1+), generation int32 (v2+),
        rack_id nullable string (v3+)
    ConsumerProtocolAssignment v0-3:   version int16, [topic string, partitions [int32]],
        user_data nullable bytes

Newer versions may append fields; readers stop at what they know, as Kafka's do.
Anything unreadable yields an empty result: these bytes come from clients and are only
ever read for display and checks, never trusted for correctness.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicPartition = tuple[str, int]


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.buf):
            raise ValueError("truncated")
        part = self.buf[self.pos : self.pos + size]
        self.pos += size
        return part

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def string(self) -> str:
        return self.take(self.i16()).decode()

    def count(self) -> int:
        count = self.i32()
        if count < 0:
            return 0
        if count > len(self.buf):  # every element takes at least one byte
            raise ValueError("array longer than its buffer")
        return count


def subscribed_topics(metadata: bytes) -> frozenset[str]:
    """The topics of a ConsumerProtocolSubscription; empty if it does not parse."""
    try:
        reader = _Reader(metadata)
        reader.i16()
        return frozenset(reader.string() for _ in range(reader.count()))
    except (ValueError, struct.error, UnicodeDecodeError):
        return frozenset()


def assigned_partitions(assignment: bytes) -> tuple[TopicPartition, ...]:
    """The sorted partitions of a ConsumerProtocolAssignment; empty if it does not parse."""
    try:
        reader = _Reader(assignment)
        reader.i16()
        found = []
        for _ in range(reader.count()):
            topic = reader.string()
            found += [(topic, reader.i32()) for _ in range(reader.count())]
        return tuple(sorted(found))
    except (ValueError, struct.error, UnicodeDecodeError):
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
