"""The connection pump without sockets: a fake transport, a line framer, a scripted session.

Each test drives `Connection` the way asyncio does (`connection_made`, `get_buffer` and
`buffer_updated`, `pause_writing`, `connection_lost`) and looks at what reached the
transport. Frames are lines; a line is a command to the scripted session:

    now:X    answered at once with X        wait:X   answered with X once `release(X)`
    none     not answered                   push:X   X sent unasked, nothing answered
    close    CloseConnection                boom     a bug (RuntimeError)
    hold:X   not answered, once `release(X)` (an awaited frame that needs no reply)
    bye:X    answered with X, and the session asks to close after it (`close_after_pending`)
    pause    the session pauses reading     resume   the session resumes reading

A `!` anywhere is not a line: the framer raises `CloseConnection`.

Every scenario runs under a loop whose exception handler records what reaches it, and the
run fails if anything did (a traceback from a callback, a task exception never retrieved).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from weirmq.broker.stats import BrokerStats
from weirmq.protocols.contract import CloseConnection, ConnectionHandle, Frame, Outcome, Reply
from weirmq.server.connection import (
    BUFFER_RELEASE_IDLE_S,
    Connection,
    ConnectionCounts,
    Listener,
)
from weirmq.settings import Settings

# --- fakes ----------------------------------------------------------------------------------


class FakeTransport(asyncio.Transport):
    """Records what the connection does to it; `close` reports the loss a turn later, as
    asyncio's transports do."""

    def __init__(self, protocol: Connection, sock: Any = None) -> None:
        super().__init__({"peername": ("127.0.0.1", 50312), "socket": sock})
        self.protocol = protocol
        self.events: list[Any] = []
        self.reading = True
        self.closed = False

    @property
    def writes(self) -> list[bytes]:
        return [event for event in self.events if isinstance(event, bytes)]

    def write(self, data: Any) -> None:
        assert not self.closed
        self.events.append(bytes(data))

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False
        self.events.append("pause")

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True
        self.events.append("resume")

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.events.append("close")
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)


class LineFramer:
    """Lines as frames; its buffer is allocated on first use, like Kafka's reader's."""

    BUFFER_BYTES = 4096

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.missing_bytes = 0
        self.releases = 0
        self._buffer = bytearray()
        self._pending = b""

    @property
    def allocated_bytes(self) -> int:
        return len(self._buffer)

    @property
    def buffered_bytes(self) -> int:
        return len(self._pending)

    def release_buffers(self) -> int:
        self.releases += 1
        released, self._buffer = len(self._buffer), bytearray()
        return released

    def get_buffer(self, _sizehint: int) -> memoryview:
        if not self._buffer:
            self._buffer = bytearray(self.BUFFER_BYTES)
        return memoryview(self._buffer)

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        data = self._pending + bytes(self._buffer[:nbytes])
        if b"!" in data:
            raise CloseConnection("not a line")
        *frames, self._pending = data.split(b"\n")
        return list(frames)


class ScriptedSession:
    def __init__(self, adapter: ScriptedAdapter, connection: ConnectionHandle) -> None:
        self.adapter = adapter
        self.connection = connection
        self.resumed = 0
        self.closed_calls = 0

    def handle(self, frame: Frame) -> Outcome:
        command, _, arg = bytes(frame).decode().partition(":")
        if command == "now":
            return Reply(arg.encode(), [])
        if command == "wait":
            return self._later(arg)
        if command == "push":
            self.connection.send(Reply(arg.encode(), []))
            return None
        if command == "close":
            raise CloseConnection("scripted")
        if command == "hold":
            return self._nothing_later(arg)
        if command == "bye":
            self.connection.close_after_pending("scripted goodbye")
            return Reply(arg.encode(), [])
        if command == "pause":
            self.connection.pause_reading()
            return None
        if command == "resume":
            self.connection.resume_reading()
            return None
        if command == "boom":
            raise RuntimeError("scripted bug")
        assert command == "none", command
        return None

    async def _later(self, name: str) -> Reply:
        await self.adapter.gate(name)
        return Reply(name.encode(), [])

    async def _nothing_later(self, name: str) -> None:
        await self.adapter.gate(name)

    def writing_resumed(self) -> None:
        self.resumed += 1

    def closed(self) -> None:
        self.closed_calls += 1


class ScriptedAdapter:
    name = "scripted"

    def __init__(self) -> None:
        self.sessions: list[ScriptedSession] = []
        self._gates: dict[str, asyncio.Future[None]] = {}

    def new_framer(self, max_frame_bytes: int) -> LineFramer:
        return LineFramer(max_frame_bytes)

    def new_session(self, connection: ConnectionHandle) -> ScriptedSession:
        session = ScriptedSession(self, connection)
        self.sessions.append(session)
        return session

    def gate(self, name: str) -> asyncio.Future[None]:
        if name not in self._gates:
            self._gates[name] = asyncio.get_running_loop().create_future()
        return self._gates[name]

    def release(self, name: str, error: BaseException | None = None) -> None:
        if error is None:
            self.gate(name).set_result(None)
        else:
            self.gate(name).set_exception(error)


class SteppedListener(Listener):
    """A listener whose clock the test sets."""

    now_s = 0.0

    def now(self) -> float:
        return self.now_s


class SteppedTimersListener(SteppedListener):
    """A stepped listener whose timers (idle timers, the heap trim) run when the test
    says (`advance`), never on their own; heap trims are counted, not done."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timers: list[tuple[float, Callable[[], None], asyncio.TimerHandle]] = []
        self.trims = 0

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        when_s = self.now_s + delay_s
        handle = asyncio.TimerHandle(when_s, callback, (), self.loop)  # never scheduled
        self.timers.append((when_s, callback, handle))
        return handle

    def pending(self) -> list[float]:
        """When the timers not yet run nor cancelled are due, in order."""
        return sorted(when_s for when_s, _, handle in self.timers if not handle.cancelled())

    def advance(self, to_s: float) -> int:
        """Step the clock to `to_s`, running each timer as it comes due; returns how many
        ran."""
        ran = 0
        while True:
            due = [t for t in self.timers if not t[2].cancelled() and t[0] <= to_s]
            if not due:
                break
            timer = min(due, key=lambda t: t[0])
            self.timers.remove(timer)
            self.now_s = max(self.now_s, timer[0])
            timer[1]()
            ran += 1
        self.now_s = to_s
        return ran

    def trim_heap(self) -> None:
        self.trims += 1


# --- helpers --------------------------------------------------------------------------------


def make_listener(**overrides: Any) -> tuple[SteppedListener, ScriptedAdapter]:
    adapter = ScriptedAdapter()
    return SteppedListener(adapter, Settings(**overrides), ConnectionCounts()), adapter


def make_timed_listener(
    idle_timeout_ms: int | None = None, **overrides: Any
) -> tuple[SteppedTimersListener, ScriptedAdapter]:
    """`idle_timeout_ms` is the listener's own (None: the setting's, from `overrides`)."""
    adapter = ScriptedAdapter()
    listener = SteppedTimersListener(
        adapter, Settings(**overrides), ConnectionCounts(), idle_timeout_ms=idle_timeout_ms
    )
    return listener, adapter


def make_real_time_listener() -> tuple[Listener, ScriptedAdapter]:
    adapter = ScriptedAdapter()
    return Listener(adapter, Settings()), adapter


def connect(listener: Listener, sock: Any = None) -> tuple[Connection, FakeTransport]:
    connection = listener.new_connection()
    transport = FakeTransport(connection, sock)
    connection.connection_made(transport)
    return connection, transport


def feed(connection: Connection, data: bytes) -> None:
    buffer = connection.get_buffer(-1)
    buffer[: len(data)] = data
    connection.buffer_updated(len(data))


async def settle() -> None:
    """Let callbacks scheduled so far (and those they schedule) run."""
    for _ in range(5):
        await asyncio.sleep(0)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    reached_loop: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: reached_loop.append(context)
        )
        await asyncio.wait_for(scenario(), 10)
        await settle()
        gc.collect()  # a task exception never retrieved is reported when the task dies

    asyncio.run(main())
    gc.collect()
    assert not reached_loop, reached_loop


# --- ordering -------------------------------------------------------------------------------


def test_ready_replies_with_nothing_ahead_are_written_at_once_in_one_write() -> None:
    async def scenario() -> None:
        listener, _ = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"now:a\nnone\nnow:b\n")
        assert transport.writes == [b"ab"]  # one read's replies: one write, before the loop
        assert connection.in_flight == 0
        feed(connection, b"now:c\n")
        assert transport.writes == [b"ab", b"c"]

    run(scenario)


def test_each_reply_is_timed_from_its_frame_read_to_its_write_by_kind() -> None:
    async def scenario() -> None:
        adapter = ScriptedAdapter()
        stats = BrokerStats()
        listener = SteppedListener(adapter, Settings(), stats)
        connection, _ = connect(listener)
        feed(connection, b"now:a\nnone\nwait:b\n")
        latency = stats.request_latency(adapter.name, "")
        assert latency.count == 1  # "none" has no reply, "b" is not written yet
        adapter.release("b")
        await settle()
        assert latency.count == 2 and latency.sum > 0
        connection.send(Reply(b"x", [], "push"))
        await settle()
        assert stats.request_latency(adapter.name, "push").count == 1

    run(scenario)


def test_replies_are_written_in_request_order() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"wait:a\nnow:b\nwait:c\nnow:d\n")
        assert transport.writes == []  # b is ready but a is ahead of it
        assert connection.in_flight == 4
        adapter.release("c")  # finishes before a: still waits its turn
        await settle()
        assert transport.writes == []
        adapter.release("a")
        await settle()
        assert transport.writes == [b"abcd"]  # released together: written together
        assert connection.in_flight == 0

    run(scenario)


def test_sent_frames_join_the_queue_behind_replies_already_due() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"push:p1\n")
        assert transport.writes == [b"p1"]  # nothing ahead: written at once
        feed(connection, b"wait:a\npush:p2\nnow:b\n")
        assert transport.writes == [b"p1"]
        adapter.release("a")
        await settle()
        assert transport.writes == [b"p1", b"ap2b"]
        connection.close("test")
        connection.send(Reply(b"late", []))  # ignored once closing
        await settle()
        assert transport.writes == [b"p1", b"ap2b"]

    run(scenario)


def test_small_reply_parts_are_joined_large_ones_written_as_they_are() -> None:
    async def scenario() -> None:
        listener, _ = make_listener()
        connection, transport = connect(listener)
        medium, large = b"m" * 60_000, b"x" * 70_000
        connection.send(Reply(b"P", [b"ab", memoryview(b"cd"), large, b"e"]))
        connection.send(Reply(b"Q", [medium, large]))
        assert transport.writes == []  # sent replies are written once per loop turn
        await settle()
        assert transport.writes == [b"Pabcd", large, b"eQ" + medium, large]

    run(scenario)


# --- bounds ---------------------------------------------------------------------------------


def test_reading_pauses_at_max_in_flight_and_resumes_when_one_is_answered() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener(max_in_flight_requests=2)
        connection, transport = connect(listener)
        feed(connection, b"wait:a\n")
        assert transport.reading
        feed(connection, b"wait:b\n")
        assert not transport.reading
        adapter.release("a")
        await settle()
        assert transport.reading
        assert transport.events == ["pause", b"a", "resume"]
        adapter.release("b")
        await settle()
        assert transport.writes == [b"a", b"b"]

    run(scenario)


def test_reading_pauses_while_the_client_does_not_read() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, transport = connect(listener)
        connection.pause_writing()
        assert not transport.reading
        assert connection.write_paused
        feed(connection, b"now:a\n")  # what was already read is still answered
        assert not transport.reading
        connection.resume_writing()
        assert transport.reading
        assert not connection.write_paused
        assert adapter.sessions[0].resumed == 1
        assert transport.events == ["pause", b"a", "resume"]

    run(scenario)


def test_in_flight_and_write_buffer_bounds_together() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener(max_in_flight_requests=1)
        connection, transport = connect(listener)
        feed(connection, b"wait:a\n")
        connection.pause_writing()
        adapter.release("a")
        await settle()
        assert not transport.reading  # answered, but the client still does not read
        connection.resume_writing()
        assert transport.reading

    run(scenario)


def test_receive_low_water_mark_follows_the_missing_bytes() -> None:
    if sys.platform != "linux":
        pytest.skip("SO_RCVLOWAT is set on Linux only")

    class RecordingSocket:
        def __init__(self) -> None:
            self.marks: list[int] = []

        def setsockopt(self, level: int, option: int, value: int) -> None:
            if (level, option) == (socket.SOL_SOCKET, socket.SO_RCVLOWAT):
                self.marks.append(value)  # (keepalive options are set on accept too)

    async def scenario() -> None:
        listener, _ = make_listener()
        sock = RecordingSocket()
        connection, _transport = connect(listener, sock)
        framer = connection.framer
        assert isinstance(framer, LineFramer)
        feed(connection, b"none\n")
        assert sock.marks == []  # already 1
        framer.missing_bytes = 300_000
        feed(connection, b"x")
        framer.missing_bytes = 5 << 20
        feed(connection, b"x")
        feed(connection, b"x")  # unchanged: not set again
        framer.missing_bytes = 0
        feed(connection, b"\n")
        framer.missing_bytes = 60_000  # a medium frame: not worth two setsockopt calls
        feed(connection, b"x")
        framer.missing_bytes = 0
        feed(connection, b"\n")
        assert sock.marks == [300_000, 1 << 20, 1]

    run(scenario)


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [b"close\nnow:never\n", b"now:ok!\n"], ids=["session", "framer"])
def test_close_connection_closes_only_its_connection(bad: bytes) -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        bad_connection, bad_transport = connect(listener)
        good_connection, good_transport = connect(listener)
        feed(bad_connection, bad)
        assert bad_transport.closed
        assert bad_transport.writes == []  # nothing after the bad frame was handled
        feed(good_connection, b"now:fine\n")
        assert good_transport.writes == [b"fine"]
        assert not good_transport.closed
        await settle()
        assert listener.connections == {good_connection}
        assert listener.stats.connections_closed_for_errors == 1
        assert listener.stats.connections_open == 1
        assert listener.stats.connections_total == 2
        assert [s.closed_calls for s in adapter.sessions] == [1, 0]

    run(scenario)


def test_a_failing_handler_closes_the_connection_and_only_the_log_sees_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        listener, _ = make_listener()
        connection, transport = connect(listener)
        with caplog.at_level(logging.ERROR, logger="weirmq.server.connection"):
            feed(connection, b"boom\nnow:never\n")
        assert transport.closed
        assert transport.writes == []
        assert "scripted bug" in caplog.text
        assert listener.stats.connections_closed_for_errors == 0  # a bug, not a bad frame

    run(scenario)


def test_a_failing_awaited_reply_closes_the_connection_and_nothing_reaches_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"now:a\nwait:b\nwait:c\nwait:d\n")
        # c fails while b is still awaited: its exception waits in the queue, then b fails
        # too. Neither may be reported by the loop as never retrieved, nor may d's
        # cancellation.
        with caplog.at_level(logging.ERROR, logger="weirmq.server.connection"):
            adapter.release("c", RuntimeError("c failed"))
            await settle()
            assert not transport.closed
            adapter.release("b", RuntimeError("b failed"))
            await settle()
        assert transport.closed
        assert transport.writes == [b"a"]
        assert "b failed" in caplog.text
        assert listener.connections == set()

    run(scenario)


def test_close_connection_from_an_awaited_reply_counts_as_a_bad_frame() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"wait:a\n")
        adapter.release("a", CloseConnection("refused later"))
        await settle()
        assert transport.closed
        assert listener.stats.connections_closed_for_errors == 1

    run(scenario)


def test_connection_lost_cancels_what_is_awaited_and_tells_the_session() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, _transport = connect(listener)
        feed(connection, b"wait:a\n")
        await settle()  # the task now awaits the gate
        gate = adapter.gate("a")
        connection.connection_lost(ConnectionResetError())
        await settle()
        assert gate.cancelled()  # the awaiting task was cancelled, and with it the await
        assert connection.in_flight == 0
        assert adapter.sessions[0].closed_calls == 1
        assert listener.stats.connections_open == 0

    run(scenario)


# --- idle -----------------------------------------------------------------------------------


def test_idle_connections_with_nothing_in_flight_are_closed() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener(idle_timeout_ms=1000)
        _quiet, quiet_transport = connect(listener)
        busy, busy_transport = connect(listener)
        chatty, chatty_transport = connect(listener)
        feed(busy, b"wait:a\n")
        listener.close_idle()  # t=0: all were just active
        listener.now_s = 0.9
        feed(chatty, b"now:x\n")
        listener.close_idle()
        assert not quiet_transport.closed
        listener.now_s = 1.1
        listener.close_idle()
        assert quiet_transport.closed  # quiet since t=0
        assert not chatty_transport.closed  # seen active at t=0.9
        assert not busy_transport.closed  # a request in flight is not idleness
        adapter.release("a")
        await settle()
        listener.now_s = 2.0
        listener.close_idle()  # the reply was written since the last sweep
        assert not busy_transport.closed
        listener.now_s = 3.1
        listener.close_idle()
        assert busy_transport.closed and chatty_transport.closed

    run(scenario)


def test_the_idle_deadline_is_the_last_activity_plus_the_timeout_exactly() -> None:
    async def scenario() -> None:
        listener, _adapter = make_listener(idle_timeout_ms=600_000)
        connection, transport = connect(listener)
        assert connection.idle_deadline == pytest.approx(600.0)
        listener.now_s = 5.0
        feed(connection, b"now:x\n")
        assert connection.idle_deadline == pytest.approx(605.0)  # not rounded to a sweep
        listener.now_s = 604.999
        listener.close_idle()
        assert not transport.closed
        listener.now_s = 605.0
        listener.close_idle()
        assert transport.closed

    run(scenario)


def line_framer(connection: Connection) -> LineFramer:
    framer = connection.framer
    assert isinstance(framer, LineFramer)
    return framer


def test_a_quiet_connection_releases_its_buffers_then_runs_no_timer_until_its_deadline() -> None:
    async def scenario() -> None:
        listener, _adapter = make_timed_listener(idle_timeout_ms=600_000)
        connection, transport = connect(listener)
        framer = line_framer(connection)
        assert framer.allocated_bytes == 0 and listener.pending() == [600.0]
        feed(connection, b"now:x\n")  # the first read allocates: the timer comes sooner
        assert framer.allocated_bytes == LineFramer.BUFFER_BYTES
        assert listener.pending() == [BUFFER_RELEASE_IDLE_S]
        listener.advance(BUFFER_RELEASE_IDLE_S - 0.001)
        assert framer.releases == 0
        listener.advance(BUFFER_RELEASE_IDLE_S)
        assert framer.releases == 1 and framer.allocated_bytes == 0
        # Next: the memory trim, a second later, and this connection's idle deadline.
        assert listener.pending() == [BUFFER_RELEASE_IDLE_S + 1.0, 600.0]
        listener.advance(599.0)
        assert listener.trims == 1 and framer.releases == 1
        assert listener.pending() == [600.0]  # nothing ran in between: no CPU while quiet
        assert not transport.closed
        listener.advance(600.0)
        assert transport.closed

    run(scenario)


def test_a_connection_reads_again_after_a_release_and_releases_again() -> None:
    async def scenario() -> None:
        listener, _adapter = make_timed_listener(idle_timeout_ms=600_000)
        connection, _transport = connect(listener)
        framer = line_framer(connection)
        feed(connection, b"now:x\n")
        listener.advance(10.0)
        assert framer.releases == 1
        listener.now_s = 100.0
        feed(connection, b"now:y\n")
        assert framer.allocated_bytes == LineFramer.BUFFER_BYTES
        # The timer set for the idle deadline (t=600) is replaced by one for the release.
        assert listener.pending() == [100.0 + BUFFER_RELEASE_IDLE_S]
        listener.advance(100.0 + BUFFER_RELEASE_IDLE_S)
        assert framer.releases == 2 and framer.allocated_bytes == 0

    run(scenario)


def test_buffers_are_kept_while_a_request_is_in_flight_or_bytes_keep_coming() -> None:
    async def scenario() -> None:
        listener, adapter = make_timed_listener(idle_timeout_ms=600_000)
        busy, _ = connect(listener)
        chatty, _ = connect(listener)
        feed(busy, b"wait:a\n")
        feed(chatty, b"none\n")
        for second in range(1, 20):  # a read every second: never quiet for long enough
            listener.advance(float(second))
            feed(chatty, b"none\n")
        assert line_framer(busy).releases == 0  # its request is still being answered
        assert line_framer(chatty).releases == 0
        adapter.release("a")
        await settle()  # answered and written at t=19, when chatty last sent
        listener.advance(19.0 + BUFFER_RELEASE_IDLE_S - 0.001)
        assert line_framer(busy).releases == 0 and line_framer(chatty).releases == 0
        listener.advance(19.0 + BUFFER_RELEASE_IDLE_S)
        assert line_framer(busy).releases == 1 and line_framer(chatty).releases == 1

    run(scenario)


def test_a_busy_connection_costs_one_idle_timer_per_release_period() -> None:
    async def scenario() -> None:
        listener, _adapter = make_timed_listener(idle_timeout_ms=600_000)
        connection, _ = connect(listener)
        ran = 0
        for tick in range(1, 601):  # a read every 0.1 s for a minute
            ran += listener.advance(tick / 10)
            feed(connection, b"none\n")
        assert line_framer(connection).releases == 0
        assert ran <= 60 / BUFFER_RELEASE_IDLE_S

    run(scenario)


def test_a_connection_idle_timeout_below_the_release_period_just_closes() -> None:
    async def scenario() -> None:
        listener, _adapter = make_timed_listener(idle_timeout_ms=1000)
        connection, transport = connect(listener)
        feed(connection, b"now:x\n")
        assert listener.pending() == [1.0]
        listener.advance(1.0)
        assert transport.closed and line_framer(connection).releases == 0

    run(scenario)


def test_released_memory_is_trimmed_once_for_many_connections() -> None:
    async def scenario() -> None:
        listener, _adapter = make_timed_listener()
        for _ in range(3):
            listener.buffers_released(1 << 20)
        listener.buffers_released(0)  # nothing was dropped: nothing to do
        assert listener.pending() == [1.0]  # one trim, a second after the first release
        listener.advance(1.0)
        assert listener.trims == 1 and listener.pending() == []
        listener.buffers_released(1 << 20)
        listener.buffers_released(40 << 20)  # enough to trim at once
        assert listener.pending() == []  # the delayed trim was replaced by one right now
        listener.buffers_released(1 << 20)
        await settle()
        assert listener.trims == 2
        listener.advance(10.0)
        assert listener.trims == 2

    run(scenario)


# --- stopping -------------------------------------------------------------------------------


def test_stop_lets_in_flight_requests_finish_then_closes() -> None:
    async def scenario() -> None:
        listener, adapter = make_real_time_listener()
        busy, busy_transport = connect(listener)
        _idle, idle_transport = connect(listener)
        feed(busy, b"wait:a\nnow:b\n")
        stopping = asyncio.create_task(listener.stop(5.0))
        await settle()
        assert not busy_transport.reading and not idle_transport.reading
        assert not busy_transport.closed and not idle_transport.closed
        adapter.release("a")
        await asyncio.wait_for(stopping, 1.0)
        assert busy_transport.events == ["pause", b"ab", "close"]
        assert idle_transport.closed
        _late, late_transport = connect(listener)
        assert late_transport.closed  # accepted while stopping: closed at once
        await settle()
        assert listener.connections == set()

    run(scenario)


def test_stop_gives_up_on_requests_still_in_flight_after_its_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        listener, adapter = make_real_time_listener()
        connection, transport = connect(listener)
        feed(connection, b"wait:never\n")
        with caplog.at_level(logging.WARNING, logger="weirmq.server.connection"):
            await listener.stop(0.2)
        assert transport.closed and transport.writes == []
        assert "still in flight" in caplog.text
        await settle()
        assert adapter.gate("never").cancelled()

    run(scenario)


# --- what a session may ask of its connection ------------------------------------------------


def test_a_session_pauses_reading_until_it_resumes() -> None:
    async def scenario() -> None:
        listener, _ = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"pause\n")
        assert not transport.reading
        connection.pause_reading()  # idempotent
        feed(connection, b"now:a\n")  # what was already read is still answered
        assert not transport.reading and transport.writes == [b"a"]
        connection.resume_reading()
        connection.resume_reading()
        assert transport.events == ["pause", b"a", "resume"]

    run(scenario)


def test_a_session_resume_does_not_override_the_pumps_own_pauses() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener(max_in_flight_requests=1)
        connection, transport = connect(listener)
        feed(connection, b"pause\n")
        feed(connection, b"wait:a\n")  # in-flight bound reached too
        connection.pause_writing()  # and the client does not read
        connection.resume_reading()
        assert not transport.reading  # two reasons remain
        adapter.release("a")
        await settle()
        assert not transport.reading  # one remains: the write buffer
        connection.pause_reading()
        connection.resume_writing()
        assert not transport.reading  # the session's own pause is back
        connection.resume_reading()
        assert transport.reading
        assert transport.events == ["pause", b"a", "resume"]

    run(scenario)


def test_a_session_pause_survives_the_listener_stopping() -> None:
    async def scenario() -> None:
        listener, _ = make_real_time_listener()
        connection, transport = connect(listener)
        stopping = asyncio.create_task(listener.stop(1.0))
        await settle()
        connection.resume_reading()  # the stop is a reason of the pump's own
        assert not transport.reading
        await asyncio.wait_for(stopping, 1.0)
        assert transport.closed

    run(scenario)


def test_close_after_pending_writes_the_reply_it_is_asked_with_then_closes() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"now:a\nbye:close-ok\nnow:never\n")
        # The last words are written, nothing after them is handled, then the close.
        assert transport.events == ["pause", b"aclose-ok", "close"]
        connection.send(Reply(b"late", []))  # ignored once closing
        await settle()
        assert transport.writes == [b"aclose-ok"]
        assert adapter.sessions[0].closed_calls == 1
        assert listener.connections == set()

    run(scenario)


def test_close_after_pending_waits_for_replies_still_awaited() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"wait:a\nnow:b\n")
        connection.send(Reply(b"close", []))  # a session's own Connection.Close
        connection.close_after_pending("shutdown")
        connection.close_after_pending("twice")  # idempotent
        connection.send(Reply(b"late", []))  # after it: ignored
        await settle()
        assert not transport.closed and transport.writes == []
        assert not transport.reading  # nothing more is read meanwhile
        adapter.release("a")
        await settle()
        assert transport.writes == [b"abclose"]
        assert transport.events[-1] == "close"

    run(scenario)


def test_close_after_pending_with_nothing_due_closes_on_the_next_turn() -> None:
    async def scenario() -> None:
        listener, _ = make_listener()
        connection, transport = connect(listener)
        connection.close_after_pending("nothing to say")
        assert not transport.closed  # never inside the call: a reply may still be returned
        await settle()
        assert transport.closed and transport.writes == []

    run(scenario)


def test_close_after_pending_when_the_last_awaited_frame_needs_no_reply() -> None:
    async def scenario() -> None:
        listener, adapter = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"hold:h\n")
        connection.close_after_pending("done")
        await settle()
        assert not transport.closed
        adapter.release("h")  # answered with nothing: nothing is left, so it closes
        await settle()
        assert transport.closed and transport.writes == []

    run(scenario)


def test_close_still_closes_at_once_after_close_after_pending() -> None:
    async def scenario() -> None:
        listener, _ = make_listener()
        connection, transport = connect(listener)
        feed(connection, b"wait:a\n")
        connection.close_after_pending("later")
        connection.close("now")
        assert transport.closed

    run(scenario)


# --- a listener's own idle timeout -----------------------------------------------------------


def test_a_listener_without_an_idle_timeout_never_closes_a_quiet_connection() -> None:
    async def scenario() -> None:
        listener, _ = make_timed_listener(idle_timeout_ms=0)
        assert listener.settings.idle_timeout_ms == 600_000  # the setting is left alone
        connection, transport = connect(listener)
        framer = line_framer(connection)
        assert listener.pending() == []  # no buffers yet, no idle deadline: no timer
        feed(connection, b"now:x\n")
        assert listener.pending() == [BUFFER_RELEASE_IDLE_S]  # buffers are still released
        listener.advance(BUFFER_RELEASE_IDLE_S)
        assert framer.releases == 1
        listener.advance(10 * 3600.0)
        assert listener.trims == 1 and listener.pending() == []  # then nothing runs
        listener.close_idle()
        assert not transport.closed
        assert connection.idle_deadline == float("inf")
        listener.now_s = 36_001.0
        feed(connection, b"now:y\n")  # reading again: the release timer is back
        assert listener.pending() == [36_001.0 + BUFFER_RELEASE_IDLE_S]

    run(scenario)


def test_a_listener_idle_timeout_replaces_the_setting_for_its_connections_only() -> None:
    async def scenario() -> None:
        own, _ = make_timed_listener(idle_timeout_ms=2000)
        kafka, _ = make_timed_listener()
        own_connection, own_transport = connect(own)
        _kafka_connection, kafka_transport = connect(kafka)
        assert own.pending() == [2.0] and kafka.pending() == [600.0]
        own.advance(2.0)
        kafka.advance(2.0)
        assert own_transport.closed and not kafka_transport.closed
        assert own_connection.idle_deadline == pytest.approx(2.0)

    run(scenario)


def test_a_connection_its_session_paused_is_not_idle() -> None:
    async def scenario() -> None:
        listener, _ = make_listener(idle_timeout_ms=1000)
        connection, transport = connect(listener)
        feed(connection, b"pause\n")  # a publisher blocked by back-pressure
        listener.now_s = 5.0
        listener.close_idle()
        assert not transport.closed  # we keep it from sending: not its fault
        connection.resume_reading()
        listener.now_s = 5.9
        listener.close_idle()
        assert not transport.closed
        listener.now_s = 6.0
        listener.close_idle()
        assert transport.closed

    run(scenario)


def test_listeners_may_share_one_request_memory_budget() -> None:
    async def scenario() -> None:
        first, _ = make_listener()
        adapter = ScriptedAdapter()
        second = Listener(adapter, Settings(), memory=first.memory)
        assert second.memory is first.memory
        alone = Listener(adapter, Settings(queued_max_request_bytes=4096))
        assert alone.memory is not first.memory and alone.memory.capacity_bytes == 4096

    run(scenario)
