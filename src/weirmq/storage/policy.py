"""When to roll a segment and which segments retention deletes: one rule for every log.

Both functions see segments only through `SegmentLike`, so the file log and the memory
log cannot drift apart on what `segment.bytes`, `segment.ms`, `retention.ms` and
`retention.bytes` mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .config import LogConfig

RELATIVE_OFFSET_MAX = 2**31 - 1


class SegmentLike(Protocol):
    @property
    def base_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def created_ms(self) -> int: ...


def should_roll(
    segment: SegmentLike, config: LogConfig, *, add_bytes: int, last_offset: int, now_ms: int
) -> bool:
    """Roll before appending `add_bytes` ending at `last_offset`? Never for an empty segment.

    Age is measured from the segment's creation by the broker's clock, not from producer
    timestamps, which may be anything.
    """
    if segment.size == 0:
        return False
    return (
        segment.size + add_bytes > config.segment_bytes
        or last_offset - segment.base_offset > RELATIVE_OFFSET_MAX
        or now_ms - segment.created_ms >= config.segment_ms
    )


def retention_breaches(segments: Sequence[SegmentLike], config: LogConfig, now_ms: int) -> int:
    """How many leading segments breach retention.ms, then retention.bytes (Kafka's order).

    A segment's age is that of its newest record (its creation time if it has no
    timestamps); size retention deletes while the rest would still be >= retention.bytes.
    """
    doomed = 0
    if config.retention_ms is not None:
        for segment in segments:
            newest = segment.max_timestamp if segment.max_timestamp >= 0 else segment.created_ms
            if segment.size == 0 or now_ms - newest <= config.retention_ms:
                break
            doomed += 1
    if config.retention_bytes is not None:
        total = sum(s.size for s in segments[doomed:])
        for segment in segments[doomed:]:
            if segment.size == 0 or total - segment.size < config.retention_bytes:
                break
            total -= segment.size
            doomed += 1
    return doomed
