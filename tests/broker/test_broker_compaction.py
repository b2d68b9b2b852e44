"""The broker's wiring of log compaction: which topics are cleaned, with which configs, and
the cleaner's swaps reaching the partitions' logs."""

from __future__ import annotations

from pathlib import Path

from weirmq.broker.core import Broker
from weirmq.broker.group_service import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
from weirmq.broker.shares import SHARE_STATE_TOPIC, SHARE_STATE_TOPIC_CONFIGS
from weirmq.records.batch import Record, decode_records, encode_batch, parse_header
from weirmq.settings import Settings
from weirmq.storage.cleaner import CompactionConfig
from weirmq.testing.records import split_batches


def test_compact_topics_get_their_configs_and_internal_ones_only_offsets(tmp_path: Path) -> None:
    broker = Broker(Settings(data_dir=tmp_path))
    try:
        broker.create_topic(
            "compacted", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}
        )
        broker.create_topic("plain", 1)
        broker.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIGS)
        broker.create_topic(SHARE_STATE_TOPIC, 1, SHARE_STATE_TOPIC_CONFIGS)
        config = broker.compaction_config("compacted")
        assert config.compact and config.min_cleanable_dirty_ratio == 0.1
        assert config.max_compaction_lag_ms is None
        assert not broker.compaction_config("plain").compact
        assert broker.compaction_config(OFFSETS_TOPIC).compact
        assert broker.compaction_config(SHARE_STATE_TOPIC) == CompactionConfig()
        assert broker.compaction_config("unknown") == CompactionConfig()
    finally:
        broker.close()


def test_the_cleaner_compacts_a_topic_of_the_broker(tmp_path: Path) -> None:
    broker = Broker(Settings(data_dir=tmp_path))
    try:
        broker.create_topic("compacted", 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        log = broker.logs.get("compacted", 0)
        assert log is not None
        for i in range(60):
            log.append(encode_batch([Record(b"v%d" % i, b"k%d" % (i % 3))]))
        log.flush()
        assert broker.logs.cleaner.run_once() == 1
        broker.housekeeping()  # swaps in what the cleaner wrote
        records = []
        offset = 0
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20).records
            for batch in split_batches(data):
                records += [r for r in decode_records(batch) if r[0] >= offset]
                offset = parse_header(batch).last_offset + 1
        assert len(records) < 20
        assert {k: v for _o, k, v in records} == {b"k0": b"v57", b"k1": b"v58", b"k2": b"v59"}
    finally:
        broker.close()
