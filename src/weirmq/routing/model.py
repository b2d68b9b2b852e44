"""What the router is made of: exchanges, bindings, and the values records carry.

An `Exchange` is a named router of one `ExchangeType`. A `Binding` connects a source
exchange to a destination, a topic (the log a record is appended to) or another exchange
(routing continues there), with what its exchange type matches on: the `key` for direct
(an exact key) and topic (a pattern), the `arguments` for headers (including `x-match`),
the `expression` for content. Fanout bindings match everything.

Both are frozen values, checked when made, so an invalid one cannot exist. As in RabbitMQ,
a binding *is* its fields: binding twice is binding once, and unbinding names the same
fields. Arguments are normalised on the way in (bytes decoded as UTF-8, sorted by name) so
that the binding a Kafka client sends and the one an AMQP client sends compare equal, and
so that every binding serialises as plain JSON.

Values
------
Header values arrive from Kafka as bytes and from AMQP typed. Matching compares them by
*type class*: numbers (int and float, compared numerically), booleans (their own class,
never equal to 1 or 0), strings; bytes are decoded (UTF-8, undecodable bytes replaced)
and compared as strings. Values of different classes are never equal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Literal, get_args

from .errors import InvalidBindingError, InvalidExchangeError
from .limits import (
    ARGUMENT_VALUE_MAX_CHARS,
    BINDING_ARGUMENTS_MAX,
    BINDING_KEY_MAX_BYTES,
    NAME_MAX_BYTES,
)

HeaderValue = bytes | str | int | float | bool | None
"""A record header's value as a protocol adapter hands it over (None: a null value)."""
Value = str | int | float | bool | None
"""A header or argument value after `normalise`: no bytes."""
Headers = Mapping[str, HeaderValue]
DestinationKind = Literal["topic", "exchange"]
UnroutablePolicy = Literal["drop", "reject"]
ValueClass = Literal["str", "number", "bool", "null"]

DESTINATION_KINDS: frozenset[str] = frozenset(get_args(DestinationKind))
UNROUTABLE_POLICIES: frozenset[str] = frozenset(get_args(UnroutablePolicy))


class ExchangeType(StrEnum):
    """How an exchange picks the bindings a record follows."""

    DIRECT = "direct"
    """The binding key equals the routing key."""
    TOPIC = "topic"
    """The binding key is a pattern of dot-separated words (`*` one, `#` any number)."""
    FANOUT = "fanout"
    """Every binding."""
    HEADERS = "headers"
    """The binding's arguments against the record's headers (`x-match` all / any)."""
    CONTENT = "content"
    """The binding's SQL-like expression over the record's headers is TRUE."""


def normalise(value: HeaderValue) -> Value:
    """`value` with bytes decoded as UTF-8 (invalid sequences replaced)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def value_class(value: Value) -> ValueClass:
    """The class a value compares within; bool first, since a bool is also an int."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "str"


def check_name(name: str, what: str, error: type[Exception]) -> None:
    """Raise `error` unless `name` is a non-empty AMQP short string."""
    if not isinstance(name, str) or not name:
        raise error(f"{what} must be a non-empty string, not {name!r}")
    if len(name) * 4 > NAME_MAX_BYTES and len(name.encode()) > NAME_MAX_BYTES:
        raise error(f"{what} is {len(name.encode())} bytes, at most {NAME_MAX_BYTES} allowed")


@dataclass(frozen=True, slots=True)
class Exchange:
    """A declared exchange. `alternate` names the exchange that receives what this one's
    bindings do not match (it need not exist, as in RabbitMQ: a missing alternate is
    skipped); `unroutable` says what happens to a record for which the whole route finds
    no topic: dropped silently, or the publish is refused (`UnroutableError`)."""

    name: str
    type: ExchangeType
    alternate: str | None = None
    unroutable: UnroutablePolicy = "drop"

    def __post_init__(self) -> None:
        check_name(self.name, "exchange name", InvalidExchangeError)
        try:
            object.__setattr__(self, "type", ExchangeType(self.type))
        except ValueError:
            known = ", ".join(t.value for t in ExchangeType)
            raise InvalidExchangeError(
                f"exchange {self.name!r}: unknown type {self.type!r} (one of {known})"
            ) from None
        if self.alternate is not None:
            check_name(self.alternate, "alternate exchange name", InvalidExchangeError)
        if self.unroutable not in UNROUTABLE_POLICIES:
            raise InvalidExchangeError(
                f"exchange {self.name!r}: unroutable must be 'drop' or 'reject', "
                f"not {self.unroutable!r}"
            )


@dataclass(frozen=True, slots=True, eq=False)
class Binding:
    """A route from `source` to a topic or an exchange; see the module docstring.

    `arguments` is kept as a read-only copy, normalised and sorted by name. Equality and
    hashing compare values by class, so `{"n": 1}` and `{"n": True}` are two bindings (they
    match different records) while `{"n": 1}` and `{"n": 1.0}` are one."""

    source: str
    destination: str
    destination_kind: DestinationKind
    key: str = ""
    arguments: Mapping[str, HeaderValue] = field(default_factory=dict)
    expression: str | None = None
    _identity: tuple[object, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_name(self.source, "binding source", InvalidBindingError)
        check_name(self.destination, "binding destination", InvalidBindingError)
        if self.destination_kind not in DESTINATION_KINDS:
            raise InvalidBindingError(
                f"destination_kind must be 'topic' or 'exchange', not {self.destination_kind!r}"
            )
        _check_key(self.key)
        arguments = _normalised_arguments(self.arguments)
        if self.expression is not None and not isinstance(self.expression, str):
            raise InvalidBindingError(f"expression must be a string, not {self.expression!r}")
        object.__setattr__(self, "arguments", MappingProxyType(arguments))
        typed = tuple((name, value_class(v), v) for name, v in arguments.items())
        identity = (
            self.source,
            self.destination,
            self.destination_kind,
            self.key,
            typed,
            self.expression,
        )
        object.__setattr__(self, "_identity", identity)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Binding):
            return NotImplemented
        return self._identity == other._identity

    def __hash__(self) -> int:
        return hash(self._identity)

    @property
    def to_exchange(self) -> bool:
        """Whether routing continues at another exchange."""
        return self.destination_kind == "exchange"


def _check_key(key: str) -> None:
    if not isinstance(key, str):
        raise InvalidBindingError(f"binding key must be a string, not {key!r}")
    if len(key) * 4 > BINDING_KEY_MAX_BYTES and len(key.encode()) > BINDING_KEY_MAX_BYTES:
        raise InvalidBindingError(
            f"binding key is {len(key.encode())} bytes, at most {BINDING_KEY_MAX_BYTES} allowed"
        )


def _normalised_arguments(arguments: Mapping[str, HeaderValue]) -> dict[str, Value]:
    """Arguments with bytes decoded, sorted by name; raises on what cannot be matched or
    stored as JSON."""
    if not isinstance(arguments, Mapping):
        raise InvalidBindingError(f"binding arguments must be a mapping, not {arguments!r}")
    if len(arguments) > BINDING_ARGUMENTS_MAX:
        raise InvalidBindingError(
            f"binding has {len(arguments)} arguments, at most {BINDING_ARGUMENTS_MAX} allowed"
        )
    result: dict[str, Value] = {}
    for name in sorted(arguments):
        check_name(name, "argument name", InvalidBindingError)
        result[name] = _checked_value(name, normalise(arguments[name]))
    return result


def _checked_value(name: str, value: object) -> Value:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        # NaN equals nothing (the binding could never be found again to unbind), and
        # neither it nor the infinities are JSON.
        if not math.isfinite(value):
            raise InvalidBindingError(f"argument {name!r}: {value} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > ARGUMENT_VALUE_MAX_CHARS:
            raise InvalidBindingError(
                f"argument {name!r} is {len(value)} characters, "
                f"at most {ARGUMENT_VALUE_MAX_CHARS} allowed"
            )
        return value
    raise InvalidBindingError(
        f"argument {name!r}: a value must be a string, bytes, number, boolean or None, "
        f"not {type(value).__name__}"
    )
