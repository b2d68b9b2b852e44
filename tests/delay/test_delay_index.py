"""The on-disk index of pending delayed records (SQLite): order, bounds, persistence."""

from __future__ import annotations

import gc
from pathlib import Path

from weirmq.broker.delays import DelayIndex
from weirmq.types import TopicPartition


def test_rows_come_in_due_order_ties_in_produce_order(tmp_path: Path) -> None:
    index = DelayIndex(tmp_path / "i.sqlite")
    index.add(7, [300, 100, 100])
    index.add(3, [100, 200])
    assert index.due(250, 10) == [(100, 3, 0), (100, 7, 1), (100, 7, 2), (200, 3, 1)]
    assert index.due(250, 2) == [(100, 3, 0), (100, 7, 1)]
    assert index.next_due(250) == 300
    assert index.next_due(300) is None
    index.remove([(100, 3, 0), (200, 3, 1)])
    assert index.count() == 3
    assert index.min_offset() == 7
    assert index.remove_copy(7, 0) == 1
    assert index.due(1000, 10) == [(100, 7, 1), (100, 7, 2)]


def test_adding_a_row_twice_keeps_one(tmp_path: Path) -> None:
    index = DelayIndex(tmp_path / "i.sqlite")
    index.add(1, [5, 6])
    index.add(1, [5, 6])
    assert index.count() == 2


def test_committed_rows_and_positions_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "i.sqlite"
    index = DelayIndex(path)
    index.add(4, [10])
    index.set_indexed_end(5)
    index.add_dest(TopicPartition("t", 0), 12)
    index.add_dest(TopicPartition("t", 0), 99)  # known already: kept as it was
    index.commit()
    index.add(5, [11])  # not committed: lost, the delayed log has it
    index.set_indexed_end(6)
    reopened = DelayIndex(path)
    assert reopened.due(100, 10) == [(10, 4, 0)]
    assert reopened.indexed_end() == 5
    assert reopened.dests() == [(TopicPartition("t", 0), 12)]


def test_rows_outside_the_log_are_purged(tmp_path: Path) -> None:
    index = DelayIndex(tmp_path / "i.sqlite")
    for offset in range(10):
        index.add(offset, [offset])
    assert index.purge_outside(3, 8) == 5
    assert [row[1] for row in index.due(100, 100)] == [3, 4, 5, 6, 7]


def test_a_large_number_of_pending_records_holds_no_python_objects(tmp_path: Path) -> None:
    index = DelayIndex(tmp_path / "i.sqlite")
    index.add(0, [1])
    index.commit()
    gc.collect()
    before = len(gc.get_objects())
    for offset in range(1, 201):
        index.add(offset, list(range(offset, offset + 500)))  # 100,000 records
        index.commit()
    assert index.count() == 100_001
    assert index.due(1, 5) == [(1, 0, 0), (1, 1, 0)]
    gc.collect()
    assert len(gc.get_objects()) - before < 1000
