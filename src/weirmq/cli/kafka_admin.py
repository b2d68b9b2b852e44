"""confluent-kafka's admin names, re-exported so that mypy sees them.

``confluent_kafka.admin`` is the documented home of ``AdminClient``, ``NewTopic``,
``ConfigResource``, ``ConsumerGroupDescription`` and the rest, but it re-exports them from
private modules without an ``__all__``; mypy, reading a ``py.typed`` package, then calls
them private. Importing them once here, with that one complaint silenced and an
``__all__``, keeps every other import checked. ``OffsetSpec``'s constructors are untyped;
the wrappers below give them types.

This module loads librdkafka: import it inside the commands only, never at module level
(``weirmq serve`` must not pay for it).
"""

from __future__ import annotations

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
    TopicMetadata,
)

__all__ = [
    "AdminClient",
    "AlterConfigOpType",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ConsumerGroupDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "ResourceType",
    "TopicMetadata",
    "at_time",
    "earliest",
    "latest",
]


def earliest() -> OffsetSpec:
    """The ListOffsets spec for a partition's first offset."""
    spec: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    return spec


def latest() -> OffsetSpec:
    """The ListOffsets spec for a partition's end (the offset the next record gets)."""
    spec: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    return spec


def at_time(timestamp_ms: int) -> OffsetSpec:
    """The ListOffsets spec for the first record at or after ``timestamp_ms`` (the offset
    comes back as -1 when no record is that late)."""
    spec: OffsetSpec = OffsetSpec.for_timestamp(timestamp_ms)
    return spec
