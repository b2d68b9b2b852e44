"""Sparse indexes of one segment: offset -> file position, and timestamp -> offset.

File formats (big-endian, fixed width, no header, so a torn tail is detectable by length):

    .index      8 bytes an entry:  relative offset u32 | position u32
    .timeindex 12 bytes an entry:  timestamp i64       | relative offset u32

Offsets are relative to the segment's base offset (a segment holds fewer than 2**31
offsets; the log rolls before that). An offset-index entry names the *base* offset of a
batch and where that batch starts, so a lookup lands on a batch boundary at or before the
target and a short forward scan finds the batch that contains it. One entry is added per
`index.interval.bytes` of log. A time-index entry is (largest timestamp so far, base offset
of the batch that first reached it); entries are strictly increasing in both fields.

Both indexes are derived data: they can always be rebuilt from the log, and recovery does
so whenever one is missing or fails its sanity check. In memory they are two arrays each;
the file is written in append-only fashion from `persisted` onwards by the log's flush.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
_TIME_ENTRY = struct.Struct(">qI")
_BIG_ENDIAN_HOST = sys.byteorder == "big"


class OffsetIndex:
    """Relative offset -> position, sorted by both."""

    __slots__ = ("offsets", "persisted", "positions")

    def __init__(self) -> None:
        self.offsets = array("I")
        self.positions = array("I")
        self.persisted = 0  # entries already in the file

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, relative_offset: int, position: int) -> None:
        assert not self.offsets or (
            relative_offset > self.offsets[-1] and position > self.positions[-1]
        ), "offset index entries must increase"
        self.offsets.append(relative_offset)
        self.positions.append(position)

    def lookup(self, relative_offset: int) -> int:
        """Position of the last indexed batch starting at or before `relative_offset`."""
        i = bisect_right(self.offsets, relative_offset) - 1
        return self.positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or beyond `position`."""
        keep = bisect_left(self.positions, position)
        del self.offsets[keep:]
        del self.positions[keep:]
        self.persisted = min(self.persisted, keep)

    def encode(self, start: int) -> bytes:
        """File bytes for entries from `start` on."""
        pairs = array("I", [0]) * (2 * (len(self.offsets) - start))
        pairs[0::2] = self.offsets[start:]
        pairs[1::2] = self.positions[start:]
        if not _BIG_ENDIAN_HOST:
            pairs.byteswap()
        return pairs.tobytes()

    @classmethod
    def decode(cls, data: bytes) -> OffsetIndex | None:
        """Parse a file; None when it is torn or out of order (the caller rebuilds)."""
        if len(data) % OFFSET_ENTRY_BYTES:
            return None
        pairs = array("I")
        pairs.frombytes(data)
        if not _BIG_ENDIAN_HOST:
            pairs.byteswap()
        index = cls()
        index.offsets = pairs[0::2]
        index.positions = pairs[1::2]
        index.persisted = len(index.offsets)
        if not _strictly_increasing(index.offsets) or not _strictly_increasing(index.positions):
            return None
        return index


class TimeIndex:
    """Largest timestamp so far -> relative offset of the batch that reached it."""

    __slots__ = ("offsets", "persisted", "timestamps")

    def __init__(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("I")
        self.persisted = 0

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, relative_offset: int) -> None:
        """Add an entry if `timestamp` is a new maximum."""
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        if self.offsets and relative_offset <= self.offsets[-1]:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(relative_offset)

    def lookup_before(self, timestamp: int) -> int:
        """Relative offset from which the first batch with max timestamp >= `timestamp`
        can be searched: every batch before it has a smaller max timestamp."""
        i = bisect_left(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else 0

    def truncate_to_offset(self, relative_offset: int) -> None:
        keep = bisect_left(self.offsets, relative_offset)
        del self.timestamps[keep:]
        del self.offsets[keep:]
        self.persisted = min(self.persisted, keep)

    def encode(self, start: int) -> bytes:
        return b"".join(
            _TIME_ENTRY.pack(ts, off)
            for ts, off in zip(self.timestamps[start:], self.offsets[start:], strict=True)
        )

    @classmethod
    def decode(cls, data: bytes) -> TimeIndex | None:
        if len(data) % TIME_ENTRY_BYTES:
            return None
        index = cls()
        for ts, off in _TIME_ENTRY.iter_unpack(data):
            index.timestamps.append(ts)
            index.offsets.append(off)
        index.persisted = len(index.timestamps)
        if not _strictly_increasing(index.timestamps) or not _strictly_increasing(index.offsets):
            return None
        return index


def _strictly_increasing(values: array[int]) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))  # noqa: RUF007 (arrays, not lists)
