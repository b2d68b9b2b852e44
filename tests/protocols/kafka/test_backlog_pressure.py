"""A topic's backlog as a flow gauge, and a produce held back by a blocked resource.

The backlog (broker/backlog.py) is measured from each group's consumed position (a
committed offset here) to the log end, in bytes; the dispatcher holds a produce to a
blocked resource until it unblocks, or refuses it with REQUEST_TIMED_OUT at the request's
timeout, nothing written. Time is stepped by hand (ManualTimers): no sleeping.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_groups import OFFSET_COMMIT, commit_request
from test_handlers import (
    PRODUCE,
    Client,
    decode_reply,
    produce_request,
    produce_results,
    request_frame,
)

from weirmq.broker.backlog import bytes_from, gauge_name
from weirmq.broker.partition import Durability
from weirmq.flow.controller import PRESSURE_THROTTLE_MS_MAX
from weirmq.flow.watermarks import Pressure, Watermarks
from weirmq.protocols.kafka.dispatch import BLOCKED_RECHECK_MS
from weirmq.settings import Settings
from weirmq.testing import ManualClock, ManualTimers
from weirmq.testing.records import make_batch

BOUND = 10_000
LARGE = 1 << 30
TIMEOUT_MS = 2_000


@pytest.fixture
def timers() -> ManualTimers:
    return ManualTimers(ManualClock())


@pytest.fixture
def client(tmp_path: Path, timers: ManualTimers) -> Iterator[Client]:
    settings = Settings(data_dir=tmp_path / "data", flush_interval_ms=3_600_000)
    client = Client(settings, clock=timers.clock, timers=timers)
    yield client
    client.close()


def opt_in(
    client: Client, group: str = "", partitions: int = 1, grain: int = 0, bound: int = LARGE
) -> None:
    """Opt t in; `grain` is its index interval (0: every batch indexed, exact counts). The
    bound is large by default: through the dispatcher a throttled produce is held on the
    stepped clock, which these tests do not step."""
    configs = {"weirmq.backlog.max.bytes": str(bound), "index.interval.bytes": str(grain)}
    if group:
        configs["weirmq.backlog.group"] = group
    client.broker.create_topic("t", partitions, configs)


def fill(client: Client, batches: int, records: int = 10) -> list[int]:
    """Produce `batches` batches to t-0; the log's size after each."""
    sizes = []
    log = client.broker.partition_log("t", 0)
    assert log is not None
    for _ in range(batches):
        assert client.produce("t", make_batch(records)).error_code == ErrorCode.none
        sizes.append(log.size_bytes)
    return sizes


def commit(client: Client, group: str, offset: int) -> None:
    response = client.call(OFFSET_COMMIT, commit_request(group, {0: offset}), 9)
    assert response.topics[0].partitions[0].error_code == ErrorCode.none


def level(client: Client) -> int:
    client.broker.backlog.sample()
    return client.broker.flow.gauges[gauge_name("t")].level


def test_the_backlog_of_a_named_group_counts_from_its_committed_offset(client: Client) -> None:
    opt_in(client, group="g")
    sizes = fill(client, 4)
    assert level(client) == sizes[-1], "nothing committed: everything is backlog"
    commit(client, "g", 20)  # the first two batches of ten records
    assert level(client) == sizes[-1] - sizes[1]
    commit(client, "g", 40)
    assert level(client) == 0
    commit(client, "other", 0)  # another group's progress does not count
    assert level(client) == 0


def test_without_a_named_group_the_slowest_consumer_counts(client: Client) -> None:
    opt_in(client)
    sizes = fill(client, 3)
    assert level(client) == 0, "no consumer: nobody to wait for"
    commit(client, "fast", 30)
    assert level(client) == 0
    commit(client, "slow", 10)
    assert level(client) == sizes[-1] - sizes[0]


def test_a_position_inside_a_batch_counts_that_whole_batch(client: Client) -> None:
    opt_in(client, group="g")
    sizes = fill(client, 2)
    commit(client, "g", 15)  # the middle of the second batch: it is not consumed yet
    assert level(client) == sizes[1] - sizes[0]
    log = client.broker.partition_log("t", 0)
    assert log is not None
    assert bytes_from(log, 15) == bytes_from(log, 10) == sizes[1] - sizes[0]
    assert bytes_from(log, 20) == 0


def test_with_a_sparse_index_the_count_errs_by_at_most_one_interval(client: Client) -> None:
    opt_in(client, group="g", grain=4096)
    sizes = fill(client, 40)
    commit(client, "g", 200)
    exact = sizes[-1] - sizes[19]
    assert exact <= level(client) <= exact + 4096


def test_a_topic_is_guarded_from_its_creation_and_until_it_opts_out(client: Client) -> None:
    opt_in(client, group="g")
    assert gauge_name("t") in client.broker.flow.gauges, "unguarded until the next sample"
    client.broker.replace_topic_configs("t", {})
    assert gauge_name("t") not in client.broker.flow.gauges
    client.broker.replace_topic_configs("t", {"weirmq.backlog.max.bytes": "100"})
    assert gauge_name("t") in client.broker.flow.gauges


def test_a_topic_that_opts_out_loses_its_gauge(client: Client) -> None:
    opt_in(client, group="g")
    fill(client, 1)
    client.broker.backlog.sample()
    assert gauge_name("t") in client.broker.flow.gauges
    client.broker.replace_topic_configs("t", {})
    client.broker.backlog.sample()
    assert gauge_name("t") not in client.broker.flow.gauges


def test_the_backlog_slows_then_blocks_producers(client: Client) -> None:
    opt_in(client, group="g", bound=BOUND)
    partition = client.broker.partition("t", 0)
    assert partition is not None
    gauge_state: list[Pressure] = []
    while not gauge_state or gauge_state[-1] is not Pressure.BLOCKED:
        assert len(gauge_state) < 100, "never blocked"
        # straight to the partition: through the dispatcher, a throttled produce is held
        # on the stepped clock
        partition.publish(make_batch(50), Durability.WRITTEN)
        client.broker.backlog.sample()
        gauge_state.append(client.broker.flow.gauges[gauge_name("t")].state)
    assert Pressure.THROTTLED in gauge_state, "no smooth slowing before the block"
    assert gauge_state[0] is Pressure.FREE


# --- the dispatcher holding a produce --------------------------------------------------------


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def produce_frame(acks: int = 1) -> bytes:
    request = produce_request([("t", 0, make_batch(3))], acks=acks)
    request["timeout"] = TIMEOUT_MS
    return request_frame(PRODUCE, 9, request)


def block(client: Client) -> None:
    client.broker.flow.guard(gauge_name("t"), Watermarks(10, 100, 50))
    assert client.broker.flow.update(gauge_name("t"), 100) is Pressure.BLOCKED


def test_a_blocked_produce_goes_on_once_its_resource_unblocks(
    client: Client, timers: ManualTimers
) -> None:
    client.broker.create_topic("t", 1)
    block(client)

    async def scenario() -> Any:
        outcome = client.dispatcher.handle(produce_frame())
        assert inspect.isawaitable(outcome)
        waiting = asyncio.ensure_future(outcome)
        await settle()
        timers.advance(TIMEOUT_MS // 2)
        await settle()
        assert not waiting.done(), "answered while the backlog is blocked"
        assert client.broker.partition_log("t", 0).log_end_offset == 0  # type: ignore[union-attr]
        client.broker.flow.update(gauge_name("t"), 40)  # below resume: throttled
        timers.advance(BLOCKED_RECHECK_MS)
        await settle()
        assert waiting.done(), "still held after the resource unblocked"
        return decode_reply(PRODUCE, 9, waiting.result())

    response = asyncio.run(scenario())
    (answer,) = produce_results(response)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    # the time it waited counts against the throttle: it is not asked to wait again
    assert response.throttle_time.total_seconds() * 1000 < 1000


def test_a_produce_still_blocked_at_its_timeout_is_refused_unwritten(
    client: Client, timers: ManualTimers
) -> None:
    client.broker.create_topic("t", 1)
    block(client)

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(client.dispatcher.handle(produce_frame()))  # type: ignore[arg-type]
        await settle()
        for _ in range(TIMEOUT_MS // BLOCKED_RECHECK_MS - 1):
            timers.advance(BLOCKED_RECHECK_MS)
            await settle()
        assert not waiting.done(), "refused before its timeout"
        timers.advance(BLOCKED_RECHECK_MS)
        await settle()
        assert waiting.done(), "not answered at its timeout"
        return decode_reply(PRODUCE, 9, waiting.result())

    (answer,) = produce_results(asyncio.run(scenario()))
    assert answer.error_code == ErrorCode.request_timed_out  # retriable: producers retry
    assert "backlog:t" in answer.error_message
    assert client.broker.partition_log("t", 0).log_end_offset == 0  # type: ignore[union-attr]
    assert client.broker.flow.refused_publishes == 1


def test_an_acks_0_produce_still_blocked_at_its_timeout_is_dropped_unanswered(
    client: Client, timers: ManualTimers
) -> None:
    client.broker.create_topic("t", 1)
    block(client)

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(client.dispatcher.handle(produce_frame(acks=0)))  # type: ignore[arg-type]
        await settle()
        for _ in range(TIMEOUT_MS // BLOCKED_RECHECK_MS):
            timers.advance(BLOCKED_RECHECK_MS)
            await settle()
        return waiting.result()

    assert asyncio.run(scenario()) is None
    assert client.broker.partition_log("t", 0).log_end_offset == 0  # type: ignore[union-attr]


def test_a_full_disk_refuses_rather_than_holding(client: Client, timers: ManualTimers) -> None:
    client.broker.create_topic("t", 1)
    client.broker.resources.disk(total_bytes=1 << 30, free_bytes=1 << 20)

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(client.dispatcher.handle(produce_frame()))  # type: ignore[arg-type]
        await settle()
        timers.advance(PRESSURE_THROTTLE_MS_MAX)  # the throttle hold only, not the timeout
        await settle()
        assert waiting.done(), "a full disk held the produce"
        return decode_reply(PRODUCE, 9, waiting.result())

    response = asyncio.run(scenario())
    (answer,) = produce_results(response)
    assert answer.error_code == ErrorCode.kafka_storage_error
    assert response.throttle_time.total_seconds() * 1000 == PRESSURE_THROTTLE_MS_MAX
