"""One matcher per exchange type: the bindings of one exchange, indexed for routing.

A matcher is told of each binding made or removed on its exchange and answers, for one
record, the bindings it matches. `add` validates the binding for its type before it
changes anything (so a refused binding leaves no trace) and raises `InvalidBindingError`.
None of them tries the bindings one by one:

    direct    a dict from key to bindings: one lookup
    topic     RabbitMQ's word trie (topic.py): linear in the key's words
    fanout    every binding (the answer is all of them)
    headers   an index from each condition to the bindings holding it (headers.py)
    content   each binding's compiled expression, indexed under header names one of which
              is present whenever it is TRUE (expression.anchors); a record is tested
              against the bindings indexed under the headers it has, plus those with none

`key_only` says whether the answer depends on the routing key alone, which lets the
router cache whole routes through direct, topic and fanout exchanges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar, Protocol

from .errors import InvalidBindingError
from .expression import Expression
from .headers import HeadersIndex, compile_rule
from .model import Binding, ExchangeType, Headers, Value, normalise
from .topic import TopicTrie, split_words


class Message:
    """A record as the matchers see it; its key's words and its normalised headers are
    worked out once per route, and only if an exchange on the route asks for them."""

    __slots__ = ("_headers", "_raw_headers", "_words", "key")

    def __init__(self, key: str, headers: Headers) -> None:
        self.key = key
        self._raw_headers = headers
        self._words: list[str] | None = None
        self._headers: Mapping[str, Value] | None = None

    @property
    def words(self) -> list[str]:
        if self._words is None:
            self._words = split_words(self.key)
        return self._words

    @property
    def headers(self) -> Mapping[str, Value]:
        if self._headers is None:
            self._headers = {name: normalise(v) for name, v in self._raw_headers.items()}
        return self._headers


class Matcher(Protocol):
    """What the router asks of an exchange type; see the module docstring."""

    key_only: ClassVar[bool]

    def add(self, binding: Binding) -> None: ...

    def remove(self, binding: Binding) -> None: ...

    def match(self, message: Message) -> Iterable[Binding]: ...


def _refuse_expression(binding: Binding, kind: str) -> None:
    if binding.expression is not None:
        raise InvalidBindingError(
            f"binding to {binding.destination!r}: only content exchanges take an expression, "
            f"{binding.source!r} is a {kind} exchange"
        )


class DirectMatcher:
    """Exact routing keys."""

    key_only: ClassVar[bool] = True

    def __init__(self) -> None:
        self._by_key: dict[str, dict[Binding, None]] = {}

    def add(self, binding: Binding) -> None:
        _refuse_expression(binding, "direct")
        self._by_key.setdefault(binding.key, {})[binding] = None

    def remove(self, binding: Binding) -> None:
        bindings = self._by_key.get(binding.key)
        if bindings is not None:
            bindings.pop(binding, None)
            if not bindings:
                del self._by_key[binding.key]

    def match(self, message: Message) -> Iterable[Binding]:
        return self._by_key.get(message.key, {}).keys()


class TopicMatcher:
    """Topic patterns (topic.py)."""

    key_only: ClassVar[bool] = True

    def __init__(self) -> None:
        self._trie = TopicTrie()

    def add(self, binding: Binding) -> None:
        _refuse_expression(binding, "topic")
        self._trie.add(binding)

    def remove(self, binding: Binding) -> None:
        self._trie.remove(binding)

    def match(self, message: Message) -> Iterable[Binding]:
        return self._trie.match(message.words)


class FanoutMatcher:
    """Every binding; keys and arguments are ignored (but tell bindings apart)."""

    key_only: ClassVar[bool] = True

    def __init__(self) -> None:
        self._bindings: dict[Binding, None] = {}

    def add(self, binding: Binding) -> None:
        _refuse_expression(binding, "fanout")
        self._bindings[binding] = None

    def remove(self, binding: Binding) -> None:
        self._bindings.pop(binding, None)

    def match(self, message: Message) -> Iterable[Binding]:
        return self._bindings.keys()


class HeadersMatcher:
    """x-match rules over headers (headers.py); the routing key is ignored."""

    key_only: ClassVar[bool] = False

    def __init__(self) -> None:
        self._index = HeadersIndex()

    def add(self, binding: Binding) -> None:
        _refuse_expression(binding, "headers")
        self._index.add(binding, compile_rule(binding.arguments))

    def remove(self, binding: Binding) -> None:
        self._index.remove(binding)

    def match(self, message: Message) -> Iterable[Binding]:
        return self._index.match(message.headers)


class ContentMatcher:
    """Expressions over headers (expression.py); the routing key is ignored."""

    key_only: ClassVar[bool] = False

    def __init__(self) -> None:
        self._expressions: dict[Binding, Expression] = {}
        self._anchored: dict[str, dict[Binding, None]] = {}
        self._unanchored: dict[Binding, None] = {}

    def add(self, binding: Binding) -> None:
        if binding.expression is None:
            raise InvalidBindingError(
                f"binding to {binding.destination!r}: content exchange {binding.source!r} "
                "needs an expression"
            )
        expression = Expression(binding.expression)
        self._expressions[binding] = expression
        if not expression.anchors:
            self._unanchored[binding] = None
        for name in expression.anchors:
            self._anchored.setdefault(name, {})[binding] = None

    def remove(self, binding: Binding) -> None:
        expression = self._expressions.pop(binding, None)
        if expression is None:
            return
        self._unanchored.pop(binding, None)
        for name in expression.anchors:
            bindings = self._anchored[name]
            del bindings[binding]
            if not bindings:
                del self._anchored[name]

    def match(self, message: Message) -> Iterable[Binding]:
        headers = message.headers
        candidates = dict(self._unanchored)
        # Walk whichever of the record's headers and the anchor names is shorter.
        if len(headers) <= len(self._anchored):
            for name, value in headers.items():
                found = self._anchored.get(name) if value is not None else None
                if found:
                    candidates.update(found)
        else:
            for name, found in self._anchored.items():
                if headers.get(name) is not None:
                    candidates.update(found)
        return [b for b in candidates if self._expressions[b].matches(headers)]


MATCHERS: Mapping[ExchangeType, type[Matcher]] = {
    ExchangeType.DIRECT: DirectMatcher,
    ExchangeType.TOPIC: TopicMatcher,
    ExchangeType.FANOUT: FanoutMatcher,
    ExchangeType.HEADERS: HeadersMatcher,
    ExchangeType.CONTENT: ContentMatcher,
}
"""The matcher class of each exchange type."""
