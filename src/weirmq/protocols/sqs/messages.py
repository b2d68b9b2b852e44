"""An SQS message as a record on the log, and a record as an SQS message.

Every message sent through the SQS API is a record of its queue's topic, so Kafka
consumers and Spark read and replay it, and a record a Kafka producer writes to that
topic is received over SQS:

    SQS                              record
    -------------------------------  -------------------------------------------------------
    MessageBody                      value (UTF-8)
    MessageGroupId (FIFO)            key, and header weirmq.sqs.group
    MessageDeduplicationId (FIFO)    header weirmq.sqs.dedup (the id, sent or content-based)
    MessageId                        header weirmq.sqs.message.id
    MessageAttributes                header weirmq.sqs.attributes (JSON, exactly as sent:
                                     data types, custom labels, binary values in base64);
                                     and for Kafka readers one plain header per attribute,
                                     its name and its value (text for String and Number,
                                     the bytes for Binary)
    AWSTraceHeader                   header weirmq.sqs.trace
    SenderId                         header weirmq.sqs.sender (the access key that signed)
    SentTimestamp                    the record's timestamp (the time the broker got it)
    DelaySeconds                     header weirmq.delay.ms (the broker's delayed delivery,
                                     docs/delays.md): appended to the topic when due
    dead-lettered from queue Q       header weirmq.sqs.source (Q's ARN), for redrive

A record without the weirmq.sqs headers (from a Kafka producer, or copied by an exchange
from an AMQP publish) is received with a MessageId derived from its topic and offset (the
same on every receive), its value as the body (invalid UTF-8 replaced), and its plain
headers as String attributes (Binary when they are not UTF-8 text), at most
`ATTRIBUTES_MAX`.

The checks are SQS's own, with its texts: bodies of the XML characters SQS allows, at most
10 attributes with valid names and types, the size of body and attributes together within
the queue's MaximumMessageSize. The MD5 digests are SQS's: of the body's UTF-8 bytes, and
of the attributes in SQS's binary layout (sorted by name; each name, type and value
length-prefixed, the value after a transport byte, 1 for strings and 2 for binary), so
SDKs that check them (Java, .NET, Go) accept what they receive.

Sans I/O: plain functions over records and the request's JSON-shaped parameters.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import struct
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from ...broker.delays import DELAY_HEADER, DELAYED_OFFSET_HEADER, DELIVER_AT_HEADER
from ...records.batch import Record
from .errors import Fault, SqsError

MESSAGE_ID: Final = "weirmq.sqs.message.id"
ATTRIBUTES: Final = "weirmq.sqs.attributes"
GROUP: Final = "weirmq.sqs.group"
DEDUP: Final = "weirmq.sqs.dedup"
TRACE: Final = "weirmq.sqs.trace"
SENDER: Final = "weirmq.sqs.sender"
SOURCE: Final = "weirmq.sqs.source"
DELAY: Final = DELAY_HEADER
INTERNAL_PREFIX: Final = "weirmq."
"""Headers of this prefix are WeirMQ's, never shown as message attributes."""
FOREIGN_PREFIXES: Final = (INTERNAL_PREFIX, "amqp.")
"""Headers a foreign record's attributes are not made of: WeirMQ's, and the AMQP
mapping's own (the encoded property list and the exchange), which are no application's."""

ATTRIBUTES_MAX: Final = 10
"""SQS's limit of message attributes per message."""
ATTRIBUTE_NAME_CHARS_MAX: Final = 256
DATA_TYPE_CHARS_MAX: Final = 256
_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]+")
_RESERVED_NAME: Final = re.compile(r"(?i)(aws\.|amazon\.)")
_BASE_TYPES: Final = ("String", "Number", "Binary")
_INVALID_CHARS: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ID_NAMESPACE: Final = uuid.UUID("5e0b6c1e-7d4a-4f0e-9a53-7e1f0b2c9d11")
"""The namespace of MessageIds derived from (topic id, offset) for foreign records."""
NUMBER_DIGITS_MAX: Final = 38
NUMBER_MAGNITUDE_MAX: Final = Decimal("1e126")


# --- checking what a sender sends ---------------------------------------------------------


def check_body(body: object) -> str:
    """The message body, checked as SQS checks it."""
    if not isinstance(body, str) or body == "":
        raise SqsError(
            Fault.MISSING_PARAMETER, "The request must contain the parameter MessageBody."
        )
    bad = _INVALID_CHARS.search(body)
    if bad is not None:
        raise SqsError(
            Fault.INVALID_MESSAGE_CONTENTS,
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | "
            "#x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )
    return body


def check_attributes(raw: object) -> dict[str, dict[str, str]]:
    """Message attributes in the JSON protocol's shape, checked; values normalized to
    {DataType, StringValue | BinaryValue (base64)}."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SqsError(Fault.INVALID_PARAMETER_VALUE, "MessageAttributes must be a map.")
    if len(raw) > ATTRIBUTES_MAX:
        raise SqsError(
            Fault.INVALID_PARAMETER_VALUE,
            f"Number of message attributes [{len(raw)}] exceeds the allowed maximum "
            f"[{ATTRIBUTES_MAX}].",
        )
    checked: dict[str, dict[str, str]] = {}
    for name, value in raw.items():
        _check_attribute_name(name)
        if not isinstance(value, Mapping):
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE, f"The message attribute '{name}' must be a map."
            )
        data_type = value.get("DataType")
        if not isinstance(data_type, str) or not data_type:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"The message attribute '{name}' must contain non-empty message attribute type.",
            )
        base = data_type.split(".", 1)[0]
        if base not in _BASE_TYPES or len(data_type) > DATA_TYPE_CHARS_MAX:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"The type of message (user) attribute '{name}' is invalid. You must use only "
                "the following supported type prefixes: Binary, Number, String.",
            )
        if value.get("StringListValues") or value.get("BinaryListValues"):
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"Message attribute list values in '{name}' are not supported.",
            )
        if base == "Binary":
            checked[name] = {"DataType": data_type, "BinaryValue": _binary(name, value)}
            continue
        text = value.get("StringValue")
        if not isinstance(text, str) or text == "":
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"The message attribute '{name}' must contain non-empty message attribute "
                "value for message attribute type '" + base + "'.",
            )
        if _INVALID_CHARS.search(text) is not None:
            raise SqsError(
                Fault.INVALID_PARAMETER_VALUE,
                f"The message attribute '{name}' contains invalid characters.",
            )
        if base == "Number":
            _check_number(name, text)
        checked[name] = {"DataType": data_type, "StringValue": text}
    return checked


def _check_attribute_name(name: object) -> None:
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= ATTRIBUTE_NAME_CHARS_MAX
        or _NAME.fullmatch(name) is None
        or name.startswith(".")
        or name.endswith(".")
        or ".." in name
        or _RESERVED_NAME.match(name) is not None
    ):
        raise SqsError(
            Fault.INVALID_PARAMETER_VALUE,
            f"Message (user) attribute name '{name}' is invalid. The attribute name can "
            "contain only A-Z, a-z, 0-9, underscore (_), hyphen (-) and period (.), must not "
            "start or end with a period or contain two in a row, and must not start with "
            "AWS. or Amazon.",
        )


def _binary(name: str, value: Mapping[str, Any]) -> str:
    raw = value.get("BinaryValue")
    if not isinstance(raw, str) or raw == "":
        raise SqsError(
            Fault.INVALID_PARAMETER_VALUE,
            f"The message attribute '{name}' must contain non-empty message attribute value "
            "for message attribute type 'Binary'.",
        )
    try:
        base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise SqsError(
            Fault.INVALID_PARAMETER_VALUE,
            f"The message attribute '{name}' has a BinaryValue that is not valid base64.",
        ) from None
    return raw


def _check_number(name: str, text: str) -> None:
    try:
        number = Decimal(text)
    except InvalidOperation:
        number = None
    if (
        number is None
        or not number.is_finite()
        or abs(number) > NUMBER_MAGNITUDE_MAX
        or len(number.as_tuple().digits) > NUMBER_DIGITS_MAX
    ):
        raise SqsError(
            Fault.INVALID_PARAMETER_VALUE,
            f"Can't cast the value of message (user) attribute '{name}' to a number.",
        )


def attributes_bytes(attributes: Mapping[str, Mapping[str, str]]) -> int:
    """What the attributes count toward the message size, as SQS counts them: each
    name, data type and value."""
    total = 0
    for name, value in attributes.items():
        total += len(name.encode()) + len(value["DataType"].encode())
        if "BinaryValue" in value:
            total += len(base64.b64decode(value["BinaryValue"]))
        else:
            total += len(value["StringValue"].encode())
    return total


# --- digests ------------------------------------------------------------------------------


def md5_of_body(body: str) -> str:
    return md5_of_bytes(body.encode())


def md5_of_bytes(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_of_attributes(attributes: Mapping[str, Mapping[str, str]]) -> str:
    """SQS's MD5OfMessageAttributes (see the module docstring)."""
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        digest.update(_prefixed(name.encode()))
        digest.update(_prefixed(value["DataType"].encode()))
        if "BinaryValue" in value:
            digest.update(b"\x02" + _prefixed(base64.b64decode(value["BinaryValue"])))
        else:
            digest.update(b"\x01" + _prefixed(value["StringValue"].encode()))
    return digest.hexdigest()


def _prefixed(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


# --- records ------------------------------------------------------------------------------


def record_headers(
    message_id: str,
    attributes: Mapping[str, Mapping[str, str]],
    *,
    sender: str,
    trace: str | None = None,
    group: str | None = None,
    dedup: str | None = None,
    delay_ms: int = 0,
) -> list[tuple[str, bytes | None]]:
    """The headers of a message's record (see the module docstring)."""
    headers: list[tuple[str, bytes | None]] = [(MESSAGE_ID, message_id.encode())]
    if sender:
        headers.append((SENDER, sender.encode()))
    if attributes:
        headers.append((ATTRIBUTES, json.dumps(attributes, separators=(",", ":")).encode()))
        for name, value in attributes.items():
            if name.startswith(INTERNAL_PREFIX):
                continue
            if "BinaryValue" in value:
                headers.append((name, base64.b64decode(value["BinaryValue"])))
            else:
                headers.append((name, value["StringValue"].encode()))
    if trace is not None:
        headers.append((TRACE, trace.encode()))
    if group is not None:
        headers.append((GROUP, group.encode()))
    if dedup is not None:
        headers.append((DEDUP, dedup.encode()))
    if delay_ms > 0:
        headers.append((DELAY, str(delay_ms).encode()))
    return headers


def header(record: Record, name: str) -> str | None:
    """The text of a record's header `name` (the last one, as Kafka clients read it)."""
    found = None
    for key, value in record.headers:
        if key == name and value is not None:
            found = value
    return None if found is None else found.decode(errors="replace")


def message_id(record: Record, topic_id: uuid.UUID, offset: int) -> str:
    return header(record, MESSAGE_ID) or str(uuid.uuid5(_ID_NAMESPACE, f"{topic_id}:{offset}"))


def body(record: Record) -> str:
    """A record's value as a message body: invalid UTF-8, and characters SQS does not
    allow in a body (a foreign record's control characters, which XML cannot carry
    either), become U+FFFD."""
    text = "" if record.value is None else record.value.decode(errors="replace")
    return _INVALID_CHARS.sub("\ufffd", text)


def attributes_of(record: Record) -> dict[str, dict[str, str]]:
    """A received message's attributes: as sent over SQS, or made from a foreign
    record's plain headers."""
    stored = header(record, ATTRIBUTES)
    if stored is not None:
        try:
            found = json.loads(stored)
        except ValueError:
            found = None
        if isinstance(found, dict):
            return found
    made: dict[str, dict[str, str]] = {}
    for name, value in record.headers:
        if value is None or name.startswith(FOREIGN_PREFIXES) or len(made) >= ATTRIBUTES_MAX:
            continue
        if not name or _NAME.fullmatch(name) is None:
            continue
        try:
            text = value.decode()
        except UnicodeDecodeError:
            text = None
        if text and _INVALID_CHARS.search(text) is None:
            made[name] = {"DataType": "String", "StringValue": text}
        elif value:
            made[name] = {"DataType": "Binary", "BinaryValue": base64.b64encode(value).decode()}
    return made


def selected_attributes(
    attributes: Mapping[str, dict[str, str]], names: Sequence[str]
) -> dict[str, dict[str, str]]:
    """The attributes a receive asked for (`MessageAttributeNames`: names, `All` or
    `.*`, and prefixes ending in `.*`)."""
    if not names or not attributes:
        return {}
    if any(name.lower() == "all" or name == ".*" for name in names):
        return dict(attributes)
    wanted = set(names)
    prefixes = tuple(name[:-1] for name in names if name.endswith(".*"))
    return {
        name: value
        for name, value in attributes.items()
        if name in wanted or (prefixes and name.startswith(prefixes))
    }


def moved_headers(record: Record, source_arn: str | None) -> tuple[tuple[str, bytes | None], ...]:
    """A record's headers for its copy into another queue (dead-lettered, or moved back
    by a redrive): without the delay it has waited already, with its source queue."""
    kept = [
        (name, value)
        for name, value in record.headers
        if name not in (DELAY_HEADER, DELIVER_AT_HEADER, DELAYED_OFFSET_HEADER, SOURCE)
    ]
    if source_arn is not None:
        kept.append((SOURCE, source_arn.encode()))
    return tuple(kept)
