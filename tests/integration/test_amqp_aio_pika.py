"""aio-pika (on aiormq) against `weirmq serve`, used the way asyncio applications use it.

What is checked is what aio-pika users rely on: `connect_robust` (and its coming back,
channel, queue and consumer included, after the broker was killed and restarted);
declaring exchanges and queues and binding them; publishing with publisher confirms
(aio-pika channels confirm by default: each `publish` returns once the broker's Basic.Ack
came); consuming with `async with message.process()` (ack on success; reject, with or
without requeue, when the block raises); a reject with no dead-letter exchange dropping
the message for good; server-named exclusive queues (plain `connect`: a robust connection
names its queues itself so it can declare them again after a reconnect); the channel
errors aio-pika maps to exceptions (404 ChannelNotFoundEntity, 405 ChannelLockedResource,
406 ChannelPreconditionFailed); and heartbeats keeping an idle connection open.

Each test runs its coroutine with `asyncio.run` under one deadline, so a broker that stops
answering fails the test instead of hanging it. A channel closed by a channel error is
not used again: aio-pika's robust channel reopens it in the background (RabbitMQ behaves
the same), and the tests open a new channel instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aio_pika
import aio_pika.abc
import aiormq
import aiormq.exceptions
import pytest
from pamqp.heartbeat import Heartbeat

if TYPE_CHECKING:
    from conftest import BrokerProcess

pytestmark = pytest.mark.integration

TEST_TIMEOUT_S = 20.0
HEARTBEAT_S = 2
IDLE_S = 5.0
"""Longer than two heartbeat intervals: the broker closes a connection it heard nothing
from for that long, so only heartbeats keep this one open."""


def url(broker: BrokerProcess, **query: object) -> str:
    assert broker.amqp is not None
    params = "&".join(f"{name}={value}" for name, value in query.items())
    return f"amqp://guest:guest@{broker.amqp}/" + (f"?{params}" if params else "")


def run(scenario: Callable[[], Awaitable[None]], timeout_s: float = TEST_TIMEOUT_S) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout_s):
            await scenario()

    asyncio.run(bounded())


class Failing(Exception):
    """Raised inside `message.process()` to make aio-pika reject the message."""


def test_robust_connection_publishes_with_confirms_and_processes_messages(
    broker: BrokerProcess,
) -> None:
    bodies = [b"ok 0", b"retry", b"ok 1", b"drop", b"ok 2"]

    async def scenario() -> None:
        connection = await aio_pika.connect_robust(url(broker))
        async with connection:
            channel = await connection.channel()  # publisher confirms on by default
            exchange = await channel.declare_exchange(
                "aio.orders", aio_pika.ExchangeType.DIRECT, durable=True
            )
            queue = await channel.declare_queue("aio.jobs", durable=True)
            await queue.bind(exchange, routing_key="new")
            for number, data in enumerate(bodies):
                confirmation = await exchange.publish(
                    aio_pika.Message(
                        data,
                        content_type="text/plain",
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        message_id=f"m{number}",
                        correlation_id=f"c{number}",
                        headers={"number": number, "tags": ["a", "b"]},
                    ),
                    routing_key="new",
                )
                assert isinstance(confirmation, aiormq.spec.Basic.Ack), confirmation
            declared = await channel.declare_queue("aio.jobs", durable=True)
            assert declared.declaration_result.message_count == len(bodies)

            await channel.set_qos(prefetch_count=2)
            seen: list[tuple[bytes, bool]] = []
            first: aio_pika.abc.AbstractIncomingMessage | None = None
            async with queue.iterator() as messages:
                async for message in messages:
                    seen.append((message.body, message.redelivered))
                    if first is None:
                        first = message
                    if message.body == b"retry" and not message.redelivered:
                        with pytest.raises(Failing):
                            async with message.process(requeue=True):
                                raise Failing
                    elif message.body == b"drop":
                        with pytest.raises(Failing):
                            async with message.process():  # reject, requeue=False
                                raise Failing
                    else:
                        async with message.process():
                            pass
                    if len(seen) == len(bodies) + 1:
                        break

            assert [data for data, again in seen if not again] == bodies
            assert [data for data, again in seen if again] == [b"retry"]
            assert first is not None
            assert (first.exchange, first.routing_key) == ("aio.orders", "new")
            assert (first.content_type, first.message_id, first.correlation_id) == (
                "text/plain",
                "m0",
                "c0",
            )
            assert first.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
            assert first.headers == {"number": 0, "tags": ["a", "b"]}
            assert await queue.get(fail=False) is None

        # Acked and rejected messages are gone for good: nothing comes back once the
        # channel that held them is closed.
        async with await aio_pika.connect_robust(url(broker)) as again:
            channel = await again.channel()
            queue = await channel.declare_queue("aio.jobs", passive=True)
            assert queue.declaration_result.message_count == 0
            assert await queue.get(fail=False) is None

    run(scenario)


def test_robust_connection_comes_back_after_the_broker_is_killed_and_restarted(
    broker: BrokerProcess,
) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect_robust(url(broker, reconnect_interval=0.2))
        reconnected = asyncio.Event()
        connection.reconnect_callbacks.add(lambda *_: reconnected.set())
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("aio.survivor", durable=True)
            received: asyncio.Queue[bytes] = asyncio.Queue()

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    await received.put(message.body)

            await queue.consume(on_message)
            await channel.default_exchange.publish(aio_pika.Message(b"one"), "aio.survivor")
            assert await received.get() == b"one"
            # The broker dies without a word and comes back on the same address.
            await asyncio.to_thread(broker.kill)
            await asyncio.to_thread(broker.restart)
            await reconnected.wait()
            # The robust connection opened its channel again, declared its queue and
            # started its consumer again: a message published now reaches it.
            await channel.default_exchange.publish(aio_pika.Message(b"two"), "aio.survivor")
            # The ack of "one" races the kill: if the broker died before it settled,
            # "one" comes back first, as at-least-once delivery must have it.
            body = await received.get()
            if body == b"one":
                body = await received.get()
            assert body == b"two"

    run(scenario)


def test_server_named_exclusive_queue_belongs_to_its_connection(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        owner = await aio_pika.connect(url(broker))
        other = await aio_pika.connect(url(broker))
        async with other:
            channel = await owner.channel()
            queue = await channel.declare_queue(exclusive=True)  # the broker names it
            assert queue.name.startswith("amq.gen-"), queue.name
            await channel.default_exchange.publish(aio_pika.Message(b"mine"), queue.name)
            message = await queue.get(timeout=5)
            assert message.body == b"mine"
            await message.ack()

            with pytest.raises(aiormq.exceptions.ChannelLockedResource) as locked:
                await (await other.channel()).declare_queue(queue.name, passive=True)
            assert locked.value.args[0].startswith("RESOURCE_LOCKED - ")

            await owner.close()  # the queue goes with its connection
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as gone:
                await (await other.channel()).declare_queue(queue.name, passive=True)
            assert gone.value.args[0] == f"NOT_FOUND - no queue '{queue.name}' in vhost '/'"

    run(scenario)


def test_passive_declare_of_a_missing_queue_is_404_and_the_connection_stays(
    broker: BrokerProcess,
) -> None:
    async def scenario() -> None:
        async with await aio_pika.connect_robust(url(broker)) as connection:
            channel = await connection.channel()
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as missing:
                await channel.declare_queue("aio.missing", passive=True)
            assert missing.value.args[0] == "NOT_FOUND - no queue 'aio.missing' in vhost '/'"
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
                await (await connection.channel()).get_exchange("aio.no-exchange")
            assert not connection.is_closed  # a channel error closes the channel only
            queue = await (await connection.channel()).declare_queue("aio.present")
            assert queue.declaration_result.message_count == 0

    run(scenario)


def test_redeclare_with_other_properties_is_406(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with await aio_pika.connect_robust(url(broker)) as connection:
            channel = await connection.channel()
            await channel.declare_queue("aio.durable", durable=True)
            await channel.declare_queue("aio.durable", durable=True)  # the same: fine
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as queue_refused:
                await channel.declare_queue("aio.durable", durable=False)
            assert queue_refused.value.args[0].startswith(
                "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'aio.durable' in "
                "vhost '/'"
            )
            channel = await connection.channel()
            await channel.declare_exchange("aio.ex", aio_pika.ExchangeType.DIRECT)
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as exchange_refused:
                await channel.declare_exchange("aio.ex", aio_pika.ExchangeType.FANOUT)
            assert "inequivalent arg 'type'" in exchange_refused.value.args[0]

    run(scenario)


class FrameCounter(logging.Handler):
    """Counts the heartbeat frames aiormq receives (it logs every frame at DEBUG)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.heartbeats = 0

    def emit(self, record: logging.LogRecord) -> None:
        args: Any = record.args
        if isinstance(args, tuple) and args and isinstance(args[0], Heartbeat):
            self.heartbeats += 1


def test_heartbeats_keep_an_idle_connection_open(broker: BrokerProcess) -> None:
    logger = logging.getLogger("aiormq.connection")
    counter = FrameCounter()
    level = logger.level

    async def scenario() -> None:
        async with await aio_pika.connect_robust(url(broker, heartbeat=HEARTBEAT_S)) as connection:
            assert connection.transport is not None
            assert connection.transport.connection.connection_tune.heartbeat == HEARTBEAT_S
            channel = await connection.channel()
            queue = await channel.declare_queue("aio.idle")
            logger.addHandler(counter)
            logger.setLevel(logging.DEBUG)
            await asyncio.sleep(IDLE_S)  # the idle stretch under test, not a wait for an event
            logger.setLevel(level)
            assert not connection.is_closed
            # The broker sends one when it has sent nothing for half an interval.
            assert counter.heartbeats >= IDLE_S // HEARTBEAT_S, counter.heartbeats
            await channel.default_exchange.publish(aio_pika.Message(b"still here"), "aio.idle")
            message = await queue.get(timeout=5)
            assert message.body == b"still here"
            await message.ack()

    try:
        run(scenario)
    finally:
        logger.removeHandler(counter)
        logger.setLevel(level)
