"""Damaged ranges of a partition log, and the ranges an operator has given up.

A log is a run of segments, each named by its base offset, so the offsets a segment must
hold are known before its bytes are read: from its base up to the next segment's base.
When a segment's bytes stop being valid early (a flipped bit fails a batch's CRC, a cut
leaves a batch short, a header no longer makes sense), everything from the first bad
batch to the next segment's base is a *damaged range*:

    00000000000000000000.log   offsets    0 .. 1199   intact: served
    00000000000000001200.log   offsets 1200 .. 1449   intact prefix: served
                               (bad batch at position 40960)
                               offsets 1450 .. 2399   damaged: CORRUPT_MESSAGE
    00000000000000002400.log   offsets 2400 ..        intact: served, appended to

Only data below the recovery point can be damaged: above it a bad batch is the torn tail
of a crash, which recovery cuts off (see log.py). A damaged range is never served and
never written over; reads inside it get `DamagedRangeError`, everything around it stays
readable and the log takes appends. Batches after the first bad one in the same segment
are not looked at: finding where valid framing resumes inside damaged bytes would be
guesswork, and Kafka's recovery gives them up the same way.

A *lost range* is a damaged range the operator gave up with ``weirmq storage repair``,
which cuts (or moves aside) the bad bytes and records the range in the partition
directory, so that the next open knows the offsets are gone on purpose:

    lost-offsets        Kafka's checkpoint layout
        0               version
        1               number of ranges
        1450 2400       first offset lost, first offset after it

A read of an offset in a lost range goes on from the next offset that has data, as Kafka
reads past offsets that compaction removed: consumers move on. Without the file, a gap
in the offsets below the recovery point is missing data and takes the log offline. The
file is small (one line per repair) and written atomically.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import write_atomically

log = logging.getLogger(__name__)

LOST_OFFSETS_FILE = "lost-offsets"
_VERSION = 0
# A file this large is not one we wrote: one line per repaired range.
_LOST_OFFSETS_BYTES_MAX = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Damage:
    """Offsets [start_offset, end_offset) that a log had and cannot serve."""

    start_offset: int
    end_offset: int
    """The first offset after the damage: the next segment's base offset."""
    path: str
    """The segment file holding the first bad byte (or, when bytes are missing, the file
    that stops short)."""
    position: int
    """File position of the first bad byte: the size of the intact prefix of `path`."""
    problem: str
    """What validation found at `position`."""

    def __post_init__(self) -> None:
        assert self.start_offset < self.end_offset, self

    def __str__(self) -> str:
        return (
            f"offsets {self.start_offset}..{self.end_offset - 1} are damaged: "
            f"{self.path} from position {self.position}: {self.problem}"
        )

    def holds(self, offset: int) -> bool:
        return self.start_offset <= offset < self.end_offset


def read_lost_ranges(directory: Path) -> list[tuple[int, int]]:
    """The ranges given up by repair in this partition directory, sorted and merged;
    empty when there is no file. A malformed file is ignored with a warning: the gaps it
    named are then damage again, which is the safe side."""
    path = directory / LOST_OFFSETS_FILE
    try:
        with open(path, "rb") as f:
            data = f.read(_LOST_OFFSETS_BYTES_MAX + 1)
    except FileNotFoundError:
        return []
    try:
        if len(data) > _LOST_OFFSETS_BYTES_MAX:
            raise ValueError("too large")
        lines = data.decode("ascii").splitlines()
        if int(lines[0]) != _VERSION or int(lines[1]) != len(lines) - 2:
            raise ValueError("bad version or count")
        ranges = []
        for line in lines[2:]:
            start, end = (int(field) for field in line.split(" "))
            if not 0 <= start < end:
                raise ValueError(f"bad range {line!r}")
            ranges.append((start, end))
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        log.warning("ignoring malformed %s (%s)", path, exc)
        return []
    return merge_ranges(ranges)


def write_lost_ranges(directory: Path, ranges: Iterable[tuple[int, int]]) -> None:
    """Replace the partition directory's lost-offsets file (atomically, fsynced)."""
    merged = merge_ranges(ranges)
    lines = [str(_VERSION), str(len(merged))] + [f"{a} {b}" for a, b in merged]
    write_atomically(directory / LOST_OFFSETS_FILE, ("\n".join(lines) + "\n").encode())


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, with overlapping and touching ranges joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def covered(ranges: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """Whether merged `ranges` hold every offset of [start, end)."""
    return any(a <= start and end <= b for a, b in ranges)
