"""Dynamic broker configs (KIP-226) and GROUP configs through the Kafka config APIs, in
request frames: a BROKER resource (this node's id, or "" for the cluster-wide default)
takes the dynamic names at once and across a restart, with Kafka's sources; everything
else is refused by name. GROUP resources take legacy AlterConfigs too."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_admin import ALTER_CONFIGS, BROKER, DELETE, SET, alter_incremental, create, describe
from test_handlers import Client, OpenClient, open_client  # noqa: F401 (fixture)

from weirmq.broker.configs import ConfigSource
from weirmq.broker.dynamic_configs import BROKER_CONFIGS_FILE

GROUP = 32


@pytest.fixture
def client(open_client: OpenClient) -> Client:  # noqa: F811
    return open_client(retention_ms=86_400_000)


def legacy_alter(client: Client, kind: int, name: str, values: dict[str, str]) -> Any:
    request = {
        "resources": [
            {
                "resource_type": kind,
                "resource_name": name,
                "configs": [{"name": n, "value": v} for n, v in values.items()],
            }
        ],
        "validate_only": False,
    }
    (result,) = client.call(ALTER_CONFIGS, request, 2).responses
    return result


def test_a_dynamic_retention_applies_at_once_to_topics_without_their_own(client: Client) -> None:
    create(client, "plain", 2)
    create(client, "own", 1, configs={"retention.ms": "5000"})
    result = alter_incremental(client, "0", [("log.retention.ms", SET, "60000")], kind=BROKER)
    assert (result.error_code, result.error_message) == (ErrorCode.none, None)
    assert [client.log("plain", p).config.retention_ms for p in (0, 1)] == [60_000, 60_000]
    assert client.log("own").config.retention_ms == 5_000

    _, topic = describe(client, "plain")
    entry = topic["retention.ms"]
    assert (entry.value, entry.config_source) == ("60000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", "60000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "86400000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    _, node = describe(client, "0", kind=BROKER)
    broker_entry = node["log.retention.ms"]
    assert (broker_entry.value, broker_entry.config_source, broker_entry.read_only) == (
        "60000", ConfigSource.DYNAMIC_BROKER_CONFIG, False,
    )  # fmt: skip

    client.restart()
    assert client.log("plain").config.retention_ms == 60_000
    assert (client.settings.data_dir / BROKER_CONFIGS_FILE).exists()
    alter_incremental(client, "0", [("log.retention.ms", DELETE, None)], kind=BROKER)
    assert client.log("plain").config.retention_ms == 86_400_000


def test_the_node_layer_wins_over_the_cluster_default(client: Client) -> None:
    create(client, "t", 1)
    alter_incremental(client, "", [("log.segment.bytes", SET, "2097152")], kind=BROKER)
    assert client.log("t").config.segment_bytes == 2_097_152
    result, default = describe(client, "", kind=BROKER)
    assert result.error_code == ErrorCode.none
    assert list(default) == ["log.segment.bytes"]  # Kafka lists what the default layer sets
    assert default["log.segment.bytes"].config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    alter_incremental(client, "0", [("log.segment.bytes", SET, "1048576")], kind=BROKER)
    assert client.log("t").config.segment_bytes == 1_048_576
    _, topic = describe(client, "t")
    assert [s.source for s in topic["segment.bytes"].synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG,
    ]


def test_message_max_bytes_is_dynamic_and_legacy_alter_configs_replaces_the_layer(
    client: Client,
) -> None:
    create(client, "t", 1)
    alter_incremental(client, "0", [("log.retention.bytes", SET, "4096")], kind=BROKER)
    result = legacy_alter(client, BROKER, "0", {"message.max.bytes": "2048"})
    assert result.error_code == ErrorCode.none
    config = client.log("t").config
    assert (config.max_message_bytes, config.retention_bytes) == (2048, None)


@pytest.mark.parametrize(
    ("name", "value", "code", "message"),
    [
        ("num.partitions", "3", ErrorCode.invalid_request, "Cannot update these configs"),
        ("log.dirs", "/elsewhere", ErrorCode.invalid_request, "[log.dirs]"),
        ("num.io.threads", "8", ErrorCode.invalid_config, "num.io.threads"),
        ("log.retention.ms", "-2", ErrorCode.invalid_config, "log.retention.ms"),
        ("log.segment.bytes", "100", ErrorCode.invalid_config, "log.segment.bytes"),
    ],
)
def test_other_broker_configs_are_refused_by_name(
    client: Client, name: str, value: str, code: ErrorCode, message: str
) -> None:
    ops = [("log.retention.bytes", SET, "1000"), (name, SET, value)]
    result = alter_incremental(client, "0", ops, kind=BROKER)
    assert result.error_code == code
    assert message in result.error_message
    _, node = describe(client, "0", kind=BROKER)
    assert node["log.retention.bytes"].config_source == ConfigSource.DEFAULT_CONFIG


def test_append_is_refused_for_broker_and_group_configs(client: Client) -> None:
    for kind, name, config in (
        (BROKER, "0", "log.retention.ms"),
        (GROUP, "g", "consumer.session.timeout.ms"),
    ):
        result = alter_incremental(client, name, [(config, 2, "1")], kind=kind)
        assert result.error_code == ErrorCode.invalid_config


def test_group_configs_by_incremental_and_legacy_alter_configs(client: Client) -> None:
    result = alter_incremental(
        client, "g", [("consumer.session.timeout.ms", SET, "50000")], kind=GROUP
    )
    assert result.error_code == ErrorCode.none
    _, entries = describe(client, "g", kind=GROUP)
    session = entries["consumer.session.timeout.ms"]
    assert (session.value, session.config_source) == ("50000", ConfigSource.GROUP_CONFIG)
    assert entries["streams.num.standby.replicas"].config_source == ConfigSource.DEFAULT_CONFIG
    assert client.broker.group_configs.consumer_timeouts("g") == (50_000, 5_000)

    low = alter_incremental(client, "g", [("consumer.session.timeout.ms", SET, "1000")], kind=GROUP)
    assert low.error_code == ErrorCode.invalid_config
    assert "group.consumer.min.session.timeout.ms" in low.error_message

    replaced = legacy_alter(client, GROUP, "g", {"share.delivery.count.limit": "3"})
    assert replaced.error_code == ErrorCode.none
    assert client.broker.group_configs.overrides("g") == {"share.delivery.count.limit": "3"}
