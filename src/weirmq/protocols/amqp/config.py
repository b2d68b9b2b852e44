"""What an AMQP listener offers its clients: limits, users, virtual hosts, capabilities.

Every limit is named here with its unit and why it has its value; `AmqpConfig` carries
them to each connection (`serve.amqp_config` fills it from `weirmq.settings`). The defaults are
RabbitMQ's, so that a client tuned for RabbitMQ behaves the same against WeirMQ.

Negotiation (Connection.Tune / TuneOk) can only lower what is offered here: a client asking
for more channels or larger frames than `channel_max` / `frame_max_bytes`, or for 0 (no
limit) while we have one, is refused with 530 NOT_ALLOWED, as RabbitMQ does. The heartbeat
is the client's choice (0 turns heartbeats off), as with RabbitMQ.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from pamqp import common

CHANNEL_MAX: Final = 2047
"""Channels per connection (RabbitMQ's default `channel_max`): each channel costs state,
and a client opening thousands is usually leaking them."""
FRAME_MAX_BYTES: Final = 131_072
"""The largest frame, header and frame-end included (RabbitMQ's default `frame_max`):
message bodies larger than this travel as several body frames."""
FRAME_MIN_BYTES: Final = 4096
"""The spec's frame-min-size: the smallest frame_max a client may ask for."""
HEARTBEAT_S: Final = 60
"""The heartbeat interval we propose (RabbitMQ's default); the client decides."""
HANDSHAKE_TIMEOUT_MS: Final = 10_000
"""From the connection's first byte to Connection.Open (RabbitMQ's `handshake_timeout`):
a connection that never finishes its handshake holds a socket and memory for nothing."""
CLOSE_OK_TIMEOUT_MS: Final = 30_000
"""How long we wait for Connection.CloseOk after sending Connection.Close before closing
the socket anyway: long enough for a client busy with a backlog of deliveries."""
MESSAGE_BYTES_MAX: Final = 16 * 1024 * 1024
"""The largest message body a publish may announce (RabbitMQ 4's `max_message_size`);
larger is a channel error 406 PRECONDITION_FAILED before any of the body is buffered."""

DEFAULT_USERS: Final[Mapping[str, str]] = {"guest": "guest"}
"""RabbitMQ's default user, so clients' defaults connect unchanged."""
LOOPBACK_USERS: Final = frozenset({"guest"})
"""Users who may only connect from a loopback address (RabbitMQ's `loopback_users`): the
well-known default password must not open a broker that listens on a public address."""
DEFAULT_VHOSTS: Final = frozenset({"/"})

CAPABILITIES: Final[Mapping[str, bool]] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "consumer_priorities": True,
}
"""What Connection.Start's `server_properties.capabilities` promises. Clients branch on
these (pika, kombu and aio-pika read `publisher_confirms`, `basic.nack`,
`consumer_cancel_notify`, `connection.blocked`), so each is a promise the broker must keep;
RabbitMQ also lists `direct_reply_to`, which WeirMQ will list once it has it."""

MECHANISMS: Final = ("PLAIN", "AMQPLAIN")
"""SASL mechanisms offered, in preference order (Connection.Start's `mechanisms`)."""
LOCALES: Final = "en_US"


def _version() -> str:
    try:
        return importlib.metadata.version("weirmq")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"


@dataclass(frozen=True, slots=True)
class AmqpConfig:
    """One listener's offer; see the module docstring."""

    channel_max: int = CHANNEL_MAX
    frame_max_bytes: int = FRAME_MAX_BYTES
    heartbeat_s: int = HEARTBEAT_S
    handshake_timeout_ms: int = HANDSHAKE_TIMEOUT_MS
    close_ok_timeout_ms: int = CLOSE_OK_TIMEOUT_MS
    message_bytes_max: int = MESSAGE_BYTES_MAX
    users: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_USERS))
    """User name to password."""
    loopback_users: frozenset[str] = LOOPBACK_USERS
    vhosts: frozenset[str] = DEFAULT_VHOSTS
    capabilities: Mapping[str, bool] = field(default_factory=lambda: dict(CAPABILITIES))
    product: str = "WeirMQ"
    version: str = field(default_factory=_version)
    cluster_name: str = ""

    def __post_init__(self) -> None:
        # 0 would mean "no limit" on the wire; WeirMQ always has one (bound everything).
        assert 1 <= self.channel_max <= 65_535, self.channel_max
        assert FRAME_MIN_BYTES <= self.frame_max_bytes <= 2**32 - 1, self.frame_max_bytes
        assert 0 <= self.heartbeat_s <= 65_535, self.heartbeat_s
        assert self.handshake_timeout_ms > 0 and self.close_ok_timeout_ms > 0
        assert self.message_bytes_max > 0

    def server_properties(self) -> common.FieldTable:
        """Connection.Start's `server_properties`, shaped like RabbitMQ's (clients log
        product and version, and branch on capabilities)."""
        properties: common.FieldTable = {
            "capabilities": dict(self.capabilities),
            "product": self.product,
            "version": self.version,
            "platform": f"Python {platform.python_version()}",
            "copyright": "WeirMQ contributors",
            "information": "Licensed under the Apache License 2.0",
        }
        if self.cluster_name:
            properties["cluster_name"] = self.cluster_name
        return properties
