"""Aborted transactions in a `FileLog` (`append_aborted_txn`, `aborted_txns`): entries
across segments, the query against a brute-force model, and their lifecycle: retention,
truncation, a crash's torn tail, compaction's swap (and a crash in it), verify and repair.

The logs hold what a transactional producer writes: transactional batches, then an
ABORT or COMMIT control batch; an ABORT is recorded as the broker does, right after the
marker's append."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weirmq.records.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, Record, encode_batch
from weirmq.storage import log as log_module
from weirmq.storage.checkpoint import read_offsets
from weirmq.storage.cleaner import (
    CLEANER_CHECKPOINT_FILE,
    CleanerSettings,
    CompactionConfig,
    Throttle,
    clean_log,
    plan_cleaning,
)
from weirmq.storage.config import LogConfig
from weirmq.storage.handles import HandleCache
from weirmq.storage.log import FileLog
from weirmq.storage.manager import LogManager
from weirmq.storage.repair import apply_plan, plan_repair
from weirmq.storage.txnindex import AbortedTxn, read_file
from weirmq.storage.verify import INDEX, verify_data_dir
from weirmq.testing import ManualClock
from weirmq.types import TopicPartition

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=256, retention_ms=None)
TP = TopicPartition("tx", 0)


# --- a transactional producer's writes, and the model of what is aborted -------------------


@dataclass
class Writer:
    """Appends as transactional producers do and records aborts as the broker does;
    `aborted` is the model: every entry recorded, in order."""

    log: FileLog
    clock: ManualClock
    open_txns: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    aborted: list[AbortedTxn] = field(default_factory=list)

    def data(self, producer_id: int, records: int = 1, key: bytes = b"k") -> None:
        batch = encode_batch(
            [Record(b"v" * 40, key, timestamp_ms=self.clock()) for _ in range(records)],
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
            attributes=ATTR_TRANSACTIONAL,
        )
        info = self.log.append(batch)
        self.open_txns.setdefault(producer_id, info.base_offset)
        self.clock.advance(1)

    def plain(self, key: bytes = b"k", value: bytes = b"v") -> None:
        self.log.append(encode_batch([Record(value, key, timestamp_ms=self.clock())]))
        self.clock.advance(1)

    def end(self, producer_id: int, *, abort: bool) -> None:
        first = self.open_txns.pop(producer_id, None)
        if first is None:
            return
        marker = encode_batch(
            [Record(b"\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00" + bytes([0 if abort else 1]))],
            producer_id=producer_id,
            producer_epoch=0,
            attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
        )
        offset = self.log.append(marker).base_offset
        if abort:
            lso = min([*self.open_txns.values(), offset])
            entry = AbortedTxn(producer_id, first, offset, lso)
            self.log.append_aborted_txn(entry)
            self.aborted.append(entry)
        self.clock.advance(1)


def _expected(aborted: Sequence[AbortedTxn], start: int, upper: int) -> list[AbortedTxn]:
    return [e for e in aborted if e.last_offset >= start and e.first_offset < upper]


def _open(path: Path, handles: HandleCache, clock: ManualClock, **kwargs: object) -> FileLog:
    return FileLog(path, SMALL, handles=handles, clock=clock, **kwargs)  # type: ignore[arg-type]


def _written(log: FileLog, clock: ManualClock, rounds: int = 12) -> Writer:
    """Interleaved transactions of three producers over many segments, half aborted."""
    writer = Writer(log, clock)
    for i in range(rounds):
        for pid in (1, 2, 3):
            writer.data(pid, records=1 + (i + pid) % 3)
        writer.plain()
        writer.end(1 + i % 3, abort=i % 2 == 0)
        writer.end(1 + (i + 1) % 3, abort=i % 4 == 1)
    for pid in (1, 2, 3):
        writer.end(pid, abort=True)
    return writer


def _txnindex_files(directory: Path) -> list[str]:
    return sorted(p for p in os.listdir(directory) if p.endswith(".txnindex"))


def _in_segments(log: FileLog) -> Iterator[tuple[int, AbortedTxn]]:
    for segment in log.segments:
        for entry in segment.txn.entries:
            yield segment.base_offset, entry


# --- where entries go, and the query -------------------------------------------------------


def test_entries_go_to_the_segment_holding_their_marker(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _open(tmp_path / "t", handles, clock)
    writer = _written(log, clock)
    log.close()
    assert log.segment_count > 4 and len(writer.aborted) > 6
    holding = {}
    for segment in log.segments:
        for entry in writer.aborted:
            if segment.base_offset <= entry.last_offset < segment.next_offset:
                holding.setdefault(segment.base_offset, []).append(entry)
    assert len(holding) > 2, "the aborts are spread over several segments"
    assert [(b, e) for b, es in sorted(holding.items()) for e in es] == list(_in_segments(log))
    names = [f"{base:020d}.txnindex" for base in sorted(holding)]
    assert _txnindex_files(tmp_path / "t") == names, "files only where there are aborts"
    for base, entries in holding.items():
        assert read_file(str(tmp_path / "t" / f"{base:020d}.txnindex")) == entries
    end = log.log_end_offset
    assert log.aborted_txns(0, end) == writer.aborted


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["data", "plain", "abort", "commit"]), st.integers(1, 4)),
        min_size=1,
        max_size=80,
    ),
    queries=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), max_size=20),
)
def test_the_query_matches_a_brute_force_model(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, int]],
    queries: list[tuple[int, int]],
) -> None:
    directory = tmp_path_factory.mktemp("model") / "t"
    clock = ManualClock()
    handles = HandleCache(max_open=8)
    try:
        log = _open(directory, handles, clock)
        writer = Writer(log, clock)
        for op, pid in ops:
            if op == "data":
                writer.data(pid, records=pid)
            elif op == "plain":
                writer.plain()
            else:
                writer.end(pid, abort=op == "abort")
        end = log.log_end_offset
        queries += [(0, end), (end, end + 1)]
        for start, upper in queries:
            assert log.aborted_txns(start, upper) == _expected(writer.aborted, start, upper)
        log.close()
        again = _open(directory, handles, clock, clean_shutdown=True)
        for start, upper in queries:
            assert again.aborted_txns(start, upper) == _expected(writer.aborted, start, upper)
        again.close()
    finally:
        handles.close()


# --- lifecycle -----------------------------------------------------------------------------


def test_retention_and_deleted_records_delete_them(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _open(tmp_path / "t", handles, clock)
    writer = _written(log, clock)
    log.flush()
    files = _txnindex_files(tmp_path / "t")
    second = int(files[1][:20])
    log.advance_log_start(second)  # DeleteRecords: the segments wholly below it go
    assert _txnindex_files(tmp_path / "t") == files[1:]
    assert log.aborted_txns(0, log.log_end_offset) == [
        e for e in writer.aborted if e.last_offset >= second
    ]
    log.config = LogConfig(
        segment_bytes=1024, index_interval_bytes=256, retention_ms=None, retention_bytes=1
    )
    log.apply_retention()  # everything but the active segment
    active = log.segments[-1]
    assert log.segment_count == 1
    assert _txnindex_files(tmp_path / "t") == [
        f for f in files if int(f[:20]) == active.base_offset
    ]
    log.append_aborted_txn(writer.aborted[0])  # a replay of a deleted one: nothing to keep
    assert log.aborted_txns(0, log.log_end_offset) == [
        e for e in writer.aborted if e.last_offset >= active.base_offset
    ]
    log.close()


def test_truncate_to_drops_entries_at_and_after_the_new_end(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _open(tmp_path / "t", handles, clock)
    writer = _written(log, clock)
    log.flush()
    cut = writer.aborted[len(writer.aborted) // 2].last_offset  # this marker goes too
    log.truncate_to(cut)
    kept = [e for e in writer.aborted if e.last_offset < cut]
    assert log.aborted_txns(0, 1 << 40) == kept
    assert [e for _base, e in _in_segments(log)] == kept
    log.close()
    on_disk = [
        e
        for name in _txnindex_files(tmp_path / "t")
        for e in read_file(str(tmp_path / "t" / name)) or []
    ]
    assert on_disk == kept
    again = _open(tmp_path / "t", handles, clock, clean_shutdown=True)
    assert again.aborted_txns(0, 1 << 40) == kept
    again.close()


def test_reopen_after_a_crash_cut_the_log(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    """A crash tears the last segment (its `.log` shorter than its `.txnindex` says): the
    open cuts the torn tail and drops the entries whose marker went with it; the broker's
    replay then re-appends what it finds, the entries still there included."""
    log = _open(tmp_path / "t", handles, clock)
    writer = Writer(log, clock)
    for i in range(6):
        writer.data(7, records=2)
        writer.end(7, abort=True)
        if i == 2:
            log.flush()
    log.flush()
    recovery_point = writer.aborted[2].last_offset + 1
    last = log.segments[-1]
    marker = writer.aborted[-2].last_offset  # the torn batch: this marker and what follows
    header_at = next(pos for pos, h, _v in last.batches_from(0) if h.base_offset == marker)
    handles.close()  # the "crash": nothing more is written
    os.truncate(last.log_path, header_at + 10)
    again = _open(tmp_path / "t", HandleCache(max_open=8), clock, recovery_point=recovery_point)
    assert again.offline_reason is None and again.log_end_offset == marker
    kept = writer.aborted[:-2]
    assert again.aborted_txns(0, 1 << 40) == kept
    in_last = [e for e in kept if e.last_offset >= last.base_offset]
    assert (read_file(last.txnindex_path) or []) == in_last  # no file when none is left
    for entry in kept:  # the replay
        again.append_aborted_txn(entry)
    assert again.aborted_txns(0, 1 << 40) == kept
    again.close()


def test_lost_entries_are_re_appended_after_a_crash(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _open(tmp_path / "t", handles, clock)
    writer = Writer(log, clock)
    for _ in range(4):
        writer.data(7)
        writer.end(7, abort=True)
    log.close()
    path = log.segments[0].txnindex_path
    os.truncate(path, 34)  # the last entries never reached the disk
    again = _open(tmp_path / "t", handles, clock, clean_shutdown=True)
    assert again.aborted_txns(0, 1 << 40) == writer.aborted[:1]
    for entry in writer.aborted:
        again.append_aborted_txn(entry)
    assert again.aborted_txns(0, 1 << 40) == writer.aborted
    again.close()
    assert read_file(path) == writer.aborted


def test_flush_fsyncs_the_txnindex_even_of_a_sealed_segment(
    tmp_path: Path, handles: HandleCache, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _open(tmp_path / "t", handles, clock)
    writer = _written(log, clock, rounds=4)
    log.flush()
    fsynced: list[str] = []
    real = log_module._fsync_path
    monkeypatch.setattr(log_module, "_fsync_path", lambda p: (fsynced.append(p), real(p)))
    assert log.flush() and fsynced == []
    # The broker's replay finds an entry missing from a sealed segment (lost in a crash).
    entry = writer.aborted[0]
    sealed = next(s for s in log.segments if s.base_offset <= entry.last_offset < s.next_offset)
    assert sealed is not log.segments[-1]
    sealed.txn.entries.clear()
    sealed.txn.persisted = sealed.txn.synced = 0
    sealed.truncate_txn(0)
    log.append_aborted_txn(entry)
    assert log.needs_flush
    log.flush()
    assert sealed.txnindex_path in fsynced
    assert read_file(sealed.txnindex_path)[0] == entry  # type: ignore[index]
    log.close()


# --- compaction ------------------------------------------------------------------------------


def _compaction() -> CompactionConfig:
    return CompactionConfig(compact=True, min_cleanable_dirty_ratio=0.0)


def _manager(path: Path, clock: ManualClock) -> LogManager:
    return LogManager(
        path,
        clock=clock,
        config_for=lambda _topic: SMALL,
        compaction_for=lambda _topic: _compaction(),
        cleaner_settings=CleanerSettings(offset_map_entries_max=1000),
    )


def _roll_and_flush(log: FileLog) -> None:
    if not log.segments[-1].is_empty:
        log._roll()
    log.flush()


def _clean_until_done(manager: LogManager) -> None:
    for _ in range(100):
        if manager.cleaner.run_once() == 0:
            return
        manager.finish_cleaning()
    raise AssertionError("the cleaner never finished")


def _compacted_with_aborts(tmp_path: Path, clock: ManualClock) -> tuple[LogManager, Writer]:
    """Keyed writes overwritten many times, with small aborted transactions among them,
    cleaned twice: the second cleaning merges the segments the first one shrank."""
    manager = _manager(tmp_path, clock)
    writer = Writer(manager.create(*TP), clock)
    for round_ in range(3):
        for i in range(40):
            writer.plain(b"k%d" % (i % 3), b"r%d-%d" % (round_, i) * 8)
            if i % 7 == 0:
                writer.data(5 + i % 2, key=b"t")
                writer.end(5 + i % 2, abort=i % 14 == 0)
        _roll_and_flush(writer.log)
        _clean_until_done(manager)
    return manager, writer


def test_the_cleaners_swap_keeps_and_merges_entries(tmp_path: Path, clock: ManualClock) -> None:
    manager, writer = _compacted_with_aborts(tmp_path, clock)
    log = writer.log
    assert len(writer.aborted) >= 6
    assert log.aborted_txns(0, 1 << 40) == writer.aborted
    for base, entry in _in_segments(log):
        segment = next(s for s in log.segments if s.base_offset == base)
        assert base <= entry.last_offset < segment.next_offset
    names = {f"{s.base_offset:020d}.txnindex" for s in log.segments if len(s.txn)}
    assert set(_txnindex_files(log.directory)) == names, "none orphaned, none missing"
    assert len(names) < len(writer.aborted), "merged segments share one file"
    manager.close()
    again = _manager(tmp_path, clock)
    reopened = again.get(*TP)
    assert reopened is not None
    assert reopened.aborted_txns(0, 1 << 40) == writer.aborted
    again.close()


@pytest.mark.parametrize("crash", ["swap-file", "olds-renamed", "swap-renamed"])
def test_a_crash_in_a_merging_swap_keeps_every_entry(
    tmp_path: Path, clock: ManualClock, crash: str
) -> None:
    manager, writer = _compacted_with_aborts(tmp_path, clock)
    log = writer.log
    for i in range(40):
        writer.plain(b"k%d" % (i % 3), b"last-%d" % i * 8)
        if i % 5 == 0:
            writer.data(9, key=b"t")
            writer.end(9, abort=True)
    _roll_and_flush(log)
    manager.write_checkpoints()
    checkpoint = read_offsets(tmp_path / CLEANER_CHECKPOINT_FILE)[TP]
    plan = plan_cleaning(log, checkpoint, _compaction(), clock())
    assert plan is not None
    cleaning = clean_log(
        TP, log, plan, _compaction(), CleanerSettings(), now_ms=clock(), throttle=Throttle(1 << 40)
    )
    assert cleaning is not None
    merging = next(  # a merge where a later segment has entries
        swap for swap in cleaning.swaps if any(len(old.txn) for old in swap.old[1:])
    )
    if crash in ("olds-renamed", "swap-renamed"):  # `swap_cleaned`'s steps, up to the crash
        log_module._merged_txn(merging.old)
        for old in merging.old[1:]:
            os.rename(old.log_path, old.log_path + ".deleted")
    if crash == "swap-renamed":
        os.rename(merging.path, merging.old[0].log_path)
    again = _manager(tmp_path, clock)
    try:
        recovered = again.get(*TP)
        assert recovered is not None and recovered.offline_reason is None
        assert recovered.aborted_txns(0, 1 << 40) == writer.aborted
        names = {f"{s.base_offset:020d}.txnindex" for s in recovered.segments if len(s.txn)}
        assert set(_txnindex_files(recovered.directory)) == names
        _clean_until_done(again)
        assert recovered.aborted_txns(0, 1 << 40) == writer.aborted
    finally:
        again.close()
        manager.cleaner.close()


# --- verify and repair -----------------------------------------------------------------------


def test_verify_checks_the_form_of_a_txnindex_and_repair_moves_a_bad_one(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = _manager(tmp_path, clock)
    writer = _written(manager.create(*TP), clock, rounds=6)
    manager.close()
    report = verify_data_dir(tmp_path)
    assert report.ok, report.to_json()
    name = _txnindex_files(writer.log.directory)[0]
    path = writer.log.directory / name
    path.write_bytes(path.read_bytes()[:-3])  # torn
    report = verify_data_dir(tmp_path)
    (finding,) = report.partitions[0].findings
    assert (finding.kind, finding.path) == (INDEX, str(path))
    apply_plan(plan_repair(report), tmp_path)
    assert verify_data_dir(tmp_path).ok
    assert (tmp_path / "quarantine" / "tx-0" / name).exists() and not path.exists()
    again = _manager(tmp_path, clock)
    reopened = again.get(*TP)
    assert reopened is not None and reopened.offline_reason is None
    base = int(name[:20])
    bases = [s.base_offset for s in reopened.segments]
    end = bases[bases.index(base) + 1]
    lost = [e for e in writer.aborted if base <= e.last_offset < end]
    assert reopened.aborted_txns(0, 1 << 40) == [e for e in writer.aborted if e not in lost]
    for entry in writer.aborted:  # the broker's rebuild
        reopened.append_aborted_txn(entry)
    assert reopened.aborted_txns(0, 1 << 40) == writer.aborted
    again.close()


def test_a_failed_fsync_rolls_the_entries_back_with_the_log(
    tmp_path: Path, handles: HandleCache, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed fsync the log rolls back to what was durable (test_fsync_failure.py):
    the entries whose markers go are dropped from memory and file, and the next good
    flush writes the file whole again (the failed one may have left any of its bytes)."""
    log = _open(tmp_path / "t", handles, clock)
    writer = Writer(log, clock)
    for _ in range(3):
        writer.data(7)
        writer.end(7, abort=True)
    log.flush()
    durable = list(writer.aborted)
    for _ in range(2):
        writer.data(7)
        writer.end(7, abort=True)
    real = log_module._fsync_path

    def failing(path: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_module, "_fsync_path", failing)
    with pytest.raises(log_module.StorageError, match="fsync failed"):
        log.flush()
    assert log.roll_back_unsynced() > 0
    assert log.aborted_txns(0, 1 << 40) == durable
    monkeypatch.setattr(log_module, "_fsync_path", real)
    assert log.probe_fsync()
    writer.open_txns.clear()
    writer.aborted = list(durable)
    writer.data(8)
    writer.end(8, abort=True)
    log.close()
    expected = [*durable, writer.aborted[-1]]
    assert read_file(log.segments[0].txnindex_path) == expected
    again = _open(tmp_path / "t", handles, clock, clean_shutdown=True)
    assert again.aborted_txns(0, 1 << 40) == expected
    again.close()
