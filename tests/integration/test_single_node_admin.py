"""The cluster admin APIs of a one-node cluster (apis/cluster.py), through real clients:
kafka-python's KafkaAdminClient, which has a call for each of them, and confluent-kafka's
AdminClient where it has one (elect_leaders, describe_topics, list_offsets).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

# kafka-python 3.0 loads its protocol schemas with a deprecated importlib.resources call;
# ignore exactly that (see test_python_clients.py).
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message=r"(read_text|open_text) is deprecated", category=DeprecationWarning
    )
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import NoError

if TYPE_CHECKING:
    from conftest import BrokerProcess

TIMEOUT_S = 15.0
TOPIC = "cluster-apis"


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (future,) = admin.create_topics([NewTopic(TOPIC, 3, 1)]).values()
    future.result(TIMEOUT_S)
    return admin


@pytest.fixture
def python_admin(broker: BrokerProcess, admin: AdminClient) -> Iterator[Any]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


def test_confluent_elect_leaders_needs_no_election(admin: AdminClient) -> None:
    from confluent_kafka import ElectionType

    wanted = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 2), TopicPartition(TOPIC, 7)]
    result = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(TIMEOUT_S)
    codes = {(tp.topic, tp.partition): (err.name() if err else None) for tp, err in result.items()}
    assert codes == {
        (TOPIC, 0): "ELECTION_NOT_NEEDED",
        (TOPIC, 2): "ELECTION_NOT_NEEDED",
        (TOPIC, 7): "UNKNOWN_TOPIC_OR_PART",
    }


def test_confluent_describe_topics_and_list_offsets(admin: AdminClient) -> None:
    from confluent_kafka import TopicCollection

    (future,) = admin.describe_topics(TopicCollection([TOPIC])).values()
    described = future.result(TIMEOUT_S)
    assert [p.id for p in described.partitions] == [0, 1, 2]
    assert all(len(p.replicas) == 1 and p.leader is not None for p in described.partitions)
    wanted = {TopicPartition(TOPIC, i): OffsetSpec.latest() for i in range(3)}
    offsets = {
        tp.partition: f.result(TIMEOUT_S).offset for tp, f in admin.list_offsets(wanted).items()
    }
    assert offsets == {0: 0, 1: 0, 2: 0}
    with pytest.raises(KafkaException):
        (missing,) = admin.describe_topics(TopicCollection(["no-such-topic"])).values()
        missing.result(TIMEOUT_S)


def test_python_elect_leaders(python_admin: Any) -> None:
    response = python_admin.elect_leaders(0, {TOPIC: [0, 1]}, raise_errors=False)
    codes = {
        (result.topic, p.partition_id): p.error_code
        for result in response.replica_election_results
        for p in result.partition_result
    }
    assert codes == {(TOPIC, 0): 84, (TOPIC, 1): 84}  # ELECTION_NOT_NEEDED


def test_python_partition_reassignments(python_admin: Any, broker: BrokerProcess) -> None:
    node = python_admin.describe_cluster()["brokers"][0]["broker_id"]
    result = python_admin.alter_partition_reassignments(
        {KafkaTopicPartition(TOPIC, 0): [node], KafkaTopicPartition(TOPIC, 1): [node + 1]}
    )
    codes = {tp.partition: (None if err is None else err.errno) for tp, err in result.items()}
    assert codes == {0: None, 1: 39}  # INVALID_REPLICA_ASSIGNMENT
    assert python_admin.list_partition_reassignments() == {}


def test_python_alter_replica_log_dirs(python_admin: Any) -> None:
    node = python_admin.describe_cluster()["brokers"][0]["broker_id"]
    ((log_dir,),) = (b["log_dirs"] for b in python_admin.describe_log_dirs())
    path = log_dir["log_dir"]
    result = python_admin.alter_replica_log_dirs(
        {(TOPIC, 0, node): path, (TOPIC, 1, node): path + "-elsewhere"}
    )
    names = {key[1]: err.__name__ for key, err in result.items()}
    assert names == {0: NoError.__name__, 1: "LogDirNotFoundError"}


def test_python_describe_metadata_quorum(python_admin: Any, broker: BrokerProcess) -> None:
    node = python_admin.describe_cluster()["brokers"][0]["broker_id"]
    quorum = python_admin.describe_metadata_quorum()
    ((topic),) = quorum["topics"]
    (partition,) = topic["partitions"]
    assert topic["topic_name"] == "__cluster_metadata"
    assert (partition["error"], partition["leader_id"]) == (None, node)
    assert [v["replica_id"] for v in partition["current_voters"]] == [node]
    assert partition["observers"] == []
    (described,) = quorum["nodes"]
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    assert [lis["port"] for lis in described["listeners"]] == [port]


def test_python_describe_topic_partitions_pages(python_admin: Any) -> None:
    seen: list[tuple[str, int]] = []
    cursor = None
    for _ in range(10):
        page = python_admin.describe_topic_partitions(
            [TOPIC], response_partition_limit=2, cursor=cursor
        )
        seen += [(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]


def test_python_list_config_resources(python_admin: Any) -> None:
    node = str(python_admin.describe_cluster()["brokers"][0]["broker_id"])
    listed = python_admin.list_config_resources()
    assert TOPIC in listed["topic"]
    assert (listed["broker"], listed["broker_logger"]) == ([node], [node])
    assert python_admin.list_config_resources(["CLIENT_METRICS"]) == {}


def test_confluent_producer_is_told_per_message_of_keyless_records(
    admin: AdminClient, broker: BrokerProcess
) -> None:
    """A compacted topic refuses records without a key (INVALID_RECORD, KIP-467); the
    producer reports it for those messages, and keyed ones go through."""
    from confluent_kafka import KafkaError, Producer

    topic = NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"})
    (future,) = admin.create_topics([topic]).values()
    future.result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    reports: list[tuple[bytes | None, int | None]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append((msg.key(), None if err is None else err.code()))

    producer.produce("compacted", b"value", key=b"k", on_delivery=report)
    producer.flush(TIMEOUT_S)
    producer.produce("compacted", b"value", on_delivery=report)
    assert producer.flush(TIMEOUT_S) == 0
    assert reports == [(b"k", None), (None, KafkaError.INVALID_RECORD)]
