"""Log compaction: keep the newest record of every key, as Kafka's log cleaner does.

What is cleaned
---------------
A log is split at two offsets::

    log start      first dirty (checkpoint)      uncleanable            log end
       |  clean: cleaned before  |  dirty: not cleaned yet  |  active, recent |

- The *cleanable* range holds whole sealed segments that are durable (below the recovery
  point) and whose newest record is older than `min.compaction.lag.ms`. The active
  segment is never cleaned: `segment.ms` rolls it (housekeeping), so it becomes cleanable.
- *First dirty* is the log's cleaner checkpoint (`cleaner-offset-checkpoint` in the data
  directory, Kafka's format, written atomically): everything below it has been cleaned.
- A log is cleaned when dirty bytes / cleanable bytes reaches `min.cleanable.dirty.ratio`,
  or when its oldest dirty segment is older than `max.compaction.lag.ms`, or when its
  cleaned part holds tombstones past `delete.retention.ms` (KIP-534, see *Tombstones*).

One cleaning
------------
1. The dirty range is read and every record's key goes into an `OffsetMap` (a 16-byte
   digest of the key -> the newest offset), bounded by `offset_map_entries_max`. If the
   map fills, the cleaning stops at that batch: the map is complete up to there (`map
   end`), which becomes the new checkpoint, and the rest waits for the next cleaning.
2. The segments below the map end are rewritten, oldest first, in runs of adjacent
   segments whose sizes add up to at most `segment.bytes` (segments cleaned before are
   small, so runs of them merge into one file and the number of files stays bounded,
   as Kafka groups segments): a record stays if its
   offset is at or above the map end, or if it is the newest of its key. A tombstone (a
   null value) that is the newest of its key stays too, until `delete.retention.ms` has
   passed since a cleaning first saw it (its segment's mtime, set at each swap, is the
   time of the last cleaning); then it goes, at the first cleaning after that, which
   their expiry alone can start (*Tombstones* below). Records without a key
   go (Kafka's cleaner drops them too). Control batches and transactional batches are
   kept as they are, and the latter do not enter the map: the cleaner does not consult
   the transaction index (txnindex.py) to tell aborted records from committed ones, and
   an aborted record taken for a key's newest would remove the committed value before
   it. Since those batches are never touched, a segment's aborted-transaction entries
   stay true after a rewrite (`FileLog.swap_cleaned` keeps or merges them).
3. Offsets never change. A batch that keeps some records keeps its header (baseOffset,
   lastOffsetDelta, timestamps, producer id, epoch and base sequence); only recordsCount,
   the length and the CRC are new, and it is compressed again in its own codec (as
   Kafka's cleaner does: a gzip topic stays gzip, and a rewrite does not grow the log by
   the compression ratio; the codec's default level, since the cleaner does not know
   the producer's). A batch that keeps
   every record is copied byte for byte. A batch that keeps none is dropped, except the
   last batch of each producer id, kept empty so that the producer's state survives (as
   Kafka does). Dropped batches in a row become one empty *filler* batch (no producer,
   no records) spanning their offsets, so that the batches of a segment still tile its
   offsets without a gap: recovery, reads, `weirmq storage verify` and the fsync logic
   keep checking that offsets are contiguous, and a fetch at a removed offset returns the
   batch holding it, whose records the client skips (a filler costs 61 bytes however
   many batches it replaces). Clients handle empty batches: Kafka's cleaner writes them.

Tombstones
----------
Without more, a log whose dirty ratio stays low (few updates, many keys) would keep its
expired tombstones forever: nothing starts a cleaning. So, as Kafka's KIP-534, a log is
also cleaned when the oldest tombstone of its cleaned part has passed
`delete.retention.ms`. Deciding must not read the log each round, so every cleaning
notes, while it rewrites, the oldest cleaning time (segment mtime) of the tombstones it
leaves below the new checkpoint: `Cleaning.tombstones_kept_ms`, or the swap's time for
those in rewritten segments (`tombstones_rewritten`). The owner keeps that per log
(`LogManager`, `cleaner-tombstone-checkpoint` beside the cleaner checkpoint, same format,
the value a time in ms instead of an offset) and the planner compares it with the clock:
one lookup per log per round. The last cleanable record is never removed (below), so a
tombstone there is not noted. The note is a lower bound of the real times (a retention or
truncation meanwhile only removes tombstones), so at worst it starts one cleaning that
removes nothing, and that cleaning notes the true time. A log cleaned by a version that
kept no note, or whose note was lost, waits for its next ordinary cleaning, as before.

Crash safety
------------
The rewrite of the run starting with segment `N.log` is written to `N.log.cleaned`,
fsynced, validated as recovery would (`scan_indexed`, which also builds its indexes),
renamed to `N.log.swap`, and the directory fsynced; all this on the cleaner's thread.
Then the owner's thread (`FileLog.swap_cleaned`) deletes the run's index files, merges
the later segments' `.txnindex` entries into `N.txnindex` (when they have any), renames
the run's later `.log` files to `.log.deleted` and fsyncs the directory, renames
`N.log.swap` over `N.log`, deletes the `.log.deleted` and later `.txnindex` files and
installs the new segment; the directory is fsynced, and only then is the cleaner
checkpoint written. The rewrite holds exactly the offsets of the run it replaces, so the
old files and the new one are each a valid log: at the next open, a `.cleaned` file is
deleted (rolled back), a `.swap` file renamed over its `.log` after the segments it
covers are deleted, their `.txnindex` entries merged into its own first (finished), and
leftover `.log.deleted` files deleted (`log.finish_swaps`). Nothing is
lost and nothing duplicated at any crash point.

Bounds
------
- Memory: `offset_map_entries_max` keys in the map (~100 bytes each in CPython), plus one
  segment's rewrite buffered at a time (at most `segment.bytes`).
- I/O: `io_bytes_per_s`, every byte read and written counted (Kafka's
  `log.cleaner.io.max.bytes.per.second`).
- The broker's settings (`log_cleaner_enable`, `log_cleaner_io_max_bytes_per_second`,
  `log_cleaner_dedupe_buffer_size` in bytes of 16-byte digests, `log_cleaner_backoff_ms`)
  reach `CleanerSettings` through `StorageSettings`; a disabled cleaner has no thread.
- Time: the heavy part runs on one background thread (`LogCleaner`); appends and reads
  go on. The owner's part is a few renames, an index swap and a directory fsync per log.

Metrics
-------
`CleanerStats` (counters since start, the last cleaning's duration, the dirtiest log's
ratio at the last pass, when the last cleaning and pass ended) is written by the cleaner's
thread, except `segments_swapped` (the owner's); the metrics exporter reads the plain
numbers, which a scrape may see one update apart.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..records import checksum
from ..records.batch import (
    ATTR_CODEC_MASK,
    CRC_START,
    DECOMPRESSED_BYTES_MAX,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
)
from ..records.compression import NONE, decompress
from ..records.recompress import CODECS, recompress_batch
from ..types import TopicPartition
from .config import DAY_MS
from .interface import Clock
from .log import CLEANED_SUFFIX, SWAP_SUFFIX, FileLog, _fsync_path
from .policy import RELATIVE_OFFSET_MAX
from .segment import IndexedScan, Segment, scan_indexed

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_DIGEST_BYTES = 16
_HEADER = struct.Struct(">qiibIhiqqqhii")
_READ_CHUNK_BYTES = 1024 * 1024
DEDUPE_ENTRY_BYTES = _DIGEST_BYTES
"""What one key of the offset map counts for against `log_cleaner_dedupe_buffer_size`
(its digest; CPython's dict costs ~100 bytes per entry in truth, so the memory used is
about six times the setting)."""
_CODEC_NAMES = {bits: name for name, bits in CODECS.items()}


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """A topic's compaction settings (Kafka's topic configs and defaults)."""

    compact: bool = False
    """cleanup.policy includes compact."""
    min_cleanable_dirty_ratio: float = 0.5
    """min.cleanable.dirty.ratio: clean once dirty bytes are this share of the cleanable."""
    min_compaction_lag_ms: int = 0
    """min.compaction.lag.ms: a segment whose newest record is younger is not cleaned."""
    max_compaction_lag_ms: int | None = None
    """max.compaction.lag.ms: clean whatever the ratio once dirty data is this old."""
    delete_retention_ms: int = DAY_MS
    """delete.retention.ms: how long a tombstone outlives the cleaning that first saw it."""

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str]) -> CompactionConfig:
        """From a topic's config overrides (Kafka names); missing ones take the default."""
        policy = configs.get("cleanup.policy", "delete")
        max_lag = int(configs.get("max.compaction.lag.ms", "-1"))
        return cls(
            compact="compact" in [p.strip() for p in policy.split(",")],
            min_cleanable_dirty_ratio=float(configs.get("min.cleanable.dirty.ratio", "0.5")),
            min_compaction_lag_ms=int(configs.get("min.compaction.lag.ms", "0")),
            max_compaction_lag_ms=None if max_lag < 0 or max_lag >= 2**62 else max_lag,
            delete_retention_ms=int(configs.get("delete.retention.ms", str(DAY_MS))),
        )


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The cleaner's bounds (per data directory)."""

    offset_map_entries_max: int = 500_000
    """Keys one cleaning can dedupe (Kafka: log.cleaner.dedupe.buffer.size / 24 bytes)."""
    io_bytes_per_s: int = 64 * 1024 * 1024
    """Bytes read plus written per second (log.cleaner.io.max.bytes.per.second)."""
    backoff_ms: int = 15_000
    """How long the thread sleeps when no log needs cleaning (log.cleaner.backoff.ms)."""
    enabled: bool = True
    """log.cleaner.enable: False, no thread is started and nothing is ever cleaned."""

    @classmethod
    def from_dedupe_bytes(
        cls, *, enabled: bool, io_bytes_per_s: int, dedupe_bytes: int, backoff_ms: int
    ) -> CleanerSettings:
        """From the broker's settings: `dedupe_bytes` (log.cleaner.dedupe.buffer.size) is
        counted in `DEDUPE_ENTRY_BYTES` per key."""
        return cls(
            offset_map_entries_max=max(1, dedupe_bytes // DEDUPE_ENTRY_BYTES),
            io_bytes_per_s=io_bytes_per_s,
            backoff_ms=backoff_ms,
            enabled=enabled,
        )


@dataclass(slots=True)
class CleanerStats:
    """What the cleaner did since start (module docstring, *Metrics*)."""

    cleanings: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    segments_swapped: int = 0
    """Rewritten segment files swapped in (each replacing one run of segments)."""
    last_cleaning_ms: int = 0
    """How long the last cleaning took on the cleaner's thread (clock ms)."""
    last_cleaning_end_ms: int | None = None
    max_dirty_ratio: float = 0.0
    """At the last pass, the highest dirty ratio of a compacted log with a cleanable
    range (Kafka's max-dirty-percent, as a ratio)."""
    last_pass_end_ms: int | None = None


# --- the offset map ----------------------------------------------------------------------


class OffsetMap:
    """Key digest -> newest offset, with at most `entries_max` keys (Kafka's
    SkimpyOffsetMap: a digest, not the key, so a key's size costs nothing; two keys with
    the same 128-bit digest are as likely as a disk returning wrong bytes)."""

    __slots__ = ("_entries", "entries_max")

    def __init__(self, entries_max: int) -> None:
        assert entries_max > 0
        self.entries_max = entries_max
        self._entries: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def digest(key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=_DIGEST_BYTES).digest()

    def put(self, key: bytes, offset: int, *, force: bool = False) -> bool:
        """Record `offset` as the newest of `key`; False (nothing changed) when full.
        `force` (the first dirty batch, so that every cleaning makes progress) may take
        the map past its bound by one batch's records."""
        digest = self.digest(key)
        if digest not in self._entries and len(self._entries) >= self.entries_max and not force:
            return False
        self._entries[digest] = offset
        return True

    def get(self, key: bytes) -> int | None:
        return self._entries.get(self.digest(key))


# --- throttle ----------------------------------------------------------------------------


class Throttle:
    """Sleeps so that bytes counted by `spent` stay under `bytes_per_s` (per 1 s window)."""

    def __init__(
        self,
        bytes_per_s: int,
        *,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = bytes_per_s
        self._sleep = sleep
        self._now = now
        self._start = now()
        self._bytes = 0

    def spent(self, size: int) -> None:
        self._bytes += size
        elapsed = self._now() - self._start
        ahead = self._bytes / self._rate - elapsed
        if ahead > 0:
            self._sleep(ahead)
        if elapsed > 1.0:
            self._start, self._bytes = self._now(), 0


# --- records -----------------------------------------------------------------------------


def _varint(buf: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(buf) or shift > 63:
            raise ValueError("truncated varint in a record")
        byte = buf[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7


@dataclass(frozen=True, slots=True)
class _Record:
    start: int
    end: int
    offset: int
    key: bytes | None
    tombstone: bool


def _records(header: BatchHeader, batch: memoryview) -> tuple[bytes, list[_Record]]:
    """The (decompressed) records area of one whole batch and where each record lies."""
    payload = decompress(
        header.codec, batch[HEADER_BYTES : header.size], max_bytes=DECOMPRESSED_BYTES_MAX
    )
    out = []
    position = 0
    for _ in range(header.records_count):
        start = position
        length, position = _varint(payload, position)
        end = position + length
        if length < 0 or end > len(payload):
            raise ValueError("a record runs past the end of its batch")
        _ts_delta, position = _varint(payload, position + 1)  # + 1: record attributes
        offset_delta, position = _varint(payload, position)
        key_length, position = _varint(payload, position)
        key = None if key_length < 0 else payload[position : position + key_length]
        position += max(key_length, 0)
        value_length, position = _varint(payload, position)
        out.append(_Record(start, end, header.base_offset + offset_delta, key, value_length < 0))
        position = end
    return payload, out


def _batch(
    base_offset: int,
    leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer: tuple[int, int, int],
    records: Sequence[bytes | memoryview],
    count: int,
) -> bytes:
    """An uncompressed batch with these header fields and record bytes."""
    body = b"".join(records)
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes & ~ATTR_CODEC_MASK,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            *producer,
            count,
        )
        + body
    )
    length = HEADER_BYTES - LOG_OVERHEAD + len(body)
    crc = checksum.crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, length, leader_epoch, MAGIC, crc) + after_crc


def _filler(first: BatchHeader, last: BatchHeader, max_timestamp: int) -> bytes:
    """One empty batch spanning the offsets of dropped batches `first` .. `last`."""
    return _batch(
        first.base_offset,
        last.partition_leader_epoch,
        0,
        last.last_offset - first.base_offset,
        max_timestamp,
        max_timestamp,
        (-1, -1, -1),
        (),
        0,
    )


def _walk(fd: int, size: int, throttle: _Counter) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of a sealed segment file (already validated by recovery), CRC-checked."""
    position = 0
    buf, buf_start = b"", 0
    while position < size:
        rel = position - buf_start
        if len(buf) - rel < HEADER_BYTES:
            buf = os.pread(fd, min(_READ_CHUNK_BYTES, size - position), position)
            buf_start, rel = position, 0
            throttle.spent(len(buf))
        header = BatchHeader(position, *_HEADER.unpack_from(buf, rel))
        if header.magic != MAGIC or header.size < HEADER_BYTES or position + header.size > size:
            raise ValueError(f"bad batch header at position {position}")
        if rel + header.size > len(buf):
            buf = os.pread(fd, max(header.size, min(_READ_CHUNK_BYTES, size - position)), position)
            buf_start, rel = position, 0
            throttle.spent(len(buf))
        view = memoryview(buf)[rel : rel + header.size]
        if checksum.crc32c(view[CRC_START:]) != header.crc:
            raise ValueError(f"CRC mismatch in batch at position {position}")
        yield header, view
        position += header.size


# --- planning ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """Which segments one cleaning of a log looks at."""

    segments: tuple[Segment, ...]
    """The cleanable segments, oldest first (sealed, durable, older than the min lag)."""
    first_dirty: int
    """The checkpoint: offsets below it were cleaned before."""
    end: int
    """The first offset not cleanable (the base of the first segment not cleanable)."""
    dirty_ratio: float
    tombstones_due: bool = False
    """Cleaned for expired tombstones (KIP-534), whatever the dirty range."""


def plan_cleaning(
    log_: FileLog,
    checkpoint: int,
    config: CompactionConfig,
    now_ms: int,
    tombstones_ms: int | None = None,
) -> CleaningPlan | None:
    """The cleaning `log_` needs now, or None (see the module docstring).
    `tombstones_ms` is the log's note of its oldest cleaned tombstone (*Tombstones*)."""
    return cleaning_due(
        cleanable_range(log_, checkpoint, config, now_ms, tombstones_ms), config, now_ms
    )


def cleaning_due(
    plan: CleaningPlan | None, config: CompactionConfig, now_ms: int
) -> CleaningPlan | None:
    """`plan` (a `cleanable_range`) if the log is to be cleaned now, else None: dirty enough,
    dirty for too long, or holding expired tombstones (see the module docstring)."""
    if plan is None or not (plan.first_dirty < plan.end or plan.tombstones_due):
        return None
    if plan.tombstones_due or plan.dirty_ratio >= config.min_cleanable_dirty_ratio:
        return plan
    dirty = [s for s in plan.segments if s.next_offset > plan.first_dirty]
    overdue = config.max_compaction_lag_ms is not None and any(
        now_ms - (s.max_timestamp if s.max_timestamp >= 0 else s.created_ms)
        >= config.max_compaction_lag_ms
        for s in dirty[:1]
    )
    return plan if overdue else None


def cleanable_range(
    log_: FileLog,
    checkpoint: int,
    config: CompactionConfig,
    now_ms: int,
    tombstones_ms: int | None = None,
) -> CleaningPlan | None:
    """The cleanable range of `log_` and its dirty ratio, whether or not it is due for a
    cleaning; None when it has none. Reads segment metadata only (no file)."""
    if not config.compact or log_.offline_reason is not None or log_.damage:
        return None
    segments = log_.segments
    flushed = log_.flushed_offset
    cleanable: list[Segment] = []
    for segment in segments[:-1]:  # never the active one
        newest = segment.max_timestamp if segment.max_timestamp >= 0 else segment.created_ms
        if (
            not segment.sealed
            or segment.next_offset > flushed
            or now_ms - newest < config.min_compaction_lag_ms
        ):
            break
        if segment.next_offset > log_.log_start_offset and segment.size:
            cleanable.append(segment)
    if not cleanable:
        return None
    end = cleanable[-1].next_offset
    first_dirty = min(max(checkpoint, cleanable[0].base_offset), end)
    dirty_bytes = sum(s.size for s in cleanable if s.next_offset > first_dirty)
    total = sum(s.size for s in cleanable)
    ratio = dirty_bytes / total if total else 0.0
    due = tombstones_ms is not None and tombstones_ms + config.delete_retention_ms <= now_ms
    return CleaningPlan(tuple(cleanable), first_dirty, end, ratio, due)


# --- cleaning ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Swap:
    """A rewritten segment ready to be swapped in on the owner's thread."""

    old: tuple[Segment, ...]
    """The adjacent segments it replaces (the file is named after the first)."""
    path: str
    scan: IndexedScan


@dataclass(slots=True)
class Cleaning:
    """What one cleaning of one log produced."""

    tp: TopicPartition
    log: FileLog
    new_checkpoint: int
    swaps: list[Swap] = field(default_factory=list)
    touched: list[Segment] = field(default_factory=list)
    """Dirty segments that needed no rewrite: their mtime becomes the cleaning's time."""
    bytes_read: int = 0
    bytes_written: int = 0
    tombstones_kept_ms: int | None = None
    """The oldest cleaning time (mtime) of a segment left as it was that holds a tombstone
    below the new checkpoint; None: no such segment (*Tombstones* in the module docstring)."""
    tombstones_rewritten: bool = False
    """Whether a rewritten or touched segment holds such a tombstone: its time is the
    swap's."""

    def tombstones_ms(self, swapped_ms: int) -> int | None:
        """The log's new note once swapped in at `swapped_ms`."""
        if not self.tombstones_rewritten:
            return self.tombstones_kept_ms
        if self.tombstones_kept_ms is None:
            return swapped_ms
        return min(self.tombstones_kept_ms, swapped_ms)


class CleaningCancelled(Exception):
    """The cleaner is stopping: the cleaning under way is given up (nothing swapped)."""


class _Counter:
    """A throttle that also counts what it was told, and gives up when told to stop."""

    def __init__(self, throttle: Throttle, stopping: Callable[[], bool]) -> None:
        self.throttle = throttle
        self.stopping = stopping
        self.bytes = 0

    def spent(self, size: int) -> None:
        if self.stopping():
            raise CleaningCancelled
        self.bytes += size
        self.throttle.spent(size)


def clean_log(
    tp: TopicPartition,
    log_: FileLog,
    plan: CleaningPlan,
    config: CompactionConfig,
    settings: CleanerSettings,
    *,
    now_ms: int,
    throttle: Throttle,
    stopping: Callable[[], bool] = lambda: False,
) -> Cleaning | None:
    """Build the offset map over the dirty range, rewrite the segments below the map end
    into `.swap` files (module docstring, steps 1-2 and the cleaner's half of the swap).
    Runs on any thread: it reads the segment files through descriptors of its own and
    changes no log. Returns None if the map could hold nothing. Raises OSError,
    ValueError (bad bytes) or `CleaningCancelled` (`stopping`), leaving no file behind."""
    counter = _Counter(throttle, stopping)
    offset_map = OffsetMap(settings.offset_map_entries_max)
    map_end, last_batch = _build_map(plan, offset_map, counter)
    if map_end <= plan.first_dirty and not plan.tombstones_due:
        return None
    cleaning = Cleaning(tp, log_, map_end)
    try:
        for group in _groups(plan, map_end, log_.config.segment_bytes):
            kept_ms: list[int] = []
            swap = _rewrite(
                group, offset_map, map_end, plan, config, last_batch, now_ms, counter, kept_ms
            )
            if swap is not None:
                cleaning.swaps.append(swap)
                cleaning.bytes_written += swap.scan.size
            elif group[0].next_offset > plan.first_dirty:
                cleaning.touched.extend(group)
            elif kept_ms:  # left as it was: its tombstones keep their time
                old = cleaning.tombstones_kept_ms
                cleaning.tombstones_kept_ms = min(kept_ms) if old is None else min(old, *kept_ms)
                continue
            cleaning.tombstones_rewritten = cleaning.tombstones_rewritten or bool(kept_ms)
    except BaseException:
        discard(cleaning)
        raise
    cleaning.bytes_read = counter.bytes
    return cleaning


def _build_map(
    plan: CleaningPlan, offset_map: OffsetMap, counter: _Counter
) -> tuple[int, set[int]]:
    """Fill the map from the dirty range (module docstring, step 1). Returns the map end
    and the base offsets of each producer id's last batch before it (kept even if
    empty), found on the same pass: the clean segments' headers are walked too."""
    last: dict[int, int] = {}
    for segment in plan.segments:
        with _opened(segment.log_path) as fd:
            for header, view in _walk(fd, segment.size, counter):
                if header.producer_id >= 0:
                    last[header.producer_id] = header.base_offset
                if (
                    header.last_offset < plan.first_dirty
                    or header.is_control
                    or header.is_transactional
                ):
                    continue
                _payload, records = _records(header, view)
                first = header.base_offset <= plan.first_dirty
                for record in records:
                    if record.offset < plan.first_dirty or record.key is None:
                        continue
                    if not offset_map.put(record.key, record.offset, force=first):
                        return max(header.base_offset, plan.first_dirty), set(last.values())
    return plan.end, set(last.values())


@contextlib.contextmanager
def _opened(path: str) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _groups(plan: CleaningPlan, map_end: int, segment_bytes: int) -> list[list[Segment]]:
    """The segments below `map_end`, in runs that one rewrite replaces together: adjacent,
    together at most `segment_bytes` (a rewrite is never larger than what it replaces)
    and within one segment's 32-bit offset range. Segments cleaned before are small, so
    runs of them merge into one file: the number of files stays bounded too."""
    groups: list[list[Segment]] = []
    size = 0
    for segment in plan.segments:
        if segment.base_offset >= map_end:
            break
        if (
            groups
            and groups[-1][-1].next_offset == segment.base_offset
            and size + segment.size <= segment_bytes
            and segment.next_offset - groups[-1][0].base_offset <= RELATIVE_OFFSET_MAX
        ):
            groups[-1].append(segment)
            size += segment.size
        else:
            groups.append([segment])
            size = segment.size
    return groups


def _rewrite(
    group: list[Segment],
    offset_map: OffsetMap,
    map_end: int,
    plan: CleaningPlan,
    config: CompactionConfig,
    last_batch: set[int],
    now_ms: int,
    counter: _Counter,
    tombstones_kept_ms: list[int],
) -> Swap | None:
    """Rewrite a run of segments into one `.swap` file named after the first; None when
    it is one segment that would not change. Appends to `tombstones_kept_ms` the cleaning
    time of each segment that keeps a tombstone to note (*Tombstones*)."""
    out: list[bytes | memoryview] = []
    changed = len(group) > 1
    dropped: list[BatchHeader] = []
    dropped_max_ts = -1

    def flush_dropped() -> None:
        nonlocal dropped_max_ts
        if dropped:
            out.append(_filler(dropped[0], dropped[-1], dropped_max_ts))
            dropped.clear()
            dropped_max_ts = -1

    for segment in group:
        with _opened(segment.log_path) as fd:
            cleaned_ms = os.fstat(fd).st_mtime_ns // 1_000_000
            tombstones_expire = cleaned_ms + config.delete_retention_ms <= now_ms
            noted = False
            for header, view in _walk(fd, segment.size, counter):
                kept, tombstone = _kept_batch(
                    header, view, offset_map, map_end, plan, tombstones_expire
                )
                noted = noted or tombstone
                if kept is view:
                    flush_dropped()
                    out.append(view)
                    continue
                changed = True
                if kept is None and header.base_offset not in last_batch:
                    dropped.append(header)
                    dropped_max_ts = max(dropped_max_ts, header.max_timestamp)
                    continue
                flush_dropped()
                out.append(kept if kept is not None else _empty_copy(header))
            if noted:
                tombstones_kept_ms.append(cleaned_ms)
    flush_dropped()
    if not changed:
        return None
    return _write_swap(group, out, counter)


def _kept_batch(
    header: BatchHeader,
    view: memoryview,
    offset_map: OffsetMap,
    map_end: int,
    plan: CleaningPlan,
    tombstones_expire: bool,
) -> tuple[memoryview | bytes | None, bool]:
    """`view` itself when every record stays, a rewritten batch when some do, None when
    none does; and whether a kept tombstone is to be noted (below `map_end`, not the last
    cleanable record, which is never removed: *Tombstones* in the module docstring)."""
    if header.is_control or header.is_transactional or header.base_offset >= map_end:
        return view, False  # transactions: see the module docstring
    if header.records_count == 0:
        return None, False  # a filler, or a producer's empty last batch (kept if so)
    payload, records = _records(header, view)
    keep = []
    noted = False
    for record in records:
        if record.offset >= map_end or record.offset == plan.end - 1:
            # The last cleanable record always stays: were it removed (an expired tombstone)
            # with the active segment empty, a consumer there would find nothing to read
            # up to the high watermark. It is the newest of its key anyway.
            keep.append(record)
            continue
        if record.key is None:
            continue
        newest = offset_map.get(record.key)
        if newest is not None and newest > record.offset:
            continue
        if record.tombstone and record.offset < plan.first_dirty and tombstones_expire:
            continue
        noted = noted or record.tombstone
        keep.append(record)
    if len(keep) == len(records):
        return view, noted
    if not keep:
        return None, noted
    rebuilt = _batch(
        header.base_offset,
        header.partition_leader_epoch,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        (header.producer_id, header.producer_epoch, header.base_sequence),
        [memoryview(payload)[r.start : r.end] for r in keep],
        len(keep),
    )
    return _in_codec(rebuilt, header.codec), noted


def _in_codec(batch: bytes, codec: int) -> bytes:
    """An uncompressed batch compressed in `codec` again (module docstring, step 3)."""
    if codec == NONE:
        return batch
    recompressed = recompress_batch(batch, _CODEC_NAMES[codec])
    assert recompressed is not None  # the rebuilt batch is uncompressed, and not control
    return recompressed


def _empty_copy(header: BatchHeader) -> bytes:
    """A producer's last batch with no record left: its header alone (producer state)."""
    return _batch(
        header.base_offset,
        header.partition_leader_epoch,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        (header.producer_id, header.producer_epoch, header.base_sequence),
        (),
        0,
    )


def _write_swap(group: list[Segment], parts: list[bytes | memoryview], counter: _Counter) -> Swap:
    """`.cleaned`: written, fsynced, validated; then renamed to `.swap`, directory fsynced."""
    segment = group[0]
    stem = segment.log_path.removesuffix(".log")
    cleaned, swap = stem + CLEANED_SUFFIX, stem + SWAP_SUFFIX
    fd = os.open(cleaned, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        position = 0
        for part in parts:
            view = memoryview(part)
            while view:
                n = os.pwrite(fd, view, position)
                position += n
                view = view[n:]
            counter.spent(len(part))
        os.fsync(fd)
        scan = scan_indexed(fd, segment.base_offset, position, segment.index_interval)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(cleaned)
        raise
    os.close(fd)
    assert scan.next_offset == group[-1].next_offset, (scan, group)
    os.rename(cleaned, swap)
    _fsync_path(os.path.dirname(swap))
    return Swap(tuple(group), swap, scan)


# --- the cleaner thread ------------------------------------------------------------------


class LogCleaner:
    """Cleans the logs of one data directory on one background thread.

    `run_once` plans and cleans every log that needs it and queues the results; the owner
    (the thread that appends and reads) takes them with `take_ready` and swaps them in
    (`LogManager.finish_cleaning`). `on_ready` is called (on the cleaner's thread) when
    results are queued, so the owner can schedule that. A log with results not yet taken
    is not cleaned again. `tombstones` gives each log's note of its oldest cleaned
    tombstone (*Tombstones* in the module docstring). Disabled (`settings.enabled`), it
    starts no thread and `run_once` cleans nothing."""

    def __init__(
        self,
        *,
        logs: Callable[[], Mapping[TopicPartition, FileLog]],
        config_for: Callable[[str], CompactionConfig],
        checkpoints: Callable[[], Mapping[TopicPartition, int]],
        clock: Clock,
        settings: CleanerSettings | None = None,
        tombstones: Callable[[], Mapping[TopicPartition, int]] = dict,
    ) -> None:
        self.settings = settings or CleanerSettings()
        self._logs = logs
        self._config_for = config_for
        self._checkpoints = checkpoints
        self._tombstones = tombstones
        self._clock = clock
        self._throttle = Throttle(self.settings.io_bytes_per_s)
        self._lock = threading.Lock()
        self._ready: list[Cleaning] = []
        self._pending: set[TopicPartition] = set()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.on_ready: Callable[[], None] | None = None
        self.stats = CleanerStats()

    @property
    def bytes_read(self) -> int:
        return self.stats.bytes_read

    @property
    def bytes_written(self) -> int:
        return self.stats.bytes_written

    @property
    def running(self) -> bool:
        """Whether the cleaner's thread runs."""
        return self._thread is not None

    def start(self) -> None:
        if not self.settings.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="weirmq-log-cleaner", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stopped:
            try:
                self.run_once()
            except Exception:
                log.exception("log cleaner pass failed")
            self._wake.wait(self.settings.backoff_ms / 1000)
            self._wake.clear()

    def run_once(self) -> int:
        """Clean every log that needs it now; returns how many were cleaned."""
        if not self.settings.enabled:
            return 0
        checkpoints = self._checkpoints()
        tombstones = self._tombstones()
        done = 0
        max_ratio = 0.0
        for tp, log_ in self._logs().items():
            if self._stopped:
                break
            with self._lock:
                if tp in self._pending:
                    continue
            config = self._config_for(tp.topic)
            now = self._clock()
            candidate = cleanable_range(
                log_, checkpoints.get(tp, 0), config, now, tombstones.get(tp)
            )
            if candidate is not None:
                max_ratio = max(max_ratio, candidate.dirty_ratio)
            plan = cleaning_due(candidate, config, now)
            cleaning = None if plan is None else self._clean_one(tp, log_, plan, config, now)
            if cleaning is None:
                continue
            done += 1
            with self._lock:
                self._ready.append(cleaning)
                self._pending.add(tp)
            if self.on_ready is not None:
                self.on_ready()
        self.stats.max_dirty_ratio = max_ratio
        self.stats.last_pass_end_ms = self._clock()
        return done

    def _clean_one(
        self,
        tp: TopicPartition,
        log_: FileLog,
        plan: CleaningPlan,
        config: CompactionConfig,
        now: int,
    ) -> Cleaning | None:
        try:
            cleaning = clean_log(
                tp,
                log_,
                plan,
                config,
                self.settings,
                now_ms=now,
                throttle=self._throttle,
                stopping=lambda: self._stopped,
            )
        except CleaningCancelled:
            return None
        except (OSError, ValueError) as exc:  # deleted meanwhile, or bad bytes: not now
            log.warning("cleaning %s stopped: %s", log_.directory.name, exc)
            return None
        if cleaning is not None:
            end = self._clock()
            stats = self.stats
            stats.cleanings += 1
            stats.bytes_read += cleaning.bytes_read
            stats.bytes_written += cleaning.bytes_written
            stats.last_cleaning_ms = max(0, end - now)
            stats.last_cleaning_end_ms = end
            log.info(
                "cleaned %s up to offset %d (dirty ratio %.2f%s): %d segments rewritten",
                log_.directory.name, cleaning.new_checkpoint, plan.dirty_ratio,
                ", expired tombstones" if plan.tombstones_due else "", len(cleaning.swaps),
            )  # fmt: skip
        return cleaning

    def take_ready(self) -> list[Cleaning]:
        with self._lock:
            ready, self._ready = self._ready, []
            self._pending.difference_update(c.tp for c in ready)
        return ready


def discard(cleaning: Cleaning) -> None:
    """Delete the swap files of a cleaning that will not be swapped in."""
    for swap in cleaning.swaps:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(swap.path)


def swap_in(cleaning: Cleaning, now_ms: int) -> bool:
    """On the owner's thread: swap every rewritten segment in, then fsync the directory.
    Returns whether the log's checkpoint may move to `cleaning.new_checkpoint` (False if
    any rewrite was stale: the log changed under the cleaner, as by a truncation)."""
    ok = True
    for i, swap in enumerate(cleaning.swaps):
        if not cleaning.log.swap_cleaned(swap.old, swap.path, swap.scan, now_ms):
            current = cleaning.log.segments
            gone = not any(old in current for old in swap.old)
            ok = ok and gone and _deleted_below(cleaning, swap)
            if not ok:
                discard(Cleaning(cleaning.tp, cleaning.log, 0, cleaning.swaps[i + 1 :]))
                break
    mtime_ns = now_ms * 1_000_000
    for segment in cleaning.touched:
        with contextlib.suppress(FileNotFoundError):
            os.utime(segment.log_path, ns=(mtime_ns, mtime_ns))
    _fsync_path(str(Path(cleaning.log.directory)))
    return ok


def _deleted_below(cleaning: Cleaning, swap: Swap) -> bool:
    """A stale rewrite is harmless when retention deleted its segment (log start past it)."""
    return swap.old[-1].next_offset <= cleaning.log.log_start_offset
