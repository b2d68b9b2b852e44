"""The group coordinator's services from the broker: its replies, log, timer, and lag.

The coordinator (`weirmq.groups.GroupCoordinator`) is sans-I/O; it needs four things from
the broker, which live here so that no protocol adapter has to provide them:

- delivery of its replies (`GroupReplies`): a JoinGroup or SyncGroup request gets a
  ticket, and every coordinator step returns the replies it produced, addressed to
  tickets; the table here turns each into the result of the asyncio future its request
  awaits. Whoever ran the step delivers them, in one place each: the adapter after a
  request (its own reply is returned to it, so an answer given at once needs no event
  loop), `GroupTimer` after a tick, `Broker.wake_all` on shutdown;

- its log, the internal topic `__consumer_offsets` (one partition, kept compact by the
  coordinator's snapshots, see `OffsetsLog`), written through a `Partition` like any
  other write, so readers waiting on it wake and statistics count it;
- a timer (`GroupTimer`): one callback on the broker's `Timers` at the coordinator's next
  deadline (rebalance deadline, session expiry), moved whenever a request changes it;
- the log ends of the partitions a group committed, for its lag (`group_lag`).

Nothing here imports a protocol: the Kafka adapter (protocols/kafka/apis/groups.py)
translates requests into coordinator calls and uses these services.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable

from ..errors import KafkaError
from ..groups.classic import GroupReply, GroupResult
from ..groups.coordinator import GroupCoordinator
from ..groups.views import PartitionLag
from ..records.batch import Record, decode_records, encode_batch
from ..storage.errors import StorageError
from ..types import Clock, Timer, Timers
from .partition import Partition
from .scan import scan_batches
from .timers import UNSCHEDULED

log = logging.getLogger(__name__)


class GroupReplies:
    """Tickets of JoinGroup and SyncGroup requests, and the futures of those that wait.

    A request takes a `ticket()` and hands it to the coordinator. If the step's replies
    answer it, `deliver(replies, own=ticket)` returns its result at once; otherwise the
    request awaits `wait(ticket)`, registered before control returns to the loop, so no
    later step can answer a ticket nobody awaits. A request whose connection closed is
    `cancel`led (or its future cancelled with its task): a reply that comes for it later
    finds no pending future and is dropped. Every ticket the coordinator keeps is answered
    in the end (barrier, deadline, departure, or shutdown), so none stays here forever.
    """

    def __init__(self) -> None:
        self._tickets = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[GroupResult]] = {}

    def ticket(self) -> int:
        """A new ticket, for one JoinGroup or SyncGroup request."""
        return next(self._tickets)

    def deliver(
        self, replies: Iterable[GroupReply], *, own: int | None = None
    ) -> GroupResult | None:
        """Settle the futures these replies answer; the result for ticket `own` (the
        caller's request, which does not wait yet) is returned instead, None if there
        is none."""
        result: GroupResult | None = None
        for reply in replies:
            if reply.ticket == own:
                result = reply.result
                continue
            future = self._waiting.pop(reply.ticket, None)
            if future is not None and not future.done():
                future.set_result(reply.result)
        return result

    def wait(self, ticket: int) -> asyncio.Future[GroupResult]:
        """The future the request holding `ticket` awaits (on the running loop)."""
        assert ticket not in self._waiting, f"ticket {ticket} already waits"
        future: asyncio.Future[GroupResult] = asyncio.get_running_loop().create_future()
        self._waiting[ticket] = future
        return future

    def cancel(self, ticket: int) -> None:
        """Forget the request holding `ticket` (answered, or gone with its connection)."""
        future = self._waiting.pop(ticket, None)
        if future is not None:
            future.cancel()

    @property
    def waiting(self) -> int:
        """How many requests await a reply."""
        return len(self._waiting)


class GroupTimer:
    """Calls the coordinator's `tick` at its next deadline and delivers its replies; see
    the module docstring."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        replies: GroupReplies,
        clock: Clock,
        timers: Timers,
    ) -> None:
        self._coordinator = coordinator
        self._replies = replies
        self._clock = clock
        self._timers = timers
        self._handle: Timer | None = None
        self._when_ms: int | None = None

    def poke(self) -> None:
        """Reschedule after a change; cheap when the next deadline did not move earlier."""
        deadline = self._coordinator.next_deadline_ms()
        if deadline is None:
            self.cancel()
            return
        if self._handle is not None and self._when_ms is not None and self._when_ms <= deadline:
            return  # fires earlier than needed at worst; _fire reschedules
        self.cancel()
        handle = self._timers.call_at(deadline, self._fire)
        if handle is UNSCHEDULED:  # tests that drive the coordinator without a loop
            return
        self._handle, self._when_ms = handle, deadline

    def _fire(self) -> None:
        self._handle = self._when_ms = None
        try:
            self._replies.deliver(self._coordinator.tick(self._clock()))
        except Exception:
            log.exception("group coordinator tick failed")
        self.poke()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._when_ms = None


OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS = {
    # Retention must never delete live offsets: the coordinator compacts this log itself.
    "cleanup.policy": "compact",
    # Small segments, so that moving the log start after a snapshot frees the space.
    "segment.bytes": str(8 << 20),
}
COMPACT_MIN_BYTES = 32 << 20
"""The log is compacted only past this size, and past `COMPACT_RATIO` x its live size."""
COMPACT_RATIO = 4
BATCH_RECORDS_MAX = 512
"""Records per batch written: snapshots of many groups stay under max.message.bytes."""


class OffsetsLog:
    """The coordinator's log: the internal topic `__consumer_offsets`, partition 0.

    Created on the first write (as Kafka creates it on first use), so a broker that never
    sees a group has no such topic. Compaction: when the log has grown past
    `COMPACT_MIN_BYTES` and `COMPACT_RATIO` times the size of the last snapshot, the
    coordinator's whole state is appended as a snapshot and the log start moved to it
    (see groups/coordinator.py for why a crash midway is harmless). It runs from the
    loop after the request that crossed the threshold, never inside a write: the change
    being written is not applied to the coordinator's state until the write returns.
    """

    def __init__(
        self,
        coordinator: GroupCoordinator,
        partition: Callable[[bool], Partition | None],
        clock: Clock,
    ) -> None:
        self._coordinator = coordinator
        self._partition = partition
        """The log's partition; created (as an internal topic) when the argument is True."""
        self._clock = clock
        self._live_bytes = 0
        """Size of the last snapshot; unknown (0) until the first compaction."""
        self._compaction_scheduled = False

    def load(self) -> None:
        """Replay the log into the coordinator, then open it for requests."""
        coordinator = self._coordinator
        partition = self._partition(False)
        records = 0
        if partition is not None and partition.offline_reason is None:
            now = self._clock()
            try:
                for batch in scan_batches(partition.log, partition.log_start_offset):
                    for _offset, key, value in decode_records(batch):
                        records += 1
                        try:
                            coordinator.replay(key, value, now)
                        except ValueError as exc:
                            log.error("%s: skipping a malformed record: %s", OFFSETS_TOPIC, exc)
            except (StorageError, KafkaError) as exc:
                log.error("%s: replay stopped early: %s", OFFSETS_TOPIC, exc)
        coordinator.finish_loading()
        if records:
            log.info(
                "loaded %d group(s) from %d record(s) of %s",
                len(coordinator.groups),
                records,
                OFFSETS_TOPIC,
            )

    def write(self, pairs: list[tuple[bytes, bytes | None]]) -> None:
        """Append records (raises KafkaError when the log refuses them)."""
        partition = self._partition(True)
        assert partition is not None
        now = self._clock()
        for start in range(0, len(pairs), BATCH_RECORDS_MAX):
            chunk = pairs[start : start + BATCH_RECORDS_MAX]
            partition.append_internal(
                encode_batch([Record(value, key, (), now) for key, value in chunk])
            )
        if partition.log.size_bytes > max(COMPACT_MIN_BYTES, COMPACT_RATIO * self._live_bytes):
            self._schedule_compaction()

    def _schedule_compaction(self) -> None:
        if self._compaction_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._compaction_scheduled = True
        loop.call_soon(self.compact)

    def compact(self) -> None:
        """Append the coordinator's state as a snapshot and drop everything before it."""
        self._compaction_scheduled = True  # the snapshot's own writes schedule no other
        partition = self._partition(True)
        assert partition is not None
        partition_log = partition.log
        start = partition_log.log_end_offset
        size_before = partition_log.size_bytes
        pairs = list(self._coordinator.snapshot())
        try:
            if pairs:
                self.write(pairs)
            self._live_bytes = partition_log.size_bytes - size_before
            partition_log.advance_log_start(start)
        except KafkaError as exc:
            log.error("%s: compaction failed: %s", OFFSETS_TOPIC, exc)
            return
        finally:
            self._compaction_scheduled = False
        log.info(
            "%s compacted: %d bytes before, log start now %d",
            OFFSETS_TOPIC,
            size_before,
            start,
        )

    def end_offset(self) -> int:
        partition = self._partition(False)
        return 0 if partition is None else partition.log_end_offset

    async def durable(self, end: int) -> None:
        partition = self._partition(False)
        if partition is not None:
            await partition.durable(end)


def group_lag(
    coordinator: GroupCoordinator,
    partition_of: Callable[[str, int], Partition | None],
    group_id: str,
) -> list[PartitionLag]:
    """Lag of every partition the group has committed or owns: high watermark -
    committed offset."""
    view = coordinator.view(group_id)
    owners = {tp: m.member_id for m in (view.members if view else ()) for tp in m.assignment}
    committed = coordinator.committed(group_id)
    result = []
    for tp in sorted(set(committed) | set(owners)):
        topic, partition = tp
        found = partition_of(topic, partition)
        end = -1 if found is None else found.high_watermark
        offset = committed.get(tp, -1)
        lag = end - offset if end >= 0 and offset >= 0 else None
        result.append(PartitionLag(topic, partition, offset, end, lag, owners.get(tp)))
    return result


# Re-exported for the admin API, which may import only weirmq.broker (see
# tests/test_import_rules.py): the read-only views it turns into JSON and metrics.
from ..groups.coordinator import CommitRequest as CommitRequest  # noqa: E402
from ..groups.views import GroupView as GroupView  # noqa: E402
from ..groups.views import MemberView as MemberView  # noqa: E402
