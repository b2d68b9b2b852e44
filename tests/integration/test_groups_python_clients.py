"""Consumer groups with kafka-python 3.0 and aiokafka 0.14 against a real broker process.

The join/leave scenario of test_groups_confluent.py with each library's own group consumer
(classic protocol, their default assignors), a producer writing all along and commits after
processing; then commit, close, and a new consumer of the group resuming exactly there.

Each aiokafka member runs its own event loop in its own thread, so the same scenario drives
both libraries.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import ConsumerRebalanceListener as AioRebalanceListener
from aiokafka import errors as aio_errors
from aiokafka.structs import TopicPartition as AioTopicPartition
from integration_support import (
    CLASSIC_HEARTBEAT_INTERVAL_MS,
    CLASSIC_SESSION_TIMEOUT_MS,
    GROUP_SETTINGS,
    ContinuousProducer,
    Deadline,
    GroupTracker,
    MemberThread,
    assert_every_record_consumed,
    committed_offsets,
    create_topic,
    produce_per_partition,
    run_join_leave,
    seq_of,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

# kafka-python 3.0 loads its protocol schemas with a deprecated importlib.resources call (see
# test_python_clients.py); ignore exactly that, here and while its clients run.
KAFKA_PYTHON_RESOURCE_WARNINGS = r"(read_text|open_text) is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=KAFKA_PYTHON_RESOURCE_WARNINGS, category=DeprecationWarning
    )
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
    from kafka import errors as kafka_errors
    from kafka.structs import TopicPartition as KafkaTopicPartition

pytestmark = pytest.mark.filterwarnings(
    f"ignore:{KAFKA_PYTHON_RESOURCE_WARNINGS}:DeprecationWarning"
)

PARTITIONS = 6
MEMBERS = 3
SCENARIO_BUDGET_S = 90
RESUME_PARTITIONS = 3
RESUME_RECORDS = 20
LAST_COMMITS = {0: 7, 1: 15, 2: 3}
POLL_TIMEOUT_MS = 200

# Commits refused because the group moved on: the next holder reads those records again.
KAFKA_PYTHON_REBALANCE_ERRORS = (
    kafka_errors.CommitFailedError,
    kafka_errors.RebalanceInProgressError,
    kafka_errors.IllegalGenerationError,
    kafka_errors.UnknownMemberIdError,
)
AIOKAFKA_REBALANCE_ERRORS = (
    aio_errors.CommitFailedError,
    aio_errors.RebalanceInProgressError,
    aio_errors.IllegalGenerationError,
    aio_errors.UnknownMemberIdError,
)


@pytest.fixture
def group_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(**GROUP_SETTINGS)


def records_of(batches: dict[Any, list[Any]]) -> list[tuple[int, int, int]]:
    """(partition, offset, seq) of every record of a kafka-python or aiokafka poll."""
    return [(r.partition, r.offset, seq_of(r.headers)) for rs in batches.values() for r in rs]


def next_offsets(records: list[tuple[int, int, int]]) -> dict[int, int]:
    offsets: dict[int, int] = {}
    for partition, offset, _ in records:
        offsets[partition] = max(offsets.get(partition, 0), offset + 1)
    return offsets


# -- kafka-python --------------------------------------------------------------------------------


class KafkaPythonListener(ConsumerRebalanceListener):
    def __init__(self, name: str, tracker: GroupTracker) -> None:
        self.name = name
        self.tracker = tracker

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.tracker.revoked(self.name, [tp.partition for tp in revoked])

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.tracker.assigned(self.name, [tp.partition for tp in assigned])

    def on_partitions_lost(self, lost: Any) -> None:
        self.tracker.lost(self.name, [tp.partition for tp in lost])


def kafka_python_consumer(bootstrap: str, group: str, name: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=CLASSIC_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=CLASSIC_HEARTBEAT_INTERVAL_MS,
    )


def kafka_python_subscribe(
    consumer: KafkaConsumer, topic: str, listener: ConsumerRebalanceListener | None = None
) -> None:
    """Subscribe, then wait for a metadata refresh that knows the subscription.

    kafka-python 3.0 may join the group before its first metadata refresh after subscribe()
    (refreshes are at least retry_backoff_ms apart): the leader then assigns nothing, and
    rejoins when the metadata arrives; when that second join completes while no poll() is
    waiting for it, the client drops the assignment it brought (the member holds nothing,
    for good). A blocking refresh before the first poll() avoids that client bug; the
    broker only sees one more Metadata request.
    """
    consumer.subscribe([topic], listener=listener)
    assert topic in consumer.topics(), f"no metadata for {topic}"


def kafka_python_member(
    bootstrap: str, group: str, topic: str, name: str, tracker: GroupTracker
) -> MemberThread:
    def body(stop: threading.Event) -> None:
        consumer = kafka_python_consumer(bootstrap, group, name)
        kafka_python_subscribe(consumer, topic, KafkaPythonListener(name, tracker))
        try:
            while not stop.is_set():
                records = records_of(consumer.poll(timeout_ms=POLL_TIMEOUT_MS))
                if records:
                    tracker.consumed(name, records)
                    kafka_python_commit(consumer, topic, name, next_offsets(records), tracker)
        finally:
            consumer.close(autocommit=False)  # revokes through the listener, then leaves
            tracker.released(name, "closed")

    return MemberThread(name, body, tracker).start()


def kafka_python_commit(
    consumer: KafkaConsumer, topic: str, name: str, offsets: dict[int, int], tracker: GroupTracker
) -> None:
    request = {
        KafkaTopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()
    }
    tracker.committing(name, sorted(offsets.items()))
    try:
        consumer.commit(request)
    except KAFKA_PYTHON_REBALANCE_ERRORS as exc:
        tracker.commit_failed(name, f"commit {offsets}: {exc!r}")
        return
    tracker.committed(name, sorted(offsets.items()))


# -- aiokafka ------------------------------------------------------------------------------------


class AioListener(AioRebalanceListener):
    def __init__(self, name: str, tracker: GroupTracker) -> None:
        self.name = name
        self.tracker = tracker

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.tracker.revoked(self.name, [tp.partition for tp in revoked])

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.tracker.assigned(self.name, [tp.partition for tp in assigned])


def aiokafka_consumer(bootstrap: str, group: str, name: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=CLASSIC_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=CLASSIC_HEARTBEAT_INTERVAL_MS,
    )


async def aiokafka_loop(
    bootstrap: str,
    group: str,
    topic: str,
    name: str,
    tracker: GroupTracker,
    stop: threading.Event,
) -> None:
    consumer = aiokafka_consumer(bootstrap, group, name)
    await consumer.start()
    try:
        consumer.subscribe([topic], listener=AioListener(name, tracker))
        while not stop.is_set():
            records = records_of(await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS))
            if not records:
                continue
            tracker.consumed(name, records)
            offsets = next_offsets(records)
            tracker.committing(name, sorted(offsets.items()))
            try:
                await consumer.commit({AioTopicPartition(topic, p): o for p, o in offsets.items()})
            except AIOKAFKA_REBALANCE_ERRORS as exc:
                tracker.commit_failed(name, f"commit {offsets}: {exc!r}")
            else:
                tracker.committed(name, sorted(offsets.items()))
    finally:
        # aiokafka's stop() leaves the group without calling the listener: the member
        # gives its partitions up first, so nobody is seen taking them over too early.
        tracker.released(name, "closing")
        await consumer.stop()


def aiokafka_member(
    bootstrap: str, group: str, topic: str, name: str, tracker: GroupTracker
) -> MemberThread:
    def body(stop: threading.Event) -> None:
        asyncio.run(aiokafka_loop(bootstrap, group, topic, name, tracker, stop))

    return MemberThread(name, body, tracker).start()


# -- tests ---------------------------------------------------------------------------------------

MEMBER_KINDS = {"kafka-python": kafka_python_member, "aiokafka": aiokafka_member}


@pytest.mark.parametrize("client", list(MEMBER_KINDS))
def test_members_join_and_leave_while_producing(group_broker: BrokerProcess, client: str) -> None:
    broker = group_broker
    group, topic = f"{client}-join-leave", f"{client}-join-leave-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    tracker = GroupTracker()
    producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS).start()
    make_member = MEMBER_KINDS[client]

    def start(name: str) -> MemberThread:
        return make_member(broker.bootstrap, group, topic, name, tracker)

    deadline = Deadline(SCENARIO_BUDGET_S, f"{client} join/leave scenario")
    deliveries = run_join_leave(tracker, producer, start, members=MEMBERS, deadline=deadline)

    assert_every_record_consumed(tracker, deliveries)
    end_offsets = deliveries.count_by_partition()
    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == end_offsets


def kafka_python_resume(bootstrap: str, group: str, topic: str, deadline: Deadline) -> Any:
    """Read everything, commit LAST_COMMITS, close; a new consumer's first offsets and
    committed() view."""
    first = kafka_python_consumer(bootstrap, group, "first")
    kafka_python_subscribe(first, topic)
    try:
        read = 0
        while read < RESUME_PARTITIONS * RESUME_RECORDS:
            deadline.check(f"first consumer read {read}")
            read += len(records_of(first.poll(timeout_ms=POLL_TIMEOUT_MS)))
        first.commit(
            {
                KafkaTopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                for p, o in LAST_COMMITS.items()
            }
        )
    finally:
        first.close(autocommit=False)

    second = kafka_python_consumer(bootstrap, group, "second")
    kafka_python_subscribe(second, topic)
    try:
        starts: dict[int, int] = {}
        while len(starts) < RESUME_PARTITIONS:
            deadline.check(f"second consumer's first offsets {starts}")
            for partition, offset, _ in records_of(second.poll(timeout_ms=POLL_TIMEOUT_MS)):
                starts.setdefault(partition, offset)
        committed = {
            p: second.committed(KafkaTopicPartition(topic, p)) for p in range(RESUME_PARTITIONS)
        }
    finally:
        second.close(autocommit=False)
    return starts, committed


async def aiokafka_resume(bootstrap: str, group: str, topic: str, deadline: Deadline) -> Any:
    first = aiokafka_consumer(bootstrap, group, "first")
    await first.start()
    try:
        first.subscribe([topic])
        read = 0
        while read < RESUME_PARTITIONS * RESUME_RECORDS:
            deadline.check(f"first consumer read {read}")
            read += len(records_of(await first.getmany(timeout_ms=POLL_TIMEOUT_MS)))
        await first.commit({AioTopicPartition(topic, p): o for p, o in LAST_COMMITS.items()})
    finally:
        await first.stop()

    second = aiokafka_consumer(bootstrap, group, "second")
    await second.start()
    try:
        second.subscribe([topic])
        starts: dict[int, int] = {}
        while len(starts) < RESUME_PARTITIONS:
            deadline.check(f"second consumer's first offsets {starts}")
            batches = await second.getmany(timeout_ms=POLL_TIMEOUT_MS)
            for partition, offset, _ in records_of(batches):
                starts.setdefault(partition, offset)
        committed = {
            p: await second.committed(AioTopicPartition(topic, p)) for p in range(RESUME_PARTITIONS)
        }
    finally:
        await second.stop()
    return starts, committed


@pytest.mark.parametrize("client", list(MEMBER_KINDS))
def test_commit_close_and_a_new_consumer_resumes_there(
    group_broker: BrokerProcess, client: str
) -> None:
    broker = group_broker
    group, topic = f"{client}-resume", f"{client}-resume-topic"
    create_topic(broker.bootstrap, topic, RESUME_PARTITIONS)
    produce_per_partition(broker.bootstrap, topic, RESUME_PARTITIONS, RESUME_RECORDS)
    deadline = Deadline(60, f"{client}: commit, close, resume")

    if client == "kafka-python":
        starts, committed = kafka_python_resume(broker.bootstrap, group, topic, deadline)
    else:
        starts, committed = asyncio.run(
            asyncio.wait_for(
                aiokafka_resume(broker.bootstrap, group, topic, deadline), deadline.remaining()
            )
        )

    assert committed == LAST_COMMITS
    assert starts == LAST_COMMITS
    assert committed_offsets(broker.bootstrap, group, topic, RESUME_PARTITIONS) == LAST_COMMITS
