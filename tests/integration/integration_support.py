"""Helpers the integration tests share: deadlines, payloads, confluent-kafka plumbing.

Kept out of conftest.py because test modules import these names, and a conftest cannot be
imported reliably (tests/ holds several conftest.py files and no packages).

Messages are identified by a sequence number ``seq``. Everything about message ``seq``
(key, value, headers, timestamp) is a pure function of it, so a test that sends 100,000
messages keeps only the delivery report of each one and recomputes the rest to compare.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

# A fixed CreateTime base (2024-01-01T00:00:00Z) makes the expected timestamps exact.
BASE_TIMESTAMP_MS = 1_704_067_200_000


class Deadline:
    """A time budget for one step of a test, so that a hang fails instead of blocking CI."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self._end = time.monotonic() + seconds

    def remaining(self, cap_s: float | None = None) -> float:
        left = max(0.0, self._end - time.monotonic())
        return left if cap_s is None else min(left, cap_s)

    def expired(self) -> bool:
        return time.monotonic() >= self._end

    def check(self, progress: str = "") -> None:
        if self.expired():
            detail = f" ({progress})" if progress else ""
            raise AssertionError(f"{self.what}: not done after {self.seconds:.0f} s{detail}")


def payload(seq: int, size: int) -> bytes:
    """The value of message ``seq``: ``size`` bytes, different for every ``seq``."""
    stamp = b"%010d|" % seq
    return (stamp * (size // len(stamp) + 1))[:size]


def headers_for(seq: int) -> list[tuple[str, bytes]]:
    return [("seq", b"%d" % seq), ("origin", b"weirmq-integration")]


def timestamp_for(seq: int) -> int:
    return BASE_TIMESTAMP_MS + seq


def seq_of(headers: Iterable[tuple[str, bytes]] | None) -> int:
    """The ``seq`` header of a consumed message (list or tuple of (str, bytes) pairs)."""
    assert headers, f"message without headers: {headers!r}"
    for name, value in headers:
        if name == "seq":
            return int(value)
    raise AssertionError(f"message without a seq header: {headers!r}")


class ErrorLog:
    """Thread-safe record of every error a client reported through a callback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[str] = []

    def add(self, text: str) -> None:
        with self._lock:
            self._items.append(text)

    def error_cb(self, error: KafkaError) -> None:
        self.add(f"error_cb: {error.name()}: {error.str()}")

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self._items)


@dataclass
class DeliveryLog:
    """Delivery reports of one confluent-kafka producer, by message ``seq``."""

    where: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> (partition, offset)
    failed: dict[int, int] = field(default_factory=dict)  # seq -> KafkaError code
    errors: list[str] = field(default_factory=list)

    def callback(self, seq: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                self.failed[seq] = error.code()
                self.errors.append(f"seq {seq}: {error.name()}: {error.str()}")
            elif seq in self.where:
                self.errors.append(f"seq {seq}: second delivery report")
            else:
                self.where[seq] = (message.partition(), message.offset())

        return on_delivery

    def count_by_partition(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for partition, _ in self.where.values():
            counts[partition] = counts.get(partition, 0) + 1
        return counts


def producer_config(bootstrap: str, errors: ErrorLog, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "error_cb": errors.error_cb, **extra}


def consumer_config(bootstrap: str, errors: ErrorLog, **extra: object) -> dict[str, object]:
    """A consumer that only ever uses ``assign()``.

    confluent-kafka refuses to build a Consumer without ``group.id`` ("group.id must be
    set"), even for assign-only use. The id is never used for a group: no subscribe, no
    commits, no stored offsets. ``auto.offset.reset=error`` turns an unexpected
    OFFSET_OUT_OF_RANGE into a visible error instead of a silent jump.
    """
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "weirmq-integration-assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "error_cb": errors.error_cb,
        **extra,
    }


def produce_with_backpressure(produce: Callable[[], None], poll: Callable[[float], int]) -> None:
    """Call ``produce``; while librdkafka's local queue is full, serve callbacks and retry."""
    while True:
        try:
            produce()
            return
        except BufferError:
            poll(0.05)


def consume_from_beginning(
    consumer: Consumer,
    topic: str,
    expected: Mapping[int, int],
    deadline: Deadline,
    on_message: Callable[[Message], None],
) -> dict[int, int]:
    """Assign ``expected``'s partitions from the beginning; read ``expected[p]`` records each.

    Returns how many records were read per partition. Fails on a consumer error or when
    the deadline passes first.
    """
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in expected])
    counts = dict.fromkeys(expected, 0)
    while any(counts[p] < n for p, n in expected.items()):
        deadline.check(f"read {counts} of {dict(expected)} records per partition")
        for message in consumer.consume(num_messages=1000, timeout=deadline.remaining(1.0)):
            error = message.error()
            if error is not None:
                raise AssertionError(f"consumer error: {error.name()}: {error.str()}")
            counts[message.partition()] += 1
            on_message(message)
    return counts


def high_watermarks(consumer: Consumer, topic: str, partitions: list[int]) -> dict[int, int]:
    """The broker's high watermark of each partition (a ListOffsets round trip)."""
    marks = {}
    for p in partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        marks[p] = high
    return marks
