"""A live group migrates between the classic protocol and KIP-848's, with real clients.

Two confluent-kafka consumers of the classic protocol (``group.protocol=classic``, with
the eager ``range`` or the cooperative ``cooperative-sticky`` assignor, which rejoin in
different ways) consume a topic that a producer writes all along. A third one
joins with ``group.protocol=consumer``: the broker upgrades the group online, with no
fatal error for anyone, and the partitions get shared between both kinds; then the
consumer-protocol member leaves and the group is downgraded, the classic members taking
every partition back. Every member commits synchronously after each batch; the
``GroupTracker`` checks as events come in that a partition is never held by two members at
once and that each handover resumes exactly at the last acknowledged commit, and at the
end every record must have been read exactly once. A second scenario restarts the broker
in the middle: the group comes back as a consumer group with its offsets, and the
migration goes on. A third one turns the migration off
(``group_consumer_migration_policy=DISABLED``): the consumer-protocol member gets Kafka's
fatal GROUP_ID_NOT_FOUND and the classic group goes on undisturbed.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription
from group_member import confluent_member
from integration_support import (
    ADMIN_TIMEOUT_S,
    CLASSIC_HEARTBEAT_INTERVAL_MS,
    CLASSIC_SESSION_TIMEOUT_MS,
    GROUP_SETTINGS,
    ContinuousProducer,
    Deadline,
    DeliveryLog,
    GroupTracker,
    MemberThread,
    assert_every_record_consumed,
    create_topic,
    member_config,
    wait_for_group,
    wait_stable_and_reading,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 6
SCENARIO_BUDGET_S = 120
ASSIGNORS = ["range", "cooperative-sticky"]
CLASSIC = {
    "group.protocol": "classic",
    "partition.assignment.strategy": "range",
    "session.timeout.ms": CLASSIC_SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": CLASSIC_HEARTBEAT_INTERVAL_MS,
}
CONSUMER_PROTOCOL = {"group.protocol": "consumer"}


def start_member(
    broker: BrokerProcess, group: str, topic: str, tracker: GroupTracker, name: str, **extra: object
) -> MemberThread:
    config = member_config(broker.bootstrap, group, **{"client.id": name, **extra})
    return MemberThread(name, confluent_member(name, topic, config, tracker), tracker).start()


def describe(admin: AdminClient, group: str) -> ConsumerGroupDescription | None:
    try:
        result = admin.describe_consumer_groups([group])[group].result(ADMIN_TIMEOUT_S)
    except KafkaException:
        return None
    assert isinstance(result, ConsumerGroupDescription)
    return result


def group_type(admin: AdminClient, group: str) -> ConsumerGroupType | None:
    result = admin.list_consumer_groups().result(ADMIN_TIMEOUT_S)
    assert not result.errors, result.errors
    types = {listing.group_id: listing.type for listing in result.valid}
    return types.get(group)


def described_as(
    admin: AdminClient, group: str, kind: ConsumerGroupType, members: set[str]
) -> bool:
    """Whether the broker describes the group as a Stable group of that type with these
    members (by client id)."""
    description = describe(admin, group)
    return (
        description is not None
        and description.type == kind
        and description.state == ConsumerGroupState.STABLE
        and {m.client_id for m in description.members} == members
        and group_type(admin, group) == kind
    )


def assert_read_once(tracker: GroupTracker, deliveries: DeliveryLog) -> None:
    """Every acknowledged record read, where it was written, by one member only once."""
    assert_every_record_consumed(tracker, deliveries)
    counts = Counter(seq for _member, (_p, _o, seq) in tracker.records())
    again = sorted(seq for seq, count in counts.items() if count > 1)
    assert not again, (
        f"{len(again)} records read more than once, e.g. {again[:10]}; "
        f"refused commits: {tracker.commit_failures[:10]}"
    )


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_a_live_classic_group_is_upgraded_then_downgraded_without_losing_a_record(
    broker_factory: BrokerFactory, assignor: str
) -> None:
    broker = broker_factory(**GROUP_SETTINGS)
    group, topic = "migrating", "migrating-topic"
    classic = {**CLASSIC, "partition.assignment.strategy": assignor}
    create_topic(broker.bootstrap, topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tracker = GroupTracker()
    deadline = Deadline(SCENARIO_BUDGET_S, "online upgrade and downgrade")
    producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS, rate_per_s=200).start()
    members: list[MemberThread] = []
    try:
        members += [
            start_member(broker, group, topic, tracker, name, **classic)
            for name in ("classic-a", "classic-b")
        ]
        wait_stable_and_reading(tracker, ["classic-a", "classic-b"], PARTITIONS, deadline)
        assert group_type(admin, group) == ConsumerGroupType.CLASSIC

        # The upgrade: a consumer-protocol member joins the live classic group.
        kip848 = start_member(broker, group, topic, tracker, "kip848", **CONSUMER_PROTOCOL)
        members.append(kip848)
        everyone = ["classic-a", "classic-b", "kip848"]
        wait_stable_and_reading(tracker, everyone, PARTITIONS, deadline)
        wait_for_group(
            tracker,
            lambda: described_as(admin, group, ConsumerGroupType.CONSUMER, set(everyone)),
            deadline,
            "the group described as a Stable consumer group of all three",
        )

        # The downgrade: the last consumer-protocol member leaves.
        members.remove(kip848)
        kip848.leave(deadline.remaining())
        wait_stable_and_reading(tracker, ["classic-a", "classic-b"], PARTITIONS, deadline)
        wait_for_group(
            tracker,
            lambda: described_as(
                admin, group, ConsumerGroupType.CLASSIC, {"classic-a", "classic-b"}
            ),
            deadline,
            "the group described as a Stable classic group again",
        )

        deliveries = producer.stop(deadline.remaining())
        produced = set(deliveries.where)
        wait_for_group(tracker, lambda: tracker.seqs() >= produced, deadline, "reading the rest")
        for member in members:
            member.leave(deadline.remaining())
        members.clear()
    finally:
        for member in members:
            member.halt()
        producer.halt()
    assert_read_once(tracker, deliveries)


TRANSIENT_WHILE_RESTARTING = ("_TRANSPORT", "_ALL_BROKERS_DOWN")
"""librdkafka's reports of a broker that went away; anything else is still an error."""


REJOIN_AFTER_RESTART = "consume: REBALANCE_IN_PROGRESS: JoinGroup failed"
"""After the restart the classic members rejoin a group that converts again under them: a
JoinGroup still waiting then is answered REBALANCE_IN_PROGRESS (as Kafka answers waiting
joins at a conversion), which librdkafka reports through consume() and joins again."""


class RestartTracker(GroupTracker):
    """A tracker that takes connection errors for what they are while the broker restarts,
    and a rejoin a conversion answered."""

    def error(self, member: str, text: str) -> None:
        if REJOIN_AFTER_RESTART in text:
            return
        if not any(f"error_cb: {code}:" in text for code in TRANSIENT_WHILE_RESTARTING):
            super().error(member, text)


def test_a_migrating_group_survives_a_broker_restart(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(**GROUP_SETTINGS)
    group, topic = "restarted-migration", "restarted-migration-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # A restart loses the members of a consumer group (they rejoin, see groups.md): until
    # each notices, two members may think they hold a partition, so ownership is not
    # checked across the restart; every record must still be read.
    tracker = RestartTracker(strict=False)
    deadline = Deadline(SCENARIO_BUDGET_S, "a migration across a broker restart")
    producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS, rate_per_s=200).start()
    members: list[MemberThread] = []
    try:
        members += [
            start_member(broker, group, topic, tracker, name, **CLASSIC)
            for name in ("classic-a", "classic-b")
        ]
        wait_stable_and_reading(tracker, ["classic-a", "classic-b"], PARTITIONS, deadline)
        kip848 = start_member(broker, group, topic, tracker, "kip848", **CONSUMER_PROTOCOL)
        members.append(kip848)
        everyone = ["classic-a", "classic-b", "kip848"]
        wait_stable_and_reading(tracker, everyone, PARTITIONS, deadline)

        # The producer pauses over the restart (its client would report the broker gone);
        # the next one goes on with the following sequence numbers, in the same log.
        before = producer.stop(deadline.remaining())
        sent = producer.sent
        broker.restart()
        producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS, rate_per_s=200)
        producer.sent, producer.deliveries = sent, before
        producer.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        wait_for_group(
            tracker,
            lambda: described_as(admin, group, ConsumerGroupType.CONSUMER, set(everyone)),
            deadline,
            "the group back as a Stable consumer group of all three after the restart",
        )
        wait_stable_and_reading(tracker, everyone, PARTITIONS, deadline)

        members.remove(kip848)
        kip848.leave(deadline.remaining())
        wait_for_group(
            tracker,
            lambda: described_as(
                admin, group, ConsumerGroupType.CLASSIC, {"classic-a", "classic-b"}
            ),
            deadline,
            "the group downgraded to a Stable classic group",
        )
        wait_stable_and_reading(tracker, ["classic-a", "classic-b"], PARTITIONS, deadline)
        deliveries = producer.stop(deadline.remaining())
        produced = set(deliveries.where)
        wait_for_group(tracker, lambda: tracker.seqs() >= produced, deadline, "reading the rest")
        for member in members:
            member.leave(deadline.remaining())
        members.clear()
    finally:
        for member in members:
            member.halt()
        producer.halt()
    assert_every_record_consumed(tracker, deliveries)


def test_with_migration_disabled_the_consumer_protocol_member_is_refused_as_by_kafka(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(**GROUP_SETTINGS, group_consumer_migration_policy="DISABLED")
    group, topic = "not-migrating", "not-migrating-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    tracker = GroupTracker()
    deadline = Deadline(SCENARIO_BUDGET_S, "a refused upgrade")
    producer = ContinuousProducer(broker.bootstrap, topic, PARTITIONS, rate_per_s=200).start()
    classic = start_member(broker, group, topic, tracker, "classic-a", **CLASSIC)
    errors: list[KafkaError] = []
    refused = Consumer(
        member_config(broker.bootstrap, group, error_cb=errors.append, **CONSUMER_PROTOCOL)
    )
    try:
        wait_stable_and_reading(tracker, ["classic-a"], PARTITIONS, deadline)
        refused.subscribe([topic])
        while not any(_group_id_not_found(e) for e in errors):
            deadline.check(f"GROUP_ID_NOT_FOUND for the consumer-protocol member; got {errors}")
            for message in refused.consume(num_messages=10, timeout=0.2):
                error = message.error()
                assert error is not None, "the refused member read a record"
                errors.append(error)
        # the classic group goes on, untouched
        wait_stable_and_reading(tracker, ["classic-a"], PARTITIONS, deadline)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert described_as(admin, group, ConsumerGroupType.CLASSIC, {"classic-a"})
        producer.stop(deadline.remaining())
        classic.leave(deadline.remaining())
    finally:
        refused.close()
        classic.halt()
        producer.halt()
    tracker.raise_if_broken()


def _group_id_not_found(error: KafkaError) -> bool:
    """librdkafka raises it as a fatal error, whose text is the broker's error's."""
    return error.code() == KafkaError.GROUP_ID_NOT_FOUND or (
        error.code() == KafkaError._FATAL and "The group id does not exist" in error.str()
    )
