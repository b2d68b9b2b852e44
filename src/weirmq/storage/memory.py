"""A partition log in memory: the reference model of `PartitionLog`.

It keeps each batch as its own `bytes` object in lists of segments, with the same roll and
retention rules as the file log (`policy`), and is as plain as it can be: the recovery
property tests compare the file log against it. It also serves tests and brokers that
need no durability; `flush` only moves the recovery point, and `crash` drops everything
after it, the way a power cut drops unflushed writes.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..records.batch import BatchHeader, record_timestamps
from .append import prepare_append
from .config import LogConfig
from .errors import OffsetOutOfRangeError
from .interface import AppendInfo, Clock, ReadResult, TimestampOffset
from .policy import retention_breaches, should_roll


@dataclass(slots=True)
class _Batch:
    base_offset: int
    last_offset: int
    data: bytes
    max_timestamp: int


@dataclass(slots=True)
class _Segment:
    base_offset: int
    created_ms: int
    batches: list[_Batch] = field(default_factory=list)
    size: int = 0

    @property
    def max_timestamp(self) -> int:
        return max((b.max_timestamp for b in self.batches), default=-1)

    @property
    def next_offset(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else self.base_offset


class MemoryLog:
    """See the module docstring."""

    def __init__(self, config: LogConfig | None = None, *, clock: Clock, log_start_offset: int = 0):
        self.config = config or LogConfig()
        self._clock = clock
        self._segments = [_Segment(log_start_offset, clock())]
        self._log_start = log_start_offset
        self._flushed = log_start_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def offline_reason(self) -> str | None:
        return None

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        validated: Sequence[BatchHeader] | None = None,
    ) -> AppendInfo:
        now = self._clock()
        prepared = prepare_append(
            records,
            next_offset=self.log_end_offset,
            leader_epoch=leader_epoch,
            config=self.config,
            now_ms=now,
            validated=validated,
        )
        if should_roll(
            self._segments[-1],
            self.config,
            add_bytes=prepared.size,
            last_offset=prepared.last_offset,
            now_ms=now,
        ):
            self._roll()
        segment = self._segments[-1]
        for b, data in zip(prepared.batches, prepared.batch_bytes(), strict=True):
            segment.batches.append(_Batch(b.base_offset, b.last_offset, data, b.max_timestamp))
        segment.size += prepared.size
        return AppendInfo(
            prepared.base_offset, prepared.last_offset, prepared.log_append_time_ms, self._log_start
        )

    def _roll(self) -> None:
        self._segments.append(_Segment(self.log_end_offset, self._clock()))

    def maybe_roll(self) -> bool:
        active = self._segments[-1]
        if active.size == 0 or self._clock() - active.created_ms < self.config.segment_ms:
            return False
        self._roll()
        return True

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        start, end = self._log_start, self.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {end}]")
        if offset == end:
            return ReadResult(b"", start, end)
        bases = [s.base_offset for s in self._segments]
        segment = self._segments[bisect_right(bases, offset) - 1]
        out: list[bytes] = []
        total = 0
        for batch in segment.batches:
            if batch.last_offset < offset:
                continue
            if out and total + len(batch.data) > max_bytes:
                break
            out.append(batch.data)
            total += len(batch.data)
        return ReadResult(b"".join(out), start, end)

    def _live_batches(self) -> list[_Batch]:
        return [b for s in self._segments for b in s.batches if b.last_offset >= self._log_start]

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        for batch in self._live_batches():
            if batch.max_timestamp < timestamp_ms:
                continue
            for offset, ts in record_timestamps(batch.data):
                if ts >= timestamp_ms and offset >= self._log_start:
                    return TimestampOffset(offset, ts)
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        batches = self._live_batches()
        if not batches:
            return None
        return self.offset_for_timestamp(max(b.max_timestamp for b in batches))

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        offset = max(offset, self._log_start)
        keep = [s for s in self._segments if s.base_offset < offset] or [
            _Segment(offset, self._clock())
        ]
        last = keep[-1]
        last.batches = [b for b in last.batches if b.last_offset < offset]
        last.size = sum(len(b.data) for b in last.batches)
        self._segments = keep
        self._flushed = min(self._flushed, self.log_end_offset)
        self._log_start = min(self._log_start, self.log_end_offset)

    def advance_log_start(self, offset: int) -> int:
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"cannot delete records up to {offset}")
        self._log_start = max(self._log_start, offset)
        self._delete_below_start()
        return self._log_start

    def apply_retention(self) -> int:
        doomed = retention_breaches(self._segments, self.config, self._clock())
        if doomed == len(self._segments):
            self._roll()
        self._segments = self._segments[doomed:]
        self._log_start = max(self._log_start, self._segments[0].base_offset)
        return doomed + self._delete_below_start()

    def _delete_below_start(self) -> int:
        gone = 0
        while len(self._segments) > 1 and self._segments[0].next_offset <= self._log_start:
            self._segments.pop(0)
            gone += 1
        return gone

    def flush(self) -> int:
        self._flushed = self.log_end_offset
        return self._flushed

    def crash(self) -> None:
        """Lose everything after the recovery point, as a power cut would."""
        self.truncate_to(self._flushed)

    def close(self) -> None:
        self.flush()
