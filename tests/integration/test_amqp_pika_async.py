"""pika's asynchronous adapters (SelectConnection, AsyncioConnection) against `weirmq serve`.

pika's BlockingConnection is tested in-process (tests/protocols/amqp/); applications built
on callbacks use the other two adapters, which share pika's callback API and differ only
in their I/O loop. One scenario, written once as a chain of callbacks the way such an
application is written, runs on each adapter against a real broker process:

    open -> channel -> exchange.declare -> queue.declare -> queue.bind -> confirm.select
    -> publish MESSAGES (persistent, with properties) -> every one confirmed (Basic.Ack)
    -> basic.qos(PREFETCH) -> basic.consume (manual acks) -> each delivery acked, except
    the first delivery of NACKED, which is nacked with requeue and must come back with
    `redelivered` set -> basic.cancel -> passive queue.declare (nothing left) -> close.

Each step records what it saw; the test checks the record after the loop has stopped. The
loop is stopped by the scenario's end, by an error callback, or by a deadline (the
adapter's own timer), so a broker that never answers fails the test instead of hanging.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pika.frame
import pika.spec
import pytest
from pika.adapters.asyncio_connection import AsyncioConnection

if TYPE_CHECKING:
    from conftest import BrokerProcess

pytestmark = pytest.mark.integration

SCENARIO_TIMEOUT_S = 20.0
MESSAGES = 20
PREFETCH = 5
NACKED = 3
"""The message nacked with requeue on its first delivery."""
EXCHANGE = "pika-async.orders"
QUEUE = "pika-async.jobs"
ROUTING_KEY = "new"


def parameters(address: str) -> pika.ConnectionParameters:
    host, _, port = address.rpartition(":")
    return pika.ConnectionParameters(
        host,
        int(port),
        credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1,
        socket_timeout=SCENARIO_TIMEOUT_S,
    )


def body(number: int) -> bytes:
    return b"job %d" % number


@dataclass
class Outcome:
    """What the scenario saw; checked once its loop has stopped."""

    confirmed: set[int] = field(default_factory=set)
    nacked_by_broker: set[int] = field(default_factory=set)
    deliveries: list[tuple[bytes, bool]] = field(default_factory=list)
    """(body, redelivered) in delivery order."""
    properties: dict[bytes, pika.spec.BasicProperties] = field(default_factory=dict)
    routing: set[tuple[str, str]] = field(default_factory=set)
    acked: set[bytes] = field(default_factory=set)
    left_in_queue: int | None = None
    errors: list[str] = field(default_factory=list)
    finished: bool = False
    closed_normally: bool = False


class Scenario:
    """The callback chain of the module docstring, for any pika adapter.

    `stop` ends the adapter's loop; it is called once, when the connection has closed (or
    never opened), so the loop is left with no connection of ours on it.
    """

    def __init__(self, stop: Callable[[], None]) -> None:
        self.outcome = Outcome()
        self._stop = stop
        self._connection: Any = None
        self._channel: Any = None
        self._consumer_tag = ""

    # -- connection -----------------------------------------------------------------------

    def on_open(self, connection: Any) -> None:
        self._connection = connection
        connection.channel(on_open_callback=self._on_channel)

    def on_open_error(self, _connection: Any, error: BaseException) -> None:
        self.outcome.errors.append(f"connection not opened: {error!r}")
        self._stop()

    def on_closed(self, _connection: Any, reason: BaseException) -> None:
        closed_by_us = isinstance(reason, pika.exceptions.ConnectionClosedByClient)
        self.outcome.closed_normally = closed_by_us and reason.reply_code == 200
        if not self.outcome.finished:
            self.outcome.errors.append(f"connection closed early: {reason!r}")
        self._stop()

    def time_out(self) -> None:
        self.outcome.errors.append(f"scenario not finished within {SCENARIO_TIMEOUT_S:.0f} s")
        self._close()

    def _fail(self, what: str) -> None:
        self.outcome.errors.append(what)
        self._close()

    def _close(self) -> None:
        connection = self._connection
        if connection is not None and not (connection.is_closing or connection.is_closed):
            connection.close()
        elif connection is None:
            self._stop()

    # -- declarations -----------------------------------------------------------------------

    def _on_channel(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.exchange_declare(
            EXCHANGE, "direct", durable=True, callback=lambda _frame: self._declare_queue()
        )

    def _on_channel_closed(self, _channel: Any, reason: BaseException) -> None:
        if not self.outcome.finished:
            self._fail(f"channel closed: {reason!r}")

    def _declare_queue(self) -> None:
        self._channel.queue_declare(QUEUE, durable=True, callback=self._on_queue_declared)

    def _on_queue_declared(self, frame: pika.frame.Method) -> None:
        if (frame.method.queue, frame.method.message_count) != (QUEUE, 0):
            self._fail(f"unexpected DeclareOk {frame.method!r}")
            return
        self._channel.queue_bind(
            QUEUE, EXCHANGE, routing_key=ROUTING_KEY, callback=lambda _frame: self._select()
        )

    # -- publishing with confirms --------------------------------------------------------------

    def _select(self) -> None:
        self._channel.confirm_delivery(
            ack_nack_callback=self._on_confirm, callback=lambda _frame: self._publish()
        )

    def _publish(self) -> None:
        for number in range(MESSAGES):
            self._channel.basic_publish(
                EXCHANGE,
                ROUTING_KEY,
                body(number),
                pika.BasicProperties(
                    content_type="text/plain",
                    delivery_mode=pika.DeliveryMode.Persistent,
                    message_id=f"m{number}",
                    headers={"number": number},
                ),
            )

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        tags = range(1, method.delivery_tag + 1) if method.multiple else [method.delivery_tag]
        if isinstance(method, pika.spec.Basic.Nack):
            self.outcome.nacked_by_broker.update(tags)
        else:
            self.outcome.confirmed.update(tags)
        settled = self.outcome.confirmed | self.outcome.nacked_by_broker
        if settled >= set(range(1, MESSAGES + 1)) and not self._consumer_tag:
            self._channel.basic_qos(prefetch_count=PREFETCH, callback=lambda _f: self._consume())

    # -- consuming with manual acks --------------------------------------------------------

    def _consume(self) -> None:
        self._consumer_tag = self._channel.basic_consume(QUEUE, self._on_message, auto_ack=False)

    def _on_message(
        self,
        channel: Any,
        deliver: pika.spec.Basic.Deliver,
        properties: pika.spec.BasicProperties,
        data: bytes,
    ) -> None:
        outcome = self.outcome
        outcome.deliveries.append((data, deliver.redelivered))
        outcome.routing.add((deliver.exchange, deliver.routing_key))
        outcome.properties[data] = properties
        if data == body(NACKED) and not deliver.redelivered:
            channel.basic_nack(deliver.delivery_tag, requeue=True)
            return
        channel.basic_ack(deliver.delivery_tag)
        outcome.acked.add(data)
        if len(outcome.acked) == MESSAGES:
            channel.basic_cancel(self._consumer_tag, callback=lambda _frame: self._count())

    def _count(self) -> None:
        self._channel.queue_declare(QUEUE, passive=True, callback=self._on_counted)

    def _on_counted(self, frame: pika.frame.Method) -> None:
        self.outcome.left_in_queue = frame.method.message_count
        self.outcome.finished = True
        self._connection.close()


def run_select(address: str) -> Outcome:
    """The scenario on pika's own I/O loop (SelectConnection)."""
    holder: dict[str, Any] = {}
    scenario = Scenario(stop=lambda: holder["connection"].ioloop.stop())
    connection = pika.SelectConnection(
        parameters(address),
        on_open_callback=scenario.on_open,
        on_open_error_callback=scenario.on_open_error,
        on_close_callback=scenario.on_closed,
    )
    holder["connection"] = connection
    ioloop = connection.ioloop
    timer = ioloop.call_later(SCENARIO_TIMEOUT_S, scenario.time_out)
    # The deadline above closes the connection; this one is for a close that never
    # completes.
    hard_stop = ioloop.call_later(SCENARIO_TIMEOUT_S + 5, ioloop.stop)
    ioloop.start()
    ioloop.remove_timeout(timer)
    ioloop.remove_timeout(hard_stop)
    ioloop.close()
    return scenario.outcome


def run_asyncio(address: str) -> Outcome:
    """The scenario on an asyncio loop (AsyncioConnection), as an asyncio program runs it."""

    async def main() -> Outcome:
        loop = asyncio.get_running_loop()
        stopped = loop.create_future()

        def stop() -> None:
            if not stopped.done():
                stopped.set_result(None)

        scenario = Scenario(stop=stop)
        AsyncioConnection(
            parameters(address),
            on_open_callback=scenario.on_open,
            on_open_error_callback=scenario.on_open_error,
            on_close_callback=scenario.on_closed,
            custom_ioloop=loop,
        )
        timer = loop.call_later(SCENARIO_TIMEOUT_S, scenario.time_out)
        try:
            # The deadline above closes the connection; this one is for a close that
            # never completes.
            async with asyncio.timeout(SCENARIO_TIMEOUT_S + 5):
                await stopped
        finally:
            timer.cancel()
        return scenario.outcome

    return asyncio.run(main())


@pytest.mark.parametrize("run", [run_select, run_asyncio], ids=["SelectConnection", "asyncio"])
def test_declare_bind_publish_with_confirms_consume_and_nack_requeue(
    broker: BrokerProcess, run: Callable[[str], Outcome]
) -> None:
    assert broker.amqp is not None
    outcome = run(broker.amqp)
    assert outcome.errors == []
    assert outcome.finished and outcome.closed_normally
    assert outcome.confirmed == set(range(1, MESSAGES + 1))
    assert outcome.nacked_by_broker == set()
    assert outcome.acked == {body(n) for n in range(MESSAGES)}
    # One queue, one consumer: the order of publication, the nacked message again after it
    # was requeued (where exactly depends on timing, as with RabbitMQ), flagged redelivered.
    first_time = [data for data, redelivered in outcome.deliveries if not redelivered]
    again = [data for data, redelivered in outcome.deliveries if redelivered]
    assert first_time == [body(n) for n in range(MESSAGES)]
    assert again == [body(NACKED)]
    assert outcome.routing == {(EXCHANGE, ROUTING_KEY)}
    properties = outcome.properties[body(7)]
    assert properties.content_type == "text/plain"
    assert properties.delivery_mode == pika.DeliveryMode.Persistent.value
    assert properties.message_id == "m7"
    assert properties.headers == {"number": 7}
    assert outcome.left_in_queue == 0
