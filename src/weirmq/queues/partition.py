"""One share-partition: the delivery state of one topic-partition for one share group.

A share group (KIP-932) consumes a partition like a queue: any member may be handed any
record, each record is locked to the member it was delivered to until that member accepts,
releases or rejects it or the lock times out, and records released or timed out are
delivered again, up to a delivery limit. The log is never modified; this state sits beside
it. The broker reads the log, and asks this class which of the records read to deliver.

Offsets
-------
    start_offset                                   end_offset
         │◀───────────── in-flight window ──────────────▶│
    done │ ACQ(m1) │ ACK │ AVAIL(backoff) │ ARCH │ ACQ(m2) │ fresh (never acquired) ...

Below `start_offset` every record is acknowledged or archived and has no state; the start
offset moves past leading terminal records at the end of every step. From `end_offset` on,
records have never been acquired: they are AVAILABLE with no delivery yet. In between,
the window is a sorted list of `InFlightRange`s that cover it without gaps or overlaps,
each a range of offsets with one state, delivery count, holder and deadline. Kafka keeps
per-batch state and splits a batch into per-offset state only when an acknowledgement
needs it; ranges do the same more simply: an event on part of a range splits it at the
part's edges, and neighbours with identical state merge again at the end of the step. So
memory grows with the number of distinct ranges, never with the number of offsets, and the
window is bounded: fresh records are acquired only while `end_offset - start_offset` is
below `max_record_locks` (Kafka's SharePartition.canAcquireRecords bounds the same window,
though it checks before acquiring whole batches and may overshoot; we never do).

Acquiring
---------
`next_fetch_offset(now_ms)` says where the broker should read: the lowest AVAILABLE offset
whose retry backoff has passed, else `end_offset` if the window has room, else nothing.
The broker reads whole batches from there and passes their offset ranges to `acquire`,
which acquires, in offset order and up to `max_records`, the AVAILABLE offsets among them
and fresh ones beyond the window, splitting a batch where the limit falls. Offsets beyond
the window that lie between the batches read (or before the first) hold no record (the
log was compacted, or they are transaction markers): they are archived as one range, with
no delivery and no dead letter, as Kafka's clients acknowledge gaps.

Steps and outputs
-----------------
Every step takes the time, `now_ms`, and returns what the caller must do: the delta to
persist (`persistence.ShareState`, None when nothing persistent changed) and the
dead-letter intents of records archived by a reject or by the delivery limit. Every step
first expires the locks due at `now_ms` (as `expire` does), so an acknowledgement that
arrives after its lock's deadline fails the same way however late the timer fired; the
expiry's outputs are part of that step's outputs. `next_deadline()` says when `expire`
is next useful: the earliest lock deadline or end of a retry backoff.

The state machine of one record is the table in states.py.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import groupby, pairwise

from ..errors import ErrorCode
from .config import ShareConfig
from .errors import InvalidAcknowledgementError, InvalidRecordStateError, ShareError
from .persistence import PersistedBatch, ShareState
from .states import (
    EVENT_OF_ACK,
    AckType,
    DeadLetterReason,
    Event,
    RecordState,
    dead_letter_reason,
    next_state,
)

AVAILABLE, ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
ARCHIVED = RecordState.ARCHIVED


@dataclass(frozen=True, slots=True)
class InFlightRange:
    """Offsets `first_offset..last_offset` (inclusive), all in one state.

    `member_id` is the holder of ACQUIRED records ("" otherwise). `deadline_ms` is, for
    ACQUIRED records, when their lock expires; for AVAILABLE ones, when their retry
    backoff ends (0: acquirable now); 0 otherwise."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str = ""
    deadline_ms: int = 0

    def same_state(self, other: InFlightRange) -> bool:
        return (self.state, self.delivery_count, self.member_id, self.deadline_ms) == (
            other.state,
            other.delivery_count,
            other.member_id,
            other.deadline_ms,
        )


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Records handed to a member (Kafka's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record archived by a reject or by the delivery limit: the caller may copy it to a
    dead-letter destination. Gaps and acknowledged records never produce one."""

    offset: int
    delivery_count: int
    reason: DeadLetterReason


@dataclass(frozen=True, slots=True)
class BatchError:
    """An acknowledgement batch refused as a whole; nothing of it was applied."""

    first_offset: int
    last_offset: int
    code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a step asks of the caller: persist `delta` (if any), dead-letter these."""

    delta: ShareState | None = None
    dead_letters: tuple[DeadLetter, ...] = ()


@dataclass(frozen=True, slots=True)
class PurgeResult:
    delta: ShareState | None
    count: int
    """How many records were dropped."""


@dataclass(frozen=True, slots=True)
class AcquireResult:
    """`acquire`'s outputs: the records to send to the member, in offset order."""

    ranges: tuple[AcquiredRange, ...]
    delta: ShareState | None = None
    dead_letters: tuple[DeadLetter, ...] = ()

    @property
    def count(self) -> int:
        return sum(r.last_offset - r.first_offset + 1 for r in self.ranges)


@dataclass(frozen=True, slots=True)
class AckResult:
    """`acknowledge`'s outputs: one error per refused batch (the others were applied)."""

    errors: tuple[BatchError, ...]
    delta: ShareState | None = None
    dead_letters: tuple[DeadLetter, ...] = ()


AckTypes = AckType | int | Sequence[AckType | int]
AckBatch = tuple[int, int, AckTypes]
"""(first offset, last offset, one type for all, or one per offset or one in a list)."""


def _first(run: InFlightRange) -> int:
    return run.first_offset


class SharePartition:
    """The delivery state of one topic-partition for one share group; see the module."""

    def __init__(self, config: ShareConfig, start_offset: int) -> None:
        assert start_offset >= 0, start_offset
        self.config = config
        self._start = start_offset
        self._runs: list[InFlightRange] = []
        # The current step's record of what it changed.
        self._step_start = start_offset
        self._touched: list[tuple[int, int]] = []
        self._dead: list[DeadLetter] = []

    # -- creation --------------------------------------------------------------------

    @classmethod
    def create(
        cls, config: ShareConfig, log_start_offset: int, log_end_offset: int
    ) -> SharePartition:
        """A share-partition seen for the first time, starting where `auto_offset_reset`
        says. The caller persists its `snapshot()` before serving from it."""
        assert 0 <= log_start_offset <= log_end_offset
        start = log_end_offset if config.auto_offset_reset == "latest" else log_start_offset
        return cls(config, start)

    @classmethod
    def restore(
        cls, config: ShareConfig, snapshot: ShareState, deltas: Iterable[ShareState] = ()
    ) -> SharePartition:
        """The share-partition that `snapshot` and then `deltas`, in order, describe.
        Nothing is acquired after a restore: records that were are AVAILABLE again, with
        the delivery counts they had."""
        partition = cls(config, snapshot.start_offset)
        for state in (snapshot, *deltas):
            partition._replay(state)
        partition._normalize()
        return partition

    def _replay(self, state: ShareState) -> None:
        if state.start_offset > self._start:
            self._start = state.start_offset
            self._drop_below_start()
        for batch in state.batches:
            first, last = max(batch.first_offset, self._start), batch.last_offset
            if first > last:
                continue
            if last >= self.end_offset:
                self._runs.append(InFlightRange(self.end_offset, last, AVAILABLE, 0))
            i, j = self._cover(first, last)
            self._runs[i:j] = [InFlightRange(first, last, batch.state, batch.delivery_count)]

    # -- questions -------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """Every offset below is acknowledged or archived."""
        return self._start

    @property
    def end_offset(self) -> int:
        """The first offset never acquired (Kafka's endOffset + 1)."""
        return self._runs[-1].last_offset + 1 if self._runs else self._start

    def ranges(self) -> tuple[InFlightRange, ...]:
        """The in-flight window, in offset order."""
        return tuple(self._runs)

    def state_of(self, offset: int) -> InFlightRange | None:
        """One offset's state; None below the start offset (done, state dropped)."""
        if offset < self._start:
            return None
        if offset >= self.end_offset:
            return InFlightRange(offset, offset, AVAILABLE, 0)
        run = self._runs[self._index_of(offset)]
        # Not dataclasses.replace: a third of the cost, and the SQS API asks per message.
        return InFlightRange(
            offset, offset, run.state, run.delivery_count, run.member_id, run.deadline_ms
        )

    def next_fetch_offset(self, now_ms: int) -> int | None:
        """Where the broker should read the log from to acquire records at `now_ms`: None
        when nothing can be acquired now (the window is full and nothing in it is
        available)."""
        for run in self._runs:
            if run.state is AVAILABLE and run.deadline_ms <= now_ms:
                return run.first_offset
        return self.end_offset if self._window_room() > 0 else None

    def next_deadline(self) -> int | None:
        """When `expire` next has something to do: the earliest lock deadline or end of a
        retry backoff; None when there is none."""
        deadlines = [run.deadline_ms for run in self._runs if run.deadline_ms > 0]
        return min(deadlines, default=None)

    def snapshot(self) -> ShareState:
        """The whole persistent state, to write instead of the deltas so far."""
        return ShareState(self._start, _persisted(self._runs, self._start, self.end_offset - 1))

    # -- steps -----------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        fetched: Sequence[tuple[int, int]],
        now_ms: int,
        max_records: int,
        lock_ms: int | None = None,
    ) -> AcquireResult:
        """Acquire for `member_id`, up to `max_records`, the acquirable records among the
        batches `fetched` (offset ranges, ascending, read from `next_fetch_offset`),
        locked for `lock_ms` (default: the config's lock duration)."""
        assert member_id, "a member id is required"
        assert all(a[1] < b[0] for a, b in pairwise(fetched)), f"unordered: {fetched}"
        self._begin(now_ms)
        acquired: list[AcquiredRange] = []
        read_from = self.next_fetch_offset(now_ms)
        budget, previous = max_records, (self.end_offset if read_from is None else read_from) - 1
        for first, last in fetched:
            assert first <= last, f"fetched batch {first}..{last}"
            gap_from, previous = previous + 1, max(previous, last)
            first = max(first, self._start)
            if budget <= 0 or first > last:
                continue
            budget = self._acquire_tracked(
                member_id, first, last, now_ms, budget, acquired, lock_ms
            )
            if budget > 0 and last >= self.end_offset:
                budget = self._acquire_fresh(
                    member_id, gap_from, first, last, now_ms, budget, acquired, lock_ms
                )
        delta, dead = self._finish()
        return AcquireResult(_merge_acquired(acquired), delta, dead)

    def acquire_offsets(
        self, member_id: str, offsets: Sequence[int], now_ms: int, lock_ms: int | None = None
    ) -> AcquireResult:
        """Acquire for `member_id` exactly these offsets (ascending) where they are
        acquirable, each holding a record (the caller read them): a queue that picks its
        next messages out of order (AMQP's priority queues). Fresh offsets up to the
        highest are taken into the window as available, never archived as gaps; the
        window's bound applies (offsets past it are left)."""
        assert member_id, "a member id is required"
        self._begin(now_ms)
        acquired: list[AcquiredRange] = []
        wanted = [o for o in offsets if o >= self._start]
        if wanted:
            top = min(wanted[-1], self._start + self.config.max_record_locks - 1)
            end = self.end_offset
            if top >= end:
                self._runs.append(InFlightRange(end, top, AVAILABLE, 0))
            for offset in wanted:
                if offset > top:
                    break
                run = self._runs[self._index_of(offset)]
                if run.state is AVAILABLE and run.deadline_ms <= now_ms:
                    self._acquire_range(member_id, offset, offset, now_ms, acquired, lock_ms)
        delta, dead = self._finish()
        return AcquireResult(_merge_acquired(acquired), delta, dead)

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> AckResult:
        """Apply `member_id`'s acknowledgements. A batch naming any offset the member does
        not hold is refused whole (INVALID_RECORD_STATE); the other batches apply."""
        self._begin(now_ms)
        errors: list[BatchError] = []
        for first, last, types in batches:
            try:
                spans = self._checked_spans(member_id, first, last, types)
            except ShareError as error:
                errors.append(BatchError(first, last, error.code, str(error)))
                continue
            for span_first, span_last, event in spans:
                self._apply(span_first, span_last, event, now_ms)
        delta, dead = self._finish()
        return AckResult(tuple(errors), delta, dead)

    def change_lock(
        self, member_id: str, offsets: Sequence[int], lock_ms: int, now_ms: int
    ) -> tuple[list[int], Outcome]:
        """Lock these offsets, held by `member_id`, for `lock_ms` from now instead of what
        is left of their lock (SQS's ChangeMessageVisibility; 0 ends the lock at once, a
        lock timeout at this step, with its redelivery or delivery limit). Returns the
        offsets that were not held by the member (left alone), and the step's outcome."""
        assert lock_ms >= 0, lock_ms
        self._begin(now_ms)
        missed: list[int] = []
        deadline = now_ms + lock_ms
        for offset in offsets:
            if not self._start <= offset < self.end_offset:
                missed.append(offset)
                continue
            run = self._runs[self._index_of(offset)]
            if run.state is not ACQUIRED or run.member_id != member_id:
                missed.append(offset)
                continue
            i, j = self._cover(offset, offset)
            self._runs[i:j] = [replace(self._runs[i], deadline_ms=deadline)]
        if lock_ms == 0:
            self._expire_due(now_ms)
        return missed, Outcome(*self._finish())

    def release_member(self, member_id: str, now_ms: int) -> Outcome:
        """`member_id` left, or its share session ended: release what it holds."""
        self._begin(now_ms)
        held = [
            (run.first_offset, run.last_offset)
            for run in self._runs
            if run.state is ACQUIRED and run.member_id == member_id
        ]
        for first, last in held:
            self._apply(first, last, Event.RELEASE, now_ms)
        return Outcome(*self._finish())

    def skip_to(self, log_start_offset: int, now_ms: int) -> Outcome:
        """The log no longer holds the records below `log_start_offset` (retention or
        DeleteRecords): they are done, whatever their state, as Kafka archives them; a
        lock on one of them is gone, and acknowledging it fails. Never dead-lettered:
        there is no record left to copy."""
        self._begin(now_ms)
        if log_start_offset > self._start:
            self._start = log_start_offset
            self._drop_below_start()
        return Outcome(*self._finish())

    def purge(
        self, log_end_offset: int, now_ms: int, offsets: Sequence[int] | None = None
    ) -> PurgeResult:
        """Archive the available records below `log_end_offset`, in the window and fresh
        (AMQP's queue.purge drops the ready messages), or only those of them in `offsets`
        (ascending: expired, or over a length limit); acquired records stay with their
        holders. Never dead-lettered: a caller that dead-letters them does it first."""
        self._begin(now_ms)
        if offsets is None:
            spans = [(self._start, log_end_offset - 1)] if log_end_offset > self._start else []
        else:
            spans = list(_consecutive(o for o in offsets if self._start <= o < log_end_offset))
        count = 0
        for first, last in spans:
            count += self._purge_span(first, last, now_ms)
        delta, dead = self._finish()
        assert not dead
        return PurgeResult(delta, count)

    def _purge_span(self, first: int, last: int, now_ms: int) -> int:
        count = 0
        end = self.end_offset
        if first < end:
            upto = min(last, end - 1)
            available = [
                (max(run.first_offset, first), min(run.last_offset, upto))
                for run in self._overlapping(first, upto)
                if run.state is AVAILABLE
            ]
            for one, two in available:
                self._apply(one, two, Event.PURGE, now_ms)
                count += two - one + 1
        if last >= end:
            fresh = max(first, end)
            if fresh > end:  # never-acquired records before the span stay available
                self._runs.append(InFlightRange(end, fresh - 1, AVAILABLE, 0))
            self._runs.append(InFlightRange(fresh, last, ARCHIVED, 0))
            self._touched.append((fresh, last))
            count += last - fresh + 1
        return count

    def expire(self, now_ms: int) -> Outcome:
        """Time out the locks due at `now_ms`, and end the retry backoffs due."""
        self._begin(now_ms)
        return Outcome(*self._finish())

    # -- acquiring -------------------------------------------------------------------

    def _acquire_tracked(
        self,
        member_id: str,
        first: int,
        last: int,
        now_ms: int,
        budget: int,
        out: list[AcquiredRange],
        lock_ms: int | None = None,
    ) -> int:
        """Acquire the available offsets of `first..last` inside the window."""
        offset, last = first, min(last, self.end_offset - 1)
        while offset <= last and budget > 0:
            run = self._runs[self._index_of(offset)]
            upto = min(run.last_offset, last)
            if run.state is AVAILABLE and run.deadline_ms <= now_ms:
                upto = min(upto, offset + budget - 1)
                budget -= self._acquire_range(member_id, offset, upto, now_ms, out, lock_ms)
            offset = upto + 1
        return budget

    def _acquire_fresh(
        self,
        member_id: str,
        gap_from: int,
        first: int,
        last: int,
        now_ms: int,
        budget: int,
        out: list[AcquiredRange],
        lock_ms: int | None = None,
    ) -> int:
        """Acquire never-acquired offsets of `first..last`, archiving the gap before them
        (`gap_from..first-1` holds no record: it was read over and returned nothing)."""
        end = self.end_offset
        if first > end:
            if end < gap_from:  # end..gap_from-1 are records left unacquired: stop there
                return budget
            self._runs.append(InFlightRange(end, first - 1, ARCHIVED, 0))
            self._touched.append((end, first - 1))
            self._advance_start()
        first = max(first, self.end_offset)
        upto = min(last, first + budget - 1, first + self._window_room() - 1)
        if upto < first:
            return budget
        self._runs.append(InFlightRange(first, upto, AVAILABLE, 0))
        return budget - self._acquire_range(member_id, first, upto, now_ms, out, lock_ms)

    def _acquire_range(
        self,
        member_id: str,
        first: int,
        last: int,
        now_ms: int,
        out: list[AcquiredRange],
        lock_ms: int | None = None,
    ) -> int:
        """Acquire `first..last`, inside one range; how many were (not archived)."""
        (run,) = self._apply(first, last, Event.ACQUIRE, now_ms, member_id, lock_ms)
        if run.state is not ACQUIRED:  # at the delivery limit: archived, not delivered
            return 0
        out.append(AcquiredRange(first, last, run.delivery_count))
        return last - first + 1

    def _window_room(self) -> int:
        return self.config.max_record_locks - (self.end_offset - self._start)

    # -- acknowledging ---------------------------------------------------------------

    def _checked_spans(
        self, member_id: str, first: int, last: int, types: AckTypes
    ) -> list[tuple[int, int, Event]]:
        """The batch as (first, last, event) spans, once every offset is known to be held
        by `member_id` in a state that allows its event."""
        if not 0 <= first <= last:
            raise InvalidAcknowledgementError(f"invalid acknowledgement range {first}..{last}")
        spans = _spans(first, last, types)
        for span_first, span_last, event in spans:
            self._check_held(member_id, span_first, span_last, event)
        return spans

    def _check_held(self, member_id: str, first: int, last: int, event: Event) -> None:
        if first < self._start:
            raise InvalidRecordStateError(
                f"{event.value} of offset {first}, below the start offset {self._start}: "
                "already acknowledged or archived"
            )
        if last >= self.end_offset:
            next_state(AVAILABLE, event, at_limit=False)  # raises: never acquired
        for run in self._overlapping(first, min(last, self.end_offset - 1)):
            if run.state is ACQUIRED and run.member_id != member_id:
                raise InvalidRecordStateError(
                    f"{event.value} of offsets {run.first_offset}..{run.last_offset}, "
                    "acquired by another member"
                )
            next_state(run.state, event, at_limit=False)  # raises if not allowed

    # -- the range list --------------------------------------------------------------

    def _index_of(self, offset: int) -> int:
        """The index of the range holding `offset`, which is in the window."""
        assert self._start <= offset < self.end_offset, offset
        return bisect_right(self._runs, offset, key=_first) - 1

    def _boundary(self, offset: int) -> int:
        """The index of the range starting at `offset`, splitting the one holding it."""
        if offset >= self.end_offset:
            return len(self._runs)
        i = self._index_of(offset)
        run = self._runs[i]
        if run.first_offset == offset:
            return i
        self._runs[i : i + 1] = [
            replace(run, last_offset=offset - 1),
            replace(run, first_offset=offset),
        ]
        return i + 1

    def _cover(self, first: int, last: int) -> tuple[int, int]:
        """Indexes i, j such that `self._runs[i:j]` are exactly `first..last`."""
        return self._boundary(first), self._boundary(last + 1)

    def _overlapping(self, first: int, last: int) -> list[InFlightRange]:
        if first > last:
            return []
        i = self._index_of(first)
        j = bisect_right(self._runs, last, key=_first)
        return self._runs[i:j]

    def _apply(
        self,
        first: int,
        last: int,
        event: Event,
        now_ms: int,
        member_id: str = "",
        lock_ms: int | None = None,
    ) -> list[InFlightRange]:
        """Move `first..last` by `event` through the state table; the new ranges."""
        i, j = self._cover(first, last)
        limit = self.config.delivery_count_limit
        moved = []
        for run in self._runs[i:j]:
            at_limit = run.delivery_count >= limit
            state = next_state(run.state, event, at_limit)
            count = run.delivery_count + (1 if state is ACQUIRED else 0)
            moved.append(self._entered(run, state, count, member_id, now_ms, lock_ms))
            reason = dead_letter_reason(run.state, event, at_limit)
            if reason is not None:
                offsets = range(run.first_offset, run.last_offset + 1)
                self._dead.extend(DeadLetter(offset, count, reason) for offset in offsets)
        self._runs[i:j] = moved
        self._touched.append((first, last))
        return moved

    def _entered(
        self,
        run: InFlightRange,
        state: RecordState,
        count: int,
        member_id: str,
        now_ms: int,
        lock_ms: int | None = None,
    ) -> InFlightRange:
        if state is ACQUIRED:
            lock = self.config.record_lock_duration_ms if lock_ms is None else lock_ms
            member, deadline = member_id, now_ms + lock
        elif state is AVAILABLE and self.config.retry_backoff_ms > 0:
            member, deadline = "", now_ms + self.config.retry_backoff_ms
        else:
            member, deadline = "", 0
        return InFlightRange(run.first_offset, run.last_offset, state, count, member, deadline)

    # -- step bookkeeping ------------------------------------------------------------

    def _begin(self, now_ms: int) -> None:
        self._step_start = self._start
        self._touched = []
        self._dead = []
        self._expire_due(now_ms)

    def _expire_due(self, now_ms: int) -> None:
        due = [
            (run.first_offset, run.last_offset)
            for run in self._runs
            if run.state is ACQUIRED and run.deadline_ms <= now_ms
        ]
        for first, last in due:
            self._apply(first, last, Event.LOCK_TIMEOUT, now_ms)
        self._runs = [
            replace(run, deadline_ms=0)
            if run.state is AVAILABLE and 0 < run.deadline_ms <= now_ms
            else run
            for run in self._runs
        ]

    def _finish(self) -> tuple[ShareState | None, tuple[DeadLetter, ...]]:
        self._normalize()
        batches: list[PersistedBatch] = []
        for first, last in _union(self._touched):
            if last >= self._start:
                batches += _persisted(
                    self._overlapping_all(first, last), max(first, self._start), last
                )
        merged = tuple(_merge_persisted(batches))
        changed = bool(merged) or self._start != self._step_start
        delta = ShareState(self._start, merged) if changed else None
        return delta, tuple(self._dead)

    def _overlapping_all(self, first: int, last: int) -> list[InFlightRange]:
        first, last = max(first, self._start), min(last, self.end_offset - 1)
        return self._overlapping(first, last)

    def _normalize(self) -> None:
        """Merge neighbours in the same state; move the start past terminal records."""
        merged: list[InFlightRange] = []
        for run in self._runs:
            if merged and merged[-1].same_state(run):
                merged[-1] = replace(merged[-1], last_offset=run.last_offset)
            else:
                merged.append(run)
        self._runs = merged
        self._advance_start()

    def _advance_start(self) -> None:
        done = 0
        while done < len(self._runs) and self._runs[done].state.terminal:
            done += 1
        if done:
            self._start = self._runs[done - 1].last_offset + 1
            del self._runs[:done]

    def _drop_below_start(self) -> None:
        if self._start >= self.end_offset:
            self._runs = []
            return
        while self._runs and self._runs[0].last_offset < self._start:
            del self._runs[0]
        if self._runs and self._runs[0].first_offset < self._start:
            self._runs[0] = replace(self._runs[0], first_offset=self._start)


def _spans(first: int, last: int, types: AckTypes) -> list[tuple[int, int, Event]]:
    """A batch's (first, last, event) spans, one per run of equal types."""
    if isinstance(types, int):
        types = [types]
    if len(types) not in (1, last - first + 1):
        raise InvalidAcknowledgementError(
            f"{len(types)} acknowledge types for {last - first + 1} offsets {first}..{last}"
        )
    try:
        events = [EVENT_OF_ACK[AckType(t)] for t in types]
    except ValueError as error:
        raise InvalidAcknowledgementError(f"unknown acknowledge type in {list(types)}") from error
    if len(events) == 1:
        return [(first, last, events[0])]
    spans, offset = [], first
    for event, group in groupby(events):
        n = len(list(group))
        spans.append((offset, offset + n - 1, event))
        offset += n
    return spans


def _persisted(runs: Iterable[InFlightRange], first: int, last: int) -> tuple[PersistedBatch, ...]:
    """`runs` clipped to `first..last`, as they are persisted (ACQUIRED as AVAILABLE)."""
    batches = [
        PersistedBatch(
            max(first, run.first_offset),
            min(last, run.last_offset),
            AVAILABLE if run.state is ACQUIRED else run.state,
            run.delivery_count,
        )
        for run in runs
        if run.first_offset <= last and run.last_offset >= first
    ]
    return tuple(_merge_persisted(batches))


def _merge_persisted(batches: Iterable[PersistedBatch]) -> list[PersistedBatch]:
    merged: list[PersistedBatch] = []
    for batch in batches:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and previous.last_offset + 1 == batch.first_offset
            and (previous.state, previous.delivery_count) == (batch.state, batch.delivery_count)
        ):
            merged[-1] = replace(previous, last_offset=batch.last_offset)
        else:
            merged.append(batch)
    return merged


def _merge_acquired(ranges: list[AcquiredRange]) -> tuple[AcquiredRange, ...]:
    merged: list[AcquiredRange] = []
    for r in ranges:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and previous.last_offset + 1 == r.first_offset
            and previous.delivery_count == r.delivery_count
        ):
            merged[-1] = replace(previous, last_offset=r.last_offset)
        else:
            merged.append(r)
    return tuple(merged)


def _consecutive(offsets: Iterable[int]) -> Iterator[tuple[int, int]]:
    """Ascending offsets as (first, last) runs of consecutive ones."""
    first = last = -2
    for offset in offsets:
        if offset == last + 1:
            last = offset
            continue
        if first >= 0:
            yield first, last
        first = last = offset
    if first >= 0:
        yield first, last


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges merged where they overlap or touch, in order."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged
