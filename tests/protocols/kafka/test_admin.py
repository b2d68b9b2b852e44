"""The admin APIs through the dispatcher: request frames in, kio-decoded answers out, with
the exact error code of every refusal and a read-back of every change.

Client libraries reach these APIs in tests/integration/test_admin_client.py; here every
advertised version and every refusal is driven directly.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_handlers import Client, OpenClient, open_client, resolve  # noqa: F401 (fixture)

from weirmq.broker.configs import ConfigSource, ConfigType
from weirmq.testing.records import make_batch

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_LOG_DIRS = 32, 33, 35
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 37, 44, 60
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def client(open_client: OpenClient) -> Client:  # noqa: F811
    return open_client(default_partitions=2)


def create(
    client: Client,
    name: str,
    partitions: int = 1,
    *,
    configs: dict[str, str | None] | None = None,
    replication_factor: int = -1,
    assignments: list[dict[str, Any]] | None = None,
    validate_only: bool = False,
    version: int = 7,
) -> Any:
    request = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": replication_factor,
                "assignments": assignments or [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout": 30_000,
        "validate_only": validate_only,
    }
    (result,) = client.call(CREATE_TOPICS, request, version).topics
    return result


def describe(
    client: Client,
    name: str,
    *,
    kind: int = TOPIC,
    keys: list[str] | None = None,
    version: int = 4,
    synonyms: bool = True,
) -> tuple[Any, dict[str, Any]]:
    request = {
        "resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms,
        "include_documentation": True,
    }
    (result,) = client.call(DESCRIBE_CONFIGS, request, version).results
    return result, {c.name: c for c in result.configs}


def alter_incremental(
    client: Client,
    name: str,
    ops: list[tuple[str, int, str | None]],
    *,
    kind: int = TOPIC,
    validate_only: bool = False,
    version: int = 1,
) -> Any:
    request = {
        "resources": [
            {
                "resource_type": kind,
                "resource_name": name,
                "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops],
            }
        ],
        "validate_only": validate_only,
    }
    (result,) = client.call(INCREMENTAL_ALTER_CONFIGS, request, version).responses
    return result


def topic_configs(client: Client, name: str) -> dict[str, str | None]:
    _result, entries = describe(client, name)
    return {
        n: e.value
        for n, e in entries.items()
        if e.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    }


# --- CreateTopics ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_creates_with_configs_in_every_version(client: Client, version: int) -> None:
    result = create(client, "orders", 3, configs={"retention.ms": " 60000 "}, version=version)
    assert result.error_code == ErrorCode.none
    topic = client.broker.topics.get("orders")
    assert topic is not None and topic.partitions == 3
    assert topic.configs == {"retention.ms": "60000"}  # stored canonical
    assert [client.broker.partition_log("orders", p) is not None for p in range(3)] == [True] * 3
    assert client.log("orders").config.retention_ms == 60_000
    if version >= 5:
        assert (result.num_partitions, result.replication_factor) == (3, 1)
        configs = {c.name: c for c in result.configs}
        assert configs["retention.ms"].value == "60000"
        assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert configs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
    if version >= 7:
        assert result.topic_id == topic.topic_id


def test_create_topics_defaults_the_partition_count(client: Client) -> None:
    assert create(client, "dflt", -1).error_code == ErrorCode.none
    topic = client.broker.topics.get("dflt")
    assert topic is not None and topic.partitions == 2  # the fixture's default_partitions


@pytest.mark.parametrize(
    ("name", "partitions", "options", "code"),
    [
        ("bad name!", 1, {}, ErrorCode.invalid_topic_exception),
        ("..", 1, {}, ErrorCode.invalid_topic_exception),
        ("x" * 250, 1, {}, ErrorCode.invalid_topic_exception),
        ("zero", 0, {}, ErrorCode.invalid_partitions),
        ("negative", -5, {}, ErrorCode.invalid_partitions),
        ("huge", 100_001, {}, ErrorCode.invalid_partitions),
        ("rf3", 1, {"replication_factor": 3}, ErrorCode.invalid_replication_factor),
        ("rf0", 1, {"replication_factor": 0}, ErrorCode.invalid_replication_factor),
        ("unknown-config", 1, {"configs": {"retention.msec": "1"}}, ErrorCode.invalid_config),
        ("bad-value", 1, {"configs": {"retention.ms": "soon"}}, ErrorCode.invalid_config),
        ("too-low", 1, {"configs": {"retention.ms": "-2"}}, ErrorCode.invalid_config),
        ("small-seg", 1, {"configs": {"segment.bytes": "100"}}, ErrorCode.invalid_config),
        ("null-value", 1, {"configs": {"retention.ms": None}}, ErrorCode.invalid_config),
        ("policy", 1, {"configs": {"cleanup.policy": "shred"}}, ErrorCode.invalid_config),
        ("codec", 1, {"configs": {"compression.type": "brotli"}}, ErrorCode.invalid_config),
        ("ts-type", 1, {"configs": {"message.timestamp.type": "Now"}}, ErrorCode.invalid_config),
    ],
)
def test_create_topics_refusals(
    client: Client, name: str, partitions: int, options: dict[str, Any], code: ErrorCode
) -> None:
    result = create(client, name, partitions, **options)
    assert result.error_code == code
    assert result.error_message
    assert (result.num_partitions, result.replication_factor) == (-1, -1)
    assert client.broker.topics.get(name) is None
    assert not (client.settings.data_dir / f"{name}-0").exists()


def test_create_topics_refuses_an_existing_topic_and_keeps_it(client: Client) -> None:
    create(client, "twice", 2)
    result = create(client, "twice", 5)
    assert result.error_code == ErrorCode.topic_already_exists
    topic = client.broker.topics.get("twice")
    assert topic is not None and topic.partitions == 2


def test_create_topics_answers_each_topic_on_its_own(client: Client) -> None:
    request = {
        "topics": [
            {"name": n, "num_partitions": p, "replication_factor": -1}
            for n, p in (("good", 1), ("bad", 0), ("dup", 1), ("dup", 1))
        ],
        "timeout": 1000,
    }
    results = client.call(CREATE_TOPICS, request, 7).topics
    assert [(r.name, r.error_code) for r in results] == [
        ("good", ErrorCode.none),
        ("bad", ErrorCode.invalid_partitions),
        ("dup", ErrorCode.invalid_request),
        ("dup", ErrorCode.invalid_request),
    ]
    assert client.broker.topics.get("good") is not None
    assert client.broker.topics.get("dup") is None


def test_create_topics_validate_only_creates_nothing(client: Client) -> None:
    result = create(client, "dry", 4, configs={"retention.ms": "1"}, validate_only=True)
    assert result.error_code == ErrorCode.none and result.num_partitions == 4
    assert client.broker.topics.get("dry") is None
    bad = create(client, "dry", 4, configs={"nope": "1"}, validate_only=True)
    assert bad.error_code == ErrorCode.invalid_config


def test_create_topics_with_a_manual_assignment_to_this_broker(client: Client) -> None:
    node = client.broker.node_id
    assignments = [{"partition_index": i, "broker_ids": [node]} for i in range(3)]
    assert create(client, "manual", -1, assignments=assignments).error_code == ErrorCode.none
    topic = client.broker.topics.get("manual")
    assert topic is not None and topic.partitions == 3
    elsewhere = [{"partition_index": 0, "broker_ids": [node + 1]}]
    result = create(client, "elsewhere", -1, assignments=elsewhere)
    assert result.error_code == ErrorCode.invalid_replica_assignment
    gap = [{"partition_index": i, "broker_ids": [node]} for i in (0, 2)]
    assert create(client, "gap", -1, assignments=gap).error_code == (
        ErrorCode.invalid_replica_assignment
    )
    both = create(client, "both", 3, assignments=assignments)
    assert both.error_code == ErrorCode.invalid_request


def test_created_topics_and_configs_survive_a_restart(client: Client) -> None:
    create(client, "durable", 2, configs={"cleanup.policy": "compact"})
    client.restart()
    topic = client.broker.topics.get("durable")
    assert topic is not None and topic.partitions == 2
    assert topic.configs == {"cleanup.policy": "compact"}
    assert client.log("durable").config.retention_ms is None  # compact: no deletion


# --- DeleteTopics ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_by_name_in_every_version(client: Client, version: int) -> None:
    create(client, "doomed", 2)
    client.produce("doomed", make_batch(3))
    topic_id = client.broker.topics.get("doomed").topic_id  # type: ignore[union-attr]
    if version < 6:
        request: dict[str, Any] = {"topic_names": ["doomed", "never"], "timeout": 1000}
    else:
        request = {"topics": [{"name": "doomed"}, {"name": "never"}], "timeout": 1000}
    responses = client.call(DELETE_TOPICS, request, version).responses
    assert [(r.name, r.error_code) for r in responses] == [
        ("doomed", ErrorCode.none),
        ("never", ErrorCode.unknown_topic_or_partition),
    ]
    if version >= 6:
        assert responses[0].topic_id == topic_id
    assert client.broker.topics.get("doomed") is None
    assert client.broker.partition_log("doomed", 0) is None
    data_dir = client.settings.data_dir
    assert not [p for p in data_dir.iterdir() if p.name.startswith("doomed-")]


def test_delete_topics_by_id(client: Client) -> None:
    create(client, "by-id", 1)
    topic_id = client.broker.topics.get("by-id").topic_id  # type: ignore[union-attr]
    request = {"topics": [{"topic_id": topic_id}, {"topic_id": uuid.uuid4()}], "timeout": 1000}
    responses = client.call(DELETE_TOPICS, request, 6).responses
    assert [(r.name, r.error_code) for r in responses] == [
        ("by-id", ErrorCode.none),
        (None, ErrorCode.unknown_topic_id),
    ]
    assert client.broker.topics.by_id(topic_id) is None


def test_a_deleted_topic_is_gone_after_a_restart_and_can_be_created_again(
    client: Client,
) -> None:
    create(client, "again", 1)
    client.produce("again", make_batch(5))
    old_id = client.broker.topics.get("again").topic_id  # type: ignore[union-attr]
    client.call(DELETE_TOPICS, {"topics": [{"name": "again"}], "timeout": 1000}, 6)
    client.restart()
    assert client.broker.topics.get("again") is None
    create(client, "again", 1)
    fresh = client.broker.topics.get("again")
    assert fresh is not None and fresh.topic_id != old_id
    assert client.log("again").log_end_offset == 0


# --- CreatePartitions -----------------------------------------------------------------------


def create_partitions(
    client: Client, name: str, count: int, *, assignments: Any = None, version: int = 3,
    validate_only: bool = False,
) -> Any:  # fmt: skip
    request = {
        "topics": [{"name": name, "count": count, "assignments": assignments}],
        "timeout": 1000,
        "validate_only": validate_only,
    }
    (result,) = client.call(CREATE_PARTITIONS, request, version).results
    return result


@pytest.mark.parametrize("version", range(4))
def test_create_partitions_grows_the_topic(client: Client, version: int) -> None:
    create(client, "grow", 1)
    client.produce("grow", make_batch(2))
    assert create_partitions(client, "grow", 4, version=version).error_code == ErrorCode.none
    metadata = client.metadata(["grow"])
    assert sorted(p.partition_index for p in metadata.topics[0].partitions) == [0, 1, 2, 3]
    assert client.produce("grow", make_batch(1), partition=3).error_code == ErrorCode.none
    assert client.log("grow", 0).log_end_offset == 2  # old data untouched
    client.restart()
    assert client.broker.topics.get("grow").partitions == 4  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "count", "assignments", "code"),
    [
        ("two", 2, None, ErrorCode.invalid_partitions),  # not larger
        ("two", 1, None, ErrorCode.invalid_partitions),  # shrinking
        ("missing", 5, None, ErrorCode.unknown_topic_or_partition),
        ("two", 4, [{"broker_ids": [0]}], ErrorCode.invalid_replica_assignment),  # 1 for 2
        ("two", 3, [{"broker_ids": [7]}], ErrorCode.invalid_replica_assignment),
    ],
)
def test_create_partitions_refusals(
    client: Client, name: str, count: int, assignments: Any, code: ErrorCode
) -> None:
    create(client, "two", 2)
    result = create_partitions(client, name, count, assignments=assignments)
    assert result.error_code == code and result.error_message
    assert client.broker.topics.get("two").partitions == 2  # type: ignore[union-attr]


def test_create_partitions_validate_only(client: Client) -> None:
    create(client, "dry", 1)
    assert create_partitions(client, "dry", 3, validate_only=True).error_code == ErrorCode.none
    assert client.broker.topics.get("dry").partitions == 1  # type: ignore[union-attr]
    assigned = create_partitions(client, "dry", 2, assignments=[{"broker_ids": [0]}])
    assert assigned.error_code == ErrorCode.none


# --- DescribeConfigs ------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs_of_a_topic_in_every_version(client: Client, version: int) -> None:
    create(client, "cfg", 1, configs={"retention.ms": "1000"})
    result, entries = describe(client, "cfg", version=version)
    assert result.error_code == ErrorCode.none
    assert {
        "cleanup.policy", "compression.type", "max.message.bytes", "message.timestamp.type",
        "min.insync.replicas", "retention.bytes", "retention.ms", "segment.bytes", "segment.ms",
        "weirmq.acks.all.fsync",
    } <= set(entries)  # fmt: skip
    retention = entries["retention.ms"]
    assert (retention.value, retention.config_source) == ("1000", 1)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    segment = entries["segment.bytes"]
    assert (segment.value, segment.config_source) == ("1073741824", 5)
    assert not segment.read_only and not segment.is_sensitive
    if version >= 3:
        assert retention.config_type == ConfigType.LONG
        assert entries["cleanup.policy"].config_type == ConfigType.LIST
        assert retention.documentation


def test_describe_configs_names_broker_settings_as_the_source(open_client: OpenClient) -> None:  # noqa: F811
    client = open_client(retention_ms=3_600_000)
    create(client, "t", 1)
    _result, entries = describe(client, "t")
    retention = entries["retention.ms"]
    assert (retention.value, retention.config_source) == ("3600000", 4)
    assert [(s.name, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", ConfigSource.DEFAULT_CONFIG),
    ]
    assert client.log("t").config.retention_ms == 3_600_000


def test_describe_configs_filters_keys_and_answers_each_resource(client: Client) -> None:
    create(client, "cfg", 1)
    _result, entries = describe(client, "cfg", keys=["retention.ms", "no.such.key"])
    assert list(entries) == ["retention.ms"]
    request = {
        "resources": [
            {"resource_type": TOPIC, "resource_name": "missing", "configuration_keys": None},
            {"resource_type": TOPIC, "resource_name": "cfg", "configuration_keys": None},
            {"resource_type": 8, "resource_name": "0", "configuration_keys": None},
        ],
        "include_synonyms": False,
    }
    results = client.call(DESCRIBE_CONFIGS, request, 4).results
    assert [r.error_code for r in results] == [
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.none,
        ErrorCode.invalid_request,
    ]
    assert results[1].configs and all(c.synonyms == () for c in results[1].configs)


def test_describe_configs_of_the_broker(open_client: OpenClient) -> None:  # noqa: F811
    client = open_client(default_partitions=3)
    result, entries = describe(client, str(client.broker.node_id), kind=BROKER)
    assert result.error_code == ErrorCode.none
    assert entries["num.partitions"].value == "3"
    assert entries["num.partitions"].config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["log.retention.ms"].config_source == ConfigSource.DEFAULT_CONFIG
    assert entries["auto.create.topics.enable"].value == "true"
    dynamic = {"log.retention.ms", "log.retention.bytes", "log.segment.bytes", "message.max.bytes"}
    assert {name for name, e in entries.items() if not e.read_only} == dynamic
    other, _ = describe(client, "7", kind=BROKER)
    assert other.error_code == ErrorCode.invalid_request


# --- IncrementalAlterConfigs and AlterConfigs -----------------------------------------------


@pytest.mark.parametrize("version", range(2))
def test_incremental_alter_configs_set_delete_append_subtract(client: Client, version: int) -> None:
    create(client, "alter", 2, configs={"segment.bytes": "1048576"})
    ops = [("retention.ms", SET, "5000"), ("segment.bytes", DELETE, None)]
    assert alter_incremental(client, "alter", ops, version=version).error_code == ErrorCode.none
    assert topic_configs(client, "alter") == {"retention.ms": "5000"}
    assert [client.log("alter", p).config.retention_ms for p in (0, 1)] == [5000, 5000]
    assert client.log("alter").config.segment_bytes == 1024**3

    append = alter_incremental(client, "alter", [("cleanup.policy", APPEND, "compact")])
    assert append.error_code == ErrorCode.none
    assert topic_configs(client, "alter")["cleanup.policy"] == "delete,compact"
    subtract = alter_incremental(client, "alter", [("cleanup.policy", SUBTRACT, "delete")])
    assert subtract.error_code == ErrorCode.none
    assert topic_configs(client, "alter")["cleanup.policy"] == "compact"
    assert client.log("alter").config.retention_ms is None  # compact only: keep everything
    client.restart()
    assert topic_configs(client, "alter") == {"retention.ms": "5000", "cleanup.policy": "compact"}


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([("retention.msec", SET, "1")], ErrorCode.invalid_config),
        ([("retention.ms", SET, "-7")], ErrorCode.invalid_config),
        ([("retention.ms", APPEND, "1")], ErrorCode.invalid_config),  # not a list config
        ([("cleanup.policy", APPEND, "archive")], ErrorCode.invalid_config),
        ([("retention.ms", 9, "1")], ErrorCode.invalid_config),  # no such operation
        ([("retention.ms", SET, "1"), ("retention.ms", DELETE, None)], ErrorCode.invalid_config),
    ],
)
def test_incremental_alter_configs_refusals_change_nothing(
    client: Client, ops: list[tuple[str, int, str | None]], code: ErrorCode
) -> None:
    create(client, "keep", 1, configs={"retention.ms": "1000"})
    result = alter_incremental(client, "keep", ops)
    assert result.error_code == code and result.error_message
    assert topic_configs(client, "keep") == {"retention.ms": "1000"}


def test_incremental_alter_configs_unknown_topic_broker_and_validate_only(client: Client) -> None:
    missing = alter_incremental(client, "missing", [("retention.ms", SET, "1")])
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    broker = alter_incremental(client, "0", [("num.partitions", SET, "1")], kind=BROKER)
    assert broker.error_code == ErrorCode.invalid_request  # Kafka's answer for read-only ones
    other = alter_incremental(client, "7", [("log.retention.ms", SET, "1")], kind=BROKER)
    assert other.error_code == ErrorCode.invalid_request
    create(client, "dry", 1)
    dry = alter_incremental(client, "dry", [("retention.ms", SET, "1")], validate_only=True)
    assert dry.error_code == ErrorCode.none
    assert topic_configs(client, "dry") == {}


@pytest.mark.parametrize("version", range(3))
def test_alter_configs_replaces_the_whole_set(client: Client, version: int) -> None:
    create(client, "legacy", 1, configs={"retention.ms": "1000", "segment.ms": "60000"})
    request = {
        "resources": [
            {
                "resource_type": TOPIC,
                "resource_name": "legacy",
                "configs": [{"name": "retention.bytes", "value": "4096"}],
            },
            {"resource_type": TOPIC, "resource_name": "missing", "configs": []},
        ],
        "validate_only": False,
    }
    responses = client.call(ALTER_CONFIGS, request, version).responses
    assert [r.error_code for r in responses] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert topic_configs(client, "legacy") == {"retention.bytes": "4096"}
    assert client.log("legacy").config.retention_bytes == 4096


def test_weirmq_acks_all_fsync_false_answers_acks_all_without_waiting(client: Client) -> None:
    create(client, "fast", 1, configs={"weirmq.acks.all.fsync": "false"})
    outcome = client.send(0, _produce("fast"), 12)
    assert not hasattr(outcome, "__await__"), "answered at once, no fsync awaited"
    create(client, "safe", 1)
    waiting = client.send(0, _produce("safe"), 12)
    assert hasattr(waiting, "__await__"), "acks=all waits for the group commit by default"
    assert resolve(waiting) is not None


def _produce(topic: str) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": make_batch(1)}]}],
    }


# --- DeleteRecords --------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(3))
def test_delete_records_moves_the_log_start(client: Client, version: int) -> None:
    create(client, "trim", 2)
    for _ in range(4):
        client.produce("trim", make_batch(5))
    client.produce("trim", make_batch(3), partition=1)
    request = {
        "topics": [
            {
                "name": "trim",
                "partitions": [
                    {"partition_index": 0, "offset": 12},
                    {"partition_index": 1, "offset": -1},  # the high watermark
                    {"partition_index": 5, "offset": 0},
                ],
            },
            {"name": "missing", "partitions": [{"partition_index": 0, "offset": 0}]},
        ],
        "timeout": 1000,
    }
    topics = client.call(DELETE_RECORDS, request, version).topics
    answers = [(p.partition_index, p.low_watermark, p.error_code) for p in topics[0].partitions]
    assert answers == [
        (0, 12, ErrorCode.none),
        (1, 3, ErrorCode.none),
        (5, -1, ErrorCode.unknown_topic_or_partition),
    ]
    assert topics[1].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    assert client.list_offset("trim", -2).offset == 12
    fetched = client.fetch("trim", 5)
    assert fetched.error_code == ErrorCode.offset_out_of_range
    # Crash-safe: the new start is checkpointed before the answer.
    client.restart()
    assert client.list_offset("trim", -2).offset == 12


def test_delete_records_beyond_the_high_watermark_is_out_of_range(client: Client) -> None:
    create(client, "short", 1)
    client.produce("short", make_batch(2))
    request = {
        "topics": [
            {
                "name": "short",
                "partitions": [
                    {"partition_index": 0, "offset": 3},
                    {"partition_index": 0, "offset": -2},
                ],
            }
        ],
        "timeout": 1000,
    }
    (topic,) = client.call(DELETE_RECORDS, request, 2).topics
    assert [p.error_code for p in topic.partitions] == [ErrorCode.offset_out_of_range] * 2
    assert client.list_offset("short", -2).offset == 0


# --- DescribeCluster and DescribeLogDirs ----------------------------------------------------


@pytest.mark.parametrize("version", range(3))
def test_describe_cluster(client: Client, version: int) -> None:
    client.broker.advertised = ("127.0.0.1", 19092)
    request = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    response = client.call(DESCRIBE_CLUSTER, request, version)
    assert response.error_code == ErrorCode.none
    assert response.cluster_id == client.broker.cluster_id
    assert response.controller_id == client.broker.node_id
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(0, "127.0.0.1", 19092)]
    assert response.cluster_authorized_operations == -2147483648


@pytest.mark.parametrize("version", range(3))
def test_describe_cluster_authorizes_exactly_kafkas_cluster_operations(
    client: Client, version: int
) -> None:
    request = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
    response = client.call(DESCRIBE_CLUSTER, request, version)
    # ALTER 7, ALTER_CONFIGS 11, CLUSTER_ACTION 9, CREATE 5, DESCRIBE 8, DESCRIBE_CONFIGS 10,
    # IDEMPOTENT_WRITE 12: Kafka's AclOperation codes for the cluster resource, not WRITE 4.
    ops = response.cluster_authorized_operations
    assert {bit for bit in range(32) if ops >> bit & 1} == {5, 7, 8, 9, 10, 11, 12}


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_log_dirs(client: Client, version: int, tmp_path: Path) -> None:
    create(client, "sized", 2)
    client.produce("sized", make_batch(4, size=100))
    everything = client.call(DESCRIBE_LOG_DIRS, {"topics": None}, version)
    (result,) = everything.results
    assert Path(result.log_dir) == (tmp_path / "data").resolve()
    sizes = {
        (t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions
    }
    assert sizes == {
        ("sized", 0): client.log("sized", 0).size_bytes,
        ("sized", 1): 0,
    }
    assert sizes[("sized", 0)] > 400
    if version >= 4:
        assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    some = client.call(
        DESCRIBE_LOG_DIRS, {"topics": [{"topic": "sized", "partitions": [1, 9]}]}, version
    )
    (result,) = some.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
        ("sized", [1])
    ]
