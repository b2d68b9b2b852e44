"""SharePartition, case by case: the cases of Kafka's SharePartitionTest that apply to a
sans-I/O engine (acquire, accept, release, reject, lock timeout, delivery limit, member
release, start offset, the record-lock window, batches split into per-offset state and
merged back), plus our own (retry backoff, dead letters, persistence)."""

from __future__ import annotations

import json

import pytest

from weirmq.errors import ErrorCode
from weirmq.queues import (
    TRANSITIONS,
    AckType,
    AcquiredRange,
    DeadLetter,
    DeadLetterReason,
    Event,
    InFlightRange,
    InvalidRecordStateError,
    InvalidShareConfigError,
    InvalidShareStateError,
    PersistedBatch,
    RecordState,
    ShareConfig,
    SharePartition,
    ShareState,
    next_state,
)

AVAILABLE, ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
ACKNOWLEDGED, ARCHIVED = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
ACCEPT, RELEASE, REJECT, GAP = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP
LOCK_MS = 30_000
CONFIG = ShareConfig(retry_backoff_ms=0)


def fresh(config: ShareConfig = CONFIG, start: int = 0) -> SharePartition:
    return SharePartition(config, start)


def states(p: SharePartition) -> list[tuple[int, int, RecordState, int]]:
    return [(r.first_offset, r.last_offset, r.state, r.delivery_count) for r in p.ranges()]


# -- the table and the config ---------------------------------------------------------


def test_the_table_allows_only_kafka_s_transitions() -> None:
    assert next_state(AVAILABLE, Event.ACQUIRE, at_limit=False) is ACQUIRED
    assert next_state(ACQUIRED, Event.ACCEPT, at_limit=False) is ACKNOWLEDGED
    assert next_state(ACQUIRED, Event.RELEASE, at_limit=False) is AVAILABLE
    assert next_state(ACQUIRED, Event.RELEASE, at_limit=True) is ARCHIVED
    assert next_state(ACQUIRED, Event.LOCK_TIMEOUT, at_limit=True) is ARCHIVED
    assert next_state(ACQUIRED, Event.REJECT, at_limit=False) is ARCHIVED
    for state in (ACKNOWLEDGED, ARCHIVED):  # terminal
        assert not [key for key in TRANSITIONS if key[0] is state]


@pytest.mark.parametrize(
    ("state", "event"),
    [(AVAILABLE, Event.ACCEPT), (ACKNOWLEDGED, Event.RELEASE), (ARCHIVED, Event.ACQUIRE)],
)
def test_an_illegal_event_names_the_state_it_arrived_in(state: RecordState, event: Event) -> None:
    with pytest.raises(InvalidRecordStateError, match=state.name) as caught:
        next_state(state, event, at_limit=False)
    assert caught.value.code is ErrorCode.invalid_record_state


def test_config_defaults_are_kafka_s() -> None:
    config = ShareConfig()
    assert config.record_lock_duration_ms == 30_000
    assert config.delivery_count_limit == 5
    assert config.max_record_locks == 2_000
    assert config.auto_offset_reset == "latest"


@pytest.mark.parametrize(
    "bad",
    [
        {"record_lock_duration_ms": 0},
        {"delivery_count_limit": 0},
        {"max_record_locks": 10_001},
        {"retry_backoff_ms": -1},
        {"auto_offset_reset": "by_duration"},
        {"delivery_count_limit": True},
    ],
)
def test_config_out_of_bounds_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidShareConfigError) as caught:
        ShareConfig(**bad)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.invalid_config


@pytest.mark.parametrize(("reset", "start"), [("latest", 90), ("earliest", 10)])
def test_auto_offset_reset_picks_the_start(reset: str, start: int) -> None:
    config = ShareConfig(auto_offset_reset=reset)  # type: ignore[arg-type]
    p = SharePartition.create(config, log_start_offset=10, log_end_offset=90)
    assert (p.start_offset, p.end_offset, p.next_fetch_offset(0)) == (start, start, start)
    assert p.snapshot() == ShareState(start, ())


# -- acquiring ------------------------------------------------------------------------


def test_acquire_fresh_batches() -> None:
    p = fresh()
    result = p.acquire("m1", [(0, 4), (5, 9)], now_ms=100, max_records=500)
    assert result.ranges == (AcquiredRange(0, 9, 1),)
    assert states(p) == [(0, 9, ACQUIRED, 1)]
    assert p.ranges()[0].member_id == "m1"
    assert p.next_deadline() == 100 + LOCK_MS
    assert p.next_fetch_offset(100) == 10
    # Acquisition persists the delivery (as AVAILABLE: locks do not survive a restart).
    assert result.delta == ShareState(0, (PersistedBatch(0, 9, AVAILABLE, 1),))


def test_acquire_stops_at_max_records_splitting_a_batch() -> None:
    p = fresh()
    assert p.acquire("m1", [(0, 9)], 0, max_records=3).ranges == (AcquiredRange(0, 2, 1),)
    assert p.next_fetch_offset(0) == 3
    # The broker reads again from 3: the batch holding it starts at 0.
    assert p.acquire("m2", [(0, 9)], 0, max_records=3).ranges == (AcquiredRange(3, 5, 1),)
    assert p.state_of(4) == InFlightRange(4, 4, ACQUIRED, 1, "m2", LOCK_MS)


def test_acquire_skips_what_is_not_available() -> None:
    p = fresh()
    p.acquire("m1", [(0, 9)], 0, 10)
    p.acknowledge("m1", [(3, 4, RELEASE)], 0)
    result = p.acquire("m2", [(0, 9), (10, 14)], 0, 10)
    assert result.ranges == (AcquiredRange(3, 4, 2), AcquiredRange(10, 14, 1))


def test_acquire_ignores_offsets_below_the_start() -> None:
    p = fresh(start=5)
    assert p.acquire("m1", [(0, 9)], 0, 100).ranges == (AcquiredRange(5, 9, 1),)


def test_gaps_between_batches_are_archived_without_dead_letters() -> None:
    p = fresh(start=0)
    result = p.acquire("m1", [(2, 4), (8, 9)], 0, 100)
    assert result.ranges == (AcquiredRange(2, 4, 1), AcquiredRange(8, 9, 1))
    assert result.dead_letters == ()
    assert p.start_offset == 2  # 0..1 held no record
    assert states(p) == [(2, 4, ACQUIRED, 1), (5, 7, ARCHIVED, 0), (8, 9, ACQUIRED, 1)]
    assert result.delta is not None and result.delta.start_offset == 2


def test_the_window_bounds_fresh_acquisitions_not_redeliveries() -> None:
    p = fresh(ShareConfig(max_record_locks=5, retry_backoff_ms=0))
    assert p.acquire("m1", [(0, 9)], 0, 100).ranges == (AcquiredRange(0, 4, 1),)
    assert p.next_fetch_offset(0) is None  # full, and nothing in it available
    assert p.acquire("m1", [(5, 9)], 0, 100).ranges == ()
    p.acknowledge("m1", [(1, 1, RELEASE)], 0)
    assert p.next_fetch_offset(0) == 1
    assert p.acquire("m2", [(0, 9)], 0, 100).ranges == (AcquiredRange(1, 1, 2),)
    # Accepting the head moves the start, which opens the window again.
    p.acknowledge("m1", [(0, 0, ACCEPT)], 0)
    assert (p.start_offset, p.next_fetch_offset(0)) == (1, 5)
    assert p.acquire("m1", [(5, 9)], 0, 100).ranges == (AcquiredRange(5, 5, 1),)


# -- acknowledging --------------------------------------------------------------------


def test_accept_moves_the_start_and_drops_the_state() -> None:
    p = fresh()
    p.acquire("m1", [(0, 9)], 0, 10)
    result = p.acknowledge("m1", [(0, 9, ACCEPT)], 5)
    assert result.errors == ()
    assert (p.start_offset, p.ranges()) == (10, ())
    assert result.delta == ShareState(10, ())
    assert p.next_deadline() is None


def test_accept_in_the_middle_keeps_the_start() -> None:
    p = fresh()
    p.acquire("m1", [(0, 9)], 0, 10)
    result = p.acknowledge("m1", [(3, 5, ACCEPT)], 0)
    assert p.start_offset == 0
    assert states(p) == [(0, 2, ACQUIRED, 1), (3, 5, ACKNOWLEDGED, 1), (6, 9, ACQUIRED, 1)]
    assert result.delta == ShareState(0, (PersistedBatch(3, 5, ACKNOWLEDGED, 1),))


def test_per_offset_types_split_a_batch_and_it_merges_back() -> None:
    p = fresh()
    p.acquire("m1", [(0, 5)], 0, 10)
    types = [ACCEPT, RELEASE, RELEASE, REJECT, ACCEPT, RELEASE]
    result = p.acknowledge("m1", [(0, 5, types)], 0)
    assert result.errors == ()
    assert result.dead_letters == (DeadLetter(3, 1, DeadLetterReason.REJECTED),)
    assert p.start_offset == 1
    assert states(p) == [
        (1, 2, AVAILABLE, 1),
        (3, 3, ARCHIVED, 1),
        (4, 4, ACKNOWLEDGED, 1),
        (5, 5, AVAILABLE, 1),
    ]
    p.acquire("m2", [(0, 5)], 0, 10)
    p.acknowledge("m2", [(1, 2, ACCEPT), (5, 5, ACCEPT)], 0)
    assert (p.start_offset, p.ranges()) == (6, ())


def test_state_stays_one_range_per_distinct_state_not_per_offset() -> None:
    p = fresh(ShareConfig(max_record_locks=10_000, retry_backoff_ms=0))
    batches = [(first, first + 99) for first in range(0, 5_000, 100)]
    p.acquire("m1", batches, 0, 5_000)
    assert len(p.ranges()) == 1
    p.acknowledge("m1", [(o, o, ACCEPT) for o in range(1, 5_000, 2)], 0)
    assert len(p.ranges()) == 5_000  # alternating: one range per offset
    p.acknowledge("m1", [(o, o, ACCEPT) for o in range(2, 5_000, 2)], 0)
    assert len(p.ranges()) == 2  # merged back: 0 still acquired, 1..4999 acknowledged
    p.acknowledge("m1", [(0, 0, ACCEPT)], 0)
    assert (p.start_offset, p.ranges()) == (5_000, ())


def test_release_makes_records_available_with_their_delivery_count() -> None:
    p = fresh()
    p.acquire("m1", [(0, 4)], 0, 10)
    result = p.acknowledge("m1", [(0, 4, RELEASE)], 10)
    assert result.dead_letters == ()
    assert states(p) == [(0, 4, AVAILABLE, 1)]
    assert p.acquire("m2", [(0, 4)], 20, 10).ranges == (AcquiredRange(0, 4, 2),)


def test_reject_archives_with_a_dead_letter() -> None:
    p = fresh()
    p.acquire("m1", [(0, 2)], 0, 10)
    result = p.acknowledge("m1", [(0, 1, REJECT)], 0)
    assert result.dead_letters == (
        DeadLetter(0, 1, DeadLetterReason.REJECTED),
        DeadLetter(1, 1, DeadLetterReason.REJECTED),
    )
    assert p.start_offset == 2
    assert p.acquire("m2", [(0, 2)], 0, 10).ranges == ()  # never again


def test_gap_acknowledgement_archives_without_a_dead_letter() -> None:
    p = fresh()
    p.acquire("m1", [(0, 2)], 0, 10)
    result = p.acknowledge("m1", [(0, 2, [ACCEPT, GAP, ACCEPT])], 0)
    assert (result.errors, result.dead_letters, p.start_offset) == ((), (), 3)


def test_acknowledging_what_the_member_does_not_hold_fails_per_batch() -> None:
    p = fresh()
    p.acquire("m1", [(0, 4)], 0, 10)
    p.acquire("m2", [(5, 9)], 0, 10)
    result = p.acknowledge(
        "m1",
        [
            (0, 1, ACCEPT),  # held: applies
            (4, 5, ACCEPT),  # 5 is m2's: refused whole
            (12, 12, ACCEPT),  # never acquired
            (0, 0, ACCEPT),  # below the start now
            (2, 3, [ACCEPT]),  # one type for the batch: applies
            (4, 4, [ACCEPT, ACCEPT]),  # wrong count of types
            (4, 4, 9),  # unknown type
        ],
        0,
    )
    codes = [(e.first_offset, e.last_offset, e.code) for e in result.errors]
    assert codes == [
        (4, 5, ErrorCode.invalid_record_state),
        (12, 12, ErrorCode.invalid_record_state),
        (0, 0, ErrorCode.invalid_record_state),
        (4, 4, ErrorCode.invalid_request),
        (4, 4, ErrorCode.invalid_request),
    ]
    assert "another member" in result.errors[0].message
    assert "AVAILABLE" in result.errors[1].message
    assert p.start_offset == 4
    assert p.state_of(4) == InFlightRange(4, 4, ACQUIRED, 1, "m1", LOCK_MS)


def test_acknowledging_twice_fails_the_second_time_naming_the_state() -> None:
    p = fresh()
    p.acquire("m1", [(0, 4)], 0, 10)
    p.acknowledge("m1", [(1, 1, ACCEPT)], 0)
    (error,) = p.acknowledge("m1", [(1, 1, ACCEPT)], 0).errors
    assert error.code is ErrorCode.invalid_record_state and "ACKNOWLEDGED" in error.message


# -- time: locks, backoff, the delivery limit -----------------------------------------


def test_lock_timeout_makes_records_available_again() -> None:
    p = fresh()
    p.acquire("m1", [(0, 4)], 0, 10)
    assert p.expire(LOCK_MS - 1).delta is None
    outcome = p.expire(LOCK_MS)
    assert (outcome.delta, outcome.dead_letters) == (
        ShareState(0, (PersistedBatch(0, 4, AVAILABLE, 1),)),
        (),
    )
    assert states(p) == [(0, 4, AVAILABLE, 1)]
    assert p.next_deadline() is None


def test_an_acknowledgement_after_the_lock_deadline_fails_even_before_expire() -> None:
    p = fresh()
    p.acquire("m1", [(0, 4)], 0, 10)
    result = p.acknowledge("m1", [(0, 4, ACCEPT)], LOCK_MS)
    assert [e.code for e in result.errors] == [ErrorCode.invalid_record_state]
    assert states(p) == [(0, 4, AVAILABLE, 1)]


def test_retry_backoff_holds_released_records_back() -> None:
    p = fresh(ShareConfig(retry_backoff_ms=1_000))
    p.acquire("m1", [(0, 4)], 0, 10)
    p.acknowledge("m1", [(0, 4, RELEASE)], 100)
    assert p.next_fetch_offset(100) == 5
    assert p.next_deadline() == 1_100
    assert p.acquire("m2", [(0, 4)], 1_099, 10).ranges == ()
    assert p.acquire("m2", [(0, 4)], 1_100, 10).ranges == (AcquiredRange(0, 4, 2),)


def test_backoff_ends_by_expire_and_ranges_merge() -> None:
    p = fresh(ShareConfig(retry_backoff_ms=1_000))
    p.acquire("m1", [(0, 1)], 0, 10)
    p.acknowledge("m1", [(0, 0, RELEASE)], 0)
    p.acknowledge("m1", [(1, 1, RELEASE)], 500)
    assert len(p.ranges()) == 2
    assert p.expire(1_500).delta is None  # nothing persistent changed
    assert p.ranges() == (InFlightRange(0, 1, AVAILABLE, 1),)


def test_delivery_limit_archives_with_a_dead_letter() -> None:
    p = fresh(ShareConfig(delivery_count_limit=3, retry_backoff_ms=0))
    now = 0
    for delivery in (1, 2):
        assert p.acquire("m1", [(0, 0)], now, 1).ranges == (AcquiredRange(0, 0, delivery),)
        now += LOCK_MS
        assert p.expire(now).dead_letters == ()
    assert p.acquire("m1", [(0, 0)], now, 1).ranges == (AcquiredRange(0, 0, 3),)
    result = p.acknowledge("m1", [(0, 0, RELEASE)], now)
    assert result.dead_letters == (DeadLetter(0, 3, DeadLetterReason.DELIVERY_LIMIT),)
    assert (p.start_offset, p.ranges()) == (1, ())


def test_delivery_limit_by_lock_timeout() -> None:
    p = fresh(ShareConfig(delivery_count_limit=2, retry_backoff_ms=0))
    p.acquire("m1", [(0, 1)], 0, 10)
    p.expire(LOCK_MS)
    p.acquire("m1", [(0, 1)], LOCK_MS, 10)
    outcome = p.expire(2 * LOCK_MS)
    assert [d.offset for d in outcome.dead_letters] == [0, 1]
    assert {d.reason for d in outcome.dead_letters} == {DeadLetterReason.DELIVERY_LIMIT}
    assert outcome.delta == ShareState(2, ())


# -- members --------------------------------------------------------------------------


def test_release_member_releases_only_its_records() -> None:
    p = fresh()
    p.acquire("m1", [(0, 4)], 0, 3)
    p.acquire("m2", [(0, 4)], 0, 2)
    outcome = p.release_member("m1", 10)
    assert outcome.dead_letters == ()
    assert states(p) == [(0, 2, AVAILABLE, 1), (3, 4, ACQUIRED, 1)]
    assert p.release_member("nobody", 10).delta is None


def test_release_member_at_the_limit_dead_letters() -> None:
    p = fresh(ShareConfig(delivery_count_limit=1, retry_backoff_ms=0))
    p.acquire("m1", [(0, 0)], 0, 1)
    outcome = p.release_member("m1", 0)
    assert outcome.dead_letters == (DeadLetter(0, 1, DeadLetterReason.DELIVERY_LIMIT),)


# -- persistence ----------------------------------------------------------------------


def test_restore_makes_acquired_records_available_and_keeps_terminal_ones() -> None:
    p = fresh()
    snapshot = p.snapshot()
    deltas = [p.acquire("m1", [(0, 9)], 0, 10).delta]
    deltas.append(p.acknowledge("m1", [(0, 2, ACCEPT), (4, 4, REJECT), (5, 5, RELEASE)], 0).delta)
    restored = SharePartition.restore(CONFIG, snapshot, [d for d in deltas if d is not None])
    assert restored.start_offset == 3
    assert states(restored) == [(3, 3, AVAILABLE, 1), (4, 4, ARCHIVED, 1), (5, 9, AVAILABLE, 1)]
    assert restored.snapshot() == SharePartition.restore(CONFIG, p.snapshot()).snapshot()
    ranges = restored.acquire("m2", [(0, 9)], 0, 10).ranges
    assert ranges == (AcquiredRange(3, 3, 2), AcquiredRange(5, 9, 2))


def test_a_record_at_the_limit_after_restore_is_archived_not_delivered() -> None:
    config = ShareConfig(delivery_count_limit=2, retry_backoff_ms=0)
    snapshot = ShareState(
        0, (PersistedBatch(0, 1, AVAILABLE, 2), PersistedBatch(2, 2, AVAILABLE, 1))
    )
    p = SharePartition.restore(config, snapshot)
    result = p.acquire("m1", [(0, 2)], 0, 10)
    assert result.ranges == (AcquiredRange(2, 2, 2),)
    assert [(d.offset, d.reason) for d in result.dead_letters] == [
        (0, DeadLetterReason.DELIVERY_LIMIT),
        (1, DeadLetterReason.DELIVERY_LIMIT),
    ]
    assert p.start_offset == 2


def test_replay_moves_the_start_and_fills_holes_as_available() -> None:
    snapshot = ShareState(0, (PersistedBatch(0, 3, AVAILABLE, 1),))
    deltas = [ShareState(2, ()), ShareState(2, (PersistedBatch(6, 6, ACKNOWLEDGED, 1),))]
    p = SharePartition.restore(CONFIG, snapshot, deltas)
    assert states(p) == [(2, 3, AVAILABLE, 1), (4, 5, AVAILABLE, 0), (6, 6, ACKNOWLEDGED, 1)]


def test_states_round_trip_through_json() -> None:
    state = ShareState(7, (PersistedBatch(7, 9, AVAILABLE, 2), PersistedBatch(10, 10, ARCHIVED, 5)))
    text = json.dumps(state.to_document())
    assert text == '{"start_offset": 7, "batches": [[7, 9, 0, 2], [10, 10, 4, 5]]}'
    assert ShareState.from_document(json.loads(text)) == state


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"start_offset": -1, "batches": []},
        {"start_offset": 0, "batches": [[0, 1, 1, 1]]},  # ACQUIRED is never persisted
        {"start_offset": 0, "batches": [[2, 1, 0, 1]]},
        {"start_offset": 0, "batches": [[0, 1, 0]]},
        {"start_offset": True, "batches": []},
    ],
)
def test_bad_documents_are_refused(document: dict[str, object]) -> None:
    with pytest.raises(InvalidShareStateError):
        ShareState.from_document(document)


def test_acquire_offsets_takes_exactly_those_and_leaves_the_others_available() -> None:
    p = fresh(ShareConfig(retry_backoff_ms=0))
    result = p.acquire_offsets("m", [2, 5, 6], now_ms=0)
    assert [(r.first_offset, r.last_offset) for r in result.ranges] == [(2, 2), (5, 6)]
    # the offsets skipped are available (not archived as gaps), delivered next in order
    assert p.next_fetch_offset(0) == 0
    again = p.acquire_offsets("n", [0, 1, 2, 3, 4], now_ms=0)
    assert [(r.first_offset, r.last_offset) for r in again.ranges] == [(0, 1), (3, 4)]


def test_an_acquire_may_lock_for_its_own_duration() -> None:
    p = fresh(ShareConfig(retry_backoff_ms=0, record_lock_duration_ms=LOCK_MS))
    p.acquire("m", [(0, 1)], now_ms=1_000, max_records=1, lock_ms=5_000)
    p.acquire_offsets("m", [1], now_ms=1_000, lock_ms=0)
    assert p.state_of(0) == InFlightRange(0, 0, ACQUIRED, 1, "m", 6_000)
    # a lock of 0 ends at the next step: offset 1 is available again, its delivery counted
    p.expire(1_000)
    assert p.state_of(1) == InFlightRange(1, 1, AVAILABLE, 1)
    p.expire(6_000)
    assert p.state_of(0) == InFlightRange(0, 0, AVAILABLE, 1)


def test_change_lock_moves_the_deadline_of_what_the_member_holds() -> None:
    p = fresh(ShareConfig(retry_backoff_ms=0, record_lock_duration_ms=LOCK_MS))
    p.acquire("m", [(0, 2)], now_ms=0, max_records=3)
    missed, outcome = p.change_lock("m", [1, 7], 60_000, now_ms=10)
    assert missed == [7]  # never acquired
    assert outcome.delta is None  # deadlines are not persisted
    assert p.state_of(1) == InFlightRange(1, 1, ACQUIRED, 1, "m", 60_010)
    assert p.state_of(0) == InFlightRange(0, 0, ACQUIRED, 1, "m", LOCK_MS)
    assert p.change_lock("other", [0], 5, now_ms=10)[0] == [0]  # held by another member
    p.expire(LOCK_MS)
    assert p.state_of(0).state is AVAILABLE and p.state_of(1).state is ACQUIRED


def test_change_lock_to_zero_times_the_lock_out_now_with_the_delivery_limit() -> None:
    p = fresh(ShareConfig(retry_backoff_ms=0, delivery_count_limit=1))
    p.acquire("m", [(0, 1)], now_ms=0, max_records=2)
    missed, outcome = p.change_lock("m", [0], 0, now_ms=5)
    assert missed == []
    # at the limit, a lock timeout archives the record with a dead letter
    assert outcome.dead_letters == (DeadLetter(0, 1, DeadLetterReason.DELIVERY_LIMIT),)
    assert p.state_of(1).state is ACQUIRED
