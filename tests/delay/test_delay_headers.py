"""The delay headers: parsing, bounds, and which batches `due_times` diverts."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from weirmq.broker.delays import (
    DELAY_HEADER,
    DELAY_MAX_MS,
    DELIVER_AT_HEADER,
    InvalidDelayError,
    due_of,
    due_times,
)
from weirmq.errors import ErrorCode
from weirmq.records.batch import Record, encode_batch, parse_header

NOW = 1_700_000_000_000


def batch(*headers: tuple[tuple[str, bytes | None], ...]) -> bytes:
    return encode_batch([Record(b"v", None, h, NOW) for h in headers])


def compressed(codec: int, *headers: list[tuple[str, bytes]]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for delta, h in enumerate(headers):
        builder.append(delta, NOW, None, b"v" * 100, h)
    return bytes(builder.build())


def dues(records: bytes) -> list[int] | None:
    return due_times(records, parse_header(records), NOW)


def test_a_relative_delay_counts_from_now() -> None:
    assert due_of([(DELAY_HEADER, b"250")], NOW) == NOW + 250


def test_an_absolute_time_is_taken_as_is() -> None:
    assert due_of([(DELIVER_AT_HEADER, str(NOW + 7).encode())], NOW) == NOW + 7


def test_with_both_headers_the_later_time_wins() -> None:
    headers = [(DELAY_HEADER, b"10"), (DELIVER_AT_HEADER, str(NOW + 5).encode())]
    assert due_of(headers, NOW) == NOW + 10


def test_no_header_or_a_past_time_is_due_now() -> None:
    assert due_of([("other", b"1")], NOW) == NOW
    assert due_of([(DELIVER_AT_HEADER, b"5")], NOW) == NOW
    assert due_of([(DELAY_HEADER, b"0")], NOW) == NOW


@pytest.mark.parametrize(
    "value", [None, b"", b"-5", b"1.5", b" 5", b"5ms", b"1_000", "٣".encode(), b"9" * 20]
)
@pytest.mark.parametrize("name", [DELAY_HEADER, DELIVER_AT_HEADER])
def test_a_malformed_value_is_refused_with_invalid_record(name: str, value: bytes | None) -> None:
    with pytest.raises(InvalidDelayError, match=name) as caught:
        due_of([(name, value)], NOW)
    assert caught.value.code is ErrorCode.invalid_record
    assert not caught.value.retriable


def test_a_delay_past_the_maximum_is_refused() -> None:
    assert due_of([(DELAY_HEADER, str(DELAY_MAX_MS).encode())], NOW) == NOW + DELAY_MAX_MS
    with pytest.raises(InvalidDelayError, match="maximum delay"):
        due_of([(DELAY_HEADER, str(DELAY_MAX_MS + 1).encode())], NOW)
    with pytest.raises(InvalidDelayError, match="90 days"):
        due_of([(DELIVER_AT_HEADER, str(NOW + DELAY_MAX_MS + 1).encode())], NOW)


def test_a_batch_without_delay_headers_is_not_diverted() -> None:
    assert dues(batch((), (("trace", b"x"),))) is None


def test_a_batch_whose_delays_are_past_is_not_diverted() -> None:
    assert dues(batch(((DELIVER_AT_HEADER, str(NOW - 1).encode()),), ())) is None


def test_a_batch_with_one_future_record_is_diverted_whole() -> None:
    found = dues(batch((), ((DELAY_HEADER, b"30"),), ((DELIVER_AT_HEADER, b"1"),)))
    assert found == [NOW, NOW + 30, NOW]


def test_a_header_name_in_a_value_only_costs_a_closer_look() -> None:
    records = encode_batch([Record(b"weirmq.delay.ms", None, (), NOW)])
    assert dues(records) is None


@pytest.mark.parametrize("codec", [1, 2, 3, 4])  # gzip, snappy, lz4, zstd
def test_compressed_batches_are_looked_into(codec: int) -> None:
    plain = compressed(codec, [], [("trace", b"1")])
    assert dues(plain) is None
    delayed = compressed(codec, [], [(DELAY_HEADER, b"40")])
    assert dues(delayed) == [NOW, NOW + 40]
    with pytest.raises(InvalidDelayError):
        dues(compressed(codec, [(DELAY_HEADER, b"soon")]))
