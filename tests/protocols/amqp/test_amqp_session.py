"""The AMQP session: the shell that performs the state machine's steps for the pump.

A fake `ConnectionHandle` records what is sent and closed; `ManualTimers` runs timers only
when the test advances time, so the order "frames first, close after" and the lazy
re-arming of the heartbeat timer can be seen exactly.
"""

from __future__ import annotations

from amqp_support import plain
from pamqp import commands, frame, heartbeat

from weirmq.protocols.amqp import AmqpAdapter, AmqpConfig, AmqpSession, State
from weirmq.protocols.amqp.framing import PROTOCOL_HEADER
from weirmq.protocols.contract import Reply
from weirmq.testing.clock import ManualTimers


class FakeHandle:
    peer = "127.0.0.1:50000"
    peer_host = "127.0.0.1"
    write_paused = False

    def __init__(self) -> None:
        self.sent: list[Reply] = []
        self.closed: list[str] = []

    def send(self, reply: Reply) -> None:
        self.sent.append(reply)

    def close(self, reason: str) -> None:
        self.closed.append(reason)


class CountingTimers(ManualTimers):
    def __init__(self) -> None:
        super().__init__()
        self.armed = 0

    def call_at(self, deadline_ms, callback):  # type: ignore[no-untyped-def]
        self.armed += 1
        return super().call_at(deadline_ms, callback)


def _setup(config: AmqpConfig | None = None) -> tuple[AmqpAdapter, CountingTimers]:
    timers = CountingTimers()
    return AmqpAdapter(config or AmqpConfig(), timers.clock, timers), timers


def _decode_all(data: bytes) -> list[object]:
    values = []
    while data:
        used, _, value = frame.unmarshal(data)
        values.append(value)
        data = data[used:]
    return values


def _reply_frames(outcome: object) -> list[object]:
    assert isinstance(outcome, Reply)
    return _decode_all(outcome.prefix + b"".join(outcome.body))


def _open(session: AmqpSession, heartbeat_s: int = 0) -> None:
    session.handle(PROTOCOL_HEADER)
    session.handle(
        frame.marshal(
            commands.Connection.StartOk(
                client_properties={"capabilities": {"connection.blocked": True}},
                response=plain("guest", "guest"),
            ),
            0,
        )
    )
    session.handle(frame.marshal(commands.Connection.TuneOk(2047, 131_072, heartbeat_s), 0))
    session.handle(frame.marshal(commands.Connection.Open(), 0))
    assert session.machine.state is State.OPEN


def test_each_frame_is_answered_with_one_reply_of_encoded_frames() -> None:
    adapter, _ = _setup()
    handle = FakeHandle()
    session = adapter.new_session(handle)
    outcome = session.handle(PROTOCOL_HEADER)
    assert isinstance(outcome, Reply) and outcome.kind == "Connection.Start"
    (start,) = _reply_frames(outcome)
    assert isinstance(start, commands.Connection.Start)
    assert session.handle(frame.marshal(commands.Connection.TuneOk(), 0)) is None  # closed
    assert handle.sent == []


def test_a_close_happens_from_a_timer_after_the_last_frames_are_handed_over() -> None:
    adapter, timers = _setup()
    handle = FakeHandle()
    session = adapter.new_session(handle)
    outcome = session.handle(b"HTTP/1.1")
    assert isinstance(outcome, Reply)
    assert outcome.prefix + b"".join(outcome.body) == b"AMQP\x00\x00\x09\x01"
    assert handle.closed == []  # not inside handle: the pump would drop the reply
    timers.run_due()
    assert handle.closed == ["not an AMQP 0-9-1 protocol header"]


def test_the_heartbeat_timer_is_armed_once_per_deadline_not_per_frame() -> None:
    adapter, timers = _setup()
    handle = FakeHandle()
    session = adapter.new_session(handle)
    _open(session, heartbeat_s=10)
    armed = timers.armed
    for _ in range(100):  # client traffic moves the deadlines later: no new timer
        timers.advance(10)
        session.handle(frame.marshal(heartbeat.Heartbeat(), 0))
    assert timers.armed == armed
    timers.advance(5_000)
    assert [type(v) for r in handle.sent for v in _reply_frames(r)] == [heartbeat.Heartbeat]
    assert handle.closed == []


def test_a_silent_client_is_closed_by_the_timer() -> None:
    adapter, timers = _setup()
    handle = FakeHandle()
    session = adapter.new_session(handle)
    _open(session, heartbeat_s=1)
    timers.advance(1_999)
    assert handle.closed == []
    timers.advance(1)
    timers.run_due()
    assert handle.closed == ["missed heartbeats from client, timeout: 1s"]


def test_the_handshake_timeout_closes_a_connection_that_never_speaks() -> None:
    adapter, timers = _setup(AmqpConfig(handshake_timeout_ms=500))
    handle = FakeHandle()
    adapter.new_session(handle)
    timers.advance(500)
    timers.run_due()
    assert handle.closed and "handshake timeout (500 ms)" in handle.closed[0]


def test_the_adapter_broadcasts_flow_and_forgets_closed_sessions() -> None:
    adapter, timers = _setup()
    handles = [FakeHandle(), FakeHandle()]
    sessions = [adapter.new_session(h) for h in handles]
    for session in sessions:
        _open(session)
    sessions[1].closed()
    assert adapter.sessions == {sessions[0]}
    assert timers.pending == []  # heartbeats off, and the closed one's timer cancelled
    adapter.flow(True, "low on memory")
    adapter.flow(False)
    sent = [type(v) for r in handles[0].sent for v in _reply_frames(r)]
    assert sent == [commands.Connection.Blocked, commands.Connection.Unblocked]
    assert handles[1].sent == []


def test_shutdown_sends_320_to_every_connection() -> None:
    adapter, _ = _setup()
    handle = FakeHandle()
    _open(adapter.new_session(handle))
    adapter.shutdown()
    (close,) = [v for r in handle.sent for v in _reply_frames(r)]
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 320


def test_the_pumps_frame_bound_caps_what_is_offered() -> None:
    adapter, _ = _setup()
    framer = adapter.new_framer(8192)
    assert framer.frame_max_bytes == 8192
    session = adapter.new_session(FakeHandle())
    session.handle(PROTOCOL_HEADER)
    outcome = session.handle(
        frame.marshal(commands.Connection.StartOk(response=plain("guest", "guest")), 0)
    )
    (tune,) = _reply_frames(outcome)
    assert isinstance(tune, commands.Connection.Tune) and tune.frame_max == 8192
