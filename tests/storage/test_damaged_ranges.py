"""A damaged range costs its own offsets, not the partition (storage/damage.py).

Each test builds a file log of several segments, damages one of them the way disks do (a
flipped bit, a file cut short), reopens it, and checks what a consumer and a producer
get: the intact segments before and after are served, an offset in the damaged range is
refused with DamagedRangeError (CORRUPT_MESSAGE), the damage is logged once, and appends
go on.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from weirmq.errors import ErrorCode
from weirmq.records.batch import parse_header
from weirmq.storage.config import LogConfig
from weirmq.storage.damage import (
    LOST_OFFSETS_FILE,
    covered,
    merge_ranges,
    read_lost_ranges,
    write_lost_ranges,
)
from weirmq.storage.errors import DamagedRangeError
from weirmq.storage.handles import HandleCache
from weirmq.storage.log import FileLog
from weirmq.storage.segment import Segment
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch, split_batches

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)
BATCHES = 60  # of three records, ~200 bytes each: six segments of 30 offsets
SEGMENT_OFFSETS = 30


def _open(path: Path, handles: HandleCache, clock: ManualClock, **kwargs: object) -> FileLog:
    return FileLog(path, CONFIG, handles=handles, clock=clock, **kwargs)  # type: ignore[arg-type]


def _written(path: Path, handles: HandleCache, clock: ManualClock) -> tuple[FileLog, int]:
    """A log of six segments, all flushed; returns it (closed) and its recovery point."""
    log = _open(path, handles, clock)
    for i in range(BATCHES):
        log.append(make_batch(3, size=100, ts=1_000 * i))
    point = log.flush()
    assert log.segment_count == 6 and point == 3 * BATCHES
    handles.close()  # a crash: no clean close
    return log, point


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x10]))


def _batch_positions(segment: Segment) -> list[int]:
    data = Path(segment.log_path).read_bytes()
    positions, position = [], 0
    while position < len(data):
        positions.append(position)
        position += parse_header(data, position).size
    return positions


def _payload_of_batch(segment: Segment, n: int) -> int:
    """A position inside the records of the segment's `n`th batch (covered by its CRC)."""
    return _batch_positions(segment)[n] + 100


def _first_offset(records: bytes | memoryview) -> int:
    return parse_header(bytes(records)).base_offset


def _damage_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.ERROR and "are damaged" in r.message]


@pytest.mark.parametrize("clean_shutdown", [False, True], ids=["after-a-crash", "after-a-stop"])
def test_a_bit_flip_in_a_middle_segment_costs_only_its_damaged_range(
    tmp_path: Path,
    handles: HandleCache,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    clean_shutdown: bool,
) -> None:
    written, point = _written(tmp_path / "t-0", handles, clock)
    middle = written.segments[2]  # offsets 60..89, ten batches of three
    bad = _payload_of_batch(middle, 4)  # the batch holding offsets 72..74
    _flip(middle.log_path, bad)
    caplog.set_level(logging.ERROR)
    log = _open(
        tmp_path / "t-0", handles, clock, recovery_point=point, clean_shutdown=clean_shutdown
    )
    assert log.offline_reason is None

    # Before the damage, its own segment's intact prefix included: served.
    assert _first_offset(log.read(0, 100).records) == 0
    prefix = split_batches(log.read(60, 1 << 20).records)
    assert [parse_header(b).base_offset for b in prefix] == [60, 63, 66, 69]
    # In it: refused, for every offset of the range, with CORRUPT_MESSAGE.
    for offset in (72, 80, 89):
        with pytest.raises(DamagedRangeError) as info:
            log.read(offset, 100)
        assert info.value.code == ErrorCode.corrupt_message
        assert middle.log_path in str(info.value)
    # After it: served.
    assert _first_offset(log.read(90, 100).records) == 90
    assert _first_offset(log.read(170, 100).records) == 168

    (damage,) = log.damage
    assert (damage.start_offset, damage.end_offset) == (72, 90)
    assert (damage.path, damage.position) == (middle.log_path, _batch_positions(middle)[4])
    assert len(_damage_logs(caplog)) == 1  # once, whatever the number of reads
    assert "72..89" in _damage_logs(caplog)[0].message

    assert log.append(make_batch(2)).base_offset == point  # the tail is intact: appends go on
    assert _first_offset(log.read(point, 100).records) == point
    assert log.offline_reason is None


def test_the_damage_is_found_again_after_a_clean_stop(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    written, point = _written(tmp_path / "t-0", handles, clock)
    middle = written.segments[1]
    _flip(middle.log_path, _payload_of_batch(middle, 0))
    log = _open(tmp_path / "t-0", handles, clock, recovery_point=point)
    # Below the recovery point indexes are trusted after a sanity check, so the flip is
    # found by the first read's CRC check.
    with pytest.raises(DamagedRangeError):
        log.read(30, 100)
    assert [(d.start_offset, d.end_offset) for d in log.damage] == [(30, 60)]
    log.append(make_batch(2))
    end = log.log_end_offset
    log.close()
    handles.close()
    again = _open(tmp_path / "t-0", handles, clock, recovery_point=end, clean_shutdown=True)
    with pytest.raises(DamagedRangeError):
        again.read(30, 100)
    assert [(d.start_offset, d.end_offset) for d in again.damage] == [(30, 60)]
    assert _first_offset(again.read(60, 100).records) == 60
    assert _first_offset(again.read(end - 2, 100).records) == end - 2


def test_a_middle_segment_cut_inside_a_batch(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    written, point = _written(tmp_path / "t-0", handles, clock)
    middle = written.segments[3]  # offsets 90..119
    cut = _batch_positions(middle)[6] + 100  # inside the batch of offsets 108..110
    os.truncate(middle.log_path, cut)
    log = _open(tmp_path / "t-0", handles, clock, recovery_point=point)
    assert log.offline_reason is None
    (damage,) = log.damage
    assert (damage.start_offset, damage.end_offset) == (108, 120)
    assert "runs past the end" in damage.problem
    assert _first_offset(log.read(105, 100).records) == 105
    with pytest.raises(DamagedRangeError):
        log.read(108, 100)
    assert _first_offset(log.read(120, 100).records) == 120
    assert log.append(make_batch(1)).base_offset == point


def test_a_middle_segment_cut_between_batches_is_missing_data(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    # Nothing in the files says the cut offsets ever existed, but the segment after them:
    # the partition stays offline (as before), until repair records the gap as given up.
    written, point = _written(tmp_path / "t-0", handles, clock)
    middle = written.segments[3]
    os.truncate(middle.log_path, _batch_positions(middle)[6])
    log = _open(tmp_path / "t-0", handles, clock, recovery_point=point)
    assert log.offline_reason is not None and "gap" in log.offline_reason
    handles.close()

    write_lost_ranges(tmp_path / "t-0", [(108, 120)])
    log = _open(tmp_path / "t-0", handles, clock, recovery_point=point)
    assert log.offline_reason is None and log.damage == ()
    # A read in the given-up range goes on from the next offset that exists.
    assert _first_offset(log.read(108, 100).records) == 120
    assert _first_offset(log.read(115, 100).records) == 120
    assert _first_offset(log.read(105, 100).records) == 105


def test_damage_in_the_last_segment_rolls_a_new_one_at_the_recovery_point(
    tmp_path: Path, handles: HandleCache, clock: ManualClock, recovered: list[str]
) -> None:
    log = _open(tmp_path / "t-0", handles, clock)
    for i in range(BATCHES - 5):
        log.append(make_batch(3, size=100, ts=1_000 * i))
    point = log.flush()
    assert point == 165
    for _ in range(3):  # unflushed batches after the recovery point, still in the file
        log.append(make_batch(3, size=100))
    last = log.segments[-1]
    assert last.base_offset == 150 and last.next_offset == 174
    handles.close()
    _flip(last.log_path, _payload_of_batch(last, 2))  # offsets 156..158, below the point

    again = _open(tmp_path / "t-0", handles, clock, recovery_point=point)
    assert again.offline_reason is None
    (damage,) = again.damage
    assert (damage.start_offset, damage.end_offset) == (156, point)
    assert again.segments[-1].base_offset == point
    assert again.append(make_batch(2, tag=b"new")).base_offset == point
    assert _first_offset(again.read(150, 100).records) == 150
    with pytest.raises(DamagedRangeError):
        again.read(point - 1, 100)
    assert _first_offset(again.read(point, 100).records) == point
    again.close()
    handles.close()

    # A clean open trusts the damaged segment's indexes, which do not see the flip, and
    # the segment looks longer than the one after it begins: it is re-validated.
    recovered.clear()
    third = _open(tmp_path / "t-0", handles, clock, recovery_point=point + 2, clean_shutdown=True)
    assert last.log_path in recovered
    assert [(d.start_offset, d.end_offset) for d in third.damage] == [(156, point)]
    assert split_batches(third.read(point, 100).records)[0][16:] == make_batch(2, tag=b"new")[16:]
    assert third.log_end_offset == point + 2


def test_damage_found_by_a_read_in_the_active_segment_moves_appends_to_a_new_one(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _open(tmp_path / "t-0", handles, clock)
    for _ in range(5):
        log.append(make_batch(3, size=100))
    active = log.segments[-1]
    _flip(active.log_path, _payload_of_batch(active, 3))  # the disk changed under us
    assert _first_offset(log.read(0, 100).records) == 0
    with pytest.raises(DamagedRangeError):
        log.read(9, 100)
    assert [(d.start_offset, d.end_offset) for d in log.damage] == [(9, 15)]
    assert log.segment_count == 2 and log.segments[-1].base_offset == 15
    assert log.append(make_batch(1)).base_offset == 15
    assert _first_offset(log.read(15, 100).records) == 15
    # Reading the intact prefix up to the damage returns its batches, not an error.
    assert [parse_header(b).base_offset for b in split_batches(log.read(0, 1 << 20).records)] == [
        0,
        3,
        6,
    ]


def test_timestamp_lookups_do_not_skip_a_damaged_range(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    written, point = _written(tmp_path / "t-0", handles, clock)
    middle = written.segments[2]
    _flip(middle.log_path, _payload_of_batch(middle, 4))  # offsets 72..74, batch 24
    log = _open(tmp_path / "t-0", handles, clock, recovery_point=point)
    found = log.offset_for_timestamp(1_000 * 10)  # batch 10, before the damage
    assert found is not None and found.offset == 30
    # The first record at or after batch 25's time may be in the damaged range: no answer
    # is better than a later one.
    with pytest.raises(DamagedRangeError):
        log.offset_for_timestamp(1_000 * 25)
    with pytest.raises(DamagedRangeError):
        log.max_timestamp_offset()


def test_deleting_records_past_the_damage_forgets_it(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    written, point = _written(tmp_path / "t-0", handles, clock)
    first = written.segments[0]
    _flip(first.log_path, _payload_of_batch(first, 1))
    log = _open(tmp_path / "t-0", handles, clock, recovery_point=point)
    with pytest.raises(DamagedRangeError):
        log.read(3, 100)
    assert [(d.start_offset, d.end_offset) for d in log.damage] == [(3, 30)]
    log.advance_log_start(30)  # DeleteRecords: the operator gave the range up online
    assert log.damage == ()
    assert log.segments[0].base_offset == 30
    found = log.max_timestamp_offset()
    assert found is not None


def test_lost_offsets_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert read_lost_ranges(tmp_path) == []
    write_lost_ranges(tmp_path, [(50, 60), (10, 20), (20, 25)])
    assert read_lost_ranges(tmp_path) == [(10, 25), (50, 60)]
    assert (tmp_path / LOST_OFFSETS_FILE).read_text() == "0\n2\n10 25\n50 60\n"
    assert covered([(10, 25)], 12, 25) and not covered([(10, 25)], 12, 26)
    assert merge_ranges([(5, 6), (1, 3), (2, 4)]) == [(1, 4), (5, 6)]
    (tmp_path / LOST_OFFSETS_FILE).write_text("0\n2\n10 25\n")
    assert read_lost_ranges(tmp_path) == []  # malformed: ignored, the gaps are damage again
    assert "malformed" in caplog.text
