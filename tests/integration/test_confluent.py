"""confluent-kafka (librdkafka 2.16) against WeirMQ: idempotent bulk produce, acks 0/1,
auto-created topics; everything read back with an assign-only consumer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Message, Producer
from integration_support import (
    Deadline,
    DeliveryLog,
    ErrorLog,
    consume_from_beginning,
    consumer_config,
    headers_for,
    high_watermarks,
    payload,
    produce_with_backpressure,
    producer_config,
    seq_of,
    timestamp_for,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

BULK_MESSAGES = 100_000
BULK_VALUE_BYTES = 1024
BULK_PARTITIONS = 4
BULK_KEYS = 1_000  # keys repeat, so "same key, same partition" can be checked
BULK_TIME_BUDGET_S = 300


def bulk_key(seq: int) -> bytes:
    return b"key-%04d" % (seq % BULK_KEYS)


class BulkChecker:
    """Checks each consumed message against the delivery reports, one at a time.

    Nothing consumed is kept: per partition only the next expected offset.
    """

    def __init__(self, deliveries: DeliveryLog, value_bytes: int) -> None:
        self.deliveries = deliveries
        self.value_bytes = value_bytes
        self.next_offset: dict[int, int] = {}

    def __call__(self, message: Message) -> None:
        partition, offset = message.partition(), message.offset()
        expected_offset = self.next_offset.get(partition, 0)
        assert offset == expected_offset, (
            f"partition {partition}: offset {offset} where {expected_offset} was expected"
        )
        self.next_offset[partition] = offset + 1
        seq = seq_of(message.headers())
        assert self.deliveries.where.get(seq) == (partition, offset), (
            f"seq {seq} read at {(partition, offset)}, "
            f"delivery report said {self.deliveries.where.get(seq)}"
        )
        assert message.key() == bulk_key(seq), f"seq {seq}: key {message.key()!r}"
        assert message.value() == payload(seq, self.value_bytes), f"seq {seq}: value differs"
        assert message.headers() == headers_for(seq), f"seq {seq}: {message.headers()!r}"
        assert message.timestamp() == (TIMESTAMP_CREATE_TIME, timestamp_for(seq)), (
            f"seq {seq}: timestamp {message.timestamp()}"
        )


@pytest.mark.slow
def test_idempotent_bulk_keyed_messages_round_trip(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(default_partitions=BULK_PARTITIONS)
    topic = "bulk"
    deadline = Deadline(BULK_TIME_BUDGET_S, "100,000 idempotent messages produced and consumed")
    producer_errors, consumer_errors = ErrorLog(), ErrorLog()
    deliveries = DeliveryLog()
    producer = Producer(
        producer_config(
            broker.bootstrap, producer_errors, **{"enable.idempotence": True, "acks": "all"}
        )
    )

    for seq in range(BULK_MESSAGES):
        produce_with_backpressure(
            lambda seq=seq: producer.produce(
                topic,
                key=bulk_key(seq),
                value=payload(seq, BULK_VALUE_BYTES),
                headers=headers_for(seq),
                timestamp=timestamp_for(seq),
                on_delivery=deliveries.callback(seq),
            ),
            producer.poll,
        )
        if seq % 1000 == 0:
            producer.poll(0)
            deadline.check(f"producing, at seq {seq}")
    left = producer.flush(deadline.remaining())

    assert left == 0, f"{left} messages still unacknowledged after flush"
    assert deliveries.errors == [], deliveries.errors[:20]
    assert len(deliveries.where) == BULK_MESSAGES
    assert producer_errors.snapshot() == []
    per_partition = deliveries.count_by_partition()
    assert sorted(per_partition) == list(range(BULK_PARTITIONS)), per_partition
    partition_of_key: dict[bytes, set[int]] = {}
    for seq, (partition, _) in deliveries.where.items():
        partition_of_key.setdefault(bulk_key(seq), set()).add(partition)
    assert all(len(ps) == 1 for ps in partition_of_key.values()), "a key used two partitions"

    consumer = Consumer(consumer_config(broker.bootstrap, consumer_errors))
    try:
        checker = BulkChecker(deliveries, BULK_VALUE_BYTES)
        read = consume_from_beginning(consumer, topic, per_partition, deadline, checker)
        marks = high_watermarks(consumer, topic, sorted(per_partition))
    finally:
        consumer.close()

    assert read == per_partition
    assert marks == per_partition, "the log holds records nobody acknowledged"
    assert consumer_errors.snapshot() == []


@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_0_and_1_round_trip(broker_factory: BrokerFactory, acks: str) -> None:
    broker = broker_factory(default_partitions=1)
    topic = f"acks-{acks}"
    count = 500
    deadline = Deadline(60, f"acks={acks} round trip")
    producer_errors, consumer_errors = ErrorLog(), ErrorLog()
    deliveries = DeliveryLog()
    producer = Producer(producer_config(broker.bootstrap, producer_errors, acks=acks))

    for seq in range(count):
        producer.produce(
            topic,
            key=b"k%d" % seq,
            value=payload(seq, 100),
            headers=headers_for(seq),
            timestamp=timestamp_for(seq),
            on_delivery=deliveries.callback(seq),
        )
        producer.poll(0)
    assert producer.flush(deadline.remaining()) == 0
    assert deliveries.errors == []
    assert producer_errors.snapshot() == []
    if acks == "1":  # with acks=0 there is no response, so no offsets to compare
        assert sorted(deliveries.where.values()) == [(0, o) for o in range(count)]

    seen: list[int] = []

    def check(message: Message) -> None:
        seq = seq_of(message.headers())
        assert message.offset() == len(seen), f"seq {seq} at offset {message.offset()}"
        assert message.key() == b"k%d" % seq
        assert message.value() == payload(seq, 100)
        assert message.timestamp() == (TIMESTAMP_CREATE_TIME, timestamp_for(seq))
        seen.append(seq)

    consumer = Consumer(consumer_config(broker.bootstrap, consumer_errors))
    try:
        consume_from_beginning(consumer, topic, {0: count}, deadline, check)
        marks = high_watermarks(consumer, topic, [0])
    finally:
        consumer.close()

    assert seen == list(range(count))
    assert marks == {0: count}
    assert consumer_errors.snapshot() == []


def test_produce_auto_creates_topic(broker: BrokerProcess) -> None:
    """The first thing the broker hears about the topic is the producer's: no admin call."""
    topic = "created-by-produce"
    deadline = Deadline(60, "produce to an unknown topic")
    producer_errors, consumer_errors = ErrorLog(), ErrorLog()
    deliveries = DeliveryLog()
    producer = Producer(producer_config(broker.bootstrap, producer_errors, acks="all"))

    for seq in range(10):
        producer.produce(
            topic,
            value=payload(seq, 50),
            headers=headers_for(seq),
            on_delivery=deliveries.callback(seq),
        )
    assert producer.flush(deadline.remaining()) == 0
    assert deliveries.errors == []
    assert len(deliveries.where) == 10
    assert producer_errors.snapshot() == []

    metadata = producer.list_topics(topic, timeout=10)
    listed = metadata.topics[topic]
    assert listed.error is None, listed.error
    assert len(listed.partitions) >= 1
    per_partition = deliveries.count_by_partition()
    assert set(per_partition) <= set(listed.partitions)

    values: dict[int, bytes | None] = {}

    def record(message: Message) -> None:
        values[seq_of(message.headers())] = message.value()
        assert deliveries.where[seq_of(message.headers())] == (
            message.partition(),
            message.offset(),
        )

    consumer = Consumer(consumer_config(broker.bootstrap, consumer_errors))
    try:
        consume_from_beginning(consumer, topic, per_partition, deadline, record)
    finally:
        consumer.close()

    assert values == {seq: payload(seq, 50) for seq in range(10)}
    assert consumer_errors.snapshot() == []
