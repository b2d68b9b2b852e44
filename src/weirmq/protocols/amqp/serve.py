"""The AMQP adapter as `weirmq serve` builds it: the settings in, an `AmqpAdapter` out.

`weirmq.server.run` makes the AMQP listener from `amqp_adapter` and nothing else, so what
the listener offers and what stands behind it are decided here, in one place:

- `amqp_config` turns the `amqp_*` settings into the `AmqpConfig` every connection is
  offered (limits, users, loopback-only users, virtual hosts). The settings have already
  checked each value and the one bound between two of them (`amqp_frame_max_bytes` at
  most `max_request_bytes`, the connection pump's bound on a frame), so the config's own
  assertions hold for any loaded `Settings`;
- `amqp_adapter` makes the adapter on the broker's clock and the given timers (the loop's,
  in a running broker), with the broker behind its methods: the AMQP model (exchanges and
  queues on topics, `model`) and the backend that serves each connection's exchange,
  queue, basic and confirm methods (`handlers`). Making the model finds the AMQP objects
  in the topics' configs and deletes the transient queues left by the last run.

What the connection pump bounds itself (connections, idle time, request memory) is the
listener's business, not the adapter's: see `weirmq.server.run`.
"""

from __future__ import annotations

from ...broker.core import Broker
from ...settings import Settings
from ...types import Timers
from .config import AmqpConfig
from .handlers import AmqpBackend
from .model import AmqpModel
from .session import AmqpAdapter

__all__ = ["amqp_adapter", "amqp_config"]


def amqp_config(settings: Settings) -> AmqpConfig:
    """What the AMQP listener offers each connection, from the `amqp_*` settings."""
    return AmqpConfig(
        channel_max=settings.amqp_channel_max,
        frame_max_bytes=settings.amqp_frame_max_bytes,
        heartbeat_s=settings.amqp_heartbeat_s,
        handshake_timeout_ms=settings.amqp_handshake_timeout_ms,
        message_bytes_max=settings.amqp_message_bytes_max,
        users=dict(settings.amqp_users),
        loopback_users=frozenset(settings.amqp_loopback_users),
        vhosts=frozenset(settings.amqp_vhosts),
    )


def amqp_adapter(broker: Broker, settings: Settings, timers: Timers) -> AmqpAdapter:
    """The adapter of the AMQP listener of `broker` (see the module docstring)."""
    config = amqp_config(settings)
    model = AmqpModel(broker, message_bytes_max=config.message_bytes_max)
    return AmqpAdapter(config, broker.clock, timers, backend=AmqpBackend(broker, model))
