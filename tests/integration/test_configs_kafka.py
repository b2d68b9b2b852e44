"""Kafka's config APIs against a real broker, spoken by other people's clients: GROUP
configs (KIP-848, KIP-932), dynamic BROKER configs (KIP-226) and Kafka's whole list of
TOPIC configs, through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient.

A KIP-848 consumer's session timeout is tested by its effect: the member of a group whose
`consumer.session.timeout.ms` was lowered is SIGKILLed, and the broker removes it after the
group's timeout, not the broker's 45 seconds.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from integration_support import Deadline

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

TIMEOUT_S = 30.0
GROUP_SESSION_MS = 3_000
GROUP_SETTINGS: dict[str, object] = {
    # Lower the bounds a group config is held to (Kafka's are 45-60 s): the test's group
    # sets a 3-second session. The broker's own default session stays 45 s.
    "group_consumer_min_session_timeout_ms": 1_000,
    "group_consumer_min_heartbeat_interval_ms": 100,
}


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(amqp_listen="off", sqs_listen="off", **GROUP_SETTINGS)


def admin_of(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def incremental(admin: AdminClient, resource: ConfigResource) -> None:
    (future,) = admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S).values()
    future.result(timeout=TIMEOUT_S)


def described(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, Any]:
    (future,) = admin.describe_configs(
        [ConfigResource(kind, name)], request_timeout=TIMEOUT_S
    ).values()
    return dict(future.result(timeout=TIMEOUT_S))


def entries(*ops: tuple[str, str | None, AlterConfigOpType]) -> list[ConfigEntry]:
    return [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]


SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE


# --- GROUP ------------------------------------------------------------------------------------


def test_group_configs_with_kafkas_names_through_confluent_kafka(broker: BrokerProcess) -> None:
    admin = admin_of(broker)
    ops = entries(
        ("consumer.session.timeout.ms", "3000", SET),
        ("consumer.heartbeat.interval.ms", "500", SET),
        ("streams.num.standby.replicas", "1", SET),
    )
    incremental(admin, ConfigResource(ResourceType.GROUP, "configured", incremental_configs=ops))
    configs = described(admin, ResourceType.GROUP, "configured")
    assert configs["consumer.session.timeout.ms"].value == "3000"
    assert int(configs["consumer.session.timeout.ms"].source) == 8  # GROUP_CONFIG
    assert configs["share.record.lock.duration.ms"].value == "30000"
    assert int(configs["share.record.lock.duration.ms"].source) == 5  # DEFAULT_CONFIG
    assert configs["streams.num.standby.replicas"].value == "1"

    refused = ConfigResource(
        ResourceType.GROUP,
        "configured",
        incremental_configs=entries(("share.record.lock.duration.ms", "1000", SET)),
    )
    with pytest.raises(KafkaException) as info:
        incremental(admin, refused)
    assert "group.share.min.record.lock.duration.ms" in str(info.value)
    append = ConfigResource(
        ResourceType.GROUP,
        "configured",
        incremental_configs=entries(("consumer.session.timeout.ms", "1", AlterConfigOpType.APPEND)),
    )
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        incremental(admin, append)

    incremental(
        admin,
        ConfigResource(
            ResourceType.GROUP,
            "configured",
            incremental_configs=entries(("streams.num.standby.replicas", None, DELETE)),
        ),
    )
    configs = described(admin, ResourceType.GROUP, "configured")
    assert int(configs["streams.num.standby.replicas"].source) == 5


CONSUMER_SCRIPT = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer
    consumer = Consumer({
        "bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
        "group.protocol": "consumer", "auto.offset.reset": "earliest",
    })
    consumer.subscribe([sys.argv[3]])
    announced = False
    while True:
        consumer.poll(0.2)
        if consumer.assignment() and not announced:
            print("assigned", flush=True)
            announced = True
    """
)


def _members(admin: AdminClient, group: str) -> int:
    (future,) = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S).values()
    return len(future.result(timeout=TIMEOUT_S).members)


def test_a_kip848_member_gets_its_groups_session_timeout(broker: BrokerProcess) -> None:
    admin = admin_of(broker)
    (created,) = admin.create_topics([NewTopic("sessions", 1)]).values()
    created.result(timeout=TIMEOUT_S)
    ops = entries(
        ("consumer.session.timeout.ms", str(GROUP_SESSION_MS), SET),
        ("consumer.heartbeat.interval.ms", "500", SET),
    )
    incremental(admin, ConfigResource(ResourceType.GROUP, "short", incremental_configs=ops))

    member = subprocess.Popen(
        [sys.executable, "-c", CONSUMER_SCRIPT, broker.bootstrap, "short", "sessions"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert member.stdout is not None
        assert member.stdout.readline().strip() == "assigned"
        assert _members(admin, "short") == 1
        member.kill()  # SIGKILL: no leave; only the session timeout removes it
        member.wait(timeout=TIMEOUT_S)
        killed = time.monotonic()
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
        if member.stdout is not None:
            member.stdout.close()
    deadline = Deadline(20, "the killed member removed after the group's session timeout")
    while _members(admin, "short"):
        deadline.check()
        time.sleep(0.2)
    gone_after_s = time.monotonic() - killed
    # The group's 3 s (plus a heartbeat's slack), far below the broker's default of 45 s.
    assert 1 < gone_after_s < 15, gone_after_s


# --- BROKER -----------------------------------------------------------------------------------


def test_dynamic_broker_configs_through_confluent_kafka(broker: BrokerProcess) -> None:
    admin = admin_of(broker)
    node = ConfigResource(
        ResourceType.BROKER, "0", incremental_configs=entries(("log.retention.ms", "60000", SET))
    )
    incremental(admin, node)
    configs = described(admin, ResourceType.BROKER, "0")
    assert configs["log.retention.ms"].value == "60000"
    assert int(configs["log.retention.ms"].source) == 2  # DYNAMIC_BROKER_CONFIG
    assert not configs["log.retention.ms"].is_read_only

    (created,) = admin.create_topics([NewTopic("inherits", 1)]).values()
    created.result(timeout=TIMEOUT_S)
    topic = described(admin, ResourceType.TOPIC, "inherits")
    assert (topic["retention.ms"].value, int(topic["retention.ms"].source)) == ("60000", 2)

    read_only = ConfigResource(
        ResourceType.BROKER, "0", incremental_configs=entries(("num.partitions", "3", SET))
    )
    with pytest.raises(KafkaException) as info:
        incremental(admin, read_only)
    assert "Cannot update these configs dynamically" in str(info.value)

    broker.restart()
    configs = described(admin, ResourceType.BROKER, "0")
    assert configs["log.retention.ms"].value == "60000"


# --- TOPIC ------------------------------------------------------------------------------------


def test_kafkas_topic_configs_are_accepted_through_confluent_kafka(broker: BrokerProcess) -> None:
    admin = admin_of(broker)
    wanted = {
        "compression.type": "gzip",
        "compression.gzip.level": "5",
        "file.delete.delay.ms": "0",
        "min.cleanable.dirty.ratio": "0.1",
        "preallocate": "true",
        "unclean.leader.election.enable": "false",
        "message.timestamp.after.max.ms": "1000",
    }
    (created,) = admin.create_topics([NewTopic("kafkaish", 1, config=wanted)]).values()
    created.result(timeout=TIMEOUT_S)
    configs = described(admin, ResourceType.TOPIC, "kafkaish")
    assert {name: configs[name].value for name in wanted} == wanted
    assert int(configs["compression.type"].source) == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.index.bytes"].value == "10485760"

    emptied = ConfigResource(
        ResourceType.TOPIC,
        "kafkaish",
        incremental_configs=entries(("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)),
    )
    incremental(admin, emptied)
    assert described(admin, ResourceType.TOPIC, "kafkaish")["cleanup.policy"].value == ""


@pytest.mark.parametrize(("codec", "attribute"), [("zstd", 4), ("lz4", 3), ("uncompressed", 0)])
def test_compression_type_recompresses_what_producers_send(
    broker: BrokerProcess, codec: str, attribute: int
) -> None:
    """A topic's compression.type rewrites each batch in its codec on append, whatever the
    producer used; librdkafka reads the rewritten batches back, and the segment holds
    batches of the topic's codec only."""
    topic = f"recompressed-{codec}"
    admin = admin_of(broker)
    (created,) = admin.create_topics(
        [NewTopic(topic, 1, config={"compression.type": codec})]
    ).values()
    created.result(timeout=TIMEOUT_S)
    values = [f"order {i} ".encode() * 40 for i in range(200)]
    for sent_as in ("gzip", "none", "snappy"):
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "compression.type": sent_as, "linger.ms": 5}
        )
        for value in values:
            producer.produce(topic, value=value, key=sent_as.encode())
        assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{codec}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = Deadline(TIMEOUT_S, "reading the recompressed records back")
    while len(got) < 3 * len(values) and not deadline.expired():
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    assert got == values * 3
    codecs = set()
    for segment in sorted((broker.data_dir / f"{topic}-0").glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + 61 <= len(data):
            length = struct.unpack_from(">i", data, position + 8)[0]
            codecs.add(struct.unpack_from(">h", data, position + 21)[0] & 0x07)
            position += 12 + length
    assert codecs == {attribute}


# --- kafka-python -----------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's own imports
def test_kafka_python_describes_and_alters_configs(broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as PyConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        creator = admin_of(broker)
        creator.create_topics([NewTopic("legacy", 1)])["legacy"].result(TIMEOUT_S)
        topic = PyConfigResource(ConfigResourceType.TOPIC, "legacy", {"retention.ms": "120000"})
        group = PyConfigResource(
            ConfigResourceType.GROUP, "pygroup", {"consumer.session.timeout.ms": "50000"}
        )
        node = PyConfigResource(ConfigResourceType.BROKER, "0", {"log.segment.bytes": "2097152"})
        admin.alter_configs([topic, group, node], incremental=False, raise_on_unknown=False)
        result = admin.describe_configs(
            [
                PyConfigResource(ConfigResourceType.TOPIC, "legacy"),
                PyConfigResource(ConfigResourceType.GROUP, "pygroup"),
                PyConfigResource(ConfigResourceType.BROKER, "0"),
            ],
            config_filter="all",
        )
    finally:
        admin.close()
    text = repr(result)
    assert "120000" in text and "50000" in text and "2097152" in text


# --- the command line -------------------------------------------------------------------------


def test_groups_alter_and_configs_set_show_and_delete(broker: BrokerProcess) -> None:
    from test_cli import failed, ok, ok_json, weirmq

    ok(
        weirmq(
            broker, "groups", "alter", "cli-group",
            "--config", "consumer.session.timeout.ms=50000",
            "--config", "share.delivery.count.limit=3",
        )
    )  # fmt: skip
    shown = ok_json(weirmq(broker, "groups", "configs", "cli-group", "--json"))
    by_name = {entry["name"]: entry for entry in shown["configs"]}
    assert by_name["consumer.session.timeout.ms"] == {
        "name": "consumer.session.timeout.ms", "value": "50000", "source": "group",
    }  # fmt: skip
    assert by_name["consumer.heartbeat.interval.ms"]["source"] == "default"
    deleted = ("--delete-config", "share.delivery.count.limit")
    ok(weirmq(broker, "groups", "alter", "cli-group", *deleted))
    shown = ok_json(weirmq(broker, "groups", "configs", "cli-group", "--json"))
    assert {e["name"]: e["source"] for e in shown["configs"]}["share.delivery.count.limit"] == (
        "default"
    )
    text = ok(weirmq(broker, "groups", "configs", "cli-group"))
    assert any(line.split()[:3] == ["consumer.session.timeout.ms", "50000", "group"]
               for line in text.splitlines())  # fmt: skip
    line = failed(
        weirmq(broker, "groups", "alter", "cli-group", "--config", "consumer.session.timeout.ms=1"),
        1,
    )
    assert "INVALID_CONFIG" in line and "group.consumer.min.session.timeout.ms" in line
