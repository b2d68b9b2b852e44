"""The life of one record in a share group: its states and the one table of transitions.

    AVAILABLE ──acquire──▶ ACQUIRED ──accept───────────▶ ACKNOWLEDGED (terminal)
        ▲                   │  │ │
        └──release, lock ───┘  │ └──reject, gap─────────▶ ARCHIVED (terminal)
           timeout (below the  └──release, lock timeout
           delivery limit)        at the delivery limit─▶ ARCHIVED

Every row of `TRANSITIONS` gives two targets: below the delivery limit, and at it (the
record's delivery count has reached `delivery_count_limit`). The count is incremented when
a record is acquired, so a record is delivered at most `delivery_count_limit` times: a
release or a lock timeout of its last delivery archives it instead of making it available
again. Acquiring an AVAILABLE record that is already at the limit (possible only after a
restart under a lowered limit, or after a crash between a delivery and its release)
archives it too, without delivering it. Kafka's own rule (InFlightState.tryUpdateState:
a move to AVAILABLE at `deliveryCount >= maxDeliveryCount` becomes ARCHIVED) is the same.

State ids are Kafka's (RecordState: AVAILABLE 0, ACQUIRED 1, ACKNOWLEDGED 2, ARCHIVED 4;
3 is ARCHIVING, a state of Kafka's own dead-letter queue work that we do not need: our
dead letters are outputs of the step that archives). Acknowledge type ids are those of
ShareAcknowledge (0 gap, 1 accept, 2 release, 3 reject; 4 renew, from KIP-1222, is not
supported yet). A gap acknowledges an offset that holds no record (compacted away, or a
transaction marker): it is archived, and there is nothing to dead-letter.
"""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import Final

from .errors import InvalidRecordStateError


class RecordState(IntEnum):
    """A record's state in its share group (Kafka's RecordState and ids)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        """ACKNOWLEDGED and ARCHIVED records are never delivered again."""
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AckType(IntEnum):
    """How a consumer acknowledges a record (ShareAcknowledge's AcknowledgeTypes ids)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class Event(Enum):
    """What happens to a record."""

    ACQUIRE = "acquire"
    ACCEPT = "accept"
    RELEASE = "release"
    REJECT = "reject"
    GAP = "gap"
    LOCK_TIMEOUT = "lock timeout"
    PURGE = "purge"
    """An available record dropped unread (AMQP's queue.purge): never dead-lettered."""


class DeadLetterReason(Enum):
    """Why a record was archived with a dead-letter intent."""

    REJECTED = "rejected"
    DELIVERY_LIMIT = "delivery_limit"


EVENT_OF_ACK: Final[dict[AckType, Event]] = {
    AckType.GAP: Event.GAP,
    AckType.ACCEPT: Event.ACCEPT,
    AckType.RELEASE: Event.RELEASE,
    AckType.REJECT: Event.REJECT,
}

_AV, _AQ = RecordState.AVAILABLE, RecordState.ACQUIRED
_ACK, _ARC = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED

TRANSITIONS: Final[dict[tuple[RecordState, Event], tuple[RecordState, RecordState]]] = {
    # (from, event):              (below the limit, at the limit)
    (_AV, Event.ACQUIRE): (_AQ, _ARC),
    (_AQ, Event.ACCEPT): (_ACK, _ACK),
    (_AQ, Event.RELEASE): (_AV, _ARC),
    (_AQ, Event.LOCK_TIMEOUT): (_AV, _ARC),
    (_AQ, Event.REJECT): (_ARC, _ARC),
    (_AQ, Event.GAP): (_ARC, _ARC),
    (_AV, Event.PURGE): (_ARC, _ARC),
}
"""The whole state machine; an (state, event) pair missing here is illegal."""


def next_state(state: RecordState, event: Event, at_limit: bool) -> RecordState:
    """The state `event` takes a record to, or `InvalidRecordStateError` naming `state`."""
    targets = TRANSITIONS.get((state, event))
    if targets is None:
        raise InvalidRecordStateError(f"{event.value} of a record in state {state.name}")
    return targets[1] if at_limit else targets[0]


def dead_letter_reason(state: RecordState, event: Event, at_limit: bool) -> DeadLetterReason | None:
    """Why a move from `state` by `event` dead-letters the record, if it does: a reject,
    or the delivery limit turning what would have been a redelivery into archiving."""
    if event is Event.REJECT:
        return DeadLetterReason.REJECTED
    below, at = TRANSITIONS[(state, event)]
    if at_limit and at is RecordState.ARCHIVED and below is not RecordState.ARCHIVED:
        return DeadLetterReason.DELIVERY_LIMIT
    return None
