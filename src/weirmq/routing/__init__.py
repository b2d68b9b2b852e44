"""Routing: RabbitMQ-style exchanges and bindings, for every protocol, without I/O.

A record published to an exchange (by a Kafka producer writing to the exchange's name, an
AMQP basic.publish, later an HTTP call) is routed here to a set of topics; the broker
appends it to each. The same graph serves every protocol, so an AMQP client can bind a
topic that Kafka producers publish to, and the other way round.

    Router            the graph: declare / delete exchanges, bind / unbind, route
    Exchange          name, type, alternate exchange, unroutable policy (drop or reject)
    Binding           source -> topic or exchange, with a key, arguments or expression
    Route             the topics a record goes to, whether it was unroutable, alternates

Exchange types (matchers.py, one indexed matcher each, none linear in its bindings):
direct (the key equals the binding key), topic (RabbitMQ's patterns with `*` and `#`,
topic.py), fanout (every binding), headers (RabbitMQ's x-match rules over the record's
headers, headers.py) and content (an SQL-92 predicate over the headers, expression.py).
Routing follows `rabbit_exchange:route` (router.py): exchange bindings chain exchanges,
alternate exchanges catch what an exchange's bindings miss, every exchange is visited at
most once per record; routes that depend on the key alone are cached.

Sans I/O: the router is plain state changed by method calls and asked questions; it does
not persist itself (`Router.to_document` / `from_document` give the broker the data to
persist), does not know which topics exist (the broker checks destinations), reads no
clock and starts nothing. Every bound is a named constant in limits.py; every refusal is
a `RoutingError` carrying its Kafka code (errors.py).
"""

from .errors import (
    BindingCycleError,
    ExchangeConflictError,
    ExchangeInUseError,
    ExpressionError,
    InvalidBindingError,
    InvalidExchangeError,
    InvalidRoutingKeyError,
    RoutingError,
    RoutingLimitError,
    UnknownExchangeError,
    UnroutableError,
)
from .expression import Expression
from .model import (
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Headers,
    HeaderValue,
    UnroutablePolicy,
)
from .router import Route, Router, binding_document, binding_from_document

__all__ = [
    "Binding",
    "BindingCycleError",
    "DestinationKind",
    "Exchange",
    "ExchangeConflictError",
    "ExchangeInUseError",
    "ExchangeType",
    "Expression",
    "ExpressionError",
    "HeaderValue",
    "Headers",
    "InvalidBindingError",
    "InvalidExchangeError",
    "InvalidRoutingKeyError",
    "Route",
    "Router",
    "RoutingError",
    "RoutingLimitError",
    "UnknownExchangeError",
    "UnroutableError",
    "UnroutablePolicy",
    "binding_document",
    "binding_from_document",
]
