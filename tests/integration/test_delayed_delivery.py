"""Delayed delivery with real clients: confluent-kafka produces records with delay headers
to a real broker; a plain consumer sees them in due order, never early, exactly once, also
across a clean restart and a kill -9 (issue 19)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from conftest import BrokerProcess
from integration_support import Deadline, ErrorLog, consumer_config, create_topic, producer_config

DELAY = "weirmq.delay.ms"
DELIVER_AT = "weirmq.deliver.at.ms"


DELAYS_ON = {"weirmq.delay.enable": "true"}
"""Delayed delivery is per topic, off by default."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Reports:
    """Delivery reports: errors by value, and the offsets reported."""

    def __init__(self) -> None:
        self.errors: dict[bytes, KafkaError] = {}
        self.offsets: dict[bytes, int | None] = {}

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        value = message.value() or b""
        if error is not None:
            self.errors[value] = error
        else:
            self.offsets[value] = message.offset()


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes, list[tuple[str, bytes]]]],
    **extra: object,
) -> Reports:
    reports = Reports()
    errors = ErrorLog()
    producer = Producer(producer_config(bootstrap, errors, acks="all", **extra))
    for value, headers in records:
        producer.produce(topic, value, headers=headers, on_delivery=reports)
        producer.poll(0)
    assert producer.flush(30) == 0
    return reports


def arrivals(
    bootstrap: str, topic: str, count: int, seconds: float = 30.0
) -> Iterator[tuple[Message, int]]:
    """(message, arrival wall-clock ms) of the first `count` records of partition 0."""
    consumer = Consumer(consumer_config(bootstrap, ErrorLog(), **{"fetch.wait.max.ms": 10}))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = Deadline(seconds, f"reading {count} delayed records")
    seen = 0
    try:
        while seen < count:
            deadline.check(f"{seen} read")
            # poll, not consume(n, timeout), which waits for n records or the whole timeout
            # and so would note arrivals late (hiding an early one).
            message = consumer.poll(deadline.remaining(0.5))
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen += 1
            yield message, now_ms()
    finally:
        consumer.close()


def due_of(message: Message) -> int:
    for name, value in message.headers() or []:
        if name == DELIVER_AT:
            return int(value)
    raise AssertionError(f"{message.value()!r} has no {DELIVER_AT}")


def test_records_arrive_in_due_order_and_never_early(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "later", 1, DELAYS_ON)
    base = now_ms() + 300
    offsets_ms = [900, 0, 1500, 300, 300, 1200, 600, 0, 1800, 100]
    records = [
        (b"%d" % n, [(DELIVER_AT, str(base + d).encode()), ("n", b"%d" % n)])
        for n, d in enumerate(offsets_ms)
    ]
    reports = produce(broker.bootstrap, "later", records)
    assert reports.errors == {}
    # A diverted batch has no offset in its topic yet: the broker answers base offset -1,
    # which librdkafka reports as success, offset -1 (None in Python) for the batch's
    # first record and -1 + i for the i-th (it adds without looking; Java's client
    # reports -1 for all).
    assert None in reports.offsets.values()
    got = list(arrivals(broker.bootstrap, "later", len(records)))
    for message, arrived in got:
        assert arrived >= due_of(message), f"{message.value()!r} arrived early"
    dues = [due_of(message) for message, _ in got]
    assert dues == sorted(dues), "not in due order"
    # Ties (the two at +300, the two at +0) in produce order.
    assert [m.value() for m, _ in got] == [
        b"1",
        b"7",
        b"9",
        b"3",
        b"4",
        b"6",
        b"0",
        b"5",
        b"2",
        b"8",
    ]


def test_a_relative_delay_counts_from_when_the_broker_gets_the_record(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "relative", 1, DELAYS_ON)
    sent = now_ms()
    reports = produce(
        broker.bootstrap, "relative", [(b"slow", [(DELAY, b"800")]), (b"fast", [(DELAY, b"200")])]
    )
    assert reports.errors == {}
    got = list(arrivals(broker.bootstrap, "relative", 2))
    assert [m.value() for m, _ in got] == [b"fast", b"slow"]
    assert got[0][1] >= sent + 200 and got[1][1] >= sent + 800
    headers = dict(got[1][0].headers() or [])
    assert headers[DELAY] == b"800" and b":" in headers["weirmq.delayed.offset"]


def test_a_malformed_delay_is_refused_with_invalid_record(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "bad", 1, DELAYS_ON)
    reports = produce(broker.bootstrap, "bad", [(b"x", [(DELAY, b"soon")])], retries=0)
    error = reports.errors[b"x"]
    assert error.code() == KafkaError.INVALID_RECORD, error
    reports = produce(broker.bootstrap, "bad", [(b"y", [(DELAY, b"100000000000000")])])
    assert reports.errors[b"y"].code() == KafkaError.INVALID_RECORD
    assert "Traceback" not in broker.stderr_tail()  # a client's mistake, not the broker's
    consumer = Consumer(consumer_config(broker.bootstrap, ErrorLog()))
    assert consumer.get_watermark_offsets(TopicPartition("bad", 0), timeout=10) == (0, 0)
    consumer.close()


@pytest.mark.parametrize("stop", ["restart", "kill -9"])
def test_pending_records_survive_a_restart_exactly_once(broker: BrokerProcess, stop: str) -> None:
    create_topic(broker.bootstrap, "durable", 1, DELAYS_ON)
    base = now_ms()
    records = [(b"%03d" % n, [(DELIVER_AT, str(base + 500 * (n % 7)).encode())]) for n in range(60)]
    reports = produce(broker.bootstrap, "durable", records, **{"enable.idempotence": True})
    assert reports.errors == {}
    time.sleep(1.2)  # some are delivered, some are in flight, most wait
    if stop == "kill -9":
        broker.kill()
        broker.start()
    else:
        broker.restart()
    got = list(arrivals(broker.bootstrap, "durable", len(records)))
    values = [m.value() for m, _ in got]
    assert sorted(values) == sorted(v for v, _ in records), "lost or duplicated"
    for message, arrived in got:
        assert arrived >= due_of(message), f"{message.value()!r} arrived early"
    # Nothing more comes: no record was delivered twice.
    consumer = Consumer(consumer_config(broker.bootstrap, ErrorLog()))
    low, high = consumer.get_watermark_offsets(TopicPartition("durable", 0), timeout=10)
    consumer.close()
    assert high - low == len(records)


def test_an_idempotent_producer_keeps_going_across_diverted_batches(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "mixed", 1, DELAYS_ON)
    errors = ErrorLog()
    reports = Reports()
    producer = Producer(
        producer_config(
            broker.bootstrap, errors, acks="all", **{"enable.idempotence": True, "linger.ms": 0}
        )
    )
    base = now_ms() + 400
    expected = []
    for n in range(40):
        headers = [(DELIVER_AT, str(base + 10 * n).encode())] if n % 3 else []
        producer.produce("mixed", b"%02d" % n, headers=headers, on_delivery=reports)
        producer.flush(10)  # one batch each: plain and diverted batches alternate
        expected.append(b"%02d" % n)
    broker.restart()
    for n in range(40, 50):
        headers = [(DELAY, b"100")] if n % 2 else []
        producer.produce("mixed", b"%02d" % n, headers=headers, on_delivery=reports)
        producer.flush(10)
        expected.append(b"%02d" % n)
    assert producer.flush(30) == 0
    assert reports.errors == {}, reports.errors
    # The restart is seen (brokers down, transport); nothing fatal or out of sequence.
    assert not [e for e in errors.snapshot() if "DOWN" not in e and "TRANSPORT" not in e]
    got = [m.value() for m, _ in arrivals(broker.bootstrap, "mixed", len(expected))]
    assert sorted(got) == expected
