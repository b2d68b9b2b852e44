"""The Prometheus collector, scraped without any HTTP: what it exports and when it changes.

Every scrape is parsed back with prometheus_client's own parsers (the classic text format
and OpenMetrics), so a malformed exposition fails here, not in someone's Prometheus.
"""

from __future__ import annotations

import re
from pathlib import Path

from admin_support import broker_with_an_offline_partition, make_broker, produce, publish
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from weirmq.admin.metrics import api_name, exposition, metrics_registry
from weirmq.broker.core import Broker
from weirmq.testing import ManualClock
from weirmq.types import TopicPartition

DOCS = Path(__file__).resolve().parents[2] / "docs" / "admin-api.md"
PROCESS_FAMILIES = {
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
}


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(broker: Broker) -> tuple[set[str], Samples]:
    """(family names as queried, {(sample name, sorted labels): value}) of one text-format
    scrape. The parser names a counter family without its ``_total``; people query it with."""
    body, content_type = exposition(metrics_registry(broker), accept="")
    assert content_type.startswith("text/plain")
    families, samples = set(), {}
    for family in text_string_to_metric_families(body.decode()):
        families.add(f"{family.name}_total" if family.type == "counter" else family.name)
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return families, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, tuple(sorted(labels.items()))]


def test_a_fresh_broker_exports_every_documented_family(broker: Broker) -> None:
    families, samples = scrape(broker)
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", DOCS.read_text(), re.MULTILINE))
    # Per-topic and per-partition families have no samples without topics, but are there.
    assert families == documented
    assert families >= PROCESS_FAMILIES
    assert value(samples, "weirmq_topics") == 0
    assert value(samples, "weirmq_partitions") == 0
    assert value(samples, "weirmq_connections_open") == 0
    assert value(samples, "weirmq_log_flush_duration_seconds_count") == 0
    # Every API the broker speaks has a series at 0 from the start.
    for api in ("Produce", "Fetch", "Metadata", "ApiVersions", "ListOffsets"):
        assert value(samples, "weirmq_requests_total", api=api) == 0
        assert value(samples, "weirmq_request_duration_seconds_count", api=api) == 0


def test_the_broker_info_and_uptime(broker: Broker, clock: ManualClock) -> None:
    clock.advance(2500)
    _, samples = scrape(broker)
    info = {"version": "0.1.0", "node_id": "0", "cluster_id": broker.cluster_id}
    assert value(samples, "weirmq_broker_info", **info) == 1
    assert value(samples, "weirmq_uptime_seconds") == 2.5


def test_traffic_counters_follow_produce_and_fetch(broker: Broker) -> None:
    broker.create_topic("orders", 2)
    appended = produce(broker, "orders", 1, batches=2, records=3)
    stats = broker.stats.topic("orders")
    stats.bytes_out += 700  # what the Fetch handler adds for what it returned
    stats.records_out += 4

    _, samples = scrape(broker)

    assert value(samples, "weirmq_topic_bytes_in_total", topic="orders") == appended
    assert value(samples, "weirmq_topic_records_in_total", topic="orders") == 6
    assert value(samples, "weirmq_topic_bytes_out_total", topic="orders") == 700
    assert value(samples, "weirmq_topic_records_out_total", topic="orders") == 4
    assert value(samples, "weirmq_topics") == 1
    assert value(samples, "weirmq_partitions") == 2
    busy, idle = {"topic": "orders", "partition": "1"}, {"topic": "orders", "partition": "0"}
    assert value(samples, "weirmq_partition_log_end_offset", **busy) == 6
    assert value(samples, "weirmq_partition_log_start_offset", **busy) == 0
    assert value(samples, "weirmq_partition_size_bytes", **busy) == appended
    assert value(samples, "weirmq_partition_segments", **busy) == 1
    assert value(samples, "weirmq_partition_offline", **busy) == 0
    assert value(samples, "weirmq_partition_log_end_offset", **idle) == 0
    assert value(samples, "weirmq_partition_size_bytes", **idle) == 0


def test_request_counts_and_latency_histograms_per_api(broker: Broker) -> None:
    produce_stats = broker.stats.api(0)
    for seconds in (0.0003, 0.002, 0.002, 7.0):  # as the dispatcher records each request
        produce_stats.requests += 1
        produce_stats.latency.observe(seconds)

    _, samples = scrape(broker)

    assert value(samples, "weirmq_requests_total", api="Produce") == 4
    assert value(samples, "weirmq_requests_total", api="Fetch") == 0
    histogram = "weirmq_request_duration_seconds"
    assert value(samples, f"{histogram}_count", api="Produce") == 4
    assert value(samples, f"{histogram}_sum", api="Produce") == 7.0043
    assert value(samples, f"{histogram}_bucket", api="Produce", le="0.00025") == 0
    assert value(samples, f"{histogram}_bucket", api="Produce", le="0.0005") == 1
    assert value(samples, f"{histogram}_bucket", api="Produce", le="0.0025") == 3
    assert value(samples, f"{histogram}_bucket", api="Produce", le="5.0") == 3
    assert value(samples, f"{histogram}_bucket", api="Produce", le="10.0") == 4
    assert value(samples, f"{histogram}_bucket", api="Produce", le="+Inf") == 4


def test_request_latency_from_frame_read_to_write_per_protocol_and_request(
    broker: Broker,
) -> None:
    _, samples = scrape(broker)
    histogram = "weirmq_request_latency_seconds"
    for request in ("Produce", "Fetch", "Metadata"):  # there from the start
        assert value(samples, f"{histogram}_count", protocol="kafka", request=request) == 0
    produce = broker.stats.request_latency("kafka", "0")
    for seconds in (0.00002, 0.00004, 0.0009):  # as the connection pump records each reply
        produce.observe(seconds)

    _, samples = scrape(broker)

    labels = {"protocol": "kafka", "request": "Produce"}
    assert value(samples, f"{histogram}_count", **labels) == 3
    assert value(samples, f"{histogram}_bucket", **labels, le="2.5e-05") == 1
    assert value(samples, f"{histogram}_bucket", **labels, le="5e-05") == 2
    assert value(samples, f"{histogram}_bucket", **labels, le="0.001") == 3
    assert value(samples, f"{histogram}_count", protocol="kafka", request="Fetch") == 0


def test_connection_counters(broker: Broker) -> None:
    stats = broker.stats
    stats.connections_total += 5  # as the listener does
    stats.connections_open += 2
    stats.connections_closed_for_errors += 1

    _, samples = scrape(broker)

    assert value(samples, "weirmq_connections_open") == 2
    assert value(samples, "weirmq_connections_accepted_total") == 5
    assert value(samples, "weirmq_connections_closed_for_errors_total") == 1


def test_flush_latency_comes_from_real_fsyncs(broker: Broker) -> None:
    broker.create_topic("durable", 1)
    produce(broker, "durable", 0, batches=1)
    log = broker.partition_log("durable", 0)
    assert log is not None
    broker.logs.sync(log, log.log_end_offset).result(timeout=10)  # what acks=all waits for

    _, samples = scrape(broker)

    flushes = value(samples, "weirmq_log_flush_duration_seconds_count")
    assert flushes >= 1
    assert value(samples, "weirmq_log_flush_duration_seconds_bucket", le="+Inf") == flushes
    assert value(samples, "weirmq_log_flush_duration_seconds_sum") > 0


def test_exchange_counters_and_routing_lag(broker: Broker) -> None:
    broker.create_topic("orders", 1)
    broker.create_topic("events", 2, {"weirmq.exchange.type": "direct"})
    broker.exchanges.bind("events", "orders", key="eu")
    publish(broker, "events", ["eu", "eu", "us"])  # to partition 0

    _, samples = scrape(broker)

    assert value(samples, "weirmq_exchange_routed_records_total", exchange="events") == 2
    assert value(samples, "weirmq_exchange_unroutable_records_total", exchange="events") == 1
    assert value(samples, "weirmq_exchange_alternate_records_total", exchange="events") == 0
    assert value(samples, "weirmq_exchange_failed_records_total", exchange="events") == 0
    assert value(samples, "weirmq_exchange_routing_lag_records", exchange="events") == 0
    assert not any(
        dict(labels).get("exchange") == "orders" for _, labels in samples
    )  # a plain topic has no exchange series

    # As on a start after a crash, before the re-routing: the cursor is behind the log end.
    broker.exchanges.cursors[TopicPartition("events", 0)] = 1
    _, samples = scrape(broker)
    assert value(samples, "weirmq_exchange_routing_lag_records", exchange="events") == 2


def test_an_offline_partition_is_flagged(tmp_path: Path) -> None:
    damaged = broker_with_an_offline_partition(tmp_path)
    try:
        _, samples = scrape(damaged)
    finally:
        damaged.close()
    assert value(samples, "weirmq_partition_offline", topic="damaged", partition="0") == 1


def test_brokers_in_one_process_have_separate_registries(tmp_path: Path) -> None:
    first, second = make_broker(tmp_path / "one"), make_broker(tmp_path / "two")
    try:
        first.create_topic("only-in-first", 1)
        produce(first, "only-in-first", 0, batches=1)
        _, first_samples = scrape(first)
        _, second_samples = scrape(second)
    finally:
        first.close()
        second.close()
    assert value(first_samples, "weirmq_topics") == 1
    assert value(second_samples, "weirmq_topics") == 0
    assert not any(labels for (name, labels) in second_samples if name.startswith("weirmq_topic_"))


def test_openmetrics_when_the_scraper_asks_for_it(broker: Broker) -> None:
    broker.create_topic("orders", 1)
    produce(broker, "orders", 0, batches=1, records=2)
    body, content_type = exposition(
        metrics_registry(broker), accept="application/openmetrics-text; version=1.0.0"
    )
    assert content_type.startswith("application/openmetrics-text")
    families = {family.name: family for family in openmetrics_families(body.decode())}
    records_in = families["weirmq_topic_records_in"]
    assert records_in.type == "counter"
    assert [(s.name, s.labels, s.value) for s in records_in.samples] == [
        ("weirmq_topic_records_in_total", {"topic": "orders"}, 2)
    ]


def test_api_names_are_kafkas() -> None:
    assert api_name(0) == "Produce"
    assert api_name(3) == "Metadata"
    assert api_name(18) == "ApiVersions"
    assert api_name(22) == "InitProducerId"
    assert api_name(23) == "OffsetForLeaderEpoch"
    assert api_name(32767) == "Unknown32767"
