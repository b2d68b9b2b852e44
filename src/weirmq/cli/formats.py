"""The text forms of records: lines read by ``weirmq produce``, records printed by
``weirmq consume`` (kcat-style ``--format`` or JSON Lines).

Theory of operation:

- Records are bytes, and are printed as bytes: a value that is not UTF-8 reaches stdout
  exactly as it was produced. Only the JSON form has to choose, and there a key or value is
  text when it decodes as UTF-8 and base64 otherwise, with a ``*_base64`` flag saying which.
- A ``--format`` string is compiled once into a tuple of parts, each either literal bytes
  or a function of the record, so printing a record is one ``b"".join``. An unknown
  placeholder is an error at compile time, before anything is consumed.
- ``ConsumedRecord`` is our own copy of what we print from a confluent-kafka ``Message``:
  the formatting functions can then be tested without a broker or a client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weirmq.cli.output import json_line, text_or_base64

if TYPE_CHECKING:
    from confluent_kafka import Message

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None  # None when the record carries no timestamp
    key: bytes | None
    value: bytes | None
    headers: Headers = ()

    @classmethod
    def from_message(cls, message: Message) -> ConsumedRecord:
        timestamp_type, timestamp_ms = message.timestamp()
        # confluent-kafka: type 0 is TIMESTAMP_NOT_AVAILABLE.
        return cls(
            topic=message.topic() or "",
            partition=message.partition() or 0,
            offset=message.offset() or 0,
            timestamp_ms=timestamp_ms if timestamp_type != 0 else None,
            key=message.key(),
            value=message.value(),
            headers=_headers_of(message),
        )


def _headers_of(message: Message) -> Headers:
    # A consumed message's headers are a list of (str, bytes or None), or None; the wider
    # type in confluent-kafka's stubs is for the producer side.
    found = message.headers() or ()
    pairs = found.items() if isinstance(found, dict) else found
    return tuple(
        (name, value.encode() if isinstance(value, str) else value) for name, value in pairs
    )


# -- --format ----------------------------------------------------------------------------------


class FormatError(ValueError):
    """A --format string we cannot compile; the message names the culprit."""


def _length(data: bytes | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def _headers(record: ConsumedRecord) -> bytes:
    return b",".join(name.encode() + b"=" + (value or b"") for name, value in record.headers)


# kcat's placeholders (a subset); each turns a record into bytes. A null key or value
# prints as nothing (its length, %K or %S, is -1).
PLACEHOLDERS: dict[str, Callable[[ConsumedRecord], bytes]] = {
    "t": lambda record: record.topic.encode(),
    "p": lambda record: str(record.partition).encode(),
    "o": lambda record: str(record.offset).encode(),
    "k": lambda record: record.key or b"",
    "s": lambda record: record.value or b"",
    "K": lambda record: _length(record.key),
    "S": lambda record: _length(record.value),
    "h": _headers,
    "T": lambda record: str(-1 if record.timestamp_ms is None else record.timestamp_ms).encode(),
}
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}
DEFAULT_FORMAT = "%s\\n"

FormatPart = bytes | Callable[[ConsumedRecord], bytes]
CompiledFormat = tuple[FormatPart, ...]


def compile_format(text: str) -> CompiledFormat:
    """``"%k=%s\\n"`` -> parts. ``%%`` is a percent sign; an unknown ``\\x`` is kept as is."""
    parts: list[FormatPart] = []
    literal: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            escaped = next(chars, "")
            literal.append(ESCAPES.get(escaped, "\\" + escaped))
        elif char == "%":
            placeholder = next(chars, "")
            if placeholder == "%":
                literal.append("%")
                continue
            if placeholder not in PLACEHOLDERS:
                raise FormatError(_unknown_placeholder(placeholder))
            _flush(literal, parts)
            parts.append(PLACEHOLDERS[placeholder])
        else:
            literal.append(char)
    _flush(literal, parts)
    return tuple(parts)


def _flush(literal: list[str], parts: list[FormatPart]) -> None:
    if literal:
        parts.append("".join(literal).encode("utf-8"))
        literal.clear()


def _unknown_placeholder(placeholder: str) -> str:
    known = " ".join(f"%{name}" for name in PLACEHOLDERS)
    if not placeholder:
        return f"a lone '%' ends the format (write %% for a percent sign); known: {known} %%"
    return f"unknown placeholder %{placeholder}; known: {known} %%"


def render(parts: CompiledFormat, record: ConsumedRecord) -> bytes:
    return b"".join(part if isinstance(part, bytes) else part(record) for part in parts)


# -- JSON --------------------------------------------------------------------------------------


def record_to_json(record: ConsumedRecord) -> dict[str, Any]:
    """The JSON object of one record (shape documented in docs/cli.md)."""
    key, key_base64 = text_or_base64(record.key)
    value, value_base64 = text_or_base64(record.value)
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "key": key,
        "key_base64": key_base64,
        "value": value,
        "value_base64": value_base64,
        "headers": [_header_to_json(name, data) for name, data in record.headers],
    }


def _header_to_json(name: str, data: bytes | None) -> dict[str, Any]:
    value, value_base64 = text_or_base64(data)
    return {"key": name, "value": value, "value_base64": value_base64}


def record_json_line(record: ConsumedRecord) -> bytes:
    return json_line(record_to_json(record))


# -- produce input -----------------------------------------------------------------------------


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    """One stdin line -> (key, value). The trailing newline goes; the key is what precedes
    the first ``separator``. A line without the separator has no key (a null key)."""
    line = line.removesuffix(b"\n")
    if separator is None:
        return None, line
    key, found, value = line.partition(separator)
    return (key, value) if found else (None, line)


def parse_assignments(texts: Sequence[str], what: str) -> list[tuple[str, str]]:
    """``["a=1", "b=x=y"]`` -> ``[("a", "1"), ("b", "x=y")]``: split at the first ``=``.

    ``what`` names the option in the error (``--config``, ``--header``)."""
    pairs = []
    for text in texts:
        name, found, value = text.partition("=")
        if not found or not name:
            raise ValueError(f"{what} {text!r} is not KEY=VALUE")
        pairs.append((name, value))
    return pairs
