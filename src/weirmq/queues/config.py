"""The settings of one share group's partitions, with Kafka's names, defaults and bounds.

Kafka's broker defaults (ShareGroupConfig, Apache Kafka 4.1+):

    group.share.record.lock.duration.ms      30000   bounds 1000 .. 3600000
    group.share.delivery.count.limit         5       bounds 2 .. 10
    group.share.partition.max.record.locks   2000    bounds 100 .. 10000 (200 in 4.0)
    share.auto.offset.reset (group config)   latest

Our bounds are looser at the low end (tests use a lock of a few milliseconds and a window
of a handful of records) and equal at the high end, where they bound memory and the size
of a persisted snapshot. `retry_backoff_ms` is ours, not Kafka's (see `ShareConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from .errors import InvalidShareConfigError

RECORD_LOCK_DURATION_MS_MAX: Final = 3_600_000
"""An hour: Kafka's upper bound for group.share.record.lock.duration.ms."""
DELIVERY_COUNT_LIMIT_MAX: Final = 2**31 - 1
"""The engine's own bound: a delivery count is a counter, never a size. Kafka bounds its
configs at 25 (group.share.max.delivery.count.limit), and so do Kafka's configs here
(settings and group configs); an AMQP classic queue redelivers without limit, as RabbitMQ
does, which this bound stands for."""
MAX_RECORD_LOCKS_MAX: Final = 10_000
"""Kafka's upper bound for group.share.partition.max.record.locks; bounds the in-flight
window, hence this engine's memory and snapshot size per share-partition."""
RETRY_BACKOFF_MS_MAX: Final = 3_600_000
"""An hour: a record held back longer than its lock would be is better dead-lettered."""

AutoOffsetReset = Literal["latest", "earliest"]


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """How the records of one share-partition are locked, redelivered and given up on."""

    record_lock_duration_ms: int = 30_000
    """Kafka's share.record.lock.duration.ms: how long an acquired record stays with its
    consumer before it is made available to others again."""
    delivery_count_limit: int = 5
    """Kafka's share.delivery.count.limit: deliveries of one record before it is archived
    (and dead-lettered) instead of made available again."""
    max_record_locks: int = 2_000
    """Kafka's share.partition.max.record.locks: the in-flight window, from the start
    offset to the last offset ever acquired, never exceeds it; fresh records are not
    acquired past it (records already inside are redelivered as usual)."""
    auto_offset_reset: AutoOffsetReset = "latest"
    """Kafka's share.auto.offset.reset: where a share-partition seen for the first time
    starts, at the log's end ("latest") or its start ("earliest")."""
    retry_backoff_ms: int = 1_000
    """Not Kafka's: a released or timed-out record is acquirable again only this long
    after. A consumer that fails fast on a poison message would otherwise spin through
    its whole delivery limit in milliseconds and dead-letter it before a transient cause
    (a downstream outage) has had a chance to clear. One second keeps redelivery prompt
    for a client polling in a loop (its next long poll sees the record) while spreading
    the default five attempts over seconds; 0 gives Kafka's immediate redelivery."""

    def __post_init__(self) -> None:
        _within(
            "record_lock_duration_ms", self.record_lock_duration_ms, 1, RECORD_LOCK_DURATION_MS_MAX
        )
        _within("delivery_count_limit", self.delivery_count_limit, 1, DELIVERY_COUNT_LIMIT_MAX)
        _within("max_record_locks", self.max_record_locks, 1, MAX_RECORD_LOCKS_MAX)
        _within("retry_backoff_ms", self.retry_backoff_ms, 0, RETRY_BACKOFF_MS_MAX)
        if self.auto_offset_reset not in ("latest", "earliest"):
            raise InvalidShareConfigError(
                f"auto_offset_reset must be 'latest' or 'earliest', not {self.auto_offset_reset!r}"
            )


def _within(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidShareConfigError(
            f"{name} must be an integer in [{low}, {high}], not {value!r}"
        )
