"""One log segment: a `.log` file of record batches plus its indexes.

A segment is named by its base offset (`{base_offset:020d}.log`, `.index`, `.timeindex`,
and `.txnindex` once an aborted transaction's marker lands in it) and holds a contiguous
run of batches, stored byte for byte as the producer sent them with offsets assigned.
Only the last segment of a log (the active one) is appended to; the others are sealed.

What is kept in memory per segment is small: sizes, offsets, the largest timestamp, the
two sparse index arrays (one entry per `index.interval.bytes`) and the aborted
transactions whose markers it holds (txnindex.py). File descriptors come from the shared
`HandleCache`, so a segment holds none of its own.

The offset and time indexes are derived from the log and rebuilt whenever in doubt
(`recover` resets them). The aborted-transaction index is not: recovery keeps it, and
only a truncation (`truncate_to`, or the open's cut of a torn tail through
`load_txn_index`) drops the entries whose marker it removed.

Reading never parses records: the offset index gives a batch boundary at or before the
target, a forward walk over batch headers finds the batch containing it, and whole
batches are returned up to `max_bytes` (the first one always whole). Every batch served
is CRC-checked first; a mismatch raises `CorruptDataError`, and the log re-validates the
segment (`rescan`) and refuses the damaged range from then on rather than serve it
(damage.py).

Recovery (`recover`) re-reads the whole file, validating framing, magic, CRC and offset
contiguity batch by batch, rebuilding both indexes, and stops at the first bad byte; the
log decides whether that is a torn tail to cut off or a damaged range to refuse.
`scan_file` is the same scan over any file, for `weirmq storage verify`, which must not
change what it checks.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..records import checksum
from ..records.batch import (
    HEADER_BYTES,
    MAGIC,
    BatchHeader,
    check_batch,
    crc_ok,
    parse_header,
    record_timestamps,
)
from .append import StoredBatch
from .errors import StorageError
from .handles import HandleCache
from .index import OffsetIndex, TimeIndex
from .interface import TimestampOffset
from .policy import RELATIVE_OFFSET_MAX
from .txnindex import ENTRY_BYTES as TXN_ENTRY_BYTES
from .txnindex import SUFFIX as TXN_SUFFIX
from .txnindex import AbortedTxn, TxnIndex, read_file

SCAN_CHUNK_BYTES = 8 * 1024 * 1024
_NO_INDEX_BYTES = 1 << 62  # an index interval no file reaches: `scan_file` builds no index
_IOV_MAX = 1024  # Linux's limit on buffers per pwritev (sysconf SC_IOV_MAX)


class CorruptDataError(StorageError):
    """A segment holds bytes that fail validation where valid data must be."""


@dataclass(frozen=True, slots=True)
class FileScan:
    """What the recovery scan found in one segment file (`scan_file`)."""

    valid_bytes: int
    """The size of the valid prefix: where the first bad batch starts, or the file size."""
    next_offset: int
    """The offset after the last valid batch."""
    max_timestamp: int
    """The largest maxTimestamp of the valid batches (-1 if none)."""
    problem: str | None
    """What is wrong at `valid_bytes`, or None when every byte is a valid batch."""


def scan_file(fd: int, base_offset: int, file_size: int) -> FileScan:
    """Validate a segment file's first `file_size` bytes as recovery does (framing, magic,
    CRC, contiguous offsets from `base_offset`), reading only."""
    scan = _Validation(base_offset, _NO_INDEX_BYTES, OffsetIndex(), TimeIndex())
    problem = scan.run(fd, file_size)
    return FileScan(scan.size, scan.next_offset, scan.max_timestamp, problem)


@dataclass(frozen=True, slots=True)
class IndexedScan:
    """A whole, valid segment file scanned with its indexes built (`scan_indexed`): what a
    segment rewritten off the owner's thread (the cleaner) is installed with."""

    size: int
    next_offset: int
    max_timestamp: int
    max_timestamp_offset: int
    bytes_since_index: int
    index: OffsetIndex
    time_index: TimeIndex


def scan_indexed(fd: int, base_offset: int, file_size: int, interval: int) -> IndexedScan:
    """Validate a whole segment file as recovery does and build its indexes; raises
    `CorruptDataError` if any byte is not a valid batch."""
    scan = _Validation(base_offset, interval, OffsetIndex(), TimeIndex())
    problem = scan.run(fd, file_size)
    if problem is not None:
        raise CorruptDataError(f"segment {base_offset}: {problem}")
    return IndexedScan(
        scan.size,
        scan.next_offset,
        scan.max_timestamp,
        scan.max_timestamp_offset,
        scan.bytes_since_index,
        scan.index,
        scan.times,
    )


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    __slots__ = (
        "_bytes_since_index",
        "_handles",
        "_index_interval_bytes",
        "base_offset",
        "created_ms",
        "index",
        "index_path",
        "indexes_synced",
        "log_path",
        "max_timestamp",
        "max_timestamp_offset",
        "next_offset",
        "sealed",
        "size",
        "synced_size",
        "time_index",
        "timeindex_path",
        "txn",
        "txnindex_path",
    )

    def __init__(
        self, directory: Path, base_offset: int, handles: HandleCache, index_interval_bytes: int
    ) -> None:
        name = segment_name(base_offset)
        self.base_offset = base_offset
        self.log_path = str(directory / f"{name}.log")
        self.index_path = str(directory / f"{name}.index")
        self.timeindex_path = str(directory / f"{name}.timeindex")
        self.txnindex_path = str(directory / f"{name}{TXN_SUFFIX}")
        self.txn = TxnIndex()  # not in `_reset`: recovery cannot rebuild it (module docstring)
        self._handles = handles
        self._index_interval_bytes = index_interval_bytes
        self.created_ms = 0  # the broker's clock when created (or file mtime when loaded)
        self._reset()

    def _reset(self) -> None:
        self.size = 0
        self.synced_size = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.max_timestamp_offset = self.base_offset
        self.index = OffsetIndex()
        self.time_index = TimeIndex()
        self._bytes_since_index = 0
        self.sealed = False
        self.indexes_synced = False  # both index files complete and fsynced (sealed only)

    def __repr__(self) -> str:
        return f"Segment({self.base_offset}..{self.next_offset}, {self.size} B)"

    @property
    def index_interval(self) -> int:
        return self._index_interval_bytes

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    # --- writing ----------------------------------------------------------------------

    def create_file(self) -> None:
        self._handles.get(self.log_path)

    def append(
        self, parts: Sequence[bytes | memoryview], size: int, batches: Sequence[StoredBatch]
    ) -> None:
        """Write prepared batches (`parts`, `size` bytes in all) at the end; on failure the
        file is cut back, then raises."""
        fd = self._handles.get(self.log_path)
        start = self.size
        try:
            _write_all(fd, parts, start)
        except OSError:
            # If even this fails, the size we track stays at `start`: the garbage is never read.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
        for batch in batches:
            self._track(
                start + batch.position,
                batch.base_offset,
                batch.last_offset,
                batch.size,
                batch.max_timestamp,
            )
        self.size = start + size

    def _track(self, position: int, base: int, last: int, size: int, max_ts: int) -> None:
        """Index bookkeeping for one batch now at `position`."""
        if self._bytes_since_index >= self._index_interval_bytes and position > 0:
            self.index.append(base - self.base_offset, position)
            self.time_index.maybe_append(
                self.max_timestamp, self.max_timestamp_offset - self.base_offset
            )
            self._bytes_since_index = 0
        self._bytes_since_index += size
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.max_timestamp_offset = base
        self.next_offset = last + 1

    def install(self, scan: IndexedScan) -> None:
        """Take the state of a durable, sealed file scanned by `scan_indexed` (a cleaned
        segment swapped in): its index files are written and fsynced by the next flush."""
        self._reset()
        self.size = self.synced_size = scan.size
        self.next_offset = scan.next_offset
        self.max_timestamp = scan.max_timestamp
        self.max_timestamp_offset = scan.max_timestamp_offset
        self._bytes_since_index = scan.bytes_since_index
        self.index, self.time_index = scan.index, scan.time_index
        self.seal()

    def seal(self) -> None:
        """No more appends; the time index gets a last entry naming the segment's maximum."""
        self.sealed = True
        self.complete_time_index()

    def complete_time_index(self) -> None:
        """Make the time index's last entry the segment's maximum (a clean open reads the
        maximum from there)."""
        if self.size:
            self.time_index.maybe_append(
                self.max_timestamp, self.max_timestamp_offset - self.base_offset
            )

    @property
    def durable_and_sealed(self) -> bool:
        """Sealed, and everything in it fsynced: the data, every index entry, both index
        files. Only a truncation (which unseals it) can change that."""
        return (
            self.sealed
            and self.indexes_synced
            and self.synced_size >= self.size
            and len(self.index) == self.index.persisted
            and len(self.time_index) == self.time_index.persisted
            and self.txn.synced == len(self.txn)
        )

    def pending_index_bytes(self) -> list[tuple[str, int, bytes]]:
        """(path, file position, bytes) of index entries not yet written to the files."""
        out = []
        if len(self.index) > self.index.persisted:
            out.append(
                (self.index_path, self.index.persisted * 8, self.index.encode(self.index.persisted))
            )
        if len(self.time_index) > self.time_index.persisted:
            out.append(
                (
                    self.timeindex_path,
                    self.time_index.persisted * 12,
                    self.time_index.encode(self.time_index.persisted),
                )
            )
        return out

    def mark_index_persisted(self) -> None:
        self.index.persisted = len(self.index)
        self.time_index.persisted = len(self.time_index)

    def delete_files(self) -> None:
        """The `.txnindex` goes first, so that no crash leaves aborts without their segment
        (an open would delete such a file too, as an index whose log is gone)."""
        self._handles.forget(self.log_path)
        for path in (self.txnindex_path, self.log_path, self.index_path, self.timeindex_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    # --- reading ----------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> memoryview:
        """Whole batches from the one containing `offset`, CRC-checked; empty if past the end."""
        if offset >= self.next_offset:
            return memoryview(b"")
        fd = self._handles.get(self.log_path)
        position = self.index.lookup(offset - self.base_offset)
        end = self.size
        want = min(end - position, max(max_bytes, HEADER_BYTES) + 2 * self._index_interval_bytes)
        buf = _pread(fd, want, position, self.log_path)
        # Walk the headers to the batch containing `offset`; skipped batches need no CRC.
        p = 0
        while True:
            buf = _ensure(fd, buf, position, p + HEADER_BYTES, end, self.log_path)
            header = _checked(buf, p, self.log_path, position, crc=False)
            if header.last_offset >= offset:
                break
            p += header.size
        # baseOffset is outside the CRC: check it against what the offsets must be.
        if header.base_offset > offset or header.base_offset < self.base_offset:
            raise CorruptDataError(
                f"{self.log_path}: batch at {position + p} has base offset "
                f"{header.base_offset}, which cannot contain offset {offset}"
            )
        first = p
        buf = _ensure(fd, buf, position, p + header.size, end, self.log_path)
        _checked(buf, p, self.log_path, position)
        p += header.size
        expected = header.last_offset + 1
        # Add whole batches while they fit in max_bytes and are already in the buffer.
        while p + HEADER_BYTES <= len(buf):
            header = _checked(buf, p, self.log_path, position, crc=False)
            if p + header.size - first > max_bytes or p + header.size > len(buf):
                break
            if not crc_ok(buf, p, header.size):
                raise CorruptDataError(f"{self.log_path}: CRC mismatch at {position + p}")
            if header.base_offset != expected:
                raise CorruptDataError(
                    f"{self.log_path}: batch at {position + p} has base offset "
                    f"{header.base_offset}, expected {expected}"
                )
            expected = header.last_offset + 1
            p += header.size
        return memoryview(buf)[first:p]

    def batches_from(self, position: int) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """(position, header, bytes) of validated batches from `position` to the end."""
        fd = self._handles.get(self.log_path)
        for pos, checked, view in _scan(fd, position, self.size):
            if isinstance(checked, str):
                raise CorruptDataError(f"{self.log_path}: {checked}")
            yield pos, checked, view

    def find_timestamp(self, timestamp_ms: int, min_offset: int) -> TimestampOffset | None:
        """The first record at or above `min_offset` with a timestamp >= `timestamp_ms`."""
        if self.max_timestamp < timestamp_ms:
            return None
        relative = self.time_index.lookup_before(timestamp_ms)
        position = self.index.lookup(relative)
        for _pos, header, view in self.batches_from(position):
            if header.max_timestamp < timestamp_ms or header.last_offset < min_offset:
                continue
            for offset, ts in record_timestamps(view):
                if ts >= timestamp_ms and offset >= min_offset:
                    return TimestampOffset(offset, ts)
        return None

    def truncate_to(self, offset: int) -> None:
        """Cut the file before the batch containing `offset` (a batch is never split)."""
        position = self.index.lookup(offset - self.base_offset)
        cut = self.size
        for pos, header, _view in self.batches_from(position):
            if header.last_offset >= offset:
                cut = pos
                break
        fd = self._handles.get(self.log_path)
        os.ftruncate(fd, cut)
        synced = min(self.synced_size, cut)
        problem = self.recover()
        assert problem is None, problem
        self.synced_size = synced
        # Index files may hold entries past the cut: rewrite them whole at the next flush.
        for path in (self.index_path, self.timeindex_path):
            with contextlib.suppress(FileNotFoundError):
                os.truncate(path, 0)
        self.index.persisted = self.time_index.persisted = 0
        self.indexes_synced = False
        self.truncate_txn(self.next_offset)

    # --- aborted transactions (txnindex.py) -------------------------------------------

    def append_aborted_txn(self, entry: AbortedTxn) -> bool:
        """Index an aborted transaction whose marker this segment holds; False when it is
        already indexed. The file is written by the log's next flush."""
        if not self.base_offset <= entry.last_offset < self.next_offset:
            raise AssertionError(
                f"aborted transaction {entry}: segment {self.base_offset} holds offsets "
                f"{self.base_offset}..{self.next_offset - 1}, not its marker"
            )
        return self.txn.append(entry)

    def truncate_txn(self, end_offset: int) -> None:
        """Drop the entries whose marker is at or after `end_offset`, from memory and file
        (cut to the entries kept; deleted when none is, as a segment without aborts has no
        file)."""
        before = len(self.txn)
        kept = self.txn.truncate(end_offset)
        if kept == before:
            return
        # Cut to what is known to be written (after a failed fsync, `persisted` is 0 while
        # the file still holds entries, some of them maybe dropped now).
        with contextlib.suppress(FileNotFoundError):
            if kept == 0:
                os.unlink(self.txnindex_path)
            elif os.path.getsize(self.txnindex_path) > self.txn.persisted * TXN_ENTRY_BYTES:
                os.truncate(self.txnindex_path, self.txn.persisted * TXN_ENTRY_BYTES)

    def load_txn_index(self, end_offset: int) -> str | None:
        """Read the `.txnindex` file at open, keeping the entries whose marker is below
        `end_offset` (where the next segment starts, or the log ends: a torn tail was cut,
        or the file was written back before the log's last bytes). A damaged file is
        deleted: returns what was wrong with it, for the log to warn."""
        found = read_file(self.txnindex_path)
        if found is None:
            self.txn = TxnIndex()
            return None
        if isinstance(found, list) and found and found[0].last_offset < self.base_offset:
            found = f"entry 0 names offset {found[0].last_offset}, below the segment's base"
        if isinstance(found, str):
            self.txn = TxnIndex()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.txnindex_path)
            return found
        self.txn = TxnIndex(found, on_disk=True)
        self.truncate_txn(end_offset)
        return None

    # --- opening and recovery ---------------------------------------------------------

    def recover(self) -> str | None:
        """Re-validate the whole file and rebuild both indexes.

        Returns None when every byte is a valid batch, else what is wrong at `self.size`
        (the end of the valid prefix, which is what the segment now describes).
        """
        self._reset()
        fd = self._handles.get(self.log_path)
        interval = self._index_interval_bytes
        scan = _Validation(self.base_offset, interval, self.index, self.time_index)
        problem = scan.run(fd, os.fstat(fd).st_size)
        self.size = scan.size
        self.next_offset = scan.next_offset
        self.max_timestamp = scan.max_timestamp
        self.max_timestamp_offset = scan.max_timestamp_offset
        self._bytes_since_index = scan.bytes_since_index
        return problem

    def rescan(self) -> str | None:
        """Re-validate a segment that failed a check while being served, then seal it.

        As `recover`, but what was fsynced stays known as fsynced (an active segment's
        unsynced bytes must still be flushed). The index files are emptied: they may name
        batches past the valid prefix, and the next flush writes them again whole."""
        synced = self.synced_size
        problem = self.recover()
        self.synced_size = min(synced, self.size)
        for path in (self.index_path, self.timeindex_path):
            with contextlib.suppress(FileNotFoundError):
                os.truncate(path, 0)
        self.seal()
        return problem

    def load_sealed(self, *, active: bool = False) -> str | None:
        """Open a segment whose bytes are durable (below the recovery point, or any after a
        clean shutdown; `active`: the last one, appended to next): trust its indexes if they
        pass a sanity check (their last entries agree with the log), else rebuild them by
        `recover` (`_rebuild_durable`)."""
        self._reset()
        fd = self._handles.get(self.log_path)
        file_size = os.fstat(fd).st_size
        index = OffsetIndex.decode(_read_file(self.index_path))
        time_index = TimeIndex.decode(_read_file(self.timeindex_path))
        tail = None
        if index is not None and time_index is not None and file_size > 0:
            tail = self._scan_tail(fd, index, file_size)
        if tail is None or time_index is None or not time_index.timestamps:
            return self._rebuild_durable(active)
        assert index is not None
        next_offset, tail_max_ts, tail_max_ts_offset = tail
        self.index, self.time_index = index, time_index
        self.size = self.synced_size = file_size
        self.next_offset = next_offset
        self.max_timestamp = time_index.timestamps[-1]
        self.max_timestamp_offset = self.base_offset + time_index.offsets[-1]
        if self.max_timestamp_offset >= next_offset:
            return self._rebuild_durable(active)
        self.sealed = self.indexes_synced = True
        if tail_max_ts > self.max_timestamp:
            # The entry `seal` adds for the maximum had not reached the disk (the segment
            # was flushed before it rolled): the batches after the last index entry say it.
            self.max_timestamp, self.max_timestamp_offset = tail_max_ts, tail_max_ts_offset
            self.complete_time_index()
            self.indexes_synced = False
        return None

    def _rebuild_durable(self, active: bool) -> str | None:
        """`recover` a segment whose bytes are already durable, so none is fsynced again.
        A sealed segment gets the final time-index entry `seal` adds. The active one does
        not: it gets index files only once it has an offset-index entry (see
        `FileLog._plan_flush`), and an entry here would make a clean close create them for
        every small segment, which is what costs ~1 ms a partition."""
        problem = self.recover()
        self.synced_size = self.size
        if not active:
            self.seal()
        return problem

    def _scan_tail(
        self, fd: int, index: OffsetIndex, file_size: int
    ) -> tuple[int, int, int] | None:
        """Walk the headers from the last index entry to the end of the file: the next
        offset, and the largest timestamp there with its batch's base offset (the time
        index covers only the batches before that entry). None if anything there
        disagrees (then the caller rebuilds)."""
        position = index.positions[-1] if len(index) else 0
        expected = self.base_offset + index.offsets[-1] if len(index) else self.base_offset
        if position >= file_size:
            return None
        max_ts, max_ts_offset = -1, expected
        for _pos, checked, _view in _scan(fd, position, file_size, crc=False):
            if isinstance(checked, str) or checked.base_offset != expected:
                return None
            if checked.max_timestamp > max_ts:
                max_ts, max_ts_offset = checked.max_timestamp, checked.base_offset
            expected = checked.last_offset + 1
        return expected, max_ts, max_ts_offset


class _Validation:
    """The recovery scan: framing, magic, CRC and offset contiguity of every batch, with
    both indexes rebuilt on the way.

    This is the one loop that runs once per batch over whole gigabytes, so it is written
    flat: one struct unpack and one CRC call per batch, no objects built (measured: ~4x
    faster than walking `check_batch` headers).
    """

    _HEAD = struct.Struct(">qiibIhiqq")  # baseOffset .. maxTimestamp (43 bytes)

    def __init__(self, base_offset: int, interval: int, index: OffsetIndex, times: TimeIndex):
        self.base_offset = base_offset
        self.interval = interval
        self.index = index
        self.times = times
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.max_timestamp_offset = base_offset
        self.bytes_since_index = 0

    def run(self, fd: int, file_size: int) -> str | None:
        unpack, base_offset, interval = self._HEAD.unpack_from, self.base_offset, self.interval
        next_offset, max_ts, max_ts_offset = self.next_offset, self.max_timestamp, base_offset
        since_index, position = 0, 0
        buf, view, buf_start = b"", memoryview(b""), 0
        problem = None
        while position < file_size:
            rel = position - buf_start
            if len(buf) - rel < HEADER_BYTES:
                buf = os.pread(fd, min(SCAN_CHUNK_BYTES, file_size - position), position)
                view, buf_start, rel = memoryview(buf), position, 0
                if len(buf) < HEADER_BYTES:
                    problem = f"{len(buf)} bytes at position {position}, less than a batch header"
                    break
            base, length, _epoch, magic, crc, _attrs, delta, _base_ts, batch_max_ts = unpack(
                buf, rel
            )
            size = length + 12
            if magic != MAGIC or size < HEADER_BYTES or delta < 0:
                problem = f"bad batch header at position {position}"
                break
            if rel + size > len(buf):
                if position + size > file_size:
                    problem = f"batch at position {position} runs past the end of the file"
                    break
                buf = os.pread(fd, max(size, min(SCAN_CHUNK_BYTES, file_size - position)), position)
                view, buf_start = memoryview(buf), position
                continue
            if checksum.crc32c(view[rel + 21 : rel + size]) != crc:
                problem = f"CRC mismatch in batch at position {position}"
                break
            if base != next_offset:
                problem = f"batch at position {position} has offset {base}, expected {next_offset}"
                break
            if base + delta - base_offset > RELATIVE_OFFSET_MAX:
                problem = f"batch at position {position} overflows the segment's offset range"
                break
            if since_index >= interval and position > 0:
                self.index.append(base - base_offset, position)
                self.times.maybe_append(max_ts, max_ts_offset - base_offset)
                since_index = 0
            since_index += size
            if batch_max_ts > max_ts:
                max_ts, max_ts_offset = batch_max_ts, base
            next_offset = base + delta + 1
            position += size
        self.size, self.next_offset, self.bytes_since_index = position, next_offset, since_index
        self.max_timestamp, self.max_timestamp_offset = max_ts, max_ts_offset
        return problem


# --- file helpers ---------------------------------------------------------------------


def _write_all(fd: int, parts: Sequence[bytes | memoryview], position: int) -> None:
    """Write `parts` one after the other from `position`, gathered by `pwritev` (at most
    `_IOV_MAX` buffers a call), so the producer's bytes are never copied into one buffer."""
    pending = [part for part in parts if len(part)]  # so every call has bytes to write
    while pending:
        chunk = pending[:_IOV_MAX]
        written = os.pwritev(fd, chunk, position)
        if written <= 0:  # a regular file never does this; do not spin if one does
            raise OSError(errno.EIO, f"pwritev wrote {written} bytes")
        position += written
        done = 0
        while done < len(chunk) and written >= len(chunk[done]):
            written -= len(chunk[done])
            done += 1
        if written:  # a short write ended inside this part
            pending[done] = memoryview(pending[done])[written:]
        del pending[:done]


def _pread(fd: int, size: int, position: int, path: str) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) < size:
        raise CorruptDataError(
            f"{path}: file ends at {position + len(data)}, expected {position + size}"
        )
    return data


def _ensure(fd: int, buf: bytes, base: int, needed: int, end: int, path: str) -> bytes:
    """`buf` (file bytes from `base`) extended so that it holds at least `needed` bytes."""
    if needed <= len(buf):
        return buf
    if base + needed > end:
        raise CorruptDataError(f"{path}: a batch runs past the segment end at {end}")
    return buf + _pread(fd, needed - len(buf), base + len(buf), path)


def _checked(buf: bytes, p: int, path: str, base: int, crc: bool = True) -> BatchHeader:
    """The header at `p`; with `crc`, the whole batch must be in `buf` and pass its CRC."""
    checked = check_batch(buf, p, len(buf)) if crc else _header_only(buf, p, len(buf))
    if isinstance(checked, str):
        raise CorruptDataError(f"{path}: {checked} (file position {base + p})")
    return checked


def _scan(
    fd: int, start: int, end: int, *, crc: bool = True
) -> Iterator[tuple[int, BatchHeader | str, memoryview]]:
    """Walk batches from `start` to `end`, reading in large chunks.

    Yields (position, header, batch bytes) for each batch, or (position, problem, empty) for
    the first invalid one, and then stops.
    """
    position = start
    buf = b""
    buf_start = start
    while position < end:
        rel = position - buf_start
        if len(buf) - rel < HEADER_BYTES:
            buf = os.pread(fd, min(SCAN_CHUNK_BYTES, end - position), position)
            buf_start, rel = position, 0
            if len(buf) < min(HEADER_BYTES, end - position):
                yield (
                    position,
                    f"file shorter than expected at position {position}",
                    memoryview(b""),
                )
                return
        size = _declared_size(buf, rel)
        if size is not None and len(buf) - rel < size and position + size <= end:
            buf = os.pread(fd, max(size, min(SCAN_CHUNK_BYTES, end - position)), position)
            buf_start, rel = position, 0
        if crc:
            checked: BatchHeader | str = check_batch(buf, rel, min(len(buf), end - buf_start))
        else:
            checked = _header_only(buf, rel, min(len(buf), end - buf_start))
            if not isinstance(checked, str) and position + checked.size > end:
                checked = f"batch at position {position} runs past the end at {end}"
        if isinstance(checked, str):
            yield position, checked, memoryview(b"")
            return
        yield position, checked, memoryview(buf)[rel : rel + checked.size]
        position += checked.size


def _declared_size(buf: bytes, rel: int) -> int | None:
    if len(buf) - rel < 12:
        return None
    size = 12 + int.from_bytes(buf[rel + 8 : rel + 12], "big", signed=True)
    return size if size >= HEADER_BYTES else None


def _header_only(buf: bytes, rel: int, end: int) -> BatchHeader | str:
    if end - rel < HEADER_BYTES:
        return f"truncated batch header at {rel}"
    header = parse_header(buf, rel)
    if header.magic != MAGIC or header.size < HEADER_BYTES:
        return f"bad batch header at {rel}"
    return header


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b"\x00"  # not a whole number of entries: decodes to None, forcing a rebuild
