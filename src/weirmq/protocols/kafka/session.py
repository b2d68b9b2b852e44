"""Kafka as the connection pump sees it (`weirmq.protocols.contract`).

Kafka is the simple case of the contract: every request frame gets at most one response,
in request order, and the broker never speaks first. So the framer is `FrameReader`,
whose errors become `CloseConnection`, and the session is one call into the `Dispatcher`,
which holds everything else. (Not to be confused with Kafka's fetch sessions, KIP-227:
"session" here is the contract's word for one connection's protocol state.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..contract import CloseConnection, ConnectionHandle, Frame, Outcome
from .wire.framing import FrameError, FrameReader

if TYPE_CHECKING:
    from .dispatch import Dispatcher


class KafkaFramer(FrameReader):
    """`FrameReader`, raising the contract's `CloseConnection` for a bad frame size."""

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        try:
            return super().buffer_updated(nbytes)
        except FrameError as exc:
            raise CloseConnection(str(exc)) from exc


class KafkaSession:
    """One Kafka connection: who is asking, and the dispatcher that answers."""

    __slots__ = ("_dispatcher", "_peer_host")

    def __init__(self, dispatcher: Dispatcher, connection: ConnectionHandle) -> None:
        self._dispatcher = dispatcher
        host = connection.peer_host
        self._peer_host = f"/{host}" if host else ""
        """As Kafka shows a client's host in group descriptions: "/127.0.0.1"."""

    def handle(self, frame: Frame) -> Outcome:
        # The one place a Kafka request enters the dispatcher.
        return self._dispatcher.handle(frame, self._peer_host)

    def writing_resumed(self) -> None:
        """Nothing to do: Kafka never writes unasked."""

    def closed(self) -> None:
        """Nothing to release: Kafka's per-client state (groups, producer ids) outlives
        connections and expires on its own timers."""


class KafkaAdapter:
    """Makes a `KafkaFramer` and a `KafkaSession` for each connection."""

    name = "kafka"

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def new_framer(self, max_frame_bytes: int) -> KafkaFramer:
        return KafkaFramer(max_frame_bytes)

    def new_session(self, connection: ConnectionHandle) -> KafkaSession:
        return KafkaSession(self.dispatcher, connection)
