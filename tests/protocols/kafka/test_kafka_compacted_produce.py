"""Records without a key are refused by compacted topics (issue 24, point 5), as Kafka's
LogValidator refuses them: INVALID_RECORD for the partition, a KIP-467 record error per
keyless record (Produce v8+), nothing written. Topics that are not compacted take them.

confluent-kafka's per-message report of it is in tests/integration/test_single_node_admin.py.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from test_handlers import (  # noqa: F401 (fixture)
    Client,
    OpenClient,
    open_client,
)

from weirmq.records.batch import Record, encode_batch


@pytest.fixture
def client(open_client: OpenClient) -> Client:  # noqa: F811
    client = open_client()
    client.broker.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    client.broker.create_topic("both", 1, {"cleanup.policy": "compact,delete"})
    client.broker.create_topic("plain", 1)
    return client


def batch(*keys: bytes | None) -> bytes:
    return encode_batch([Record(value=b"v", key=key, timestamp_ms=1_000) for key in keys])


@pytest.mark.parametrize("version", [8, 9, 12])
def test_keyless_records_are_refused_each_named(client: Client, version: int) -> None:
    answer = client.produce("compacted", batch(b"a", None, b"c", None), version=version)
    assert answer.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in answer.record_errors] == [1, 3]
    assert all("without key" in e.batch_index_error_message for e in answer.record_errors)
    assert "2 record errors" in answer.error_message
    assert answer.base_offset == -1
    assert client.log("compacted").log_end_offset == 0  # nothing of the batch written


def test_versions_before_kip_467_get_the_code_alone(client: Client) -> None:
    answer = client.produce("compacted", batch(None), version=7)
    assert answer.error_code == ErrorCode.invalid_record


def test_compact_among_policies_refuses_too(client: Client) -> None:
    assert client.produce("both", batch(None)).error_code == ErrorCode.invalid_record


def test_keyed_records_and_other_topics_are_taken(client: Client) -> None:
    keyed = client.produce("compacted", batch(b"a", b"b"))
    assert (keyed.error_code, keyed.base_offset, keyed.record_errors) == (ErrorCode.none, 0, ())
    plain = client.produce("plain", batch(None, None))
    assert (plain.error_code, plain.base_offset) == (ErrorCode.none, 0)


def test_a_corrupt_batch_is_refused_for_what_it_is(client: Client) -> None:
    broken = bytearray(batch(None))
    broken[-1] ^= 0xFF  # the CRC no longer matches
    answer = client.produce("compacted", bytes(broken))
    assert answer.error_code == ErrorCode.corrupt_message
    assert answer.record_errors == ()
