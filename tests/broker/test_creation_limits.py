"""Bounded topic creation in the broker (issue 20): the limits, the registry's pending
creations, and creations made off the event loop without stalling it.

The Kafka answers (error codes per topic, versions, throttles) are in
tests/protocols/kafka/test_creation_limits_api.py; a real client creating 10,000
partitions while another is served is in tests/integration/test_create_topics_bounds.py.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from weirmq.broker import core
from weirmq.broker.core import CREATE_IN_REQUEST_MAX, OPEN_CHUNK_PARTITIONS, Broker
from weirmq.broker.group_service import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
from weirmq.broker.topics import (
    QUOTA_WINDOW_S,
    PolicyViolationError,
    RateBuckets,
    ThrottlingQuotaExceededError,
    Topic,
    TopicBusyError,
    TopicExistsError,
    TopicRegistry,
    UnknownTopicError,
)
from weirmq.errors import ErrorCode, KafkaError
from weirmq.settings import Settings
from weirmq.storage import manager
from weirmq.testing.clock import ManualClock, ManualTimers

QUIET = 3_600_000  # no periodic flush during a test
WAIT_S = 30.0
"""Bound of every wait on a creation in these tests (they take well under a second)."""
BIG = OPEN_CHUNK_PARTITIONS * 2 + 7
"""Partitions of an off-loop creation: two whole chunks and a part of one."""


@pytest.fixture
def open_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    opened: list[Broker] = []

    def make(*, clock: ManualClock | None = None, **overrides: Any) -> Broker:
        settings = Settings(data_dir=tmp_path / "data", flush_interval_ms=QUIET, **overrides)
        timers = ManualTimers(clock) if clock is not None else None
        broker = Broker(settings, clock=clock, timers=timers)
        opened.append(broker)
        return broker

    yield make
    for broker in opened:
        if not broker.closing:
            broker.close()


def partition_dirs(broker: Broker, topic: str) -> list[str]:
    return sorted(
        name
        for name in os.listdir(broker.logs.data_dir)
        if name.rpartition("-")[0] == topic and name.rpartition("-")[2].isdigit()
    )


def saved(broker: Broker) -> dict[str, Any]:
    document = json.loads((broker.logs.data_dir / "topics.json").read_text())
    topics: dict[str, Any] = document["topics"]
    return topics


def run(coroutine: Any) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coroutine, WAIT_S)

    return asyncio.run(bounded())


def create_soon(broker: Broker, name: str, partitions: int) -> Topic:
    """`Broker.create_topic_soon` in an event loop, to the end."""

    async def create() -> Topic:
        return await broker.create_topic_soon(name, partitions)

    result: Topic = run(create())
    return result


# --- RateBuckets ------------------------------------------------------------------------------


def test_a_rate_of_zero_never_throttles() -> None:
    buckets = RateBuckets(0)
    buckets.record("c", 1_000_000, 0)
    assert not buckets.limited and buckets.throttle_ms("c", 0) == 0


def test_a_bucket_lets_a_burst_through_then_throttles_until_it_refills() -> None:
    buckets = RateBuckets(10)  # 10 per second: a burst of 110
    assert buckets.burst == 10 * QUOTA_WINDOW_S
    for _ in range(110):
        assert buckets.throttle_ms("c", 0) == 0
        buckets.record("c", 1, 0)
    assert buckets.throttle_ms("c", 0) == 0  # empty, not negative: one more goes
    buckets.record("c", 1, 0)
    assert buckets.throttle_ms("c", 0) == 100  # one credit short, at 10 per second
    assert buckets.throttle_ms("c", 100) == 0
    assert buckets.throttle_ms("other", 0) == 0  # per client


def test_one_large_operation_passes_and_pays_afterwards() -> None:
    buckets = RateBuckets(100)  # KIP-599: admitted while not negative, whatever its size
    buckets.record("c", 5_000, 0)
    assert buckets.throttle_ms("c", 0) == (5_000 - 1_100) * 10
    assert buckets.credits("c", 39_000) == 0


def test_buckets_are_bounded_the_least_recently_seen_forgotten() -> None:
    buckets = RateBuckets(1, clients_max=2)
    for client in ("a", "b", "c"):
        buckets.record(client, 100, 0)
    assert buckets.throttle_ms("a", 0) == 0  # forgotten: a full bucket again
    assert buckets.throttle_ms("b", 0) > 0 and buckets.throttle_ms("c", 0) > 0


# --- limits -----------------------------------------------------------------------------------


def test_a_creation_past_the_per_request_limit_is_a_policy_violation(
    open_broker: Callable[..., Broker],
) -> None:
    broker = open_broker(max_partitions_per_request=8)
    with pytest.raises(PolicyViolationError, match="max_partitions_per_request is 8") as refused:
        broker.create_topic("t", 9)
    assert refused.value.code is ErrorCode.policy_violation
    assert broker.topics.get("t") is None and partition_dirs(broker, "t") == []
    broker.create_topic("t", 8)
    with pytest.raises(PolicyViolationError):
        broker.create_partitions("t", 17)
    assert broker.create_partitions("t", 16).partitions == 16


def test_the_broker_holds_at_most_max_broker_partitions(
    open_broker: Callable[..., Broker],
) -> None:
    broker = open_broker(max_broker_partitions=5)
    broker.create_topic("a", 3)
    with pytest.raises(PolicyViolationError, match="past max_broker_partitions \\(5\\)"):
        broker.create_topic("b", 3)
    with pytest.raises(PolicyViolationError):
        broker.create_partitions("a", 6)
    broker.create_topic("b", 2)
    assert broker.topics.partitions_total == 5
    # The broker's own topics are never refused: its services rely on them.
    broker.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIGS)
    broker.delete_topic("a")
    assert broker.topics.partitions_total == 3
    broker.create_topic("c", 2)


def test_the_total_survives_a_restart(open_broker: Callable[..., Broker]) -> None:
    broker = open_broker(max_broker_partitions=4)
    broker.create_topic("a", 3)
    broker.close()
    reopened = open_broker(max_broker_partitions=4)
    assert reopened.topics.partitions_total == 3
    with pytest.raises(PolicyViolationError):
        reopened.create_topic("b", 2)


def test_auto_creation_is_rate_limited_per_client(open_broker: Callable[..., Broker]) -> None:
    clock = ManualClock()
    broker = open_broker(clock=clock, auto_create_topics_rate=1)  # a burst of 11
    for index in range(12):  # the burst, and one more while the bucket is not negative
        broker.topic(f"t{index}", auto_create=True, client_id="flood")
    with pytest.raises(ThrottlingQuotaExceededError, match="auto_create_topics_rate") as refused:
        broker.topic("t12", auto_create=True, client_id="flood")
    assert refused.value.code is ErrorCode.throttling_quota_exceeded
    assert refused.value.throttle_ms == 1_000 and refused.value.retriable
    assert broker.topics.get("t12") is None
    broker.topic("other", auto_create=True, client_id="calm")  # another client goes on
    broker.topic("t0", auto_create=True, client_id="flood")  # existing topics are answered
    clock.advance(1_000)
    assert broker.topic("t12", auto_create=True, client_id="flood").partitions == 1


def test_auto_creation_past_the_broker_limit_is_unknown_and_logged(
    open_broker: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = open_broker(max_broker_partitions=2, default_partitions=2)
    broker.topic("first", auto_create=True)
    caplog.set_level(logging.WARNING, logger=core.__name__)
    for name in ("second", "third"):
        with pytest.raises(UnknownTopicError, match="max_broker_partitions") as refused:
            broker.topic(name, auto_create=True, client_id="app")
        assert refused.value.code is ErrorCode.unknown_topic_or_partition
    assert broker.topics.get("second") is None
    refusals = [r for r in caplog.records if "auto-creation refused" in r.getMessage()]
    assert len(refusals) == 1  # at most one line per REFUSAL_LOG_INTERVAL_MS


# --- the registry's pending creations ---------------------------------------------------------


def test_a_pending_topic_is_saved_but_not_known_until_published(tmp_path: Path) -> None:
    registry = TopicRegistry(tmp_path)
    registry.create("known", 1)
    pending = registry.create("big", 5, {"retention.ms": "1000"}, pending=True)
    assert registry.get("big") is None and registry.pending("big") == pending
    assert [t.name for t in registry] == ["known"] and len(registry) == 1
    assert registry.partitions_total == 6
    assert set(json.loads((tmp_path / "topics.json").read_text())["topics"]) == {"known", "big"}
    registry.create("later", 1)  # a save meanwhile keeps the pending entry
    assert "big" in json.loads((tmp_path / "topics.json").read_text())["topics"]
    assert registry.publish("big") == pending and registry.get("big") == pending
    assert registry.pending("big") is None
    # A crash before `publish` leaves the entry: the next start knows the topic.
    registry.create("crashed", 2, pending=True)
    reopened = TopicRegistry(tmp_path)
    found = reopened.get("crashed")
    assert found is not None and found.partitions == 2
    assert reopened.get("big") == pending


def test_forgetting_a_pending_topic_removes_its_entry(tmp_path: Path) -> None:
    registry = TopicRegistry(tmp_path)
    registry.create("big", 5, pending=True)
    registry.forget("big")
    assert registry.pending("big") is None and registry.partitions_total == 0
    assert json.loads((tmp_path / "topics.json").read_text())["topics"] == {}


def test_a_pending_growth_keeps_the_old_count_until_published(tmp_path: Path) -> None:
    registry = TopicRegistry(tmp_path)
    registry.create("t", 2)
    registry.set_partitions("t", 7, pending=True)
    known = registry.get("t")
    assert known is not None and known.partitions == 2
    assert json.loads((tmp_path / "topics.json").read_text())["topics"]["t"]["partitions"] == 7
    registry.shrink("t", 2)  # undone
    assert registry.pending("t") is None
    assert json.loads((tmp_path / "topics.json").read_text())["topics"]["t"]["partitions"] == 2


def test_topics_json_has_one_line_per_topic_and_loads_as_before(tmp_path: Path) -> None:
    registry = TopicRegistry(tmp_path)
    for name in ("a", "b", "c"):
        registry.create(name, 1, {"cleanup.policy": "compact"} if name == "b" else None)
    text = (tmp_path / "topics.json").read_text()
    assert [line.split(":")[0] for line in text.splitlines()[1:4]] == ['"a"', '"b"', '"c"']
    assert list(TopicRegistry(tmp_path)) == list(registry)


# --- off-loop creation ------------------------------------------------------------------------


def test_a_large_topic_is_made_off_the_loop_and_known_once_whole(
    open_broker: Callable[..., Broker],
) -> None:
    broker = open_broker(max_partitions_per_request=BIG)
    seen: list[tuple[Topic | None, int]] = []
    ticks = 0

    async def create() -> Topic:
        nonlocal ticks
        task = broker.create_topic_soon("big", BIG, {"retention.ms": "60000"})
        with pytest.raises(TopicExistsError, match="being created"):
            broker.create_topic("big", 1)
        with pytest.raises(UnknownTopicError, match="being created"):
            broker.topic("big", auto_create=True)
        while not task.done():  # the loop serves others meanwhile
            seen.append((broker.topics.get("big"), len(partition_dirs(broker, "big"))))
            ticks += 1
            await asyncio.sleep(0)
        return await task

    topic = run(create())
    assert topic.partitions == BIG and broker.topics.get("big") == topic
    assert ticks > 2, "the creation never let the loop serve anything else"
    assert all(known is None for known, _ in seen), "known before every partition existed"
    assert any(0 < made < BIG for _, made in seen)
    assert all(broker.partition("big", index) is not None for index in range(BIG))
    log = broker.partition_log("big", BIG - 1)
    assert log is not None and log.config.retention_ms == 60_000
    assert len(partition_dirs(broker, "big")) == BIG


def test_new_directories_are_fsynced_before_any_is_opened(
    open_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = open_broker(max_partitions_per_request=BIG)
    events: list[str] = []
    real_fsync, real_create = manager._fsync_directory, broker.logs.create

    def fsync(path: str) -> None:
        events.append("fsync " + Path(path).name)
        real_fsync(path)

    def create(topic: str, partition: int, config: Any = None) -> Any:
        events.append(f"open {topic}-{partition}")
        return real_create(topic, partition, config)

    monkeypatch.setattr(manager, "_fsync_directory", fsync)
    monkeypatch.setattr(broker.logs, "create", create)
    create_soon(broker, "big", BIG)
    first_open = events.index("open big-0")
    synced = {event.removeprefix("fsync ") for event in events[:first_open]}
    chunk = {f"big-{index}" for index in range(OPEN_CHUNK_PARTITIONS)}
    assert chunk | {broker.logs.data_dir.name} <= synced


def test_a_full_disk_while_preparing_undoes_the_whole_creation(
    open_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = open_broker(max_partitions_per_request=BIG)
    made = 0
    real = manager._create_first_segment

    def fill_up(directory: Path) -> None:
        nonlocal made
        if made == OPEN_CHUNK_PARTITIONS + 5:  # one chunk opened, the next half made
            raise OSError(errno.ENOSPC, "No space left on device")
        made += 1
        real(directory)

    monkeypatch.setattr(manager, "_create_first_segment", fill_up)
    with pytest.raises(KafkaError) as refused:
        create_soon(broker, "big", BIG)
    assert refused.value.code is ErrorCode.kafka_storage_error
    assert broker.topics.get("big") is None and broker.topics.pending("big") is None
    assert "big" not in saved(broker) and partition_dirs(broker, "big") == []
    assert not any(tp.topic == "big" for tp in broker.partitions)
    assert broker.topics.partitions_total == 0
    monkeypatch.setattr(manager, "_create_first_segment", real)
    assert create_soon(broker, "big", BIG).partitions == BIG


def test_a_log_that_cannot_be_opened_undoes_the_whole_creation(
    open_broker: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = open_broker(max_partitions_per_request=BIG)
    real = broker.logs.create

    def fail_late(topic: str, partition: int, config: Any = None) -> Any:
        if partition == OPEN_CHUNK_PARTITIONS + 3:
            raise core.StorageError("I/O error opening it")
        return real(topic, partition, config)

    monkeypatch.setattr(broker.logs, "create", fail_late)
    with pytest.raises(KafkaError):
        create_soon(broker, "big", BIG)
    assert broker.topics.pending("big") is None and "big" not in saved(broker)
    assert partition_dirs(broker, "big") == [] and broker.logs.get("big", 0) is None


def test_a_broker_stopping_mid_creation_completes_it_at_its_next_start(
    open_broker: Callable[..., Broker],
) -> None:
    broker = open_broker(max_partitions_per_request=BIG)

    async def create_then_stop() -> None:
        task = broker.create_topic_soon("big", BIG)
        while broker.partition("big", 0) is None:  # one chunk opened
            await asyncio.sleep(0)
        broker.closing = True
        with pytest.raises(KafkaError, match="next start"):
            await task

    run(create_then_stop())
    broker.close()
    reopened = open_broker(max_partitions_per_request=BIG)
    topic = reopened.topics.get("big")
    assert topic is not None and topic.partitions == BIG
    assert all(reopened.partition("big", index) is not None for index in range(BIG))


def test_a_topic_being_grown_cannot_be_changed_meanwhile(
    open_broker: Callable[..., Broker],
) -> None:
    broker = open_broker(max_partitions_per_request=BIG)
    broker.create_topic("t", 2)

    async def grow() -> Topic:
        task = broker.create_partitions_soon("t", BIG)
        known = broker.topics.get("t")
        assert known is not None and known.partitions == 2  # the old count until done
        for change in (
            lambda: broker.delete_topic("t"),
            lambda: broker.create_partitions("t", BIG + 1),
            lambda: broker.alter_topic_configs("t", {"retention.ms": "1000"}),
        ):
            with pytest.raises(TopicBusyError, match="being grown") as refused:
                change()
            assert refused.value.code is ErrorCode.reassignment_in_progress
        return await task

    grown = run(grow())
    assert grown.partitions == BIG and broker.topics.get("t") == grown
    assert all(broker.partition("t", index) is not None for index in range(BIG))
    broker.delete_topic("t")
    assert partition_dirs(broker, "t") == []


def test_small_creations_stay_in_the_request() -> None:
    assert CREATE_IN_REQUEST_MAX < OPEN_CHUNK_PARTITIONS  # an off-loop one has chunks


def test_an_off_loop_creation_needs_a_loop_and_saves_nothing_without_one(
    open_broker: Callable[..., Broker],
) -> None:
    broker = open_broker(max_partitions_per_request=BIG)
    with pytest.raises(RuntimeError):
        broker.create_topic_soon("big", BIG)
    assert broker.topics.pending("big") is None
    assert not (broker.logs.data_dir / "topics.json").exists()


# --- LogManager.prepare -----------------------------------------------------------------------


def test_prepare_makes_directories_with_an_empty_first_segment(
    open_broker: Callable[..., Broker],
) -> None:
    broker = open_broker()
    logs = broker.logs
    (logs.data_dir / "t-1").mkdir()  # one that exists is left as it is
    logs.prepare("t", range(3))
    assert sorted(os.listdir(logs.data_dir / "t-0")) == ["00000000000000000000.log"]
    assert os.listdir(logs.data_dir / "t-1") == []
    log = logs.create("t", 0)
    assert log.log_end_offset == 0 and not log.needs_flush
    logs.discard("t", range(3))  # removes what was never opened
    assert partition_dirs(broker, "t") == ["t-0"]
