"""The aborted-transaction index of one segment (Kafka's `.txnindex`).

A read_committed consumer must skip the records of aborted transactions. The log cannot
tell them apart by reading a batch (a transactional batch says only which producer wrote
it); what decides is the ABORT marker written later. So each abort is recorded here when
its marker is appended, and a fetch asks for the aborted transactions overlapping the
range it returns (`FileLog.aborted_txns`); the client then drops the records of those
producers from each transaction's first offset up to its marker.

File format (Kafka's, so tools that read a Kafka `.txnindex` read ours): a sequence of
fixed 34-byte big-endian entries, no header, so a torn tail shows in the length:

    version i16 (0) | producer_id i64 | first_offset i64 | last_offset i64 | last_stable_offset i64

`last_offset` is the offset of the ABORT marker; the entry goes into the segment holding
that offset, named `{base_offset:020d}.txnindex` like the segment's other files. Entries
are in strictly increasing `last_offset` order (one marker, one offset), so a segment has
at most one entry per offset it holds: that is the bound on an index's size, and in
practice it is tiny (most segments never see an abort and have no file at all: it is
created with the first entry).

Unlike the offset and time indexes, this one cannot be rebuilt by storage: it needs the
producer state that the broker replays. A crash may lose the entries appended since the
last flush (the flush fsyncs them with the segment's other files); the broker re-appends
what it finds missing while replaying the log, which is why appending an entry that is
already there is a no-op. A damaged file is dropped at open, with a warning, for the same
reason: losing it costs a rebuild, failing the partition would cost availability.

This module is the codec and the in-memory index (`TxnIndex`), plus whole-file reads and
atomic rewrites used at open and by compaction's swap; appends to the file are done by
the log's flush (log.py), from `persisted` onwards, as for the other indexes.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

ENTRY_BYTES = 34
VERSION = 0
SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == ENTRY_BYTES


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: a producer's records from `first_offset` up to its abort
    marker at `last_offset` are not to be delivered to read_committed consumers."""

    producer_id: int
    first_offset: int
    last_offset: int
    """The abort marker's offset."""
    last_stable_offset: int
    """The partition's last stable offset when the marker was written (Kafka keeps it; a
    reader may use it to stop searching early)."""

    def encode(self) -> bytes:
        return _ENTRY.pack(
            VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode(data: bytes) -> list[AbortedTxn] | str:
    """The entries of a whole `.txnindex` file, or what is wrong with it."""
    if len(data) % ENTRY_BYTES:
        return f"{len(data)} bytes is not a whole number of {ENTRY_BYTES}-byte entries"
    entries: list[AbortedTxn] = []
    for n, (version, producer_id, first, last, lso) in enumerate(_ENTRY.iter_unpack(data)):
        if version != VERSION:
            return f"entry {n} has version {version}, not {VERSION}"
        entry = AbortedTxn(producer_id, first, last, lso)
        problem = _malformed(entry)
        if problem is not None:
            return f"entry {n}: {problem}"
        if entries and last <= entries[-1].last_offset:
            return f"entry {n} (last offset {last}) is not after the one before it"
        entries.append(entry)
    return entries


def _malformed(entry: AbortedTxn) -> str | None:
    if entry.producer_id < 0 or entry.first_offset < 0:
        return f"negative producer id or offset in {entry}"
    if entry.first_offset > entry.last_offset:
        return f"first offset after the abort marker in {entry}"
    return None


def read_file(path: str) -> list[AbortedTxn] | str | None:
    """A `.txnindex` file's entries, what is wrong with it, or None when it does not exist.
    Its size is bounded by its segment (one entry per offset at most)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return decode(data)


def write_file(path: str, entries: Iterable[AbortedTxn]) -> None:
    """Replace `path` by `entries`, atomically: written to `path.tmp` (the log's open
    deletes such leftovers), fsynced, renamed. The caller fsyncs the directory."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(b"".join(e.encode() for e in entries))
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def merged(*runs: Iterable[AbortedTxn]) -> list[AbortedTxn]:
    """The entries of several indexes as one, in `last_offset` order; where two name the
    same marker the first run's entry is kept (a merge repeated after a crash)."""
    by_marker: dict[int, AbortedTxn] = {}
    for run in runs:
        for entry in run:
            by_marker.setdefault(entry.last_offset, entry)
    return [by_marker[last] for last in sorted(by_marker)]


class TxnIndex:
    """One segment's entries in memory, oldest first, and how many are in its file.

    `persisted` entries have been written to the file, `synced` of them fsynced (the log's
    flush advances both; a failed fsync sets both back to 0 so the file is written again
    whole)."""

    __slots__ = ("_min_first", "entries", "persisted", "synced")

    def __init__(self, entries: list[AbortedTxn] | None = None, *, on_disk: bool = False) -> None:
        self.entries: list[AbortedTxn] = entries if entries is not None else []
        self.persisted = self.synced = len(self.entries) if on_disk else 0
        self._min_first = min((e.first_offset for e in self.entries), default=-1)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset (-1 when empty)."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, entry: AbortedTxn) -> bool:
        """Add `entry` after the others; False (nothing changed) when it is already here.

        An entry not after the last one that is not already here is a broken invariant:
        markers are appended in offset order, and a replay re-appends only what it wrote."""
        problem = _malformed(entry)
        if problem is not None:
            raise AssertionError(problem)
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            if self._find(entry.last_offset) == entry:
                return False
            raise AssertionError(
                f"aborted transaction {entry} is not after the last one indexed "
                f"({self.entries[-1]}) and not equal to one indexed"
            )
        self.entries.append(entry)
        if self._min_first < 0 or entry.first_offset < self._min_first:
            self._min_first = entry.first_offset
        return True

    def _find(self, last_offset: int) -> AbortedTxn | None:
        i = bisect_left(self.entries, last_offset, key=lambda e: e.last_offset)
        if i < len(self.entries) and self.entries[i].last_offset == last_offset:
            return self.entries[i]
        return None

    def truncate(self, end_offset: int) -> int:
        """Drop the entries whose marker is at or after `end_offset`; returns how many
        are kept (a prefix: the file is to be cut to that many entries)."""
        keep = bisect_left(self.entries, end_offset, key=lambda e: e.last_offset)
        if keep < len(self.entries):
            del self.entries[keep:]
            self.persisted = min(self.persisted, keep)
            self.synced = min(self.synced, keep)
            self._min_first = min((e.first_offset for e in self.entries), default=-1)
        return keep

    def collect(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The entries with `last_offset >= start_offset` and `first_offset < upper_offset`,
        oldest first. The ones ending before `start_offset` are skipped by bisection; the
        rest are filtered one by one, unless none starts before `upper_offset`."""
        if not self.entries or self._min_first >= upper_offset:
            return []
        i = bisect_left(self.entries, start_offset, key=lambda e: e.last_offset)
        return [e for e in self.entries[i:] if e.first_offset < upper_offset]

    def pending(self) -> tuple[int, bytes] | None:
        """(file position, bytes) of the entries not yet written to the file."""
        if self.persisted >= len(self.entries):
            return None
        data = b"".join(e.encode() for e in self.entries[self.persisted :])
        return self.persisted * ENTRY_BYTES, data
