"""A partition: its log, high watermark, leader epoch, producer state, waiters, durability.

Every protocol writes and reads a partition through this one object, so the write
pipeline exists once:

    publish(records, durability)
      1. validate the batch (framing, CRC, sizes) before anything else: a retry corrupted
         on the way must be refused, not taken for a duplicate of the original; then, when
         the topic's compression.type names a codec other than the batch's, rewrite the
         batch in it (`recompress`, records/recompress.py) and check its size again;
      2. judge an idempotent producer's sequence (`producers.PartitionProducers`): a
         duplicate gets the offsets it got the first time and is not written again;
      3. append (offsets and the leader epoch assigned by the log);
      4. notify: wake every reader waiting on this partition, then the broker's append
         listeners (statistics today; queues next). No writer has to remember to wake
         anyone. On an exchange's partition, the batch was routed before step 3 (an
         exchange may refuse unroutable records) and its copies are appended now
         (`router`, broker/exchanges.py);
      5. return what was appended, and the offset the log must be fsynced below before
         the write may be acknowledged, if the durability asked for needs one.

Delayed delivery (broker/delays.py, the partition's `delays`): between steps 2 and 3, a
batch holding a record due in the future (header `weirmq.delay.ms` or
`weirmq.deliver.at.ms`) is not appended here but to the internal delayed log, which
delivers it here when due. The check costs one search of the batch's bytes for the
headers' common prefix (a compressed batch is decompressed first). The producer's
sequence still advances here: `diverted` remembers, per idempotent producer whose batch
went there, those batches, so that its next batch is in sequence and a retry is a
duplicate. Such a batch has no offset here yet: it is answered with base offset -1, and
its durability is the delayed log's (`Published.durable_partition`).

The append is synchronous on the event loop's thread, so writes keep arrival order
(idempotent sequences depend on it); only the wait for the fsync (`durable`) is
asynchronous, and one group-commit fsync covers every writer waiting (storage.flusher).
That is why `publish` returns its result at once rather than an awaitable: a caller that
asked for `Durability.FSYNCED` awaits `durable(published)` when `published.durable_offset`
is set.

Reads (`read`) see offsets in [log start, high watermark). A single broker's high
watermark is its log end (every replica, the one there is, has every record); with
replication it will be the offset every in-sync replica holds, and only this class
changes. The leader epoch is 0 until then.

Transactions (KIP-98): a transactional batch is appended like any other once the
transaction coordinator confirms that its producer, at that epoch, has this partition in
an open transaction (`txn_check`, KIP-890 part 1: a late or zombie write is refused rather
than left hanging in no transaction). The producer state (`producers.ongoing`) remembers
the first offset of each open transaction; the smallest is the last stable offset
(`last_stable_offset`), below which read_committed readers read (`read_committed`). The
coordinator ends a transaction here with a marker (`write_marker`): a control batch whose
record says commit or abort; an abort is also recorded in the log's aborted-transaction
index, which a read_committed fetch hands to the client so that it drops that producer's
records between the transaction's first offset and the marker. A transactional batch is
acknowledged once written, without waiting for an fsync whatever the durability asked:
nobody may read it as committed before its transaction commits, and the coordinator
fsyncs each of the transaction's partitions before it logs PREPARE_COMMIT
(broker/txn_service.py), so one fsync per partition per transaction replaces one per
batch. What a crash could take between the answer and that fsync is caught: a failed
fsync's roll-back reports the open transactions it cut (`txn_lost`), which are fenced,
and after a machine's crash every transactional id is fenced (storage/manager.py, *Boot
id*); a killed process loses nothing it wrote, so nothing is fenced then. Until the data
directory has recorded the boot (and after any failed fsync) transactional batches wait
for their fsync like others. A transactional batch is never delayed or routed: delayed
delivery and exchanges act at the append, before anyone knows whether the transaction
commits, so a transactional write to an exchange's topic is refused, and delay headers
in one are not acted on.

Waiting readers (`wait`): a long-polling reader registers one future on every partition
it reads; an append resolves the futures of its partition, the reader's deadline (a
`Timers` callback on the one clock) or the broker's closing resolves it otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import functools
import logging
import struct
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import ErrorCode, KafkaError
from ..records.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_BYTES,
    BatchHeader,
    Record,
    decode_records,
    encode_batch,
    parse_header,
    validate_batches,
)
from ..records.recompress import recompress_batch
from ..storage.errors import OffsetOutOfRangeError, StorageError
from ..storage.interface import ReadResult
from ..storage.log import FileLog
from ..storage.manager import LogManager
from ..storage.state_file import encode_states, read_states
from ..storage.txnindex import AbortedTxn
from ..types import Clock, Timers, TopicPartition
from .producers import (
    EPOCH_MAX,
    RETAINED_BATCHES,
    SEQUENCE_MAX,
    BatchMetadata,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    PartitionProducers,
    SnapshotError,
    last_sequence,
)
from .scan import scan_batch_headers

log = logging.getLogger(__name__)

PRODUCER_STATE_FILE = "producer-state-snapshot"
"""In the data directory: every partition's producer state, written at a clean stop."""
PRODUCER_SNAPSHOT_FILE = "producer-state.snapshot"
"""In a partition directory: its producer state, as older versions wrote it at a clean
stop. Still read when the data directory's file has no entry for the partition."""
_TOPIC_ID_BYTES = 16
LEADER_EPOCH = 0
"""A single broker never changes leader, so every partition stays at leader epoch 0."""

AppendListener = Callable[[TopicPartition, int, int], None]
"""Called after every append with (partition, bytes appended, records appended)."""


class PublishDelays(Protocol):
    """Delayed delivery (broker/delays.py): `plan` looks for records due in the future
    (None: none, the batch goes down the normal path; raising refuses the batch unwritten),
    `divert` writes the batch to the delayed log instead of here and returns that log's
    partition and the last offset written there."""

    def plan(
        self, partition: Partition, records: bytes | memoryview, header: BatchHeader
    ) -> Any: ...

    def divert(
        self, partition: Partition, plan: Any, records: bytes | memoryview, header: BatchHeader
    ) -> tuple[Partition, int]: ...

    def delayed_partition(self) -> Partition | None: ...


@dataclass(frozen=True, slots=True)
class DivertedProducer:
    """What one partition remembers of an idempotent producer's batches that went to the
    delayed log (see the module docstring): their sequences, to answer retries, and
    whether the producer's latest batch here is one of them, so that its next batch is
    judged against it. `dest_end` is this partition's log end when the latest was
    diverted: a batch of the producer's in the log at or after it came later (recovery
    decides `latest` with it)."""

    epoch: int
    batches: tuple[tuple[int, int, int], ...]
    """(first sequence, last sequence, last offset in the delayed log), oldest first, at
    most `RETAINED_BATCHES`."""
    dest_end: int
    latest: bool

    def find(self, epoch: int, first_seq: int, last_seq: int) -> tuple[int, int, int] | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch[0] == first_seq and batch[1] == last_seq:
                return batch
        return None

    def then(
        self, epoch: int, first_seq: int, last_seq: int, delayed_offset: int, dest_end: int
    ) -> DivertedProducer:
        """This state after one more diverted batch."""
        kept = self.batches if epoch == self.epoch else ()
        batches = (*kept, (first_seq, last_seq, delayed_offset))[-RETAINED_BATCHES:]
        return DivertedProducer(epoch, batches, dest_end, True)


DIVERTED_PRODUCERS_MAX = 10_000
"""Per partition, idempotent producers whose diverted batches are remembered; the least
recently diverted is forgotten beyond (as `PartitionProducers` forgets producers)."""


class PublishRouter(Protocol):
    """What an exchange partition does with each batch published to it: `plan` before
    the append (decode and route; raising refuses the batch unwritten), `deliver` after
    it (append the copies). See broker/exchanges.py."""

    def plan(self, records: bytes | memoryview) -> Any: ...

    def deliver(self, plan: Any, base_offset: int) -> None: ...


class Durability(enum.IntEnum):
    """When a write may be acknowledged (Kafka's acks, AMQP confirms, SQS sends)."""

    NONE = 0
    """Never acknowledged (Kafka acks=0)."""
    WRITTEN = 1
    """Once in the operating system (Kafka acks=1); the flush interval bounds exposure."""
    FSYNCED = 2
    """Once fsynced (Kafka acks=all, AMQP publisher confirms, SQS sends), unless the
    topic sets `weirmq.acks.all.fsync=false`, which makes it WRITTEN."""


@dataclass(slots=True)
class Published:
    """What `Partition.publish` did."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    """The broker's timestamp for LogAppendTime topics, else -1."""
    log_start_offset: int
    duplicate: bool
    """An idempotent retry of a batch already written: nothing new was appended."""
    durable_offset: int | None
    """Acknowledge only once the log is fsynced below this offset (None: at once)."""
    durable_partition: Partition | None = None
    """Whose log `durable_offset` is in, when not the publishing partition's (a batch
    diverted to the delayed log)."""


class NotOneBatchError(KafkaError):
    """A publish carries exactly one producer batch (Kafka: INVALID_RECORD)."""

    code = ErrorCode.invalid_record


class TransactionsUnsupportedError(KafkaError):
    """A transactional write where transactions cannot go: an exchange's topic
    (INVALID_TXN_STATE)."""

    code = ErrorCode.invalid_txn_state


class TransactionWriteError(KafkaError):
    """A transactional batch the transaction coordinator does not vouch for (KIP-890):
    raised with the coordinator's code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


TxnCheck = Callable[[int, int, TopicPartition], ErrorCode]
"""The transaction coordinator's check of a transactional write: (producer id, epoch,
partition) -> NONE when the partition is in that producer's open transaction."""

TxnLost = Callable[[TopicPartition, list[int]], None]
"""Told (partition, producer ids) when a failed fsync's roll-back took acknowledged writes
of those producers' open transactions."""

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_CONTROL_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def _ignore(_result: int | BaseException) -> None:
    """A group commit's waiter that wants no answer: a failure is the log's to report
    (`fsync_failed`, then `Partition._roll_back_unsynced`)."""


def control_type(batch: bytes | memoryview) -> int | None:
    """ABORT or COMMIT for a marker batch (its first record's key), None if unreadable."""
    for _offset, key, _value in decode_records(batch):
        if key is not None and len(key) >= _CONTROL_KEY.size:
            return int(_CONTROL_KEY.unpack_from(key)[1])
        return None
    return None


class Partition:
    """See the module docstring."""

    __slots__ = (
        "_listeners",
        "_rollbacks",
        "_waiters",
        "clock",
        "delays",
        "diverted",
        "fsync_acks_all",
        "leader_epoch",
        "log",
        "logs",
        "producers",
        "recompress",
        "router",
        "tp",
        "txn_check",
        "txn_lost",
    )

    def __init__(
        self,
        tp: TopicPartition,
        partition_log: FileLog,
        *,
        logs: LogManager,
        clock: Clock,
        listeners: list[AppendListener],
        fsync_acks_all: bool = True,
        producers: PartitionProducers | None = None,
    ) -> None:
        self.tp = tp
        self.log = partition_log
        self.logs = logs
        self.clock = clock
        self.leader_epoch = LEADER_EPOCH
        self.fsync_acks_all = fsync_acks_all
        """Whether FSYNCED waits for an fsync (the topic's weirmq.acks.all.fsync)."""
        self.producers = producers if producers is not None else PartitionProducers()
        self._rollbacks = partition_log.rollbacks
        """The log's roll-backs the producer state has followed (`_roll_back_unsynced`)."""
        self._listeners = listeners
        self._waiters: list[asyncio.Future[None]] = []
        self.router: PublishRouter | None = None
        """Set on the partitions of an exchange (broker/exchanges.py): routes each batch."""
        self.delays: PublishDelays | None = None
        """The broker's delayed delivery (broker/delays.py), set on every partition."""
        self.diverted: dict[int, DivertedProducer] = {}
        """Per idempotent producer, its batches diverted to the delayed log (see
        `DivertedProducer`); kept by broker/delays.py across restarts."""
        self.recompress: tuple[str, int | None] | None = None
        """The topic's compression.type and level when batches are rewritten in it (set
        by the broker from the topic's configs); None keeps them as sent."""
        self.txn_check: TxnCheck | None = None
        """The transaction coordinator's check of transactional writes (set by the broker);
        None refuses them."""
        self.txn_lost: TxnLost | None = None
        """Told of the producers whose open transaction lost writes here to a failed
        fsync's roll-back (set by the broker: the coordinator fences them)."""

    def __repr__(self) -> str:
        return f"Partition({self.tp})"

    # --- state --------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """The first offset readers may not see yet; see the module docstring."""
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction here, else the high watermark:
        read_committed readers read below it."""
        first = self.producers.first_unstable_offset()
        end = self.high_watermark
        return end if first is None else min(first, end)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def offline_reason(self) -> str | None:
        return self.log.offline_reason

    # --- writing ------------------------------------------------------------------------

    def publish(self, records: bytes | memoryview, durability: Durability) -> Published:
        """Append one producer batch; see the module docstring. Raises KafkaError."""
        refusal = self.logs.publish_refusal
        if refusal is not None:
            raise StorageError(refusal)
        self.follow_roll_back()  # before judging a retry against producer state
        max_bytes = self.log.config.max_message_bytes
        headers = validate_batches(records, max_batch_bytes=max_bytes)
        if len(headers) != 1:
            raise NotOneBatchError(f"a write must carry exactly one batch, got {len(headers)}")
        if self.recompress is not None:
            codec, level = self.recompress
            rewritten = recompress_batch(records, codec, level=level)
            if rewritten is not None:
                records = rewritten
                headers = validate_batches(records, max_batch_bytes=max_bytes)
        header = headers[0]
        transactional = bool(header.attributes & ATTR_TRANSACTIONAL)
        if transactional:
            self._check_transactional(header)
        delays = self.delays
        delayed = None if delays is None or transactional else delays.plan(self, records, header)
        idempotent = header.producer_id >= 0
        after_diverted = False
        if idempotent:
            duplicate, after_diverted = self._judge(header)
            if duplicate is not None:  # a retry: what it got the first time
                return self._durable(duplicate, durability, transactional)
        if delayed is not None:
            assert delays is not None
            return self._durable(self._divert(delays, delayed, records, header), durability)
        router = self.router
        plan = None if router is None else router.plan(records)  # may refuse the batch
        info = self.log.append(records, leader_epoch=self.leader_epoch, validated=headers)
        if idempotent:
            if after_diverted:
                self._record_after_diverted(header, info.base_offset, info.last_offset)
            else:
                self._record_sequence(header, info.base_offset, info.last_offset)
            if transactional:
                self.producers.begin_transaction(header.producer_id, info.base_offset)
        self._appended(len(records), header.records_count)
        if router is not None:
            router.deliver(plan, info.base_offset)
        published = Published(
            info.base_offset,
            info.last_offset,
            info.log_append_time_ms,
            self.log.log_start_offset,
            False,
            None,
        )
        return self._durable(published, durability, transactional)

    def _check_transactional(self, header: BatchHeader) -> None:
        if header.attributes & ATTR_CONTROL:
            raise NotOneBatchError("control batches are written by the broker, not producers")
        if header.producer_id < 0:
            raise NotOneBatchError("a transactional batch needs a producer id")
        if self.router is not None:
            raise TransactionsUnsupportedError(
                f"{self.tp.topic} is an exchange's topic: transactional writes are refused"
            )
        check = self.txn_check
        code = (
            ErrorCode.invalid_txn_state
            if check is None
            else check(header.producer_id, header.producer_epoch, self.tp)
        )
        if code is not ErrorCode.none:
            raise TransactionWriteError(
                code,
                f"{self.tp}: producer {header.producer_id} epoch {header.producer_epoch} "
                f"has no open transaction with this partition",
            )

    def write_marker(
        self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int = 0
    ) -> int | None:
        """End `producer_id`'s transaction here with a COMMIT or ABORT marker; the
        marker's offset (fsync the log past it before counting it written), or None when
        the producer has no transaction open here (already ended: a marker written again
        after a crash is a no-op)."""
        self.follow_roll_back()  # it may have cut the transaction's first write
        if producer_id not in self.producers.ongoing:
            return None
        refusal = self.logs.publish_refusal
        if refusal is not None:
            raise StorageError(refusal)
        key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
        value = _CONTROL_VALUE.pack(0, coordinator_epoch)
        batch = encode_batch(
            [Record(value, key, (), self.clock())],
            producer_id=producer_id,
            producer_epoch=epoch,
            attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
        )
        info = self.log.append(batch, leader_epoch=self.leader_epoch)
        first = self.producers.end_transaction(producer_id)
        assert first is not None
        if not commit:
            self.log.append_aborted_txn(
                AbortedTxn(producer_id, first, info.base_offset, self.last_stable_offset)
            )
        self._appended(len(batch), 1)
        return info.base_offset

    def _durable(
        self, published: Published, durability: Durability, transactional: bool = False
    ) -> Published:
        """Set what must be fsynced before the write may be acknowledged (nothing for a
        transactional batch: see the module docstring)."""
        if (
            durability is Durability.FSYNCED
            and self.fsync_acks_all
            and transactional
            and self.logs.boot_recorded  # else a machine's crash would go unnoticed
        ):
            # Not waited for, but started now: the commit that needs it comes a round trip
            # or more later, and then finds it done (or under way) instead of starting it.
            self.logs.when_durable(self.log, published.last_offset + 1, _ignore)
            published.durable_offset = None
        elif durability is Durability.FSYNCED and self.fsync_acks_all:
            if published.durable_partition is None:  # else diverted: set by `_divert`
                published.durable_offset = published.last_offset + 1
        else:
            published.durable_offset = None
            published.durable_partition = None
        return published

    def _judge(self, header: BatchHeader) -> tuple[Published | None, bool]:
        """An idempotent batch judged against this partition's producer state and its
        diverted batches: (the answer to a retry, or None for a new batch; whether the new
        batch follows a diverted one). Raises when its sequence or epoch is out of order."""
        pid, epoch, first = header.producer_id, header.producer_epoch, header.base_sequence
        last = last_sequence(first, header.last_offset_delta)
        diverted = self.diverted.get(pid) if self.diverted else None
        if diverted is None:
            found = self.producers.check(pid, epoch, first, last)
            return (None if found is None else self._repeat(found)), False
        entry = self.producers.entry(pid)
        found = None if entry is None else entry.find_duplicate(epoch, first, last)
        if found is not None:
            return self._repeat(found), False
        batch = diverted.find(epoch, first, last)
        if batch is not None:  # a retry of a diverted batch: still no offset here
            delayed = None if self.delays is None else self.delays.delayed_partition()
            published = Published(-1, -1, -1, self.log.log_start_offset, True, batch[2] + 1)
            published.durable_partition = delayed
            return published, False
        if not diverted.latest:
            self.producers.check(pid, epoch, first, last)  # raises when out of order
            return None, False
        _check_after_diverted(pid, diverted, epoch, first, last)
        return None, True

    def _repeat(self, found: BatchMetadata) -> Published:
        return Published(
            found.first_offset, found.last_offset, -1, self.log.log_start_offset, True, None
        )

    def _divert(
        self, delays: PublishDelays, plan: Any, records: bytes | memoryview, header: BatchHeader
    ) -> Published:
        dest_end = self.log.log_end_offset
        delayed, last = delays.divert(self, plan, records, header)
        pid = header.producer_id
        if pid >= 0:
            first = header.base_sequence
            last_seq = last_sequence(first, header.last_offset_delta)
            previous = self.diverted.pop(pid, None)
            if previous is None:
                previous = DivertedProducer(header.producer_epoch, (), dest_end, True)
            self.diverted[pid] = previous.then(
                header.producer_epoch, first, last_seq, last, dest_end
            )
            if len(self.diverted) > DIVERTED_PRODUCERS_MAX:
                del self.diverted[next(iter(self.diverted))]
        published = Published(-1, -1, -1, self.log.log_start_offset, False, last + 1)
        published.durable_partition = delayed
        return published

    def _record_sequence(self, header: BatchHeader, base_offset: int, last_offset: int) -> None:
        last_seq = last_sequence(header.base_sequence, header.last_offset_delta)
        self.producers.record(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            last_seq,
            base_offset,
            last_offset,
            self.clock(),
        )

    def _record_after_diverted(
        self, header: BatchHeader, base_offset: int, last_offset: int
    ) -> None:
        """Record a batch that follows a diverted one: its sequence continues the diverted
        batch's, which `PartitionProducers.record` would take for a gap, so the batch is
        applied as the log's truth (`replay_batch`) once `_judge` has accepted it."""
        pid = header.producer_id
        self.producers.replay_batch(
            pid,
            header.producer_epoch,
            header.base_sequence,
            last_sequence(header.base_sequence, header.last_offset_delta),
            base_offset,
            last_offset,
            self.clock(),
        )
        diverted = self.diverted[pid]
        self.diverted[pid] = DivertedProducer(
            diverted.epoch, diverted.batches, diverted.dest_end, False
        )

    def append_internal(self, records: bytes) -> int:
        """Append a batch the broker built itself (the offsets log, later dead letters and
        routing copies): no idempotence, listeners notified. Returns its last offset."""
        info = self.log.append(records, leader_epoch=self.leader_epoch)
        self._appended(len(records), info.last_offset - info.base_offset + 1)
        return info.last_offset

    def _appended(self, size_bytes: int, records: int) -> None:
        self.wake()
        for listener in self._listeners:
            listener(self.tp, size_bytes, records)

    async def durable(self, offset: int) -> None:
        """Return once the log is fsynced below `offset` (group commit); raises what
        failed the fsync (StorageError or OSError)."""
        partition_log = self.log
        if partition_log.flushed_offset >= offset:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        settler = _SETTLERS.get(loop)
        if settler is None:
            settler = _SETTLERS[loop] = _Settler(loop)
        self.logs.when_durable(partition_log, offset, functools.partial(settler.add, future))
        await future

    # --- reading ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches from the one holding `offset`, below the high watermark; raises
        OffsetOutOfRangeError outside [log start, high watermark]."""
        self.follow_roll_back()
        start, end = self.log.log_start_offset, self.high_watermark
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {self.tp}'s range [{start}, {end}]"
            )
        return self.log.read(offset, max_bytes)

    def read_committed(
        self, offset: int, max_bytes: int
    ) -> tuple[ReadResult | None, list[AbortedTxn]]:
        """What a read_committed reader may read from `offset`: whole batches below the
        last stable offset (None when there are none yet), and the aborted transactions
        they overlap, oldest first. Raises as `read`."""
        stable = self.last_stable_offset
        if offset >= stable:
            start, end = self.log.log_start_offset, self.high_watermark
            if not start <= offset <= end:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside {self.tp}'s range [{start}, {end}]"
                )
            return None, []
        read = self.read(offset, max_bytes)
        records = memoryview(read.records)
        position, upper = 0, offset
        while position + HEADER_BYTES <= len(records):
            header = parse_header(records, position)
            if header.base_offset >= stable:
                break
            position += header.size
            upper = header.last_offset + 1
        if position == 0:
            return None, []
        if position < len(records):
            read = dataclasses.replace(read, records=records[:position])
        return read, self.log.aborted_txns(offset, upper)

    def txn_write_end(self, producer_id: int) -> int | None:
        """The offset after `producer_id`'s last write here, while it has a transaction
        open here (None otherwise): what must be fsynced before that transaction commits."""
        if producer_id not in self.producers.ongoing:
            return None
        entry = self.producers.entry(producer_id)
        if entry is None or not entry.batches:  # forgotten: the whole log, to be safe
            return self.log.log_end_offset
        return entry.batches[-1].last_offset + 1

    def follow_roll_back(self) -> None:
        """After a failed fsync, roll the log back now, or follow a roll-back it made on
        its own (its append or read, called by others than this partition): the producer
        state is rebuilt and the cut transactions reported (`_roll_back_unsynced`)."""
        if self.log.fsync_failed is not None or self.log.rollbacks != self._rollbacks:
            self._roll_back_unsynced()

    def _roll_back_unsynced(self) -> None:
        """An fsync of this log failed: drop what it did not make durable (storage/log.py),
        and forget the idempotent batches dropped with it, so that a producer's retry of
        one is written again rather than answered as a duplicate of nothing. Open
        transactions that had a batch dropped are reported (`txn_lost`): those batches
        were acknowledged, so their transactions must not commit."""
        partition_log = self.log
        partition_log.roll_back_unsynced()  # unless the log did already (its append, read)
        if partition_log.rollbacks == self._rollbacks:
            return
        self._rollbacks = partition_log.rollbacks
        end = partition_log.log_end_offset  # the last good fsync's offset
        cut = []
        for producer_id in self.producers.ongoing:
            entry = self.producers.entry(producer_id)
            # A producer whose entry was forgotten (evicted) may have lost writes too.
            if entry is None or not entry.batches or entry.batches[-1].last_offset >= end:
                cut.append(producer_id)
        self.load_producers()
        if cut and self.txn_lost is not None:
            self.txn_lost(self.tp, cut)

    # --- waiting readers ----------------------------------------------------------------

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.append(waiter)

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)

    def wake(self) -> None:
        """Resolve every waiting reader (new data, the partition deleted, a shutdown)."""
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # --- producer state -----------------------------------------------------------------

    def load_producers(self, snapshot: bytes | None = None) -> None:
        """Restore idempotence state: `snapshot` (this partition's entry in the data
        directory's producer-state file, see `read_producer_snapshots`), else the file an
        older version kept in the partition directory, then the log after it (the whole log
        without a usable snapshot; only batch headers are read)."""
        partition_log = self.log
        source = "the data directory's producer state"
        if partition_log.txn_index_dropped:
            # Its aborted transactions are rebuilt by `_replay_marker`, which needs every
            # open transaction's first offset: replay the whole log.
            snapshot, source = None, "no snapshot (an aborted-transaction index was lost)"
        elif snapshot is None:
            snapshot, source = _read_partition_snapshot(partition_log.directory)
        state, start = PartitionProducers(), partition_log.log_start_offset
        if snapshot is not None:
            try:
                restored, covered = PartitionProducers.restore(snapshot)
                if start <= covered <= partition_log.log_end_offset:
                    state, start = restored, covered
                else:  # written for other data (a log cut below it, or its start moved)
                    log.info(
                        "%s: ignoring the snapshot in %s: it covers offsets below %d, the log "
                        "holds %d .. %d; replaying the log",
                        partition_log.directory.name,
                        source,
                        covered,
                        start,
                        partition_log.log_end_offset,
                    )
            except SnapshotError as exc:
                log.warning(
                    "%s: ignoring the snapshot in %s (%s); replaying the log",
                    partition_log.directory.name,
                    source,
                    exc,
                )
        self.producers = state
        if partition_log.offline_reason is not None:
            return
        try:
            for header in scan_batch_headers(partition_log, start):
                if header.is_control and header.is_transactional:
                    self._replay_marker(header)
                state.replay(header)
        except StorageError as exc:
            log.error("%s: producer state not rebuilt: %s", partition_log.directory.name, exc)

    def _replay_marker(self, header: BatchHeader) -> None:
        """A marker met while rebuilding the producer state (before it is applied): an
        abort whose entry the aborted-transaction index lost in a crash (the marker was
        written, the index not yet fsynced) gets it again."""
        first = self.producers.ongoing.get(header.producer_id)
        if first is None:
            return
        batch = self.log.read(header.base_offset, header.size).records
        if control_type(memoryview(batch)[: header.size]) != CONTROL_ABORT:
            return
        marker = header.base_offset
        known = self.log.aborted_txns(marker, marker + 1)
        if any(t.producer_id == header.producer_id and t.last_offset == marker for t in known):
            return
        others = [f for pid, f in self.producers.ongoing.items() if pid != header.producer_id]
        stable = min(others) if others else marker + 1
        self.log.append_aborted_txn(AbortedTxn(header.producer_id, first, marker, stable))

    def producer_snapshot(self) -> bytes | None:
        """This partition's idempotence state for the producer-state file (a clean stop),
        covering the whole log; None unless the log is online and fsynced to its end: a
        snapshot must never vouch for records a crash could still take away."""
        partition_log = self.log
        end = partition_log.log_end_offset
        if partition_log.offline_reason is not None or partition_log.flushed_offset < end:
            return None
        if partition_log.rollbacks != self._rollbacks:  # a roll-back it has not followed
            return None
        return self.producers.snapshot(end)


def _check_after_diverted(
    pid: int, diverted: DivertedProducer, epoch: int, first_seq: int, last_seq: int
) -> None:
    """`producers`' table for a producer whose latest batch here was diverted."""
    if not 0 <= epoch <= EPOCH_MAX:
        raise InvalidProducerEpochError(f"producer {pid}: invalid epoch {epoch}")
    if not (0 <= first_seq <= SEQUENCE_MAX and 0 <= last_seq <= SEQUENCE_MAX):
        raise OutOfOrderSequenceError(
            f"producer {pid}: invalid sequences {first_seq} .. {last_seq}"
        )
    if epoch < diverted.epoch:
        raise InvalidProducerEpochError(
            f"producer {pid}: epoch {epoch} is older than the current {diverted.epoch}"
        )
    expected = 0 if epoch > diverted.epoch else last_sequence(diverted.batches[-1][1], 1)
    if first_seq != expected:
        raise OutOfOrderSequenceError(
            f"producer {pid} epoch {epoch}: sequence {first_seq}, expected {expected}"
        )


def producer_state_file(
    partitions: Iterable[Partition], topic_ids: Mapping[str, uuid.UUID]
) -> bytes:
    """The data directory's producer-state file (`storage.state_file`): per partition,
    its topic's id and then its snapshot (`Partition.producer_snapshot`). A partition
    without a snapshot (offline, not durable) is left out, and its state is rebuilt from
    the log at the next start."""
    states: dict[TopicPartition, bytes] = {}
    for partition in partitions:
        topic_id = topic_ids.get(partition.tp.topic)
        snapshot = partition.producer_snapshot()
        if topic_id is not None and snapshot is not None:
            states[partition.tp] = topic_id.bytes + snapshot
    return encode_states(states)


def read_producer_snapshots(
    data_dir: Path, topic_ids: Mapping[str, uuid.UUID]
) -> dict[TopicPartition, bytes]:
    """Per partition, its snapshot from the data directory's producer-state file, if the
    entry was written for the topic that has its name now: a topic deleted and created
    again gets a new id, and the old topic's state must not be applied to the new log."""
    snapshots: dict[TopicPartition, bytes] = {}
    for tp, entry in read_states(data_dir / PRODUCER_STATE_FILE).items():
        topic_id = topic_ids.get(tp.topic)
        if topic_id is None:
            continue  # the topic is gone
        if entry[:_TOPIC_ID_BYTES] == topic_id.bytes:
            snapshots[tp] = entry[_TOPIC_ID_BYTES:]
        else:
            log.info("%s: ignoring the producer snapshot of an earlier topic of this name", tp)
    return snapshots


def _read_partition_snapshot(directory: Path) -> tuple[bytes | None, str]:
    """The snapshot file older versions wrote in each partition directory, if any."""
    path = directory / PRODUCER_SNAPSHOT_FILE
    try:
        return path.read_bytes(), path.name
    except FileNotFoundError:
        return None, path.name
    except OSError as exc:
        log.warning("%s: cannot read %s (%s); replaying the log", directory.name, path.name, exc)
        return None, path.name


class _Settler:
    """Hands the flusher thread's results to the event loop, one wake-up per batch.

    One fsync round answers every writer that was waiting (often several acks=all produces
    at once); `call_soon_threadsafe` per writer would write to the loop's wake-up pipe and
    schedule a callback each time. Results are queued here instead, and only the first of
    a batch schedules the loop callback that settles them all."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weak: `_SETTLERS` holds settlers by weak reference to their loop, and a strong
        # one back would keep every loop a test process ever ran alive.
        self._loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Future[int], int | BaseException]] = []

    def add(self, future: asyncio.Future[int], result: int | BaseException) -> None:
        """On the flusher thread."""
        with self._lock:
            self._pending.append((future, result))
            if len(self._pending) > 1:
                return  # the loop callback is scheduled and has not run yet
        loop = self._loop()
        # No loop, or RuntimeError: the loop is closed, so nobody is waiting any more.
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._settle_all)

    def _settle_all(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for future, result in pending:
            _settle(future, result)


_SETTLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Settler] = (
    weakref.WeakKeyDictionary()
)
"""One `_Settler` per event loop (a test process runs many loops, a broker one)."""


def _settle(future: asyncio.Future[int], result: int | BaseException) -> None:
    if future.done():  # the waiting request was cancelled (its connection closed)
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


class Wakeable(Protocol):
    """Something readers wait on: a `Partition` (woken by appends), or any other source of
    wakeups (a share group's, broker/shares.py)."""

    def add_waiter(self, waiter: asyncio.Future[None]) -> None: ...

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None: ...


def wait_any(
    partitions: Iterable[Wakeable], deadline_ms: int, timers: Timers, clock: Clock
) -> Awaitable[None] | None:
    """An awaitable that returns when one of `partitions` gets an append (or is woken),
    or at `deadline_ms` on the broker's clock; None when the deadline has passed."""
    if deadline_ms <= clock():
        return None
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    registered = list(partitions)
    for partition in registered:
        partition.add_waiter(waiter)

    def on_deadline() -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = timers.call_at(deadline_ms, on_deadline)

    async def wait() -> None:
        try:
            await waiter
        finally:
            timer.cancel()
            for partition in registered:
                partition.remove_waiter(waiter)

    return wait()
