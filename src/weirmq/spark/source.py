"""The `weirmq` PySpark data source: batch and streaming reads and writes of topics.

Spark runs a Python data source in Python worker processes: the driver side (`reader`,
`partitions`, the stream reader's offset methods) in one worker next to the driver, and
`read` / `write` in executor workers, which get the reader or writer pickled. So:

- Options are parsed and checked when Spark creates the reader or writer, on the driver,
  and a mistake fails the query there, naming the option.
- Planning (which partitions, which offsets) runs on the driver against the broker with
  `Cluster`; tasks get fixed `OffsetRange`s and read them with their own consumer
  (`read.py`). Nothing is read on the driver.
- A streaming query's offsets are the Kafka source's JSON (`{"topic": {"0": 42}}`), the
  end offsets of each micro-batch, which Spark journals in the checkpoint before the batch
  runs. On restart Spark replays the last planned batch with the same start and end, so
  rows are neither skipped nor read twice.
- New partitions (a topic grown, or a new topic matching `subscribePattern`) join a
  running stream at their earliest offset.
- `maxOffsetsPerTrigger` is the default read limit (`ReadMaxRows`), which Spark applies
  under `trigger(availableNow=True)` too; `prepareForTriggerAvailableNow` fixes the high
  watermarks the run ends at.
- Offsets that went away are data loss (`failOnDataLoss`): below a partition's earliest
  offset (retention), a partition deleted, or a partition's offsets gone down (deleted and
  made again; with `failOnDataLoss=false` it is read again from its earliest offset).
- With `commitOffsetsToGroup=true` and `kafka.group.id`, the end offsets of each
  completed batch are committed to that consumer group, so `weirmq groups describe` or
  kafka-consumer-groups show the query's lag (Flink's Kafka source does the same on
  checkpoints; Spark's never commits). Spark calls `commit` late (when it plans the next
  batch), so the lag shown is an upper bound; the checkpoint, not the group, is where the
  query resumes from, and a refused commit is only logged.
- Writes are at-least-once, or with `deliveryGuarantee=exactly-once` a two-phase commit:
  each task writes in a Kafka transaction it leaves open, and the writer's `commit` (Spark's
  batch commit, on the driver) commits them all, idempotently on a replay (twophase.py,
  write.py). A task learns its identity from Spark: its partition id, and for a stream the
  persistent query id and the batch id Spark sets as local properties of the batch's jobs;
  a batch write's id is drawn on the driver when Spark makes the writer. The driver's
  `abort` aborts the prepared transactions and fences those of the tasks that failed, so
  that they do not hold read_committed readers back until they time out.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from weirmq.spark import twophase
from weirmq.spark.cluster import Cluster, ClusterError, make_producer
from weirmq.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from weirmq.spark.planning import (
    OffsetRange,
    Offsets,
    TopicPartitionKey,
    from_json_offsets,
    limit_rows,
    split_ranges,
    to_json_offsets,
)
from weirmq.spark.read import DataLossError, consumer_config, data_loss_message, read_range
from weirmq.spark.schema import check_sink_schema, spark_schema
from weirmq.spark.twophase import PreparedTxn
from weirmq.spark.write import (
    TaskIdentity,
    decision_group,
    ensure_commits_topic,
    write_batches,
    write_transactionally,
)

log = logging.getLogger("weirmq.spark")


class WeirMQDataSource(DataSource):
    """`spark.read.format("weirmq")` and friends; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "weirmq"

    def schema(self) -> Any:
        # Spark asks for the schema at load(), for reads only: checking the options here
        # makes a mistake fail load() itself. What only a batch or only a stream may have
        # is checked when Spark makes the reader.
        return spark_schema(parse_read_options(self.options, streaming=None).include_headers)

    def reader(self, schema: Any) -> DataSourceReader:
        opts = parse_read_options(self.options, streaming=False)
        _check_read_schema(schema, opts)
        if opts.max_offsets_per_trigger is not None:
            # As in Spark: one set of options may serve a batch and a streaming read.
            log.warning(
                "maxOffsetsPerTrigger applies to streaming reads; this batch read ignores it"
            )
        return BatchReader(opts)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        opts = parse_read_options(self.options, streaming=True)
        _check_read_schema(schema, opts)
        return StreamReader(opts)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        return BatchWriter(_write_options(self.options, schema, overwrite))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return StreamWriter(_write_options(self.options, schema, overwrite))


def _check_read_schema(schema: Any, opts: ReadOptions) -> None:
    expected = spark_schema(opts.include_headers)
    if schema != expected:
        raise OptionError(
            "the weirmq source has a fixed schema (that of Spark's Kafka source) and cannot "
            f"be given another; expected {expected.simpleString()}"
        )


def _write_options(options: Any, schema: Any, overwrite: bool) -> WriteOptions:
    if overwrite:
        raise OptionError(
            "a weirmq write appends to topics; mode 'overwrite' is not supported (use 'append')"
        )
    opts = parse_write_options(options)
    check_sink_schema(schema, opts.topic)
    # A producer setting librdkafka refuses fails here, on the driver, not in every task.
    make_producer(opts.client)
    if opts.exactly_once:
        ensure_commits_topic(opts.client)
    return opts


class RangePartition(InputPartition):
    """One Spark task: one offset range of one topic partition (its `value`)."""

    @property
    def range(self) -> OffsetRange:
        value: OffsetRange = self.value
        return value


class _Reading:
    """What batch and stream readers share: planning against the broker, reading ranges."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.cluster = Cluster(opts.client, opts.group_id_prefix)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):
            # Spark runs one task with a bare InputPartition when a batch read plans none.
            return iter(())
        return read_range(
            partition.range,
            consumer_config(self.opts.client, self.opts.group_id_prefix),
            include_headers=self.opts.include_headers,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            poll_timeout_ms=self.opts.poll_timeout_ms,
        )

    def snapshot(self) -> tuple[list[TopicPartitionKey], Offsets, Offsets]:
        """The partitions read now, with their earliest and latest offsets."""
        partitions = self.cluster.partitions(self.opts.subscription)
        return partitions, self.cluster.earliest(partitions), self.cluster.latest(partitions)

    def resolve(
        self,
        partitions: list[TopicPartitionKey],
        earliest: Offsets,
        latest: Offsets,
        *,
        ending: bool,
    ) -> Offsets:
        """Concrete offsets for `partitions` from the starting or ending options."""
        spec: OffsetSpec = self.opts.ending if ending else self.opts.starting
        name = "endingOffsets" if ending else "startingOffsets"
        if spec.offsets or spec.timestamps:
            table = spec.offsets or spec.timestamps
            missing = [tp for tp in partitions if tp not in table]
            extra = [tp for tp in table if tp not in set(partitions)]
            if missing or extra:
                raise OptionError(
                    f"{name} must give every partition read, and only those: "
                    + "; ".join(
                        part
                        for part in (
                            _listing("missing", missing),
                            _listing("not part of the read", extra),
                        )
                        if part
                    )
                    + " (-2 is earliest, -1 latest)"
                )
        if spec.by_time:
            asked = {
                tp: spec.timestamps[tp] if spec.timestamps else spec.timestamp or 0
                for tp in partitions
            }
            found = self.cluster.for_times(asked)
            out: Offsets = {}
            for tp in partitions:
                offset = found[tp]
                if offset >= 0:
                    out[tp] = offset
                elif ending or self.opts.latest_if_no_timestamp_match:
                    out[tp] = latest[tp]
                else:
                    raise OptionError(
                        f"{name}: no record of {tp[0]}-{tp[1]} has a timestamp at or after "
                        f"{asked[tp]} (set startingOffsetsByTimestampStrategy=latest to start "
                        "such partitions at their latest offset)"
                    )
            return out
        out = {}
        for tp in partitions:
            code = spec.offsets.get(tp, spec.default)
            out[tp] = earliest[tp] if code == EARLIEST else latest[tp] if code == LATEST else code
        return out

    def ranges(self, start: Offsets, end: Offsets, earliest: Offsets) -> list[RangePartition]:
        """The tasks for reading `[start, end)` of each partition, after the data-loss check:
        offsets below a partition's earliest were removed by retention."""
        ranges = []
        for tp, stop in sorted(end.items()):
            begin = start[tp]
            if begin < earliest[tp]:
                lost = f"offsets {begin} to {earliest[tp] - 1} of {tp[0]}-{tp[1]}"
                if self.opts.fail_on_data_loss:
                    raise DataLossError(
                        data_loss_message(
                            f"Cannot read {lost}: the earliest offset still there is {earliest[tp]}"
                        )
                    )
                log.warning("skipping %s: removed by retention before they were read", lost)
                begin = earliest[tp]
            ranges.append(OffsetRange(tp[0], tp[1], begin, stop))
        return [RangePartition(r) for r in split_ranges(ranges, self.opts.min_partitions)]


def _listing(label: str, tps: list[TopicPartitionKey]) -> str:
    return f"{label}: {', '.join(f'{t}-{p}' for t, p in sorted(tps))}" if tps else ""


class BatchReader(_Reading, DataSourceReader):
    """`spark.read.format("weirmq")`: offsets fixed once, when the query is planned."""

    def partitions(self) -> list[InputPartition]:
        try:
            partitions, earliest, latest = self.snapshot()
            start = self.resolve(partitions, earliest, latest, ending=False)
            end = self.resolve(partitions, earliest, latest, ending=True)
        finally:
            self.cluster.close()
        problems = []
        for tp in partitions:
            where = f"{tp[0]}-{tp[1]}"
            if start[tp] > latest[tp]:
                problems.append(f"starting offset {start[tp]} of {where} is after its end")
            elif end[tp] > latest[tp]:
                problems.append(f"ending offset {end[tp]} of {where} is after its end")
            elif end[tp] < start[tp]:
                problems.append(f"ending offset {end[tp]} of {where} is before the starting one")
            if start[tp] > latest[tp] or end[tp] > latest[tp]:
                problems[-1] += f" (its latest offset is {latest[tp]})"
        if problems:
            raise OptionError("cannot read: " + "; ".join(problems))
        return list(self.ranges(start, end, earliest))


class StreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("weirmq")`; see the module docstring."""

    def __init__(self, opts: ReadOptions) -> None:
        super().__init__(opts)
        self._target: Offsets | None = None
        self._latest: Offsets | None = None

    def initialOffset(self) -> dict[str, Any]:
        partitions, earliest, latest = self.snapshot()
        return to_json_offsets(self.resolve(partitions, earliest, latest, ending=False))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.cluster.partitions(self.opts.subscription)
        self._target = self.cluster.latest(partitions)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json_offsets(start)
        current = self.cluster.partitions(self.opts.subscription)
        if self._target is not None:
            # availableNow: nothing past the ends fixed when the run started; partitions
            # made since then wait for the next run.
            latest = {tp: self._target[tp] for tp in current if tp in self._target}
            latest.update({tp: begin[tp] for tp in current if tp in begin and tp not in latest})
        else:
            latest = self.cluster.latest(current)
        self._report_gone(sorted(tp for tp in begin if tp not in latest))
        went_down = sorted(tp for tp in begin if tp in latest and latest[tp] < begin[tp])
        if went_down:
            self._report_went_down(went_down, begin, latest)
        new = [tp for tp in latest if tp not in begin]
        if new:
            log.info("new partitions: %s", ", ".join(f"{t}-{p}" for t, p in new))
        # New partitions start at their earliest offset (as in Spark's Kafka source), and
        # so do partitions whose offsets went down (with failOnDataLoss=false).
        first = {tp: begin[tp] for tp in latest if tp in begin}
        first.update(self.cluster.earliest([*new, *went_down]))  # one ListOffsets request
        self._latest = dict(latest)
        if isinstance(limit, ReadMaxRows):
            latest = limit_rows(first, latest, limit.max_rows)
        return to_json_offsets(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json_offsets(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = from_json_offsets(start)
        stop = from_json_offsets(end)
        if begin == stop:
            return []
        # A replayed batch may name partitions deleted since it was planned.
        current = set(self.cluster.partitions(self.opts.subscription))
        self._report_gone(sorted(tp for tp in stop if tp not in current))
        stop = {tp: offset for tp, offset in stop.items() if tp in current}
        earliest = self.cluster.earliest(list(stop))
        first = {}
        for tp, offset in stop.items():
            if tp not in begin or begin[tp] > offset:  # new, or its offsets went down
                first[tp] = earliest[tp]
            else:
                first[tp] = begin[tp]
        return list(self.ranges(first, stop, earliest))

    def _report_gone(self, gone: list[TopicPartitionKey]) -> None:
        if not gone:
            return
        what = f"partition(s) {', '.join(f'{t}-{p}' for t, p in gone)} no longer exist"
        if self.opts.fail_on_data_loss:
            raise DataLossError(data_loss_message(f"Cannot go on reading: {what}"))
        log.warning("%s; no longer reading them", what)

    def _report_went_down(
        self, went_down: list[TopicPartitionKey], begin: Offsets, latest: Offsets
    ) -> None:
        what = ", ".join(f"{t}-{p} from {begin[(t, p)]} to {latest[(t, p)]}" for t, p in went_down)
        message = (
            f"The latest offsets went down ({what}): the partitions were deleted and made "
            "again, and the records written since the query last read them may be missed"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(data_loss_message(message))
        log.warning("%s; reading them again from their earliest offsets", message)

    def commit(self, end: dict[str, Any]) -> None:
        if self.opts.commit_to_group:
            try:
                self.cluster.commit(from_json_offsets(end))
            except ClusterError as exc:
                # For monitoring only: the checkpoint, not the group, is where the query
                # resumes, so a refused commit must not stop it.
                log.warning("could not commit the query's offsets to its group: %s", exc)

    def stop(self) -> None:
        self.cluster.close()


# The local properties Spark sets on a micro-batch's jobs (StreamExecution.QUERY_ID_KEY,
# MicroBatchExecution.BATCH_ID_KEY): the query id is the one kept in the checkpoint, so it is
# the same after a restart, and a replayed batch keeps its id.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class WriteResult(WriterCommitMessage):
    """What one write task reports: how many records it wrote (None: an exactly-once task
    of a batch already decided, by an earlier run), and with exactly-once the transaction
    it left open for the driver to commit (None: it wrote no row)."""

    records: int | None
    partition: int = -1
    txn: PreparedTxn | None = None


def _partition_id(*, required: bool) -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        # Every write task has one; only exactly-once cannot do without it.
        assert not required, "an exactly-once write task runs without a Spark TaskContext"
        return -1
    return context.partitionId()


def _stream_task(opts: WriteOptions) -> TaskIdentity:
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "a write task runs in a Spark task"
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch_id is None:
        raise OptionError(
            "deliveryGuarantee=exactly-once: Spark did not give this streaming task its "
            f"query and batch ids ({QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY})"
        )
    return TaskIdentity(
        opts.transactional_id_prefix, query_id, int(batch_id), context.partitionId()
    )


def _write(iterator: Iterator[Any], opts: WriteOptions, task: TaskIdentity | None) -> WriteResult:
    if task is None:
        return WriteResult(
            write_batches(iterator, opts.client, opts.topic), _partition_id(required=False)
        )
    prepared = write_transactionally(iterator, opts.client, opts.topic, task)
    if prepared is None:
        return WriteResult(None, task.partition)
    records, txn = prepared
    return WriteResult(records, task.partition, txn)


def _commit(
    opts: WriteOptions, write_id: str, batch_id: int, messages: list[WriterCommitMessage | None]
) -> None:
    """Phase two of an exactly-once write (twophase.py)."""
    if not opts.exactly_once:
        return
    group = decision_group(opts.transactional_id_prefix, write_id)
    twophase.commit(opts.client, group, batch_id, twophase.prepared_of(messages))
    _log_skipped(messages, f"batch {batch_id} of {write_id}")


def _abort(
    opts: WriteOptions, write_id: str, batch_id: int, messages: list[WriterCommitMessage | None]
) -> None:
    """Aborts the prepared transactions, and those the failed tasks (no commit message)
    left open, unless the batch was decided (then it is rolled forward)."""
    if not opts.exactly_once:
        return
    failed = [
        TaskIdentity(opts.transactional_id_prefix, write_id, batch_id, partition).transactional_id
        for partition, message in enumerate(messages)
        if message is None
    ]
    group = decision_group(opts.transactional_id_prefix, write_id)
    try:
        left = twophase.abort(opts.client, group, batch_id, twophase.prepared_of(messages), failed)
    except Exception as exc:  # best effort: the transaction timeout aborts them anyway
        log.warning("could not abort the transactions of %s: %s", write_id, exc)
        return
    for problem in left:
        log.warning("could not abort %s", problem)


def _log_skipped(messages: list[WriterCommitMessage | None], what: str) -> None:
    skipped = [m.partition for m in messages if isinstance(m, WriteResult) and m.records is None]
    if skipped:
        log.info("%s: partitions %s were decided before, not written again", what, skipped)


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("weirmq")`: each task produces its rows; at-least-once, or one
    transaction per task with `deliveryGuarantee=exactly-once`."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        # Made on the driver and pickled to every task: all attempts of a task share it,
        # and another write (even of the same DataFrame) gets another.
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        task = None
        if self.opts.exactly_once:
            prefix = self.opts.transactional_id_prefix
            task = TaskIdentity(prefix, self.write_id, 0, _partition_id(required=True))
        return _write(iterator, self.opts, task)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.opts, self.write_id, 0, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.opts, self.write_id, 0, messages)


class StreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("weirmq")`: each micro-batch's tasks produce their rows."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        task = _stream_task(self.opts) if self.opts.exactly_once else None
        result = _write(iterator, self.opts, task)
        if task is not None:
            return StreamWriteResult(result.records, result.partition, result.txn, task.write_id)
        return result

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_id = _query_id(messages)
        if query_id is not None:
            _commit(self.opts, query_id, batchId, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_id = _query_id(messages)
        if query_id is not None:
            _abort(self.opts, query_id, batchId, messages)


def _query_id(messages: list[WriterCommitMessage | None]) -> str | None:
    """The query id, known only to tasks: every exactly-once task reports it (None: no
    task of the batch succeeded, or the write is at-least-once)."""
    ids = {m.query_id for m in messages if isinstance(m, StreamWriteResult)}
    assert len(ids) <= 1, f"one micro-batch's tasks name {len(ids)} queries"
    return ids.pop() if ids else None


@dataclass
class StreamWriteResult(WriteResult):
    """An exactly-once streaming task's report, with the query id it wrote under."""

    query_id: str = ""
