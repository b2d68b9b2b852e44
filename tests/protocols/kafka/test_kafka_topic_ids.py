"""Kafka 4.2's version ceilings where no replication is involved: Produce v13 and Fetch
v13-18 name topics by id (KIP-516), ListOffsets v11 knows the tiered-storage timestamps.
Through the dispatcher, as in test_handlers.py; librdkafka speaks them in
tests/integration/test_confluent.py (it picks the highest version both sides know).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_handlers import (  # noqa: F401 (fixture)
    FETCH,
    LIST_OFFSETS,
    PRODUCE,
    Client,
    OpenClient,
    batch_headers,
    list_offsets_request,
    open_client,
)

from weirmq.protocols.kafka.dispatch import API_VERSIONS
from weirmq.testing.records import make_batch

UNKNOWN_ID = uuid.UUID("00000000-0000-4000-8000-00000000beef")


@pytest.fixture
def client(open_client: OpenClient) -> Client:  # noqa: F811
    client = open_client()
    client.broker.create_topic("orders", 2)
    return client


def topic_id(client: Client, name: str) -> uuid.UUID:
    topic = client.broker.topics.get(name)
    assert topic is not None
    return topic.topic_id


def test_the_ceilings_are_kafka_4_2s() -> None:
    assert API_VERSIONS[PRODUCE].max_version == 13
    assert API_VERSIONS[FETCH].max_version == 18
    assert API_VERSIONS[LIST_OFFSETS].max_version == 11


def produce_by_id(client: Client, ids: list[uuid.UUID], acks: int = 1) -> Any:
    request = {
        "transactional_id": None,
        "acks": acks,
        "timeout": 30_000,
        "topic_data": [
            {"topic_id": i, "partition_data": [{"index": 0, "records": make_batch(2)}]} for i in ids
        ],
    }
    return client.call(PRODUCE, request, 13)


def test_produce_v13_by_topic_id(client: Client) -> None:
    known = topic_id(client, "orders")
    response = produce_by_id(client, [known, UNKNOWN_ID])
    answers = {t.topic_id: t.partition_responses[0] for t in response.responses}
    assert (answers[known].error_code, answers[known].base_offset) == (ErrorCode.none, 0)
    assert answers[UNKNOWN_ID].error_code == ErrorCode.unknown_topic_id
    assert client.log("orders").log_end_offset == 2
    assert client.broker.stats.kafka_request_errors == {(PRODUCE, ErrorCode.unknown_topic_id): 1}


def test_produce_v13_acks_all_waits_for_the_fsync(client: Client) -> None:
    response = produce_by_id(client, [topic_id(client, "orders")], acks=-1)
    (topic,) = response.responses
    assert topic.partition_responses[0].error_code == ErrorCode.none


def fetch_by_id(client: Client, version: int, wanted: list[tuple[uuid.UUID, int]]) -> Any:
    request = {
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic_id": i,
                "partitions": [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
            for i, p in wanted
        ],
    }
    return client.call(FETCH, request, version)


@pytest.mark.parametrize("version", range(13, 19))
def test_fetch_by_topic_id(client: Client, version: int) -> None:
    client.produce("orders", make_batch(3), partition=1)
    known = topic_id(client, "orders")
    response = fetch_by_id(client, version, [(known, 1), (UNKNOWN_ID, 0)])
    assert response.error_code == ErrorCode.none
    answers = {t.topic_id: t.partitions[0] for t in response.responses}
    assert answers[known].error_code == ErrorCode.none
    assert answers[known].high_watermark == 3
    assert [h.last_offset_delta for h in batch_headers(answers[known].records)] == [2]
    assert answers[UNKNOWN_ID].error_code == ErrorCode.unknown_topic_id


def test_a_fetch_by_id_long_polls_on_known_topics_only(client: Client) -> None:
    request = {
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic_id": topic_id(client, "orders"),
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}],
            }
        ],
    }
    (topic,) = client.call(FETCH, request, 18).responses
    assert (topic.partitions[0].error_code, topic.partitions[0].records) == (ErrorCode.none, b"")


@pytest.mark.parametrize(("timestamp", "offset"), [(-5, -1), (-6, -1), (-4, 0), (-1, 2)])
def test_list_offsets_v11_tiered_timestamps(client: Client, timestamp: int, offset: int) -> None:
    client.produce("orders", make_batch(2))
    response = client.call(LIST_OFFSETS, list_offsets_request([("orders", 0, timestamp)]), 11)
    ((answer,),) = [t.partitions for t in response.topics]
    assert (answer.error_code, answer.offset) == (ErrorCode.none, offset)
