"""Topic configs (`weirmq.broker.configs`): parsing, the chain of defaults, incremental
changes, what reaches the storage layer, and the table in docs/configuration.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weirmq.broker import configs
from weirmq.broker.configs import AlterOp, ConfigSource, InvalidConfigError
from weirmq.settings import Settings
from weirmq.storage.config import TimestampType

CONFIGURATION_DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
DEFAULTS = Settings()


def test_values_are_stored_canonical() -> None:
    assert configs.parse_value("retention.ms", "  60000 ") == "60000"
    assert configs.parse_value("cleanup.policy", "compact, delete,compact") == "compact,delete"
    assert configs.parse_value("weirmq.acks.all.fsync", "FALSE") == "false"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("retention.ms", "1e3", "expected an integer"),
        ("retention.ms", "-2", "between -1 and"),
        ("segment.bytes", str(2**31), "between 1024 and 2147483647"),
        ("cleanup.policy", "delete,nope", "list of delete and compact"),
        ("message.timestamp.type", "createtime", "one of CreateTime, LogAppendTime"),
        ("compression.type", "brotli", "one of uncompressed, zstd"),
        ("compression.gzip.level", "0", "-1 or between 1 and 9"),
        ("min.cleanable.dirty.ratio", "1.5", "between 0.0 and 1.0"),
        ("leader.replication.throttled.replicas", "0:x", "partition:broker"),
        ("message.downconversion.enable", "true", "unknown topic config"),
        ("retention.msec", "1", "unknown topic config 'retention.msec'"),
        ("retention.ms", None, "needs a value"),
    ],
)
def test_bad_values_are_refused_with_a_reason(name: str, value: str | None, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        configs.parse_value(name, value)


@given(st.integers(-1, 2**63 - 1))
def test_every_long_in_range_round_trips(value: int) -> None:
    assert configs.parse_value("retention.ms", str(value)) == str(value)


def test_the_chain_override_then_broker_setting_then_default() -> None:
    settings = Settings(retention_ms=1000, segment_bytes=4096)
    entries = {e.name: e for e in configs.describe(settings, {"segment.bytes": "2048"})}
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("2048", 1)
    assert [s[2] for s in entries["segment.bytes"].synonyms] == [
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG,
    ]
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("1000", 4)
    assert (entries["segment.ms"].value, entries["segment.ms"].source) == ("604800000", 5)
    assert [e.name for e in configs.describe(DEFAULTS, {})] == sorted(configs.CONFIGS_BY_NAME)


def test_log_config_follows_the_overrides() -> None:
    config = configs.log_config(
        DEFAULTS,
        {
            "segment.bytes": "2048",
            "segment.ms": "10",
            "retention.ms": "-1",
            "retention.bytes": "100000",
            "max.message.bytes": "500",
            "index.interval.bytes": "0",
            "message.timestamp.type": "LogAppendTime",
        },
    )
    assert (config.segment_bytes, config.segment_ms) == (2048, 10)
    assert (config.retention_ms, config.retention_bytes) == (None, 100_000)
    assert (config.max_message_bytes, config.index_interval_bytes) == (500, 0)
    assert config.timestamp_type is TimestampType.LOG_APPEND_TIME
    defaults = configs.log_config(DEFAULTS, {})
    assert (defaults.retention_ms, defaults.retention_bytes) == (7 * 24 * 3600 * 1000, None)


@pytest.mark.parametrize("policy", ["compact", "delete,compact"])
def test_compact_alone_turns_retention_off(policy: str) -> None:
    config = configs.log_config(DEFAULTS, {"cleanup.policy": policy, "retention.ms": "5"})
    assert config.retention_ms == (None if policy == "compact" else 5)


def test_incremental_ops_apply_in_order_and_validate_the_result() -> None:
    start = {"retention.ms": "5", "cleanup.policy": "delete"}
    ops: list[tuple[str, int, str | None]] = [
        ("retention.ms", AlterOp.DELETE, None),
        ("cleanup.policy", AlterOp.APPEND, "compact,delete"),
        ("segment.ms", AlterOp.SET, "1000"),
    ]
    assert configs.apply_ops(DEFAULTS, start, ops) == {
        "cleanup.policy": "delete,compact",
        "segment.ms": "1000",
    }
    assert start == {"retention.ms": "5", "cleanup.policy": "delete"}  # not changed in place
    # APPEND starts from the value in force when there is no override.
    appended = configs.apply_ops(DEFAULTS, {}, [("cleanup.policy", AlterOp.APPEND, "compact")])
    assert appended == {"cleanup.policy": "delete,compact"}
    with pytest.raises(InvalidConfigError, match="list configs only"):
        configs.apply_ops(DEFAULTS, {}, [("segment.ms", AlterOp.SUBTRACT, "1")])


def test_acks_all_fsync() -> None:
    assert configs.acks_all_fsync(DEFAULTS, {})
    assert not configs.acks_all_fsync(DEFAULTS, {"weirmq.acks.all.fsync": "false"})


def test_every_topic_config_is_documented_with_its_default() -> None:
    rows = {}
    for line in CONFIGURATION_DOC.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([a-z][a-z0-9.]*)`", cells[0])
        if match and len(cells) == 4:
            rows[match.group(1)] = cells
    assert sorted(rows) == sorted(configs.CONFIGS_BY_NAME)
    for definition in configs.TOPIC_CONFIGS:
        _, default, setting, meaning = rows[definition.name]
        shown = f"`{definition.default}`" if definition.default else "(empty)"
        assert default.startswith(shown), definition.name
        assert setting == (f"`{definition.setting}`" if definition.setting else "(none)")
        assert meaning


@pytest.mark.parametrize("codec", ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"])
def test_every_kafka_compression_type_is_accepted(codec: str) -> None:
    assert configs.parse_value("compression.type", f" {codec} ") == codec


@pytest.mark.parametrize(
    ("name", "value", "canonical"),
    [
        ("file.delete.delay.ms", "0", "0"),
        ("flush.messages", "1", "1"),
        ("min.cleanable.dirty.ratio", "0.25", "0.25"),
        ("min.cleanable.dirty.ratio", "1", "1.0"),
        ("preallocate", "TRUE", "true"),
        ("leader.replication.throttled.replicas", "0:0, 1:0", "0:0,1:0"),
        ("follower.replication.throttled.replicas", "*", "*"),
        ("local.retention.ms", "-2", "-2"),
        ("compression.zstd.level", "-5", "-5"),
        ("message.timestamp.after.max.ms", "1000", "1000"),
        ("unclean.leader.election.enable", "false", "false"),
        ("remote.storage.enable", "false", "false"),
    ],
)
def test_kafka_topic_configs_are_accepted_in_canonical_form(
    name: str, value: str, canonical: str
) -> None:
    assert configs.parse_value(name, value) == canonical


def test_an_empty_cleanup_policy_keeps_everything() -> None:
    assert configs.parse_value("cleanup.policy", "") == ""
    emptied = configs.apply_ops(
        DEFAULTS, {"cleanup.policy": "delete"}, [("cleanup.policy", AlterOp.SUBTRACT, "delete")]
    )
    assert emptied == {"cleanup.policy": ""}
    config = configs.log_config(DEFAULTS, {**emptied, "retention.ms": "5"})
    assert (config.retention_ms, config.retention_bytes) == (None, None)


def test_kafka_defaults_are_described_with_their_broker_synonym() -> None:
    entries = {e.name: e for e in configs.describe(DEFAULTS, {})}
    assert entries["file.delete.delay.ms"].value == "60000"
    assert entries["file.delete.delay.ms"].synonyms == (
        ("log.segment.delete.delay.ms", "60000", ConfigSource.DEFAULT_CONFIG),
    )
    assert entries["min.cleanable.dirty.ratio"].type == "DOUBLE"
    assert entries["leader.replication.throttled.replicas"].type == "LIST"
