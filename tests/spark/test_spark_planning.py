"""The offset arithmetic of planning a read, without Spark: the JSON offsets round trip,
`maxOffsetsPerTrigger` shares and `minPartitions` splits, checked as properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from weirmq.spark.planning import (
    OffsetRange,
    from_json_offsets,
    limit_rows,
    split_ranges,
    to_json_offsets,
)

partitions = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "c.d"]), st.integers(0, 20)),
    st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)),
    max_size=12,
)


@given(partitions)
def test_json_offsets_round_trip_with_string_keys(table: dict) -> None:
    offsets = {tp: start for tp, (start, _) in table.items()}
    as_json = to_json_offsets(offsets)
    assert all(isinstance(p, str) for parts in as_json.values() for p in parts)
    assert from_json_offsets(as_json) == offsets


@given(partitions, st.integers(1, 5_000))
def test_limit_rows_takes_exactly_the_limit_or_everything(table: dict, limit: int) -> None:
    start = {tp: min(a, b) for tp, (a, b) in table.items()}
    latest = {tp: max(a, b) for tp, (a, b) in table.items()}
    end = limit_rows(start, latest, limit)
    waiting = sum(latest[tp] - start[tp] for tp in latest)
    assert set(end) == set(latest)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    assert sum(end[tp] - start[tp] for tp in latest) == min(limit, waiting)


def test_limit_rows_shares_in_proportion_to_what_waits() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 5}
    assert limit_rows(start, latest, 200) == {("t", 0): 150, ("t", 1): 150, ("t", 2): 5}
    # A partition new to the stream (absent from start) counts from offset 0.
    assert limit_rows({}, {("n", 0): 10}, 4) == {("n", 0): 4}


def test_n_waiting_offsets_take_ceil_n_over_limit_batches() -> None:
    start = {("t", p): 0 for p in range(3)}
    latest = {("t", 0): 334, ("t", 1): 333, ("t", 2): 333}
    sizes = []
    while start != latest:
        end = limit_rows(start, latest, 300)
        sizes.append(sum(end[tp] - start[tp] for tp in end))
        start = end
    assert sizes == [300, 300, 300, 100]


@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1000), st.integers(0, 1000)), max_size=8),
    st.one_of(st.none(), st.integers(1, 50)),
)
def test_split_ranges_covers_each_range_exactly(raw: list, min_partitions: int | None) -> None:
    ranges = [
        OffsetRange("t", p, min(a, b), max(a, b)) for p, a, b in {r[0]: r for r in raw}.values()
    ]
    pieces = split_ranges(ranges, min_partitions)
    assert all(piece.size > 0 for piece in pieces)
    for r in ranges:
        mine = sorted(p for p in pieces if p.partition == r.partition)
        covered = [o for p in mine for o in range(p.start, p.end)]
        assert covered == list(range(r.start, r.end))
    total = sum(r.size for r in ranges)
    if min_partitions:
        assert len(pieces) >= min(min_partitions, total)


def test_split_ranges_cuts_big_ranges_more() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100)], 10)
    assert [p for p in pieces if p.partition == 1] == [OffsetRange("t", 1, 0, 100)]
    assert [p.size for p in pieces if p.partition == 0] == [100] * 9
