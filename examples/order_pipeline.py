"""Revenue per region per minute: a Spark Structured Streaming pipeline on WeirMQ topics.

    orders topic ──readStream.format("weirmq")──> from_json ──> withWatermark(event_time, 2 min)
      ──> groupBy(window(event_time, 1 min), region): count, sum(amount)   [output mode append]
      ──> foreachBatch ──┬──> revenue topic (key = region, value = JSON)
                         └──> Parquet (one directory per micro-batch)

`make spark-demo` runs it end to end on local[2] against a broker it starts in-process,
prints the results read back from both sinks, checks them against the orders it produced,
and prints the run time. `--bootstrap HOST:PORT` uses your broker instead, `--master URL`
a Spark cluster (`spark://host:7077`) and `--work-dir` shared storage for the checkpoint
and the Parquet output (see examples/README.md and docs/spark.md, "Running on a
cluster"). Every function but `main` is meant to be copied or imported.

The data. `produce_orders` writes JSON order events (order_id, region, amount, event time
in ms) keyed by order_id, with the Kafka record timestamp set to the event time. Orders
come at a steady rate over six minutes of event time, but one in ten is up to 30 seconds
late: it is produced after orders placed later than it, as when a shop's connection drops
for a while. Amounts are exact two-decimal values read as decimal(10,2), so revenue is exact
and the expected result is computed in plain Python (`expected_revenue`) to the cent.

Why a watermark, and what append mode means. Each window's total is written once, when it
is final: when the watermark (the latest event time seen minus 2 minutes) has passed the
window's end. Until then a late order may still add to it; after that, an order for it is
too late and dropped. Orders here are at most 30 s late, well inside the 2 minutes, so none
is dropped and every order is counted in exactly one window. (Lateness counts against the
watermark of the earlier micro-batches; `maxOffsetsPerTrigger` cuts the three partitions
in proportion to what each holds, so a micro-batch holds orders produced at about the same
time in every partition, and no partition runs minutes ahead of another.)

Two sinks, one query. `foreachBatch` gets each micro-batch's newly final windows as an
ordinary DataFrame and writes it twice (a batch write to the topic, a Parquet write). Two
streaming queries, one per sink, would each read the topic, parse every order and keep
their own aggregation state and checkpoint: twice the work, and two copies of the state
that could disagree about which windows are final. The batch is cached so that the
aggregation is not recomputed for the second write.

Delivery guarantees. After a crash Spark replays the last micro-batch from the checkpoint
with the same offsets, so it emits the same windows again. The Parquet write is idempotent:
each batch overwrites its own `batch_id=N` directory. The topic write is at least once
(like Spark's Kafka sink): a replay writes the same records again, and a consumer keeps the
last record per (window_start, region).

How the demo ends. A stream never ends, so the windows of the last two minutes are held
back until later events move the watermark past them. The demo runs the query with
`trigger(availableNow=True)`: process everything in the topic now, in micro-batches of at
most 5,000 orders, then stop. Spark 4.3 ends such a run with one batch without data that
applies the watermark of the last data batch (checked: a window ending exactly at the
watermark is emitted then), so a run emits every window ending at or before the latest
event time minus 2 minutes. Then the stream moves on: `produce_closing_tick` writes one
event dated 2 minutes after the end of the last order's window, and a second
availableNow run from the same checkpoint (the way a scheduled incremental job runs)
closes the remaining windows. The tick's own window is never final, so it is never written.
The tick comes only after the first run has read every order: produced along with the
orders, it could be read (from its own partition) in an earlier micro-batch than the last
orders of another partition, and would make those late.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import (
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

REGIONS = ("eu-west", "us-east", "us-west", "ap-south")
REGION_WEIGHTS = (35, 30, 20, 15)
EVENT_SPAN_MS = 6 * 60_000
LATE_SHARE = 0.1
MAX_LATENESS_MS = 30_000

WINDOW = "1 minute"
WINDOW_MS = 60_000
WATERMARK_DELAY = "2 minutes"
WATERMARK_DELAY_MS = 120_000
# Lateness must stay inside the watermark's delay, or the demo's late orders would be
# dropped and the expected result would not hold.
assert MAX_LATENESS_MS < WATERMARK_DELAY_MS

ORDERS_PER_BATCH_MAX = 5_000
SOURCE_PARTITIONS = 3
RESULT_PARTITIONS = 2
PRODUCE_TIMEOUT_S = 60.0
ADMIN_TIMEOUT_S = 30.0

ORDER_SCHEMA = StructType(
    [
        StructField("order_id", StringType()),
        StructField("region", StringType()),
        StructField("amount", DecimalType(10, 2)),
        StructField("event_time_ms", LongType()),
    ]
)
# What the query writes to the result topic; sum(decimal(10,2)) is decimal(20,2).
RESULT_SCHEMA = StructType(
    [
        StructField("window_start", TimestampType()),
        StructField("window_end", TimestampType()),
        StructField("region", StringType()),
        StructField("orders", LongType()),
        StructField("revenue", DecimalType(20, 2)),
    ]
)

ResultRow = tuple[int, str, int, Decimal]
"""(window start in ms since the epoch, region, orders, revenue): one result, as compared."""


# --- the order stream -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Order:
    """One order event. The amount is kept in cents, so Python's sums are exact too."""

    order_id: str
    region: str
    amount_cents: int
    event_time_ms: int

    def to_json(self) -> bytes:
        # A two-decimal amount goes out as a JSON number with exactly those digits (a
        # float's repr is the shortest text that reads back as the same float, and no
        # other two-decimal number is that close), and from_json reads the number's text
        # straight into decimal(10,2), never through a double.
        event = {
            "order_id": self.order_id,
            "region": self.region,
            "amount": self.amount_cents / 100,
            "event_time_ms": self.event_time_ms,
        }
        return json.dumps(event).encode()


def generate_orders(n: int, seed: int, start_ms: int, span_ms: int = EVENT_SPAN_MS) -> list[Order]:
    """`n` orders over `[start_ms, start_ms + span_ms)` of event time, in the order they are
    produced; the same arguments give the same orders."""
    rng = random.Random(seed)
    orders = []
    for i in range(n):
        on_time_ms = start_ms + i * span_ms // n
        late_ms = rng.randrange(MAX_LATENESS_MS) if rng.random() < LATE_SHARE else 0
        orders.append(
            Order(
                order_id=f"order-{i:07d}",
                region=rng.choices(REGIONS, REGION_WEIGHTS)[0],
                amount_cents=rng.randrange(500, 50_000),
                event_time_ms=max(start_ms, on_time_ms - late_ms),
            )
        )
    return orders


def produce_orders(bootstrap: str, topic: str, n: int, seed: int, start_ms: int) -> list[Order]:
    """Produces `generate_orders(n, seed, start_ms)` to `topic` and returns them."""
    orders = generate_orders(n, seed, start_ms)
    _produce(bootstrap, topic, orders)
    return orders


def produce_closing_tick(bootstrap: str, topic: str, orders: Iterable[Order]) -> Order:
    """Produces the event that moves the watermark past the last order's window (see the
    module docstring, "How the demo ends") and returns it."""
    last_ms = max(order.event_time_ms for order in orders)
    last_window_end_ms = last_ms - last_ms % WINDOW_MS + WINDOW_MS
    tick = Order("closing-tick", "none", 0, last_window_end_ms + WATERMARK_DELAY_MS)
    _produce(bootstrap, topic, [tick])
    return tick


def _produce(bootstrap: str, topic: str, orders: Iterable[Order]) -> None:
    failures: list[str] = []

    def on_delivery(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(error.str())

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for order in orders:
        while True:
            try:
                producer.produce(
                    topic,
                    order.to_json(),
                    order.order_id.encode(),
                    timestamp=order.event_time_ms,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.1)  # librdkafka's queue is full: let deliveries drain
        producer.poll(0)
    if producer.flush(PRODUCE_TIMEOUT_S) > 0:
        raise RuntimeError(f"orders not delivered to {topic} within {PRODUCE_TIMEOUT_S:.0f} s")
    if failures:
        raise RuntimeError(f"{len(failures)} order(s) not delivered to {topic}: {failures[0]}")


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    """Creates topics (name -> partition count) with the broker's default replication."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, count, replication_factor=-1) for name, count in partitions.items()],
        request_timeout=ADMIN_TIMEOUT_S,
    )
    for future in futures.values():
        future.result(timeout=ADMIN_TIMEOUT_S)


def expected_revenue(orders: Iterable[Order]) -> list[ResultRow]:
    """What the pipeline must output for `orders`, computed without Spark: one row per
    (window, region), sorted."""
    totals: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for order in orders:
        window_start_ms = order.event_time_ms - order.event_time_ms % WINDOW_MS
        total = totals[(window_start_ms, order.region)]
        total[0] += 1
        total[1] += order.amount_cents
    return sorted(
        (start_ms, region, count, Decimal(cents).scaleb(-2))
        for (start_ms, region), (count, cents) in totals.items()
    )


# --- the Spark query ------------------------------------------------------------------------


def parse_orders(records: DataFrame) -> DataFrame:
    """Kafka records (the `weirmq` source's columns) -> one row per order, with its event
    time as a timestamp."""
    order = F.from_json(F.col("value").cast("string"), ORDER_SCHEMA)
    return (
        records.select(order.alias("order"))
        .select("order.*")
        .withColumn("event_time", F.timestamp_millis("event_time_ms"))
        # A record that is not an order parses to nulls and has no window to go to.
        .where(F.col("event_time").isNotNull())
    )


def revenue_per_region(orders: DataFrame) -> DataFrame:
    """Orders and revenue per region per one-minute window of event time, each window
    emitted once, when the watermark has passed its end."""
    return (
        orders.withWatermark("event_time", WATERMARK_DELAY)
        .groupBy(F.window("event_time", WINDOW), "region")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("revenue"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "region",
            "orders",
            "revenue",
        )
    )


def write_to_topic_and_parquet(
    bootstrap: str, result_topic: str, parquet_dir: str
) -> Callable[[DataFrame, int], None]:
    """The `foreachBatch` function: one micro-batch's final windows to both sinks."""

    def write_batch(windows: DataFrame, batch_id: int) -> None:
        windows.persist()
        try:
            if windows.isEmpty():
                return  # a batch that closes no window writes nothing
            (
                windows.select(
                    F.col("region").alias("key"),
                    F.to_json(F.struct(*windows.columns)).alias("value"),
                )
                .write.format("weirmq")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", result_topic)
                .mode("append")  # what a topic takes (Spark's default mode is refused)
                .save()
            )
            windows.write.mode("overwrite").parquet(f"{parquet_dir}/batch_id={batch_id}")
        finally:
            windows.unpersist()

    return write_batch


def build_query(
    spark: SparkSession,
    bootstrap: str,
    source_topic: str,
    result_topic: str,
    parquet_dir: str,
    checkpoint_dir: str,
    *,
    orders_per_batch_max: int = ORDERS_PER_BATCH_MAX,
) -> StreamingQuery:
    """Starts the pipeline as an availableNow query: it reads what `source_topic` holds
    now, from where the checkpoint left off (the earliest offset on a first run), then
    stops. Wait for it with `awaitTermination()`."""
    records = (
        spark.readStream.format("weirmq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(orders_per_batch_max))
        .load()
    )
    return (
        revenue_per_region(parse_orders(records))
        .writeStream.outputMode("append")
        .foreachBatch(write_to_topic_and_parquet(bootstrap, result_topic, parquet_dir))
        .option("checkpointLocation", checkpoint_dir)
        # A job that runs for good would use .trigger(processingTime="30 seconds").
        .trigger(availableNow=True)
        .start()
    )


# --- reading the results back ---------------------------------------------------------------


def read_results_from_topic(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """The result topic as a table (RESULT_SCHEMA's columns)."""
    records = (
        spark.read.format("weirmq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    result = F.from_json(F.col("value").cast("string"), RESULT_SCHEMA)
    return records.select(result.alias("result")).select("result.*")


def read_results_from_parquet(spark: SparkSession, parquet_dir: str) -> DataFrame:
    """The Parquet output as a table: RESULT_SCHEMA's columns and `batch_id`, the
    micro-batch that closed the window."""
    return spark.read.parquet(parquet_dir)


def as_rows(results: DataFrame) -> list[ResultRow]:
    """A result table as sorted `ResultRow`s, comparable with `expected_revenue`."""
    rows = results.select(
        F.unix_millis("window_start").alias("start_ms"), "region", "orders", "revenue"
    ).collect()
    return sorted((r.start_ms, r.region, r.orders, r.revenue) for r in rows)


# --- the demo -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    began = time.monotonic()
    with contextlib.ExitStack() as stack:  # on the way out: Spark, the files, the broker
        bootstrap = args.bootstrap or stack.enter_context(_own_broker())
        work = args.work_dir or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="order-pipeline-")
        )
        spark = _session(args.master)
        stack.callback(spark.stop)
        print(
            f"Spark session ready on {spark.sparkContext.master} "
            f"({time.monotonic() - began:.1f} s since start)"
        )
        ok = _demo(spark, bootstrap, work, args.orders, args.seed)
    print(f"elapsed: {time.monotonic() - began:.1f} s")
    return 0 if ok else 1


def _demo(spark: SparkSession, bootstrap: str, work: str, n: int, seed: int) -> bool:
    """Produces, runs the query twice (see "How the demo ends"), prints and checks. The
    checkpoint and the Parquet output go under `work/<run id>/`: a local directory, or a
    URI Spark writes to (hdfs://, s3a://), so no `Path` here."""
    run = uuid.uuid4().hex[:8]  # fresh topics per run, so a shared broker works too
    source_topic, result_topic = f"orders-{run}", f"revenue-per-minute-{run}"
    create_topics(bootstrap, {source_topic: SOURCE_PARTITIONS, result_topic: RESULT_PARTITIONS})
    # Orders of the last six minutes (records older than the topic's retention would be
    # deleted), starting on a minute so that the windows are the span's six minutes.
    now_ms = time.time_ns() // 1_000_000
    start_ms = now_ms - now_ms % WINDOW_MS - EVENT_SPAN_MS
    orders = produce_orders(bootstrap, source_topic, n, seed, start_ms)
    print(f"produced {len(orders):,} orders to {source_topic} on {bootstrap}")

    run_dir = f"{work.rstrip('/')}/order-pipeline-{run}"
    parquet_dir, checkpoint_dir = f"{run_dir}/revenue", f"{run_dir}/checkpoint"
    start = functools.partial(
        build_query, spark, bootstrap, source_topic, result_topic, parquet_dir, checkpoint_dir
    )
    _run_query("run 1, the orders", start)
    tick = produce_closing_tick(bootstrap, source_topic, orders)
    print(f"produced the closing tick, dated {_utc(tick.event_time_ms)}")
    _run_query("run 2, the closing tick", start)

    from_topic = read_results_from_topic(spark, bootstrap, result_topic)
    from_parquet = read_results_from_parquet(spark, parquet_dir)
    print(f"\nread back from {result_topic} (times in UTC):")
    _show(from_topic)
    print("read back from Parquet:")
    _show(from_parquet, "batch_id")
    return _check(orders, {"result topic": from_topic, "Parquet": from_parquet})


def _run_query(label: str, start: Callable[[], StreamingQuery]) -> None:
    began = time.monotonic()
    query = start()
    query.awaitTermination()
    print(f"{label} ({time.monotonic() - began:.1f} s):")
    for line in _progress_lines(query.recentProgress):
        print(f"  {line}")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help="use this broker (WeirMQ or Kafka) instead of starting one in-process",
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        default="local[2]",
        help="Spark master: local[N], or a cluster such as spark://HOST:7077 "
        "(needs PYSPARK_PYTHON; see docs/spark.md) (%(default)s)",
    )
    parser.add_argument(
        "--work-dir",
        metavar="DIR",
        help="where the checkpoint and the Parquet output go (a directory or a URI such as "
        "hdfs://...); on a cluster of several machines, storage every node shares "
        "(default: a temporary directory, removed at the end)",
    )
    parser.add_argument(
        "--orders", type=int, default=20_000, help="orders to produce (%(default)s)"
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="the order generator's seed (%(default)s)"
    )
    args = parser.parse_args(argv)
    if args.orders <= 0:
        parser.error("--orders must be positive")
    if not _is_local(args.master) and not os.environ.get("PYSPARK_PYTHON"):
        # Checked here because Spark's own symptoms are far from the cause: the executors
        # would run `python3` from each worker's PATH (the tasks fail with "No module
        # named 'pyarrow'"), and the driver looks the format up with that Python too
        # (DATA_SOURCE_NOT_FOUND when it has no weirmq).
        parser.error(
            f"--master {args.master} needs PYSPARK_PYTHON: the absolute path of a Python "
            f"with weirmq[spark] installed, the same on the driver and every worker "
            f"(this one is {sys.executable})"
        )
    return args


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


@contextlib.contextmanager
def _own_broker() -> Iterator[str]:
    from weirmq.testing import Broker  # only needed when no --bootstrap is given

    with Broker() as broker:  # 127.0.0.1, a free port, data in a temporary directory
        yield broker.bootstrap_servers


def _session(master: str) -> SparkSession:
    config = {
        "spark.sql.session.timeZone": "UTC",  # windows print the same everywhere
        "spark.ui.showConsoleProgress": "false",
    }
    if _is_local(master):
        from weirmq.spark.local import local_session

        return local_session("weirmq-order-pipeline", master=master, config=config)
    # A cluster: a plain session, as a job of your own would make. Nothing of
    # local_session's applies: Spark binds where SPARK_LOCAL_IP says (the executors
    # connect back to the driver), and PYSPARK_PYTHON was checked in _parse_args. A few
    # shuffle partitions, not Spark's 200: the aggregation's state is a few dozen windows,
    # and each shuffle partition is a state-store task in every micro-batch.
    builder = SparkSession.builder.master(master).appName("weirmq-order-pipeline")
    for key, value in {**config, "spark.sql.shuffle.partitions": "4"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _progress_lines(progress: list[dict[str, Any]]) -> Iterator[str]:
    for batch in progress:
        # In append mode the rows a batch removes from the aggregation's state are the
        # windows it emits.
        closed = sum(op.get("numRowsRemoved", 0) for op in batch.get("stateOperators", []))
        watermark = batch.get("eventTime", {}).get("watermark", "1970")
        shown = "none yet" if watermark.startswith("1970") else watermark[11:19]
        yield (
            f"batch {batch['batchId']}: {batch['numInputRows']:>6,} records in, "
            f"watermark {shown}, {closed} windows closed"
        )


def _show(results: DataFrame, *extra: str) -> None:
    columns = ["window_start", "region", "orders", "revenue", *extra]
    results.select(*columns).orderBy("window_start", "region").show(1000, truncate=False)


def _check(orders: list[Order], tables: dict[str, DataFrame]) -> bool:
    expected = expected_revenue(orders)
    ok = True
    for name, table in tables.items():
        rows = as_rows(table)
        if rows == expected:
            print(
                f"{name}: {len(rows)} (window, region) rows, {sum(r[2] for r in rows):,} "
                f"orders, revenue {sum(r[3] for r in rows):,}: as computed from the orders"
            )
        else:
            ok = False
            missing = sorted(set(expected) - set(rows))[:5]
            unexpected = sorted(set(rows) - set(expected))[:5]
            print(
                f"{name}: WRONG: {len(rows)} rows, expected {len(expected)}; "
                f"missing e.g. {missing}; unexpected e.g. {unexpected}",
                file=sys.stderr,
            )
    return ok


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


if __name__ == "__main__":
    sys.exit(main())
