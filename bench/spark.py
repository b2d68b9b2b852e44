"""Spark connector benchmark: rows/s of the `weirmq` format, read and written, on local[2].

Run: ``make bench-spark`` (or ``.venv/bin/python bench/spark.py [--quick] [--rows N]
[--partitions N] [--repeat N] [--case NAME ...] [--kafka KEY=VALUE ...] [--json FILE]
[--dir DIR]``). It prints a table and writes every figure, the parameters and the machine
to a JSON file (default ``bench/results/spark-<timestamp>.json``, gitignored). It is not a
test: nothing here passes or fails on speed. A full run (2,000,000 rows, 3 timed runs per
case) takes 4-6 minutes on 2 cores; ``--quick`` under a minute.

The set-up, none of it timed:

- A real broker: ``weirmq serve`` as a subprocess (`BrokerProcess`) on 127.0.0.1, on a free
  port, with a fresh data directory made under ``--dir`` (default: the current directory)
  and deleted at the end. Its CPU is its own process's, not the Spark driver's.
- ``local_session()``: a local[2] Spark session (JIT on, not the tests' fast start).
- Topics of ``--partitions`` partitions (default 4), filled by confluent-kafka in a plain
  produce loop (linger.ms 20): ``--rows`` records (default 2,000,000; ``--quick`` 50,000)
  of a 16 B key and a 100 B value, one topic without headers and one with two headers per
  record (``trace-id``, 16 B, and ``source``, 11 B). Each topic's record count is checked
  against its high watermarks.

The cases (``--case`` picks some; default all), each one warm-up run and then
``--repeat`` timed runs (default 3; ``--quick`` 1); the figure is the median run. The
warm-up matters: Spark starts its Python workers on first use, which costs seconds.

- ``batch-read``: ``spark.read.format("weirmq")...load().write.format("noop")``, timed from
  ``load()`` to the end of the write. The warm-up is a ``count()`` that must equal the
  topic's record count.
- ``batch-read-headers``: the same with ``includeHeaders=true``, of the headers topic.
- ``stream-read``: ``readStream`` (``startingOffsets=earliest``) into ``format("noop")``
  with ``trigger(availableNow=True)``, a fresh checkpoint per run, timed from ``start()``
  to ``awaitTermination()``. The rows are the query's ``numInputRows``, checked.
- ``batch-write``: ``spark.range(N)`` with key = the id as 16 digits and value = those
  digits and 84 ``x`` (100 B), both binary, written with
  ``.write.format("weirmq").mode("append")`` to a new topic. Counted afterwards (the sum
  of the high watermarks must equal N), then deleted.
- ``stream-write``: ``readStream`` of the headerless topic, ``select("key", "value")``,
  ``writeStream.format("weirmq")`` to a new topic with ``availableNow``; counted the same
  way.

Reference figures, so the connector's figures can be read against something:

- ``range-noop``: the ``batch-write`` DataFrame into ``format("noop")``: what making the
  rows costs Spark, without the connector.
- ``read_range``, ``consume only``, ``write_batches`` (``--case plain``): the connector's
  task code called in plain Python in this process, one partition after another, no
  Spark. ``read_range`` reads every partition into Arrow batches
  (`weirmq.spark.read.read_range`); ``consume only`` is the same consumer's ``consume()``
  loop with nothing done per message; ``write_batches`` produces 10,000-row Arrow batches
  of the ``batch-write`` shape (`weirmq.spark.write.write_batches`). Each is one core's
  ceiling for a Spark task; local[2] runs two tasks at a time, on cores it shares with
  the broker.

Where the time goes: every run's CPU time is split by process, from ``/proc``: the broker,
Spark's JVM, Spark's Python workers (every process under the JVM; a worker that exited is
counted through its parent's reaped-children time) and this process (the driver, or the
client of the plain-Python cases). It is shown in microseconds per row, next to the whole
machine's busy time (``/proc/stat``) in % of one core: on 2 cores 200% is everything, and
"not ours" is what other work on the machine used meanwhile, which tells a quiet run from
a noisy one.

``--kafka KEY=VALUE`` passes a librdkafka setting to every client: as the option
``kafka.KEY`` to every Spark read and write, and into the plain-Python cases' clients.
Without it the connector runs as shipped.

Units: MB = 10**6 bytes of message values (100 B a row), as in ``weirmq bench``. Times are
wall clock (``time.perf_counter``); the machine may be noisy, so re-run before trusting a
difference of less than ~20%.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from weirmq.bench.results import machine_info, save_results, table
from weirmq.bench.target import CLOCK_TICKS, BrokerProcess

FULL_ROWS = 2_000_000
QUICK_ROWS = 50_000
PARTITIONS = 4
FULL_REPEAT = 3
QUICK_REPEAT = 1
KEY_BYTES = 16
VALUE_BYTES = 100
FILLER = b"x" * (VALUE_BYTES - KEY_BYTES)
SOURCE_HEADER = b"bench-spark"
PLAIN_BATCH_ROWS = 10_000
PRODUCER_CONFIG = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "delivery.report.only.error": True,
}
SPARK_CONFIG = {"spark.ui.showConsoleProgress": "false"}  # no progress bars in the output
TOPIC_TIMEOUT_S = 60
MB = 10**6
CASES = (
    "batch-read",
    "batch-read-headers",
    "stream-read",
    "batch-write",
    "stream-write",
    "range-noop",
    "plain",
)


# --- CPU and time ---------------------------------------------------------------------


ROLES = ("broker", "jvm", "workers", "driver")
"""Whose CPU a measurement splits: the broker process; Spark's JVM; Spark's Python
workers (every process under the JVM); this process (the driver, or the client of the
plain-Python cases, librdkafka's threads included)."""


def machine_busy_s() -> float:
    """CPU seconds that all cores together have spent busy since boot (/proc/stat)."""
    ticks = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / CLOCK_TICKS


def processes() -> dict[int, tuple[str, int, float, float]]:
    """pid -> (command, parent pid, own CPU s, CPU s of its reaped children), from /proc."""
    table: dict[int, tuple[str, int, float, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # The command (field 2) may contain spaces and parentheses: split after the last ')'.
        head, tail = text.rsplit(")", 1)
        fields = tail.split()
        own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
        reaped = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS  # cutime, cstime
        table[int(entry.name)] = (head.split("(", 1)[1], int(fields[1]), own, reaped)
    return table


def cpu_by_process(broker_pid: int | None) -> dict[int, tuple[str, float]]:
    """pid -> (its role in ROLES, CPU seconds so far) for this process and every process
    under it."""
    table = processes()
    children: dict[int, list[int]] = {}
    for pid, (_command, parent, _own, _reaped) in table.items():
        children.setdefault(parent, []).append(pid)
    me = os.getpid()
    found = {me: ("driver", table[me][2])}
    todo = [(pid, False) for pid in children.get(me, [])]
    while todo:
        pid, under_jvm = todo.pop()
        command, _parent, own, reaped = table[pid]
        if pid == broker_pid:
            found[pid] = ("broker", own)
        elif under_jvm:
            # A worker process that has exited and been waited for is in its parent's
            # reaped time. (Spark's daemon may not wait: then an exited worker's last
            # seconds are lost, which is why deltas are taken per process.)
            found[pid] = ("workers", own + reaped)
        elif command == "java":
            found[pid] = ("jvm", own)
        todo += [(child, under_jvm or command == "java") for child in children.get(pid, [])]
    return found


@contextmanager
def metered(broker: BrokerProcess) -> Iterator[dict[str, Any]]:
    """Wall time and CPU seconds by role (`cpu_s`: ROLES and `machine`) of the `with`
    block, filled in on exit. A process that ends inside the block is left out."""
    figures: dict[str, Any] = {}
    before = cpu_by_process(broker.pid)
    busy = machine_busy_s()
    start = time.perf_counter()
    yield figures
    figures["seconds"] = time.perf_counter() - start
    cpu_s = dict.fromkeys(ROLES, 0.0)
    cpu_s["machine"] = machine_busy_s() - busy
    for pid, (role, used) in cpu_by_process(broker.pid).items():
        cpu_s[role] += used - before.get(pid, (role, 0.0))[1]
    figures["cpu_s"] = cpu_s


# --- the broker's topics --------------------------------------------------------------


class Topics:
    """Creating, filling, counting and deleting topics on the broker under test."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        # An AdminClient's metadata lookups create missing topics (librdkafka treats it as a
        # producer): without this, a refresh would bring the deleted write topics back.
        self.admin = AdminClient(
            {"bootstrap.servers": bootstrap, "allow.auto.create.topics": False}
        )

    def create(self, prefix: str, partitions: int) -> str:
        name = f"spark-{prefix}-{uuid.uuid4().hex[:8]}"
        futures = self.admin.create_topics(
            [NewTopic(name, partitions, 1)], operation_timeout=TOPIC_TIMEOUT_S
        )
        futures[name].result()
        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        while len(self.admin.list_topics(name, timeout=30).topics[name].partitions) < partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} not visible with {partitions} partitions")
            time.sleep(0.1)
        return name

    def close(self) -> None:
        self.admin = None  # confluent-kafka's AdminClient has no close(); dropping it is one

    def delete(self, name: str) -> None:
        self.admin.delete_topics([name], operation_timeout=TOPIC_TIMEOUT_S)[name].result()

    def watermarks(self, name: str) -> list[tuple[int, int, int]]:
        """(partition, low, high) of every partition of `name`."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "weirmq-bench-spark"})
        try:
            partitions = sorted(consumer.list_topics(name, timeout=30).topics[name].partitions)
            return [
                (p, *consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30))
                for p in partitions
            ]
        finally:
            consumer.close()

    def count(self, name: str) -> int:
        return sum(high - low for _p, low, high in self.watermarks(name))

    def fill(self, name: str, rows: int, partitions: int, headers: bool) -> dict[str, Any]:
        """`rows` records of a 16 B key and a 100 B value, round robin over partitions."""
        failures: list[str] = []

        def on_error(error: Any, _message: Any) -> None:
            if error is not None:
                failures.append(str(error))

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, **PRODUCER_CONFIG, "on_delivery": on_error}
        )
        produce, poll = producer.produce, producer.poll
        start = time.perf_counter()
        for i in range(rows):
            key = b"%016d" % i
            extra = {"headers": [("trace-id", key), ("source", SOURCE_HEADER)]} if headers else {}
            while True:
                try:
                    produce(name, key + FILLER, key, partition=i % partitions, **extra)
                    break
                except BufferError:
                    poll(0.05)
            if i % PLAIN_BATCH_ROWS == 0:
                poll(0)
        while producer.flush(1.0) > 0:
            pass
        seconds = time.perf_counter() - start
        if failures:
            raise RuntimeError(f"{len(failures)} records not written to {name}: {failures[0]}")
        counted = self.count(name)
        if counted != rows:
            raise RuntimeError(f"{name} holds {counted} records, {rows} were produced")
        return {"rows": rows, "headers": headers, "seconds": seconds, "rows_s": rows / seconds}


# --- the cases ------------------------------------------------------------------------


class Bench:
    """What every case needs: Spark, the broker, the source topics and the sizes."""

    def __init__(
        self,
        spark: Any,
        broker: BrokerProcess,
        work_dir: Path,
        rows: int,
        partitions: int,
        client: dict[str, str],
    ) -> None:
        self.spark = spark
        self.broker = broker
        self.topics = Topics(broker.bootstrap)
        self.work_dir = work_dir
        self.rows = rows
        self.partitions = partitions
        self.client = client  # --kafka: extra client settings for every read and write
        self.source = ""  # the headerless topic, once filled
        self.with_headers = ""  # the topic with headers, once filled

    def read(self, stream: bool, topic: str, **options: str) -> Any:
        reader = self.spark.readStream if stream else self.spark.read
        reader = (
            reader.format("weirmq")
            .option("kafka.bootstrap.servers", self.broker.bootstrap)
            .option("subscribe", topic)
        )
        for key, value in {**self.kafka_options(), **options}.items():
            reader = reader.option(key, value)
        return reader.load()

    def kafka_options(self) -> dict[str, str]:
        """--kafka settings as `kafka.`-prefixed source and sink options."""
        return {f"kafka.{key}": value for key, value in self.client.items()}

    def write_options(self, topic: str) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.broker.bootstrap,
            "topic": topic,
            **self.kafka_options(),
        }

    def client_config(self) -> dict[str, str]:
        """The plain-Python cases' client settings: the broker and --kafka."""
        return {"bootstrap.servers": self.broker.bootstrap, **self.client}

    def rows_frame(self) -> Any:
        """`rows` rows of the fill's shape: key = id as 16 digits, value = key + 84 'x'."""
        from pyspark.sql import functions as F

        key = F.lpad(F.col("id").cast("string"), KEY_BYTES, "0")
        return self.spark.range(self.rows).select(
            key.cast("binary").alias("key"),
            F.concat(key, F.lit(FILLER.decode())).cast("binary").alias("value"),
        )

    def checkpoint(self) -> str:
        return str(self.work_dir / f"checkpoint-{uuid.uuid4().hex[:8]}")

    def check_rows(self, what: str, rows: int) -> None:
        if rows != self.rows:
            raise RuntimeError(f"{what}: {rows} rows, expected {self.rows}")


def batch_read(bench: Bench, headers: bool) -> tuple[Callable[[], dict], Callable[[], dict]]:
    """(warm-up, timed run) of a batch read into the noop sink."""
    topic = bench.with_headers if headers else bench.source
    options = {"includeHeaders": "true"} if headers else {}

    def warm_up() -> dict[str, Any]:
        with metered(bench.broker) as figures:
            figures["rows"] = bench.read(False, topic, **options).count()
        bench.check_rows("count()", figures["rows"])
        return figures

    def run() -> dict[str, Any]:
        with metered(bench.broker) as figures:
            frame = bench.read(False, topic, **options)
            frame.write.format("noop").mode("overwrite").save()
        figures["rows"] = bench.rows  # every offset of the topic: count() checked it
        return figures

    return warm_up, run


def stream_read(bench: Bench) -> dict[str, Any]:
    with metered(bench.broker) as figures:
        query = (
            bench.read(True, bench.source, startingOffsets="earliest")
            .writeStream.format("noop")
            .option("checkpointLocation", bench.checkpoint())
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    figures.update(stream_figures(query))
    bench.check_rows("stream read numInputRows", figures["rows"])
    return figures


def stream_figures(query: Any) -> dict[str, Any]:
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    progress = query.recentProgress
    return {
        "rows": sum(p.numInputRows for p in progress),
        "micro_batches": sum(1 for p in progress if p.numInputRows),
        "trigger_ms": sum(p.durationMs.get("triggerExecution", 0) for p in progress),
    }


def batch_write(bench: Bench) -> dict[str, Any]:
    topic = bench.topics.create("write", bench.partitions)
    frame = bench.rows_frame()
    with metered(bench.broker) as figures:
        frame.write.format("weirmq").mode("append").options(**bench.write_options(topic)).save()
    figures["rows"] = bench.topics.count(topic)
    bench.topics.delete(topic)
    bench.check_rows(f"records in {topic}", figures["rows"])
    return figures


def stream_write(bench: Bench) -> dict[str, Any]:
    topic = bench.topics.create("stream-write", bench.partitions)
    with metered(bench.broker) as figures:
        query = (
            bench.read(True, bench.source, startingOffsets="earliest")
            .select("key", "value")
            .writeStream.format("weirmq")
            .options(**bench.write_options(topic))
            .option("checkpointLocation", bench.checkpoint())
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    figures.update(stream_figures(query))
    bench.check_rows("stream write numInputRows", figures["rows"])
    figures["rows"] = bench.topics.count(topic)
    bench.topics.delete(topic)
    bench.check_rows(f"records in {topic}", figures["rows"])
    return figures


def range_noop(bench: Bench) -> dict[str, Any]:
    frame = bench.rows_frame()
    with metered(bench.broker) as figures:
        frame.write.format("noop").mode("overwrite").save()
    figures["rows"] = bench.rows
    return figures


# --- the plain-Python ceilings --------------------------------------------------------


def source_ranges(bench: Bench) -> list[Any]:
    from weirmq.spark.planning import OffsetRange

    return [
        OffsetRange(bench.source, p, low, high)
        for p, low, high in bench.topics.watermarks(bench.source)
    ]


def reader_config(bench: Bench) -> dict[str, Any]:
    from weirmq.spark.read import consumer_config

    return consumer_config(bench.client_config(), "weirmq-bench-spark")


def plain_read_range(bench: Bench) -> dict[str, Any]:
    from weirmq.spark.read import read_range

    config = reader_config(bench)
    ranges = source_ranges(bench)
    rows = 0
    with metered(bench.broker) as figures:
        for r in ranges:
            for batch in read_range(
                r, config, include_headers=False, fail_on_data_loss=True, poll_timeout_ms=30_000
            ):
                rows += batch.num_rows
    figures["rows"] = rows
    bench.check_rows("read_range", rows)
    return figures


def plain_consume(bench: Bench) -> dict[str, Any]:
    """read_range's consumer loop with nothing done per message: librdkafka's share."""
    config = reader_config(bench)
    ranges = source_ranges(bench)
    rows = 0
    with metered(bench.broker) as figures:
        for r in ranges:
            consumer = Consumer(config)
            consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
            position = r.start
            while position < r.end:
                messages = consumer.consume(min(PLAIN_BATCH_ROWS, r.end - position), 0.5)
                for message in messages:
                    if message.error() is None:
                        rows += 1
                    elif message.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"consume: {message.error()}")
                if messages:
                    position = max(position, (messages[-1].offset() or 0) + 1)
            consumer.close()
    figures["rows"] = rows
    bench.check_rows("consume", rows)
    return figures


def plain_write_batches(bench: Bench) -> dict[str, Any]:
    import pyarrow as pa

    from weirmq.spark.write import write_batches

    def batches() -> Iterator[Any]:
        for first in range(0, bench.rows, PLAIN_BATCH_ROWS):
            keys = [b"%016d" % i for i in range(first, min(first + PLAIN_BATCH_ROWS, bench.rows))]
            yield pa.RecordBatch.from_arrays(
                [pa.array(keys, pa.binary()), pa.array([k + FILLER for k in keys], pa.binary())],
                names=["key", "value"],
            )

    prepared = list(batches())  # made before the clock starts
    topic = bench.topics.create("plain-write", bench.partitions)
    with metered(bench.broker) as figures:
        write_batches(iter(prepared), bench.client_config(), topic)
    figures["rows"] = bench.topics.count(topic)
    bench.topics.delete(topic)
    bench.check_rows(f"records in {topic}", figures["rows"])
    return figures


# --- running --------------------------------------------------------------------------


def repeat(
    run: Callable[[], dict[str, Any]],
    times: int,
    warm_up: Callable[[], dict[str, Any]] | None,
) -> dict[str, Any]:
    """One warm-up run (not in the figures) unless None, then `times` timed runs; the
    figures are the median run's."""
    warm = warm_up() if warm_up is not None else None
    runs = [run() for _ in range(times)]
    median = sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]
    rows, seconds, cpu_s = median["rows"], median["seconds"], median["cpu_s"]
    ours = sum(cpu_s[role] for role in ROLES)
    return {
        "rows": rows,
        "seconds": seconds,
        "rows_s": rows / seconds,
        "mb_s": rows * VALUE_BYTES / seconds / MB,
        "rows_s_all": [r["rows"] / r["seconds"] for r in runs],
        "cpu_percent": {role: 100 * cpu / seconds for role, cpu in cpu_s.items()},
        "others_cpu_percent": 100 * max(0.0, cpu_s["machine"] - ours) / seconds,
        "cpu_us_per_row": {
            **{role: cpu_s[role] / rows * 1e6 for role in ROLES},
            "total": ours / rows * 1e6,
        },
        "warm_up": warm,
        "runs": runs,
    }


def run_cases(
    bench: Bench, cases: Sequence[str], times: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Every case asked for, in CASES order; `plain` is three results."""
    Run = Callable[[], dict[str, Any]]
    steps: dict[str, list[tuple[str, Run | None, Run]]] = {
        "batch-read": [("batch-read", *batch_read(bench, headers=False))],
        "batch-read-headers": [("batch-read-headers", *batch_read(bench, headers=True))],
    }
    for name, case in [
        ("stream-read", stream_read),
        ("batch-write", batch_write),
        ("stream-write", stream_write),
        ("range-noop", range_noop),
    ]:
        steps[name] = [(name, partial(case, bench), partial(case, bench))]
    steps["plain"] = [  # plain Python has no workers to start: no warm-up
        ("plain-read-range", None, partial(plain_read_range, bench)),
        ("plain-consume", None, partial(plain_consume, bench)),
        ("plain-write-batches", None, partial(plain_write_batches, bench)),
    ]
    results: dict[str, Any] = {}
    for case in CASES:
        if case in cases:
            for name, warm_up, run in steps[case]:
                progress(LABELS[name])
                results[name] = repeat(run, times, warm_up)
    return results


# --- reporting ------------------------------------------------------------------------

LABELS = {
    "batch-read": "batch read -> noop",
    "batch-read-headers": "batch read, includeHeaders -> noop",
    "stream-read": "stream read, availableNow -> noop",
    "batch-write": "spark.range -> batch write",
    "stream-write": "stream read -> stream write, availableNow",
    "range-noop": "reference: spark.range -> noop",
    "plain-read-range": "plain Python: read_range, 1 process",
    "plain-consume": "plain Python: consume() only, 1 process",
    "plain-write-batches": "plain Python: write_batches, 1 process",
}


def num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report(results: dict[str, Any], params: dict[str, Any], machine: dict[str, Any]) -> str:
    out = [
        f"WeirMQ Spark connector on {params['master']}: {params['rows']:,} rows of a "
        f"{KEY_BYTES} B key and a {VALUE_BYTES} B value, {params['partitions']} partitions; "
        f"median of {params['repeat']} run(s) after a warm-up",
        f"{machine['cpu_count']} CPUs ({machine['cpu_model']}), {machine['memory_gib']} GiB, "
        f"Python {machine['python']}, Spark {params['spark']}, Java {params['java']}, "
        f"librdkafka {params['librdkafka']}",
        f"load average before / after: {params['load_before']} / {params['load_after']}; "
        f"session start {params['session_start_s']:.1f} s",
        "client settings: "
        + (", ".join(f"{k}={v}" for k, v in params["kafka"].items()) or "librdkafka defaults")
        + " (--kafka)",
        "MB = 10^6 bytes of values. CPU in % of one core: machine = every process (at most "
        f"{100 * (machine['cpu_count'] or 1)}%), not ours = other work on the machine.",
        "",
    ]
    fills = params["fill"]
    out.append(
        "Fill (confluent-kafka produce loop): "
        + "; ".join(f"{k}: {v['rows_s']:,.0f} rows/s" for k, v in fills.items())
    )
    out.append("")
    out += table(
        ["case", "rows", "s", "rows/s", "MB/s", "runs, rows/s", "machine CPU", "not ours"],
        [
            [
                LABELS[name],
                num(r["rows"]),
                num(r["seconds"], 2),
                num(r["rows_s"]),
                num(r["mb_s"], 1),
                " ".join(f"{x / 1000:,.0f}k" for x in r["rows_s_all"]),
                num(r["cpu_percent"]["machine"]) + "%",
                num(r["others_cpu_percent"]) + "%",
            ]
            for name, r in results.items()
        ],
    )
    out += [
        "",
        "CPU per row, us (median run): broker process, Spark's JVM, Spark's Python workers,",
        "this process (the driver; for the plain-Python cases, the client)",
    ]
    out += table(
        ["case", "broker", "Spark JVM", "Python workers", "this process", "total"],
        [
            [LABELS[name]] + [num(r["cpu_us_per_row"][k], 2) for k in (*ROLES, "total")]
            for name, r in results.items()
        ],
    )
    return "\n".join(out)


# --- command line ---------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/spark.py", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_ROWS:,} rows and {QUICK_REPEAT} timed run per case (a smoke run)",
    )
    parser.add_argument("--rows", type=int, help=f"records per topic (default {FULL_ROWS:,})")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="partitions per topic")
    parser.add_argument("--repeat", type=int, help=f"timed runs per case (default {FULL_REPEAT})")
    parser.add_argument(
        "--case",
        action="append",
        choices=CASES,
        help="run only this case (repeatable; 'plain' = the plain-Python ceilings)",
    )
    parser.add_argument(
        "--kafka",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting for every read and write, passed as the option "
        "kafka.KEY (repeatable), e.g. fetch.queue.backoff.ms=1",
    )
    parser.add_argument("--json", type=Path, help="results file (default: bench/results/...)")
    parser.add_argument(
        "--dir", type=Path, default=Path.cwd(), help="make the temporary directory here"
    )
    args = parser.parse_args(argv)
    args.rows = args.rows or (QUICK_ROWS if args.quick else FULL_ROWS)
    args.repeat = args.repeat or (QUICK_REPEAT if args.quick else FULL_REPEAT)
    if args.partitions < 1 or args.rows < args.partitions or args.repeat < 1:
        parser.error("need --partitions >= 1, --rows >= --partitions and --repeat >= 1")
    args.case = args.case or list(CASES)
    if any("=" not in setting for setting in args.kafka):
        parser.error("--kafka takes KEY=VALUE")
    args.kafka = dict(setting.split("=", 1) for setting in args.kafka)
    return args


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import confluent_kafka

    from weirmq.spark.local import local_session

    def progress(step: str) -> None:
        print(f"... {step}", file=sys.stderr, flush=True)

    args.dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="weirmq-bench-spark-", dir=args.dir)).resolve()
    started = time.strftime("%Y%m%d-%H%M%S")
    params: dict[str, Any] = {
        "rows": args.rows,
        "partitions": args.partitions,
        "repeat": args.repeat,
        "quick": args.quick,
        "cases": args.case,
        "kafka": args.kafka,
        "key_bytes": KEY_BYTES,
        "value_bytes": VALUE_BYTES,
        "work_dir": str(work_dir),
        "load_before": load_average(),
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }
    machine = machine_info()
    broker = spark = bench = None
    try:
        progress("starting weirmq serve and local[2] Spark")
        broker = BrokerProcess(work_dir)
        begin = time.perf_counter()
        spark = local_session("weirmq-bench-spark", config=SPARK_CONFIG)
        spark.sparkContext.setLogLevel("ERROR")  # not a WARN per streaming query
        params["session_start_s"] = time.perf_counter() - begin
        params["master"] = spark.sparkContext.master
        params["spark"] = spark.version
        params["java"] = spark.sparkContext._jvm.System.getProperty("java.version")
        bench = Bench(spark, broker, work_dir, args.rows, args.partitions, args.kafka)
        progress(f"filling 2 topics with {args.rows:,} records each")
        bench.source = bench.topics.create("source", args.partitions)
        bench.with_headers = bench.topics.create("headers", args.partitions)
        params["fill"] = {
            "no headers": bench.topics.fill(bench.source, args.rows, args.partitions, False),
            "2 headers": bench.topics.fill(bench.with_headers, args.rows, args.partitions, True),
        }
        begin = time.perf_counter()
        results = run_cases(bench, args.case, args.repeat, progress)
        params["run_s"] = time.perf_counter() - begin
        broker.check_alive()
    finally:
        if bench is not None:
            bench.topics.close()  # before the broker goes, or librdkafka logs the disconnect
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    params["load_after"] = load_average()
    print(report(results, params, machine))
    document = {"params": params, "machine": machine, "results": results}
    print(f"\nresults: {save_results('spark', started, document, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
