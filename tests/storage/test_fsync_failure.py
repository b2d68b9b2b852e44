"""A failed fsync (issue 20): the log stays readable up to what was durable, rolls back
what was not, refuses appends until fsync works again, then goes on by itself.

The fault is injected under storage (`log._fsync_path`), as a failing disk would give it:
after a failed fsync Linux may drop the dirty pages and report success next time
("fsyncgate"), so nothing written since the last good flush may be kept.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from weirmq.storage import log as log_module
from weirmq.storage.checkpoint import read_offsets
from weirmq.storage.errors import StorageError
from weirmq.storage.log import FSYNC_PROBE_INTERVAL_MS
from weirmq.storage.manager import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_FILE,
    LogManager,
    StorageSettings,
)
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch

NO_PERIODIC = StorageSettings(flush_interval_ms=3_600_000)


class Disk:
    """The fsync under storage: works, or fails with EIO while `failing`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.failing = False
        self.calls = 0
        real = log_module._fsync_path

        def fsync(path: str) -> None:
            self.calls += 1
            if self.failing:
                raise OSError(errno.EIO, "Input/output error")
            real(path)

        monkeypatch.setattr(log_module, "_fsync_path", fsync)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


def test_a_failed_fsync_rolls_back_what_it_did_not_make_durable(tmp_path: Path, disk: Disk) -> None:
    clock = ManualClock()
    manager = LogManager(tmp_path, clock=clock, settings=NO_PERIODIC)
    log = manager.create("t", 0)
    log.append(make_batch(3))
    assert log.flush() == 3  # durable: 0..2
    durable = bytes(log.read(0, 1 << 20).records)
    log.append(make_batch(2))  # 3..4, not yet fsynced
    disk.failing = True
    with pytest.raises(StorageError, match="fsync failed"):
        log.flush()
    assert log.offline_reason is None and log.fsync_failed is not None
    with pytest.raises(StorageError, match="not flushed"):
        log.flush()  # nothing may vouch for the doubtful bytes
    assert not log.needs_flush  # the periodic flusher leaves it alone
    # A read rolls back first: what is served is what was durable, and it is intact.
    assert bytes(log.read(0, 1 << 20).records) == durable
    assert log.log_end_offset == 3
    # Appends wait for fsync to work again; a probe at most once per interval.
    with pytest.raises(StorageError, match="refuses appends"):
        log.append(make_batch(1))
    calls = disk.calls
    with pytest.raises(StorageError, match="refuses appends"):
        log.append(make_batch(1))
    assert disk.calls == calls, "probed again within the interval"
    disk.failing = False
    with pytest.raises(StorageError, match="refuses appends"):
        log.append(make_batch(1))  # the interval has not passed: no probe yet
    clock.advance(FSYNC_PROBE_INTERVAL_MS)
    info = log.append(make_batch(2))  # the probe works: appends go on by themselves
    assert (info.base_offset, log.fsync_failed) == (3, None)
    assert log.flush() == 5
    assert bytes(log.read(0, 1 << 20).records).startswith(durable)
    manager.close()


def test_a_close_after_a_failed_fsync_is_not_clean_and_the_next_open_recovers(
    tmp_path: Path, disk: Disk
) -> None:
    clock = ManualClock()
    manager = LogManager(tmp_path, clock=clock, settings=NO_PERIODIC)
    log = manager.create("t", 0)
    log.append(make_batch(4))
    log.flush()
    log.append(make_batch(4))
    disk.failing = True
    with pytest.raises(StorageError):
        log.flush()
    disk.failing = False
    manager.close()  # the log is not flushed: no clean-shutdown marker vouches for it
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offsets(tmp_path / RECOVERY_POINT_FILE) == {("t", 0): 4}
    reopened = LogManager(tmp_path, clock=clock, settings=NO_PERIODIC).create("t", 0)
    # Recovered as after a crash: offsets above the recovery point are re-validated batch
    # by batch and kept only where intact (here the bytes did reach the disk).
    assert reopened.log_end_offset == 8
    assert reopened.fsync_failed is None and reopened.offline_reason is None
