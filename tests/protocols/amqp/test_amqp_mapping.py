"""AMQP messages as records and records as AMQP deliveries (`weirmq.protocols.amqp.mapping`).

Properties are built and read back with pamqp (aio-pika's codec) and pika, never with our
own decoder: a property list the mapping delivers must decode in both. Run as a script,
this file prints the costs quoted in the module's docstring.
"""

from __future__ import annotations

import datetime
import logging
import struct
import timeit
from collections.abc import Sequence
from decimal import Decimal

import pika.frame
import pika.spec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pamqp import commands, common, frame, header

from weirmq.broker.exchanges import ROUTING_KEY_HEADER, span_routing_key
from weirmq.protocols.amqp.mapping import (
    EXCHANGE_HEADER,
    NESTING_MAX,
    PROPERTIES_HEADER,
    RESERVED_HEADERS,
    content_header_frame,
    delivery_content,
    record_headers,
)
from weirmq.records.batch import Record, decode_full_records, encode_batch
from weirmq.records.codec import read_records

Properties = commands.Basic.Properties
Headers = Sequence[tuple[str, bytes | None]]
UTC = datetime.UTC

TYPICAL = Properties(
    content_type="application/json",
    delivery_mode=2,
    headers={
        "tenant": "acme",
        "trace-id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "source": "orders-api",
    },
)
"""A typical message: content type, persistent, three string headers."""
CELERY = Properties(
    content_type="application/json",
    content_encoding="utf-8",
    delivery_mode=2,
    priority=0,
    correlation_id="5f0b1a7e-2d7e-4c43-9a57-1c1c0e1b2d3f",
    reply_to="9f2c1a3b-7f6e-3d2c-8b1a-0e9d8c7b6a5f",
    headers={
        "lang": "py",
        "task": "proj.tasks.add",
        "id": "5f0b1a7e-2d7e-4c43-9a57-1c1c0e1b2d3f",
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": "5f0b1a7e-2d7e-4c43-9a57-1c1c0e1b2d3f",
        "parent_id": None,
        "argsrepr": "(2, 2)",
        "kwargsrepr": "{}",
        "origin": "gen1234@host",
        "ignore_result": False,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    },
)
"""A Celery 5 task message (protocol 2) as kombu publishes it."""
KAFKA_HEADERS: Headers = [
    ("content-type", b"text/plain"),
    ("delivery-mode", b"2"),
    ("timestamp", b"1700000000"),
    ("tenant", b"acme"),
    ("trace-id", b"4bf92f3577b34da6a3ce929d0e0e4736"),
    (ROUTING_KEY_HEADER, b"eu.paris"),
]
"""A record a Kafka producer wrote, with friendly headers and a routing key."""


def pamqp_properties(property_bytes: bytes) -> commands.Basic.Properties:
    """The properties pamqp decodes from a content header frame around `property_bytes`."""
    raw = content_header_frame(1, 0, property_bytes)
    consumed, channel, value = frame.unmarshal(raw)
    assert (consumed, channel) == (len(raw), 1)
    assert isinstance(value, header.ContentHeader)
    return value.properties


def pika_properties(property_bytes: bytes) -> pika.spec.BasicProperties:
    """The properties pika decodes from a content header frame around `property_bytes`."""
    raw = content_header_frame(1, 0, property_bytes)
    consumed, value = pika.frame.decode_frame(raw)
    assert consumed == len(raw)
    assert isinstance(value, pika.frame.Header)
    assert isinstance(value.properties, pika.spec.BasicProperties)
    return value.properties


def as_dict(headers: Headers) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for name, value in headers:
        assert name not in found, f"header {name!r} twice"
        found[name] = value
    return found


def deliver(headers: Headers) -> tuple[str, str, commands.Basic.Properties]:
    exchange, routing_key, property_bytes = delivery_content(headers)
    return exchange, routing_key, pamqp_properties(property_bytes)


# --- AMQP -> record ----------------------------------------------------------------------


def test_a_typical_message_becomes_these_headers() -> None:
    headers = record_headers("orders", "eu.paris", TYPICAL)

    assert headers == [
        (ROUTING_KEY_HEADER, b"eu.paris"),
        (EXCHANGE_HEADER, b"orders"),
        (PROPERTIES_HEADER, TYPICAL.marshal()),
        ("content-type", b"application/json"),
        ("delivery-mode", b"2"),
        ("tenant", b"acme"),
        ("trace-id", b"4bf92f3577b34da6a3ce929d0e0e4736"),
        ("source", b"orders-api"),
    ]
    assert ROUTING_KEY_HEADER == "routing-key"


def test_the_default_exchange_has_no_exchange_header() -> None:
    headers = as_dict(record_headers("", "jobs", Properties()))

    assert headers == {ROUTING_KEY_HEADER: b"jobs", PROPERTIES_HEADER: b"\x00\x00"}
    assert delivery_content(list(headers.items())) == ("", "jobs", b"\x00\x00")


def test_every_property_gets_a_text_copy_under_its_amqp_name() -> None:
    properties = Properties(
        content_type="text/plain",
        content_encoding="gzip",
        headers={},
        delivery_mode=1,
        priority=9,
        correlation_id="c-1",
        reply_to="amq.rabbitmq.reply-to",
        expiration="60000",
        message_id="m-1",
        timestamp=datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
        message_type="order.created",
        user_id="guest",
        app_id="shop",
    )
    properties.cluster_id = "c"  # deprecated and refused by the constructor, yet decodable

    headers = as_dict(record_headers("x", "k", properties))

    assert headers == {
        ROUTING_KEY_HEADER: b"k",
        EXCHANGE_HEADER: b"x",
        PROPERTIES_HEADER: properties.marshal(),
        "content-type": b"text/plain",
        "content-encoding": b"gzip",
        "delivery-mode": b"1",
        "priority": b"9",
        "correlation-id": b"c-1",
        "reply-to": b"amq.rabbitmq.reply-to",
        "expiration": b"60000",
        "message-id": b"m-1",
        "timestamp": b"1700000000",
        "type": b"order.created",
        "user-id": b"guest",
        "app-id": b"shop",
        "cluster-id": b"c",
    }
    assert pamqp_properties(delivery_content(list(headers.items()))[2]) == properties


def test_a_naive_timestamp_is_utc_as_pamqp_encodes_it() -> None:
    naive = Properties(timestamp=datetime.datetime(2023, 11, 14, 22, 13, 20))

    headers = as_dict(record_headers("", "k", naive))

    assert headers["timestamp"] == b"1700000000"
    assert pamqp_properties(headers[PROPERTIES_HEADER] or b"").timestamp == datetime.datetime(
        2023, 11, 14, 22, 13, 20, tzinfo=UTC
    )


def test_simple_header_table_entries_get_a_text_copy_and_the_rest_stay_typed() -> None:
    table: common.FieldTable = {
        "s": "é",
        "b": bytearray(b"\xff\x00"),
        "t": True,
        "f": False,
        "i": -70000,
        "big": 2**40,
        "x": 0.5,
        "d": Decimal("1.50"),
        "tiny": Decimal("1E-7"),
        "none": None,
        "list": [1, "a"],
        "table": {"a": 1},
        "when": datetime.datetime(2024, 1, 1, tzinfo=UTC),
    }

    headers = as_dict(record_headers("", "k", Properties(headers=table)))

    assert {k: v for k, v in headers.items() if k in table} == {
        "s": "é".encode(),
        "b": b"\xff\x00",
        "t": b"true",
        "f": b"false",
        "i": b"-70000",
        "big": b"1099511627776",
        "x": b"0.5",
        "d": b"1.50",
        "tiny": b"0.0000001",
    }
    assert pamqp_properties(headers[PROPERTIES_HEADER] or b"").headers == table


def test_entries_named_like_reserved_headers_are_not_copied() -> None:
    table: common.FieldTable = {
        ROUTING_KEY_HEADER: "forged",
        "content-type": "forged",
        "delivery-mode": "forged",
        "timestamp": "forged",
        EXCHANGE_HEADER: "forged",
        PROPERTIES_HEADER: "forged",
        "amqp.anything": "forged",
        "Content-Type": "kept: names are case-sensitive",
    }
    properties = Properties(content_type="text/plain", headers=table)

    headers = record_headers("orders", "eu", properties)

    assert as_dict(headers) == {
        ROUTING_KEY_HEADER: b"eu",
        EXCHANGE_HEADER: b"orders",
        PROPERTIES_HEADER: properties.marshal(),
        "content-type": b"text/plain",
        "Content-Type": b"kept: names are case-sensitive",
    }
    assert deliver(headers) == ("orders", "eu", properties)
    assert {"content-type", "timestamp", "type", ROUTING_KEY_HEADER} <= RESERVED_HEADERS


def test_the_router_reads_the_routing_key_of_a_stored_message() -> None:
    headers = record_headers("orders", "eu.paris", CELERY)
    batch = encode_batch([Record(b"body", None, tuple(headers), 1)])

    (copy,) = read_records(batch)[1]
    ((_, record),) = list(decode_full_records(batch))

    assert span_routing_key(copy) == "eu.paris"
    assert record.key is None and record.value == b"body"
    assert deliver(record.headers) == ("orders", "eu.paris", CELERY)


def test_the_clients_own_encoding_is_stored_and_delivered_byte_for_byte() -> None:
    # As py-amqp (kombu, Celery) writes them: a float as a 64-bit double, which pamqp
    # would write back as 32 bits, and an int as a signed long, which pamqp would narrow.
    table = _entry(b"ratio", b"d" + struct.pack(">d", 0.1)) + _entry(b"n", b"I\x00\x00\x00\x03")
    property_bytes = b"\xa0\x00\x03a/b" + struct.pack(">I", len(table)) + table
    decoded = pamqp_properties(property_bytes)
    assert decoded.headers == {"ratio": 0.1, "n": 3}
    assert pamqp_properties(decoded.marshal()).headers != decoded.headers  # 0.1 as float32

    headers = record_headers("", "k", decoded, property_bytes=property_bytes)

    assert as_dict(headers)[PROPERTIES_HEADER] == property_bytes
    assert as_dict(headers)["ratio"] == b"0.1"
    assert delivery_content(headers)[2] == property_bytes
    assert pamqp_properties(property_bytes) == decoded


def test_bytes_values_pamqp_decoded_are_stored_as_byte_arrays() -> None:
    # py-amqp (kombu, Celery) sends bytes as a long string; pamqp decodes one that is not
    # UTF-8 to bytes, which its encoder refuses.
    table: common.FieldTable = {"raw": b"\xff\xfe", "nested": [{"deep": b"\x80"}], "s": "ok"}
    properties = Properties(headers=table)
    with pytest.raises(TypeError):
        properties.marshal()

    headers = as_dict(record_headers("", "k", properties))

    assert headers["raw"] == b"\xff\xfe"
    assert pamqp_properties(headers[PROPERTIES_HEADER] or b"").headers == {
        "raw": bytearray(b"\xff\xfe"),
        "nested": [{"deep": bytearray(b"\x80")}],
        "s": "ok",
    }
    assert properties.headers == table  # the caller's table is left alone


# --- record -> AMQP ----------------------------------------------------------------------


def test_a_kafka_record_is_delivered_with_properties_from_its_headers() -> None:
    headers: Headers = [
        *KAFKA_HEADERS,
        ("priority", b"5"),
        ("type", b"order"),
        ("blob", b"\xff\x00"),
        ("nothing", None),
        ("empty", b""),
    ]

    exchange, routing_key, properties = deliver(headers)

    assert (exchange, routing_key) == ("", "eu.paris")
    expected = Properties(
        content_type="text/plain",
        delivery_mode=2,
        priority=5,
        timestamp=datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
        message_type="order",
        headers={
            "tenant": "acme",
            "trace-id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "blob": bytearray(b"\xff\x00"),
            "nothing": None,
            "empty": "",
        },
    )
    assert properties == expected
    pika_table = pika_properties(delivery_content(headers)[2]).headers
    assert pika_table is not None and pika_table["blob"] == b"\xff\x00"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("delivery-mode", b"3"),
        ("delivery-mode", b"0"),
        ("delivery-mode", b"persistent"),
        ("delivery-mode", b" 2"),
        ("delivery-mode", b"+2"),
        ("delivery-mode", "٢".encode()),
        ("delivery-mode", b""),
        ("delivery-mode", b"2" * 400),
        ("priority", b"256"),
        ("priority", b"-1"),
        ("timestamp", b"1700000000000"),  # milliseconds: a common mistake
        ("timestamp", b"1.5"),
        ("timestamp", b"4294967296"),
        ("content-type", b"\xff"),
        ("content-type", b"x" * 256),
        ("content-type", b""),
        ("cluster-id", b"\xc3"),
    ],
)
def test_a_value_that_does_not_parse_is_kept_as_a_header(name: str, value: bytes) -> None:
    _, _, properties = deliver([(name, value)])

    expected = value.decode() if _is_utf8(value) else bytearray(value)
    assert properties == Properties(headers={name: expected})


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize(
    ("name", "value", "attribute", "expected"),
    [
        ("delivery-mode", b"1", "delivery_mode", 1),
        ("delivery-mode", b"02", "delivery_mode", 2),
        ("priority", b"0", "priority", 0),
        ("priority", b"255", "priority", 255),
        ("timestamp", b"0", "timestamp", datetime.datetime(1970, 1, 1, tzinfo=UTC)),
        (
            "timestamp",
            b"4294967295",
            "timestamp",
            datetime.datetime(2106, 2, 7, 6, 28, 15, tzinfo=UTC),
        ),
        ("content-type", b"x" * 255, "content_type", "x" * 255),
        ("user-id", "é".encode(), "user_id", "é"),
        ("cluster-id", b"c", "cluster_id", "c"),
    ],
)
def test_the_limits_of_what_parses(
    name: str, value: bytes, attribute: str, expected: object
) -> None:
    _, _, properties = deliver([(name, value)])

    assert getattr(properties, attribute) == expected
    assert properties.headers is None


def test_no_headers_at_all() -> None:
    assert delivery_content([]) == ("", "", b"\x00\x00")
    assert pamqp_properties(b"\x00\x00") == Properties()
    assert pika_properties(b"\x00\x00").content_type is None


def test_the_first_of_two_headers_sets_the_property_the_second_goes_into_the_table() -> None:
    headers: Headers = [
        ("content-type", b"a/1"),
        ("content-type", b"a/2"),
        (ROUTING_KEY_HEADER, b"first"),
        (ROUTING_KEY_HEADER, b"second"),
        ("tag", b"1"),
        ("tag", b"2"),
    ]

    assert deliver(headers) == (
        "",
        "first",
        Properties(content_type="a/1", headers={"content-type": "a/2", "tag": "1"}),
    )


def test_mapping_headers_never_reach_the_table() -> None:
    headers: Headers = [
        (EXCHANGE_HEADER, b"orders"),
        ("amqp.other", b"x"),
        (ROUTING_KEY_HEADER, None),  # a null routing key is no routing key, as for the router
        ("k", b"v"),
    ]

    assert deliver(headers) == ("orders", "", Properties(headers={"k": "v"}))


def test_long_header_names_are_cut_as_amqp_requires_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    long_name = "é" * 100  # 200 bytes

    with caplog.at_level(logging.WARNING):
        _, _, properties = deliver([(long_name, b"v"), ("n" * 129, b"w")])

    assert properties.headers == {"é" * 64: "v", "n" * 128: "w"}
    assert not caplog.records


def test_the_routing_key_is_cut_to_a_short_string() -> None:
    long_key = "é" * 200

    _, routing_key, _ = delivery_content([(ROUTING_KEY_HEADER, long_key.encode())])

    assert routing_key == "é" * 127  # 254 bytes: the 255th would split a character
    assert delivery_content([(ROUTING_KEY_HEADER, b"\xff" * 90)])[1] == "\ufffd" * 85
    assert delivery_content([(ROUTING_KEY_HEADER, b"\xffa")])[1] == "\ufffda"
    commands.Basic.Deliver("c", 1, False, "", routing_key).marshal()


@pytest.mark.parametrize(
    ("stored", "delivered"),
    [
        (b"amq.topic", "amq.topic"),
        (b"a-b_c.d:e@f#g,h/i+j k", "a-b_c.d:e@f#g,h/i+j k"),
        (b"x" * 127, "x" * 127),
        (b"x" * 128, ""),
        ("événements".encode(), ""),
        (b"a!b", ""),
        (b"\xff", ""),
        (b"", ""),
    ],
)
def test_the_exchange_is_one_pamqp_can_deliver_from(stored: bytes, delivered: str) -> None:
    exchange, _, _ = delivery_content([(EXCHANGE_HEADER, stored)])

    assert exchange == delivered
    commands.Basic.Deliver("c", 1, False, exchange, "k").marshal()
    commands.Basic.GetOk(1, False, exchange, "k", 0).marshal()


# --- malformed amqp.properties -------------------------------------------------------------

VALID = CELERY.marshal()
_TABLE_ONLY = 0x2000


def _table_property(entries: bytes) -> bytes:
    """A property list holding only a header table made of `entries`."""
    return struct.pack(">HI", _TABLE_ONLY, len(entries)) + entries


def _entry(name: bytes, value: bytes) -> bytes:
    return bytes((len(name),)) + name + value


def _nested(depth: int) -> bytes:
    """A header table holding tables `depth` deep below it."""
    value = b"V"
    for _ in range(depth):
        inner = _entry(b"n", value)
        value = b"F" + struct.pack(">I", len(inner)) + inner
    return _table_property(_entry(b"n", value))


MALFORMED = {
    "empty": b"",
    "one byte": b"\x80",
    "truncated": VALID[:-1],
    "trailing byte": VALID + b"\x00",
    "second flag word": b"\x00\x01\x00\x00",
    "flag bit 1": b"\x00\x02",
    "short string overruns": b"\x80\x00\x05ab",
    "short string not UTF-8": b"\x80\x00\x01\xff",
    "table overruns": struct.pack(">HI", _TABLE_ONLY, 10),
    "key not UTF-8": _table_property(_entry(b"\xff", b"V")),
    "key without value": _table_property(b"\x01k"),
    "unknown field type": _table_property(_entry(b"k", b"Z")),
    "pamqp-only void": _table_property(_entry(b"k", b"\x00")),
    "pika-only short": _table_property(_entry(b"k", b"U\x00\x01")),
    "nested value overruns its table": _table_property(
        _entry(b"t", b"F" + struct.pack(">I", 5) + _entry(b"k", b"S\x00\x00\x00\x09")) + b"abcdefgh"
    ),
    "array overruns": _table_property(_entry(b"a", b"A\x00\x00\x00\x09b\x01")),
    "NaN double": _table_property(_entry(b"k", b"d" + struct.pack(">d", float("nan")))),
    "infinite float": _table_property(_entry(b"k", b"f" + struct.pack(">f", float("inf")))),
    "table timestamp after 9999": _table_property(
        _entry(b"k", b"T" + struct.pack(">Q", 253_402_300_800))
    ),
    "property timestamp after 9999": b"\x00\x40" + struct.pack(">Q", 253_402_300_800_000),
    "nested too deep": _nested(NESTING_MAX + 1),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_amqp_properties_fall_back_to_the_other_headers(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    headers: Headers = [
        (ROUTING_KEY_HEADER, b"eu"),
        (PROPERTIES_HEADER, MALFORMED[name]),
        ("content-type", b"text/plain"),
        ("tenant", b"acme"),
    ]

    with caplog.at_level(logging.DEBUG, logger="weirmq.protocols.amqp.mapping"):
        exchange, routing_key, property_bytes = delivery_content(headers)

    assert (exchange, routing_key) == ("", "eu")
    expected = Properties(content_type="text/plain", headers={"tenant": "acme"})
    assert pamqp_properties(property_bytes) == expected
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_the_limits_of_what_is_valid_decode_in_pamqp_and_pika() -> None:
    edges = [
        _nested(NESTING_MAX),
        _table_property(_entry(b"k", b"T" + struct.pack(">Q", 253_402_300_799))),
        b"\x00\x40" + struct.pack(">Q", 253_402_300_799_999),
        _table_property(_entry(b"", b"V")),
        b"\x00\x04\x01c",  # cluster-id, deprecated but part of the list
    ]
    for edge in edges:
        assert delivery_content([(PROPERTIES_HEADER, edge)])[2] == edge
        pamqp_properties(edge)
        pika_properties(edge)


def test_a_null_amqp_properties_is_absent() -> None:
    assert (
        delivery_content([(PROPERTIES_HEADER, None), ("a", b"b")])[2]
        == Properties(headers={"a": "b"}).marshal()
    )


# --- the content header frame ------------------------------------------------------------


@pytest.mark.parametrize(
    "properties", [Properties(), TYPICAL, CELERY], ids=["none", "typical", "celery"]
)
@pytest.mark.parametrize(("channel", "body_size"), [(0, 0), (1, 10), (65535, 2**64 - 1)])
def test_the_content_header_frame_is_pamqps(
    properties: commands.Basic.Properties, channel: int, body_size: int
) -> None:
    ours = content_header_frame(channel, body_size, properties.marshal())

    assert ours == frame.marshal(header.ContentHeader(0, body_size, properties), channel)
    consumed, decoded_channel, value = frame.unmarshal(ours)
    assert (consumed, decoded_channel) == (len(ours), channel)
    assert isinstance(value, header.ContentHeader)
    assert (value.class_id, value.weight, value.body_size) == (60, 0, body_size)
    assert value.properties == properties
    _, pika_header = pika.frame.decode_frame(ours)
    assert isinstance(pika_header, pika.frame.Header) and pika_header.body_size == body_size


# --- properties: typed values round trip -------------------------------------------------

_names = st.text(st.characters(exclude_categories=("Cs",)), max_size=32)  # <= 128 bytes
_short_text = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=63)
_scalars = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -128, 127, 128, -32768, 32767, 65535, 65536, 2**31 - 1, 2**32 - 1]),
    st.booleans(),
    st.none(),
    st.floats(width=32, allow_nan=False, allow_infinity=False),  # pamqp writes 'f'
    st.builds(
        lambda mantissa, scale: Decimal(mantissa).scaleb(-scale),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(0, 30),
    ),
    # pamqp writes whole seconds and reads a value above 2**32 - 1 as milliseconds.
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 1),
        max_value=datetime.datetime(2106, 2, 7),
        timezones=st.just(UTC),
    ).map(lambda d: d.replace(microsecond=0)),
    st.binary(max_size=20).map(bytearray),  # pamqp encodes bytearray; bytes it refuses
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_names, inner, max_size=4),
    max_leaves=20,
)
_properties = st.builds(
    Properties,
    content_type=st.none() | _short_text,
    content_encoding=st.none() | _short_text,
    headers=st.none() | st.dictionaries(_names, _values, max_size=8),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | _short_text,
    reply_to=st.none() | _short_text,
    expiration=st.none() | _short_text,
    message_id=st.none() | _short_text,
    timestamp=st.none()
    | st.integers(0, 2**32 - 1).map(lambda s: datetime.datetime.fromtimestamp(s, tz=UTC)),
    message_type=st.none() | _short_text,
    user_id=st.none() | _short_text,
    app_id=st.none() | _short_text,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(properties=_properties, exchange=st.sampled_from(["", "orders"]), key=_short_text)
def test_properties_survive_the_log(
    properties: commands.Basic.Properties, exchange: str, key: str
) -> None:
    headers = record_headers(exchange, key, properties)
    batch = encode_batch([Record(b"body", None, tuple(headers), 1)])
    ((_, record),) = list(decode_full_records(batch))

    delivered_exchange, routing_key, property_bytes = delivery_content(record.headers)

    assert (delivered_exchange, routing_key) == (exchange, key)
    assert property_bytes == properties.marshal()
    assert pamqp_properties(property_bytes) == properties
    pika_properties(property_bytes)
    copies = as_dict(headers)
    for name, value in (properties.headers or {}).items():
        if name in RESERVED_HEADERS or name.startswith("amqp."):
            continue  # present or not as the properties say (see the test on collisions)
        assert (name in copies) == isinstance(value, str | bytearray | int | float | Decimal)


@settings(max_examples=100, deadline=None)
@given(properties=_properties, channel=st.integers(0, 65535), body_size=st.integers(0, 2**64 - 1))
def test_content_header_frames_match_pamqps_encoding(
    properties: commands.Basic.Properties, channel: int, body_size: int
) -> None:
    expected = frame.marshal(header.ContentHeader(0, body_size, properties), channel)

    assert content_header_frame(channel, body_size, properties.marshal()) == expected


# --- whatever a Kafka client writes, an AMQP consumer can decode it ------------------------

_header_names = st.one_of(
    st.sampled_from(
        [
            ROUTING_KEY_HEADER,
            EXCHANGE_HEADER,
            PROPERTIES_HEADER,
            "content-type",
            "delivery-mode",
            "priority",
            "timestamp",
            "cluster-id",
            "user-id",
        ]
    ),
    st.text(max_size=200),
)
_header_values = st.none() | st.binary(max_size=300) | st.sampled_from([b"1", b"2", b"255"])


def _mutated(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """`data` with each edit applied: (kind, position, byte) replaces, inserts or cuts."""
    out = bytearray(data)
    for kind, position, byte in edits:
        at = position % (len(out) + 1)
        if kind == 0 and at < len(out):
            out[at] = byte
        elif kind == 1:
            out.insert(at, byte)
        else:
            del out[at:]
    return bytes(out)


_edits = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 2**16), st.integers(0, 255)), min_size=1, max_size=4
)


def _decodes_everywhere(result: tuple[str, str, bytes]) -> None:
    exchange, routing_key, property_bytes = result
    assert len(exchange.encode()) <= 255 and len(routing_key.encode()) <= 255
    commands.Basic.Deliver("c", 1, False, exchange, routing_key).marshal()
    pamqp_properties(property_bytes)
    pika_properties(property_bytes)


@settings(max_examples=300, deadline=None)
@given(headers=st.lists(st.tuples(_header_names, _header_values), max_size=12))
def test_any_kafka_headers_make_a_delivery(headers: list[tuple[str, bytes | None]]) -> None:
    _decodes_everywhere(delivery_content(headers))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(properties=_properties, edits=_edits)
def test_a_damaged_property_list_is_used_only_when_it_decodes(
    properties: commands.Basic.Properties, edits: list[tuple[int, int, int]]
) -> None:
    damaged = _mutated(properties.marshal(), edits)
    assume(damaged != properties.marshal())

    result = delivery_content([(PROPERTIES_HEADER, damaged)])

    _decodes_everywhere(result)


_field_types = st.sampled_from(list(b"tbBsuIilLfdDSxAFTVU\x00Z"))  # with 3 no one knows


@st.composite
def _field_values(draw: st.DrawFn, depth: int = 3) -> bytes:
    """A typed value with a length that is right for its type or not (a random payload
    after a random type octet), and tables and arrays of those: mostly invalid, but valid
    far more often than random bytes."""
    kind = draw(_field_types)
    if kind == ord("A") and depth:
        content = b"".join(draw(st.lists(_field_values(depth - 1), max_size=3)))
    elif kind == ord("F") and depth:
        entries = draw(
            st.lists(st.tuples(st.binary(max_size=3), _field_values(depth - 1)), max_size=3)
        )
        content = b"".join(bytes((len(k),)) + k + v for k, v in entries)
    elif kind in b"SxAF":
        content = draw(st.binary(max_size=9))
    else:
        return bytes((kind,)) + draw(st.binary(max_size=9))
    return bytes((kind,)) + struct.pack(">I", len(content)) + content


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(st.binary(max_size=3), _field_values()), max_size=4))
def test_a_table_of_any_shape_is_used_only_when_it_decodes(
    entries: list[tuple[bytes, bytes]],
) -> None:
    stored = _table_property(b"".join(_entry(name, value) for name, value in entries))

    result = delivery_content([(PROPERTIES_HEADER, stored)])

    _decodes_everywhere(result)


# --- the costs quoted in the module docstring --------------------------------------------


def _cost_us(statement: object, number: int = 5_000) -> float:
    assert callable(statement)
    return min(timeit.repeat(statement, number=number, repeat=25)) / number * 1e6


def measure() -> None:
    """Print what the mapping costs per message (`python test_amqp_mapping.py`)."""
    for label, properties in (("typical", TYPICAL), ("Celery", CELERY)):
        raw = properties.marshal()
        stored = record_headers("orders", "eu.paris", properties)
        content = header.ContentHeader(0, 10, properties).marshal()
        rows = {
            "record_headers, client's bytes given": lambda p=properties, r=raw: record_headers(
                "orders", "eu.paris", p, property_bytes=r
            ),
            "record_headers, pamqp re-marshals": lambda p=properties: record_headers(
                "orders", "eu.paris", p
            ),
            "delivery_content, from amqp.properties": lambda s=stored: delivery_content(s),
            "pamqp decoding the same content header": lambda c=content: (
                header.ContentHeader().unmarshal(c)
            ),
        }
        for row, statement in rows.items():
            print(f"{label:8} {row:42} {_cost_us(statement):5.1f} us  ({len(raw)} bytes)")
    kafka = f"delivery_content, Kafka record, {len(KAFKA_HEADERS)} headers"
    print(f"{'':8} {kafka:42} {_cost_us(lambda: delivery_content(KAFKA_HEADERS)):5.1f} us")


if __name__ == "__main__":
    measure()
