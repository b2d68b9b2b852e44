"""One flipped bit in a middle segment of a real broker's log costs its range, not the
partition, and the operator procedure of docs/storage.md gets it back online.

The broker stores a topic in small segments (segment.bytes 4096, one record per batch),
is stopped, and one byte in the records of a middle segment is flipped. After a restart,
with confluent-kafka (librdkafka) as the client:
- a consumer reads every record before the damaged range, then gets CORRUPT_MESSAGE
  (librdkafka's INVALID_MSG, code 2) as a consumer error for it, not silence: librdkafka
  would retry KAFKA_STORAGE_ERROR quietly forever;
- seeking past the range, it reads the rest; a producer still gets its records stored;
- a timestamp lookup that would land in the range is answered with the error too.
Then, the broker stopped: ``weirmq storage verify`` exits 1 naming the file and the
offsets, ``repair`` gives the range up, and after the next start a consumer reads from
the beginning to the end with no error, reading past the range given up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from integration_support import (
    Deadline,
    DeliveryLog,
    ErrorLog,
    consumer_config,
    create_topic,
    headers_for,
    payload,
    producer_config,
    seq_of,
    timestamp_for,
)

from weirmq.records.batch import parse_header

if TYPE_CHECKING:
    from conftest import BrokerFactory

TOPIC = "damaged"
SEGMENT_BYTES = 4096
VALUE_BYTES = 300  # one record per batch: about ten batches per segment
RECORDS = 80
STEP_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 60.0
CORRUPT_MESSAGE = KafkaError.INVALID_MSG  # librdkafka's name for Kafka's code 2


def produce(producer: Producer, seqs: range, deliveries: DeliveryLog) -> None:
    for seq in seqs:
        producer.produce(
            TOPIC,
            value=payload(seq, VALUE_BYTES),
            headers=headers_for(seq),
            timestamp=timestamp_for(seq),
            on_delivery=deliveries.callback(seq),
        )
    assert producer.flush(STEP_TIMEOUT_S) == 0, "records not delivered in time"
    assert not deliveries.errors, deliveries.errors


def one_batch_producer(bootstrap: str, errors: ErrorLog) -> Producer:
    extra = {"acks": "all", "linger.ms": 0, "batch.num.messages": 1, "log_level": 0}
    return Producer(producer_config(bootstrap, errors, **extra))


def batches(path: Path) -> list[tuple[int, int]]:
    """(position, base offset) of every batch of a segment file."""
    data = path.read_bytes()
    found, position = [], 0
    while position < len(data):
        header = parse_header(data, position)
        found.append((position, header.base_offset))
        position += header.size
    return found


def flip_a_byte_in_a_middle_segment(partition_dir: Path) -> tuple[Path, int, int]:
    """Flips a byte in the records of the third batch of the third segment; returns that
    segment and the damaged range [start, end): from that batch to the next segment."""
    segments = sorted(partition_dir.glob("*.log"))
    assert len(segments) >= 5, f"only {len(segments)} segments"
    middle = segments[2]
    position, start = batches(middle)[2]
    end = int(segments[3].name[:20])
    with middle.open("r+b") as f:
        f.seek(position + 100)  # inside the records: covered by the batch's CRC
        byte = f.read(1)[0]
        f.seek(position + 100)
        f.write(bytes([byte ^ 0x20]))
    return middle, start, end


def read(consumer: Consumer, start: int, stop_offset: int, deadline: Deadline) -> list[Message]:
    """Messages from `start` until one at or past `stop_offset` or a consumer error (which
    ends the list); fails at the deadline."""
    consumer.assign([TopicPartition(TOPIC, 0, start)])
    got: list[Message] = []
    while True:
        deadline.check(f"read {len(got)} messages from offset {start}")
        for message in consumer.consume(num_messages=100, timeout=deadline.remaining(1.0)):
            got.append(message)
            if message.error() is not None or (message.offset() or 0) >= stop_offset - 1:
                return got


def storage_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEIRMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "weirmq", "storage", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env=env,
        check=False,
    )


def test_a_damaged_range_is_refused_then_repaired(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    errors = ErrorLog()
    create_topic(broker.bootstrap, TOPIC, 1, {"segment.bytes": str(SEGMENT_BYTES)})
    deliveries = DeliveryLog()
    produce(one_batch_producer(broker.bootstrap, errors), range(RECORDS), deliveries)
    assert sorted(offset for _, offset in deliveries.where.values()) == list(range(RECORDS))
    assert broker.stop() == 0

    data_dir = broker.data_dir
    middle, start, end = flip_a_byte_in_a_middle_segment(data_dir / f"{TOPIC}-0")
    assert 0 < start < end < RECORDS
    broker.start()
    consumer = Consumer(consumer_config(broker.bootstrap, errors, log_level=0))
    try:
        # Everything before the damaged range, then an error for it: not a hang.
        got = read(consumer, 0, RECORDS, Deadline(STEP_TIMEOUT_S, "reading up to the damage"))
        *records, refused = got
        assert [m.offset() for m in records] == list(range(start))
        assert [seq_of(m.headers()) for m in records] == list(range(start))
        error = refused.error()
        assert error is not None and error.code() == CORRUPT_MESSAGE, error

        # Inside the range, at any offset: the same error.
        (refused,) = read(consumer, end - 1, RECORDS, Deadline(STEP_TIMEOUT_S, "inside"))
        error = refused.error()
        assert error is not None and error.code() == CORRUPT_MESSAGE, error

        # Past it, everything; and producing goes on.
        more = DeliveryLog()
        produce(one_batch_producer(broker.bootstrap, errors), range(RECORDS, RECORDS + 5), more)
        assert sorted(o for _, o in more.where.values()) == list(range(RECORDS, RECORDS + 5))
        got = read(consumer, end, RECORDS + 5, Deadline(STEP_TIMEOUT_S, "reading past it"))
        assert [m.offset() for m in got] == list(range(end, RECORDS + 5))
        assert all(m.error() is None for m in got)

        # A timestamp whose first record could be in the range: an error, not a guess.
        lookup = [TopicPartition(TOPIC, 0, timestamp_for(start + 1))]
        with pytest.raises(KafkaException) as failed:
            consumer.offsets_for_times(lookup, timeout=STEP_TIMEOUT_S)
        assert failed.value.args[0].code() == CORRUPT_MESSAGE, failed.value

        # The operator procedure: verify refuses to touch a running broker's data...
        in_use = storage_cli("verify", "--data-dir", str(data_dir))
        assert in_use.returncode == 3, in_use.stderr
        assert f"pid {broker.pid}" in in_use.stderr
    finally:
        consumer.close()
    assert broker.stop() == 0

    # ...names the damage once the broker is stopped...
    verified = storage_cli("verify", "--data-dir", str(data_dir))
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert f"{TOPIC}-0  DAMAGED" in verified.stdout
    assert f"offsets {start}..{end - 1} ({TOPIC}-0/{middle.name} from position" in verified.stdout
    # ...and repair gives the range up.
    repaired = storage_cli("repair", "--data-dir", str(data_dir))
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert f"lost {start}..{end - 1} ({end - start} offsets" in repaired.stdout
    assert storage_cli("verify", "--data-dir", str(data_dir)).returncode == 0

    broker.start()
    consumer = Consumer(consumer_config(broker.bootstrap, errors, log_level=0))
    try:
        got = read(consumer, 0, RECORDS + 5, Deadline(STEP_TIMEOUT_S, "reading after repair"))
        assert all(m.error() is None for m in got), [m.error() for m in got if m.error()]
        expected = [*range(start), *range(end, RECORDS + 5)]
        assert [m.offset() for m in got] == expected
        assert [seq_of(m.headers()) for m in got] == expected
    finally:
        consumer.close()
    assert not [e for e in errors.snapshot() if "INVALID_MSG" not in e], errors.snapshot()
