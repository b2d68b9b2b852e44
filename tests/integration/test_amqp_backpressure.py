"""Back-pressure over AMQP: Connection.Blocked from the flow controller, Unblocked after.

A pika publisher writes 1 KiB messages as fast as it can to a durable queue with nobody
consuming; the queue's topic opts into a backlog bound (`weirmq.backlog.max.bytes`,
measured against the queue's own share group `amqp:<queue>`), set with Kafka's
IncrementalAlterConfigs as any topic config is. What must hold:

- the publisher is told Connection.Blocked (pika's blocked callback) before the queue
  grows far past its bound, and the broker stops reading from it: its publishes pile up
  in its own socket, not in the queue;
- a consumer on another connection drains the queue (acks), the backlog falls below its
  low watermark, and the publisher is told Connection.Unblocked and goes on;
- every message the publisher sent arrives: nothing is lost by being held;
- the broker's memory stays within its request-memory budget of where it started (the
  held publisher's messages wait in its own socket, not in the broker).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pika
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from integration_support import Deadline

if TYPE_CHECKING:
    from conftest import BrokerFactory

pytestmark = pytest.mark.integration

QUEUE = "flooded"
BOUND = 256 * 1024
BODY = b"x" * 1024
BUDGET = 32 * 1024 * 1024
"""The broker's request-memory budget (`queued_max_request_bytes`) for this test."""
TOTAL = 4_000
"""Messages published: 4 MB, sixteen times the bound."""
SLACK_MESSAGES = 600
"""What the queue may exceed its bound by: the publishes read from the socket in the turn
that found the bound reached (one read of the connection), and the messages admitted just
below it."""


def _parameters(address: str) -> pika.ConnectionParameters:
    host, port = address.rsplit(":", 1)
    return pika.ConnectionParameters(
        host, int(port), connection_attempts=1, blocked_connection_timeout=90
    )


def test_a_fast_publisher_is_blocked_at_the_backlog_bound_then_unblocked(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(queued_max_request_bytes=BUDGET)
    assert broker.amqp is not None
    setup = pika.BlockingConnection(_parameters(broker.amqp))
    setup.channel().queue_declare(QUEUE, durable=True)
    setup.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries = {"weirmq.backlog.max.bytes": str(BOUND), "weirmq.backlog.group": f"amqp:{QUEUE}"}
    resource = ConfigResource(
        ResourceType.TOPIC,
        QUEUE,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in entries.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)

    # The publisher is pika's asynchronous SelectConnection on its own thread, publishing
    # 100 messages per turn of its loop while it is not blocked (as a well-behaved
    # publisher does: it reads Connection.Blocked even with writes queued) and pausing
    # while it is.
    events: list[str] = []
    blocked = threading.Event()
    failures: list[BaseException] = []

    def publish() -> None:
        state = {"sent": 0, "blocked": False}
        connection: Any = None

        def turn() -> None:
            if state["blocked"] or state["sent"] >= TOTAL:
                return
            for _ in range(min(100, TOTAL - state["sent"])):
                channel.basic_publish("", QUEUE, BODY)
                state["sent"] += 1
            if state["sent"] < TOTAL:
                connection.ioloop.call_later(0.001, turn)
            else:
                connection.ioloop.call_later(0.5, connection.close)

        def on_blocked(*_: Any) -> None:
            events.append("blocked")
            state["blocked"] = True
            blocked.set()

        def on_unblocked(*_: Any) -> None:
            events.append("unblocked")
            state["blocked"] = False
            connection.ioloop.call_later(0, turn)

        def on_channel(opened: Any) -> None:
            nonlocal channel
            channel = opened
            turn()

        channel: Any = None
        try:
            connection = pika.SelectConnection(
                _parameters(broker.amqp or ""),
                on_open_callback=lambda conn: conn.channel(on_open_callback=on_channel),
                on_open_error_callback=lambda _conn, exc: failures.append(exc),
                on_close_callback=lambda conn, _reason: conn.ioloop.stop(),
            )
            connection.add_on_connection_blocked_callback(on_blocked)
            connection.add_on_connection_unblocked_callback(on_unblocked)
            connection.ioloop.start()
            connection.ioloop.close()  # its wake-up socket pair
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
        finally:
            blocked.set()

    start_rss = broker.rss_bytes()
    publisher = threading.Thread(target=publish, name="publisher")
    publisher.start()
    assert blocked.wait(60), "no Connection.Blocked"
    assert not failures, failures
    held_rss = broker.rss_bytes()

    # While the publisher is held, the queue stays near its bound.
    probe = pika.BlockingConnection(_parameters(broker.amqp))
    channel = probe.channel()
    ready = channel.queue_declare(QUEUE, passive=True).method.message_count
    print(f"blocked with {ready} ready ({ready * len(BODY)} B; bound {BOUND} B)")
    assert ready * len(BODY) <= BOUND + SLACK_MESSAGES * len(BODY), ready

    # Drain, acking: the publisher is unblocked and everything it sent arrives.
    received = 0

    def on_message(ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
        nonlocal received
        received += 1
        ch.basic_ack(method.delivery_tag)

    channel.basic_qos(prefetch_count=200)
    channel.basic_consume(QUEUE, on_message)
    deadline = Deadline(60, "draining the held queue")
    while received < TOTAL:
        if deadline.expired():
            raise AssertionError(f"{received} of {TOTAL} arrived; publisher saw {events}")
        probe.process_data_events(time_limit=0.1)
    publisher.join(30)
    assert not publisher.is_alive()
    assert not failures, failures
    assert events[:2] == ["blocked", "unblocked"], events
    assert max(held_rss, broker.rss_bytes()) <= start_rss + BUDGET, (start_rss, held_rss)
    probe.close()
