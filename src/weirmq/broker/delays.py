"""Delayed delivery: records produced now, appended to their topic when due.

Per topic, off by default: the topic config `weirmq.delay.enable=true` turns it on (the
broker sets `Partition.delays` on that topic's partitions only). On other topics the
headers below are headers like any other and the record is appended at once, because the
check costs a search of every batch's bytes (below) that topics without delays should not
pay; RabbitMQ makes delays opt-in too (its delayed-message exchange type).

A record produced with the header `weirmq.delay.ms` (milliseconds after the broker gets it)
or `weirmq.deliver.at.ms` (epoch milliseconds), ASCII decimal, is appended to its partition
no earlier than that time, and soon after it (the goal: within 100 ms). Plain consumers and
share groups then read it like any record; it keeps its key, value, headers (the delay
header included, so a consumer can see it was delayed) and timestamp, and gains the header
`weirmq.delayed.offset` (`OFFSET:INDEX`, where it waited). Both headers on one record: the
later time wins. A value that is not a non-negative decimal integer, or a time more than
`DELAY_MAX_MS` (90 days, SQS's retention ceiling rounded up) ahead, refuses the whole batch
with INVALID_RECORD and says why; nothing is written.

The delayed log
---------------
At publish (`Partition.publish`, through `plan` and `divert`), a batch holding a record due
in the future is not appended to its partition. It goes whole, as the producer sent it,
into one record of the internal topic `__weirmq_delayed` (one partition, made on first use),
whose key says where it goes and when each record is due (`_Meta`, JSON). That log is the
truth: it is written with the produce's durability (acks=all waits for its fsync), and
everything else here is rebuilt from it. A batch whose delays are all past already goes down
the normal path, unchanged; in a batch that is diverted, records without a delay are due at
once (delivered at the next tick, in order with the rest).

The check on the hot path is one regular-expression search of the batch for the headers'
common prefix `weirmq.del` (a compressed batch is decompressed first, with the broker's
bound); only a batch that contains it is read record by record. docs/delays.md gives the
measured cost.

The index
---------
What is pending is indexed by due time in SQLite (stdlib), `delayed-index.sqlite` in the
data directory: rows (due_ms, delayed-log offset, record index), primary key in that
order, so the next due rows and the earliest due time are one B-tree walk away, and a
million pending records cost a million rows on disk and a bounded page cache in memory
(`INDEX_CACHE_KIB`), never a million Python objects. SQLite rather than our own time-bucket
files: deletes, ordered range reads and crash-consistent commits come for free, and a
row costs ~5 us to insert and ~9 us to take and delete (measured here with 200,000 rows),
a fraction of reading, re-encoding and appending its record.
The database runs in WAL mode without fsync (`synchronous=NORMAL`): it may lose its last
commits in a machine crash, never its consistency, and it carries `indexed_end`, the
delayed-log offset it indexes up to, in the same transactions, so recovery re-reads the
delayed log from there (and drops rows below the log start or past its end).

Delivery
--------
One timer on the broker's `Timers` sits at the earliest due time. When it fires, up to
`TICK_RECORDS_MAX` due rows (and `TICK_BYTES_MAX` of delayed-log reads) are taken in due
order, ties in produce order; their records are read from the delayed log and appended to
their partitions, one uncompressed batch per destination (`records.codec.CopyWriter`). If
more are due, the timer is set for now (the loop serves others in between), else for the
next due time. A destination deleted (or deleted and created again) meanwhile: the record
is dropped and logged.

Exactly once across crashes:

- a row is deleted only once its copy is fsynced in the destination (each tick asks the
  group committer for that fsync; rows waiting for it are *in flight*, at most
  `INFLIGHT_RECORDS_MAX`), so no crash loses a delivery;
- per destination partition the index keeps `scan_from`: no copy whose row is still in the
  index lies below it. It is set (to the destination's end) in the same transaction as the
  first row for that destination, and moved up only when no copy for it is in flight. On
  start, each destination is read from `scan_from` for `weirmq.delayed.offset` headers, and
  the rows of copies found there are deleted: a crash between a copy and its row's delete
  delivers nothing twice. A database rolled back by a machine crash rolls back rows and
  `scan_from` together, so this holds then too.

The delayed log's start advances to its lowest pending offset once rows below are deleted,
so it does not grow forever (segments below the start are deleted).

Idempotent producers
--------------------
A diverted batch still takes its place in its producer's sequence on the destination
partition (`Partition.diverted`, `DivertedProducer`): its next batch there must follow it,
and a retry of it is answered as a duplicate (base offset -1 again, nothing written). That
state is kept in the index's `producers` table (same transaction as the rows) and rebuilt
after a crash from the delayed log's records after `indexed_end`; the destination's own
producer state says whether a batch came after the diverted one (`dest_end`).

Not here yet: delays on an exchange's partitions (the config is refused for an exchange,
which routes at once), and a bound on pending records per topic (the disk bounds them).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ErrorCode, KafkaError
from ..records.batch import (
    DECOMPRESSED_BYTES_MAX,
    HEADER_BYTES,
    BatchHeader,
    Record,
    decode_records,
    encode_batch,
)
from ..records.codec import Copy, CopyWriter, read_records
from ..records.compression import decompress
from ..storage.errors import StorageError
from ..types import Timer, TopicPartition
from .partition import DivertedProducer, Partition
from .producers import last_sequence
from .scan import scan_batches
from .timers import UNSCHEDULED

if TYPE_CHECKING:
    import sqlite3

    from .core import Broker
    from .stats import DelayStats

log = logging.getLogger(__name__)

DELAYED_TOPIC = "__weirmq_delayed"
"""The internal topic holding every diverted batch until its records are delivered."""
DELAYED_BATCH_BYTES_MAX = 1 << 30
"""The delayed log's max.message.bytes: a diverted batch is as large as its topic allows,
plus its key; Kafka's own ceiling for a topic's limit is about 2 GiB."""
DELAYED_TOPIC_CONFIGS = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "segment.bytes": str(64 << 20),
    "max.message.bytes": str(DELAYED_BATCH_BYTES_MAX),
}
"""Kept until delivered (the start moves, retention never deletes a pending record)."""
DELAY_HEADER = "weirmq.delay.ms"
DELIVER_AT_HEADER = "weirmq.deliver.at.ms"
DELAYED_OFFSET_HEADER = "weirmq.delayed.offset"
"""On every delivered copy: `OFFSET:INDEX` of its record in the delayed log."""
DELAY_MAX_MS = 90 * 24 * 3600 * 1000
"""The furthest ahead a record may be due: 90 days."""
INDEX_FILE = "delayed-index.sqlite"
INDEX_CACHE_KIB = 4096
"""The index's page cache: what memory pending records cost, however many there are."""
TICK_RECORDS_MAX = 2000
"""Records delivered per timer tick at most; more due: another tick at once, after the loop
has served others."""
TICK_BYTES_MAX = 8 << 20
"""Delayed-log bytes read per tick at most (the first record always)."""
INFLIGHT_RECORDS_MAX = 20_000
"""Delivered records whose destination fsync is awaited at most; delivery pauses beyond."""
CONFIRM_POLL_MS = 5
"""How soon a tick with deliveries in flight looks again whether they are fsynced."""
RETRY_MS = 1000
"""When delivery failed (a destination offline, an error): how soon it is tried again."""
COPY_BATCH_BYTES_MAX = 1 << 20
"""A delivered batch holds at most about this many bytes of records."""
_MARK = re.compile(re.escape(b"weirmq.del"))
"""The common prefix of both delay headers (and of `DELAYED_OFFSET_HEADER`)."""
_COPY_MARK = re.compile(re.escape(DELAYED_OFFSET_HEADER.encode()))
_DIGITS_MAX = 19  # an int64 in decimal


class InvalidDelayError(KafkaError):
    """A delay header the broker cannot honour (INVALID_RECORD, with the reason)."""

    code = ErrorCode.invalid_record


# --- headers --------------------------------------------------------------------------------


def _milliseconds(name: str, value: bytes | None) -> int:
    if value is None or not 0 < len(value) <= _DIGITS_MAX or not value.isdigit():
        shown = value if value is None else value[:40]
        raise InvalidDelayError(
            f"record header {name} must be a non-negative whole number of milliseconds in "
            f"ASCII decimal, got {shown!r}"
        )
    return int(value)


def due_of(headers: Iterable[tuple[str, bytes | None]], now_ms: int) -> int:
    """When a record with these headers is due (`now_ms` when it has no delay); raises
    InvalidDelayError for a malformed or too distant one."""
    due = now_ms
    for name, value in headers:
        if name == DELAY_HEADER:
            delay = _milliseconds(name, value)
            if delay > DELAY_MAX_MS:
                raise InvalidDelayError(
                    f"record header {name}: {delay} ms is more than the maximum delay, "
                    f"{DELAY_MAX_MS} ms (90 days)"
                )
            due = max(due, now_ms + delay)
        elif name == DELIVER_AT_HEADER:
            at = _milliseconds(name, value)
            if at > now_ms + DELAY_MAX_MS:
                raise InvalidDelayError(
                    f"record header {name}: {at} is more than 90 days ahead "
                    f"(the maximum delay is {DELAY_MAX_MS} ms)"
                )
            due = max(due, at)
    return due


def due_times(records: bytes | memoryview, header: BatchHeader, now_ms: int) -> list[int] | None:
    """Per record of one validated batch, when it is due; None when none is after
    `now_ms` (then the batch is not delayed). Raises InvalidDelayError."""
    data: bytes | memoryview = records
    if header.codec:
        payload = memoryview(records)[HEADER_BYTES : header.size]
        data = decompress(header.codec, payload, max_bytes=DECOMPRESSED_BYTES_MAX)
    if _MARK.search(data) is None:
        return None
    _, spans = read_records(records)
    dues = [due_of(span.headers, now_ms) for span in spans]
    return dues if dues and max(dues) > now_ms else None


# --- the diverted batch's record -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Meta:
    """The key of a delayed-log record: where its batch goes and when each record is due,
    and the producer's place in its sequence (see "Idempotent producers")."""

    topic: str
    topic_id: str
    partition: int
    due: list[int]
    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    dest_end: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": 1,
                "topic": self.topic,
                "topic_id": self.topic_id,
                "partition": self.partition,
                "due": self.due,
                "producer": [self.producer_id, self.epoch, self.first_seq, self.last_seq],
                "dest_end": self.dest_end,
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def decode(key: bytes | None) -> _Meta:
        """Raises ValueError (KeyError, TypeError) on a key that is not one of ours."""
        doc = json.loads(key or b"")
        if doc.get("v") != 1:
            raise ValueError(f"unknown version {doc.get('v')!r}")
        pid, epoch, first, last = (int(x) for x in doc["producer"])
        return _Meta(
            str(doc["topic"]),
            str(doc["topic_id"]),
            int(doc["partition"]),
            [int(d) for d in doc["due"]],
            pid,
            epoch,
            first,
            last,
            int(doc["dest_end"]),
        )

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(slots=True)
class _Plan:
    """What `plan` found: the due time of every record of the batch."""

    due: list[int]


class _Out:
    """One record to deliver, as `CopyWriter` reads it."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(self, span: Copy, offset: int, index: int) -> None:
        self.offset = 0
        self.timestamp = span.timestamp
        self.key = span.key
        self.value = span.value
        self.headers = [*span.headers, (DELAYED_OFFSET_HEADER, f"{offset}:{index}".encode())]


Row = tuple[int, int, int]
"""(due_ms, delayed-log offset, record index)."""


@dataclass(slots=True)
class _InFlight:
    """Copies appended to one destination, awaiting its fsync below `end`."""

    partition: Partition
    start: int
    """The destination's log end before the copies."""
    end: int
    rows: list[Row]


# --- the index -------------------------------------------------------------------------------


class DelayIndex:
    """Pending records by due time, on disk (SQLite); see the module docstring."""

    def __init__(self, path: Path) -> None:
        import sqlite3  # only brokers that delay something pay for it

        self._db: sqlite3.Connection = sqlite3.connect(path)
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA cache_size=-{INDEX_CACHE_KIB}")
        db.executescript(
            """
            CREATE TABLE IF NOT EXISTS due (
                due_ms INTEGER NOT NULL, off INTEGER NOT NULL, idx INTEGER NOT NULL,
                PRIMARY KEY (due_ms, off, idx)) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS due_by_offset ON due (off, idx);
            CREATE TABLE IF NOT EXISTS meta (
                name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS dests (
                topic TEXT NOT NULL, part INTEGER NOT NULL, scan_from INTEGER NOT NULL,
                PRIMARY KEY (topic, part)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS producers (
                topic TEXT NOT NULL, part INTEGER NOT NULL, pid INTEGER NOT NULL,
                state TEXT NOT NULL, PRIMARY KEY (topic, part, pid)) WITHOUT ROWID;
            """
        )
        db.commit()

    def add(self, offset: int, dues: Sequence[int]) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO due VALUES (?, ?, ?)",
            ((due, offset, index) for index, due in enumerate(dues)),
        )

    def due(self, now_ms: int, limit: int) -> list[Row]:
        """The first `limit` rows due at `now_ms`, in due order, ties in produce order."""
        cursor = self._db.execute(
            "SELECT due_ms, off, idx FROM due WHERE due_ms <= ? ORDER BY due_ms, off, idx LIMIT ?",
            (now_ms, limit),
        )
        return cursor.fetchall()

    def next_due(self, after_ms: int) -> int | None:
        """The earliest due time after `after_ms`."""
        row = self._db.execute("SELECT MIN(due_ms) FROM due WHERE due_ms > ?", (after_ms,))
        found = row.fetchone()[0]
        return None if found is None else int(found)

    def remove(self, rows: Iterable[Row]) -> None:
        self._db.executemany("DELETE FROM due WHERE due_ms = ? AND off = ? AND idx = ?", rows)

    def remove_copy(self, offset: int, index: int) -> int:
        cursor = self._db.execute("DELETE FROM due WHERE off = ? AND idx = ?", (offset, index))
        return cursor.rowcount

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM due").fetchone()[0])

    def min_offset(self) -> int | None:
        found = self._db.execute("SELECT MIN(off) FROM due").fetchone()[0]
        return None if found is None else int(found)

    def purge_outside(self, start: int, end: int) -> int:
        """Delete rows of offsets outside [start, end): delivered, or lost with the log."""
        cursor = self._db.execute("DELETE FROM due WHERE off < ? OR off >= ?", (start, end))
        return cursor.rowcount

    def clear(self) -> None:
        for table in ("due", "meta", "dests", "producers"):
            self._db.execute(f"DELETE FROM {table}")

    def indexed_end(self) -> int:
        found = self._db.execute("SELECT value FROM meta WHERE name = 'indexed_end'").fetchone()
        return 0 if found is None else int(found[0])

    def set_indexed_end(self, offset: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('indexed_end', ?)", (offset,))

    def add_dest(self, tp: TopicPartition, scan_from: int) -> None:
        """Know destination `tp`, from `scan_from` if it is new (see "Delivery")."""
        self._db.execute("INSERT OR IGNORE INTO dests VALUES (?, ?, ?)", (*tp, scan_from))

    def dests(self) -> list[tuple[TopicPartition, int]]:
        rows = self._db.execute("SELECT topic, part, scan_from FROM dests").fetchall()
        return [(TopicPartition(t, p), s) for t, p, s in rows]

    def set_scan_from(self, tp: TopicPartition, scan_from: int) -> None:
        self._db.execute(
            "UPDATE dests SET scan_from = ? WHERE topic = ? AND part = ?", (scan_from, *tp)
        )

    def remove_dest(self, tp: TopicPartition) -> None:
        self._db.execute("DELETE FROM dests WHERE topic = ? AND part = ?", tuple(tp))
        self._db.execute("DELETE FROM producers WHERE topic = ? AND part = ?", tuple(tp))

    def put_producer(self, tp: TopicPartition, pid: int, state: DivertedProducer) -> None:
        doc = json.dumps([state.epoch, state.batches, state.dest_end])
        self._db.execute("INSERT OR REPLACE INTO producers VALUES (?, ?, ?, ?)", (*tp, pid, doc))

    def remove_producer(self, tp: TopicPartition, pid: int) -> None:
        self._db.execute(
            "DELETE FROM producers WHERE topic = ? AND part = ? AND pid = ?", (*tp, pid)
        )

    def producers(self) -> dict[tuple[TopicPartition, int], DivertedProducer]:
        found: dict[tuple[TopicPartition, int], DivertedProducer] = {}
        for topic, part, pid, doc in self._db.execute("SELECT * FROM producers"):
            try:
                epoch, batches, dest_end = json.loads(doc)
                kept = tuple((int(f), int(la), int(o)) for f, la, o in batches)
                found[TopicPartition(topic, part), pid] = DivertedProducer(
                    int(epoch), kept, int(dest_end), True
                )
            except (ValueError, TypeError) as exc:
                log.warning("delayed delivery: ignoring producer state %r: %s", doc, exc)
        return found

    def commit(self) -> None:
        self._db.commit()

    def close(self) -> None:
        self._db.commit()
        self._db.close()


# --- the service -----------------------------------------------------------------------------


class Delays:
    """Delayed delivery for one broker (every partition's `delays`); see the module
    docstring."""

    def __init__(self, broker: Broker, data_dir: Path) -> None:
        self._broker = broker
        self._path = data_dir / INDEX_FILE
        self._index: DelayIndex | None = None
        self._timer: Timer | None = None
        self._timer_at: int | None = None
        self._in_flight: list[_InFlight] = []
        self._in_flight_rows: set[Row] = set()
        self._failed_at: int | None = None
        """When to try again what a tick could not deliver (a destination offline)."""
        self._closed = False

    @property
    def stats(self) -> DelayStats:
        return self._broker.stats.delays

    # --- publish ---------------------------------------------------------------------------

    def plan(
        self, partition: Partition, records: bytes | memoryview, header: BatchHeader
    ) -> _Plan | None:
        """The due times of a batch to divert, or None to publish it as usual."""
        now = self._broker.clock()
        dues = due_times(records, header, now)
        if dues is None:
            return None
        if partition.router is not None:
            raise InvalidDelayError(
                f"{partition.tp.topic!r} is an exchange; delayed delivery applies to topics "
                "(produce the delayed records to a bound topic)"
            )
        return _Plan(dues)

    def divert(
        self, partition: Partition, plan: Any, records: bytes | memoryview, header: BatchHeader
    ) -> tuple[Partition, int]:
        """Write the batch to the delayed log and index it; returns that log's partition and
        the record's offset there."""
        assert isinstance(plan, _Plan)
        topic = self._broker.topics.get(partition.tp.topic)
        assert topic is not None, partition.tp
        meta = _Meta(
            partition.tp.topic,
            topic.topic_id.hex,
            partition.tp.partition,
            plan.due,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            last_sequence(header.base_sequence, header.last_offset_delta),
            partition.log_end_offset,
        )
        delayed = self._delayed_partition(create=True)
        assert delayed is not None
        now = self._broker.clock()
        wrapper = encode_batch([Record(bytes(records), meta.encode(), (), now)])
        offset = delayed.append_internal(wrapper)
        self.stats.diverted += len(plan.due)
        self.stats.pending += len(plan.due)
        try:
            index = self._open_index()
            index.add(offset, plan.due)
            index.add_dest(partition.tp, partition.log_end_offset)
            index.set_indexed_end(offset + 1)
            if header.producer_id >= 0:
                self._keep_producer(index, partition, meta, offset)
            index.commit()
        except Exception:  # the log has it: the next start indexes it again
            log.exception("delayed delivery: indexing delayed-log offset %d failed", offset)
            return delayed, offset
        self._wake(min(plan.due))
        return delayed, offset

    def _keep_producer(self, index: DelayIndex, partition: Partition, meta: _Meta, at: int) -> None:
        previous = partition.diverted.get(meta.producer_id)
        base = previous or DivertedProducer(meta.epoch, (), meta.dest_end, True)
        state = base.then(meta.epoch, meta.first_seq, meta.last_seq, at, meta.dest_end)
        index.put_producer(partition.tp, meta.producer_id, state)

    def delayed_partition(self) -> Partition | None:
        return self._delayed_partition(create=False)

    def _delayed_partition(self, *, create: bool) -> Partition | None:
        found = self._broker.partition(DELAYED_TOPIC, 0)
        if found is None and create:
            self._broker.create_topic(DELAYED_TOPIC, 1, DELAYED_TOPIC_CONFIGS)
            found = self._broker.partition(DELAYED_TOPIC, 0)
            assert found is not None
        return found

    def _open_index(self) -> DelayIndex:
        if self._index is None:
            self._index = DelayIndex(self._path)
        return self._index

    # --- start -----------------------------------------------------------------------------

    def load(self) -> None:
        """Check the index against the delayed log, index what it lacks, drop what the
        destinations already hold, restore the producers' diverted batches, and set the
        timer. Called once, after every partition and its producer state is loaded."""
        delayed = self._delayed_partition(create=False)
        if delayed is None and not self._path.exists():
            return  # nothing was ever delayed here
        index = self._open_index()
        if delayed is None:
            index.clear()
            index.commit()
            return
        if delayed.offline_reason is not None:
            log.error("delayed delivery stopped: %s is offline", DELAYED_TOPIC)
            return
        start, end = delayed.log_start_offset, delayed.log_end_offset
        purged = index.purge_outside(start, end)
        indexed = min(max(index.indexed_end(), start), end)
        producers = index.producers()
        added = self._index_log(index, delayed, indexed, producers)
        index.set_indexed_end(end)
        found = self._drop_delivered(index)
        self._restore_producers(index, producers)
        index.commit()
        self.stats.pending = index.count()
        log.info(
            "delayed delivery: %d record(s) pending (%d indexed from the log, %d found "
            "delivered, %d dropped outside the log)",
            self.stats.pending, added, found, purged,
        )  # fmt: skip
        first = index.next_due(-1)  # due already, most likely: the broker was down
        if first is not None:
            self._set_timer(first)

    def _index_log(
        self,
        index: DelayIndex,
        delayed: Partition,
        start: int,
        producers: dict[tuple[TopicPartition, int], DivertedProducer],
    ) -> int:
        """Index the delayed log's records from `start` on (what a crash left unindexed)."""
        added = 0
        try:
            for batch in scan_batches(delayed.log, start):
                for offset, key, _value in decode_records(batch):
                    if offset < start:
                        continue
                    try:
                        meta = _Meta.decode(key)
                    except (ValueError, KeyError, TypeError) as exc:
                        log.error("%s: skipping record %d: %s", DELAYED_TOPIC, offset, exc)
                        continue
                    index.add(offset, meta.due)
                    dest = self._broker.partitions.get(meta.tp)
                    # Not known: its copies may lie anywhere in the destination.
                    index.add_dest(meta.tp, 0 if dest is None else dest.log_start_offset)
                    if meta.producer_id >= 0:
                        pair = (meta.tp, meta.producer_id)
                        base = producers.get(pair) or DivertedProducer(
                            meta.epoch, (), meta.dest_end, True
                        )
                        producers[pair] = base.then(
                            meta.epoch, meta.first_seq, meta.last_seq, offset, meta.dest_end
                        )
                    added += len(meta.due)
        except (StorageError, KafkaError) as exc:
            log.error("%s: indexing stopped early: %s", DELAYED_TOPIC, exc)
        return added

    def _drop_delivered(self, index: DelayIndex) -> int:
        """Delete the rows of copies the destinations already hold (read from `scan_from`)."""
        found = 0
        for tp, scan_from in index.dests():
            dest = self._broker.partitions.get(tp)
            if dest is None:
                index.remove_dest(tp)
                continue
            if dest.offline_reason is not None:
                continue
            try:
                for batch in scan_batches(dest.log, scan_from):
                    if _COPY_MARK.search(batch) is None:
                        continue
                    for offset, index_in in _copies_in(batch):
                        found += index.remove_copy(offset, index_in)
            except (StorageError, KafkaError) as exc:
                log.error("delayed delivery: reading %s stopped early: %s", tp, exc)
                continue
            index.set_scan_from(tp, dest.log_end_offset)
        return found

    def _restore_producers(
        self, index: DelayIndex, producers: dict[tuple[TopicPartition, int], DivertedProducer]
    ) -> None:
        for (tp, pid), state in producers.items():
            dest = self._broker.partitions.get(tp)
            entry = None if dest is None else dest.producers.entry(pid)
            if dest is None or (entry is not None and entry.epoch > state.epoch):
                index.remove_producer(tp, pid)  # gone, or fenced by a newer epoch
                continue
            # A batch of the producer's in the log at or after `dest_end` came later.
            latest = entry is None or entry.batches[-1].last_offset < state.dest_end
            kept = DivertedProducer(state.epoch, state.batches, state.dest_end, latest)
            dest.diverted[pid] = kept
            index.put_producer(tp, pid, kept)

    # --- delivery --------------------------------------------------------------------------

    def _wake(self, due_ms: int) -> None:
        """A row due at `due_ms` was added: fire then if that is sooner than planned."""
        if self._timer_at is None or due_ms < self._timer_at:
            self._set_timer(due_ms)

    def _set_timer(self, at_ms: int) -> None:
        if self._closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        timer = self._broker.timers.call_at(at_ms, self._fire)
        if timer is UNSCHEDULED:  # no loop yet: the next publish or start sets it
            self._timer, self._timer_at = None, None
        else:
            self._timer, self._timer_at = timer, at_ms

    def _fire(self) -> None:
        self._timer, self._timer_at = None, None
        if self._closed or self._index is None:
            return
        now = self._broker.clock()
        try:
            more = self.tick(now)
        except Exception:
            log.exception("delayed delivery failed; retrying in %d ms", RETRY_MS)
            self._set_timer(now + RETRY_MS)
            return
        self._reschedule(now, more=more)

    def _reschedule(self, now_ms: int, *, more: bool = False) -> None:
        index = self._index
        if index is None or self._closed:
            return
        candidates = [now_ms] if more else []
        next_due = index.next_due(now_ms)
        if next_due is not None:
            candidates.append(next_due)
        if self._in_flight:
            candidates.append(now_ms + CONFIRM_POLL_MS)
        if self._failed_at is not None:
            candidates.append(self._failed_at)
        if candidates:
            self._set_timer(min(candidates))

    def tick(self, now_ms: int) -> bool:
        """Confirm fsynced deliveries, then deliver what is due (bounded); returns whether
        more is due at once."""
        index = self._index
        assert index is not None
        self._failed_at = None
        self._confirm(index)
        room = min(TICK_RECORDS_MAX, INFLIGHT_RECORDS_MAX - len(self._in_flight_rows))
        if room <= 0:
            return False  # the confirm poll comes back
        skip = self._in_flight_rows
        rows = [r for r in index.due(now_ms, room + len(skip)) if r not in skip][:room]
        if not rows:
            return False
        taken = self._deliver(index, rows, now_ms)
        # Not when a destination failed: its rows come first again, so wait `RETRY_MS`.
        return (taken < len(rows) or len(rows) == room) and self._failed_at is None

    def _deliver(self, index: DelayIndex, rows: list[Row], now_ms: int) -> int:
        """Append the records of `rows` (in order) to their destinations; returns how many
        rows were dealt with (fewer when the byte budget ran out)."""
        read_bytes = 0
        wrappers: dict[int, tuple[_Meta, list[Copy]] | None] = {}
        out: dict[TopicPartition, tuple[Partition, list[_Out], list[Row]]] = {}
        dropped: list[Row] = []
        taken = 0
        for row in rows:
            _due, offset, position = row
            if offset not in wrappers:
                if read_bytes >= TICK_BYTES_MAX:
                    break
                wrapper, size = self._read(offset)
                wrappers[offset] = wrapper
                read_bytes += size
            taken += 1
            wrapper = wrappers[offset]
            if wrapper is None:
                dropped.append(row)
                continue
            meta, spans = wrapper
            dest = self._destination(meta, offset)
            if dest is None or position >= len(spans):
                dropped.append(row)
                continue
            if dest.offline_reason is not None:
                self._failed_at = now_ms + RETRY_MS
                continue
            entry = out.get(meta.tp)
            if entry is None:
                entry = out[meta.tp] = (dest, [], [])
            entry[1].append(_Out(spans[position], offset, position))
            entry[2].append(row)
        if dropped:
            index.remove(dropped)
            self.stats.dropped += len(dropped)
            self.stats.pending -= len(dropped)
        index.commit()  # before the copies: a crash after them must find `scan_from` set
        for tp, (dest, copies, dest_rows) in out.items():
            self._append(tp, dest, copies, dest_rows, now_ms)
        return taken

    def _append(
        self, tp: TopicPartition, dest: Partition, copies: list[_Out], rows: list[Row], now_ms: int
    ) -> None:
        start = dest.log_end_offset
        writer = CopyWriter(-1, -1, COPY_BATCH_BYTES_MAX)
        last = start - 1
        try:
            for batch, _first, _count in writer.write(copies, _no_sequence):
                last = dest.append_internal(batch)
        except KafkaError as exc:
            log.error("delayed delivery to %s failed (retrying in %d ms): %s", tp, RETRY_MS, exc)
            self._failed_at = now_ms + RETRY_MS
            if last < start:
                return
            rows = rows[: last - start + 1]  # what was appended before the failure
        self._in_flight.append(_InFlight(dest, start, last + 1, rows))
        self._in_flight_rows.update(rows)
        self._broker.logs.sync(dest.log, last + 1)  # the group committer fsyncs it soon
        stats = self.stats
        stats.delivered += len(rows)
        for due, _offset, _index in rows:
            stats.lateness.observe(max(0, now_ms - due) / 1000)

    def _read(self, offset: int) -> tuple[tuple[_Meta, list[Copy]] | None, int]:
        """The delayed-log record at `offset` (None, logged, if unreadable) and its size."""
        delayed = self._delayed_partition(create=False)
        try:
            if delayed is None:
                raise StorageError(f"{DELAYED_TOPIC} is gone")
            batch = delayed.log.read(offset, 1).records  # the whole batch holding it
            for found, key, value in decode_records(batch):
                if found == offset:
                    _, spans = read_records(value or b"")
                    return (_Meta.decode(key), spans), len(batch)
            raise StorageError(f"no record at offset {offset}")
        except (StorageError, KafkaError, ValueError, KeyError, TypeError) as exc:
            log.error("delayed delivery: dropping %s offset %d: %s", DELAYED_TOPIC, offset, exc)
            return None, 0

    def _destination(self, meta: _Meta, offset: int) -> Partition | None:
        """The partition the record goes to; None (logged) when it is gone."""
        topic = self._broker.topics.get(meta.topic)
        dest = self._broker.partitions.get(meta.tp)
        if topic is None or dest is None or topic.topic_id.hex != meta.topic_id:
            log.warning(
                "delayed delivery: %s is gone; dropping %s offset %d",
                meta.tp, DELAYED_TOPIC, offset,
            )  # fmt: skip
            return None
        return dest

    def _confirm(self, index: DelayIndex) -> None:
        """Delete the rows of copies now fsynced; move `scan_from` and the log start."""
        done: list[_InFlight] = []
        waiting: list[_InFlight] = []
        for flight in self._in_flight:
            dest = flight.partition
            gone = self._broker.partitions.get(dest.tp) is not dest
            if gone or dest.log.flushed_offset >= flight.end:
                done.append(flight)
            else:
                waiting.append(flight)
        if not done:
            return
        self._in_flight = waiting
        busy = {flight.partition.tp: flight.start for flight in reversed(waiting)}
        for flight in done:
            index.remove(flight.rows)
            self._in_flight_rows.difference_update(flight.rows)
            self.stats.pending -= len(flight.rows)
            tp = flight.partition.tp
            if tp not in busy:
                index.set_scan_from(tp, flight.partition.log_end_offset)
        for tp, start in busy.items():
            index.set_scan_from(tp, start)
        index.commit()
        self._advance_start(index)

    def _advance_start(self, index: DelayIndex) -> None:
        delayed = self._delayed_partition(create=False)
        if delayed is None or delayed.offline_reason is not None:
            return
        lowest = index.min_offset()
        start = delayed.log_end_offset if lowest is None else lowest
        if start > delayed.log_start_offset:
            delayed.log.advance_log_start(start)

    # --- stop ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the timer and close the index (its rows for copies not yet confirmed stay:
        the next start finds those copies from `scan_from`)."""
        if self._index is not None and self._in_flight:
            try:  # after the final flush, what is in flight is durable: no rescan at start
                self._confirm(self._index)
            except Exception:
                log.exception("delayed delivery: confirming deliveries at stop failed")
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._index is not None:
            self._index.close()
            self._index = None

    def pending(self) -> int:
        return self.stats.pending


def _no_sequence(_first: int, _count: int) -> int:
    return -1


def _copies_in(batch: bytes | memoryview) -> Iterable[tuple[int, int]]:
    """(delayed-log offset, record index) of every delivered copy in one batch."""
    _, spans = read_records(batch)
    for span in spans:
        for name, value in span.headers:
            if name == DELAYED_OFFSET_HEADER and value:
                offset, _, index = value.partition(b":")
                if offset.isdigit() and index.isdigit():
                    yield int(offset), int(index)
