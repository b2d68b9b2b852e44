"""SharePartition against a per-offset model, under random interleavings.

A hypothesis state machine drives one share-partition with appends to the log (some
leaving gaps, as compaction does), fetches by three members, acknowledgements (accept,
release, reject, per range or per offset, by the holder or by someone else), member
departures, clock steps with expiry, snapshots and restarts from the persisted snapshot
and deltas. A model that keeps one state per offset predicts every step; after each step:

- the engine's state of every offset equals the model's (so every offset below the log end
  is in exactly one state, and ranges split and merge without losing any);
- no offset is accepted twice, and an acknowledged or archived one is never acquired again;
- delivery counts never decrease and never exceed the limit;
- dead-letter intents come exactly for the offsets archived by a reject or the limit;
- at the end, after a restart, everything not terminal is delivered again until the
  start offset reaches the log end: nothing was lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from weirmq.queues import (
    AckType,
    DeadLetterReason,
    RecordState,
    ShareConfig,
    SharePartition,
    ShareState,
)

AVAILABLE, ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
ACKNOWLEDGED, ARCHIVED = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
MEMBERS = ("a", "b", "c")
LOCK_MS = 100
LOG_END_MAX = 60


@dataclass
class Slot:
    """The model's state of one offset."""

    state: RecordState = AVAILABLE
    count: int = 0
    member: str = ""
    deadline: int = 0


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.batches: list[tuple[int, int]] = []  # the log's record batches
        self.log_end = 0
        self.absent: set[int] = set()  # offsets without a record (gaps)
        self.model: dict[int, Slot] = {}
        self.accepted: set[int] = set()
        self.dead: set[int] = set()
        self.max_count: dict[int, int] = {}
        self.snapshot = ShareState(0)
        self.deltas: list[ShareState] = []

    @initialize(
        limit=st.integers(1, 3), window=st.integers(3, 10), backoff=st.sampled_from([0, 10])
    )
    def start(self, limit: int, window: int, backoff: int) -> None:
        self.config = ShareConfig(
            record_lock_duration_ms=LOCK_MS,
            delivery_count_limit=limit,
            max_record_locks=window,
            retry_backoff_ms=backoff,
            auto_offset_reset="earliest",
        )
        self.p = SharePartition.create(self.config, 0, 0)
        self.snapshot = self.p.snapshot()

    # -- the model ---------------------------------------------------------------------

    def slot(self, offset: int) -> Slot:
        return self.model.setdefault(offset, Slot())

    def model_expire(self) -> set[tuple[int, int, DeadLetterReason]]:
        dead = set()
        for offset, slot in self.model.items():
            if slot.state is ACQUIRED and slot.deadline <= self.now:
                dead |= self.model_back(offset, slot)
            elif slot.state is AVAILABLE and 0 < slot.deadline <= self.now:
                slot.deadline = 0
        return dead

    def model_back(self, offset: int, slot: Slot) -> set[tuple[int, int, DeadLetterReason]]:
        """A release or lock timeout of `slot`."""
        slot.member = ""
        if slot.count >= self.config.delivery_count_limit:
            slot.state, slot.deadline = ARCHIVED, 0
            return {(offset, slot.count, DeadLetterReason.DELIVERY_LIMIT)}
        slot.state = AVAILABLE
        slot.deadline = (
            self.now + self.config.retry_backoff_ms if self.config.retry_backoff_ms else 0
        )
        return set()

    def record(
        self,
        delta: ShareState | None,
        dead_letters: tuple[object, ...],
        expected: set[tuple[int, int, DeadLetterReason]],
    ) -> None:
        got = {(d.offset, d.delivery_count, d.reason) for d in dead_letters}  # type: ignore[attr-defined]
        assert got == expected
        assert len(got) == len(dead_letters)
        offsets = {offset for offset, _, _ in got}
        assert not offsets & self.dead, "dead-lettered twice"
        self.dead |= offsets
        if delta is not None:
            self.deltas.append(delta)

    # -- rules -------------------------------------------------------------------------

    @rule(size=st.integers(1, 4), skip=st.sampled_from([0, 0, 0, 2]))
    def append(self, size: int, skip: int) -> None:
        first = self.log_end + skip
        if first + size > LOG_END_MAX:
            return
        self.absent |= set(range(self.log_end, first))
        self.batches.append((first, first + size - 1))
        self.log_end = first + size

    @rule(
        member=st.sampled_from(MEMBERS),
        max_records=st.integers(1, 6),
        reads=st.integers(1, 4),
    )
    def fetch(self, member: str, max_records: int, reads: int) -> None:
        expected = self.model_expire()
        fetch_offset = self.p.next_fetch_offset(self.now)
        if fetch_offset is None:
            fetched: list[tuple[int, int]] = []
        else:
            fetched = [b for b in self.batches if b[1] >= fetch_offset][:reads]
        result = self.p.acquire(member, fetched, self.now, max_records)
        assert result.count <= max_records
        got = [o for r in result.ranges for o in range(r.first_offset, r.last_offset + 1)]
        counts = {
            o: r.delivery_count
            for r in result.ranges
            for o in range(r.first_offset, r.last_offset + 1)
        }
        in_fetched = {o for first, last in fetched for o in range(first, last + 1)}
        for offset in got:
            slot = self.slot(offset)
            assert offset in in_fetched and offset not in self.absent
            assert offset not in self.accepted and offset not in self.dead, "acquired again"
            assert slot.state is AVAILABLE and slot.deadline <= self.now
            assert counts[offset] == slot.count + 1 <= self.config.delivery_count_limit
            slot.state, slot.count, slot.member = ACQUIRED, slot.count + 1, member
            slot.deadline = self.now + LOCK_MS
        # Records at the limit among those walked over are archived, not delivered.
        walked_to = max(got, default=-1)
        for dead in result.dead_letters:
            slot = self.model[dead.offset]
            assert slot.state is AVAILABLE and slot.count >= self.config.delivery_count_limit
            assert dead.offset in in_fetched
            slot.state = ARCHIVED
            expected.add((dead.offset, slot.count, DeadLetterReason.DELIVERY_LIMIT))
        if result.count < max_records:  # nothing acquirable in the batches was skipped
            for offset in in_fetched:
                slot = self.model.get(offset)
                if slot and offset >= self.p.start_offset and slot.state is AVAILABLE:
                    assert slot.deadline > self.now, (offset, walked_to)
        self.record(result.delta, result.dead_letters, expected)

    @rule(
        member=st.sampled_from(MEMBERS),
        holder=st.sampled_from(MEMBERS),
        data=st.data(),
    )
    def acknowledge(self, member: str, holder: str, data: st.DataObject) -> None:
        expected = self.model_expire()
        held = sorted(
            o for o, s in self.model.items() if s.state is ACQUIRED and s.member == holder
        )
        if held and data.draw(st.booleans()):
            first = data.draw(st.sampled_from(held))
            last = data.draw(st.sampled_from([o for o in held if o >= first]))
        else:
            first = data.draw(st.integers(0, LOG_END_MAX))
            last = first + data.draw(st.integers(0, 3))
        kinds = st.sampled_from([AckType.ACCEPT, AckType.RELEASE, AckType.REJECT])
        if data.draw(st.booleans()):
            types: list[AckType] = [data.draw(kinds)]
        else:
            types = data.draw(st.lists(kinds, min_size=last - first + 1, max_size=last - first + 1))
        offsets = range(first, last + 1)
        ok = all(
            o in self.model and self.model[o].state is ACQUIRED and self.model[o].member == member
            for o in offsets
        )
        result = self.p.acknowledge(member, [(first, last, types)], self.now)
        assert (result.errors == ()) == ok, result.errors
        if ok:
            for i, offset in enumerate(offsets):
                kind = types[0] if len(types) == 1 else types[i]
                slot = self.model[offset]
                if kind is AckType.ACCEPT:
                    assert offset not in self.accepted, "accepted twice"
                    self.accepted.add(offset)
                    slot.state, slot.member, slot.deadline = ACKNOWLEDGED, "", 0
                elif kind is AckType.REJECT:
                    slot.state, slot.member, slot.deadline = ARCHIVED, "", 0
                    expected.add((offset, slot.count, DeadLetterReason.REJECTED))
                else:
                    expected |= self.model_back(offset, slot)
        self.record(result.delta, result.dead_letters, expected)

    @rule(member=st.sampled_from(MEMBERS))
    def release_member(self, member: str) -> None:
        expected = self.model_expire()
        for offset, slot in self.model.items():
            if slot.state is ACQUIRED and slot.member == member:
                expected |= self.model_back(offset, slot)
        outcome = self.p.release_member(member, self.now)
        self.record(outcome.delta, outcome.dead_letters, expected)

    @rule(step=st.sampled_from([0, 1, 10, 50, LOCK_MS, 2 * LOCK_MS]))
    def tick(self, step: int) -> None:
        self.now += step
        deadline = self.p.next_deadline()
        assert deadline is None or deadline > self.now - step  # not missed before this tick
        expected = self.model_expire()
        outcome = self.p.expire(self.now)
        self.record(outcome.delta, outcome.dead_letters, expected)

    @rule()
    def compact(self) -> None:
        self.snapshot, self.deltas = self.p.snapshot(), []

    @rule()
    def restart(self) -> None:
        self.p = SharePartition.restore(self.config, self.snapshot, self.deltas)
        for slot in self.model.values():
            if slot.state is ACQUIRED:
                slot.state, slot.member = AVAILABLE, ""
            if slot.state is AVAILABLE:
                slot.deadline = 0

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def engine_matches_the_model(self) -> None:
        if not hasattr(self, "p"):
            return
        p = self.p
        for offset in range(0, max(self.log_end, p.end_offset)):
            view = p.state_of(offset)
            slot = self.model.get(offset, Slot())
            if offset in self.absent:
                assert view is None or (
                    view.state in (ARCHIVED, AVAILABLE) and view.delivery_count == 0
                )
                continue
            if view is None:  # below the start: done
                assert slot.state in (ACKNOWLEDGED, ARCHIVED), (offset, slot)
                continue
            assert (view.state, view.delivery_count, view.member_id, view.deadline_ms) == (
                slot.state,
                slot.count,
                slot.member,
                slot.deadline,
            ), (offset, view, slot)
            assert (
                self.max_count.get(offset, 0)
                <= view.delivery_count
                <= self.config.delivery_count_limit
            )
            self.max_count[offset] = view.delivery_count
        if p.start_offset < p.end_offset:
            assert not p.ranges()[0].state.terminal
        assert self.dead == {o for o, s in self.model.items() if s.state is ARCHIVED}, (
            "dead letters exactly for archived records"
        )

    def teardown(self) -> None:
        if not hasattr(self, "p"):
            return
        self.restart()
        p = self.p
        for _ in range(4 * LOG_END_MAX):
            self.now += LOCK_MS
            p.expire(self.now)
            fetch_offset = p.next_fetch_offset(self.now)
            if fetch_offset is None or p.start_offset >= self.log_end:
                break
            fetched = [b for b in self.batches if b[1] >= fetch_offset]
            result = p.acquire("z", fetched, self.now, LOG_END_MAX)
            p.acknowledge(
                "z",
                [(r.first_offset, r.last_offset, AckType.ACCEPT) for r in result.ranges],
                self.now,
            )
            for r in result.ranges:
                for offset in range(r.first_offset, r.last_offset + 1):
                    assert offset not in self.accepted and offset not in self.dead
        assert p.start_offset >= self.log_end, (p.start_offset, self.log_end, p.ranges())


SharePartitionMachine.TestCase.settings = settings(
    max_examples=120, stateful_step_count=40, deadline=None
)
test_share_partition_machine = SharePartitionMachine.TestCase
