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
    """Declare, bind, publish with confirms, get/reject/ack, consume/ack/reject, and the
    refusals clients meet most: a missing queue (404), a redeclaration that does not match
    (406), an unknown delivery tag (406), a missing exchange (404). The outcome against
    RabbitMQ is `EXPECTED` in test_rabbitmq_oracle.py."""

    def __init__(self, prefix: str) -> None:
        self.exchange, self.queue = f"{prefix}.ex", f"{prefix}.q"
        self.missing_queue, self.missing_exchange = f"{prefix}.no-q", f"{prefix}.no-ex"
        self.last_tag = 0  # of the last basic.get: not an observation, servers number freely

    def run(self, s: Session) -> None:
        self._set_up(s)
        self._publish(s)
        self._get_reject_ack(s)
        self._consume(s)
        self._refusals(s)
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
