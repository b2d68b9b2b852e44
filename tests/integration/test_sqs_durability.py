"""SQS durability across a kill -9 of a real broker process, seen through boto3.

What WeirMQ promises, and where each promise comes from (so the tests claim no more):

- **Sends.** SendMessage and SendMessageBatch are answered once their batch is fsynced
  (api.py, `_append` awaits `Partition.durable`), so a kill -9 right after the last reply
  loses none of them; a delayed one is answered once it is in the durable delayed log
  (docs/delays.md) and is delivered when due, after a restart too.
- **Deletes.** DeleteMessage and DeleteMessageBatch are answered once the queue engine's
  state log is fsynced (`ShareService.durable`): a deleted message is never received
  again.
- **Receives.** A receive records the delivery, with its count, when it acquires the
  message (queues/persistence.py: a lock is never persisted, the acquired record is
  written as available with its new count). So after a restart a message that was in
  flight is received again at once, whatever its visibility timeout was (unlike Amazon's
  SQS, which keeps it invisible until the timeout ends), and its ApproximateReceiveCount
  counts the receive that was under way (docs/queues.md, "Durability").
- **Queues.** A queue's attributes and tags are the topic config `weirmq.sqs.queue`,
  in topics.json (fsynced before CreateQueue, SetQueueAttributes and TagQueue answer).
- **FIFO deduplication.** The book is memory, rebuilt at start from the last five
  minutes of the queue's log (api.py, `rebuild_fifo`). Two cases fall outside what that
  can see, and their tests fail (see their docstrings): a message deleted and then trimmed
  from the log by housekeeping, and a message still waiting out the queue's DelaySeconds
  (it is in `__weirmq_delayed`, not yet in the queue's log).

The broker comes back on the same data directory and the same SQS port (`restart`); a
fresh boto3 client is made after each restart (a pooled keep-alive connection to the
killed process would be a spurious first failure). Retries are off (one attempt), so any
error fails the test and no retry can hide a lost or duplicated send. Every wait is
bounded: long polls of a few seconds inside a `Deadline`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import boto3
import botocore.config
import pytest
from confluent_kafka import Consumer, TopicPartition
from integration_support import Deadline

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = pytest.mark.integration

STEP_TIMEOUT_S = 30.0
ACKED_MESSAGES = 200
BATCH_ENTRIES = 10
ACCESS_KEY = "AKIDDURABLE"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def sqs_client(broker: BrokerProcess) -> Any:
    """A boto3 SQS client of the broker, one attempt per call, bounded socket waits."""
    return boto3.session.Session().client(
        "sqs",
        endpoint_url=broker.sqs_endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key="secret",
        config=botocore.config.Config(
            retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=STEP_TIMEOUT_S
        ),
    )


def crash_and_restart(broker: BrokerProcess) -> Any:
    """kill -9, start on the same data dir and port; a new client of it."""
    broker.kill()
    broker.restart()
    return sqs_client(broker)


def attributes_of(n: int) -> dict[str, dict[str, Any]]:
    """The message attributes of message `n`: one of each data type, values from n."""
    return {
        "seq": {"DataType": "Number", "StringValue": str(n)},
        "kind": {"DataType": "String", "StringValue": f"kind-{n % 7}"},
        "blob": {"DataType": "Binary", "BinaryValue": n.to_bytes(4, "big") + b"\xff\x00"},
        "label": {"DataType": "String.custom", "StringValue": "é✓"},
    }


def body_of(n: int) -> str:
    return f"message {n:05d} " + "x" * (n % 50)


def receive_all(
    sqs: Any, url: str, expected: int, *, visibility_s: int = 120, **params: Any
) -> list[dict[str, Any]]:
    """Receive until `expected` messages came (each kept invisible for `visibility_s`, so
    none comes twice within the test), then one more receive that must find nothing;
    fails when they do not all come within STEP_TIMEOUT_S."""
    got: list[dict[str, Any]] = []
    deadline = Deadline(STEP_TIMEOUT_S, f"receiving {expected} messages of {url}")
    while len(got) < expected:
        deadline.check(f"{len(got)} received")
        answer = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=visibility_s,
            WaitTimeSeconds=1,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            **params,
        )
        got += answer.get("Messages", [])
    extra = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1, VisibilityTimeout=visibility_s)
    assert extra.get("Messages") is None, f"more than {expected} messages: {extra['Messages']}"
    return got


def receive_one(sqs: Any, url: str, **params: Any) -> dict[str, Any]:
    """The next message of the queue, within STEP_TIMEOUT_S."""
    deadline = Deadline(STEP_TIMEOUT_S, f"receiving a message of {url}")
    while True:
        deadline.check()
        answer = sqs.receive_message(
            QueueUrl=url, WaitTimeSeconds=1, MessageSystemAttributeNames=["All"], **params
        )
        messages = answer.get("Messages", [])
        if messages:
            assert len(messages) == 1, messages
            return dict(messages[0])


def queue_counts(sqs: Any, url: str) -> tuple[int, int]:
    found = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return (
        int(found["ApproximateNumberOfMessages"]),
        int(found["ApproximateNumberOfMessagesNotVisible"]),
    )


def log_offsets(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """(log start, high watermark) of the topic's partition 0, through a Kafka client."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "sqs-durability"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    return int(low), int(high)


# --- sends ------------------------------------------------------------------------------------


def test_every_acknowledged_send_is_received_once_after_kill_9(broker: BrokerProcess) -> None:
    sqs = sqs_client(broker)
    url = sqs.create_queue(QueueName=unique("acked"))["QueueUrl"]
    sent: dict[str, int] = {}  # MessageId -> n
    for first in range(0, ACKED_MESSAGES - 2, BATCH_ENTRIES):
        entries = [
            {"Id": f"e{n}", "MessageBody": body_of(n), "MessageAttributes": attributes_of(n)}
            for n in range(first, min(first + BATCH_ENTRIES, ACKED_MESSAGES - 2))
        ]
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert answer.get("Failed", []) == []
        for entry in answer["Successful"]:
            sent[entry["MessageId"]] = int(entry["Id"][1:])
    for n in (ACKED_MESSAGES - 2, ACKED_MESSAGES - 1):  # and single sends, the last of all
        one = sqs.send_message(
            QueueUrl=url, MessageBody=body_of(n), MessageAttributes=attributes_of(n)
        )
        sent[one["MessageId"]] = n
    assert len(sent) == ACKED_MESSAGES
    sqs = crash_and_restart(broker)  # right after the last reply

    assert queue_counts(sqs, url) == (ACKED_MESSAGES, 0)
    got = receive_all(sqs, url, ACKED_MESSAGES)
    ids = [message["MessageId"] for message in got]
    assert len(set(ids)) == len(ids), "a message was received twice"
    assert set(ids) == set(sent), "lost or unknown messages"
    for message in got:
        n = sent[message["MessageId"]]
        assert message["Body"] == body_of(n)
        assert message["MessageAttributes"] == attributes_of(n)
        assert message["Attributes"]["ApproximateReceiveCount"] == "1"
        assert message["Attributes"]["SenderId"] == ACCESS_KEY


# --- deletes ----------------------------------------------------------------------------------


def test_a_deleted_message_is_never_received_again_after_kill_9(broker: BrokerProcess) -> None:
    """Half the messages are deleted (one by one and in a batch), the others stay in
    flight; after kill -9 the others come back (in flight at the crash: received again),
    the deleted never. A purged queue stays empty too."""
    sqs = sqs_client(broker)
    url = sqs.create_queue(QueueName=unique("deleted"))["QueueUrl"]
    purged = sqs.create_queue(QueueName=unique("purged"))["QueueUrl"]
    for first in range(0, 40, BATCH_ENTRIES):
        entries = [{"Id": str(n), "MessageBody": f"m{n}"} for n in range(first, first + 10)]
        assert sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed", []) == []
        assert sqs.send_message_batch(QueueUrl=purged, Entries=entries).get("Failed", []) == []
    got = receive_all(sqs, url, 40, visibility_s=600)
    deleted = got[:10] + got[20:30]
    kept = got[10:20] + got[30:]
    for message in deleted[:10]:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    batch = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": message["ReceiptHandle"]}
            for i, message in enumerate(deleted[10:])
        ],
    )
    assert batch.get("Failed", []) == [] and len(batch["Successful"]) == 10
    sqs.purge_queue(QueueUrl=purged)
    sqs = crash_and_restart(broker)  # right after the last delete's and the purge's reply

    assert queue_counts(sqs, url) == (20, 0)
    again = receive_all(sqs, url, 20)
    assert {m["MessageId"] for m in again} == {m["MessageId"] for m in kept}
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in again} == {"2"}
    assert queue_counts(sqs, purged) == (0, 0)
    assert sqs.receive_message(QueueUrl=purged, WaitTimeSeconds=1).get("Messages") is None


# --- in flight --------------------------------------------------------------------------------


def test_an_in_flight_message_comes_back_with_its_receive_count_after_kill_9(
    broker: BrokerProcess,
) -> None:
    sqs = sqs_client(broker)
    url = sqs.create_queue(QueueName=unique("inflight"))["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="in flight")["MessageId"]
    first = receive_one(sqs, url, VisibilityTimeout=1)
    assert first["MessageId"] == sent
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    # its visibility expires: it comes back, counted
    second = receive_one(sqs, url, VisibilityTimeout=600)
    assert second["MessageId"] == sent
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert queue_counts(sqs, url) == (0, 1)
    sqs = crash_and_restart(broker)  # while it is in flight for another ten minutes

    # Locks are not persisted: it is ready at once, its receive under way counted.
    assert queue_counts(sqs, url) == (1, 0)
    third = receive_one(sqs, url, VisibilityTimeout=600)
    assert third["MessageId"] == sent and third["Body"] == "in flight"
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"
    assert int(third["Attributes"]["SentTimestamp"]) == int(first["Attributes"]["SentTimestamp"])
    # the handles of before the crash are older than the newest: they delete nothing
    for old in (first, second):
        sqs.delete_message(QueueUrl=url, ReceiptHandle=old["ReceiptHandle"])
    assert queue_counts(sqs, url) == (0, 1)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])
    assert queue_counts(sqs, url) == (0, 0)


# --- queues -----------------------------------------------------------------------------------


def settled_attributes(sqs: Any, url: str) -> dict[str, str]:
    """GetQueueAttributes(All) without the message counts."""
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return {k: v for k, v in found.items() if not k.startswith("ApproximateNumberOf")}


def test_queue_attributes_tags_and_redrive_policy_survive_kill_9(broker: BrokerProcess) -> None:
    sqs = sqs_client(broker)
    dlq = sqs.create_queue(
        QueueName=unique("dlq"),
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "allowAll"})},
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    source = sqs.create_queue(
        QueueName=unique("source"),
        Attributes={
            "VisibilityTimeout": "1",
            "MessageRetentionPeriod": "7200",
            "MaximumMessageSize": "4096",
            "ReceiveMessageWaitTimeSeconds": "1",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}),
        },
        tags={"team": "payments", "env": "test"},
    )["QueueUrl"]
    time.sleep(1.1)  # so that the change below has a later LastModifiedTimestamp
    sqs.set_queue_attributes(QueueUrl=source, Attributes={"DelaySeconds": "0", "Policy": "{}"})
    sqs.tag_queue(QueueUrl=source, Tags={"owner": "alice"})
    sqs.untag_queue(QueueUrl=source, TagKeys=["env"])
    before = {url: settled_attributes(sqs, url) for url in (source, dlq)}
    assert int(before[source]["LastModifiedTimestamp"]) > int(before[source]["CreatedTimestamp"])
    sent = sqs.send_message(QueueUrl=source, MessageBody="poison")["MessageId"]
    first = receive_one(sqs, source, VisibilityTimeout=600)  # 1 of maxReceiveCount 2
    assert first["MessageId"] == sent
    sqs = crash_and_restart(broker)

    for url in (source, dlq):
        assert settled_attributes(sqs, url) == before[url]
    assert sqs.list_queue_tags(QueueUrl=source)["Tags"] == {"team": "payments", "owner": "alice"}
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [source]
    assert {source, dlq} <= set(sqs.list_queues()["QueueUrls"])
    # the policy still applies: the second receive is the last one, then the message
    # moves to the dead-letter queue when its visibility (the queue's 1 s) expires
    second = receive_one(sqs, source)
    assert second["MessageId"] == sent
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    dead = receive_one(sqs, dlq)
    assert dead["MessageId"] == sent and dead["Body"] == "poison"
    assert dead["Attributes"]["DeadLetterQueueSourceArn"] == before[source]["QueueArn"]
    assert sqs.receive_message(QueueUrl=source, WaitTimeSeconds=2).get("Messages") is None


def fifo_queue(sqs: Any, **attributes: str) -> str:
    return str(
        sqs.create_queue(
            QueueName=unique("fifo") + ".fifo", Attributes={"FifoQueue": "true", **attributes}
        )["QueueUrl"]
    )


def test_fifo_deduplication_and_order_hold_across_kill_9(broker: BrokerProcess) -> None:
    sqs = sqs_client(broker)
    url = fifo_queue(sqs)
    content = fifo_queue(sqs, ContentBasedDeduplication="true", DeduplicationScope="messageGroup")
    sent = [
        sqs.send_message(
            QueueUrl=url, MessageBody=f"g{n}", MessageGroupId="g", MessageDeduplicationId=f"d{n}"
        )
        for n in range(3)
    ]
    by_content = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="a")
    sqs = crash_and_restart(broker)  # within the five minutes

    for n in range(3):
        again = sqs.send_message(
            QueueUrl=url, MessageBody="dup", MessageGroupId="g", MessageDeduplicationId=f"d{n}"
        )
        assert again["MessageId"] == sent[n]["MessageId"]
        assert again["SequenceNumber"] == sent[n]["SequenceNumber"]
    twice = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="a")
    assert twice["MessageId"] == by_content["MessageId"]
    other_group = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="b")
    assert other_group["MessageId"] != by_content["MessageId"]  # scoped to the group
    later = sqs.send_message(
        QueueUrl=url, MessageBody="g3", MessageGroupId="g", MessageDeduplicationId="d3"
    )
    assert int(later["SequenceNumber"]) > int(sent[-1]["SequenceNumber"])
    got = receive_all(sqs, url, 4)
    assert [m["Body"] for m in got] == ["g0", "g1", "g2", "g3"]  # in order, no duplicate
    assert len(receive_all(sqs, content, 2)) == 2


def test_fifo_deduplication_of_a_deleted_message_holds_across_kill_9(
    broker_factory: BrokerFactory,
) -> None:
    """SQS deduplicates a MessageDeduplicationId for five minutes after the send, whether
    the message was deleted meanwhile or not. WeirMQ keeps the book in memory and rebuilds
    it at start from the queue's log, and housekeeping, which trims deleted messages from
    that log's start (model.py, `trim`), keeps a FIFO queue's last five minutes: after a
    restart, a retry of the send is answered as the duplicate it is.

    That housekeeping has run since the delete is seen on a standard queue, whose message
    is deleted after the FIFO one: one pass trims every queue, so once its log start has
    moved, a pass has seen the FIFO queue's delete too (whether it trimmed it or not)."""
    broker = broker_factory(housekeeping_interval_ms=200)
    sqs = sqs_client(broker)
    url = fifo_queue(sqs)
    marker = sqs.create_queue(QueueName=unique("marker"))["QueueUrl"]
    first = sqs.send_message(
        QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    message = receive_one(sqs, url)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    sqs.send_message(QueueUrl=marker, MessageBody="marker")
    marked = receive_one(sqs, marker)
    sqs.delete_message(QueueUrl=marker, ReceiptHandle=marked["ReceiptHandle"])
    marker_topic = marker.rsplit("/", 1)[1]
    deadline = Deadline(STEP_TIMEOUT_S, "a housekeeping pass after the deletes")
    while log_offsets(broker, marker_topic) != (1, 1):
        deadline.check(f"marker's log offsets {log_offsets(broker, marker_topic)}")
        time.sleep(0.1)
    sqs = crash_and_restart(broker)  # well within the five minutes

    retried = sqs.send_message(
        QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    assert retried["MessageId"] == first["MessageId"], "the retry was stored as a new message"
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None


def test_fifo_deduplication_of_a_delayed_message_holds_across_kill_9(
    broker: BrokerProcess,
) -> None:
    """A FIFO queue with DelaySeconds appends each message to its own log at once, with its
    due time (not through the delayed log), so the deduplication book rebuilt at start
    from that log knows it: the retry of a send made before the restart is a duplicate."""
    sqs = sqs_client(broker)
    url = fifo_queue(sqs, DelaySeconds="60")
    first = sqs.send_message(
        QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    sqs = crash_and_restart(broker)

    retried = sqs.send_message(
        QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    assert retried["MessageId"] == first["MessageId"], "the retry was stored as a new message"
    assert retried["SequenceNumber"] == first["SequenceNumber"]


# --- delays -----------------------------------------------------------------------------------


def test_delayed_messages_are_delivered_when_due_after_kill_9(broker: BrokerProcess) -> None:
    """Sent with a delay (the message's DelaySeconds, and a queue's), then kill -9: after
    the restart each is received once, not before it is due, with its MessageId and
    attributes. ApproximateNumberOfMessagesDelayed is counted since the broker started
    (docs/sqs.md), so it is not checked after the restart."""
    delay_s = 6
    sqs = sqs_client(broker)
    url = sqs.create_queue(QueueName=unique("delayed"))["QueueUrl"]
    slow = sqs.create_queue(QueueName=unique("slow"), Attributes={"DelaySeconds": str(delay_s)})[
        "QueueUrl"
    ]
    attributes = {"blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}
    per_message = sqs.send_message(
        QueueUrl=url, MessageBody="later", DelaySeconds=delay_s, MessageAttributes=attributes
    )
    per_queue = sqs.send_message(QueueUrl=slow, MessageBody="later too")
    sent_at = time.monotonic()
    assert sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"] == {"ApproximateNumberOfMessagesDelayed": "1"}
    sqs = crash_and_restart(broker)

    received: dict[str, dict[str, Any]] = {}
    for queue in (url, slow):
        received[queue] = receive_all(sqs, queue, 1)[0]
        assert time.monotonic() - sent_at >= delay_s - 0.5, "received before it was due"
    assert received[url]["MessageId"] == per_message["MessageId"]
    assert received[url]["Body"] == "later"
    assert received[url]["MessageAttributes"] == attributes
    assert received[slow]["MessageId"] == per_queue["MessageId"]
    assert received[slow]["Body"] == "later too"
