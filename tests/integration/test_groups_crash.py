"""Committed offsets survive kill -9 of the broker.

A member commits offsets of several partitions, some more than once (the last commit counts,
even when it goes back), and the broker is SIGKILLed right after the last acknowledgement,
while the member is still in the group: nothing is closed, nothing flushed on the way out.
After a restart on the same data directory, the offsets read back are exactly the committed
ones, and a new member of the group starts each partition exactly there (a partition
without a commit starts where ``auto.offset.reset=earliest`` says). Both for a classic group
and for a KIP-848 (``group.protocol=consumer``) group.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition
from integration_support import (
    CLASSIC_HEARTBEAT_INTERVAL_MS,
    CLASSIC_SESSION_TIMEOUT_MS,
    GROUP_SETTINGS,
    Deadline,
    committed_offsets,
    create_topic,
    first_offsets,
    produce_per_partition,
    subscribed_consumer,
)

if TYPE_CHECKING:
    from conftest import BrokerFactory

PARTITIONS = 4
RECORDS_PER_PARTITION = 40
# Partition 0 goes forward then back, 1 and 2 are committed once, 3 never.
COMMITS = [{0: 5}, {1: 17, 2: 39}, {0: 31}, {0: 23}]
LAST_COMMITTED = {0: 23, 1: 17, 2: 39, 3: OFFSET_INVALID}
FIRST_READ = {0: 23, 1: 17, 2: 39, 3: 0}
PROTOCOLS = {
    "classic": {
        "session.timeout.ms": CLASSIC_SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": CLASSIC_HEARTBEAT_INTERVAL_MS,
    },
    "consumer": {"group.protocol": "consumer"},
}
CLOSE_TIMEOUT_S = 30.0


def read_everything(consumer: Consumer, total: int, deadline: Deadline) -> None:
    read = 0
    while read < total:
        deadline.check(f"read {read} of {total}")
        for message in consumer.consume(num_messages=500, timeout=0.2):
            error = message.error()
            assert error is None, f"{error.name()}: {error.str()}"
            read += 1


def close_within(consumer: Consumer, timeout_s: float) -> None:
    """Close in a helper thread, so that a close that hangs fails the test instead."""
    closer = threading.Thread(target=consumer.close, daemon=True)
    closer.start()
    closer.join(timeout_s)
    assert not closer.is_alive(), f"consumer.close() still running after {timeout_s:.0f} s"


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_committed_offsets_survive_a_broker_kill(
    broker_factory: BrokerFactory, protocol: str
) -> None:
    broker = broker_factory(**GROUP_SETTINGS)
    group, topic = f"crash-{protocol}", f"crash-{protocol}-topic"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_per_partition(broker.bootstrap, topic, PARTITIONS, RECORDS_PER_PARTITION)
    deadline = Deadline(60, f"committed offsets of a {protocol} group across kill -9")

    member = subscribed_consumer(broker.bootstrap, group, topic, **PROTOCOLS[protocol])
    try:
        read_everything(member, PARTITIONS * RECORDS_PER_PARTITION, deadline)
        for offsets in COMMITS:
            request = [TopicPartition(topic, p, o) for p, o in offsets.items()]
            result = member.commit(offsets=request, asynchronous=False)
            assert [tp.error for tp in result] == [None] * len(request), result
        broker.kill()
        broker.restart()
    finally:
        close_within(member, CLOSE_TIMEOUT_S)

    assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == LAST_COMMITTED
    first = first_offsets(
        broker.bootstrap, group, topic, PARTITIONS, deadline, **PROTOCOLS[protocol]
    )
    assert first == FIRST_READ
