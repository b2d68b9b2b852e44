"""Back-pressure on SQS senders: when the broker's flow control refuses a write, SendMessage
answers RequestThrottled (HTTP 400), stores nothing, and botocore's retry handler retries
it with backoff until the condition clears.

What refuses a send (api.py, `_admit`): the disk-free floor (`disk_free_min_bytes`: the
storage layer's publish refusal), and the flow controller's decision (flow/controller.py)
for the sender, whose client id is its access key: its produce quota
(`producer_byte_rate`, set here with `weirmq quotas`), and the queue topic's backlog bound
(`weirmq.backlog.max.bytes`, measured against the queue's share group `sqs:<topic>`).
A blocked resource refuses a send; a throttle asked of an admitted send refuses the
sender's next sends for its time (api.py's module docstring).

Two kinds of test:

- the promise as documented, with real SDK retries: retries off, a refused send is
  RequestThrottled with nothing stored; with botocore's default retries (the environment
  cleared of AWS retry settings, so the developer's own do not change them) the SDK
  retries, counted with a `before-send` hook, and succeeds once the condition clears
  (the hook clears it at a chosen attempt: the quota lifted, the queue drained);
- how a throttle meets Kafka's throttle formula: a refused send is not charged, so a
  sender that waits as told gets in, and a backlog bound admits sends until it is reached.

Every wait is bounded: retries by botocore's backoff (at most a few seconds in standard
mode), polls of the broker inside a `Deadline`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import botocore.config
import botocore.exceptions
import pytest
from confluent_kafka import Consumer, TopicPartition
from conftest import BrokerProcess, broker_env
from integration_support import Deadline
from test_cli import ok, weirmq

if TYPE_CHECKING:
    from conftest import BrokerFactory

pytestmark = pytest.mark.integration

STEP_TIMEOUT_S = 30.0
THROTTLED_KEY = "AKIDTHROTTLED"
FREE_KEY = "AKIDFREE"
BODY_BYTES = 1_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def sqs_client(
    broker: BrokerProcess, access_key: str, *, retries: bool = False, max_attempts: int = 0
) -> Any:
    """boto3's SQS client as `access_key`: one attempt per call, or botocore's default
    retries (`retries=True`, with the `default_retries` fixture's environment), in its
    standard mode with `max_attempts` when given."""
    config = botocore.config.Config(connect_timeout=10, read_timeout=STEP_TIMEOUT_S)
    if not retries:
        config = config.merge(botocore.config.Config(retries={"total_max_attempts": 1}))
    elif max_attempts:
        retry = {"mode": "standard", "max_attempts": max_attempts}
        config = config.merge(botocore.config.Config(retries=retry))
    return boto3.session.Session().client(
        "sqs",
        endpoint_url=broker.sqs_endpoint,
        region_name="us-east-1",
        aws_access_key_id=access_key,
        aws_secret_access_key="secret",
        config=config,
    )


@pytest.fixture
def default_retries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """botocore's own retry defaults: no AWS retry settings from the environment or from
    the developer's ~/.aws/config."""
    for name in ("AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))


def count_attempts(sqs: Any, operation: str, on_attempt: Callable[[int], None]) -> list[int]:
    """Each HTTP attempt of `operation` (retries included) is numbered from 1 and given
    to `on_attempt` before it is sent; the list of their numbers is returned."""
    attempts: list[int] = []

    def before_send(**_kwargs: Any) -> None:
        attempts.append(len(attempts) + 1)
        on_attempt(attempts[-1])

    sqs.meta.events.register(f"before-send.sqs.{operation}", before_send)
    return attempts


def error_of(raised: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> dict[str, Any]:
    return dict(raised.value.response["Error"])


def metadata_of(raised: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> dict[str, Any]:
    return dict(raised.value.response["ResponseMetadata"])


def stored(broker: BrokerProcess, topic: str) -> int:
    """Records in the queue's topic: its high watermark, through a Kafka client."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "sqs-backpressure"})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    return int(high)


def receive_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every message of the queue, received (invisible for two minutes) until a receive
    finds none; at most 1,000 within STEP_TIMEOUT_S."""
    got: list[dict[str, Any]] = []
    deadline = Deadline(STEP_TIMEOUT_S, f"receiving the messages of {url}")
    while True:
        deadline.check(f"{len(got)} received")
        answer = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=120, WaitTimeSeconds=1
        )
        messages = answer.get("Messages", [])
        if not messages:
            return got
        got += messages
        assert len(got) <= 1_000, "a queue that never empties"


def set_quota(broker: BrokerProcess, client_id: str, bytes_per_s: int | None) -> None:
    """Set (or with None lift) the client's producer_byte_rate with `weirmq quotas`."""
    change = (
        ("--delete", "producer_byte_rate")
        if bytes_per_s is None
        else ("--add", f"producer_byte_rate={bytes_per_s}")
    )
    ok(weirmq(broker, "quotas", "alter", "--client-id", client_id, *change))


# --- quotas ------------------------------------------------------------------------------------


def test_a_send_over_the_quota_is_stored_and_the_next_ones_throttled(
    broker: BrokerProcess,
) -> None:
    """Retries off, a quota of a byte a second: the send that crosses it is stored (as Kafka
    stores the produce that crosses a quota), and the sender's next sends, a SendMessage
    and a whole SendMessageBatch, are refused with RequestThrottled (400), naming how long
    to wait, and store nothing; another access key is not throttled."""
    sqs = sqs_client(broker, THROTTLED_KEY)
    queue = unique("quota")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    set_quota(broker, THROTTLED_KEY, 1)
    crossing = sqs.send_message(QueueUrl=url, MessageBody="x" * BODY_BYTES)["MessageId"]
    assert stored(broker, queue) == 1

    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message(QueueUrl=url, MessageBody="refused")
    assert error_of(raised)["Code"] == "RequestThrottled"
    assert ADVICE.search(error_of(raised)["Message"]) is not None
    assert metadata_of(raised)["HTTPStatusCode"] == 400
    assert metadata_of(raised)["RetryAttempts"] == 0
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": "y"} for n in range(3)]
        )
    assert error_of(raised)["Code"] == "RequestThrottled"
    assert stored(broker, queue) == 1

    free = sqs_client(broker, FREE_KEY)  # quotas are per client: this one has none
    sent = free.send_message(QueueUrl=url, MessageBody="admitted")["MessageId"]
    assert stored(broker, queue) == 2
    assert sorted(m["MessageId"] for m in receive_all(free, url)) == sorted([crossing, sent])


@pytest.mark.usefixtures("default_retries")
def test_the_sdk_retries_a_throttled_send_until_its_throttle_ends(
    broker: BrokerProcess,
) -> None:
    """A quota of 1,000 bytes a second and a first send of 1,500: stored, with a throttle
    of about half a second. The next send, with botocore's retries, is refused and retried
    with backoff until the throttle has passed, then stored once.

    botocore's standard mode, with 10 attempts: its default of 3 draws backoffs shorter
    than the throttle about one time in sixteen, and then gives up (docs/sqs.md)."""
    sqs = sqs_client(broker, THROTTLED_KEY, retries=True, max_attempts=10)
    queue = unique("retried")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    set_quota(broker, THROTTLED_KEY, 1_000)
    sqs.send_message(QueueUrl=url, MessageBody="x" * 1_500)
    attempts = count_attempts(sqs, "SendMessage", lambda _attempt: None)
    answer = sqs.send_message(QueueUrl=url, MessageBody="at last")
    assert len(attempts) >= 2, "the throttled send was not retried"
    assert answer["ResponseMetadata"]["RetryAttempts"] == len(attempts) - 1
    assert stored(broker, queue) == 2  # the refused attempts stored nothing
    got = receive_all(sqs, url)
    assert answer["MessageId"] in {m["MessageId"] for m in got}


@pytest.mark.usefixtures("default_retries")
def test_the_sdk_gives_up_while_the_throttle_holds(broker: BrokerProcess) -> None:
    """A quota of a byte a second: the crossing send asks a throttle far longer than the
    SDK's retries last; the next send is retried and given up on, and stores nothing."""
    sqs = sqs_client(broker, THROTTLED_KEY, retries=True)
    queue = unique("giveup")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    set_quota(broker, THROTTLED_KEY, 1)
    sqs.send_message(QueueUrl=url, MessageBody="x" * BODY_BYTES)
    attempts = count_attempts(sqs, "SendMessage", lambda _attempt: None)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        sqs.send_message(QueueUrl=url, MessageBody="never")
    assert error_of(raised)["Code"] == "RequestThrottled"
    assert len(attempts) > 1, "a throttled send was not retried"
    assert metadata_of(raised)["RetryAttempts"] == len(attempts) - 1
    assert metadata_of(raised)["MaxAttemptsReached"] is True
    assert stored(broker, queue) == 1


ADVICE = re.compile(r"try again in (\d+) ms")


def test_a_sender_that_waits_as_long_as_it_is_told_gets_in(broker: BrokerProcess) -> None:
    """A refused send is not charged to the sender's quota: a sender that waits as the
    refusal says ("try again in N ms") gets its next send in, even one larger than the
    quota's rate."""
    sqs = sqs_client(broker, THROTTLED_KEY)
    queue = unique("advised")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    set_quota(broker, THROTTLED_KEY, 1_000)
    sqs.send_message(QueueUrl=url, MessageBody="x" * 1_500)  # stored; ~0.5 s of throttle
    refusals: list[str] = []
    deadline = Deadline(STEP_TIMEOUT_S, "a send done as the broker advises")
    for _attempt in range(8):
        deadline.check(f"refused: {refusals}")
        try:
            sqs.send_message(QueueUrl=url, MessageBody="x" * 1_500)
            break
        except botocore.exceptions.ClientError as error:
            message = str(error.response["Error"]["Message"])
            assert error.response["Error"]["Code"] == "RequestThrottled", message
            refusals.append(message)
            advice = ADVICE.search(message)
            assert advice is not None, f"a throttle without its wait: {message}"
            time.sleep(int(advice.group(1)) / 1000 + 0.05)
    else:
        pytest.fail(f"refused {len(refusals)} times, each wait as advised: {refusals}")
    assert len(refusals) <= 1  # told once how long, and that was enough
    assert stored(broker, queue) == 2


# --- a queue's backlog -------------------------------------------------------------------------


def flow_resource(broker: BrokerProcess, name: str) -> dict[str, Any] | None:
    """One guarded resource as the admin API shows it (`GET /api/v1/broker`, `flow`);
    None before the broker guards it."""
    assert broker.admin_url is not None, "the admin API is off"
    with urllib.request.urlopen(f"{broker.admin_url}/api/v1/broker", timeout=10) as answer:
        resources = json.load(answer)["flow"]["resources"]
    found = [resource for resource in resources if resource["name"] == name]
    return dict(found[0]) if found else None


def wait_for_flow_state(broker: BrokerProcess, name: str, state: str) -> None:
    deadline = Deadline(STEP_TIMEOUT_S, f"{name} becoming {state}")
    while (resource := flow_resource(broker, name)) is None or resource["state"] != state:
        deadline.check(f"{resource}")
        time.sleep(0.1)


def bound_backlog(broker: BrokerProcess, queue: str, max_bytes: int) -> None:
    """Bound the queue's backlog (its topic is named as the queue) against its share
    group, with the CLI."""
    ok(
        weirmq(
            broker,
            *("topics", "alter", queue),
            *("--config", f"weirmq.backlog.max.bytes={max_bytes}"),
            *("--config", f"weirmq.backlog.group=sqs:{queue}"),
        )
    )


@pytest.mark.usefixtures("default_retries")
def test_a_full_queue_throttles_sends_until_its_messages_are_deleted(
    broker_factory: BrokerFactory,
) -> None:
    """Ten messages in the queue, then a 4,000-byte backlog bound: once the broker has
    measured it (every second) the queue is blocked and a send is refused, stored nowhere;
    with retries, the send goes through after a consumer has deleted the messages."""
    broker = broker_factory(admin_listen="127.0.0.1:0")
    consumer = sqs_client(broker, FREE_KEY)
    queue = unique("backlog")
    url = consumer.create_queue(QueueName=queue)["QueueUrl"]
    entries = [{"Id": str(n), "MessageBody": "x" * BODY_BYTES} for n in range(10)]
    assert consumer.send_message_batch(QueueUrl=url, Entries=entries).get("Failed", []) == []
    bound_backlog(broker, queue, 4_000)
    wait_for_flow_state(broker, f"backlog:{queue}", "blocked")

    once = sqs_client(broker, THROTTLED_KEY)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        once.send_message(QueueUrl=url, MessageBody="refused")
    assert error_of(raised)["Code"] == "RequestThrottled"
    assert metadata_of(raised)["HTTPStatusCode"] == 400
    assert stored(broker, queue) == 10

    def drain_before_the_second(attempt: int) -> None:
        if attempt != 2:
            return
        for message in receive_all(consumer, url):
            consumer.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        wait_for_flow_state(broker, f"backlog:{queue}", "free")

    sender = sqs_client(broker, THROTTLED_KEY, retries=True)
    attempts = count_attempts(sender, "SendMessage", drain_before_the_second)
    answer = sender.send_message(QueueUrl=url, MessageBody="after the drain")
    assert attempts == [1, 2]
    assert answer["ResponseMetadata"]["RetryAttempts"] == 1
    assert stored(broker, queue) == 11
    got = receive_all(consumer, url)
    assert [(m["MessageId"], m["Body"]) for m in got] == [(answer["MessageId"], "after the drain")]


def test_sends_are_admitted_until_the_backlog_reaches_its_bound(
    broker_factory: BrokerFactory,
) -> None:
    """A 20,000-byte backlog bound on the queue: producers are slowed from 60% of it
    (docs/broker.md) and refused at 100%. A sender that waits as each throttle says goes
    on sending until the bound itself refuses it ("over its limit"); by then the bodies
    it stored fill most of the bound, and nothing refused was stored."""
    broker = broker_factory()
    sqs = sqs_client(broker, FREE_KEY)
    queue = unique("bounded")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    bound = 20_000
    bound_backlog(broker, queue, bound)
    admitted = 0
    throttled = 0
    refusal = ""
    deadline = Deadline(STEP_TIMEOUT_S, "the bound refusing a send")
    while not refusal:
        deadline.check(f"{admitted} admitted, {throttled} throttles")
        try:
            sqs.send_message(QueueUrl=url, MessageBody="x" * BODY_BYTES)
        except botocore.exceptions.ClientError as error:
            message = str(error.response["Error"]["Message"])
            assert error.response["Error"]["Code"] == "RequestThrottled", message
            advice = ADVICE.search(message)
            if advice is None:
                refusal = message  # blocked: the bound itself
            else:
                throttled += 1
                time.sleep(int(advice.group(1)) / 1000 + 0.01)
            continue
        admitted += 1
        assert admitted <= 40, "the bound never refused a send"
    assert "over its limit" in refusal, refusal
    assert stored(broker, queue) == admitted
    # the bodies alone of what was admitted fill at least 80% of the bound
    assert admitted * BODY_BYTES >= 0.8 * bound, (
        f"refused after {admitted} messages of {BODY_BYTES} bytes (a {bound}-byte bound): {refusal}"
    )


# --- free disk ---------------------------------------------------------------------------------


DISK_BYTES = 16 << 20
FLOOR_BYTES = 2 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for the test (CI runs as root, as test_disk_full_tmpfs.py's
    tests need too)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
        timeout=STEP_TIMEOUT_S,
    )
    if done.returncode != 0:
        pytest.skip(f"mount failed: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, timeout=STEP_TIMEOUT_S)


def take_all_but(disk: Path, filler: Path, free_bytes: int) -> None:
    """Grow `filler` until the file system has `free_bytes` left (zeros written, so tmpfs
    allocates them)."""
    stat = os.statvfs(disk)
    grow = stat.f_bavail * stat.f_frsize - free_bytes
    with filler.open("ab", buffering=0) as out:
        while grow > 0:
            grow -= out.write(b"\0" * min(grow, 1 << 20))


def send_until(sqs: Any, url: str, refused: bool) -> tuple[int, str]:
    """Send one message at a time until a send is refused (`refused`) or admitted (not);
    (how many were admitted meanwhile, the refusal's code or ""), within STEP_TIMEOUT_S."""
    admitted = 0
    deadline = Deadline(STEP_TIMEOUT_S, f"a send {'refused' if refused else 'admitted'}")
    while True:
        deadline.check(f"{admitted} admitted")
        try:
            sqs.send_message(QueueUrl=url, MessageBody="x" * BODY_BYTES)
        except botocore.exceptions.ClientError as error:
            if refused:
                return admitted, str(error.response["Error"]["Code"])
            time.sleep(0.1)
            continue
        admitted += 1
        if not refused:
            return admitted, ""
        time.sleep(0.1)


def test_the_disk_free_floor_throttles_sends_until_space_is_back(
    small_disk: Path, tmp_path: Path
) -> None:
    """Free disk below `disk_free_min_bytes`: sends are refused with RequestThrottled (the
    broker notices within its one-second sample: sends before that are stored, counted);
    refused sends store nothing; once space is back sends go through, in the same
    process."""
    broker = BrokerProcess(
        small_disk / "data",
        tmp_path / "logs",
        env=broker_env(disk_free_min_bytes=FLOOR_BYTES),
    )
    broker.start()
    try:
        sqs = sqs_client(broker, FREE_KEY)
        queue = unique("disk")
        url = sqs.create_queue(QueueName=queue)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="before")
        filler = small_disk / "filler"
        take_all_but(small_disk, filler, FLOOR_BYTES // 2)
        admitted, code = send_until(sqs, url, refused=True)
        assert code == "RequestThrottled"
        held = stored(broker, queue)
        assert held == 1 + admitted
        for _ in range(3):
            with pytest.raises(botocore.exceptions.ClientError) as raised:
                sqs.send_message(QueueUrl=url, MessageBody="refused")
            assert error_of(raised)["Code"] == "RequestThrottled"
        assert stored(broker, queue) == held
        assert len(receive_all(sqs, url)) == held  # reads go on

        os.truncate(filler, 0)  # space is back
        later, _ = send_until(sqs, url, refused=False)
        assert later == 1
        assert stored(broker, queue) == held + 1
    finally:
        broker.close()
