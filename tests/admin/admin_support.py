"""Helpers of the admin API tests: brokers on temporary data directories, and their data.

The broker is `weirmq.broker.core.Broker` itself, built directly (no listener, no thread):
the admin application reads it on whatever loop the test runs, as it reads it on the
broker's own loop in production. Consumer groups are the exception: they are made by real
confluent-kafka consumers talking to a `weirmq.testing.Broker`, the helpers at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from weirmq.admin.requests import TOKEN
from weirmq.broker.core import Broker
from weirmq.broker.partition import Durability
from weirmq.records.batch import Record, encode_batch
from weirmq.settings import Settings
from weirmq.testing import ManualClock
from weirmq.testing.records import make_batch


def bearer(app: Any) -> dict[str, str]:
    """The Authorization header with the token of an admin application (`create_app`)."""
    return {"Authorization": f"Bearer {app[TOKEN].value}"}


def bearer_of(running: Any) -> dict[str, str]:
    """The Authorization header with the token of a `weirmq.testing.Broker(admin=True)`."""
    return {"Authorization": f"Bearer {running.admin_token}"}


SEGMENT_BYTES = 1024
"""The smallest segment size settings allow, so a few batches make several segments."""


def make_broker(data_dir: Path, clock: ManualClock | None = None, **settings: object) -> Broker:
    return Broker(
        Settings(data_dir=data_dir, default_partitions=2, **settings),  # type: ignore[arg-type]
        clock=clock,
    )


def produce(broker: Broker, topic: str, partition: int, batches: int, records: int = 3) -> int:
    """Publish `batches` batches of `records` records, as the Produce handler does;
    returns the bytes appended."""
    found = broker.partition(topic, partition)
    assert found is not None
    appended = 0
    for _ in range(batches):
        batch = make_batch(records, size=100)
        found.publish(batch, Durability.WRITTEN)
        appended += len(batch)
    return appended


def publish(
    broker: Broker, topic: str, keys: list[str], headers: tuple[tuple[str, bytes], ...] = ()
) -> None:
    """Publish one batch to partition 0 of `topic` (an exchange routes it on the way), a
    record per routing key, as the Produce handler does."""
    found = broker.partition(topic, 0)
    assert found is not None
    records = [Record(b"v", key.encode(), headers, 1_000) for key in keys]
    found.publish(encode_batch(records), Durability.WRITTEN)


def broker_with_an_offline_partition(data_dir: Path) -> Broker:
    """A broker whose partition ("damaged", 0) is offline: a segment in the middle of its
    log went missing while the broker was down, which recovery refuses to paper over."""
    first = make_broker(data_dir, segment_bytes=SEGMENT_BYTES)
    first.create_topic("damaged", 1)
    log = first.partition_log("damaged", 0)
    assert log is not None
    for _ in range(3):  # each ~600-byte batch fills most of a 1 KiB segment: 3 segments
        log.append(make_batch(1, size=600))
    assert log.segment_count == 3
    middle = log.segments[1].log_path
    first.close()
    Path(middle).unlink()
    return make_broker(data_dir, segment_bytes=SEGMENT_BYTES)


# --- consumer groups, made by real clients --------------------------------------------------

CLIENT_TIMEOUT_S = 20.0
"""Longest wait for a client to deliver, join or read: far above what any of it takes."""


def produce_records(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """Produce `counts[partition]` records to each partition, and wait until delivered."""
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for partition, count in counts.items():
        for seq in range(count):
            producer.produce(topic, value=b"%d" % seq, partition=partition)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records not delivered"


def consumer_config(bootstrap: str, group_id: str, **extra: Any) -> dict[str, Any]:
    """A group member that commits only when told, so offsets are the test's to choose."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "log_level": 0,
        **extra,
    }


@contextmanager
def group_member(
    bootstrap: str, group_id: str, topic: str, records: int, **extra: Any
) -> Iterator[Consumer]:
    """A consumer that has joined `group_id`, subscribed to `topic`, and read `records`
    records (all the topic holds, so it owns every partition); closed (it leaves the group)
    at the end."""
    consumer = Consumer(consumer_config(bootstrap, group_id, **extra))
    try:
        consumer.subscribe([topic])
        read(consumer, records)
        yield consumer
    finally:
        consumer.close()


def read(consumer: Consumer, records: int) -> list[Message]:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    found: list[Message] = []
    while len(found) < records:
        assert time.monotonic() < deadline, f"read {len(found)} of {records} records"
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            found.append(message)
    return found


def commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    """Commit `offsets` (partition to offset) synchronously: done when it returns."""
    consumer.commit(
        offsets=[TopicPartition(topic, p, offset) for p, offset in offsets.items()],
        asynchronous=False,
    )


def commit_outside_a_group(
    bootstrap: str, group_id: str, topic: str, offsets: dict[int, int]
) -> None:
    """Commit as a consumer that assigns partitions itself (never joins): this leaves a
    group with offsets and no members, as Kafka's own "simple" consumers do."""
    consumer = Consumer(consumer_config(bootstrap, group_id))
    try:
        commit(consumer, topic, offsets)
    finally:
        consumer.close()


def wait_until(
    condition: Callable[[], bool], what: str, timeout_s: float = CLIENT_TIMEOUT_S
) -> None:
    """Return once `condition()` holds; fail the test if it does not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout_s:g} s"
        time.sleep(0.05)
