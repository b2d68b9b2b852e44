"""Per-log settings, with Kafka's names in the docstrings and Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

GIB = 1024 * 1024 * 1024
DAY_MS = 24 * 60 * 60 * 1000


class TimestampType(Enum):
    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How one partition log is shaped. Every field is a Kafka topic config.

    `None` for a retention bound means unlimited (Kafka's -1).
    """

    segment_bytes: int = GIB
    """segment.bytes: roll the active segment before it grows past this."""
    segment_ms: int = 7 * DAY_MS
    """segment.ms: roll once the active segment's first record is this old."""
    retention_ms: int | None = 7 * DAY_MS
    """retention.ms: delete a segment once its newest record is this old."""
    retention_bytes: int | None = None
    """retention.bytes: delete the oldest segments while the log is larger than this."""
    max_message_bytes: int = 1024 * 1024 + 12
    """max.message.bytes: the largest batch accepted (Kafka's default, 1 MiB plus overhead)."""
    index_interval_bytes: int = 4096
    """index.interval.bytes: one offset-index entry per this many bytes of log."""
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    """message.timestamp.type."""

    def __post_init__(self) -> None:
        if self.segment_bytes < 1024:
            raise ValueError(f"segment.bytes must be at least 1024, got {self.segment_bytes}")
        if self.segment_ms < 1:
            raise ValueError(f"segment.ms must be positive, got {self.segment_ms}")
        if self.max_message_bytes < 64:
            raise ValueError(f"max.message.bytes too small: {self.max_message_bytes}")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes must be >= 0, got {self.index_interval_bytes}")
        for name, value in (
            ("retention.ms", self.retention_ms),
            ("retention.bytes", self.retention_bytes),
        ):
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 or unlimited, got {value}")
