"""Dynamic broker configs (`weirmq.broker.dynamic_configs`): the two layers, their
precedence over the static settings, their file, and what is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weirmq.broker.configs import ConfigSource, InvalidConfigError
from weirmq.broker.dynamic_configs import (
    BROKER_CONFIGS_FILE,
    CLUSTER_DEFAULT,
    NODE,
    DynamicBrokerConfigs,
)
from weirmq.errors import ErrorCode, KafkaError
from weirmq.settings import Settings

SET, DELETE = 0, 1


def open_dynamic(tmp_path: Path, **settings: object) -> DynamicBrokerConfigs:
    return DynamicBrokerConfigs(tmp_path, Settings(data_dir=tmp_path, **settings))  # type: ignore[arg-type]


def test_the_node_layer_wins_over_the_default_which_wins_over_the_settings(
    tmp_path: Path,
) -> None:
    dynamic = open_dynamic(tmp_path, retention_ms=1_000)
    assert dynamic.effective() is dynamic.static
    dynamic.alter(CLUSTER_DEFAULT, [("log.retention.ms", SET, " 2000 ")], validate_only=False)
    assert dynamic.effective().retention_ms == 2_000
    dynamic.alter(NODE, [("log.retention.ms", SET, "3000")], validate_only=False)
    assert dynamic.effective().retention_ms == 3_000
    assert dynamic.synonyms("log.retention.ms") == [
        ("log.retention.ms", "3000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    ]
    dynamic.alter(NODE, [("log.retention.ms", DELETE, None)], validate_only=False)
    assert dynamic.effective().retention_ms == 2_000
    assert dynamic.static.retention_ms == 1_000


def test_changes_are_kept_in_a_file_and_read_back(tmp_path: Path) -> None:
    first = open_dynamic(tmp_path)
    first.alter(NODE, [("message.max.bytes", SET, "2048")], validate_only=False)
    first.alter(CLUSTER_DEFAULT, [("log.segment.bytes", SET, "4096")], validate_only=False)
    document = json.loads((tmp_path / BROKER_CONFIGS_FILE).read_text())
    assert document[NODE] == {"message.max.bytes": "2048"}
    second = open_dynamic(tmp_path)
    settings = second.effective()
    assert (settings.message_max_bytes, settings.segment_bytes) == (2048, 4096)


def test_validate_only_and_refusals_change_nothing(tmp_path: Path) -> None:
    dynamic = open_dynamic(tmp_path)
    assert dynamic.alter(NODE, [("log.retention.bytes", SET, "10")], validate_only=True) == {
        "log.retention.bytes": "10"
    }
    assert dynamic.layer(NODE) == {}
    assert not (tmp_path / BROKER_CONFIGS_FILE).exists()
    with pytest.raises(KafkaError, match=r"dynamically: \[log.dirs, num.partitions\]") as info:
        dynamic.alter(
            NODE, [("num.partitions", SET, "2"), ("log.dirs", SET, "x")], validate_only=False
        )
    assert info.value.code == ErrorCode.invalid_request  # Kafka's answer for read-only ones
    with pytest.raises(InvalidConfigError, match=r"num\.io\.threads"):
        dynamic.alter(NODE, [("num.io.threads", SET, "8")], validate_only=False)
    with pytest.raises(InvalidConfigError, match=r"log\.segment\.bytes"):
        dynamic.alter(NODE, [("log.segment.bytes", SET, "10")], validate_only=False)
    with pytest.raises(InvalidConfigError, match="SET and DELETE"):
        dynamic.alter(NODE, [("log.retention.ms", 2, "10")], validate_only=False)
    assert dynamic.layer(NODE) == {}


def test_replace_makes_the_layer_exactly_the_values(tmp_path: Path) -> None:
    dynamic = open_dynamic(tmp_path)
    dynamic.alter(NODE, [("log.retention.ms", SET, "5")], validate_only=False)
    assert dynamic.replace(NODE, {"log.retention.bytes": "7"}, validate_only=False) == {
        "log.retention.bytes": "7"
    }
    assert dynamic.layer(NODE) == {"log.retention.bytes": "7"}


def test_an_unreadable_file_leaves_the_static_settings(tmp_path: Path) -> None:
    (tmp_path / BROKER_CONFIGS_FILE).write_text("{not json")
    dynamic = open_dynamic(tmp_path, retention_ms=1_000)
    assert dynamic.effective().retention_ms == 1_000
