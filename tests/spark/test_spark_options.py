"""The source's options, parsed without Spark: defaults, Spark's spellings in any case,
offsets JSON, and an error that names the option for every mistake."""

from __future__ import annotations

import pytest

from weirmq.spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    parse_read_options,
    parse_write_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


def test_defaults_follow_sparks_kafka_source() -> None:
    batch = parse_read_options(BASE, streaming=False)
    stream = parse_read_options(BASE, streaming=True)
    assert batch.starting.default == EARLIEST and batch.ending.default == LATEST
    assert stream.starting.default == LATEST
    assert batch.fail_on_data_loss and not batch.include_headers
    assert batch.max_offsets_per_trigger is None and batch.min_partitions is None
    assert batch.client == {"bootstrap.servers": "127.0.0.1:9092"}
    assert not batch.commit_to_group


def test_names_are_case_insensitive_and_kafka_options_reach_the_client() -> None:
    opts = parse_read_options(
        {
            "BOOTSTRAP.SERVERS": "h:1",
            "SubscribePattern": "orders-.*",
            "MAXOFFSETSPERTRIGGER": "500",
            "includeheaders": "TRUE",
            "kafka.group.id": "lag-watch",
            "commitOffsetsToGroup": "true",
            "kafka.fetch.max.bytes": "1048576",
            "checkpointLocation": "/somewhere",
        },
        streaming=True,
    )
    assert opts.subscription.matches("orders-eu") and not opts.subscription.matches("xorders-eu")
    assert opts.max_offsets_per_trigger == 500 and opts.include_headers
    assert opts.client == {
        "bootstrap.servers": "h:1",
        "group.id": "lag-watch",
        "fetch.max.bytes": "1048576",
    }
    assert opts.commit_to_group


def test_offsets_json_and_timestamps() -> None:
    opts = parse_read_options(
        {
            **BASE,
            "startingOffsets": '{"orders": {"0": 23, "1": -2}}',
            "endingOffsets": '{"orders": {"0": 50, "1": -1}}',
        },
        streaming=False,
    )
    assert opts.starting.offsets == {("orders", 0): 23, ("orders", 1): EARLIEST}
    assert opts.ending.offsets == {("orders", 0): 50, ("orders", 1): LATEST}
    # Spark's precedence: the one timestamp, then per-partition timestamps, then offsets.
    by_time = parse_read_options(
        {
            **BASE,
            "startingTimestamp": "1700000000000",
            "startingOffsetsByTimestamp": '{"orders": {"0": 5}}',
            "startingOffsets": "latest",
        },
        streaming=True,
    )
    assert by_time.starting.timestamp == 1_700_000_000_000 and not by_time.starting.timestamps
    per_partition = parse_read_options(
        {**BASE, "startingOffsetsByTimestamp": '{"orders": {"0": 5}}', "startingOffsets": "x"},
        streaming=True,
    )
    assert per_partition.starting.timestamps == {("orders", 0): 5}
    # A batch read ignores maxOffsetsPerTrigger (one options map may serve both).
    assert parse_read_options({**BASE, "maxOffsetsPerTrigger": "5"}, streaming=False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({**BASE, "subscribe": ""}, "subscribe must name at least one topic"),
        ({**BASE, "assign": '{"t": [0]}'}, "exactly one of subscribe"),
        ({"kafka.bootstrap.servers": "h:1"}, "exactly one of subscribe"),
        ({**BASE, "subscribe": None, "subscribePattern": "("}, "not a valid pattern"),
        ({**BASE, "startingOffsets": "[1]"}, "must be a JSON object"),
        ({**BASE, "startingOffsets": '{"t": {"x": 1}}'}, "partition 'x' is not a number"),
        ({**BASE, "startingOffsets": '{"t": {"0": -3}}'}, "offset -3 for t-0 is not valid"),
        ({**BASE, "startingOffsets": '{"t": {"0": -1}}'}, "offset -1 for t-0 is not valid"),
        ({**BASE, "endingOffsets": "earliest"}, "endingOffsets=earliest is not allowed"),
        ({**BASE, "endingOffsets": '{"t": {"0": -2}}'}, "offset -2 for t-0 is not valid"),
        ({**BASE, "startingOffsets": "latest"}, "startingOffsets=latest is not allowed"),
        ({**BASE, "startingTimestamp": "yesterday"}, "startingTimestamp must be milliseconds"),
        ({**BASE, "maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger must be a positive"),
        ({**BASE, "commitOffsetsToGroup": "true"}, "needs kafka.group.id"),
        ({**BASE, "includeHeaders": "yes"}, "includeHeaders must be true or false"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "closest"}, "'error' or 'latest'"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "never commits"),
        ({**BASE, "kafka.key.deserializer": "x"}, "keys are always read as binary"),
        ({**BASE, "startOffsets": "earliest", "fetchSize": "1"}, "fetchsize, startoffsets"),
    ],
)
def test_batch_read_mistakes_name_the_option(options: dict, message: str) -> None:
    options = {k: v for k, v in options.items() if v is not None}
    with pytest.raises(OptionError, match=message):
        parse_read_options(options, streaming=False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({**BASE, "endingOffsets": "latest"}, "endingOffsets is for batch reads only"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive"),
    ],
)
def test_stream_read_mistakes_name_the_option(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options(options, streaming=True)


def test_write_options() -> None:
    opts = parse_write_options(
        {"kafka.bootstrap.servers": "h:1", "topic": " out ", "kafka.linger.ms": "20"}
    )
    assert opts.topic == "out"
    assert opts.client == {"bootstrap.servers": "h:1", "linger.ms": "20"}
    assert parse_write_options({"bootstrap.servers": "h:1"}).topic is None
    with pytest.raises(OptionError, match="startingOffsets, subscribe: read options"):
        parse_write_options({**BASE, "startingOffsets": "earliest"})
    with pytest.raises(OptionError, match="topic must not be empty"):
        parse_write_options({"bootstrap.servers": "h:1", "topic": " "})
