"""The broker process as an operator sees it: start, graceful stop, restart with its data.

These also check the harness itself (startup line, signals, same port on restart).
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, Message, Producer
from integration_support import (
    Deadline,
    DeliveryLog,
    ErrorLog,
    consume_from_beginning,
    consumer_config,
    headers_for,
    payload,
    producer_config,
    seq_of,
)

if TYPE_CHECKING:
    from conftest import BrokerProcess

GRACEFUL_STOP_MAX_S = 5.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_gracefully(broker: BrokerProcess, sig: signal.Signals) -> None:
    errors = ErrorLog()
    producer = Producer(producer_config(broker.bootstrap, errors))
    metadata = producer.list_topics(timeout=10)  # a client got an answer: the broker is up
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", broker.port)]

    started = time.monotonic()
    code = broker.stop(sig)
    elapsed_s = time.monotonic() - started

    assert code == 0, broker.stderr_tail()
    assert elapsed_s < GRACEFUL_STOP_MAX_S


def test_restart_keeps_data_and_port(broker: BrokerProcess) -> None:
    deadline = Deadline(60, "produce, stop, restart, consume")
    errors, deliveries = ErrorLog(), DeliveryLog()
    producer = Producer(producer_config(broker.bootstrap, errors, acks="all"))
    for seq in range(100):
        producer.produce(
            "survives-restart",
            value=payload(seq, 100),
            headers=headers_for(seq),
            on_delivery=deliveries.callback(seq),
        )
    assert producer.flush(deadline.remaining()) == 0
    assert deliveries.errors == []
    port = broker.port

    assert broker.stop() == 0, broker.stderr_tail()
    broker.restart()

    assert broker.port == port
    seen: dict[int, tuple[int, int]] = {}

    def record(message: Message) -> None:
        seen[seq_of(message.headers())] = (message.partition(), message.offset())
        assert message.value() == payload(seq_of(message.headers()), 100)

    consumer_errors = ErrorLog()
    consumer = Consumer(consumer_config(broker.bootstrap, consumer_errors))
    try:
        consume_from_beginning(
            consumer, "survives-restart", deliveries.count_by_partition(), deadline, record
        )
    finally:
        consumer.close()
    assert seen == deliveries.where
    assert consumer_errors.snapshot() == []
