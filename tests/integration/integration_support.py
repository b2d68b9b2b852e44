"""Helpers the integration tests share: deadlines, payloads, confluent-kafka plumbing.

Kept out of conftest.py because test modules import these names, and a conftest cannot be
imported reliably (tests/ holds several conftest.py files and no packages).

Messages are identified by a sequence number ``seq``. Everything about message ``seq``
(key, value, headers, timestamp) is a pure function of it, so a test that sends 100,000
messages keeps only the delivery report of each one and recomputes the rest to compare.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

# A fixed CreateTime base (2024-01-01T00:00:00Z) makes the expected timestamps exact.
BASE_TIMESTAMP_MS = 1_704_067_200_000


class Deadline:
    """A time budget for one step of a test, so that a hang fails instead of blocking CI."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self._end = time.monotonic() + seconds

    def remaining(self, cap_s: float | None = None) -> float:
        left = max(0.0, self._end - time.monotonic())
        return left if cap_s is None else min(left, cap_s)

    def expired(self) -> bool:
        return time.monotonic() >= self._end

    def check(self, progress: str = "") -> None:
        if self.expired():
            detail = f" ({progress})" if progress else ""
            raise AssertionError(f"{self.what}: not done after {self.seconds:.0f} s{detail}")


def payload(seq: int, size: int) -> bytes:
    """The value of message ``seq``: ``size`` bytes, different for every ``seq``."""
    stamp = b"%010d|" % seq
    return (stamp * (size // len(stamp) + 1))[:size]


def headers_for(seq: int) -> list[tuple[str, bytes]]:
    return [("seq", b"%d" % seq), ("origin", b"weirmq-integration")]


def timestamp_for(seq: int) -> int:
    return BASE_TIMESTAMP_MS + seq


def seq_of(headers: Iterable[tuple[str, bytes]] | None) -> int:
    """The ``seq`` header of a consumed message (list or tuple of (str, bytes) pairs)."""
    assert headers, f"message without headers: {headers!r}"
    for name, value in headers:
        if name == "seq":
            return int(value)
    raise AssertionError(f"message without a seq header: {headers!r}")


class ErrorLog:
    """Thread-safe record of every error a client reported through a callback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[str] = []

    def add(self, text: str) -> None:
        with self._lock:
            self._items.append(text)

    def error_cb(self, error: KafkaError) -> None:
        self.add(f"error_cb: {error.name()}: {error.str()}")

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self._items)


@dataclass
class DeliveryLog:
    """Delivery reports of one confluent-kafka producer, by message ``seq``."""

    where: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> (partition, offset)
    failed: dict[int, int] = field(default_factory=dict)  # seq -> KafkaError code
    errors: list[str] = field(default_factory=list)

    def callback(self, seq: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                self.failed[seq] = error.code()
                self.errors.append(f"seq {seq}: {error.name()}: {error.str()}")
            elif seq in self.where:
                self.errors.append(f"seq {seq}: second delivery report")
            else:
                self.where[seq] = (message.partition(), message.offset())

        return on_delivery

    def count_by_partition(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for partition, _ in self.where.values():
            counts[partition] = counts.get(partition, 0) + 1
        return counts


def producer_config(bootstrap: str, errors: ErrorLog, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "error_cb": errors.error_cb, **extra}


def consumer_config(bootstrap: str, errors: ErrorLog, **extra: object) -> dict[str, object]:
    """A consumer that only ever uses ``assign()``.

    confluent-kafka refuses to build a Consumer without ``group.id`` ("group.id must be
    set"), even for assign-only use. The id is never used for a group: no subscribe, no
    commits, no stored offsets. ``auto.offset.reset=error`` turns an unexpected
    OFFSET_OUT_OF_RANGE into a visible error instead of a silent jump.
    """
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "weirmq-integration-assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "error_cb": errors.error_cb,
        **extra,
    }


def produce_with_backpressure(produce: Callable[[], None], poll: Callable[[float], int]) -> None:
    """Call ``produce``; while librdkafka's local queue is full, serve callbacks and retry."""
    while True:
        try:
            produce()
            return
        except BufferError:
            poll(0.05)


def consume_from_beginning(
    consumer: Consumer,
    topic: str,
    expected: Mapping[int, int],
    deadline: Deadline,
    on_message: Callable[[Message], None],
) -> dict[int, int]:
    """Assign ``expected``'s partitions from the beginning; read ``expected[p]`` records each.

    Returns how many records were read per partition. Fails on a consumer error or when
    the deadline passes first.
    """
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in expected])
    counts = dict.fromkeys(expected, 0)
    while any(counts[p] < n for p, n in expected.items()):
        deadline.check(f"read {counts} of {dict(expected)} records per partition")
        for message in consumer.consume(num_messages=1000, timeout=deadline.remaining(1.0)):
            error = message.error()
            if error is not None:
                raise AssertionError(f"consumer error: {error.name()}: {error.str()}")
            counts[message.partition()] += 1
            on_message(message)
    return counts


def high_watermarks(consumer: Consumer, topic: str, partitions: list[int]) -> dict[int, int]:
    """The broker's high watermark of each partition (a ListOffsets round trip)."""
    marks = {}
    for p in partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        marks[p] = high
    return marks


# -- consumer groups -----------------------------------------------------------------------------
#
# The group tests watch a group the same way, whatever the client: each member reports its
# rebalance callbacks, the records it consumed and the offsets the broker acknowledged as
# committed to one GroupTracker. The tracker checks the group's promises as the events come in
# and answers the tests' questions ("does every member hold partitions yet?"). A producer
# thread writes during the whole test, so every rebalance happens with records in flight.

GROUP_SETTINGS: dict[str, object] = {
    # No wait for more members before the first rebalance, and sessions short enough that a
    # killed member is noticed within seconds rather than a minute.
    "group_initial_rebalance_delay_ms": 0,
    "group_min_session_timeout_ms": 1000,
    "group_consumer_session_timeout_ms": 6000,
    "group_consumer_heartbeat_interval_ms": 500,
}
CLASSIC_SESSION_TIMEOUT_MS = 6000
CLASSIC_HEARTBEAT_INTERVAL_MS = 500  # members notice a rebalance within half a second
GROUP_STEP_TIMEOUT_S = 40.0
ADMIN_TIMEOUT_S = 30.0

Record = tuple[int, int, int]  # (partition, offset, seq) of one consumed record


def create_topic(
    bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs or {})
    admin.create_topics([new])[topic].result(ADMIN_TIMEOUT_S)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition, through the AdminClient (OffsetFetch);
    OFFSET_INVALID (-1001) where nothing is committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)]
    )
    result = admin.list_consumer_group_offsets([request])[group].result(ADMIN_TIMEOUT_S)
    offsets = {}
    for tp in result.topic_partitions:
        assert tp.error is None, f"{group}: {topic} [{tp.partition}]: {tp.error}"
        offsets[tp.partition] = tp.offset
    return offsets


class GroupTracker:
    """Everything the members of one group did, and each broken promise of the group.

    Members report from their own threads (a test may also replay a member process's events
    into it with ``apply``). The tracker keeps the member that holds each partition right
    now: set by an assignment callback, cleared by a revocation, a loss, or ``released`` (the
    member stopped consuming for good, e.g. it was killed). When ``strict``, it checks as
    events arrive that

    - a partition is never assigned to a member while another one still holds it;
    - a member consumes only records of partitions it holds;
    - the first record a member reads after being assigned a partition sits exactly at the
      last commit the broker acknowledged for it (0 when none), or at a commit still in
      flight (``committing``, not yet answered: with aiokafka and kafka-python the
      rebalance runs while the member awaits its commit): a handover neither skips
      committed records nor goes back before them.

    Duplicates are not errors (a batch whose commit lost the race with a rebalance is read
    again by the next holder), so they are not counted.
    """

    def __init__(self, *, strict: bool = True, check_resume: bool = True) -> None:
        self.strict = strict
        self.check_resume = check_resume
        self._lock = threading.Lock()
        self._owner: dict[int, str] = {}
        self._commits: dict[int, int] = {}
        self._in_flight: dict[str, list[tuple[int, int]]] = {}
        self._awaiting_first: set[tuple[str, int]] = set()
        self._history: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
        self._consumed: dict[str, list[Record]] = {}
        self._seqs: set[int] = set()
        self.violations: list[str] = []
        self.errors: list[str] = []
        self.commit_failures: list[str] = []

    # -- events: each names the member first ------------------------------------------------

    def assigned(self, member: str, partitions: Iterable[int]) -> None:
        parts = tuple(sorted(partitions))
        with self._lock:
            self._history.setdefault(member, []).append(("assigned", parts))
            for p in parts:
                holder = self._owner.get(p)
                if holder is not None and holder != member:
                    self._violate(f"partition {p} assigned to {member} while {holder} holds it")
                self._owner[p] = member
                self._awaiting_first.add((member, p))

    def revoked(self, member: str, partitions: Iterable[int]) -> None:
        self._release(member, "revoked", partitions)

    def lost(self, member: str, partitions: Iterable[int]) -> None:
        self._release(member, "lost", partitions)

    def released(self, member: str, why: str) -> None:
        """``member`` consumes nothing more (closing, or killed): it holds nothing."""
        with self._lock:
            held = [p for p, holder in self._owner.items() if holder == member]
        self._release(member, f"released ({why})", held)

    def consumed(self, member: str, records: Iterable[Sequence[int]]) -> None:
        with self._lock:
            mine = self._consumed.setdefault(member, [])
            for partition, offset, seq in records:
                self._check_consumed(member, partition, offset)
                mine.append((partition, offset, seq))
                self._seqs.add(seq)

    def committing(self, member: str, offsets: Iterable[Sequence[int]]) -> None:
        """``member`` sends a commit of these (partition, offset) pairs; no answer yet."""
        with self._lock:
            self._in_flight[member] = [(p, o) for p, o in offsets]

    def committed(self, member: str, offsets: Iterable[Sequence[int]]) -> None:
        """The broker acknowledged ``member``'s commit of these (partition, offset) pairs."""
        with self._lock:
            self._in_flight.pop(member, None)
            for partition, offset in offsets:
                self._commits[partition] = offset

    def commit_failed(self, member: str, text: str) -> None:
        """A commit refused because the group was rebalancing: allowed, and remembered."""
        with self._lock:
            self._in_flight.pop(member, None)
            self.commit_failures.append(f"{member}: {text}")

    def error(self, member: str, text: str) -> None:
        with self._lock:
            self.errors.append(f"{member}: {text}")

    def apply(self, event: Mapping[str, Any]) -> None:
        """Replay one event of a member process: ``{"kind": ..., "member": ..., "data": ...}``."""
        assert event["kind"] in EVENT_KINDS, event
        getattr(self, event["kind"])(event["member"], event["data"])

    # -- questions ---------------------------------------------------------------------------

    def holdings(self) -> dict[str, set[int]]:
        with self._lock:
            held: dict[str, set[int]] = {}
            for p, holder in self._owner.items():
                held.setdefault(holder, set()).add(p)
            return held

    def stable(self, members: Iterable[str], partitions: int) -> bool:
        """Every partition is held, each of ``members`` holds some and nobody else holds any."""
        held = self.holdings()
        owned = set().union(*held.values()) if held else set()
        return owned == set(range(partitions)) and set(held) == set(members)

    def history(self, member: str) -> list[tuple[str, tuple[int, ...]]]:
        with self._lock:
            return list(self._history.get(member, []))

    def count(self, member: str) -> int:
        with self._lock:
            return len(self._consumed.get(member, []))

    def consumed_by(self, member: str) -> list[Record]:
        with self._lock:
            return list(self._consumed.get(member, []))

    def seqs(self) -> set[int]:
        with self._lock:
            return set(self._seqs)

    def records(self) -> list[tuple[str, Record]]:
        with self._lock:
            return [(m, r) for m, records in self._consumed.items() for r in records]

    def raise_if_broken(self) -> None:
        """Fail at once on a broken promise or a client error, rather than at a deadline."""
        with self._lock:
            assert not self.violations, f"group promises broken: {self.violations[:10]}"
            assert not self.errors, f"client errors: {self.errors[:10]}"

    # -- internals ---------------------------------------------------------------------------

    def _release(self, member: str, kind: str, partitions: Iterable[int]) -> None:
        parts = tuple(sorted(partitions))
        with self._lock:
            self._history.setdefault(member, []).append((kind, parts))
            for p in parts:
                if self._owner.get(p) == member:
                    del self._owner[p]
                self._awaiting_first.discard((member, p))

    def _check_consumed(self, member: str, partition: int, offset: int) -> None:
        holder = self._owner.get(partition)
        if holder != member:
            self._violate(f"{member} read {partition}@{offset} while {holder} held the partition")
        if (member, partition) in self._awaiting_first:
            self._awaiting_first.discard((member, partition))
            if not self.check_resume:
                return
            expected = self._commits.get(partition, 0)
            in_flight = {
                o for pairs in self._in_flight.values() for p, o in pairs if p == partition
            }
            if offset != expected and offset not in in_flight:
                self._violate(
                    f"{member} took over partition {partition} at offset {offset}; "
                    f"the last acknowledged commit was {expected}, in flight {in_flight or '-'}"
                )

    def _violate(self, text: str) -> None:
        if self.strict:
            self.violations.append(text)


EVENT_KINDS = frozenset(
    {
        "assigned",
        "revoked",
        "lost",
        "released",
        "consumed",
        "committing",
        "committed",
        "commit_failed",
        "error",
    }
)


def wait_for_group(
    tracker: GroupTracker, condition: Callable[[], bool], deadline: Deadline, what: str
) -> None:
    """Poll ``condition`` until it holds; fail on a broken promise, or at the deadline."""
    while True:
        tracker.raise_if_broken()
        if condition():
            return
        deadline.check(f"{what}; partitions held: {tracker.holdings()}")
        time.sleep(0.05)


def wait_stable_and_reading(
    tracker: GroupTracker,
    members: list[str],
    partitions: int,
    deadline: Deadline,
    records: int = 20,
) -> None:
    """Wait until ``members`` share all partitions, then until each has read ``records`` more."""
    wait_for_group(
        tracker,
        lambda: tracker.stable(members, partitions),
        deadline,
        f"{members} sharing {partitions} partitions",
    )
    start = {m: tracker.count(m) for m in members}
    wait_for_group(
        tracker,
        lambda: all(tracker.count(m) >= start[m] + records for m in members),
        deadline,
        f"each of {members} reading {records} records after the rebalance, from {start}",
    )


class ContinuousProducer:
    """Produces seq 0, 1, 2, ... round-robin over a topic's partitions, about ``rate_per_s``
    records a second, from its own thread until ``stop()``.

    ``stop()`` flushes, checks that every record was acknowledged and returns the delivery
    reports; ``halt()`` only stops the thread (cleanup after a failure).
    """

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, *, rate_per_s: int = 500
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.errors = ErrorLog()
        self.deliveries = DeliveryLog()
        self.sent = 0
        self._per_tick = max(1, rate_per_s // 50)  # ticks of 20 ms
        self._unflushed = -1
        self._producer = Producer(
            producer_config(bootstrap, self.errors, **{"acks": "all", "linger.ms": 5})
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> DeliveryLog:
        self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"producer still flushing after {timeout_s:.0f} s"
        assert self._unflushed == 0, f"{self._unflushed} records never acknowledged"
        assert self.deliveries.errors == [], self.deliveries.errors[:10]
        assert self.errors.snapshot() == [], self.errors.snapshot()[:10]
        assert len(self.deliveries.where) == self.sent
        return self.deliveries

    def halt(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        tick_s = 0.02
        next_tick = time.monotonic()
        while not self._stop.is_set():
            for _ in range(self._per_tick):
                self._produce(self.sent)
                self.sent += 1
            self._producer.poll(0)
            next_tick += tick_s
            self._stop.wait(max(0.0, next_tick - time.monotonic()))
        self._unflushed = self._producer.flush(30.0)

    def _produce(self, seq: int) -> None:
        produce_with_backpressure(
            lambda: self._producer.produce(
                self.topic,
                value=payload(seq, 100),
                headers=headers_for(seq),
                partition=seq % self.partitions,
                on_delivery=self.deliveries.callback(seq),
            ),
            self._producer.poll,
        )


class MemberThread:
    """One group member: ``body(stop)`` runs in a daemon thread until ``leave()`` sets ``stop``.

    An exception in the body is reported to the tracker as the member's error.
    """

    def __init__(
        self, name: str, body: Callable[[threading.Event], None], tracker: GroupTracker
    ) -> None:
        self.name = name
        self._body = body
        self._tracker = tracker
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> MemberThread:
        self._thread.start()
        return self

    def leave(self, timeout_s: float = GROUP_STEP_TIMEOUT_S) -> None:
        """Stop consuming and close (which leaves the group); fail if that takes too long."""
        self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"{self.name} still closing after {timeout_s:.0f} s"

    def halt(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        try:
            self._body(self._stop)
        except BaseException:
            self._tracker.error(self.name, traceback.format_exc())


def run_join_leave(
    tracker: GroupTracker,
    producer: ContinuousProducer,
    start_member: Callable[[str], MemberThread],
    *,
    members: int,
    deadline: Deadline,
) -> DeliveryLog:
    """The join/leave scenario, with ``producer`` writing all along.

    Members join one after another; after each join the group must settle (every member
    holds partitions, all partitions are held) and every member must read. Then all but the
    last leave in the order they joined, with the same check after each leave. The producer
    stops; the last member reads everything it was told about, then leaves too.
    """
    running: list[MemberThread] = []
    try:
        for number in range(members):
            running.append(start_member(f"member-{number}"))
            names = [m.name for m in running]
            wait_stable_and_reading(tracker, names, producer.partitions, deadline)
        while len(running) > 1:
            running.pop(0).leave(deadline.remaining())
            names = [m.name for m in running]
            wait_stable_and_reading(tracker, names, producer.partitions, deadline)
        deliveries = producer.stop(deadline.remaining())
        produced = set(deliveries.where)
        wait_for_group(
            tracker,
            lambda: tracker.seqs() >= produced,
            deadline,
            f"the last member reading the rest of {len(produced)} records",
        )
        running.pop().leave(deadline.remaining())
        return deliveries
    finally:
        for member in running:
            member.halt()
        producer.halt()


def assert_every_record_consumed(tracker: GroupTracker, deliveries: DeliveryLog) -> None:
    """No broken promise, no client error, and every acknowledged record read at least once,
    where the producer was told it was written."""
    assert tracker.violations == [], tracker.violations[:20]
    assert tracker.errors == [], tracker.errors[:10]
    for member, (partition, offset, seq) in tracker.records():
        where = deliveries.where.get(seq)
        assert where == (partition, offset), (
            f"{member} read seq {seq} at {(partition, offset)}; the producer was told {where}"
        )
    missing = set(deliveries.where) - tracker.seqs()
    assert not missing, f"{len(missing)} acknowledged records never read: {sorted(missing)[:20]}"


def produce_per_partition(bootstrap: str, topic: str, partitions: int, count: int) -> DeliveryLog:
    """``count`` records into each partition, all acknowledged: seq = partition * count + i."""
    errors, deliveries = ErrorLog(), DeliveryLog()
    producer = Producer(producer_config(bootstrap, errors, acks="all"))
    for partition in range(partitions):
        for i in range(count):
            seq = partition * count + i
            producer.produce(
                topic,
                value=payload(seq, 50),
                headers=headers_for(seq),
                partition=partition,
                on_delivery=deliveries.callback(seq),
            )
    assert producer.flush(ADMIN_TIMEOUT_S) == 0, "records left unacknowledged"
    assert deliveries.errors == [], deliveries.errors[:10]
    assert errors.snapshot() == [], errors.snapshot()[:10]
    return deliveries


def member_config(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    """Manual commits; a group without commits starts at the beginning of each partition."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **extra,
    }


def subscribed_consumer(bootstrap: str, group: str, topic: str, **extra: object) -> Consumer:
    """A confluent-kafka member of ``group`` (no commits unless asked), subscribed to ``topic``."""
    errors = ErrorLog()
    consumer = Consumer(member_config(bootstrap, group, error_cb=errors.error_cb, **extra))
    consumer.subscribe([topic])
    return consumer


def first_offsets(
    bootstrap: str, group: str, topic: str, partitions: int, deadline: Deadline, **extra: object
) -> dict[int, int]:
    """Where a new member of ``group`` starts reading each partition; it commits nothing."""
    consumer = subscribed_consumer(bootstrap, group, topic, **extra)
    first: dict[int, int] = {}
    try:
        while len(first) < partitions:
            deadline.check(f"a first record from each partition, have {first}")
            for message in consumer.consume(num_messages=500, timeout=0.2):
                error = message.error()
                assert error is None, f"{error.name()}: {error.str()}"
                first.setdefault(message.partition(), message.offset())
    finally:
        consumer.close()
    return first
