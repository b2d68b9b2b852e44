"""Share groups on the broker: delivery state, share sessions, fetches, acknowledgements.

The queue engine (`weirmq.queues.SharePartition`) is sans I/O; this service gives it what
it needs, for every protocol (the Kafka adapter, protocols/kafka/apis/share.py, is the
first; AMQP queues and SQS will call the same methods):

- **State, one per (group, topic id, partition)**, created when a member is first assigned
  the partition (`initialize`, from the heartbeat that assigns it, so "latest" means the
  log end when the member joined, not when it first fetched) or on first fetch. Keyed by
  topic id: a topic deleted and created again under the same name starts afresh.
- **Its log**, the internal topic `__share_group_state` (one partition), as Kafka's share
  coordinator keeps its own: each step's delta (queues/persistence.py) is a record keyed
  by the share-partition, and every `SNAPSHOT_EVERY` deltas a snapshot replaces them, so
  replay reads a bounded number of records per share-partition. When the log has grown
  past `COMPACT_MIN_BYTES` and `COMPACT_RATIO` times its live size, every state is
  written as a snapshot and the log start moved to them (a crash midway leaves old
  records before a partial set of snapshots, and replaying both gives the same state).
  A tombstone (null value) deletes a state (group or topic deleted). On start the log is
  replayed (`load`) and the share groups that have state are recreated, empty.
- **Writes come before answers, and dead letters before state.** A step's delta is
  appended before the request is answered, and a request that acknowledged anything is
  answered once the state log is fsynced (as OffsetCommit is), so an acknowledged record is
  not delivered again after a crash of the machine. A step's dead letters are copied to the
  group's dead-letter topic before its delta is written: a crash in between copies a
  record twice, never loses it. An append that fails (disk full) leaves memory ahead of
  the log; the share-partition is marked and its next write is a whole snapshot, and an
  acknowledgement that could not be written is answered with the storage error (after a
  restart the record is delivered again: at least once, never lost).
- **Share sessions** (KIP-932): per (group, member), the partitions a member fetches
  from, opened by epoch 0, closed by epoch -1 (releasing what the member holds on them),
  and otherwise each request must carry the next epoch. At most `SESSIONS_MAX` exist.
- **Time**: one timer on the broker's `Timers` at the earliest lock deadline or end of a
  retry backoff of any share-partition (a heap of (deadline, key), at most one live entry
  per key plus stale ones that fire harmlessly), which expires them and wakes fetches.
- **Waiting fetches** wait on the partitions' appends and on their group's wakeup, which
  every step that may make records available again (acknowledgement, release, expiry)
  sets.
- **Dead letters** (KIP-1191): a record rejected, or archived at the delivery limit, is
  copied to the group's `errors.deadletterqueue.topic.name` (created on first use) with
  context headers `__dlq.errors.*` naming the group, source topic, partition and offset,
  the delivery count and the reason; with `errors.deadletterqueue.copy.record.enable` the
  key, value and original headers come too, else the DLQ record is the headers alone.

Statistics per share-partition (deliveries, acknowledgements by type, dead letters) are
kept in memory since the start, for the admin API and metrics; the window's counts by
state and the age of the oldest unacknowledged record are read when asked.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, NamedTuple

from ..errors import ErrorCode, KafkaError
from ..groups.coordinator import ShareListener
from ..groups.share import ShareGroupSettings
from ..queues import (
    AckBatch,
    AckType,
    AcquiredRange,
    DeadLetter,
    DeadLetterReason,
    InFlightRange,
    RecordState,
    ShareConfig,
    ShareError,
    SharePartition,
    ShareState,
)
from ..records.batch import (
    HEADER_BYTES,
    Record,
    decode_full_records,
    decode_records,
    encode_batch,
    parse_header,
    record_timestamps,
)
from ..records.codec import read_records
from ..storage.errors import StorageError
from ..types import Timer, TopicPartition
from .group_configs import GroupConfigs
from .partition import Wakeable, wait_any
from .scan import scan_batches
from .timers import UNSCHEDULED

if TYPE_CHECKING:
    from .core import Broker
    from .partition import Partition

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC: Final = "__share_group_state"
SHARE_STATE_TOPIC_CONFIGS: Final = {"cleanup.policy": "compact", "segment.bytes": str(8 << 20)}
SNAPSHOT_EVERY: Final = 500
"""Deltas of one share-partition between snapshots (Kafka's
share.coordinator.snapshot.update.records.per.snapshot): bounds replay per state."""
COMPACT_MIN_BYTES: Final = 32 << 20
COMPACT_RATIO: Final = 4
SESSIONS_MAX: Final = 1_000
"""Share sessions open at once (Kafka's group.share.max.share.sessions is 2000 per
broker); past it, a new one is refused with SHARE_SESSION_LIMIT_REACHED."""
SESSION_PARTITIONS_MAX: Final = 10_000
"""Partitions one share session may name."""
READ_FIRST_BYTES: Final = 64 << 10
"""A share fetch's first read of a partition (see `_read_spans`)."""
READ_BYTES_MAX: Final = 8 << 20
"""One read of a share fetch at most."""
READS_MAX: Final = 4
"""Reads of one partition per share fetch at most."""
READ_GUESS_RECORD_BYTES: Final = 2048
"""What a share-partition's first read assumes a record takes, before it has read any
(then it uses the bytes per record it last found). A fetch of a few records is read as a
few records: an AMQP consumer acking one message at a time is sent a few at a time, and
reading 64 KiB of small messages (hundreds of batches, each CRC-checked) to hand out a few
of them made the read most of a delivery's cost (measured: 3x the whole consume's CPU
with 200-byte messages). A larger record just costs a second, right-sized read."""
SHARE_FETCH_WAIT_MAX_MS: Final = 30_000
"""Cap on a ShareFetch's max wait, as for Fetch."""
DEAD_LETTER_HEADERS: Final = (
    "__dlq.errors.group.id",
    "__dlq.errors.topic",
    "__dlq.errors.partition",
    "__dlq.errors.offset",
    "__dlq.errors.delivery.count",
    "__dlq.errors.reason",
)
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1


__all__ = [
    "AckBatch",
    "AckType",
    "DeadLetter",
    "DeadLetterHandler",
    "DeadLetterReason",
    "InFlightRange",
    "RecordState",
    "ShareConfig",
    "ShareService",
    "ShareSessionError",
]
# AckType and ShareConfig are re-exported for the protocol adapters, which reach the queue
# engine only through the broker.


DeadLetterHandler = Callable[[Sequence[tuple[DeadLetter, Record | None]]], None]
"""Given a step's dead letters with their records (see `set_dead_letter_handler`)."""


class ShareKey(NamedTuple):
    group_id: str
    topic_id: uuid.UUID
    partition: int


class SessionPartition(NamedTuple):
    topic_id: uuid.UUID
    partition: int


class ShareSessionError(KafkaError):
    """A share session refused (the code says why); nothing of the request applied."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    """The epoch the next request must carry."""
    partitions: dict[SessionPartition, None] = field(default_factory=dict)
    """In the order they were added (an ordered set)."""
    last_used_ms: int = 0


@dataclass(slots=True)
class ShareStats:
    """Counted since the broker started (not persisted)."""

    delivered: int = 0
    accepted: int = 0
    released: int = 0
    rejected: int = 0
    dead_lettered: int = 0


@dataclass(frozen=True, slots=True)
class AckOutcome:
    code: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(slots=True)
class Acquired:
    """Records handed to a member from one partition: whole batches, and which of their
    offsets are the member's (the client skips the others)."""

    topic_id: uuid.UUID
    partition: int
    records: bytes | memoryview
    ranges: tuple[AcquiredRange, ...]

    def messages(self) -> Iterator[tuple[int, int, Record, int]]:
        """(offset, delivery count, record, its batch's producer id) of every acquired
        record, in order: what a protocol that delivers records one by one (AMQP, SQS)
        hands out, rather than the whole batches a Kafka client is sent."""
        counts = [(r.first_offset, r.last_offset, r.delivery_count) for r in self.ranges]
        view = memoryview(self.records)
        position = 0
        index = 0
        while position < len(view) and index < len(counts):
            header = parse_header(view, position)
            batch = view[position : position + header.size]
            position += header.size
            if header.base_offset + header.last_offset_delta < counts[index][0]:
                continue
            _, copies = read_records(batch)
            for copy in copies:
                offset = copy.offset
                while index < len(counts) and offset > counts[index][1]:
                    index += 1
                if index >= len(counts):
                    break
                first, _last, count = counts[index]
                if offset >= first:
                    record = Record(copy.value, copy.key, tuple(copy.headers), copy.timestamp)
                    yield offset, count, record, header.producer_id


@dataclass(frozen=True, slots=True)
class SharePartitionView:
    """One share-partition for the admin API and metrics."""

    group_id: str
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    high_watermark: int
    available: int
    """Records that may be delivered now or after their backoff: in the window, and never
    delivered up to the high watermark."""
    acquired: int
    acknowledged: int
    archived: int
    """In the window only: below the start offset every record is done."""
    oldest_unacknowledged_ms: int | None
    """The timestamp of the record at the start offset, None when there is none."""
    stats: ShareStats


class _Entry:
    __slots__ = ("deltas", "dirty", "partition", "record_bytes", "stats")

    def __init__(self, partition: SharePartition) -> None:
        self.partition = partition
        self.record_bytes = READ_GUESS_RECORD_BYTES
        """Bytes per record of the log as last read: sizes the next first read."""
        self.deltas = 0
        """Deltas written since the last snapshot."""
        self.dirty = False
        """A write failed: the next one must be a whole snapshot."""
        self.stats = ShareStats()


class _Wakeup:
    """A share group's waiting fetches (a `Wakeable`, as a partition is)."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.append(waiter)

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class ShareService(ShareListener):
    """See the module docstring."""

    def __init__(self, broker: Broker, configs: GroupConfigs) -> None:
        self._broker = broker
        self.configs = configs
        self._states: dict[ShareKey, _Entry] = {}
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._wakeups: dict[str, _Wakeup] = {}
        """Per group with waiting fetches: woken when records may be available again."""
        self._deadlines: list[tuple[int, ShareKey]] = []
        self._scheduled: dict[ShareKey, int] = {}
        self._timer: Timer | None = None
        self._timer_at: int | None = None
        self._live_bytes = 0
        self._compacting = False
        self._dead_letter_handlers: dict[str, DeadLetterHandler] = {}
        """Per group backing a named queue whose dead letters its protocol routes (AMQP's
        dead-letter exchange), instead of the group's dead-letter topic."""
        self._queue_configs: dict[str, ShareConfig] = {}
        """Per group backing a protocol's named queue (an AMQP queue): its `ShareConfig`
        comes from the queue's own arguments, not from group configs."""

    # --- the coordinator's listener -----------------------------------------------------

    def share_settings(self, group_id: str) -> ShareGroupSettings:
        return self.configs.share_settings(group_id)

    def members_gone(self, group_id: str, member_ids: Sequence[str], now_ms: int) -> None:
        for member_id in member_ids:
            self._sessions.pop((group_id, member_id), None)
            for key, entry in self._group_states(group_id):
                outcome = entry.partition.release_member(member_id, now_ms)
                self._after_step(key, entry, outcome.delta, outcome.dead_letters)
        self._wake(group_id)

    def group_deleted(self, group_id: str) -> None:
        doomed = [key for key, _ in self._group_states(group_id)]
        self._tombstone(doomed)
        for session_key in [k for k in self._sessions if k[0] == group_id]:
            del self._sessions[session_key]
        self.configs.forget(group_id)
        self._wake(group_id)

    def topic_deleted(self, topic_id: uuid.UUID) -> None:
        doomed = [key for key in self._states if key.topic_id == topic_id]
        self._tombstone(doomed)
        for key in doomed:
            self._wake(key.group_id)

    def _tombstone(self, keys: list[ShareKey]) -> None:
        if not keys:
            return
        try:
            self._append([(_encode_key(key), None) for key in keys])
        except KafkaError as exc:
            log.error(
                "%s: %d state(s) not deleted from the log: %s", SHARE_STATE_TOPIC, len(keys), exc
            )
        for key in keys:
            self._states.pop(key, None)
            self._scheduled.pop(key, None)

    def _group_states(self, group_id: str) -> list[tuple[ShareKey, _Entry]]:
        return [(key, entry) for key, entry in self._states.items() if key.group_id == group_id]

    # --- share-partitions ---------------------------------------------------------------

    def initialize(self, group_id: str, partitions: Iterable[tuple[uuid.UUID, int]]) -> None:
        """Create the state of newly assigned partitions (a heartbeat's assignment), so
        that `share.auto.offset.reset=latest` starts where the log ended then."""
        now = self._broker.clock()
        for topic_id, index in partitions:
            key = ShareKey(group_id, topic_id, index)
            if key not in self._states:
                self._state(key, now)

    def _state(self, key: ShareKey, now_ms: int) -> tuple[_Entry, Partition] | None:
        """The share-partition and its log partition; None when the topic or partition
        does not exist."""
        topic = self._broker.topics.by_id(key.topic_id)
        if topic is None:
            return None
        partition = self._broker.partition(topic.name, key.partition)
        if partition is None:
            return None
        entry = self._states.get(key)
        config = self._config(key.group_id)
        if entry is None:
            share_partition = SharePartition.create(
                config, partition.log_start_offset, partition.high_watermark
            )
            entry = self._states[key] = _Entry(share_partition)
            entry.dirty = True  # its first write is a snapshot
            self._write_state(key, entry, share_partition.snapshot())
        elif entry.partition.config is not config:
            entry.partition.config = config  # the group's configs changed
        if partition.log_start_offset > entry.partition.start_offset:
            outcome = entry.partition.skip_to(partition.log_start_offset, now_ms)
            self._after_step(key, entry, outcome.delta, outcome.dead_letters)
        return entry, partition

    def lock_duration_ms(self, group_id: str) -> int:
        return self._config(group_id).record_lock_duration_ms

    def _config(self, group_id: str) -> ShareConfig:
        found = self._queue_configs.get(group_id)
        return found if found is not None else self.configs.share_config(group_id)

    # --- named queues (AMQP queues; SQS next) ---------------------------------------------
    #
    # A protocol's queue is one topic-partition and one share group of its own: the
    # protocol names the group, gives its `ShareConfig` (from the queue's arguments), and
    # acquires for a member it names (AMQP: a channel), without the share group protocol's
    # sessions and heartbeats, which belong to Kafka's clients.

    def set_queue_config(self, group_id: str, config: ShareConfig | None) -> None:
        """Give the group backing a named queue its config (None forgets it). Call it
        before `load` for queues that exist on start, so their state is restored under
        it."""
        if config is None:
            self._queue_configs.pop(group_id, None)
            return
        self._queue_configs[group_id] = config
        for _key, entry in self._group_states(group_id):
            entry.partition.config = config

    def set_dead_letter_handler(self, group_id: str, handler: DeadLetterHandler | None) -> None:
        """Route the group's dead letters (rejects, the delivery limit) through `handler`,
        given each letter with its record (None when the log no longer has it)."""
        if handler is None:
            self._dead_letter_handlers.pop(group_id, None)
        else:
            self._dead_letter_handlers[group_id] = handler

    def read_records(
        self, topic_id: uuid.UUID, index: int, offsets: Sequence[int]
    ) -> list[tuple[int, Record | None]]:
        """The records at these offsets (ascending) of a partition; None for one the log
        no longer has."""
        topic = self._broker.topics.by_id(topic_id)
        source = None if topic is None else self._broker.partition(topic.name, index)
        if source is None or not offsets:
            return [(offset, None) for offset in offsets]
        return list(_read_records(source, offsets))

    def acquire_one(
        self,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID,
        index: int,
        max_records: int,
        max_bytes: int,
        now_ms: int,
        lock_ms: int | None = None,
    ) -> Acquired | None:
        """Acquire up to `max_records` records of one partition for `member_id`, locked
        for `lock_ms` (default: the group's lock duration); None when none is available
        (or the partition is gone)."""
        key = ShareKey(group_id, topic_id, index)
        found = self._state(key, now_ms)
        if found is None:
            return None
        entry, partition = found
        return self._acquire_one(
            key, entry, partition, member_id, max_records, max_bytes, now_ms, lock_ms
        )

    def acquire_offsets(
        self,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID,
        index: int,
        offsets: Sequence[int],
        now_ms: int,
        lock_ms: int | None = None,
    ) -> list[AcquiredRange]:
        """Acquire exactly these ready offsets (ascending) of one queue for `member_id`
        (a queue choosing its messages out of order), locked for `lock_ms` (default: the
        group's lock duration); the ranges acquired."""
        key = ShareKey(group_id, topic_id, index)
        found = self._state(key, now_ms)
        if found is None:
            return []
        entry, partition = found
        below = [o for o in offsets if o < partition.high_watermark]
        result = entry.partition.acquire_offsets(member_id, below, now_ms, lock_ms)
        self._after_step(key, entry, result.delta, result.dead_letters)
        entry.stats.delivered += result.count
        return list(result.ranges)

    def change_lock(
        self,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID,
        index: int,
        offsets: Sequence[int],
        lock_ms: int,
        now_ms: int,
    ) -> list[int]:
        """Lock these offsets of one queue, held by `member_id`, for `lock_ms` from now
        (0: make them available at once); returns those it did not hold."""
        key = ShareKey(group_id, topic_id, index)
        found = self._state(key, now_ms) if key in self._states else None
        if found is None:
            return list(offsets)
        entry, _ = found
        missed, outcome = entry.partition.change_lock(member_id, offsets, lock_ms, now_ms)
        self._after_step(key, entry, outcome.delta, outcome.dead_letters)
        if lock_ms == 0:
            self._wake(group_id)
        return missed

    def release(self, group_id: str, member_id: str, now_ms: int) -> None:
        """Make available again what `member_id` holds in the group (an AMQP channel
        closed), and wake the group's waiters."""
        for key, entry in self._group_states(group_id):
            outcome = entry.partition.release_member(member_id, now_ms)
            self._after_step(key, entry, outcome.delta, outcome.dead_letters)
        self._wake(group_id)

    def wakeup(self, group_id: str) -> Wakeable:
        """What a waiter of the group's records waits on, besides the log's appends: it
        is woken when records may be available again (a release, an expiry)."""
        wakeup = self._wakeups.get(group_id)
        if wakeup is None:
            wakeup = self._wakeups[group_id] = _Wakeup()
        return wakeup

    def queue_counts(self, group_id: str, topic_id: uuid.UUID, index: int) -> tuple[int, int]:
        """(ready, unacknowledged) records of one queue: available now or after their
        backoff, and acquired."""
        key = ShareKey(group_id, topic_id, index)
        found = self._state(key, self._broker.clock())
        if found is None:
            return 0, 0
        entry, partition = found
        share_partition = entry.partition
        ready = acquired = 0
        for run in share_partition.ranges():
            size = run.last_offset - run.first_offset + 1
            if run.state is RecordState.AVAILABLE:
                ready += size
            elif run.state is RecordState.ACQUIRED:
                acquired += size
        ready += max(0, partition.high_watermark - share_partition.end_offset)
        return ready, acquired

    def record_state(
        self, group_id: str, topic_id: uuid.UUID, index: int, offset: int
    ) -> InFlightRange | None:
        """One record's state in a queue, as of now (locks due are expired first); None
        when it is settled (below the queue's start) or the queue has no state yet."""
        return self.record_states(group_id, topic_id, index, [offset])[0]

    def record_states(
        self, group_id: str, topic_id: uuid.UUID, index: int, offsets: Sequence[int]
    ) -> list[InFlightRange | None]:
        """`record_state` of each offset, the locks due expired once for all."""
        key = ShareKey(group_id, topic_id, index)
        now = self._broker.clock()
        found = self._state(key, now) if key in self._states else None
        if found is None:
            return [None] * len(offsets)
        entry, _ = found
        due = entry.partition.next_deadline()
        if due is not None and due <= now:
            outcome = entry.partition.expire(now)
            self._after_step(key, entry, outcome.delta, outcome.dead_letters)
        return [entry.partition.state_of(offset) for offset in offsets]

    def held(self, group_id: str, topic_id: uuid.UUID, index: int) -> list[InFlightRange]:
        """The acquired ranges of a queue (holder, delivery count, lock deadline)."""
        entry = self._states.get(ShareKey(group_id, topic_id, index))
        if entry is None:
            return []
        return [r for r in entry.partition.ranges() if r.state is RecordState.ACQUIRED]

    def queue_start(self, group_id: str, topic_id: uuid.UUID, index: int) -> int | None:
        """The queue's oldest unsettled offset (everything below is acknowledged or
        archived); None when it has no state yet."""
        entry = self._states.get(ShareKey(group_id, topic_id, index))
        return None if entry is None else entry.partition.start_offset

    def purge(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        index: int,
        now_ms: int,
        *,
        below: int | None = None,
        offsets: Sequence[int] | None = None,
    ) -> int:
        """Drop ready records of one queue, never dead-lettered: all of them (AMQP's
        queue.purge), those below `below`, or only those in `offsets` (expired or over a
        length limit: their protocol dead-letters them first). Acquired records stay with
        their holders. Returns how many were dropped."""
        key = ShareKey(group_id, topic_id, index)
        found = self._state(key, now_ms)
        if found is None:
            return 0
        entry, partition = found
        end = partition.high_watermark if below is None else min(below, partition.high_watermark)
        result = entry.partition.purge(end, now_ms, offsets)
        self._after_step(key, entry, result.delta, ())
        return result.count

    def ready_offsets(
        self, group_id: str, topic_id: uuid.UUID, index: int, limit: int
    ) -> list[tuple[int, int]]:
        """The first ready (available now) offset ranges of a queue, in order, covering at
        most about `limit` offsets: (first, last) each, the last one open to the high
        watermark."""
        key = ShareKey(group_id, topic_id, index)
        now = self._broker.clock()
        found = self._state(key, now)
        if found is None:
            return []
        entry, partition = found
        share_partition = entry.partition
        ranges: list[tuple[int, int]] = []
        covered = 0
        for run in share_partition.ranges():
            if covered >= limit:
                return ranges
            if run.state is RecordState.AVAILABLE and run.deadline_ms <= now:
                ranges.append((run.first_offset, run.last_offset))
                covered += run.last_offset - run.first_offset + 1
        if share_partition.end_offset < partition.high_watermark and covered < limit:
            ranges.append((share_partition.end_offset, partition.high_watermark - 1))
        return ranges

    # --- sessions -----------------------------------------------------------------------

    def session(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[SessionPartition],
        forgotten: Iterable[SessionPartition],
        now_ms: int,
    ) -> ShareSession:
        """The member's share session for this request (ShareFetch): opened (epoch 0),
        or the existing one at the right epoch, then moved to the next one; `added` and
        `forgotten` change its partitions. Raises ShareSessionError. A final request
        (-1) finds its session but does not move it: the caller closes it."""
        if not group_id:
            raise ShareSessionError(ErrorCode.invalid_request, "the group id is empty")
        if not member_id:
            raise ShareSessionError(ErrorCode.invalid_request, "the member id is empty")
        session_key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if session_key not in self._sessions and len(self._sessions) >= SESSIONS_MAX:
                self._evict_idle_sessions(now_ms)
            if session_key not in self._sessions and len(self._sessions) >= SESSIONS_MAX:
                raise ShareSessionError(
                    ErrorCode.share_session_limit_reached,
                    f"{SESSIONS_MAX} share sessions are open on this broker",
                )
            groups = self._broker.groups
            found_group = groups.groups.get(group_id)
            if found_group is not None and groups.share_group(group_id) is None:
                raise ShareSessionError(
                    ErrorCode.inconsistent_group_protocol,
                    f"group {group_id!r} is a {found_group.view().kind} group, not a share group",
                )
            session = self._sessions[session_key] = ShareSession(group_id, member_id, 1)
            groups.ensure_share_group(group_id)
        else:
            found = self._sessions.get(session_key)
            if found is None and epoch == FINAL_EPOCH:
                # A member closing a session we no longer have (it left the group first,
                # or the broker restarted): its last acknowledgements still apply.
                found = ShareSession(group_id, member_id, FINAL_EPOCH)
            if found is None:
                raise ShareSessionError(
                    ErrorCode.share_session_not_found,
                    f"member {member_id} of group {group_id!r} has no share session",
                )
            if epoch != FINAL_EPOCH and epoch != found.epoch:
                raise ShareSessionError(
                    ErrorCode.invalid_share_session_epoch,
                    f"share session epoch {epoch}, expected {found.epoch}",
                )
            session = found
            if epoch != FINAL_EPOCH:
                session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        for forget in forgotten:
            session.partitions.pop(forget, None)
        for add in added:
            if add not in session.partitions and len(session.partitions) >= SESSION_PARTITIONS_MAX:
                raise ShareSessionError(
                    ErrorCode.invalid_request,
                    f"a share session names {SESSION_PARTITIONS_MAX} partitions at most",
                )
            session.partitions[add] = None
        session.last_used_ms = now_ms
        return session

    def _evict_idle_sessions(self, now_ms: int) -> None:
        """Forget sessions unused for longer than their group's session timeout: their
        member has been removed from the group by now, or never joined it (Kafka's share
        session cache evicts idle sessions the same way)."""
        for key, session in list(self._sessions.items()):
            timeout = self.configs.share_settings(session.group_id).session_timeout_ms
            if now_ms - session.last_used_ms > timeout:
                del self._sessions[key]

    def check_session(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a ShareAcknowledge names (it cannot open one: epoch 0 is refused),
        moved to its next epoch unless final."""
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(
                ErrorCode.invalid_share_session_epoch,
                "an acknowledgement cannot open a share session (epoch 0)",
            )
        return self.session(group_id, member_id, epoch, (), (), self._broker.clock())

    def close_session(self, session: ShareSession, now_ms: int) -> None:
        """A final request (epoch -1): release what the member holds, forget the session."""
        self._sessions.pop((session.group_id, session.member_id), None)
        for topic_id, index in session.partitions:
            key = ShareKey(session.group_id, topic_id, index)
            entry = self._states.get(key)
            if entry is not None:
                outcome = entry.partition.release_member(session.member_id, now_ms)
                self._after_step(key, entry, outcome.delta, outcome.dead_letters)
        self._wake(session.group_id)

    # --- acknowledging ------------------------------------------------------------------

    def acknowledge(
        self,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID,
        index: int,
        batches: Sequence[AckBatch],
        now_ms: int,
    ) -> AckOutcome:
        """Apply one partition's acknowledgement batches; the first refusal, if any."""
        key = ShareKey(group_id, topic_id, index)
        found = self._state(key, now_ms) if key in self._states else None
        if found is None:
            if self._broker.topics.by_id(topic_id) is None:
                return AckOutcome(ErrorCode.unknown_topic_id, f"no topic with id {topic_id}")
            return AckOutcome(
                ErrorCode.invalid_record_state, "no records of this partition were delivered"
            )
        entry, _ = found
        try:
            result = entry.partition.acknowledge(member_id, batches, now_ms)
        except ShareError as exc:
            return AckOutcome(exc.code, str(exc))
        _count_acks(entry.stats, batches, result.errors)
        written = self._after_step(key, entry, result.delta, result.dead_letters)
        self._wake(group_id)
        if result.errors:
            first = result.errors[0]
            return AckOutcome(first.code, first.message)
        if written is not None:
            return AckOutcome(written.code, str(written))
        return AckOutcome()

    async def durable(self) -> None:
        """Return once the state log is fsynced up to its end."""
        partition = self._log_partition(create=False)
        if partition is not None:
            await partition.durable(partition.log_end_offset)

    # --- acquiring ----------------------------------------------------------------------

    def acquire(
        self,
        session: ShareSession,
        max_records: int,
        max_bytes: int,
        now_ms: int,
    ) -> tuple[list[Acquired], dict[SessionPartition, ErrorCode]]:
        """Acquire for the session's member, across its partitions in order, up to
        `max_records` records and about `max_bytes` (whole batches; the first batch may
        exceed it). Returns what was acquired, and the partitions that do not exist."""
        acquired: list[Acquired] = []
        errors: dict[SessionPartition, ErrorCode] = {}
        records_left, bytes_left = max_records, max_bytes
        for topic_id, index in list(session.partitions):
            if records_left <= 0 or bytes_left <= 0:
                break
            key = ShareKey(session.group_id, topic_id, index)
            found = self._state(key, now_ms)
            if found is None:
                unknown_topic = self._broker.topics.by_id(topic_id) is None
                errors[SessionPartition(topic_id, index)] = (
                    ErrorCode.unknown_topic_id
                    if unknown_topic
                    else ErrorCode.unknown_topic_or_partition
                )
                continue
            entry, partition = found
            got = self._acquire_one(
                key, entry, partition, session.member_id, records_left, bytes_left, now_ms
            )
            if got is not None:
                acquired.append(got)
                records_left -= sum(r.last_offset - r.first_offset + 1 for r in got.ranges)
                bytes_left -= len(got.records)
        return acquired, errors

    def _acquire_one(
        self,
        key: ShareKey,
        entry: _Entry,
        partition: Partition,
        member_id: str,
        max_records: int,
        max_bytes: int,
        now_ms: int,
        lock_ms: int | None = None,
    ) -> Acquired | None:
        share_partition = entry.partition
        offset = share_partition.next_fetch_offset(now_ms)
        if offset is None or offset >= partition.high_watermark:
            return None
        try:
            spans = _read_spans(partition, offset, max_records, max_bytes, entry.record_bytes)
        except KafkaError as exc:
            log.warning("share group %r: %s not read: %s", key.group_id, partition.tp, exc)
            return None
        if not spans:
            return None
        covered = spans[-1].last - spans[0].first + 1
        entry.record_bytes = max(
            64, sum(len(span.data) for span in spans) // max(covered, 1)
        )  # the next first read is sized for what this one found
        result = share_partition.acquire(
            member_id, [(span.first, span.last) for span in spans], now_ms, max_records, lock_ms
        )
        self._after_step(key, entry, result.delta, result.dead_letters)
        if not result.ranges:
            return None
        entry.stats.delivered += result.count
        first_acquired = result.ranges[0].first_offset
        last_acquired = result.ranges[-1].last_offset
        # Whole batches, from the first holding an acquired offset to the last.
        sent = [s for s in spans if s.last >= first_acquired and s.first <= last_acquired]
        records = sent[0].data if len(sent) == 1 else b"".join(s.data for s in sent)
        return Acquired(key.topic_id, key.partition, records, result.ranges)

    # --- waiting ------------------------------------------------------------------------

    def wait(
        self, group_id: str, session: ShareSession, deadline_ms: int
    ) -> Awaitable[None] | None:
        """An awaitable that returns when one of the session's partitions gets an append,
        the group's state may have records available again, the broker closes, or the
        clock reaches `deadline_ms`; None when there is nothing to wait for."""
        broker = self._broker
        if broker.closing:
            return None
        sources: list[Wakeable] = []
        for topic_id, index in session.partitions:
            topic = broker.topics.by_id(topic_id)
            found = None if topic is None else broker.partition(topic.name, index)
            if found is not None:
                sources.append(found)
        wakeup = self._wakeups.get(group_id)
        if wakeup is None:
            wakeup = self._wakeups[group_id] = _Wakeup()
        sources.append(wakeup)
        return wait_any(sources, deadline_ms, broker.timers, broker.clock)

    def _wake(self, group_id: str) -> None:
        wakeup = self._wakeups.pop(group_id, None)
        if wakeup is not None:
            wakeup.wake()

    def wake_all(self) -> None:
        for group_id in list(self._wakeups):
            self._wake(group_id)

    # --- after each step: dead letters, the state log, the timer ------------------------

    def _after_step(
        self,
        key: ShareKey,
        entry: _Entry,
        delta: ShareState | None,
        dead_letters: Sequence[DeadLetter],
    ) -> KafkaError | None:
        """Copy the dead letters, then write the delta; reschedule the timer. Returns the
        error that kept the delta from the log, if any."""
        if dead_letters:
            self._dead_letter(key, entry, dead_letters)
        failed = None
        if delta is not None or entry.dirty:
            failed = self._write_state(key, entry, delta)
        self._schedule(key, entry.partition.next_deadline())
        return failed

    def _write_state(
        self, key: ShareKey, entry: _Entry, delta: ShareState | None
    ) -> KafkaError | None:
        snapshot = entry.dirty or entry.deltas + 1 >= SNAPSHOT_EVERY or delta is None
        state = entry.partition.snapshot() if snapshot else delta
        assert state is not None
        try:
            self._append([(_encode_key(key), _encode_value(state, snapshot=snapshot))])
        except KafkaError as exc:
            entry.dirty = True
            log.error("share group %r: state of %s not written: %s", key.group_id, key, exc)
            return exc
        entry.dirty = False
        entry.deltas = 0 if snapshot else entry.deltas + 1
        return None

    def _append(self, pairs: Sequence[tuple[bytes, bytes | None]]) -> None:
        partition = self._log_partition(create=True)
        assert partition is not None
        now = self._broker.clock()
        partition.append_internal(encode_batch([Record(v, k, (), now) for k, v in pairs]))
        if partition.log.size_bytes > max(COMPACT_MIN_BYTES, COMPACT_RATIO * self._live_bytes):
            self._schedule_compaction()

    def _log_partition(self, *, create: bool) -> Partition | None:
        broker = self._broker
        found = broker.partition(SHARE_STATE_TOPIC, 0)
        if found is None and create:
            broker.create_topic(SHARE_STATE_TOPIC, 1, SHARE_STATE_TOPIC_CONFIGS)
            found = broker.partition(SHARE_STATE_TOPIC, 0)
        return found

    def _schedule_compaction(self) -> None:
        if self._compacting:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._compacting = True
        loop.call_soon(self.compact)

    def compact(self) -> None:
        """Write every state as a snapshot and move the log start to the first of them."""
        self._compacting = True  # the snapshots' own writes schedule no other
        try:
            partition = self._log_partition(create=True)
            assert partition is not None
            start, before = partition.log_end_offset, partition.log.size_bytes
            pairs = [
                (_encode_key(key), _encode_value(entry.partition.snapshot(), snapshot=True))
                for key, entry in self._states.items()
            ]
            for chunk in range(0, len(pairs), 512):
                self._append(pairs[chunk : chunk + 512])
            self._live_bytes = partition.log.size_bytes - before
            for entry in self._states.values():
                entry.deltas, entry.dirty = 0, False
            partition.log.advance_log_start(start)
            log.info(
                "%s compacted: %d bytes before, log start now %d", SHARE_STATE_TOPIC, before, start
            )
        except KafkaError as exc:
            log.error("%s: compaction failed: %s", SHARE_STATE_TOPIC, exc)
        finally:
            self._compacting = False

    def _schedule(self, key: ShareKey, deadline: int | None) -> None:
        if deadline is None:
            self._scheduled.pop(key, None)
            return
        known = self._scheduled.get(key)
        if known is not None and known <= deadline:
            return  # fires early at worst, and reschedules
        self._scheduled[key] = deadline
        heapq.heappush(self._deadlines, (deadline, key))
        if self._timer_at is None or deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            handle = self._broker.timers.call_at(deadline, self._fire)
            if handle is UNSCHEDULED:
                self._timer = self._timer_at = None
                return
            self._timer, self._timer_at = handle, deadline

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        now = self._broker.clock()
        woken: set[str] = set()
        try:
            while self._deadlines and self._deadlines[0][0] <= now:
                deadline, key = heapq.heappop(self._deadlines)
                if self._scheduled.get(key) != deadline:
                    continue  # stale: rescheduled or gone
                del self._scheduled[key]
                entry = self._states.get(key)
                if entry is None:
                    continue
                outcome = entry.partition.expire(now)
                self._after_step(key, entry, outcome.delta, outcome.dead_letters)
                woken.add(key.group_id)
        except Exception:
            log.exception("share-partition expiry failed")
        for group_id in woken:
            self._wake(group_id)
        if self._deadlines:
            self._timer_at = None
            deadline = self._deadlines[0][0]
            handle = self._broker.timers.call_at(deadline, self._fire)
            if handle is not UNSCHEDULED:
                self._timer, self._timer_at = handle, deadline

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None

    # --- dead letters -------------------------------------------------------------------

    def _dead_letter(
        self, key: ShareKey, entry: _Entry, dead_letters: Sequence[DeadLetter]
    ) -> None:
        entry.stats.dead_lettered += len(dead_letters)
        broker = self._broker
        handler = self._dead_letter_handlers.get(key.group_id)
        if handler is not None:
            letters = sorted(dead_letters, key=lambda letter: letter.offset)
            offsets = [letter.offset for letter in letters]
            found = self.read_records(key.topic_id, key.partition, offsets)
            pairs = [(letter, record) for letter, (_, record) in zip(letters, found, strict=True)]
            try:
                handler(pairs)
            except Exception:
                log.exception("share group %r: dead letters not handled", key.group_id)
            return
        topic_name = self.configs.dead_letter_topic(key.group_id)
        source_topic = broker.topics.by_id(key.topic_id)
        if not topic_name or source_topic is None:
            return
        source = broker.partition(source_topic.name, key.partition)
        if source is None:
            return
        copy = self.configs.copy_dead_letters(key.group_id)
        wanted = {letter.offset: letter for letter in dead_letters}
        records: list[Record] = []
        now = broker.clock()
        for offset, original in _read_records(source, sorted(wanted)):
            letter = wanted[offset]
            context = (
                key.group_id,
                source_topic.name,
                str(key.partition),
                str(offset),
                str(letter.delivery_count),
                letter.reason.value,
            )
            headers = tuple(
                (name, value.encode())
                for name, value in zip(DEAD_LETTER_HEADERS, context, strict=True)
            )
            if copy and original is not None:
                records.append(
                    Record(
                        original.value,
                        original.key,
                        original.headers + headers,
                        original.timestamp_ms,
                    )
                )
            else:
                records.append(Record(None, None, headers, now))
        if not records:
            return
        try:
            destination = broker.topic(topic_name, auto_create=False)
        except KafkaError:
            try:
                destination = broker.create_topic(topic_name, broker.settings.default_partitions)
            except KafkaError as exc:
                log.error(
                    "share group %r: dead-letter topic %r not created: %s",
                    key.group_id,
                    topic_name,
                    exc,
                )
                return
        target = broker.partition(topic_name, key.partition % destination.partitions)
        if target is None:
            return
        try:
            for chunk in range(0, len(records), 500):
                target.append_internal(encode_batch(records[chunk : chunk + 500]))
        except KafkaError as exc:
            log.error(
                "share group %r: dead letters to %r not written: %s", key.group_id, topic_name, exc
            )

    # --- loading ------------------------------------------------------------------------

    def load(self) -> None:
        """Replay the state log (see the module docstring); recreate the share groups."""
        partition = self._log_partition(create=False)
        if partition is None or partition.offline_reason is not None:
            return
        snapshots: dict[ShareKey, ShareState | None] = {}
        deltas: dict[ShareKey, list[ShareState]] = {}
        records = 0
        try:
            for batch in scan_batches(partition.log, partition.log_start_offset):
                for _offset, key_bytes, value in decode_records(batch):
                    records += 1
                    try:
                        key = _decode_key(key_bytes)
                        if value is None:
                            snapshots[key] = None
                            deltas.pop(key, None)
                            continue
                        state, is_snapshot = _decode_value(value)
                    except (ValueError, KafkaError) as exc:
                        log.error("%s: skipping a malformed record: %s", SHARE_STATE_TOPIC, exc)
                        continue
                    if is_snapshot:
                        snapshots[key] = state
                        deltas[key] = []
                    elif snapshots.get(key) is not None:
                        deltas[key].append(state)
        except (StorageError, KafkaError) as exc:
            log.error("%s: replay stopped early: %s", SHARE_STATE_TOPIC, exc)
        for key, snapshot in snapshots.items():
            if snapshot is None:
                continue
            config = self._config(key.group_id)
            try:
                restored = SharePartition.restore(config, snapshot, deltas.get(key, ()))
            except KafkaError as exc:
                log.error("%s: state of %s not restored: %s", SHARE_STATE_TOPIC, key, exc)
                continue
            entry = self._states[key] = _Entry(restored)
            entry.deltas = len(deltas.get(key, ()))
            self._broker.groups.ensure_share_group(key.group_id)
        if records:
            log.info(
                "loaded %d share-partition state(s) from %d record(s) of %s",
                len(self._states),
                records,
                SHARE_STATE_TOPIC,
            )

    # --- views --------------------------------------------------------------------------

    def views(self, group_id: str | None = None) -> list[SharePartitionView]:
        broker = self._broker
        result = []
        for key, entry in sorted(self._states.items(), key=lambda item: _sort_key(item[0])):
            if group_id is not None and key.group_id != group_id:
                continue
            topic = broker.topics.by_id(key.topic_id)
            partition = None if topic is None else broker.partition(topic.name, key.partition)
            if topic is None or partition is None:
                continue
            result.append(_view(key, topic.name, entry, partition))
        return result

    def groups(self) -> Iterator[str]:
        return iter(sorted({key.group_id for key in self._states}))

    def start_offsets(self, topics: Container[str]) -> Iterator[tuple[str, TopicPartition, int]]:
        """Every share group's start offset (its oldest unacknowledged record) on a
        partition of `topics` (for backlogs)."""
        for key, entry in self._states.items():
            topic = self._broker.topics.by_id(key.topic_id)
            if topic is not None and topic.name in topics:
                tp = TopicPartition(topic.name, key.partition)
                yield key.group_id, tp, entry.partition.start_offset


# --- helpers ---------------------------------------------------------------------------------


class _Span(NamedTuple):
    """One whole batch read from the log: its offsets and its bytes."""

    first: int
    last: int
    data: memoryview


def _read_spans(
    partition: Partition,
    offset: int,
    max_records: int,
    max_bytes: int,
    record_bytes: int = READ_GUESS_RECORD_BYTES,
) -> list[_Span]:
    """Whole batches from the one holding `offset`: enough to cover about `max_records`
    offsets from it, and at most about `max_bytes` (the first batch always).

    A client asks for up to 50 MB (librdkafka's fetch.max.bytes) but for a few hundred
    records: reading (and checking the CRC of) all that to hand out 500 records made the
    read 90% of a share fetch's cost, growing with the backlog. So the first read is
    small (`READ_FIRST_BYTES`), and each next one is sized from the bytes per record seen
    so far, for the records still wanted, in at most `READS_MAX` reads.

    Transaction markers (control batches) are left out: their offsets are gaps, which the
    share partition archives without delivering (queues/partition.py), as Kafka's share
    groups never hand out control records."""
    spans: list[_Span] = []
    start = max(offset, partition.log_start_offset)
    position, covered, read_bytes = start, 0, 0
    size = min(max_bytes, READ_FIRST_BYTES, max(1, max_records) * record_bytes * 5 // 4)
    for _ in range(READS_MAX):
        view = memoryview(partition.read(position, max(size, 1)).records)
        cursor = 0
        while cursor + HEADER_BYTES <= len(view):
            header = parse_header(view, cursor)
            if cursor + header.size > len(view):
                break
            first, last = header.base_offset, header.base_offset + header.last_offset_delta
            if not header.is_control:
                spans.append(_Span(first, last, view[cursor : cursor + header.size]))
                covered += last - max(first, start) + 1
            cursor += header.size
            position = last + 1
        if cursor == 0:
            break
        read_bytes += cursor
        left = max_bytes - read_bytes
        if covered >= max_records or left <= 0 or position >= partition.high_watermark:
            break
        wanted = (max_records - covered) * read_bytes // max(covered, 1) * 5 // 4
        size = min(max(wanted, READ_FIRST_BYTES), READ_BYTES_MAX, left)
    return spans


def _sort_key(key: ShareKey) -> tuple[str, str, int]:
    return key.group_id, str(key.topic_id), key.partition


def _count_acks(stats: ShareStats, batches: Sequence[AckBatch], errors: Sequence[object]) -> None:
    if errors:
        return  # an approximation: a batch refused is not counted
    for first, last, types in batches:
        kinds = [types] if isinstance(types, int) else list(types)
        each = 1 if len(kinds) > 1 else last - first + 1
        for kind in kinds:
            count = each
            if kind == 1:
                stats.accepted += count
            elif kind == 2:
                stats.released += count
            elif kind == 3:
                stats.rejected += count


def _read_records(
    partition: Partition, offsets: Sequence[int]
) -> Iterator[tuple[int, Record | None]]:
    """The records at these offsets (ascending); None for one the log no longer has."""
    wanted = set(offsets)
    found: dict[int, Record] = {}
    position = offsets[0]
    while wanted - found.keys() and position <= offsets[-1]:
        try:
            read = partition.read(max(position, partition.log_start_offset), 1 << 20)
        except KafkaError:
            break
        view = memoryview(read.records)
        if not view:
            break
        cursor = 0
        while cursor + HEADER_BYTES <= len(view):
            header = parse_header(view, cursor)
            if cursor + header.size > len(view):
                break
            batch = view[cursor : cursor + header.size]
            cursor += header.size
            last = header.base_offset + header.last_offset_delta
            if any(header.base_offset <= offset <= last for offset in wanted):
                for offset, record in decode_full_records(batch):
                    if offset in wanted:
                        found[offset] = record
            position = last + 1
        if cursor == 0:
            break
    for offset in offsets:
        yield offset, found.get(offset)


def _encode_key(key: ShareKey) -> bytes:
    return json.dumps(
        {"group": key.group_id, "topic_id": str(key.topic_id), "partition": key.partition},
        separators=(",", ":"),
    ).encode()


def _decode_key(raw: bytes | None) -> ShareKey:
    if raw is None:
        raise ValueError("a record without a key")
    document = json.loads(raw)
    group_id, topic_id, partition = document["group"], document["topic_id"], document["partition"]
    if not isinstance(group_id, str) or not isinstance(partition, int):
        raise ValueError(f"malformed key {raw!r}")
    return ShareKey(group_id, uuid.UUID(topic_id), partition)


def _encode_value(state: ShareState, *, snapshot: bool) -> bytes:
    document = {"snapshot": snapshot, **state.to_document()}
    return json.dumps(document, separators=(",", ":")).encode()


def _decode_value(raw: bytes) -> tuple[ShareState, bool]:
    document = json.loads(raw)
    if not isinstance(document, dict):
        raise ValueError("a state record must be an object")
    snapshot = bool(document.pop("snapshot", False))
    return ShareState.from_document(document), snapshot


def _view(key: ShareKey, topic: str, entry: _Entry, partition: Partition) -> SharePartitionView:
    share_partition = entry.partition
    counts = dict.fromkeys(RecordState, 0)
    for run in share_partition.ranges():
        counts[run.state] += run.last_offset - run.first_offset + 1
    high_watermark = partition.high_watermark
    fresh = max(0, high_watermark - share_partition.end_offset)
    start = share_partition.start_offset
    oldest = None
    if start < high_watermark and start >= partition.log_start_offset:
        try:
            read = partition.read(start, 1)
            view = memoryview(read.records)
            if len(view) >= HEADER_BYTES:
                header = parse_header(view)
                batch = view[: header.size]
                oldest = next(
                    (ts for offset, ts in record_timestamps(batch) if offset >= start), None
                )
        except KafkaError:
            oldest = None
    return SharePartitionView(
        group_id=key.group_id,
        topic=topic,
        partition=key.partition,
        start_offset=start,
        end_offset=share_partition.end_offset,
        high_watermark=high_watermark,
        available=counts[RecordState.AVAILABLE] + fresh,
        acquired=counts[RecordState.ACQUIRED],
        acknowledged=counts[RecordState.ACKNOWLEDGED],
        archived=counts[RecordState.ARCHIVED],
        oldest_unacknowledged_ms=oldest,
        stats=entry.stats,
    )


def session_partitions(
    pairs: Iterable[tuple[uuid.UUID | None, Iterable[int]]],
) -> list[SessionPartition]:
    return [
        SessionPartition(topic_id, int(index))
        for topic_id, indexes in pairs
        if topic_id is not None
        for index in indexes
    ]
