"""One log, several protocols: what boto3 sends over SQS is what Kafka consumers read, what
Kafka producers and AMQP publishers write is what boto3 receives.

An SQS queue Q is the topic Q with one partition (a free name: `<Q>.sqs` when a topic Q is
somebody else's), read by the share group `sqs:Q`; a message is a record (messages.py):

    SQS                      record
    -----------------------  -------------------------------------------------------------
    MessageBody              value
    MessageId                header weirmq.sqs.message.id (a foreign record: derived from
                             the topic id and offset, the same on every receive)
    MessageAttributes        header weirmq.sqs.attributes (JSON as sent) and one plain
                             header per attribute (text, or the bytes of a Binary one);
                             a foreign record's plain headers are its attributes
    SentTimestamp            the record's timestamp

Deleted messages are trimmed from the log's start by housekeeping: every
`housekeeping_interval_ms` the topic's log start moves up to the queue's oldest message
not deleted (model.py, `trim`), so a Kafka consumer replays deleted messages only until
then, and never those below the oldest undeleted one afterwards (a deleted message above
it stays readable). The tests that replay set the interval to ten minutes; the one that
documents trimming sets it short.

AMQP publishers reach an SQS queue through an exchange only: an SQS queue is no AMQP
queue (Queue.Bind to its name is 404 NOT_FOUND, a mandatory publish through the default
exchange to its name is returned unroutable), but an exchange binds to any topic, so
`weirmq exchanges bind EXCHANGE QUEUE_TOPIC --key K` (docs/routing.md; the admin API and
IncrementalAlterConfigs of `weirmq.exchange.bindings` do the same) routes a pika publish
into the queue. What such a message carries as attributes is where it goes wrong: the
AMQP mapping's own headers (`amqp.exchange`, `amqp.properties`, ...) become attributes and
take slots of SQS's ten, crowding the application's headers out (a failing test below).

Every wait is bounded: long polls of a second inside a `Deadline`, Kafka reads up to the
high watermark.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3
import botocore.config
import pika
import pika.exceptions
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from integration_support import Deadline, ErrorLog, consumer_config
from moto.sqs.models import Message as MotoMessage
from test_cli import ok, weirmq

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = pytest.mark.integration

STEP_TIMEOUT_S = 30.0
ACCESS_KEY = "AKIDINTEROP"
NO_TRIMMING_MS = 600_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def sqs_client(broker: BrokerProcess) -> Any:
    return boto3.session.Session().client(
        "sqs",
        endpoint_url=broker.sqs_endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key="secret",
        config=botocore.config.Config(
            retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=STEP_TIMEOUT_S
        ),
    )


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def attributes_md5(attributes: dict[str, Any]) -> str:
    """SQS's MD5OfMessageAttributes, as moto (another implementation) computes it."""
    reference = MotoMessage("id", "body")
    reference.message_attributes = attributes
    return str(reference.attribute_md5)


def receive(
    sqs: Any, url: str, expected: int, *, then_none: bool = True, **params: Any
) -> list[dict[str, Any]]:
    """`expected` messages of the queue within STEP_TIMEOUT_S; with `then_none`, a receive
    after them must find nothing (pointless when their visibility is shorter than it)."""
    got: list[dict[str, Any]] = []
    deadline = Deadline(STEP_TIMEOUT_S, f"receiving {expected} messages of {url}")
    params = {"VisibilityTimeout": 120, **params}
    while len(got) < expected:
        deadline.check(f"{len(got)} received")
        answer = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            **params,
        )
        got += answer.get("Messages", [])
    if then_none:
        extra = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1, **params).get("Messages")
        assert extra is None, f"more than {expected} messages: {extra}"
    return got


def log_offsets(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """(log start, high watermark) of the topic's partition 0."""
    consumer = Consumer(consumer_config(broker.bootstrap, ErrorLog()))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    return int(low), int(high)


def read_topic(broker: BrokerProcess, topic: str) -> list[Message]:
    """Every record of partition 0 from its log start up to its high watermark, read by a
    plain (assign-only) Kafka consumer: no group, no commit, nothing the queue sees."""
    errors = ErrorLog()
    consumer = Consumer(consumer_config(broker.bootstrap, errors))
    messages: list[Message] = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = Deadline(STEP_TIMEOUT_S, f"reading {topic}")
        while len(messages) < high - low:
            deadline.check(f"{len(messages)} of {high - low} read")
            for message in consumer.consume(num_messages=100, timeout=deadline.remaining(1.0)):
                error = message.error()
                assert error is None, f"consumer error: {error.name()}: {error.str()}"
                messages.append(message)
    finally:
        consumer.close()
    assert errors.snapshot() == []
    return messages


def headers_of(message: Message) -> dict[str, Any]:
    """A consumed record's headers by name (confluent-kafka gives a list of pairs)."""
    return dict(message.headers() or [])


def produce(broker: BrokerProcess, topic: str, *records: dict[str, Any]) -> None:
    """Each record (keyword arguments of Producer.produce), acks=all, all delivered."""
    errors = ErrorLog()
    failures: list[str] = []
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "error_cb": errors.error_cb}
    )

    def on_delivery(error: Any, _message: Message) -> None:
        if error is not None:
            failures.append(f"{error.name()}: {error.str()}")

    for record in records:
        producer.produce(topic, on_delivery=on_delivery, **record)
    assert producer.flush(STEP_TIMEOUT_S) == 0, "records left unacknowledged"
    assert failures == [] and errors.snapshot() == [], (failures, errors.snapshot())


# --- SQS -> Kafka ------------------------------------------------------------------------------


SENT_ATTRIBUTES = {
    "kind": {"DataType": "String", "StringValue": "order"},
    "count": {"DataType": "Number", "StringValue": "42"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    "label": {"DataType": "String.custom", "StringValue": "é✓"},
}


def test_a_kafka_consumer_reads_and_replays_what_boto3_sent(
    broker_factory: BrokerFactory,
) -> None:
    """Value = body, the plain attribute headers, the MessageId header, the timestamp;
    the records stay readable after SQS received and deleted them (until housekeeping,
    here ten minutes away)."""
    broker = broker_factory(housekeeping_interval_ms=NO_TRIMMING_MS)
    sqs = sqs_client(broker)
    queue = unique("q")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    bodies = [f"body {n} ✓" for n in range(5)]
    sent = [
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=SENT_ATTRIBUTES)
        for body in bodies
    ]

    records = read_topic(broker, queue)  # the queue's topic has its name
    assert [r.value() for r in records] == [b.encode() for b in bodies]
    assert [r.offset() for r in records] == list(range(5))
    for record, answer in zip(records, sent, strict=True):
        headers = headers_of(record)
        assert headers["weirmq.sqs.message.id"] == answer["MessageId"].encode()
        assert headers["weirmq.sqs.sender"] == ACCESS_KEY.encode()
        assert headers["kind"] == b"order"
        assert headers["count"] == b"42"
        assert headers["blob"] == b"\x00\x01\xff"
        assert headers["label"] == "é✓".encode()
        stored = json.loads(headers["weirmq.sqs.attributes"] or b"")
        assert stored["blob"] == {"DataType": "Binary", "BinaryValue": "AAH/"}
        assert stored["label"] == SENT_ATTRIBUTES["label"]
        assert record.key() is None
        assert abs(record.timestamp()[1] - time.time() * 1000) < 60_000

    received = receive(sqs, url, 5)
    assert [int(m["Attributes"]["SentTimestamp"]) for m in received] == [
        r.timestamp()[1] for r in records
    ]
    for message in received:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None
    replayed = read_topic(broker, queue)  # deleted over SQS, still on the log
    assert [r.value() for r in replayed] == [b.encode() for b in bodies]


def test_a_fifo_message_is_a_keyed_record(broker: BrokerProcess) -> None:
    sqs = sqs_client(broker)
    queue = unique("f") + ".fifo"
    url = sqs.create_queue(QueueName=queue, Attributes={"FifoQueue": "true"})["QueueUrl"]
    sent = sqs.send_message(
        QueueUrl=url, MessageBody="first", MessageGroupId="customer-7", MessageDeduplicationId="1"
    )
    (record,) = read_topic(broker, queue)
    assert record.key() == b"customer-7"
    headers = headers_of(record)
    assert headers["weirmq.sqs.group"] == b"customer-7"
    assert headers["weirmq.sqs.dedup"] == b"1"
    assert headers["weirmq.sqs.sequence"] == sent["SequenceNumber"].encode()


def test_housekeeping_trims_deleted_messages_up_to_the_oldest_undeleted(
    broker_factory: BrokerFactory,
) -> None:
    """What trimming does to a Kafka reader: after offsets 0-3 and 6 are deleted, the log
    starts at 4, the oldest message not deleted; 6 stays readable above it; once all are
    deleted the log is empty (start = high watermark)."""
    broker = broker_factory(housekeeping_interval_ms=200)
    sqs = sqs_client(broker)
    queue = unique("trim")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    entries = [{"Id": str(n), "MessageBody": f"m{n}"} for n in range(8)]
    assert sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed", []) == []
    by_body = {m["Body"]: m for m in receive(sqs, url, 8)}

    def delete(*numbers: int) -> None:
        for n in numbers:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=by_body[f"m{n}"]["ReceiptHandle"])

    def wait_for_log_start(offset: int) -> None:
        deadline = Deadline(STEP_TIMEOUT_S, f"housekeeping moving the log start to {offset}")
        while log_offsets(broker, queue)[0] != offset:
            deadline.check(f"log offsets {log_offsets(broker, queue)}")
            time.sleep(0.1)

    delete(0, 1, 2, 3, 6)
    wait_for_log_start(4)
    assert [r.value() for r in read_topic(broker, queue)] == [b"m4", b"m5", b"m6", b"m7"]
    delete(4, 5, 7)
    wait_for_log_start(8)
    assert log_offsets(broker, queue) == (8, 8)
    assert read_topic(broker, queue) == []


# --- Kafka -> SQS ------------------------------------------------------------------------------


def test_boto3_receives_what_a_kafka_producer_wrote(broker: BrokerProcess) -> None:
    """Body = value, MessageAttributes = the plain headers (String when UTF-8 text, Binary
    otherwise; `weirmq.` headers and names SQS does not allow are left out, at most ten),
    SentTimestamp = the record's timestamp, and one MessageId per record, the same on
    every receive."""
    sqs = sqs_client(broker)
    queue = unique("fromkafka")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    produce(
        broker,
        queue,
        {
            "value": b"from kafka \xe2\x9c\x93",
            "key": b"k1",
            "timestamp": 1_700_000_000_000,
            "headers": [
                ("color", b"red"),
                ("bytes", b"\xff\x00"),
                ("weirmq.private", b"hidden"),
                ("not allowed", b"spaces are not in SQS names"),
            ],
        },
        {"value": b"bad utf-8 \xff", "headers": [(f"h{n:02d}", b"v") for n in range(12)]},
    )

    first = receive(sqs, url, 2, then_none=False, VisibilityTimeout=1)
    assert [m["Body"] for m in first] == ["from kafka ✓", "bad utf-8 \ufffd"]
    one, many = first
    assert one["MD5OfBody"] == md5("from kafka ✓".encode())
    assert one["MessageAttributes"] == {
        "color": {"DataType": "String", "StringValue": "red"},
        "bytes": {"DataType": "Binary", "BinaryValue": b"\xff\x00"},
    }
    assert one["MD5OfMessageAttributes"] == attributes_md5(one["MessageAttributes"])
    assert one["Attributes"]["SentTimestamp"] == "1700000000000"
    assert one["Attributes"]["ApproximateReceiveCount"] == "1"
    assert sorted(many["MessageAttributes"]) == [f"h{n:02d}" for n in range(10)]
    assert len({m["MessageId"] for m in first}) == 2

    again = receive(sqs, url, 2, VisibilityTimeout=120)  # back after their 1 s
    assert [m["MessageId"] for m in again] == [m["MessageId"] for m in first]
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in again} == {"2"}
    for message in again:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None


# --- AMQP -> SQS -------------------------------------------------------------------------------


@contextlib.contextmanager
def amqp_channel(broker: BrokerProcess) -> Iterator[Any]:
    """A pika channel to the broker as guest; the connection is closed after."""
    assert broker.amqp is not None, "the broker's AMQP listener is off"
    host, _, port = broker.amqp.rpartition(":")
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
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            if connection.is_open:
                connection.close()


def exchange_bound_to_queue(broker: BrokerProcess, queue: str, key: str) -> str:
    """A direct exchange declared over AMQP, bound to the SQS queue's topic with the CLI."""
    exchange = unique("orders")
    with amqp_channel(broker) as channel:
        channel.exchange_declare(exchange, "direct", durable=True)
    bound = ok(weirmq(broker, "exchanges", "bind", exchange, queue, "--key", key))
    assert bound == f"Bound {queue} to exchange {exchange} with key '{key}'.\n"
    return exchange


def test_an_sqs_queue_is_not_an_amqp_queue(broker: BrokerProcess) -> None:
    sqs = sqs_client(broker)
    queue = unique("notamqp")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    with amqp_channel(broker) as channel:
        channel.exchange_declare("direct-x", "direct", durable=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_bind(queue, "direct-x", "k")
        assert closed.value.reply_code == 404
    with amqp_channel(broker) as channel:
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish("", queue, b"lost", mandatory=True)
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None
    assert log_offsets(broker, queue) == (0, 0)


def test_a_pika_publish_reaches_boto3_through_an_exchange_bound_to_the_queue(
    broker: BrokerProcess,
) -> None:
    sqs = sqs_client(broker)
    queue = unique("amqpin")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    exchange = exchange_bound_to_queue(broker, queue, "new")
    with amqp_channel(broker) as channel:
        channel.confirm_delivery()  # each publish returns once confirmed, or raises
        for n in range(3):
            channel.basic_publish(
                exchange,
                "new",
                json.dumps({"order": n}).encode(),
                pika.BasicProperties(headers={"tenant": "acme", "n": str(n)}),
                mandatory=True,
            )
        channel.basic_publish(exchange, "other", b"not bound", mandatory=False)

    got = receive(sqs, url, 3, then_none=False, VisibilityTimeout=1)
    assert [json.loads(m["Body"]) for m in got] == [{"order": n} for n in range(3)]
    for n, message in enumerate(got):
        attributes = message["MessageAttributes"]
        assert attributes["tenant"] == {"DataType": "String", "StringValue": "acme"}
        assert attributes["n"] == {"DataType": "String", "StringValue": str(n)}
        assert attributes["routing-key"] == {"DataType": "String", "StringValue": "new"}
        assert message["MD5OfMessageAttributes"] == attributes_md5(attributes)
    again = receive(sqs, url, 3)  # redelivered after 1 s, with the same MessageIds
    assert [m["MessageId"] for m in again] == [m["MessageId"] for m in got]
    # the exchange's own log has every publish, routed or not
    assert [r.value() for r in read_topic(broker, exchange)][-1] == b"not bound"


def test_amqp_mapping_headers_do_not_crowd_out_application_headers(
    broker: BrokerProcess,
) -> None:
    """A pika publish with eight application headers, a number SQS allows, reaches boto3
    with all of them. The record of an AMQP publish carries the mapping's own headers
    first (`routing-key`, `amqp.exchange`, `amqp.properties`, then the properties' text
    copies), and messages.py's `attributes_of` makes attributes of plain headers up to
    ten, but not of the AMQP mapping's `amqp.*` ones (the encoded property list and the
    exchange)."""
    sqs = sqs_client(broker)
    queue = unique("crowded")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    exchange = exchange_bound_to_queue(broker, queue, "k")
    headers = {f"h{n}": f"v{n}" for n in range(8)}
    with amqp_channel(broker) as channel:
        channel.confirm_delivery()
        channel.basic_publish(
            exchange, "k", b"body", pika.BasicProperties(headers=headers), mandatory=True
        )
    (message,) = receive(sqs, url, 1)
    attributes = message["MessageAttributes"]
    dropped = sorted(set(headers) - set(attributes))
    internal = sorted(name for name in attributes if name.startswith("amqp."))
    assert (dropped, internal) == ([], []), (
        f"application headers dropped: {dropped}; AMQP's own headers shown as SQS "
        f"attributes: {internal}"
    )
