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
- With `kafka.group.id` set, the end offsets of each completed batch are committed to that
  consumer group, so `weirmq groups describe` or kafka-consumer-groups show the query's
  lag. Spark calls `commit` late (when it plans the next batch), so the lag shown is an
  upper bound; the checkpoint, not the group, is where the query resumes from.
"""

from __future__ import annotations

import logging
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

from weirmq.spark.cluster import Cluster
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
from weirmq.spark.write import write_batches

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
    return opts


class RangePartition(InputPartition):
    """One Spark task: one offset range of one topic partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


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
        crossed = [tp for tp in partitions if end[tp] < start[tp] and start[tp] <= latest[tp]]
        if crossed:
            raise OptionError(
                "the ending offsets are before the starting offsets for "
                + ", ".join(f"{t}-{p} ({start[(t, p)]} > {end[(t, p)]})" for t, p in crossed)
            )
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
        if self._target is not None:
            partitions = sorted(set(self._target) | set(begin))
            latest = {tp: self._target.get(tp, begin.get(tp, 0)) for tp in partitions}
        else:
            partitions = self.cluster.partitions(self.opts.subscription)
            latest = self.cluster.latest(partitions)
        gone = sorted(tp for tp in begin if tp not in latest)
        if gone:
            what = f"partition(s) {', '.join(f'{t}-{p}' for t, p in gone)} no longer exist"
            if self.opts.fail_on_data_loss:
                raise DataLossError(data_loss_message(f"Cannot go on reading: {what}"))
            log.warning("%s; no longer reading them", what)
        new = [tp for tp in latest if tp not in begin]
        if new:
            log.info("new partitions: %s", ", ".join(f"{t}-{p}" for t, p in new))
        # New partitions start at their earliest offset (as in Spark's Kafka source).
        first = {**self.cluster.earliest(new), **begin}
        # Never move a partition backwards: offsets that went down (a partition deleted and
        # made again) are reported as data loss when the batch is planned.
        latest = {tp: max(offset, first[tp]) for tp, offset in latest.items()}
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
        earliest = self.cluster.earliest(list(stop))
        first = {tp: begin.get(tp, earliest[tp]) for tp in stop}
        return list(self.ranges(first, stop, earliest))

    def commit(self, end: dict[str, Any]) -> None:
        if self.opts.group_id is not None:
            self.cluster.commit(from_json_offsets(end))

    def stop(self) -> None:
        self.cluster.close()


@dataclass
class WriteResult(WriterCommitMessage):
    """What one write task reports: how many records it wrote."""

    records: int


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("weirmq")`: each task produces its rows; at-least-once."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return WriteResult(write_batches(iterator, self.opts.client, self.opts.topic))


class StreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("weirmq")`: each micro-batch's tasks produce their rows."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return WriteResult(write_batches(iterator, self.opts.client, self.opts.topic))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
