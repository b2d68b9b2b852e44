"""The one interface every partition log implements, and the values it returns.

Two implementations exist: `FileLog` (segments on disk) and `MemoryLog` (a simple
reference model). One conformance suite (tests/storage/test_conformance.py) runs against
both, and the recovery property tests use the memory log as the model the file log must
match.

Offsets: `log_start_offset` is the first readable offset, `log_end_offset` the offset the
next record gets; `flushed_offset` is the recovery point: every offset below it is on
stable storage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..records.batch import BatchHeader

Clock = Callable[[], int]
"""Wall-clock milliseconds, injected so tests can step time."""


@dataclass(frozen=True, slots=True)
class AppendInfo:
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    """The broker's timestamp for LogAppendTime logs, else -1 (as in ProduceResponse)."""
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes | memoryview
    """Whole batches, the first one containing the requested offset; empty at the log end."""
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    offset: int
    timestamp_ms: int


class PartitionLog(Protocol):
    """A partition's log: append-only, read by offset, bounded by retention."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def segment_count(self) -> int: ...

    @property
    def offline_reason(self) -> str | None: ...

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        validated: Sequence[BatchHeader] | None = None,
    ) -> AppendInfo:
        """Validate producer batches, assign offsets, write them; all or nothing.

        `validated`: the headers `validate_batches` returned for `records` with this log's
        `max_message_bytes`, when the caller already validated them."""
        ...

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches from the one containing `offset`; the first is never cut."""
        ...

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        """The first record whose timestamp is >= `timestamp_ms` (ListOffsets)."""
        ...

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The first record carrying the largest timestamp (ListOffsets MAX_TIMESTAMP)."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= `offset`."""
        ...

    def advance_log_start(self, offset: int) -> int:
        """Make offsets below `offset` unreadable (DeleteRecords); returns the new start."""
        ...

    def flush(self) -> int:
        """Make everything appended so far durable; returns the new flushed offset."""
        ...

    def maybe_roll(self) -> bool:
        """Roll the active segment if it is older than segment.ms; True if rolled."""
        ...

    def apply_retention(self) -> int:
        """Delete whole segments beyond retention.ms / retention.bytes; returns how many."""
        ...

    def close(self) -> None: ...
