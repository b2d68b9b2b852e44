"""One AMQP channel, as a table of states and events.

A channel is a conversation inside the connection, numbered 1..channel_max. Its frames
arrive in order, and a method with content (Basic.Publish) is followed, before anything
else on that channel, by one content header and as many body frames as the header's
body size needs. The table:

    state         event           action           next
    ------------  --------------  ---------------  -----------------------------------
    CLOSED        OPEN            open             OPEN          (Channel.OpenOk)
    OPEN          METHOD          dispatch         OPEN          (the class's handler)
    OPEN          CONTENT_METHOD  expect_content   AWAIT_HEADER
    OPEN          FLOW            flow             OPEN          (active=true only)
    OPEN          CLOSE           close_ok         CLOSED        (Channel.CloseOk)
    AWAIT_HEADER  HEADER          content_header   AWAIT_BODY    (OPEN for an empty body)
    AWAIT_BODY    BODY            content_body     AWAIT_BODY    (OPEN once complete)
    CLOSING       CLOSE           close_ok         CLOSING       (both sides closed at once)
    CLOSING       CLOSE_OK        -                CLOSED
    CLOSING       anything else   -                CLOSING       (discarded, as the spec says)

Any other pair is refused with the reply code its row in `_REFUSALS` names, RabbitMQ's
for the same fault: a frame on a channel never opened is 504 CHANNEL_ERROR ("expected
'channel.open'"), a second Channel.Open 504, a method where content was due 505
UNEXPECTED_FRAME. Those are connection errors: they raise `AmqpError` to the connection.

A channel error (a handler raising 404, 405, 406 or 403; a message over
`message_bytes_max`) is handled here: the channel sends Channel.Close with the code and
the failing method's ids, and moves to CLOSING, where it discards everything until the
client's Channel.CloseOk; only then is its number free again (CLOSED: the connection
forgets it). A connection error raised by a handler goes up unchanged.

The body of a message is collected here and bounded before any of it arrives: a header
announcing more than `message_bytes_max` is refused with 406 PRECONDITION_FAILED.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final, NamedTuple

from pamqp import base, body, commands, header

from .errors import AmqpError, ReplyCode
from .framing import Inbound, Outbound
from .methods import CONTENT_METHODS, Call, ConnectionInfo, Content, MethodTable, ids


class ChannelState(enum.Enum):
    CLOSED = "closed"
    """Not open (never, or no more): the number is free."""
    OPEN = "open"
    AWAIT_HEADER = "await-header"
    """A method with content arrived; its content header comes next."""
    AWAIT_BODY = "await-body"
    """The content header arrived; body frames come next, up to its body size."""
    CLOSING = "closing"
    """We sent Channel.Close; everything but Close and CloseOk is discarded."""


class ChannelEvent(enum.Enum):
    OPEN = "channel.open"
    CLOSE = "channel.close"
    CLOSE_OK = "channel.close-ok"
    FLOW = "channel.flow"
    OTHER_CHANNEL_METHOD = "channel.open-ok, channel.flow-ok"
    """Channel methods only a server sends."""
    METHOD = "method"
    """A method of a class with handlers (exchange, queue, basic, confirm, tx)."""
    CONTENT_METHOD = "method with content"
    HEADER = "content header"
    BODY = "content body"


class Row(NamedTuple):
    action: str
    """The name of the `Channel` method that handles the event ("" for none)."""
    next: ChannelState
    """The state after it, unless the action returns another."""


class Refusal(NamedTuple):
    code: ReplyCode
    explanation: str


S, E = ChannelState, ChannelEvent
_TABLE: Final[dict[tuple[ChannelState, ChannelEvent], Row]] = {
    (S.CLOSED, E.OPEN): Row("_open", S.OPEN),
    (S.OPEN, E.METHOD): Row("_dispatch", S.OPEN),
    (S.OPEN, E.CONTENT_METHOD): Row("_expect_content", S.AWAIT_HEADER),
    (S.OPEN, E.FLOW): Row("_flow", S.OPEN),
    (S.OPEN, E.CLOSE): Row("_close_ok", S.CLOSED),
    (S.AWAIT_HEADER, E.HEADER): Row("_content_header", S.AWAIT_BODY),
    (S.AWAIT_BODY, E.BODY): Row("_content_body", S.AWAIT_BODY),
    (S.CLOSING, E.CLOSE): Row("_close_ok", S.CLOSING),
    (S.CLOSING, E.CLOSE_OK): Row("", S.CLOSED),
    **{(S.CLOSING, event): Row("", S.CLOSING) for event in E if event not in (E.CLOSE, E.CLOSE_OK)},
}
"""Every allowed (state, event) pair; see the module docstring."""

_EXPECT_HEADER = Refusal(
    ReplyCode.UNEXPECTED_FRAME,
    "expected content header for class 60, got non content header frame instead",
)
_EXPECT_BODY = Refusal(
    ReplyCode.UNEXPECTED_FRAME, "expected content body, got non content body frame instead"
)
_REFUSALS: Final[dict[ChannelState, Callable[[ChannelEvent], Refusal]]] = {
    S.CLOSED: lambda _event: Refusal(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'"),
    S.OPEN: lambda event: {
        E.OPEN: Refusal(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen"),
        E.HEADER: Refusal(ReplyCode.UNEXPECTED_FRAME, "content header without a method"),
        E.BODY: Refusal(ReplyCode.UNEXPECTED_FRAME, "content body without a method"),
    }.get(event, Refusal(ReplyCode.COMMAND_INVALID, f"unexpected {event.value}")),
    S.AWAIT_HEADER: lambda _event: _EXPECT_HEADER,
    S.AWAIT_BODY: lambda _event: _EXPECT_BODY,
}
"""What a pair not in `_TABLE` is answered, by state (CLOSING has none: it discards)."""


def classify(value: Inbound) -> ChannelEvent:
    """The channel event a frame is (heartbeats never reach a channel)."""
    if isinstance(value, header.ContentHeader):
        return E.HEADER
    if isinstance(value, body.ContentBody):
        return E.BODY
    assert isinstance(value, base.Frame), value
    event = _CHANNEL_METHODS.get(type(value))
    if event is not None:
        return event
    if value.index >> 16 == commands.Channel.frame_id:
        return E.OTHER_CHANNEL_METHOD
    return E.CONTENT_METHOD if type(value) in CONTENT_METHODS else E.METHOD


_CHANNEL_METHODS: Final[dict[type[base.Frame], ChannelEvent]] = {
    commands.Channel.Open: E.OPEN,
    commands.Channel.Close: E.CLOSE,
    commands.Channel.CloseOk: E.CLOSE_OK,
    commands.Channel.Flow: E.FLOW,
}


class Channel:
    """One channel's state; see the module docstring. The connection makes one for each
    Channel.Open and forgets it once its state is CLOSED."""

    def __init__(
        self,
        number: int,
        connection: ConnectionInfo,
        methods: MethodTable,
        message_bytes_max: int,
    ) -> None:
        assert number > 0
        self.number = number
        self.state = ChannelState.CLOSED
        self._connection = connection
        self._methods = methods
        self._message_bytes_max = message_bytes_max
        # The message being received: its method, properties, size and body so far.
        self._method: base.Frame | None = None
        self._properties: commands.Basic.Properties | None = None
        self._property_bytes: bytes | None = None
        self._body_size = 0
        self._parts: list[bytes] = []
        self._received = 0

    def receive(self, value: Inbound, now_ms: int) -> list[Outbound]:
        """Handle one frame for this channel; returns the frames to send on it. Raises
        `AmqpError` for a connection error (see the module docstring)."""
        event = classify(value)
        row = _TABLE.get((self.state, event))
        if row is None:
            refusal = _REFUSALS[self.state](event)
            # Content out of order is blamed on the method whose content was due, as
            # RabbitMQ does; anything else on the frame itself.
            failing = self._method if self._method is not None else value
            method_ids = ids(failing) if isinstance(failing, base.Frame) else (0, 0)
            raise AmqpError(
                refusal.code,
                f"{refusal.explanation} (channel {self.number}, state {self.state.value})",
                *method_ids,
            )
        out: list[Outbound] = []
        next_state = row.next
        if row.action:
            try:
                chosen = getattr(self, row.action)(value, now_ms, out)
            except AmqpError as error:
                if error.hard:
                    raise
                return self._channel_error(error, value)
            if chosen is not None:
                next_state = chosen
        self.state = next_state
        return out

    def close(self, error: AmqpError) -> list[Outbound]:
        """Close this channel from the server's side for `error` (a channel error)."""
        return self._channel_error(error, None)

    # --- actions (the table's) ---------------------------------------------------------

    def _open(self, _value: Inbound, _now_ms: int, out: list[Outbound]) -> None:
        out.append(commands.Channel.OpenOk())

    def _close_ok(self, _value: Inbound, _now_ms: int, out: list[Outbound]) -> None:
        self._forget_content()
        if self.state is ChannelState.OPEN:  # CLOSING told the methods already
            self._methods.channel_closed(self.number)
        out.append(commands.Channel.CloseOk())

    def _flow(self, value: Inbound, _now_ms: int, out: list[Outbound]) -> None:
        assert isinstance(value, commands.Channel.Flow)
        if not value.active:
            # As RabbitMQ: a consumer that wants fewer messages uses basic.qos.
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "active=false", *ids(value))
        out.append(commands.Channel.FlowOk(active=True))

    def _dispatch(self, value: Inbound, now_ms: int, out: list[Outbound]) -> None:
        assert isinstance(value, base.Frame)
        self._call(value, None, now_ms, out)

    def _expect_content(self, value: Inbound, _now_ms: int, _out: list[Outbound]) -> None:
        assert isinstance(value, base.Frame)
        self._methods.handler(value)  # 540 now, not after the whole body came
        self._method = value

    def _content_header(
        self, value: Inbound, now_ms: int, out: list[Outbound]
    ) -> ChannelState | None:
        assert isinstance(value, header.ContentHeader) and self._method is not None
        method = self._method
        if value.class_id != method.index >> 16:
            raise AmqpError(
                ReplyCode.UNEXPECTED_FRAME,
                f"expected content header for class {method.index >> 16}, "
                f"got one for class {value.class_id} instead",
                *ids(method),
            )
        if value.body_size > self._message_bytes_max:
            self._forget_content()
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {value.body_size} is larger than configured max size "
                f"{self._message_bytes_max}",
                *ids(method),
            )
        self._properties = value.properties
        self._property_bytes = getattr(value, "property_bytes", None)
        self._body_size = value.body_size
        if value.body_size == 0:
            return self._complete(now_ms, out)
        return None

    def _content_body(
        self, value: Inbound, now_ms: int, out: list[Outbound]
    ) -> ChannelState | None:
        assert isinstance(value, body.ContentBody) and self._method is not None
        part = value.value
        self._received += len(part)
        if self._received > self._body_size:
            raise AmqpError(
                ReplyCode.UNEXPECTED_FRAME,
                f"content body of {self._received} bytes or more, the header said "
                f"{self._body_size}",
                *ids(self._method),
            )
        self._parts.append(part)
        if self._received == self._body_size:
            return self._complete(now_ms, out)
        return None

    # --- helpers ---------------------------------------------------------------------------

    def _complete(self, now_ms: int, out: list[Outbound]) -> ChannelState:
        method, properties = self._method, self._properties
        assert method is not None and properties is not None
        content = Content(properties, b"".join(self._parts), self._property_bytes)
        self._forget_content()
        self._call(method, content, now_ms, out)
        return ChannelState.OPEN

    def _call(
        self, method: base.Frame, content: Content | None, now_ms: int, out: list[Outbound]
    ) -> None:
        handler = self._methods.handler(method)
        call = Call(self._connection, self.number, method, content, now_ms)
        try:
            out.extend(handler(call))
        except AmqpError as error:
            if error.class_id is None:
                error.class_id, error.method_id = ids(method)
            raise

    def _forget_content(self) -> None:
        self._method = self._properties = None
        self._property_bytes = None
        self._body_size = self._received = 0
        self._parts = []

    def _channel_error(self, error: AmqpError, value: Inbound | None) -> list[Outbound]:
        if error.class_id is None and isinstance(value, base.Frame):
            error.class_id, error.method_id = ids(value)
        self._forget_content()
        if self.state is not ChannelState.CLOSING:
            self._methods.channel_closed(self.number)
        self.state = ChannelState.CLOSING
        return [
            commands.Channel.Close(
                reply_code=int(error.code),
                reply_text=error.reply_text,
                class_id=error.class_id or 0,
                method_id=error.method_id or 0,
            )
        ]
