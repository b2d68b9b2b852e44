"""The ``amqp`` workload's load: pika clients in processes of their own, against an AMQP URL.

The same Python load generator drives WeirMQ's AMQP listener and a RabbitMQ node
(`weirmq.bench.rabbitmq`), so the two figures differ by the server alone; RabbitMQ's own
PerfTest (Java) would measure a faster client against one of them only. Each server is
measured three ways, each a fresh queue or the one just filled, 1 KB random bodies:

- **publish, confirm each** (`PUBLISH_EACH`): pika's ``BlockingConnection`` with
  ``confirm_delivery()``, so every ``basic_publish`` waits for its Basic.Ack: one
  message in flight, persistent (delivery mode 2) into a durable queue. This is what most
  applications written with pika do, and it measures a server's round trip including
  whatever it does before confirming a persistent message (RabbitMQ: write it to disk).
- **publish, confirm window** (`PUBLISH_WINDOW`): the same messages with up to `WINDOW`
  unconfirmed at a time. ``BlockingConnection`` cannot have more than one confirm in
  flight, so this client is pika's ``SelectConnection``, its callback API: publish until
  the window is full, publish more as Basic.Ack frames (single or ``multiple``) come in.
  A Basic.Nack fails the measurement.
- **consume, ack each** (`CONSUME`): a ``BlockingConnection`` with ``basic_qos(prefetch_count
  =PREFETCH)`` consumes what the window publisher wrote (a backlog, all in the queue before
  the consumer starts) with ``basic_consume`` and acknowledges every message with its own
  ``basic_ack``.

Each client process connects, declares (or, for the consumer, passively checks) its queue
and only then reports ready (`weirmq.bench.workers.run_clients`): connection set-up is in
no figure; the consumer subscribes at ``go``. The server's CPU and peak RSS come from
``/proc`` over the window, as for the Kafka workloads; the client reports its own CPU
(one Python thread, so 90% and more of a core means the client was the limit).

`summarise` turns the runs of both servers into the workload's cases: per measurement and
server, the run with the median msg/s (the figures of one real run, not a mix), every
run's msg/s, and on WeirMQ's case the ratio of the medians, WeirMQ ÷ RabbitMQ.
"""

from __future__ import annotations

import collections
import os
import statistics
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weirmq.bench.target import Window
from weirmq.bench.workers import READY_TIMEOUT_S, _cpu_s, _reporting_errors, run_clients

VALUE_BYTES = 1024
WINDOW = 256
"""Unconfirmed messages at most in the window publisher. RabbitMQ's PerfTest examples
use 50-1000 (``--confirm``)."""
PREFETCH = 100
"""The consumer's basic.qos prefetch count (RabbitMQ's docs suggest 100-300 to start)."""
CLIENT_TIMEOUT_S = 300.0
"""One client's whole measured run, at most; past it the measurement fails."""
SOCKET_TIMEOUT_S = 10.0
BLOCKED_TIMEOUT_S = 60.0
"""A publisher the server blocks (Connection.Blocked: memory or disk alarm) gives up after
this, rather than wait for ever."""
CONFIRM_POLL_S = 0.1

PUBLISH_EACH = "publish, confirm each"
PUBLISH_WINDOW = f"publish, confirm window {WINDOW}"
CONSUME = f"consume, ack each, prefetch {PREFETCH}"
MEASUREMENTS = (PUBLISH_EACH, PUBLISH_WINDOW, CONSUME)
WEIRMQ = "WeirMQ"
RABBITMQ = "RabbitMQ"
SERVERS = (WEIRMQ, RABBITMQ)


@dataclass(frozen=True)
class Plan:
    """How many messages each measurement moves."""

    each_messages: int  # publish, confirm each
    window_messages: int  # publish with a window, then consumed


def plan(quick: bool) -> Plan:
    """Sized for a few seconds each on RabbitMQ here (~450 msg/s waiting for each confirm:
    one fsync per message; ~8-12k with a window)."""
    return Plan(1_000, 20_000) if quick else Plan(5_000, 50_000)


def amqp_url(address: str, user: str = "guest", password: str = "guest") -> str:
    """``amqp://`` URL of the default vhost at ``HOST:PORT`` (as announced)."""
    return f"amqp://{user}:{password}@{address}/%2F"


def server_order(repeat: int) -> tuple[str, ...]:
    """The servers in the order of the `repeat`-th round: alternating, so that neither
    always runs first (on a warmer or a cooler machine)."""
    return SERVERS if repeat % 2 == 0 else SERVERS[::-1]


# --- Client processes (top-level functions: the spawn method imports them by name) ------------


@dataclass(frozen=True)
class PublishSpec:
    """One publisher: `messages` persistent messages into the durable `queue`."""

    url: str
    queue: str
    messages: int
    value_bytes: int = VALUE_BYTES
    window: int = 1  # 1: wait for each confirm (BlockingConnection); more: SelectConnection
    timeout_s: float = CLIENT_TIMEOUT_S


@dataclass(frozen=True)
class ConsumeSpec:
    """One consumer: `messages` from `queue`, each acknowledged, `prefetch` unacked at most."""

    url: str
    queue: str
    messages: int
    prefetch: int = PREFETCH
    timeout_s: float = CLIENT_TIMEOUT_S


def _parameters(url: str) -> Any:
    import pika  # type: ignore[import-untyped]  # pika ships no type hints

    parameters = pika.URLParameters(url)
    parameters.connection_attempts = 1
    parameters.socket_timeout = SOCKET_TIMEOUT_S
    parameters.blocked_connection_timeout = BLOCKED_TIMEOUT_S
    return parameters


def publish_worker(name: str, spec: PublishSpec, reports: Any, go: Any) -> None:
    body = _publish_each if spec.window <= 1 else _publish_window
    _reporting_errors(body, name, spec, reports, go)


def consume_worker(name: str, spec: ConsumeSpec, reports: Any, go: Any) -> None:
    _reporting_errors(_consume, name, spec, reports, go)


def _wait_go(go: Any) -> None:
    if not go.wait(READY_TIMEOUT_S * 2):
        raise TimeoutError("never told to go")


def _publish_each(name: str, spec: PublishSpec, reports: Any, go: Any) -> None:
    import pika

    connection = pika.BlockingConnection(_parameters(spec.url))
    channel = connection.channel()
    channel.queue_declare(spec.queue, durable=True)
    channel.confirm_delivery()
    body = os.urandom(spec.value_bytes)  # random, so that no codec could shrink it
    properties = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
    reports.put(("ready", name))
    _wait_go(go)
    cpu_start, start = _cpu_s(), time.perf_counter()
    deadline = start + spec.timeout_s
    publish, queue, now = channel.basic_publish, spec.queue, time.perf_counter
    for sent in range(spec.messages):
        # Returns once the server has confirmed; a Basic.Nack raises pika's NackError.
        publish("", queue, body, properties)
        if sent % 64 == 0 and now() > deadline:
            raise TimeoutError(f"{sent} of {spec.messages} confirmed in {spec.timeout_s:.0f} s")
    seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu_start
    connection.close()
    reports.put(("result", name, {"messages": spec.messages, "seconds": seconds,
                                  "client_cpu_s": cpu}))


class _WindowPublisher:
    """`_publish_window`'s callbacks: at most `spec.window` messages unconfirmed."""

    def __init__(self, name: str, spec: PublishSpec, reports: Any, go: Any) -> None:
        import pika

        self.name, self.spec, self.reports, self.go = name, spec, reports, go
        self.body = os.urandom(spec.value_bytes)
        self.properties = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        self.ack_type = pika.spec.Basic.Ack
        self.unconfirmed: collections.deque[int] = collections.deque()  # tags, ascending
        self.published = self.confirmed = self.nacked = 0
        self.error: str | None = None
        self.done = False
        self.start = self.cpu_start = self.seconds = self.cpu_s = 0.0
        self.channel: Any = None
        self.connection = pika.SelectConnection(
            _parameters(spec.url), on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error, on_close_callback=self._on_closed)

    def run(self) -> dict[str, Any]:
        limit_s = READY_TIMEOUT_S * 3 + self.spec.timeout_s  # connect, wait for go, publish
        self.connection.ioloop.call_later(limit_s, self._on_timeout)
        self.connection.ioloop.start()  # returns once the connection has closed
        if self.error is not None:
            raise RuntimeError(self.error)
        return {"messages": self.confirmed, "seconds": self.seconds,
                "client_cpu_s": self.cpu_s}

    def _fail(self, error: str) -> None:
        if self.error is None and not self.done:
            self.error = error
        if self.connection.is_open:
            self.connection.close()
        elif not self.connection.is_closing:
            self.connection.ioloop.stop()

    def _on_open(self, connection: Any) -> None:
        connection.channel(on_open_callback=self._on_channel)

    def _on_open_error(self, _connection: Any, error: Exception) -> None:
        self.error = f"{type(error).__name__}: {error}"
        self.connection.ioloop.stop()

    def _on_closed(self, _connection: Any, reason: Exception) -> None:
        if not self.done and self.error is None:
            self.error = f"connection closed: {type(reason).__name__}: {reason}"
        self.connection.ioloop.stop()

    def _on_timeout(self) -> None:
        self._fail(f"{self.confirmed} of {self.spec.messages} confirmed when the time ran out")

    def _on_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.add_on_close_callback(
            lambda _ch, reason: self._fail(f"channel closed: {type(reason).__name__}: {reason}"))
        channel.queue_declare(self.spec.queue, durable=True, callback=self._on_declared)

    def _on_declared(self, _frame: Any) -> None:
        self.channel.confirm_delivery(ack_nack_callback=self._on_confirm,
                                      callback=self._on_confirm_mode)

    def _on_confirm_mode(self, _frame: Any) -> None:
        self.reports.put(("ready", self.name))
        # Blocks the loop until go: nothing else is due on this connection meanwhile.
        if not self.go.wait(READY_TIMEOUT_S * 2):
            self._fail("never told to go")
            return
        self.cpu_start, self.start = _cpu_s(), time.perf_counter()
        self._publish_more()

    def _publish_more(self) -> None:
        publish, queue = self.channel.basic_publish, self.spec.queue
        body, properties = self.body, self.properties
        while (self.published < self.spec.messages
               and len(self.unconfirmed) < self.spec.window):
            publish("", queue, body, properties)
            self.published += 1
            self.unconfirmed.append(self.published)  # delivery tags count from 1

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        settled = _settle(self.unconfirmed, method.delivery_tag, method.multiple)
        if not isinstance(method, self.ack_type):
            self.nacked += settled
            self._fail(f"{self.nacked} messages nacked by the server")
            return
        self.confirmed += settled
        if self.confirmed < self.spec.messages:
            self._publish_more()
            return
        self.seconds = time.perf_counter() - self.start
        self.cpu_s = _cpu_s() - self.cpu_start
        self.done = True
        self.connection.close()


def _settle(unconfirmed: collections.deque[int], tag: int, multiple: bool) -> int:
    """Remove what a Basic.Ack/Nack settles from `unconfirmed` (ascending delivery tags);
    returns how many. ``multiple`` settles every tag up to and including `tag`."""
    if multiple:
        settled = 0
        while unconfirmed and unconfirmed[0] <= tag:
            unconfirmed.popleft()
            settled += 1
        return settled
    if unconfirmed and unconfirmed[0] == tag:
        unconfirmed.popleft()
        return 1
    try:
        unconfirmed.remove(tag)
    except ValueError:
        return 0  # not ours, or settled already: the server broke the protocol
    return 1


def _publish_window(name: str, spec: PublishSpec, reports: Any, go: Any) -> None:
    figures = _WindowPublisher(name, spec, reports, go).run()
    reports.put(("result", name, figures))


def _consume(name: str, spec: ConsumeSpec, reports: Any, go: Any) -> None:
    import pika

    connection = pika.BlockingConnection(_parameters(spec.url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=spec.prefetch)
    declared = channel.queue_declare(spec.queue, passive=True)
    waiting = declared.method.message_count
    if waiting < spec.messages:
        raise RuntimeError(f"{waiting} messages in {spec.queue}, {spec.messages} expected")
    received = redelivered = value_bytes = 0

    def on_message(ch: Any, method: Any, _properties: Any, body: bytes) -> None:
        nonlocal received, redelivered, value_bytes
        if received >= spec.messages:  # more than we came for: left unacked, requeued
            return
        received += 1
        value_bytes += len(body)
        redelivered += method.redelivered
        ch.basic_ack(method.delivery_tag)

    reports.put(("ready", name))
    _wait_go(go)
    cpu_start, start = _cpu_s(), time.perf_counter()
    deadline = start + spec.timeout_s
    channel.basic_consume(spec.queue, on_message, auto_ack=False)
    while received < spec.messages and time.perf_counter() < deadline:
        connection.process_data_events(time_limit=CONFIRM_POLL_S)
    seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu_start
    connection.close()  # sends the last acks first
    if received < spec.messages:
        raise TimeoutError(f"{received} of {spec.messages} received in {spec.timeout_s:.0f} s")
    reports.put(("result", name, {"messages": received, "seconds": seconds,
                                  "client_cpu_s": cpu, "redelivered": redelivered,
                                  "value_bytes": value_bytes}))


# --- The parent's side -------------------------------------------------------------------------


Worker = Callable[[str, Any, Any, Any], None]


def _measure(worker: Worker, spec: PublishSpec | ConsumeSpec, pid: int | None,
             check_alive: Callable[[], None]) -> dict[str, Any]:
    """One client process, measured inside a window on the server's process `pid`."""
    window = Window(pid)
    [result] = run_clients([(worker, spec)], window, spec.timeout_s + 60, check_alive)
    if result["messages"] != spec.messages:
        raise RuntimeError(f"{result['messages']} of {spec.messages} messages")
    if result.get("redelivered"):
        raise RuntimeError(f"{result['redelivered']} messages redelivered")
    seconds = result["seconds"]
    figures = window.figures()
    cpu_s = window.cpu_s
    return {
        "messages": spec.messages, "value_bytes": VALUE_BYTES, "seconds": seconds,
        "messages_per_s": spec.messages / seconds,
        "mb_per_s": spec.messages * VALUE_BYTES / 1e6 / seconds,
        **figures,
        "broker_cpu_us_per_message": None if cpu_s is None else cpu_s * 1e6 / spec.messages,
        "client_cpu_percent": [100 * result["client_cpu_s"] / seconds],
    }


def measure_server(url: str, pid: int | None, check_alive: Callable[[], None],
                   amounts: Plan) -> dict[str, dict[str, Any]]:
    """The three measurements against the server at `url`; figures by measurement."""
    suffix = uuid.uuid4().hex[:8]
    each_queue, window_queue = f"bench-amqp-each-{suffix}", f"bench-amqp-window-{suffix}"
    return {
        PUBLISH_EACH: _measure(publish_worker, PublishSpec(url, each_queue,
                                                           amounts.each_messages),
                               pid, check_alive),
        PUBLISH_WINDOW: _measure(publish_worker, PublishSpec(url, window_queue,
                                                             amounts.window_messages,
                                                             window=WINDOW),
                                 pid, check_alive),
        CONSUME: _measure(consume_worker, ConsumeSpec(url, window_queue,
                                                      amounts.window_messages),
                          pid, check_alive),
    }


def summarise(runs: Mapping[str, Sequence[Mapping[str, Mapping[str, Any]]]],
              failed: Mapping[str, str], skipped: Mapping[str, str]) -> list[dict[str, Any]]:
    """The workload's cases: per measurement, one per server (WeirMQ first).

    `runs[server]` holds one ``{measurement: figures}`` per completed round; `failed` and
    `skipped` give a server's error or reason to skip. A server that failed in any round
    is a failed case, even if other rounds completed: its figures would be a biased pick.
    """
    cases: list[dict[str, Any]] = []
    for measurement in MEASUREMENTS:
        medians: dict[str, float] = {}
        these: list[dict[str, Any]] = []
        for server in SERVERS:
            name = f"{measurement}: {server}"
            if server in skipped:
                these.append({"name": name, "skipped": skipped[server]})
                continue
            if server in failed or not runs.get(server):
                these.append({"name": name, "error": failed.get(server, "not measured")})
                continue
            figures = [r[measurement] for r in runs[server]]
            rates = [f["messages_per_s"] for f in figures]
            median = statistics.median_low(rates)
            medians[server] = median
            these.append({"name": name, "server": server, "measurement": measurement,
                          **figures[rates.index(median)], "messages_per_s_runs": rates})
        if WEIRMQ in medians and medians.get(RABBITMQ):
            these[SERVERS.index(WEIRMQ)]["ratio_to_rabbitmq"] = (
                medians[WEIRMQ] / medians[RABBITMQ])
        cases += these
    return cases
