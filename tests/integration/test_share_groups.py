"""Share groups (KIP-932) through confluent-kafka's `ShareConsumer`, on the real broker.

What the issue asks, one test each: two consumers of one group get disjoint records whose
union is everything produced after they joined; accept, release and reject; a consumer
that stops acknowledging has its records delivered to the other after the lock times out,
with the delivery count incremented; the delivery limit (and a reject) copies the record
to the group's dead-letter topic with the context headers; acknowledged records are not
delivered again after a restart, unacknowledged ones are, with their delivery count kept.

Group configs are set the way a Kafka user sets them: IncrementalAlterConfigs on the
GROUP resource, from confluent-kafka's AdminClient. Records carry their sequence number
as the value, so every check is on exact sets.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    Message,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from integration_support import Deadline, ErrorLog

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

TOPIC_PARTITIONS = 4


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create_topic(admin: AdminClient, name: str, partitions: int = TOPIC_PARTITIONS) -> None:
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=10)


def _set_group_configs(admin: AdminClient, group: str, **configs: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)


def _produce(broker: BrokerProcess, topic: str, seqs: Iterable[int], **extra: object) -> None:
    errors = ErrorLog()
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "error_cb": errors.error_cb, **extra}
    )
    failed: list[str] = []

    def report(error: object, message: Message) -> None:
        if error is not None:
            failed.append(str(error))

    for seq in seqs:
        producer.produce(topic, key=str(seq).encode(), value=str(seq).encode(), on_delivery=report)
    assert producer.flush(15) == 0, "undelivered records"
    assert not failed, failed


@contextmanager
def _share_consumer(
    broker: BrokerProcess, group: str, topic: str, **extra: object
) -> Iterator[ShareConsumer]:
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            **extra,
        }
    )
    consumer.subscribe([topic])
    try:
        yield consumer
    finally:
        consumer.close()


def _poll(consumer: ShareConsumer, timeout_s: float = 0.5) -> list[Message]:
    messages = [m for m in consumer.poll(timeout_s) if m.error() is None]
    return messages


def _seq(message: Message) -> int:
    value = message.value()
    assert value is not None
    return int(value)


def _group(broker: BrokerProcess, group: str) -> dict[str, Any]:
    """The group as the admin API shows it ({} when there is none)."""
    assert broker.admin_url is not None, "start the broker with admin_listen"
    try:
        with urllib.request.urlopen(
            f"{broker.admin_url}/api/v1/groups/{group}", timeout=10
        ) as response:
            document: dict[str, Any] = json.load(response)
            return document
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise


def _wait_members(
    broker: BrokerProcess,
    group: str,
    count: int,
    consumers: list[ShareConsumer],
    *,
    partitions: int = 0,
) -> None:
    """Poll the consumers (they join on their first polls) until the group has `count`
    members, as the broker's admin API shows it, and (`partitions`) their assignments,
    as they were last told, are disjoint and cover that many partitions."""
    deadline = Deadline(30, f"{count} members in share group {group!r}")
    while True:
        for consumer in consumers:
            assert not _poll(consumer, 0.2), "records before anything was produced"
        members = _group(broker, group).get("members", [])
        assigned = [(a["topic"], a["partition"]) for m in members for a in m["assignment"]]
        settled = not partitions or len(assigned) == len(set(assigned)) == partitions
        if len(members) == count and settled:
            break
        deadline.check(f"{len(members)} members, assigned {sorted(assigned)}")
    if partitions:
        # A fetch already waiting still names the partitions the member had (there is no
        # revocation): let the members' next fetches carry their new assignments.
        settle = Deadline(1.5, "the members' sessions to follow their assignments")
        while not settle.expired():
            for consumer in consumers:
                assert not _poll(consumer, 0.2), "records before anything was produced"


SHORT_BOUNDS: dict[str, object] = {
    # Kafka holds a group's share.heartbeat.interval.ms to 5-15 s and its lock duration to
    # 15-60 s; these tests step through expiries in a second or two.
    "group_share_min_heartbeat_interval_ms": 100,
    "group_share_min_record_lock_duration_ms": 1_000,
}


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker with the admin API on, to see the group's members."""
    return broker_factory(admin_listen="127.0.0.1:0", **SHORT_BOUNDS)


def _accept_all(consumer: ShareConsumer, messages: list[Message]) -> None:
    for message in messages:
        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
    consumer.commit_sync(10)


def test_two_members_get_disjoint_records_whose_union_is_everything_produced(
    broker: BrokerProcess,
) -> None:
    admin = _admin(broker)
    _create_topic(admin, "jobs")
    _produce(broker, "jobs", range(0, 50))  # before anyone joined: never delivered (latest)
    # Without revocation, a member learns of its smaller share at its next heartbeat.
    _set_group_configs(admin, "workers", **{"share.heartbeat.interval.ms": "300"})
    with (
        _share_consumer(broker, "workers", "jobs") as first,
        _share_consumer(broker, "workers", "jobs") as second,
    ):
        _wait_members(broker, "workers", 2, [first, second], partitions=TOPIC_PARTITIONS)
        _produce(broker, "jobs", range(100, 600))
        got: dict[str, list[int]] = {"first": [], "second": []}
        deadline = Deadline(30, "500 records through the share group")
        while len(got["first"]) + len(got["second"]) < 500:
            for name, consumer in (("first", first), ("second", second)):
                messages = _poll(consumer, 0.2)
                got[name] += [_seq(m) for m in messages]
                assert all(m.delivery_count() == 1 for m in messages)
                _accept_all(consumer, messages)
            deadline.check(f"{len(got['first'])} + {len(got['second'])}")
        assert not set(got["first"]) & set(got["second"]), "a record went to both members"
        assert sorted(got["first"] + got["second"]) == list(range(100, 600))
        assert got["first"] and got["second"], "one member got nothing"
        # Nothing more arrives: every record was accepted once.
        for consumer in (first, second):
            assert not _poll(consumer, 1.0)


def test_release_redelivers_with_a_higher_count_and_reject_never_redelivers(
    broker: BrokerProcess,
) -> None:
    admin = _admin(broker)
    _create_topic(admin, "acks", 1)
    _set_group_configs(admin, "acking", **{"weirmq.share.retry.backoff.ms": "0"})
    with _share_consumer(broker, "acking", "acks") as consumer:
        _wait_members(broker, "acking", 1, [consumer])
        _produce(broker, "acks", range(3))
        seen: dict[int, list[int]] = {}
        deadline = Deadline(30, "accept, release then accept, reject")
        while not (0 in seen and len(seen.get(1, [])) == 2 and 2 in seen):
            for message in _poll(consumer):
                seq = _seq(message)
                seen.setdefault(seq, []).append(message.delivery_count())
                if seq == 1 and len(seen[1]) == 1:
                    consumer.acknowledge(message, AcknowledgeType.RELEASE)
                elif seq == 2:
                    consumer.acknowledge(message, AcknowledgeType.REJECT)
                else:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            consumer.commit_sync(10)
            deadline.check(str(seen))
        assert seen == {0: [1], 1: [1, 2], 2: [1]}
        assert not _poll(consumer, 1.5), "an accepted or rejected record came back"


def test_unacknowledged_records_go_to_another_member_after_the_lock_times_out(
    broker: BrokerProcess,
) -> None:
    admin = _admin(broker)
    _create_topic(admin, "locks", 1)
    _set_group_configs(
        admin,
        "lockers",
        **{"share.record.lock.duration.ms": "1500", "weirmq.share.retry.backoff.ms": "0"},
    )
    with _share_consumer(broker, "lockers", "locks") as stalled:
        _wait_members(broker, "lockers", 1, [stalled])
        _produce(broker, "locks", range(10))
        held: list[Message] = []
        deadline = Deadline(20, "the stalled member's first delivery")
        while len(held) < 10:
            held += _poll(stalled)
            deadline.check(f"{len(held)} held")
        assert all(m.delivery_count() == 1 for m in held)
        # It never acknowledges; another member joins and gets them after the lock.
        with _share_consumer(broker, "lockers", "locks") as rescuer:
            got: list[Message] = []
            deadline = Deadline(30, "redelivery to the other member")
            while len(got) < 10:
                messages = _poll(rescuer)
                got += messages
                _accept_all(rescuer, messages)
                deadline.check(f"{len(got)} redelivered")
            assert sorted(_seq(m) for m in got) == list(range(10))
            assert all(m.delivery_count() == 2 for m in got)


def _dead_letters(broker: BrokerProcess, topic: str, count: int) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "dlq-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(TOPIC_PARTITIONS)])
        found: list[Message] = []
        deadline = Deadline(20, f"{count} dead letters in {topic!r}")
        while len(found) < count:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                found.append(message)
            deadline.check(f"{len(found)} found")
        return found
    finally:
        consumer.close()


def test_the_delivery_limit_and_reject_copy_the_record_to_the_dead_letter_topic(
    broker: BrokerProcess,
) -> None:
    admin = _admin(broker)
    _create_topic(admin, "orders")
    _set_group_configs(
        admin,
        "billing",
        **{
            "share.delivery.count.limit": "2",
            "weirmq.share.retry.backoff.ms": "0",
            "errors.deadletterqueue.topic.name": "dlq.orders",
            "errors.deadletterqueue.copy.record.enable": "true",
        },
    )
    with _share_consumer(broker, "billing", "orders") as consumer:
        _wait_members(broker, "billing", 1, [consumer])
        _produce(broker, "orders", [7, 8])
        deliveries: dict[int, list[int]] = {}
        deadline = Deadline(30, "two deliveries of 7, one of 8")
        while len(deliveries.get(7, [])) < 2 or 8 not in deliveries:
            for message in _poll(consumer):
                seq = _seq(message)
                deliveries.setdefault(seq, []).append(message.delivery_count())
                kind = AcknowledgeType.RELEASE if seq == 7 else AcknowledgeType.REJECT
                consumer.acknowledge(message, kind)
            consumer.commit_sync(10)
            deadline.check(str(deliveries))
        assert deliveries == {7: [1, 2], 8: [1]}
        assert not _poll(consumer, 1.5), "a dead-lettered record came back"
    letters = {int(m.value()): m for m in _dead_letters(broker, "dlq.orders", 2)}
    assert sorted(letters) == [7, 8]
    for seq, reason, count in ((7, b"delivery_limit", b"2"), (8, b"rejected", b"1")):
        headers = dict(letters[seq].headers() or [])
        assert headers["__dlq.errors.group.id"] == b"billing"
        assert headers["__dlq.errors.topic"] == b"orders"
        assert headers["__dlq.errors.delivery.count"] == count
        assert headers["__dlq.errors.reason"] == reason
        assert letters[seq].key() == str(seq).encode()
        offset = int(headers["__dlq.errors.offset"])
        partition = int(headers["__dlq.errors.partition"])
        assert 0 <= partition < TOPIC_PARTITIONS and offset >= 0


def test_acknowledged_records_stay_acknowledged_across_a_restart(
    broker: BrokerProcess,
) -> None:
    admin = _admin(broker)
    _create_topic(admin, "durable", 1)
    _set_group_configs(admin, "keepers", **{"weirmq.share.retry.backoff.ms": "0"})
    with _share_consumer(broker, "keepers", "durable") as consumer:
        _wait_members(broker, "keepers", 1, [consumer])
        _produce(broker, "durable", range(20))
        got: list[Message] = []
        deadline = Deadline(20, "20 records")
        while len(got) < 20:
            got += _poll(consumer)
            deadline.check(f"{len(got)}")
        # Accept the even ones; the odd ones stay acquired when the broker stops.
        for message in got:
            if _seq(message) % 2 == 0:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync(10)
        broker.restart()
    admin = _admin(broker)
    with _share_consumer(broker, "keepers", "durable") as consumer:
        redelivered: list[Message] = []
        deadline = Deadline(40, "the odd records again after the restart")
        while len(redelivered) < 10:
            messages = _poll(consumer)
            redelivered += messages
            _accept_all(consumer, messages)
            deadline.check(f"{len(redelivered)}")
        assert sorted(_seq(m) for m in redelivered) == list(range(1, 20, 2))
        assert all(m.delivery_count() == 2 for m in redelivered)
        assert not _poll(consumer, 1.5)


def test_group_configs_are_set_described_and_checked(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    _set_group_configs(admin, "configured", **{"share.record.lock.duration.ms": "5000"})
    resource = ConfigResource(ConfigResource.Type.GROUP, "configured")
    described = admin.describe_configs([resource])[resource].result(timeout=10)
    assert described["share.record.lock.duration.ms"].value == "5000"
    assert described["share.delivery.count.limit"].value == "5"
    assert described["share.auto.offset.reset"].value == "latest"
    bad = ConfigResource(
        ConfigResource.Type.GROUP,
        "configured",
        incremental_configs=[
            ConfigEntry(
                "share.record.lock.duration.ms", "0", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    with pytest.raises(Exception, match=r"INVALID_CONFIG|share\.record\.lock\.duration\.ms"):
        admin.incremental_alter_configs([bad])[bad].result(timeout=10)


KILL_ROUNDS = 3
KILL_RECORDS = 400


def test_every_record_is_accepted_once_or_dead_lettered_across_repeated_kill_9(
    broker: BrokerProcess,
) -> None:
    """kill -9 the broker mid-stream, repeatedly, while a member accepts records. A record
    whose acceptance the broker confirmed (commit_sync without error) is never delivered
    again; in the end every record was accepted or dead-lettered (a record in flight at a
    kill counts a delivery each time, so some may reach the limit). An acceptance lost
    with its connection (commit_sync failed) is ambiguous: the record may come again."""
    admin = _admin(broker)
    _create_topic(admin, "crashy", 2)
    _set_group_configs(
        admin,
        "survivors",
        **{
            "share.record.lock.duration.ms": "2000",
            "weirmq.share.retry.backoff.ms": "0",
            "errors.deadletterqueue.topic.name": "dlq.crashy",
            "errors.deadletterqueue.copy.record.enable": "true",
        },
    )
    confirmed: set[int] = set()
    ambiguous: set[int] = set()
    again: list[int] = []
    at_kills: list[int] = []
    # Small polls, so that records are in flight (acquired, accepting) at every kill.
    with _share_consumer(broker, "survivors", "crashy", **{"max.poll.records": 20}) as consumer:
        _wait_members(broker, "survivors", 1, [consumer])
        _produce(broker, "crashy", range(KILL_RECORDS), acks="all")
        kills, quarter = 0, KILL_RECORDS // (KILL_ROUNDS + 1)
        deadline = Deadline(90, f"{KILL_RECORDS} records accepted through {KILL_ROUNDS} kills")
        while kills < KILL_ROUNDS or len(confirmed | ambiguous) < KILL_RECORDS:
            batch = _poll(consumer, 0.3)
            if not batch:
                deadline.check(f"{len(confirmed)} confirmed, {len(ambiguous)} ambiguous")
                if kills >= KILL_ROUNDS and _settled(broker, consumer, confirmed, ambiguous):
                    break
                continue
            for message in batch:
                if _seq(message) in confirmed:
                    again.append(_seq(message))
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            # Kill at a quarter, a half and three quarters of the stream, while this
            # batch is acquired and its acceptance not yet sent.
            if kills < KILL_ROUNDS and len(confirmed) >= (kills + 1) * quarter:
                at_kills.append(len(confirmed))
                broker.kill()
                broker.start()
                kills += 1
            _commit(consumer, batch, confirmed, ambiguous)
            deadline.check(f"{len(confirmed)} confirmed, {len(ambiguous)} ambiguous")
    assert any(0 < n < KILL_RECORDS for n in at_kills), f"no kill mid-stream: {at_kills}"
    assert not again, f"records delivered again after a confirmed acceptance: {again[:20]}"
    dead = {_seq(m) for m in _all_records(broker, "dlq.crashy")}
    lost = set(range(KILL_RECORDS)) - confirmed - ambiguous - dead
    assert not lost, f"{len(lost)} records never accepted nor dead-lettered: {sorted(lost)[:20]}"


def _commit(
    consumer: ShareConsumer, batch: list[Message], confirmed: set[int], ambiguous: set[int]
) -> None:
    seqs = {_seq(m) for m in batch}
    try:
        results = consumer.commit_sync(10)
    except Exception:  # the broker died under the acknowledgement: it may have landed
        ambiguous |= seqs
        return
    failed = {
        tp.partition for tp, error in (results or {}).items() if error is not None or tp.error
    }
    for message in batch:
        (ambiguous if message.partition() in failed else confirmed).add(_seq(message))
    ambiguous -= confirmed


def _settled(
    broker: BrokerProcess, consumer: ShareConsumer, confirmed: set[int], ambiguous: set[int]
) -> bool:
    """After the last kill, once nothing more is delivered for the lock duration and a
    bit, whatever is not accepted must be in the dead-letter topic."""
    quiet = Deadline(3.0, "")
    while not quiet.expired():
        batch = _poll(consumer, 0.3)
        if batch:
            for message in batch:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            _commit(consumer, batch, confirmed, ambiguous)
            return False
    return True


def _all_records(broker: BrokerProcess, topic: str) -> list[Message]:
    """Every record of `topic` (all its partitions, up to their high watermarks)."""
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return []
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in metadata.partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        found: list[Message] = []
        deadline = Deadline(20, f"all of {topic!r}")
        while len(found) < sum(ends.values()):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                found.append(message)
            deadline.check(f"{len(found)} of {sum(ends.values())}")
        return found
    finally:
        consumer.close()


def test_delayed_records_reach_a_share_group_when_due_in_due_order(broker: BrokerProcess) -> None:
    """Records produced with `weirmq.delay.ms` to a topic with delays on reach share group
    members no earlier than due, in due order."""
    admin = _admin(broker)
    topic = NewTopic("later", 1, 1, config={"weirmq.delay.enable": "true"})
    for future in admin.create_topics([topic]).values():
        future.result(timeout=10)
    with _share_consumer(broker, "delayed", "later") as consumer:
        _wait_members(broker, "delayed", 1, [consumer])
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        delays_ms = {0: 1500, 1: 300, 2: 900, 3: 0}
        sent_ms: dict[int, float] = {}
        for seq, delay in delays_ms.items():
            sent_ms[seq] = time.time() * 1000
            producer.produce(
                "later", value=str(seq).encode(), headers=[("weirmq.delay.ms", str(delay).encode())]
            )
        assert producer.flush(10) == 0
        arrived: list[tuple[int, float]] = []
        deadline = Deadline(20, "four delayed records")
        while len(arrived) < 4:
            messages = _poll(consumer, 0.1)
            now_ms = time.time() * 1000
            arrived += [(_seq(m), now_ms) for m in messages]
            _accept_all(consumer, messages)
            deadline.check(str(arrived))
    assert [seq for seq, _ in arrived] == [3, 1, 2, 0]
    for seq, at_ms in arrived:
        # Never early: due = when the broker got it, which is after we sent it.
        assert at_ms >= sent_ms[seq] + delays_ms[seq], (seq, at_ms - sent_ms[seq])


def test_implicit_mode_accepts_a_polls_records_on_the_next_poll(broker: BrokerProcess) -> None:
    """`share.acknowledgement.mode=implicit` (librdkafka's default): the records of a poll
    are accepted by the next poll; none comes back, even to another member later."""
    admin = _admin(broker)
    _create_topic(admin, "implicit", 1)
    _set_group_configs(admin, "implicit", **{"weirmq.share.retry.backoff.ms": "0"})
    with _share_consumer(
        broker, "implicit", "implicit", **{"share.acknowledgement.mode": "implicit"}
    ) as consumer:
        _wait_members(broker, "implicit", 1, [consumer])
        _produce(broker, "implicit", range(30))
        got: list[int] = []
        deadline = Deadline(20, "30 records in implicit mode")
        while len(got) < 30:
            got += [_seq(m) for m in _poll(consumer)]
            deadline.check(f"{len(got)}")
        assert sorted(got) == list(range(30))
        assert not _poll(consumer, 1.0)  # this poll accepts the last ones
        (partition,) = _group(broker, "implicit")["share_partitions"]
        deadline = Deadline(10, "every record accepted")
        while partition["start_offset"] < 30:
            deadline.check(str(partition))
            assert not _poll(consumer, 0.2)
            (partition,) = _group(broker, "implicit")["share_partitions"]
        assert partition["accepted"] == 30 and partition["acquired"] == 0
    with _share_consumer(broker, "implicit", "implicit") as later:
        assert not _poll(later, 2.0), "an implicitly accepted record came back"
