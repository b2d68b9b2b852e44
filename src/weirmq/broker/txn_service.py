"""The transaction coordinator's I/O: its log, the markers, its timer.

`weirmq.transactions.coordinator` decides every request; this service carries the
decisions out, in the order that makes a crash in any phase recoverable:

- **its log**, the internal topic `__transaction_state` (one partition, compacted by the
  log cleaner: the newest record per transactional id is its state). Every decided state
  is appended and made current at once (appends are synchronous on the loop, so the
  in-memory state follows the log's order). A request is answered only once the log is
  fsynced past its state, with one exception: AddPartitionsToTxn (below); an answer
  that logs nothing still waits for the log's end, so nobody is told of a state a crash
  could take back;
- **AddPartitionsToTxn** is answered once its state is appended, without waiting for the
  fsync, when the id's previous end (COMPLETE_*) is already durable. What a crash can
  then take back is only partitions added to an open transaction, and that is caught:
  a killed process loses nothing it wrote, so the producer's write to such a partition
  is still there after the restart, an open transaction its coordinator state does not
  cover, and the whole transaction is fenced (see **orphans**); a write that never
  reached the partition is refused on retry (`check_write`), so the producer cannot
  commit either; and a machine's crash, which can take both the add and the write,
  fences every id (**writes acknowledged before their fsync**, below). The PREPARE that
  decides a commit is fsynced after every add in the same log, so no commit rests on an
  add that was not durable. The previous end must be durable first: were it lost with
  the add, the restart would complete that end again and its marker would end the new
  transaction's writes too.
  AddOffsetsToTxn and TxnOffsetCommit keep their fsync: a transaction of offsets alone
  leaves no open transaction in any partition to tell of a lost state;
- **writes acknowledged before their fsync**: a partition answers a transactional batch
  once written, starting its fsync without waiting for it (broker/partition.py). So a
  commit first waits until every write of the transaction is fsynced (`_writes_durable`;
  usually done by then; it returns only from a pass that waited for nothing, and nothing
  is awaited between it and PREPARE_COMMIT's append, so a write that lands meanwhile is
  waited for too): a decided commit never rests on a write a crash can take. What a
  crash could take before is never committed: an fsync that fails fences the transaction
  (the commit is answered PRODUCER_FENCED), and so does a partition's roll-back after a
  failed fsync that cut one of its writes (`writes_lost`); after a machine's crash
  (storage/manager.py, *Boot id*) every id not already ending is fenced at the load
  (`_fence_all`), since either its writes or the adds that would tell of them may be
  gone; the data directory forgets the crash only once those fences are durable. An id
  whose fence could not be logged is *doomed*: its commit is refused until the timer
  logs the fence;
- **ending a transaction** (`_complete`): PREPARE_COMMIT or PREPARE_ABORT is made durable
  first, and EndTxn is answered then, as Kafka answers it: the outcome is decided, and a
  restart finishes it. Then a marker goes to each of the transaction's partitions
  (`Partition.write_marker`) and, on commit, its pending offsets to their groups; once
  all of those are durable, COMPLETE_* is logged and made durable. AddPartitions,
  AddOffsets, TxnOffsetCommit and EndTxn of the id that come meanwhile (the producer's
  next AddPartitionsToTxn, usually) wait for that, up to `COMPLETION_WAIT_S`, rather
  than being sent back with CONCURRENT_TRANSACTIONS to retry after a backoff.
  InitProducerId does not wait: it gets CONCURRENT_TRANSACTIONS and asks again, so that
  epoch bumps are decided one at a time, each against a settled state, in the order the
  requests reach the coordinator after the end, never released together by it. After a
  crash, ids found in PREPARE_* are completed at the first tick after the start (a marker
  is only written where the producer still has a transaction open, and no new
  transaction of the id can have written before its end was durable, so nothing is
  doubled or ended twice);
- **orphans**: a partition that, after a crash, holds an open transaction its coordinator
  state does not cover (a partition added, and written, whose add the crash took back;
  or a write let in by a state appended but not yet fsynced). When that producer is
  still the id's current producer at its current epoch, the id's whole transaction is
  fenced (`_fence_orphans`): PREPARE_ABORT with the epoch bumped, over the partitions
  the coordinator knows and the orphaned ones, completed at the first tick, so the
  producer's commit is refused (PRODUCER_FENCED) instead of committing the partitions
  the coordinator kept without the one it lost. Otherwise (an older epoch, an unknown
  producer) the partition gets an abort marker at once, so that its last stable offset
  cannot stay stuck;
- **its timer**: every `transaction_abort_timed_out_transaction_cleanup_interval_ms` it
  aborts, fencing their producers, the transactions open past their timeout, expires ids
  idle past `transactional_id_expiration_ms`, and completes what a crash or a failed
  write left in PREPARE_*;
- **KIP-890 part 1**: each partition asks `check_write` before appending a transactional
  batch, so a write of a producer that was fenced, or outside an open transaction that
  added the partition, is refused instead of hanging open forever.

At most `MAX_COMPLETING` ends run at once. An EndTxn or InitProducerId that would start
one past that gets CONCURRENT_TRANSACTIONS (retriable) rather than queueing without bound;
an end the broker decides itself (a fence, a timeout, one found in PREPARE_* after a
restart) is logged and left in PREPARE_*, its *backlog* started as running ends finish
(`_start_backlog`), so a burst (every id fenced after a machine's crash) runs at most
`MAX_COMPLETING` at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..errors import ErrorCode, KafkaError
from ..records.batch import Record, decode_records, encode_batch
from ..storage.errors import StorageError
from ..transactions.coordinator import (
    EndResult,
    Limits,
    Outcome,
    TransactionCoordinator,
)
from ..transactions.records import (
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from ..transactions.state import PendingOffset, TxnMetadata, TxnState
from ..types import Timer, TopicPartition
from .partition import Partition
from .scan import scan_batches
from .timers import UNSCHEDULED

if TYPE_CHECKING:
    from .core import Broker

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
TXN_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(16 * 1024 * 1024)}
MAX_COMPLETING = 1_000
"""Transaction ends (markers being written) in flight at most."""
_OPEN = frozenset({TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
_PREPARING = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
FENCE_BATCH = 1_000
"""Fences logged per batch when every id is fenced at once (`_fence_all`)."""
COMPLETION_WAIT_S = 10.0
"""How long a request waits for its id's end to complete before it is answered
CONCURRENT_TRANSACTIONS (retriable) instead."""


class TransactionService:
    """See the module docstring."""

    def __init__(self, broker: Broker) -> None:
        settings = broker.settings
        self._broker = broker
        self.coordinator = TransactionCoordinator(
            Limits(
                max_timeout_ms=settings.transaction_max_timeout_ms,
                id_expiration_ms=settings.transactional_id_expiration_ms,
                max_ids=settings.max_transactional_ids,
            ),
            broker.producer_ids.allocate,
        )
        self._interval_ms = settings.transaction_abort_timed_out_transaction_cleanup_interval_ms
        self._completing: dict[str, asyncio.Future[ErrorCode]] = {}
        self._ends: dict[str, int] = {}
        """Per id, the log offset its last COMPLETE_* must be fsynced below before an add
        of the id is answered without its own fsync; dropped once it is (see `_end_durable`).
        At most one per id, and ids are bounded (`Limits.max_ids`)."""
        self._doomed: dict[str, tuple[int, int, set[TopicPartition]]] = {}
        """Ids whose open transaction lost writes to a failed fsync and could not be fenced
        yet (the log refused the fence): producer id, epoch and the partitions. Their commit
        is refused; the timer retries the fence. At most one per id."""
        self._backlog = False
        """Whether ends were left in PREPARE_* for want of room (`MAX_COMPLETING`), to be
        started as running ones finish (`_start_backlog`)."""
        self._refill_scheduled = False
        """Whether a `_start_backlog` pass is due on the loop: one for however many ends
        finish meanwhile."""
        self._failed: set[str] = set()
        """Ids whose end failed since the last tick: only the timer tries them again, so a
        failing disk does not spin the backlog. At most one entry per id."""
        self._timer: Timer | None = None
        self._started = False
        """Whether the first tick (at once after the start) was scheduled."""

    # --- the log --------------------------------------------------------------------------

    def _partition(self, create: bool) -> Partition | None:
        broker = self._broker
        found = broker.partitions.get(TopicPartition(TXN_TOPIC, 0))
        if found is None and create:
            broker.create_topic(TXN_TOPIC, 1, TXN_TOPIC_CONFIGS)
            found = broker.partitions[TopicPartition(TXN_TOPIC, 0)]
        return found

    def load(self) -> bool:
        """Replay the log into the coordinator, then abort the orphans (only when the log
        was read whole: a state it could not read may be what covers one) and, after a
        machine's crash, fence every id (`_fence_all`). Returns whether that is all done
        and durable: only then may the data directory forget the crash
        (`LogManager.record_boot`); else the next start fences again."""
        partition = self._partition(False)
        if partition is None:
            self._abort_orphans()
            return True
        if partition.offline_reason is not None:
            log.error("%s is offline: transactions are not recovered", TXN_TOPIC)
            return False
        settled = False
        records = 0
        try:
            for batch in scan_batches(partition.log, partition.log_start_offset):
                for _offset, key, value in decode_records(batch):
                    if key is None:
                        continue
                    try:
                        txn_id = decode_key(key)
                        meta = None if value is None else decode_value(txn_id, value)
                    except RecordFormatError as exc:
                        log.error("%s: skipping a malformed record: %s", TXN_TOPIC, exc)
                        continue
                    self.coordinator.replay(txn_id, meta)
                    records += 1
        except (StorageError, KafkaError) as exc:
            log.error("%s: replay stopped early: %s", TXN_TOPIC, exc)
        else:
            self._abort_orphans()
            settled = not self._broker.logs.unsynced_may_be_lost or self._fence_all()
        if records:
            pending = len(self.coordinator.pending_completions())
            log.info(
                "loaded %d transactional id(s) from %d record(s) of %s; %d to complete",
                len(self.coordinator.txns),
                records,
                TXN_TOPIC,
                pending,
            )
        return settled

    def _fence_all(self) -> bool:
        """After a machine's crash (storage/manager.py, *Boot id*): fence every id not
        already ending. Its producer's transactional writes were acknowledged before they
        were fsynced, so the crash may have taken some, and with them the adds that would
        tell: an id may even be back in COMPLETE_*, where its producer's EndTxn(commit)
        would be taken for a retry. A decided end (PREPARE_*) is kept: its writes were
        fsynced before it was logged. Logged and fsynced now, completed at the first tick;
        whether all of that worked."""
        coordinator = self.coordinator
        now = self._broker.clock()
        fences = [
            coordinator.fence_lost(meta.transactional_id, (), now)
            for meta in coordinator
            if meta.state not in _PREPARING
        ]
        logged = 0
        for start in range(0, len(fences), FENCE_BATCH):
            chunk = fences[start : start + FENCE_BATCH]
            try:
                self._log([(meta.transactional_id, meta) for meta in chunk])
                logged += len(chunk)
            except KafkaError as exc:
                # Doomed (`_doomed`): their commits are refused, the timer fences them.
                log.error("%s: fencing after the machine's restart failed: %s", TXN_TOPIC, exc)
                for meta in fences[start:]:
                    old = coordinator.txns[meta.transactional_id]
                    self._doomed[meta.transactional_id] = (
                        old.producer_id,
                        old.producer_epoch,
                        set(),
                    )
                break
        if logged:
            log.warning(
                "the machine restarted after an unclean stop: fenced %d transactional "
                "id(s), aborting what they had open (their producers must start again)",
                logged,
            )
        if logged < len(fences):
            return False
        partition = self._partition(False)
        try:
            if partition is not None:
                partition.log.flush()  # the fences durable before the crash is forgotten
        except (KafkaError, OSError) as exc:
            log.error("%s: the fences are not durable: %s", TXN_TOPIC, exc)
            return False
        return True

    def _abort_orphans(self) -> None:
        """After replay: end every open transaction of a partition that the coordinator does
        not hold open on that partition. Its id's current producer, at its current epoch,
        gets its whole transaction fenced (`_fence_orphans`); any other gets an abort marker
        at once, at the producer's epoch there."""
        coordinator = self.coordinator
        lost: dict[str, set[TopicPartition]] = {}
        for tp, partition in list(self._broker.partitions.items()):
            for producer_id in list(partition.producers.ongoing):
                txn_id = coordinator.transactional_id_of(producer_id)
                meta = None if txn_id is None else coordinator.txns.get(txn_id)
                if meta is not None and meta.state in _OPEN and tp in meta.partitions:
                    continue  # its coordinator ends it
                entry = partition.producers.entry(producer_id)
                epoch = 0 if entry is None else entry.epoch
                if (
                    txn_id is not None
                    and meta is not None
                    and meta.producer_id == producer_id
                    and meta.producer_epoch == epoch
                    and meta.state not in _PREPARING
                ):
                    lost.setdefault(txn_id, set()).add(tp)
                    continue
                self._abort_orphan(tp, partition, producer_id, epoch)
        for txn_id, tps in lost.items():
            self._fence_orphans(txn_id, tps)

    def _abort_orphan(
        self, tp: TopicPartition, partition: Partition, producer_id: int, epoch: int
    ) -> None:
        try:
            partition.write_marker(producer_id, epoch, commit=False)
        except KafkaError as exc:
            log.error("%s: orphan transaction of producer %d not aborted: %s", tp, producer_id, exc)
            return
        log.warning(
            "%s: aborted an open transaction of producer %d that no coordinator state "
            "covers (lost in a crash)",
            tp,
            producer_id,
        )

    def _fence_orphans(self, txn_id: str, tps: set[TopicPartition]) -> None:
        """The id's producer wrote to `tps` in a transaction whose coordinator state does
        not cover them (the crash took the adds back): fence the whole transaction, those
        partitions with it, so that its producer cannot commit the part that was kept.
        Logged now; completed (markers after the fsync) at the first tick."""
        fence = self.coordinator.fence_lost(txn_id, tps, self._broker.clock())
        try:
            self._log([(txn_id, fence)])
        except KafkaError as exc:
            log.error("transaction %r: fencing it failed, aborting %s alone: %s", txn_id, tps, exc)
            for tp in sorted(tps):  # at least its last stable offset does not stay stuck
                partition = self._broker.partitions[tp]
                entry = partition.producers.entry(fence.producer_id)
                epoch = 0 if entry is None else entry.epoch
                self._abort_orphan(tp, partition, fence.producer_id, epoch)
            return
        log.warning(
            "transaction %r: partitions %s hold writes of it that no coordinator state covers "
            "(lost in a crash): aborting the whole transaction, producer epoch now %d",
            txn_id,
            ", ".join(str(tp) for tp in sorted(tps)),
            fence.producer_epoch,
        )

    def _log(self, states: Iterable[tuple[str, TxnMetadata | None]]) -> None:
        """Append these states (None: a tombstone) and make them current."""
        pairs = list(states)
        partition = self._partition(True)
        assert partition is not None
        now = self._broker.clock()
        partition.append_internal(
            encode_batch(
                [
                    Record(
                        None if meta is None else encode_value(meta), encode_key(txn_id), (), now
                    )
                    for txn_id, meta in pairs
                ]
            )
        )
        for txn_id, meta in pairs:
            if meta is None:
                self.coordinator.replay(txn_id, None)
            else:
                self.coordinator.apply(meta)

    async def _durable(self) -> None:
        """Wait until the log is fsynced to its end."""
        partition = self._partition(False)
        if partition is not None:
            await partition.durable(partition.log_end_offset)

    async def _logged(self, meta: TxnMetadata | None) -> ErrorCode:
        """Log `meta` if any, then wait for the log's fsync; the error to answer if the
        write fails (the client retries)."""
        try:
            if meta is not None:
                self._log([(meta.transactional_id, meta)])
            await self._durable()
        except (KafkaError, OSError) as exc:
            log.error("%s: write failed: %s", TXN_TOPIC, exc)
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    # --- requests -------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected_pid: int, expected_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        self.poke()
        now = self._broker.clock()
        result = self.coordinator.init_producer_id(
            transactional_id, timeout_ms, expected_pid, expected_epoch, now
        )
        if result.abort is not None:
            if len(self._completing) < MAX_COMPLETING:  # else nothing is logged: it asks again
                self._start_completion(result.abort)  # the client asks again
            return result.error, -1, -1
        if result.error is not ErrorCode.none:
            return result.error, -1, -1
        error = await self._logged(result.log)
        if error is not ErrorCode.none:
            return error, -1, -1
        return ErrorCode.none, result.producer_id, result.producer_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, tps: Iterable[TopicPartition]
    ) -> ErrorCode:
        if not await self._settled(transactional_id):
            return ErrorCode.concurrent_transactions
        now = self._broker.clock()
        outcome = self.coordinator.add_partitions(transactional_id, producer_id, epoch, tps, now)
        if outcome.error is not ErrorCode.none:
            return outcome.error
        if not self._end_durable(transactional_id):
            return await self._logged(outcome.log)  # see the module docstring
        return self._appended(outcome.log)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> ErrorCode:
        if not await self._settled(transactional_id):
            return ErrorCode.concurrent_transactions
        now = self._broker.clock()
        outcome = self.coordinator.add_offsets(transactional_id, producer_id, epoch, group_id, now)
        return await self._answer(outcome)

    async def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Mapping[TopicPartition, PendingOffset],
    ) -> ErrorCode:
        if not await self._settled(transactional_id):
            return ErrorCode.concurrent_transactions
        now = self._broker.clock()
        outcome = self.coordinator.txn_offset_commit(
            transactional_id, producer_id, epoch, group_id, offsets, now
        )
        return await self._answer(outcome)

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> ErrorCode:
        if not await self._settled(transactional_id):
            return ErrorCode.concurrent_transactions
        if commit and not await self._writes_durable(transactional_id, producer_id, epoch):
            doomed = self._doomed.get(transactional_id)
            if doomed is not None and doomed[:2] == (producer_id, epoch):
                return ErrorCode.coordinator_not_available  # retriable: the fence is retried
            return ErrorCode.producer_fenced
        # No await from here to PREPARE_COMMIT's append (see `_writes_durable`).
        now = self._broker.clock()
        result: EndResult = self.coordinator.end_txn(
            transactional_id, producer_id, epoch, commit, now
        )
        if result.prepare is None:
            if result.error is ErrorCode.none:
                return await self._logged(None)
            return result.error
        if len(self._completing) >= MAX_COMPLETING:
            return ErrorCode.concurrent_transactions
        _task, prepared = self._begin_completion(result.prepare)
        # Answered once PREPARE is durable (the outcome is decided); the markers follow.
        # Not shielded (a hop less): a client that goes away cancels only this future,
        # which the completion's task then leaves alone; the task itself goes on.
        return await prepared

    async def _writes_durable(self, transactional_id: str, producer_id: int, epoch: int) -> bool:
        """Before a commit is decided: wait until every write of the transaction is fsynced
        (they were acknowledged without one, broker/partition.py). Returns only from a
        pass that found them all durable without waiting, so that nothing (a write that
        came meanwhile, a roll-back) can slip in before `end_txn` logs PREPARE_COMMIT,
        which it does without awaiting anything. False when the commit must be refused:
        an fsync failed, or a roll-back cut a write (the transaction is then fenced, or
        doomed until it is: `_fence`). True also when the transaction is not this
        producer's open one: `end_txn` then answers what the coordinator says."""
        broker = self._broker
        while True:
            meta = self.coordinator.txns.get(transactional_id)
            if (
                meta is None
                or (meta.producer_id, meta.producer_epoch) != (producer_id, epoch)
                or meta.state is not TxnState.ONGOING
            ):
                return True
            doomed = self._doomed.get(transactional_id)
            if doomed is not None and doomed[:2] == (producer_id, epoch):
                self._fence(transactional_id, doomed[2], "its fence is retried")
                return False
            pending: list[tuple[TopicPartition, Partition, int]] = []
            try:
                for tp in sorted(meta.partitions):
                    partition = broker.partitions.get(tp)
                    if partition is None:
                        continue  # deleted with its topic
                    partition.follow_roll_back()  # a cut write fences the transaction
                    end = partition.txn_write_end(producer_id)
                    if end is not None and partition.log.flushed_offset < end:
                        pending.append((tp, partition, end))
                current = self.coordinator.txns.get(transactional_id)
                if current is not meta:
                    continue  # fenced (or otherwise changed) by a roll-back: judge again
                if not pending:
                    return True
                for _tp, partition, end in pending:
                    await partition.durable(end)
            except (KafkaError, OSError) as exc:
                log.error(
                    "transaction %r: a partition's fsync failed before its commit: %s",
                    transactional_id,
                    exc,
                )
                self._fence_lost_writes(producer_id, {tp for tp, _p, _e in pending})
                return False  # fenced, or doomed until it is: no commit either way

    def writes_lost(self, tp: TopicPartition, producer_ids: list[int]) -> None:
        """For `Partition.txn_lost`: a failed fsync's roll-back took acknowledged writes of
        these producers' open transactions in `tp`. Each is fenced, so none commits."""
        for producer_id in producer_ids:
            self._fence_lost_writes(producer_id, {tp})

    def _fence_lost_writes(self, producer_id: int, tps: set[TopicPartition]) -> bool:
        """Fence the open transaction of `producer_id`, whose writes in `tps` may be lost
        (`_fence`); nothing to do when it is not open (the writes of a decided commit were
        durable before its PREPARE)."""
        coordinator = self.coordinator
        txn_id = coordinator.transactional_id_of(producer_id)
        meta = None if txn_id is None else coordinator.txns.get(txn_id)
        if txn_id is None or meta is None or meta.state is not TxnState.ONGOING:
            return True
        return self._fence(txn_id, tps, "writes of it were lost to a failed fsync")

    def _fence(self, txn_id: str, tps: set[TopicPartition], why: str) -> bool:
        """Fence the id's producer with an abort of its transaction (a new one if none is
        open) over its partitions and `tps`, logged now and completed in a task (or at the
        next tick without a running loop). False if logging it failed: the id is then
        *doomed* (`_doomed`), its commit refused until a retry of the fence (its EndTxn,
        the timer) succeeds. An id already ending (PREPARE_*) is left to its end."""
        meta = self.coordinator.txns[txn_id]
        if meta.state in _PREPARING:
            return True
        fence = self.coordinator.fence_lost(txn_id, tps, self._broker.clock())
        try:
            self._log([(txn_id, fence)])
        except KafkaError as exc:
            log.error("transaction %r: fencing it failed (%s): %s", txn_id, why, exc)
            self._doomed[txn_id] = (meta.producer_id, meta.producer_epoch, set(tps))
            return False
        self._doomed.pop(txn_id, None)
        log.warning(
            "transaction %r: %s: aborting it, producer epoch now %d",
            txn_id,
            why,
            fence.producer_epoch,
        )
        if _running_loop():
            self._complete_soon(fence)
        return True

    async def _answer(self, outcome: Outcome) -> ErrorCode:
        if outcome.error is not ErrorCode.none:
            return outcome.error
        return await self._logged(outcome.log)

    async def _settled(self, transactional_id: str) -> bool:
        """Wait for the id's end in progress, if any (at most `COMPLETION_WAIT_S`); False
        if it is still running then. Not for InitProducerId (see the module docstring)."""
        running = self._completing.get(transactional_id)
        if running is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(running), COMPLETION_WAIT_S)
        except TimeoutError:
            return False
        return True

    def _end_durable(self, transactional_id: str) -> bool:
        """Whether the id's last COMPLETE_* is fsynced (or none was logged since the
        start: what was replayed is durable)."""
        offset = self._ends.get(transactional_id)
        if offset is None:
            return True
        partition = self._partition(False)
        if partition is None or partition.log.flushed_offset < offset:
            return False
        del self._ends[transactional_id]
        return True

    def _appended(self, meta: TxnMetadata | None) -> ErrorCode:
        """Log `meta`, if any, without waiting for its fsync (AddPartitionsToTxn only: see
        the module docstring)."""
        if meta is None:
            return ErrorCode.none
        try:
            self._log([(meta.transactional_id, meta)])
        except KafkaError as exc:
            log.error("%s: write failed: %s", TXN_TOPIC, exc)
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    def check_write(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """For `Partition.txn_check` (KIP-890 part 1)."""
        return self.coordinator.check_write(producer_id, epoch, tp)

    # --- ending a transaction -------------------------------------------------------------

    def _start_completion(self, prepared: TxnMetadata) -> asyncio.Future[ErrorCode]:
        """`_begin_completion`'s task: done once the end is complete (or failed)."""
        return self._begin_completion(prepared)[0]

    def _begin_completion(
        self, prepared: TxnMetadata
    ) -> tuple[asyncio.Future[ErrorCode], asyncio.Future[ErrorCode]]:
        """Log `prepared` (PREPARE_*) now and complete it in a task of its own, so that a
        client that goes away does not leave it half done. Returns the task and a future
        settled once PREPARE is durable, with the error to answer EndTxn."""
        loop = asyncio.get_running_loop()
        txn_id = prepared.transactional_id
        on_prepared: asyncio.Future[ErrorCode] = loop.create_future()
        running = self._completing.get(txn_id)
        if running is not None:
            on_prepared.set_result(ErrorCode.concurrent_transactions)
            return running, on_prepared
        if self.coordinator.txns.get(txn_id) is not prepared:
            try:
                self._log([(txn_id, prepared)])
            except KafkaError as exc:
                log.error("%s: cannot log %s: %s", txn_id, prepared.state.name, exc)
                on_prepared.set_result(ErrorCode.coordinator_not_available)
                return on_prepared, on_prepared
            if prepared.state is TxnState.PREPARE_ABORT:
                self._doomed.pop(txn_id, None)  # an abort is what a doomed id needed
        task = loop.create_task(self._complete(prepared, on_prepared))
        self._completing[txn_id] = task
        task.add_done_callback(lambda done: self._completed(txn_id, done))
        return task, on_prepared

    def _completed(self, txn_id: str, task: asyncio.Future[ErrorCode]) -> None:
        self._completing.pop(txn_id, None)
        failed = task.cancelled()
        if not failed:
            error = task.exception()  # retrieved here, so logged here
            if error is not None:
                log.error("transaction %r: its end failed", txn_id, exc_info=error)
            failed = error is not None or task.result() is not ErrorCode.none
        if failed:
            self._failed.add(txn_id)  # left in PREPARE_*: the timer tries it again
        # Refilled in bulk, from half empty: each pass walks every id (`_start_backlog`).
        if (
            self._backlog
            and not self._refill_scheduled
            and len(self._completing) <= MAX_COMPLETING // 2
        ):
            self._refill_scheduled = True
            asyncio.get_running_loop().call_soon(self._start_backlog)

    def _complete_soon(self, prepared: TxnMetadata) -> None:
        """Complete `prepared`, logged already, now if there is room, else from the backlog."""
        if len(self._completing) < MAX_COMPLETING:
            self._start_completion(prepared)
        else:
            self._backlog = True

    def _start_backlog(self) -> None:
        """Start the ends left in PREPARE_* (after a restart, or for want of room), up to
        `MAX_COMPLETING` running, but not one that failed since the last tick; the backlog
        is kept while any is left."""
        coordinator = self.coordinator
        self._backlog = self._refill_scheduled = False
        for txn_id, meta in list(coordinator.txns.items()):
            if meta.state not in _PREPARING or txn_id in self._completing:
                continue
            if txn_id in self._failed:
                continue
            if len(self._completing) >= MAX_COMPLETING:
                self._backlog = True
                return
            self._start_completion(meta)

    async def _complete(
        self, prepared: TxnMetadata, on_prepared: asyncio.Future[ErrorCode]
    ) -> ErrorCode:
        txn_id = prepared.transactional_id
        try:
            try:
                await self._durable()  # PREPARE first: no marker before the outcome is durable
                if not on_prepared.done():  # else cancelled: its client went away
                    on_prepared.set_result(ErrorCode.none)
            finally:
                if not on_prepared.done():  # not durable: the timer tries again
                    on_prepared.set_result(ErrorCode.coordinator_not_available)
            await asyncio.sleep(0)  # EndTxn's answer goes out before the markers are written
            await self._write_markers(prepared)
            self._log([(txn_id, self.coordinator.completed(prepared, self._broker.clock()))])
            partition = self._partition(False)
            assert partition is not None
            self._ends[txn_id] = partition.log_end_offset
            # Durable before the id's next add is answered without an fsync of its own
            # (see the module docstring); the requests of the id wait for this task.
            await self._durable()
        except (KafkaError, OSError) as exc:
            # Left in PREPARE_*: the timer tries again; the client's retry is told
            # CONCURRENT_TRANSACTIONS until then. (A COMPLETE_* whose fsync failed stays in
            # `_ends`: the id's next add then waits for an fsync of its own.)
            log.error("transaction %r: completing %s failed: %s", txn_id, prepared.state.name, exc)
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    async def _write_markers(self, prepared: TxnMetadata) -> None:
        """A marker to each partition of the transaction and, on commit, its offsets to
        their groups; returns once all of them are durable."""
        broker = self._broker
        commit = prepared.state is TxnState.PREPARE_COMMIT
        waits: list[Awaitable[None]] = []
        for tp in sorted(prepared.partitions):
            partition = broker.partitions.get(tp)
            if partition is None:
                continue  # deleted with its topic: nothing to mark
            offset = partition.write_marker(prepared.producer_id, prepared.producer_epoch, commit)
            if offset is not None:
                waits.append(partition.durable(offset + 1))
        if commit and prepared.groups:
            end_before = broker.offsets_log.end_offset()
            now = broker.clock()
            for group_id, offsets in prepared.groups.items():
                if offsets:
                    broker.groups.commit_transactional(
                        group_id,
                        [
                            (tp.topic, tp.partition, p.offset, p.leader_epoch, p.metadata)
                            for tp, p in offsets.items()
                        ],
                        now,
                    )
            if broker.offsets_log.end_offset() != end_before:
                waits.append(broker.offsets_log.durable(broker.offsets_log.end_offset()))
        for wait in waits:
            await wait

    # --- the timer ------------------------------------------------------------------------

    def poke(self) -> None:
        """Make sure the timer runs (it needs a running loop; see broker/timers.py)."""
        if self._timer is not None and self._timer is not UNSCHEDULED:
            return
        broker = self._broker
        # The first tick comes at once: it completes what a crash left in PREPARE_*.
        delay = self._interval_ms if self._started else 0
        self._timer = broker.timers.call_at(broker.clock() + delay, self._tick)
        if self._timer is UNSCHEDULED:
            self._timer = None
        else:
            self._started = True

    def _tick(self) -> None:
        self._timer = None
        if self._broker.closing:
            return
        try:
            self.tick()
        finally:
            self.poke()

    def tick(self) -> None:
        """Abort timed-out transactions, expire idle ids, finish interrupted ends."""
        now = self._broker.clock()
        coordinator = self.coordinator
        self._failed.clear()  # their turn again
        self._start_backlog()
        for txn_id, (producer_id, epoch, tps) in list(self._doomed.items()):
            doomed = coordinator.txns.get(txn_id)
            if (
                doomed is None
                or (doomed.producer_id, doomed.producer_epoch) != (producer_id, epoch)
                or doomed.state in _PREPARING
            ):
                del self._doomed[txn_id]  # fenced or aborted otherwise meanwhile
            else:
                self._fence(txn_id, tps, "its fence is retried")  # drops it once logged
        for fenced in coordinator.timed_out(now):
            if len(self._completing) >= MAX_COMPLETING:
                break
            log.info(
                "transaction %r timed out after %d ms: aborting it, producer epoch now %d",
                fenced.transactional_id,
                fenced.timeout_ms,
                fenced.producer_epoch,
            )
            self._start_completion(fenced)
        partition = self._partition(False)
        if partition is not None:
            flushed = partition.log.flushed_offset
            for txn_id in [t for t, offset in self._ends.items() if offset <= flushed]:
                del self._ends[txn_id]
        expired = coordinator.expired_ids(now)
        if expired:
            try:
                self._log([(txn_id, None) for txn_id in expired])
            except KafkaError as exc:
                log.error("%s: expiring ids failed: %s", TXN_TOPIC, exc)

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # --- views ----------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.coordinator.describe(transactional_id)

    def transactions(self) -> list[TxnMetadata]:
        return list(self.coordinator)


def _running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
