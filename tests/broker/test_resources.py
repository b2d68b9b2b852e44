"""The guarded resources: a disk below its floor refuses publishes (and only those),
producers are slowed as it fills, and all comes back by itself when space returns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from weirmq.broker.core import Broker
from weirmq.broker.partition import Durability
from weirmq.broker.resources import DISK, MEMORY, disk_marks
from weirmq.errors import ErrorCode, KafkaError
from weirmq.flow.controller import Kind
from weirmq.flow.watermarks import Pressure
from weirmq.settings import Settings
from weirmq.testing.records import make_batch
from weirmq.types import RequestContext

MIB = 1 << 20
FLOOR = 100 * MIB
TOTAL = 1000 * MIB
CTX = RequestContext("app", "127.0.0.1", "kafka")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    opened = Broker(
        Settings(data_dir=tmp_path / "data", flush_interval_ms=3_600_000, disk_free_min_bytes=FLOOR)
    )
    opened.create_topic("t", 1)
    yield opened
    opened.close()


def _publish(broker: Broker) -> None:
    partition = broker.partition("t", 0)
    assert partition is not None
    partition.publish(make_batch(1), Durability.WRITTEN)


def test_the_disk_marks() -> None:
    marks = disk_marks(TOTAL, FLOOR)
    assert marks is not None
    assert (marks.low, marks.high, marks.resume_level) == (
        TOTAL - 2 * FLOOR,
        TOTAL - FLOOR,
        TOTAL - FLOOR * 3 // 2,
    )
    assert disk_marks(FLOOR, FLOOR) is None  # a file system under twice the floor


def test_below_the_floor_publishes_are_refused_until_space_is_back(broker: Broker) -> None:
    guard = broker.resources
    guard.disk(TOTAL, 500 * MIB)
    _publish(broker)
    assert broker.flow.gauges[DISK].state is Pressure.FREE
    guard.disk(TOTAL, 150 * MIB)  # between one and two floors: slowed
    assert broker.flow.gauges[DISK].state is Pressure.THROTTLED
    decision = broker.flow.decide(CTX, Kind.PRODUCE, 100, 0, ["t"])
    assert decision.throttle_ms > 0 and decision.reason == DISK
    assert broker.flow.decide(CTX, Kind.FETCH, 100, 0).throttle_ms == 0
    _publish(broker)
    guard.disk(TOTAL, 99 * MIB)  # below the floor
    with pytest.raises(KafkaError) as refused:
        _publish(broker)
    assert refused.value.code is ErrorCode.kafka_storage_error
    assert "disk_free_min_bytes" in str(refused.value)
    partition = broker.partition("t", 0)
    assert partition is not None
    assert partition.read(0, 1 << 20).records  # reads go on
    guard.disk(TOTAL, 120 * MIB)  # above the floor, below the resume mark: still refused
    with pytest.raises(KafkaError):
        _publish(broker)
    guard.disk(TOTAL, 160 * MIB)  # past the resume mark
    _publish(broker)
    assert partition.log_end_offset == 3


def test_memory_pressure_slows_producers(broker: Broker) -> None:
    budget = broker.settings.queued_max_request_bytes
    broker.resources.sample(budget * 9 // 10)
    assert broker.flow.gauges[MEMORY].state is Pressure.THROTTLED
    assert broker.flow.decide(CTX, Kind.PRODUCE, 100, 0, ["t"]).reason == MEMORY
    broker.resources.sample(0)
    assert broker.flow.idle or broker.flow.gauges[MEMORY].state is Pressure.FREE


def test_a_full_memory_budget_throttles_small_publishes_but_never_holds_them(
    broker: Broker,
) -> None:
    # Partial frames of slow senders can hold the whole budget: holding a small publish
    # would free none of it, and would let them stop every producer.
    broker.resources.sample(broker.settings.queued_max_request_bytes)
    assert broker.flow.gauges[MEMORY].state is Pressure.BLOCKED
    decision = broker.flow.decide(CTX, Kind.PRODUCE, 100, 0, ["t"])
    assert decision.reason == MEMORY and decision.throttle_ms > 0
    assert not decision.wait_for
