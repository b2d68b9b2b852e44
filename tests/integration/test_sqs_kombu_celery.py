"""kombu's SQS transport and a Celery worker on WeirMQ's SQS API (`weirmq serve`).

kombu's SQS transport (``sqs://`` URLs) is what Celery users on AWS run: it sends with
boto3, and a worker receives with kombu's own asynchronous client, which signs with
botocore and sends over pycurl on the worker's event loop. Both are pointed at the
broker's SQS endpoint by the URL's host and port (``sqs://KEY:SECRET@HOST:PORT`` with the
transport option ``is_secure`` false makes ``endpoint_url`` ``http://HOST:PORT``), with
dummy credentials, as users point them at local SQS emulators. The transport options are
in sqs_celery_app.py; every test's queues carry a prefix of their own.

The kombu tests use kombu's synchronous API (SimpleQueue, Producer and Consumer with
``drain_events``), which reaches SQS through boto3 only; what they check is what kombu
hands back, and, through a plain boto3 client, what it left in the queue. The Celery
tests run a real ``celery -A sqs_celery_app worker`` process (as test_amqp_celery.py does
for AMQP): the test process is the Celery client, the results come back through Celery's
file system backend in the test's tmp dir, so WeirMQ is the only server involved.

Waits are bounded: the worker's start (its "ready." log line), each ``get(timeout=...)``
and ``drain_events(timeout=...)``, the queue emptying, the worker's shutdown.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue as stdlib_queue
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import botocore.config
import pytest
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu import Connection, Consumer, Exchange, Message, Producer, Queue
from sqs_celery_app import ADD, FLAKY, TOUCH, Worker, broker_url, make_app, transport_options

if TYPE_CHECKING:
    from conftest import BrokerProcess

pytestmark = pytest.mark.integration

ACCESS_KEY = "AKIDKOMBU"
SECRET = "kombu-secret"
GET_TIMEOUT_S = 10.0
RESULT_TIMEOUT_S = 20.0
QUEUE_EMPTY_TIMEOUT_S = 10.0


def sqs_url(broker: BrokerProcess) -> str:
    return broker_url(broker.sqs_endpoint, ACCESS_KEY, SECRET)


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}-"


@pytest.fixture
def sqs(broker: BrokerProcess) -> Any:
    """A plain boto3 client on the same endpoint, to look at what kombu left behind."""
    return boto3.client(
        "sqs",
        endpoint_url=broker.sqs_endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )


def kombu_connection(broker: BrokerProcess, prefix: str, fetch: object) -> Connection:
    options = transport_options(prefix)
    options["fetch_message_attributes"] = fetch
    return Connection(sqs_url(broker), transport_options=options)


@pytest.fixture
def connection(broker: BrokerProcess, prefix: str) -> Iterator[Connection]:
    # The attributes the tests look at, by name (kombu always adds ApproximateReceiveCount).
    fetch = {
        "MessageSystemAttributeNames": ["SenderId", "MessageGroupId"],
        "MessageAttributeNames": ["colour", "weight"],
    }
    with kombu_connection(broker, prefix, fetch) as opened:
        yield opened


def counts(sqs: Any, url: str) -> tuple[int, int, int]:
    """(visible, in flight, delayed) messages of the queue at `url`."""
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (
        int(found["ApproximateNumberOfMessages"]),
        int(found["ApproximateNumberOfMessagesNotVisible"]),
        int(found["ApproximateNumberOfMessagesDelayed"]),
    )


def wait_until_empty(sqs: Any, url: str) -> None:
    """Deletes may trail the result a little (the worker acks asynchronously)."""
    deadline = time.monotonic() + QUEUE_EMPTY_TIMEOUT_S
    while (left := counts(sqs, url)) != (0, 0, 0):
        assert time.monotonic() < deadline, (
            f"{url} still holds (visible, in flight, delayed) {left}"
        )
        time.sleep(0.1)


# --- kombu -----------------------------------------------------------------------------------


def test_simple_queue_put_get_ack(connection: Connection, sqs: Any, prefix: str) -> None:
    simple = connection.SimpleQueue("simple")
    try:
        simple.put({"order": 1, "text": "héllo"}, headers={"trace": "abc"})
        message = simple.get(timeout=GET_TIMEOUT_S)
        assert message.payload == {"order": 1, "text": "héllo"}
        assert message.headers == {"trace": "abc"}
        sqs_message = message.delivery_info["sqs_message"]
        assert sqs_message["MD5OfBody"] == hashlib.md5(sqs_message["Body"].encode()).hexdigest()
        assert sqs_message["Attributes"]["ApproximateReceiveCount"] == "1"
        assert sqs_message["Attributes"]["SenderId"] == ACCESS_KEY
        # The queue kombu made is the prefixed name, with its VisibilityTimeout.
        url = sqs.get_queue_url(QueueName=f"{prefix}simple")["QueueUrl"]
        assert message.delivery_info["sqs_queue"] == url
        assert counts(sqs, url) == (0, 1, 0)
        message.ack()  # DeleteMessage
        assert counts(sqs, url) == (0, 0, 0)
        with pytest.raises(stdlib_queue.Empty):
            simple.get(timeout=1.5)
    finally:
        simple.close()


def test_qsize_and_purge(connection: Connection, sqs: Any) -> None:
    simple = connection.SimpleQueue("sized")
    try:
        for n in range(3):
            simple.put({"n": n})
        assert simple.qsize() == 3  # GetQueueAttributes ApproximateNumberOfMessages
        # PurgeQueue. (What clear() returns is no count: kombu adds up ten readings of
        # ApproximateNumberOfMessages before it purges, 30 here, whatever the server.)
        assert simple.clear() > 0
        assert simple.qsize() == 0
        with pytest.raises(stdlib_queue.Empty):
            simple.get(timeout=1.5)
    finally:
        simple.close()


def test_producer_and_consumer_through_an_exchange(connection: Connection) -> None:
    exchange = Exchange("orders", type="direct")
    orders = Queue("orders", exchange, routing_key="new")
    received: list[Message] = []

    def on_message(body: Any, message: Message) -> None:
        received.append(message)
        message.ack()

    producer = Producer(connection, exchange=exchange, auto_declare=True)
    consumer = Consumer(connection, [orders], callbacks=[on_message])
    consumer.declare()
    for n in range(5):
        producer.publish(
            {"n": n},
            routing_key="new",
            # kombu's SQS transport sends these as SQS message attributes.
            message_attributes={
                "colour": {"DataType": "String", "StringValue": "blue"},
                "weight": {"DataType": "Number", "StringValue": str(n)},
            },
        )
    with consumer:
        deadline = time.monotonic() + GET_TIMEOUT_S
        while len(received) < 5:
            assert time.monotonic() < deadline, f"received only {len(received)} of 5"
            with contextlib.suppress(TimeoutError):  # a second with nothing to take
                connection.drain_events(timeout=1)
    assert sorted(message.payload["n"] for message in received) == list(range(5))
    for message in received:
        attributes = message.delivery_info["sqs_message"]["MessageAttributes"]
        assert attributes["colour"] == {"DataType": "String", "StringValue": "blue"}
        assert attributes["weight"] == {
            "DataType": "Number",
            "StringValue": str(message.payload["n"]),
        }


def test_a_requeued_message_comes_back(connection: Connection, sqs: Any, prefix: str) -> None:
    simple = connection.SimpleQueue("requeue")
    try:
        simple.put({"job": "again"})
        first = simple.get(timeout=GET_TIMEOUT_S)
        # Read before requeue(), which strips the SQS message from delivery_info.
        first_sqs = dict(first.delivery_info["sqs_message"])
        assert first_sqs["Attributes"]["ApproximateReceiveCount"] == "1"
        # kombu requeues on SQS by ChangeMessageVisibility (to its wait_time_seconds).
        first.requeue()
        second = simple.get(timeout=GET_TIMEOUT_S)
        assert second.payload == {"job": "again"}
        second_sqs = second.delivery_info["sqs_message"]
        assert second_sqs["MessageId"] == first_sqs["MessageId"]
        assert second_sqs["ReceiptHandle"] != first_sqs["ReceiptHandle"]
        assert second_sqs["Attributes"]["ApproximateReceiveCount"] == "2"
        second.ack()
        url = sqs.get_queue_url(QueueName=f"{prefix}requeue")["QueueUrl"]
        assert counts(sqs, url) == (0, 0, 0)
    finally:
        simple.close()


def test_delay_seconds_hold_a_message_back(connection: Connection, sqs: Any, prefix: str) -> None:
    simple = connection.SimpleQueue("delayed")
    try:
        sent_at = time.monotonic()
        simple.put({"later": True}, delay_seconds=2)  # SendMessage DelaySeconds=2
        url = sqs.get_queue_url(QueueName=f"{prefix}delayed")["QueueUrl"]
        assert counts(sqs, url) == (0, 0, 1)
        message = simple.get(timeout=GET_TIMEOUT_S)
        assert time.monotonic() - sent_at >= 2.0
        assert message.payload == {"later": True}
        message.ack()
    finally:
        simple.close()


def test_a_fifo_queue_keeps_order(connection: Connection, sqs: Any, prefix: str) -> None:
    simple = connection.SimpleQueue("jobs.fifo")  # kombu makes a FIFO queue of it
    try:
        url = sqs.get_queue_url(QueueName=f"{prefix}jobs.fifo")["QueueUrl"]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["FifoQueue"])
        assert attributes["Attributes"] == {"FifoQueue": "true"}
        for n in range(10):
            # kombu sends MessageGroupId "default" and a fresh deduplication id.
            simple.put({"n": n})
        order = []
        for _ in range(10):
            message = simple.get(timeout=GET_TIMEOUT_S)
            order.append(message.payload["n"])
            assert message.delivery_info["sqs_message"]["Attributes"]["MessageGroupId"] == (
                "default"
            )
            message.ack()
        assert order == list(range(10))
    finally:
        simple.close()


def test_fetch_message_attributes_all(broker: BrokerProcess, prefix: str) -> None:
    """kombu's documented way to ask for every system attribute: it sends
    MessageSystemAttributeNames ["ALL"] (it upper-cases "All"), which SQS takes."""
    with kombu_connection(broker, prefix, ["All"]) as opened:
        simple = opened.SimpleQueue("everything")
        try:
            simple.put({"all": True})
            message = simple.get(timeout=GET_TIMEOUT_S)
            attributes = message.delivery_info["sqs_message"]["Attributes"]
            assert {
                "SenderId",
                "SentTimestamp",
                "ApproximateReceiveCount",
                "ApproximateFirstReceiveTimestamp",
            } <= set(attributes)
            message.ack()
        finally:
            simple.close()


# --- Celery ----------------------------------------------------------------------------------


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    path = tmp_path / "results"
    path.mkdir()
    return path


@pytest.fixture
def client(broker: BrokerProcess, results_dir: Path, prefix: str) -> Iterator[Celery]:
    app = make_app(sqs_url(broker), results_dir, prefix)
    try:
        yield app
    finally:
        app.close()


@pytest.fixture
def worker(
    broker: BrokerProcess, results_dir: Path, prefix: str, tmp_path: Path
) -> Iterator[Worker]:
    started = Worker(sqs_url(broker), results_dir, prefix, tmp_path / "worker.log")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def result_of(result: Any, worker: Worker) -> Any:
    try:
        return result.get(timeout=RESULT_TIMEOUT_S)
    except CeleryTimeoutError:
        worker.check_running()
        raise AssertionError(
            f"no result for {result.id} within {RESULT_TIMEOUT_S:.0f} s; the worker's log:\n"
            f"{worker.log_tail()}"
        ) from None


def assert_clean_log(worker: Worker) -> None:
    log = worker.log_tail()
    assert "ERROR" not in log and "Traceback" not in log, log


def test_a_worker_runs_tasks_sent_with_delay(
    client: Celery, worker: Worker, sqs: Any, prefix: str, tmp_path: Path
) -> None:
    add = client.tasks[ADD]
    touch = client.tasks[TOUCH]
    results = [add.delay(n, 100) for n in range(20)]
    touched = [touch.delay(str(tmp_path / f"touched-{n}"), f"task {n}") for n in range(5)]
    assert [result_of(result, worker) for result in results] == [n + 100 for n in range(20)]
    assert all(result.successful() for result in results)
    assert [result_of(result, worker) for result in touched] == [f"task {n}" for n in range(5)]
    for n in range(5):
        assert (tmp_path / f"touched-{n}").read_text() == f"task {n}"
    # Every task message was deleted once taken (Celery acknowledges before running it).
    wait_until_empty(sqs, sqs.get_queue_url(QueueName=f"{prefix}celery")["QueueUrl"])
    assert_clean_log(worker)


def test_a_retried_task_succeeds_on_its_second_attempt(
    client: Celery, worker: Worker, tmp_path: Path
) -> None:
    marker = tmp_path / "attempts"
    marker.mkdir()
    sent_at = time.time()
    outcome = result_of(client.tasks[FLAKY].delay(str(marker)), worker)
    assert outcome["retries"] == 1
    assert outcome["ran_at"] - sent_at >= 1.0  # retry(countdown=1)
    assert sorted(path.name for path in marker.iterdir()) == ["attempt-0", "attempt-1"]
    first = float((marker / "attempt-0").read_text())
    second = float((marker / "attempt-1").read_text())
    assert second - first >= 1.0
    log = worker.log_tail()
    assert "Retry in 1s: RuntimeError('first attempt fails')" in log, log
    assert_clean_log(worker)
