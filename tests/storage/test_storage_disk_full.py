"""The storage layer on a full disk and new partition directories (issue 20): a failed
small-file write leaves no temp file, the periodic flusher reports a full disk once per
episode (and when it clears), and a new partition's directory is fsynced into the data
directory before its first acks=all answer."""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path

import pytest

from weirmq.storage import checkpoint
from weirmq.storage import log as log_module
from weirmq.storage.errors import DiskFullError, StorageError, is_disk_full, storage_error
from weirmq.storage.manager import LogManager, StorageSettings
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch

NO_PERIODIC = StorageSettings(flush_interval_ms=3_600_000)


def enospc(*_args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_atomic_write_leaves_no_temp_file_and_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint.write_files_atomically(tmp_path, {"a": b"old a", "b": b"old b"})
    real = checkpoint._write_file

    def write_then_fill(path: Path, data: bytes) -> None:
        if path.name == "b.tmp":
            path.write_bytes(data[:2])
            enospc()
        real(path, data)

    monkeypatch.setattr(checkpoint, "_write_file", write_then_fill)
    with pytest.raises(OSError):
        checkpoint.write_files_atomically(tmp_path, {"a": b"new a", "b": b"new b"})
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]
    assert (tmp_path / "a").read_bytes() == b"old a"


def test_before_rename_refuses_the_whole_replacement(tmp_path: Path) -> None:
    checkpoint.write_atomically(tmp_path / "f", b"old")

    def refuse() -> None:
        raise DiskFullError("not now")

    with pytest.raises(DiskFullError):
        checkpoint.write_atomically(tmp_path / "f", b"new", before_rename=refuse)
    assert os.listdir(tmp_path) == ["f"] and (tmp_path / "f").read_bytes() == b"old"


def test_storage_error_names_a_full_disk() -> None:
    full = storage_error(OSError(errno.ENOSPC, "No space left on device"), "saving x")
    assert isinstance(full, DiskFullError) and is_disk_full(full)
    other = storage_error(OSError(errno.EIO, "Input/output error"), "saving x")
    assert type(other) is StorageError and not is_disk_full(other)


def test_creating_a_log_on_a_full_disk_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path, clock=ManualClock(), settings=NO_PERIODIC)
    monkeypatch.setattr(log_module.Segment, "create_file", enospc)
    with pytest.raises(DiskFullError):
        manager.create("t", 0)
    assert not (tmp_path / "t-0").exists() and manager.get("t", 0) is None
    manager.close()


def test_periodic_flush_reports_a_full_disk_once_per_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    manager = LogManager(tmp_path, clock=ManualClock(), settings=NO_PERIODIC)
    log_ = manager.create("t", 0)
    real = checkpoint._write_file
    full = True

    def write_file(path: Path, data: bytes) -> None:
        if full:
            enospc()
        real(path, data)

    monkeypatch.setattr(checkpoint, "_write_file", write_file)
    caplog.set_level(logging.INFO, logger="weirmq.storage.manager")
    for batch in range(5):  # the checkpoint moves every time, and every write fails
        log_.append(make_batch(1, tag=b"r%d" % batch))
        manager._periodic_flush()
    assert manager.disk_full
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "disk full" in errors[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    assert not list(tmp_path.glob("*.tmp"))
    full = False
    caplog.clear()
    manager._periodic_flush()
    manager._periodic_flush()
    assert not manager.disk_full
    assert [r.getMessage() for r in caplog.records if "space is back" in r.getMessage()]
    assert len(caplog.records) == 1
    manager.close()


def test_a_new_partition_directory_is_fsynced_into_its_parent_before_the_first_ack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path, clock=ManualClock(), settings=NO_PERIODIC)
    fsynced: list[str] = []
    lock = threading.Lock()
    real = log_module._fsync_path

    def spy(path: str) -> None:
        with lock:
            fsynced.append(path)
        real(path)

    monkeypatch.setattr(log_module, "_fsync_path", spy)
    log_ = manager.create("t", 0)
    log_.append(make_batch(1))
    manager.sync(log_).result(timeout=10)  # what an acks=all answer waits for
    assert str(tmp_path) in fsynced and str(tmp_path / "t-0") in fsynced
    fsynced.clear()
    log_.append(make_batch(1))
    manager.sync(log_).result(timeout=10)
    assert str(tmp_path) not in fsynced  # once is enough
    manager.close()


def test_reopened_partitions_do_not_fsync_the_parent_again(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, clock=ManualClock(), settings=NO_PERIODIC)
    manager.create("t", 0)
    manager.close()
    reopened = LogManager(tmp_path, clock=ManualClock(), settings=NO_PERIODIC)
    found = reopened.get("t", 0)
    assert found is not None and not found._parent_dirty
    reopened.close()
