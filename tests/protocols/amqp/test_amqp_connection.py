"""The AMQP connection state machine, driven frame by frame on a manual clock.

Frames come from pamqp's encoder (see amqp_support); what the machine answers is read as
the pamqp objects of its `Step`s. Nothing here opens a socket or sleeps: heartbeats and
timeouts are deadlines, stepped by hand.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from amqp_support import CLIENT_CAPABILITIES, FrameLike, Peer, close_frame, marshal, only_frames
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import base, body, commands, header, heartbeat
from pamqp import encode as pamqp_encode

from weirmq.protocols.amqp import connection as connection_module
from weirmq.protocols.amqp.config import (
    CAPABILITIES,
    CHANNEL_MAX,
    FRAME_MAX_BYTES,
    HANDSHAKE_TIMEOUT_MS,
    HEARTBEAT_S,
    AmqpConfig,
)
from weirmq.protocols.amqp.connection import AmqpConnection, Event, State
from weirmq.protocols.amqp.errors import AmqpError, ReplyCode
from weirmq.protocols.amqp.framing import PROTOCOL_HEADER, AmqpFramer
from weirmq.protocols.amqp.methods import Call, MethodTable

# --- the handshake ------------------------------------------------------------------------


def test_the_handshake_offers_rabbitmqs_capabilities_and_limits() -> None:
    peer = Peer()
    (start,) = only_frames(peer.raw(PROTOCOL_HEADER))
    assert isinstance(start, commands.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms.split() == ["PLAIN", "AMQPLAIN"]
    assert start.locales == "en_US"
    properties = start.server_properties
    assert properties["capabilities"] == dict(CAPABILITIES)
    assert set(CAPABILITIES) == {
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
        "consumer_priorities",
    }
    assert properties["product"] == "WeirMQ"
    assert isinstance(properties["version"], str) and properties["version"]
    assert str(properties["platform"]).startswith("Python 3.")

    (tune,) = only_frames(peer.start_ok())
    assert isinstance(tune, commands.Connection.Tune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131_072, 60)
    assert (CHANNEL_MAX, FRAME_MAX_BYTES, HEARTBEAT_S) == (2047, 131_072, 60)
    assert peer.state is State.AWAIT_TUNE_OK

    tuned = commands.Connection.TuneOk(channel_max=2047, frame_max=131_072, heartbeat=60)
    assert only_frames(peer.send(0, tuned)) == []
    assert peer.state is State.AWAIT_OPEN

    (open_ok,) = only_frames(peer.send(0, commands.Connection.Open(virtual_host="/")))
    assert isinstance(open_ok, commands.Connection.OpenOk)
    assert peer.state is State.OPEN
    assert peer.conn.info is not None
    assert (peer.conn.info.user, peer.conn.info.vhost) == ("guest", "/")


def test_every_answer_marshals() -> None:
    peer = Peer()
    steps = [peer.raw(PROTOCOL_HEADER), peer.start_ok()]
    steps.append(peer.send(0, commands.Connection.TuneOk(2047, 131_072, 60)))
    steps.append(peer.send(0, commands.Connection.Open()))
    steps.append(peer.send(1, commands.Channel.Open()))
    steps.append(peer.send(1, commands.Queue.Declare(queue="q")))
    for channel, value in itertools.chain.from_iterable(s.frames for s in steps):
        assert marshal(channel, value)


def test_amqplain_logs_in_too() -> None:
    table = pamqp_encode.field_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    (tune,) = only_frames(peer.start_ok(mechanism="AMQPLAIN", response=table.decode()))
    assert isinstance(tune, commands.Connection.Tune)


def test_plain_with_an_authorisation_identity_logs_in() -> None:
    peer = Peer(AmqpConfig(users={"app": "s3cret"}), peer_host="10.1.2.3")
    peer.raw(PROTOCOL_HEADER)
    (tune,) = only_frames(peer.start_ok(response="admin\x00app\x00s3cret"))
    assert isinstance(tune, commands.Connection.Tune)
    assert peer.conn.user == "app"


@pytest.mark.parametrize(
    "header_bytes",
    [
        b"AMQP\x01\x01\x00\x0a",
        b"AMQP\x00\x01\x00\x00",
        b"GET / HT",
        b"\x16\x03\x01\x02\x00\x01\x00\x01",
    ],
)
def test_a_wrong_protocol_header_gets_ours_and_a_close(header_bytes: bytes) -> None:
    peer = Peer()
    step = peer.raw(header_bytes)
    assert [marshal(c, v) for c, v in step.frames] == [b"AMQP\x00\x00\x09\x01"]
    assert step.close == "not an AMQP 0-9-1 protocol header"
    assert peer.state is State.CLOSED
    assert step.deadline_ms is None
    assert peer.send(0, commands.Connection.StartOk()).frames == []  # ignored from now on


# --- logins -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "password"), [("guest", "wrong"), ("nobody", "guest"), ("", ""), ("guest", "")]
)
def test_bad_credentials_are_refused_with_403_when_the_client_can_hear_it(
    user: str, password: str
) -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    close = close_frame(peer.start_ok(user, password))
    assert close.reply_code == 403
    assert close.reply_text == (
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile."
    )
    assert (close.class_id, close.method_id) == (10, 11)  # connection.start-ok
    assert peer.state is State.CLOSING
    assert peer.send(0, commands.Connection.CloseOk()).close is not None
    assert peer.state is State.CLOSED


def test_bad_credentials_close_silently_for_a_client_without_authentication_failure_close() -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    step = peer.start_ok("guest", "wrong", capabilities={})
    assert step.frames == [] and step.close is not None and "ACCESS_REFUSED" in step.close
    assert peer.state is State.CLOSED


@pytest.mark.parametrize("response", ["guest", "\x00guest", "a\x00b\x00c\x00d"])
def test_a_malformed_plain_response_is_refused(response: str) -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    assert close_frame(peer.start_ok(response=response)).reply_code == 403


def test_a_malformed_amqplain_response_is_refused() -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    assert (
        close_frame(peer.start_ok(mechanism="AMQPLAIN", response="\x05LOGINSxx")).reply_code == 403
    )


def test_an_unknown_mechanism_closes_without_a_word_as_rabbitmq_does() -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    step = peer.start_ok(mechanism="SCRAM-SHA-256")
    assert step.frames == []
    assert (
        step.close is not None and "unknown authentication mechanism 'SCRAM-SHA-256'" in step.close
    )


def test_guest_may_only_connect_from_a_loopback_address() -> None:
    for host, allowed in [
        ("127.0.0.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.7", False),
        ("", False),
    ]:
        peer = Peer(peer_host=host)
        peer.raw(PROTOCOL_HEADER)
        (answer,) = [v for _, v in peer.start_ok().frames]
        assert isinstance(answer, commands.Connection.Tune) is allowed, host
        if not allowed:
            assert isinstance(answer, commands.Connection.Close) and answer.reply_code == 403


# --- virtual hosts ------------------------------------------------------------------------


def test_an_unknown_vhost_is_refused_with_530() -> None:
    peer = Peer()
    close = close_frame(peer.handshake(vhost="production"))
    assert close.reply_code == 530
    assert close.reply_text == "NOT_ALLOWED - vhost production not found"
    assert (close.class_id, close.method_id) == (10, 40)
    assert peer.state is State.CLOSING


def test_a_configured_vhost_opens() -> None:
    peer = Peer(AmqpConfig(vhosts=frozenset({"/", "orders"})))
    peer.open(vhost="orders")
    assert peer.conn.info is not None and peer.conn.info.vhost == "orders"


# --- tuning -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel_max", "frame_max", "heartbeat"),
    [(2047, 131_072, 60), (1, 4096, 0), (100, 65_536, 5), (2047, 131_072, 600)],
)
def test_the_clients_choices_within_ours_are_kept(
    channel_max: int, frame_max: int, heartbeat: int
) -> None:
    peer = Peer().open(channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat)
    assert peer.conn.tuning == (channel_max, frame_max, heartbeat)


@pytest.mark.parametrize(
    ("channel_max", "frame_max", "words"),
    [
        (
            2048,
            131_072,
            "negotiated channel_max = 2048 is higher than the maximum allowed value (2047)",
        ),
        (0, 131_072, "negotiated channel_max = 0 is higher than the maximum allowed value (2047)"),
        (2047, 131_073, "negotiated frame_max = 131073 is higher than the maximum allowed value"),
        (2047, 0, "negotiated frame_max = 0 is higher"),
        (2047, 4095, "negotiated frame_max = 4095 is lower than the minimum allowed value (4096)"),
    ],
)
def test_tuning_beyond_our_limits_is_refused_with_530(
    channel_max: int, frame_max: int, words: str
) -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    peer.start_ok()
    tuned = commands.Connection.TuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=0)
    close = close_frame(peer.send(0, tuned))
    assert close.reply_code == 530
    assert words in close.reply_text
    assert (close.class_id, close.method_id) == (10, 31)


def test_a_frame_over_the_negotiated_frame_max_is_a_501() -> None:
    peer = Peer().open(frame_max=4096)
    peer.open_channel()
    publish = marshal(1, commands.Basic.Publish(exchange="x" * 100, routing_key="k" * 200))
    assert close_frame(peer.raw(publish)).reply_code == 540  # decoded: it fits
    peer = Peer().open(frame_max=4096)
    peer.open_channel()
    huge_body = marshal(1, body.ContentBody(b"b" * 5000))
    close = close_frame(peer.raw(huge_body))
    assert close.reply_code == 501
    assert close.reply_text == "FRAME_ERROR - frame of 5008 bytes is larger than frame_max 4096"
    assert (close.class_id, close.method_id) == (0, 0)


def test_the_framers_oversize_notice_becomes_a_501_and_the_close_ok_still_gets_through() -> None:
    peer = Peer().open()
    framer = AmqpFramer(FRAME_MAX_BYTES)
    data = (
        PROTOCOL_HEADER
        + struct.pack(">BHI", 3, 1, 10_000_000)
        + b"x" * 200_000  # part of the 10 MB the client claims, then it gives up
    )
    frames = _feed(framer, data)
    assert frames[0] == PROTOCOL_HEADER
    close = close_frame(peer.raw(frames[1]))
    assert close.reply_code == 501 and "larger than frame_max 131072" in close.reply_text
    rest = b"x" * (10_000_000 - 200_000) + b"\xce" + marshal(0, commands.Connection.CloseOk())
    (close_ok,) = _feed(framer, rest)
    assert peer.raw(close_ok).close is not None
    assert peer.state is State.CLOSED


def _feed(framer: AmqpFramer, data: bytes) -> list[bytes]:
    frames: list[bytes] = []
    view_data = memoryview(data)
    while view_data:
        buffer = framer.get_buffer(-1)
        n = min(len(buffer), len(view_data))
        buffer[:n] = view_data[:n]
        frames.extend(bytes(f) for f in framer.buffer_updated(n))
        view_data = view_data[n:]
    return frames


# --- heartbeats and timeouts --------------------------------------------------------------


def test_heartbeats_are_sent_when_idle_and_a_silent_client_is_dropped_after_two_intervals() -> None:
    peer = Peer().open(heartbeat=10)
    t0 = peer.clock()
    assert peer.conn.deadline_ms == t0 + 5_000  # send after half an interval of silence

    early = peer.tick(4_999)
    assert early.frames == [] and early.deadline_ms == t0 + 5_000

    beat = peer.tick(1)
    assert beat.frames == [(0, FrameLike(heartbeat.Heartbeat))]
    assert beat.deadline_ms == t0 + 10_000

    assert only_frames(peer.tick(5_000)) == [FrameLike(heartbeat.Heartbeat)]
    assert only_frames(peer.tick(5_000)) == [FrameLike(heartbeat.Heartbeat)]
    assert peer.conn.deadline_ms == t0 + 20_000  # the receive deadline comes first now
    missed = peer.tick(5_000)
    assert missed.frames == []
    assert missed.close == "missed heartbeats from client, timeout: 10s"
    assert peer.state is State.CLOSED


def test_any_frame_from_the_client_keeps_the_connection_alive() -> None:
    peer = Peer().open(heartbeat=10)
    for _ in range(10):
        peer.clock.advance(15_000)
        step = peer.send(0, heartbeat.Heartbeat())
        assert step.frames == [] and step.close is None
        assert only_frames(peer.tick()) == [FrameLike(heartbeat.Heartbeat)]
    assert peer.state is State.OPEN


def test_our_own_traffic_postpones_our_heartbeat() -> None:
    peer = Peer().open(heartbeat=10)
    t0 = peer.clock()
    peer.clock.advance(4_000)
    peer.open_channel()  # we answered: something was sent at t0 + 4 s
    assert peer.conn.deadline_ms == t0 + 9_000
    assert peer.tick(5_000).frames == [(0, FrameLike(heartbeat.Heartbeat))]


def test_heartbeat_zero_means_no_deadline_once_open() -> None:
    peer = Peer().open(heartbeat=0)
    assert peer.conn.deadline_ms is None
    assert peer.tick(10**9).frames == [] and peer.state is State.OPEN


@pytest.mark.parametrize("stop_after", range(4))
def test_a_handshake_that_stalls_is_closed_at_its_deadline(stop_after: int) -> None:
    peer = Peer()
    opening = [
        lambda: peer.raw(PROTOCOL_HEADER),
        lambda: peer.start_ok(),
        lambda: peer.send(0, commands.Connection.TuneOk(2047, 131_072, 0)),
    ]
    for run in opening[:stop_after]:
        assert run().close is None
    assert peer.conn.deadline_ms == peer.clock() + HANDSHAKE_TIMEOUT_MS
    assert peer.tick(HANDSHAKE_TIMEOUT_MS - 1).close is None
    step = peer.tick(1)
    assert step.frames == [] and step.close is not None and "handshake timeout" in step.close


def test_heartbeats_from_the_client_during_the_handshake_are_fine() -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    peer.start_ok()
    peer.send(0, commands.Connection.TuneOk(2047, 131_072, 5))
    assert peer.send(0, heartbeat.Heartbeat()).frames == []
    assert peer.state is State.AWAIT_OPEN


# --- closing ------------------------------------------------------------------------------


def test_the_client_closes() -> None:
    peer = Peer().open()
    peer.open_channel(1)
    step = peer.send(0, commands.Connection.Close(200, "Normal shutdown", 0, 0))
    assert step.frames == [(0, FrameLike(commands.Connection.CloseOk))]
    assert step.close == "closed by the client (200 Normal shutdown)"
    assert peer.state is State.CLOSED and peer.conn.open_channels == 0


def test_the_client_may_give_up_during_the_handshake() -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    step = peer.send(0, commands.Connection.Close(200, "bye", 0, 0))
    assert step.frames == [(0, FrameLike(commands.Connection.CloseOk))]
    assert step.close is not None


def test_the_server_closes_and_waits_for_close_ok_discarding_the_rest() -> None:
    peer = Peer().open()
    peer.open_channel(1)
    close = close_frame(peer.send(1, commands.Queue.Declare(queue="q")))
    assert close.reply_code == 540
    assert peer.state is State.CLOSING and peer.conn.open_channels == 0
    for value in [
        commands.Basic.Publish(),
        header.ContentHeader(body_size=3),
        body.ContentBody(b"abc"),
    ]:
        assert peer.send(1, value).frames == []
    assert peer.send(0, heartbeat.Heartbeat()).frames == []
    assert peer.state is State.CLOSING
    done = peer.send(0, commands.Connection.CloseOk())
    assert done.frames == []
    assert done.close is not None and "NOT_IMPLEMENTED" in done.close
    assert peer.state is State.CLOSED


def test_both_sides_closing_at_once_ends_with_close_ok() -> None:
    peer = Peer().open()
    close_frame(peer.send(0, commands.Connection.StartOk()))
    step = peer.send(0, commands.Connection.Close(200, "bye", 0, 0))
    assert step.frames == [(0, FrameLike(commands.Connection.CloseOk))]
    assert step.close is not None


def test_a_client_that_never_sends_close_ok_is_closed_at_the_timeout() -> None:
    peer = Peer(AmqpConfig(close_ok_timeout_ms=3_000)).open(heartbeat=1)
    close_frame(peer.send(0, commands.Connection.StartOk()))
    assert peer.conn.deadline_ms == peer.clock() + 3_000  # no heartbeats while closing
    assert peer.tick(2_999).close is None
    assert peer.tick(1).close == "no connection.close-ok within 3000 ms"


def test_garbage_while_closing_closes_the_transport() -> None:
    peer = Peer().open()
    close_frame(peer.send(0, commands.Connection.StartOk()))
    assert peer.raw(b"\x01\x00\x00\x00\x00\x00\x01\x00\x00").close is not None


def test_shutdown_closes_with_320() -> None:
    peer = Peer().open()
    close = close_frame(peer.conn.shutdown(peer.clock()))
    assert close.reply_code == 320
    assert (
        close.reply_text
        == "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
    )
    handshaking = Peer()
    handshaking.raw(PROTOCOL_HEADER)
    assert handshaking.conn.shutdown(handshaking.clock()).close == "broker shutdown"


# --- errors on channel 0 --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "value", "code", "words"),
    [
        (0, commands.Connection.StartOk(), 504, "unexpected method in connection state open"),
        (0, commands.Connection.CloseOk(), 504, "unexpected method in connection state open"),
        (0, commands.Queue.Declare(), 504, "unexpected method in connection state open"),
        (0, commands.Connection.UpdateSecret("s", "r"), 540, "'connection.update_secret'"),
        (0, header.ContentHeader(body_size=1), 505, "content frame on channel 0"),
        (0, body.ContentBody(b"x"), 505, "content frame on channel 0"),
        (3, commands.Queue.Declare(), 504, "expected 'channel.open'"),
        (3, header.ContentHeader(), 504, "expected 'channel.open'"),
        (2048, commands.Channel.Open(), 530, "channel 2048 is above the negotiated channel_max"),
    ],
)
def test_connection_errors_close_the_connection(
    channel: int, value: base.Frame, code: int, words: str
) -> None:
    peer = Peer().open()
    close = close_frame(peer.send(channel, value))
    assert close.reply_code == code
    assert words in close.reply_text
    assert peer.state is State.CLOSING


def test_a_heartbeat_on_a_channel_is_a_frame_error() -> None:
    peer = Peer().open()
    close = close_frame(peer.raw(b"\x08\x00\x05\x00\x00\x00\x00\xce"))
    assert close.reply_code == 501 and "heartbeat on channel 5" in close.reply_text


def test_an_unknown_method_is_a_540_naming_it() -> None:
    peer = Peer().open()
    peer.open_channel()
    close = close_frame(peer.raw(struct.pack(">BHIHH", 1, 1, 4, 60, 250) + b"\xce"))
    assert close.reply_code == 540
    assert (close.class_id, close.method_id) == (60, 250)


def test_errors_during_the_handshake_close_silently() -> None:
    peer = Peer()
    peer.raw(PROTOCOL_HEADER)
    step = peer.send(0, commands.Connection.Open())
    assert step.frames == []
    assert (
        step.close
        == "COMMAND_INVALID - unexpected connection.open in connection state await-start-ok"
    )


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(min_size=1, max_size=300))
def test_garbage_after_the_handshake_never_raises(garbage: bytes) -> None:
    peer = Peer().open()
    peer.open_channel()
    framer = AmqpFramer(FRAME_MAX_BYTES)
    frames = _feed(framer, PROTOCOL_HEADER + garbage)
    for raw in frames[1:]:
        step = peer.raw(raw)
        for channel, value in step.frames:
            marshal(channel, value)
    assert peer.state in (State.OPEN, State.CLOSING, State.CLOSED)


def test_plain_garbage_is_a_frame_error() -> None:
    peer = Peer().open()
    framer = AmqpFramer(FRAME_MAX_BYTES)
    frames = _feed(framer, PROTOCOL_HEADER + b"\xff" * 100)
    close = close_frame(peer.raw(frames[1]))
    assert close.reply_code == 501


# --- channels ---------------------------------------------------------------------------------


def test_channel_lifecycle() -> None:
    peer = Peer().open()
    peer.open_channel(1)
    peer.open_channel(2047)
    assert peer.conn.open_channels == 2
    step = peer.send(1, commands.Channel.Close(200, "bye", 0, 0))
    assert step.frames == [(1, FrameLike(commands.Channel.CloseOk))]
    assert peer.conn.open_channels == 1
    peer.open_channel(1)  # the number is free again
    assert peer.conn.open_channels == 2
    assert only_frames(peer.send(1, commands.Channel.Flow(active=True))) == [
        FrameLike(commands.Channel.FlowOk)
    ]


def test_a_second_channel_open_is_a_504() -> None:
    peer = Peer().open()
    peer.open_channel(1)
    close = close_frame(peer.send(1, commands.Channel.Open()))
    assert close.reply_code == 504
    assert close.reply_text.startswith("CHANNEL_ERROR - second 'channel.open' seen")
    assert (close.class_id, close.method_id) == (20, 10)


def test_channel_flow_off_is_not_implemented_as_in_rabbitmq() -> None:
    peer = Peer().open()
    peer.open_channel(1)
    close = close_frame(peer.send(1, commands.Channel.Flow(active=False)))
    assert close.reply_code == 540 and "active=false" in close.reply_text


@pytest.mark.parametrize(
    "method",
    [
        commands.Exchange.Declare(exchange="x"),
        commands.Queue.Declare(queue="q"),
        commands.Queue.Bind(queue="q", exchange="x"),
        commands.Basic.Qos(prefetch_count=10),
        commands.Basic.Consume(queue="q"),
        commands.Basic.Get(queue="q"),
        commands.Basic.Publish(exchange="", routing_key="q"),
        commands.Confirm.Select(),
        commands.Tx.Select(),
    ],
)
def test_stage_1_answers_every_other_class_with_540(method: base.Frame) -> None:
    peer = Peer().open()
    peer.open_channel(1)
    close = close_frame(peer.send(1, method))
    assert close.reply_code == 540
    label = method.name.split(".")[0].lower()
    assert close.reply_text.startswith(f"NOT_IMPLEMENTED - '{label}.")
    assert (close.class_id, close.method_id) == (method.index >> 16, method.index & 0xFFFF)


# --- the handler hooks --------------------------------------------------------------------------


def _peer_with(handlers: dict[type, object], **config: object) -> tuple[Peer, list[Call]]:
    calls: list[Call] = []

    def recording(handler):  # type: ignore[no-untyped-def]
        def run(call: Call):  # type: ignore[no-untyped-def]
            calls.append(call)
            return handler(call)

        return run

    table = MethodTable({method: recording(h) for method, h in handlers.items()})
    peer = Peer(AmqpConfig(**config), methods=table).open()  # type: ignore[arg-type]
    peer.open_channel(1)
    return peer, calls


def test_a_registered_handler_answers_on_its_channel() -> None:
    peer, calls = _peer_with(
        {commands.Queue.Declare: lambda call: [commands.Queue.DeclareOk(call.method.queue, 0, 0)]}
    )
    (answer,) = only_frames(peer.send(1, commands.Queue.Declare(queue="jobs")))
    assert isinstance(answer, commands.Queue.DeclareOk) and answer.queue == "jobs"
    (call,) = calls
    assert call.channel == 1 and call.content is None and call.now_ms == peer.clock()
    assert call.connection.user == "guest" and call.connection.vhost == "/"


def _not_found(call: Call) -> list[object]:
    raise AmqpError(ReplyCode.NOT_FOUND, f"no queue '{call.method.queue}' in vhost '/'")


def test_a_channel_error_closes_the_channel_only() -> None:
    peer, _ = _peer_with({commands.Queue.Declare: _not_found})
    peer.open_channel(2)
    step = peer.send(1, commands.Queue.Declare(queue="missing", passive=True))
    ((channel, close),) = step.frames
    assert channel == 1 and isinstance(close, commands.Channel.Close)
    assert close.reply_code == 404
    assert close.reply_text == "NOT_FOUND - no queue 'missing' in vhost '/'"
    assert (close.class_id, close.method_id) == (50, 10)
    assert peer.state is State.OPEN
    # Until the client's CloseOk, channel 1 discards everything.
    assert peer.send(1, commands.Queue.Declare(queue="x")).frames == []
    # Channel 2 carries on.
    assert only_frames(peer.send(2, commands.Channel.Flow(active=True)))
    assert peer.send(1, commands.Channel.CloseOk()).frames == []
    peer.open_channel(1)


def test_a_channel_close_from_both_sides_at_once() -> None:
    peer, _ = _peer_with({commands.Queue.Declare: _not_found})
    peer.send(1, commands.Queue.Declare(queue="missing"))
    step = peer.send(1, commands.Channel.Close(200, "bye", 0, 0))
    assert step.frames == [(1, FrameLike(commands.Channel.CloseOk))]
    peer.send(1, commands.Channel.CloseOk())
    peer.open_channel(1)


def test_a_handlers_connection_error_closes_the_connection() -> None:
    def internal(_call: Call) -> list[object]:
        raise AmqpError(ReplyCode.INTERNAL_ERROR, "disk on fire")

    peer, _ = _peer_with({commands.Exchange.Declare: internal})
    close = close_frame(peer.send(1, commands.Exchange.Declare(exchange="x")))
    assert close.reply_code == 541 and (close.class_id, close.method_id) == (40, 10)


def _published(call: Call) -> list[object]:
    return []


def test_a_publish_reaches_its_handler_with_the_whole_body() -> None:
    peer, calls = _peer_with({commands.Basic.Publish: _published})
    properties = commands.Basic.Properties(content_type="application/json", headers={"x": 1})
    publish = commands.Basic.Publish(exchange="amq.direct", routing_key="k")
    assert peer.send(1, publish).frames == []
    assert peer.send(1, header.ContentHeader(body_size=10, properties=properties)).frames == []
    assert peer.send(1, body.ContentBody(b"0123")).frames == []
    assert peer.send(1, body.ContentBody(b"")).frames == []  # empty body frames are legal
    assert peer.send(1, body.ContentBody(b"456789")).frames == []
    (call,) = calls
    assert isinstance(call.method, commands.Basic.Publish) and call.method.routing_key == "k"
    assert call.content is not None and call.content.body == b"0123456789"
    assert call.content.properties.content_type == "application/json"
    assert call.content.properties.headers == {"x": 1}
    # An empty message has a header and no body frame.
    peer.send(1, publish)
    peer.send(1, header.ContentHeader(body_size=0))
    assert len(calls) == 2 and calls[1].content is not None and calls[1].content.body == b""


@pytest.mark.parametrize(
    ("frames", "code", "words"),
    [
        ([commands.Basic.Ack()], 505, "expected content header for class 60"),
        ([body.ContentBody(b"x")], 505, "expected content header for class 60"),
        ([header.ContentHeader(body_size=4), commands.Basic.Ack()], 505, "expected content body"),
        ([header.ContentHeader(body_size=2), body.ContentBody(b"xyz")], 505, "the header said 2"),
    ],
)
def test_content_out_of_order_is_a_505(frames: list[object], code: int, words: str) -> None:
    peer, calls = _peer_with({commands.Basic.Publish: _published, commands.Basic.Ack: _published})
    peer.send(1, commands.Basic.Publish())
    *before, last = frames
    for value in before:
        assert only_frames(peer.send(1, value)) == []  # type: ignore[arg-type]
    close = close_frame(peer.send(1, last))  # type: ignore[arg-type]
    assert (close.reply_code, close.class_id) == (code, 60)
    assert words in close.reply_text
    assert calls == []


def test_a_content_header_of_another_class_is_a_505() -> None:
    peer, _ = _peer_with({commands.Basic.Publish: _published})
    peer.send(1, commands.Basic.Publish())
    raw = bytearray(marshal(1, header.ContentHeader(body_size=1)))
    raw[7:9] = (50).to_bytes(2, "big")
    close = close_frame(peer.raw(bytes(raw)))
    assert close.reply_code == 505 and "got one for class 50" in close.reply_text


def test_a_message_over_the_limit_closes_the_channel_before_any_body_is_held() -> None:
    peer, calls = _peer_with({commands.Basic.Publish: _published}, message_bytes_max=1000)
    peer.send(1, commands.Basic.Publish())
    step = peer.send(1, header.ContentHeader(body_size=1001))
    ((channel, close),) = step.frames
    assert channel == 1 and isinstance(close, commands.Channel.Close)
    assert close.reply_code == 406
    assert close.reply_text == (
        "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000"
    )
    assert peer.send(1, body.ContentBody(b"x" * 1001)).frames == []  # discarded
    assert calls == []


# --- back-pressure ------------------------------------------------------------------------------


def test_blocked_and_unblocked_are_sent_once_per_change() -> None:
    peer = Peer().open()
    now = peer.clock()
    step = peer.conn.flow(True, "low on memory", now)
    ((channel, blocked),) = step.frames
    assert channel == 0 and isinstance(blocked, commands.Connection.Blocked)
    assert blocked.reason == "low on memory"
    assert peer.conn.flow(True, "low on memory", now).frames == []
    assert peer.conn.flow(False, "", now).frames == [(0, FrameLike(commands.Connection.Unblocked))]
    assert peer.conn.flow(False, "", now).frames == []


def test_a_block_during_the_handshake_is_sent_after_open_ok() -> None:
    peer = Peer()
    assert peer.conn.flow(True, "low on disk", peer.clock()).frames == []
    step = peer.handshake()
    assert [type(v) for _, v in step.frames] == [
        commands.Connection.OpenOk,
        commands.Connection.Blocked,
    ]


def test_a_client_without_the_capability_is_not_told() -> None:
    capabilities = {k: v for k, v in CLIENT_CAPABILITIES.items() if k != "connection.blocked"}
    peer = Peer().open(capabilities=capabilities)
    assert peer.conn.flow(True, "low on memory", peer.clock()).frames == []
    assert peer.conn.blocked


# --- the tables themselves ----------------------------------------------------------------------


def test_every_state_and_event_has_a_row_or_a_refusal() -> None:
    for state, event in itertools.product(State, Event):
        row = connection_module._TABLE.get((state, event))
        if row is None:
            assert isinstance(connection_module._refusal(state, event), AmqpError)
            assert state not in (State.CLOSING, State.CLOSED)  # those discard everything
        else:
            assert row.action == "" or hasattr(AmqpConnection, row.action), row


def test_an_illegal_event_names_the_state_it_arrived_in() -> None:
    error = connection_module._refusal(State.AWAIT_TUNE_OK, Event.OPEN)
    assert "await-tune-ok" in str(error)
