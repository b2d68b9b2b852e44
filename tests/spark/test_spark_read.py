"""Batch reads with `spark.read.format("weirmq")`, checked against what a plain Kafka
client produced and reads: rows, schema, offset bounds, splitting, subscriptions, option
errors, and offsets removed by retention."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from spark_support import (
    Record,
    create_topic,
    make_expired_topic,
    produce,
    read_all,
    rows_to_records,
    watermarks,
)

# Recent, whole seconds: records older than the topic's retention.ms (7 days) would be
# removed by the broker's housekeeping, which runs every 200 ms here.
BASE_MS = (int(time.time()) - 3600) * 1000


def reader(spark: Any, bootstrap: str, **options: str) -> Any:
    r = spark.read.format("weirmq").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


@pytest.fixture
def orders(bootstrap: str, topic_name: str) -> list[Record]:
    """A 3-partition topic of 300 records: keys (one in ten null), values (a null one, an
    empty one), headers (none, one, two with a null value), explicit timestamps."""
    create_topic(bootstrap, topic_name, 3)
    records = []
    for i in range(300):
        record: dict[str, Any] = {
            "topic": topic_name,
            "partition": i % 3,
            "value": None if i == 7 else b"" if i == 8 else f"order-{i}".encode(),
            "key": None if i % 10 == 0 else f"k{i}".encode(),
            "timestamp": BASE_MS + i * 1000,
        }
        if i % 3 == 1:
            record["headers"] = [("trace", f"t{i}".encode())]
        elif i % 3 == 2 and i % 2:
            record["headers"] = [("a", b"1"), ("b", None)]
        records.append(record)
    produce(bootstrap, records)
    return read_all(bootstrap, topic_name, 3)


def test_batch_read_equals_what_was_produced(spark: Any, bootstrap: str, orders: list[Record]):
    topic = orders[0].topic
    df = reader(spark, bootstrap, subscribe=topic, includeHeaders="true")
    rows = df.collect()
    assert len(orders) == 300
    assert rows_to_records(rows) == orders
    assert {row.timestampType for row in rows} == {0}  # CreateTime


def test_schema_is_that_of_sparks_kafka_source(spark: Any, bootstrap: str, orders: list[Record]):
    topic = orders[0].topic
    plain = reader(spark, bootstrap, subscribe=topic)
    assert plain.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    with_headers = reader(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert with_headers.schema.simpleString().endswith(
        ",headers:array<struct<key:string,value:binary>>>"
    )
    rows = rows_to_records(plain.collect())
    assert [(r.partition, r.offset, r.value) for r in rows] == [
        (r.partition, r.offset, r.value) for r in orders
    ]


def test_starting_and_ending_offsets_bound_the_read(
    spark: Any, bootstrap: str, orders: list[Record]
):
    topic = orders[0].topic
    starting = {topic: {"0": 10, "1": -2, "2": 95}}
    ending = {topic: {"0": 20, "1": 5, "2": -1}}
    df = reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
    )
    got = sorted((row.partition, row.offset) for row in df.select("partition", "offset").collect())
    expected = (
        [(0, o) for o in range(10, 20)]
        + [(1, o) for o in range(0, 5)]
        + [(2, o) for o in range(95, 100)]
    )
    assert got == expected


def test_ending_offsets_latest_is_fixed_when_the_dataframe_is_loaded(
    spark: Any, bootstrap: str, orders: list[Record]
):
    topic = orders[0].topic
    df = reader(spark, bootstrap, subscribe=topic, endingOffsets="latest")
    assert df.count() == 300
    produce(bootstrap, [{"topic": topic, "value": b"later", "partition": 0}])
    # Spark plans a Python data source's partitions once, at load(): the DataFrame keeps
    # its offsets (docs/spark.md), and a new load() sees the new record.
    assert df.count() == 300
    assert reader(spark, bootstrap, subscribe=topic, endingOffsets="latest").count() == 301


def test_timestamps_choose_the_offsets(spark: Any, bootstrap: str, orders: list[Record]):
    topic = orders[0].topic
    # Record i has timestamp BASE_MS + i s; partition p holds i = p, p + 3, ...
    df = reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingTimestamp=str(BASE_MS + 30_000),
        endingTimestamp=str(BASE_MS + 60_000),
    )
    got = sorted(
        row.timestamp_ms
        for row in df.selectExpr("unix_millis(timestamp) AS timestamp_ms").collect()
    )
    assert got == [BASE_MS + i * 1000 for i in range(30, 60)]

    by_partition = {topic: {"0": BASE_MS + 290_000, "1": BASE_MS, "2": BASE_MS + 999_000}}
    df = reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps(by_partition),
        startingOffsetsByTimestampStrategy="latest",
    )
    got_pairs = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    # partition 0 from i=291 (offset 97); all of partition 1; nothing of partition 2.
    assert got_pairs == [(0, o) for o in range(97, 100)] + [(1, o) for o in range(100)]


def test_no_record_at_the_starting_timestamp_fails_by_default(
    spark: Any, bootstrap: str, orders: list[Record]
):
    topic = orders[0].topic
    df = reader(spark, bootstrap, subscribe=topic, startingTimestamp=str(BASE_MS + 10**9))
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        df.count()


def test_min_partitions_splits_big_partitions(spark: Any, bootstrap: str, orders: list[Record]):
    topic = orders[0].topic
    df = reader(spark, bootstrap, subscribe=topic, minPartitions="10")
    assert df.rdd.getNumPartitions() >= 10
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(r.partition, r.offset) for r in orders]


def test_subscribe_pattern_and_assign(spark: Any, bootstrap: str, topic_name: str):
    for suffix, partitions in (("a", 2), ("b", 1), ("other", 1)):
        create_topic(bootstrap, f"{topic_name}.{suffix}", partitions)
        produce(
            bootstrap,
            [
                {
                    "topic": f"{topic_name}.{suffix}",
                    "value": f"{suffix}{i}".encode(),
                    "partition": i % partitions,
                }
                for i in range(10)
            ],
        )
    pattern = reader(spark, bootstrap, subscribePattern=f"{topic_name}\\.(a|b)")
    assert sorted(r.topic for r in pattern.select("topic").distinct().collect()) == [
        f"{topic_name}.a",
        f"{topic_name}.b",
    ]
    assert pattern.count() == 20

    assign = reader(spark, bootstrap, assign=json.dumps({f"{topic_name}.a": [1]}))
    assert {(r.topic, r.partition) for r in assign.select("topic", "partition").collect()} == {
        (f"{topic_name}.a", 1)
    }
    assert assign.count() == 5


def test_offsets_past_the_end_are_refused(spark: Any, bootstrap: str, orders: list[Record]):
    topic = orders[0].topic
    every = {"1": -2, "2": -2}
    start = json.dumps({topic: {"0": 150, **every}})
    with pytest.raises(Exception, match=f"starting offset 150 of {topic}-0 is after its end"):
        reader(spark, bootstrap, subscribe=topic, startingOffsets=start).count()
    end = json.dumps({topic: {"0": 150, "1": -1, "2": -1}})
    with pytest.raises(Exception, match=f"ending offset 150 of {topic}-0 is after its end"):
        reader(spark, bootstrap, subscribe=topic, endingOffsets=end).count()


def test_a_topic_that_does_not_exist_reads_as_empty(spark: Any, bootstrap: str, topic_name: str):
    assert reader(spark, bootstrap, subscribe=topic_name).count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "subscibePattern": "x"}, "unknown option.*subscibepattern"),
        ({"subscribe": "t", "startingOffsets": "{not json"}, "startingOffsets is not valid JSON"),
        ({"subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of subscribe"),
        ({"subscribe": "t", "minPartitions": "0"}, "minPartitions must be a positive integer"),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
        ({"subscribe": "t", "kafka.no.such.setting": "1"}, "no.such.setting"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "set startingOffsets"),
        ({"assign": '{"t-missing":[0]}'}, "t-missing-0 do not exist"),
    ],
)
def test_bad_options_fail_naming_the_option(
    spark: Any, bootstrap: str, options: dict[str, str], message: str
):
    with pytest.raises(Exception, match=message):
        reader(spark, bootstrap, **options).count()


def test_bootstrap_servers_is_required(spark: Any):
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers"):
        spark.read.format("weirmq").option("subscribe", "t").load().count()


def test_the_schema_cannot_be_replaced(spark: Any, bootstrap: str):
    r = (
        spark.read.format("weirmq")
        .schema("value string")
        .option("kafka.bootstrap.servers", bootstrap)
    )
    with pytest.raises(Exception, match="fixed schema"):
        r.option("subscribe", "t").load().count()


@pytest.fixture
def expired(bootstrap: str, topic_name: str) -> str:
    return make_expired_topic(bootstrap, topic_name)


def test_fail_on_data_loss_true_fails_clearly(spark: Any, bootstrap: str, expired: str):
    starting = json.dumps({expired: {"0": 0}})
    df = reader(spark, bootstrap, subscribe=expired, startingOffsets=starting)
    # Retention may still be removing segments, so the exact end of the gap can vary.
    pattern = rf"Cannot read offsets 0 to \d+ of {re.escape(expired)}-0"
    with pytest.raises(Exception, match=pattern) as e:
        df.count()
    assert "failOnDataLoss" in str(e.value)


def test_fail_on_data_loss_false_reads_what_is_left(spark: Any, bootstrap: str, expired: str):
    starting = json.dumps({expired: {"0": 0}})
    df = reader(
        spark, bootstrap, subscribe=expired, startingOffsets=starting, failOnDataLoss="false"
    )
    offsets = sorted(r.offset for r in df.select("offset").collect())
    low, high = watermarks(bootstrap, expired, 0)
    assert low > 0
    # Retention may have moved on while the query ran, but never past what it read.
    assert offsets == list(range(offsets[0], high)) and offsets[0] >= low
