"""Scripted pika scenarios whose outcomes can be compared between two AMQP servers.

A differential test runs the same scenario against RabbitMQ (the reference:
`rabbitmq_support`) and against WeirMQ, and compares the two lists of `Observation`s.
An observation is what a client can see and rely on: reply codes and their names, message
bodies and properties, redelivered flags, message and consumer counts. It leaves out what
may differ without a client noticing: the names the scenario makes up (unique per run, so
one server serves many runs), delivery tags, and reply texts beyond their leading code
name ("NOT_FOUND - no queue 'x' in vhost '/'" is observed as "NOT_FOUND").

A step the server refuses is an observation too (``("error", code, name)``), and the
scenario goes on with a fresh channel (or connection), so one difference does not hide
the ones after it: the first mismatch between two lists is where the servers diverge.

pika's BlockingConnection puts no time limit on a reply it waits for, so the scenario runs
on a thread of its own and `run_scenario` waits for it at most `SCENARIO_TIMEOUT_S`; a
server that never answers fails with the step it was stuck in. That thread ends when the
server closes the connection (at the latest when the test's server is stopped).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions

SCENARIO_TIMEOUT_S = 60.0
"""The whole scenario (~1 s against RabbitMQ here, half of it the quiet wait below)."""
QUIET_WAIT_S = 0.5
"""How long the consumer waits to conclude that no further message is coming."""
CONNECT_TIMEOUT_S = 10.0
DELIVERIES_MAX = 3
"""The consumer stops after this many: a server delivering more than it holds shows it."""

Action = Callable[[Any], object]  # a step: the current channel in, what was seen out

# RabbitMQ's topic rules: `*` one word, `#` zero or more; a queue two bindings match gets
# the message once.
ROUTED_TOPIC_BINDINGS = ("eu.*", "#.urgent")
ROUTED_TOPIC_KEYS = ("eu.paris", "eu", "eu.paris.louvre", "us.nyc.urgent", "urgent",
                     "eu.urgent", "")
# Headers exchanges compare values with their AMQP types: the int 1 is not the string "1".
ROUTED_HEADERS_BINDINGS = ({"x-match": "all", "a": "1", "b": "2"},
                           {"x-match": "any", "c": "3", "d": "4"})
ROUTED_HEADERS: tuple[dict[str, object], ...] = (
    {"a": "1"}, {"a": "1", "b": "2"}, {"d": "4"}, {"a": "1", "b": "2", "c": "3"},
    {"a": 1, "b": 2}, {}, {"x-match": "any", "a": "1"})


@dataclass(frozen=True, slots=True)
class Observation:
    """One thing a client saw: which step, and what came back (comparable, printable)."""

    step: str
    value: object


class ScenarioTimeout(AssertionError):
    """The server did not finish the scenario in time; the message names the step."""


def refusal(exc: pika.exceptions.AMQPError) -> tuple[object, ...]:
    """``("error", reply code, its name)`` for a channel or connection the server closed."""
    closed = (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker)
    if isinstance(exc, closed):
        return ("error", exc.reply_code, exc.reply_text.split(" ", 1)[0])
    return ("error", type(exc).__name__)


def message(method: Any, properties: Any, body: bytes) -> tuple[object, ...]:
    """A delivered or fetched message as the client sees it (its tag left out)."""
    return (body, method.redelivered, properties.content_type, properties.delivery_mode,
            dict(properties.headers or {}))


class Session:
    """One connection and its current channel, both reopened after the server closes them,
    and the observations so far."""

    def __init__(self, port: int) -> None:
        self.parameters = pika.ConnectionParameters(
            "127.0.0.1", port, credentials=pika.PlainCredentials("guest", "guest"),
            connection_attempts=1, socket_timeout=CONNECT_TIMEOUT_S,
            stack_timeout=CONNECT_TIMEOUT_S, blocked_connection_timeout=CONNECT_TIMEOUT_S)
        self.step = "connect"
        self.connection = pika.BlockingConnection(self.parameters)
        self.channel = self.connection.channel()
        self.observations: list[Observation] = []

    def observe(self, step: str, action: Action) -> object:
        """Run `action(channel)`, record what it returned or how the server refused it."""
        self.step = step
        if not self.connection.is_open:
            self.connection = pika.BlockingConnection(self.parameters)
        if not self.channel.is_open:
            self.channel = self.connection.channel()
        try:
            value = action(self.channel)
        except pika.exceptions.UnroutableError as exc:
            value = tuple(("returned", m.method.reply_code, m.method.reply_text)
                          for m in exc.messages)
        except (pika.exceptions.ChannelClosedByBroker,
                pika.exceptions.ConnectionClosedByBroker) as exc:
            value = refusal(exc)
        self.observations.append(Observation(step, value))
        return value

    def close(self) -> None:
        self.step = "connection.close"
        if self.connection.is_open:
            self.connection.close()
        self.observations.append(Observation("connection.close", "ok"))


class BasicScenario:
    """Declare, bind, publish with confirms, get/reject/ack, consume/ack/reject, nack with
    requeue (single and multiple), message and consumer counts, purge, delete if-empty and
    if-unused, exclusive queues seen from another connection (405), server-named queues,
    and the refusals clients meet most: a missing queue or exchange (404), a redeclaration
    that does not match (406), an unknown delivery tag (406), reserved `amq.` names and
    system exchanges (403). The outcome against RabbitMQ is `EXPECTED` in
    test_rabbitmq_oracle.py."""

    def __init__(self, prefix: str) -> None:
        self.exchange, self.queue = f"{prefix}.ex", f"{prefix}.q"
        self.missing_queue, self.missing_exchange = f"{prefix}.no-q", f"{prefix}.no-ex"
        self.exclusive_queue = f"{prefix}.excl"
        self.topic_exchange, self.headers_exchange = f"{prefix}.topic", f"{prefix}.headers"
        self.routed_queue = f"{prefix}.routed"
        self.reserved_queue, self.reserved_exchange = f"amq.{prefix}.q", f"amq.{prefix}.ex"
        self.last_tag = 0  # of the last basic.get: not an observation, servers number freely
        self.parameters: pika.ConnectionParameters | None = None  # for a second connection

    def run(self, s: Session) -> None:
        self.parameters = s.parameters
        self._set_up(s)
        self._publish(s)
        self._get_reject_ack(s)
        self._consume(s)
        self._routing(s)
        self._nack_and_purge(s)
        self._consumer_counts(s)
        self._exclusive(s)
        self._channel_close(s)
        self._refusals(s)
        self._reserved(s)
        self._tear_down(s)

    # -- the parts ---------------------------------------------------------------------------

    def _set_up(self, s: Session) -> None:
        s.observe("exchange.declare direct",
                  lambda ch: ch.exchange_declare(self.exchange, "direct").method.NAME)
        s.observe("queue.declare durable", self._declare_durable)
        s.observe("queue.bind k",
                  lambda ch: ch.queue_bind(self.queue, self.exchange, "k").method.NAME)
        s.observe("confirm.select", lambda ch: ch.confirm_delivery() or "ok")

    def _publish(self, s: Session) -> None:
        for n in (1, 2, 3):
            s.observe(f"publish m{n}, mandatory", lambda ch, n=n: self._send(ch, n))
        s.observe("publish unroutable, mandatory", lambda ch: ch.basic_publish(
            self.exchange, "nowhere", b"lost", mandatory=True) or "ack")
        s.observe("publish unroutable", lambda ch: ch.basic_publish(
            self.exchange, "nowhere", b"dropped") or "ack")
        s.observe("queue.declare passive", self._counts)

    def _get_reject_ack(self, s: Session) -> None:
        # Rejected with requeue, a message comes back first, marked redelivered.
        s.observe("basic.get", self._get)
        s.observe("basic.reject, requeue",
                  lambda ch: ch.basic_reject(self.last_tag, requeue=True) or "ok")
        s.observe("basic.get after reject", self._get)
        s.observe("basic.ack", lambda ch: ch.basic_ack(self.last_tag) or "ok")

    def _consume(self, s: Session) -> None:
        s.observe("basic.qos prefetch 1", lambda ch: ch.basic_qos(prefetch_count=1) or "ok")
        s.observe("basic.consume: ack one, reject one", self._consume_two)
        s.observe("queue.declare passive after consume", self._counts)
        s.observe("basic.get on empty", self._get)

    def _routing(self, s: Session) -> None:
        """Topic and headers exchanges: which publishes a binding matches (mandatory ones
        that match none are returned), and that a message two bindings of one queue match
        is queued once."""
        topic, headers, queue = self.topic_exchange, self.headers_exchange, self.routed_queue
        s.observe("exchange.declare topic",
                  lambda ch: ch.exchange_declare(topic, "topic").method.NAME)
        s.observe("exchange.declare headers",
                  lambda ch: ch.exchange_declare(headers, "headers").method.NAME)
        s.observe("queue.declare routed", lambda ch: self._declared(
            ch.queue_declare(queue, durable=True).method, queue))
        for key in ROUTED_TOPIC_BINDINGS:
            s.observe(f"queue.bind topic {key}",
                      lambda ch, key=key: ch.queue_bind(queue, topic, key).method.NAME)
        for arguments in ROUTED_HEADERS_BINDINGS:
            s.observe(f"queue.bind headers {arguments}", lambda ch, arguments=arguments:
                      ch.queue_bind(queue, headers, "", arguments).method.NAME)
        for key in ROUTED_TOPIC_KEYS:
            s.observe(f"publish topic {key!r}, mandatory", lambda ch, key=key: self._route(
                ch, topic, key, {}))
        for table in ROUTED_HEADERS:
            s.observe(f"publish headers {table}, mandatory", lambda ch, table=table:
                      self._route(ch, headers, "", table))
        s.observe("basic.get routed, all", self._get_all_routed)
        s.observe("queue.delete routed", lambda ch: ch.queue_delete(queue).method.message_count)
        s.observe("exchange.delete topic", lambda ch: ch.exchange_delete(topic).method.NAME)
        s.observe("exchange.delete headers", lambda ch: ch.exchange_delete(headers).method.NAME)

    def _nack_and_purge(self, s: Session) -> None:
        for n in (4, 5):
            s.observe(f"publish m{n}, mandatory", lambda ch, n=n: self._send(ch, n))
        s.observe("queue.declare passive, two published", self._counts)
        s.observe("basic.get m4", self._get)
        s.observe("basic.nack, requeue",
                  lambda ch: ch.basic_nack(self.last_tag, requeue=True) or "ok")
        s.observe("basic.get after nack", self._get)
        s.observe("basic.get m5", self._get)
        s.observe("basic.nack multiple, requeue", lambda ch: ch.basic_nack(
            self.last_tag, multiple=True, requeue=True) or "ok")
        # Not a passive declare here: RabbitMQ answers its counts (a `stat` call the queue
        # process takes first) before it has handled a requeue sent just before, so the
        # count would be 0 or 2 there. Basic.Get is taken in order.
        s.observe("basic.get after nack multiple", self._get)
        s.observe("basic.reject m4, requeue",
                  lambda ch: ch.basic_reject(self.last_tag, requeue=True) or "ok")
        s.observe("queue.delete if-empty, not empty",
                  lambda ch: ch.queue_delete(self.queue, if_empty=True).method.NAME)
        s.observe("queue.purge", lambda ch: ch.queue_purge(self.queue).method.message_count)
        s.observe("queue.declare passive after purge", self._counts)

    def _consumer_counts(self, s: Session) -> None:
        s.observe("basic.consume, then queue.declare passive", self._consume_and_count)
        s.observe("queue.delete if-unused, in use",
                  lambda ch: ch.queue_delete(self.queue, if_unused=True).method.NAME)
        s.observe("queue.declare passive, consumer gone with its channel", self._counts)

    def _exclusive(self, s: Session) -> None:
        s.observe("queue.declare exclusive", lambda ch: self._declared(
            ch.queue_declare(self.exclusive_queue, exclusive=True).method,
            self.exclusive_queue))
        s.observe("queue.declare passive exclusive, other connection",
                  lambda _ch: self._elsewhere(lambda other: other.queue_declare(
                      self.exclusive_queue, passive=True).method.NAME))
        s.observe("basic.get exclusive, other connection",
                  lambda _ch: self._elsewhere(lambda other: other.basic_get(
                      self.exclusive_queue)[0]))
        s.observe("queue.declare exclusive again, same connection", lambda ch: self._declared(
            ch.queue_declare(self.exclusive_queue, exclusive=True).method,
            self.exclusive_queue))
        s.observe("queue.declare server-named",
                  lambda ch: ch.queue_declare("", exclusive=True).method.queue[:8])

    def _channel_close(self, s: Session) -> None:
        # The channel was closed by the server (if-unused): a new one, in confirm mode.
        s.observe("confirm.select, new channel", lambda ch: ch.confirm_delivery() or "ok")
        s.observe("publish m6, mandatory", lambda ch: self._send(ch, 6))
        s.observe("basic.get m6, then channel.close", lambda ch: (self._get(ch), ch.close())[0])
        s.observe("basic.get after channel.close", self._get)
        s.observe("basic.ack m6", lambda ch: ch.basic_ack(self.last_tag) or "ok")
        s.observe("queue.declare passive after ack", self._counts)

    def _refusals(self, s: Session) -> None:
        # Each closes the channel; Session.observe opens the next one.
        s.observe("queue.declare passive, missing",
                  lambda ch: ch.queue_declare(self.missing_queue, passive=True).method.NAME)
        s.observe("queue.declare not durable, mismatch",
                  lambda ch: ch.queue_declare(self.queue, durable=False).method.NAME)
        s.observe("exchange.declare fanout, mismatch",
                  lambda ch: ch.exchange_declare(self.exchange, "fanout").method.NAME)
        s.observe("basic.ack unknown tag", self._ack_unknown_tag)
        s.observe("publish to missing exchange, confirmed", self._publish_nowhere)

    def _reserved(self, s: Session) -> None:
        s.observe("queue.declare reserved amq. name",
                  lambda ch: ch.queue_declare(self.reserved_queue).method.NAME)
        s.observe("exchange.declare reserved amq. name",
                  lambda ch: ch.exchange_declare(self.reserved_exchange, "direct").method.NAME)
        s.observe("exchange.declare amq.direct, equivalent",
                  lambda ch: ch.exchange_declare("amq.direct", "direct", durable=True)
                  .method.NAME)
        s.observe("exchange.delete amq.direct",
                  lambda ch: ch.exchange_delete("amq.direct").method.NAME)
        s.observe("exchange.declare passive, missing", lambda ch: ch.exchange_declare(
            self.missing_exchange, passive=True).method.NAME)
        s.observe("queue.bind to missing exchange", lambda ch: ch.queue_bind(
            self.queue, self.missing_exchange, "k").method.NAME)
        s.observe("basic.consume missing queue", lambda ch: ch.basic_consume(
            self.missing_queue, lambda *_: None) and "consuming")
        s.observe("queue.declare x-message-ttl, mismatch", lambda ch: ch.queue_declare(
            self.queue, durable=True, arguments={"x-message-ttl": 1000}).method.NAME)
        s.observe("queue.delete missing",
                  lambda ch: ch.queue_delete(self.missing_queue).method.message_count)
        s.observe("exchange.delete missing",
                  lambda ch: ch.exchange_delete(self.missing_exchange).method.NAME)

    def _tear_down(self, s: Session) -> None:
        s.observe("queue.delete", lambda ch: ch.queue_delete(self.queue).method.message_count)
        s.observe("exchange.delete",
                  lambda ch: ch.exchange_delete(self.exchange).method.NAME)
        s.observe("queue.declare passive, deleted",
                  lambda ch: ch.queue_declare(self.queue, passive=True).method.NAME)

    # -- steps -------------------------------------------------------------------------------

    def _declare_durable(self, channel: Any) -> object:
        ok = channel.queue_declare(self.queue, durable=True).method
        return (ok.queue == self.queue, ok.message_count, ok.consumer_count)

    @staticmethod
    def _declared(ok: Any, name: str) -> object:
        return (ok.queue == name, ok.message_count, ok.consumer_count)

    def _consume_and_count(self, channel: Any) -> object:
        channel.basic_consume(self.queue, lambda *_: None)
        return self._counts(channel)

    @staticmethod
    def _route(channel: Any, exchange: str, key: str, headers: dict[str, object]) -> object:
        body = f"{exchange.rsplit('.', 1)[1]} {key} {sorted(headers.items())}".encode()
        channel.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers),
                              mandatory=True)
        return "ack"

    def _get_all_routed(self, channel: Any) -> object:
        bodies = []
        while len(bodies) <= len(ROUTED_TOPIC_KEYS) + len(ROUTED_HEADERS):
            method, _properties, body = channel.basic_get(self.routed_queue, auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        return tuple(bodies)

    def _elsewhere(self, action: Action) -> object:
        """`action` on a channel of a second connection, closed after (the exception of a
        refusal goes on to `Session.observe`)."""
        assert self.parameters is not None
        other = pika.BlockingConnection(self.parameters)
        try:
            return action(other.channel())
        finally:
            if other.is_open:
                other.close()

    def _counts(self, channel: Any) -> object:
        ok = channel.queue_declare(self.queue, passive=True).method
        return (ok.message_count, ok.consumer_count)

    def _send(self, channel: Any, n: int) -> object:
        properties = pika.BasicProperties(content_type="text/plain", delivery_mode=2,
                                          headers={"n": n})
        channel.basic_publish(self.exchange, "k", b"m%d" % n, properties, mandatory=True)
        return "ack"  # basic_publish returns once confirmed; a nack raises NackError

    def _get(self, channel: Any) -> object:
        method, properties, body = channel.basic_get(self.queue, auto_ack=False)
        if method is None:
            return None
        self.last_tag = method.delivery_tag
        return (message(method, properties, body), method.message_count)

    def _consume_two(self, channel: Any) -> object:
        """Deliveries until quiet for QUIET_WAIT_S: ack the first, reject the rest without
        requeue (dropped: the queue has no dead-letter exchange)."""
        seen: list[object] = []
        for method, properties, body in channel.consume(self.queue,
                                                        inactivity_timeout=QUIET_WAIT_S):
            if method is None:
                break
            seen.append(message(method, properties, body))
            if len(seen) == 1:
                channel.basic_ack(method.delivery_tag)
            else:
                channel.basic_reject(method.delivery_tag, requeue=False)
            if len(seen) >= DELIVERIES_MAX:
                break
        requeued = channel.cancel()
        return (tuple(seen), requeued)

    def _ack_unknown_tag(self, channel: Any) -> object:
        # Basic.Ack has no reply: the refusal arrives with the next synchronous method.
        channel.basic_ack(99)
        return channel.queue_declare(self.queue, passive=True).method.NAME

    def _publish_nowhere(self, channel: Any) -> object:
        channel.confirm_delivery()
        channel.basic_publish(self.missing_exchange, "k", b"x")
        return "ack"


def run_scenario(port: int, timeout_s: float = SCENARIO_TIMEOUT_S) -> list[Observation]:
    """Run `BasicScenario` against the AMQP server on 127.0.0.1:`port` (guest/guest,
    vhost ``/``); what the client observed, in order."""
    scenario = BasicScenario(f"scenario-{uuid.uuid4().hex[:8]}")
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            session = outcome["session"] = Session(port)
            scenario.run(session)
            session.close()
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc

    thread = threading.Thread(target=body, name=f"amqp-scenario-{port}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    session = outcome.get("session")
    if thread.is_alive():
        step = "connect" if session is None else session.step
        raise ScenarioTimeout(f"the server on port {port} did not finish the scenario within "
                              f"{timeout_s:.0f} s: stuck in step {step!r}")
    if "error" in outcome:
        raise outcome["error"]
    assert session is not None
    return session.observations
