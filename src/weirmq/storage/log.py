"""A partition log on disk: a directory of segments, recovered on open.

    topic-0/
        00000000000000000000.log  .index  .timeindex              sealed
        00000000000000052000.log  .index  .timeindex  .txnindex   sealed, with aborts
        00000000000000104000.log  .index  .timeindex              active: appends go here

Appends are validated and offset-stamped (`prepare_append`), then written with one
`pwritev` at the end of the active segment; the active segment rolls when the next write
would pass `segment.bytes`, when it is older than `segment.ms` (by the broker's clock at
its creation, not by producer timestamps, which can be anything), or when its 32-bit
relative offsets would overflow.

Aborted transactions (txnindex.py). When the broker appends an ABORT marker it records
the transaction (`append_aborted_txn`) in the segment holding the marker's offset; a
read_committed fetch asks `aborted_txns` for those overlapping what it returns. The
entries live in memory per segment and in that segment's `.txnindex`, created with its
first entry; they are written and fsynced by `flush` with the other indexes, dropped
with their segment (retention, DeleteRecords, truncation) and, unlike the offset and time
indexes, never rebuilt by storage: a crash may lose the newest and the broker re-appends
them while replaying the log (an entry appended twice is kept once). At open a damaged
`.txnindex` is dropped with a warning, and entries whose marker is no longer in the log
(a torn tail was cut) are dropped.

Durability. `flush` writes pending index entries, fsyncs every file holding bytes not
yet fsynced (and the directory when segments were created), then advances
`flushed_offset`, the recovery point. A log that created its own directory also fsyncs
the parent directory at its first flush: a new partition's directory is in the data
directory for good before its first acks=all answer (no power-loss window). It is called
by the group committer's thread while the event loop keeps appending: a per-log lock
covers the bookkeeping, never the fsync itself. `flush_logs` does the same for many logs
with all their fsyncs in one pass (a clean stop, the periodic flush): planned per log
under its lock, fsynced together, then recorded per log.

A failed fsync. Afterwards the kernel may have dropped the dirty pages and cleared the
error, so that the next fsync succeeds over data that never reached the disk (PostgreSQL's
"fsyncgate"): nothing written since the last good flush can be trusted, though it still
reads back from the page cache. The log does not go offline for it: what earlier flushes
made durable stays readable throughout. It stops flushing (`fsync_failed` is set; no
waiter is told that doubtful data is durable), and its owner rolls it back to
`flushed_offset` on its own thread (`roll_back_unsynced`: those offsets were never
acknowledged as durable; acks=1 ones are lost as a crash would lose them). Appends then
wait for an fsync of the active segment to work again (`probe_fsync`, at most once per
`FSYNC_PROBE_INTERVAL_MS`), and go on by themselves once it does.

Recovery on open, given the recovery point from the data directory's checkpoint:
- segments wholly below it are trusted, after an index sanity check (an index that is
  missing, torn or disagrees with the log is rebuilt from the log);
- the segment holding the recovery point and every later one are re-validated batch by
  batch (framing, magic, CRC, contiguous offsets) and their indexes rebuilt.
A bad batch at or above the recovery point is a torn tail from a crash (the page cache
writes files back in any order, so several segments may have torn tails): the log is cut
there and any later segments are deleted; nothing below the recovery point is touched.

Bad data below the recovery point is damage (damage.py), and one bad byte must not cost
the whole partition: the offsets from the first bad batch to the next segment's base are
refused with `DamagedRangeError` (CORRUPT_MESSAGE), logged once at ERROR, and everything
around them is served. The damaged bytes are left as they are, for `weirmq storage
repair`. When the damage is in the last segment, a new active segment is rolled at the
recovery point, so appends go on and no flushed offset is ever handed out twice. Reads
re-check each batch's CRC; a failure re-validates that one segment (`_revalidate`) and
marks its damage the same way. A gap between segments below the recovery point, or a
log ending below it, is flushed data missing without a trace: unless `weirmq storage
repair` recorded the gap as given up (lost-offsets), the log goes offline and refuses
reads and appends (KAFKA_STORAGE_ERROR), as before. A read in a given-up range goes on
from the next offset that has data.

Compaction (cleaner.py) replaces sealed segments by rewrites holding the same offsets,
the removed ones in empty batches: `swap_cleaned` installs one on the owner's thread, and
`finish_swaps` finishes or rolls back, at open, a swap a crash interrupted. Reads skip
leading empty batches, so a fetch at a removed offset gets the next record. The cleaner
keeps transactional and control batches as they are, so the aborted-transaction entries
stay true: a rewrite keeps its first segment's `.txnindex` file, and one merging several
segments merges their entries into it (written whole before any `.log` is renamed, so
that `finish_swaps` can merge again after a crash).

After a clean shutdown (all flushed, indexes synced) nothing is re-validated, except an
active segment too small to have index entries: a clean close writes no index files for
it, so the open re-reads it whole (less than one index interval plus one batch). Damage
in the trusted segments is then found by the reads' CRC checks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ..records.batch import HEADER_BYTES, BatchHeader
from .append import prepare_append
from .config import LogConfig
from .damage import Damage, covered, read_lost_ranges
from .errors import (
    DamagedRangeError,
    DiskFullError,
    LogOfflineError,
    OffsetOutOfRangeError,
    StorageError,
)
from .fsync import fsync_all
from .handles import HandleCache
from .interface import AppendInfo, Clock, ReadResult, TimestampOffset
from .policy import retention_breaches, should_roll
from .segment import CorruptDataError, IndexedScan, Segment, scan_file, segment_name
from .txnindex import SUFFIX as TXN_SUFFIX
from .txnindex import AbortedTxn, TxnIndex, merged, read_file, write_file

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", TXN_SUFFIX)
# A read that fails a check re-validates its segment and is tried once more; failing
# again means the segment changes under us: the log goes offline.
_READ_ATTEMPTS = 2
FSYNC_PROBE_INTERVAL_MS = 1_000
"""After a failed fsync, how often an append may try whether fsync works again (each try
is an fsync on the event loop's thread; a failing disk can make it slow)."""


class _SegmentCorrupt(Exception):
    """Segment `index` failed a check while being read (internal to `FileLog.read`)."""

    def __init__(self, index: int, cause: CorruptDataError) -> None:
        super().__init__(str(cause))
        self.index = index
        self.cause = cause


class FileLog:
    """One partition's segmented log in `directory`. See the module docstring."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        handles: HandleCache,
        clock: Clock,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        log_start_offset: int = 0,
    ) -> None:
        self.directory = directory
        self.config = config
        self._handles = handles
        self._clock = clock
        self._lock = threading.Lock()
        self._segments: list[Segment] = []
        self.txn_index_dropped = False
        """A damaged `.txnindex` was dropped at open: its entries must be rebuilt from the
        whole log (the broker's replay of producer state does, ignoring its snapshot)."""
        self._bases: list[int] = []
        self._clean_prefix = 0  # see _set_segments
        self._offline: str | None = None
        self._fsync_failed: str | None = None  # see the module docstring
        self.rollbacks = 0
        """How many times `roll_back_unsynced` dropped offsets: an owner that keeps state
        about the log's records compares it to see that its state must be rebuilt."""
        self._next_probe_ms = 0
        self._damage: list[Damage] = []  # sorted by offset, disjoint
        self._lost: list[tuple[int, int]] = []  # ranges repair gave up (damage.py)
        self._dir_dirty = False
        self._parent_dirty = False  # the directory is new: its entry in the parent is not durable
        self._txn_dirty = False  # an aborted-transaction entry not yet fsynced
        self._flushed = 0
        self._log_start = 0
        self._open(recovery_point, clean_shutdown, log_start_offset)

    # --- state ------------------------------------------------------------------------

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
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def offline_reason(self) -> str | None:
        return self._offline

    @property
    def damage(self) -> tuple[Damage, ...]:
        """The damaged ranges above the log start, oldest first (empty for a sound log)."""
        return tuple(self._damage)

    @property
    def needs_flush(self) -> bool:
        if self._fsync_failed is not None:
            return False  # nothing may be flushed until it is rolled back and probed
        return (
            self._flushed < self.log_end_offset
            or self._dir_dirty
            or self._parent_dirty
            or self._txn_dirty
        )

    @property
    def fsync_failed(self) -> str | None:
        """Why the last fsync failed, until `probe_fsync` finds that it works again."""
        return self._fsync_failed

    def _check_online(self) -> None:
        if self._offline is not None:
            raise LogOfflineError(
                f"partition log {self.directory.name} is offline: {self._offline}"
            )

    def _go_offline(self, reason: str) -> None:
        if self._offline is None:
            log.error("partition log %s taken offline: %s", self.directory, reason)
            self._offline = reason

    def _add_damage(self, damage: Damage) -> None:
        """Refuse `damage`'s offsets from now on; logged once, here. A range it covers (the
        same segment found worse) is replaced."""
        if damage.end_offset <= self._log_start:
            return  # deleted records (DeleteRecords, retention): nobody may read them
        kept = [
            d
            for d in self._damage
            if d.end_offset <= damage.start_offset or d.start_offset >= damage.end_offset
        ]
        self._damage = sorted([*kept, damage], key=lambda d: d.start_offset)
        log.error(
            "partition log %s: %s; serving the offsets around them, refusing these with "
            "CORRUPT_MESSAGE (see `weirmq storage verify` and `weirmq storage repair`)",
            self.directory,
            damage,
        )

    def _forget_damage_outside(self) -> None:
        """Drop damaged ranges that retention, DeleteRecords or a truncation removed."""
        start, end = self._log_start, self.log_end_offset
        self._damage = [d for d in self._damage if d.end_offset > start and d.start_offset < end]

    def _refuse_damaged(self, offset: int) -> None:
        for damage in self._damage:
            if damage.holds(offset):
                raise DamagedRangeError(f"{self.directory.name}: {damage}")

    def _new_segment(self, base_offset: int) -> Segment:
        segment = Segment(
            self.directory, base_offset, self._handles, self.config.index_interval_bytes
        )
        segment.created_ms = self._clock()
        return segment

    def _set_segments(self, segments: list[Segment]) -> None:
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        # How many leading segments are sealed and wholly durable (data, index entries,
        # index files): a flush skips them. Any change to the list starts over; the next
        # flush's `_finish_flush` finds the prefix again.
        self._clean_prefix = 0

    # --- appending --------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        validated: Sequence[BatchHeader] | None = None,
    ) -> AppendInfo:
        self._check_online()
        if self._fsync_failed is not None:
            self.roll_back_unsynced()
            if not self.probe_fsync():
                raise StorageError(
                    f"partition log {self.directory.name} refuses appends until fsync works "
                    f"again ({self._fsync_failed})"
                )
        now = self._clock()
        prepared = prepare_append(
            records,
            next_offset=self.log_end_offset,
            leader_epoch=leader_epoch,
            config=self.config,
            now_ms=now,
            validated=validated,
        )
        segment = self._segments[-1]
        if should_roll(
            segment,
            self.config,
            add_bytes=prepared.size,
            last_offset=prepared.last_offset,
            now_ms=now,
        ):
            segment = self._roll()
        try:
            with self._lock:
                segment.append(prepared.parts, prepared.size, prepared.batches)
        except OSError as exc:
            if exc.errno == 28:  # ENOSPC
                raise DiskFullError(f"disk full appending to {self.directory.name}") from exc
            raise StorageError(f"I/O error appending to {self.directory.name}: {exc}") from exc
        return AppendInfo(
            prepared.base_offset, prepared.last_offset, prepared.log_append_time_ms, self._log_start
        )

    def _roll(self) -> Segment:
        new = self._new_segment(self.log_end_offset)
        new.create_file()
        with self._lock:
            self._segments[-1].seal()
            self._set_segments([*self._segments, new])
            self._dir_dirty = True
        return new

    def maybe_roll(self) -> bool:
        active = self._segments[-1]
        if self._offline or active.is_empty:
            return False
        if self._clock() - active.created_ms < self.config.segment_ms:
            return False
        self._roll()
        return True

    # --- reading ----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        self._check_online()
        if self._fsync_failed is not None:  # no reader may see what is to be rolled back
            self.roll_back_unsynced()
        start, end = self._log_start, self.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{start}, {end}] of {self.directory.name}"
            )
        if offset == end:
            return ReadResult(b"", start, end)

        def attempt() -> ReadResult:
            self._refuse_damaged(offset)
            return ReadResult(self._read_segments(offset, max_bytes), start, end)

        try:
            return self._revalidating(attempt)
        except OSError as exc:
            raise StorageError(f"I/O error reading {self.directory.name}: {exc}") from exc

    def _revalidating(self, operation: Callable[[], _T]) -> _T:
        """Run a read-only `operation`; when a segment fails a check on the way, re-validate
        that segment (`_revalidate`, which marks its damage) and run it once more. A second
        failure means the files change under us: the log goes offline."""
        for attempt in range(1, _READ_ATTEMPTS + 1):
            try:
                return operation()
            except _SegmentCorrupt as failed:
                if attempt == _READ_ATTEMPTS:
                    self._go_offline(str(failed.cause))
                    raise LogOfflineError(str(failed.cause)) from failed.cause
                self._revalidate(failed.index)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _read_segments(self, offset: int, max_bytes: int) -> bytes | memoryview:
        """Whole batches from the segment holding `offset`, or from the first later one
        with data when `offset` lies in a range given up by repair (the read goes on from
        the next offset that exists, as Kafka reads past offsets compaction removed)."""
        i = bisect_right(self._bases, offset) - 1
        while i < len(self._segments):
            segment = self._segments[i]
            try:
                records = segment.read(max(offset, segment.base_offset), max_bytes)
            except CorruptDataError as exc:
                raise _SegmentCorrupt(i, exc) from exc
            if not records:
                i += 1
                continue
            records, after = _without_leading_empty_batches(records)
            if records:
                return records
            offset = after  # only empty batches (compaction): read on after them
        return b""

    def _revalidate(self, i: int) -> None:
        """Segment `i` failed a check while being read: its bytes changed after they were
        validated, or a clean open trusted them unread. Re-validate it whole (once, and
        on this thread: it costs a scan of one segment) and refuse what follows the first
        bad batch. The active segment is rolled first, so appends go to a sound file."""
        if i == len(self._segments) - 1:
            self._roll()
        with self._lock:
            segment = self._segments[i]
            problem = segment.rescan()
            self._clean_prefix = 0  # its index files must be written again
        end = self._segments[i + 1].base_offset
        if problem is not None and segment.next_offset < end:
            self._add_damage(
                Damage(segment.next_offset, end, segment.log_path, segment.size, problem)
            )

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        self._check_online()
        return self._revalidating(lambda: self._search_timestamp(timestamp_ms))

    def _search_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        for i, segment in enumerate(self._segments):
            if segment.next_offset > self._log_start:
                try:
                    found = segment.find_timestamp(timestamp_ms, self._log_start)
                except CorruptDataError as exc:
                    raise _SegmentCorrupt(i, exc) from exc
                if found is not None:
                    return found
            # The first match may be among damaged offsets after this segment's valid
            # prefix: better no answer than a later one.
            for damage in self._damage:
                if damage.start_offset == segment.next_offset:
                    raise DamagedRangeError(
                        f"{self.directory.name}: cannot search by timestamp: {damage}"
                    )
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        self._check_online()
        return self._revalidating(self._find_max_timestamp)

    def _find_max_timestamp(self) -> TimestampOffset | None:
        if self._damage:  # the maximum may be among the damaged offsets
            raise DamagedRangeError(
                f"{self.directory.name}: cannot find the largest timestamp: {self._damage[0]}"
            )
        live = [s for s in self._segments if s.size and s.next_offset > self._log_start]
        if not live:
            return None
        best = max(live, key=lambda s: (s.max_timestamp, -s.base_offset))
        try:
            return best.find_timestamp(best.max_timestamp, self._log_start)
        except CorruptDataError as exc:
            raise _SegmentCorrupt(self._segments.index(best), exc) from exc

    # --- aborted transactions ---------------------------------------------------------

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction whose abort marker (at `entry.last_offset`) was
        just appended; it goes into the segment holding `last_offset`. Must be called after
        the marker's append. The entry is made durable by the log's next flush.

        Entries must come in `last_offset` order: one equal to an entry already recorded
        is ignored (the broker's replay after a crash re-appends what it finds missing),
        any other not after the segment's last one is an `AssertionError`. An entry whose
        segment retention already deleted is ignored: nobody can read its records."""
        self._check_online()
        if entry.last_offset >= self.log_end_offset:
            raise AssertionError(
                f"aborted transaction {entry}: its marker is not in {self.directory.name}, "
                f"which ends at {self.log_end_offset}"
            )
        with self._lock:
            if entry.last_offset < self._segments[0].base_offset:
                return
            i = bisect_right(self._bases, entry.last_offset) - 1
            if self._segments[i].append_aborted_txn(entry):
                self._txn_dirty = True
                self._clean_prefix = min(self._clean_prefix, i)  # a sealed one, when replayed

    def aborted_txns(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Every recorded aborted transaction with `last_offset >= start_offset` and
        `first_offset < upper_offset`, oldest first (a read_committed fetch from
        `start_offset` whose records end before `upper_offset`).

        Searched from the segment holding `start_offset` to the end: a transaction may span
        segments, so a later segment may hold the marker of one that began before
        `upper_offset`. Kafka stops early at an entry whose last stable offset reaches
        `upper_offset`; this search does not rely on the stored LSOs, and costs one check
        per later segment (see `TxnIndex.collect`)."""
        self._check_online()
        first = max(bisect_right(self._bases, start_offset) - 1, 0)
        found: list[AbortedTxn] = []
        for segment in self._segments[first:]:
            if len(segment.txn):
                found += segment.txn.collect(start_offset, upper_offset)
        return found

    # --- truncation, retention --------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove offsets >= `offset`. The owner must rewrite the recovery-point checkpoint
        before the next crash could happen, or the next open finds data missing below it."""
        self._check_online()
        if offset >= self.log_end_offset:
            return
        offset = max(offset, self._log_start)
        with self._lock:
            keep = [s for s in self._segments if s.base_offset < offset]
            drop = [s for s in self._segments if s.base_offset >= offset]
            if not keep:
                keep = [self._new_segment(offset)]
                keep[0].create_file()
            self._set_segments(keep)
            keep[-1].truncate_to(offset)
            keep[-1].sealed = False
            self._flushed = min(self._flushed, self.log_end_offset)
            self._log_start = min(self._log_start, self.log_end_offset)
            self._dir_dirty = True
            self._forget_damage_outside()
        for segment in drop:
            segment.delete_files()

    def advance_log_start(self, offset: int) -> int:
        self._check_online()
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records up to {offset}: the log ends at {self.log_end_offset}"
            )
        self._log_start = max(self._log_start, offset)
        self._delete_below_start()
        return self._log_start

    def apply_retention(self) -> int:
        if self._offline:
            return 0
        doomed = retention_breaches(self._segments, self.config, self._clock())
        if not doomed:
            return self._delete_below_start()
        if doomed == len(self._segments):
            self._roll()  # the active segment goes too: appends continue in a new one
        with self._lock:
            gone = self._segments[:doomed]
            self._set_segments(self._segments[doomed:])
            self._log_start = max(self._log_start, self._segments[0].base_offset)
            self._dir_dirty = True
        for segment in gone:
            segment.delete_files()
        return doomed + self._delete_below_start()

    def _delete_below_start(self) -> int:
        """Delete sealed segments holding only offsets below the log start (DeleteRecords)."""
        gone = []
        with self._lock:
            while len(self._segments) > 1 and self._segments[0].next_offset <= self._log_start:
                gone.append(self._segments[0])
                self._set_segments(self._segments[1:])
            if gone:
                self._dir_dirty = True
            self._forget_damage_outside()
        for segment in gone:
            segment.delete_files()
        return len(gone)

    # --- compaction -------------------------------------------------------------------

    def swap_cleaned(
        self, olds: Sequence[Segment], swap_path: str, scan: IndexedScan, now_ms: int
    ) -> bool:
        """On the owner's thread: replace the adjacent sealed segments `olds` by the
        cleaner's rewrite of them, `swap_path` (whole, fsynced, their offsets: cleaner.py),
        named after the first. Returns False, deleting the swap file, when they are no
        longer in the log as they were scanned (retention deleted one, a truncation or a
        re-validation changed one): the rewrite is then stale.

        Order, for `finish_swaps` to finish it after a crash at any point: the index files
        of `olds` are deleted; the aborted-transaction entries of the later ones, if any,
        are merged into the first's `.txnindex` (rewritten whole and fsynced); the later
        ones' `.log` files are renamed `.log.deleted` and the directory fsynced; the swap
        file is renamed over the first's `.log`; then the `.log.deleted` files and the later
        ones' `.txnindex` files are deleted. Readers on this thread never see a half-done
        swap; descriptors of the old files still cached are dropped."""
        first = olds[0]
        with self._lock:
            position = bisect_right(self._bases, first.base_offset) - 1
            current = self._segments[position : position + len(olds)]
            if (
                position < 0
                or len(current) != len(olds)
                or any(a is not b for a, b in zip(current, olds, strict=True))
                or position + len(olds) >= len(self._segments)  # never the active one
                or not all(old.sealed for old in olds)
                or olds[-1].next_offset != scan.next_offset
                or self._offline is not None
            ):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(swap_path)
                return False
            for old in olds:
                for path in (old.index_path, old.timeindex_path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                self._handles.forget(old.log_path)
            txn = _merged_txn(olds)
            for old in olds[1:]:
                os.rename(old.log_path, old.log_path + DELETED_LOG_SUFFIX)
            if len(olds) > 1:
                _fsync_path(str(self.directory))
            os.rename(swap_path, first.log_path)
            for old in olds[1:]:
                os.unlink(old.log_path + DELETED_LOG_SUFFIX)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(old.txnindex_path)
            mtime_ns = now_ms * 1_000_000
            os.utime(first.log_path, ns=(mtime_ns, mtime_ns))  # when it was cleaned: cleaner.py
            new = Segment(self.directory, first.base_offset, self._handles, first.index_interval)
            new.install(scan)
            new.txn = txn
            new.created_ms = now_ms
            segments = list(self._segments)
            segments[position : position + len(olds)] = [new]
            self._set_segments(segments)
            self._dir_dirty = True
        return True

    # --- durability -------------------------------------------------------------------

    def flush(self, *, sync_active_index: bool = False) -> int:
        """fsync all appended data (see module docstring); returns the new recovery point.

        With `sync_active_index` (a clean close) the active segment's indexes are completed
        and fsynced too, when it has any entries (see `_plan_flush`). Safe to call from one
        other thread while the owner thread appends and reads.
        """
        plan = self._plan_flush(sync_active_index)
        try:
            for path in plan.paths:
                _fsync_path(path)
        except OSError as exc:
            raise self._flush_failed(plan, exc) from exc
        return self._finish_flush(plan)

    def _plan_flush(self, sync_active_index: bool) -> _FlushPlan:
        """Under the lock: write pending index entries and choose what to fsync.

        Only files with bytes not yet fsynced are chosen. An active segment without index
        entries (less than one index interval plus one batch) gets no index files at a
        clean close: creating two files per partition cost ~1 ms here, and the next open
        re-reads such a small segment whole instead (`Segment.load_sealed`)."""
        with self._lock:
            self._check_online()
            if self._fsync_failed is not None:
                raise StorageError(
                    f"partition log {self.directory.name} is not flushed: {self._fsync_failed}"
                    " (appends resume once fsync works again)"
                )
            plan = _FlushPlan(self.log_end_offset)
            active = self._segments[-1]
            index_active = sync_active_index and (
                len(active.index) > 0 or len(active.time_index) > 0
            )
            if index_active:
                active.complete_time_index()
            # Only segments past the clean prefix can have anything to write or fsync: a
            # long log's sealed segments are not walked again on every group commit.
            txn_created = False
            for segment in self._segments[self._clean_prefix :]:
                txn_write = segment.txn.pending()
                if txn_write is not None:
                    _pwrite_file(segment.txnindex_path, *txn_write)
                    segment.txn.persisted = len(segment.txn)
                    txn_created = txn_created or txn_write[0] == 0  # maybe a new file
                sync_txn = segment.txn.synced < segment.txn.persisted
                if sync_txn:
                    plan.paths.append(segment.txnindex_path)
                index_writes = segment.pending_index_bytes()
                for path, position, data in index_writes:
                    _pwrite_file(path, position, data)
                segment.mark_index_persisted()
                if index_writes:  # written, not yet fsynced: a sealed one must be again
                    segment.indexes_synced = False
                wanted = segment.sealed or (index_active and segment is active)
                sync_indexes = wanted and not segment.indexes_synced
                if sync_indexes:  # an index with no entries is still a file: "empty", not "lost"
                    _pwrite_file(segment.index_path, 0, b"")
                    _pwrite_file(segment.timeindex_path, 0, b"")
                    plan.paths += (segment.index_path, segment.timeindex_path)
                if segment.synced_size < segment.size:
                    plan.paths.append(segment.log_path)
                if segment.synced_size < segment.size or sync_indexes or sync_txn:
                    plan.segments.append(
                        (segment, segment.size, sync_indexes, segment.txn.persisted)
                    )
            self._txn_dirty = False
            if self._dir_dirty or txn_created:
                plan.paths.append(str(self.directory))
                self._dir_dirty = False
            if self._parent_dirty:  # a new partition: its directory's entry in the data dir
                plan.paths.append(str(self.directory.parent))
                self._parent_dirty = False
        return plan

    def _finish_flush(self, plan: _FlushPlan) -> int:
        """Record what `plan`'s fsyncs made durable; returns the new recovery point."""
        with self._lock:
            for segment, size, synced_indexes, txn_entries in plan.segments:
                segment.synced_size = max(segment.synced_size, size)
                segment.indexes_synced = segment.indexes_synced or synced_indexes
                txn = segment.txn  # a truncation meanwhile may have dropped entries
                txn.synced = min(max(txn.synced, txn_entries), txn.persisted)
            segments, clean = self._segments, self._clean_prefix
            while clean < len(segments) and segments[clean].durable_and_sealed:
                clean += 1
            self._clean_prefix = clean
            self._flushed = max(self._flushed, min(plan.target, self.log_end_offset))
        return self._flushed

    def _flush_failed(self, plan: _FlushPlan, exc: OSError) -> StorageError:
        """`plan`'s fsyncs failed (any thread): see the module docstring."""
        with self._lock:
            if self._fsync_failed is None:
                log.error(
                    "partition log %s: fsync failed (%s): offsets from %d on are not durable "
                    "and will be rolled back; appends wait until fsync works again",
                    self.directory, exc, self._flushed,
                )  # fmt: skip
            self._fsync_failed = f"fsync failed: {exc}"
            # What this plan would have made durable must be written and fsynced again.
            if str(self.directory) in plan.paths:
                self._dir_dirty = True
            if str(self.directory.parent) in plan.paths:
                self._parent_dirty = True
            for segment, _size, _indexes, txn_entries in plan.segments:
                segment.index.persisted = segment.time_index.persisted = 0
                segment.indexes_synced = False
                if txn_entries:
                    segment.txn.persisted = segment.txn.synced = 0
                    self._txn_dirty = True
            self._clean_prefix = 0
        return StorageError(f"fsync failed for {self.directory.name}: {exc}")

    def roll_back_unsynced(self) -> int:
        """After a failed fsync, on the owner thread: drop every offset from
        `flushed_offset` on (written, never fsynced); returns how many were dropped."""
        if self._fsync_failed is None:
            return 0
        dropped = self.log_end_offset - self._flushed
        if dropped > 0:
            self.truncate_to(self._flushed)
            self.rollbacks += 1
            log.warning(
                "partition log %s: %d offsets written after the last good fsync rolled back "
                "(the log ends at %d again)",
                self.directory, dropped, self.log_end_offset,
            )  # fmt: skip
        return max(dropped, 0)

    def probe_fsync(self) -> bool:
        """After a failed fsync and its rollback: whether fsync works again (an fsync of the
        active segment and the directory, at most once per `FSYNC_PROBE_INTERVAL_MS`).
        True clears `fsync_failed`: appends and flushes go on."""
        if self._fsync_failed is None:
            return True
        now = self._clock()
        if now < self._next_probe_ms:
            return False
        self._next_probe_ms = now + FSYNC_PROBE_INTERVAL_MS
        try:
            _fsync_path(self._segments[-1].log_path)
            _fsync_path(str(self.directory))
        except OSError as exc:
            log.debug("partition log %s: fsync still fails: %s", self.directory, exc)
            return False
        with self._lock:
            self._fsync_failed = None
        log.warning("partition log %s: fsync works again; appends resume", self.directory)
        return True

    def close(self) -> None:
        """Flush everything, indexes included, and release file handles."""
        if self._fsync_failed is not None:
            self.roll_back_unsynced()
            self.probe_fsync()
        if not self._offline:
            self.flush(sync_active_index=True)
        for segment in self._segments:
            self._handles.forget(segment.log_path)

    # --- opening ----------------------------------------------------------------------

    def _open(self, recovery_point: int, clean_shutdown: bool, log_start_offset: int) -> None:
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True)
            self._parent_dirty = True
        bases, with_txn = _segment_bases(self.directory)
        if not bases:
            segment = self._new_segment(log_start_offset)
            segment.create_file()
            self._set_segments([segment])
            self._log_start = self._flushed = log_start_offset
            self._dir_dirty = True
            return
        self._lost = read_lost_ranges(self.directory)
        segments = [
            Segment(self.directory, b, self._handles, self.config.index_interval_bytes)
            for b in bases
        ]
        self._set_segments(segments)
        self._log_start = log_start_offset  # for now: damage wholly below it is not reported
        if clean_shutdown:
            first_to_recover = len(segments)
        else:
            first_to_recover = max(bisect_right(bases, recovery_point) - 1, 0)
        problem = self._load(segments, first_to_recover, recovery_point)
        if problem is None and self._segments[-1].next_offset < recovery_point:
            problem = (
                f"the log ends at {self._segments[-1].next_offset}, below its recovery point "
                f"{recovery_point}: flushed data is missing"
            )
        if problem is not None:
            self._go_offline(problem)  # its `.txnindex` files are left as they are
        else:
            self._load_txn_indexes(with_txn)
        self._segments[-1].sealed = False
        end = self.log_end_offset
        self._log_start = min(max(log_start_offset, self._segments[0].base_offset), end)
        self._flushed = end if clean_shutdown else max(min(recovery_point, end), self._log_start)
        self._forget_damage_outside()

    def _load(
        self, segments: list[Segment], first_to_recover: int, recovery_point: int
    ) -> str | None:
        """Open every segment; returns why the log must go offline, or None.

        A segment whose valid bytes stop below the recovery point is damaged: its damage
        runs to the next segment's base, recorded when that segment is reached (or by
        `_damaged_tail` for the last one)."""
        damaged: str | None = None  # what is wrong at the end of the previous segment's prefix
        for i, segment in enumerate(segments):
            segment.created_ms = int(os.stat(segment.log_path).st_mtime * 1000)
            if i > 0:
                previous = segments[i - 1]
                if damaged is None and segment.base_offset < previous.next_offset:
                    # `previous` claims offsets this segment starts before: a segment was
                    # rolled past damage in it (`_damaged_tail`, `_revalidate`) that an
                    # open trusting its indexes does not see. Find where it really stops.
                    damaged = previous.rescan()
                if damaged is not None and segment.base_offset > previous.next_offset:
                    self._add_damage(_damage_of(previous, segment.base_offset, damaged))
                elif segment.base_offset != previous.next_offset and not covered(
                    self._lost, previous.next_offset, segment.base_offset
                ):
                    return self._gap(segments, i, recovery_point)
                damaged = None
            if i < first_to_recover:
                damaged = segment.load_sealed(active=i == len(segments) - 1)
                continue
            damaged = segment.recover()
            if i < len(segments) - 1:
                segment.seal()
            if damaged is not None and segment.next_offset >= recovery_point:
                self._torn_tail(segments, i, damaged)
                return None
        if damaged is not None:
            self._damaged_tail(segments[-1], damaged, recovery_point)
        return None

    def _load_txn_indexes(self, with_txn: set[int]) -> None:
        """Read the `.txnindex` of the segments that have one (`with_txn`: base offsets,
        from the directory listing, so the usual segment without costs no system call),
        once the segments are final. A segment holds the markers up to where the next one
        starts (past its valid bytes when it is damaged: those offsets are refused, but an
        abort there still concerns the records around them); the last one up to the log
        end."""
        segments = self._segments
        for i, segment in enumerate(segments):
            if segment.base_offset not in with_txn:
                continue
            end = segments[i + 1].base_offset if i + 1 < len(segments) else segment.next_offset
            problem = segment.load_txn_index(end)
            if problem is not None:
                self.txn_index_dropped = True
                log.warning(
                    "partition log %s: dropped the damaged %s (%s); the broker rebuilds "
                    "its aborted transactions from the log",
                    self.directory, segment.txnindex_path, problem,
                )  # fmt: skip

    def _gap(self, segments: list[Segment], i: int, recovery_point: int) -> str | None:
        """Segment `i` does not start where its predecessor ends. Above the recovery point
        that is the predecessor's torn tail (files are written back in any order): drop
        segment `i` and everything after it. Below, flushed data is missing with nothing
        left to say what it was: the log goes offline until an operator decides (`weirmq
        storage repair` records the gap as given up)."""
        end = segments[i - 1].next_offset
        if end < recovery_point:
            return (
                f"gap: segment {segments[i].base_offset} follows one ending at {end}, below "
                f"the recovery point {recovery_point} (see `weirmq storage verify`)"
            )
        log.warning(
            "recovery: dropping segments from %d on after a torn tail at %d",
            segments[i].base_offset,
            end,
        )
        for s in segments[i:]:
            s.delete_files()
        self._set_segments(segments[:i])
        self._dir_dirty = True
        return None

    def _torn_tail(self, segments: list[Segment], i: int, problem: str) -> None:
        """Cut the torn tail (at or above the recovery point) off segment `i`, and drop
        every later segment."""
        segment = segments[i]
        where = f"{segment.log_path} at position {segment.size} (offset {segment.next_offset})"
        later = segments[i + 1 :]
        file_size = os.path.getsize(segment.log_path)
        log.warning(
            "recovery: cutting a torn tail of %d bytes off %s (%s)",
            file_size - segment.size,
            where,
            problem,
        )
        os.truncate(segment.log_path, segment.size)
        for s in later:
            s.delete_files()
        self._set_segments(segments[: i + 1])
        self._dir_dirty = True

    def _damaged_tail(self, segment: Segment, problem: str, recovery_point: int) -> None:
        """The last segment's valid bytes stop at `segment.next_offset`. Below the recovery
        point, flushed offsets up to it are damaged: the segment is sealed as it is and a
        new active segment starts at the recovery point, so appends go on and no offset
        that was ever acknowledged is handed out again. At or above it (a clean shutdown
        that vouched for less than the file holds), it is a torn tail."""
        if segment.next_offset >= recovery_point:
            self._torn_tail(self._segments, len(self._segments) - 1, problem)
            return
        self._add_damage(_damage_of(segment, recovery_point, problem))
        segment.seal()
        new = self._new_segment(recovery_point)
        new.create_file()
        self._set_segments([*self._segments, new])
        self._dir_dirty = True


def _damage_of(segment: Segment, end_offset: int, problem: str) -> Damage:
    """The damage after `segment`'s valid prefix, up to `end_offset`."""
    return Damage(segment.next_offset, end_offset, segment.log_path, segment.size, problem)


@dataclass(slots=True)
class _FlushPlan:
    """One log's flush: planned under its lock, fsynced outside it, then recorded."""

    target: int
    """The log end when planned: the recovery point once the fsyncs succeed."""
    segments: list[tuple[Segment, int, bool, int]] = field(default_factory=list)
    """(segment, its size when planned, whether its index files are fsynced too, how many
    aborted-transaction entries its `.txnindex` holds once fsynced)."""
    paths: list[str] = field(default_factory=list)
    """Files to fsync, then the directory when segments were created or deleted."""


def flush_logs(
    logs: Iterable[FileLog], *, sync_active_index: bool = False
) -> dict[FileLog, Exception]:
    """Flush many logs in one pass: every log's index entries written and files chosen,
    then all their fsyncs at once (`fsync.fsync_all`), then each recovery point advanced.

    Returns the logs that failed, with the error. As with `FileLog.flush`, a log whose
    fsync failed stops flushing until its owner rolls it back; an offline log, or one
    waiting for that, is skipped with its error."""
    plans: list[tuple[FileLog, _FlushPlan]] = []
    failed: dict[FileLog, Exception] = {}
    for log_ in logs:
        try:
            plans.append((log_, log_._plan_flush(sync_active_index)))
        except (StorageError, OSError) as exc:
            failed[log_] = exc
    # Looked up here, not bound at import: tests replace `_fsync_path` to fail fsyncs.
    # New partitions share their parent directory: it is fsynced once for all of them.
    paths = list(dict.fromkeys(path for _, plan in plans for path in plan.paths))
    errors = fsync_all(paths, _fsync_path)
    for log_, plan in plans:
        error = next((errors[path] for path in plan.paths if path in errors), None)
        if error is None:
            log_._finish_flush(plan)
        else:
            failed[log_] = log_._flush_failed(plan, error)
    return failed


def _segment_bases(directory: Path) -> tuple[list[int], set[int]]:
    """Base offsets of the segments in `directory`, and of those with a `.txnindex`,
    clearing leftovers of interrupted work."""
    finish_swaps(directory)
    bases = []
    logs = set()
    with_txn = set()
    for entry in os.scandir(directory):
        stem, _, suffix = entry.name.partition(".")
        if entry.name.endswith(".tmp"):
            os.unlink(entry.path)
        elif suffix == "log" and len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
            logs.add(stem)
    for entry in os.scandir(directory):
        stem, _, suffix = entry.name.partition(".")
        if suffix in ("index", "timeindex", TXN_SUFFIX[1:]) and stem not in logs:
            os.unlink(entry.path)  # an index whose log is gone (deletion interrupted)
        elif "." + suffix == TXN_SUFFIX:
            with_txn.add(int(stem))
    return sorted(bases), with_txn


CLEANED_SUFFIX = ".log.cleaned"
SWAP_SUFFIX = ".log.swap"
DELETED_LOG_SUFFIX = ".deleted"  # after ".log": a segment a swap replaced


def _merged_txn(olds: Sequence[Segment]) -> TxnIndex:
    """The aborted-transaction index of the rewrite of `olds` (see `swap_cleaned`): the
    first's, kept with its file as it is, unless a later one has entries; then all of
    theirs (adjacent segments: already in order), written whole to the first's file."""
    if not any(len(old.txn) for old in olds[1:]):
        return olds[0].txn
    entries = [entry for old in olds for entry in old.txn.entries]
    write_file(olds[0].txnindex_path, entries)
    return TxnIndex(entries, on_disk=True)


def pending_swaps(directory: Path) -> list[str]:
    """The names of the files a cleaner's swap interrupted by a crash left in `directory`,
    which `finish_swaps` finishes or rolls back (empty when none)."""
    suffixes = (CLEANED_SUFFIX, SWAP_SUFFIX, ".log" + DELETED_LOG_SUFFIX)
    return sorted(e.name for e in os.scandir(directory) if e.name.endswith(suffixes))


def finish_swaps(directory: Path) -> None:
    """Finish or roll back the cleaner's swaps that a crash interrupted (see cleaner.py
    and `FileLog.swap_cleaned`).

    - `N.log.cleaned`: still being written; deleted (the old segments stay).
    - `N.log.swap`: whole and fsynced, holding exactly the offsets of the segments it
      replaces, from N to where it ends (found by scanning it): the `.txnindex` entries of
      the segments after N are merged into `N.txnindex` (again, if the crash came after
      `swap_cleaned` did it: a merge keeps each entry once), the index files of those
      segments and the `.log` and `.txnindex` files after N are deleted, then it is
      renamed over `N.log`.
      If `N.log` is gone (retention deleted it), or the file does not scan whole, it is
      deleted instead and segments already renamed `.log.deleted` get their names back.
    - `.log.deleted` files left over once no swap is pending: deleted (the swap was done).
    """
    entries = {entry.name: entry.path for entry in os.scandir(directory)}
    for name, path in sorted(entries.items()):
        stem, _, suffix = name.partition(".")
        if len(stem) != 20 or not stem.isdigit():
            continue
        if "." + suffix == CLEANED_SUFFIX:
            os.unlink(path)
        elif "." + suffix == SWAP_SUFFIX:
            _finish_swap(directory, int(stem), path)
    for entry in os.scandir(directory):
        if entry.name.endswith(".log" + DELETED_LOG_SUFFIX):
            os.unlink(entry.path)


def _finish_swap(directory: Path, base: int, swap_path: str) -> None:
    target = directory / f"{segment_name(base)}.log"
    fd = os.open(swap_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        scan = scan_file(fd, base, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    if not target.exists() or scan.problem is not None:
        for entry in os.scandir(directory):
            if entry.name.endswith(".log" + DELETED_LOG_SUFFIX):
                os.rename(entry.path, entry.path.removesuffix(DELETED_LOG_SUFFIX))
        os.unlink(swap_path)
        log.warning("recovery: rolled back the cleaner's swap of %s", target)
        return
    _merge_txn_files(directory, base, scan.next_offset)
    for entry in os.scandir(directory):
        stem, _, suffix = entry.name.partition(".")
        if len(stem) != 20 or not stem.isdigit() or not base <= int(stem) < scan.next_offset:
            continue
        later = int(stem) != base
        if suffix in ("index", "timeindex") or (later and suffix in ("log", TXN_SUFFIX[1:])):
            os.unlink(entry.path)
    os.rename(swap_path, target)
    log.warning("recovery: finished the cleaner's swap of %s", target)
    _fsync_path(str(directory))


def _merge_txn_files(directory: Path, base: int, end: int) -> None:
    """Merge the `.txnindex` files of the segments in (base, end) into `base`'s, fsynced;
    a damaged one gives nothing (the broker rebuilds its entries from the log)."""
    later = sorted(
        entry.path
        for entry in os.scandir(directory)
        if entry.name.endswith(TXN_SUFFIX)
        and entry.name[:20].isdigit()
        and base < int(entry.name[:20]) < end
    )
    if not later:
        return
    own = directory / f"{segment_name(base)}{TXN_SUFFIX}"
    runs = []
    for path in (str(own), *later):
        found = read_file(path)
        if isinstance(found, str):
            log.warning("recovery: dropped the damaged %s (%s)", path, found)
        runs.append(found if isinstance(found, list) else [])
    write_file(str(own), merged(*runs))


_RECORDS_COUNT_AT = 57
_EMPTY_CHECK = struct.Struct(">qiibIhi")  # baseOffset .. lastOffsetDelta


def _without_leading_empty_batches(records: memoryview) -> tuple[memoryview, int]:
    """`records` from its first batch holding a record, and the offset after the last
    batch looked at. Compaction leaves batches with no record (cleaner.py: fillers over
    removed offsets, a producer's last batch), and librdkafka reports a fetch whose
    records start with only such batches as a message too large to fetch; Kafka's own
    reads go past removed offsets to the next batch with data, which is what this does
    (all empty: the caller reads on from the offset returned)."""
    position = after = 0
    while position + HEADER_BYTES <= len(records):
        if int.from_bytes(records[position + _RECORDS_COUNT_AT : position + HEADER_BYTES]):
            return (records[position:] if position else records), -1
        base, length, _epoch, _magic, _crc, _attributes, delta = _EMPTY_CHECK.unpack_from(
            records, position
        )
        after = base + delta + 1
        position += 12 + length
    return records[len(records) :], after


def _pwrite_file(path: str, position: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, position)
            view, position = view[n:], position + n
    finally:
        os.close(fd)


def _fsync_path(path: str) -> None:
    """fsync through a fresh descriptor (any descriptor of a file syncs all its data)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # deleted meanwhile (retention): nothing left to make durable
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
