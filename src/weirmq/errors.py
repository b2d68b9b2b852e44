"""Kafka error codes, and the base of WeirMQ's operational error tree.

Kafka answers every failed operation with a numeric error code; clients decide from the
code alone whether to retry. We do not keep our own table of codes: kio generates its
`ErrorCode` enum (value and retriable flag) from Kafka's own JSON schemas, so ours cannot
drift from what clients expect.

Operational errors (bad input, unknown topic, full disk) are exceptions that carry their
Kafka code; the layer that answers a request turns them into that code and carries on.
Broken invariants are `assert`s and are never mapped to a code.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """An operational error that maps to one Kafka error code.

    Subclasses set `code`; `retriable` follows Kafka's own classification of that code.
    """

    code: ErrorCode = ErrorCode.unknown_server_error

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)
