"""AMQP durability across a kill -9 and a clean stop of a real broker process (issue 21).

What WeirMQ promises, and where each promise comes from (so the tests claim no more):

- **Confirmed messages.** Basic.Ack of a publisher confirm is sent once the message's
  append is fsynced (handlers.py, `_confirm_loop` awaits `Partition.durable`): a kill -9
  right after the last confirm loses none of them.
- **Acknowledgements.** Basic.Ack has no reply; the broker writes the queue's new state to
  `__share_group_state` (a write to the file, before the next method of the connection
  is handled) but does not fsync it for the client. So an ack survives a kill -9 of the
  process (the page cache keeps the write) once the broker has handled it, which a
  synchronous method after it on the same channel proves; a crash of the machine may
  forget it, and the message is then delivered again (at least once, never lost).
- **Deliveries.** A message is recorded as delivered, with its delivery count, when it is
  acquired, so after any restart an unacknowledged delivery comes back with
  `redelivered` set (queues/persistence.py).
- **Declarations.** A queue or exchange is a topic, created (topics.json fsynced) before
  its DeclareOk; a binding is a record of `__weirmq_routing`, and BindOk is sent once it
  is fsynced (`Exchanges.definitions_durable`, as the Kafka config path waits). A kill -9
  of the process is what is tested here (it cannot tell fsynced data from written data).

The broker comes back on the same data directory and the same AMQP port (`restart`).
Every wait is bounded: pika's blocking calls by its socket timeout, reading a queue by
Basic.Get until Basic.GetEmpty (no wait for silence).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest
from integration_support import Deadline

if TYPE_CHECKING:
    from conftest import BrokerFactory, BrokerProcess

pytestmark = pytest.mark.integration

STEP_TIMEOUT_S = 20.0
CONFIRMED_MESSAGES = 200
PERSISTENT = pika.BasicProperties(delivery_mode=2, content_type="text/plain")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def amqp_channel(broker: BrokerProcess) -> Iterator[Any]:
    """A pika channel to the broker as guest. The connection is closed after, if the
    broker has not gone away meanwhile (a killed broker leaves it dead: nothing to do)."""
    assert broker.amqp is not None, "the broker's AMQP listener is off"
    host, _, port = broker.amqp.rpartition(":")
    connection = pika.BlockingConnection(
        pika.ConnectionParameters(
            host,
            int(port),
            credentials=pika.PlainCredentials("guest", "guest"),
            connection_attempts=1,
            socket_timeout=STEP_TIMEOUT_S,
            stack_timeout=STEP_TIMEOUT_S,
            blocked_connection_timeout=STEP_TIMEOUT_S,
        )
    )
    try:
        yield connection.channel()
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            if connection.is_open:
                connection.close()


def handled(channel: Any, queue: str) -> int:
    """A synchronous round trip on `channel` (passive Queue.Declare): once it is answered,
    every method sent before it on the channel (acks have no reply) has been handled.
    Returns the queue's ready message count."""
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def publish_confirmed(channel: Any, exchange: str, key: str, bodies: list[bytes]) -> None:
    """Publish each body persistently; pika returns from each publish once it is confirmed
    (a nack raises NackError, a return UnroutableError)."""
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish(exchange, key, body, PERSISTENT, mandatory=True)


def get_all(channel: Any, queue: str, limit: int) -> list[tuple[int, bytes, bool]]:
    """(delivery tag, body, redelivered) of every message Basic.Get gives, not acked,
    until Basic.GetEmpty; more than `limit` fails (a queue that never empties)."""
    got: list[tuple[int, bytes, bool]] = []
    deadline = Deadline(STEP_TIMEOUT_S, f"reading {queue}")
    while True:
        deadline.check(f"{len(got)} read")
        method, _properties, body = channel.basic_get(queue, auto_ack=False)
        if method is None:
            return got
        got.append((method.delivery_tag, body, method.redelivered))
        assert len(got) <= limit, f"more than {limit} messages in {queue}"


def seen(got: list[tuple[int, bytes, bool]]) -> list[tuple[bytes, bool]]:
    return [(body, redelivered) for _, body, redelivered in got]


def ack(channel: Any, got: list[tuple[int, bytes, bool]], bodies: set[bytes]) -> None:
    for tag, body, _ in got:
        if body in bodies:
            channel.basic_ack(tag)


def declare_route(channel: Any, exchange: str, queue: str, key: str) -> None:
    channel.exchange_declare(exchange, "direct", durable=True)
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, key)


def test_every_confirmed_message_is_delivered_after_kill_9(broker: BrokerProcess) -> None:
    exchange, queue = unique("confirmed"), unique("confirmed-q")
    bodies = [b"confirmed-%04d" % n for n in range(CONFIRMED_MESSAGES)]
    with amqp_channel(broker) as channel:
        declare_route(channel, exchange, queue, "k")
        publish_confirmed(channel, exchange, "k", bodies)
        broker.kill()  # right after the last confirm
    broker.restart()

    with amqp_channel(broker) as channel:
        assert handled(channel, queue) >= CONFIRMED_MESSAGES
        got = get_all(channel, queue, 2 * CONFIRMED_MESSAGES)
        delivered = [body for _, body, _ in got]
        lost = sorted(set(bodies) - set(delivered))
        assert lost == [], f"{len(lost)} confirmed messages lost: {lost[:5]}"
        assert set(delivered) <= set(bodies), "messages nobody published"
        duplicates = len(delivered) - len(set(delivered))
        print(f"{len(delivered)} delivered, {duplicates} duplicates")  # at least once
        # Never delivered before the kill, so not redelivered; in the order published.
        assert not any(redelivered for _, _, redelivered in got)
        assert delivered[: len(bodies)] == bodies
        channel.basic_ack(got[-1][0], multiple=True)
        assert handled(channel, queue) == 0


def test_unacked_come_back_redelivered_and_acked_never_come_back(
    broker: BrokerProcess,
) -> None:
    queue = unique("work")
    bodies = [b"m%02d" % n for n in range(12)]
    m = dict(enumerate(bodies))
    with amqp_channel(broker) as channel:
        channel.queue_declare(queue, durable=True)
        publish_confirmed(channel, "", queue, bodies)
        got = [channel.basic_get(queue, auto_ack=False) for _ in range(4)]
        assert [body for _, _, body in got] == bodies[:4]
        channel.basic_ack(got[0][0].delivery_tag)
        channel.basic_ack(got[2][0].delivery_tag)  # out of order: m01 stays unacked
        assert handled(channel, queue) == 8
        assert broker.stop() == 0  # a clean stop, m01 and m03 still unacknowledged
    broker.restart()

    with amqp_channel(broker) as channel:
        got_after_stop = get_all(channel, queue, len(bodies))
        assert seen(got_after_stop) == [(m[1], True), (m[3], True)] + [
            (body, False) for body in bodies[4:]
        ]
        # Ack some, leave m03 (twice delivered), m07 and m11 unacknowledged, then kill -9
        # as soon as the broker has handled the acks.
        unacked = {m[3], m[7], m[11]}
        ack(channel, got_after_stop, {body for _, body, _ in got_after_stop} - unacked)
        assert handled(channel, queue) == 0
        broker.kill()
    broker.restart()

    with amqp_channel(broker) as channel:
        got_after_kill = get_all(channel, queue, len(bodies))
        assert seen(got_after_kill) == [(m[3], True), (m[7], True), (m[11], True)]
        channel.basic_ack(got_after_kill[-1][0], multiple=True)
        assert handled(channel, queue) == 0
    broker.restart()  # a clean stop, then the queue is still empty
    with amqp_channel(broker) as channel:
        assert handled(channel, queue) == 0
        assert channel.basic_get(queue, auto_ack=False) == (None, None, None)


def test_a_consumers_unacked_deliveries_come_back_redelivered_after_kill_9(
    broker: BrokerProcess,
) -> None:
    queue, prefetch = unique("consumed"), 3
    bodies = [b"c%02d" % n for n in range(8)]
    with amqp_channel(broker) as channel:
        channel.queue_declare(queue, durable=True)
        publish_confirmed(channel, "", queue, bodies)
        channel.basic_qos(prefetch_count=prefetch)
        delivered: list[bytes] = []
        deadline = Deadline(STEP_TIMEOUT_S, f"{prefetch} deliveries to a consumer")
        for method, _properties, body in channel.consume(
            queue, inactivity_timeout=deadline.remaining(1.0)
        ):
            deadline.check(f"{len(delivered)} delivered")
            if method is not None:
                delivered.append(body)
            if len(delivered) == prefetch:
                break
        assert delivered == bodies[:prefetch]
        broker.kill()  # the consumer holds three, acknowledged none
    broker.restart()

    with amqp_channel(broker) as channel:
        got = get_all(channel, queue, len(bodies))
        assert seen(got) == [(body, True) for body in bodies[:prefetch]] + [
            (body, False) for body in bodies[prefetch:]
        ]


def test_durable_declarations_and_bindings_survive_kill_9(broker: BrokerProcess) -> None:
    exchange, queue, other = unique("durable-ex"), unique("durable-q"), unique("durable-ex2")
    with amqp_channel(broker) as channel:
        channel.exchange_declare(exchange, "topic", durable=True)
        channel.exchange_declare(other, "fanout", durable=True)
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, exchange, "eu.#")
        channel.exchange_bind(other, exchange, "us.*")  # exchange to exchange
        channel.queue_bind(queue, other)
        broker.kill()  # right after the last BindOk
    broker.restart()

    with amqp_channel(broker) as channel:
        channel.exchange_declare(exchange, "topic", passive=True)
        channel.exchange_declare(other, "fanout", passive=True)
        assert handled(channel, queue) == 0
        # The same declarations again are equivalent: flags and types were kept.
        channel.exchange_declare(exchange, "topic", durable=True)
        channel.queue_declare(queue, durable=True)
        publish_confirmed(channel, exchange, "eu.paris", [b"through the binding"])
        publish_confirmed(channel, exchange, "us.nyc", [b"through the exchange binding"])
        got = get_all(channel, queue, 2)
        assert seen(got) == [
            (b"through the binding", False),
            (b"through the exchange binding", False),
        ]
    with (
        amqp_channel(broker) as channel,
        pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused,
    ):
        channel.queue_declare(queue, durable=False)
    assert refused.value.reply_code == 406  # it is still the durable queue


def declared(broker: BrokerProcess, kind: str, name: str) -> bool:
    """Whether a passive declare of the exchange or queue `name` succeeds (404: False)."""
    with amqp_channel(broker) as channel:
        try:
            if kind == "queue":
                channel.queue_declare(name, passive=True)
            else:
                channel.exchange_declare(name, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            assert exc.reply_code == 404, exc
            return False
    return True


@pytest.mark.parametrize("stop", ["kill -9", "clean stop"])
def test_transient_queues_are_gone_after_a_restart(
    broker_factory: BrokerFactory, stop: str
) -> None:
    """RabbitMQ deletes non-durable queues when the node restarts (model.py does too);
    exclusive queues go with their connection, or with the broker."""
    broker = broker_factory()
    transient, exclusive, durable = unique("transient"), unique("exclusive"), unique("kept")
    with amqp_channel(broker) as channel:
        channel.queue_declare(transient, durable=False)
        channel.queue_declare(durable, durable=True)
        channel.queue_declare(exclusive, durable=True, exclusive=True)
        channel.confirm_delivery()
        channel.basic_publish("", transient, b"gone with its queue")
        if stop == "kill -9":
            broker.kill()
        else:
            assert broker.stop() == 0
    broker.restart()
    assert declared(broker, "queue", durable)
    assert not declared(broker, "queue", transient)
    assert not declared(broker, "queue", exclusive)


def test_a_transient_exchange_is_gone_after_a_restart(broker: BrokerProcess) -> None:
    """RabbitMQ keeps non-durable exchanges in memory only: a restarted node has none."""
    transient, durable = unique("transient-ex"), unique("durable-ex")
    with amqp_channel(broker) as channel:
        channel.exchange_declare(transient, "direct", durable=False)
        channel.exchange_declare(durable, "direct", durable=True)
    assert broker.stop() == 0
    broker.restart()
    assert declared(broker, "exchange", durable)
    assert not declared(broker, "exchange", transient)
