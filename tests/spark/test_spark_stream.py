"""Streaming reads with `spark.readStream.format("weirmq")`: micro-batch sizes under
`maxOffsetsPerTrigger` (also with `availableNow`), exact restarts from the checkpoint, new
partitions and topics joining a running query, retention gaps, and lag committed to a
consumer group."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException
from spark_support import (
    add_partitions,
    create_topic,
    make_expired_topic,
    produce,
    wait_for,
    watermarks,
)


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    r = spark.readStream.format("weirmq").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def produce_values(bootstrap: str, topic: str, values: range, partitions: int) -> None:
    produce(
        bootstrap,
        [{"topic": topic, "value": str(v).encode(), "partition": v % partitions} for v in values],
    )


def run_available_now(df: Any, out: Path, checkpoint: Path) -> Any:
    """Runs a query to Parquet (an exactly-once file sink) until it has read everything
    that was there when it started; returns the finished query."""
    query = (
        df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def parquet_values(spark: Any, out: Path) -> list[int]:
    return sorted(int(r.value) for r in spark.read.parquet(str(out)).select("value").collect())


def test_available_now_honours_max_offsets_and_restarts_exactly(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    create_topic(bootstrap, topic_name, 3)
    produce_values(bootstrap, topic_name, range(1000), 3)
    df = stream(
        spark,
        bootstrap,
        subscribe=topic_name,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="300",
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    first = run_available_now(df, out, checkpoint)
    assert first.exception() is None
    assert batch_sizes(first) == [300, 300, 300, 100]
    assert parquet_values(spark, out) == list(range(1000))

    # Stopped; more arrives; the same query (same checkpoint) reads exactly the new records.
    produce_values(bootstrap, topic_name, range(1000, 1500), 3)
    second = run_available_now(df, out, checkpoint)
    assert batch_sizes(second) == [300, 200]
    assert parquet_values(spark, out) == list(range(1500))

    # Nothing new: a third run reads nothing and writes nothing.
    third = run_available_now(df, out, checkpoint)
    assert batch_sizes(third) == []
    assert parquet_values(spark, out) == list(range(1500))


def test_starting_offsets_latest_reads_only_what_comes_after_the_start(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    create_topic(bootstrap, topic_name, 2)
    produce_values(bootstrap, topic_name, range(100), 2)
    df = stream(spark, bootstrap, subscribe=topic_name)  # startingOffsets defaults to latest
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(df, out, checkpoint)  # fixes the start at the current end
    produce_values(bootstrap, topic_name, range(100, 130), 2)
    run_available_now(df, out, checkpoint)
    assert parquet_values(spark, out) == list(range(100, 130))


def test_new_partitions_and_topics_join_a_running_query(
    spark: Any, bootstrap: str, topic_name: str
):
    first, second = f"{topic_name}.one", f"{topic_name}.two"
    create_topic(bootstrap, first, 1)
    produce_values(bootstrap, first, range(10), 1)
    name = f"joined_{abs(hash(topic_name))}"
    query = (
        stream(spark, bootstrap, subscribePattern=f"{topic_name}\\..*", startingOffsets="earliest")
        .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def seen() -> set[tuple[str, int, str]]:
            rows = spark.sql(f"SELECT topic, partition, value FROM {name}").collect()
            return {(r.topic, r.partition, r.value) for r in rows}

        wait_for(lambda: len(seen()) == 10, "the first records")
        add_partitions(bootstrap, first, 3)
        create_topic(bootstrap, second, 2)
        produce(
            bootstrap,
            [{"topic": first, "partition": p, "value": f"new-{p}".encode()} for p in (1, 2)]
            + [{"topic": second, "partition": p, "value": f"two-{p}".encode()} for p in (0, 1)],
        )
        expected = {(first, 0, str(v)) for v in range(10)} | {
            (first, 1, "new-1"),
            (first, 2, "new-2"),
            (second, 0, "two-0"),
            (second, 1, "two-1"),
        }
        wait_for(lambda: seen() == expected, "the new partitions' records")
        assert query.exception() is None
        # Each record exactly once.
        assert spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0].n == len(expected)
    finally:
        query.stop()


def test_retention_gap_fails_the_query_by_default(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    topic = make_expired_topic(bootstrap, topic_name)
    starting = json.dumps({topic: {"0": 0}})
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets=starting)
    with pytest.raises(StreamingQueryException, match="failOnDataLoss") as failed:
        run_available_now(df, tmp_path / "out", tmp_path / "checkpoint")
    # Retention may still be removing segments, so the exact end of the gap can vary.
    assert re.search(rf"Cannot read offsets 0 to \d+ of {re.escape(topic)}-0", str(failed.value))


def test_retention_gap_is_skipped_with_fail_on_data_loss_false(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    topic = make_expired_topic(bootstrap, topic_name)
    low, high = watermarks(bootstrap, topic, 0)
    starting = json.dumps({topic: {"0": 0}})
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets=starting, failOnDataLoss="false")
    query = (
        df.select("offset")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    offsets = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "out")).collect())
    # Everything from the earliest offset still there when the query read, to the end.
    assert offsets == list(range(offsets[0], high)) and low <= offsets[0]


def test_group_id_gets_the_querys_progress_for_lag_reporting(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    create_topic(bootstrap, topic_name, 2)
    produce_values(bootstrap, topic_name, range(400), 2)
    group = f"{topic_name}-group"
    df = stream(
        spark,
        bootstrap,
        subscribe=topic_name,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="100",
        commitOffsetsToGroup="true",
        **{"kafka.group.id": group},
    )
    query = run_available_now(df, tmp_path / "out", tmp_path / "checkpoint")
    assert batch_sizes(query) == [100, 100, 100, 100]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = consumer.committed(
            [TopicPartition(topic_name, p) for p in range(2)], timeout=10
        )
    finally:
        consumer.close()
    # Spark tells the source a batch is done when it plans the next one, so the group may
    # trail the query by the last batch, never lead it.
    done = sum(tp.offset for tp in committed)
    assert 300 <= done <= 400


def test_options_are_checked_at_load(spark: Any, bootstrap: str):
    with pytest.raises(Exception, match=r"unknown option.*startingoffset"):
        stream(spark, bootstrap, subscribe="t", startingOffset="earliest")


def test_batch_only_options_fail_the_stream(spark: Any, bootstrap: str, topic_name: str):
    create_topic(bootstrap, topic_name, 1)
    query = (
        stream(spark, bootstrap, subscribe=topic_name, endingOffsets="latest")
        .writeStream.format("noop")
        .start()
    )
    with pytest.raises(StreamingQueryException, match="endingOffsets is for batch reads only"):
        query.awaitTermination(60)


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(timeout=60)


def test_a_topic_deleted_and_made_again_is_data_loss(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    create_topic(bootstrap, topic_name, 1)
    produce_values(bootstrap, topic_name, range(10), 1)
    df = stream(spark, bootstrap, subscribe=topic_name, startingOffsets="earliest")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(df, out, checkpoint)
    assert parquet_values(spark, out) == list(range(10))

    delete_topic(bootstrap, topic_name)
    wait_for(lambda: _recreated(bootstrap, topic_name), "the topic to be made again")
    produce_values(bootstrap, topic_name, range(100, 105), 1)
    # The partition's offsets went from 10 down to 5: the query cannot tell what it missed.
    with pytest.raises(StreamingQueryException, match=r"offsets went down.*from 10 to 5"):
        run_available_now(df, out, checkpoint)

    # With failOnDataLoss=false it reads the new log from its start.
    lenient = stream(
        spark, bootstrap, subscribe=topic_name, startingOffsets="earliest", failOnDataLoss="false"
    )
    run_available_now(lenient, out, checkpoint)
    assert parquet_values(spark, out) == [*range(10), *range(100, 105)]


def _recreated(bootstrap: str, name: str) -> bool:
    try:
        create_topic(bootstrap, name, 1)
    except Exception:
        return False  # the deletion is not finished yet
    return True


def test_a_deleted_topic_is_skipped_with_fail_on_data_loss_false(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    kept, deleted = f"{topic_name}.kept", f"{topic_name}.deleted"
    for name in (kept, deleted):
        create_topic(bootstrap, name, 1)
        produce_values(bootstrap, name, range(5), 1)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def query(fail: str) -> Any:
        df = stream(
            spark,
            bootstrap,
            subscribe=f"{kept},{deleted}",
            startingOffsets="earliest",
            failOnDataLoss=fail,
        )
        return run_available_now(df, out, checkpoint)

    query("true")
    assert len(parquet_values(spark, out)) == 10
    delete_topic(bootstrap, deleted)
    produce_values(bootstrap, kept, range(5, 8), 1)
    with pytest.raises(StreamingQueryException, match=f"{re.escape(deleted)}-0 no longer exist"):
        query("true")
    query("false")
    assert parquet_values(spark, out) == sorted([*range(5), *range(8)])
