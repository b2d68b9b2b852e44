"""Bounded topic creation with real clients (issue 20).

A topic of thousands of partitions is made off the event loop: while one confluent-kafka
AdminClient waits for it, another client's ApiVersions and a producer's writes to another
topic keep being answered. Auto-creation by Metadata is bounded per client, and a request
asking too many partitions is refused as Kafka 4 refuses it. Every assertion is about
behaviour (answered before the create finished, refused with this code), never a timing
threshold: the machines that run this are of every speed.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerFactory
from create_probe import Probe
from integration_support import ADMIN_TIMEOUT_S, Deadline, create_topic

PARTITIONS = 5_000
"""Enough for a create that takes seconds (0.3-2 ms of file-system work per partition),
few enough to stay within the broker's 30 s wait on a slow, busy machine."""
CREATE_TIMEOUT_S = 120.0
DELIVERY_TIMEOUT_S = 30.0
FLOOD_TOPICS = 40
AUTO_CREATE_RATE = 1
"""Per second: a burst of 11 topics, and one more while the bucket is not negative."""


def test_a_large_create_does_not_hold_up_other_clients(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "other", 1)
    host, _, port = broker.bootstrap.rpartition(":")
    probe = Probe(host, int(port)).start()
    delivered: list[float] = []
    failed: list[str] = []
    producing = threading.Event()
    producing.set()

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is None:
            delivered.append(time.monotonic())
        else:
            failed.append(str(error))

    def produce() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        while producing.is_set():
            producer.produce("other", b"while the create runs", on_delivery=on_delivery)
            producer.poll(0.01)
        assert producer.flush(DELIVERY_TIMEOUT_S) == 0, "deliveries still pending"

    writer = threading.Thread(target=produce, name="other-topic-producer", daemon=True)
    writer.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        time.sleep(0.5)  # the probe and the producer are under way
        started = time.monotonic()
        future = admin.create_topics(
            [NewTopic("big", PARTITIONS)],
            operation_timeout=CREATE_TIMEOUT_S,
            request_timeout=CREATE_TIMEOUT_S,
        )["big"]
        future.result(CREATE_TIMEOUT_S)
        finished = time.monotonic()
    finally:
        producing.clear()
        writer.join(DELIVERY_TIMEOUT_S + 5)
        probe.stop()
    assert probe.error is None, f"the ApiVersions probe failed: {probe.error!r}"
    assert not failed, failed[:3]
    answered = probe.answered_between(started, finished)
    assert len(answered) >= 10, (
        f"{len(answered)} ApiVersions answered during a {finished - started:.1f} s create"
    )
    assert any(started < at < finished for at in delivered), "no produce answered meanwhile"
    described = admin.list_topics("big", timeout=ADMIN_TIMEOUT_S).topics["big"]
    assert described.error is None and len(described.partitions) == PARTITIONS


def test_an_auto_creation_flood_is_refused_past_the_client_s_rate(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(auto_create_topics_rate=AUTO_CREATE_RATE)
    flooder = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "flooder"})
    started = time.monotonic()
    outcomes = {}
    for index in range(FLOOD_TOPICS):
        name = f"flood-{index}"
        found = flooder.list_topics(name, timeout=ADMIN_TIMEOUT_S).topics[name]
        outcomes[name] = None if found.error is None else found.error.code()
    elapsed_s = time.monotonic() - started
    refused = [name for name, code in outcomes.items() if code is not None]
    assert set(outcomes.values()) == {None, KafkaError.THROTTLING_QUOTA_EXCEEDED}, outcomes
    refills = int(elapsed_s * AUTO_CREATE_RATE) + 1
    assert FLOOD_TOPICS - len(refused) <= 11 + 1 + refills
    # Refused means not created; another client still gets its topic.
    calm = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "calm"})
    assert (
        calm.list_topics("calm-topic", timeout=ADMIN_TIMEOUT_S).topics["calm-topic"].error is None
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    existing = set(admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics)
    assert not existing & set(refused)
    assert {n for n, code in outcomes.items() if code is None} <= existing
    # The refusal is retriable: once the bucket refills, the flooder's next one is made.
    deadline = Deadline(30, "a refused auto-creation made after the refill")
    name = refused[-1]
    while flooder.list_topics(name, timeout=ADMIN_TIMEOUT_S).topics[name].error is not None:
        deadline.check()
        time.sleep(0.5)


def test_a_request_asking_too_many_partitions_is_a_policy_violation(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(max_partitions_per_request=100)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("a", 60), NewTopic("b", 41)])
    for future in futures.values():
        error = future.exception(ADMIN_TIMEOUT_S)
        assert error is not None and error.args[0].code() == KafkaError.POLICY_VIOLATION
        assert "Excessively large number of partitions" in error.args[0].str()
    admin.create_topics([NewTopic("a", 60)])["a"].result(ADMIN_TIMEOUT_S)
