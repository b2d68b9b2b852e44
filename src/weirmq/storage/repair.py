"""Offline repair of damaged partition logs (``weirmq storage repair``).

Theory of operation. Repair starts from what `verify` found and turns each problem into
a state the broker opens online, giving up only the offsets that are already unreadable,
and never deleting a byte: whatever it takes out of a log goes to

    <data_dir>/quarantine/<partition directory>/<file name>[.<n>]

(`.<n>` added when the name is taken, by an earlier repair), for an operator to inspect
or throw away.

    finding    repair
    damaged    truncate the segment at its first bad batch: the bytes from there to
               the end of the file are copied to quarantine first, then cut. With
               --quarantine (or when nothing before the bad batch is valid) the whole
               segment is moved to quarantine instead, its intact prefix with it.
    missing    nothing to move: the range is only recorded as given up.
    index      the index file is moved to quarantine; the broker rebuilds it (a
               `.txnindex` too: the broker re-appends its aborted transactions).
    overlap    not repaired: which of two files holding the same offsets is right is
               for a person to decide (move one aside by hand, then repair again).

A compaction swap that a crash interrupted (the cleaner's `.log.cleaned`, `.log.swap` or
`.log.deleted` files left in a partition directory, cleaner.py) is finished or rolled back
first, exactly as the broker's open does (`log.finish_swaps`), whether or not the
partition has other findings: verify judged the partition as if it were done, and its
findings name the files the finished swap leaves. This is the one step that deletes: the
`.log.cleaned` rewrite that was never complete, or the segment files a complete rewrite
replaces, which hold nothing the rewrite lost (the rewrite is kept only if it scans
whole).

Every range given up is written to the partition's lost-offsets file (damage.py), so the
next open knows the gap is intended and reads past it. When the damage reaches the end
of the log, an empty segment is created at the recovery point: appends continue there,
and no offset a producer was ever given is handed out again.

The steps are ordered so that a crash in the middle leaves a directory the broker still
opens and a second repair finishes: copies into quarantine (fsynced) first, then the
lost-offsets file, then new empty segments, then the cuts and moves, then one fsync of
each directory touched. Until the cut, the broker sees the damage it saw before; after
it, the gap is already recorded.

A plan (`plan_repair`) is pure data, printed as it is by ``--dry-run``; `apply_plan`
carries it out. The caller holds the data directory's lock.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoint import fsync_directory
from .damage import read_lost_ranges, write_lost_ranges
from .log import finish_swaps, pending_swaps
from .segment import segment_name
from .txnindex import SUFFIX as TXN_SUFFIX
from .verify import (
    DAMAGED,
    INDEX,
    MISSING,
    OVERLAP,
    QUARANTINE_DIR,
    DataDirReport,
    Finding,
    PartitionReport,
)

_COPY_CHUNK_BYTES = 8 * 1024 * 1024
# Suffixes tried for a quarantine name already taken, before giving up.
_QUARANTINE_NAMES_MAX = 1000


@dataclass(frozen=True, slots=True)
class Step:
    """One change to the files: `what` is "finish-swaps", "truncate", "move", "create" or
    "record"."""

    what: str
    path: str
    position: int = 0
    """For "truncate": the new size of `path`."""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    name: str
    directory: Path
    steps: tuple[Step, ...]
    lost: tuple[tuple[int, int], ...]
    """Offset ranges given up, [start, end)."""
    lost_bytes: int
    """Bytes taken out of the log (moved to quarantine)."""
    unrepaired: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def needed(self) -> bool:
        return bool(self.steps)

    def to_json(self) -> dict[str, object]:
        return {
            "partition": self.name,
            "lost_offsets": [{"start_offset": a, "end_offset": b} for a, b in self.lost],
            "lost_offset_count": sum(b - a for a, b in self.lost),
            "lost_bytes": self.lost_bytes,
            "steps": [
                {"action": s.what, "file": s.path, "position": s.position, "detail": s.detail}
                for s in self.steps
            ],
            "unrepaired": [f.to_json() for f in self.unrepaired],
        }


def plan_repair(report: DataDirReport, *, quarantine_segments: bool = False) -> list[PartitionPlan]:
    """What repairing the damaged partitions of `report` would do (changes nothing)."""
    return [
        _plan_partition(partition, report.data_dir, quarantine_segments)
        for partition in report.partitions
        if not partition.ok or pending_swaps(partition.directory)
    ]


def _plan_partition(
    partition: PartitionReport, data_dir: Path, quarantine_segments: bool
) -> PartitionPlan:
    steps: list[Step] = []
    lost: list[tuple[int, int]] = []
    lost_bytes = 0
    unrepaired: list[Finding] = []
    last_base = partition.segments[-1].base_offset if partition.segments else None
    quarantine = data_dir / QUARANTINE_DIR / partition.name
    for finding in partition.findings:
        if finding.kind == DAMAGED:
            base = _base_of(finding.path)
            whole = quarantine_segments or finding.position == 0
            steps += _cut_steps(finding, base, whole, quarantine)
            start = base if whole else finding.start_offset
            end = finding.end_offset
            assert end is not None
            if end > start:
                lost.append((start, end))
            lost_bytes += _file_size(finding.path) if whole else finding.bytes
            if base == last_base:  # the end of the log: appends go on from `end`
                steps.append(_create_step(partition.directory, end))
        elif finding.kind == MISSING:
            assert finding.end_offset is not None
            lost.append((finding.start_offset, finding.end_offset))
            if finding.end_offset > partition.end_offset:  # the log itself ends short
                steps.append(_create_step(partition.directory, finding.end_offset))
        elif finding.kind == INDEX:
            steps.append(Step("move", finding.path, 0, str(quarantine)))
        elif finding.kind == OVERLAP:
            unrepaired.append(finding)
    if lost:
        ranges = ", ".join(f"{a}..{b - 1}" for a, b in lost)
        steps.insert(0, Step("record", str(partition.directory), 0, ranges))
    leftovers = pending_swaps(partition.directory)
    if leftovers:
        steps.insert(0, Step("finish-swaps", str(partition.directory), 0, ", ".join(leftovers)))
    return PartitionPlan(
        partition.name,
        partition.directory,
        tuple(_ordered(steps)),
        tuple(lost),
        lost_bytes,
        tuple(unrepaired),
    )


def _cut_steps(finding: Finding, base: int, whole: bool, quarantine: Path) -> list[Step]:
    stem = finding.path.removesuffix(".log")
    indexes = [p for p in (stem + ".index", stem + ".timeindex") if os.path.exists(p)]
    if whole:  # its aborted transactions go with it (a cut segment keeps those before the cut)
        indexes += [p for p in (stem + TXN_SUFFIX,) if os.path.exists(p)]
        return [Step("move", p, 0, str(quarantine)) for p in (finding.path, *indexes)]
    # The index files describe bytes about to be cut: they go too (the broker rebuilds).
    return [
        *(Step("move", p, 0, str(quarantine)) for p in indexes),
        Step("truncate", finding.path, finding.position, str(quarantine)),
    ]


def _create_step(directory: Path, base_offset: int) -> Step:
    return Step("create", str(directory / f"{segment_name(base_offset)}.log"), 0, "")


def _ordered(steps: list[Step]) -> Iterator[Step]:
    """The crash-safe order of the module docstring: finish swaps, record, create, then
    cut and move (each cut copies its bytes to quarantine before cutting; see
    `_truncate`)."""
    order = {"finish-swaps": -1, "record": 0, "create": 1, "move": 2, "truncate": 2}
    seen = set()
    for step in sorted(steps, key=lambda s: order[s.what]):
        if step not in seen:  # two findings may ask for the same index file to move
            seen.add(step)
            yield step


def _base_of(path: str) -> int:
    return int(os.path.basename(path)[:20])


def _file_size(path: str) -> int:
    return os.path.getsize(path)


def apply_plan(plans: Iterable[PartitionPlan], data_dir: Path) -> list[str]:
    """Carry out `plans`; returns the quarantine paths written, in order."""
    written: list[str] = []
    for plan in plans:
        touched: set[Path] = {plan.directory}
        for step in plan.steps:
            if step.what == "finish-swaps":
                finish_swaps(Path(step.path))
            elif step.what == "record":
                old = read_lost_ranges(plan.directory)
                write_lost_ranges(plan.directory, [*old, *plan.lost])
            elif step.what == "create":
                _create_empty(Path(step.path))
            elif step.what == "move":
                target = _quarantine_name(Path(step.detail), os.path.basename(step.path))
                _move(step.path, target)
                written.append(str(target))
                touched.add(target.parent)
            elif step.what == "truncate":
                name = f"{os.path.basename(step.path)}.from-{step.position}"
                target = _quarantine_name(Path(step.detail), name)
                _truncate(step.path, step.position, target)
                written.append(str(target))
                touched.add(target.parent)
        if len(touched) > 1:  # quarantine directories may be new: their entries too
            touched |= {data_dir / QUARANTINE_DIR, data_dir}
        for directory in sorted(touched):
            fsync_directory(directory)
    return written


def _quarantine_name(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    candidate = directory / name
    for n in range(1, _QUARANTINE_NAMES_MAX + 1):
        if not candidate.exists():
            return candidate
        candidate = directory / f"{name}.{n}"
    raise FileExistsError(f"{directory}: {_QUARANTINE_NAMES_MAX} files named {name}.* already")


def _move(path: str, target: Path) -> None:
    """Move into quarantine: a rename on the same file system (the quarantine directory is
    in the data directory), so nothing is copied and nothing can be half-moved."""
    os.rename(path, target)


def _truncate(path: str, position: int, target: Path) -> None:
    """Copy `path` from `position` to `target` (fsynced), then cut `path` there."""
    with open(path, "rb") as source, open(target, "xb") as copy:
        source.seek(position)
        shutil.copyfileobj(source, copy, _COPY_CHUNK_BYTES)
        copy.flush()
        os.fsync(copy.fileno())
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, position)
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_empty(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
