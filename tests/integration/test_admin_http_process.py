"""The HTTP admin API of a real `weirmq serve` process: started beside the Kafka listener,
it sees what real clients do, and it stops with the broker."""

from __future__ import annotations

import json
import urllib.request
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from conftest import BrokerFactory

TIMEOUT_S = 10.0


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return response.status, response.read()


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    _status, body = get(url + "/metrics")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def test_serve_runs_the_admin_api_and_metrics_follow_real_clients(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(admin_listen="127.0.0.1:0")
    assert broker.admin_url is not None
    status, body = get(broker.admin_url + "/api/v1/health")
    assert status == 200 and json.loads(body)["status"] == "ok"

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(50):
        producer.produce("watched", b"v" * 100, key=b"%d" % i)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "x", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("watched", 0, 0)])
    got = 0
    while got < 50:
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None
        got += 1
    consumer.close()

    found = samples(broker.admin_url)
    topic = (("topic", "watched"),)
    assert found[("weirmq_topic_records_in_total", topic)] == 50
    assert found[("weirmq_topic_records_out_total", topic)] >= 50
    assert found[("weirmq_topic_bytes_in_total", topic)] > 50 * 100
    produce = (("api", "Produce"),)
    assert found[("weirmq_requests_total", produce)] >= 1
    assert found[("weirmq_request_duration_seconds_count", produce)] >= 1
    partition = (("partition", "0"), ("topic", "watched"))
    assert found[("weirmq_partition_log_end_offset", partition)] == 50

    status, body = get(broker.admin_url + "/api/v1/topics/watched")
    assert status == 200 and json.loads(body)["name"] == "watched"
    assert broker.stop() == 0
