"""kill -9 in the middle of an idempotent acks=all stream loses no acknowledged record.

The producer runs flat out, so at the moment of the kill it has requests in flight: some
written by the broker but not yet acknowledged, some never received. The broker restarts
on the same data dir and port. With the same producer instance, librdkafka retries the
unacknowledged batches with their original producer id and sequence numbers; the broker
must keep the acknowledged records exactly where it said they were, and must not store a
retried batch twice (that is what idempotence promises). With a fresh producer, the
records the old one never heard back about may be in the log or not, but at most once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaError, Message, Producer
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
)

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

PARTITIONS = 3
ACKS_BEFORE_KILL = 2_000
MESSAGES_AFTER_RESTART = 2_000
VALUE_BYTES = 200
TIME_BUDGET_S = 180
PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}


def key_for(seq: int) -> bytes:
    return b"crash-key-%d" % (seq % 97)


def idempotent_producer(bootstrap: str, errors: ErrorLog) -> Producer:
    return Producer(
        producer_config(bootstrap, errors, **{"enable.idempotence": True, "acks": "all"})
    )


def produce(producer: Producer, topic: str, seq: int, deliveries: DeliveryLog) -> None:
    produce_with_backpressure(
        lambda: producer.produce(
            topic,
            key=key_for(seq),
            value=payload(seq, VALUE_BYTES),
            headers=headers_for(seq),
            on_delivery=deliveries.callback(seq),
        ),
        producer.poll,
    )


def produce_until_acked(
    producer: Producer, topic: str, deliveries: DeliveryLog, acked: int, deadline: Deadline
) -> int:
    """Produce seq 0, 1, ... without waiting until ``acked`` reports succeeded.

    Returns the number of messages handed to the producer.
    """
    seq = 0
    while len(deliveries.where) < acked:
        deadline.check(f"{len(deliveries.where)} of {acked} acknowledged before the kill")
        produce(producer, topic, seq, deliveries)
        seq += 1
        producer.poll(0)
    return seq


def produce_batch(
    producer: Producer, topic: str, deliveries: DeliveryLog, seqs: range, deadline: Deadline
) -> None:
    for seq in seqs:
        produce(producer, topic, seq, deliveries)
        producer.poll(0)
    left = producer.flush(deadline.remaining())
    assert left == 0, f"{left} messages unacknowledged when the time budget ran out"


def read_log(bootstrap: str, topic: str, deadline: Deadline) -> dict[int, list[int]]:
    """Every record of the topic, as partition -> seqs in offset order (checked on the way)."""
    errors = ErrorLog()
    consumer = Consumer(consumer_config(bootstrap, errors))
    log: dict[int, list[int]] = {}

    def record(message: Message) -> None:
        seqs = log.setdefault(message.partition(), [])
        assert message.offset() == len(seqs), (
            f"partition {message.partition()}: offset {message.offset()} after {len(seqs)} "
            "records: a gap or a repeat"
        )
        seq = seq_of(message.headers())
        assert message.key() == key_for(seq), f"seq {seq}: key {message.key()!r}"
        assert message.value() == payload(seq, VALUE_BYTES), f"seq {seq}: value differs"
        assert message.headers() == headers_for(seq), f"seq {seq}: {message.headers()!r}"
        seqs.append(seq)

    try:
        marks = high_watermarks(consumer, topic, list(range(PARTITIONS)))
        expected = {p: n for p, n in marks.items() if n > 0}
        consume_from_beginning(consumer, topic, expected, deadline, record)
    finally:
        consumer.close()
    assert errors.snapshot() == []
    return log


def assert_acknowledged_in_place(deliveries: DeliveryLog, log: dict[int, list[int]]) -> None:
    misplaced = []
    for seq, (partition, offset) in sorted(deliveries.where.items()):
        seqs = log.get(partition, [])
        found = seqs[offset] if offset < len(seqs) else None
        if found != seq:
            misplaced.append(f"seq {seq} acknowledged at {partition}/{offset}, log has {found}")
    assert misplaced == [], f"{len(misplaced)} acknowledged records lost or moved: {misplaced[:10]}"


def assert_in_order_without_repeats(log: dict[int, list[int]]) -> None:
    for partition, seqs in log.items():
        repeats = len(seqs) - len(set(seqs))
        assert repeats == 0, f"partition {partition}: {repeats} records stored twice"
        assert seqs == sorted(seqs), f"partition {partition}: records out of order"


def test_same_producer_carries_on_after_kill_9(broker_factory: BrokerFactory) -> None:
    broker: BrokerProcess = broker_factory(default_partitions=PARTITIONS)
    topic = "crash-same-producer"
    deadline = Deadline(TIME_BUDGET_S, "kill -9 with the same producer")
    errors, deliveries = ErrorLog(), DeliveryLog()
    producer = idempotent_producer(broker.bootstrap, errors)

    sent = produce_until_acked(producer, topic, deliveries, ACKS_BEFORE_KILL, deadline)
    broker.kill()
    acked_at_kill = len(deliveries.where)
    broker.restart()
    produce_batch(producer, topic, deliveries, range(sent, sent + MESSAGES_AFTER_RESTART), deadline)

    print(f"handed over before the kill: {sent}, acknowledged at the kill: {acked_at_kill}")
    assert deliveries.errors == [], deliveries.errors[:20]
    total = sent + MESSAGES_AFTER_RESTART
    assert sorted(deliveries.where) == list(range(total)), "a message got no delivery report"
    log = read_log(broker.bootstrap, topic, deadline)
    assert_acknowledged_in_place(deliveries, log)
    assert_in_order_without_repeats(log)
    assert sum(len(seqs) for seqs in log.values()) == total, "records nobody sent"
    # Errors the client reports while the broker is down are expected (connection refused,
    # all brokers down); the client must not have given up on anything, which the delivery
    # reports above already prove. Anything else it reported is worth a look.
    unexpected = [
        e for e in errors.snapshot() if "_TRANSPORT" not in e and "_ALL_BROKERS_DOWN" not in e
    ]
    assert unexpected == []


def test_fresh_producer_after_kill_9(broker_factory: BrokerFactory) -> None:
    broker: BrokerProcess = broker_factory(default_partitions=PARTITIONS)
    topic = "crash-fresh-producer"
    deadline = Deadline(TIME_BUDGET_S, "kill -9 with a fresh producer")
    old_errors, old_deliveries = ErrorLog(), DeliveryLog()
    old_producer = idempotent_producer(broker.bootstrap, old_errors)

    sent = produce_until_acked(old_producer, topic, old_deliveries, ACKS_BEFORE_KILL, deadline)
    broker.kill()
    # The old producer dies with the broker: what it had not heard back about is dropped.
    old_producer.purge(in_queue=True, in_flight=True)
    old_producer.flush(deadline.remaining(10))
    broker.restart()
    errors, deliveries = ErrorLog(), DeliveryLog()
    producer = idempotent_producer(broker.bootstrap, errors)
    produce_batch(producer, topic, deliveries, range(sent, sent + MESSAGES_AFTER_RESTART), deadline)

    unacked = set(range(sent)) - set(old_deliveries.where)
    print(f"old producer: {sent} handed over, {len(old_deliveries.where)} acknowledged")
    assert set(old_deliveries.failed.values()) <= PURGED, old_deliveries.errors[:20]
    assert set(old_deliveries.failed) == unacked
    assert deliveries.errors == [], deliveries.errors[:20]
    assert errors.snapshot() == []
    assert sorted(deliveries.where) == list(range(sent, sent + MESSAGES_AFTER_RESTART))
    log = read_log(broker.bootstrap, topic, deadline)
    assert_acknowledged_in_place(old_deliveries, log)
    assert_acknowledged_in_place(deliveries, log)
    assert_in_order_without_repeats(log)
    stored = {seq for seqs in log.values() for seq in seqs}
    strays = stored - set(old_deliveries.where) - set(deliveries.where) - unacked
    assert strays == set(), f"records nobody sent: {sorted(strays)[:10]}"
