"""AMQP messages as records on the log, and records as AMQP deliveries. No I/O.

A message an AMQP client publishes becomes one record: its body is the record's value, its
key is None, and its headers say where it was published and with which properties. A
record read for an AMQP consumer, whoever wrote it (an AMQP client or a Kafka producer),
becomes a delivery: an exchange, a routing key and the encoded property list of a content
header frame.

Publishing: `record_headers`
----------------------------
The record carries the properties twice. `amqp.properties` holds the encoded property list
(property flags, then each present property), the bytes a content header frame carries
after its class, weight and body size, so a consumer gets exactly what was published,
typed header tables included (Celery's ints, Nones, lists and dicts; x-death's list of
tables; timestamps; decimals; byte arrays). Next to it, a text copy of each property and of
each simple header-table entry, for Kafka consumers and for the `headers` and `content`
exchanges, which read header values as text. `routing-key` is the router's own header
(`weirmq.broker.exchanges.ROUTING_KEY_HEADER`), so an AMQP publish to an exchange topic
routes as a Kafka record with that header does.

Where the property list comes from: the caller may pass the bytes the client sent (its
content header frame after byte 12 of the payload), which are stored as they are, at no
cost. Without them pamqp marshals the decoded `Basic.Properties` again, and that is not
always the client's encoding: pamqp writes every float as a 32-bit 'f' (py-amqp, under
kombu and Celery, sends 64-bit 'd', so precision is lost), reads a header timestamp above
2**32 - 1 as milliseconds and writes it back as seconds, and picks the narrowest integer
type. pamqp also decodes a long string that is not UTF-8 (py-amqp sends `bytes` values
that way) to `bytes`, which its own encoder refuses; those are written back as byte arrays
('x') instead of failing the publish.

Delivering: `delivery_content`
------------------------------
With a valid `amqp.properties`, the property list is those bytes, untouched: no decoding,
no re-encoding. Any client can write any header, so "valid" is checked, never assumed: a
Kafka producer may write an `amqp.properties` that is garbage, and a consumer's client
library that cannot decode a content header drops its connection. `_check_property_list`
walks the bytes without building values and accepts only what both pamqp (aio-pika) and
pika decode without an error: known flag bits only, every length inside its container,
UTF-8 short strings and table keys (pamqp decodes those strictly), the field types both
know, finite floats (pika converts them to int), timestamps a `datetime` can hold (pika
converts header timestamps, pamqp property timestamps), nesting at most `NESTING_MAX`
deep, and no byte left over. A property list that fails is logged at DEBUG and ignored;
the delivery is then built as for a Kafka record. The walk is the grammar pamqp and pika
decode, not a second codec: nothing is built from it.

Without `amqp.properties` (a Kafka producer wrote the record), the text headers are read
back: a header named after a property sets that property when its value parses (UTF-8 of
at most 255 bytes for the string properties, ASCII digits in range for delivery-mode,
priority and timestamp); every other header, and one that does not parse, goes into the
AMQP `headers` table (UTF-8 as a string, anything else as a byte array, a null value as
void). Nothing in a record's headers can make this fail. pamqp marshals the result.

Either way the routing key is at most 255 bytes of UTF-8 (a short string, cut if longer),
and the exchange is a name pamqp puts in a Basic.Deliver or Basic.GetOk: pamqp validates
exchange names when it builds or marshals those methods (at most 127 characters of
`a-zA-Z0-9-_.:@#,/+ `; RabbitMQ allows any 255 bytes), so any other name is delivered as
"" rather than made into a method that cannot be sent.

Not bounded here: a content header is one frame, so a property list longer than the
consumer's frame_max less 20 bytes (7 of frame header, 12 fixed, 1 frame-end) cannot be
sent as it is, and a Kafka record with thousands of headers makes a table that large. The
delivery path, which knows frame_max, must check.

`content_header_frame` frames a property list without decoding it. A body is cut into
frames by `framing.body_frames`.

Mapping (the section docs/amqp.md gives)
----------------------------------------------------------------------------

### How an AMQP message is stored

| AMQP | record |
|---|---|
| body | value |
| (none) | key: null |
| routing key | header `routing-key` (what exchanges route by) |
| exchange | header `amqp.exchange` (absent for the default exchange "") |
| all properties, typed | header `amqp.properties`: the property list of a content header (flags, then values), delivered back to AMQP consumers byte for byte |
| content-type, content-encoding, correlation-id, reply-to, expiration, message-id, type, user-id, app-id, cluster-id | headers of the same names, UTF-8 text, when set and not empty |
| delivery-mode, priority | headers `delivery-mode`, `priority`: decimal text (`2`) |
| timestamp | header `timestamp`: seconds since the epoch, decimal text |
| headers table: a string, bytes, integer, float, boolean or decimal entry | a header of the entry's name: UTF-8 text, bytes as they are, `true`/`false`, numbers as decimal text; skipped when the name is one of the names above or starts with `amqp.` |
| headers table: a table, array, void or timestamp entry | only in `amqp.properties` |

### How a record is delivered to an AMQP consumer

| record | AMQP |
|---|---|
| value | body |
| header `routing-key` (else "") | routing key (cut to 255 bytes) |
| header `amqp.exchange` (else "") | exchange, when pamqp accepts the name (at most 127 characters of `a-zA-Z0-9-_.:@#,/+ `), else "" |
| header `amqp.properties`, when it decodes | all properties, exactly as published |
| otherwise (a Kafka producer wrote the record): | |
| header `content-type`, `content-encoding`, `correlation-id`, `reply-to`, `expiration`, `message-id`, `type`, `user-id`, `app-id`, `cluster-id` | that property, when the value is UTF-8 of 1 to 255 bytes |
| header `delivery-mode` | delivery-mode, when it is `1` or `2` |
| header `priority` | priority, when it is 0 to 255 |
| header `timestamp` | timestamp, when it is whole seconds, 0 to 4294967295 |
| any other header, or one of those that does not parse | an entry of the `headers` table: a string when UTF-8, else a byte array; a null value is void |
| other `amqp.` headers | ignored |

A header that appears twice sets its property once (the first time; the router also
reads the first `routing-key`); the second goes into the table. Table names are cut to
128 bytes, as pamqp and the AMQP spec require.

Cost
----
Measured with `timeit`: run tests/protocols/amqp/test_amqp_mapping.py as a script; each
figure is the best of 25 runs of 5,000 calls, CPython 3.11.7 on one core of a 2-vCPU AMD
EPYC VM. The messages are the test's TYPICAL (content_type, delivery_mode and three string
headers: 108 bytes of properties) and CELERY (a Celery 5 task message: six properties and
Celery's 19 task headers with Nones, ints, a bool, a list and an empty table: 445 bytes);
the Kafka record has six text headers (content-type, delivery-mode, timestamp, routing-key
and two others).

                                                   typical    Celery
    record_headers, the client's bytes passed        1.6 us    4.2 us
    record_headers, pamqp marshals the properties    7.8 us   27 us
    delivery_content, a valid amqp.properties        3.0 us    9.2 us
      (pamqp decoding the same property list         6.3 us   21 us)
    delivery_content, the Kafka record               9.8 us

On the publish side, pamqp's marshal is four fifths of the cost: passing the client's
bytes removes it (and keeps them exact). On the delivery side, checking a stored property
list costs about half of what decoding it would; a Kafka record costs what pamqp takes to
marshal the properties made from its headers.
"""  # noqa: E501 (markdown table rows are one line each)

from __future__ import annotations

import datetime
import decimal
import logging
import math
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from pamqp import commands, common
from pamqp import constants as spec

from ...broker.exchanges import ROUTING_KEY_HEADER
from .framing import FRAME_END

log = logging.getLogger(__name__)

EXCHANGE_HEADER: Final = "amqp.exchange"
"""The exchange an AMQP client published to (absent for the default exchange)."""
PROPERTIES_HEADER: Final = "amqp.properties"
"""The encoded property list of the message's content header."""
AMQP_PREFIX: Final = "amqp."
"""Headers whose name starts with this are the mapping's own, never copied as data."""
SHORTSTR_BYTES_MAX: Final = 255
EXCHANGE_NAME_MAX: Final = 127
"""pamqp refuses to build or marshal a Basic.Deliver whose exchange name is longer."""
_EXCHANGE_NAME: Final = spec.DOMAIN_REGEX["exchange-name"]
TABLE_KEY_BYTES_MAX: Final = 128
"""AMQP's limit on a field name; pamqp cuts longer ones (with a warning per message)."""
NESTING_MAX: Final = 64
"""Tables and arrays nested deeper than this make `amqp.properties` invalid: no real
message nests so deep, and it bounds the recursion of every decoder downstream."""
TIMESTAMP_TEXT_MAX: Final = 0xFFFFFFFF
"""The largest `timestamp` header taken as a property: pamqp reads a larger timestamp as
milliseconds, so a larger value would not mean the same to every client."""

_Properties = commands.Basic.Properties
_FRAME_END_BYTE: Final = bytes((FRAME_END,))
# A content header frame up to its property list: type, channel, payload size, then the
# payload's class id, weight (always 0) and body size.
_CONTENT_HEADER = struct.Struct(">BHIHHQ")
_CONTENT_HEADER_FIXED_BYTES: Final = 12  # class id, weight, body size
_CONTENT_HEADER_FRAME_TYPE: Final = 2

# (attribute, header name) of the string properties, in pamqp's order.
_TEXT_PROPERTIES: Final = (
    ("content_type", "content-type"),
    ("content_encoding", "content-encoding"),
    ("correlation_id", "correlation-id"),
    ("reply_to", "reply-to"),
    ("expiration", "expiration"),
    ("message_id", "message-id"),
    ("message_type", "type"),
    ("user_id", "user-id"),
    ("app_id", "app-id"),
    ("cluster_id", "cluster-id"),
)
_PROPERTY_NAMES: Final = frozenset(
    {name for _, name in _TEXT_PROPERTIES} | {"delivery-mode", "priority", "timestamp"}
)
RESERVED_HEADERS: Final = _PROPERTY_NAMES | {ROUTING_KEY_HEADER}
"""Header-table entries with these names (or starting with `amqp.`) get no text copy."""


def record_headers(
    exchange: str,
    routing_key: str,
    properties: commands.Basic.Properties,
    *,
    property_bytes: bytes | None = None,
) -> list[tuple[str, bytes]]:
    """The headers of the record that stores one published message (see the module
    docstring). `property_bytes`, when given, is the property list as the client encoded
    it (the content header frame's payload from byte 12), stored as it is; `properties`
    must be its decoding. Without it pamqp marshals `properties`, which raises TypeError
    or ValueError only for values pamqp cannot encode, never for properties pamqp
    decoded from a frame."""
    headers = [(ROUTING_KEY_HEADER, routing_key.encode())]
    if exchange:
        headers.append((EXCHANGE_HEADER, exchange.encode()))
    if property_bytes is None:
        property_bytes = _marshal(properties)
    headers.append((PROPERTIES_HEADER, property_bytes))
    for attribute, name in _TEXT_PROPERTIES:
        text = getattr(properties, attribute)
        if text:  # pamqp encodes neither None nor "": both are "not set"
            headers.append((name, text.encode()))
    if properties.delivery_mode is not None:
        headers.append(("delivery-mode", b"%d" % properties.delivery_mode))
    if properties.priority is not None:
        headers.append(("priority", b"%d" % properties.priority))
    if properties.timestamp is not None:
        headers.append(("timestamp", b"%d" % _seconds(properties.timestamp)))
    if properties.headers:
        _add_table_copies(properties.headers, headers)
    return headers


def _marshal(properties: commands.Basic.Properties) -> bytes:
    try:
        return properties.marshal()
    except TypeError:
        # pamqp decodes a non-UTF-8 long string to bytes but encodes only bytearray: write
        # such values as byte arrays rather than refuse a message pamqp itself decoded.
        if not properties.headers:
            raise
        fixed = _Properties()
        for name in _Properties.__slots__:
            setattr(fixed, name, getattr(properties, name))
        fixed.headers = {k: _bytes_as_bytearray(v) for k, v in properties.headers.items()}
        return fixed.marshal()


def _bytes_as_bytearray(value: common.FieldValue) -> common.FieldValue:
    if isinstance(value, bytes):
        return bytearray(value)
    if isinstance(value, dict):
        return {k: _bytes_as_bytearray(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bytes_as_bytearray(v) for v in value]
    return value


def _seconds(value: datetime.datetime) -> int:
    # As pamqp encodes a timestamp, so the text copy says what amqp.properties holds.
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        value = value.replace(tzinfo=datetime.UTC)
    return int(value.timestamp())


def _add_table_copies(table: common.FieldTable, headers: list[tuple[str, bytes]]) -> None:
    for name, value in table.items():
        if name in RESERVED_HEADERS or name.startswith(AMQP_PREFIX):
            continue  # the typed value is in amqp.properties; a copy would shadow ours
        # One dict lookup for the exact types pamqp decodes to; the isinstance chain only
        # for subclasses (a caller's own IntEnum, say).
        as_text = _TEXT_BY_TYPE.get(type(value), _header_text)
        if as_text is not None:
            text = as_text(value)
            if text is not None:
                headers.append((name, text))


def _header_text(value: common.FieldValue) -> bytes | None:
    """A header-table value as text for Kafka, or None for the kinds left typed only."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, bool):  # before int, which bool is
        return _bool_text(value)
    if isinstance(value, int):
        return _int_text(value)
    if isinstance(value, float):
        return repr(value).encode()
    if isinstance(value, decimal.Decimal):
        return format(value, "f").encode()  # never exponent notation: reads as a number
    return None


def _bool_text(value: bool) -> bytes:
    return b"true" if value else b"false"


def _int_text(value: int) -> bytes:
    return b"%d" % value


_TEXT_BY_TYPE: Final[dict[type, Callable[[Any], bytes | None] | None]] = {
    str: str.encode,
    bytes: bytes,
    bytearray: bytes,
    bool: _bool_text,
    int: _int_text,
    float: _header_text,
    decimal.Decimal: _header_text,
    type(None): None,  # these stay typed only, in amqp.properties
    list: None,
    dict: None,
    datetime.datetime: None,
}


def delivery_content(headers: Sequence[tuple[str, bytes | None]]) -> tuple[str, str, bytes]:
    """(exchange, routing key, property list) to deliver a record to an AMQP consumer;
    see the module docstring. Never raises, whatever the record's headers."""
    exchange = routing_key = None
    stored: bytes | None = None
    for name, value in headers:
        if value is None:
            continue
        if name == ROUTING_KEY_HEADER:
            if routing_key is None:
                routing_key = _short_text(value)
        elif name == PROPERTIES_HEADER:
            if stored is None:
                stored = bytes(value)
        elif name == EXCHANGE_HEADER and exchange is None:
            exchange = _exchange_name(value)
    property_bytes = None
    if stored is not None:
        try:
            _check_property_list(stored)
            property_bytes = stored
        except ValueError as exc:
            log.debug("ignoring a record's %s, which does not decode: %s", PROPERTIES_HEADER, exc)
    if property_bytes is None:
        property_bytes = _properties_from_headers(headers)
    return exchange or "", routing_key or "", property_bytes


def _short_text(value: bytes) -> str:
    """`value` as an AMQP short string: invalid UTF-8 replaced, cut to 255 bytes."""
    text = value.decode("utf-8", errors="replace")
    if len(value) * 3 <= SHORTSTR_BYTES_MAX:  # a replacement character is 3 bytes
        return text
    return text.encode()[:SHORTSTR_BYTES_MAX].decode("utf-8", errors="ignore")


def _exchange_name(value: bytes) -> str:
    """`value` when pamqp accepts it as an exchange name in Basic.Deliver, else ""."""
    text = value.decode("utf-8", errors="replace")
    if len(text) <= EXCHANGE_NAME_MAX and _EXCHANGE_NAME.fullmatch(text):
        return text
    log.debug("delivering as from exchange '': pamqp refuses the name %r", text[:200])
    return ""


def content_header_frame(channel: int, body_size: int, property_bytes: bytes) -> bytes:
    """A whole content header frame (class 60, Basic) around an encoded property list,
    which is copied, not decoded: the bytes pamqp would write for the same properties."""
    head = _CONTENT_HEADER.pack(
        _CONTENT_HEADER_FRAME_TYPE,
        channel,
        _CONTENT_HEADER_FIXED_BYTES + len(property_bytes),
        commands.Basic.frame_id,
        0,
        body_size,
    )
    return b"".join((head, property_bytes, _FRAME_END_BYTE))


# Properties from a Kafka producer's headers -------------------------------------------


def _text_property(value: bytes) -> str | None:
    # "" would be dropped by pamqp's encoder (it means "not set"): keep it as a header.
    if not value or len(value) > SHORTSTR_BYTES_MAX:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def _whole_number(value: bytes, high: int) -> int | None:
    # bytes.isdigit is ASCII only; int() alone would take " 2", "+2", "2_0" and "٢".
    if not value.isdigit() or len(value) > 20:
        return None
    number = int(value)
    return number if number <= high else None


def _delivery_mode(value: bytes) -> int | None:
    mode = _whole_number(value, 2)
    return mode if mode else None  # 1 non-persistent, 2 persistent; 0 is not a mode


def _priority(value: bytes) -> int | None:
    return _whole_number(value, 255)


def _timestamp(value: bytes) -> datetime.datetime | None:
    seconds = _whole_number(value, TIMESTAMP_TEXT_MAX)
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)


_Parser = Callable[[bytes], object]
_FROM_HEADER: Final[dict[str, tuple[str, _Parser]]] = {
    **{name: (attribute, _text_property) for attribute, name in _TEXT_PROPERTIES},
    "delivery-mode": ("delivery_mode", _delivery_mode),
    "priority": ("priority", _priority),
    "timestamp": ("timestamp", _timestamp),
}


def _properties_from_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    # Attributes are set directly: Basic.Properties validates only in __init__, and
    # rejects a cluster_id there, which a record may carry. Every value set here is one
    # pamqp encodes, so marshal cannot fail.
    properties = _Properties()
    table: common.FieldTable = {}
    done: set[str] = set()
    for name, value in headers:
        if name == ROUTING_KEY_HEADER or name.startswith(AMQP_PREFIX):
            continue
        known = _FROM_HEADER.get(name)
        if known is not None and value is not None and known[0] not in done:
            attribute, parse = known
            parsed = parse(value)
            if parsed is not None:
                setattr(properties, attribute, parsed)
                done.add(attribute)
                continue
        key = _table_key(name)
        if key not in table:
            table[key] = _table_value(value)
    if table:
        properties.headers = table
    return properties.marshal()


def _table_key(name: str) -> str:
    if len(name) * 4 <= TABLE_KEY_BYTES_MAX:  # at most 4 bytes a character
        return name
    return name.encode()[:TABLE_KEY_BYTES_MAX].decode("utf-8", errors="ignore")


def _table_value(value: bytes | None) -> common.FieldValue:
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return bytearray(value)  # pamqp encodes bytearray as 'x'; it refuses bytes


# Checking a stored property list ------------------------------------------------------
# Each check takes the data, where the item starts and where its container ends; it
# returns where the item ends, or raises ValueError. Nothing is decoded but short strings.

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_PROPERTY_TIMESTAMP_MAX: Final = 253_402_300_799_999
"""pamqp decodes a property timestamp above 2**32 - 1 as milliseconds, into a datetime."""
_TABLE_TIMESTAMP_MAX: Final = 253_402_300_799
"""pika decodes a header-table timestamp as seconds, into a datetime (year 9999)."""
_PLAIN_FIELD_BYTES: Final = {
    ord("t"): 1, ord("b"): 1, ord("B"): 1, ord("s"): 2, ord("u"): 2, ord("I"): 4,
    ord("i"): 4, ord("l"): 8, ord("L"): 8, ord("D"): 5, ord("V"): 0,
}  # fmt: skip
"""Field types of a fixed size, any value of which pika and pamqp both decode ('U' and
'\\x00' are each known to only one of them)."""
_FLOATS: Final = {ord("f"): struct.Struct(">f"), ord("d"): struct.Struct(">d")}
_TIMESTAMP_TYPE: Final = ord("T")
_SIZED_TYPES: Final = frozenset({ord("S"), ord("x")})
_TABLE_TYPE: Final = ord("F")
_ARRAY_TYPE: Final = ord("A")


def _check_property_list(data: bytes) -> None:
    """Raise ValueError unless `data` is a property list pamqp and pika both decode."""
    end = len(data)
    if end < 2:
        raise ValueError("no property flags")
    flags = data[0] << 8 | data[1]
    if flags & ~_KNOWN_FLAGS:
        # Bit 0 would announce a second flag word, which Basic, with 14 properties, has
        # no use for; bit 1 is no property.
        raise ValueError(f"property flags {flags:#06x} set unknown bits")
    offset = 2
    for flag, check in _LAYOUT:
        if flags & flag:
            offset = check(data, offset, end)
    if offset != end:
        raise ValueError(f"{end - offset} bytes after the last property")


def _overrun(what: str, offset: int) -> ValueError:
    return ValueError(f"{what} at byte {offset} overruns its container")


def _shortstr(data: bytes, offset: int, end: int) -> int:
    if offset >= end:
        raise _overrun("short string", offset)
    stop = offset + 1 + data[offset]
    if stop > end:
        raise _overrun("short string", offset)
    data[offset + 1 : stop].decode()  # pamqp decodes these strictly (UnicodeDecodeError)
    return stop


def _octet(data: bytes, offset: int, end: int) -> int:
    if offset >= end:
        raise _overrun("octet", offset)
    return offset + 1


def _property_timestamp(data: bytes, offset: int, end: int) -> int:
    if offset + 8 > end:
        raise _overrun("timestamp", offset)
    if _U64.unpack_from(data, offset)[0] > _PROPERTY_TIMESTAMP_MAX:
        raise ValueError(f"timestamp at byte {offset} is beyond the year 9999")
    return offset + 8


def _sized(data: bytes, offset: int, end: int) -> int:
    """The end of a long string, byte array, table or array: a 4-byte size, then that many
    bytes."""
    if offset + 4 > end:
        raise _overrun("size", offset)
    size: int = _U32.unpack_from(data, offset)[0]
    stop = offset + 4 + size
    if stop > end:
        raise _overrun("value", offset)
    return stop


def _table(data: bytes, offset: int, end: int, depth: int = 0) -> int:
    stop = _sized(data, offset, end)
    offset += 4
    while offset < stop:
        value_at = offset + 1 + data[offset]  # after the field name, a short string
        if value_at >= stop:  # the name and at least the value's type octet
            raise _overrun("table entry", offset)
        data[offset + 1 : value_at].decode()  # pamqp decodes names strictly
        offset = _field(data, value_at, stop, depth)
    return stop


def _array(data: bytes, offset: int, end: int, depth: int) -> int:
    stop = _sized(data, offset, end)
    offset += 4
    while offset < stop:
        offset = _field(data, offset, stop, depth)
    return stop


def _field(data: bytes, offset: int, end: int, depth: int) -> int:
    """One typed value of a table or an array (its type octet is at `offset` < `end`)."""
    kind = data[offset]
    offset += 1
    size = _PLAIN_FIELD_BYTES.get(kind)
    if size is not None:
        if offset + size > end:
            raise _overrun("field", offset)
        return offset + size
    if kind in _SIZED_TYPES:
        return _sized(data, offset, end)
    number = _FLOATS.get(kind)
    if number is not None:
        if offset + number.size > end:
            raise _overrun("float", offset)
        if not math.isfinite(number.unpack_from(data, offset)[0]):
            raise ValueError(f"float at byte {offset} is not finite")  # pika int()s floats
        return offset + number.size
    if kind == _TIMESTAMP_TYPE:
        if offset + 8 > end:
            raise _overrun("timestamp", offset)
        if _U64.unpack_from(data, offset)[0] > _TABLE_TIMESTAMP_MAX:
            raise ValueError(f"timestamp at byte {offset} is beyond the year 9999")
        return offset + 8
    if kind not in (_TABLE_TYPE, _ARRAY_TYPE):
        raise ValueError(f"unknown field type {bytes((kind,))!r} at byte {offset - 1}")
    if depth >= NESTING_MAX:
        raise ValueError(f"tables and arrays nested more than {NESTING_MAX} deep")
    if kind == _TABLE_TYPE:
        return _table(data, offset, end, depth + 1)
    return _array(data, offset, end, depth + 1)


_Check = Callable[[bytes, int, int], int]
_CHECKS: Final[dict[str, _Check]] = {
    "shortstr": _shortstr,
    "table": _table,
    "octet": _octet,
    "timestamp": _property_timestamp,
}
# The property layout is pamqp's own table: each property's flag and type, in order.
_LAYOUT: Final = tuple(
    (_Properties.flags[name], _CHECKS[getattr(_Properties, "_" + name)])
    for name in _Properties.__slots__
)
_KNOWN_FLAGS: Final = sum(_Properties.flags.values())
