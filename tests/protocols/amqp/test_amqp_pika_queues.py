"""Exchanges, queues, publishing and consuming with pika against a real broker core.

The broker (`open_broker`, a data directory of the test's own) and the AMQP adapter with
its backend run behind the real connection pump on a loop in a thread, on a free loopback
port; pika's BlockingConnection is the client. What is checked is what RabbitMQ clients
rely on: declarations and their refusals (404, 405, 406, 403 with RabbitMQ's texts),
routing through direct, fanout, topic and headers exchanges and exchange-to-exchange
bindings, publisher confirms, mandatory returns, consumers with prefetch and manual acks,
nack and reject, redelivery after a channel closes, basic.get, purge and delete, and
that everything survives a restart of the broker.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from weirmq.protocols.amqp import AmqpAdapter, AmqpConfig
from weirmq.protocols.amqp.handlers import AmqpBackend
from weirmq.protocols.amqp.model import AmqpModel
from weirmq.server.connection import Listener
from weirmq.server.startup import open_broker
from weirmq.settings import Settings

pytestmark = pytest.mark.integration


class Server:
    """A broker with its AMQP adapter behind a real listener, on its own loop thread."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.broker: Any = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),))

    async def _main(self) -> None:
        settings = Settings(data_dir=str(self.data_dir))
        broker = self.broker = open_broker(settings)
        backend = AmqpBackend(broker, AmqpModel(broker, message_bytes_max=1024 * 1024))
        adapter = AmqpAdapter(AmqpConfig(), broker.clock, broker.timers, backend=backend)
        listener = Listener(adapter, settings)
        try:
            _, self.port = await listener.start("127.0.0.1", 0)
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
        finally:
            adapter.shutdown()
            await listener.stop(timeout_s=2)
            broker.close()

    def __enter__(self) -> Server:
        self.thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)
        self.loop.close()

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", self.port, connection_attempts=1)
        )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path / "data") as running:
        yield running


@pytest.fixture
def channel(server: Server) -> Iterator[Any]:
    connection = server.connect()
    try:
        yield connection.channel()
    finally:
        if connection.is_open:
            connection.close()


def _drain(channel: Any, queue: str, expected: int, *, ack: bool = True) -> list[Any]:
    """Consume `expected` messages (bounded wait), acking each unless told not to."""
    got = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=5):
        if method is None:
            break
        got.append((method, properties, body))
        if ack:
            channel.basic_ack(method.delivery_tag)
        if len(got) == expected:
            break
    channel.cancel()
    return got


def test_publish_with_confirms_and_consume_with_acks(channel: Any) -> None:
    channel.exchange_declare("orders", "direct", durable=True)
    declared = channel.queue_declare("tasks", durable=True)
    assert declared.method.queue == "tasks"
    assert declared.method.message_count == 0
    channel.queue_bind("tasks", "orders", routing_key="new")
    channel.confirm_delivery()
    for i in range(50):
        channel.basic_publish(
            "orders",
            "new",
            f"order {i}".encode(),
            pika.BasicProperties(
                content_type="text/plain",
                delivery_mode=2,
                message_id=f"m{i}",
                headers={"n": i, "tags": ["a", "b"], "nested": {"x": 1}},
            ),
        )
    assert channel.queue_declare("tasks", passive=True).method.message_count == 50
    channel.basic_qos(prefetch_count=10)
    got = _drain(channel, "tasks", 50)
    assert [body for _, _, body in got] == [f"order {i}".encode() for i in range(50)]
    method, properties, _ = got[7]
    assert (method.exchange, method.routing_key, method.redelivered) == ("orders", "new", False)
    assert properties.content_type == "text/plain"
    assert properties.delivery_mode == 2
    assert properties.message_id == "m7"
    assert properties.headers == {"n": 7, "tags": ["a", "b"], "nested": {"x": 1}}
    counts = channel.queue_declare("tasks", passive=True).method
    assert (counts.message_count, counts.consumer_count) == (0, 0)


def test_default_exchange_get_and_get_empty(channel: Any) -> None:
    channel.queue_declare("q")
    assert channel.basic_get("q") == (None, None, None)
    channel.basic_publish("", "q", b"one")
    channel.basic_publish("", "q", b"two")
    method, _, body = channel.basic_get("q")
    assert body == b"one" and method.message_count == 1 and not method.redelivered
    channel.basic_ack(method.delivery_tag)
    method, _, body = channel.basic_get("q", auto_ack=True)
    assert body == b"two"
    assert channel.basic_get("q") == (None, None, None)


def test_nack_requeue_redelivers_and_reject_drops(channel: Any) -> None:
    channel.queue_declare("work")
    channel.basic_publish("", "work", b"retry me")
    channel.basic_publish("", "work", b"drop me")
    first, _, body = channel.basic_get("work")
    assert body == b"retry me"
    channel.basic_nack(first.delivery_tag, requeue=True)
    again, _, body = channel.basic_get("work")
    assert body == b"retry me" and again.redelivered
    channel.basic_ack(again.delivery_tag)
    second, _, body = channel.basic_get("work")
    assert body == b"drop me"
    channel.basic_reject(second.delivery_tag, requeue=False)
    assert channel.basic_get("work") == (None, None, None)


def test_unacked_deliveries_come_back_when_their_channel_closes(server: Server) -> None:
    connection = server.connect()
    first = connection.channel()
    first.queue_declare("jobs", durable=True)
    for i in range(5):
        first.basic_publish("", "jobs", b"job %d" % i)
    first.basic_qos(prefetch_count=3)
    held = _drain(first, "jobs", 3, ack=False)
    assert len(held) == 3
    second = connection.channel()
    assert second.queue_declare("jobs", passive=True).method.message_count == 2
    first.close()
    got = _drain(second, "jobs", 5)
    assert sorted(body for _, _, body in got) == [b"job %d" % i for i in range(5)]
    assert sorted(body for m, _, body in got if m.redelivered) == [b"job 0", b"job 1", b"job 2"]
    connection.close()


def test_prefetch_bounds_unacked_deliveries(channel: Any) -> None:
    channel.queue_declare("slow")
    for i in range(10):
        channel.basic_publish("", "slow", b"%d" % i)
    channel.basic_qos(prefetch_count=2)
    delivered: list[Any] = []
    channel.basic_consume("slow", lambda ch, m, p, b: delivered.append(m))
    channel.connection.process_data_events(time_limit=0.5)
    assert len(delivered) == 2
    channel.basic_ack(delivered[-1].delivery_tag, multiple=True)
    channel.connection.process_data_events(time_limit=0.5)
    assert len(delivered) == 4


def test_exchange_types_and_exchange_to_exchange_bindings(channel: Any) -> None:
    channel.exchange_declare("fan", "fanout")
    channel.exchange_declare("topics", "topic")
    channel.exchange_declare("heads", "headers")
    channel.exchange_declare("front", "direct")
    for name in ("all1", "all2", "eu", "match"):
        channel.queue_declare(name)
    channel.queue_bind("all1", "fan")
    channel.queue_bind("all2", "fan")
    channel.queue_bind("eu", "topics", routing_key="eu.#")
    channel.queue_bind("match", "heads", arguments={"x-match": "any", "region": "eu"})
    channel.exchange_bind("fan", "front", routing_key="broadcast")
    channel.confirm_delivery()
    channel.basic_publish("fan", "", b"to both")
    channel.basic_publish("topics", "eu.orders.new", b"eu order")
    channel.basic_publish("topics", "us.orders.new", b"us order")
    channel.basic_publish("heads", "", b"eu header", pika.BasicProperties(headers={"region": "eu"}))
    channel.basic_publish("heads", "", b"us header", pika.BasicProperties(headers={"region": "us"}))
    channel.basic_publish("front", "broadcast", b"via front")
    assert [b for _, _, b in _drain(channel, "all1", 2)] == [b"to both", b"via front"]
    assert [b for _, _, b in _drain(channel, "all2", 2)] == [b"to both", b"via front"]
    assert [b for _, _, b in _drain(channel, "eu", 1)] == [b"eu order"]
    assert [b for _, _, b in _drain(channel, "match", 1)] == [b"eu header"]
    assert channel.basic_get("eu") == (None, None, None)


def test_mandatory_unroutable_is_returned(channel: Any) -> None:
    channel.exchange_declare("nowhere", "direct")
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("nowhere", "k", b"lost", mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", "no-such-queue", b"lost", mandatory=True)


@pytest.mark.parametrize(
    ("action", "code", "text"),
    [
        (lambda ch: ch.queue_declare("missing", passive=True), 404, "no queue 'missing'"),
        (lambda ch: ch.exchange_declare("missing", passive=True), 404, "no exchange 'missing'"),
        (lambda ch: ch.basic_publish("missing", "k", b"x"), 404, "no exchange 'missing'"),
        (lambda ch: ch.queue_declare("amq.mine"), 403, "reserved prefix 'amq.*'"),
        (lambda ch: ch.exchange_declare("", "direct"), 403, "default exchange"),
        (lambda ch: ch.queue_bind("missing", "amq.direct"), 404, "no queue 'missing'"),
        (
            lambda ch: ch.queue_declare("aged", arguments={"x-max-age": "1D"}),
            406,
            "not supported by WeirMQ yet",
        ),
        (
            lambda ch: ch.queue_declare("neg", arguments={"x-message-ttl": -1}),
            406,
            "invalid arg 'x-message-ttl' for queue 'neg' in vhost '/': {value_negative,-1}",
        ),
        (
            lambda ch: ch.queue_declare("over", arguments={"x-overflow": "spill"}),
            406,
            "invalid arg 'x-overflow'",
        ),
        (
            lambda ch: ch.queue_declare("dlrk", arguments={"x-dead-letter-routing-key": "k"}),
            406,
            "should be specified together with x-dead-letter-exchange",
        ),
    ],
)
def test_refusals_close_the_channel_with_rabbitmqs_codes(
    server: Server, action: Any, code: int, text: str
) -> None:
    connection = server.connect()
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        action(channel)
        channel.queue_declare("after", passive=True)  # a publish is refused asynchronously
    assert refused.value.reply_code == code
    assert text in refused.value.reply_text
    assert connection.is_open  # a channel error leaves the connection open
    assert connection.channel().queue_declare("", exclusive=True).method.queue
    connection.close()


def test_redeclare_with_other_arguments_is_406(channel: Any) -> None:
    channel.queue_declare("q1", durable=True)
    channel.queue_declare("q1", durable=True)  # the same again is fine
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare("q1", durable=False)
    assert refused.value.reply_code == 406
    assert "inequivalent arg 'durable' for queue 'q1' in vhost '/'" in refused.value.reply_text


def test_exchange_redeclare_with_another_type_is_406(channel: Any) -> None:
    channel.exchange_declare("ex", "direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.exchange_declare("ex", "fanout")
    assert refused.value.reply_code == 406
    assert "inequivalent arg 'type'" in refused.value.reply_text


def test_server_named_exclusive_queue_is_locked_to_its_connection(server: Server) -> None:
    owner = server.connect()
    name = owner.channel().queue_declare("", exclusive=True).method.queue
    assert name.startswith("amq.gen-")
    other = server.connect()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        other.channel().basic_get(name)
    assert refused.value.reply_code == 405
    owner.close()  # the queue goes with its connection
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
        other.channel().queue_declare(name, passive=True)
    assert gone.value.reply_code == 404
    other.close()


def test_purge_and_delete(channel: Any) -> None:
    channel.queue_declare("p")
    for i in range(4):
        channel.basic_publish("", "p", b"%d" % i)
    assert channel.basic_get("p")[2] == b"0"  # held: purge leaves it
    assert channel.queue_purge("p").method.message_count == 3
    assert channel.queue_declare("p", passive=True).method.message_count == 0
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_delete("p", if_empty=True)
    assert refused.value.reply_code == 406
    channel = channel.connection.channel()  # the message held by the closed one is back
    assert channel.queue_delete("p").method.message_count == 1
    assert channel.queue_delete("p").method.message_count == 0  # missing: still ok
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
        channel.queue_declare("p", passive=True)
    assert gone.value.reply_code == 404


def test_consumers_are_cancelled_when_their_queue_is_deleted(server: Server) -> None:
    connection = server.connect()
    channel = connection.channel()
    channel.queue_declare("doomed")
    cancelled: list[Any] = []
    channel.add_on_cancel_callback(cancelled.append)
    channel.basic_consume("doomed", lambda *args: None, consumer_tag="c1")
    connection.channel().queue_delete("doomed")
    connection.process_data_events(time_limit=0.5)
    assert [frame.method.consumer_tag for frame in cancelled] == ["c1"]
    connection.close()


def test_definitions_and_messages_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Server(data) as first:
        connection = first.connect()
        channel = connection.channel()
        channel.exchange_declare("events", "topic", durable=True)
        channel.queue_declare("durable-q", durable=True)
        channel.queue_declare("transient-q", durable=False)
        channel.queue_bind("durable-q", "events", routing_key="a.*")
        channel.confirm_delivery()
        for i in range(6):
            channel.basic_publish("events", "a.b", b"%d" % i, pika.BasicProperties(delivery_mode=2))
        acked, _, _ = channel.basic_get("durable-q")
        channel.basic_ack(acked.delivery_tag)
        held, _, _ = channel.basic_get("durable-q")  # unacked when the broker stops
        assert held is not None
        connection.close()
    with Server(data) as second:
        connection = second.connect()
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("events", "a.c", b"after")
        got = _drain(channel, "durable-q", 6)
        assert [b for _, _, b in got] == [b"1", b"2", b"3", b"4", b"5", b"after"]
        assert [m.redelivered for m, _, _ in got] == [True] + [False] * 5
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
            channel.queue_declare("transient-q", passive=True)
        assert gone.value.reply_code == 404
        connection.close()


def _eventually(check: Callable[[], Any], timeout_s: float = 5.0) -> Any:
    """Poll `check` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def test_dead_letter_headers(channel: Any) -> None:
    channel.exchange_declare("dlx2", "fanout")
    channel.queue_declare("dlq2")
    channel.queue_bind("dlq2", "dlx2")
    channel.queue_declare("work2", arguments={"x-dead-letter-exchange": "dlx2"})
    channel.basic_publish("", "work2", b"bad", pika.BasicProperties(headers={"k": "v"}))
    method, _, _ = channel.basic_get("work2")
    channel.basic_nack(method.delivery_tag, requeue=False)
    method, properties, body = channel.basic_get("dlq2", auto_ack=True)
    assert body == b"bad"
    assert method.exchange == "dlx2" and method.routing_key == "work2"
    headers = properties.headers
    assert headers["k"] == "v"
    (death,) = headers["x-death"]
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == "work2"
    assert death["exchange"] == ""
    assert death["routing-keys"] == ["work2"]
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-queue"] == "work2"
    assert headers["x-first-death-exchange"] == ""
    assert channel.basic_get("work2") == (None, None, None)


def test_ttl_expires_messages_without_a_consumer_to_the_dead_letter_exchange(
    channel: Any,
) -> None:
    # What Celery's delayed delivery and every retry-with-delay pattern rely on.
    channel.queue_declare("later")
    channel.queue_declare(
        "wait",
        arguments={
            "x-message-ttl": 200,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "later",
        },
    )
    channel.basic_publish("", "wait", b"due soon")
    got = _eventually(lambda: channel.basic_get("later", auto_ack=True)[2])
    assert got == b"due soon"
    assert channel.queue_declare("wait", passive=True).method.message_count == 0


def test_per_message_expiration_is_never_delivered(channel: Any) -> None:
    channel.queue_declare("short")
    channel.basic_publish("", "short", b"stale", pika.BasicProperties(expiration="50"))
    channel.basic_publish("", "short", b"fresh")
    time.sleep(0.2)  # the message's own TTL has to pass: this is the behaviour under test
    assert channel.basic_get("short", auto_ack=True)[2] == b"fresh"
    assert channel.basic_get("short") == (None, None, None)


def test_max_length_drop_head_dead_letters_the_oldest(channel: Any) -> None:
    channel.queue_declare("dropped")
    channel.queue_declare(
        "bounded",
        arguments={
            "x-max-length": 2,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dropped",
        },
    )
    channel.confirm_delivery()
    for i in range(5):
        channel.basic_publish("", "bounded", b"%d" % i)
    assert _eventually(
        lambda: channel.queue_declare("bounded", passive=True).method.message_count == 2
    )
    assert [channel.basic_get("bounded", auto_ack=True)[2] for _ in range(2)] == [b"3", b"4"]
    dead = [channel.basic_get("dropped", auto_ack=True) for _ in range(3)]
    assert [body for _, _, body in dead] == [b"0", b"1", b"2"]
    assert dead[0][1].headers["x-death"][0]["reason"] == "maxlen"


def test_max_length_reject_publish_nacks_the_publisher(channel: Any) -> None:
    channel.queue_declare("full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.confirm_delivery()
    channel.basic_publish("", "full", b"first")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", "full", b"second")
    assert _eventually(
        lambda: channel.queue_declare("full", passive=True).method.message_count == 1
    )
    assert channel.basic_get("full", auto_ack=True)[2] == b"first"
    assert channel.basic_get("full") == (None, None, None)


def test_delivery_limit_dead_letters_after_the_last_redelivery(channel: Any) -> None:
    channel.queue_declare("poison-dlq")
    channel.queue_declare(
        "poison",
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "poison-dlq",
        },
    )
    channel.basic_publish("", "poison", b"boom")
    deliveries = 0
    while True:
        method, _, _ = channel.basic_get("poison")
        if method is None:
            break
        deliveries += 1
        channel.basic_nack(method.delivery_tag, requeue=True)
        assert deliveries <= 5
    assert deliveries == 2  # delivered, returned once (the limit), delivered, gone
    _, properties, body = channel.basic_get("poison-dlq", auto_ack=True)
    assert body == b"boom"
    assert properties.headers["x-death"][0]["reason"] == "delivery_limit"


def test_unused_queue_expires(channel: Any) -> None:
    channel.queue_declare("ephemeral", arguments={"x-expires": 200})
    channel.confirm_delivery()

    def gone() -> bool:
        # A publish is not a use (a declare or a get would renew the queue's lease).
        try:
            channel.basic_publish("", "ephemeral", b"ping", mandatory=True)
        except pika.exceptions.UnroutableError:
            return True
        return False

    assert _eventually(gone)


def _stream_read(connection: Any, queue: str, offset: Any, count: int) -> list[tuple[int, bytes]]:
    channel = connection.channel()
    channel.basic_qos(prefetch_count=10)
    got: list[tuple[int, bytes]] = []

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        got.append((properties.headers["x-stream-offset"], body))
        ch.basic_ack(method.delivery_tag)

    arguments = {} if offset is None else {"x-stream-offset": offset}
    channel.basic_consume(queue, on_message, arguments=arguments)
    deadline = time.monotonic() + 5
    while len(got) < count and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
    connection.process_data_events(time_limit=0.1)  # nothing more arrives
    channel.close()
    return got


def test_a_stream_is_read_from_any_offset_by_every_consumer(server: Server) -> None:
    connection = server.connect()
    channel = connection.channel()
    channel.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    channel.confirm_delivery()
    for i in range(25):
        channel.basic_publish("", "events", b"e%d" % i)
    everything = [(i, b"e%d" % i) for i in range(25)]
    assert _stream_read(connection, "events", "first", 25) == everything
    assert _stream_read(connection, "events", "first", 25) == everything  # not consumed
    assert _stream_read(connection, "events", 20, 5) == everything[20:]
    assert _stream_read(connection, "events", "last", 1) == everything[24:]
    assert _stream_read(connection, "events", None, 0) == []  # "next": only what comes
    assert channel.queue_declare("events", passive=True).method.message_count == 0
    connection.close()


@pytest.mark.parametrize(
    ("action", "code", "text"),
    [
        (lambda ch: ch.basic_get("s"), 540, "basic.get not supported by stream queues"),
        (lambda ch: ch.queue_purge("s"), 540, "queue.purge not supported by stream queues"),
        (
            lambda ch: ch.basic_consume("s", lambda *a: None),
            406,
            "consumer prefetch count is not set for 'queue 's' in vhost '/''",
        ),
        (
            lambda ch: (
                ch.basic_qos(prefetch_count=5),
                ch.basic_consume("s", print, auto_ack=True),
            ),
            540,
            "automatic acknowledgement not supported by stream queues",
        ),
        (
            lambda ch: ch.queue_declare("s2", arguments={"x-queue-type": "stream"}),
            406,
            "invalid property 'non-durable'",
        ),
        (
            lambda ch: ch.queue_declare(
                "s3", durable=True, arguments={"x-queue-type": "stream", "x-message-ttl": 5}
            ),
            406,
            "invalid arg 'x-message-ttl' for queue 's3' in vhost '/' of queue type",
        ),
    ],
)
def test_streams_refuse_what_rabbitmq_refuses(
    server: Server, action: Any, code: int, text: str
) -> None:
    connection = server.connect()
    connection.channel().queue_declare("s", durable=True, arguments={"x-queue-type": "stream"})
    with pytest.raises(
        (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker)
    ) as refused:
        action(connection.channel())
    assert refused.value.reply_code == code
    assert text in refused.value.reply_text
    if connection.is_open:
        connection.close()


def _collect(connection: Any, count: int, *boxes: list[bytes]) -> None:
    deadline = time.monotonic() + 5
    while sum(len(box) for box in boxes) < count and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
    connection.process_data_events(time_limit=0.1)


def test_single_active_consumer_gets_everything_until_it_goes(server: Server) -> None:
    connection = server.connect()
    channel = connection.channel()
    channel.queue_declare("sac", arguments={"x-single-active-consumer": True})
    first: list[bytes] = []
    second: list[bytes] = []

    def taker(box: list[bytes]) -> Any:
        def on_message(ch: Any, method: Any, _p: Any, body: bytes) -> None:
            box.append(body)
            ch.basic_ack(method.delivery_tag)

        return on_message

    channel.basic_qos(prefetch_count=1)
    channel.basic_consume("sac", taker(first), consumer_tag="first")
    channel.basic_consume("sac", taker(second), consumer_tag="second")
    for i in range(6):
        channel.basic_publish("", "sac", b"%d" % i)
    _collect(connection, 6, first, second)
    assert (len(first), second) == (6, [])
    channel.basic_cancel("first")
    for i in range(6, 9):
        channel.basic_publish("", "sac", b"%d" % i)
    _collect(connection, 9, first, second)
    assert second == [b"6", b"7", b"8"]
    connection.close()


def test_consumer_priorities_feed_the_highest_with_credit_first(server: Server) -> None:
    connection = server.connect()
    channel = connection.channel()
    channel.queue_declare("prio")
    high: list[bytes] = []
    low: list[bytes] = []
    channel.basic_qos(prefetch_count=100)
    channel.basic_consume("prio", lambda ch, m, p, b: (low.append(b), ch.basic_ack(m.delivery_tag)))
    channel.basic_consume(
        "prio",
        lambda ch, m, p, b: (high.append(b), ch.basic_ack(m.delivery_tag)),
        arguments={"x-priority": 10},
    )
    for i in range(20):
        channel.basic_publish("", "prio", b"%d" % i)
    _collect(connection, 20, high, low)
    assert (len(high), low) == (20, [])
    connection.close()


def test_delayed_message_exchange_routes_each_message_after_its_x_delay(channel: Any) -> None:
    channel.exchange_declare(
        "later", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"}
    )
    channel.queue_declare("due")
    channel.queue_bind("due", "later", routing_key="k")
    channel.confirm_delivery()
    published = time.monotonic()
    channel.basic_publish("later", "k", b"slow", pika.BasicProperties(headers={"x-delay": 600}))
    channel.basic_publish("later", "k", b"fast", pika.BasicProperties(headers={"x-delay": 200}))
    channel.basic_publish("later", "k", b"now")

    def next_message() -> Any:
        method, _, body = channel.basic_get("due", auto_ack=True)
        return None if method is None else (method.exchange, method.routing_key, body)

    assert _eventually(next_message) == ("later", "k", b"now")
    assert next_message() is None  # the delayed ones wait
    assert _eventually(next_message) == ("later", "k", b"fast")
    assert time.monotonic() - published >= 0.2  # never early
    assert _eventually(next_message) == ("later", "k", b"slow")
    assert time.monotonic() - published >= 0.6


def test_delayed_message_exchange_needs_its_delayed_type(channel: Any) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.exchange_declare("bad-later", "x-delayed-message")
    assert refused.value.reply_code == 406
    assert "'x-delayed-type' must be an existing exchange type" in refused.value.reply_text


def test_delayed_messages_wait_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Server(data) as first:
        connection = first.connect()
        channel = connection.channel()
        channel.exchange_declare(
            "later", "x-delayed-message", durable=True, arguments={"x-delayed-type": "fanout"}
        )
        channel.queue_declare("due", durable=True)
        channel.queue_bind("due", "later")
        channel.confirm_delivery()
        channel.basic_publish("later", "", b"held", pika.BasicProperties(headers={"x-delay": 500}))
        connection.close()
    with Server(data) as second:
        connection = second.connect()
        channel = connection.channel()
        got = _eventually(lambda: channel.basic_get("due", auto_ack=True)[2])
        assert got == b"held"
        connection.close()


def test_properties_come_back_byte_for_byte(server: Server) -> None:
    # Stored as the client sent them, properties come back exact: py-amqp (kombu's and
    # Celery's transport) sends floats as 64-bit doubles, which a re-encoding by pamqp
    # would narrow to 32 bits (0.1 would come back 0.10000000149011612).
    import amqp  # py-amqp, installed with kombu

    connection = amqp.Connection(f"127.0.0.1:{server.port}")
    connection.connect()
    try:
        channel = connection.channel()
        channel.queue_declare("exact")
        headers = {"ratio": 0.1, "big": 2**40, "small": 5, "flag": True, "s": "t"}
        channel.basic_publish(amqp.Message(b"x", application_headers=headers), "", "exact")
        message = channel.basic_get("exact", no_ack=True)
        assert message is not None
        assert message.headers == headers
    finally:
        connection.close()


def test_priority_queue_delivers_the_highest_priority_first(server: Server) -> None:
    connection = server.connect()
    channel = connection.channel()
    channel.queue_declare("urgent", arguments={"x-max-priority": 5})
    channel.confirm_delivery()
    for body, priority in [(b"p1", 1), (b"p9", 9), (b"p3", 3), (b"none", None), (b"p5", 5)]:
        channel.basic_publish("", "urgent", body, pika.BasicProperties(priority=priority))
    # basic.get: 9 counts as 5 (the queue's maximum), first of the two published first
    assert channel.basic_get("urgent", auto_ack=True)[2] == b"p9"
    got: list[bytes] = []
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume(
        "urgent", lambda ch, m, p, b: (got.append(b), ch.basic_ack(m.delivery_tag))
    )
    _collect(connection, 4, got)
    assert got == [b"p5", b"p3", b"p1", b"none"]
    connection.close()


def test_quorum_queues_are_durable_and_shared(channel: Any) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare("q-transient", arguments={"x-queue-type": "quorum"})
    assert refused.value.reply_code == 406
    assert "invalid property 'non-durable' for queue 'q-transient'" in refused.value.reply_text


def test_an_auto_delete_exchange_goes_with_its_last_queue(server: Server) -> None:
    connection = server.connect()
    channel = connection.channel()
    channel.exchange_declare("fleeting", "fanout", auto_delete=True)
    channel.queue_declare("bound-to-fleeting")
    channel.queue_bind("bound-to-fleeting", "fleeting")
    channel.queue_delete("bound-to-fleeting")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
        channel.exchange_declare("fleeting", passive=True)
    assert gone.value.reply_code == 404
    connection.close()


def test_max_length_bytes_and_reject_publish_dlx(channel: Any) -> None:
    channel.queue_declare("overflowed")
    channel.queue_declare(
        "by-bytes",
        arguments={
            "x-max-length-bytes": 250,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "overflowed",
        },
    )
    channel.confirm_delivery()
    channel.basic_publish("", "by-bytes", b"a" * 100)
    channel.basic_publish("", "by-bytes", b"b" * 100)
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", "by-bytes", b"c" * 100)  # 300 bytes would be over 250
    assert _eventually(
        lambda: channel.queue_declare("by-bytes", passive=True).method.message_count == 2
    )
    assert [channel.basic_get("by-bytes", auto_ack=True)[2] for _ in range(2)] == [
        b"a" * 100,
        b"b" * 100,
    ]

    def dead() -> Any:
        method, properties, body = channel.basic_get("overflowed", auto_ack=True)
        return None if method is None else (body, properties.headers["x-death"][0]["reason"])

    assert _eventually(dead) == (b"c" * 100, "maxlen")


def test_max_length_bytes_drop_head_keeps_the_newest(channel: Any) -> None:
    channel.queue_declare("lean", arguments={"x-max-length-bytes": 250})
    channel.confirm_delivery()
    for letter in b"abcd":
        channel.basic_publish("", "lean", bytes([letter]) * 100)
    assert _eventually(
        lambda: channel.queue_declare("lean", passive=True).method.message_count == 2
    )
    assert [channel.basic_get("lean", auto_ack=True)[2] for _ in range(2)] == [
        b"c" * 100,
        b"d" * 100,
    ]


def test_an_auto_delete_queue_goes_with_its_last_consumer(server: Server) -> None:
    connection = server.connect()
    channel = connection.channel()
    channel.queue_declare("while-consumed", auto_delete=True)
    channel.basic_consume("while-consumed", lambda *a: None, consumer_tag="only")
    assert _exists(connection, "while-consumed")
    channel.basic_cancel("only")
    assert not _exists(connection, "while-consumed")
    connection.close()


def _exists(connection: Any, queue: str) -> bool:
    """Whether `queue` exists, asked on a channel of its own (a 404 closes that one)."""
    probe = connection.channel()
    try:
        probe.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker:
        return False
    probe.close()
    return True


def test_per_message_ttl_dead_letters_without_a_consumer(channel: Any) -> None:
    channel.queue_declare("ttl-dlq")
    channel.queue_declare(
        "no-queue-ttl",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "ttl-dlq"},
    )
    channel.basic_publish("", "no-queue-ttl", b"brief", pika.BasicProperties(expiration="100"))
    assert _eventually(lambda: channel.basic_get("ttl-dlq", auto_ack=True)[2]) == b"brief"
