"""The transaction coordinator (KIP-98, KIP-360, KIP-890 part 1), sans I/O.

One broker coordinates every transactional id (FindCoordinator key type 1 names it). Each
request is decided here against the id's state (`state.TxnMetadata`, moves as
`state.VALID_PREVIOUS` allows) and returns what the broker must do: the new state to log
before answering, and for EndTxn the partitions to write markers to. Nothing here waits;
`broker/txn_service.py` does the I/O in this order, which is what makes a crash in any
phase recoverable:

    1. log the new state (PREPARE_COMMIT / PREPARE_ABORT for an end) and wait for its fsync
       (AddPartitionsToTxn's need not wait: the service explains why);
    2. write a marker to each partition of the transaction, and commit the pending
       offsets to their groups; wait for all of them to be durable;
    3. log COMPLETE_COMMIT / COMPLETE_ABORT.

After a crash the log is replayed (`replay`); an id left in PREPARE_* has its markers
written again (`pending_completions`), which is harmless where one was already written: a
partition writes a marker only for a producer it has an open transaction of.

Requests are checked as Kafka checks them (TransactionCoordinator.scala):

    request           unknown id                wrong producer id          old epoch
    InitProducerId    new id, epoch 0           PRODUCER_FENCED (KIP-360)  PRODUCER_FENCED
    AddPartitions     INVALID_PRODUCER_ID_MAPPING  INVALID_PRODUCER_ID_MAPPING  PRODUCER_FENCED
    AddOffsets        (as AddPartitions)
    TxnOffsetCommit   (as AddPartitions)
    EndTxn            (as AddPartitions)

and while markers are written (PREPARE_*) every request but a retried EndTxn of the same
outcome gets CONCURRENT_TRANSACTIONS, which clients retry (the service holds most of them
back until the end is complete instead). After a crash, writes of the id's current
producer that its state does not cover fence the whole transaction (`fence_lost`).
Adapters map PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for request versions that predate
it.

Epochs: InitProducerId bumps the epoch of an existing id (fencing its previous producer);
a fencing abort (InitProducerId while a transaction is open, or the transaction timeout)
bumps it too, so the old producer's next request is fenced. Past `EPOCH_MAX - 1` an
InitProducerId gives the id a new producer id at epoch 0, as Kafka does; a fencing abort
never changes the producer id (its markers must name the one the partitions know).

KIP-360 retries: a producer that asks again with the (producer id, epoch) its last bump
was made from, having missed the answer, gets the bumped pair again without a new bump
(`_previous`). Only a producer's own bump, or a fencing abort of its transaction, leaves
that pair; a new instance's InitProducerId (no producer id given) clears it, so a fenced
zombie cannot take its successor's epoch.

Bounds: at most `Limits.max_ids` transactional ids (a new one past it gets
COORDINATOR_NOT_AVAILABLE, retriable, until ids expire), `max_partitions` partitions and
`max_offsets` pending offsets per transaction, timeouts up to `max_timeout_ms`
(`transaction.max.timeout.ms`); ids idle for `id_expiration_ms`
(`transactional.id.expiration.ms`) with no transaction open are forgotten.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from ..errors import ErrorCode
from ..types import TopicPartition
from .state import OPEN_FOR_NEW, PREPARING, PendingOffset, TxnMetadata, TxnState

EPOCH_MAX = 2**15 - 1
NO_PRODUCER_ID = -1
NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class Limits:
    max_timeout_ms: int = 900_000
    """Kafka's transaction.max.timeout.ms."""
    id_expiration_ms: int = 604_800_000
    """Kafka's transactional.id.expiration.ms (7 days)."""
    max_ids: int = 100_000
    max_partitions: int = 10_000
    max_offsets: int = 10_000


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    log: TxnMetadata | None = None
    """The state to log before answering."""
    abort: TxnMetadata | None = None
    """An open transaction being fenced: log this PREPARE_ABORT and complete it (the
    client is answered CONCURRENT_TRANSACTIONS and asks again)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to a request that may change state: its error and what to log."""

    error: ErrorCode
    log: TxnMetadata | None = None


@dataclass(frozen=True, slots=True)
class EndResult:
    error: ErrorCode
    prepare: TxnMetadata | None = None
    """PREPARE_COMMIT or PREPARE_ABORT to log, then complete (None: answer `error` now)."""


class TransactionCoordinator:
    """Every transactional id's state; see the module docstring."""

    def __init__(self, limits: Limits, allocate_producer_id: Callable[[], int]) -> None:
        self.limits = limits
        self._allocate = allocate_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        self._by_producer: dict[int, str] = {}

    # --- recovery -------------------------------------------------------------------------

    def replay(self, transactional_id: str, meta: TxnMetadata | None) -> None:
        """Apply one record of the log, in log order, without checks."""
        self._forget(transactional_id)
        if meta is not None and meta.state is not TxnState.DEAD:
            self._put(meta)

    def pending_completions(self) -> list[TxnMetadata]:
        """Ids whose markers may not all be written (PREPARE_* in the log)."""
        return [meta.copy() for meta in self.txns.values() if meta.state in PREPARING]

    # --- requests -------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_pid: int,
        expected_epoch: int,
        now_ms: int,
    ) -> InitResult:
        if not 1 <= timeout_ms <= self.limits.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        if (expected_pid == NO_PRODUCER_ID) != (expected_epoch == NO_EPOCH):
            return InitResult(ErrorCode.invalid_request)  # both or neither, as Kafka asks
        current = self.txns.get(transactional_id)
        if current is None:
            if expected_pid != NO_PRODUCER_ID:
                return InitResult(ErrorCode.invalid_producer_id_mapping)
            if len(self.txns) >= self.limits.max_ids:
                return InitResult(ErrorCode.coordinator_not_available)
            meta = TxnMetadata(
                transactional_id,
                self._allocate(),
                0,
                NO_PRODUCER_ID,
                NO_EPOCH,
                timeout_ms,
                TxnState.EMPTY,
                last_update_ms=now_ms,
            )
            return InitResult(ErrorCode.none, meta.producer_id, 0, log=meta)
        if current.state in PREPARING:
            return InitResult(ErrorCode.concurrent_transactions)
        if expected_pid != NO_PRODUCER_ID:
            asked = (expected_pid, expected_epoch)
            retry = current.state is not TxnState.ONGOING and asked == _previous(current)
            if retry:  # the bump this names was made: answer what it gave
                return InitResult(ErrorCode.none, current.producer_id, current.producer_epoch)
            if asked != (current.producer_id, current.producer_epoch):
                return InitResult(ErrorCode.producer_fenced)
        if current.state is TxnState.ONGOING:
            return InitResult(ErrorCode.concurrent_transactions, abort=self._fence(current, now_ms))
        meta = current.copy()
        self._bump(meta)
        if expected_pid == NO_PRODUCER_ID:
            # A new producer instance: nobody may later claim this bump as its own retry
            # (a fenced zombie naming the epoch it had would otherwise be handed the new
            # one), so no previous epoch is kept, as Kafka does.
            meta.last_producer_id = NO_PRODUCER_ID
            meta.last_producer_epoch = NO_EPOCH
        meta.timeout_ms = timeout_ms
        meta.move(TxnState.EMPTY, now_ms)
        meta.partitions.clear()
        meta.groups.clear()
        meta.start_ms = -1
        return InitResult(ErrorCode.none, meta.producer_id, meta.producer_epoch, log=meta)

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Outcome:
        """Add partitions (already checked to exist) to the open transaction."""
        wanted = {TopicPartition(*tp) for tp in partitions}
        current, error = self._check_producer(transactional_id, producer_id, epoch)
        if current is None:
            return Outcome(error)
        if not wanted or (wanted <= current.partitions and current.state is TxnState.ONGOING):
            # Nothing new: nothing to log (and an empty request opens no transaction,
            # which would be ONGOING with nothing to mark at its end).
            return Outcome(ErrorCode.none)
        if len(current.partitions | wanted) > self.limits.max_partitions:
            return Outcome(ErrorCode.invalid_request)
        meta = self._ongoing(current, now_ms)
        meta.partitions |= wanted
        return Outcome(ErrorCode.none, meta)

    def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str, now_ms: int
    ) -> Outcome:
        current, error = self._check_producer(transactional_id, producer_id, epoch)
        if current is None:
            return Outcome(error)
        if group_id in current.groups and current.state is TxnState.ONGOING:
            return Outcome(ErrorCode.none)
        meta = self._ongoing(current, now_ms)
        meta.groups.setdefault(group_id, {})
        return Outcome(ErrorCode.none, meta)

    def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Mapping[TopicPartition, PendingOffset],
        now_ms: int,
    ) -> Outcome:
        """Offsets to commit to `group_id` with the transaction (after AddOffsetsToTxn)."""
        current, error = self._check_producer(transactional_id, producer_id, epoch)
        if current is None:
            return Outcome(error)
        if current.state is not TxnState.ONGOING or group_id not in current.groups:
            return Outcome(ErrorCode.invalid_txn_state)
        pending = sum(len(o) for o in current.groups.values()) + len(offsets)
        if pending > self.limits.max_offsets:
            return Outcome(ErrorCode.invalid_request)
        meta = current.copy()
        meta.groups[group_id].update(offsets)
        meta.last_update_ms = now_ms
        return Outcome(ErrorCode.none, meta)

    def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, now_ms: int
    ) -> EndResult:
        current, error = self._check_producer(
            transactional_id, producer_id, epoch, allow_preparing=True
        )
        if current is None:
            return EndResult(error)
        state = current.state
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state is TxnState.ONGOING:
            meta = current.copy()
            meta.move(wanted, now_ms)
            return EndResult(ErrorCode.none, meta)
        if state is wanted:
            return EndResult(ErrorCode.concurrent_transactions)  # markers still being written
        if state is done:
            return EndResult(ErrorCode.none)  # a retry of an end already made
        return EndResult(ErrorCode.invalid_txn_state)

    def completed(self, prepared: TxnMetadata, now_ms: int) -> TxnMetadata:
        """The COMPLETE_* state that follows `prepared` once its markers are durable."""
        meta = prepared.copy()
        if prepared.state is TxnState.PREPARE_COMMIT:
            meta.move(TxnState.COMPLETE_COMMIT, now_ms)
        else:
            meta.move(TxnState.COMPLETE_ABORT, now_ms)
        meta.partitions.clear()
        meta.groups.clear()
        meta.start_ms = -1
        return meta

    def fence_lost(
        self, transactional_id: str, partitions: Iterable[TopicPartition], now_ms: int
    ) -> TxnMetadata:
        """After a crash: the id's current producer, at its current epoch, has writes open
        in `partitions` that the id's state does not cover (the adds that let them in were
        lost). A fencing abort (PREPARE_ABORT, epoch bumped) of the id's transaction, a new
        one if none is open, over its partitions and these, to log and complete: the
        producer's commit is then refused, so no part of the transaction commits without
        the rest."""
        current = self.txns[transactional_id]
        assert current.state not in PREPARING, f"{transactional_id!r}: {current.state.name}"
        meta = self._ongoing(current, now_ms)
        meta.partitions |= {TopicPartition(*tp) for tp in partitions}
        return self._fence(meta, now_ms)

    # --- time -----------------------------------------------------------------------------

    def timed_out(self, now_ms: int) -> list[TxnMetadata]:
        """Fencing aborts (PREPARE_ABORT, epoch bumped) of every open transaction past its
        timeout, to log and complete."""
        return [
            self._fence(meta, now_ms)
            for meta in list(self.txns.values())
            if meta.state is TxnState.ONGOING and now_ms - meta.start_ms > meta.timeout_ms
        ]

    def expired_ids(self, now_ms: int) -> list[str]:
        """Ids with no transaction open, idle past `id_expiration_ms`: log a tombstone
        for each (and `replay` it)."""
        limit = self.limits.id_expiration_ms
        return [
            txn_id
            for txn_id, meta in self.txns.items()
            if meta.state in OPEN_FOR_NEW and now_ms - meta.last_update_ms >= limit
        ]

    # --- what partitions and groups ask -------------------------------------------------

    def check_write(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """KIP-890 part 1: may this producer write a transactional batch to `tp`? Only
        within an open transaction that added `tp`, at the transaction's current epoch:
        INVALID_PRODUCER_EPOCH for another epoch (a fenced producer), INVALID_TXN_STATE
        for anything else (as Kafka answers a write its verification refuses)."""
        txn_id = self._by_producer.get(producer_id)
        meta = None if txn_id is None else self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_txn_state
        if epoch != meta.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if meta.state is not TxnState.ONGOING or tp not in meta.partitions:
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    def apply(self, meta: TxnMetadata) -> None:
        """Make a decided state current (once it is appended to the log)."""
        self._forget(meta.transactional_id)
        if meta.state is not TxnState.DEAD:
            self._put(meta)

    def transactional_id_of(self, producer_id: int) -> str | None:
        """The transactional id whose current producer id this is, if any."""
        return self._by_producer.get(producer_id)

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.txns.get(transactional_id)

    def __iter__(self) -> Iterator[TxnMetadata]:
        return iter(list(self.txns.values()))

    # --- helpers --------------------------------------------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, epoch: int, *, allow_preparing: bool = False
    ) -> tuple[TxnMetadata | None, ErrorCode]:
        current = self.txns.get(transactional_id)
        if current is None or current.producer_id != producer_id:
            return None, ErrorCode.invalid_producer_id_mapping
        if epoch != current.producer_epoch:
            return None, ErrorCode.producer_fenced
        if current.state in PREPARING and not allow_preparing:
            return None, ErrorCode.concurrent_transactions
        return current, ErrorCode.none

    def _ongoing(self, current: TxnMetadata, now_ms: int) -> TxnMetadata:
        meta = current.copy()
        if meta.state is not TxnState.ONGOING:
            meta.partitions.clear()
            meta.groups.clear()
            meta.start_ms = now_ms
        meta.move(TxnState.ONGOING, now_ms)
        return meta

    def _fence(self, current: TxnMetadata, now_ms: int) -> TxnMetadata:
        """An open transaction aborted with its epoch bumped, fencing its producer.

        The producer id never changes here, even at an exhausted epoch: the markers are
        written for this producer id, the one the partitions hold the transaction open
        under (a new id would leave every partition's transaction hanging, and its last
        stable offset stuck). Kafka bumps up to EPOCH_MAX here for the same reason; the next
        InitProducerId then moves to a new id. At EPOCH_MAX itself the abort goes ahead
        without a bump: the aborted transaction still refuses the producer's writes and
        commit (INVALID_TXN_STATE)."""
        meta = current.copy()
        if meta.producer_epoch < EPOCH_MAX:
            meta.last_producer_id = NO_PRODUCER_ID
            meta.last_producer_epoch = meta.producer_epoch
            meta.producer_epoch += 1
        meta.move(TxnState.PREPARE_ABORT, now_ms)
        return meta

    def _bump(self, meta: TxnMetadata) -> None:
        if meta.producer_epoch >= EPOCH_MAX - 1:  # Kafka: a new id rather than wrapping
            meta.last_producer_id = meta.producer_id
            meta.last_producer_epoch = meta.producer_epoch
            meta.producer_id = self._allocate()
            meta.producer_epoch = 0
        else:
            meta.last_producer_id = NO_PRODUCER_ID
            meta.last_producer_epoch = meta.producer_epoch
            meta.producer_epoch += 1

    def _put(self, meta: TxnMetadata) -> None:
        self.txns[meta.transactional_id] = meta
        self._by_producer[meta.producer_id] = meta.transactional_id

    def _forget(self, transactional_id: str) -> None:
        old = self.txns.pop(transactional_id, None)
        if old is not None and self._by_producer.get(old.producer_id) == transactional_id:
            del self._by_producer[old.producer_id]


def _previous(meta: TxnMetadata) -> tuple[int, int] | None:
    """The (producer id, epoch) the last bump was made from, if a retry may name it."""
    if meta.last_producer_epoch == NO_EPOCH:
        return None
    producer_id = (
        meta.producer_id if meta.last_producer_id == NO_PRODUCER_ID else meta.last_producer_id
    )
    return producer_id, meta.last_producer_epoch
