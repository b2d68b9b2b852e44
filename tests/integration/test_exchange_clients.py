"""Exchanges through real Kafka clients: declared with CreateTopics, bound with
IncrementalAlterConfigs, produced to by confluent-kafka and kafka-python, read back from the
destinations; and kill -9 while producing to an exchange at full speed.

The broker is the real `weirmq serve` process (conftest.BrokerProcess).
"""

from __future__ import annotations

import functools
import time
import warnings
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from integration_support import (
    Deadline,
    ErrorLog,
    consume_from_beginning,
    consumer_config,
    high_watermarks,
    produce_with_backpressure,
    producer_config,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

# kafka-python 3.0 loads its schemas with importlib.resources.read_text (deprecated in 3.11):
# ignore exactly that, as test_python_clients does.
KAFKA_PYTHON_RESOURCE_WARNINGS = r"(read_text|open_text) is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=KAFKA_PYTHON_RESOURCE_WARNINGS, category=DeprecationWarning
    )
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KafkaTopicPartition

pytestmark = pytest.mark.filterwarnings(
    f"ignore:{KAFKA_PYTHON_RESOURCE_WARNINGS}:DeprecationWarning"
)

TIMEOUT_S = 30
BINDINGS = "weirmq.exchange.bindings"


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap: str, *topics: NewTopic) -> None:
    client = admin(bootstrap)  # kept alive until every future is answered
    for future in client.create_topics(list(topics)).values():
        future.result(TIMEOUT_S)


def exchange(name: str, kind: str, partitions: int = 1, **configs: str) -> NewTopic:
    return NewTopic(name, partitions, config={"weirmq.exchange.type": kind, **configs})


def bind(bootstrap: str, exchange_name: str, *specs: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        exchange_name,
        incremental_configs=[
            ConfigEntry(BINDINGS, ",".join(specs), incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    client = admin(bootstrap)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT_S)


def described_bindings(bootstrap: str, exchange_name: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, exchange_name)
    client = admin(bootstrap)
    [future] = client.describe_configs([resource]).values()
    return str(future.result(TIMEOUT_S)[BINDINGS].value)


def read_all(bootstrap: str, topic: str, partitions: int) -> list[Message]:
    """Every record of `topic`, partition by partition."""
    errors = ErrorLog()
    consumer = Consumer(consumer_config(bootstrap, errors))
    try:
        marks = high_watermarks(consumer, topic, list(range(partitions)))
        found: list[Message] = []
        consume_from_beginning(
            consumer, topic, marks, Deadline(TIMEOUT_S, f"read {topic}"), found.append
        )
    finally:
        consumer.close()
    found.sort(key=lambda m: (m.partition(), m.offset()))
    return found


def test_confluent_kafka_routes_through_a_topic_exchange(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    create(
        bootstrap,
        exchange("events", "topic", 2),
        NewTopic("eu", 3),
        NewTopic("orders", 1),
        NewTopic("all-events", 2),
    )
    bind(bootstrap, "events", "eu?key=eu.#", "orders?key=*.orders.*", "all-events?key=#")
    assert described_bindings(bootstrap, "events") == (
        "eu?key=eu.#,orders?key=*.orders.*,all-events?key=#"
    )
    errors = ErrorLog()
    producer = Producer(producer_config(bootstrap, errors, acks="all", **{"linger.ms": 5}))
    sent = []
    for i in range(300):
        region = ("eu", "us", "apac")[i % 3]
        key = f"{region}.orders.{i % 7}".encode()
        headers = [("seq", str(i).encode())]
        producer.produce("events", value=b"v%d" % i, key=key, headers=headers)
        sent.append((key, b"v%d" % i))
    assert producer.flush(TIMEOUT_S) == 0
    assert errors.snapshot() == []

    def received(topic: str, partitions: int) -> dict[bytes, list[bytes]]:
        by_key: dict[bytes, list[bytes]] = defaultdict(list)
        for message in read_all(bootstrap, topic, partitions):
            assert message.headers() is not None
            by_key[message.key()].append(message.value())
        return by_key

    def expected(match: str) -> dict[bytes, list[bytes]]:
        by_key: dict[bytes, list[bytes]] = defaultdict(list)
        for key, value in sent:
            if match in key.decode():
                by_key[key].append(value)
        return by_key

    # Per key, every destination has exactly the right records, in the order produced.
    assert received("eu", 3) == expected("eu.")
    assert received("orders", 1) == expected(".orders.")
    assert received("all-events", 2) == expected("")


def test_kafka_python_produces_to_a_direct_exchange_with_an_alternate(
    broker: BrokerProcess,
) -> None:
    bootstrap = broker.bootstrap
    create(
        bootstrap,
        exchange("tasks", "direct", **{"weirmq.exchange.alternate": "leftovers"}),
        exchange("leftovers", "fanout"),
        NewTopic("emails", 1),
        NewTopic("reports", 1),
        NewTopic("unrouted", 1),
    )
    bind(bootstrap, "tasks", "emails?key=email", "reports?key=report")
    bind(bootstrap, "leftovers", "unrouted")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i, kind in enumerate(["email", "report", "sms", "email"]):
        producer.send("tasks", key=kind.encode(), value=b"%d" % i)
    producer.flush(TIMEOUT_S)
    producer.close()

    def values(topic: str) -> list[bytes]:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
        )
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        found = [message.value for message in consumer]
        consumer.close()
        return found

    assert values("emails") == [b"0", b"3"]
    assert values("reports") == [b"1"]
    assert values("unrouted") == [b"2"]
    assert values("tasks") == [b"0", b"1", b"2", b"3"]  # the exchange keeps its input


def test_an_exchange_that_rejects_unroutable_records_fails_their_delivery(
    broker: BrokerProcess,
) -> None:
    bootstrap = broker.bootstrap
    create(
        bootstrap,
        exchange("strict", "direct", **{"weirmq.exchange.unroutable": "reject"}),
        NewTopic("dest", 1),
    )
    bind(bootstrap, "strict", "dest?key=known")
    errors = ErrorLog()
    producer = Producer(producer_config(bootstrap, errors, acks="all", **{"linger.ms": 0}))
    outcomes: dict[bytes, KafkaError | None] = {}
    for key in (b"known", b"unknown"):
        producer.produce(
            "strict", value=b"x", key=key, on_delivery=lambda e, m: outcomes.update({m.key(): e})
        )
        producer.flush(TIMEOUT_S)
    assert outcomes[b"known"] is None
    refused = outcomes[b"unknown"]
    assert refused is not None and refused.code() == KafkaError.INVALID_RECORD


def test_bad_bindings_are_refused_with_invalid_config(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    create(bootstrap, exchange("c", "content"), NewTopic("dest", 1))
    with pytest.raises(Exception, match="INVALID_CONFIG") as refused:
        bind(bootstrap, "c", "dest?match=amount >")
    assert "at 8" in str(refused.value)  # the parser says where
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        bind(bootstrap, "c", "nowhere?match=a = 1")


# --- kill -9 ----------------------------------------------------------------------------------

KILLS = 3
ACKS_BEFORE_KILL = 1_500
TIME_BUDGET_S = 150


def test_kill_while_producing_to_an_exchange_loses_and_repeats_nothing(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    bootstrap = broker.bootstrap
    create(
        bootstrap,
        exchange("x", "topic", 2),
        NewTopic("evens", 2),
        NewTopic("odds", 1),
        NewTopic("copies", 3),
    )
    bind(bootstrap, "x", "evens?key=even.*", "odds?key=odd.*", "copies?key=#")
    deadline = Deadline(TIME_BUDGET_S, "produce to the exchange across kills")
    acked: set[bytes] = set()
    seq = 0
    for _ in range(KILLS):
        errors = ErrorLog()
        producer = Producer(
            producer_config(
                bootstrap,
                errors,
                acks="all",
                **{"enable.idempotence": True, "linger.ms": 2, "message.timeout.ms": 60_000},
            )
        )

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                acked.add(message.value())

        target = len(acked) + ACKS_BEFORE_KILL
        while len(acked) < target:
            deadline.check(f"{len(acked)} acknowledged")
            key = b"%s.%d" % (b"even" if seq % 2 == 0 else b"odd", seq % 13)
            send = functools.partial(producer.produce, "x", b"%d" % seq, key, on_delivery=delivered)
            produce_with_backpressure(send, producer.poll)
            seq += 1
            producer.poll(0)
        broker.kill()  # with requests in flight
        broker.restart()
        # Unacknowledged records may or may not be in the exchange; purge them locally.
        producer.purge()
        producer.flush(5)
        time.sleep(0.1)

    exchange_values = {m.value() for m in read_all(bootstrap, "x", 2)}
    assert acked <= exchange_values
    copies = [m.value() for m in read_all(bootstrap, "copies", 3)]
    evens = [m.value() for m in read_all(bootstrap, "evens", 2)]
    odds = [m.value() for m in read_all(bootstrap, "odds", 1)]
    # Every record the exchange holds was routed exactly once into each destination...
    assert sorted(copies) == sorted(exchange_values)
    assert sorted(evens + odds) == sorted(exchange_values)
    assert {int(v) % 2 for v in evens} <= {0} and {int(v) % 2 for v in odds} <= {1}
    # ...and in exchange order per key: values grow within each destination partition.
    for topic, partitions in (("copies", 3), ("evens", 2), ("odds", 1)):
        by_key: dict[bytes, list[int]] = defaultdict(list)
        for message in read_all(bootstrap, topic, partitions):
            by_key[message.key()].append(int(message.value()))
        for key, seen in by_key.items():
            assert seen == sorted(seen), (topic, key)


def _produce_confluent(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]
) -> None:
    errors = ErrorLog()
    producer = Producer(producer_config(bootstrap, errors, acks="all", **{"linger.ms": 5}))
    for key, value, headers in records:
        producer.produce(topic, value=value, key=key, headers=headers)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors.snapshot() == []


def _produce_kafka_python(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]
) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for key, value, headers in records:
        producer.send(topic, key=key, value=value, headers=headers)
    producer.flush(TIMEOUT_S)
    producer.close()


@pytest.mark.parametrize(
    "produce", [_produce_confluent, _produce_kafka_python], ids=["confluent-kafka", "kafka-python"]
)
def test_every_exchange_type_and_a_chain_with_real_producers(
    broker: BrokerProcess, produce: Any
) -> None:
    bootstrap = broker.bootstrap
    create(
        bootstrap,
        exchange("direct-x", "direct", 2),
        exchange("topic-x", "topic", 2),
        exchange("fanout-x", "fanout"),
        exchange("headers-x", "headers"),
        exchange("content-x", "content"),
        *(NewTopic(name, partitions) for name, partitions in
          (("paid", 2), ("eu", 3), ("copy-a", 1), ("copy-b", 2), ("urgent-eu", 1),
           ("big", 2))),
    )  # fmt: skip
    bind(bootstrap, "direct-x", "paid?key=order.paid")
    bind(bootstrap, "topic-x", "eu?key=eu.#", "fanout-x?key=#", "content-x?key=*.vip.#")
    bind(bootstrap, "fanout-x", "copy-a", "copy-b")
    bind(bootstrap, "headers-x", "urgent-eu?region=eu&urgent")
    bind(bootstrap, "content-x", "big?match=amount >= 100 AND region IN ('eu'%2C 'uk')")
    records = []
    for i in range(120):
        region = ("eu", "us", "uk")[i % 3]
        key = f"{region}.{'vip.' if i % 4 == 0 else ''}c{i % 9}".encode()
        headers = [("region", region.encode()), ("amount", str(i * 3).encode())]
        if i % 5 == 0:
            headers.append(("urgent", b"yes"))
        records.append((key, b"%d" % i, headers))
    produce(bootstrap, "topic-x", records)
    produce(bootstrap, "headers-x", records)
    paid = [(b"order.paid", b"p%d" % i, []) for i in range(5)] + [(b"order.new", b"n", [])]
    produce(bootstrap, "direct-x", paid)

    def by_key(topic: str, partitions: int) -> dict[bytes, list[bytes]]:
        found: dict[bytes, list[bytes]] = defaultdict(list)
        for message in read_all(bootstrap, topic, partitions):
            found[message.key()].append(message.value())
        return found

    def expected(keep: Any) -> dict[bytes, list[bytes]]:
        found: dict[bytes, list[bytes]] = defaultdict(list)
        for key, value, headers in records:
            if keep(key.decode(), dict(headers)):
                found[key].append(value)
        return found

    assert by_key("paid", 2) == {b"order.paid": [b"p%d" % i for i in range(5)]}
    assert by_key("eu", 3) == expected(lambda k, h: k.startswith("eu."))
    everything = expected(lambda k, h: True)
    assert by_key("copy-a", 1) == everything and by_key("copy-b", 2) == everything
    assert by_key("urgent-eu", 1) == expected(lambda k, h: h["region"] == b"eu" and "urgent" in h)
    assert by_key("big", 2) == expected(
        lambda k, h: ".vip." in k and int(h["amount"]) >= 100 and h["region"] in (b"eu", b"uk")
    )
