"""The connection pump: TCP connections in, frames to a protocol adapter, replies out in order.

This module knows no protocol. An adapter (`weirmq.protocols.contract.Adapter`) gives each
connection a `Framer`, which cuts the byte stream into frames, and a `Session`, which turns
each frame into a reply; the pump moves the bytes between them and the socket and enforces
the bounds. Kafka (`weirmq.server.listener`) is one adapter; AMQP 0-9-1 is the next.

Each connection is an `asyncio.BufferedProtocol`: the kernel writes straight into the
framer's memory, and complete frames go to the session one at a time. Replies are written
in the order of the frames they answer, which Kafka clients require (they match responses
to requests by position as much as by correlation id). A reply that is ready at once (most
of them) is due at once when nothing is ahead of it; one that must wait (acks=all, a
fetch long poll) becomes a task, and whatever is behind it waits in the queue until it
finishes. Frames are still handled as they arrive, so appends keep arrival order and many
acks=all produces from one connection share one fsync. What a session `send`s unasked (an
AMQP delivery) joins the same queue, behind every reply already due.

Writes are coalesced: replies that fall due during one read (a client pipelining
requests) are written together when the read's frames are handled, and replies released by
finished tasks (the acks=all produces one fsync answered, AMQP deliveries) are written
together once per turn of the event loop. A write is one buffer for everything up to
`_JOIN_BYTES_MAX` (copying tens of kilobytes costs less than the send() each extra part
would take); only larger parts, such as a megabyte of fetched records, go to the transport
as they are, uncopied. Each reply's time from its frame being read to its bytes being handed
to the socket is observed in the listener's `request_latency` histogram of its kind
(`Reply.kind`: Kafka's API): the broker's share of a client's latency.

Every connection is bounded (each bound is a setting):

- a frame larger than `max_request_bytes`, or one the adapter cannot understand
  (`CloseConnection`), closes this connection only; so does a bug in a session, logged;
- at `max_in_flight_requests` replies queued or awaited, reading pauses until one is
  written;
- a session may pause reading itself (`ConnectionHandle.pause_reading`: an AMQP publisher
  blocked by back-pressure) until it resumes it. Reading goes on only when no reason to
  pause remains: the session's, the in-flight bound, the write buffer, the request memory
  budget, a stop. Each is a condition looked at in one place (`_update_reading`), never a
  count of pauses and resumes that could drift;
- while the transport's write buffer is above its high-water mark (a client not reading
  what we write), reading pauses too, so a slow reader cannot make us buffer without end;
  a session that pushes frames on its own checks `write_paused` and is told when writing
  resumes;
- a connection with nothing in flight and no bytes in or out for the listener's idle
  timeout (`idle_timeout_ms`, unless the listener was given its own: AMQP's is off by
  default, its heartbeats find dead peers) is closed, at that moment: each read and each
  write notes the loop's time (one clock read per read, not per frame), and each
  connection has one timer, due when its last noted activity is a timeout old. A timer
  that finds the connection was active meanwhile is set again for the new moment, so a
  busy connection costs one timer per timeout, not one per read. Bytes of a large frame
  that the kernel holds for us while the receive low-water mark is raised (below) count as
  activity too: the timer asks the kernel how many bytes wait (FIONREAD), so a slow but
  live sender is not cut as idle. A peer that vanished without a FIN (a half-open
  connection) is found by TCP keepalive (`_KEEPALIVE_*`), and, with nothing in flight, by
  the idle timeout;
- a connection quiet for `BUFFER_RELEASE_IDLE_S` (the same test: nothing in flight, no
  bytes in or out) gives back the buffers its framer keeps for the frames to come
  (`Framer.release_buffers`; Kafka's reader keeps up to ~2 MiB: a scratch buffer and the
  last large frame's), so that connections which produced once and went quiet hold no
  frame memory. The same timer does it, so a quiet connection costs no CPU: while the
  framer holds buffers the timer is due a release period after the last activity, and
  once they are released, at the idle deadline; the first read after a release (which
  allocates anew) sets it for a release period again. A busy connection thus costs one
  timer per release period. Memory freed is not memory returned, though:
  `weirmq.server.run.tune_malloc` puts buffers of up to 64 MiB in glibc's heap, whose
  `free` gives back only the top of it, so the listener trims the heap (`malloc_trim`)
  once quiet connections have released `_TRIM_AFTER_BYTES`, or `_TRIM_DELAY_S` after a
  release: one trim for many connections, and none while nothing is released. Measured
  with 1,000 connections that each sent one ~1 MB Produce and went quiet: the broker's
  RSS grew by ~1 GiB before, by ~600 MiB with the buffers released but the heap not
  trimmed, by ~4 MiB with both, where 1,000 connections that never sent anything cost
  ~2.6 MiB (tests/integration/test_idle_connection_memory.py);
- the large frames being received, and the requests they become until answered, are
  held against one budget for the whole listener, `queued_max_request_bytes` (Kafka's
  `queued.max.request.bytes`; see `RequestMemory`). A connection that starts a large
  frame reserves the size its prefix claims; when that does not fit, it stops reading
  (the client's TCP window closes: back-pressure) and waits its turn, first come first
  served, until answers release memory. Reserving the whole claim up front, not the
  bytes as they come, means a frame that was let in can always be completed, so the
  connections holding the budget never wait on each other. A frame above the budget but
  within `max_request_bytes` gets in alone, when nothing else is held. Small frames
  (those the framer reads in bulk) are not counted: each connection bounds them with its
  scratch buffers and `max_in_flight_requests`;
- at most `max_connections` connections, and `max_connections_per_address` from one
  client address, are open; one more is accepted and closed at once (the client sees a
  clean close, not a hang in the backlog), with one warning per `_REFUSAL_LOG_PERIOD_S`
  at most, counting the refusals since the last one.

While a large frame (a ~1 MB produce request) is arriving, the socket's receive low-water
mark (SO_RCVLOWAT) is set to the bytes it still lacks (the framer's `missing_bytes`), so
the loop wakes up once the frame is there instead of once per TCP burst (about five times
per 1 MB request on loopback, measured). The kernel still wakes us early when its buffer or
the receive window runs short, and always for EOF and errors; after each read the mark is
lowered to what is still missing, and back to 1 when the frame is complete. Measured with
1 KB records (1 MB requests): ~20% less broker CPU per GB produced. Frames missing less
than `_RCVLOWAT_MIN` keep the mark at 1: two setsockopt calls would cost more than the
read or two they save. Linux only: its kernel caps the mark and grows the receive buffer
to fit it, so a mark can never outgrow what a socket may hold.

Closing comes in two kinds. `close` is at once: what is due but not yet handed to the
transport is dropped (the transport still writes what it was handed). `close_after_pending`
is for a protocol whose last words must arrive (AMQP's Connection.Close and CloseOk): no
more frames are read or handled, later `send`s are ignored, and the connection closes once
every reply due so far has been written, the reply to the frame being handled included
when it is called from `Session.handle`. The check runs where replies are written
(`_flush`) and where awaited ones finish, so it costs nothing per frame.

`Listener.stop` is the orderly shutdown: stop accepting, stop reading, let what is in
flight finish (fetch long polls are woken by the broker) for at most the shutdown timeout,
then close every connection. Time is read in one place, `Listener.now`.

A listener takes its bounds from the settings; a protocol whose needs differ gets its own
values from whoever builds its listener (`Listener`'s `idle_timeout_ms`), and listeners may
share one request memory budget (`memory`), so that `queued_max_request_bytes` bounds all
connections of the broker together, whatever their protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import math
import socket
import struct
import sys
import termios
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..broker.stats import RequestLatency
from ..protocols.contract import Adapter, CloseConnection, Frame, Framer, Outcome, Reply, Session
from ..settings import Settings

log = logging.getLogger(__name__)

_IDLE_TIMER_MIN_S = 0.001
"""An idle timer is never set closer than this (a clock that stands still cannot spin)."""
_KEEPALIVE_IDLE_S = 30
_KEEPALIVE_INTERVAL_S = 10
_KEEPALIVE_PROBES = 3
"""A peer silent for 30 s is probed; three unanswered probes 10 s apart close the
connection: a half-open connection is found within about a minute, even with a request in
flight."""
_REFUSAL_LOG_PERIOD_S = 10.0
"""Connections refused at a limit are logged at most once per this many seconds."""
_FIONREAD = struct.Struct("i")
_JOIN_BYTES_MAX = 64 * 1024
"""Reply parts up to this size are joined into the buffer written before them; larger ones
are written as they are (see the module docstring)."""
_RCVLOWAT_MAX = 1024 * 1024
"""The highest receive low-water mark we ask for (the kernel grows the socket's receive
buffer to hold it)."""
_RCVLOWAT_MIN = 128 * 1024
"""Below this many missing bytes the mark stays at 1: the rest of a smaller frame comes
in a read or two anyway, and raising the mark and lowering it again would cost two
setsockopt calls per frame."""
LISTEN_BACKLOG = 128
BUFFER_RELEASE_IDLE_S = 5.0
"""A connection quiet this long gives back the buffers its framer keeps for frames to come
(see the module docstring). Longer than the gaps of a client at work (a consumer's 3 s
heartbeat, a fetch's 0.5 s long poll, a producer's linger), so a busy connection keeps its
buffers and costs one idle timer per 5 s; short enough that memory comes back within
seconds of a client going quiet, not at the idle timeout (10 minutes). A client that
sends large frames less often pays for its buffer anew each time: ~1 ms for a 1 MB frame
once the heap was trimmed, against ~0.1 ms with the buffer kept (measured)."""
_TRIM_AFTER_BYTES = 32 * 1024 * 1024
_TRIM_DELAY_S = 1.0
"""Buffers released by quiet connections go back to the OS once this many bytes have been
released, or this long after the first of them: one trim for many connections, never
one per connection (see `Listener.buffers_released`). A trim pauses the loop for about
0.2 ms per MiB it returns: 0.5 to 14 ms, ~3 ms typically, measured while 1,000
connections went quiet one after another (each trim also walks the heap's free chunks)."""


class Histogram(Protocol):
    def observe(self, seconds: float) -> None: ...


class ConnectionStats(Protocol):
    """The counters a listener keeps (the broker's `BrokerStats` has them)."""

    connections_open: int
    connections_total: int
    """Accepted since start."""
    connections_closed_for_errors: int
    """Closed by `CloseConnection`: a frame that could not be answered."""
    connections_open_by_protocol: dict[str, int]
    """`connections_open` by the adapter's name."""

    def request_latency(self, protocol: str, kind: str) -> Histogram:
        """Seconds from a frame read to its reply handed to the socket, for one `kind` of
        reply (`Reply.kind`) of `protocol`."""
        ...


class ConnectionCounts:
    """`ConnectionStats` of a listener that reports to no one else."""

    __slots__ = (
        "_latency",
        "connections_closed_for_errors",
        "connections_open",
        "connections_open_by_protocol",
        "connections_total",
    )

    def __init__(self) -> None:
        self.connections_open = 0
        self.connections_total = 0
        self.connections_closed_for_errors = 0
        self.connections_open_by_protocol: dict[str, int] = {}
        self._latency = RequestLatency()

    def request_latency(self, protocol: str, kind: str) -> Histogram:
        return self._latency


class MemoryWaiter(Protocol):
    """A connection waiting for room in a `RequestMemory`."""

    @property
    def wanted_bytes(self) -> int: ...

    def memory_granted(self, nbytes: int) -> None:
        """`nbytes` (its `wanted_bytes`) are now reserved for it."""
        ...


class RequestMemory:
    """One budget of bytes for the large requests of every connection (see the module
    docstring): reserved whole when a frame starts, released when its request is answered.

    No I/O and no clock. A reservation is granted when it fits, or when nothing at all is
    held (so one frame larger than the budget still gets in, alone); otherwise the asker
    waits in a queue and is granted, in order, as releases make room. A later asker never
    jumps the queue: a large frame is not starved by a stream of smaller ones."""

    __slots__ = ("_waiters", "capacity_bytes", "used_bytes")

    def __init__(self, capacity_bytes: int) -> None:
        assert capacity_bytes > 0
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._waiters: deque[MemoryWaiter] = deque()

    @property
    def waiting(self) -> int:
        """Connections waiting for room."""
        return len(self._waiters)

    def reserve(self, waiter: MemoryWaiter, nbytes: int) -> bool:
        """Reserve `nbytes` now (True), or queue `waiter` for them (False): it is told by
        `memory_granted` later, or forgotten with `forget`."""
        assert nbytes > 0
        if not self._waiters and self._fits(nbytes):
            self.used_bytes += nbytes
            return True
        self._waiters.append(waiter)
        return False

    def release(self, nbytes: int) -> None:
        assert 0 <= nbytes <= self.used_bytes, (nbytes, self.used_bytes)
        self.used_bytes -= nbytes
        waiters = self._waiters
        while waiters and self._fits(wanted := waiters[0].wanted_bytes):
            waiter = waiters.popleft()
            self.used_bytes += wanted
            waiter.memory_granted(wanted)

    def forget(self, waiter: MemoryWaiter) -> None:
        """`waiter` no longer waits (its connection is gone)."""
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        self.release(0)  # it may have been the head, in the way of those behind it

    def _fits(self, nbytes: int) -> bool:
        return self.used_bytes == 0 or self.used_bytes + nbytes <= self.capacity_bytes


class Connection(asyncio.BufferedProtocol):
    """One client connection; see the module docstring. It is also the session's
    `ConnectionHandle`."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.framer: Framer = listener.adapter.new_framer(listener.settings.max_request_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.peer_host = ""
        self._session: Session | None = None
        # The session's bound `handle`, looked up once rather than per frame.
        self._handle: Callable[[Frame], Outcome] = _not_connected
        # Replies not yet due, each with the time its frame was read: a task (a reply that
        # waits) or a reply queued behind one.
        self._queue: deque[tuple[float, Reply | asyncio.Task[Reply | None]]] = deque()
        # Replies due, written together by `_flush` (see the module docstring).
        self._due: list[tuple[float, Reply]] = []
        self._flush_scheduled = False
        self._latency = listener.request_latency
        """The listener's histograms, by `Reply.kind`."""
        self._max_in_flight = listener.settings.max_in_flight_requests
        self._write_paused = False
        self._reading_paused = False
        self._session_paused = False  # the session asked (`pause_reading`)
        self._closing = False
        # Set by `close_after_pending`: the reason to close with once nothing is due.
        self._close_when_done: str | None = None
        self._admitted = False  # counted in the listener's limits (not refused)
        self._last_active = listener.now()  # the loop's time of the last read or write
        self._idle_timer: asyncio.TimerHandle | None = None
        # A new framer holds no buffer until the first read, which sets the timer for
        # their release (`_buffers_in_use`).
        self._buffers_released = True
        self._socket: Any = None  # for SO_RCVLOWAT; None where it cannot be set
        self._rcvlowat = 1
        self._kernel_queued = 0  # bytes the kernel held for us at the last idle check
        # The request memory budget (see `RequestMemory`): what this connection holds in
        # it, the reservation of the large frame being received, and the size of the one
        # it waits to reserve (0 when not waiting).
        self._held_bytes = 0
        self._partial_bytes = 0
        self._wanted_bytes = 0

    # --- asyncio callbacks --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer, self.peer_host = f"{peer[0]}:{peer[1]}", str(peer[0])
        else:
            self.peer = str(peer)
        if sys.platform == "linux":  # where the mark was measured, and bounded by the kernel
            self._socket = transport.get_extra_info("socket")
        listener = self.listener
        refusal = listener.admit(self.peer_host)
        if refusal is not None:
            listener.refused(self.peer, refusal)
            self._closing = True
            transport.close()
            return
        self._admitted = True
        listener.connections.add(self)
        stats = listener.stats
        stats.connections_open += 1
        stats.connections_total += 1
        by_protocol = stats.connections_open_by_protocol
        by_protocol[listener.adapter.name] = by_protocol.get(listener.adapter.name, 0) + 1
        _keep_alive(transport)
        self._set_idle_timer(self._last_active)
        try:
            self._session = listener.adapter.new_session(self)
        except Exception:
            log.exception("no %s session for %s; closing", listener.adapter.name, self.peer)
            self.close("internal error")
            return
        self._handle = self._session.handle
        if listener.stopping:
            self.close("broker is stopping")

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.framer.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = self.listener.now()
        self._kernel_queued = 0  # what it held is read: count afresh (`check_idle`)
        if self._buffers_released:
            self._buffers_in_use()
        try:
            frames = self.framer.buffer_updated(nbytes)
        except CloseConnection as exc:
            self._close_for_error(str(exc))
            return
        if frames:
            read_at = time.perf_counter()
            # A large frame being received was reserved for; now complete, it is the
            # first frame out, and its reservation stays until its request is answered.
            held, self._partial_bytes = self._partial_bytes, 0
            for frame in frames:
                if self._closing:
                    return
                if self._close_when_done is not None:
                    break  # nothing after the last words is handled
                self._on_frame(frame, read_at, held)
                held = 0
            if self._due:
                self._flush()
        if not self._closing:
            self._reserve_partial()
        self._update_reading()
        self._update_low_water()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        listener = self.listener
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if not self._admitted:
            return
        self._admitted = False
        listener.connections.discard(self)
        listener.stats.connections_open -= 1
        listener.stats.connections_open_by_protocol[listener.adapter.name] -= 1
        listener.left(self.peer_host)
        if self._wanted_bytes:
            self._wanted_bytes = 0
            listener.memory.forget(self)
        held, self._held_bytes, self._partial_bytes = self._held_bytes, 0, 0
        if held:
            listener.memory.release(held)
        for _, item in self._queue:
            if isinstance(item, asyncio.Task):
                # A finished task is left as it is, but cancel() still marks its
                # exception as retrieved: the loop never reports it.
                item.cancel()
        self._queue.clear()
        self._due.clear()
        session, self._session = self._session, None
        if session is not None:
            self._notify(session.closed)
        if listener.stopping:
            listener.drained.set()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        if self._session is not None and not self._closing:
            self._notify(self._session.writing_resumed)

    # --- the session's handle (`ConnectionHandle`) --------------------------------------

    @property
    def write_paused(self) -> bool:
        return self._write_paused

    def send(self, reply: Reply) -> None:
        """Write `reply` after everything already due; see `ConnectionHandle.send`."""
        if self._closing or self._close_when_done is not None:
            return
        now = time.perf_counter()
        if self._queue:
            self._queue.append((now, reply))
            self._update_reading()
        else:
            self._due.append((now, reply))
            self._flush_soon()

    def close(self, reason: str) -> None:
        """Close now; see `ConnectionHandle.close`."""
        if self._closing:
            return
        self._closing = True
        log.info("closing %s connection from %s: %s", self.listener.adapter.name, self.peer, reason)
        if self.transport is not None:
            self.transport.close()

    def close_after_pending(self, reason: str) -> None:
        """Close once every reply due so far is written; see the module docstring."""
        if self._closing or self._close_when_done is not None:
            return
        self._close_when_done = reason
        self._update_reading()
        # Never at once: called from `Session.handle`, the reply it returns is not queued
        # yet. `_flush` writes what is due, then closes if nothing is left.
        self._flush_soon()

    def pause_reading(self) -> None:
        """Stop reading from the socket until `resume_reading` (the session's own reason;
        see the module docstring). Idempotent."""
        self._session_paused = True
        self._update_reading()

    def resume_reading(self) -> None:
        """Read again, unless another reason to pause remains. Idempotent."""
        self._session_paused = False
        self._update_reading()

    def _close_if_done(self) -> None:
        """`close_after_pending`'s close, once nothing is queued, awaited or due."""
        reason = self._close_when_done
        if reason is not None and not self._queue and not self._due and not self._closing:
            self.close(reason)

    # --- frames and replies -------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Replies queued, awaited or due."""
        return len(self._queue) + len(self._due)

    def _on_frame(self, frame: Frame, read_at: float, held_bytes: int) -> None:
        """Handle one frame; `held_bytes` of the request memory budget are its own, to be
        released once it is answered (connection_lost releases whatever is left)."""
        try:
            outcome = self._handle(frame)
        except CloseConnection as exc:
            self._close_for_error(str(exc))
            return
        except Exception:
            log.exception("request from %s failed; closing the connection", self.peer)
            self.close("internal error")
            return
        if held_bytes and not isinstance(outcome, Awaitable):
            self._release(held_bytes)  # answered (or needs no answer): the frame is done
            held_bytes = 0
        if outcome is None:
            return
        if isinstance(outcome, Reply):
            if not self._queue:
                self._due.append((read_at, outcome))
            else:
                self._queue.append((read_at, outcome))
            return
        # Sessions' awaitables are coroutines; anything else gets wrapped in one.
        coroutine = outcome if asyncio.iscoroutine(outcome) else _as_coroutine(outcome)
        task = self.listener.loop.create_task(coroutine)
        self._queue.append((read_at, task))
        if held_bytes:
            task.add_done_callback(lambda _task: self._release(held_bytes))
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, _task: asyncio.Task[Reply | None]) -> None:
        if self._closing:  # connection_lost cancels what is left
            return
        queue, due = self._queue, self._due
        while queue:
            read_at, head = queue[0]
            if not isinstance(head, asyncio.Task):
                queue.popleft()
                due.append((read_at, head))
                continue
            if not head.done():
                break
            queue.popleft()
            if head.cancelled():
                self.close("request cancelled")
                return
            error = head.exception()
            if error is not None:
                self._close_for_failed_task(error)
                return
            reply = head.result()
            if reply is not None:
                due.append((read_at, reply))
        if due:
            self._flush_soon()
        else:
            self._update_reading()
            self._close_if_done()
        if self.listener.stopping and not queue and not due:
            self.listener.drained.set()

    def _flush_soon(self) -> None:
        """Write what is due at the end of this turn of the loop, together with whatever
        else falls due in it (the other produces one fsync answered)."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.listener.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Write every due reply, in order, in as few writes as the parts allow."""
        self._flush_scheduled = False
        due = self._due
        if not due or self._closing or self.transport is None:
            due.clear()
            self._close_if_done()
            return
        self._due = []
        self._last_active = self.listener.now()
        write = self.transport.write
        pending: list[bytes | memoryview] = []  # small parts, joined into one write
        for _, reply in due:
            pending.append(reply.prefix)
            for part in reply.body:
                if len(part) <= _JOIN_BYTES_MAX:
                    pending.append(part)
                    continue
                write(b"".join(pending))
                pending.clear()
                write(part)
        if pending:
            write(b"".join(pending))
        written_at = time.perf_counter()
        latency = self._latency
        for read_at, reply in due:
            histogram = latency.get(reply.kind)
            if histogram is None:
                histogram = self.listener.latency_for(reply.kind)
            histogram.observe(written_at - read_at)
        self._update_reading()
        if self.listener.stopping and not self._queue:
            self.listener.drained.set()
        self._close_if_done()

    # --- bounds -------------------------------------------------------------------------

    def _update_reading(self) -> None:
        if self.transport is None or self._closing:
            return
        should_pause = (
            self._write_paused
            or self._session_paused
            or self._close_when_done is not None
            or self.listener.stopping
            or self._wanted_bytes > 0
            or len(self._queue) + len(self._due) >= self._max_in_flight
        )
        if should_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    def _update_low_water(self) -> None:
        """See the module docstring: wake when the rest of a large frame is there."""
        if self._socket is None:
            return
        missing = self.framer.missing_bytes
        wanted = min(missing, _RCVLOWAT_MAX) if missing >= _RCVLOWAT_MIN else 1
        if wanted == self._rcvlowat:
            return
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, wanted)
        except (OSError, AttributeError):  # not supported here: read as data arrives
            self._socket = None
            return
        self._rcvlowat = wanted

    # --- the request memory budget --------------------------------------------------------

    @property
    def wanted_bytes(self) -> int:
        """What this connection waits to reserve (`MemoryWaiter`)."""
        return self._wanted_bytes

    @property
    def held_bytes(self) -> int:
        """What this connection holds of the listener's request memory."""
        return self._held_bytes

    def memory_granted(self, nbytes: int) -> None:
        """The large frame this connection waited for may come in (`MemoryWaiter`)."""
        assert nbytes == self._wanted_bytes and not self._partial_bytes
        self._wanted_bytes = 0
        self._partial_bytes = nbytes
        self._held_bytes += nbytes
        self._update_reading()
        self._update_low_water()

    def _reserve_partial(self) -> None:
        """Reserve the whole of a large frame that has just started, or wait for room."""
        missing = self.framer.missing_bytes
        if not missing or self._partial_bytes or self._wanted_bytes:
            return
        size = missing + self.framer.buffered_bytes  # what came of the frame so far
        if self.listener.memory.reserve(self, size):
            self._partial_bytes = size
            self._held_bytes += size
        else:
            self._wanted_bytes = size  # reading pauses (`_update_reading`) until granted

    def _release(self, nbytes: int) -> None:
        if not self._admitted:  # gone: connection_lost released everything
            return
        assert 0 < nbytes <= self._held_bytes
        self._held_bytes -= nbytes
        self.listener.memory.release(nbytes)

    # --- idleness ---------------------------------------------------------------------------

    def _idle_due(self) -> None:
        """This connection's idle timer (see the module docstring)."""
        self._idle_timer = None
        if self._closing:
            return
        listener = self.listener
        now_s = listener.now()
        self.check_idle(now_s, listener.idle_timeout_ms)
        if not self._closing:
            self._set_idle_timer(now_s)

    def check_idle(self, now_s: float, idle_timeout_ms: int) -> None:
        """Close this connection if it has been idle for `idle_timeout_ms` (0: never) at
        `now_s`, or release its framer's buffers if quiet for `BUFFER_RELEASE_IDLE_S`; a
        request in flight, a wait for request memory or a pause its session asked for (we
        keep it from sending) or bytes the kernel received for it since the last look make
        it active now."""
        if (
            self._queue
            or self._due
            or self._wanted_bytes
            or self._session_paused
            or self._kernel_received_more()
        ):
            self._last_active = now_s
            return
        quiet_s = now_s - self._last_active
        if idle_timeout_ms and quiet_s * 1000 >= idle_timeout_ms:
            self.close(f"idle for {idle_timeout_ms} ms")
        elif quiet_s >= BUFFER_RELEASE_IDLE_S and not self._buffers_released:
            self._buffers_released = True
            self.listener.buffers_released(self.framer.release_buffers())

    def _buffers_in_use(self) -> None:
        """The first read since the framer's buffers were released (or ever): it allocates
        them, and the idle timer, set for the idle deadline, must come sooner to release
        them again."""
        self._buffers_released = False
        if not self._admitted or self._closing:
            return
        self._set_idle_timer(self._last_active)  # `_last_active` is now

    def _set_idle_timer(self, now_s: float) -> None:
        """Set the idle timer for `_idle_check_due`, replacing any; none when nothing is
        ever due (no idle timeout, and the framer's buffers already released)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        due_s = self._idle_check_due
        if due_s != math.inf:
            self._idle_timer = self.listener.call_later(due_s - now_s, self._idle_due)

    @property
    def _idle_check_due(self) -> float:
        """When the idle timer should next look: the release of the framer's buffers while
        it may hold some, else the idle deadline."""
        if self._buffers_released:
            return self.idle_deadline
        return min(self.idle_deadline, self._last_active + BUFFER_RELEASE_IDLE_S)

    @property
    def idle_deadline(self) -> float:
        """When this connection is idle for the listener's idle timeout, unless it is
        active first (the listener's clock); infinity without an idle timeout."""
        return self._last_active + self.listener.idle_timeout_s

    def _kernel_received_more(self) -> bool:
        """While the receive low-water mark is raised, bytes arrive without waking us:
        has the kernel received more since the last look?"""
        if self._rcvlowat <= 1 or self._socket is None:
            return False
        try:
            raw = fcntl.ioctl(self._socket.fileno(), termios.FIONREAD, bytes(_FIONREAD.size))
        except (OSError, ValueError):
            return False
        queued = int(_FIONREAD.unpack(raw)[0])
        more = queued != self._kernel_queued
        self._kernel_queued = queued
        return more

    def stop_reading(self) -> None:
        """Pause reading for good: the listener is stopping."""
        self._update_reading()

    # --- closing ------------------------------------------------------------------------

    def _close_for_error(self, reason: str) -> None:
        self.listener.stats.connections_closed_for_errors += 1
        self.close(reason)

    def _close_for_failed_task(self, error: BaseException) -> None:
        if isinstance(error, CloseConnection):
            self._close_for_error(str(error))
            return
        log.error("request from %s failed; closing", self.peer, exc_info=error)
        self.close("internal error")

    def _notify(self, callback: Callable[[], None]) -> None:
        """Tell the session something; a session that fails there is closed, the loop
        never sees the exception."""
        try:
            callback()
        except Exception:
            log.exception("%s session of %s failed; closing", self.listener.adapter.name, self.peer)
            self.close("internal error")


def _load_malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        # The symbols the interpreter was linked with, libc's among them (as in
        # `weirmq.server.run.tune_malloc`).
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def _not_connected(_frame: Frame) -> Outcome:
    raise AssertionError("a frame before connection_made")


async def _as_coroutine(awaitable: Any) -> Reply | None:
    result: Reply | None = await awaitable
    return result


def _keep_alive(transport: asyncio.Transport) -> None:
    """TCP keepalive on an accepted socket, so that a half-open connection is found (see
    `_KEEPALIVE_IDLE_S`); skipped where the socket or an option is not there."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (
        ("TCP_KEEPIDLE", _KEEPALIVE_IDLE_S),
        ("TCP_KEEPINTVL", _KEEPALIVE_INTERVAL_S),
        ("TCP_KEEPCNT", _KEEPALIVE_PROBES),
    ):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    with contextlib.suppress(OSError, AttributeError):
        for level, option, value in options:
            sock.setsockopt(level, option, value)


class Listener:
    """A TCP listener for one protocol adapter, and its connections."""

    def __init__(
        self,
        adapter: Adapter,
        settings: Settings,
        stats: ConnectionStats | None = None,
        *,
        idle_timeout_ms: int | None = None,
        memory: RequestMemory | None = None,
    ) -> None:
        """`idle_timeout_ms` replaces the setting of that name for this listener's
        connections (0: no idle timeout); `memory` is a budget shared with other
        listeners, instead of one of `queued_max_request_bytes` of its own."""
        assert idle_timeout_ms is None or idle_timeout_ms >= 0, idle_timeout_ms
        self.adapter = adapter
        self.settings = settings
        self.stats: ConnectionStats = stats if stats is not None else ConnectionCounts()
        self.loop = asyncio.get_running_loop()
        self.connections: set[Connection] = set()
        self.stopping = False
        self.drained = asyncio.Event()
        """Set when a connection's last reply is written (or it is lost) while stopping."""
        self._server: asyncio.Server | None = None
        self.request_latency: dict[str, Histogram] = {}
        """Frame read to reply written, by `Reply.kind`, for every connection."""
        self.idle_timeout_ms = (
            settings.idle_timeout_ms if idle_timeout_ms is None else idle_timeout_ms
        )
        """Connections quiet this long are closed; 0: never."""
        self.idle_timeout_s = self.idle_timeout_ms / 1000 if self.idle_timeout_ms else math.inf
        self.memory = (
            memory if memory is not None else RequestMemory(settings.queued_max_request_bytes)
        )
        """Large requests being received or in flight, all connections together."""
        self.connections_by_address: dict[str, int] = {}
        """Open connections per client host (for `max_connections_per_address`)."""
        self.connections_refused = 0
        """Connections closed at once since start: a connection limit was reached."""
        self._refused_unlogged = 0
        self._refusal_log_at = float("-inf")
        self._untrimmed_bytes = 0
        """Released by quiet connections' framers since the last trim."""
        self._trim: asyncio.Handle | None = None
        self._trim_soon = False  # `_trim` is due this turn of the loop, not after a delay

    def latency_for(self, kind: str) -> Histogram:
        histogram = self.request_latency[kind] = self.stats.request_latency(self.adapter.name, kind)
        return histogram

    def now(self) -> float:
        """Seconds on the loop's monotonic clock. The pump reads time only here (idle
        sweeps, the shutdown deadline), so an injected clock replaces this one method."""
        return self.loop.time()

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        """Run `callback` `delay_s` seconds from `now` (an idle timer)."""
        return self.loop.call_later(max(delay_s, _IDLE_TIMER_MIN_S), callback)

    def new_connection(self) -> Connection:
        return Connection(self)

    def buffers_released(self, nbytes: int) -> None:
        """A quiet connection's framer dropped `nbytes` of buffers: hand the memory back
        to the OS once `_TRIM_AFTER_BYTES` have been released, or `_TRIM_DELAY_S` after
        this, whichever comes first, together with what others release meanwhile."""
        if nbytes <= 0:
            return
        self._untrimmed_bytes += nbytes
        soon = self._untrimmed_bytes >= _TRIM_AFTER_BYTES
        if self._trim is not None:
            if self._trim_soon or not soon:
                return
            self._trim.cancel()
        self._trim_soon = soon
        if soon:
            self._trim = self.loop.call_soon(self._trim_due)
        else:
            self._trim = self.call_later(_TRIM_DELAY_S, self._trim_due)

    def _trim_due(self) -> None:
        self._trim = None
        self._untrimmed_bytes = 0
        self.trim_heap()

    def trim_heap(self) -> None:
        """Hand the free pages of the C heap back to the OS (see the module docstring;
        a test replaces this)."""
        if _MALLOC_TRIM is not None:
            _MALLOC_TRIM(0)

    def admit(self, host: str) -> str | None:
        """Count a new connection from `host` in, or say which limit refuses it."""
        settings = self.settings
        if len(self.connections) >= settings.max_connections:
            return f"{len(self.connections)} connections open (max_connections)"
        from_host = self.connections_by_address.get(host, 0)
        if from_host >= settings.max_connections_per_address:
            return f"{from_host} connections open from {host} (max_connections_per_address)"
        self.connections_by_address[host] = from_host + 1
        return None

    def left(self, host: str) -> None:
        """An admitted connection from `host` is gone."""
        remaining = self.connections_by_address[host] - 1
        if remaining:
            self.connections_by_address[host] = remaining
        else:
            del self.connections_by_address[host]

    def refused(self, peer: str, reason: str) -> None:
        """Count a refused connection; log it, or leave it for the next line (at most one
        per `_REFUSAL_LOG_PERIOD_S`: a client reconnecting in a loop cannot flood the log)."""
        self.connections_refused += 1
        self._refused_unlogged += 1
        now_s = self.now()
        if now_s - self._refusal_log_at < _REFUSAL_LOG_PERIOD_S:
            return
        log.warning(
            "refusing %s connections: %s; closed at once the one from %s "
            "(%d refused since the last such line)",
            self.adapter.name,
            reason,
            peer,
            self._refused_unlogged,
        )
        self._refused_unlogged = 0
        self._refusal_log_at = now_s

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; returns the bound address (the real port when `port` is 0)."""
        self._server = await self.loop.create_server(
            self.new_connection,
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
        return bound[0], bound[1]

    def close_idle(self) -> None:
        """Look at every connection now, as its idle timer would (for tests)."""
        now_s = self.now()
        idle_timeout_ms = self.idle_timeout_ms
        for connection in list(self.connections):
            connection.check_idle(now_s, idle_timeout_ms)

    async def stop(self, timeout_s: float | None = None) -> None:
        """Stop accepting, let what is in flight finish (up to `timeout_s`, by default the
        `shutdown_timeout_ms` setting), close every connection."""
        if timeout_s is None:
            timeout_s = self.settings.shutdown_timeout_ms / 1000
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.stop_reading()
        deadline = self.now() + timeout_s
        while any(c.in_flight for c in self.connections):
            remaining = deadline - self.now()
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
