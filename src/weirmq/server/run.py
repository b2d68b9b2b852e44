"""Running a broker: start, announce, serve until a signal, stop in order.

Start-up opens the data directory (recovering logs after a crash), binds the listener and
every service, and only then prints the one line that says where it accepts connections,
so whoever waits for that line (a test, a supervisor) can connect the moment it appears,
and knows that the start can no longer fail. A start that fails says why in one line
(`weirmq.server.startup`: a damaged state file, an address in use, named with its
setting).

Services (the HTTP admin API, later the web console) start after the Kafka listener, each
announcing its own line after the Kafka line: a service's imports never delay it
(``weirmq serve`` opens the admin port at once and imports aiohttp and
prometheus_client, ~16 MB and ~0.15 s, only on its first connection: see
`weirmq.admin.deferred`). `server/` knows services only by the `Service` protocol; whoever
runs the broker (the CLI, `weirmq.testing`) builds them. What start-up costs, and what is
loaded later on first use, is in docs/architecture.md ("Start-up and memory").

SIGTERM and SIGINT start the orderly stop: stop accepting, finish the requests in flight
(at most `shutdown_timeout_ms`), flush every log, write the checkpoints and producer
snapshots, mark the shutdown clean. Retention and time-based segment rolls run every
`housekeeping_interval_ms` on the loop.

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
from .listener import KafkaServer
from .startup import listener_error, open_broker

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


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
        lines = [f"weirmq: accepting Kafka connections on {address}"]
        for service in services:
            started.append(service)
            line = await service.start(broker)
            if line:
                lines.append(line)
        housekeeping = loop.create_task(_housekeeping(broker, settings, server))
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
        if server is not None:
            await server.stop(settings.shutdown_timeout_ms / 1000)
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


def _print_line(line: str) -> None:
    print(line, flush=True)
    sys.stdout.flush()


async def _housekeeping(broker: Broker, settings: Settings, server: KafkaServer) -> None:
    """Retention and the like every `housekeeping_interval_ms`; the guarded resources
    (free disk, request memory, opted-in topics' backlogs) every `RESOURCE_SAMPLE_MS`."""
    sample_s = RESOURCE_SAMPLE_MS / 1000
    due = settings.housekeeping_interval_ms / 1000
    while True:
        await asyncio.sleep(sample_s)
        try:
            broker.resources.sample(server.memory.used_bytes)
            broker.backlog.sample()
        except Exception:
            log.exception("sampling the guarded resources failed")
        due -= sample_s
        if due > 0:
            continue
        due = settings.housekeeping_interval_ms / 1000
        try:
            broker.housekeeping()
        except Exception:
            log.exception("housekeeping failed")


