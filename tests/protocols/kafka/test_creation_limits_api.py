"""The bounds of topic creation as Kafka clients see them (issue 20): POLICY_VIOLATION,
THROTTLING_QUOTA_EXCEEDED with its throttle, LEADER_NOT_AVAILABLE for a topic being
made, and large creations answered without holding up other requests.

The limits themselves are tested in tests/broker/test_creation_limits.py.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_handlers import (  # noqa: F401 (fixture)
    METADATA,
    Client,
    OpenClient,
    decode_reply,
    open_client,
    request_frame,
)

from weirmq.broker.core import CREATE_IN_REQUEST_MAX
from weirmq.protocols.kafka import requests
from weirmq.protocols.kafka.apis import admin
from weirmq.protocols.kafka.apis.admin import CREATE_WAIT_MAX_MS
from weirmq.protocols.kafka.wire import messages
from weirmq.settings import Settings
from weirmq.storage import manager
from weirmq.testing.clock import ManualClock, ManualTimers
from weirmq.types import RequestContext

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
WAIT_S = 30.0
BIG = CREATE_IN_REQUEST_MAX * 4
"""Partitions of a creation made off the event loop."""


def topics(*counts: tuple[str, int], validate_only: bool = False) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": count,
                "replication_factor": -1,
                "assignments": [],
                "configs": [],
            }
            for name, count in counts
        ],
        "timeout": 30_000,
        "validate_only": validate_only,
    }


def growths(*counts: tuple[str, int]) -> dict[str, Any]:
    return {
        "topics": [{"name": n, "count": c, "assignments": None} for n, c in counts],
        "timeout": 30_000,
        "validate_only": False,
    }


def deletions(*names: str) -> dict[str, Any]:
    """A DeleteTopics v6 request, topics by name."""
    named = [{"name": name, "topic_id": uuid.UUID(int=0)} for name in names]
    return {"topics": named, "timeout": 30_000}


def codes(results: Any) -> list[ErrorCode]:
    return [result.error_code for result in results]


def handled(client: Client, api_key: int, data: dict[str, Any], version: int) -> Any:
    """The handler's own answer (before the dispatcher stamps the admission's throttle)."""
    cls = messages.request_class(api_key, version)
    requests.conform(api_key, cls)
    request = messages.build(cls, data)
    handler: Callable[..., Any] = {
        CREATE_TOPICS: admin.handle_create_topics,
        DELETE_TOPICS: admin.handle_delete_topics,
        CREATE_PARTITIONS: admin.handle_create_partitions,
    }[api_key]
    return handler(client.broker, request, version, RequestContext("quick"))


@pytest.fixture
def timed(tmp_path: Path) -> Iterator[Callable[..., Client]]:
    """Brokers on a manual clock and timers, closed at the end of the test."""
    opened: list[Client] = []

    def make(**overrides: Any) -> Client:
        clock = ManualClock()
        settings = Settings(data_dir=tmp_path / "data", **overrides)
        opened.append(Client(settings, clock=clock, timers=ManualTimers(clock)))
        return opened[-1]

    yield make
    for client in opened:
        client.close()


def advance(client: Client, ms: int) -> None:
    timers = client.broker.timers
    assert isinstance(timers, ManualTimers)
    timers.advance(ms)


# --- the limit per request --------------------------------------------------------------------


def test_a_request_past_the_limit_is_refused_whole(open_client: OpenClient) -> None:  # noqa: F811
    client = open_client(max_partitions_per_request=10)
    for validate_only in (True, False):
        answer = client.call(
            CREATE_TOPICS, topics(("a", 6), ("b", 5), validate_only=validate_only), 7
        )
        assert codes(answer.topics) == [ErrorCode.policy_violation] * 2
        assert (
            "Excessively large number of partitions per request" in answer.topics[0].error_message
        )
        assert "11 asked in all" in answer.topics[0].error_message
    assert client.broker.topics.get("a") is None and client.broker.topics.get("b") is None
    answer = client.call(CREATE_TOPICS, topics(("a", 6), ("b", 4)), 7)
    assert codes(answer.topics) == [ErrorCode.none] * 2
    # A count no topic may have is that topic's own error and counts nothing.
    answer = client.call(CREATE_TOPICS, topics(("c", 100_001), ("d", 1)), 7)
    assert codes(answer.topics) == [ErrorCode.invalid_partitions, ErrorCode.none]


def test_a_growth_past_the_limit_is_refused_whole(open_client: OpenClient) -> None:  # noqa: F811
    client = open_client(max_partitions_per_request=10)
    client.call(CREATE_TOPICS, topics(("a", 1), ("b", 1)), 7)
    answer = client.call(CREATE_PARTITIONS, growths(("a", 7), ("b", 6)), 3)
    assert codes(answer.results) == [ErrorCode.policy_violation] * 2
    answer = client.call(CREATE_PARTITIONS, growths(("a", 6), ("b", 6)), 3)
    assert codes(answer.results) == [ErrorCode.none] * 2


def test_the_broker_limit_refuses_the_topic_that_would_pass_it(
    open_client: OpenClient,  # noqa: F811
) -> None:
    client = open_client(max_broker_partitions=5)
    answer = client.call(CREATE_TOPICS, topics(("a", 3), ("b", 3), ("c", 2)), 7)
    assert codes(answer.topics) == [ErrorCode.none, ErrorCode.policy_violation, ErrorCode.none]
    assert "max_broker_partitions (5)" in answer.topics[1].error_message
    answer = client.call(CREATE_PARTITIONS, growths(("c", 3)), 3)
    assert codes(answer.results) == [ErrorCode.policy_violation]


# --- the controller mutation quota (KIP-599) --------------------------------------------------


def test_past_its_mutation_quota_a_client_is_refused_with_a_throttle(
    timed: Callable[..., Client],
) -> None:
    client = timed(controller_mutation_rate=1)  # a burst of 11 partitions
    answer = handled(client, CREATE_TOPICS, topics(("a", 20), ("b", 1)), 7)
    assert [t["error_code"] for t in answer["topics"]] == [
        ErrorCode.none,
        ErrorCode.throttling_quota_exceeded,
    ]
    assert "retry in 9000 ms" in answer["topics"][1]["error_message"]
    assert answer["throttle_time"] == 9_000
    # Versions older than KIP-599's do not know the error: counted, never refused.
    old = handled(client, CREATE_TOPICS, topics(("c", 1)), 5)
    assert [t["error_code"] for t in old["topics"]] == [ErrorCode.none]
    assert old["throttle_time"] > 9_000
    deleted = handled(client, DELETE_TOPICS, deletions("a"), 6)
    assert [r["error_code"] for r in deleted["responses"]] == [ErrorCode.throttling_quota_exceeded]
    grown = handled(client, CREATE_PARTITIONS, growths(("c", 2)), 3)
    assert [r["error_code"] for r in grown["results"]] == [ErrorCode.throttling_quota_exceeded]
    advance(client, 10_001)
    deleted = handled(client, DELETE_TOPICS, deletions("a"), 6)
    assert [r["error_code"] for r in deleted["responses"]] == [ErrorCode.none]


def test_without_a_mutation_quota_nothing_is_throttled(open_client: OpenClient) -> None:  # noqa: F811
    client = open_client()
    answer = handled(client, CREATE_TOPICS, topics(*((f"t{i}", 30) for i in range(20))), 7)
    assert all(t["error_code"] == ErrorCode.none for t in answer["topics"])
    assert answer["throttle_time"] == 0


# --- Metadata's auto-creation -----------------------------------------------------------------


def test_metadata_auto_creation_past_the_rate_is_throttled(open_client: OpenClient) -> None:  # noqa: F811
    client = open_client(auto_create_topics_rate=1)  # 11, and one more, then refused
    names = [f"auto-{i}" for i in range(14)]
    answer = client.metadata(names, allow_auto_topic_creation=True)
    assert codes(answer.topics) == [ErrorCode.none] * 12 + [ErrorCode.throttling_quota_exceeded] * 2
    assert client.broker.topics.get("auto-12") is None


def test_metadata_auto_creation_past_the_broker_limit_is_unknown(
    open_client: OpenClient,  # noqa: F811
) -> None:
    client = open_client(max_broker_partitions=2)
    answer = client.metadata(["a", "b", "c"], allow_auto_topic_creation=True)
    assert codes(answer.topics) == [
        ErrorCode.none,
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]


# --- creations made off the event loop --------------------------------------------------------


def test_a_large_creation_is_answered_when_done_and_others_are_served_meanwhile(
    open_client: OpenClient,  # noqa: F811
) -> None:
    client = open_client()

    async def exchange() -> tuple[Any, Any, int]:
        outcome = client.dispatcher.handle(request_frame(CREATE_TOPICS, 7, topics(("big", BIG))))
        assert inspect.isawaitable(outcome), "a large creation was made in the request"
        pending = asyncio.ensure_future(outcome)
        await asyncio.sleep(0)
        # Another client's request meanwhile: answered at once, the topic not known yet.
        metadata = client.dispatcher.handle(
            request_frame(METADATA, 12, {"topics": [{"name": "big", "topic_id": None}]})
        )
        assert not inspect.isawaitable(metadata)
        served_before = 0 if pending.done() else 1
        return await asyncio.wait_for(pending, WAIT_S), metadata, served_before

    reply, metadata, served_before = asyncio.run(exchange())
    (created,) = decode_reply(CREATE_TOPICS, 7, reply).topics
    assert created.error_code == ErrorCode.none and created.num_partitions == BIG
    (being_made,) = decode_reply(METADATA, 12, metadata).topics
    assert being_made.error_code == ErrorCode.leader_not_available
    assert served_before == 1
    (made,) = client.metadata(["big"]).topics
    assert made.error_code == ErrorCode.none and len(made.partitions) == BIG


def test_a_creation_outlasting_the_wait_is_answered_timed_out_and_goes_on(
    timed: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = timed()
    go_on = threading.Event()
    real = manager.LogManager.prepare

    def slow(self: manager.LogManager, topic: str, indexes: range) -> None:
        assert go_on.wait(WAIT_S)
        real(self, topic, indexes)

    monkeypatch.setattr(manager.LogManager, "prepare", slow)

    client.call(CREATE_TOPICS, topics(("t", 1)), 7)

    async def exchange() -> Any:
        outcome = client.dispatcher.handle(request_frame(CREATE_PARTITIONS, 3, growths(("t", BIG))))
        assert inspect.isawaitable(outcome)
        pending = asyncio.ensure_future(outcome)
        await asyncio.sleep(0.01)
        assert not pending.done()
        advance(client, CREATE_WAIT_MAX_MS)
        reply = await asyncio.wait_for(pending, WAIT_S)
        go_on.set()
        for _ in range(int(WAIT_S * 100)):  # the growth goes on after the answer
            if (found := client.broker.topics.get("t")) is not None and found.partitions == BIG:
                break
            await asyncio.sleep(0.01)
        return reply

    try:
        reply = asyncio.run(exchange())
    finally:
        go_on.set()
    (result,) = decode_reply(CREATE_PARTITIONS, 3, reply).results
    assert result.error_code == ErrorCode.request_timed_out
    assert "still being made" in result.error_message
    grown = client.broker.topics.get("t")
    assert grown is not None and grown.partitions == BIG
