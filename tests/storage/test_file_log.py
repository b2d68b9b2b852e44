"""What only the file log has: files, indexes, descriptors, recovery, I/O errors."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from weirmq.errors import ErrorCode
from weirmq.records.batch import parse_header
from weirmq.storage.config import LogConfig
from weirmq.storage.errors import DiskFullError
from weirmq.storage.handles import HandleCache
from weirmq.storage.index import OffsetIndex, TimeIndex
from weirmq.storage.log import FileLog
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch, read_all

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def _open(path: Path, handles: HandleCache, clock: ManualClock, **kwargs: object) -> FileLog:
    return FileLog(path, CONFIG, handles=handles, clock=clock, **kwargs)  # type: ignore[arg-type]


def _filled(path: Path, handles: HandleCache, clock: ManualClock, batches: int) -> FileLog:
    """A log of `batches` batches of three 100-byte records: several segments."""
    log = _open(path, handles, clock)
    for _ in range(batches):
        log.append(make_batch(3, size=100))
    return log


def test_segment_files_are_named_by_base_offset(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _filled(tmp_path / "t-0", handles, clock, 40)
    log.close()
    logs = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert len(logs) == log.segment_count > 1
    assert logs[0] == "00000000000000000000.log"
    assert [int(name[:20]) for name in logs] == [s.base_offset for s in log.segments]
    for segment in log.segments:
        assert os.path.getsize(segment.log_path) == segment.size
        first = Path(segment.log_path).read_bytes()[:61]
        assert parse_header(first).base_offset == segment.base_offset


def test_index_files_match_the_log(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _open(tmp_path / "t-0", handles, clock)
    for i in range(40):
        log.append(make_batch(2, size=90, ts=1000 * i))
    log.close()
    for segment in log.segments:
        index = OffsetIndex.decode(Path(segment.index_path).read_bytes())
        times = TimeIndex.decode(Path(segment.timeindex_path).read_bytes())
        assert index is not None and len(index) > 0
        assert times is not None and times.timestamps[-1] == segment.max_timestamp
        with open(segment.log_path, "rb") as f:
            for relative, position in zip(index.offsets, index.positions, strict=True):
                f.seek(position)  # every entry points at the batch it names
                assert parse_header(f.read(61)).base_offset == segment.base_offset + relative
        gaps = [b - a for a, b in zip(index.positions, index.positions[1:], strict=False)]
        assert all(g >= CONFIG.index_interval_bytes for g in gaps)  # sparse


def test_clean_reopen_needs_no_revalidation(
    tmp_path: Path, handles: HandleCache, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _filled(tmp_path / "t-0", handles, clock, 40)
    log.close()
    expected = read_all(log)
    from weirmq.storage import segment as segment_module

    def no_recovery(self: object) -> str | None:
        raise AssertionError("a clean open must not re-validate")

    monkeypatch.setattr(segment_module.Segment, "recover", no_recovery)
    again = _open(
        tmp_path / "t-0", handles, clock, recovery_point=log.log_end_offset, clean_shutdown=True
    )
    assert read_all(again) == expected
    assert again.append(make_batch()).base_offset == 120


def test_a_crash_revalidates_only_from_the_recovery_point(
    tmp_path: Path, handles: HandleCache, clock: ManualClock, recovered: list[str]
) -> None:
    log = _filled(tmp_path / "t-0", handles, clock, 60)
    point = log.flush()
    handles.close()
    recovered.clear()
    again = _open(tmp_path / "t-0", handles, clock, recovery_point=point)
    assert recovered == [log.segments[-1].log_path]
    assert again.log_end_offset == 180


def test_disk_full_writes_nothing_and_the_log_carries_on(
    tmp_path: Path, handles: HandleCache, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _open(tmp_path / "t-0", handles, clock)
    log.append(make_batch(2))
    real_pwritev = os.pwritev

    def half_then_enospc(fd: int, buffers: list[bytes | memoryview], position: int) -> int:
        data = b"".join(buffers)
        if len(data) > 50:
            os.pwrite(fd, data[:50], position)  # a partial write reaches the file...
            return 50
        raise OSError(errno.ENOSPC, "No space left on device")  # ...then the disk is full

    monkeypatch.setattr(os, "pwritev", half_then_enospc)
    with pytest.raises(DiskFullError) as info:
        log.append(make_batch(3))
    assert info.value.code == ErrorCode.kafka_storage_error
    monkeypatch.setattr(os, "pwritev", real_pwritev)
    assert log.log_end_offset == 2
    assert os.path.getsize(log.segments[-1].log_path) == log.segments[-1].size
    assert log.append(make_batch(1)).base_offset == 2
    assert len(read_all(log)) == 2


def test_short_writes_are_continued_where_they_stopped(
    tmp_path: Path, handles: HandleCache, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pwritev may stop anywhere, even inside one of the buffers it was given.
    real_pwritev = os.pwritev

    def seven_bytes_at_most(fd: int, buffers: list[bytes | memoryview], position: int) -> int:
        return os.pwrite(fd, b"".join(buffers)[:7], position)

    log = _open(tmp_path / "t-0", handles, clock)
    monkeypatch.setattr(os, "pwritev", seven_bytes_at_most)
    batches = [make_batch(2, tag=b"a"), make_batch(3, tag=b"b") + make_batch(1, tag=b"c")]
    for record_set in batches:
        log.append(record_set)
    monkeypatch.setattr(os, "pwritev", real_pwritev)
    stored = read_all(log)
    assert [parse_header(b).base_offset for b in stored] == [0, 2, 5]
    assert [b[16:] for b in stored] == [make_batch(2, tag=b"a")[16:], *_tails(batches[1])]
    assert os.path.getsize(log.segments[-1].log_path) == log.segments[-1].size


def test_an_append_of_more_batches_than_one_pwritev_takes(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    # Two buffers per batch: 700 batches need 1400, over the 1024 one pwritev call takes.
    record_set = b"".join(make_batch(1, size=1, tag=b"%d" % i) for i in range(700))
    log = FileLog(tmp_path / "t-0", LogConfig(), handles=handles, clock=clock)
    log.append(record_set)
    stored = read_all(log)
    assert [parse_header(b).base_offset for b in stored] == list(range(700))
    assert [b[16:] for b in stored] == _tails(record_set)


def _tails(record_set: bytes) -> list[bytes]:
    """Each batch of `record_set` after its first 16 bytes (what an append leaves alone)."""
    out, position = [], 0
    while position < len(record_set):
        size = parse_header(record_set, position).size
        out.append(record_set[position + 16 : position + size])
        position += size
    return out


def test_ten_thousand_partitions_stay_within_the_descriptor_bound(
    tmp_path: Path, clock: ManualClock
) -> None:
    handles = HandleCache(max_open=32)
    fds_before = len(os.listdir("/proc/self/fd"))
    logs = [_open(tmp_path / f"t-{i}", handles, clock) for i in range(10_000)]
    for log in logs:
        log.append(make_batch(1))
    for log in logs[::7]:
        assert len(read_all(log)) == 1
    assert len(handles) <= 32
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 32
    handles.close()


def test_a_flush_skips_the_sealed_segments_already_durable(
    tmp_path: Path, handles: HandleCache, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group commit must not walk a long log's whole history: sealed segments whose data
    and indexes are fsynced are skipped until the segment list changes (a roll, retention,
    a truncation), after which one flush walks them once more."""
    log = _filled(tmp_path / "t-0", handles, clock, 40)
    assert log.segment_count > 3
    walked: list[int] = []
    fsynced: list[str] = []
    pending = type(log.segments[0]).pending_index_bytes
    real_fsync = os.fsync

    def recording_pending(segment: object) -> list[tuple[str, int, bytes]]:
        walked.append(segment.base_offset)  # type: ignore[attr-defined]
        return pending(segment)  # type: ignore[arg-type]

    def recording_fsync(fd: int) -> None:
        fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(type(log.segments[0]), "pending_index_bytes", recording_pending)
    monkeypatch.setattr(os, "fsync", recording_fsync)

    def append_and_flush() -> bool:
        """One batch appended and flushed; whether the append rolled a new segment."""
        count = log.segment_count
        log.append(make_batch(3, size=100))
        walked.clear()
        fsynced.clear()
        log.flush()
        return log.segment_count != count

    log.flush()
    assert all(s.durable_and_sealed for s in log.segments[:-1])
    while append_and_flush():  # a roll: this flush walked every segment once
        pass
    assert walked == [log.segments[-1].base_offset]  # only the active segment
    assert fsynced == [log.segments[-1].log_path]
    # A roll seals the active segment: that flush completes its indexes and walks all once.
    while not append_and_flush():
        pass
    sealed = log.segments[-2]
    assert walked == [s.base_offset for s in log.segments]
    assert {sealed.index_path, sealed.timeindex_path} <= set(fsynced)  # its data already was
    assert sealed.durable_and_sealed
    while append_and_flush():
        pass
    assert walked == [log.segments[-1].base_offset]
    # Truncating into a sealed segment unseals it: it is flushed again, index files too.
    target = log.segments[1]
    log.truncate_to(target.base_offset + 1)
    assert log.segments[-1] is target and not target.durable_and_sealed
    walked.clear()
    log.flush()
    assert walked == [s.base_offset for s in log.segments]
    log.close()
