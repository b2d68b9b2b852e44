"""Log compaction (storage/cleaner.py): what stays, offsets, bounds, and crash safety."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weirmq.records.batch import (
    ATTR_TRANSACTIONAL,
    Record,
    decode_records,
    encode_batch,
    parse_header,
)
from weirmq.storage.checkpoint import read_offsets
from weirmq.storage.cleaner import (
    CLEANER_CHECKPOINT_FILE,
    CleanerSettings,
    CleaningCancelled,
    CompactionConfig,
    OffsetMap,
    Throttle,
    clean_log,
    plan_cleaning,
    swap_in,
)
from weirmq.storage.config import LogConfig
from weirmq.storage.log import FileLog
from weirmq.storage.manager import LogManager
from weirmq.storage.repair import apply_plan, plan_repair
from weirmq.storage.verify import verify_data_dir
from weirmq.testing import ManualClock
from weirmq.testing.records import split_batches
from weirmq.types import TopicPartition

TP = TopicPartition("compacted", 0)
SEGMENT_BYTES = 1024
HOUR_MS = 3_600_000

Write = tuple[bytes, bytes | None]  # key, value (None: a tombstone)


def _config(_topic: str) -> LogConfig:
    return LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=256, retention_ms=None)


def _compaction(**overrides: object) -> CompactionConfig:
    fields: dict[str, object] = {"compact": True, "min_cleanable_dirty_ratio": 0.0}
    fields.update(overrides)
    return CompactionConfig(**fields)  # type: ignore[arg-type]


def _manager(
    path: Path, clock: ManualClock, compaction: CompactionConfig, entries_max: int = 1000
) -> LogManager:
    return LogManager(
        path,
        clock=clock,
        config_for=_config,
        compaction_for=lambda _topic: compaction,
        cleaner_settings=CleanerSettings(offset_map_entries_max=entries_max),
    )


def _append(log_: FileLog, batches: Sequence[Sequence[Write]], clock: ManualClock) -> None:
    for writes in batches:
        records = [Record(value=v, key=k, timestamp_ms=clock()) for k, v in writes]
        log_.append(encode_batch(records))
        clock.advance(1)


def _roll_and_flush(log_: FileLog) -> None:
    if not log_.segments[-1].is_empty:
        log_._roll()
    log_.flush()


def _contents(log_: FileLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from the log start, as (offset, key, value), checking that each read
    starts with a batch holding a record at or after the offset asked for."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        data = log_.read(offset, 1 << 20).records
        if not data:  # only removed offsets up to the end (tombstones gone at the end)
            break
        first = parse_header(split_batches(data)[0])
        assert first.last_offset >= offset and first.records_count > 0
        for batch in split_batches(data):
            out.extend(r for r in decode_records(batch) if r[0] >= offset)
            offset = parse_header(batch).last_offset + 1
    return out


def _file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _clean_until_done(manager: LogManager) -> None:
    for _ in range(100):
        if manager.cleaner.run_once() == 0:
            return
        manager.finish_cleaning()
    raise AssertionError("the cleaner never finished")


writes_strategy = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
            st.none() | st.binary(min_size=1, max_size=40),
        ),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=60,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cleaned=writes_strategy,
    dirty=writes_strategy,
    entries_max=st.integers(1, 6),
)
def test_compaction_keeps_the_newest_record_of_every_key(
    tmp_path_factory: pytest.TempPathFactory,
    cleaned: list[list[Write]],
    dirty: list[list[Write]],
    entries_max: int,
) -> None:
    path = tmp_path_factory.mktemp("log")
    clock = ManualClock()
    config = _compaction(delete_retention_ms=HOUR_MS, min_compaction_lag_ms=HOUR_MS // 2)
    manager = _manager(path, clock, config, entries_max)
    try:
        _check_compaction(manager, path, clock, cleaned, dirty, entries_max)
    finally:
        manager.close()


def _check_compaction(
    manager: LogManager,
    path: Path,
    clock: ManualClock,
    cleaned: list[list[Write]],
    dirty: list[list[Write]],
    entries_max: int,
) -> None:
    log_ = manager.create(*TP)
    _append(log_, cleaned, clock)
    _roll_and_flush(log_)
    end = log_.log_end_offset
    clock.advance(HOUR_MS)
    _append(log_, dirty, clock)  # younger than min.compaction.lag.ms: never touched
    log_.flush()
    before = _contents(log_)
    _clean_until_done(manager)
    after = _contents(log_)

    offsets = [o for o, _k, _v in after]
    assert offsets == sorted(set(offsets)), "offsets strictly increase"
    assert [r for r in after if r[0] >= end] == [r for r in before if r[0] >= end]
    newest = {k: (o, v) for o, k, v in before if o < end}
    assert [r for r in after if r[0] < end] == sorted((o, k, v) for k, (o, v) in newest.items())
    assert read_offsets(path / CLEANER_CHECKPOINT_FILE)[TP] == end

    # Tombstones go once delete.retention.ms has passed since the cleaning that saw them.
    clock.advance(HOUR_MS)
    _roll_and_flush(log_)
    _clean_until_done(manager)  # the dirty part, seen for the first time
    _append(log_, [[(b"z", b"new")]], clock)
    _roll_and_flush(log_)
    clock.advance(HOUR_MS)
    _clean_until_done(manager)
    everything = {k: (o, v) for o, k, v in before}
    everything[b"z"] = (log_.log_end_offset - 1, b"new")
    final = _contents(log_)
    assert final == sorted((o, k, v) for k, (o, v) in everything.items() if v is not None)

    # A restart reads the same records (indexes, swaps and checkpoint all durable).
    manager.close()
    reopened = _manager(path, clock, _compaction(), entries_max)
    try:
        reopened_log = reopened.get(*TP)
        assert reopened_log is not None and reopened_log.offline_reason is None
        assert _contents(reopened_log) == final
    finally:
        reopened.close()


def test_dirty_ratio_and_min_lag_decide_when(tmp_path: Path, clock: ManualClock) -> None:
    manager = _manager(tmp_path, clock, _compaction(min_cleanable_dirty_ratio=0.9))
    log_ = manager.create(*TP)
    _append(log_, [[(b"k", b"v%d" % i)] for i in range(50)], clock)
    _roll_and_flush(log_)
    assert manager.cleaner.run_once() == 1  # never cleaned: all dirty
    manager.finish_cleaning()
    _append(log_, [[(b"k", b"w")]], clock)
    _roll_and_flush(log_)
    assert manager.cleaner.run_once() == 0  # a little dirty: below the ratio
    manager.close()

    lagging = _manager(tmp_path / "lag", clock, _compaction(min_compaction_lag_ms=HOUR_MS))
    log_ = lagging.create(*TP)
    _append(log_, [[(b"k", b"v")], [(b"k", b"w")]], clock)
    _roll_and_flush(log_)
    assert lagging.cleaner.run_once() == 0  # too young
    clock.advance(HOUR_MS)
    assert lagging.cleaner.run_once() == 1
    lagging.close()


def test_max_compaction_lag_forces_a_cleaning(tmp_path: Path, clock: ManualClock) -> None:
    config = _compaction(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=HOUR_MS)
    manager = _manager(tmp_path, clock, config)
    log_ = manager.create(*TP)
    _append(log_, [[(b"k", b"v%d" % i)] for i in range(40)], clock)
    _roll_and_flush(log_)
    manager.cleaner.run_once()
    manager.finish_cleaning()
    _append(log_, [[(b"k", b"w")]], clock)
    _roll_and_flush(log_)
    assert manager.cleaner.run_once() == 0
    clock.advance(HOUR_MS)
    assert manager.cleaner.run_once() == 1
    manager.close()


def test_a_fetch_at_a_removed_offset_gets_the_next_record(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    _append(log_, [[(b"k", b"old")] for _ in range(30)] + [[(b"j", b"x")]], clock)
    _roll_and_flush(log_)
    _clean_until_done(manager)
    # A fetch at a removed offset gets the next batch with a record (whatever segment it
    # is in), not the empty filler holding the offset (librdkafka would take that for a
    # message too large to fetch).
    first = split_batches(log_.read(3, 1 << 20).records)
    assert next(r for b in first for r in decode_records(b)) == (29, b"k", b"old")
    assert _contents(log_) == [(29, b"k", b"old"), (30, b"j", b"x")]
    # The segments still tile the offsets: the removed ones are in empty batches.
    stored = [parse_header(b) for s in log_.segments for b in split_batches(_file(s.log_path))]
    assert [h.base_offset for h in stored] == [0, *(h.last_offset + 1 for h in stored[:-1])]
    assert os.path.getsize(log_.segments[0].log_path) < SEGMENT_BYTES
    manager.close()


def test_the_last_batch_of_a_producer_is_kept_empty(tmp_path: Path, clock: ManualClock) -> None:
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    for seq in range(3):
        batch = encode_batch([Record(b"v", b"k", timestamp_ms=clock())], producer_id=7,
                             producer_epoch=0, base_sequence=seq)  # fmt: skip
        log_.append(batch)
    log_.append(encode_batch([Record(b"last", b"k", timestamp_ms=clock())]))
    _roll_and_flush(log_)
    _clean_until_done(manager)
    headers = [parse_header(b) for b in split_batches(_file(log_.segments[0].log_path))]
    producers = [(h.base_offset, h.producer_id, h.base_sequence, h.records_count) for h in headers]
    assert producers == [(0, -1, -1, 0), (2, 7, 2, 0), (3, -1, -1, 1)]
    manager.close()


def test_offset_map_and_throttle_bounds() -> None:
    offset_map = OffsetMap(2)
    assert offset_map.put(b"a", 1) and offset_map.put(b"b", 2) and offset_map.put(b"a", 3)
    assert not offset_map.put(b"c", 4)
    assert offset_map.get(b"a") == 3 and offset_map.get(b"c") is None and len(offset_map) == 2
    slept: list[float] = []
    throttle = Throttle(1000, sleep=slept.append, now=lambda: 0.0)
    throttle.spent(500)
    throttle.spent(1500)
    assert slept == [0.5, 2.0]


def test_topic_configs_give_the_compaction_config() -> None:
    config = CompactionConfig.from_topic_configs(
        {
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.01",
            "max.compaction.lag.ms": "5000",
            "delete.retention.ms": "0",
        }
    )
    assert config == CompactionConfig(True, 0.01, 0, 5000, 0)
    assert not CompactionConfig.from_topic_configs({}).compact
    assert (
        CompactionConfig.from_topic_configs({"cleanup.policy": "compact"}).max_compaction_lag_ms
        is None
    )


# --- crash safety ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "crash",
    ["while-writing", "after-swap-file", "after-index-deleted", "after-rename", "no-checkpoint"],
)
def test_a_crash_at_any_step_of_the_swap_loses_and_duplicates_nothing(
    tmp_path: Path, clock: ManualClock, crash: str
) -> None:
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    writes = [[(b"k%d" % (i % 4), b"v%d" % i)] for i in range(80)]
    _append(log_, writes, clock)
    _roll_and_flush(log_)
    manager.write_checkpoints()
    before = _contents(log_)
    newest = sorted({k: (o, k, v) for o, k, v in before}.values())
    plan = plan_cleaning(log_, 0, _compaction(), clock())
    assert plan is not None
    cleaning = clean_log(
        TP, log_, plan, _compaction(), CleanerSettings(), now_ms=clock(), throttle=Throttle(1 << 40)
    )
    assert cleaning is not None and len(cleaning.swaps) > 1
    first = cleaning.swaps[0]
    stem = first.path.removesuffix(".log.swap")
    if crash == "while-writing":
        os.rename(first.path, stem + ".log.cleaned")
        with open(stem + ".log.cleaned", "r+b") as f:
            f.truncate(100)  # torn
    elif crash == "after-index-deleted":
        os.unlink(stem + ".index")
    elif crash == "after-rename":
        os.rename(first.path, stem + ".log")
    elif crash == "no-checkpoint":
        assert swap_in(cleaning, clock())
    # "Crash": open the directory again without closing (no clean-shutdown marker).
    again = _manager(tmp_path, clock, _compaction())
    try:
        recovered = again.get(*TP)
        assert recovered is not None and recovered.offline_reason is None
        after = _contents(recovered)
        assert [o for o, _k, _v in after] == sorted({o for o, _k, _v in after})
        assert set(after) <= set(before), "nothing invented"
        assert set(newest) <= set(after), "no newest record lost"
        assert not [p for p in os.listdir(recovered.directory) if ".log." in p]
        _clean_until_done(again)
        assert _contents(recovered) == newest
    finally:
        again.close()
        manager.cleaner.close()


def test_retention_or_a_truncation_meanwhile_makes_the_rewrite_stale(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    _append(log_, [[(b"k", b"v%d" % i)] for i in range(80)], clock)
    _roll_and_flush(log_)
    assert manager.cleaner.run_once() == 1
    log_.truncate_to(10)
    manager.finish_cleaning()
    assert TP not in read_offsets(tmp_path / CLEANER_CHECKPOINT_FILE)
    assert not [p for p in os.listdir(log_.directory) if ".log." in p]
    assert [o for o, _k, _v in _contents(log_)] == list(range(10))
    manager.close()


def test_a_stop_gives_up_the_cleaning_under_way_and_leaves_no_file(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    _append(log_, [[(b"k", b"v%d" % i)] for i in range(80)], clock)
    _roll_and_flush(log_)
    plan = plan_cleaning(log_, 0, _compaction(), clock())
    assert plan is not None
    calls = iter(range(1000))
    with pytest.raises(CleaningCancelled):
        clean_log(
            TP, log_, plan, _compaction(), CleanerSettings(), now_ms=clock(),
            throttle=Throttle(1 << 40), stopping=lambda: next(calls) > 12,
        )  # fmt: skip
    assert not [p for p in os.listdir(log_.directory) if ".log." in p]
    manager.close()


def test_transactional_records_are_kept_and_never_count_as_newest(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    _append(log_, [[(b"k", b"old")], [(b"k", b"committed")]], clock)
    log_.append(
        encode_batch(
            [Record(b"maybe-aborted", b"k", timestamp_ms=clock())],
            producer_id=3,
            producer_epoch=0,
            base_sequence=0,
            attributes=ATTR_TRANSACTIONAL,
        )
    )
    _roll_and_flush(log_)
    _clean_until_done(manager)
    assert _contents(log_) == [(1, b"k", b"committed"), (2, b"k", b"maybe-aborted")]
    manager.close()


def test_small_fetches_past_removed_offsets_skip_no_record(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    writes = [[(b"k%d" % (i % 2 if i % 5 else i), b"v%d" % i)] for i in range(60)]
    _append(log_, writes, clock)
    _roll_and_flush(log_)
    _clean_until_done(manager)
    everything = _contents(log_)
    offset, small = 0, []
    while offset < log_.log_end_offset:
        data = log_.read(offset, 1).records  # one batch at a time
        if not data:
            break
        batches = split_batches(data)
        small += [r for b in batches for r in decode_records(b) if r[0] >= offset]
        offset = parse_header(batches[-1]).last_offset + 1
    assert small == everything
    manager.close()


def _cleaned_then_more(tmp_path: Path, clock: ManualClock) -> tuple[LogManager, FileLog]:
    """A log cleaned once (small segments), then more dirty segments of the same keys."""
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    for round_ in range(3):
        _append(log_, [[(b"k%d" % (i % 4), b"r%d-%d" % (round_, i))] for i in range(60)], clock)
        _roll_and_flush(log_)
        _clean_until_done(manager)
    return manager, log_


def test_cleaned_segments_merge_so_the_file_count_stays_bounded(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(tmp_path, clock, _compaction())
    log_ = manager.create(*TP)
    counts = []
    for round_ in range(12):
        _append(log_, [[(b"k%d" % (i % 4), b"r%d-%d" % (round_, i))] for i in range(60)], clock)
        _roll_and_flush(log_)
        _clean_until_done(manager)
        counts.append(log_.segment_count)
    assert max(counts[3:]) == counts[-1] <= 7, counts  # not one more file per round
    newest = {k: (o, k, v) for o, k, v in _contents(log_)}
    assert len(_contents(log_)) == len(newest) == 4
    manager.close()


@pytest.mark.parametrize("crash", ["swap-file", "olds-renamed", "swap-renamed"])
def test_a_crash_in_a_merging_swap_loses_and_duplicates_nothing(
    tmp_path: Path, clock: ManualClock, crash: str
) -> None:
    manager, log_ = _cleaned_then_more(tmp_path, clock)
    _append(log_, [[(b"k%d" % (i % 4), b"last-%d" % i)] for i in range(60)], clock)
    _roll_and_flush(log_)
    manager.write_checkpoints()
    before = _contents(log_)
    newest = sorted({k: (o, k, v) for o, k, v in before}.values())
    checkpoint = read_offsets(tmp_path / CLEANER_CHECKPOINT_FILE)[TP]
    plan = plan_cleaning(log_, checkpoint, _compaction(), clock())
    assert plan is not None
    cleaning = clean_log(
        TP, log_, plan, _compaction(), CleanerSettings(), now_ms=clock(), throttle=Throttle(1 << 40)
    )
    assert cleaning is not None
    merging = next(swap for swap in cleaning.swaps if len(swap.old) > 1)
    if crash in ("olds-renamed", "swap-renamed"):
        for old in merging.old[1:]:
            os.rename(old.log_path, old.log_path + ".deleted")
    if crash == "swap-renamed":
        os.rename(merging.path, merging.old[0].log_path)
    again = _manager(tmp_path, clock, _compaction())
    try:
        recovered = again.get(*TP)
        assert recovered is not None and recovered.offline_reason is None
        after = _contents(recovered)
        assert [o for o, _k, _v in after] == sorted({o for o, _k, _v in after})
        assert set(after) <= set(before), "nothing invented"
        assert set(newest) <= set(after), "no newest record lost"
        assert not [p for p in os.listdir(recovered.directory) if ".log." in p]
        _clean_until_done(again)
        assert _contents(recovered) == newest
    finally:
        again.close()
        manager.cleaner.close()


def test_verify_judges_a_data_dir_with_an_interrupted_swap_as_the_broker_will_open_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager, log_ = _cleaned_then_more(tmp_path, clock)
    _append(log_, [[(b"k%d" % (i % 4), b"last-%d" % i)] for i in range(60)], clock)
    _roll_and_flush(log_)
    manager.write_checkpoints()
    checkpoint = read_offsets(tmp_path / CLEANER_CHECKPOINT_FILE)[TP]
    plan = plan_cleaning(log_, checkpoint, _compaction(), clock())
    assert plan is not None
    cleaning = clean_log(
        TP, log_, plan, _compaction(), CleanerSettings(), now_ms=clock(), throttle=Throttle(1 << 40)
    )
    assert cleaning is not None
    merging = next(swap for swap in cleaning.swaps if len(swap.old) > 1)
    for old in merging.old[1:]:
        os.rename(old.log_path, old.log_path + ".deleted")  # the crash came mid-swap
    report = verify_data_dir(tmp_path)
    assert report.ok, report.to_json()
    manager.cleaner.close()


@pytest.mark.parametrize("crash", ["cleaned", "olds-renamed"])
def test_repair_finishes_an_interrupted_swap_as_the_broker_would(
    tmp_path: Path, clock: ManualClock, crash: str
) -> None:
    """`weirmq storage repair` on a directory a kill -9 left mid-compaction: a torn
    `.log.cleaned` (rolled back), or a merging swap with its later segments already renamed
    `.log.deleted` (finished). Repair leaves no leftover and loses nothing."""
    manager, log_ = _cleaned_then_more(tmp_path, clock)
    _append(log_, [[(b"k%d" % (i % 4), b"last-%d" % i)] for i in range(60)], clock)
    _roll_and_flush(log_)
    manager.write_checkpoints()
    before = _contents(log_)
    newest = sorted({k: (o, k, v) for o, k, v in before}.values())
    checkpoint = read_offsets(tmp_path / CLEANER_CHECKPOINT_FILE)[TP]
    plan = plan_cleaning(log_, checkpoint, _compaction(), clock())
    assert plan is not None
    cleaning = clean_log(
        TP, log_, plan, _compaction(), CleanerSettings(), now_ms=clock(), throttle=Throttle(1 << 40)
    )
    assert cleaning is not None
    merging = next(swap for swap in cleaning.swaps if len(swap.old) > 1)
    if crash == "cleaned":
        stem = merging.path.removesuffix(".log.swap")
        os.rename(merging.path, stem + ".log.cleaned")
        os.truncate(stem + ".log.cleaned", 100)
    else:
        for old in merging.old[1:]:
            os.rename(old.log_path, old.log_path + ".deleted")
    manager.cleaner.close()
    manager.committer.close()
    manager.handles.close()

    plans = plan_repair(verify_data_dir(tmp_path))
    (repair,) = plans
    assert repair.steps[0].what == "finish-swaps" and repair.lost == ()
    apply_plan(plans, tmp_path)
    assert not [p for p in os.listdir(log_.directory) if ".log." in p]
    assert verify_data_dir(tmp_path).ok
    assert plan_repair(verify_data_dir(tmp_path)) == []

    again = _manager(tmp_path, clock, _compaction())
    try:
        recovered = again.get(*TP)
        assert recovered is not None and recovered.offline_reason is None
        after = _contents(recovered)
        assert set(after) <= set(before), "nothing invented"
        assert set(newest) <= set(after), "no newest record lost"
        bases = {s.base_offset for s in recovered.segments}
        # The merging rewrite was finished (its later segments gone), or rolled back.
        assert (merging.old[1].base_offset in bases) == (crash == "cleaned")
    finally:
        again.close()
