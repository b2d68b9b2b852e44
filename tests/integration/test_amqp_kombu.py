"""kombu against `weirmq serve`, through its py-amqp transport (the one Celery uses).

kombu's `amqp://` URL selects the `pyamqp` transport, so these tests also check py-amqp
(a third AMQP 0-9-1 client implementation, after pika and aiormq) unchanged. What is
checked: `Producer.publish` with `declare=[queue]` declaring the exchange, the queue and
the binding on the way, with publisher confirms (`confirm_publish`: each publish waits for
the broker's Basic.Ack); a `Consumer` with callbacks, prefetch and the three ways a
callback settles a message (`ack`, `requeue`, `reject`); and `SimpleQueue`'s put, get
with a timeout, qsize and get_nowait on an empty queue.

Every wait is bounded: `drain_events(timeout=...)` against a deadline, `get(timeout=...)`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import amqp.exceptions
import kombu
import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.transport.pyamqp import Transport as PyAmqpTransport

if TYPE_CHECKING:
    from collections.abc import Iterator

    from conftest import BrokerProcess

pytestmark = pytest.mark.integration

STEP_TIMEOUT_S = 15.0


@pytest.fixture
def connection(broker: BrokerProcess) -> Iterator[Connection]:
    assert broker.amqp is not None
    with Connection(
        f"amqp://guest:guest@{broker.amqp}//",
        connect_timeout=STEP_TIMEOUT_S,
        transport_options={"confirm_publish": True},
    ) as opened:
        opened.ensure_connection(max_retries=1)
        yield opened


def drain_until(connection: Connection, done: Any, what: str) -> None:
    """Dispatch deliveries to the consumers' callbacks until `done()`, at most a step's time."""
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{what}: not within {STEP_TIMEOUT_S:.0f} s")
        try:
            connection.drain_events(timeout=min(left, 1.0))
        except TimeoutError:
            continue


def test_py_amqp_is_the_transport_and_the_server_is_weirmq(connection: Connection) -> None:
    assert isinstance(connection.transport, PyAmqpTransport)
    assert connection.connection.server_properties["product"] == "WeirMQ"


def test_publish_declares_then_consumer_acks_requeues_and_rejects(connection: Connection) -> None:
    exchange = Exchange("kombu.events", "topic", durable=True)
    queue = Queue("kombu.eu", exchange, routing_key="eu.#", durable=True)
    producer = Producer(connection.channel(), exchange=exchange, serializer="json")
    for number in range(5):
        producer.publish(
            {"number": number},
            routing_key=f"eu.orders.{number}",
            declare=[queue],
            headers={"attempt": 1},
            retry=False,
        )
    producer.publish({"number": 99}, routing_key="us.orders.99", retry=False)  # unrouted
    assert queue.bind(connection.channel()).queue_declare(passive=True).message_count == 5

    seen: list[tuple[int, bool]] = []
    settled: dict[int, str] = {}

    def on_message(body: dict[str, int], message: kombu.Message) -> None:
        number = body["number"]
        redelivered = bool(message.delivery_info["redelivered"])
        seen.append((number, redelivered))
        assert message.headers == {"attempt": 1}
        assert message.delivery_info["routing_key"] == f"eu.orders.{number}"
        assert message.delivery_info["exchange"] == "kombu.events"
        if number == 1 and not redelivered:
            message.requeue()
        elif number == 3:
            message.reject()  # no dead-letter exchange: dropped
            settled[number] = "rejected"
        else:
            message.ack()
            settled[number] = "acked"

    with Consumer(connection, [queue], callbacks=[on_message], accept=["json"]) as consumer:
        consumer.qos(prefetch_count=2)
        drain_until(connection, lambda: len(settled) == 5, f"5 messages settled, saw {seen}")

    assert [number for number, again in seen if not again] == [0, 1, 2, 3, 4]
    assert [number for number, again in seen if again] == [1]
    assert settled == {0: "acked", 1: "acked", 2: "acked", 3: "rejected", 4: "acked"}
    # Nothing is held any more, and nothing is left.
    declared = queue.bind(connection.channel()).queue_declare(passive=True)
    assert (declared.message_count, declared.consumer_count) == (0, 0)


def test_simple_queue_put_and_get(connection: Connection) -> None:
    simple = connection.SimpleQueue("kombu.simple")
    try:
        simple.put({"hello": "weirmq"})
        simple.put({"hello": "again"}, headers={"n": 2})
        assert simple.qsize() == 2
        first = simple.get(block=True, timeout=STEP_TIMEOUT_S)
        assert first.payload == {"hello": "weirmq"}
        first.ack()
        second = simple.get(block=True, timeout=STEP_TIMEOUT_S)
        assert (second.payload, second.headers) == ({"hello": "again"}, {"n": 2})
        second.ack()
        with pytest.raises(simple.Empty):
            simple.get_nowait()
        assert simple.qsize() == 0
    finally:
        simple.close()


def test_confirmed_publish_to_a_missing_exchange_fails_at_once_with_404(
    connection: Connection,
) -> None:
    # With confirm_publish, py-amqp waits for the publish's confirm, so the channel error
    # the broker answers with is raised by `publish` itself.
    producer = Producer(connection.channel(), serializer="json")
    with pytest.raises(amqp.exceptions.NotFound) as refused:
        producer.publish({"lost": True}, exchange="kombu.missing", routing_key="k", retry=False)
    assert refused.value.reply_code == 404
    assert refused.value.reply_text == "NOT_FOUND - no exchange 'kombu.missing' in vhost '/'"
    # The connection carries on.
    simple = connection.SimpleQueue("kombu.after-404")
    simple.put({"ok": True})
    assert simple.get(timeout=STEP_TIMEOUT_S).payload == {"ok": True}
    simple.close()
