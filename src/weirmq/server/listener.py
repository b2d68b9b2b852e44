"""The asyncio shell: TCP connections in, frames to the dispatcher, replies out in order.

Each connection is an `asyncio.BufferedProtocol`: the kernel writes straight into the
`FrameReader`'s memory, complete frames go to the broker's `Dispatcher`, and replies are
written in request order, which Kafka clients require (they match responses to requests
by position as much as by correlation id). A reply that is ready at once (most of them)
is written at once when nothing is ahead of it; one that must wait (acks=all, a fetch long
poll) becomes a task, and whatever is behind it waits in the queue until it finishes.
Requests are still handled as they arrive, so appends keep arrival order and many
acks=all produces from one connection share one fsync.

Every connection is bounded (each bound is a setting):

- a frame larger than `max_request_bytes`, or a frame that is not Kafka, closes this
  connection only;
- at `max_in_flight_requests` unanswered requests, reading pauses until one is answered;
- while the transport's write buffer is above its high-water mark (a client not reading
  its responses), reading pauses too, so a slow reader cannot make us buffer without end;
- a connection with nothing in flight and no bytes for `idle_timeout_ms` is closed.

While a large frame (a ~1 MB produce request) is arriving, the socket's receive low-water
mark (SO_RCVLOWAT) is set to the bytes it still lacks, so the loop wakes up once the
frame is there instead of once per TCP burst (about five times per 1 MB request on
loopback, measured). The kernel still wakes us early when its buffer or the receive
window runs short, and always for EOF and errors; after each read the mark is lowered to
what is still missing, and back to 1 when the frame is complete. Measured with 1 KB records
(1 MB requests): ~20% less broker CPU per GB produced. Linux only: its kernel caps the
mark and grows the receive buffer to fit it, so a mark can never outgrow what a socket
may hold.

`stop` is the orderly shutdown: stop accepting, stop reading, let the requests already
in flight finish (fetch long polls are woken by the broker), then close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from collections import deque
from typing import Any

from ..broker.dispatch import CloseConnection, Dispatcher, Reply
from ..broker.settings import Settings
from ..wire.framing import FrameError, FrameReader

log = logging.getLogger(__name__)

_IDLE_CHECK_MAX_S = 30.0
_JOIN_BYTES_MAX = 4096
"""Reply parts up to this size are joined to the size prefix and written as one buffer."""
_RCVLOWAT_MAX = 1024 * 1024
"""The highest receive low-water mark we ask for (the kernel grows the socket's receive
buffer to hold it)."""
LISTEN_BACKLOG = 128


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection; see the module docstring."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.reader = FrameReader(server.settings.max_request_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.peer_host = ""
        """As Kafka shows a client's host in group descriptions: "/127.0.0.1"."""
        self._queue: deque[Reply | asyncio.Task[Reply | None]] = deque()
        self._write_paused = False
        self._reading_paused = False
        self._closing = False
        self.last_activity = 0.0
        self._socket: Any = None  # for SO_RCVLOWAT; None where it cannot be set
        self._rcvlowat = 1

    # --- asyncio callbacks --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.peer_host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        self.last_activity = self.server.loop.time()
        if sys.platform == "linux":  # where the mark was measured, and bounded by the kernel
            self._socket = transport.get_extra_info("socket")
        self.server.connections.add(self)
        stats = self.server.dispatcher.broker.stats
        stats.connections_open += 1
        stats.connections_total += 1
        if self.server.stopping:
            self.close("broker is stopping")

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_activity = self.server.loop.time()
        try:
            frames = self.reader.buffer_updated(nbytes)
        except FrameError as exc:
            self.server.dispatcher.broker.stats.connections_closed_for_errors += 1
            self.close(str(exc))
            return
        for frame in frames:
            if self._closing:
                return
            self._on_frame(frame)
        self._update_reading()
        self._update_low_water()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self in self.server.connections:
            self.server.connections.discard(self)
            self.server.dispatcher.broker.stats.connections_open -= 1
        for item in self._queue:
            if isinstance(item, asyncio.Task):
                item.cancel()
        self._queue.clear()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # --- requests and replies -----------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def _on_frame(self, frame: bytes | memoryview) -> None:
        try:
            outcome = self.server.dispatcher.handle(frame, self.peer_host)
        except CloseConnection as exc:
            self.server.dispatcher.broker.stats.connections_closed_for_errors += 1
            self.close(str(exc))
            return
        except Exception:
            log.exception("request from %s failed; closing the connection", self.peer)
            self.close("internal error")
            return
        if outcome is None:
            return
        if isinstance(outcome, Reply):
            if not self._queue:
                self._write(outcome)
            else:
                self._queue.append(outcome)
            return
        # The dispatcher's awaitables are coroutines; anything else gets wrapped in one.
        coroutine = outcome if asyncio.iscoroutine(outcome) else _as_coroutine(outcome)
        task = self.server.loop.create_task(coroutine)
        self._queue.append(task)
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, _task: asyncio.Task[Reply | None]) -> None:
        if self._closing:
            return
        while self._queue:
            head = self._queue[0]
            if isinstance(head, asyncio.Task):
                if not head.done():
                    break
                self._queue.popleft()
                if head.cancelled():
                    self.close("request cancelled")
                    return
                error = head.exception()
                if error is not None:
                    log.error("request from %s failed; closing", self.peer, exc_info=error)
                    self.close("internal error")
                    return
                reply = head.result()
                if reply is not None:
                    self._write(reply)
            else:
                self._queue.popleft()
                self._write(head)
        self._update_reading()
        if self.server.stopping and not self._queue:
            self.server.drained.set()

    def _write(self, reply: Reply) -> None:
        assert self.transport is not None
        self.last_activity = self.server.loop.time()
        # With nothing buffered, every transport.write is a send() of its own: the size
        # prefix, then the body (and for a fetch, the fields before the records) would go
        # out as separate tiny segments. Small leading parts are joined to the prefix
        # (a copy of a few bytes); large ones, such as fetched records, are written as
        # they are. One send instead of two per Produce answer.
        body = reply.body
        head = reply.prefix
        joined = 0
        while joined < len(body) and len(body[joined]) <= _JOIN_BYTES_MAX:
            joined += 1
        if joined:
            head = b"".join((head, *body[:joined]))
        self.transport.write(head)
        for part in body[joined:]:
            self.transport.write(part)

    def _update_reading(self) -> None:
        if self.transport is None or self._closing:
            return
        should_pause = (
            self._write_paused
            or self.server.stopping
            or len(self._queue) >= self.server.settings.max_in_flight_requests
        )
        if should_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    def _update_low_water(self) -> None:
        """See the module docstring: wake when the rest of a large frame is there."""
        wanted = min(self.reader.missing_bytes, _RCVLOWAT_MAX) or 1
        if wanted == self._rcvlowat or self._socket is None:
            return
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, wanted)
        except (OSError, AttributeError):  # not supported here: read as data arrives
            self._socket = None
            return
        self._rcvlowat = wanted

    def close(self, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        log.info("closing connection from %s: %s", self.peer, reason)
        if self.transport is not None:
            self.transport.close()

    def stop_reading(self) -> None:
        self._update_reading()


async def _as_coroutine(awaitable: Any) -> Reply | None:
    result: Reply | None = await awaitable
    return result


class KafkaServer:
    """The listener and its connections."""

    def __init__(self, dispatcher: Dispatcher, settings: Settings) -> None:
        self.dispatcher = dispatcher
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.connections: set[KafkaConnection] = set()
        self.stopping = False
        self.drained = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; returns the bound address (the real port when `port` is 0)."""
        self._server = await self.loop.create_server(
            lambda: KafkaConnection(self),
            host,
            port,
            reuse_address=True,
            # asyncio accepts up to `backlog` connections per wake-up; Kafka's default
            # (socket.listen.backlog.size) is 50. A bounded burst bounds the memory that
            # clients connecting and leaving faster than we serve them can cost.
            backlog=LISTEN_BACKLOG,
            family=socket.AF_INET6 if ":" in host else socket.AF_INET,
        )
        bound = self._server.sockets[0].getsockname()
        self._idle_task = self.loop.create_task(self._close_idle())
        return bound[0], bound[1]

    async def _close_idle(self) -> None:
        idle_s = self.settings.idle_timeout_ms / 1000
        period = min(max(idle_s / 4, 0.05), _IDLE_CHECK_MAX_S)
        while True:
            await asyncio.sleep(period)
            now = self.loop.time()
            for connection in list(self.connections):
                if connection.in_flight == 0 and now - connection.last_activity > idle_s:
                    connection.close(f"idle for more than {self.settings.idle_timeout_ms} ms")

    async def stop(self, timeout_s: float) -> None:
        """Stop accepting, let in-flight requests finish (up to `timeout_s`), close all."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
        for connection in list(self.connections):
            connection.stop_reading()
        deadline = self.loop.time() + timeout_s
        while any(c.in_flight for c in self.connections):
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                log.warning("shutdown: requests still in flight after %.1f s", timeout_s)
                break
            self.drained.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.drained.wait(), min(remaining, 0.1))
        for connection in list(self.connections):
            connection.close("broker is stopping")
        if self._server is not None:
            await self._server.wait_closed()
