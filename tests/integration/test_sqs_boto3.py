"""boto3 against WeirMQ's SQS API: every action, as an application using SQS sees it.

One broker for the module (`weirmq.testing.Broker(sqs=True)`: the service `weirmq serve`
runs, on a free port), a real boto3 client pointed at it with dummy credentials, each test
on queues of its own. What is checked is what boto3 returns or raises: the error codes are
those botocore parses from the JSON protocol's `x-amzn-query-error` header, the codes
applications catch.

Waits are bounded: long polls of at most a few seconds, visibility timeouts of one or two.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import pytest
from moto.sqs.models import Message as MotoMessage

from weirmq.testing import Broker

pytestmark = pytest.mark.integration

ACCOUNT = "000000000000"


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(sqs=True, group_initial_rebalance_delay_ms=0) as running:
        yield running


@pytest.fixture(scope="module")
def sqs(broker: Broker) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=broker.sqs_endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=botocore.config.Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def name(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def code_of(raised: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> str:
    return str(raised.value.response["Error"]["Code"])


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


# --- queues --------------------------------------------------------------------------------


def test_create_get_list_delete(sqs: Any, broker: Broker) -> None:
    queue = name("life")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    assert url == f"{broker.sqs_endpoint}/{ACCOUNT}/{queue}"
    assert sqs.get_queue_url(QueueName=queue)["QueueUrl"] == url
    assert url in sqs.list_queues(QueueNamePrefix="life-")["QueueUrls"]
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.get_queue_url(QueueName=queue)
    assert code_of(raised) == "AWS.SimpleQueueService.NonExistentQueue"
    # boto3's modeled exception matches it too
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=url, MessageBody="x")


def test_create_is_idempotent_with_equal_attributes_only(sqs: Any) -> None:
    queue = name("idem")
    url = sqs.create_queue(QueueName=queue, Attributes={"VisibilityTimeout": "40"})["QueueUrl"]
    again = sqs.create_queue(QueueName=queue, Attributes={"VisibilityTimeout": "40"})
    assert again["QueueUrl"] == url
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.create_queue(QueueName=queue, Attributes={"VisibilityTimeout": "41"})
    assert code_of(raised) == "QueueAlreadyExists"


def test_list_queues_paginates(sqs: Any) -> None:
    prefix = name("page")
    urls = sorted(sqs.create_queue(QueueName=f"{prefix}-{i}")["QueueUrl"] for i in range(5))
    first = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2)
    assert len(first["QueueUrls"]) == 2 and "NextToken" in first
    seen = list(first["QueueUrls"])
    token = first["NextToken"]
    while token:
        page = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2, NextToken=token)
        seen += page["QueueUrls"]
        token = page.get("NextToken")
    assert sorted(seen) == urls
    # boto3's paginator walks the same pages
    paginator = sqs.get_paginator("list_queues")
    walked = [
        u
        for p in paginator.paginate(QueueNamePrefix=prefix, PaginationConfig={"PageSize": 2})
        for u in p["QueueUrls"]
    ]
    assert sorted(walked) == urls


def test_attributes_defaults_set_and_errors(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("attrs"))["QueueUrl"]
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert found["VisibilityTimeout"] == "30"
    assert found["MessageRetentionPeriod"] == "345600"
    assert found["DelaySeconds"] == "0"
    assert found["ReceiveMessageWaitTimeSeconds"] == "0"
    assert found["MaximumMessageSize"] == "1048576"
    assert found["ApproximateNumberOfMessages"] == "0"
    assert found["QueueArn"].startswith("arn:aws:sqs:us-east-1:000000000000:attrs-")
    assert int(found["CreatedTimestamp"]) > 1_700_000_000
    assert "FifoQueue" not in found
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"VisibilityTimeout": "5", "DelaySeconds": "2"}
    )
    some = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["VisibilityTimeout", "DelaySeconds"]
    )
    assert some["Attributes"] == {"VisibilityTimeout": "5", "DelaySeconds": "2"}
    for bad in (
        {"VisibilityTimeout": "43201"},
        {"MessageRetentionPeriod": "59"},
        {"DelaySeconds": "x"},
    ):
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            sqs.set_queue_attributes(QueueUrl=url, Attributes=bad)
        assert code_of(raised) == "InvalidAttributeValue"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"NoSuchThing": "1"})
    assert code_of(raised) == "InvalidAttributeName"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["NoSuchThing"])
    assert code_of(raised) == "InvalidAttributeName"


def test_tags(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("tags"), tags={"team": "a"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "test", "team": "b"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "b", "env": "test"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "test"}


def test_purge(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("purge"))["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(5)]
    )
    sqs.purge_queue(QueueUrl=url)
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages") is None
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert attrs["Attributes"]["ApproximateNumberOfMessages"] == "0"


# --- messages ------------------------------------------------------------------------------


def test_send_receive_delete_with_attributes_and_digests(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("msg"))["QueueUrl"]
    attributes = {
        "kind": {"DataType": "String", "StringValue": "order"},
        "count": {"DataType": "Number", "StringValue": "42"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
        "label": {"DataType": "String.custom", "StringValue": "x"},
    }
    sent = sqs.send_message(
        QueueUrl=url,
        MessageBody="héllo ✓",
        MessageAttributes=attributes,
        MessageSystemAttributes={
            "AWSTraceHeader": {
                "DataType": "String",
                "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793",
            }
        },
    )
    assert sent["MD5OfMessageBody"] == md5("héllo ✓")
    # SQS's digest of the attributes, as moto (another implementation) computes it
    reference = MotoMessage("id", "body")
    reference.message_attributes = attributes
    assert sent["MD5OfMessageAttributes"] == reference.attribute_md5
    got = sqs.receive_message(
        QueueUrl=url,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
        WaitTimeSeconds=1,
    )["Messages"]
    assert len(got) == 1
    message = got[0]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == "héllo ✓"
    assert message["MD5OfBody"] == md5("héllo ✓")
    assert message["MessageAttributes"]["blob"]["BinaryValue"] == b"\x00\x01\xff"
    assert message["MessageAttributes"]["count"] == {"DataType": "Number", "StringValue": "42"}
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    system = message["Attributes"]
    assert system["ApproximateReceiveCount"] == "1"
    assert system["SenderId"] == "AKIDEXAMPLE"
    assert abs(int(system["SentTimestamp"]) - time.time() * 1000) < 60_000
    assert int(system["ApproximateFirstReceiveTimestamp"]) >= int(system["SentTimestamp"])
    assert system["AWSTraceHeader"].startswith("Root=1-")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=0).get("Messages") is None


def test_selected_message_attributes_only(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("sel"))["QueueUrl"]
    sqs.send_message(
        QueueUrl=url,
        MessageBody="b",
        MessageAttributes={
            "a.one": {"DataType": "String", "StringValue": "1"},
            "b": {"DataType": "String", "StringValue": "2"},
        },
    )
    message = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["a.*"])["Messages"][0]
    assert set(message["MessageAttributes"]) == {"a.one"}
    assert "Attributes" not in message


def test_batches_with_partial_failures(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("batch"))["QueueUrl"]
    result = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "good1", "MessageBody": "one"},
            {"Id": "bad", "MessageBody": "x", "DelaySeconds": 901},
            {"Id": "good2", "MessageBody": "two"},
            {"Id": "badchars", "MessageBody": "\x00"},
        ],
    )
    assert [e["Id"] for e in result["Successful"]] == ["good1", "good2"]
    failed = {e["Id"]: e for e in result["Failed"]}
    assert failed["bad"]["Code"] == "InvalidParameterValue" and failed["bad"]["SenderFault"]
    assert failed["badchars"]["Code"] == "InvalidMessageContents"
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert sorted(m["Body"] for m in got) == ["one", "two"]
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "ReceiptHandle": got[0]["ReceiptHandle"]},
            {"Id": "b", "ReceiptHandle": "not-a-handle"},
        ],
    )
    assert [e["Id"] for e in deleted["Successful"]] == ["a"]
    assert deleted["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (
            [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        (
            [{"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}],
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
        ([{"Id": "bad id!", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        (
            [{"Id": str(i), "MessageBody": "x" * 200_000} for i in range(6)],
            "AWS.SimpleQueueService.BatchRequestTooLong",
        ),
    ],
)
def test_batch_request_errors(sqs: Any, entries: list[dict[str, Any]], code: str) -> None:
    url = sqs.create_queue(QueueName="batch-errors")["QueueUrl"]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert code_of(raised) == code


def test_message_limits(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("limits"))["QueueUrl"]
    biggest = "x" * 1_048_576
    sqs.send_message(QueueUrl=url, MessageBody=biggest)
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"][0]
    assert got["Body"] == biggest
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message(QueueUrl=url, MessageBody=biggest + "x")
    assert code_of(raised) == "InvalidParameterValue"
    for params in (
        {"MaxNumberOfMessages": 11},
        {"MaxNumberOfMessages": 0},
        {"WaitTimeSeconds": 21},
        {"VisibilityTimeout": 43_201},
    ):
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            sqs.receive_message(QueueUrl=url, **params)
        assert code_of(raised) == "InvalidParameterValue", params
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901)
    assert code_of(raised) == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="garbage")
    assert code_of(raised) == "ReceiptHandleIsInvalid"


def test_long_poll_returns_as_soon_as_a_message_arrives(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("poll"))["QueueUrl"]
    result: dict[str, Any] = {}

    def receive() -> None:
        started = time.monotonic()
        result["got"] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
        result["took"] = time.monotonic() - started

    poller = threading.Thread(target=receive)
    poller.start()
    time.sleep(0.5)
    sqs.send_message(QueueUrl=url, MessageBody="wake")
    poller.join(25)
    assert result["got"]["Messages"][0]["Body"] == "wake"
    assert result["took"] < 10  # it did not wait out its 20 s


def test_an_empty_long_poll_waits_its_time(sqs: Any) -> None:
    url = sqs.create_queue(
        QueueName=name("empty"), Attributes={"ReceiveMessageWaitTimeSeconds": "1"}
    )["QueueUrl"]
    started = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert time.monotonic() - started >= 0.9  # the queue's wait applied


def test_visibility_expiry_redelivers_with_the_receive_count(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("vis"))["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    first = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1, AttributeNames=["All"])[
        "Messages"
    ][0]
    assert sqs.receive_message(QueueUrl=url).get("Messages") is None  # invisible now
    second = sqs.receive_message(
        QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"]
    )["Messages"][0]
    assert second["MessageId"] == first["MessageId"]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    # the older handle deletes nothing (as SQS), the newest does
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0
    )
    third = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, AttributeNames=["All"])[
        "Messages"
    ][0]
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])
    assert (
        sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, WaitTimeSeconds=1).get("Messages")
        is None
    )


def test_change_visibility_extends_and_batch(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("chvis"))["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "a"}, {"Id": "2", "MessageBody": "b"}]
    )
    got = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=1, WaitTimeSeconds=1
    )["Messages"]
    assert len(got) == 2
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "x", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 30},
            {"Id": "y", "ReceiptHandle": got[1]["ReceiptHandle"], "VisibilityTimeout": 30},
        ],
    )
    assert len(changed["Successful"]) == 2
    time.sleep(1.5)
    assert sqs.receive_message(QueueUrl=url).get("Messages") is None  # still invisible
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessagesNotVisible"] == "2"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=5
        )
    assert code_of(raised) == "AWS.SimpleQueueService.MessageNotInflight"


def test_delays_of_queue_and_message(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=name("delay"))["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
    sqs.send_message(QueueUrl=url, MessageBody="now")
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )
    assert attrs["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"
    first = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in first] == ["now"]
    started = time.monotonic()
    later = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)["Messages"]
    assert [m["Body"] for m in later] == ["later"]
    assert time.monotonic() - started < 5


# --- dead letters and redrive ------------------------------------------------------------------


def test_dead_letter_queue_after_max_receive_count_and_redrive(sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName=name("dlq"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    source = sqs.create_queue(
        QueueName=name("src"),
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2})
        },
    )["QueueUrl"]
    source_arn = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [source]
    sent = sqs.send_message(QueueUrl=source, MessageBody="poison")
    for _ in range(2):
        got = sqs.receive_message(QueueUrl=source, VisibilityTimeout=1, WaitTimeSeconds=5)[
            "Messages"
        ]
        assert got[0]["MessageId"] == sent["MessageId"]
    dead = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=10, AttributeNames=["All"])["Messages"]
    assert dead[0]["MessageId"] == sent["MessageId"] and dead[0]["Body"] == "poison"
    assert dead[0]["Attributes"]["DeadLetterQueueSourceArn"] == source_arn
    assert sqs.receive_message(QueueUrl=source, WaitTimeSeconds=1).get("Messages") is None
    sqs.change_message_visibility(
        QueueUrl=dlq, ReceiptHandle=dead[0]["ReceiptHandle"], VisibilityTimeout=0
    )
    # redrive back to the source
    handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    deadline = time.monotonic() + 15
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
        if status["Status"] != "RUNNING":
            break
        time.sleep(0.2)
    assert status["Status"] == "COMPLETED", status
    assert status["ApproximateNumberOfMessagesMoved"] == 1
    back = sqs.receive_message(QueueUrl=source, WaitTimeSeconds=5, AttributeNames=["All"])[
        "Messages"
    ]
    assert back[0]["MessageId"] == sent["MessageId"]
    assert back[0]["Attributes"]["ApproximateReceiveCount"] == "1"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.cancel_message_move_task(TaskHandle=handle)
    assert code_of(raised) == "AWS.SimpleQueueService.UnsupportedOperation"


def test_redrive_policy_checks(sqs: Any) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.create_queue(
            QueueName=name("nodlq"),
            Attributes={
                "RedrivePolicy": json.dumps(
                    {
                        "deadLetterTargetArn": f"arn:aws:sqs:us-east-1:{ACCOUNT}:missing-dlq",
                        "maxReceiveCount": 3,
                    }
                )
            },
        )
    assert code_of(raised) == "InvalidParameterValue"
    closed = sqs.create_queue(
        QueueName=name("closed"),
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})},
    )["QueueUrl"]
    closed_arn = sqs.get_queue_attributes(QueueUrl=closed, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.create_queue(
            QueueName=name("denied"),
            Attributes={
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": closed_arn, "maxReceiveCount": 3}
                )
            },
        )
    assert code_of(raised) == "InvalidParameterValue"


# --- FIFO ------------------------------------------------------------------------------------


def fifo_queue(sqs: Any, **attributes: str) -> str:
    return str(
        sqs.create_queue(
            QueueName=name("fifo") + ".fifo", Attributes={"FifoQueue": "true", **attributes}
        )["QueueUrl"]
    )


def test_fifo_orders_within_a_group_one_in_flight_at_a_time(sqs: Any) -> None:
    url = fifo_queue(sqs)
    for i in range(3):
        for group in ("a", "b"):
            sqs.send_message(
                QueueUrl=url,
                MessageBody=f"{group}{i}",
                MessageGroupId=group,
                MessageDeduplicationId=f"{group}{i}",
            )
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])[
        "Messages"
    ]
    bodies = [m["Body"] for m in first]
    assert bodies == ["a0", "b0", "a1", "b1", "a2", "b2"]  # in order, groups interleaved as sent
    sequence = [int(m["Attributes"]["SequenceNumber"]) for m in first]
    assert sequence == sorted(sequence)
    # while group a's messages are in flight, nothing of a is handed out
    sqs.send_message(
        QueueUrl=url, MessageBody="a3", MessageGroupId="a", MessageDeduplicationId="a3"
    )
    sqs.send_message(
        QueueUrl=url, MessageBody="c0", MessageGroupId="c", MessageDeduplicationId="c0"
    )
    more = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in more] == ["c0"]
    for message in first:
        if message["Body"].startswith("a"):
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    last = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in last] == ["a3"]


def test_fifo_redelivers_a_group_in_order_after_visibility_expiry(sqs: Any) -> None:
    url = fifo_queue(sqs)
    for i in range(3):
        sqs.send_message(
            QueueUrl=url, MessageBody=f"m{i}", MessageGroupId="g", MessageDeduplicationId=str(i)
        )
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=1)["Messages"]
    assert [m["Body"] for m in got] == ["m0"]
    assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages") is None
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in again] == ["m0", "m1", "m2"]


def test_fifo_deduplication(sqs: Any) -> None:
    url = fifo_queue(sqs)
    one = sqs.send_message(
        QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    two = sqs.send_message(
        QueueUrl=url, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    assert two["MessageId"] == one["MessageId"]
    assert two["SequenceNumber"] == one["SequenceNumber"]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["x"]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message(QueueUrl=url, MessageBody="z", MessageGroupId="g")
    assert code_of(raised) == "InvalidParameterValue"  # no id, no content-based dedup
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message(QueueUrl=url, MessageBody="z", MessageDeduplicationId="d9")
    assert code_of(raised) == "MissingParameter"
    content = fifo_queue(sqs, ContentBasedDeduplication="true")
    a = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="g")
    b = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="g")
    assert a["MessageId"] == b["MessageId"]
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message(QueueUrl=content, MessageBody="x", MessageGroupId="g", DelaySeconds=1)
    assert code_of(raised) == "InvalidParameterValue"  # per-message delays are not for FIFO


def test_fifo_receive_request_attempt_id_returns_the_same_messages(sqs: Any) -> None:
    url = fifo_queue(sqs, ContentBasedDeduplication="true")
    for body in ("p", "q"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=body)
    first = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="try-1"
    )["Messages"]
    retry = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="try-1"
    )["Messages"]
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in retry] == [
        (m["MessageId"], m["ReceiptHandle"]) for m in first
    ]


def test_fifo_name_and_attribute_rules(sqs: Any) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.create_queue(QueueName=name("nofifo"), Attributes={"FifoQueue": "true"})
    assert code_of(raised) == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.create_queue(QueueName=name("std"), Attributes={"ContentBasedDeduplication": "true"})
    assert code_of(raised) == "InvalidAttributeName"
    url = fifo_queue(sqs)
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert found["FifoQueue"] == "true" and found["ContentBasedDeduplication"] == "false"


# --- errors ------------------------------------------------------------------------------------


def test_missing_and_unknown_queue_errors(sqs: Any, broker: Broker) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.receive_message(QueueUrl=f"{broker.sqs_endpoint}/{ACCOUNT}/nope-{uuid.uuid4().hex}")
    assert code_of(raised) == "AWS.SimpleQueueService.NonExistentQueue"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.create_queue(QueueName="bad name!")
    assert code_of(raised) == "InvalidParameterValue"
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message(
            QueueUrl=sqs.create_queue(QueueName=name("empty"))["QueueUrl"], MessageBody=""
        )
    assert code_of(raised) == "MissingParameter"
