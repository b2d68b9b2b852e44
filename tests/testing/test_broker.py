"""`weirmq.testing.Broker`: a real broker in this process, reached by real Kafka clients."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from weirmq.server.startup import StartupError
from weirmq.settings import SettingsError
from weirmq.testing import Broker

pytestmark = pytest.mark.integration

TIMEOUT_S = 10.0


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def consume(bootstrap: str, topic: str, count: int, partition: int = 0) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        got: list[bytes] = []
        while len(got) < count:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"only {len(got)} of {count} records arrived"
            assert message.error() is None, message.error()
            got.append(message.value())
        return got
    finally:
        consumer.close()


def test_round_trip_with_confluent_kafka() -> None:
    with Broker() as broker:
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        values = [b"record-%d" % i for i in range(100)]
        produce(broker.bootstrap_servers, "events", values)
        assert consume(broker.bootstrap_servers, "events", 100) == values


def test_settings_reach_the_broker() -> None:
    with Broker(default_partitions=3) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        produce(broker.bootstrap_servers, "three", [b"x"], partition=2)
        topics = admin.list_topics("three", timeout=TIMEOUT_S).topics
        assert sorted(topics["three"].partitions) == [0, 1, 2]


def test_two_brokers_at_once_are_independent() -> None:
    with Broker() as first, Broker() as second:
        assert first.bootstrap_servers != second.bootstrap_servers
        produce(first.bootstrap_servers, "only-in-first", [b"a"])
        assert second.call(lambda: second.broker.topics.get("only-in-first")) is None
        assert first.call(lambda: first.broker.topics.get("only-in-first")) is not None


def test_stop_closes_the_port_and_removes_the_temporary_directory() -> None:
    broker = Broker().start()
    data_dir = broker.data_dir
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    assert data_dir.is_dir()
    broker.stop()
    assert not data_dir.exists()
    with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=2):
        pass
    broker.stop()  # idempotent


def test_a_given_data_directory_is_kept_and_reopened(tmp_path: Path) -> None:
    with Broker(data_dir=tmp_path) as broker:
        produce(broker.bootstrap_servers, "kept", [b"one", b"two"])
    assert (tmp_path / "kept-0").is_dir()
    with Broker(data_dir=tmp_path) as broker:
        assert consume(broker.bootstrap_servers, "kept", 2) == [b"one", b"two"]


def test_a_bad_setting_is_raised_in_the_callers_thread() -> None:
    with pytest.raises(SettingsError, match="node_id"):
        Broker(node_id=-1).start()


def test_a_start_failure_on_the_broker_thread_is_raised_to_the_caller(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("x")
    # The start-up layer names the file it could not read (one line, no traceback).
    with pytest.raises(StartupError, match="Not a directory"):
        Broker(data_dir=not_a_directory).start()


def test_admin_url_needs_the_admin_api() -> None:
    with Broker() as broker, pytest.raises(RuntimeError, match="admin=True"):
        _ = broker.admin_url


def test_a_broker_starts_only_once() -> None:
    broker = Broker().start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            broker.start()
    finally:
        broker.stop()
