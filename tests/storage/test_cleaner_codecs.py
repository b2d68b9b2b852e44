"""Log compaction keeps a partly kept batch's codec (storage/cleaner.py, step 3).

A batch of each codec loses some records to newer values of their keys; the rewrite must
come back in the same codec, with a valid CRC, holding exactly the records that stay. The
last test has librdkafka produce and consume around a running broker's cleaner, so that
what the cleaner compresses is read by a client that is not ours.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, NewTopic

from weirmq.records.batch import (
    ATTR_CODEC_MASK,
    Record,
    check_batch,
    decode_records,
    encode_batch,
    parse_header,
)
from weirmq.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from weirmq.records.recompress import CODECS, recompress_batch
from weirmq.storage.cleaner import CleanerSettings, CompactionConfig
from weirmq.storage.config import LogConfig
from weirmq.storage.log import FileLog
from weirmq.storage.manager import LogManager
from weirmq.testing import Broker as RunningBroker
from weirmq.testing import ManualClock
from weirmq.testing.records import split_batches

TOPIC = "codecs"


def _manager(path: Path, clock: ManualClock) -> LogManager:
    return LogManager(
        path,
        clock=clock,
        config_for=lambda _topic: LogConfig(
            segment_bytes=64 * 1024, index_interval_bytes=256, retention_ms=None
        ),
        compaction_for=lambda _topic: CompactionConfig(compact=True, min_cleanable_dirty_ratio=0),
        cleaner_settings=CleanerSettings(offset_map_entries_max=1000),
    )


def _batches(log_: FileLog) -> list[bytes]:
    data = log_.read(log_.log_start_offset, 1 << 20).records
    return [bytes(batch) for batch in split_batches(data)]


@pytest.mark.parametrize(
    ("codec", "bits"),
    [("gzip", GZIP), ("snappy", SNAPPY), ("lz4", LZ4), ("zstd", ZSTD), ("uncompressed", NONE)],
)
def test_a_partly_kept_batch_keeps_its_codec(
    tmp_path: Path, clock: ManualClock, codec: str, bits: int
) -> None:
    manager = _manager(tmp_path, clock)
    try:
        log_ = manager.create(TOPIC, 0)
        # Offsets 0-9: ten keys, compressible values; then keys 0-4 again: half of the
        # first batch goes.
        first = [
            Record(value=b"old-%d " % i * 20, key=b"k%d" % i, timestamp_ms=clock())
            for i in range(10)
        ]
        second = [
            Record(value=b"new-%d" % i, key=b"k%d" % i, timestamp_ms=clock()) for i in range(5)
        ]
        for records in (first, second):
            batch = encode_batch(records)
            log_.append(recompress_batch(batch, codec) or batch)
        log_._roll()
        log_.flush()

        assert manager.cleaner.run_once() == 1
        assert manager.finish_cleaning() == 1

        batches = _batches(log_)
        rewritten = batches[0]
        header = check_batch(rewritten, 0, len(rewritten))
        assert not isinstance(header, str), header  # CRC and framing valid
        assert header.attributes & ATTR_CODEC_MASK == bits
        assert (header.base_offset, header.last_offset, header.records_count) == (0, 9, 5)
        assert list(decode_records(rewritten)) == [
            (i, b"k%d" % i, b"old-%d " % i * 20) for i in range(5, 10)
        ]
        # The second batch was kept whole, byte for byte, in its codec too.
        assert parse_header(batches[1]).attributes & ATTR_CODEC_MASK == bits
        assert [o for o, _k, _v in decode_records(batches[1])] == list(range(10, 15))
    finally:
        manager.close()


def test_a_restart_reads_the_recompressed_segment(tmp_path: Path, clock: ManualClock) -> None:
    """Reopened as after a crash, the log reads the same records, still in zstd."""
    manager = _manager(tmp_path, clock)
    log_ = manager.create(TOPIC, 0)
    records = [
        Record(value=b"v%d" % i, key=b"k%d" % (i % 3), timestamp_ms=clock()) for i in range(30)
    ]
    log_.append(recompress_batch(encode_batch(records), "zstd") or b"")
    log_._roll()
    log_.flush()
    manager.cleaner.run_once()
    manager.finish_cleaning()
    before = [r for batch in _batches(log_) for r in decode_records(batch)]
    assert before == [(27, b"k0", b"v27"), (28, b"k1", b"v28"), (29, b"k2", b"v29")]
    manager.close()
    (tmp_path / ".clean-shutdown").unlink()  # the next open takes it for a crash
    reopened = _manager(tmp_path, clock)
    try:
        again = reopened.get(TOPIC, 0)
        assert again is not None and again.offline_reason is None
        assert [r for batch in _batches(again) for r in decode_records(batch)] == before
        assert parse_header(_batches(again)[0]).attributes & ATTR_CODEC_MASK == ZSTD
    finally:
        reopened.close()


# --- with real clients ---------------------------------------------------------------------

CLIENT_TIMEOUT_S = 30.0
KEYS = 10
ROUNDS = 40


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {CLIENT_TIMEOUT_S:g} s"
        time.sleep(0.05)


def _consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """Every record of partition 0 from the start to the high watermark, as librdkafka
    decodes them (decompression included)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "log_level": 0,
         "enable.auto.commit": False}
    )  # fmt: skip
    try:
        _low, high = consumer.get_watermark_offsets(
            KafkaPartition(topic, 0), timeout=CLIENT_TIMEOUT_S
        )
        consumer.assign([KafkaPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not out or out[-1][0] < high - 1:
            assert time.monotonic() < deadline, f"read up to {out[-1:]} of {high}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            offset, key, value = message.offset(), message.key(), message.value()
            assert offset is not None and key is not None and value is not None
            out.append((offset, key, value))
        return out
    finally:
        consumer.close()


def _value(round_: int, key: bytes) -> bytes:
    return b"value %d of %s " % (round_, key) * 5


@pytest.mark.integration
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_real_consumer_reads_the_cleaned_batches_in_their_codec(codec: str) -> None:
    """librdkafka compresses, the running broker's cleaner thread rewrites (its settings
    from the broker's), librdkafka decompresses what the cleaner compressed. Each round's
    batch holds ten keys that later rounds overwrite and one of its own, which stays: so
    every cleaned batch is partly kept, the case that is compressed again."""
    topic = f"compacted-{codec}"
    with RunningBroker(
        segment_bytes=4096, flush_interval_ms=20, log_cleaner_backoff_ms=50
    ) as running:
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(CLIENT_TIMEOUT_S)
        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
             "log_level": 0}
        )  # fmt: skip
        produced: dict[bytes, list[bytes]] = {}
        for round_ in range(ROUNDS):
            for key in [b"k%d" % k for k in range(KEYS)] + [b"own%d" % round_]:
                producer.produce(topic, key=key, value=_value(round_, key))
                produced.setdefault(key, []).append(_value(round_, key))
            assert producer.flush(CLIENT_TIMEOUT_S) == 0  # one batch per round

        stats = running.broker.logs.cleaner.stats
        _wait_until(lambda: stats.segments_swapped >= 1, "cleaned")
        records = _consume_all(bootstrap, topic)

        consumed: dict[bytes, list[bytes]] = {}
        for _offset, key, value in records:
            assert value in produced[key]
            consumed.setdefault(key, []).append(value)
        assert all(consumed[key][-1] == values[-1] for key, values in produced.items())
        assert consumed[b"own0"] == produced[b"own0"]  # from round 0's rewritten batch
        assert len(records) < sum(map(len, produced.values()))

        def first_batch() -> bytes:
            log_ = running.broker.logs.get(topic, 0)
            return bytes(split_batches(log_.read(0, 1 << 20).records)[0])

        header = parse_header(running.call(first_batch))
        assert header.attributes & ATTR_CODEC_MASK == CODECS[codec]
        assert header.records_count == 1  # round 0's own key alone was kept
