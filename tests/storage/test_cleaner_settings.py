"""The log cleaner's broker settings, and when it cleans for tombstones alone (KIP-534).

Settings: parsed from the environment like every setting, carried by `StorageSettings`
into the cleaner (a disabled cleaner starts no thread and never cleans; the dedupe buffer
bounds the keys of one cleaning). Tombstones: a log whose dirty ratio stays below
`min.cleanable.dirty.ratio` is still cleaned once tombstones in its cleaned part have
passed `delete.retention.ms`, and the note that decides it survives a restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from weirmq.broker.core import Broker
from weirmq.records.batch import Record, decode_records, encode_batch, parse_header
from weirmq.settings import Settings, load_settings
from weirmq.storage.checkpoint import read_offsets
from weirmq.storage.cleaner import CLEANER_CHECKPOINT_FILE, CompactionConfig
from weirmq.storage.config import LogConfig
from weirmq.storage.log import FileLog
from weirmq.storage.manager import TOMBSTONE_FILE, LogManager, StorageSettings
from weirmq.testing import ManualClock
from weirmq.testing.records import split_batches
from weirmq.types import TopicPartition

TOPIC = "compacted"
HOUR_MS = 3_600_000

Write = tuple[bytes, bytes | None]


def _manager(
    path: Path,
    clock: ManualClock,
    settings: StorageSettings | None = None,
    compaction: CompactionConfig | None = None,
) -> LogManager:
    return LogManager(
        path,
        clock=clock,
        settings=settings,
        config_for=lambda _topic: LogConfig(
            segment_bytes=1024, index_interval_bytes=256, retention_ms=None
        ),
        compaction_for=lambda _topic: (
            compaction or CompactionConfig(compact=True, min_cleanable_dirty_ratio=0)
        ),
    )


def _append(log_: FileLog, batches: Sequence[Sequence[Write]], clock: ManualClock) -> None:
    for writes in batches:
        log_.append(encode_batch([Record(value=v, key=k, timestamp_ms=clock()) for k, v in writes]))
        clock.advance(1)


def _seal(log_: FileLog) -> None:
    if not log_.segments[-1].is_empty:
        log_._roll()
    log_.flush()


def _records(log_: FileLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        data = log_.read(offset, 1 << 20).records
        if not data:
            break
        for batch in split_batches(data):
            out.extend(r for r in decode_records(batch) if r[0] >= offset)
            offset = max(offset, parse_header(batch).last_offset + 1)
    return out


# --- settings ------------------------------------------------------------------------------


def test_the_settings_are_read_from_the_environment() -> None:
    settings = load_settings(
        environ={
            "WEIRMQ_LOG_CLEANER_ENABLE": "false",
            "WEIRMQ_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND": "1048576",
            "WEIRMQ_LOG_CLEANER_DEDUPE_BUFFER_SIZE": "16000",
            "WEIRMQ_LOG_CLEANER_BACKOFF_MS": "250",
        }
    )
    assert settings.log_cleaner_enable is False
    assert settings.log_cleaner_io_max_bytes_per_second == 1048576
    assert settings.log_cleaner_dedupe_buffer_size == 16000
    assert settings.log_cleaner_backoff_ms == 250
    defaults = Settings()
    assert defaults.log_cleaner_enable is True
    assert defaults.log_cleaner_io_max_bytes_per_second == 64 * 1024 * 1024
    assert defaults.log_cleaner_backoff_ms == 15_000


def test_the_broker_hands_its_settings_to_the_cleaner(tmp_path: Path) -> None:
    broker = Broker(
        Settings(
            data_dir=tmp_path,
            log_cleaner_io_max_bytes_per_second=2_000_000,
            log_cleaner_dedupe_buffer_size=16_000,
            log_cleaner_backoff_ms=500,
        )
    )
    try:
        cleaner = broker.logs.cleaner.settings
        assert cleaner.enabled
        assert cleaner.io_bytes_per_s == 2_000_000
        assert cleaner.offset_map_entries_max == 1000  # 16 bytes per key
        assert cleaner.backoff_ms == 500
    finally:
        broker.close()


def test_defaults_keep_the_cleaners_former_bounds() -> None:
    cleaner = StorageSettings().cleaner_settings()
    assert (cleaner.offset_map_entries_max, cleaner.io_bytes_per_s) == (500_000, 64 * 1024 * 1024)


def test_a_disabled_cleaner_starts_no_thread_and_never_cleans(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(tmp_path, clock, StorageSettings(cleaner_enable=False))
    try:
        log_ = manager.create(TOPIC, 0)
        _append(log_, [[(b"k", b"v%d" % i)] for i in range(20)], clock)
        _seal(log_)
        before = _records(log_)
        manager.start_cleaner()
        assert not manager.cleaner.running
        assert manager.cleaner.run_once() == 0
        manager.housekeeping()
        assert _records(log_) == before
        assert not (tmp_path / CLEANER_CHECKPOINT_FILE).exists() or TOPIC not in {
            tp.topic for tp in read_offsets(tmp_path / CLEANER_CHECKPOINT_FILE)
        }
    finally:
        manager.close()


def test_the_dedupe_buffer_bounds_the_keys_of_one_cleaning(
    tmp_path: Path, clock: ManualClock
) -> None:
    """1024 bytes hold 64 keys: 200 distinct keys take several cleanings, each moving the
    checkpoint only as far as its map reached."""
    manager = _manager(tmp_path, clock, StorageSettings(cleaner_dedupe_buffer_bytes=1024))
    try:
        assert manager.cleaner.settings.offset_map_entries_max == 64
        log_ = manager.create(TOPIC, 0)
        _append(
            log_, [[(b"k%d" % (i + j), b"v") for j in range(10)] for i in range(0, 200, 10)], clock
        )
        _append(log_, [[(b"k0", b"w")]], clock)
        _seal(log_)
        end = log_.segments[-1].base_offset
        assert manager.cleaner.run_once() == 1
        manager.finish_cleaning()
        first = read_offsets(tmp_path / CLEANER_CHECKPOINT_FILE)[log_tp(manager)]
        assert 0 < first < end
        for _ in range(10):
            if manager.cleaner.run_once() == 0:
                break
            manager.finish_cleaning()
        assert read_offsets(tmp_path / CLEANER_CHECKPOINT_FILE)[log_tp(manager)] == end
        assert [r for r in _records(log_) if r[1] == b"k0"] == [(200, b"k0", b"w")]
    finally:
        manager.close()


def log_tp(manager: LogManager) -> TopicPartition:
    (tp,) = manager.logs()
    return tp


# --- tombstone-driven cleaning (KIP-534) ---------------------------------------------------


def _with_old_tombstones(
    path: Path, clock: ManualClock, ratio: float
) -> tuple[LogManager, FileLog]:
    """A log cleaned once, its cleaned part holding tombstones for k0..k4, then a little
    more written: far below `ratio`."""
    manager = _manager(
        path,
        clock,
        compaction=CompactionConfig(
            compact=True, min_cleanable_dirty_ratio=ratio, delete_retention_ms=HOUR_MS
        ),
    )
    log_ = manager.create(TOPIC, 0)
    _append(log_, [[(b"k%d" % i, b"value" * 10) for i in range(5)] for _ in range(4)], clock)
    _append(log_, [[(b"k%d" % i, None) for i in range(5)]], clock)
    _append(
        log_,
        [[(b"live%d" % (i + j), b"value" * 4) for j in range(5)] for i in range(0, 40, 5)],
        clock,
    )
    _seal(log_)
    # The first cleaning: everything is dirty (ratio 1).
    assert manager.cleaner.run_once() == 1
    manager.finish_cleaning()
    _append(log_, [[(b"live0", b"x")]], clock)
    _seal(log_)
    return manager, log_


def test_expired_tombstones_alone_start_a_cleaning(tmp_path: Path, clock: ManualClock) -> None:
    manager, log_ = _with_old_tombstones(tmp_path, clock, ratio=0.9)
    try:
        tombstones = [r for r in _records(log_) if r[2] is None]
        assert [k for _o, k, _v in tombstones] == [b"k%d" % i for i in range(5)]
        assert read_offsets(tmp_path / TOMBSTONE_FILE)  # the note is kept
        assert manager.cleaner.run_once() == 0  # below the ratio, tombstones not expired
        clock.advance(HOUR_MS)
        assert manager.cleaner.run_once() == 1  # still below the ratio: the tombstones
        manager.finish_cleaning()
        records = _records(log_)
        assert not [r for r in records if r[2] is None]
        assert {k for _o, k, _v in records} == {b"live%d" % i for i in range(40)}
        assert manager.cleaner.run_once() == 0  # nothing noted any more: no more cleanings
        assert not read_offsets(tmp_path / TOMBSTONE_FILE)
    finally:
        manager.close()


def test_the_tombstone_note_survives_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    manager, _log = _with_old_tombstones(tmp_path, clock, ratio=0.9)
    manager.close()
    reopened = _manager(
        tmp_path,
        clock,
        compaction=CompactionConfig(
            compact=True, min_cleanable_dirty_ratio=0.9, delete_retention_ms=HOUR_MS
        ),
    )
    try:
        assert reopened.cleaner.run_once() == 0
        clock.advance(HOUR_MS)
        assert reopened.cleaner.run_once() == 1
        reopened.finish_cleaning()
        again = reopened.get(TOPIC, 0)
        assert again is not None
        assert not [r for r in _records(again) if r[2] is None]
    finally:
        reopened.close()


def test_a_log_without_tombstones_is_not_cleaned_below_its_ratio(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(
        tmp_path,
        clock,
        compaction=CompactionConfig(compact=True, min_cleanable_dirty_ratio=0.9),
    )
    try:
        log_ = manager.create(TOPIC, 0)
        _append(log_, [[(b"k%d" % i, b"v" * 50) for i in range(10)] for _ in range(3)], clock)
        _seal(log_)
        assert manager.cleaner.run_once() == 1
        manager.finish_cleaning()
        _append(log_, [[(b"k0", b"w")]], clock)
        _seal(log_)
        clock.advance(30 * 24 * HOUR_MS)
        assert manager.cleaner.run_once() == 0
    finally:
        manager.close()
