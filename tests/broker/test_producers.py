"""Idempotent-producer state: Kafka's rules for duplicates, sequences and epochs, and the
snapshot that carries the state across a restart.

The property tests drive the state with simulated producers that send, retry and bump
their epoch the way Kafka's clients do, and compare every answer with what Kafka's broker
would give.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from weirmq.broker.producers import (
    RETAINED_BATCHES,
    SEQUENCE_MAX,
    SNAPSHOT_VERSION,
    BatchMetadata,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    PartitionProducers,
    ProducerEntry,
    SnapshotError,
    last_sequence,
)
from weirmq.errors import ErrorCode, KafkaError
from weirmq.records.batch import ATTR_CONTROL, Record, encode_batch, parse_header

PID = 1000
T0_MS = 1_700_000_000_000
Outcome = BatchMetadata | None | type[Exception]


def append(
    state: PartitionProducers,
    first_seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    offset: int,
    ts_ms: int = T0_MS,
) -> BatchMetadata:
    """Check and record one batch of `count` records at `offset`, as the leader does."""
    last_seq = last_sequence(first_seq, count - 1)
    assert state.check(pid, epoch, first_seq, last_seq) is None
    state.record(pid, epoch, first_seq, last_seq, offset, offset + count - 1, ts_ms)
    return BatchMetadata(first_seq, last_seq, offset, offset + count - 1, ts_ms)


def outcome(state: PartitionProducers, pid: int, epoch: int, first: int, last: int) -> Outcome:
    try:
        return state.check(pid, epoch, first, last)
    except KafkaError as error:
        return type(error)


# --- sequences -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first_seq", "delta", "expected"),
    [
        (0, 0, 0),
        (5, 9, 14),
        (SEQUENCE_MAX, 0, SEQUENCE_MAX),
        (SEQUENCE_MAX, 1, 0),
        (SEQUENCE_MAX - 1, 3, 1),
    ],
)
def test_last_sequence_wraps_after_int32_max(first_seq: int, delta: int, expected: int) -> None:
    assert last_sequence(first_seq, delta) == expected


def test_error_codes_are_kafkas() -> None:
    assert OutOfOrderSequenceError.code is ErrorCode.out_of_order_sequence_number
    assert OutOfOrderSequenceError.code.value == 45
    assert InvalidProducerEpochError.code is ErrorCode.invalid_producer_epoch
    assert InvalidProducerEpochError.code.value == 47
    assert issubclass(OutOfOrderSequenceError, KafkaError)
    assert issubclass(InvalidProducerEpochError, KafkaError)
    assert issubclass(SnapshotError, ValueError)


def test_batches_without_producer_id_are_not_checked_or_kept() -> None:
    state = PartitionProducers()
    assert state.check(-1, -1, -1, -1) is None
    state.record(-1, -1, -1, -1, 0, 0, T0_MS)
    state.replay_batch(-1, -1, -1, -1, 1, 1, T0_MS)
    assert len(state) == 0


@pytest.mark.parametrize("first_seq", [0, 1, 42, SEQUENCE_MAX])
@pytest.mark.parametrize("epoch", [0, 3, 32767])
def test_unknown_producer_is_accepted_with_any_sequence(first_seq: int, epoch: int) -> None:
    state = PartitionProducers()
    batch = append(state, first_seq, 2, epoch=epoch, offset=10)
    assert state.entry(PID) == ProducerEntry(epoch, (batch,))
    assert PID in state


def test_next_batch_must_continue_the_sequence() -> None:
    state = PartitionProducers()
    append(state, 0, 3, offset=0)  # sequences 0..2
    append(state, 3, 2, offset=3)  # 3..4
    for first_seq in (4, 6, 0, 2):
        with pytest.raises(OutOfOrderSequenceError) as raised:
            state.check(PID, 0, first_seq, first_seq)
        assert raised.value.code is ErrorCode.out_of_order_sequence_number
    assert state.check(PID, 0, 5, 5) is None


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    state = PartitionProducers()
    append(state, SEQUENCE_MAX - 1, 2, offset=0)  # ends at SEQUENCE_MAX
    with pytest.raises(OutOfOrderSequenceError):
        state.check(PID, 0, SEQUENCE_MAX + 1, SEQUENCE_MAX + 1)
    append(state, 0, 1, offset=2)
    assert state.check(PID, 0, 1, 1) is None


def test_a_batch_straddling_the_wrap_is_followed_by_its_wrapped_last_sequence() -> None:
    state = PartitionProducers()
    batch = append(state, SEQUENCE_MAX - 1, 4, offset=100)  # MAX-1, MAX, 0, 1
    assert (batch.first_seq, batch.last_seq) == (SEQUENCE_MAX - 1, 1)
    assert state.check(PID, 0, 2, 2) is None
    assert state.check(PID, 0, SEQUENCE_MAX - 1, 1) == batch  # a retry of it


def test_out_of_range_values_from_a_client_are_refused_not_asserted() -> None:
    state = PartitionProducers()
    with pytest.raises(InvalidProducerEpochError):
        state.check(PID, -1, 0, 0)
    with pytest.raises(InvalidProducerEpochError):
        state.check(PID, 32768, 0, 0)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(PID, 0, -1, 0)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(PID, 0, 0, SEQUENCE_MAX + 1)


# --- duplicates ----------------------------------------------------------------------------


def _five_plus_one(state: PartitionProducers) -> list[BatchMetadata]:
    """Six batches of 2 records: sequences 0..11, offsets 100, 102, ..., ts T0, T0+1, ..."""
    return [
        append(state, 2 * i, 2, offset=100 + 2 * i, ts_ms=T0_MS + i)
        for i in range(RETAINED_BATCHES + 1)
    ]


@pytest.mark.parametrize("back", range(1, RETAINED_BATCHES + 1))
def test_retry_of_one_of_the_last_five_batches_gets_its_original_offsets(back: int) -> None:
    state = PartitionProducers()
    batches = _five_plus_one(state)
    original = batches[-back]
    duplicate = state.check(PID, 0, original.first_seq, original.last_seq)
    assert duplicate == original
    assert state.entry(PID) == ProducerEntry(0, tuple(batches[1:]))


def test_retry_of_the_sixth_batch_back_is_out_of_order() -> None:
    state = PartitionProducers()
    oldest = _five_plus_one(state)[0]
    with pytest.raises(OutOfOrderSequenceError):
        state.check(PID, 0, oldest.first_seq, oldest.last_seq)


def test_a_duplicate_must_match_both_first_and_last_sequence() -> None:
    state = PartitionProducers()
    batch = append(state, 0, 3, offset=0)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(PID, 0, batch.first_seq, batch.last_seq + 1)


def test_recording_a_duplicate_or_a_refused_batch_is_a_broker_bug() -> None:
    state = PartitionProducers()
    append(state, 0, 1, offset=0)
    with pytest.raises(AssertionError, match="duplicate"):
        state.record(PID, 0, 0, 0, 1, 1, T0_MS)
    with pytest.raises(AssertionError, match="refused"):
        state.record(PID, 0, 5, 5, 1, 1, T0_MS)


def test_offsets_of_one_producer_must_increase() -> None:
    state = PartitionProducers()
    append(state, 0, 1, offset=10)
    with pytest.raises(AssertionError, match="does not follow"):
        state.record(PID, 0, 1, 1, 10, 10, T0_MS)


def test_a_batch_must_span_as_many_sequences_as_offsets() -> None:
    state = PartitionProducers()
    with pytest.raises(AssertionError, match="different number"):
        state.record(PID, 0, 0, 3, 0, 1, T0_MS)


# --- epochs --------------------------------------------------------------------------------


def test_bumped_epoch_restarts_at_sequence_zero_and_forgets_old_batches() -> None:
    state = PartitionProducers()
    old = append(state, 0, 3, offset=0)
    append(state, 3, 3, offset=3)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(PID, 1, 6, 6)  # continuing the old sequence is not enough
    assert state.check(PID, 1, 0, 2) is None  # same sequences as `old`, but a new epoch
    new = append(state, 0, 3, epoch=1, offset=6)
    assert state.entry(PID) == ProducerEntry(1, (new,))
    assert new.first_seq == old.first_seq


def test_epoch_may_jump_by_more_than_one() -> None:
    state = PartitionProducers()
    append(state, 0, 1, offset=0)
    assert state.check(PID, 9, 0, 0) is None


def test_an_older_epoch_is_fenced_even_for_a_retry() -> None:
    state = PartitionProducers()
    old = append(state, 0, 1, epoch=4, offset=0)
    append(state, 0, 1, epoch=5, offset=1)
    for first_seq in (old.first_seq, 1, 7):
        with pytest.raises(InvalidProducerEpochError) as raised:
            state.check(PID, 4, first_seq, first_seq)
        assert raised.value.code is ErrorCode.invalid_producer_epoch


def test_producers_are_independent() -> None:
    state = PartitionProducers()
    append(state, 0, 1, pid=1, offset=0)
    append(state, 50, 1, pid=2, offset=1)
    assert state.check(1, 0, 1, 1) is None
    assert state.check(2, 0, 51, 51) is None
    with pytest.raises(OutOfOrderSequenceError):
        state.check(1, 0, 51, 51)


# --- forgetting ----------------------------------------------------------------------------


def test_expire_forgets_producers_whose_last_batch_is_old_enough() -> None:
    state = PartitionProducers()
    append(state, 0, 1, pid=1, offset=0, ts_ms=1_000)
    append(state, 0, 1, pid=2, offset=1, ts_ms=1_500)
    append(state, 1, 1, pid=1, offset=2, ts_ms=2_000)  # its last batch counts, not its first

    assert state.expire(now_ms=2_499, expiration_ms=1_000) == []
    assert state.expire(now_ms=2_500, expiration_ms=1_000) == [2]  # exactly that old: gone
    assert 2 not in state
    assert 1 in state
    assert state.expire(now_ms=10_000, expiration_ms=1_000) == [1]
    assert len(state) == 0


def test_an_expired_producer_is_accepted_with_any_sequence() -> None:
    state = PartitionProducers()
    append(state, 0, 3, offset=0, ts_ms=0)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(PID, 0, 77, 77)
    state.expire(now_ms=60_000, expiration_ms=60_000)
    assert state.check(PID, 0, 77, 77) is None
    assert state.check(PID, 0, 0, 2) is None  # and a late retry is appended again


def test_expire_does_not_assume_write_order_is_timestamp_order() -> None:
    state = PartitionProducers()
    append(state, 0, 1, pid=1, offset=0, ts_ms=5_000)
    append(state, 0, 1, pid=2, offset=1, ts_ms=1_000)  # the wall clock stepped back
    assert state.expire(now_ms=5_500, expiration_ms=1_000) == [2]


def test_the_least_recently_written_producer_is_forgotten_beyond_max_producers() -> None:
    state = PartitionProducers(max_producers=2)
    assert state.max_producers == 2
    append(state, 0, 1, pid=1, offset=0)
    append(state, 0, 1, pid=2, offset=1)
    append(state, 1, 1, pid=1, offset=2)  # 1 is now the most recently written
    assert state.check(2, 0, 0, 0) == BatchMetadata(0, 0, 1, 1, T0_MS)  # checks do not count
    append(state, 0, 1, pid=3, offset=3)
    assert [pid for pid, _ in state.entries()] == [1, 3]
    assert state.check(2, 0, 0, 0) is None  # forgotten: accepted again


# --- replay --------------------------------------------------------------------------------


def _batch(
    offset: int, count: int, *, pid: int, epoch: int, seq: int, attributes: int = 0
) -> bytes:
    records = [Record(value=b"v", timestamp_ms=T0_MS + offset + i) for i in range(count)]
    return encode_batch(
        records,
        base_offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=attributes,
    )


def test_replaying_the_log_rebuilds_what_the_leader_recorded() -> None:
    leader = PartitionProducers()
    follower = PartitionProducers()
    log = [
        (0, 3, 7, 0, SEQUENCE_MAX - 1),
        (3, 1, -1, -1, -1),  # not idempotent
        (4, 2, 7, 0, 1),  # after SEQUENCE_MAX - 1, SEQUENCE_MAX, 0
        (6, 1, 8, 0, 0),
        (7, 2, 7, 1, 0),  # epoch bump
        (9, 1, 8, 0, 1),
    ]
    for offset, count, pid, epoch, seq in log:
        if pid >= 0:
            last_ms = T0_MS + offset + count - 1
            append(leader, seq, count, pid=pid, epoch=epoch, offset=offset, ts_ms=last_ms)
        follower.replay(parse_header(_batch(offset, count, pid=pid, epoch=epoch, seq=seq)))
    marker = _batch(11, 1, pid=7, epoch=2, seq=-1, attributes=ATTR_CONTROL)
    follower.replay(parse_header(marker))  # transaction markers are not producer batches
    assert follower.entries() == leader.entries()


def test_replay_applies_the_log_without_checks() -> None:
    state = PartitionProducers()
    state.replay_batch(PID, 3, 10, 10, 0, 0, T0_MS)
    state.replay_batch(PID, 3, 50, 50, 1, 1, T0_MS)  # a gap: the log is the truth
    state.replay_batch(PID, 2, 0, 0, 2, 2, T0_MS)  # an older epoch, written by a past leader
    assert state.entry(PID) == ProducerEntry(2, (BatchMetadata(0, 0, 2, 2, T0_MS),))


# --- snapshots -----------------------------------------------------------------------------


def _sample_state() -> PartitionProducers:
    state = PartitionProducers()
    _five_plus_one(state)  # PID, offsets 100..111
    append(state, SEQUENCE_MAX, 2, pid=7, epoch=32767, offset=200, ts_ms=-5)
    append(state, 0, 1, pid=2**63 - 1, offset=201)
    return state


def test_snapshot_round_trip() -> None:
    state = _sample_state()
    restored, end_offset = PartitionProducers.restore(state.snapshot(202))
    assert end_offset == 202
    assert restored.entries() == state.entries()
    assert restored.max_producers == state.max_producers


def test_snapshot_of_an_empty_state() -> None:
    restored, end_offset = PartitionProducers.restore(PartitionProducers().snapshot(0))
    assert (len(restored), end_offset) == (0, 0)


def test_snapshot_layout_is_the_documented_one() -> None:
    state = PartitionProducers()
    append(state, 4, 2, pid=9, epoch=1, offset=30, ts_ms=77)
    data = state.snapshot(40)
    covered = struct.pack(">qIqhBiiqqq", 40, 1, 9, 1, 1, 4, 5, 30, 31, 77)
    covered += struct.pack(">i", 0)  # version 2: no open transaction
    assert data == struct.pack(">hI", SNAPSHOT_VERSION, crc32c(covered)) + covered


def test_snapshot_keeps_open_transactions() -> None:
    state = PartitionProducers()
    append(state, 4, 2, pid=9, epoch=1, offset=30, ts_ms=77)
    state.begin_transaction(9, 30)
    state.begin_transaction(9, 31)  # already open: the first offset stays
    data = state.snapshot(40)
    assert data.endswith(struct.pack(">iqq", 1, 9, 30))
    restored, end = PartitionProducers.restore(data)
    assert (restored.ongoing, end) == ({9: 30}, 40)
    assert restored.first_unstable_offset() == 30
    assert restored.end_transaction(9) == 30
    assert restored.first_unstable_offset() is None
    assert restored.end_transaction(9) is None


def test_a_version_1_snapshot_is_still_read() -> None:
    covered = struct.pack(">qIqhBiiqqq", 40, 1, 9, 1, 1, 4, 5, 30, 31, 77)
    restored, end = PartitionProducers.restore(_with_crc(covered, version=1))
    assert end == 40 and restored.ongoing == {} and 9 in restored


@pytest.mark.parametrize(
    ("ongoing", "reason"),
    [
        (struct.pack(">iqq", 1, -1, 3), "bad open transaction"),
        (struct.pack(">iqq", 1, 9, 40), "bad open transaction"),
        (struct.pack(">iqqqq", 2, 9, 3, 9, 4), "bad open transaction"),
        (struct.pack(">iqq", 2, 9, 3), "do not fit"),
        (struct.pack(">iqq", 1, 9, 3) + b"\x00", "do not fit"),
        (b"\x00\x00", "truncated"),
    ],
)
def test_bad_open_transactions_are_refused(ongoing: bytes, reason: str) -> None:
    covered = struct.pack(">qIqhBiiqqq", 40, 1, 9, 1, 1, 4, 5, 30, 31, 77) + ongoing
    with pytest.raises(SnapshotError, match=reason):
        PartitionProducers.restore(_with_crc(covered))


def test_restore_keeps_the_most_recently_written_within_max_producers() -> None:
    state = _sample_state()
    restored, _ = PartitionProducers.restore(state.snapshot(202), max_producers=2)
    assert restored.entries() == state.entries()[1:]


def test_snapshot_must_cover_every_recorded_batch() -> None:
    with pytest.raises(AssertionError, match="end offset"):
        _sample_state().snapshot(201)


def test_any_flipped_bit_is_detected() -> None:
    data = _sample_state().snapshot(202)
    for position in range(len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[position] ^= 1 << bit
            with pytest.raises(SnapshotError):
                PartitionProducers.restore(bytes(damaged))


def test_any_truncation_is_detected() -> None:
    data = _sample_state().snapshot(202)
    for length in range(len(data)):
        with pytest.raises(SnapshotError):
            PartitionProducers.restore(data[:length])
    with pytest.raises(SnapshotError):
        PartitionProducers.restore(data + b"\x00")


def _with_crc(covered: bytes, version: int = SNAPSHOT_VERSION) -> bytes:
    return struct.pack(">hI", version, crc32c(covered)) + covered


def test_an_unknown_version_is_refused_even_with_a_good_crc() -> None:
    data = _sample_state().snapshot(202)
    with pytest.raises(SnapshotError, match="version"):
        PartitionProducers.restore(_with_crc(data[6:], version=SNAPSHOT_VERSION + 1))


_ONE_BATCH = struct.pack(">iiqqq", 0, 0, 5, 5, T0_MS)


@pytest.mark.parametrize(
    ("covered", "reason"),
    [
        (struct.pack(">qIqhB", 10, 1, 1, 0, 0) + _ONE_BATCH, "has 0 batches"),
        (struct.pack(">qIqhB", 10, 1, 1, 0, 6) + _ONE_BATCH * 6, "has 6 batches"),
        (struct.pack(">qIqhB", 10, 2, 1, 0, 1) + _ONE_BATCH, "cannot fit"),
        (struct.pack(">qIqhB", 10, 0xFFFFFFFF, 1, 0, 1) + _ONE_BATCH, "cannot fit"),
        (struct.pack(">qIqhB", 5, 1, 1, 0, 1) + _ONE_BATCH, "beyond the end offset"),
        (struct.pack(">qI", -1, 0), "negative end offset"),
        (struct.pack(">qIqhB", 10, 1, -2, 0, 1) + _ONE_BATCH, "invalid producer id"),
        (struct.pack(">qIqhB", 10, 1, 1, -1, 1) + _ONE_BATCH, "invalid producer id"),
        (
            struct.pack(">qIqhB", 10, 1, 1, 0, 1) + struct.pack(">iiqqq", -1, 0, 5, 5, 0),
            "out of range",
        ),
        (
            struct.pack(">qIqhB", 10, 1, 1, 0, 2) + _ONE_BATCH * 2,
            "does not follow",
        ),
        (
            (struct.pack(">qIqhB", 10, 2, 1, 0, 1) + _ONE_BATCH + struct.pack(">qhB", 1, 0, 1))
            + _ONE_BATCH,
            "listed twice",
        ),
        (struct.pack(">qIqhB", 10, 1, 1, 0, 1) + _ONE_BATCH + b"\x00", "trailing"),
    ],
)
def test_inconsistent_content_is_refused_even_with_a_good_crc(covered: bytes, reason: str) -> None:
    with pytest.raises(SnapshotError, match=reason):
        PartitionProducers.restore(_with_crc(covered, version=1))


# --- properties ----------------------------------------------------------------------------


@dataclass
class SimulatedProducer:
    """A Kafka client's view of one partition: what it sent, and what it would retry."""

    pid: int
    next_seq: int
    epoch: int = 0
    sent: list[tuple[int, BatchMetadata]] = field(default_factory=list)  # (epoch, batch)


@dataclass
class Simulation:
    state: PartitionProducers
    next_offset: int = 0
    now_ms: int = T0_MS
    producers: dict[int, SimulatedProducer] = field(default_factory=dict)

    def send(self, producer: SimulatedProducer, count: int) -> Outcome:
        first, last = producer.next_seq, last_sequence(producer.next_seq, count - 1)
        offset, sent_ms = self.next_offset, self.now_ms
        result = self.attempt(producer, producer.epoch, first, last)
        if result is None:
            batch = BatchMetadata(first, last, offset, offset + count - 1, sent_ms)
            producer.sent.append((producer.epoch, batch))
            producer.next_seq = last_sequence(last, 1)
        return result

    def retry(self, producer: SimulatedProducer, back: int) -> tuple[Outcome, Outcome]:
        """(what the state answers, what Kafka answers) for a retry `back` batches ago."""
        epoch, batch = producer.sent[-back]
        # The broker knows the epoch the producer last wrote with, not one bumped since.
        written_epoch = producer.sent[-1][0]
        current = [b for e, b in producer.sent if e == written_epoch]
        expected: Outcome
        if epoch < written_epoch:
            expected = InvalidProducerEpochError
        elif batch in current[-RETAINED_BATCHES:]:
            expected = batch
        else:
            expected = OutOfOrderSequenceError
        return self.attempt(producer, epoch, batch.first_seq, batch.last_seq), expected

    def attempt(self, producer: SimulatedProducer, epoch: int, first: int, last: int) -> Outcome:
        result = outcome(self.state, producer.pid, epoch, first, last)
        if result is None:
            count = last_sequence(last - first, 0) + 1
            self.state.record(
                producer.pid,
                epoch,
                first,
                last,
                self.next_offset,
                self.next_offset + count - 1,
                self.now_ms,
            )
            self.next_offset += count
        self.now_ms += 1
        return result


START_SEQUENCES = st.sampled_from([0, 1, SEQUENCE_MAX - 4, SEQUENCE_MAX])
# Sends far outnumber bumps, so that producers often have more than five batches to retry.
# The argument is the record count of a send, or how many batches back a retry goes.
ACTIONS = st.tuples(st.sampled_from(("send",) * 5 + ("retry",) * 2 + ("bump",)), st.integers(1, 8))
OPERATIONS = st.lists(st.tuples(st.integers(0, 2), ACTIONS), min_size=10, max_size=80)


Operation = tuple[int, tuple[str, int]]  # producer index, (action, argument)


def run(
    simulation: Simulation, starts: list[int], operations: list[Operation]
) -> list[tuple[Outcome, Outcome]]:
    """Apply the operations; (state's answer, Kafka's answer) for every send and retry."""
    answers: list[tuple[Outcome, Outcome]] = []
    for pid, (action, argument) in operations:
        producer = simulation.producers.setdefault(pid, SimulatedProducer(pid, starts[pid]))
        if action == "send":
            answers.append((simulation.send(producer, argument), None))
        elif action == "bump":
            producer.epoch += 1
            producer.next_seq = 0
        elif producer.sent:
            answers.append(simulation.retry(producer, min(argument, len(producer.sent))))
    return answers


@settings(max_examples=200, deadline=None)
@given(starts=st.lists(START_SEQUENCES, min_size=5, max_size=5), operations=OPERATIONS)
def test_producers_that_retry_and_bump_get_kafkas_answers(
    starts: list[int], operations: list[Operation]
) -> None:
    for answer, expected in run(Simulation(PartitionProducers()), starts, operations):
        assert answer == expected


def _probes(simulation: Simulation) -> list[tuple[int, int, int, int]]:
    """(pid, epoch, first, last) worth asking about: retries, next batches, gaps, unknowns."""
    probes = [(99, 0, 5, 5)]
    for producer in simulation.producers.values():
        for epoch in {producer.epoch - 1, producer.epoch, producer.epoch + 1} - {-1}:
            for first in {0, producer.next_seq, last_sequence(producer.next_seq, 1)}:
                probes.append((producer.pid, epoch, first, first))
        probes += [(producer.pid, e, b.first_seq, b.last_seq) for e, b in producer.sent]
    return probes


@settings(max_examples=200, deadline=None)
@given(
    starts=st.lists(START_SEQUENCES, min_size=5, max_size=5),
    operations=OPERATIONS,
    max_producers=st.integers(1, 6),
)
def test_a_restored_snapshot_answers_every_check_as_the_original(
    starts: list[int], operations: list[Operation], max_producers: int
) -> None:
    simulation = Simulation(PartitionProducers(max_producers))
    # With few max_producers a forgotten producer's retry is appended again: not an error.
    run(simulation, starts, operations)
    state = simulation.state
    restored, end_offset = PartitionProducers.restore(
        state.snapshot(simulation.next_offset), max_producers=max_producers
    )
    assert end_offset == simulation.next_offset
    assert restored.entries() == state.entries()
    for probe in _probes(simulation):
        assert outcome(restored, *probe) == outcome(state, *probe)
