"""The single-node cluster admin APIs (apis/cluster.py) through the dispatcher, at every
advertised version: request frames in, kio-decoded answers out.

Real clients reach them in tests/integration/test_single_node_admin.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_admin import create
from test_handlers import Client, OpenClient, open_client  # noqa: F401 (fixture)

from weirmq.protocols.kafka.dispatch import API_VERSIONS

ALTER_REPLICA_LOG_DIRS, ELECT_LEADERS = 34, 43
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
DESCRIBE_QUORUM, LIST_CONFIG_RESOURCES, DESCRIBE_TOPIC_PARTITIONS = 55, 74, 75
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


def versions(key: int) -> range:
    api = API_VERSIONS[key]
    return range(api.min_version, api.max_version + 1)


@pytest.fixture
def client(open_client: OpenClient) -> Client:  # noqa: F811
    client = open_client()
    create(client, "alpha", 3)
    create(client, "beta", 2)
    return client


def partition_codes(results: Any, partitions: str, index: str) -> dict[tuple[str, int], int]:
    return {
        (topic_name, getattr(p, index)): p.error_code
        for topic_name, topic in results
        for p in getattr(topic, partitions)
    }


# --- ElectLeaders -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ELECT_LEADERS))
def test_elect_leaders_is_never_needed(client: Client, version: int) -> None:
    request = {
        "election_type": 0,
        "topic_partitions": [
            {"topic": "alpha", "partitions": [0, 2, 3]},
            {"topic": "nope", "partitions": [0]},
        ],
        "timeout": 1000,
    }
    response = client.call(ELECT_LEADERS, request, version)
    if version >= 1:
        assert response.error_code == ErrorCode.none
    codes = partition_codes(
        ((r.topic, r) for r in response.replica_election_results),
        "partition_result",
        "partition_id",
    )
    assert codes == {
        ("alpha", 0): ErrorCode.election_not_needed,
        ("alpha", 2): ErrorCode.election_not_needed,
        ("alpha", 3): ErrorCode.unknown_topic_or_partition,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }


def test_elect_leaders_for_every_partition_leaves_out_those_needing_none(client: Client) -> None:
    request = {"election_type": 1, "topic_partitions": None, "timeout": 1000}
    response = client.call(ELECT_LEADERS, request, 2)
    assert response.error_code == ErrorCode.none
    assert response.replica_election_results == ()


def test_elect_leaders_refuses_an_unknown_election_type(client: Client) -> None:
    request = {"election_type": 7, "topic_partitions": [], "timeout": 1000}
    assert client.call(ELECT_LEADERS, request, 2).error_code == ErrorCode.invalid_request


# --- AlterReplicaLogDirs ----------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ALTER_REPLICA_LOG_DIRS))
def test_alter_replica_log_dirs(client: Client, version: int) -> None:
    here = str(client.broker.logs.data_dir.resolve())
    request = {
        "dirs": [
            {"path": here, "topics": [{"name": "alpha", "partitions": [0, 9]}]},
            {"path": here + "/elsewhere", "topics": [{"name": "beta", "partitions": [1]}]},
            {"path": here, "topics": [{"name": "nope", "partitions": [0]}]},
        ]
    }
    response = client.call(ALTER_REPLICA_LOG_DIRS, request, version)
    codes = partition_codes(
        ((r.topic_name, r) for r in response.results), "partitions", "partition_index"
    )
    assert codes == {
        ("alpha", 0): ErrorCode.none,
        ("alpha", 9): ErrorCode.unknown_topic_or_partition,
        ("beta", 1): ErrorCode.log_dir_not_found,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }


# --- Partition reassignments ------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ALTER_REASSIGNMENTS))
def test_alter_partition_reassignments(client: Client, version: int) -> None:
    node = client.broker.node_id
    wanted = {0: [node], 1: None, 2: [node, node + 1]}
    request = {
        "timeout": 1000,
        "topics": [
            {
                "name": "alpha",
                "partitions": [{"partition_index": i, "replicas": r} for i, r in wanted.items()],
            },
            {"name": "beta", "partitions": [{"partition_index": 0, "replicas": [node + 1]}]},
            {"name": "nope", "partitions": [{"partition_index": 0, "replicas": [node]}]},
        ],
    }
    response = client.call(ALTER_REASSIGNMENTS, request, version)
    assert response.error_code == ErrorCode.none
    codes = partition_codes(
        ((r.name, r) for r in response.responses), "partitions", "partition_index"
    )
    assert codes == {
        ("alpha", 0): ErrorCode.none,
        ("alpha", 1): ErrorCode.no_reassignment_in_progress,
        ("alpha", 2): ErrorCode.invalid_replica_assignment,
        ("beta", 0): ErrorCode.invalid_replica_assignment,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }


def test_a_reassignment_may_not_change_the_replication_factor_when_told(client: Client) -> None:
    node = client.broker.node_id
    request = {
        "timeout": 1000,
        "allow_replication_factor_change": False,
        "topics": [
            {"name": "alpha", "partitions": [{"partition_index": 0, "replicas": [node, 7]}]}
        ],
    }
    (topic,) = client.call(ALTER_REASSIGNMENTS, request, 1).responses
    assert topic.partitions[0].error_code == ErrorCode.invalid_replication_factor


@pytest.mark.parametrize("topics", [None, [{"name": "alpha", "partition_indexes": [0, 1]}]])
def test_no_reassignment_is_ever_in_progress(client: Client, topics: Any) -> None:
    response = client.call(LIST_REASSIGNMENTS, {"timeout": 1000, "topics": topics}, 0)
    assert response.error_code == ErrorCode.none
    assert response.topics == ()


# --- DescribeQuorum ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(DESCRIBE_QUORUM))
def test_describe_quorum_names_this_node_the_only_voter(client: Client, version: int) -> None:
    request = {
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
    }
    response = client.call(DESCRIBE_QUORUM, request, version)
    assert response.error_code == ErrorCode.none
    ((topic),) = response.topics
    (partition,) = topic.partitions
    node = client.broker.node_id
    assert (topic.topic_name, partition.error_code) == ("__cluster_metadata", ErrorCode.none)
    assert partition.leader_id == node and partition.leader_epoch >= 1
    assert [v.replica_id for v in partition.current_voters] == [node]
    assert partition.current_voters[0].log_end_offset == partition.high_watermark
    assert partition.observers == ()
    if version >= 2:
        (described,) = response.nodes
        host, port = client.broker.advertised
        assert described.node_id == node
        assert [(lis.host, lis.port) for lis in described.listeners] == [(host, port)]


def test_describe_quorum_of_another_partition(client: Client) -> None:
    request = {"topics": [{"topic_name": "alpha", "partitions": [{"partition_index": 0}]}]}
    (topic,) = client.call(DESCRIBE_QUORUM, request, 2).topics
    assert topic.partitions[0].error_code == ErrorCode.unknown_topic_or_partition


# --- DescribeTopicPartitions ------------------------------------------------------------------


def describe(client: Client, names: list[str], limit: int = 2000, cursor: Any = None) -> Any:
    request = {
        "topics": [{"name": n} for n in names],
        "response_partition_limit": limit,
        "cursor": cursor,
    }
    return client.call(DESCRIBE_TOPIC_PARTITIONS, request, 0)


def pages(client: Client, names: list[str], limit: int) -> list[list[tuple[str, int]]]:
    seen, cursor = [], None
    for _ in range(20):
        response = describe(client, names, limit, cursor)
        seen.append([(t.name, p.partition_index) for t in response.topics for p in t.partitions])
        cursor = response.next_cursor
        if cursor is None:
            return seen
        cursor = {"topic_name": cursor.topic_name, "partition_index": cursor.partition_index}
    raise AssertionError("the cursor never ran out")


def test_describe_topic_partitions(client: Client) -> None:
    response = describe(client, ["beta", "alpha", "nope"])
    by_name = {t.name: t for t in response.topics}
    assert [t.name for t in response.topics] == ["alpha", "beta", "nope"]  # sorted, as Kafka
    assert response.next_cursor is None
    alpha = by_name["alpha"]
    assert alpha.error_code == ErrorCode.none
    assert alpha.topic_id == client.broker.topics.get("alpha").topic_id  # type: ignore[union-attr]
    node = client.broker.node_id
    for p in alpha.partitions:
        assert (p.leader_id, p.replica_nodes, p.isr_nodes) == (node, (node,), (node,))
        assert p.eligible_leader_replicas == ()
    assert [p.partition_index for p in alpha.partitions] == [0, 1, 2]
    assert by_name["nope"].error_code == ErrorCode.unknown_topic_or_partition
    assert by_name["nope"].topic_id is None  # kio reads the zero uuid as null


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 6])
def test_describe_topic_partitions_pages_by_the_limit(client: Client, limit: int) -> None:
    every = [("alpha", 0), ("alpha", 1), ("alpha", 2), ("beta", 0), ("beta", 1)]
    found = pages(client, ["alpha", "beta"], limit)
    assert [tp for page in found for tp in page] == every
    assert all(0 < len(page) <= limit for page in found)


def test_describe_topic_partitions_of_every_topic(client: Client) -> None:
    names = {t.name for t in describe(client, []).topics}
    assert {"alpha", "beta"} <= names
    found = pages(client, [], 2)
    assert [tp for page in found for tp in page if tp[0] in ("alpha", "beta")] == [
        ("alpha", 0),
        ("alpha", 1),
        ("alpha", 2),
        ("beta", 0),
        ("beta", 1),
    ]


def test_a_cursor_outside_the_topics_named_is_refused(client: Client) -> None:
    response = describe(client, ["beta"], cursor={"topic_name": "alpha", "partition_index": 0})
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("beta", ErrorCode.invalid_request)
    ]


# --- ListConfigResources ----------------------------------------------------------------------


def listed(client: Client, types: list[int], version: int = 1) -> Any:
    response = client.call(LIST_CONFIG_RESOURCES, {"resource_types": types}, version)
    if version == 0:
        return response.error_code, {(r.resource_name,) for r in response.config_resources}
    return response.error_code, {
        (r.resource_name, r.resource_type) for r in response.config_resources
    }


def test_list_config_resources(client: Client) -> None:
    node = str(client.broker.node_id)
    client.broker.group_configs.alter(
        "configured", [("share.record.lock.duration.ms", 0, "20000")], validate_only=False
    )
    code, every = listed(client, [])
    assert code == ErrorCode.none
    assert {("alpha", TOPIC), ("beta", TOPIC), (node, BROKER), (node, BROKER_LOGGER)} <= every
    assert ("configured", GROUP) in every
    assert listed(client, [GROUP]) == (ErrorCode.none, {("configured", GROUP)})
    assert listed(client, [BROKER, CLIENT_METRICS]) == (ErrorCode.none, {(node, BROKER)})
    assert listed(client, [3])[0] == ErrorCode.unsupported_version


def test_list_client_metrics_resources_v0_is_empty(client: Client) -> None:
    assert listed(client, [], version=0) == (ErrorCode.none, set())
