"""A transactional id's state, and which state may follow which.

The states and their numbers are Kafka's (`TransactionState`), as the log stores them::

    state                 may follow                                   means
    EMPTY                 EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT       an id with no
                                                                       transaction open
    ONGOING               EMPTY, ONGOING, COMPLETE_COMMIT,             partitions or groups
                          COMPLETE_ABORT                               were added
    PREPARE_COMMIT        ONGOING                                      EndTxn(commit) logged;
                                                                       markers being written
    PREPARE_ABORT         ONGOING                                      EndTxn(abort), a
                                                                       timeout or a fence
    COMPLETE_COMMIT       PREPARE_COMMIT                               every marker durable
    COMPLETE_ABORT        PREPARE_ABORT                                every marker durable
    DEAD                  EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT       the id expired
    PREPARE_EPOCH_FENCE   (never here)                                 Kafka's in-memory step
                                                                       before a fencing abort

A fencing abort (InitProducerId while a transaction is open, or a transaction that
outlived its timeout) is logged here in one step, ONGOING to PREPARE_ABORT with the epoch
already bumped: with one node there is no other broker to race, so Kafka's intermediate
PREPARE_EPOCH_FENCE is never needed, and the number stays reserved for it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..types import TopicPartition


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


_S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.EMPTY, _S.ONGOING, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset(),
}
"""The table of the module docstring: the states each state may follow."""

PREPARING = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
"""Markers are being written: requests get CONCURRENT_TRANSACTIONS until complete."""
OPEN_FOR_NEW = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
"""No transaction open: the next AddPartitions/AddOffsets starts one."""


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """An offset TxnOffsetCommit gave, committed to its group when the transaction
    commits."""

    offset: int
    leader_epoch: int
    metadata: str


@dataclass(slots=True)
class TxnMetadata:
    """One transactional id's state (fields as Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int
    """The producer id before the last bump when that bump changed it (epoch exhaustion),
    else -1 (the bump kept `producer_id`)."""
    last_producer_epoch: int
    """The epoch the last bump was made from, else -1: a retried InitProducerId names it.
    -1 after a new producer instance's InitProducerId, so no fenced producer can claim
    that bump as its own."""
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: dict[str, dict[TopicPartition, PendingOffset]] = field(default_factory=dict)
    start_ms: int = -1
    """When the open transaction began (-1 when none is open)."""
    last_update_ms: int = -1

    def copy(self) -> TxnMetadata:
        return TxnMetadata(
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_id,
            self.last_producer_epoch,
            self.timeout_ms,
            self.state,
            set(self.partitions),
            {group: dict(offsets) for group, offsets in self.groups.items()},
            self.start_ms,
            self.last_update_ms,
        )

    def move(self, state: TxnState, now_ms: int) -> None:
        """Change state, as the table allows; a disallowed move is a broker bug."""
        assert self.state in VALID_PREVIOUS[state], (
            f"transaction {self.transactional_id!r}: {self.state.name} -> {state.name}"
        )
        self.state = state
        self.last_update_ms = now_ms
