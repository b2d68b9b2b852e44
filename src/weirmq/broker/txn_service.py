"""The transaction coordinator's I/O: its log, the markers, its timer.

`weirmq.transactions.coordinator` decides every request; this service carries the
decisions out, in the order that makes a crash in any phase recoverable:

- **its log**, the internal topic `__transaction_state` (one partition, compacted by the
  log cleaner: the newest record per transactional id is its state). Every decided state
  is appended and made current at once (appends are synchronous on the loop, so the
  in-memory state follows the log's order), and the request is answered only once the
  log is fsynced past it; an answer that logs nothing still waits for the log's end, so
  nobody is told of a state a crash could take back;
- **ending a transaction** (`_complete`): PREPARE_COMMIT or PREPARE_ABORT is made durable
  first; then a marker goes to each of the transaction's partitions
  (`Partition.write_marker`) and, on commit, its pending offsets to their groups; once
  all of those are durable, COMPLETE_* is logged, and EndTxn is answered. While markers
  are written, other requests of the id get CONCURRENT_TRANSACTIONS and retry. After a
  crash, ids found in PREPARE_* are completed at the first tick after the start (a marker
  is only written where the producer still has a transaction open, so nothing is
  doubled);
- **orphans**: a partition that, after a crash, holds an open transaction its coordinator
  does not know (a write let in by a state appended but not yet fsynced, which the crash
  took) gets an abort marker at the start, so that its last stable offset cannot stay
  stuck;
- **its timer**: every `transaction_abort_timed_out_transaction_cleanup_interval_ms` it
  aborts, fencing their producers, the transactions open past their timeout, expires ids
  idle past `transactional_id_expiration_ms`, and completes what a crash or a failed
  write left in PREPARE_*;
- **KIP-890 part 1**: each partition asks `check_write` before appending a transactional
  batch, so a write of a producer that was fenced, or outside an open transaction that
  added the partition, is refused instead of hanging open forever.

At most `MAX_COMPLETING` ends run at once; an EndTxn past that gets
CONCURRENT_TRANSACTIONS (retriable) rather than queueing without bound.
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

    def load(self) -> None:
        """Replay the log into the coordinator, then abort the orphans (only when the log
        was read whole: a state it could not read may be what covers one)."""
        partition = self._partition(False)
        if partition is None:
            self._abort_orphans()
            return
        if partition.offline_reason is not None:
            log.error("%s is offline: transactions are not recovered", TXN_TOPIC)
            return
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
        if records:
            pending = len(self.coordinator.pending_completions())
            log.info(
                "loaded %d transactional id(s) from %d record(s) of %s; %d to complete",
                len(self.coordinator.txns),
                records,
                TXN_TOPIC,
                pending,
            )

    def _abort_orphans(self) -> None:
        """Abort, with a marker at the producer's epoch there, every open transaction of a
        partition that the coordinator does not hold open on that partition."""
        coordinator = self.coordinator
        for tp, partition in list(self._broker.partitions.items()):
            for producer_id in list(partition.producers.ongoing):
                txn_id = coordinator.transactional_id_of(producer_id)
                meta = None if txn_id is None else coordinator.txns.get(txn_id)
                if meta is not None and meta.state in _OPEN and tp in meta.partitions:
                    continue  # its coordinator ends it
                entry = partition.producers.entry(producer_id)
                epoch = 0 if entry is None else entry.epoch
                try:
                    partition.write_marker(producer_id, epoch, commit=False)
                except KafkaError as exc:
                    log.error(
                        "%s: orphan transaction of producer %d not aborted: %s",
                        tp,
                        producer_id,
                        exc,
                    )
                    continue
                log.warning(
                    "%s: aborted an open transaction of producer %d that no coordinator "
                    "state covers (lost in a crash)",
                    tp,
                    producer_id,
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
        now = self._broker.clock()
        outcome = self.coordinator.add_partitions(transactional_id, producer_id, epoch, tps, now)
        return await self._answer(outcome)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> ErrorCode:
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
        now = self._broker.clock()
        outcome = self.coordinator.txn_offset_commit(
            transactional_id, producer_id, epoch, group_id, offsets, now
        )
        return await self._answer(outcome)

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> ErrorCode:
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
        task = self._start_completion(result.prepare)
        # Answered once COMPLETE is logged. Shielded: a client that goes away must not
        # cancel the end half way.
        return await asyncio.shield(task)

    async def _answer(self, outcome: Outcome) -> ErrorCode:
        if outcome.error is not ErrorCode.none:
            return outcome.error
        return await self._logged(outcome.log)

    def check_write(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """For `Partition.txn_check` (KIP-890 part 1)."""
        return self.coordinator.check_write(producer_id, epoch, tp)

    # --- ending a transaction -------------------------------------------------------------

    def _start_completion(self, prepared: TxnMetadata) -> asyncio.Future[ErrorCode]:
        """Log `prepared` (PREPARE_*) now and complete it in a task of its own, so that a
        client that goes away does not leave it half done; the task's result is the error
        to answer EndTxn."""
        loop = asyncio.get_running_loop()
        txn_id = prepared.transactional_id
        running = self._completing.get(txn_id)
        if running is not None:
            return running
        if self.coordinator.txns.get(txn_id) is not prepared:
            try:
                self._log([(txn_id, prepared)])
            except KafkaError as exc:
                log.error("%s: cannot log %s: %s", txn_id, prepared.state.name, exc)
                failed: asyncio.Future[ErrorCode] = loop.create_future()
                failed.set_result(ErrorCode.coordinator_not_available)
                return failed
        task = loop.create_task(self._complete(prepared))
        self._completing[txn_id] = task
        task.add_done_callback(lambda _t: self._completing.pop(txn_id, None))
        return task

    async def _complete(self, prepared: TxnMetadata) -> ErrorCode:
        broker = self._broker
        commit = prepared.state is TxnState.PREPARE_COMMIT
        txn_id = prepared.transactional_id
        try:
            await self._durable()  # PREPARE first: no marker before the outcome is durable
            waits: list[Awaitable[None]] = []
            for tp in sorted(prepared.partitions):
                partition = broker.partitions.get(tp)
                if partition is None:
                    continue  # deleted with its topic: nothing to mark
                offset = partition.write_marker(
                    prepared.producer_id, prepared.producer_epoch, commit
                )
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
            # Not waited for: a crash before its fsync completes the end again from
            # PREPARE, and the next request of the id waits for the log's end anyway.
            self._log([(txn_id, self.coordinator.completed(prepared, broker.clock()))])
        except (KafkaError, OSError) as exc:
            # Left in PREPARE_*: the timer tries again; the client's retry is told
            # CONCURRENT_TRANSACTIONS until then.
            log.error("transaction %r: completing %s failed: %s", txn_id, prepared.state.name, exc)
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

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
        for meta in coordinator.pending_completions():
            if meta.transactional_id not in self._completing:
                current = coordinator.txns[meta.transactional_id]
                self._start_completion(current)
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
