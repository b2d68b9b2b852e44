"""The aborted-transaction index (storage/txnindex.py): its file format, the in-memory
index, and one segment's `.txnindex` file through a `FileLog`: appended, reopened,
truncated, and dropped when damaged."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weirmq.storage.config import LogConfig
from weirmq.storage.handles import HandleCache
from weirmq.storage.log import FileLog
from weirmq.storage.txnindex import (
    ENTRY_BYTES,
    AbortedTxn,
    TxnIndex,
    decode,
    merged,
    read_file,
    write_file,
)
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=256)


def _open(path: Path, handles: HandleCache, clock: ManualClock, **kwargs: object) -> FileLog:
    return FileLog(path, CONFIG, handles=handles, clock=clock, **kwargs)  # type: ignore[arg-type]


def _log_with(path: Path, handles: HandleCache, clock: ManualClock, offsets: int) -> FileLog:
    log = _open(path, handles, clock)
    for _ in range(offsets):
        log.append(make_batch(1))
    return log


# --- the file format ---------------------------------------------------------------------


def test_an_entry_is_kafkas_34_bytes_big_endian() -> None:
    entry = AbortedTxn(producer_id=7, first_offset=3, last_offset=9, last_stable_offset=2)
    data = entry.encode()
    assert len(data) == ENTRY_BYTES == 34
    assert data == struct.pack(">hqqqq", 0, 7, 3, 9, 2)
    assert decode(data) == [entry]


entries_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**63 - 1),
        st.integers(0, 1000),
        st.integers(0, 1000),
        st.integers(-1, 2**40),
    ),
    max_size=30,
).map(
    lambda rows: [
        AbortedTxn(pid, first, 3000 * i + first + gap, lso)  # increasing: gap <= 1000
        for i, (pid, first, gap, lso) in enumerate(rows)
    ]
)


@given(entries_strategy)
def test_entries_round_trip(entries: list[AbortedTxn]) -> None:
    assert decode(b"".join(e.encode() for e in entries)) == entries


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (AbortedTxn(1, 0, 5, 0).encode()[:-1], "not a whole number"),
        (b"\x01" * 68, "version 257"),
        (struct.pack(">hqqqq", 1, 1, 0, 5, 0), "version 1"),
        (AbortedTxn(1, 0, 5, 0).encode() + AbortedTxn(2, 0, 5, 0).encode(), "not after"),
        (AbortedTxn(1, 0, 9, 0).encode() + AbortedTxn(2, 0, 4, 0).encode(), "not after"),
        (struct.pack(">hqqqq", 0, 1, 6, 5, 0), "first offset after"),
        (struct.pack(">hqqqq", 0, -1, 0, 5, 0), "negative"),
        (b"garbage" * 10, "not a whole number"),
    ],
)
def test_a_damaged_file_says_what_is_wrong(data: bytes, problem: str) -> None:
    found = decode(data)
    assert isinstance(found, str) and problem in found


def test_write_file_replaces_the_file_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "00000000000000000000.txnindex")
    assert read_file(path) is None
    write_file(path, [AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 3, 8, 1)])
    write_file(path, [AbortedTxn(1, 0, 5, 0)])
    assert read_file(path) == [AbortedTxn(1, 0, 5, 0)]
    assert os.listdir(tmp_path) == ["00000000000000000000.txnindex"]  # no temp file left


def test_merged_keeps_each_marker_once_in_order() -> None:
    a, b, c = AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 3, 8, 1), AbortedTxn(3, 9, 12, 9)
    assert merged([a], [b, c], [a, b]) == [a, b, c]
    assert merged([], []) == []


# --- the in-memory index -----------------------------------------------------------------


def test_append_is_ordered_and_idempotent() -> None:
    index = TxnIndex()
    a, b = AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 3, 8, 1)
    assert index.append(a) and index.append(b)
    assert not index.append(a) and not index.append(b)  # a replay re-appends: no change
    assert index.entries == [a, b]
    with pytest.raises(AssertionError):
        index.append(AbortedTxn(3, 0, 7, 0))  # before the last one, not already there
    with pytest.raises(AssertionError):
        index.append(AbortedTxn(1, 0, 8, 0))  # the same marker, a different transaction
    with pytest.raises(AssertionError):
        index.append(AbortedTxn(1, 10, 9, 0))  # begins after its own marker
    assert index.entries == [a, b]


def test_collect_and_truncate() -> None:
    index = TxnIndex()
    entries = [AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 1, 8, 0), AbortedTxn(3, 7, 12, 6)]
    for entry in entries:
        index.append(entry)
    assert index.collect(0, 100) == entries
    assert index.collect(6, 100) == entries[1:]  # ended before 6: not needed
    assert index.collect(0, 7) == entries[:2]  # began at 7 or later: not needed
    assert index.collect(13, 100) == []
    index.persisted = index.synced = 3
    assert index.truncate(8) == 1
    assert index.entries == entries[:1] and index.persisted == index.synced == 1
    assert index.collect(0, 100) == entries[:1]


# --- one segment's file ------------------------------------------------------------------


def test_the_file_is_created_with_the_first_entry_and_written_by_flush(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _log_with(tmp_path / "t-0", handles, clock, 10)
    log.flush()
    path = tmp_path / "t-0" / "00000000000000000000.txnindex"
    assert not path.exists()
    entries = [AbortedTxn(4, 1, 3, 1), AbortedTxn(5, 2, 7, 2)]
    for entry in entries:
        log.append_aborted_txn(entry)
    assert log.needs_flush, "the entries are not durable yet"
    log.flush()
    assert not log.needs_flush
    assert read_file(str(path)) == entries
    log.append_aborted_txn(AbortedTxn(6, 8, 9, 8))
    log.flush()
    assert read_file(str(path)) == [*entries, AbortedTxn(6, 8, 9, 8)]


def test_reopen_reads_the_entries(tmp_path: Path, handles: HandleCache, clock: ManualClock) -> None:
    log = _log_with(tmp_path / "t-0", handles, clock, 10)
    entries = [AbortedTxn(4, 1, 3, 1), AbortedTxn(5, 2, 7, 2)]
    for entry in entries:
        log.append_aborted_txn(entry)
    log.close()
    again = _open(tmp_path / "t-0", handles, clock, clean_shutdown=True)
    assert again.aborted_txns(0, 10) == entries
    again.append_aborted_txn(entries[1])  # already there: the replay's re-append
    again.append(make_batch(1))
    again.append_aborted_txn(AbortedTxn(9, 9, 10, 9))
    again.close()
    third = _open(tmp_path / "t-0", handles, clock, clean_shutdown=True)
    assert third.aborted_txns(0, 11) == [*entries, AbortedTxn(9, 9, 10, 9)]


def test_truncate_cuts_the_file(tmp_path: Path, handles: HandleCache, clock: ManualClock) -> None:
    log = _log_with(tmp_path / "t-0", handles, clock, 10)
    entries = [AbortedTxn(4, 1, 3, 1), AbortedTxn(5, 2, 7, 2), AbortedTxn(6, 5, 8, 5)]
    for entry in entries:
        log.append_aborted_txn(entry)
    log.flush()
    path = Path(log.segments[0].txnindex_path)
    log.truncate_to(7)  # the marker at 7 goes, and the one at 8
    assert log.aborted_txns(0, 100) == entries[:1]
    assert read_file(str(path)) == entries[:1]
    log.truncate_to(3)
    assert log.aborted_txns(0, 100) == []
    assert not path.exists(), "a segment without aborts has no file"
    log.close()
    again = _open(tmp_path / "t-0", handles, clock, clean_shutdown=True)
    assert again.aborted_txns(0, 100) == []


@pytest.mark.parametrize(
    "damage",
    [
        b"\x00" * 20,
        bytes(i * 37 % 256 for i in range(34 * 4)),
        AbortedTxn(5, 2, 7, 2).encode() * 2,
        b"garbage",
    ],
    ids=["torn", "noise", "out-of-order", "garbage"],
)
def test_a_damaged_file_is_dropped_with_a_warning(
    tmp_path: Path,
    handles: HandleCache,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    damage: bytes,
) -> None:
    log = _log_with(tmp_path / "t-0", handles, clock, 10)
    log.append_aborted_txn(AbortedTxn(4, 1, 3, 1))
    log.close()
    path = Path(log.segments[0].txnindex_path)
    path.write_bytes(damage)
    with caplog.at_level(logging.WARNING):
        again = _open(tmp_path / "t-0", handles, clock, clean_shutdown=True)
    assert again.offline_reason is None
    assert "dropped the damaged" in caplog.text and path.name in caplog.text
    assert again.aborted_txns(0, 100) == []
    assert not path.exists()
    again.append_aborted_txn(AbortedTxn(4, 1, 3, 1))  # the broker's rebuild
    again.close()
    assert read_file(str(path)) == [AbortedTxn(4, 1, 3, 1)]


def test_an_entry_must_name_a_marker_in_the_log(
    tmp_path: Path, handles: HandleCache, clock: ManualClock
) -> None:
    log = _log_with(tmp_path / "t-0", handles, clock, 10)
    with pytest.raises(AssertionError):
        log.append_aborted_txn(AbortedTxn(4, 1, 10, 1))  # offset 10 is not written yet
    log.append_aborted_txn(AbortedTxn(4, 1, 5, 1))
    with pytest.raises(AssertionError):
        log.append_aborted_txn(AbortedTxn(4, 1, 4, 1))  # out of order, not a re-append
    assert log.aborted_txns(0, 10) == [AbortedTxn(4, 1, 5, 1)]
    log.close()
