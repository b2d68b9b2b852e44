"""The headers exchange: RabbitMQ's `x-match` rules, indexed by condition.

A binding's arguments are its conditions; the record's headers are the data. `x-match`
says how the conditions combine (RabbitMQ's four values, `all` when absent):

    all          every condition holds
    any          at least one condition holds
    all-with-x   as all, and arguments named "x-..." are conditions too
    any-with-x   as any, likewise

Under `all` and `any`, arguments whose name starts with "x-" are not conditions (they
configure the binding); `x-match` itself never is. A condition on a name whose argument
value is None holds when the header is present, whatever its value (RabbitMQ's "void"
pattern field); any other condition holds when the header is present with an equal value
(equal within one type class, see `model.value_class`). So `all` with no conditions
matches every record and `any` with none matches no record, as in RabbitMQ. An `x-match`
value other than the four is refused when binding (RabbitMQ refuses it too).

RabbitMQ tries every binding of the exchange against every record. Here each condition is
a key in an index, (name) for presence or (name, class, value) for equality, listing the
bindings that hold it; a record looks up each of its headers, and a binding matches when
it is hit once (`any`) or once per condition (`all`; a header hits a binding at most
once, since a binding has one condition per name). The cost follows the record's headers
and the bindings they hit, not the number of bindings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from .errors import InvalidBindingError
from .model import Binding, HeaderValue, Value, normalise, value_class

X_MATCH: Final = "x-match"
X_PREFIX: Final = "x-"
MODES: Final[Mapping[str, tuple[bool, bool]]] = {
    "all": (True, False),
    "any": (False, False),
    "all-with-x": (True, True),
    "any-with-x": (False, True),
}
"""x-match value -> (every condition must hold, "x-" arguments are conditions)."""

_K = TypeVar("_K")

ValueKey = tuple[str, str, Value]
"""(header name, value class, value): an equality condition, and a header's lookup key."""


@dataclass(frozen=True, slots=True)
class HeadersRule:
    """A binding's arguments compiled: how they combine and what they require."""

    match_all: bool
    present: tuple[str, ...]
    """Names that must be present (argument value None)."""
    equal: tuple[ValueKey, ...]
    """Names that must be present with an equal value."""

    @property
    def conditions(self) -> int:
        return len(self.present) + len(self.equal)

    def matches(self, headers: Mapping[str, Value]) -> bool:
        """This rule against normalised headers, one binding at a time (the reference the
        index agrees with; the index is what routing uses)."""
        held = sum(name in headers for name in self.present)
        held += sum(
            key[0] in headers and _key(key[0], headers[key[0]]) == key for key in self.equal
        )
        return held == self.conditions if self.match_all else held > 0


def compile_rule(arguments: Mapping[str, HeaderValue]) -> HeadersRule:
    """A binding's `arguments` as a rule; raises `InvalidBindingError` for an x-match that
    is not one of RabbitMQ's four."""
    mode = normalise(arguments.get(X_MATCH, "all"))
    if not isinstance(mode, str) or mode not in MODES:
        raise InvalidBindingError(
            f"invalid x-match value {mode!r}; expected all, any, all-with-x or any-with-x"
        )
    match_all, with_x = MODES[mode]
    present: list[str] = []
    equal: list[ValueKey] = []
    for name, raw in arguments.items():
        value = normalise(raw)
        if name == X_MATCH or (name.startswith(X_PREFIX) and not with_x):
            continue
        if value is None:
            present.append(name)
        else:
            equal.append(_key(name, value))
    return HeadersRule(match_all, tuple(present), tuple(equal))


def _key(name: str, value: Value) -> ValueKey:
    # 1 and 1.0 are equal and hash alike, so numbers need no conversion; the class keeps
    # True apart from 1 and "1" apart from 1.
    return (name, value_class(value), value)


class HeadersIndex:
    """The bindings of one headers exchange; see the module docstring."""

    __slots__ = ("_always", "_by_presence", "_by_value", "_rules")

    def __init__(self) -> None:
        self._rules: dict[Binding, HeadersRule] = {}
        self._always: dict[Binding, None] = {}  # `all` with no conditions
        self._by_presence: dict[str, dict[Binding, None]] = {}
        self._by_value: dict[ValueKey, dict[Binding, None]] = {}

    def add(self, binding: Binding, rule: HeadersRule) -> None:
        self._rules[binding] = rule
        if rule.match_all and not rule.conditions:
            self._always[binding] = None
        for name in rule.present:
            self._by_presence.setdefault(name, {})[binding] = None
        for key in rule.equal:
            self._by_value.setdefault(key, {})[binding] = None

    def remove(self, binding: Binding) -> None:
        rule = self._rules.pop(binding, None)
        if rule is None:
            return
        self._always.pop(binding, None)
        for name in rule.present:
            _discard(self._by_presence, name, binding)
        for key in rule.equal:
            _discard(self._by_value, key, binding)

    def match(self, headers: Mapping[str, Value]) -> Iterable[Binding]:
        """The bindings whose rule holds for the normalised `headers`."""
        matched = dict(self._always)
        hits: dict[Binding, int] = {}
        for name, value in headers.items():
            found = self._by_presence.get(name)
            if found:
                _hit(found, self._rules, matched, hits)
            if value is not None:
                found = self._by_value.get(_key(name, value))
                if found:
                    _hit(found, self._rules, matched, hits)
        for binding, count in hits.items():
            if count == self._rules[binding].conditions:
                matched[binding] = None
        return matched.keys()


def _hit(
    found: Mapping[Binding, None],
    rules: Mapping[Binding, HeadersRule],
    matched: dict[Binding, None],
    hits: dict[Binding, int],
) -> None:
    for binding in found:
        if rules[binding].match_all:
            hits[binding] = hits.get(binding, 0) + 1
        else:
            matched[binding] = None


def _discard(index: dict[_K, dict[Binding, None]], key: _K, binding: Binding) -> None:
    bindings = index.get(key)
    if bindings is not None:
        bindings.pop(binding, None)
        if not bindings:
            del index[key]
