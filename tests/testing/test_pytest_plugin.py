"""The ``weirmq_broker`` fixture, loaded through the package's ``pytest11`` entry point (this
file does not import or register it: if the entry point were missing, the fixture would be
unknown and these tests would error)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from weirmq.testing import Broker

pytestmark = pytest.mark.integration


def test_weirmq_broker_serves_confluent_kafka(weirmq_broker: Broker) -> None:
    producer = Producer({"bootstrap.servers": weirmq_broker.bootstrap_servers})
    producer.produce("plugin-demo", key=b"k", value=b"hello")
    assert producer.flush(10) == 0

    # assign() needs no group, but confluent-kafka wants a group.id; without auto commit
    # nothing is sent to a group coordinator.
    consumer = Consumer(
        {
            "bootstrap.servers": weirmq_broker.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("plugin-demo", 0, 0)])
    message = consumer.poll(10)
    consumer.close()
    assert message is not None and message.error() is None
    assert (message.key(), message.value()) == (b"k", b"hello")


def test_weirmq_broker_is_shared_by_the_session(
    weirmq_broker: Broker, request: pytest.FixtureRequest
) -> None:
    assert request.getfixturevalue("weirmq_broker") is weirmq_broker
    assert weirmq_broker.call(lambda: weirmq_broker.broker.topics.get("plugin-demo")) is not None


def test_the_fixtures_groups_rebalance_at_once(weirmq_broker: Broker) -> None:
    """The fixture's broker does not hold a group's first rebalance for the default 3 s
    (its setting is 0), and a subscribed consumer gets its records."""
    assert weirmq_broker.broker.settings.group_initial_rebalance_delay_ms == 0
    producer = Producer({"bootstrap.servers": weirmq_broker.bootstrap_servers})
    producer.produce("plugin-group-demo", value=b"first")
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": weirmq_broker.bootstrap_servers,
            "group.id": "plugin-group",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["plugin-group-demo"])
    try:
        message = consumer.poll(10)
    finally:
        consumer.close()
    assert message is not None and message.error() is None
    assert message.value() == b"first"
