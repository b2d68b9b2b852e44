"""The log cleaner's metrics, scraped over HTTP from the admin application's /metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

from admin_support import bearer, make_broker
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from weirmq.admin import create_app
from weirmq.broker.core import Broker
from weirmq.broker.partition import Durability
from weirmq.records.batch import Record, encode_batch
from weirmq.testing import ManualClock

TIMEOUT_S = 30
TOPIC = "compacted"


async def _scrape(broker: Broker) -> dict[str, float]:
    """{sample name: value} of the unlabelled samples of one /metrics scrape."""
    app = create_app(broker)
    async with TestClient(TestServer(app), headers=bearer(app)) as client:
        response = await client.get("/metrics")
        assert response.status == 200
        text = await response.text()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def scrape(broker: Broker) -> dict[str, float]:
    return asyncio.run(asyncio.wait_for(_scrape(broker), TIMEOUT_S))


def _compacted_broker(data_dir: Path, clock: ManualClock) -> Broker:
    broker = make_broker(data_dir, clock, segment_bytes=1024)
    broker.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"})
    partition = broker.partition(TOPIC, 0)
    assert partition is not None
    for round_ in range(20):  # 5 keys written 20 times: most of the log is obsolete
        records = [
            Record(value=b"value-%d-%d" % (round_, k) * 4, key=b"k%d" % k, timestamp_ms=clock())
            for k in range(5)
        ]
        partition.publish(encode_batch(records), Durability.WRITTEN)
        clock.advance(1)
    log_ = broker.logs.get(TOPIC, 0)
    assert log_ is not None and log_.segment_count > 2
    log_._roll()
    log_.flush()
    return broker


def test_cleaner_metrics_before_and_after_a_cleaning(tmp_path: Path, clock: ManualClock) -> None:
    broker = _compacted_broker(tmp_path / "data", clock)
    try:
        before = scrape(broker)
        assert before["weirmq_log_cleaner_cleanings_total"] == 0
        assert before["weirmq_log_cleaner_read_bytes_total"] == 0
        assert "weirmq_log_cleaner_seconds_since_last_cleaning" not in before

        log_ = broker.logs.get(TOPIC, 0)
        assert log_ is not None
        size_before = log_.size_bytes
        assert broker.logs.cleaner.run_once() == 1
        assert broker.logs.finish_cleaning() == 1
        clock.advance(2000)
        after = scrape(broker)

        assert after["weirmq_log_cleaner_cleanings_total"] == 1
        # The whole log was read at least once (the map, then the rewrite).
        assert after["weirmq_log_cleaner_read_bytes_total"] >= size_before
        written = after["weirmq_log_cleaner_written_bytes_total"]
        assert 0 < written < size_before
        assert after["weirmq_log_cleaner_segments_swapped_total"] >= 1
        assert after["weirmq_log_cleaner_max_dirty_ratio"] == 1.0  # never cleaned: all dirty
        assert after["weirmq_log_cleaner_last_cleaning_duration_seconds"] >= 0
        assert after["weirmq_log_cleaner_seconds_since_last_cleaning"] == 2.0
        assert after["weirmq_log_cleaner_seconds_since_last_run"] == 2.0

        # A pass with nothing dirty: the dirtiest ratio drops to 0, counters stay.
        assert broker.logs.cleaner.run_once() == 0
        again = scrape(broker)
        assert again["weirmq_log_cleaner_max_dirty_ratio"] == 0.0
        assert again["weirmq_log_cleaner_cleanings_total"] == 1
        assert again["weirmq_log_cleaner_seconds_since_last_run"] == 0.0
    finally:
        broker.close()
