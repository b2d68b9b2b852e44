"""Group configs with Kafka 4.2's names and checks: consumer.* and streams.*, the broker's
bounds (group.consumer.min.session.timeout.ms and the others), clamping of stored values
when the bounds change, and legacy AlterConfigs' replacement of the whole set."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from weirmq.broker.configs import ConfigSource, InvalidConfigError
from weirmq.broker.group_configs import GroupConfigs, SetOp
from weirmq.settings import Settings

SET, DELETE = SetOp.SET, SetOp.DELETE
C_SESSION = "consumer.session.timeout.ms"
C_HEARTBEAT = "consumer.heartbeat.interval.ms"
LOCK = "share.record.lock.duration.ms"
LIMIT = "share.delivery.count.limit"


def open_configs(tmp_path: Path, **settings: object) -> GroupConfigs:
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    return GroupConfigs(data_dir, Settings(data_dir=data_dir, **settings))  # type: ignore[arg-type]


def test_consumer_timeouts_default_to_the_broker_settings(tmp_path: Path) -> None:
    configs = open_configs(
        tmp_path, group_consumer_session_timeout_ms=6_000, group_consumer_heartbeat_interval_ms=500
    )
    assert configs.consumer_timeouts("g") == (6_000, 500)
    configs.alter("g", [(C_SESSION, SET, "50000"), (C_HEARTBEAT, SET, "6000")], validate_only=False)
    assert configs.consumer_timeouts("g") == (50_000, 6_000)
    assert configs.consumer_timeouts("other") == (6_000, 500)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (C_SESSION, "44999", "must be greater than or equal to group.consumer.min.session"),
        (C_SESSION, "60001", "must be less than or equal to group.consumer.max.session"),
        (C_HEARTBEAT, "4999", "group.consumer.min.heartbeat.interval.ms"),
        (C_HEARTBEAT, "15001", "group.consumer.max.heartbeat.interval.ms"),
        ("share.session.timeout.ms", "1000", "group.share.min.session.timeout.ms"),
        ("share.heartbeat.interval.ms", "300", "group.share.min.heartbeat.interval.ms"),
        (LOCK, "14999", "group.share.min.record.lock.duration.ms"),
        (LOCK, "60001", "group.share.max.record.lock.duration.ms"),
        (LIMIT, "1", "group.share.min.delivery.count.limit"),
        (LIMIT, "11", "group.share.max.delivery.count.limit"),
        ("streams.session.timeout.ms", "1000", "group.streams.min.session.timeout.ms"),
        ("streams.num.standby.replicas", "3", "group.streams.max.standby.replicas"),
    ],
)
def test_values_outside_kafkas_default_bounds_are_refused(
    tmp_path: Path, name: str, value: str, message: str
) -> None:
    configs = open_configs(tmp_path)
    with pytest.raises(InvalidConfigError, match=message):
        configs.alter("g", [(name, SET, value)], validate_only=False)
    assert configs.overrides("g") == {}


def test_the_bounds_are_the_broker_settings(tmp_path: Path) -> None:
    configs = open_configs(
        tmp_path,
        group_consumer_min_session_timeout_ms=1_000,
        group_consumer_min_heartbeat_interval_ms=100,
    )
    ops: list[tuple[str, int, str | None]] = [(C_SESSION, SET, "2000"), (C_HEARTBEAT, SET, "200")]
    assert configs.alter("g", ops, validate_only=False) == {C_SESSION: "2000", C_HEARTBEAT: "200"}
    with pytest.raises(InvalidConfigError, match=f"{C_HEARTBEAT} .* must be below {C_SESSION}"):
        configs.alter("g", [(C_HEARTBEAT, SET, "2000")], validate_only=False)


def test_a_stored_value_outside_new_bounds_is_clamped_when_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = open_configs(tmp_path, group_consumer_min_session_timeout_ms=1_000)
    first.alter("g", [(C_SESSION, SET, "10000")], validate_only=False)
    del first
    second = open_configs(tmp_path)  # the minimum is back at Kafka's 45000
    assert second.overrides("g") == {C_SESSION: "10000"}
    with caplog.at_level(logging.WARNING):
        assert second.consumer_timeouts("g") == (45_000, 5_000)
    assert "outside" in caplog.text


def test_streams_configs_are_stored_and_described(tmp_path: Path) -> None:
    configs = open_configs(tmp_path)
    ops: list[tuple[str, int, str | None]] = [
        ("streams.num.standby.replicas", SET, "1"),
        ("streams.initial.rebalance.delay.ms", SET, "0"),
    ]
    configs.alter("s", ops, validate_only=False)
    by_name = {e.name: e for e in configs.describe("s")}
    assert (by_name["streams.num.standby.replicas"].value, by_name[
        "streams.num.standby.replicas"].source) == ("1", ConfigSource.GROUP_CONFIG)  # fmt: skip
    assert by_name["streams.session.timeout.ms"].synonyms == (
        ("group.streams.session.timeout.ms", "45000", ConfigSource.DEFAULT_CONFIG),
    )
    session = by_name[C_SESSION]
    assert (session.value, session.source, session.type) == (
        "45000", ConfigSource.DEFAULT_CONFIG, "INT",
    )  # fmt: skip


@pytest.mark.parametrize("op", [2, 3])  # APPEND, SUBTRACT
def test_append_and_subtract_are_invalid_for_group_configs(tmp_path: Path, op: int) -> None:
    configs = open_configs(tmp_path)
    with pytest.raises(InvalidConfigError, match="SET and DELETE"):
        configs.alter("g", [(C_SESSION, op, "50000")], validate_only=False)


def test_replace_makes_the_overrides_exactly_the_set_given(tmp_path: Path) -> None:
    configs = open_configs(tmp_path)
    configs.alter("g", [(LIMIT, SET, "3"), (LOCK, SET, "20000")], validate_only=False)
    assert configs.replace("g", {C_SESSION: "50000"}, validate_only=False) == {C_SESSION: "50000"}
    assert configs.overrides("g") == {C_SESSION: "50000"}
    assert configs.replace("g", {LIMIT: "4"}, validate_only=True) == {LIMIT: "4"}
    assert configs.overrides("g") == {C_SESSION: "50000"}
    with pytest.raises(InvalidConfigError):
        configs.replace("g", {C_SESSION: "1"}, validate_only=False)
    assert configs.replace("g", {}, validate_only=False) == {}
