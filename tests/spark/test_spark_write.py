"""Writes with `df.write.format("weirmq")` and `df.writeStream.format("weirmq")`, read
back with a plain confluent-kafka consumer: the topic, partition, key, value and headers
columns land where they say, the `topic` option overrides the column, and a DataFrame the
sink cannot write is refused before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spark_support import create_topic, produce, read_all


def writer(df: Any, bootstrap: str, **options: str) -> Any:
    w = df.write.format("weirmq").mode("append").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        w = w.option(key, value)
    return w


def test_batch_write_lands_in_the_right_topics_and_partitions(
    spark: Any, bootstrap: str, topic_name: str
):
    a, b = f"{topic_name}.a", f"{topic_name}.b"
    create_topic(bootstrap, a, 3)
    create_topic(bootstrap, b, 2)
    rows = [
        (f"v{i}", f"k{i}" if i % 4 else None, a if i % 2 else b, i % 2 if i % 2 == 0 else i % 3)
        for i in range(200)
    ]
    df = spark.createDataFrame(rows, "value string, key string, topic string, partition int")
    # Several Spark tasks write at once.
    writer(df.repartition(4), bootstrap).save()

    got = {
        (r.topic, r.partition, r.key, r.value)
        for topic, n in ((a, 3), (b, 2))
        for r in read_all(bootstrap, topic, n)
    }
    expected = {
        (topic, partition, key.encode() if key else None, value.encode())
        for value, key, topic, partition in rows
    }
    assert got == expected
    assert len(read_all(bootstrap, a, 3)) + len(read_all(bootstrap, b, 2)) == 200


def test_topic_option_overrides_the_column_and_headers_are_written(
    spark: Any, bootstrap: str, topic_name: str
):
    create_topic(bootstrap, topic_name, 1)
    df = spark.createDataFrame(
        [
            (b"one", "ignored", [("h", b"1"), ("empty", None)]),
            (b"two", "ignored", None),
            (None, "ignored", []),  # a tombstone, no headers
        ],
        "value binary, topic string, headers array<struct<key:string,value:binary>>",
    )
    writer(df.coalesce(1), bootstrap, topic=topic_name).save()
    records = read_all(bootstrap, topic_name, 1)
    assert [(r.value, r.headers) for r in records] == [
        (b"one", (("h", b"1"), ("empty", None))),
        (b"two", None),
        (None, None),
    ]


def test_round_trip_through_the_source(spark: Any, bootstrap: str, topic_name: str):
    """What the source reads, the sink writes back unchanged (key, value, headers)."""
    source, copy = f"{topic_name}.src", f"{topic_name}.copy"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, copy, 2)
    produce(
        bootstrap,
        [
            {
                "topic": source,
                "partition": i % 2,
                "key": f"k{i}".encode(),
                "value": bytes([i % 256]) * (i % 50),
                "headers": [("n", str(i).encode())],
            }
            for i in range(500)
        ],
    )
    df = (
        spark.read.format("weirmq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("includeHeaders", "true")
        .load()
    )
    writer(df.select("key", "value", "headers", "partition"), bootstrap, topic=copy).save()
    original = [
        (r.partition, r.offset, r.key, r.value, r.headers) for r in read_all(bootstrap, source, 2)
    ]
    copied = [
        (r.partition, r.offset, r.key, r.value, r.headers) for r in read_all(bootstrap, copy, 2)
    ]
    assert copied == original


def test_streaming_write_lands_every_record(
    spark: Any, bootstrap: str, topic_name: str, tmp_path: Path
):
    source, sink = f"{topic_name}.in", f"{topic_name}.out"
    create_topic(bootstrap, source, 3)
    create_topic(bootstrap, sink, 2)
    produce(
        bootstrap,
        [{"topic": source, "partition": i % 3, "value": f"{i}".encode()} for i in range(900)],
    )
    query = (
        spark.readStream.format("weirmq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "400")
        .load()
        .selectExpr("CAST(CAST(value AS STRING) AS INT) % 2 AS partition", "value", "value AS key")
        .writeStream.format("weirmq")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [400, 400, 100]
    records = read_all(bootstrap, sink, 2)
    assert sorted(int(r.value) for r in records) == list(range(900))
    assert all(int(r.value) % 2 == r.partition and r.key == r.value for r in records)


@pytest.mark.parametrize(
    ("schema", "options", "message"),
    [
        ("key string", {"topic": "t"}, "needs a `value` column"),
        ("value string", {}, "needs a topic"),
        ("value int", {"topic": "t"}, "value must be binary or string, not int"),
        ("value string, partition string", {"topic": "t"}, "partition must be int"),
        ("value string", {"topic": "t", "subscribe": "t"}, "subscribe: read options"),
        ("value string", {"topic": "t", "batchSize": "10"}, "unknown option.*batchsize"),
    ],
)
def test_unwritable_dataframes_are_refused(
    spark: Any, bootstrap: str, schema: str, options: dict[str, str], message: str
):
    df = spark.createDataFrame([], schema)
    with pytest.raises(Exception, match=message):
        writer(df, bootstrap, **options).save()


def test_overwrite_is_refused(spark: Any, bootstrap: str):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="appends to topics"):
        df.write.format("weirmq").mode("overwrite").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", "t").save()


def test_a_record_the_broker_refuses_fails_the_write(spark: Any, bootstrap: str, topic_name: str):
    create_topic(bootstrap, topic_name, 1, {"max.message.bytes": "1024"})
    df = spark.createDataFrame([("x" * 10_000,)], "value string")
    with pytest.raises(Exception, match=r"not written.*(too large|MSG_SIZE_TOO_LARGE)"):
        writer(df, bootstrap, topic=topic_name).save()
