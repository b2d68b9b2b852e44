"""The data directory: group commit, periodic flush, checkpoints, clean and unclean restarts."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import wait
from pathlib import Path

import pytest

from weirmq.storage import manager as manager_module
from weirmq.storage.checkpoint import read_offsets, write_offsets
from weirmq.storage.config import LogConfig
from weirmq.storage.errors import StorageError
from weirmq.storage.manager import (
    BOOT_ID_FILE,
    CLEAN_SHUTDOWN_FILE,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    UNKNOWN_BOOT_ID,
    LogManager,
    StorageSettings,
)
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch, read_all

SLOW_FLUSH = StorageSettings(flush_interval_ms=3_600_000)  # only explicit syncs flush


def small_index(_topic: str) -> LogConfig:
    return LogConfig(index_interval_bytes=64)  # an index entry from the second batch on


def test_sync_resolves_once_durable(tmp_path: Path, clock: ManualClock) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    log = manager.create("orders", 0)
    log.append(make_batch(3))
    assert log.flushed_offset == 0
    assert manager.sync(log).result(timeout=10) == 3
    assert log.flushed_offset == 3
    assert manager.sync(log).done()  # nothing new to flush: answered at once
    manager.close()


def test_when_durable_calls_back_from_the_flusher_thread(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    log = manager.create("orders", 0)
    log.append(make_batch(3))
    called: list[tuple[int | BaseException, str]] = []
    done = threading.Event()

    def waiter(result: int | BaseException) -> None:
        called.append((result, threading.current_thread().name))
        done.set()

    manager.when_durable(log, 3, waiter)
    assert done.wait(10)
    assert called == [(3, "weirmq-flusher")]
    manager.when_durable(log, 3, waiter)  # already durable: answered at once, right here
    assert called[-1] == (3, threading.current_thread().name)
    manager.close()
    log.append(make_batch(1))
    manager.when_durable(log, 4, waiter)  # nothing will flush it any more
    result, _thread = called[-1]
    assert isinstance(result, StorageError) and "closed" in str(result)


def test_a_failed_fsync_is_given_to_every_waiter(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    log = manager.create("orders", 0)
    log.append(make_batch(3))

    def failing_fsync(path: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("weirmq.storage.log._fsync_path", failing_fsync)
    futures = [manager.sync(log, 1), manager.sync(log, 3)]
    for future in futures:
        assert isinstance(future.exception(timeout=10), StorageError)
    # Not offline: the log rolls back to what was durable and waits for fsync to work.
    assert log.offline_reason is None
    assert log.fsync_failed is not None and "Input/output error" in log.fsync_failed
    manager.close()


def test_one_fsync_round_covers_many_waiting_requests(tmp_path: Path, clock: ManualClock) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    logs = [manager.create("t", p) for p in range(4)]
    futures = []
    for i in range(400):  # appends keep arriving while the flusher is busy fsyncing
        log = logs[i % 4]
        log.append(make_batch(1, size=200))
        futures.append((manager.sync(log), log.log_end_offset))
    done, _ = wait([f for f, _ in futures], timeout=30)
    assert len(done) == 400
    for future, end in futures:
        assert future.result() >= end
    assert manager.committer.rounds < 400
    manager.close()


def test_sync_from_many_threads(tmp_path: Path, clock: ManualClock) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    log = manager.create("t", 0)
    log.append(make_batch(1))
    results: list[int] = []

    def waiter() -> None:
        results.append(manager.sync(log, 1).result(timeout=10))

    threads = [threading.Thread(target=waiter) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [1] * 16
    manager.close()


def test_the_flush_interval_flushes_without_being_asked(tmp_path: Path, clock: ManualClock) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=StorageSettings(flush_interval_ms=20))
    log = manager.create("t", 0)
    log.append(make_batch(5))
    deadline = time.monotonic() + 10  # a bound on waiting, not a timing assertion
    while log.flushed_offset < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.flushed_offset == 5
    while read_offsets(tmp_path / RECOVERY_POINT_FILE).get(("t", 0)) != 5:
        assert time.monotonic() < deadline, "the recovery point was never checkpointed"
        time.sleep(0.01)
    manager.close()


def test_clean_restart_trusts_the_files(
    tmp_path: Path, clock: ManualClock, recovered: list[str]
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH, config_for=small_index)
    for p in range(3):
        log = manager.create("orders", p)
        for _ in range(p + 2):  # two batches at least: an index entry in every segment
            log.append(make_batch(2))
    expected = {tp: read_all(lg) for tp, lg in manager.logs().items()}
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offsets(tmp_path / RECOVERY_POINT_FILE) == {
        ("orders", 0): 4,
        ("orders", 1): 6,
        ("orders", 2): 8,
    }
    recovered.clear()
    again = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH, config_for=small_index)
    assert recovered == []
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from here must recover
    assert {tp: read_all(lg) for tp, lg in again.logs().items()} == expected
    again.close()


def test_restart_after_a_crash_recovers_from_the_checkpoint(
    tmp_path: Path, clock: ManualClock, recovered: list[str]
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    log = manager.create("t", 0, LogConfig(segment_bytes=1024))
    for _ in range(30):
        log.append(make_batch(1, size=100))
    manager.sync(log).result(timeout=10)
    manager.write_checkpoints()
    log.append(make_batch(1, size=100))  # not flushed, and torn by the crash
    manager.committer.close()
    manager.handles.close()  # the crash: no close(), no marker
    last = log.segments[-1].log_path
    os.truncate(last, os.path.getsize(last) - 7)
    recovered.clear()
    again = LogManager(
        tmp_path,
        clock=clock,
        settings=SLOW_FLUSH,
        config_for=lambda _: LogConfig(segment_bytes=1024),
    )
    revived = again.get("t", 0)
    assert revived is not None and revived.offline_reason is None
    assert revived.log_end_offset == 30
    # Re-validated: the segment holding the recovery point, and the one before it, whose
    # index was still in memory (never written) when the crash came. Nothing older.
    assert recovered == [log.segments[-2].log_path, last]
    again.close()


def test_a_malformed_checkpoint_means_recovering_everything(
    tmp_path: Path, clock: ManualClock, recovered: list[str]
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    manager.create("t", 0).append(make_batch(4))
    manager.close()
    (tmp_path / RECOVERY_POINT_FILE).write_text("0\n7\nt 0 4\n")  # count does not match
    recovered.clear()
    again = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    assert len(recovered) == 1
    log = again.get("t", 0)
    assert log is not None and log.log_end_offset == 4
    again.close()


def test_deleted_records_stay_deleted_after_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    log = manager.create("t", 0)
    for _ in range(5):
        log.append(make_batch(2))
    log.advance_log_start(7)
    manager.close()
    assert read_offsets(tmp_path / LOG_START_FILE) == {("t", 0): 7}
    again = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    revived = again.get("t", 0)
    assert revived is not None and revived.log_start_offset == 7
    again.close()


def test_delete_partition_and_leftovers(tmp_path: Path, clock: ManualClock) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    manager.create("a", 0).append(make_batch())
    manager.create("b", 0).append(make_batch())
    manager.delete("a", 0)
    assert manager.get("a", 0) is None
    assert not (tmp_path / "a-0").exists()
    manager.close()
    (tmp_path / "b-0.0123-delete").mkdir()  # a deletion a crash interrupted
    again = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    assert sorted(again.logs()) == [("b", 0)]
    assert not (tmp_path / "b-0.0123-delete").exists()
    again.close()


def test_a_partition_of_a_249_character_topic_can_be_deleted(
    tmp_path: Path, clock: ManualClock
) -> None:
    # The renamed directory must fit the file system's 255-byte name limit (found by the
    # admin API's fuzz test: deleting such a topic failed with "File name too long").
    name = "t" * 249
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    manager.create(name, 10).append(make_batch())
    manager.delete(name, 10)
    assert manager.get(name, 10) is None
    assert list(tmp_path.glob("t*")) == []
    manager.close()


def test_housekeeping_applies_each_topics_retention(tmp_path: Path, clock: ManualClock) -> None:
    configs = {
        "short": LogConfig(segment_bytes=1024, retention_ms=1000),
        "long": LogConfig(segment_bytes=1024),
    }
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH, config_for=configs.__getitem__)
    for topic in configs:
        log = manager.create(topic, 0)
        for _ in range(12):
            log.append(make_batch(1, size=200, ts=clock.now_ms))
    clock.advance(5000)
    assert manager.housekeeping() > 0
    short, long_ = manager.get("short", 0), manager.get("long", 0)
    assert short is not None and long_ is not None
    assert short.log_start_offset == short.log_end_offset == 12
    assert long_.log_start_offset == 0
    manager.close()
    assert read_offsets(tmp_path / LOG_START_FILE)[("short", 0)] == 12


def test_checkpoint_files_are_replaced_atomically(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offsets(path, {("a", 0): 1})
    write_offsets(path, {("a", 0): 2, ("b-x", 3): 4})
    assert read_offsets(path) == {("a", 0): 2, ("b-x", 3): 4}
    assert sorted(os.listdir(tmp_path)) == ["cp"]  # no temp file left behind


# --- a clean close ----------------------------------------------------------------------


def record_fsyncs(monkeypatch: pytest.MonkeyPatch, failing: str = "\0") -> list[str]:
    """The paths the logs fsync from now on; those containing `failing` fail with EIO."""
    from weirmq.storage import log as log_module

    real = log_module._fsync_path
    paths: list[str] = []
    lock = threading.Lock()

    def spy(path: str) -> None:
        with lock:
            paths.append(path)
        if failing in path:
            raise OSError(5, "Input/output error")
        real(path)

    monkeypatch.setattr(log_module, "_fsync_path", spy)
    return paths


def test_close_fsyncs_only_what_is_not_yet_durable(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    synced, written, idle = (manager.create("t", p) for p in range(3))
    synced.append(make_batch(2))
    written.append(make_batch(2))
    manager.sync(synced).result(timeout=10)
    idle.flush()  # its new directory: nothing left to make durable
    fsyncs = record_fsyncs(monkeypatch)
    manager.close()
    # One small segment each: no index entries, so no index files either (see below);
    # `written` was never flushed, so its new directory is fsynced into the data dir too.
    assert fsyncs == [written.segments[-1].log_path, str(written.directory), str(tmp_path)]
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_a_small_active_segment_gets_no_index_files_and_is_reread_cheaply(
    tmp_path: Path, clock: ManualClock, recovered: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    log = manager.create("t", 0)
    log.append(make_batch(2, ts=5_000))
    expected = read_all(log)
    manager.close()
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == ["00000000000000000000.log"]
    recovered.clear()
    again = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    revived = again.get("t", 0)
    assert revived is not None and revived.flushed_offset == 2
    assert recovered == [log.segments[-1].log_path]  # under one index interval: re-read
    assert read_all(revived) == expected
    assert revived.max_timestamp_offset() == log.max_timestamp_offset()
    # Re-read, it is as durable as before: the next clean close has nothing to do.
    fsyncs = record_fsyncs(monkeypatch)
    again.close()
    assert fsyncs == []
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == ["00000000000000000000.log"]


def test_index_entries_added_after_a_clean_start_are_fsynced_by_the_next_close(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clean open marks the active segment's indexes synced; entries written after that
    # must be fsynced again before the next clean-shutdown marker vouches for them.
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH, config_for=small_index)
    log = manager.create("t", 0)
    for _ in range(3):
        log.append(make_batch(2))
    manager.close()
    again = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH, config_for=small_index)
    log = again.get("t", 0)
    assert log is not None and log.segments[-1].indexes_synced
    for _ in range(3):
        log.append(make_batch(2))
    again.sync(log).result(timeout=10)  # writes the new index entries, fsyncs the log only
    fsyncs = record_fsyncs(monkeypatch)
    again.close()
    segment = log.segments[-1]
    assert sorted(fsyncs) == sorted([segment.index_path, segment.timeindex_path])


def test_a_failed_fsync_at_close_leaves_no_marker(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    good, bad = manager.create("good", 0), manager.create("bad", 0)
    good.append(make_batch(2))
    bad.append(make_batch(2))
    record_fsyncs(monkeypatch, failing="bad-0")
    manager.close(state_files={"state": b"kept"})
    assert bad.fsync_failed is not None and good.offline_reason is None
    assert good.flushed_offset == 2
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # the next open recovers
    assert (tmp_path / "state").read_bytes() == b"kept"
    assert read_offsets(tmp_path / RECOVERY_POINT_FILE) == {("good", 0): 2, ("bad", 0): 0}


def test_close_writes_the_state_files_with_the_checkpoints(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    manager.create("t", 0).append(make_batch(3))
    (tmp_path / "state.tmp").write_bytes(b"left by a crash while it was written")
    manager.close(state_files={"state": b"snapshot"})
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert names == [
        BOOT_ID_FILE,
        CLEAN_SHUTDOWN_FILE,
        LOG_START_FILE,
        RECOVERY_POINT_FILE,
        "state",
    ]
    assert (tmp_path / "state").read_bytes() == b"snapshot"
    assert read_offsets(tmp_path / RECOVERY_POINT_FILE) == {("t", 0): 3}


def test_files_that_cannot_be_written_at_close_leave_no_marker(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, recovered: list[str]
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    manager.create("t", 0).append(make_batch(3))

    def disk_full(directory: Path, files: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("weirmq.storage.manager.write_files_atomically", disk_full)
    manager.close(state_files={"state": b"lost"})
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    recovered.clear()
    again = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    revived = again.get("t", 0)
    assert revived is not None and revived.log_end_offset == 3
    assert recovered  # no marker: re-validated from the old recovery point
    again.close()


def test_a_crash_after_the_logs_are_flushed_for_close_recovers(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    for p in range(20):
        manager.create("t", p).append(make_batch(p + 1))
    assert manager.flush_for_close()
    manager.handles.close()  # the crash: no checkpoints, no marker
    again = LogManager(tmp_path, clock=clock, settings=SLOW_FLUSH)
    assert {tp: lg.log_end_offset for tp, lg in again.logs().items()} == {
        ("t", p): p + 1 for p in range(20)
    }
    assert all(lg.offline_reason is None for lg in again.logs().values())
    again.close()


# --- the boot id: which stops may have lost writes not yet fsynced ---------------------------


def fake_boot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, boot_id: str | None) -> None:
    """Make the kernel's boot id read as `boot_id` (None: unreadable, as off Linux)."""
    source = tmp_path / "boot_id-source"
    if boot_id is None:
        source.unlink(missing_ok=True)
    else:
        source.write_text(boot_id + "\n")
    monkeypatch.setattr(manager_module, "BOOT_ID_SOURCE", source)


def reopen_after_crash(data_dir: Path, clock: ManualClock) -> LogManager:
    """Open `data_dir` again without closing the manager that had it: an unclean stop."""
    return LogManager(data_dir, clock=clock, settings=SLOW_FLUSH)


def test_a_new_directory_records_the_boot_id_and_has_lost_nothing(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_boot(monkeypatch, tmp_path, "boot-a")
    manager = LogManager(tmp_path / "data", clock=clock, settings=SLOW_FLUSH)
    assert not manager.unsynced_may_be_lost
    assert (tmp_path / "data" / BOOT_ID_FILE).read_text() == "boot-a\n"
    manager.close()


@pytest.mark.parametrize(
    ("stop", "boot_after", "lost"),
    [
        ("crash", "boot-a", False),  # a killed process: the page cache kept its writes
        ("crash", "boot-b", True),  # the machine stopped: unfsynced writes may be gone
        ("clean", "boot-b", False),  # everything was fsynced at the close
        ("crash", None, True),  # no boot id to compare: a crash may be the machine's
    ],
)
def test_an_unclean_stop_on_another_boot_may_have_lost_unsynced_writes(
    tmp_path: Path,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
    stop: str,
    boot_after: str | None,
    lost: bool,
) -> None:
    data_dir = tmp_path / "data"
    fake_boot(monkeypatch, tmp_path, "boot-a")
    first = LogManager(data_dir, clock=clock, settings=SLOW_FLUSH)
    first.create("t", 0).append(make_batch(2))
    if stop == "clean":
        first.close()
    fake_boot(monkeypatch, tmp_path, boot_after)
    second = reopen_after_crash(data_dir, clock)
    assert second.unsynced_may_be_lost is lost
    # A crash to deal with: the old id stays until the owner has dealt with it.
    assert second.boot_recorded is not lost
    recorded = (data_dir / BOOT_ID_FILE).read_text().strip()
    assert recorded == ("boot-a" if lost else boot_after)
    second.record_boot()
    assert second.boot_recorded
    assert (data_dir / BOOT_ID_FILE).read_text().strip() == (boot_after or UNKNOWN_BOOT_ID)
    second.close()
    # Judged once: a clean stop after it has lost nothing, on any boot.
    fake_boot(monkeypatch, tmp_path, "boot-c")
    third = LogManager(data_dir, clock=clock, settings=SLOW_FLUSH)
    assert not third.unsynced_may_be_lost
    third.close()


def test_without_a_readable_boot_id_every_unclean_stop_counts_as_the_machines(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_boot(monkeypatch, tmp_path, None)
    data_dir = tmp_path / "data"
    LogManager(data_dir, clock=clock, settings=SLOW_FLUSH)
    assert (data_dir / BOOT_ID_FILE).read_text().strip() == UNKNOWN_BOOT_ID
    assert reopen_after_crash(data_dir, clock).unsynced_may_be_lost


def test_an_unreadable_boot_id_counts_as_a_machines_crash(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_boot(monkeypatch, tmp_path, "boot-a")
    data_dir = tmp_path / "data"
    LogManager(data_dir, clock=clock, settings=SLOW_FLUSH)
    (data_dir / BOOT_ID_FILE).write_bytes(b"\xff\xfe not ascii")
    assert reopen_after_crash(data_dir, clock).unsynced_may_be_lost


def test_a_failed_fsync_makes_the_next_unclean_start_count_as_a_machines_crash(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel may mark the pages it failed to write clean: they read back after a
    restart of the process, but are not on disk. So after a failed fsync the directory no
    longer names this boot, and writes wait for their fsync again."""
    fake_boot(monkeypatch, tmp_path, "boot-a")
    data_dir = tmp_path / "data"
    manager = LogManager(data_dir, clock=clock, settings=SLOW_FLUSH)
    assert manager.boot_recorded
    bad = manager.create("bad", 0)
    bad.append(make_batch(2))
    record_fsyncs(monkeypatch, failing="bad-0")
    with pytest.raises(StorageError):
        manager.sync(bad).result(timeout=10)
    assert not manager.boot_recorded
    assert (data_dir / BOOT_ID_FILE).read_text().strip() != "boot-a"
    manager.record_boot()  # never again in this run: the failure stays recorded
    assert not manager.boot_recorded
    assert reopen_after_crash(data_dir, clock).unsynced_may_be_lost  # same boot, yet lost
