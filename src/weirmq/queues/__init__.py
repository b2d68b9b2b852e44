"""Queues: share groups (Kafka's KIP-932) as a sans-I/O engine, for every protocol.

A share group reads a topic-partition like a queue: records are handed to any member,
locked to it until acknowledged, delivered again when released or when the lock times
out, and archived (with a dead-letter intent) when rejected or delivered too often. The
Kafka adapter will serve ShareFetch / ShareAcknowledge from it; AMQP queues (consumer
acks, nack requeue, `x-delivery-limit`) and SQS (receipt handles, visibility timeout,
`RedrivePolicy`) map onto the same engine.

    SharePartition     one topic-partition for one share group (partition.py)
    ShareConfig        lock duration, delivery limit, window, reset, retry backoff
    RecordState        AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED; the table in states.py
    ShareState         the persisted snapshot and deltas (persistence.py)

Sans I/O: the engine reads no clock (every step takes `now_ms`), starts no timer
(`next_deadline()` says when to call `expire`), does not read the log (the broker passes
the offset ranges it read) and writes nothing (each step returns the delta to persist and
the dead letters to produce). Every bound is a named setting of `ShareConfig`, every
refusal a `ShareError` carrying its Kafka code (errors.py).
"""

from .config import ShareConfig
from .errors import (
    InvalidAcknowledgementError,
    InvalidRecordStateError,
    InvalidShareConfigError,
    InvalidShareStateError,
    ShareError,
)
from .partition import (
    AckBatch,
    AckResult,
    AcquiredRange,
    AcquireResult,
    BatchError,
    DeadLetter,
    InFlightRange,
    Outcome,
    PurgeResult,
    SharePartition,
)
from .persistence import PersistedBatch, ShareState
from .states import TRANSITIONS, AckType, DeadLetterReason, Event, RecordState, next_state

__all__ = [
    "TRANSITIONS",
    "AckBatch",
    "AckResult",
    "AckType",
    "AcquireResult",
    "AcquiredRange",
    "BatchError",
    "DeadLetter",
    "DeadLetterReason",
    "Event",
    "InFlightRange",
    "InvalidAcknowledgementError",
    "InvalidRecordStateError",
    "InvalidShareConfigError",
    "InvalidShareStateError",
    "Outcome",
    "PersistedBatch",
    "PurgeResult",
    "RecordState",
    "ShareConfig",
    "ShareError",
    "SharePartition",
    "ShareState",
    "next_state",
]
