"""Spark reads what boto3 sent: an SQS queue is a topic, and `format("weirmq")` reads it
like any other, in batch, with the message attributes as headers.

A broker of this module's own with the SQS API on (the shared `spark_broker` has it off);
Spark's Python workers reach its Kafka listener like any Kafka client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from weirmq.testing import Broker


@pytest.fixture(scope="module")
def sqs_broker() -> Iterator[Broker]:
    with Broker(sqs=True, auto_create_topics=False) as broker:
        yield broker


def test_spark_reads_and_replays_what_boto3_sent(spark: Any, sqs_broker: Broker) -> None:
    sqs = boto3.client(
        "sqs",
        endpoint_url=sqs_broker.sqs_endpoint,
        region_name="us-east-1",
        aws_access_key_id="spark",
        aws_secret_access_key="spark",
    )
    url = sqs.create_queue(QueueName="orders-sqs")["QueueUrl"]
    sent = [
        sqs.send_message(
            QueueUrl=url,
            MessageBody=json.dumps({"order": n, "region": "eu" if n % 2 else "us"}),
            MessageAttributes={"source": {"DataType": "String", "StringValue": f"shop-{n}"}},
        )["MessageId"]
        for n in range(6)
    ]
    # received and deleted over SQS first: the log keeps them for replay
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)
    for message in got["Messages"]:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    rows = (
        spark.read.format("weirmq")
        .option("kafka.bootstrap.servers", sqs_broker.bootstrap_servers)
        .option("subscribe", "orders-sqs")
        .option("includeHeaders", "true")
        .load()
        .orderBy("offset")
        .collect()
    )
    assert [json.loads(row.value)["order"] for row in rows] == list(range(6))
    headers = [{h.key: bytes(h.value) for h in row.headers} for row in rows]
    assert [h["source"] for h in headers] == [f"shop-{n}".encode() for n in range(6)]
    assert [h["weirmq.sqs.message.id"].decode() for h in headers] == sent
    assert all(row.topic == "orders-sqs" and row.partition == 0 for row in rows)
