"""One AMQP 0-9-1 connection as a sans-I/O state machine: frames and time in, frames out.

`AmqpConnection` never touches a socket or a clock. Each call takes the time (`now_ms`,
milliseconds on the broker's injected clock) and returns a `Step`: the frames to write,
in order, whether the transport must then be closed, and the next deadline at which
`tick` wants to be called. The session (`session`) performs steps; the tests feed frames
and step time by hand.

The connection's life, as a table of states and events (`_TABLE`):

    state           event         action            next
    --------------  ------------  ----------------  --------------------------------
    AWAIT_HEADER    HEADER        start             AWAIT_START_OK  (Connection.Start)
    AWAIT_HEADER    BAD_HEADER    refuse_header     CLOSED          (our header, close)
    AWAIT_START_OK  START_OK      start_ok          AWAIT_TUNE_OK   (login; Tune)
    AWAIT_TUNE_OK   TUNE_OK       tune_ok           AWAIT_OPEN      (limits checked)
    AWAIT_OPEN      OPEN          open              OPEN            (vhost; OpenOk)
    OPEN            CHANNEL       channel           OPEN            (to its channel)
    OPEN            FLOW          notify_flow       OPEN            (Blocked/Unblocked)
    OPEN            TIMER         heartbeat_timer   OPEN            (send, or miss: close)
    any but CLOSED  CLOSE         close_ok          CLOSED          (CloseOk, close)
    CLOSING         CLOSE_OK      close_ok_received CLOSED          (close)
    CLOSING         TIMER         closing_timer     CLOSING         (no CloseOk: close)
    AWAIT_*         TIMER         handshake_timer   same            (too slow: close)
    AWAIT_START_OK,
    AWAIT_TUNE_OK,
    AWAIT_OPEN,
    OPEN            HEARTBEAT     -                 same
    any             FLOW          -                 same            (noted; sent on OPEN)
    CLOSING         anything else -                 CLOSING         (discarded)
    CLOSED          anything      -                 CLOSED          (ignored)

An event with no row is a connection error, refused with the code `_refusal` gives: 504
CHANNEL_ERROR "unexpected method in connection state open" for a stray method on
channel 0, 505 UNEXPECTED_FRAME for content there (RabbitMQ's codes and words).

Connection errors (a refusal; a frame that does not decode, 501/502/540; a channel's hard
error; a handler's 5xx) close the connection. When depends on the state, as with
RabbitMQ:

- once OPEN: Connection.Close with the code, the text and the failing method's ids, then
  CLOSING: every frame but Close and CloseOk is discarded until the client's CloseOk, or
  `close_ok_timeout_ms`, then the transport is closed;
- during the handshake the spec says to close the socket without a word, and so we do,
  except where RabbitMQ tells the client why: 403 ACCESS_REFUSED for a refused login (if
  the client announced the `authentication_failure_close` capability, as pika, aio-pika
  and kombu do) and 530 NOT_ALLOWED for an unknown vhost or out-of-range tuning, which are
  sent as a Connection.Close as above.

Heartbeats (negotiated in TuneOk; 0 turns them off) are deadlines, not sleeps: after
`heartbeat / 2` with nothing sent we send a heartbeat frame, so the client hears from us
at least once per interval; after two intervals with nothing received the peer is
presumed dead and the transport is closed without a Close (the spec's rule). Any frame
counts as traffic both ways. `deadline_ms` is the earliest of the deadlines that apply;
it may come early (traffic moved a deadline later): `tick` then does nothing and returns
the new one, so the session re-arms its timer once per deadline, not once per frame.

Back-pressure: `flow(blocked, reason)` is the protocol-neutral signal (from the flow
controller, through the broker). A client that announced the `connection.blocked`
capability is sent Connection.Blocked(reason) when the signal turns on and
Connection.Unblocked when it turns off, once per change; a signal arriving during the
handshake is sent right after OpenOk.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from pamqp import base, body, commands, header, heartbeat

from ..contract import Frame
from .auth import authenticate, is_loopback
from .channel import Channel, ChannelState
from .config import FRAME_MIN_BYTES, LOCALES, MECHANISMS, AmqpConfig
from .errors import AmqpError, ReplyCode
from .framing import PROTOCOL_HEADER, Inbound, Outbound, decode
from .methods import ConnectionInfo, MethodTable, ids

log = logging.getLogger(__name__)

CHANNEL_MIN: Final = 1
"""The smallest channel_max a client may negotiate (RabbitMQ's)."""


class State(enum.Enum):
    AWAIT_HEADER = "await-header"
    AWAIT_START_OK = "await-start-ok"
    AWAIT_TUNE_OK = "await-tune-ok"
    AWAIT_OPEN = "await-open"
    OPEN = "open"
    CLOSING = "closing"
    """We sent Connection.Close and wait for CloseOk."""
    CLOSED = "closed"
    """The transport is being closed; nothing more is read or written."""


class Event(enum.Enum):
    HEADER = "protocol header"
    BAD_HEADER = "bad protocol header"
    START_OK = "connection.start-ok"
    TUNE_OK = "connection.tune-ok"
    OPEN = "connection.open"
    CLOSE = "connection.close"
    CLOSE_OK = "connection.close-ok"
    UPDATE_SECRET = "connection.update-secret"
    OTHER_METHOD = "method"
    """Any other method on channel 0."""
    CONTENT = "content frame on channel 0"
    HEARTBEAT = "heartbeat"
    CHANNEL = "channel frame"
    """Any frame on a channel other than 0."""
    TIMER = "timer"
    FLOW = "flow signal"


class Row(NamedTuple):
    action: str
    """The `AmqpConnection` method that handles the event ("" for none)."""
    next: State
    """The state after the action, unless the action closed the connection (CLOSING or
    CLOSED: the close wins); an error diverts to the close path instead."""


_HANDSHAKE: Final = (
    State.AWAIT_HEADER,
    State.AWAIT_START_OK,
    State.AWAIT_TUNE_OK,
    State.AWAIT_OPEN,
)
S, E = State, Event
_CLOSING_EVENTS: Final = frozenset({E.CLOSE, E.CLOSE_OK, E.TIMER, E.FLOW})
"""What CLOSING still looks at; it discards every other event."""
_TABLE: Final[dict[tuple[State, Event], Row]] = {
    (S.AWAIT_HEADER, E.HEADER): Row("_start", S.AWAIT_START_OK),
    (S.AWAIT_HEADER, E.BAD_HEADER): Row("_refuse_header", S.CLOSED),
    (S.AWAIT_START_OK, E.START_OK): Row("_start_ok", S.AWAIT_TUNE_OK),
    (S.AWAIT_TUNE_OK, E.TUNE_OK): Row("_tune_ok", S.AWAIT_OPEN),
    (S.AWAIT_OPEN, E.OPEN): Row("_open", S.OPEN),
    (S.OPEN, E.CHANNEL): Row("_channel", S.OPEN),
    (S.OPEN, E.FLOW): Row("_notify_flow", S.OPEN),
    (S.OPEN, E.TIMER): Row("_heartbeat_timer", S.OPEN),
    (S.OPEN, E.HEARTBEAT): Row("", S.OPEN),
    (S.CLOSING, E.CLOSE_OK): Row("_close_ok_received", S.CLOSED),
    (S.CLOSING, E.TIMER): Row("_closing_timer", S.CLOSING),
    **{(state, E.TIMER): Row("_handshake_timer", state) for state in _HANDSHAKE},
    **{(state, E.HEARTBEAT): Row("", state) for state in _HANDSHAKE[1:]},
    **{(state, E.CLOSE): Row("_close_ok", S.CLOSED) for state in (*_HANDSHAKE[1:], S.OPEN)},
    (S.CLOSING, E.CLOSE): Row("_close_ok", S.CLOSED),
    **{(state, E.FLOW): Row("", state) for state in (*_HANDSHAKE, S.CLOSING, S.CLOSED)},
    **{(S.CLOSING, event): Row("", S.CLOSING) for event in E if event not in _CLOSING_EVENTS},
    **{(S.CLOSED, event): Row("", S.CLOSED) for event in E},
}
"""Every allowed (state, event) pair; see the module docstring."""


def _refusal(state: State, event: Event) -> AmqpError:
    """The connection error for an event with no row in `_TABLE`."""
    if state is State.OPEN and event is Event.UPDATE_SECRET:
        return AmqpError(ReplyCode.NOT_IMPLEMENTED, "'connection.update_secret' is not implemented")
    if state is State.OPEN and event is Event.CONTENT:
        return AmqpError(ReplyCode.UNEXPECTED_FRAME, "content frame on channel 0")
    if state is State.OPEN:
        return AmqpError(ReplyCode.CHANNEL_ERROR, "unexpected method in connection state open")
    return AmqpError(
        ReplyCode.COMMAND_INVALID, f"unexpected {event.value} in connection state {state.value}"
    )


_METHOD_EVENTS: Final[dict[type[base.Frame], Event]] = {
    commands.Connection.StartOk: E.START_OK,
    commands.Connection.TuneOk: E.TUNE_OK,
    commands.Connection.Open: E.OPEN,
    commands.Connection.Close: E.CLOSE,
    commands.Connection.CloseOk: E.CLOSE_OK,
    commands.Connection.UpdateSecret: E.UPDATE_SECRET,
}


def classify(channel: int, value: Inbound) -> Event:
    """The connection event a decoded frame is."""
    if isinstance(value, heartbeat.Heartbeat):
        if channel:
            raise AmqpError(ReplyCode.FRAME_ERROR, f"heartbeat on channel {channel}", 0, 0)
        return E.HEARTBEAT
    if channel:
        return E.CHANNEL
    if isinstance(value, header.ContentHeader | body.ContentBody):
        return E.CONTENT
    return _METHOD_EVENTS.get(type(value), E.OTHER_METHOD)


@dataclass(slots=True)
class Step:
    """What must happen after one call: see the module docstring."""

    frames: list[tuple[int, Outbound]] = field(default_factory=list)
    """(channel, frame) to write, in order."""
    close: str | None = None
    """Close the transport once `frames` are written; the reason, for the log."""
    deadline_ms: int | None = None
    """When `tick` should be called next (None: no deadline)."""


class Tuning(NamedTuple):
    """What TuneOk settled (our offer until then)."""

    channel_max: int
    frame_max_bytes: int
    heartbeat_s: int


class AmqpConnection:
    """One connection's protocol state; see the module docstring."""

    def __init__(
        self,
        config: AmqpConfig,
        now_ms: int,
        *,
        peer_host: str = "",
        methods: MethodTable | None = None,
    ) -> None:
        self.config = config
        self.peer_host = peer_host
        self.state = State.AWAIT_HEADER
        self.tuning = Tuning(config.channel_max, config.frame_max_bytes, 0)
        self.info: ConnectionInfo | None = None
        """Who is connected, once Connection.Open succeeded."""
        self.client_properties: dict[str, object] = {}
        self.user: str | None = None
        self._methods = methods if methods is not None else MethodTable()
        self._channels: dict[int, Channel] = {}
        self._handshake_deadline_ms = now_ms + config.handshake_timeout_ms
        self._close_deadline_ms = 0
        self._closing_error: AmqpError | None = None
        self._last_received_ms = now_ms
        self._last_sent_ms = now_ms
        self.blocked = False
        """The flow signal's last value."""
        self._blocked_reason = ""
        self._blocked_sent = False  # what the client was last told
        self._step = Step()
        self._methods_told = False
        """Whether the methods heard `connection_closed`."""
        self._reading_paused = False

    # --- inputs -------------------------------------------------------------------------

    def receive(self, raw: Frame, now_ms: int) -> Step:
        """One frame as the framer cut it (the first one is the protocol header)."""
        if self.state is State.CLOSED:
            return self._finish(now_ms)
        self._last_received_ms = now_ms
        value: Inbound | None = None
        try:
            if self.state is State.AWAIT_HEADER:
                event = Event.HEADER if raw == PROTOCOL_HEADER else Event.BAD_HEADER
                self._handle(event, 0, None, now_ms)
            else:
                channel, value = decode(raw, self.tuning.frame_max_bytes)
                self._handle(classify(channel, value), channel, value, now_ms)
        except AmqpError as error:
            self._fail(error, value, now_ms)
        return self._finish(now_ms)

    def tick(self, now_ms: int) -> Step:
        """The deadline last returned has come (or passed): heartbeats and timeouts."""
        self._run(Event.TIMER, now_ms)
        return self._finish(now_ms)

    def flow(self, blocked: bool, reason: str, now_ms: int) -> Step:
        """The broker's back-pressure signal for this connection: publishes should stop
        (`blocked`) or may resume. `reason` is what Connection.Blocked tells the client
        ("low on memory")."""
        self.blocked, self._blocked_reason = blocked, reason
        self._run(Event.FLOW, now_ms)
        return self._finish(now_ms)

    def shutdown(self, now_ms: int, reason: str = "shutdown") -> Step:
        """The broker is stopping: close the connection with 320 CONNECTION_FORCED, as
        RabbitMQ does (a client reconnects elsewhere or later)."""
        if self.state is State.OPEN:
            error = AmqpError(
                ReplyCode.CONNECTION_FORCED,
                f"broker forced connection closure with reason '{reason}'",
                0,
                0,
            )
            self._send_close(error, now_ms)
        elif self.state not in (State.CLOSING, State.CLOSED):
            self._close_transport(f"broker {reason}")
        return self._finish(now_ms)

    def reading_paused(self, paused: bool, now_ms: int) -> None:
        """We stopped reading from the client (a blocked publisher) or read again: while
        we do not read, its heartbeats cannot arrive, so missing them is not its fault (as
        RabbitMQ pauses its heartbeat monitor); reading again starts the count afresh."""
        self._reading_paused = paused
        if not paused:
            self._last_received_ms = now_ms

    def transport_closed(self) -> None:
        """The transport is gone: nothing more will be sent."""
        self.state = State.CLOSED
        self._forget_channels()

    # --- outputs ------------------------------------------------------------------------

    @property
    def deadline_ms(self) -> int | None:
        """The earliest time `tick` has something to check (see the module docstring)."""
        if self.state is State.CLOSED:
            return None
        if self.state is State.CLOSING:
            return self._close_deadline_ms
        if self.state is not State.OPEN:
            return self._handshake_deadline_ms
        heartbeat_ms = self.tuning.heartbeat_s * 1000
        if not heartbeat_ms:
            return None
        send_by = self._last_sent_ms + heartbeat_ms // 2
        if self._reading_paused:
            return send_by
        return min(send_by, self._last_received_ms + 2 * heartbeat_ms)

    @property
    def open_channels(self) -> int:
        return len(self._channels)

    def channel_state(self, number: int) -> ChannelState:
        channel = self._channels.get(number)
        return channel.state if channel is not None else ChannelState.CLOSED

    # --- the table ----------------------------------------------------------------------

    def _run(self, event: Event, now_ms: int) -> None:
        try:
            self._handle(event, 0, None, now_ms)
        except AmqpError as error:  # no timer or flow action raises today; one may later
            self._fail(error, None, now_ms)

    def _handle(self, event: Event, channel: int, value: Inbound | None, now_ms: int) -> None:
        row = _TABLE.get((self.state, event))
        if row is None:
            raise _refusal(self.state, event)
        if row.action:
            getattr(self, row.action)(channel, value, now_ms)
        if self.state not in (State.CLOSING, State.CLOSED):  # the action closed it
            self.state = row.next

    def _finish(self, now_ms: int) -> Step:
        step, self._step = self._step, Step()
        if step.frames:
            self._last_sent_ms = now_ms
        step.deadline_ms = self.deadline_ms
        return step

    def _send(self, channel: int, value: Outbound) -> None:
        self._step.frames.append((channel, value))

    # --- actions ------------------------------------------------------------------------

    def _start(self, _channel: int, _value: Inbound | None, _now_ms: int) -> None:
        self._send(
            0,
            commands.Connection.Start(
                version_major=0,
                version_minor=9,
                server_properties=self.config.server_properties(),
                mechanisms=" ".join(MECHANISMS),
                locales=LOCALES,
            ),
        )

    def _refuse_header(self, _channel: int, _value: Inbound | None, _now_ms: int) -> None:
        # The spec: answer an unsupported protocol header with ours, then close.
        self._send(0, header.ProtocolHeader())
        self._close_transport("not an AMQP 0-9-1 protocol header")

    def _start_ok(self, _channel: int, value: Inbound | None, _now_ms: int) -> None:
        assert isinstance(value, commands.Connection.StartOk)
        properties = value.client_properties or {}
        self.client_properties = dict(properties)
        mechanism = value.mechanism
        if mechanism not in MECHANISMS:
            raise AmqpError(
                ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'"
            )
        login = authenticate(mechanism, value.response, self.config.users)
        user = login.user
        if user is None:
            log.warning("%s login refused from %s: %s", mechanism, self.peer_host, login.reason)
        elif user in self.config.loopback_users and not is_loopback(self.peer_host):
            log.warning("user %r may only connect via localhost (from %s)", user, self.peer_host)
            user = None
        if user is None:
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism {mechanism}. "
                "For details see the broker logfile.",
            )
        self.user = user
        offer = self.tuning
        self._send(
            0,
            commands.Connection.Tune(
                channel_max=offer.channel_max,
                frame_max=offer.frame_max_bytes,
                heartbeat=self.config.heartbeat_s,
            ),
        )

    def _tune_ok(self, _channel: int, value: Inbound | None, _now_ms: int) -> None:
        assert isinstance(value, commands.Connection.TuneOk)
        channel_max = _negotiated(
            "channel_max", value.channel_max, CHANNEL_MIN, self.config.channel_max
        )
        frame_max = _negotiated(
            "frame_max", value.frame_max, FRAME_MIN_BYTES, self.config.frame_max_bytes
        )
        self.tuning = Tuning(channel_max, frame_max, value.heartbeat)

    def _open(self, _channel: int, value: Inbound | None, _now_ms: int) -> None:
        assert isinstance(value, commands.Connection.Open) and self.user is not None
        vhost = value.virtual_host
        if vhost not in self.config.vhosts:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"vhost {vhost} not found")
        self.info = ConnectionInfo(
            self.user, vhost, self.client_properties, self.peer_host, self.tuning.frame_max_bytes
        )
        self._send(0, commands.Connection.OpenOk())
        self.state = State.OPEN  # so that a pending flow signal is sent after OpenOk
        self._notify_flow(0, None, _now_ms)

    def _channel(self, number: int, value: Inbound | None, now_ms: int) -> None:
        assert value is not None and self.info is not None
        if number > self.tuning.channel_max:
            raise AmqpError(
                ReplyCode.NOT_ALLOWED,
                f"channel {number} is above the negotiated channel_max ({self.tuning.channel_max})",
            )
        channel = self._channels.get(number)
        if channel is None:
            channel = Channel(number, self.info, self._methods, self.config.message_bytes_max)
        frames = channel.receive(value, now_ms)
        if channel.state is ChannelState.CLOSED:
            self._channels.pop(number, None)
        else:
            self._channels[number] = channel
        for frame in frames:
            self._send(number, frame)

    def _notify_flow(self, _channel: int, _value: Inbound | None, _now_ms: int) -> None:
        capabilities = self.client_properties.get("capabilities")
        if not isinstance(capabilities, dict) or capabilities.get("connection.blocked") is not True:
            return
        if self.blocked == self._blocked_sent:
            return
        self._blocked_sent = self.blocked
        if self.blocked:
            self._send(0, commands.Connection.Blocked(reason=self._blocked_reason))
        else:
            self._send(0, commands.Connection.Unblocked())

    def _close_ok(self, _channel: int, value: Inbound | None, _now_ms: int) -> None:
        assert isinstance(value, commands.Connection.Close)
        self._send(0, commands.Connection.CloseOk())
        self._close_transport(f"closed by the client ({value.reply_code} {value.reply_text})")

    def _close_ok_received(self, _channel: int, _value: Inbound | None, _now_ms: int) -> None:
        error = self._closing_error
        self._close_transport(str(error) if error is not None else "closed")

    def _handshake_timer(self, _channel: int, _value: Inbound | None, now_ms: int) -> None:
        if now_ms >= self._handshake_deadline_ms:
            timeout = self.config.handshake_timeout_ms
            self._close_transport(f"handshake timeout ({timeout} ms) in state {self.state.value}")

    def _heartbeat_timer(self, _channel: int, _value: Inbound | None, now_ms: int) -> None:
        heartbeat_ms = self.tuning.heartbeat_s * 1000
        if not heartbeat_ms:
            return
        if not self._reading_paused and now_ms >= self._last_received_ms + 2 * heartbeat_ms:
            timeout_s = self.tuning.heartbeat_s
            self._close_transport(f"missed heartbeats from client, timeout: {timeout_s}s")
        elif now_ms >= self._last_sent_ms + heartbeat_ms // 2:
            self._send(0, heartbeat.Heartbeat())

    def _closing_timer(self, _channel: int, _value: Inbound | None, now_ms: int) -> None:
        if now_ms >= self._close_deadline_ms:
            self._close_transport(
                f"no connection.close-ok within {self.config.close_ok_timeout_ms} ms"
            )

    # --- closing ------------------------------------------------------------------------

    def _fail(self, error: AmqpError, value: Inbound | None, now_ms: int) -> None:
        """A connection error (see the module docstring for what each state does)."""
        if error.class_id is None:
            error.class_id, error.method_id = (
                ids(value) if isinstance(value, base.Frame) else (0, 0)
            )
        if self.state is State.OPEN or self._tells_why(error):
            self._send_close(error, now_ms)
        else:  # during the handshake, or already closing: the socket goes, silently
            log.info(
                "AMQP connection from %s failed in state %s: %s",
                self.peer_host,
                self.state.value,
                error,
            )
            self._close_transport(str(error))

    def _tells_why(self, error: AmqpError) -> bool:
        """Whether a handshake error is sent to the client before closing (RabbitMQ's
        exceptions to the spec's silent close)."""
        if self.state not in _HANDSHAKE:
            return False
        if error.code is ReplyCode.NOT_ALLOWED:
            return True
        if error.code is not ReplyCode.ACCESS_REFUSED:
            return False
        capabilities = self.client_properties.get("capabilities")
        return (
            isinstance(capabilities, dict)
            and capabilities.get("authentication_failure_close") is True
        )

    def _send_close(self, error: AmqpError, now_ms: int) -> None:
        self._send(
            0,
            commands.Connection.Close(
                reply_code=int(error.code),
                reply_text=error.reply_text,
                class_id=error.class_id or 0,
                method_id=error.method_id or 0,
            ),
        )
        self._forget_channels()
        self._closing_error = error
        self._close_deadline_ms = now_ms + self.config.close_ok_timeout_ms
        self.state = State.CLOSING

    def _forget_channels(self) -> None:
        self._channels.clear()
        if not self._methods_told:
            self._methods_told = True
            self._methods.connection_closed()

    def _close_transport(self, reason: str) -> None:
        self._forget_channels()
        self._step.close = reason
        self.state = State.CLOSED


def _negotiated(name: str, client: int, minimum: int, ours: int) -> int:
    """A TuneOk value checked as RabbitMQ checks it: not under the minimum, not over our
    offer, and not 0 ("no limit") since we always have one; else 530 NOT_ALLOWED."""
    if client != 0 and client < minimum:
        raise AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"negotiated {name} = {client} is lower than the minimum allowed value ({minimum})",
        )
    if client == 0 or client > ours:
        raise AmqpError(
            ReplyCode.NOT_ALLOWED,
            f"negotiated {name} = {client} is higher than the maximum allowed value ({ours})",
        )
    return client


__all__ = ["AmqpConnection", "Event", "State", "Step", "Tuning"]
