"""The PartitionLog contract. Every test runs against the memory and the file log."""

from __future__ import annotations

import pytest
from conftest import LogFactory

from weirmq.errors import ErrorCode, KafkaError
from weirmq.records.batch import parse_header, record_timestamps
from weirmq.storage.config import LogConfig, TimestampType
from weirmq.storage.errors import OffsetOutOfRangeError
from weirmq.storage.interface import TimestampOffset
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch, read_all, split_batches

SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=128)


def _offsets(data: bytes | memoryview) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in map(parse_header, split_batches(data))]


def test_empty_log(make_log: LogFactory) -> None:
    log = make_log()
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    result = log.read(0, 1000)
    assert bytes(result.records) == b""
    assert (result.log_start_offset, result.log_end_offset) == (0, 0)
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(1, 1000)
    assert info.value.code == ErrorCode.offset_out_of_range
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None


def test_append_assigns_contiguous_offsets(make_log: LogFactory) -> None:
    log = make_log()
    first = log.append(make_batch(3))
    second = log.append(make_batch(1) + make_batch(2), leader_epoch=4)
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 5)
    assert first.log_append_time_ms == -1
    assert log.log_end_offset == 6
    batches = read_all(log)
    assert [parse_header(b).base_offset for b in batches] == [0, 3, 4]
    assert [parse_header(b).partition_leader_epoch for b in batches] == [0, 4, 4]


def test_stored_batches_are_the_producers_bytes_but_for_offset_and_epoch(
    make_log: LogFactory,
) -> None:
    log = make_log()
    sent = make_batch(4, tag=b"same")
    log.append(make_batch(2))
    log.append(sent)
    stored = read_all(log)[1]
    assert stored[12:16] == b"\x00\x00\x00\x00"
    assert stored[16:] == sent[16:]  # magic, CRC, attributes and records untouched
    assert parse_header(stored).base_offset == 2


def test_read_mid_batch_returns_the_whole_containing_batch(make_log: LogFactory) -> None:
    log = make_log(SMALL)
    for _ in range(20):
        log.append(make_batch(5))
    for offset in range(100):
        got = _offsets(log.read(offset, 1).records)
        assert got[0][0] <= offset <= got[0][1]
        assert got[0][0] == offset - offset % 5


def test_max_bytes_never_cuts_the_first_batch_and_returns_whole_batches(
    make_log: LogFactory,
) -> None:
    log = make_log()
    big = make_batch(3, size=400)
    for _ in range(10):
        log.append(big)
    assert len(split_batches(log.read(0, 10).records)) == 1  # bigger than max_bytes: still one
    got = log.read(0, 3 * len(big) + 5).records
    assert len(got) == 3 * len(big)
    assert len(split_batches(log.read(4, 10_000_000).records)) == 9


def test_reading_everything_in_steps_gives_back_every_batch(make_log: LogFactory) -> None:
    log = make_log(SMALL)
    sent = [make_batch(1 + i % 4, size=20 + i * 7 % 90, tag=b"%d" % i) for i in range(60)]
    for b in sent:
        log.append(b)
    assert log.segment_count > 3
    for max_bytes in (1, 200, 5000):
        got = read_all(log, max_bytes)
        assert [b[16:] for b in got] == [b[16:] for b in sent]


def test_invalid_append_writes_nothing(make_log: LogFactory) -> None:
    log = make_log(LogConfig(max_message_bytes=600, segment_bytes=4096))
    log.append(make_batch(1))
    bad = bytearray(make_batch(2))
    bad[-1] ^= 1
    cases = [
        (bytes(bad), ErrorCode.corrupt_message),
        (make_batch(1) + bytes(bad), ErrorCode.corrupt_message),  # all or nothing
        (make_batch(2, size=700), ErrorCode.message_too_large),
        (make_batch(1, size=400) * 11, ErrorCode.record_list_too_large),
        (b"", ErrorCode.corrupt_message),
    ]
    for records, code in cases:
        with pytest.raises(KafkaError) as info:
            log.append(records)
        assert info.value.code == code
    assert log.log_end_offset == 1
    assert len(read_all(log)) == 1


def test_offset_for_timestamp_finds_the_first_record_at_or_after(make_log: LogFactory) -> None:
    log = make_log(SMALL)
    for i in range(50):
        log.append(make_batch(4, ts=10_000 + 100 * i))  # records at +0, +1, +2, +3
    assert log.offset_for_timestamp(0) == TimestampOffset(0, 10_000)
    assert log.offset_for_timestamp(10_002) == TimestampOffset(2, 10_002)
    assert log.offset_for_timestamp(10_004) == TimestampOffset(4, 10_100)
    assert log.offset_for_timestamp(12_001) == TimestampOffset(81, 12_001)
    assert log.offset_for_timestamp(14_903) == TimestampOffset(199, 14_903)
    assert log.offset_for_timestamp(14_904) is None
    assert log.max_timestamp_offset() == TimestampOffset(199, 14_903)


def test_timestamps_need_not_be_monotonic(make_log: LogFactory) -> None:
    log = make_log(SMALL)
    for ts in (5_000, 1_000, 9_000, 2_000, 9_000, 3_000):
        log.append(make_batch(2, ts=ts))
    assert log.offset_for_timestamp(4_000) == TimestampOffset(0, 5_000)
    assert log.offset_for_timestamp(6_000) == TimestampOffset(4, 9_000)
    assert log.max_timestamp_offset() == TimestampOffset(5, 9_001)


def test_log_append_time(make_log: LogFactory, clock: ManualClock) -> None:
    log = make_log(LogConfig(timestamp_type=TimestampType.LOG_APPEND_TIME))
    info = log.append(make_batch(3, ts=5))
    assert info.log_append_time_ms == clock.now_ms
    stored = read_all(log)[0]
    assert parse_header(stored).is_log_append_time
    assert [ts for _, ts in record_timestamps(stored)] == [clock.now_ms] * 3
    assert log.offset_for_timestamp(6) == TimestampOffset(0, clock.now_ms)


def test_segments_roll_by_size(make_log: LogFactory) -> None:
    log = make_log(LogConfig(segment_bytes=1024))
    one = make_batch(1, size=200)
    for _ in range(20):
        log.append(one)
    per_segment = 1024 // len(one)
    assert log.segment_count == -(-20 // per_segment)
    assert log.size_bytes == 20 * len(one)


def test_segments_roll_by_age(make_log: LogFactory, clock: ManualClock) -> None:
    log = make_log(LogConfig(segment_ms=1000))
    assert not log.maybe_roll()  # empty: never rolls
    log.append(make_batch())
    clock.advance(999)
    assert not log.maybe_roll()
    log.append(make_batch())
    assert log.segment_count == 1
    clock.advance(1)
    assert log.maybe_roll()
    assert log.segment_count == 2
    clock.advance(5000)
    log.append(make_batch())  # the new segment is empty, so this does not roll again
    log.append(make_batch())  # ...but this one does: the active segment is now too old
    assert log.segment_count == 3
    assert len(read_all(log)) == 4


def test_retention_by_time_deletes_whole_old_segments(
    make_log: LogFactory, clock: ManualClock
) -> None:
    log = make_log(LogConfig(segment_bytes=1024, retention_ms=10_000))
    for _ in range(12):  # four segments of three batches, one second apart
        log.append(make_batch(1, size=250, ts=clock.now_ms))
        clock.advance(1000)
    assert log.segment_count == 4
    assert log.apply_retention() == 0
    clock.advance(10_000 - 12_000 + 3_000)  # the first segment's newest record: 10.001 s old
    assert log.apply_retention() == 1
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    assert parse_header(read_all(log)[0]).base_offset == 3
    clock.advance(60_000)
    assert log.apply_retention() == 3  # everything, the active segment too
    assert log.log_start_offset == log.log_end_offset == 12
    assert log.size_bytes == 0
    assert log.append(make_batch()).base_offset == 12  # offsets carry on


def test_retention_by_size(make_log: LogFactory) -> None:
    log = make_log(LogConfig(segment_bytes=1024, retention_bytes=2500, retention_ms=None))
    one = make_batch(1, size=250)
    for _ in range(15):
        log.append(one)
    assert log.segment_count == 5
    assert log.apply_retention() == 2  # 5 x 3 batches: keep 3 segments (< 2500 after one more)
    assert log.size_bytes >= 2500 - 3 * len(one)
    assert log.log_start_offset == 6
    assert log.apply_retention() == 0


def test_advance_log_start(make_log: LogFactory) -> None:
    log = make_log(SMALL)
    for i in range(30):
        log.append(make_batch(2, ts=1000 * i))
    segments = log.segment_count
    assert segments == 2
    assert log.advance_log_start(51) == 51  # inside the second segment
    assert log.advance_log_start(10) == 51  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.read(50, 100)
    got = _offsets(log.read(51, 1).records)
    assert got[0] == (50, 51)  # the batch containing the start is served whole
    assert log.offset_for_timestamp(0) == TimestampOffset(51, 25_001)
    assert log.segment_count == 1  # the segment wholly below the start is gone
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start(61)


def test_truncate_to_cuts_whole_batches_and_appends_continue(make_log: LogFactory) -> None:
    log = make_log(SMALL)
    for _ in range(30):
        log.append(make_batch(3))
    log.truncate_to(50)  # inside the batch 48..50: the whole batch goes
    assert log.log_end_offset == 48
    assert log.append(make_batch(1)).base_offset == 48
    assert _offsets(b"".join(read_all(log)))[-2:] == [(45, 47), (48, 48)]
    log.truncate_to(0)
    assert log.log_end_offset == 0
    assert log.append(make_batch(2)).last_offset == 1


def test_flush_moves_the_recovery_point(make_log: LogFactory) -> None:
    log = make_log()
    log.append(make_batch(5))
    assert log.flush() == 5 == log.flushed_offset
