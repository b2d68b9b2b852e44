"""The operational errors of routing, each with the Kafka code a client is answered.

A definition refused (bad declaration, bad binding, a cycle, a limit) is a configuration
error for Kafka's admin APIs (`invalid_config`, `policy_violation` for limits); an exchange
that does not exist is answered like a topic that does not exist; a record that cannot be
routed when its exchange says so is an invalid record. The AMQP adapter will map the same
classes to its own replies (404 NOT_FOUND, 406 PRECONDITION_FAILED, 312 NO_ROUTE).
"""

from __future__ import annotations

from ..errors import ErrorCode, KafkaError


class RoutingError(KafkaError):
    """A routing request refused; the base of this package's errors."""

    code = ErrorCode.invalid_config


class UnknownExchangeError(RoutingError):
    """No exchange of that name is declared."""

    code = ErrorCode.unknown_topic_or_partition


class ExchangeConflictError(RoutingError):
    """An exchange redeclared with a different definition (RabbitMQ's "inequivalent arg")."""


class ExchangeInUseError(RoutingError):
    """`delete(..., if_unused=True)` of an exchange that is the source of bindings."""


class InvalidExchangeError(RoutingError):
    """An exchange definition that cannot be declared (name, type, policy)."""


class InvalidBindingError(RoutingError):
    """A binding that cannot be made: its key, arguments or expression are invalid."""


class ExpressionError(InvalidBindingError):
    """A content expression that does not parse, or exceeds a limit.

    `position` is the 0-based offset in the text where the problem was found (the length
    of the text when the text ended too early): "expected ')' at 17, found 'AND'"."""

    def __init__(self, message: str, position: int, found: str = "") -> None:
        super().__init__(f"{message} at {position}" + (f", found {found}" if found else ""))
        self.position = position


class BindingCycleError(RoutingError):
    """An exchange-to-exchange binding that would close a cycle."""


class RoutingLimitError(RoutingError):
    """A bound of `limits.py` would be exceeded."""

    code = ErrorCode.policy_violation


class InvalidRoutingKeyError(RoutingError):
    """A routing key longer than `ROUTING_KEY_MAX_BYTES`."""

    code = ErrorCode.invalid_record


class UnroutableError(RoutingError):
    """No destination for a record, and its exchange's policy is to reject it."""

    code = ErrorCode.invalid_record
