"""Idempotent producers (KIP-98): per-partition sequence state, sans I/O.

An idempotent producer gets a producer id and an epoch, and numbers its records per
partition: a v2 batch carries ``base_sequence`` and covers the sequences
``base_sequence .. base_sequence + last_offset_delta``, wrapping from 2**31-1 to 0. When a
produce request times out the producer sends the same batch again, so the leader must tell
a retry (answer it with the offsets it got the first time, append nothing) from a new batch
(must continue the sequence) and from a gap (a batch was lost: refuse it).

A producer has at most five requests in flight, so a retry can only be of one of its last
five batches: per producer we keep its epoch and the metadata of its last five batches,
and nothing else. Per partition, a batch is judged before it is appended::

    producer     batch epoch   accepted first sequence       otherwise
    unknown      any           any                           -
    epoch e      < e           none (a zombie: fenced)       INVALID_PRODUCER_EPOCH (47)
    epoch e      == e          last sequence + 1, wrapping   OUT_OF_ORDER_SEQUENCE_NUMBER (45)
    epoch e      > e           0 (the epoch was bumped)      OUT_OF_ORDER_SEQUENCE_NUMBER (45)

Before that table, a batch of the current epoch whose first and last sequences equal those
of one of the five retained batches is a duplicate, answered with that batch's offsets. An
older retry, no longer retained, is out of order. A producer is unknown when it is new, or
when its entry was forgotten (expired, evicted, its batches deleted by retention): Kafka
accepts any sequence then, because there is nothing left to compare with. A known producer
always has an epoch and at least one batch, so "no epoch yet" and "unknown" are one state.
Epochs outside 0 .. 32767 and sequences outside 0 .. 2**31-1 never come from Kafka's
clients; they are refused with the same two codes, so that client input cannot reach the
invariants below.

The leader calls `check` and, if it returns None, appends and calls `record`; `record`
asserts that `check` accepts the batch, since recording a refused batch or a duplicate
would hand later retries the wrong offsets.

Entries are forgotten when their last batch is ``producer.id.expiration.ms`` old
(`PartitionProducers.expire`, with Kafka's ``now - last >= expiration``), and when more
than `max_producers` producers are known the least recently written one goes: memory stays
bounded whatever the clients do, at the cost of duplicate detection for a producer idle
long enough to be the oldest.

Batches with no producer id (-1) are not idempotent and are not looked at.

Transactions (KIP-98): per partition, the producers with a transaction open here and the
offset of its first batch (`ongoing`). A transactional batch of a producer without one
opens it (`begin_transaction`); its marker (a control batch) closes it
(`end_transaction`). The smallest first offset is the partition's last stable offset: no
read_committed reader reads at or past it until that transaction ends. Markers carry no
sequence, so they leave the sequence state alone.

The state is rebuilt after a restart from a snapshot plus the log after it: `replay`
applies batch headers in log order with no checks. A snapshot (big-endian, like Kafka's
own files; Kafka keeps only the last batch per producer, we keep all five so that retries
across a restart are still answered with their offsets) is::

    offset  size  field
         0     2  version            2 (1: without the open transactions)
         2     4  crc                CRC-32C of bytes 6 .. end
         6     8  end_offset         the state covers the log below this offset
        14     4  producer_count
        18     .  producers, least recently written first (so eviction order survives):
                      8  producer_id
                      2  producer_epoch
                      1  batch_count        1 .. 5, oldest batch first
                     32  per batch: first_seq (4), last_seq (4), first_offset (8),
                                    last_offset (8), timestamp_ms (8)
         .     4  ongoing_count      version 2 only
         .     .  open transactions: producer_id (8), first_offset (8)

A snapshot that is damaged, of an unknown version, or whose content breaks the invariants
below raises `SnapshotError`; the caller then rebuilds from the log alone.

Invariants, asserted on every update because a wrong entry would silently duplicate or drop
acknowledged records: sequences lie in 0 .. 2**31-1; a batch spans as many sequences as
offsets; a producer's batches have increasing offsets.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass

from weirmq.errors import ErrorCode, KafkaError
from weirmq.records import checksum
from weirmq.records.batch import BatchHeader

__all__ = [
    "DEFAULT_MAX_PRODUCERS",
    "RETAINED_BATCHES",
    "SEQUENCE_MAX",
    "SNAPSHOT_VERSION",
    "BatchMetadata",
    "InvalidProducerEpochError",
    "OutOfOrderSequenceError",
    "PartitionProducers",
    "ProducerEntry",
    "SnapshotError",
    "last_sequence",
]

SEQUENCE_MAX = 2**31 - 1  # sequences are int32 and wrap to 0 after this
EPOCH_MAX = 2**15 - 1  # epochs are int16; Kafka gives a new producer id instead of wrapping
RETAINED_BATCHES = 5  # max.in.flight.requests.per.connection is at most 5 for idempotence
DEFAULT_MAX_PRODUCERS = 100_000
SNAPSHOT_VERSION = 2
SNAPSHOT_VERSIONS = (1, 2)

_SNAPSHOT_HEAD = struct.Struct(">hI")  # version, crc
_SNAPSHOT_COVERED = struct.Struct(">qI")  # end_offset, producer_count
_SNAPSHOT_PRODUCER = struct.Struct(">qhB")  # producer_id, producer_epoch, batch_count
_SNAPSHOT_BATCH = struct.Struct(">iiqqq")
_SNAPSHOT_PRODUCER_BYTES_MIN = _SNAPSHOT_PRODUCER.size + _SNAPSHOT_BATCH.size
_SNAPSHOT_COUNT = struct.Struct(">i")
_SNAPSHOT_ONGOING = struct.Struct(">qq")


class OutOfOrderSequenceError(KafkaError):
    """A batch does not continue its producer's sequence: a batch before it was lost."""

    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(KafkaError):
    """A batch from an older epoch of its producer: a zombie that has been fenced."""

    code = ErrorCode.invalid_producer_epoch


class SnapshotError(ValueError):
    """A producer-state snapshot that cannot be trusted; rebuild from the log instead."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is kept of one appended batch: enough to recognise a retry and answer it."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """One producer's state in one partition: its epoch and its last batches, oldest first."""

    epoch: int
    batches: tuple[BatchMetadata, ...]

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq

    @property
    def last_timestamp_ms(self) -> int:
        return self.batches[-1].timestamp_ms

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch that a batch with these sequences would repeat, if any."""
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


def last_sequence(first_seq: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record: `first_seq` + delta, wrapping to 0 after 2**31-1."""
    return (first_seq + last_offset_delta) % (SEQUENCE_MAX + 1)


def _next_sequence(last_seq: int) -> int:
    """The sequence that must follow `last_seq`."""
    return last_sequence(last_seq, 1)


class PartitionProducers:
    """The idempotent-producer state of one partition.

    The leader calls `check` before appending a batch and `record` after; recovery and
    followers call `replay` (or `replay_batch`) for batches already in the log.
    """

    def __init__(self, max_producers: int = DEFAULT_MAX_PRODUCERS) -> None:
        assert max_producers >= 1, f"max_producers must be at least 1, got {max_producers}"
        self._max_producers = max_producers
        # Least recently written first: the next to evict is at the front.
        self._entries: OrderedDict[int, ProducerEntry] = OrderedDict()
        self.ongoing: dict[int, int] = {}
        """Producers with a transaction open here: producer id -> its first offset."""

    def begin_transaction(self, producer_id: int, first_offset: int) -> None:
        """A transactional batch was appended at `first_offset`: opens the producer's
        transaction here unless one is open."""
        self.ongoing.setdefault(producer_id, first_offset)

    def end_transaction(self, producer_id: int) -> int | None:
        """A marker was appended: the transaction's first offset (None if none was open)."""
        return self.ongoing.pop(producer_id, None)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction here, if any."""
        return min(self.ongoing.values()) if self.ongoing else None

    @property
    def max_producers(self) -> int:
        return self._max_producers

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._entries

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """The state of one producer, or None when it is unknown here."""
        return self._entries.get(producer_id)

    def entries(self) -> list[tuple[int, ProducerEntry]]:
        """Every (producer id, entry), least recently written first."""
        return list(self._entries.items())

    def check(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """Judge a batch before it is appended.

        Returns None when the batch is to be appended, or the metadata of the earlier batch
        it repeats: answer with that batch's offsets and append nothing. Raises
        `InvalidProducerEpochError` or `OutOfOrderSequenceError` when it must be refused.
        """
        if producer_id < 0:  # Kafka's NO_PRODUCER_ID: not idempotent, nothing to check
            return None
        _check_ranges(producer_id, epoch, first_seq, last_seq)
        entry = self._entries.get(producer_id)
        if entry is None:
            return None
        duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
        if duplicate is not None:
            return duplicate
        _check_epoch_and_sequence(producer_id, entry, epoch, first_seq)
        return None

    def record(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp_ms: int,
    ) -> None:
        """Remember a batch the leader appended after `check` accepted it.

        `timestamp_ms` is the broker's append time; expiration is measured from it.
        """
        if producer_id < 0:
            return
        _assert_accepted(self, producer_id, epoch, first_seq, last_seq)
        self._apply(
            producer_id,
            epoch,
            BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp_ms),
        )

    def replay(self, header: BatchHeader) -> None:
        """Apply a batch read back from the log, in log order, without checks.

        The header holds no append time, so the batch's max timestamp stands in for it (as
        in Kafka): for CreateTime topics that is the producer's clock.
        """
        if header.producer_id < 0:
            return
        if header.is_control:  # a marker: ends the producer's transaction, no sequence
            self.ongoing.pop(header.producer_id, None)
            return
        if header.is_transactional:
            self.ongoing.setdefault(header.producer_id, header.base_offset)
        self.replay_batch(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            last_sequence(header.base_sequence, header.last_offset_delta),
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
        )

    def replay_batch(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp_ms: int,
    ) -> None:
        """Apply a batch already in the log (recovery, replication), in log order.

        No epoch or sequence checks: the log is the truth, and what it holds was accepted
        by whichever leader wrote it.
        """
        if producer_id < 0:
            return
        self._apply(
            producer_id,
            epoch,
            BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp_ms),
        )

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers whose last batch is `expiration_ms` old or older; their ids.

        As Kafka's (`>=`). The whole table is scanned rather than stopping at the first
        young entry: write order is not timestamp order once timestamps come from the log or
        the wall clock steps back.
        """
        assert expiration_ms >= 0, f"expiration_ms must not be negative, got {expiration_ms}"
        expired = [
            producer_id
            for producer_id, entry in self._entries.items()
            if now_ms - entry.last_timestamp_ms >= expiration_ms
        ]
        for producer_id in expired:
            del self._entries[producer_id]
        return expired

    def snapshot(self, end_offset: int) -> bytes:
        """The state as bytes (format in the module docstring), covering the log below
        `end_offset`: after a restore, replay the log from `end_offset` on."""
        assert end_offset >= 0, f"end offset {end_offset} is negative"
        covered = bytearray(_SNAPSHOT_COVERED.pack(end_offset, len(self._entries)))
        for producer_id, entry in self._entries.items():
            assert entry.batches[-1].last_offset < end_offset, (
                f"producer {producer_id} has a batch at or beyond end offset {end_offset}"
            )
            covered += _SNAPSHOT_PRODUCER.pack(producer_id, entry.epoch, len(entry.batches))
            for batch in entry.batches:
                covered += _SNAPSHOT_BATCH.pack(
                    batch.first_seq,
                    batch.last_seq,
                    batch.first_offset,
                    batch.last_offset,
                    batch.timestamp_ms,
                )
        covered += _SNAPSHOT_COUNT.pack(len(self.ongoing))
        for producer_id, first_offset in self.ongoing.items():
            assert first_offset < end_offset, f"open transaction at {first_offset} >= {end_offset}"
            covered += _SNAPSHOT_ONGOING.pack(producer_id, first_offset)
        return _SNAPSHOT_HEAD.pack(SNAPSHOT_VERSION, checksum.crc32c(covered)) + bytes(covered)

    @classmethod
    def restore(
        cls, data: bytes, *, max_producers: int = DEFAULT_MAX_PRODUCERS
    ) -> tuple[PartitionProducers, int]:
        """The state a `snapshot` holds and the offset to replay the log from.

        Raises `SnapshotError` for anything damaged, unknown or inconsistent. When the
        snapshot holds more than `max_producers` producers the least recently written go.
        """
        version, covered = _verified_covered_bytes(data)
        end_offset, producer_count = _SNAPSHOT_COVERED.unpack_from(covered)
        if end_offset < 0:
            raise SnapshotError(f"negative end offset {end_offset} in the snapshot")
        state = cls(max_producers)
        entries, position = _decode_entries(covered, end_offset, producer_count)
        for producer_id, entry in entries:
            state._insert(producer_id, entry)
        if version >= 2:
            state.ongoing = _decode_ongoing(covered, position, end_offset)
        elif position != len(covered):
            raise SnapshotError(f"{len(covered) - position} trailing bytes in the snapshot")
        return state, end_offset

    def _apply(self, producer_id: int, epoch: int, batch: BatchMetadata) -> None:
        previous = self._entries.get(producer_id)
        if previous is None or previous.epoch != epoch:
            # A new epoch starts a new sequence: older batches can no longer be retried.
            entry = ProducerEntry(epoch, (batch,))
        else:
            entry = ProducerEntry(epoch, (*previous.batches, batch)[-RETAINED_BATCHES:])
        problem = _append_problem(previous.batches[-1] if previous else None, batch)
        assert problem is None, f"producer {producer_id}: {problem}"
        self._insert(producer_id, entry)

    def _insert(self, producer_id: int, entry: ProducerEntry) -> None:
        self._entries[producer_id] = entry
        self._entries.move_to_end(producer_id)
        if len(self._entries) > self._max_producers:
            self._entries.popitem(last=False)


def _check_ranges(producer_id: int, epoch: int, first_seq: int, last_seq: int) -> None:
    # Kafka's clients never send these; refused here, they cannot trip `record`'s asserts.
    if not 0 <= epoch <= EPOCH_MAX:
        raise InvalidProducerEpochError(f"producer {producer_id}: invalid epoch {epoch}")
    if not (0 <= first_seq <= SEQUENCE_MAX and 0 <= last_seq <= SEQUENCE_MAX):
        raise OutOfOrderSequenceError(
            f"producer {producer_id}: invalid sequences {first_seq} .. {last_seq}"
        )


def _check_epoch_and_sequence(
    producer_id: int, entry: ProducerEntry, epoch: int, first_seq: int
) -> None:
    """The table of the module docstring, for a known producer and a non-duplicate batch."""
    if epoch < entry.epoch:
        raise InvalidProducerEpochError(
            f"producer {producer_id}: epoch {epoch} is older than the current {entry.epoch}"
        )
    expected = 0 if epoch > entry.epoch else _next_sequence(entry.last_seq)
    if first_seq != expected:
        raise OutOfOrderSequenceError(
            f"producer {producer_id} epoch {epoch}: sequence {first_seq}, expected {expected}"
        )


def _assert_accepted(
    state: PartitionProducers, producer_id: int, epoch: int, first_seq: int, last_seq: int
) -> None:
    # Recording a batch that `check` refuses, or a duplicate, would make retries get the
    # wrong offsets: a broker bug, not a client error.
    try:
        duplicate = state.check(producer_id, epoch, first_seq, last_seq)
    except KafkaError as refusal:
        raise AssertionError(f"recording a refused batch: {refusal}") from refusal
    assert duplicate is None, f"producer {producer_id}: recording a duplicate of {duplicate}"


def _append_problem(previous: BatchMetadata | None, batch: BatchMetadata) -> str | None:
    """What is wrong with `batch` following `previous` of the same producer, if anything."""
    if not (0 <= batch.first_seq <= SEQUENCE_MAX and 0 <= batch.last_seq <= SEQUENCE_MAX):
        return f"sequences {batch.first_seq} .. {batch.last_seq} out of range"
    if not 0 <= batch.first_offset <= batch.last_offset:
        return f"offsets {batch.first_offset} .. {batch.last_offset} out of order"
    if last_sequence(batch.first_seq, batch.last_offset - batch.first_offset) != batch.last_seq:
        return f"{batch} spans a different number of sequences and offsets"
    if previous is not None and batch.first_offset <= previous.last_offset:
        return f"offset {batch.first_offset} does not follow {previous.last_offset}"
    return None


def _entry_problem(producer_id: int, entry: ProducerEntry) -> str | None:
    if producer_id < 0 or not 0 <= entry.epoch <= EPOCH_MAX:
        return f"invalid producer id {producer_id} or epoch {entry.epoch}"
    previous: BatchMetadata | None = None
    for batch in entry.batches:
        problem = _append_problem(previous, batch)
        if problem is not None:
            return problem
        previous = batch
    return None


def _verified_covered_bytes(data: bytes) -> tuple[int, bytes]:
    """The version and the bytes after the CRC, once both are known good."""
    if len(data) < _SNAPSHOT_HEAD.size + _SNAPSHOT_COVERED.size:
        raise SnapshotError(f"snapshot truncated to {len(data)} bytes")
    version, crc = _SNAPSHOT_HEAD.unpack_from(data)
    if version not in SNAPSHOT_VERSIONS:
        raise SnapshotError(f"unknown snapshot version {version}")
    covered = bytes(data[_SNAPSHOT_HEAD.size :])
    if checksum.crc32c(covered) != crc:
        raise SnapshotError("snapshot CRC mismatch")
    return version, covered


def _decode_ongoing(covered: bytes, position: int, end_offset: int) -> dict[int, int]:
    if position + _SNAPSHOT_COUNT.size > len(covered):
        raise SnapshotError("snapshot truncated before its open transactions")
    (count,) = _SNAPSHOT_COUNT.unpack_from(covered, position)
    position += _SNAPSHOT_COUNT.size
    if count < 0 or position + count * _SNAPSHOT_ONGOING.size != len(covered):
        raise SnapshotError(f"{count} open transactions do not fit the snapshot")
    ongoing: dict[int, int] = {}
    for producer_id, first_offset in _SNAPSHOT_ONGOING.iter_unpack(covered[position:]):
        if producer_id < 0 or not 0 <= first_offset < end_offset or producer_id in ongoing:
            raise SnapshotError(f"bad open transaction {producer_id} at {first_offset}")
        ongoing[producer_id] = first_offset
    return ongoing


def _decode_entries(
    covered: bytes, end_offset: int, producer_count: int
) -> tuple[list[tuple[int, ProducerEntry]], int]:
    position = _SNAPSHOT_COVERED.size
    # Checked before the loop so that a bad count cannot make us loop or allocate for long.
    if producer_count * _SNAPSHOT_PRODUCER_BYTES_MIN > len(covered) - position:
        raise SnapshotError(f"{producer_count} producers cannot fit in the snapshot")
    entries: dict[int, ProducerEntry] = {}
    for _ in range(producer_count):
        producer_id, entry, position = _decode_entry(covered, position)
        problem = _entry_problem(producer_id, entry)
        if problem is None and entry.batches[-1].last_offset >= end_offset:
            problem = f"batch beyond the end offset {end_offset}"
        if problem is None and producer_id in entries:
            problem = "listed twice"
        if problem is not None:
            raise SnapshotError(f"snapshot entry for producer {producer_id}: {problem}")
        entries[producer_id] = entry
    return list(entries.items()), position


def _decode_entry(covered: bytes, position: int) -> tuple[int, ProducerEntry, int]:
    """One producer at `position`: (producer id, entry, position after it)."""
    if position + _SNAPSHOT_PRODUCER.size > len(covered):
        raise SnapshotError("snapshot truncated inside a producer")
    producer_id, epoch, batch_count = _SNAPSHOT_PRODUCER.unpack_from(covered, position)
    if not 1 <= batch_count <= RETAINED_BATCHES:
        raise SnapshotError(f"producer {producer_id} has {batch_count} batches")
    start = position + _SNAPSHOT_PRODUCER.size
    end = start + batch_count * _SNAPSHOT_BATCH.size
    if end > len(covered):
        raise SnapshotError("snapshot truncated inside a producer")
    batches = tuple(
        BatchMetadata(*fields) for fields in _SNAPSHOT_BATCH.iter_unpack(covered[start:end])
    )
    return producer_id, ProducerEntry(epoch, batches), end
