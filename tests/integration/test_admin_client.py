"""Kafka admin clients against a real broker process: confluent-kafka's AdminClient for
every admin operation, each change read back through another API (or another client), and
kafka-python's admin client for the calls it shares.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

TIMEOUT_S = 15.0


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def wait_all(futures: dict[object, object]) -> dict[object, object]:
    """Each future's result, or the KafkaError it failed with."""
    out: dict[object, object] = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(TIMEOUT_S)  # type: ignore[attr-defined]
        except KafkaException as exc:
            out[key] = exc.args[0]
    return out


def error_code(outcome: object) -> int | None:
    return outcome.code() if isinstance(outcome, KafkaError) else None


def topic_configs(admin: AdminClient, topic: str) -> dict[str, tuple[str, int]]:
    (configs,) = wait_all(admin.describe_configs([ConfigResource("topic", topic)])).values()
    assert isinstance(configs, dict), configs
    return {name: (entry.value, entry.source) for name, entry in configs.items()}


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def first_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None, message
        return int(message.offset())
    finally:
        consumer.close()


def test_create_topics_with_configs_and_read_back(admin: AdminClient) -> None:
    results = wait_all(
        admin.create_topics(
            [
                NewTopic("orders", 3, 1, config={"retention.ms": "3600000"}),
                NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
            ],
            operation_timeout=10,
        )
    )
    assert results == {"orders": None, "compacted": None}
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert sorted(metadata.topics["orders"].partitions) == [0, 1, 2]
    orders = topic_configs(admin, "orders")
    assert orders["retention.ms"] == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert orders["segment.bytes"] == ("1073741824", ConfigSource.DEFAULT_CONFIG.value)
    assert topic_configs(admin, "compacted")["cleanup.policy"][0] == "compact"


def test_create_topic_errors(admin: AdminClient) -> None:
    wait_all(admin.create_topics([NewTopic("exists", 1, 1)]))
    results = wait_all(
        admin.create_topics(
            [
                NewTopic("exists", 1, 1),
                NewTopic("zero-partitions", 0, 1),
                NewTopic("three-replicas", 1, 3),
                NewTopic("bad-config", 1, 1, config={"retention.ms": "tomorrow"}),
                NewTopic("unknown-config", 1, 1, config={"no.such.config": "1"}),
                NewTopic("bad/name", 1, 1),
            ]
        )
    )
    assert {name: error_code(outcome) for name, outcome in results.items()} == {
        "exists": KafkaError.TOPIC_ALREADY_EXISTS,
        "zero-partitions": KafkaError.INVALID_PARTITIONS,
        "three-replicas": KafkaError.INVALID_REPLICATION_FACTOR,
        "bad-config": KafkaError.INVALID_CONFIG,
        "unknown-config": KafkaError.INVALID_CONFIG,
        "bad/name": KafkaError.TOPIC_EXCEPTION,
    }
    assert set(admin.list_topics(timeout=TIMEOUT_S).topics) == {"exists"}


def test_validate_only_creates_nothing(admin: AdminClient) -> None:
    results = wait_all(admin.create_topics([NewTopic("dry-run", 2, 1)], validate_only=True))
    assert results == {"dry-run": None}
    assert "dry-run" not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_incremental_alter_configs_and_read_back(admin: AdminClient) -> None:
    wait_all(admin.create_topics([NewTopic("tuned", 1, 1, config={"segment.ms": "60000"})]))
    resource = ConfigResource(
        "topic",
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    (result,) = wait_all(admin.incremental_alter_configs([resource])).values()
    assert result is None
    configs = topic_configs(admin, "tuned")
    assert configs["retention.ms"] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["segment.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
    assert configs["cleanup.policy"][0] == "delete,compact"

    bad = ConfigResource(
        "topic",
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "-9", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (outcome,) = wait_all(admin.incremental_alter_configs([bad])).values()
    assert error_code(outcome) == KafkaError.INVALID_CONFIG
    missing = ConfigResource(
        "topic",
        "missing",
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (outcome,) = wait_all(admin.incremental_alter_configs([missing])).values()
    assert error_code(outcome) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert topic_configs(admin, "tuned")["retention.ms"][0] == "5000"


def test_create_partitions_then_produce_to_a_new_one(
    admin: AdminClient, broker: BrokerProcess
) -> None:
    wait_all(admin.create_topics([NewTopic("growing", 1, 1)]))
    assert wait_all(admin.create_partitions([NewPartitions("growing", 4)])) == {"growing": None}
    metadata = admin.list_topics("growing", timeout=TIMEOUT_S)
    assert sorted(metadata.topics["growing"].partitions) == [0, 1, 2, 3]
    produce(broker.bootstrap, "growing", 3, partition=3)
    (shrink,) = wait_all(admin.create_partitions([NewPartitions("growing", 2)])).values()
    assert error_code(shrink) == KafkaError.INVALID_PARTITIONS
    (missing,) = wait_all(admin.create_partitions([NewPartitions("nope", 2)])).values()
    assert error_code(missing) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_records_moves_where_consumers_start(
    admin: AdminClient, broker: BrokerProcess
) -> None:
    wait_all(admin.create_topics([NewTopic("trimmed", 1, 1)]))
    produce(broker.bootstrap, "trimmed", 20)
    (deleted,) = wait_all(admin.delete_records([TopicPartition("trimmed", 0, 12)])).values()
    assert deleted.low_watermark == 12  # type: ignore[attr-defined]
    earliest = wait_all(admin.list_offsets({TopicPartition("trimmed", 0): OffsetSpec.earliest()}))
    assert [info.offset for info in earliest.values()] == [12]  # type: ignore[attr-defined]
    assert first_offset(broker.bootstrap, "trimmed") == 12
    (beyond,) = wait_all(admin.delete_records([TopicPartition("trimmed", 0, 99)])).values()
    assert error_code(beyond) == KafkaError.OFFSET_OUT_OF_RANGE


def test_delete_topics_and_read_back(admin: AdminClient, broker: BrokerProcess) -> None:
    wait_all(admin.create_topics([NewTopic("short-lived", 2, 1)]))
    produce(broker.bootstrap, "short-lived", 5)
    results = wait_all(admin.delete_topics(["short-lived", "never-was"]))
    assert error_code(results["short-lived"]) is None
    assert error_code(results["never-was"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "short-lived" not in admin.list_topics(timeout=TIMEOUT_S).topics
    assert not [p for p in broker.data_dir.iterdir() if p.name.startswith("short-lived-")]


def test_describe_cluster_and_broker_configs(admin: AdminClient, broker: BrokerProcess) -> None:
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", broker.port)]
    assert cluster.controller.id == 0 and cluster.cluster_id
    (configs,) = wait_all(admin.describe_configs([ConfigResource("broker", "0")])).values()
    assert isinstance(configs, dict)
    assert configs["num.partitions"].value == "1"
    assert configs["log.dirs"].value == str(broker.data_dir)
    # Read-only but the dynamic broker configs (broker/dynamic_configs.py).
    dynamic = {"log.retention.ms", "log.retention.bytes", "log.segment.bytes", "message.max.bytes"}
    assert {name for name, entry in configs.items() if not entry.is_read_only} == dynamic


def test_configs_take_effect_and_survive_a_restart(broker_factory: BrokerFactory) -> None:
    # Small segments and a short housekeeping interval: retention.bytes set through the
    # admin API must delete old segments, and still be in force after a restart.
    broker = broker_factory(housekeeping_interval_ms=200)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = {"segment.bytes": "4096", "retention.bytes": "8192"}
    wait_all(admin.create_topics([NewTopic("bounded", 1, 1, config=config)]))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(200):
        producer.produce("bounded", b"x" * 200, partition=0)
        if i % 10 == 9:
            producer.flush(TIMEOUT_S)
    assert producer.flush(TIMEOUT_S) == 0
    assert earliest_after(admin, "bounded", lambda offset: offset > 0) > 0
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert topic_configs(admin, "bounded")["retention.bytes"][0] == "8192"
    assert topic_configs(admin, "bounded")["segment.bytes"][0] == "4096"


def earliest_after(admin: AdminClient, topic: str, done: object) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        (info,) = wait_all(
            admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
        ).values()
        offset = int(info.offset)  # type: ignore[attr-defined]
        if done(offset) or time.monotonic() > deadline:  # type: ignore[operator]
            return offset
        time.sleep(0.1)


# --- kafka-python's admin client ------------------------------------------------------------


@pytest.fixture
def kafka_python_admin(broker: BrokerProcess) -> Iterator[object]:
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's own imports
def test_kafka_python_admin_create_describe_delete(
    kafka_python_admin: object, admin: AdminClient
) -> None:
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import TopicAlreadyExistsError

    client = kafka_python_admin
    client.create_topics(  # type: ignore[attr-defined]
        [KpNewTopic("kp-topic", 2, 1, topic_configs={"retention.ms": "1234"})]
    )
    assert sorted(admin.list_topics(timeout=TIMEOUT_S).topics["kp-topic"].partitions) == [0, 1]
    with pytest.raises(TopicAlreadyExistsError):
        client.create_topics([KpNewTopic("kp-topic", 1, 1)])  # type: ignore[attr-defined]
    described = client.describe_configs(  # type: ignore[attr-defined]
        [KpConfigResource(ConfigResourceType.TOPIC, "kp-topic")]
    )
    retention = described["topic"]["kp-topic"]["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("1234", "DYNAMIC_TOPIC_CONFIG")
    client.delete_topics(["kp-topic"])  # type: ignore[attr-defined]
    assert "kp-topic" not in admin.list_topics(timeout=TIMEOUT_S).topics
