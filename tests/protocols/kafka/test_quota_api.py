"""DescribeClientQuotas and AlterClientQuotas through the dispatcher, and a quota's
throttle on the responses of the client it names (KIP-219: stamped and held back)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_handlers import PRODUCE, Client, decode_reply, produce_request, request_frame, resolve

from weirmq.errors import ErrorCode
from weirmq.settings import Settings
from weirmq.testing.records import make_batch

DESCRIBE, ALTER = 48, 49


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    opened = Client(Settings(data_dir=tmp_path / "data", flush_interval_ms=3_600_000))
    yield opened
    opened.close()


def alter(client: Client, entries: list[dict[str, Any]], version: int = 1) -> Any:
    frame = request_frame(ALTER, version, {"entries": entries, "validate_only": False})
    return decode_reply(ALTER, version, resolve(client.dispatcher.handle(frame)))


def describe(client: Client, components: list[dict[str, Any]], strict: bool = False) -> Any:
    frame = request_frame(DESCRIBE, 1, {"components": components, "strict": strict})
    return decode_reply(DESCRIBE, 1, resolve(client.dispatcher.handle(frame)))


def test_alter_then_describe(client: Client) -> None:
    answer = alter(
        client,
        [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "test-client"}],
                "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
            },
            {
                "entity": [{"entity_type": "client-id", "entity_name": "x"}],
                "ops": [{"key": "controller_mutation_rate", "value": 1.0, "remove": False}],
            },
        ],
    )
    assert [e.error_code for e in answer.entries] == [
        ErrorCode.none,
        ErrorCode.invalid_request,
    ]
    found = describe(client, [{"entity_type": "client-id", "match_type": 2, "match": None}])
    assert found.error_code is ErrorCode.none
    ((entry,),) = [found.entries]
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("client-id", "test-client")]
    assert [(v.key, v.value) for v in entry.values] == [("producer_byte_rate", 1024.0)]
    unknown = describe(client, [{"entity_type": "ip", "match_type": 2, "match": None}])
    assert unknown.error_code is ErrorCode.invalid_request


def test_a_produce_quota_throttles_its_client_and_holds_the_response(client: Client) -> None:
    client.broker.create_topic("t", 1)
    alter(
        client,
        [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "test-client"}],
                "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}],
            }
        ],
    )
    frame = request_frame(PRODUCE, 9, produce_request([("t", 0, make_batch(40))]))
    assert 1000 < len(frame) < 1800  # a throttle under a second keeps the test short
    outcome = client.dispatcher.handle(frame)
    assert inspect.isawaitable(outcome)  # held back by its throttle, not answered at once
    response = decode_reply(PRODUCE, 9, resolve(outcome))
    # A new client's rate is over its first sample: len(frame) B/s against 1,000 B/s.
    expected = int((len(frame) - 1000) / 1000 * 1000)
    assert response.throttle_time.total_seconds() * 1000 == expected
    assert client.broker.partition("t", 0).log_end_offset == 40  # throttled, not refused
