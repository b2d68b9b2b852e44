"""kafka-python 3.0 and aiokafka 0.14, with their default settings, against WeirMQ.

Each compression codec makes a produce/consume round trip with each client; two tests mix
clients (kafka-python lz4 read by confluent-kafka, confluent-kafka zstd read by aiokafka),
so a batch one library wrote is decoded by another. kafka-python picks its protocol
versions from the broker's ApiVersions answer (no ``api_version`` is pinned): a broker
that answers badly gets treated as ancient and receives the old message format.

Consumers use ``assign`` + ``seek_to_beginning`` with ``group_id=None``, so each test reads
exactly what it produced; groups with these clients are in test_groups_python_clients.py.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Message, Producer
from integration_support import (
    Deadline,
    DeliveryLog,
    ErrorLog,
    consume_from_beginning,
    consumer_config,
    headers_for,
    payload,
    producer_config,
    timestamp_for,
)

if TYPE_CHECKING:
    from conftest import BrokerProcess

# kafka-python 3.0 loads its protocol schemas with importlib.resources.read_text(), which
# Python 3.11 deprecates (read_text, and open_text inside it). Its problem, not ours: ignore
# exactly those two warnings, while importing it and while its clients run (they may load
# more schemas lazily). `filterwarnings = error` still applies to everything else.
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

CODECS = ["gzip", "snappy", "lz4", "zstd"]
MESSAGES = 200
VALUE_BYTES = 300  # repetitive, so every codec really shrinks the batch
STEP_TIMEOUT_S = 60.0
KAFKA_CREATE_TIME = 0  # timestamp_type in kafka-python and aiokafka records

Where = dict[int, tuple[int, int]]  # seq -> (partition, offset) acknowledged by the broker


@dataclass(frozen=True, slots=True)
class Received:
    """One consumed record, whatever library read it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp_ms: int
    create_time: bool


def key_for(seq: int) -> bytes:
    return b"key-%d" % seq


def per_partition(where: Where) -> dict[int, int]:
    counts: dict[int, int] = {}
    for partition, _ in where.values():
        counts[partition] = counts.get(partition, 0) + 1
    return counts


def assert_round_trip(where: Where, received: list[Received], count: int) -> None:
    assert sorted(where) == list(range(count)), "not every message was acknowledged"
    assert len(received) == count, f"read {len(received)} records, produced {count}"
    read_at: dict[tuple[int, int], Received] = {}
    for record in received:
        position = (record.partition, record.offset)
        assert position not in read_at, f"{position} read twice"
        read_at[position] = record
    for seq, position in sorted(where.items()):
        record = read_at.get(position)
        assert record is not None, f"seq {seq}: nothing read at acknowledged {position}"
        assert record.headers == headers_for(seq), f"seq {seq} at {position}: {record.headers}"
        assert record.key == key_for(seq), f"seq {seq}: key {record.key!r}"
        assert record.value == payload(seq, VALUE_BYTES), f"seq {seq}: value differs"
        assert record.timestamp_ms == timestamp_for(seq), f"seq {seq}: {record.timestamp_ms}"
        assert record.create_time, f"seq {seq}: timestamp type is not CreateTime"


def from_kafka_record(record: Any) -> Received:
    """A kafka-python or aiokafka ConsumerRecord (same field names)."""
    return Received(
        partition=record.partition,
        offset=record.offset,
        key=record.key,
        value=record.value,
        headers=[(name, bytes(value)) for name, value in record.headers],
        timestamp_ms=record.timestamp,
        create_time=record.timestamp_type == KAFKA_CREATE_TIME,
    )


def from_confluent_message(message: Message) -> Received:
    timestamp_type, timestamp_ms = message.timestamp()
    return Received(
        partition=message.partition(),
        offset=message.offset(),
        key=message.key(),
        value=message.value(),
        headers=list(message.headers() or []),
        timestamp_ms=timestamp_ms,
        create_time=timestamp_type == TIMESTAMP_CREATE_TIME,
    )


# -- kafka-python --------------------------------------------------------------------------------


def kafka_python_produce(bootstrap: str, topic: str, codec: str | None) -> Where:
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
    try:
        futures = {
            seq: producer.send(
                topic,
                key=key_for(seq),
                value=payload(seq, VALUE_BYTES),
                headers=headers_for(seq),
                timestamp_ms=timestamp_for(seq),
            )
            for seq in range(MESSAGES)
        }
        producer.flush(timeout=STEP_TIMEOUT_S)
        where = {}
        for seq, future in futures.items():
            metadata = future.get(timeout=STEP_TIMEOUT_S)
            where[seq] = (metadata.partition, metadata.offset)
        return where
    finally:
        producer.close(timeout=10)


def kafka_python_consume(bootstrap: str, topic: str, expected: Mapping[int, int]) -> list[Received]:
    deadline = Deadline(STEP_TIMEOUT_S, f"kafka-python reading {topic}")
    total = sum(expected.values())
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in expected])
        consumer.seek_to_beginning()
        received: list[Received] = []
        while len(received) < total:
            deadline.check(f"read {len(received)} of {total}")
            for records in consumer.poll(timeout_ms=500).values():
                received.extend(from_kafka_record(r) for r in records)
        return received
    finally:
        consumer.close()


# -- aiokafka ------------------------------------------------------------------------------------


async def aiokafka_produce(bootstrap: str, topic: str, codec: str | None) -> Where:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                key=key_for(seq),
                value=payload(seq, VALUE_BYTES),
                headers=headers_for(seq),
                timestamp_ms=timestamp_for(seq),
            )
            for seq in range(MESSAGES)
        ]
        results = await asyncio.gather(*futures)
        return {seq: (m.partition, m.offset) for seq, m in enumerate(results)}
    finally:
        await producer.stop()


async def aiokafka_consume(
    bootstrap: str, topic: str, expected: Mapping[int, int]
) -> list[Received]:
    total = sum(expected.values())
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        consumer.assign([AioTopicPartition(topic, p) for p in expected])
        await consumer.seek_to_beginning()
        received: list[Received] = []
        while len(received) < total:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                received.extend(from_kafka_record(r) for r in records)
        return received
    finally:
        await consumer.stop()


def run_async(coroutine: Any, what: str) -> Any:
    async def bounded() -> Any:
        try:
            return await asyncio.wait_for(coroutine, STEP_TIMEOUT_S)
        except TimeoutError:
            raise AssertionError(f"{what}: not done after {STEP_TIMEOUT_S:.0f} s") from None

    return asyncio.run(bounded())


# -- confluent-kafka -----------------------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, codec: str) -> Where:
    errors = ErrorLog()
    deliveries = DeliveryLog()
    producer = Producer(producer_config(bootstrap, errors, **{"compression.type": codec}))
    for seq in range(MESSAGES):
        producer.produce(
            topic,
            key=key_for(seq),
            value=payload(seq, VALUE_BYTES),
            headers=headers_for(seq),
            timestamp=timestamp_for(seq),
            on_delivery=deliveries.callback(seq),
        )
        producer.poll(0)
    assert producer.flush(STEP_TIMEOUT_S) == 0, "confluent-kafka flush timed out"
    assert deliveries.errors == []
    assert errors.snapshot() == []
    return deliveries.where


def confluent_consume(bootstrap: str, topic: str, expected: Mapping[int, int]) -> list[Received]:
    errors = ErrorLog()
    received: list[Received] = []
    consumer = Consumer(consumer_config(bootstrap, errors))
    try:
        consume_from_beginning(
            consumer,
            topic,
            expected,
            Deadline(STEP_TIMEOUT_S, f"confluent-kafka reading {topic}"),
            lambda message: received.append(from_confluent_message(message)),
        )
    finally:
        consumer.close()
    assert errors.snapshot() == []
    return received


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(broker: BrokerProcess, codec: str) -> None:
    topic = f"kafka-python-{codec}"
    where = kafka_python_produce(broker.bootstrap, topic, codec)
    received = kafka_python_consume(broker.bootstrap, topic, per_partition(where))
    assert_round_trip(where, received, MESSAGES)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(broker: BrokerProcess, codec: str) -> None:
    topic = f"aiokafka-{codec}"
    where = run_async(aiokafka_produce(broker.bootstrap, topic, codec), "aiokafka produce")
    received = run_async(
        aiokafka_consume(broker.bootstrap, topic, per_partition(where)), "aiokafka consume"
    )
    assert_round_trip(where, received, MESSAGES)


def test_kafka_python_lz4_read_by_confluent(broker: BrokerProcess) -> None:
    topic = "kafka-python-lz4-to-confluent"
    where = kafka_python_produce(broker.bootstrap, topic, "lz4")
    received = confluent_consume(broker.bootstrap, topic, per_partition(where))
    assert_round_trip(where, received, MESSAGES)


def test_confluent_zstd_read_by_aiokafka(broker: BrokerProcess) -> None:
    topic = "confluent-zstd-to-aiokafka"
    where = confluent_produce(broker.bootstrap, topic, "zstd")
    received = run_async(
        aiokafka_consume(broker.bootstrap, topic, per_partition(where)), "aiokafka consume"
    )
    assert_round_trip(where, received, MESSAGES)
