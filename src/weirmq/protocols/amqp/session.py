"""AMQP as the connection pump sees it (`weirmq.protocols.contract`): the thin shell that
performs what `AmqpConnection` decides.

Per connection, `AmqpAdapter` makes an `AmqpFramer` (bytes to frames) and an
`AmqpSession`, which reads the injected clock, hands each frame to the state machine and
does what the returned `Step` says, in one place (`_perform`):

- the frames are encoded with pamqp and become the frame's `Reply` (or are `send`t, for
  what a timer or the flow signal produced);
- the step's deadline arms one timer on the injected `Timers`, only when it is earlier
  than the one already armed: a deadline that moved later (traffic arrived) is found by
  `tick` when the old timer fires, which returns the new one. So a busy connection costs
  one timer per heartbeat period, not one per frame;
- a close is done from a timer due at once, never inside `handle`: the pump drops what is
  due on a connection that closes during the read that produced it, and the last frames
  (Connection.Close, CloseOk, our protocol header) must reach the client. By the time the
  timer runs they are in the transport, which writes them before it closes.

`AmqpAdapter.flow` is the protocol-neutral back-pressure signal: the broker calls it when
its flow controller blocks or unblocks publishers, and every live connection tells its
client (Connection.Blocked / Unblocked).

With a broker behind it (`AmqpBackend`, handlers.py), each connection gets its own
`ClientConnection`, the method table of its exchange, queue, basic and confirm methods;
the session is its `Sender`, for the frames that are not answers (deliveries, confirms).
Without one (the connection layer's tests), those methods are answered 540.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Final

from ...types import Clock, Timer, Timers
from ..contract import ConnectionHandle, Frame, Outcome, Reply
from .config import AmqpConfig
from .connection import AmqpConnection, Step
from .framing import AmqpFramer, encode
from .handlers import AmqpBackend, ClientConnection, Sender
from .methods import MethodTable

log = logging.getLogger(__name__)

BLOCKED_RECHECK_MS: Final = 100
"""How often a held publisher's connection looks whether it may go on (as Kafka's held
produce requests do)."""


class AmqpSession(Sender):
    """One AMQP connection; see the module docstring."""

    __slots__ = (
        "_adapter",
        "_clock",
        "_connection",
        "_global_blocked",
        "_global_reason",
        "_publish_block",
        "_publish_reason",
        "_timer",
        "_timer_at_ms",
        "_timers",
        "client",
        "machine",
    )

    def __init__(
        self,
        adapter: AmqpAdapter,
        connection: ConnectionHandle,
        frame_max_bytes: int,
    ) -> None:
        self._adapter = adapter
        self._connection = connection
        self._clock: Clock = adapter.clock
        self._timers: Timers = adapter.timers
        self._timer: Timer | None = None
        self._timer_at_ms: int | None = None
        self._global_blocked, self._global_reason = adapter.blocked, adapter.blocked_reason
        self._publish_block: Callable[[], bool] | None = None
        """While this connection's publishers are held: says when they may go on."""
        self._publish_reason = ""
        config = adapter.config
        if frame_max_bytes < config.frame_max_bytes:  # never offer what the framer refuses
            config = replace(config, frame_max_bytes=frame_max_bytes)
        backend = adapter.backend
        self.client: ClientConnection | None = None
        methods = adapter.methods
        if backend is not None:
            self.client = methods = backend.connect(self)
        self.machine = AmqpConnection(
            config, self._clock(), peer_host=connection.peer_host, methods=methods
        )
        if self._global_blocked:  # told right after OpenOk (the machine holds it till then)
            self.machine.flow(True, self._global_reason, self._clock())
        self._arm(self.machine.deadline_ms)

    # --- the contract ------------------------------------------------------------------

    def handle(self, frame: Frame) -> Outcome:
        reply = self._perform(self.machine.receive(frame, self._clock()))
        client = self.client
        if client is not None and client.definitions_changed:
            # A binding changed: its Ok is written once the change is fsynced (as the
            # Kafka and HTTP paths answer), and the replies after it wait behind it.
            client.definitions_changed = False
            return self._after_definitions_durable(client, reply)
        return reply

    async def _after_definitions_durable(
        self, client: ClientConnection, reply: Reply | None
    ) -> Reply | None:
        try:
            await client.backend.broker.exchanges.definitions_durable()
        except Exception as exc:  # the disk failed: the broker refuses writes already
            log.error("AMQP binding change not made durable: %s", exc)
        return reply

    def writing_resumed(self) -> None:
        """Deliveries held back while the transport was full may go on."""
        if self.client is not None:
            self.client.writing_resumed()

    def closed(self) -> None:
        self._cancel_timer()
        self.machine.transport_closed()
        self._adapter.sessions.discard(self)

    # --- the Sender (frames that answer no frame) ------------------------------------------

    def send(self, data: bytes, kind: str) -> None:
        if data and self.machine.state.value == "open":
            self._connection.send(Reply(b"", [data], kind))

    def write_paused(self) -> bool:
        return self._connection.write_paused

    def publishes_blocked(self) -> bool:
        return self._global_blocked

    def block_publishes(self, reason: str, clear: Callable[[], bool]) -> None:
        """Hold this connection's publishers: Connection.Blocked (to a client that
        announced the capability) and no more reading from its socket, until `clear()`
        says they may go on (looked at every `BLOCKED_RECHECK_MS`); then Unblocked and
        reading again. RabbitMQ blocks a publishing connection the same way."""
        if self._publish_block is not None:
            return
        self._publish_block, self._publish_reason = clear, reason
        self._connection.pause_reading()
        self.machine.reading_paused(True, self._clock())
        self._update_flow()
        self._timers.call_at(self._clock() + BLOCKED_RECHECK_MS, self._recheck_block)

    def throttle(self, delay_ms: int) -> None:
        """Read nothing from this connection for `delay_ms` (a quota's throttle: TCP
        back-pressure, as RabbitMQ's credit flow slows a fast publisher)."""
        if self._publish_block is not None or delay_ms <= 0:
            return
        until = self._clock() + delay_ms
        self.block_publishes("", lambda: self._clock() >= until)

    def supports(self, capability: str) -> bool:
        capabilities = self.machine.client_properties.get("capabilities")
        return isinstance(capabilities, dict) and capabilities.get(capability) is True

    # --- what the broker may ask -------------------------------------------------------

    def flow(self, blocked: bool, reason: str) -> None:
        """The broker-wide signal (free disk below its floor): tell the client publishes
        are blocked, or may resume (see `AmqpConnection.flow`). A connection that then
        publishes is held (`block_publishes`) until the signal clears."""
        self._global_blocked, self._global_reason = blocked, reason
        self._update_flow()

    def _update_flow(self) -> None:
        local = self._publish_block is not None and bool(self._publish_reason)
        blocked = self._global_blocked or local
        reason = self._global_reason if self._global_blocked else self._publish_reason
        self._push(self.machine.flow(blocked, reason, self._clock()))

    def _recheck_block(self) -> None:
        clear = self._publish_block
        if clear is None:
            return
        try:
            done = self.machine.state.value == "closed" or clear()
        except Exception:  # a check that fails must not hold the client forever
            done = True
        if not done:
            self._timers.call_at(self._clock() + BLOCKED_RECHECK_MS, self._recheck_block)
            return
        self._publish_block, self._publish_reason = None, ""
        self.machine.reading_paused(False, self._clock())
        self._connection.resume_reading()
        self._update_flow()

    def shutdown(self) -> None:
        """Close with 320 CONNECTION_FORCED: the broker is stopping."""
        self._push(self.machine.shutdown(self._clock()))

    # --- performing steps --------------------------------------------------------------

    def _perform(self, step: Step) -> Reply | None:
        reply = None
        if step.frames:
            data = b"".join(encode(channel, value) for channel, value in step.frames)
            reply = Reply(b"", [data], step.frames[0][1].name)
        if step.close is not None:
            self._cancel_timer()
            reason = step.close
            self._timers.call_at(self._clock(), lambda: self._connection.close(reason))
        else:
            self._arm(step.deadline_ms)
        return reply

    def _push(self, step: Step) -> None:
        reply = self._perform(step)
        if reply is not None:
            self._connection.send(reply)

    def _timer_due(self) -> None:
        self._timer = None
        self._timer_at_ms = None
        self._push(self.machine.tick(self._clock()))

    def _arm(self, deadline_ms: int | None) -> None:
        if deadline_ms is None:
            self._cancel_timer()
            return
        if self._timer_at_ms is not None and self._timer_at_ms <= deadline_ms:
            return  # the armed timer comes first; `tick` then returns this deadline
        self._cancel_timer()
        self._timer = self._timers.call_at(deadline_ms, self._timer_due)
        self._timer_at_ms = deadline_ms

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at_ms = None


class AmqpAdapter:
    """Makes an `AmqpFramer` and an `AmqpSession` for each connection."""

    name = "amqp"

    def __init__(
        self,
        config: AmqpConfig,
        clock: Clock,
        timers: Timers,
        methods: MethodTable | None = None,
        backend: AmqpBackend | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.clock = clock
        self.timers = timers
        self.methods = methods if methods is not None else MethodTable()
        self.sessions: set[AmqpSession] = set()
        """The live connections (for `flow` and `shutdown`)."""
        self.blocked, self.blocked_reason = False, ""
        """The broker-wide flow signal's last value, for connections made later."""
        self._frame_max_bytes = config.frame_max_bytes

    def new_framer(self, max_frame_bytes: int) -> AmqpFramer:
        # The pump's bound (max_request_bytes) caps ours; it is one setting for every
        # connection, so the session made next for this connection offers the same.
        self._frame_max_bytes = min(max_frame_bytes, self.config.frame_max_bytes)
        return AmqpFramer(self._frame_max_bytes)

    def new_session(self, connection: ConnectionHandle) -> AmqpSession:
        session = AmqpSession(self, connection, self._frame_max_bytes)
        self.sessions.add(session)
        return session

    def flow(self, blocked: bool, reason: str = "") -> None:
        """Publishers are blocked (or may resume): tell every connection's client."""
        self.blocked, self.blocked_reason = blocked, reason
        for session in list(self.sessions):
            session.flow(blocked, reason)

    def housekeeping(self) -> None:
        """Periodic work (the broker's housekeeping interval): the queues' logs are
        trimmed below what every consumer has settled."""
        if self.backend is not None:
            self.backend.trim()

    def shutdown(self) -> None:
        """Close every connection with 320 CONNECTION_FORCED."""
        for session in list(self.sessions):
            session.shutdown()
        if self.backend is not None:
            self.backend.shutdown()
