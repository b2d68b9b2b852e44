"""Deadlines on the broker's one clock, stepped by hand instead of slept through.

The broker takes a clock and a timer service (`weirmq.types`); `weirmq.testing.ManualTimers`
fires only when the test advances it. A fetch long poll and a group session timeout are
driven here to the millisecond without sleeping: the test proves both wait on the
injected clock and on nothing else (a wall-clock wait of 30 s would time the test out).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_handlers import (
    FETCH,
    Client,
    decode_reply,
    fetch_request,
    fetch_results,
    produce_request,
    request_frame,
)

from weirmq.settings import Settings
from weirmq.testing import ManualClock, ManualTimers
from weirmq.testing.records import make_batch

PRODUCE, JOIN_GROUP, SYNC_GROUP, DESCRIBE_GROUPS = 0, 11, 14, 15
SESSION_MS = 10_000
LONG_POLL_MS = 30_000


@pytest.fixture
def timers() -> ManualTimers:
    return ManualTimers(ManualClock())


@pytest.fixture
def client(tmp_path: Path, timers: ManualTimers) -> Iterator[Client]:
    settings = Settings(
        data_dir=tmp_path / "data",
        flush_interval_ms=3_600_000,
        group_initial_rebalance_delay_ms=0,
    )
    client = Client(settings, clock=timers.clock, timers=timers)
    yield client
    client.close()


async def settle() -> None:
    """Let every callback and task that is ready run (no time passes)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_fetch_long_poll_ends_exactly_at_its_deadline(
    client: Client, timers: ManualTimers
) -> None:
    client.produce("t", make_batch(2))
    frame = request_frame(
        FETCH, 12, fetch_request([("t", 0, 2)], min_bytes=1, max_wait_ms=LONG_POLL_MS)
    )

    async def scenario() -> Any:
        outcome = client.dispatcher.handle(frame)
        assert inspect.isawaitable(outcome), "a fetch short of min_bytes must wait"
        waiting = asyncio.ensure_future(outcome)
        await settle()
        assert timers.pending == [timers.clock() + LONG_POLL_MS]
        timers.advance(LONG_POLL_MS - 1)
        await settle()
        assert not waiting.done(), "answered before its deadline"
        timers.advance(1)
        await settle()
        assert waiting.done(), "not answered at its deadline"
        assert timers.pending == []
        return decode_reply(FETCH, 12, waiting.result())

    (answer,) = fetch_results(asyncio.run(scenario()))
    assert (answer.error_code, answer.records, answer.high_watermark) == (ErrorCode.none, b"", 2)


def test_an_append_answers_a_long_poll_and_cancels_its_timer(
    client: Client, timers: ManualTimers
) -> None:
    client.produce("t", make_batch(2))
    fetch = request_frame(
        FETCH, 12, fetch_request([("t", 0, 2)], min_bytes=1, max_wait_ms=LONG_POLL_MS)
    )
    produce = request_frame(PRODUCE, 12, produce_request([("t", 0, make_batch(3))]))

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(client.dispatcher.handle(fetch))  # type: ignore[arg-type]
        await settle()
        timers.advance(LONG_POLL_MS // 2)
        client.dispatcher.handle(produce)
        await settle()
        assert waiting.done(), "the append did not wake the long poll"
        assert timers.pending == [], "the long poll's timer outlived it"
        return decode_reply(FETCH, 12, waiting.result())

    (answer,) = fetch_results(asyncio.run(scenario()))
    assert answer.high_watermark == 5
    assert answer.records


def join_request(member_id: str) -> dict[str, Any]:
    return {
        "group_id": "g",
        "session_timeout": SESSION_MS,
        "rebalance_timeout": SESSION_MS,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"meta"}],
        "reason": None,
    }


async def call(client: Client, api_key: int, data: dict[str, Any], version: int) -> Any:
    outcome = client.dispatcher.handle(request_frame(api_key, version, data))
    if inspect.isawaitable(outcome):
        outcome = await outcome
    return decode_reply(api_key, version, outcome)


def test_a_silent_member_is_removed_when_its_session_times_out(
    client: Client, timers: ManualTimers
) -> None:
    async def members() -> tuple[str, int]:
        described = await call(client, DESCRIBE_GROUPS, {"groups": ["g"]}, 5)
        (group,) = described.groups
        return group.group_state, len(group.members)

    async def scenario() -> None:
        first = await call(client, JOIN_GROUP, join_request(""), 9)
        assert first.error_code is ErrorCode.member_id_required
        member = first.member_id
        joined = await call(client, JOIN_GROUP, join_request(member), 9)
        assert joined.error_code is ErrorCode.none
        sync = {
            "group_id": "g",
            "generation_id": joined.generation_id,
            "member_id": member,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b"all"}],
        }
        assert (await call(client, SYNC_GROUP, sync, 5)).error_code is ErrorCode.none
        assert await members() == ("Stable", 1)
        timers.advance(SESSION_MS - 1)
        await settle()
        assert await members() == ("Stable", 1), "expired before its session timeout"
        timers.advance(1)
        await settle()
        assert await members() == ("Empty", 0), "not expired at its session timeout"

    asyncio.run(scenario())
