"""Plain Kafka-client helpers for the Spark tests: make topics, produce, read back.

Everything here goes through confluent-kafka, never through the connector, so a test that
writes with Spark and reads with these (or the other way round) checks the connector
against an independent client.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

WAIT_S = 60.0


@dataclass(frozen=True)
class Record:
    """One record as a Kafka client sees it (and as the source's row should show it)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] | None = None


def create_topic(
    bootstrap: str, name: str, partitions: int, config: Mapping[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, partitions, config=dict(config or {}))
    admin.create_topics([topic])[name].result(timeout=WAIT_S)


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(name, total)])[name].result(timeout=WAIT_S)


def produce(bootstrap: str, records: Iterable[Mapping[str, Any]]) -> None:
    """Produces dicts of `topic`, `value` and optionally `key`, `partition`, `timestamp`,
    `headers`; returns once every one is acknowledged (or raises)."""
    failures: list[str] = []

    def report(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for record in records:
        producer.produce(on_delivery=report, **record)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0, "records still unacknowledged"
    assert not failures, failures


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, partitions: int) -> list[Record]:
    """Every record of a topic, read to the high watermarks with a plain consumer."""
    highs = {p: watermarks(bootstrap, topic, p)[1] for p in range(partitions)}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-tests-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done = {p for p, high in highs.items() if high == 0}
        deadline = time.monotonic() + WAIT_S
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"reading {topic} took over {WAIT_S} s"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                if message.offset() >= highs[message.partition()]:
                    done.add(message.partition())
                continue
            headers = message.headers()
            out.append(
                Record(
                    topic=message.topic(),
                    partition=message.partition(),
                    offset=message.offset(),
                    key=message.key(),
                    value=message.value(),
                    timestamp_ms=message.timestamp()[1],
                    headers=tuple(headers) if headers else None,
                )
            )
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


def rows_to_records(rows: Iterable[Any]) -> list[Record]:
    """Spark rows of the source's schema -> `Record`s (UTC timestamps -> epoch ms)."""
    out = []
    for row in rows:
        data = row.asDict()
        headers = data.get("headers")
        out.append(
            Record(
                topic=data["topic"],
                partition=data["partition"],
                offset=data["offset"],
                key=bytes(data["key"]) if data["key"] is not None else None,
                value=bytes(data["value"]) if data["value"] is not None else None,
                timestamp_ms=round(data["timestamp"].timestamp() * 1000),
                headers=tuple(
                    (h["key"], bytes(h["value"]) if h["value"] is not None else None)
                    for h in headers
                )
                if headers
                else None,
            )
        )
    return sorted(out, key=lambda r: (r.topic, r.partition, r.offset))


def wait_for(predicate: Any, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting {timeout_s} s for {what}"
        time.sleep(0.2)


def make_expired_topic(bootstrap: str, name: str) -> str:
    """A one-partition topic of 50 records whose first offsets retention has removed
    (1 KB segments, 2 KB retention; the test broker applies retention every 200 ms)."""
    create_topic(bootstrap, name, 1, {"segment.bytes": "1024", "retention.bytes": "2048"})
    for _ in range(10):  # one request per 5 records, so that segments roll between them
        produce(bootstrap, [{"topic": name, "value": b"x" * 100, "partition": 0}] * 5)
    wait_for(lambda: watermarks(bootstrap, name, 0)[0] > 0, "retention to remove a segment")
    # Retention may remove one segment per pass: let it settle (the test's assertions
    # allow for it moving on anyway).
    settled: list[int] = []

    def settles() -> bool:
        settled.append(watermarks(bootstrap, name, 0)[0])
        return len(settled) >= 5 and len(set(settled[-5:])) == 1

    wait_for(settles, "retention to settle")
    return name
