"""Running a broker: start, announce, serve until a signal, stop in order.

Start-up opens the data directory (recovering logs after a crash), binds the listeners and
every service, and only then prints the lines that say where it accepts connections, so
whoever waits for them (a test, a supervisor) can connect the moment they appear, and
knows that the start can no longer fail. A start that fails says why in one line
(`weirmq.server.startup`: a damaged state file, an address in use, named with its
setting).

The AMQP 0-9-1 listener (`amqp_listen`, unless "off") is bound right after the Kafka one,
so that a port clash fails the start before any service has started, and named with its
setting like the Kafka one. Its line, "weirmq: accepting AMQP connections on HOST:PORT",
is announced after the Kafka line and the services' lines: those keep the places scripts
already read them at (the admin line right after the Kafka one).
The two listeners share one request memory budget (`queued_max_request_bytes` bounds all
connections together), which the resource sampler measures.

Services (the HTTP admin API, later the web console) start after the listeners, each
announcing its own line after the Kafka line: a service's imports never delay it
(``weirmq serve`` opens the admin port at once and imports aiohttp and
prometheus_client, ~16 MB and ~0.15 s, only on its first connection: see
`weirmq.admin.deferred`). `server/` knows services only by the `Service` protocol; whoever
runs the broker (the CLI, `weirmq.testing`) builds them. What start-up costs, and what is
loaded later on first use, is in docs/architecture.md ("Start-up and memory").

SIGTERM and SIGINT start the orderly stop: every AMQP client is sent Connection.Close 320
CONNECTION_FORCED (RabbitMQ's words for a broker going away: clients reconnect), then both
listeners stop together: stop accepting, finish the requests in flight (at most
`shutdown_timeout_ms`, for both at once), close the connections after what is due is
written; then flush every log, write the checkpoints and producer snapshots, mark the
shutdown clean.

Back-pressure reaches AMQP clients from the resource sampler: when free disk falls below
`disk_free_min_bytes` the broker refuses publishes (`ResourceGuard.publish_refusal`), and
`PublishBlock` tells the AMQP adapter on each change into or out of that state, once
(Connection.Blocked / Unblocked to the clients that asked for them).

Retention and time-based segment rolls run every `housekeeping_interval_ms` on the loop.

glibc hands every allocation of 256 KiB or more to mmap and faults it in page by page;
large frames and fetch responses are allocated all the time, so at start we raise the
mmap and trim thresholds (measured: 2-6x less CPU per large frame on these machines).
It costs an idle broker nothing: RSS with one client connected was the same, within
0.1 MB, with and without it (measured). Memory freed after large frames is kept for the
next ones, up to the trim threshold, by design; once connections go quiet and give their
buffers back, the listener trims the heap itself (`Listener.trim_heap`, server/connection.py),
so that quiet connections do not keep it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from ..broker.core import Broker
from ..broker.resources import RESOURCE_SAMPLE_MS
from ..protocols.kafka.dispatch import Dispatcher
from ..settings import Settings, parse_host_port
from .connection import Listener
from .listener import AmqpServer, KafkaServer
from .startup import listener_error, open_broker

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

KAFKA_ANNOUNCEMENT = "weirmq: accepting Kafka connections on "
AMQP_ANNOUNCEMENT = "weirmq: accepting AMQP connections on "
"""The start of the lines that say where each listener accepts (then HOST:PORT)."""


def tune_malloc() -> None:
    """See the module docstring; a no-op where glibc's mallopt is not available."""
    try:
        # The symbols the interpreter was linked with, libc's among them: no search for
        # the library (ctypes.util.find_library runs ldconfig in a subprocess).
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 256 * 1024 * 1024)
    except (OSError, AttributeError):
        pass


class FlowSignal(Protocol):
    """Whoever tells clients that publishes are blocked (`AmqpAdapter.flow`)."""

    def flow(self, blocked: bool, reason: str = "") -> None: ...


class PublishBlock:
    """Turns the broker's publish refusal into a flow signal, on changes only.

    `update` is given the refusal after each resource sample (None: publishes are
    accepted); the signal is told when the state changes, never again while it holds, so a
    client hears Connection.Blocked once per episode however long it lasts."""

    __slots__ = ("_blocked", "_signal")

    def __init__(self, signal: FlowSignal) -> None:
        self._signal = signal
        self._blocked = False

    @property
    def blocked(self) -> bool:
        return self._blocked

    def update(self, refusal: str | None) -> None:
        blocked = refusal is not None
        if blocked == self._blocked:
            return
        self._blocked = blocked
        if refusal is not None:
            # RabbitMQ's clients show the reason as it is; its own are "low on disk" and
            # "low on memory", so ours starts the same way and then says which bound.
            self._signal.flow(True, f"low on disk: {refusal}")
        else:
            self._signal.flow(False)


class Service(Protocol):
    """Something that runs beside the Kafka listener, on the same loop and broker."""

    async def start(self, broker: Broker) -> str | None:
        """Start serving; returns a line to announce (where it listens), or None."""
        ...

    async def stop(self) -> None:
        """Stop serving; called before the broker closes, also after a failed start."""
        ...


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve(
    settings: Settings,
    *,
    announce: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    services: Sequence[Service] = (),
    ready: Callable[[Broker], None] | None = None,
) -> None:
    """Run a broker until `stop` is set or SIGTERM/SIGINT arrives.

    `ready` is called with the broker once the listener and every service are up."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    announce = announce or _print_line
    broker = open_broker(settings)
    started: list[Service] = []
    server: KafkaServer | None = None
    amqp: AmqpServer | None = None
    housekeeping: asyncio.Task[None] | None = None
    try:
        server = KafkaServer(Dispatcher(broker), settings)
        host, port = parse_host_port(settings.listen)
        try:
            bound_host, bound_port = await server.start(host, port)
        except OSError as exc:
            raise listener_error("Kafka listener", settings.listen, "listen", exc) from exc
        broker.advertised = (
            parse_host_port(settings.advertise) if settings.advertise else (bound_host, bound_port)
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
        address = format_address(bound_host, bound_port)
        lines = [KAFKA_ANNOUNCEMENT + address]
        amqp_line: str | None = None
        if settings.amqp_listen is not None:
            amqp = AmqpServer(broker, settings, broker.timers, memory=server.memory)
            amqp_line = await _start_amqp(amqp, settings.amqp_listen)
        for service in services:
            started.append(service)
            line = await service.start(broker)
            if line:
                lines.append(line)
        if amqp_line is not None:  # after the services' lines: see the module docstring
            lines.append(amqp_line)
        housekeeping = loop.create_task(_housekeeping(broker, settings, server, amqp))
        for line in lines:  # only now: nothing after this can fail the start
            announce(line)
        if ready is not None:
            ready(broker)
        await stop.wait()
        log.info("stopping")
    finally:
        if housekeeping is not None:
            housekeeping.cancel()
        broker.closing = True
        broker.wake_all()
        await _stop_listeners(server, amqp, settings.shutdown_timeout_ms / 1000)
        for service in reversed(started):
            try:
                await service.stop()
            except Exception:
                log.exception("stopping %r failed", service)
        broker.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)
    log.info("stopped cleanly")


async def _start_amqp(amqp: AmqpServer, listen: str) -> str:
    """Bind the AMQP listener; returns its announcement line."""
    host, port = parse_host_port(listen)
    try:
        bound_host, bound_port = await amqp.start(host, port)
    except OSError as exc:
        raise listener_error("AMQP listener", listen, "amqp_listen", exc) from exc
    return AMQP_ANNOUNCEMENT + format_address(bound_host, bound_port)


async def _stop_listeners(
    kafka: KafkaServer | None, amqp: AmqpServer | None, timeout_s: float
) -> None:
    """The listeners' orderly stop (see the module docstring), both within `timeout_s`."""
    if amqp is not None:
        try:
            amqp.amqp.shutdown()  # each Close joins its connection's replies, written first
        except Exception:
            log.exception("closing the AMQP connections failed")
    listeners: list[Listener] = [lst for lst in (kafka, amqp) if lst is not None]
    results = await asyncio.gather(
        *(listener.stop(timeout_s) for listener in listeners), return_exceptions=True
    )
    for listener, result in zip(listeners, results, strict=True):
        if isinstance(result, BaseException):
            log.error("stopping the %s listener failed", listener.adapter.name, exc_info=result)


def _print_line(line: str) -> None:
    print(line, flush=True)
    sys.stdout.flush()


async def _housekeeping(
    broker: Broker, settings: Settings, server: KafkaServer, amqp: AmqpServer | None
) -> None:
    """Retention and the like every `housekeeping_interval_ms`; the guarded resources
    (free disk, request memory, opted-in topics' backlogs) every `RESOURCE_SAMPLE_MS`, and
    after each sample the AMQP clients told of a change in the publish refusal."""
    sample_s = RESOURCE_SAMPLE_MS / 1000
    due = settings.housekeeping_interval_ms / 1000
    block = PublishBlock(amqp.amqp) if amqp is not None else None
    assert amqp is None or amqp.memory is server.memory, "one budget, measured once"
    # The transaction coordinator's timer, at once: it completes the transaction ends a
    # crash interrupted, and aborts those that time out (broker/txn_service.py).
    broker.txns.poke()
    while True:
        await asyncio.sleep(sample_s)
        try:
            # One budget for both listeners' connections (`serve`), so one measurement.
            broker.resources.sample(server.memory.used_bytes)
            broker.backlog.sample()
            if block is not None:
                block.update(broker.resources.publish_refusal)
        except Exception:
            log.exception("sampling the guarded resources failed")
        due -= sample_s
        if due > 0:
            continue
        due = settings.housekeeping_interval_ms / 1000
        try:
            if amqp is not None:
                amqp.amqp.housekeeping()  # first: it moves queues' log starts for retention
            broker.housekeeping()
        except Exception:
            log.exception("housekeeping failed")
