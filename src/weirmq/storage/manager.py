"""All partition logs of one data directory: opening, recovery points, flushing, retention.

    weirmq-data/
        recovery-point-offset-checkpoint     topic partition offset: durable up to here
        cleaner-offset-checkpoint            topic partition offset: compacted below here
        cleaner-tombstone-checkpoint         topic partition ms: oldest cleaned tombstone
        log-start-offset-checkpoint          topic partition offset: DeleteRecords' starts
        .clean-shutdown                      present only after an orderly close
        .boot-id                             the kernel's boot id when this directory was opened
        orders-0/  orders-1/  ...            one FileLog each
        (and the owner's state files, written at close: the broker's producer state)

On open, every partition directory is opened with its recovery point (0 if unknown, so
everything is re-validated). The clean-shutdown marker is removed as soon as it is read:
if we crash later, the next start must recover.

A clean close goes in three steps, each durable before the next begins:
1. every log flushed in one pass (`log.flush_logs`: all the fsyncs at once, and only of
   files holding bytes not yet fsynced);
2. the checkpoints and the owner's state files replaced together
   (`checkpoint.write_files_atomically`: one fsync pass, the renames, one directory fsync);
3. the clean-shutdown marker, only if every log is durable and every file was written.
The marker vouches for everything before it. A kill at any point before it leaves no
marker, and the next open recovers from the recovery points, which never claim more than
what was durable when they were written. The owner may call step 1 itself
(`flush_for_close`) to take its snapshots of durable logs before step 2.

Boot id: appends reach the kernel at once (`pwritev`) and are fsynced later (a group
commit, the periodic flush), so a killed process loses nothing it wrote, while a machine
that stops (power, kernel panic) can lose what was not fsynced yet. Most writes are
acknowledged only once fsynced, and then that loss takes nothing anyone was told of; a
transactional batch is acknowledged before (broker/partition.py), so the broker must know
which kind of stop it restarts from. `_load` compares the kernel's boot id
(/proc/sys/kernel/random/boot_id, the same in every container of one kernel) with the one
recorded in `.boot-id` at the previous open: after an unclean stop, a different one (or
none to be read now, or a file that cannot be read) sets `unsynced_may_be_lost`, and the
broker fences every transaction the stop may have cut. The new id is recorded (fsynced)
at once when there is nothing to deal with, else by the owner (`record_boot`) once what
it did about it is durable: a start that dies before then leaves the old id, and the
next start deals with it again. A directory without the file (new, or from a version that
fsynced every acknowledged write) loses nothing either way. After a failed fsync, the
kernel may have marked the pages it could not write clean, so that they read back after a
mere process restart though they are not on disk: `_note_fsync_failure` then records an id
no boot has, so the next unclean start counts as a machine's. `boot_recorded` says whether
the file names this boot now; while it does not, writes must wait for their fsync.

One `HandleCache` is shared by every log, so open files are bounded by `handles_max`
whatever the number of partitions. One `GroupCommitter` thread serves `sync` (acks=all)
and, every `flush_interval_ms`, flushes logs with unflushed data (in one pass, as at
close) and rewrites the recovery-point checkpoint when it changed.

The owner (the broker's event loop thread) calls `housekeeping` periodically for
retention and time-based rolls; those never run on the flusher thread.

Compaction (cleaner.py): the `LogCleaner` thread rewrites compacted logs' segments into
swap files; the owner swaps them in (`finish_cleaning`, called when the cleaner says so
and at each housekeeping), then writes `cleaner-offset-checkpoint` and, in the same
pass, `cleaner-tombstone-checkpoint`: per log, when the oldest tombstone left in its
cleaned part was last cleaned, so that their expiry alone starts a cleaning (KIP-534;
cleaner.py, *Tombstones*). The cleaner's settings come in `StorageSettings` (the broker's
`log_cleaner_*` settings); with `cleaner_enable` off no cleaner thread is started.

Creating a partition is mostly file-system work: a directory and a file, 0.3-2 ms
measured here, which at thousands of partitions would stall the owner's thread for
seconds. `prepare` does that work on any thread (it touches the file system only, never
the handle cache or the map of logs, which belong to the owner), and makes the new
directories durable; `create` then only opens what it made, ~0.1 ms each.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from ..types import TopicPartition
from .checkpoint import (
    encode_offsets,
    fsync_directory,
    read_offsets,
    write_files_atomically,
    write_offsets,
)
from .cleaner import (
    CLEANER_CHECKPOINT_FILE,
    DEDUPE_ENTRY_BYTES,
    CleanerSettings,
    CompactionConfig,
    LogCleaner,
    discard,
    swap_in,
)
from .config import LogConfig
from .errors import is_disk_full, storage_error
from .flusher import GroupCommitter, Waiter
from .fsync import fsync_all
from .handles import HandleCache
from .interface import Clock
from .log import FileLog, flush_logs
from .segment import segment_name

log = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
TOMBSTONE_FILE = "cleaner-tombstone-checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
BOOT_ID_FILE = ".boot-id"
BOOT_ID_SOURCE = Path("/proc/sys/kernel/random/boot_id")
FSYNC_FAILED_BOOT_ID = b"fsync-failed\n"
"""Recorded after a failed fsync: no boot's id, so the next unclean start fences."""
UNKNOWN_BOOT_ID = "unknown"
"""Recorded where the kernel's boot id cannot be read: never equal to a later reading, so
every unclean stop there counts as a machine's."""
DELETED_SUFFIX = "-delete"
_TRASH_PREFIX_CHARS = 200  # + "." + 32 hex digits + "-delete" stays within 255 bytes
_CLEANER_DEFAULTS = CleanerSettings()


@dataclass(frozen=True, slots=True)
class StorageSettings:
    flush_interval_ms: int = 1000
    """Flush logs with unflushed data at least this often (acks=0/1 durability bound)."""
    handles_max: int = 256
    """Open segment files kept at most, across all partitions."""
    cleaner_enable: bool = True
    """log.cleaner.enable: off, compacted topics are never cleaned (no cleaner thread)."""
    cleaner_io_bytes_per_s: int = _CLEANER_DEFAULTS.io_bytes_per_s
    """log.cleaner.io.max.bytes.per.second: the cleaner's reads and writes together."""
    cleaner_dedupe_buffer_bytes: int = _CLEANER_DEFAULTS.offset_map_entries_max * DEDUPE_ENTRY_BYTES
    """log.cleaner.dedupe.buffer.size: the key map, `DEDUPE_ENTRY_BYTES` per key."""
    cleaner_backoff_ms: int = _CLEANER_DEFAULTS.backoff_ms
    """log.cleaner.backoff.ms: the cleaner's sleep when no log needs cleaning."""

    def cleaner_settings(self) -> CleanerSettings:
        return CleanerSettings.from_dedupe_bytes(
            enabled=self.cleaner_enable,
            io_bytes_per_s=self.cleaner_io_bytes_per_s,
            dedupe_bytes=self.cleaner_dedupe_buffer_bytes,
            backoff_ms=self.cleaner_backoff_ms,
        )


_FIRST_SEGMENT_FILE = f"{segment_name(0)}.log"


def current_boot_id() -> str | None:
    """The running kernel's boot id, None where it cannot be read (not Linux)."""
    try:
        found = BOOT_ID_SOURCE.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return found or None


def _create_first_segment(directory: Path) -> None:
    """A new partition's empty first segment (its indexes come with data)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    os.close(os.open(directory / _FIRST_SEGMENT_FILE, flags, 0o644))


def _fsync_directory(path: str) -> None:
    fsync_directory(Path(path))


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return TopicPartition(topic, int(partition))


class LogManager:
    """See the module docstring."""

    def __init__(
        self,
        data_dir: Path,
        *,
        clock: Clock,
        settings: StorageSettings | None = None,
        config_for: Callable[[str], LogConfig] | None = None,
        compaction_for: Callable[[str], CompactionConfig] | None = None,
        cleaner_settings: CleanerSettings | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.settings = settings or StorageSettings()
        self._clock = clock
        self._config_for = config_for or (lambda _topic: LogConfig())
        self.handles = HandleCache(self.settings.handles_max)
        self._logs: dict[TopicPartition, FileLog] = {}
        self._lock = threading.Lock()
        self._checkpointed: tuple[dict[TopicPartition, int], ...] = ()
        self._checkpoint_lock = threading.Lock()  # the flusher thread and the owner both write
        self._closed = False
        self._flushed_for_close: bool | None = None
        self.periodic_state: Callable[[], Mapping[str, bytes]] | None = None
        """The owner's state files that are true once everything appended before they
        were taken is durable (the broker's routing cursors): taken on the flusher thread
        before each periodic flush, written after it when the flush failed nowhere."""
        self._periodic_written: Mapping[str, bytes] = {}
        self.disk_full = False
        """Whether the last periodic write failed for lack of space (logged once per episode,
        and again when it clears)."""
        self.unsynced_may_be_lost = False
        """Whether the previous stop was unclean and the machine restarted since, so that
        writes not yet fsynced then may be gone (see *Boot id*)."""
        self.boot_recorded = False
        """Whether `.boot-id` holds this boot's id, so that a machine's crash from now on
        will be known at the next start. Until it does (and after any failed fsync), the
        owner must not acknowledge a write before its fsync (see *Boot id*)."""
        self._boot_lock = threading.Lock()
        self._boot_poisoned = False
        """An fsync failed in this run (`_note_fsync_failure`)."""
        self.publish_refusal: str | None = None
        """Why client publishes are refused now (free space below the broker's floor,
        broker/resources.py), None when they are not; the broker's own writes go on."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._clean_offsets: dict[TopicPartition, int] = {}
        """The cleaner checkpoint: per compacted log, offsets below this were cleaned."""
        self._tombstones_ms: dict[TopicPartition, int] = {}
        """Per compacted log, when the oldest tombstone of its cleaned part was cleaned."""
        self._load()
        self.committer = GroupCommitter(
            interval_ms=self.settings.flush_interval_ms,
            periodic=self._periodic_flush,
            on_failure=self._note_fsync_failure,
        )
        self.cleaner = LogCleaner(
            logs=self.logs,
            config_for=compaction_for or (lambda _topic: CompactionConfig()),
            checkpoints=lambda: dict(self._clean_offsets),
            clock=clock,
            settings=cleaner_settings or self.settings.cleaner_settings(),
            tombstones=lambda: dict(self._tombstones_ms),
        )
        """Log compaction (cleaner.py): started by the owner (`start_cleaner`), its results
        swapped in on the owner's thread by `finish_cleaning`."""

    # --- partitions -------------------------------------------------------------------

    def _load(self) -> None:
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        self._note_boot(clean)
        recovery_points = read_offsets(self.data_dir / RECOVERY_POINT_FILE)
        self._clean_offsets = dict(read_offsets(self.data_dir / CLEANER_CHECKPOINT_FILE))
        self._tombstones_ms = dict(read_offsets(self.data_dir / TOMBSTONE_FILE))
        log_starts = read_offsets(self.data_dir / LOG_START_FILE)
        for entry in sorted(os.scandir(self.data_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETED_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)  # a deletion interrupted by a crash
                continue
            tp = parse_partition_dir(entry.name)
            if tp is None:
                continue
            self._logs[tp] = FileLog(
                Path(entry.path),
                self._config_for(tp[0]),
                handles=self.handles,
                clock=self._clock,
                recovery_point=recovery_points.get(tp, 0),
                clean_shutdown=clean and tp in recovery_points,
                log_start_offset=log_starts.get(tp, 0),
            )
        if clean:
            marker.unlink()
        try:
            self.write_checkpoints()
        except OSError as exc:
            # The old checkpoints stay: they never claim more than what is on disk, and a
            # broker on a full disk must still start so that its consumers can drain it.
            log.error("cannot write the checkpoints at start (%s): keeping the old ones", exc)
            self.disk_full = is_disk_full(exc)

    def _note_boot(self, clean: bool) -> None:
        """Set `unsynced_may_be_lost`; record this boot's id now unless it is set (then the
        owner records it with `record_boot` once it has acted on it)."""
        path = self.data_dir / BOOT_ID_FILE
        try:
            previous: str | None = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            previous = None  # a new directory, or from a version that fsynced every ack
        except (OSError, UnicodeDecodeError) as exc:
            log.error("cannot read %s (%s): taking the previous stop for a machine's", path, exc)
            previous = UNKNOWN_BOOT_ID + " (unreadable)"
        current = current_boot_id()
        if not clean and previous is not None and previous != current:
            self.unsynced_may_be_lost = True
            log.warning(
                "%s: the previous stop was unclean and the machine restarted since, or an "
                "fsync had failed (boot id %s, now %s): writes not yet fsynced then may be lost",
                self.data_dir,
                previous,
                current or UNKNOWN_BOOT_ID,
            )
            return
        self._record_boot(previous)

    def record_boot(self) -> None:
        """Record this boot's id: the owner has dealt with `unsynced_may_be_lost` (its
        consequences are durable), or there was nothing to deal with."""
        self._record_boot(None)

    def _record_boot(self, previous: str | None) -> None:
        recorded = current_boot_id() or UNKNOWN_BOOT_ID
        with self._boot_lock:
            if self._boot_poisoned:
                return
            try:
                if previous != recorded:
                    write_files_atomically(self.data_dir, {BOOT_ID_FILE: recorded.encode() + b"\n"})
            except OSError as exc:
                # Transactional writes then wait for their fsync (`boot_recorded` stays False).
                log.error("cannot record the boot id in %s: %s", self.data_dir, exc)
                return
            self.boot_recorded = True

    def _note_fsync_failure(self, exc: BaseException) -> None:
        """An fsync failed somewhere (any thread). The kernel may have marked the pages it
        could not write clean, so that they read back after a restart of the process yet
        are not on disk: from now on the next unclean start must count as a machine's
        (`.boot-id` no longer names this boot), and writes wait for their fsync again."""
        with self._boot_lock:
            if self._boot_poisoned:
                return
            self._boot_poisoned = True
            self.boot_recorded = False
            try:
                write_files_atomically(self.data_dir, {BOOT_ID_FILE: FSYNC_FAILED_BOOT_ID})
            except OSError as write_exc:
                log.error(
                    "after a failed fsync (%s), cannot mark %s: %s", exc, BOOT_ID_FILE, write_exc
                )

    def get(self, topic: str, partition: int) -> FileLog | None:
        return self._logs.get(TopicPartition(topic, partition))

    def logs(self) -> dict[TopicPartition, FileLog]:
        with self._lock:
            return dict(self._logs)

    def create(self, topic: str, partition: int, config: LogConfig | None = None) -> FileLog:
        """The partition's log, created empty if it does not exist. Raises `StorageError`
        (`DiskFullError` on a full disk) when it cannot be, leaving no directory behind."""
        tp = TopicPartition(topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        directory = self.data_dir / f"{topic}-{partition}"
        existed = directory.exists()
        try:
            new = FileLog(
                directory,
                config or self._config_for(topic),
                handles=self.handles,
                clock=self._clock,
            )
        except OSError as exc:  # a full disk: leave no half-made partition behind
            if not existed:
                shutil.rmtree(directory, ignore_errors=True)
            raise storage_error(exc, f"creating {directory.name}") from exc
        with self._lock:
            self._logs[tp] = new
        return new

    def prepare(self, topic: str, indexes: range) -> None:
        """Make the directories of new partitions `indexes` of `topic`, each with its empty
        first segment, and fsync them and the data directory: what `create` would do on
        the owner's thread, done on any (see the module docstring). A directory that
        exists already is left for `create` to open as it is.

        All or nothing: on a failure (a full disk) what it made is removed and
        `StorageError` (`DiskFullError`) raised. The fsyncs make the new entries durable
        before any log is opened, as a new log's first flush otherwise would: a log
        opened from an existing directory does not know that it is new."""
        made: list[Path] = []
        try:
            for index in indexes:
                directory = self.data_dir / f"{topic}-{index}"
                try:
                    os.mkdir(directory)
                except FileExistsError:
                    continue
                made.append(directory)
                _create_first_segment(directory)
            failed = fsync_all([*map(str, made), str(self.data_dir)], _fsync_directory)
            if failed:
                raise next(iter(failed.values()))
        except OSError as exc:
            for directory in made:
                shutil.rmtree(directory, ignore_errors=True)
            raise storage_error(exc, f"creating partitions of {topic}") from exc

    def discard(self, topic: str, indexes: range) -> None:
        """Remove what `prepare` made for partitions of `indexes` never opened (a creation
        undone, or given up)."""
        for index in indexes:
            if TopicPartition(topic, index) not in self._logs:
                shutil.rmtree(self.data_dir / f"{topic}-{index}", ignore_errors=True)

    def delete(self, topic: str, partition: int) -> None:
        """Remove the partition and its files (renamed first, so a crash cannot half-delete).

        The renamed directory keeps a prefix of the old name: a 249-character topic name
        plus the unique suffix would pass the file system's 255-byte limit."""
        doomed = self._logs.get(TopicPartition(topic, partition))
        if doomed is None:
            return
        for segment in doomed.segments:
            self.handles.forget(segment.log_path)
        prefix = doomed.directory.name[:_TRASH_PREFIX_CHARS]
        trash = doomed.directory.with_name(f"{prefix}.{uuid.uuid4().hex}{DELETED_SUFFIX}")
        try:
            os.rename(doomed.directory, trash)
        except OSError as exc:
            raise storage_error(exc, f"deleting {doomed.directory.name}") from exc
        with self._lock:
            del self._logs[TopicPartition(topic, partition)]
        shutil.rmtree(trash, ignore_errors=True)

    # --- durability -------------------------------------------------------------------

    def sync(self, log_: FileLog, offset: int | None = None) -> Future[int]:
        """Group commit: a future resolved once `log_` is durable up to `offset` (default:
        everything appended so far)."""
        return self.committer.request(log_, log_.log_end_offset if offset is None else offset)

    def when_durable(self, log_: FileLog, offset: int, waiter: Waiter) -> None:
        """Group commit, answered by a callback (see `flusher.GroupCommitter.when_durable`)."""
        self.committer.when_durable(log_, offset, waiter)

    def _periodic_flush(self) -> None:
        try:
            state = self.periodic_state() if self.periodic_state is not None else None
            due = [
                lg for lg in self.logs().values() if lg.needs_flush and lg.offline_reason is None
            ]
            if due:
                started = time.perf_counter()
                failed = flush_logs(due)
                seconds = time.perf_counter() - started  # each log waited for the whole pass
                for _ in range(len(due) - len(failed)):
                    self.committer.flush_latency.observe(seconds)
                for log_, exc in failed.items():
                    log.error("periodic flush of %s failed: %s", log_.directory.name, exc)
                if failed:
                    self._note_fsync_failure(next(iter(failed.values())))
                    state = None
            self.write_checkpoints()
            if state and state != self._periodic_written:
                with self._checkpoint_lock:
                    if not self._closed:
                        write_files_atomically(self.data_dir, state)
                        self._periodic_written = state
        except OSError as exc:  # the checkpoints keep their old versions; retried next time
            self._note_write_failure(exc)
            return
        except Exception:  # keep the flusher alive; the failing log is already offline
            log.exception("periodic flush failed")
            return
        if self.disk_full:
            self.disk_full = False
            log.warning("%s: disk space is back, checkpoints written again", self.data_dir)

    def _note_write_failure(self, exc: OSError) -> None:
        """Log a failed periodic write: a full disk once per episode, not every second."""
        if not is_disk_full(exc):
            log.error("periodic checkpoint write failed: %s", exc)
        elif not self.disk_full:
            self.disk_full = True
            log.error(
                "%s: disk full, checkpoints not written (%s); retrying every %d ms, "
                "reads go on and writes resume when space returns",
                self.data_dir,
                exc.strerror or exc,
                self.settings.flush_interval_ms,
            )

    def write_checkpoints(self) -> None:
        """Write the recovery points and log start offsets, if either moved since the last
        write. Runs on the flusher thread (periodically), on close, and after DeleteRecords."""
        with self._checkpoint_lock:
            self._write_checkpoints()

    def _checkpoint_state(self) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        logs = self.logs()
        return (
            {tp: lg.flushed_offset for tp, lg in logs.items()},
            {tp: lg.log_start_offset for tp, lg in logs.items()},
        )

    def _write_checkpoints(self) -> None:
        state = self._checkpoint_state()
        if state == self._checkpointed:
            return
        write_offsets(self.data_dir / RECOVERY_POINT_FILE, state[0])
        write_offsets(self.data_dir / LOG_START_FILE, state[1])
        self._checkpointed = state

    # --- housekeeping -----------------------------------------------------------------

    def housekeeping(self) -> int:
        """Time-based rolls and retention for every log; returns segments deleted."""
        deleted = 0
        rolled = False
        for log_ in self.logs().values():
            rolled = log_.maybe_roll() or rolled
            deleted += log_.apply_retention()
        self.finish_cleaning()
        if rolled:  # a segment became sealed: it may be cleanable now
            self.cleaner.wake()
        return deleted

    def start_cleaner(self, on_ready: Callable[[], None] | None = None) -> None:
        """Start the cleaner's thread (none when the cleaner is disabled); `on_ready`
        (called on that thread) should make the owner call `finish_cleaning` soon."""
        self.cleaner.on_ready = on_ready
        self.cleaner.start()

    def finish_cleaning(self) -> int:
        """On the owner's thread: swap in what the cleaner rewrote, then write the cleaner
        checkpoint (after the swaps are durable). Returns how many logs were swapped."""
        ready = self.cleaner.take_ready()
        swapped = 0
        for cleaning in ready:
            if self._closed or self._logs.get(cleaning.tp) is not cleaning.log:
                discard(cleaning)  # the partition was deleted (or we are stopping)
                continue
            now = self._clock()
            try:
                ok = swap_in(cleaning, now)
            except OSError as exc:
                log.error("swapping in the cleaned %s failed: %s", cleaning.tp, exc)
                discard(cleaning)
                continue
            if ok:
                swapped += 1
                self.cleaner.stats.segments_swapped += len(cleaning.swaps)
                previous = self._clean_offsets.get(cleaning.tp, 0)
                self._clean_offsets[cleaning.tp] = max(previous, cleaning.new_checkpoint)
                self._note_tombstones(cleaning.tp, cleaning.tombstones_ms(now))
        if ready:
            self._write_cleaner_checkpoints()
        return swapped

    def _note_tombstones(self, tp: TopicPartition, cleaned_ms: int | None) -> None:
        if cleaned_ms is None:
            self._tombstones_ms.pop(tp, None)
        else:
            self._tombstones_ms[tp] = cleaned_ms

    def _write_cleaner_checkpoints(self) -> None:
        """Both cleaner files in one pass. Either may be older than the other after a
        crash: an old offset checkpoint only redoes a cleaning, and an old or missing
        tombstone note at worst starts one cleaning early or waits for an ordinary one
        (cleaner.py, *Tombstones*)."""
        live = {tp: o for tp, o in self._clean_offsets.items() if tp in self._logs}
        self._clean_offsets = live
        notes = {tp: t for tp, t in self._tombstones_ms.items() if tp in self._logs}
        self._tombstones_ms = notes
        files = {
            CLEANER_CHECKPOINT_FILE: encode_offsets(live),
            TOMBSTONE_FILE: encode_offsets(notes),
        }
        try:
            write_files_atomically(self.data_dir, files)
        except OSError as exc:  # the old one is behind, never ahead: cleaning redone
            log.error("writing %s failed: %s", ", ".join(files), exc)

    def flush_for_close(self) -> bool:
        """The first half of `close`: drain the flusher, then flush every log in one pass,
        indexes included (`log.flush_logs`). Returns whether every log is now durable and
        online. Nothing flushes the logs after this; the owner appends no more."""
        if self._flushed_for_close is None:
            self.cleaner.close()
            for cleaning in self.cleaner.take_ready():
                discard(cleaning)
            self.committer.close()
            logs = list(self.logs().values())
            failed = flush_logs(
                [lg for lg in logs if lg.offline_reason is None], sync_active_index=True
            )
            for log_, exc in failed.items():
                log.error("flushing %s on close failed: %s", log_.directory.name, exc)
            if failed:
                self._note_fsync_failure(next(iter(failed.values())))
            self._flushed_for_close = all(lg.offline_reason is None for lg in logs) and not failed
        return self._flushed_for_close

    def close(self, state_files: Mapping[str, bytes] | None = None) -> None:
        """Orderly shutdown: `flush_for_close` (unless the owner called it already), then
        the checkpoints and `state_files` (name: bytes, such as the broker's producer-state
        snapshot) replaced in one pass beside them, then the clean-shutdown marker.

        The marker comes last, and only when every log is durable and every file written:
        it vouches for all of them, so that the next open re-validates nothing."""
        if self._closed:
            return
        clean = self.flush_for_close()
        self._closed = True
        self.handles.close()
        with self._checkpoint_lock:
            state = self._checkpoint_state()
            files = {
                RECOVERY_POINT_FILE: encode_offsets(state[0]),
                LOG_START_FILE: encode_offsets(state[1]),
                **(state_files or {}),
            }
            try:
                write_files_atomically(self.data_dir, files)
                self._checkpointed = state
            except OSError as exc:
                log.error("writing %s on close failed: %s", ", ".join(files), exc)
                clean = False
        if clean:
            marker = self.data_dir / CLEAN_SHUTDOWN_FILE
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            fsync_directory(self.data_dir)
