"""Kafka and AMQP on one log, both ways, on a real broker process (issue 21).

An AMQP exchange E is the WeirMQ exchange topic E and an AMQP queue Q is topic Q (one
partition), read by the share group "amqp:Q" (protocols/amqp/model.py). So:

- what pika publishes is readable by a Kafka consumer, from Q and from E (the exchange's
  own log keeps every publish, routed or not), with the body as the value and the
  properties and plain headers as text headers (protocols/amqp/mapping.py);
- a record a Kafka producer writes to an exchange (declared over AMQP, or made by
  CreateTopics with `weirmq.exchange.type`) reaches the AMQP consumers of the queues bound
  to it, its `routing-key` header (else its key) as the routing key, headers named after
  properties as those properties and the other headers in the AMQP headers table;
- a Kafka consumer group reading Q and the AMQP queue Q are independent readers of one
  log: the group's reads and commits leave the queue's messages ready, and AMQP acks move
  no committed offset. (The queue does trim its log below what it has settled, at the
  broker's housekeeping, so a Kafka reader of a queue topic sees everything only while it
  keeps ahead of the queue's consumers; the test reads in that order.)

Every wait is bounded (`STEP_TIMEOUT_S`); pika's blocking calls are bounded by its socket
timeout, and consumers wait for what they expect, never for a fixed time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pika
import pytest
from confluent_kafka import Consumer, Message, Producer
from integration_support import (
    Deadline,
    ErrorLog,
    committed_offsets,
    consume_from_beginning,
    consumer_config,
    create_topic,
    high_watermarks,
    member_config,
)

if TYPE_CHECKING:
    from conftest import BrokerProcess

pytestmark = pytest.mark.integration

STEP_TIMEOUT_S = 20.0
PERSISTENT = 2


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextmanager
def amqp_channel(address: str | None) -> Iterator[Any]:
    """A pika channel to the broker's AMQP listener as guest; the connection is closed after."""
    assert address is not None, "the broker's AMQP listener is off"
    host, _, port = address.rpartition(":")
    connection = pika.BlockingConnection(
        pika.ConnectionParameters(
            host,
            int(port),
            credentials=pika.PlainCredentials("guest", "guest"),
            connection_attempts=1,
            socket_timeout=STEP_TIMEOUT_S,
            stack_timeout=STEP_TIMEOUT_S,
            blocked_connection_timeout=STEP_TIMEOUT_S,
        )
    )
    try:
        yield connection.channel()
    finally:
        if connection.is_open:
            connection.close()


def read_topic(bootstrap: str, topic: str) -> list[Message]:
    """Every record of partition 0 of `topic`, from the beginning up to its high watermark."""
    errors = ErrorLog()
    consumer = Consumer(consumer_config(bootstrap, errors))
    messages: list[Message] = []
    try:
        end = high_watermarks(consumer, topic, [0])[0]
        if end:
            deadline = Deadline(STEP_TIMEOUT_S, f"reading {topic}")
            consume_from_beginning(consumer, topic, {0: end}, deadline, messages.append)
    finally:
        consumer.close()
    assert errors.snapshot() == []
    return messages


def header_values(message: Message, name: str) -> list[bytes | None]:
    return [value for key, value in message.headers() or [] if key == name]


def consume(channel: Any, queue: str, count: int) -> list[tuple[Any, Any, bytes]]:
    """`count` deliveries of `queue` to a consumer with manual acks, then acked. Its
    prefetch is `count`, so nothing more is delivered to it (cancelling a pika consumer
    requeues what it had buffered, which would come back redelivered); fails if they do
    not all come within STEP_TIMEOUT_S."""
    deadline = Deadline(STEP_TIMEOUT_S, f"{count} deliveries from {queue}")
    channel.basic_qos(prefetch_count=count)
    got: list[tuple[Any, Any, bytes]] = []
    for method, properties, body in channel.consume(
        queue, inactivity_timeout=deadline.remaining(1.0)
    ):
        deadline.check(f"{len(got)} of {count}")
        if method is None:
            continue
        got.append((method, properties, body))
        if len(got) == count:
            break
    assert channel.cancel() == 0, "more than the prefetch was delivered"
    channel.basic_ack(got[-1][0].delivery_tag, multiple=True)
    return got


def queue_ready(channel: Any, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def produce(bootstrap: str, topic: str, *records: dict[str, Any]) -> None:
    """Produce each record (keyword arguments of Producer.produce) with acks=all."""
    errors = ErrorLog()
    failures: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "error_cb": errors.error_cb})

    def on_delivery(error: Any, _message: Message) -> None:
        if error is not None:
            failures.append(f"{error.name()}: {error.str()}")

    for record in records:
        producer.produce(topic, on_delivery=on_delivery, **record)
    assert producer.flush(STEP_TIMEOUT_S) == 0, "records left unacknowledged"
    assert failures == [] and errors.snapshot() == [], (failures, errors.snapshot())


# --- AMQP -> Kafka ---------------------------------------------------------------------------


def test_what_pika_publishes_is_read_by_kafka_from_the_queue_and_the_exchange(
    broker: BrokerProcess,
) -> None:
    exchange, queue = unique("orders"), unique("orders-q")
    properties = pika.BasicProperties(
        content_type="application/json",
        message_id="msg-1",
        correlation_id="corr-1",
        delivery_mode=PERSISTENT,
        headers={"tenant": "acme", "attempt": 3},
    )
    with amqp_channel(broker.amqp) as channel:
        channel.exchange_declare(exchange, "direct", durable=True)
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, exchange, "eu")
        channel.confirm_delivery()
        channel.basic_publish(exchange, "eu", b'{"order": 1}', properties)
        # Bound to nothing: the exchange's log keeps it, no queue gets it.
        channel.basic_publish(exchange, "us", b'{"order": 2}', properties)
        channel.basic_publish(exchange, "eu", b'{"order": 3}')

    in_queue = read_topic(broker.bootstrap, queue)
    in_exchange = read_topic(broker.bootstrap, exchange)
    assert [m.value() for m in in_queue] == [b'{"order": 1}', b'{"order": 3}']
    assert [m.value() for m in in_exchange] == [b'{"order": 1}', b'{"order": 2}', b'{"order": 3}']
    assert [header_values(m, "routing-key") for m in in_exchange] == [[b"eu"], [b"us"], [b"eu"]]

    for first in (in_queue[0], in_exchange[0]):
        assert first.key() is None
        expected = {
            "routing-key": b"eu",
            "amqp.exchange": exchange.encode(),
            "content-type": b"application/json",
            "message-id": b"msg-1",
            "correlation-id": b"corr-1",
            "delivery-mode": b"2",
            "tenant": b"acme",
            "attempt": b"3",
        }
        for name, value in expected.items():
            assert header_values(first, name) == [value], (name, first.headers())
        assert len(header_values(first, "amqp.properties")) == 1
    # Without properties: no property headers, still the routing key.
    plain = dict(in_queue[1].headers() or [])
    assert plain["routing-key"] == b"eu"
    assert not {"content-type", "message-id", "tenant"} & set(plain), plain


# --- Kafka -> AMQP ---------------------------------------------------------------------------


KAFKA_HEADERS = [
    ("routing-key", b"rk"),
    ("content-type", b"application/json"),
    ("message-id", b"kafka-1"),
    ("correlation-id", b"corr-9"),
    ("delivery-mode", b"2"),
    ("tenant", b"acme"),
    ("trace", b"t-77"),
]


def exchange_and_bound_queue(broker: BrokerProcess, channel: Any, made_by: str) -> tuple[str, str]:
    """A direct exchange, made over AMQP or by Kafka's CreateTopics, and a durable queue
    bound to it with key "rk"."""
    exchange, queue = unique(f"k2a-{made_by}"), unique(f"k2a-{made_by}-q")
    if made_by == "amqp":
        channel.exchange_declare(exchange, "direct", durable=True)
    else:
        create_topic(broker.bootstrap, exchange, 1, {"weirmq.exchange.type": "direct"})
        # The Kafka-made exchange is the AMQP exchange of that name in vhost "/".
        channel.exchange_declare(exchange, "direct", passive=True)
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, "rk")
    return exchange, queue


@pytest.mark.parametrize("made_by", ["amqp", "create_topics"])
def test_a_kafka_record_reaches_amqp_consumers_of_a_bound_queue(
    broker: BrokerProcess, made_by: str
) -> None:
    with amqp_channel(broker.amqp) as channel:
        exchange, queue = exchange_and_bound_queue(broker, channel, made_by)
        produce(
            broker.bootstrap,
            exchange,
            {"value": b'{"n": 1}', "headers": KAFKA_HEADERS},
            {"value": b"not for us", "headers": [("routing-key", b"other")]},
            {"value": b"plain", "headers": [("routing-key", b"rk")]},
        )
        got = consume(channel, queue, 2)
        assert queue_ready(channel, queue) == 0  # "not for us" was not routed here

    method, properties, body = got[0]
    assert body == b'{"n": 1}'
    assert method.routing_key == "rk"
    assert method.redelivered is False
    assert properties.content_type == "application/json"
    assert properties.message_id == "kafka-1"
    assert properties.correlation_id == "corr-9"
    assert properties.delivery_mode == PERSISTENT
    assert properties.headers == {"tenant": "acme", "trace": "t-77"}
    method, properties, body = got[1]
    assert (body, method.routing_key) == (b"plain", "rk")
    assert properties.headers is None and properties.content_type is None
    assert properties.delivery_mode is None


def test_a_keyed_kafka_record_is_delivered_with_its_key_as_routing_key(
    broker: BrokerProcess,
) -> None:
    """Without a `routing-key` header the record's key routes it (docs/routing.md), so the
    AMQP consumer must see that key, as the binding it matched."""
    with amqp_channel(broker.amqp) as channel:
        exchange, queue = exchange_and_bound_queue(broker, channel, "amqp")
        produce(broker.bootstrap, exchange, {"key": b"rk", "value": b"keyed"})
        [(method, _, body)] = consume(channel, queue, 1)
    assert body == b"keyed"
    assert method.routing_key == "rk", "routed by its key 'rk', delivered with another"


@pytest.mark.parametrize("made_by", ["amqp", "create_topics"])
def test_a_kafka_record_is_delivered_as_from_the_exchange_it_was_produced_to(
    broker: BrokerProcess, made_by: str
) -> None:
    """Basic.Deliver's exchange is "the name of the exchange that the message was
    originally published to" (AMQP 0-9-1): a Kafka producer published it to `exchange`."""
    with amqp_channel(broker.amqp) as channel:
        exchange, queue = exchange_and_bound_queue(broker, channel, made_by)
        produce(broker.bootstrap, exchange, {"value": b"v", "headers": [("routing-key", b"rk")]})
        [(method, _, _)] = consume(channel, queue, 1)
    assert method.exchange == exchange


# --- a Kafka group and the AMQP queue on one topic -------------------------------------------


def read_with_group(bootstrap: str, group: str, topic: str, count: int) -> list[bytes]:
    """`count` records of `topic` read by a member of `group`, committed, then it leaves."""
    errors = ErrorLog()
    consumer = Consumer(member_config(bootstrap, group, error_cb=errors.error_cb))
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = Deadline(STEP_TIMEOUT_S, f"group {group} reading {count} records of {topic}")
    try:
        while len(values) < count:
            deadline.check(f"{len(values)} read")
            for message in consumer.consume(num_messages=100, timeout=deadline.remaining(0.5)):
                assert message.error() is None, message.error()
                values.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert errors.snapshot() == []
    return values


def committed(bootstrap: str, group: str, topic: str) -> int:
    return committed_offsets(bootstrap, group, topic, 1)[0]


def test_a_kafka_group_reading_the_queue_topic_leaves_the_amqp_queue_alone(
    broker: BrokerProcess,
) -> None:
    queue, group = unique("shared-q"), unique("kafka-readers")
    bodies = [b"job-%d" % n for n in range(20)]
    with amqp_channel(broker.amqp) as channel:
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))

        assert read_with_group(broker.bootstrap, group, queue, len(bodies)) == bodies
        assert committed(broker.bootstrap, group, queue) == len(bodies)
        # The group read and committed everything; the AMQP queue still holds all of it.
        assert queue_ready(channel, queue) == len(bodies)

        half = len(bodies) // 2
        first = consume(channel, queue, half)
        assert [body for _, _, body in first] == bodies[:half]
        assert queue_ready(channel, queue) == len(bodies) - half
        # AMQP acks moved no Kafka offset.
        assert committed(broker.bootstrap, group, queue) == len(bodies)
        rest = consume(channel, queue, len(bodies) - half)
        assert [body for _, _, body in rest] == bodies[half:]
        assert all(m.redelivered is False for m, _, _ in first + rest)
        assert queue_ready(channel, queue) == 0

    # And the other way round, on messages published after the AMQP acks: the group first,
    # then the queue. (Not the queue first: the queue's log start moves up past what it
    # acknowledged, at the broker's housekeeping, so a Kafka reader of a queue topic must
    # keep ahead of the queue's consumers to see everything.)
    more = [b"late-%d" % n for n in range(5)]
    with amqp_channel(broker.amqp) as channel:
        channel.confirm_delivery()
        for body in more:
            channel.basic_publish("", queue, body)
        assert read_with_group(broker.bootstrap, group, queue, len(more)) == more
        assert committed(broker.bootstrap, group, queue) == len(bodies) + len(more)
        assert queue_ready(channel, queue) == len(more)
        got = consume(channel, queue, len(more))
        assert [body for _, _, body in got] == more
        assert queue_ready(channel, queue) == 0
