"""The exchange graph: declarations, bindings, and routing a record through them.

`Router` is plain in-memory state; the broker persists it (`to_document` and
`from_document` give and take plain JSON data) and replays it on start.

Routing
-------
As RabbitMQ's `rabbit_exchange:route`: a worklist of exchanges starting at the one the
record was published to. Each exchange matches the record against its own bindings;
a binding to a topic adds the topic to the result, a binding to an exchange puts that
exchange on the worklist. An exchange whose own bindings matched nothing (not even an
exchange binding) passes the record to its alternate exchange, if it has one and it
exists. Every exchange is visited at most once per record, so a diamond (A -> B -> T and
A -> C -> T) delivers once to T and an alternate that points back is harmless. The result
is a set of topics; when it is empty the record is unroutable, and the *entry* exchange's
policy says whether it is dropped or the publish refused (`Route.rejected`).

Bindings between exchanges may not form a cycle: `bind` refuses the one that would
close it (RabbitMQ allows cycles and relies on the visited set; refusing them keeps the
graph a DAG that a reader can draw, and costs one walk of the graph per exchange binding).
Alternates are not edges of that graph: the visited set bounds them.

The route cache
---------------
A route through direct, topic and fanout exchanges only depends on the routing key, so
the router remembers it: (exchange, key) -> `Route`, least recently used evicted past
`ROUTE_CACHE_ENTRIES`, keys longer than `ROUTE_CACHE_KEY_MAX_CHARS` not remembered.
A route that visits a headers or content exchange depends on the headers and is never
cached. Every change to the graph (declare, delete, bind, unbind that changed something)
empties the cache and bumps `generation`, so a route changes right after a bind.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, cast

from .errors import (
    BindingCycleError,
    ExchangeConflictError,
    ExchangeInUseError,
    InvalidRoutingKeyError,
    RoutingLimitError,
    UnknownExchangeError,
    UnroutableError,
)
from .limits import (
    BINDINGS_PER_EXCHANGE_MAX,
    EXCHANGES_MAX,
    ROUTE_CACHE_ENTRIES,
    ROUTE_CACHE_KEY_MAX_CHARS,
    ROUTING_KEY_MAX_BYTES,
)
from .matchers import MATCHERS, Matcher, Message
from .model import (
    DESTINATION_KINDS,
    UNROUTABLE_POLICIES,
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Headers,
    HeaderValue,
    UnroutablePolicy,
)

DOCUMENT_VERSION: Final = 1
_NO_HEADERS: Final[Headers] = {}


@dataclass(frozen=True, slots=True)
class Route:
    """Where one record goes, and what the caller needs to know about it."""

    exchange: str
    """The entry exchange."""
    topics: frozenset[str]
    """The destination topics, each once."""
    policy: UnroutablePolicy
    """The entry exchange's policy when `topics` is empty."""
    alternates_used: tuple[str, ...] = ()
    """Alternate exchanges the record was passed to, in the order they were visited."""
    visited: tuple[str, ...] = ()
    """Every exchange visited, in order (the entry exchange first)."""

    @property
    def unroutable(self) -> bool:
        """No destination at all."""
        return not self.topics

    @property
    def rejected(self) -> bool:
        """Unroutable, and the entry exchange refuses such records."""
        return not self.topics and self.policy == "reject"

    def raise_if_rejected(self) -> None:
        """Raise `UnroutableError` when `rejected`."""
        if self.rejected:
            raise UnroutableError(f"no route from exchange {self.exchange!r} for this record")


class _Vertex:
    """One declared exchange, its matcher and its edges."""

    __slots__ = ("exchange", "inbound", "matcher", "outbound", "targets")

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.matcher: Matcher = MATCHERS[exchange.type]()
        self.outbound: dict[Binding, None] = {}  # bindings from here, in binding order
        self.inbound: dict[Binding, None] = {}  # exchange bindings to here
        self.targets: Counter[str] = Counter()  # exchange destinations -> bindings to each


class Router:
    """The exchanges and bindings of one broker; see the module docstring."""

    def __init__(self) -> None:
        self._vertices: dict[str, _Vertex] = {}
        self._cache: OrderedDict[tuple[str, str], Route] = OrderedDict()
        self._generation = 0

    @property
    def generation(self) -> int:
        """Bumped by every change to the graph."""
        return self._generation

    # -- definitions ----------------------------------------------------------------------

    def declare(self, exchange: Exchange) -> bool:
        """Declare `exchange`; True if it is new, False if an equal one exists. A
        different declaration of an existing name raises `ExchangeConflictError`."""
        current = self._vertices.get(exchange.name)
        if current is not None:
            _assert_equivalent(current.exchange, exchange)
            return False
        if len(self._vertices) >= EXCHANGES_MAX:
            raise RoutingLimitError(
                f"cannot declare exchange {exchange.name!r}: "
                f"the limit of {EXCHANGES_MAX} exchanges is reached"
            )
        self._vertices[exchange.name] = _Vertex(exchange)
        self._changed()
        return True

    def redefine(self, exchange: Exchange) -> None:
        """Change an existing exchange's alternate and unroutable policy, keeping its
        bindings (the broker's topic configs can change them; a declare cannot). Its type
        never changes: `ExchangeConflictError`."""
        vertex = self._vertex(exchange.name)
        if vertex.exchange.type != exchange.type:
            raise ExchangeConflictError(
                f"exchange {exchange.name!r} is of type '{vertex.exchange.type}'; "
                f"its type cannot change to '{exchange.type}'"
            )
        if vertex.exchange != exchange:
            vertex.exchange = exchange
            self._changed()

    def delete(self, name: str, if_unused: bool = False) -> tuple[Binding, ...]:
        """Delete exchange `name` and every binding from or to it; returns those bindings.
        With `if_unused`, an exchange that is the source of bindings is kept and
        `ExchangeInUseError` raised (RabbitMQ's rule: bindings *to* it do not count).
        Exchanges naming it as their alternate keep the name, as in RabbitMQ."""
        vertex = self._vertex(name)
        if if_unused and vertex.outbound:
            raise ExchangeInUseError(
                f"exchange {name!r} is in use: it is the source of {len(vertex.outbound)} bindings"
            )
        removed = (*vertex.outbound, *vertex.inbound)
        for binding in removed:
            self._remove(binding)
        del self._vertices[name]
        self._changed()
        return removed

    def bind(self, binding: Binding) -> bool:
        """Make `binding`; True if it is new, False if it already exists.

        The source must exist, and the destination too when it is an exchange (topics are
        the broker's to check). Raises `InvalidBindingError` for what the source's type
        cannot match on, `BindingCycleError` for an exchange binding that closes a cycle,
        `RoutingLimitError` past `BINDINGS_PER_EXCHANGE_MAX`."""
        source = self._vertex(binding.source)
        target = self._vertex(binding.destination) if binding.to_exchange else None
        if binding in source.outbound:
            return False
        if len(source.outbound) >= BINDINGS_PER_EXCHANGE_MAX:
            raise RoutingLimitError(
                f"exchange {binding.source!r} has {len(source.outbound)} bindings, "
                f"the limit is {BINDINGS_PER_EXCHANGE_MAX}"
            )
        if target is not None and self._reaches(binding.destination, binding.source):
            raise BindingCycleError(
                f"binding exchange {binding.source!r} to {binding.destination!r} would close "
                f"a cycle: {binding.source!r} is reachable from {binding.destination!r}"
            )
        source.matcher.add(binding)  # validates first, so a refusal changes nothing
        source.outbound[binding] = None
        if target is not None:
            target.inbound[binding] = None
            source.targets[binding.destination] += 1
        self._changed()
        return True

    def unbind(self, binding: Binding) -> bool:
        """Remove `binding`; True if it existed. The source must exist."""
        if binding not in self._vertex(binding.source).outbound:
            return False
        self._remove(binding)
        self._changed()
        return True

    def exchange(self, name: str) -> Exchange:
        """The exchange declared as `name`; `UnknownExchangeError` if there is none."""
        return self._vertex(name).exchange

    def __contains__(self, name: object) -> bool:
        return name in self._vertices

    def exchanges(self) -> tuple[Exchange, ...]:
        """Every exchange, in declaration order."""
        return tuple(vertex.exchange for vertex in self._vertices.values())

    def bindings(self, source: str | None = None) -> tuple[Binding, ...]:
        """The bindings from `source`, in binding order; when None, every binding, by
        source in declaration order."""
        if source is not None:
            return tuple(self._vertex(source).outbound)
        return tuple(b for vertex in self._vertices.values() for b in vertex.outbound)

    # -- routing --------------------------------------------------------------------------

    def route(
        self, exchange: str, routing_key: str, headers: Mapping[str, HeaderValue] = _NO_HEADERS
    ) -> Route:
        """Where a record published to `exchange` goes; see the module docstring.
        Raises `UnknownExchangeError`, and `InvalidRoutingKeyError` for a key longer than
        `ROUTING_KEY_MAX_BYTES`."""
        entry = self._vertex(exchange)
        _check_routing_key(routing_key)
        cache_key = (exchange, routing_key)
        cached = self._cache.get(cache_key)
        if cached is not None:
            self._cache.move_to_end(cache_key)
            return cached
        route, key_only = self._walk(entry, Message(routing_key, headers))
        if key_only and len(routing_key) <= ROUTE_CACHE_KEY_MAX_CHARS:
            self._cache[cache_key] = route
            if len(self._cache) > ROUTE_CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return route

    def _walk(self, entry: _Vertex, message: Message) -> tuple[Route, bool]:
        """The route from `entry`, and whether it depended on the routing key alone."""
        topics: set[str] = set()
        alternates: list[str] = []
        visited: list[str] = []
        seen = {entry.exchange.name}
        pending = deque((entry,))
        key_only = True
        while pending:
            vertex = pending.popleft()
            visited.append(vertex.exchange.name)
            key_only = key_only and vertex.matcher.key_only
            matched = False
            for binding in vertex.matcher.match(message):
                matched = True
                if not binding.to_exchange:
                    topics.add(binding.destination)
                elif binding.destination not in seen:
                    seen.add(binding.destination)
                    pending.append(self._vertices[binding.destination])
            alternate = vertex.exchange.alternate
            if matched or alternate is None or alternate in seen:
                continue
            next_vertex = self._vertices.get(alternate)
            if next_vertex is not None:  # a missing alternate is skipped, as in RabbitMQ
                seen.add(alternate)
                alternates.append(alternate)
                pending.append(next_vertex)
        route = Route(
            entry.exchange.name,
            frozenset(topics),
            entry.exchange.unroutable,
            tuple(alternates),
            tuple(visited),
        )
        return route, key_only

    # -- persistence ----------------------------------------------------------------------

    def to_document(self) -> dict[str, object]:
        """Every definition as plain JSON data (`from_document` reads it back)."""
        return {
            "version": DOCUMENT_VERSION,
            "exchanges": [_exchange_document(x) for x in self.exchanges()],
            "bindings": [binding_document(b) for b in self.bindings()],
        }

    @classmethod
    def from_document(cls, document: Mapping[str, object]) -> Router:
        """A router with the definitions of `document`. Every definition is checked as
        if declared and bound anew (routing errors); a document that is not one of ours
        raises ValueError."""
        if document.get("version") != DOCUMENT_VERSION:
            raise ValueError(f"unknown routing document version {document.get('version')!r}")
        router = cls()
        for entry in _entries(document, "exchanges"):
            router.declare(_exchange_from(entry))
        for entry in _entries(document, "bindings"):
            router.bind(binding_from_document(entry))
        return router

    # -- internals ------------------------------------------------------------------------

    def _vertex(self, name: str) -> _Vertex:
        vertex = self._vertices.get(name)
        if vertex is None:
            raise UnknownExchangeError(f"no exchange {name!r}")
        return vertex

    def _remove(self, binding: Binding) -> None:
        source = self._vertices[binding.source]
        source.matcher.remove(binding)
        del source.outbound[binding]
        if binding.to_exchange:
            del self._vertices[binding.destination].inbound[binding]
            source.targets[binding.destination] -= 1
            if not source.targets[binding.destination]:
                del source.targets[binding.destination]

    def _reaches(self, start: str, goal: str) -> bool:
        """Whether exchange bindings lead from `start` to `goal` (or they are the same)."""
        seen = {start}
        pending = [start]
        while pending:
            name = pending.pop()
            if name == goal:
                return True
            for target in self._vertices[name].targets:
                if target not in seen:
                    seen.add(target)
                    pending.append(target)
        return False

    def _changed(self) -> None:
        self._generation += 1
        self._cache.clear()


def _check_routing_key(key: str) -> None:
    # Characters take 1 to 4 bytes: count bytes only for a key that might be too long.
    if len(key) * 4 > ROUTING_KEY_MAX_BYTES and len(key.encode()) > ROUTING_KEY_MAX_BYTES:
        raise InvalidRoutingKeyError(
            f"routing key is {len(key.encode())} bytes, at most {ROUTING_KEY_MAX_BYTES} allowed"
        )


def _assert_equivalent(current: Exchange, requested: Exchange) -> None:
    """RabbitMQ's "inequivalent arg" check: the first field that differs, both values."""
    for field in ("type", "alternate", "unroutable"):
        was, now = getattr(current, field), getattr(requested, field)
        if was != now:
            raise ExchangeConflictError(
                f"inequivalent arg {field!r} for exchange {current.name!r}: "
                f"received {_shown(now)} but current is {_shown(was)}"
            )


def _shown(value: object) -> str:
    return "none" if value is None else f"'{value}'"


def _exchange_document(exchange: Exchange) -> dict[str, object]:
    return {
        "name": exchange.name,
        "type": exchange.type.value,
        "alternate": exchange.alternate,
        "unroutable": exchange.unroutable,
    }


def binding_document(binding: Binding) -> dict[str, object]:
    """`binding` as plain JSON data (`binding_from_document` reads it back)."""
    return {
        "source": binding.source,
        "destination": binding.destination,
        "destination_kind": binding.destination_kind,
        "key": binding.key,
        "arguments": dict(binding.arguments),
        "expression": binding.expression,
    }


def _entries(document: Mapping[str, object], name: str) -> Iterable[Mapping[str, object]]:
    entries = document.get(name, [])
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise ValueError(f"routing document: {name!r} must be a list of objects")
    return entries


def _exchange_from(entry: Mapping[str, object]) -> Exchange:
    kind = _text(entry, "type")
    if kind not in set(ExchangeType):
        raise ValueError(f"routing document: unknown exchange type {kind!r}")
    unroutable = _text(entry, "unroutable", "drop")
    if unroutable not in UNROUTABLE_POLICIES:
        raise ValueError(f"routing document: unknown unroutable policy {unroutable!r}")
    return Exchange(
        _text(entry, "name"),
        ExchangeType(kind),
        _optional_text(entry, "alternate"),
        cast(UnroutablePolicy, unroutable),
    )


def binding_from_document(entry: Mapping[str, object]) -> Binding:
    """The binding `binding_document` wrote; ValueError or a routing error if malformed."""
    kind = _text(entry, "destination_kind")
    if kind not in DESTINATION_KINDS:
        raise ValueError(f"routing document: unknown destination kind {kind!r}")
    arguments = entry.get("arguments", {})
    if not isinstance(arguments, Mapping):
        raise ValueError(f"routing document: 'arguments' must be an object, not {arguments!r}")
    return Binding(
        _text(entry, "source"),
        _text(entry, "destination"),
        cast(DestinationKind, kind),
        _text(entry, "key", ""),
        arguments,
        _optional_text(entry, "expression"),
    )


def _text(entry: Mapping[str, object], name: str, default: str | None = None) -> str:
    value = entry.get(name, default)
    if not isinstance(value, str):
        raise ValueError(f"routing document: {name!r} must be a string, not {value!r}")
    return value


def _optional_text(entry: Mapping[str, object], name: str) -> str | None:
    value = entry.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"routing document: {name!r} must be a string or null, not {value!r}")
    return value
