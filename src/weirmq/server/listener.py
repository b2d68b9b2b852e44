"""The protocol listeners: the connection pump (`weirmq.server.connection`) with each
protocol's adapter and the broker's connection counters.

Everything about sockets (ordered replies, in-flight and write-buffer bounds, idle close,
SO_RCVLOWAT, orderly stop) is the pump's; everything about a protocol (framing, the
dispatcher or state machine) is its adapter's. This module only puts the two together
under the names the rest of the broker knows:

- `KafkaServer`: Kafka's adapter (`weirmq.protocols.kafka.session`) on the pump's bounds
  as the settings give them;
- `AmqpServer`: the AMQP 0-9-1 adapter, made by `weirmq.protocols.amqp.serve.amqp_adapter`
  (the one place that decides what stands behind it), with the idle timeout of
  `amqp_idle_timeout_ms` (off by default: AMQP's heartbeats find dead peers, and a
  consumer waiting for deliveries is quiet on purpose). It shares the Kafka listener's
  request memory budget when given it, so `queued_max_request_bytes` bounds the large
  frames of every connection together, whatever its protocol.
"""

from __future__ import annotations

from ..broker.core import Broker
from ..protocols.amqp.serve import amqp_adapter
from ..protocols.kafka.dispatch import Dispatcher
from ..protocols.kafka.session import KafkaAdapter
from ..settings import Settings
from ..types import Timers
from .connection import LISTEN_BACKLOG, Connection, Listener, RequestMemory

__all__ = ["LISTEN_BACKLOG", "AmqpServer", "KafkaConnection", "KafkaServer"]

KafkaConnection = Connection
"""One Kafka client connection (the pump's `Connection` with Kafka's framer and session)."""


class KafkaServer(Listener):
    """The Kafka listener and its connections."""

    def __init__(self, dispatcher: Dispatcher, settings: Settings) -> None:
        super().__init__(KafkaAdapter(dispatcher), settings, dispatcher.broker.stats)
        self.dispatcher = dispatcher


class AmqpServer(Listener):
    """The AMQP 0-9-1 listener and its connections (see the module docstring)."""

    def __init__(
        self,
        broker: Broker,
        settings: Settings,
        timers: Timers,
        memory: RequestMemory | None = None,
    ) -> None:
        amqp = amqp_adapter(broker, settings, timers)
        super().__init__(
            amqp,
            settings,
            broker.stats,
            idle_timeout_ms=settings.amqp_idle_timeout_ms,
            memory=memory,
        )
        self.amqp = amqp
        """The adapter, for what the broker tells every connection (`flow`, `shutdown`)."""
