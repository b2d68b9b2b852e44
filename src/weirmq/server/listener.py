"""The Kafka listener: the connection pump (`weirmq.server.connection`) with Kafka's adapter
(`weirmq.protocols.kafka.session`) and the broker's connection counters.

Everything about sockets (ordered replies, in-flight and write-buffer bounds, idle close,
SO_RCVLOWAT, orderly stop) is the pump's; everything about Kafka (framing, the dispatcher)
is the adapter's. This module only puts the two together under the name the rest of the
broker knows.
"""

from __future__ import annotations

from ..protocols.kafka.dispatch import Dispatcher
from ..protocols.kafka.session import KafkaAdapter
from ..settings import Settings
from .connection import LISTEN_BACKLOG, Connection, Listener

__all__ = ["LISTEN_BACKLOG", "KafkaConnection", "KafkaServer"]

KafkaConnection = Connection
"""One Kafka client connection (the pump's `Connection` with Kafka's framer and session)."""


class KafkaServer(Listener):
    """The Kafka listener and its connections."""

    def __init__(self, dispatcher: Dispatcher, settings: Settings) -> None:
        super().__init__(KafkaAdapter(dispatcher), settings, dispatcher.broker.stats)
        self.dispatcher = dispatcher
