"""Log compaction seen by real clients: a compacted topic read from the beginning holds
one record per key, the newest, at its original offset; a kill -9 while the cleaner runs
loses nothing."""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from integration_support import Deadline, ErrorLog, consumer_config, create_topic, producer_config

if TYPE_CHECKING:
    from conftest import BrokerFactory

KEYS = 20
UPDATES = 150
VALUE_BYTES = 100
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}
SETTINGS = {"housekeeping_interval_ms": 200}
WAIT_S = 90


def _value(key: int, update: int) -> bytes:
    return (b"k%d-u%d-" % (key, update)).ljust(VALUE_BYTES, b".")


def _produce(bootstrap: str, topic: str, updates: range, errors: ErrorLog) -> None:
    producer = Producer(
        producer_config(bootstrap, errors, acks="all", **{"linger.ms": 5, "batch.size": 4096})
    )
    failed: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failed.append(str(error))

    for update in updates:
        for key in range(KEYS):
            producer.produce(
                topic, key=b"key-%d" % key, value=_value(key, update), on_delivery=delivered
            )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not failed, failed[:3]


def _read_all(bootstrap: str, topic: str, errors: ErrorLog) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record from the beginning to the high watermark (the
    newest record of the log is the newest of its key: never removed)."""
    consumer = Consumer(consumer_config(bootstrap, errors))
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes, bytes]] = []
        deadline = Deadline(30, "a read from the beginning")
        while not out or out[-1][0] < high - 1:
            deadline.check(f"read up to {high}")
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                raise AssertionError(f"consumer error: {error.str()}")
            offset, key, value = message.offset(), message.key(), message.value()
            assert offset is not None and key is not None and value is not None
            out.append((offset, key, value))
        return out
    finally:
        consumer.close()


def _wait_compacted(
    bootstrap: str, topic: str, errors: ErrorLog, newest: int
) -> list[tuple[int, bytes, bytes]]:
    """Read until the log holds at most a few records per key (the active segment's are
    never cleaned), checking the invariants on every read."""
    deadline = Deadline(WAIT_S, "compaction")
    while True:
        records = _read_all(bootstrap, topic, errors)
        _check(records, newest)
        if len(records) <= 3 * KEYS:
            return records
        deadline.check(f"compaction: still {len(records)} records")
        time.sleep(1)


def _check(records: list[tuple[int, bytes, bytes]], newest: int) -> None:
    """Offsets increase; every key is there, its last record being its newest value."""
    offsets = [o for o, _k, _v in records]
    assert offsets == sorted(set(offsets))
    last = {k: v for _o, k, v in records}
    assert last == {b"key-%d" % key: _value(key, newest) for key in range(KEYS)}


def test_a_compacted_topic_keeps_the_newest_record_per_key(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(**SETTINGS)
    errors = ErrorLog()
    create_topic(broker.bootstrap, "compacted", 1, TOPIC_CONFIGS)
    _produce(broker.bootstrap, "compacted", range(UPDATES), errors)
    records = _wait_compacted(broker.bootstrap, "compacted", errors, UPDATES - 1)
    offsets = [o for o, _k, _v in records]
    assert offsets[-1] == KEYS * UPDATES - 1  # the offsets kept: gaps, no renumbering
    assert len(offsets) < offsets[-1] + 1
    assert not errors.snapshot()
    # kcat (librdkafka as Debian builds it) reads the same records at the same offsets.
    kcat = subprocess.run(
        [shutil.which("kcat") or "kcat", "-b", broker.bootstrap, "-C", "-t", "compacted",
         "-o", "beginning", "-e", "-q", "-f", "%o %k %s\\n"],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    seen = [line.split(" ") for line in kcat.stdout.decode().splitlines()]
    read = [(int(o), k.encode(), v.encode()) for o, k, v in seen]
    _check(read, UPDATES - 1)  # the cleaner may have gone on since: the same invariants
    assert len(read) <= len(records) and set(read) <= set(records)


def test_kill_during_compaction_loses_nothing(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(**SETTINGS)
    errors = ErrorLog()
    create_topic(broker.bootstrap, "compacted", 1, TOPIC_CONFIGS)
    rounds = 4
    for n in range(rounds):
        _produce(broker.bootstrap, "compacted", range(n * UPDATES, (n + 1) * UPDATES), errors)
        time.sleep(random.uniform(0.3, 1.5))  # the cleaner is likely busy now
        broker.kill()
        broker.start()
        _check(_read_all(broker.bootstrap, "compacted", errors), (n + 1) * UPDATES - 1)
    _wait_compacted(broker.bootstrap, "compacted", errors, rounds * UPDATES - 1)
