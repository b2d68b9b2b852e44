"""Where the AMQP classes plug in: one table of method handlers per AMQP class.

The connection state machine (`connection`) owns class 10 (Connection) and the channel
state machine (`channel`) class 20 (Channel); every other method on an open channel is
looked up here, by its AMQP class, then by its method:

    class 40 Exchange   declare, delete, bind, unbind
    class 50 Queue      declare, bind, unbind, purge, delete
    class 60 Basic      qos, consume, cancel, publish, get, ack, reject, nack, recover
    class 85 Confirm    select
    class 90 Tx         select, commit, rollback

A table without a handler for a method answers it 540 NOT_IMPLEMENTED (a connection
error, as RabbitMQ answers a method it does not implement): the Tx class today.
`handlers.ClientConnection` is the table of a connection served by the broker. A method
with content (Basic.Publish) is handed to its handler once its content header and every
body frame have arrived.

A handler is a plain function of one `Call` (the method, its content, the connection it
came on, the time) returning the frames to send on that channel, in order: sans-I/O like
the rest. It reports a fault by raising `AmqpError` with RabbitMQ's reply code for it; a
channel error (404, 405, 406, 403) closes that channel, a connection error (5xx) the
connection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from pamqp import base, commands

from .errors import AmqpError, ReplyCode
from .framing import Outbound

CONTENT_METHODS: Final[frozenset[type[base.Frame]]] = frozenset({commands.Basic.Publish})
"""Methods a client sends with content (a header frame and body frames follow)."""

HANDLED_CLASSES: Final = {
    commands.Exchange.frame_id: "exchange",
    commands.Queue.frame_id: "queue",
    commands.Basic.frame_id: "basic",
    commands.Confirm.frame_id: "confirm",
    commands.Tx.frame_id: "tx",
}
"""The AMQP classes whose methods are looked up in a `MethodTable`, by class id."""


class Content(NamedTuple):
    """A message as a publish carries it: its properties and its whole body."""

    properties: commands.Basic.Properties
    body: bytes
    property_bytes: bytes | None = None
    """The property list as the client encoded it (framing.decode keeps it)."""


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """What a handler may need to know about the connection a method came on."""

    user: str
    vhost: str
    client_properties: Mapping[str, object] = field(default_factory=dict)
    peer_host: str = ""
    frame_max_bytes: int = 0
    """Negotiated: a handler sending content cuts bodies to fit it (`framing.body_frames`)."""

    @property
    def client_name(self) -> str:
        """The client's `connection_name` property ("" when it gave none): AMQP's
        counterpart of Kafka's client.id."""
        name = self.client_properties.get("connection_name", "")
        return name if isinstance(name, str) else ""


class Call(NamedTuple):
    """One method for a handler."""

    connection: ConnectionInfo
    channel: int
    method: base.Frame
    content: Content | None
    """The message, for a method in `CONTENT_METHODS`; None otherwise."""
    now_ms: int


Reaction = Sequence[Outbound]
"""The frames a handler sends on its channel, in order (methods, content headers and
bodies); empty for a method without a reply (Basic.Ack, Basic.Publish without confirms)."""
Handler = Callable[[Call], Reaction]


class MethodTable:
    """Handlers by AMQP class, then by method; see the module docstring."""

    def __init__(self, handlers: Mapping[type[base.Frame], Handler] | None = None) -> None:
        self._classes: dict[int, dict[type[base.Frame], Handler]] = {
            class_id: {} for class_id in HANDLED_CLASSES
        }
        for method, handler in (handlers or {}).items():
            self.register(method, handler)

    # What a broker backend hears besides methods (no-ops unless it replaces them): a
    # channel closed (from either side: its unacknowledged deliveries go back to their
    # queues, its consumers end) and the connection closed (every channel with it).

    def channel_closed(self, channel: int) -> None:
        """Channel `channel` is closed or closing; nothing more of it reaches a handler."""

    def connection_closed(self) -> None:
        """The connection is closed or closing; called once."""

    def register(self, method: type[base.Frame], handler: Handler) -> None:
        class_id = method.index >> 16
        assert class_id in self._classes, f"{method.name} is not in a handled class"
        self._classes[class_id][method] = handler

    def handler(self, method: base.Frame) -> Handler:
        """The handler of `method`; raises 540 NOT_IMPLEMENTED when there is none."""
        table = self._classes.get(method.index >> 16, {})
        handler = table.get(type(method))
        if handler is None:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, f"{method_label(method)} is not implemented")
        return handler

    @property
    def implemented(self) -> list[str]:
        """The methods with a handler, by name ("Queue.Declare"), for logs and docs."""
        return sorted(m.name for table in self._classes.values() for m in table)


def method_label(method: base.Frame) -> str:
    """A method's name as RabbitMQ writes it in reply texts: 'queue.declare'."""
    class_name, _, method_name = method.name.partition(".")
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in method_name).lstrip("_")
    return f"'{class_name.lower()}.{snake}'"


def ids(method: base.Frame) -> tuple[int, int]:
    """A method's class id and method id (Close's `class_id` and `method_id`)."""
    return method.index >> 16, method.index & 0xFFFF
