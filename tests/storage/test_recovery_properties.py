"""Crash and corruption properties of the file log, with the memory log as the model.

Each example appends random batches (with flushes in between) to a file log and to a
memory log, "crashes" (file handles dropped, no close, nothing flushed at the end),
damages the files, and reopens. Whatever the damage:
- nothing corrupt is ever returned: a consumer reading from the log start gets, for every
  offset, either the batch that was appended there, byte for byte (partitionLeaderEpoch
  aside: Kafka leaves it outside the CRC, so a flipped bit there cannot be detected by
  anyone), or DamagedRangeError for a damaged range, which it skips; or the whole log
  refuses to serve (offline, KAFKA_STORAGE_ERROR);
- only flushed data is ever reported damaged (damage above the last flush is a torn tail,
  cut off), and no flushed offset goes missing without being reported;
- offsets stay contiguous and the log takes appends again, after the damage too;
- a clean reopen serves and refuses the same offsets.
A flipped byte never takes the log offline; only data missing without a trace (a file cut
exactly between two batches, below the last flush) does. When the damage is what a crash
can do (torn tails beyond the last flush, in any number of segments; lost or torn index
files), nothing is reported damaged at all.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weirmq.records.batch import parse_header, record_timestamps
from weirmq.storage.config import LogConfig
from weirmq.storage.errors import DamagedRangeError, LogOfflineError
from weirmq.storage.handles import HandleCache
from weirmq.storage.log import FileLog
from weirmq.storage.memory import MemoryLog
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch, read_all, split_batches

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=150)
PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

append_op = st.tuples(st.just("append"), st.integers(1, 4), st.integers(1, 250))
flush_op = st.just(("flush", 0, 0))
histories = st.lists(st.one_of(append_op, append_op, append_op, flush_op), min_size=1, max_size=40)


@dataclass(frozen=True)
class Placement:
    path: str
    position: int
    last_offset: int


@dataclass
class Crashed:
    directory: Path
    expected: list[bytes]  # every batch appended, as the model stores it
    placements: list[Placement]
    flushed: int

    def flushed_position(self, path: str) -> int:
        """The first byte of `path` not covered by the last flush."""
        unflushed = [
            p.position for p in self.placements if p.path == path and p.last_offset >= self.flushed
        ]
        return min(unflushed, default=os.path.getsize(path))

    def log_files(self) -> list[str]:
        return sorted(str(p) for p in self.directory.glob("*.log"))


def crash_after(directory: Path, history: list[tuple[str, int, int]]) -> Crashed:
    clock = ManualClock()
    handles = HandleCache(max_open=4)
    log = FileLog(directory, CONFIG, handles=handles, clock=clock)
    model = MemoryLog(CONFIG, clock=clock)
    placements = []
    for i, (op, records, size) in enumerate(history):
        clock.advance(7)
        if op == "flush":
            log.flush()
            continue
        data = make_batch(records, size=size, ts=clock.now_ms, tag=b"%d" % i)
        info = log.append(data)
        model.append(data)
        active = log.segments[-1]
        placements.append(Placement(active.log_path, active.size - len(data), info.last_offset))
    handles.close()  # the crash: nothing more reaches the files
    return Crashed(directory, read_all(model), placements, log.flushed_offset)


def masked(batch: bytes) -> bytes:
    return batch[:12] + b"\0\0\0\0" + batch[16:]


def reopen(
    crashed: Crashed, *, recovery_point: int, clean_shutdown: bool = False
) -> tuple[FileLog, HandleCache]:
    """The crashed log opened again, with its own descriptor cache (close both)."""
    handles = HandleCache(max_open=4)
    log = FileLog(
        crashed.directory,
        CONFIG,
        handles=handles,
        clock=ManualClock(),
        recovery_point=recovery_point,
        clean_shutdown=clean_shutdown,
    )
    return log, handles


def read_served(log: FileLog) -> tuple[dict[int, bytes], list[tuple[int, int]]]:
    """What a consumer gets reading from the log start to the end: the batches served, by
    base offset, and the ranges refused (DamagedRangeError), which it skips. Every offset
    is either in a batch served or in a range refused: nothing is skipped silently."""
    served: dict[int, bytes] = {}
    refused: list[tuple[int, int]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        try:
            got = split_batches(log.read(offset, 1 << 20).records)
        except DamagedRangeError:
            damage = next(d for d in log.damage if d.holds(offset))
            refused.append((offset, damage.end_offset))
            offset = damage.end_offset
            continue
        assert got, f"no progress at offset {offset}"
        first = parse_header(got[0])
        assert first.base_offset <= offset <= first.last_offset, (offset, first)
        for batch in got:
            served[parse_header(batch).base_offset] = batch
        offset = parse_header(got[-1]).last_offset + 1
    return served, refused


def check_served(crashed: Crashed, served: dict[int, bytes]) -> None:
    expected = {parse_header(b).base_offset: b for b in crashed.expected}
    for base, batch in served.items():
        assert base in expected, f"batch at {base} was never appended"
        assert masked(batch) == masked(expected[base]), f"batch at {base} differs"


def reopen_and_check(
    crashed: Crashed,
    *,
    recovery_point: int,
    may_go_offline: bool,
    may_damage: bool,
) -> None:
    log, handles = reopen(crashed, recovery_point=recovery_point)
    try:
        if log.offline_reason is not None:
            assert may_go_offline, log.offline_reason
            return
        try:
            served, refused = read_served(log)
        except LogOfflineError:
            assert may_go_offline
            return
        check_served(crashed, served)
        assert may_damage or not refused, refused
        # Damage starts in flushed data: above the last flush, bad bytes are a torn tail.
        assert all(d.start_offset < recovery_point for d in log.damage), log.damage
        end = log.log_end_offset
        assert end >= recovery_point  # no flushed offset is handed out again
        info = log.append(make_batch(2, tag=b"after"))
        assert info.base_offset == end
        assert read_all_after(log, end)[16:] == make_batch(2, tag=b"after")[16:]
    finally:
        log.close()
        handles.close()
    # A clean reopen sees the same log.
    again, handles = reopen(crashed, recovery_point=log.flushed_offset, clean_shutdown=True)
    try:
        assert again.offline_reason is None
        served_again, refused_again = read_served(again)
        assert refused_again == refused
        assert served_again[end][16:] == make_batch(2, tag=b"after")[16:]
        del served_again[end]
        assert served_again == served
        assert again.log_end_offset == end + 2
    finally:
        again.close()
        handles.close()


def read_all_after(log: FileLog, offset: int) -> bytes:
    """The one batch at `offset` (the last one appended)."""
    (batch,) = split_batches(log.read(offset, 1 << 20).records)
    return batch


@PROPERTY_SETTINGS
@given(histories, st.data(), st.booleans())
def test_torn_tails_beyond_the_last_flush_lose_nothing_flushed(
    history: list[tuple[str, int, int]], data: st.DataObject, stale_checkpoint: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        crashed = crash_after(Path(tmp) / "t-0", history)
        for path in crashed.log_files():  # each file torn independently: any writeback order
            start, size = crashed.flushed_position(path), os.path.getsize(path)
            os.truncate(path, data.draw(st.integers(start, size), label=f"cut {path[-24:]}"))
        reopen_and_check(
            crashed,
            recovery_point=0 if stale_checkpoint else crashed.flushed,
            may_go_offline=False,
            may_damage=False,
        )


@PROPERTY_SETTINGS
@given(histories, st.data())
def test_a_cut_anywhere_never_serves_corrupt_data(
    history: list[tuple[str, int, int]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        crashed = crash_after(Path(tmp) / "t-0", history)
        path = data.draw(st.sampled_from(crashed.log_files()))
        os.truncate(path, data.draw(st.integers(0, os.path.getsize(path))))
        reopen_and_check(
            crashed, recovery_point=crashed.flushed, may_go_offline=True, may_damage=True
        )


@PROPERTY_SETTINGS
@given(histories, st.data())
def test_a_flipped_byte_never_serves_corrupt_data(
    history: list[tuple[str, int, int]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        crashed = crash_after(Path(tmp) / "t-0", history)
        files = [p for p in crashed.log_files() if os.path.getsize(p)]
        if not files:
            return
        path = data.draw(st.sampled_from(files))
        position = data.draw(st.integers(0, os.path.getsize(path) - 1))
        with open(path, "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ data.draw(st.integers(1, 255))]))
        unflushed = position >= crashed.flushed_position(path)
        reopen_and_check(
            crashed,
            recovery_point=crashed.flushed,
            may_go_offline=False,
            may_damage=not unflushed,
        )


@PROPERTY_SETTINGS
@given(histories, st.data())
def test_lost_or_torn_indexes_are_rebuilt(
    history: list[tuple[str, int, int]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        crashed = crash_after(Path(tmp) / "t-0", history)
        indexes = sorted(str(p) for p in crashed.directory.glob("*index"))
        for path in data.draw(st.lists(st.sampled_from(indexes), unique=True)) if indexes else []:
            if data.draw(st.booleans()):
                os.unlink(path)
            else:
                os.truncate(path, data.draw(st.integers(0, os.path.getsize(path))))
        log, handles = reopen(crashed, recovery_point=crashed.flushed)
        assert log.offline_reason is None
        assert [masked(b) for b in read_all(log)] == [masked(b) for b in crashed.expected]
        model = MemoryLog(CONFIG, clock=ManualClock())
        for b in crashed.expected:
            model.append(b)
        for ts in (0, 1_700_000_000_050, 1_700_000_000_140, 1_700_000_000_500):
            assert log.offset_for_timestamp(ts) == model.offset_for_timestamp(ts)
        log.close()
        handles.close()


def test_a_segment_flushed_before_it_rolled_keeps_its_newest_timestamps_findable() -> None:
    # Found by the property above: a segment flushed while active, then sealed by a roll
    # (which adds the time-index entry for its maximum in memory), then a crash before the
    # next flush. It lies below the recovery point, so its indexes are trusted on open, but
    # the time index on disk lacks the maximum: the newest batches must still be found.
    history = [("append", 2, 100)] * 7 + [("flush", 0, 0), ("append", 2, 100)]
    with tempfile.TemporaryDirectory() as tmp:
        crashed = crash_after(Path(tmp) / "t-0", history)
        assert len(crashed.log_files()) == 2, "the last batch must have rolled the segment"
        log, handles = reopen(crashed, recovery_point=crashed.flushed)
        try:
            model = MemoryLog(CONFIG, clock=ManualClock())
            for b in crashed.expected:
                model.append(b)
            timestamps = [ts for b in crashed.expected for _o, ts in record_timestamps(b)]
            for ts in timestamps:
                assert log.offset_for_timestamp(ts) == model.offset_for_timestamp(ts)
        finally:
            log.close()
            handles.close()
