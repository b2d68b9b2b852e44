"""Offline check of a data directory's partition logs (``weirmq storage verify``).

Theory of operation. Every partition directory is read, never written: each segment file
is validated whole (framing, magic, CRC-32C of every batch, offsets contiguous from the
segment's base: the scan recovery runs, `segment.scan_file`), the segments are checked
against each other (each must start where the previous one ends), and the indexes the
broker would trust at its next start are checked against the log. The findings are then
judged as the broker's recovery judges them (log.py), with the recovery point from the
data directory's checkpoint, so that verify says what the next start will do:

    finding    what it is                                  what the broker does
    damaged    bad bytes below the recovery point          serves around the range and
                                                            answers CORRUPT_MESSAGE in it
    missing    flushed offsets with no bytes at all (a      keeps the partition offline
               segment gone, a file cut between batches)
    overlap    a segment starting inside the one before     keeps the partition offline
    index      an index file that disagrees with its log    may read at a wrong position
               (or a `.txnindex` that is not well formed:   (drops it at start: its aborts
               torn, out of order, bad version)             are unknown until rebuilt)
    torn-tail  bad bytes above the recovery point: the      cuts it off at start
               unflushed end of a crash
    lost       a range an earlier repair gave up            reads past it

The first four are problems (exit code 1); the last two are normal and only reported.
Checking the log's bytes against the recovery point is what tells a crash's torn tail,
which loses nothing that was acknowledged with acks=all, from damage to flushed data.

A partition the recovery-point checkpoint does not name is judged with recovery point 0,
as the broker does: all of its bad bytes are then torn tails. The scan reads each file
once, in large chunks, with one CRC call per batch; indexes cost one small read per entry.

A segment's `.txnindex` (aborted transactions, txnindex.py) is read whole and checked for
form only: whole 34-byte entries of version 0, markers in increasing order from the
segment's base. Entries whose marker lies past the log's end are not a finding: the
broker drops them at start, as it cuts a torn tail (the index file may reach the disk
before the log's last bytes).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..records.batch import HEADER_BYTES, parse_header
from .checkpoint import read_offsets
from .damage import covered, read_lost_ranges
from .index import OffsetIndex, TimeIndex
from .log import SWAP_SUFFIX
from .manager import (
    CLEAN_SHUTDOWN_FILE,
    DELETED_SUFFIX,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    parse_partition_dir,
)
from .segment import FileScan, scan_file, segment_name
from .txnindex import SUFFIX as TXN_SUFFIX
from .txnindex import read_file as read_txn_file

DAMAGED = "damaged"
MISSING = "missing"
OVERLAP = "overlap"
INDEX = "index"
TORN_TAIL = "torn-tail"
LOST = "lost"
PROBLEMS = frozenset({DAMAGED, MISSING, OVERLAP, INDEX})
"""Finding kinds that make a partition "damaged" (the rest are normal)."""
QUARANTINE_DIR = "quarantine"
"""Under the data directory: where repair moves what it takes out of a log (repair.py)."""
# Index entries checked per index file; the whole file is checked below this (a 1 GiB
# segment at the default index.interval.bytes has 262,144 entries).
INDEX_ENTRIES_CHECKED_MAX = 1 << 20


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing verify found in a partition (kinds in the module docstring)."""

    kind: str
    path: str
    """The file concerned: a segment's .log (an index file for `INDEX`)."""
    position: int
    """Where in `path` it begins (0 when whole files are concerned)."""
    start_offset: int
    end_offset: int | None
    """The first offset after the range (exclusive); None when not known (a torn tail)."""
    bytes: int
    """Bytes of the data directory concerned: from `position` to the end of `path`, plus
    any later segments a torn tail takes with it."""
    problem: str

    @property
    def offsets(self) -> str:
        """The range in words: "1450..2399", "4000 on", or "none"."""
        if self.end_offset is None:
            return f"{self.start_offset} on"
        if self.end_offset <= self.start_offset:
            return "none"
        return f"{self.start_offset}..{self.end_offset - 1}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "file": self.path,
            "position": self.position,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "bytes": self.bytes,
            "problem": self.problem,
        }


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One segment file as verify found it."""

    base_offset: int
    path: str
    size: int
    scan: FileScan


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """Everything verify found in one partition directory."""

    name: str
    directory: Path
    recovery_point: int
    log_start_offset: int
    segments: tuple[SegmentFile, ...]
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not any(f.kind in PROBLEMS for f in self.findings)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def first_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else self.log_start_offset

    @property
    def end_offset(self) -> int:
        """The offset after the last valid batch on disk."""
        return self.segments[-1].scan.next_offset if self.segments else self.log_start_offset

    def to_json(self) -> dict[str, object]:
        tp = parse_partition_dir(self.name)
        return {
            "partition": self.name,
            "topic": tp.topic if tp else None,
            "index": tp.partition if tp else None,
            "status": "ok" if self.ok else "damaged",
            "recovery_point": self.recovery_point,
            "log_start_offset": self.log_start_offset,
            "first_offset": self.first_offset,
            "end_offset": self.end_offset,
            "segments": len(self.segments),
            "bytes": self.size_bytes,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True, slots=True)
class DataDirReport:
    data_dir: Path
    clean_shutdown: bool
    partitions: tuple[PartitionReport, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.partitions)

    def to_json(self) -> dict[str, object]:
        return {
            "data_dir": str(self.data_dir),
            "clean_shutdown": self.clean_shutdown,
            "ok": self.ok,
            "partitions": [p.to_json() for p in self.partitions],
        }


def partition_directories(data_dir: Path) -> list[Path]:
    """The partition directories the broker would open, in name order."""
    found = []
    for entry in sorted(os.scandir(data_dir), key=lambda e: e.name):
        if not entry.is_dir() or entry.name.endswith(DELETED_SUFFIX):
            continue
        if parse_partition_dir(entry.name) is not None:
            found.append(Path(entry.path))
    return found


def verify_data_dir(data_dir: Path, only: set[str] | None = None) -> DataDirReport:
    """Check every partition of `data_dir` (or those whose directory name is in `only`).
    Reads only; the caller holds the data directory's lock."""
    clean = (data_dir / CLEAN_SHUTDOWN_FILE).exists()
    recovery_points = read_offsets(data_dir / RECOVERY_POINT_FILE)
    log_starts = read_offsets(data_dir / LOG_START_FILE)
    reports = []
    for directory in partition_directories(data_dir):
        if only is not None and directory.name not in only:
            continue
        tp = parse_partition_dir(directory.name)
        assert tp is not None
        reports.append(
            verify_partition(
                directory,
                recovery_point=recovery_points.get(tp, 0),
                clean_shutdown=clean and tp in recovery_points,
                log_start_offset=log_starts.get(tp, 0),
            )
        )
    return DataDirReport(data_dir, clean, tuple(reports))


def verify_partition(
    directory: Path, *, recovery_point: int, clean_shutdown: bool, log_start_offset: int = 0
) -> PartitionReport:
    """Check one partition directory as the broker's next open would judge it."""
    segments = tuple(_scan_segments(directory))
    findings = list(_judge(segments, recovery_point, clean_shutdown, read_lost_ranges(directory)))
    return PartitionReport(
        directory.name, directory, recovery_point, log_start_offset, segments, tuple(findings)
    )


def _scan_segments(directory: Path) -> Iterator[SegmentFile]:
    paths = {
        base: str(directory / f"{segment_name(base)}.log") for base in segment_bases(directory)
    }
    _as_if_swapped(directory, paths)
    for base, path in sorted(paths.items()):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            yield SegmentFile(base, path, size, scan_file(fd, base, size))
        finally:
            os.close(fd)


def _as_if_swapped(directory: Path, paths: dict[int, str]) -> None:
    """Judge the segments the broker's next open will have: a compaction swap that a crash
    interrupted (`N.log.swap`, see cleaner.py) is finished by `log.finish_swaps` at open,
    so its file stands for `N.log` and the segments it covers, read only here."""
    for entry in os.scandir(directory):
        stem, _, suffix = entry.name.partition(".")
        if "." + suffix != SWAP_SUFFIX or not stem.isdigit() or int(stem) not in paths:
            continue
        base = int(stem)
        fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            scan = scan_file(fd, base, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        if scan.problem is not None:
            continue  # rolled back at open: the old segments stand
        for covered_base in [b for b in paths if base < b < scan.next_offset]:
            del paths[covered_base]
        paths[base] = entry.path


def segment_bases(directory: Path) -> list[int]:
    """Base offsets of the segment files in `directory` (read-only `log._segment_bases`)."""
    bases = []
    for entry in os.scandir(directory):
        stem, _, suffix = entry.name.partition(".")
        if suffix == "log" and len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def _judge(
    segments: tuple[SegmentFile, ...],
    recovery_point: int,
    clean_shutdown: bool,
    lost: list[tuple[int, int]],
) -> Iterator[Finding]:
    """The findings, in the order and with the rules of `FileLog._load`."""
    if not segments:
        return
    bases = [s.base_offset for s in segments]
    trusted = len(segments) if clean_shutdown else max(bisect_right(bases, recovery_point) - 1, 0)
    for i, segment in enumerate(segments):
        if i > 0:
            finding = _between(segments[i - 1], segment, recovery_point, lost)
            if finding is not None:
                yield finding
                if finding.kind == TORN_TAIL:  # the broker drops this segment and later ones
                    return
        finding = check_txn_index(segment)
        if finding is not None:
            yield finding
        scan = segment.scan
        if i < trusted and scan.problem is None:
            yield from check_indexes(segment)
        if i >= trusted and scan.problem is not None and scan.next_offset >= recovery_point:
            yield _torn_tail(segment, sum(s.size for s in segments[i + 1 :]))
            return
    last = segments[-1]
    if last.scan.problem is not None:
        if last.scan.next_offset >= recovery_point:  # as `FileLog._damaged_tail`
            yield _torn_tail(last, 0)
        else:
            yield _damaged(last, recovery_point)
    elif last.scan.next_offset < recovery_point:
        yield _missing(last, last.scan.next_offset, recovery_point)


def _between(
    previous: SegmentFile, segment: SegmentFile, recovery_point: int, lost: list[tuple[int, int]]
) -> Finding | None:
    """What lies between the valid end of `previous` and the start of `segment`."""
    end, base = previous.scan.next_offset, segment.base_offset
    if previous.scan.problem is not None and base >= end:
        return _damaged(previous, base)
    if base == end:
        return None
    if base > end and covered(lost, end, base):
        return Finding(
            LOST, previous.path, previous.size, end, base, 0, "given up by an earlier repair"
        )
    if end >= recovery_point:  # a torn tail: the broker drops `segment` and later ones
        return Finding(
            TORN_TAIL,
            segment.path,
            0,
            end,
            None,
            segment.size,
            f"segment starts at offset {base}, not at {end} where the one before ends, "
            "above the recovery point: the broker deletes it and any later ones at start",
        )
    if base < end:
        return _overlap(previous, segment)
    return _missing(previous, end, base)


def _torn_tail(segment: SegmentFile, later_bytes: int) -> Finding:
    scan = segment.scan
    return Finding(
        TORN_TAIL,
        segment.path,
        scan.valid_bytes,
        scan.next_offset,
        None,
        segment.size - scan.valid_bytes + later_bytes,
        f"{scan.problem}: above the recovery point, the broker cuts it off at start",
    )


def _damaged(segment: SegmentFile, end_offset: int) -> Finding:
    scan = segment.scan
    assert scan.problem is not None
    return Finding(
        DAMAGED,
        segment.path,
        scan.valid_bytes,
        scan.next_offset,
        end_offset,
        segment.size - scan.valid_bytes,
        scan.problem,
    )


def _missing(segment: SegmentFile, start: int, end: int) -> Finding:
    return Finding(
        MISSING,
        segment.path,
        segment.size,
        start,
        end,
        0,
        f"the data ends at offset {start}, below the recovery point, and nothing holds "
        f"offsets {start}..{end - 1} (a segment file is missing, or was cut between batches)",
    )


def _overlap(previous: SegmentFile, segment: SegmentFile) -> Finding:
    return Finding(
        OVERLAP,
        segment.path,
        0,
        segment.base_offset,
        previous.scan.next_offset,
        0,
        f"segment starts at offset {segment.base_offset}, inside {previous.path}, which "
        f"holds offsets up to {previous.scan.next_offset - 1}",
    )


def check_indexes(segment: SegmentFile) -> Iterator[Finding]:
    """Findings for index files that disagree with the (valid) log `segment`. Missing
    index files are fine: the broker rebuilds them. Only whole-file facts are checked
    against the scan: each offset-index entry must name a batch (its base offset at that
    position) and each time-index entry an offset in the segment, with a timestamp no
    larger than the segment's largest."""
    stem = segment.path.removesuffix(".log")
    problem = _offset_index_problem(segment, stem + ".index")
    if problem is not None:
        yield Finding(INDEX, stem + ".index", 0, segment.base_offset, None, 0, problem)
    problem = _time_index_problem(segment, stem + ".timeindex")
    if problem is not None:
        yield Finding(INDEX, stem + ".timeindex", 0, segment.base_offset, None, 0, problem)


def check_txn_index(segment: SegmentFile) -> Finding | None:
    """A finding for a `.txnindex` that is not well formed (module docstring); a missing
    one is the usual case (no abort in the segment)."""
    name = f"{segment_name(segment.base_offset)}{TXN_SUFFIX}"
    path = os.path.join(os.path.dirname(segment.path), name)
    found = read_txn_file(path)
    if isinstance(found, list) and found and found[0].last_offset < segment.base_offset:
        found = f"entry 0 names offset {found[0].last_offset}, below the segment's base"
    if not isinstance(found, str):
        return None
    problem = f"{found}: the broker drops it at start and rebuilds it from the log"
    return Finding(INDEX, path, 0, segment.base_offset, None, 0, problem)


def _read_if_present(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _offset_index_problem(segment: SegmentFile, path: str) -> str | None:
    data = _read_if_present(path)
    if data is None:
        return None
    index = OffsetIndex.decode(data)
    if index is None:
        return "torn (not whole entries) or out of order"
    end = segment.scan.valid_bytes
    fd = os.open(segment.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        entries = zip(index.offsets, index.positions, strict=True)
        for n, (relative, position) in enumerate(entries):
            if n >= INDEX_ENTRIES_CHECKED_MAX:
                break
            offset = segment.base_offset + relative
            if position + HEADER_BYTES > end or offset >= segment.scan.next_offset:
                return f"entry {n} (offset {offset}, position {position}) is past the log's end"
            header = parse_header(os.pread(fd, HEADER_BYTES, position))
            if header.base_offset != offset:
                return (
                    f"entry {n} says offset {offset} is at position {position}, where the "
                    f"batch holds offset {header.base_offset}"
                )
    finally:
        os.close(fd)
    return None


def _time_index_problem(segment: SegmentFile, path: str) -> str | None:
    data = _read_if_present(path)
    if data is None:
        return None
    index = TimeIndex.decode(data)
    if index is None:
        return "torn (not whole entries) or out of order"
    entries = zip(index.timestamps, index.offsets, strict=True)
    for n, (timestamp, relative) in enumerate(entries):
        offset = segment.base_offset + relative
        if offset >= max(segment.scan.next_offset, segment.base_offset + 1):
            return f"entry {n} names offset {offset}, past the log's end"
        if timestamp > segment.scan.max_timestamp:
            return (
                f"entry {n} has timestamp {timestamp}, larger than any in the log "
                f"({segment.scan.max_timestamp})"
            )
    return None
