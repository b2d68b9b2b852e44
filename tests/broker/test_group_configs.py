"""Group configs (the GROUP config resource): defaults, overrides, checks, the store.

`GroupConfigs` is plain: a data directory and the broker's `Settings` in, resolved values
out. Every test opens it on tmp_path; "restarting" opens a second one on the same
directory, as the broker does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weirmq.broker.configs import ConfigSource, InvalidConfigError
from weirmq.broker.group_configs import (
    GROUP_CONFIGS,
    GROUP_CONFIGS_FILE,
    GroupConfigs,
    SetOp,
)
from weirmq.groups.share import ShareGroupSettings
from weirmq.queues import ShareConfig
from weirmq.settings import Settings

SET, DELETE = SetOp.SET, SetOp.DELETE
LOCK = "share.record.lock.duration.ms"
LIMIT = "share.delivery.count.limit"
RESET = "share.auto.offset.reset"
SESSION = "share.session.timeout.ms"
HEARTBEAT = "share.heartbeat.interval.ms"
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
DLQ_COPY = "errors.deadletterqueue.copy.record.enable"
BACKOFF = "weirmq.share.retry.backoff.ms"


WIDE_BOUNDS: dict[str, object] = {
    **{
        f"group_{kind}_{edge}_{name}": value
        for kind in ("consumer", "share")
        for name in ("session_timeout_ms", "heartbeat_interval_ms")
        for edge, value in (("min", 1), ("max", 2**31 - 1))
    },
    "group_share_min_record_lock_duration_ms": 1,
    "group_share_max_record_lock_duration_ms": 3_600_000,
    "group_share_min_delivery_count_limit": 1,
    "group_share_max_delivery_count_limit": 25,
}
"""Bounds that hold nothing back, so that the tests of other checks may use any value;
the tests of the bounds themselves open with Kafka's (the defaults)."""


def open_configs(tmp_path: Path, *, kafka_bounds: bool = False, **settings: object) -> GroupConfigs:
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    wanted = settings if kafka_bounds else {**WIDE_BOUNDS, **settings}
    return GroupConfigs(data_dir, Settings(data_dir=data_dir, **wanted))  # type: ignore[arg-type]


@pytest.fixture
def configs(tmp_path: Path) -> GroupConfigs:
    return open_configs(tmp_path)


# --- defaults ---------------------------------------------------------------------------


def test_a_group_without_overrides_gets_kafkas_defaults(configs: GroupConfigs) -> None:
    assert configs.overrides("g") == {}
    assert configs.share_config("g") == ShareConfig(
        record_lock_duration_ms=30_000,
        delivery_count_limit=5,
        max_record_locks=2_000,
        auto_offset_reset="latest",
        retry_backoff_ms=1_000,
    )
    assert configs.share_settings("g") == ShareGroupSettings(
        session_timeout_ms=45_000, heartbeat_interval_ms=5_000
    )
    assert configs.dead_letter_topic("g") == ""
    assert configs.copy_dead_letters("g") is False


def test_defaults_come_from_the_broker_settings(tmp_path: Path) -> None:
    configs = open_configs(
        tmp_path,
        group_share_record_lock_duration_ms=7_000,
        group_share_delivery_count_limit=3,
        group_share_partition_max_record_locks=100,
        group_share_session_timeout_ms=20_000,
        group_share_heartbeat_interval_ms=2_000,
    )
    config = configs.share_config("g")
    assert (config.record_lock_duration_ms, config.delivery_count_limit) == (7_000, 3)
    assert config.max_record_locks == 100
    assert configs.share_settings("g") == ShareGroupSettings(20_000, 2_000)
    assert configs.value("g", LOCK) == "7000"


# --- SET and DELETE -----------------------------------------------------------------------


def test_set_overrides_one_group_only(configs: GroupConfigs) -> None:
    result = configs.alter(
        "g", [(LOCK, SET, "5000"), (RESET, SET, "earliest")], validate_only=False
    )
    assert result == {LOCK: "5000", RESET: "earliest"}
    assert configs.overrides("g") == result
    config = configs.share_config("g")
    assert (config.record_lock_duration_ms, config.auto_offset_reset) == (5_000, "earliest")
    assert configs.share_config("other") == ShareConfig()
    assert list(configs.groups()) == ["g"]


def test_values_are_stored_in_canonical_form(configs: GroupConfigs) -> None:
    configs.alter("g", [(LIMIT, SET, " 007 "), (DLQ_COPY, SET, "TRUE")], validate_only=False)
    assert configs.overrides("g") == {LIMIT: "7", DLQ_COPY: "true"}
    assert configs.share_config("g").delivery_count_limit == 7
    assert configs.copy_dead_letters("g") is True


def test_delete_returns_to_the_default(configs: GroupConfigs) -> None:
    configs.alter("g", [(LOCK, SET, "5000"), (LIMIT, SET, "2")], validate_only=False)
    assert configs.alter("g", [(LOCK, DELETE, None)], validate_only=False) == {LIMIT: "2"}
    assert configs.share_config("g").record_lock_duration_ms == 30_000
    assert configs.alter("g", [(LIMIT, DELETE, None)], validate_only=False) == {}
    assert list(configs.groups()) == [], "a group back at its defaults is not kept"
    assert configs.alter("g", [(LIMIT, DELETE, None)], validate_only=False) == {}


def test_share_config_and_settings_reflect_each_change(configs: GroupConfigs) -> None:
    before = configs.share_config("g")
    assert configs.share_config("g") is before, "resolved once, until a change"
    configs.alter("g", [(BACKOFF, SET, "0"), (SESSION, SET, "60000")], validate_only=False)
    after = configs.share_config("g")
    assert after.retry_backoff_ms == 0 and before.retry_backoff_ms == 1_000
    assert configs.share_settings("g").session_timeout_ms == 60_000
    configs.alter("g", [(BACKOFF, DELETE, None)], validate_only=False)
    assert configs.share_config("g").retry_backoff_ms == 1_000


def test_dead_letter_configs(configs: GroupConfigs) -> None:
    configs.alter("g", [(DLQ_TOPIC, SET, "g.dlq")], validate_only=False)
    assert configs.dead_letter_topic("g") == "g.dlq"
    assert configs.copy_dead_letters("g") is False


# --- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ops",
    [
        [("no.such.config", SET, "1")],
        [("consumer.session.timeout.ms", SET, "0")],
        [("streams.num.standby.replicas", SET, "-1")],
        [("share.renew.acknowledge.enable", SET, "true")],  # Kafka 4.2's, unknown here
        [(LOCK, SET, "0")],
        [(LOCK, SET, "3600001")],
        [(LOCK, SET, "soon")],
        [(LIMIT, SET, "26")],
        [(RESET, SET, "by_duration:PT1H")],
        [("share.isolation.level", SET, "serializable")],
        [(DLQ_COPY, SET, "yes")],
        [(DLQ_TOPIC, SET, "not a topic")],
        [(BACKOFF, SET, "-1")],
        [(LOCK, SET, None)],
        [(LOCK, 2, "1000")],  # APPEND does not apply
        [(LOCK, SET, "1000"), (LOCK, DELETE, None)],  # one name twice
    ],
)
def test_unknown_names_and_bad_values_are_invalid_config(
    configs: GroupConfigs, ops: list[tuple[str, int, str | None]]
) -> None:
    configs.alter("g", [(LIMIT, SET, "3")], validate_only=False)
    with pytest.raises(InvalidConfigError) as refused:
        configs.alter("g", ops, validate_only=False)
    assert str(refused.value)
    assert configs.overrides("g") == {LIMIT: "3"}, "a refused request changes nothing"


def test_an_empty_group_id_is_refused(configs: GroupConfigs) -> None:
    with pytest.raises(InvalidConfigError):
        configs.alter("", [(LOCK, SET, "5000")], validate_only=False)


@pytest.mark.parametrize(
    "ops",
    [
        [(HEARTBEAT, SET, "45000")],  # equal to the broker's session timeout
        [(SESSION, SET, "5000")],  # equal to the broker's heartbeat interval
        [(SESSION, SET, "3000"), (HEARTBEAT, SET, "4000")],
    ],
)
def test_a_heartbeat_interval_not_below_the_session_timeout_is_refused(
    configs: GroupConfigs, ops: list[tuple[str, int, str | None]]
) -> None:
    with pytest.raises(InvalidConfigError, match=HEARTBEAT):
        configs.alter("g", ops, validate_only=False)
    assert configs.overrides("g") == {}


def test_session_and_heartbeat_are_checked_together(configs: GroupConfigs) -> None:
    ops: list[tuple[str, int, str | None]] = [(SESSION, SET, "3000"), (HEARTBEAT, SET, "1000")]
    assert configs.alter("g", ops, validate_only=False) == {SESSION: "3000", HEARTBEAT: "1000"}
    assert configs.share_settings("g") == ShareGroupSettings(3_000, 1_000)
    with pytest.raises(InvalidConfigError):
        configs.alter("g", [(HEARTBEAT, DELETE, None)], validate_only=False)  # back to 5000


def test_validate_only_checks_and_changes_nothing(tmp_path: Path, configs: GroupConfigs) -> None:
    before = configs.share_config("g")
    result = configs.alter("g", [(LOCK, SET, "5000")], validate_only=True)
    assert result == {LOCK: "5000"}
    assert configs.overrides("g") == {}
    assert configs.share_config("g") == before
    assert not (tmp_path / "data" / GROUP_CONFIGS_FILE).exists()
    with pytest.raises(InvalidConfigError):
        configs.alter("g", [(LOCK, SET, "0")], validate_only=True)


# --- the store ------------------------------------------------------------------------------


def test_overrides_survive_reopening(tmp_path: Path) -> None:
    first = open_configs(tmp_path)
    first.alter("g", [(LOCK, SET, "5000"), (DLQ_TOPIC, SET, "dead")], validate_only=False)
    first.alter("h", [(RESET, SET, "earliest")], validate_only=False)
    first.alter("h", [(RESET, DELETE, None)], validate_only=False)
    second = open_configs(tmp_path)
    assert second.overrides("g") == {LOCK: "5000", DLQ_TOPIC: "dead"}
    assert list(second.groups()) == ["g"]
    assert second.share_config("g").record_lock_duration_ms == 5_000


def test_forget_removes_a_deleted_groups_configs_from_the_store(tmp_path: Path) -> None:
    first = open_configs(tmp_path)
    first.alter("g", [(LOCK, SET, "5000")], validate_only=False)
    first.forget("g")
    assert first.overrides("g") == {}
    assert first.share_config("g").record_lock_duration_ms == 30_000
    assert open_configs(tmp_path).overrides("g") == {}


def test_an_unreadable_store_means_defaults_and_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "data" / GROUP_CONFIGS_FILE
    path.parent.mkdir(parents=True)
    path.write_bytes(b"{not json")
    configs = open_configs(tmp_path)
    assert configs.share_config("g") == ShareConfig()
    assert path.read_bytes() == b"{not json"


def test_a_group_with_invalid_stored_configs_gets_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "data" / GROUP_CONFIGS_FILE
    path.parent.mkdir(parents=True)
    document = {"version": 1, "groups": {"bad": {LOCK: "0"}, "good": {LIMIT: "2"}}}
    path.write_text(json.dumps(document))
    configs = open_configs(tmp_path)
    assert configs.overrides("bad") == {}
    assert configs.overrides("good") == {LIMIT: "2"}


# --- describe -----------------------------------------------------------------------------


def test_describe_names_every_config_in_order_with_its_type(configs: GroupConfigs) -> None:
    entries = configs.describe("g")
    assert [e.name for e in entries] == sorted(c.name for c in GROUP_CONFIGS)
    by_name = {e.name: e for e in entries}
    assert by_name[LOCK].type == "INT" and by_name[RESET].type == "STRING"
    assert by_name[DLQ_COPY].type == "BOOLEAN"
    assert all(e.documentation and not e.read_only and not e.sensitive for e in entries)


def test_describe_sources_and_synonyms(tmp_path: Path) -> None:
    configs = open_configs(tmp_path, group_share_delivery_count_limit=3)
    configs.alter("g", [(LOCK, SET, "5000"), (RESET, SET, "earliest")], validate_only=False)
    by_name = {e.name: e for e in configs.describe("g")}

    lock = by_name[LOCK]
    assert (lock.value, lock.source) == ("5000", ConfigSource.GROUP_CONFIG)
    assert lock.synonyms == (
        (LOCK, "5000", ConfigSource.GROUP_CONFIG),
        ("group.share.record.lock.duration.ms", "30000", ConfigSource.DEFAULT_CONFIG),
    )
    limit = by_name[LIMIT]
    assert (limit.value, limit.source) == ("3", ConfigSource.STATIC_BROKER_CONFIG)
    assert limit.synonyms == (
        ("group.share.delivery.count.limit", "3", ConfigSource.STATIC_BROKER_CONFIG),
        ("group.share.delivery.count.limit", "5", ConfigSource.DEFAULT_CONFIG),
    )
    reset = by_name[RESET]
    assert (reset.value, reset.source) == ("earliest", ConfigSource.GROUP_CONFIG)
    assert reset.synonyms[-1] == (RESET, "latest", ConfigSource.DEFAULT_CONFIG)
    backoff = by_name[BACKOFF]
    assert (backoff.value, backoff.source) == ("1000", ConfigSource.DEFAULT_CONFIG)
    assert backoff.synonyms == ((BACKOFF, "1000", ConfigSource.DEFAULT_CONFIG),)


def test_describe_of_an_unknown_group_is_every_default(configs: GroupConfigs) -> None:
    entries = configs.describe("never-seen")
    assert {e.source for e in entries} == {ConfigSource.DEFAULT_CONFIG}
    assert {e.name: e.value for e in entries}[LOCK] == "30000"
