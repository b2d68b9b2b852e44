"""A scripted AMQP client for the state machine tests: pamqp builds its frames (the
library's encoder talking to our decoder), a manual clock steps time.

`Peer` drives an `AmqpConnection` directly, one frame per call, and returns the `Step`
each produced; `Peer.handshake` runs the usual opening (header, StartOk, TuneOk, Open)
and checks each answer on the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pamqp import commands, frame

from weirmq.protocols.amqp.config import AmqpConfig
from weirmq.protocols.amqp.connection import AmqpConnection, State, Step
from weirmq.protocols.amqp.framing import PROTOCOL_HEADER, Outbound
from weirmq.protocols.amqp.methods import MethodTable
from weirmq.testing.clock import ManualClock

CLIENT_CAPABILITIES: Mapping[str, bool] = {
    "authentication_failure_close": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "basic.nack": True,
    "publisher_confirms": True,
}
"""What pika announces (a subset is enough for the server's choices)."""


def marshal(channel: int, value: Outbound) -> bytes:
    return frame.marshal(value, channel)


def plain(user: str, password: str) -> str:
    return f"\x00{user}\x00{password}"


class Peer:
    """One client of one `AmqpConnection`; see the module docstring."""

    def __init__(
        self,
        config: AmqpConfig | None = None,
        *,
        peer_host: str = "127.0.0.1",
        methods: MethodTable | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.config = config or AmqpConfig()
        self.conn = AmqpConnection(self.config, self.clock(), peer_host=peer_host, methods=methods)

    @property
    def state(self) -> State:
        return self.conn.state

    def raw(self, data: bytes) -> Step:
        return self.conn.receive(data, self.clock())

    def send(self, channel: int, value: Outbound) -> Step:
        return self.raw(marshal(channel, value))

    def tick(self, advance_ms: int = 0) -> Step:
        self.clock.advance(advance_ms)
        return self.conn.tick(self.clock())

    def start_ok(
        self,
        user: str = "guest",
        password: str = "guest",
        *,
        mechanism: str = "PLAIN",
        response: str | None = None,
        capabilities: Mapping[str, bool] = CLIENT_CAPABILITIES,
        **properties: Any,
    ) -> Step:
        return self.send(
            0,
            commands.Connection.StartOk(
                client_properties={"capabilities": dict(capabilities), **properties},
                mechanism=mechanism,
                response=plain(user, password) if response is None else response,
            ),
        )

    def handshake(
        self,
        *,
        channel_max: int | None = None,
        frame_max: int | None = None,
        heartbeat: int = 0,
        vhost: str = "/",
        **start_ok: Any,
    ) -> Step:
        """Header, StartOk, TuneOk (the offer, or these values), Open: each answer is
        checked; returns the Open's step."""
        (start,) = only_frames(self.raw(PROTOCOL_HEADER))
        assert isinstance(start, commands.Connection.Start)
        (tune,) = only_frames(self.start_ok(**start_ok))
        assert isinstance(tune, commands.Connection.Tune)
        tuned = commands.Connection.TuneOk(
            channel_max=tune.channel_max if channel_max is None else channel_max,
            frame_max=tune.frame_max if frame_max is None else frame_max,
            heartbeat=heartbeat,
        )
        assert only_frames(self.send(0, tuned)) == []
        return self.send(0, commands.Connection.Open(virtual_host=vhost))

    def open(self, **handshake: Any) -> Peer:
        step = self.handshake(**handshake)
        assert [type(f) for f in only_frames(step)] == [commands.Connection.OpenOk]
        assert self.state is State.OPEN
        return self

    def open_channel(self, number: int = 1) -> None:
        step = self.send(number, commands.Channel.Open())
        assert step.frames == [(number, FrameLike(commands.Channel.OpenOk))]


class FrameLike:
    """Equal to any frame of one type (for readable asserts on a step's frames)."""

    def __init__(self, kind: type) -> None:
        self.kind = kind

    def __eq__(self, other: object) -> bool:
        return isinstance(other, self.kind)

    def __repr__(self) -> str:
        return f"<any {self.kind.__name__}>"


def only_frames(step: Step) -> list[Outbound]:
    """The frames of a step that does not close the transport."""
    assert step.close is None, step.close
    return [value for _, value in step.frames]


def close_frame(step: Step) -> commands.Connection.Close:
    """The one Connection.Close a step sends (the transport stays open for CloseOk)."""
    assert step.close is None, step.close
    closes = [v for c, v in step.frames if c == 0 and isinstance(v, commands.Connection.Close)]
    assert len(closes) == 1, step.frames
    return closes[0]
