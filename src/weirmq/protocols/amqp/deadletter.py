"""Dead-lettering, as RabbitMQ does it: a message a queue gives up on is republished to the
queue's dead-letter exchange, with the story of its deaths in its headers.

A queue declared with `x-dead-letter-exchange` (and optionally
`x-dead-letter-routing-key`) dead-letters a message when

    reason           when
    ---------------  -------------------------------------------------------------------
    rejected         basic.reject or basic.nack with requeue=false
    expired          its TTL (`x-message-ttl`, or its `expiration` property) passed
    maxlen           the queue is over `x-max-length` (drop-head, reject-publish-dlx)
    delivery_limit   it was delivered more than `x-delivery-limit` + 1 times

The copy keeps the body and properties, except that an expired message loses its
`expiration` (kept as `original-expiration` in its death record, so it does not expire
again at once), and its headers get, as RabbitMQ writes them:

- `x-death`: a list of tables, the latest first, one per (queue, reason): `count`,
  `reason`, `queue`, `time`, `exchange`, `routing-keys` (and `original-expiration`); a
  second death of the same kind increments its count and moves it to the front;
- `x-first-death-reason`, `-queue`, `-exchange`: the first death, set once;
- `x-last-death-reason`, `-queue`, `-exchange`: the latest (RabbitMQ 3.13 and later).

It is published to the dead-letter exchange with the dead-letter routing key, or else its
own routing key; a dead-letter exchange that does not exist drops it, as RabbitMQ does.
Automatic deaths (expired, maxlen, delivery_limit) that come back to a queue where the
message already died that way are dropped, so that a cycle of queues with TTLs does not
spin forever (RabbitMQ drops such cycles too; it detects them a hop earlier).

The caller copies first and settles the message in its queue after (at least once: a
crash in between may dead-letter a message twice, never lose it).
"""

from __future__ import annotations

import datetime
import logging
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from pamqp import commands, header

from ...broker.partition import Durability
from ...broker.shares import DeadLetter, DeadLetterReason
from ...errors import KafkaError
from ...records.batch import Record
from .errors import AmqpError
from .mapping import delivery_content

if TYPE_CHECKING:
    from .model import AmqpModel, QueueDef

log = logging.getLogger(__name__)

REASONS: Final[dict[DeadLetterReason, str]] = {
    DeadLetterReason.REJECTED: "rejected",
    DeadLetterReason.DELIVERY_LIMIT: "delivery_limit",
}
AUTOMATIC: Final = frozenset({"expired", "maxlen", "delivery_limit"})
DEATHS_MAX: Final = 64
"""Death records kept per message (the oldest are dropped): bounds a message's headers."""
_HEAD: Final = struct.Struct(">HHQ")


def properties_of(headers: Sequence[tuple[str, bytes | None]]) -> tuple[str, str, Any]:
    """(exchange, routing key, decoded Basic.Properties) of a stored message."""
    exchange, routing_key, property_bytes = delivery_content(headers)
    content = header.ContentHeader()
    content.unmarshal(_HEAD.pack(60, 0, 0) + property_bytes)
    return exchange, routing_key, content.properties


def stream_properties(record: Record, offset: int, body_size: int) -> bytes:
    """A stream delivery's property list: the message's own, with its offset in the
    `x-stream-offset` header (RabbitMQ tells stream consumers where each message is)."""
    try:
        _, _, properties = properties_of(record.headers)
    except Exception:  # damaged stored properties: delivered as the mapping rebuilds them
        return delivery_content(record.headers)[2]
    headers = dict(properties.headers or {})
    headers["x-stream-offset"] = offset
    properties.headers = headers
    return header.ContentHeader(0, body_size, properties).marshal()[_HEAD.size :]


def dead_letter(
    model: AmqpModel,
    queue: QueueDef,
    letters: Sequence[tuple[str, Record | None]],
    now_ms: int,
) -> int:
    """Republish each (reason, record) to `queue`'s dead-letter exchange; how many were.
    Records the log no longer has are skipped."""
    target = queue.arguments.get("x-dead-letter-exchange")
    if not isinstance(target, str):
        return 0
    routing_override = queue.arguments.get("x-dead-letter-routing-key")
    sent = 0
    for reason, record in letters:
        if record is None:
            continue
        try:
            exchange, routing_key, properties = properties_of(record.headers)
        except Exception as exc:  # a record damaged or written by hand: not ours to fix
            log.warning("%s: a dead letter not decoded, dropped: %s", queue.label(), exc)
            continue
        headers = dict(properties.headers or {})
        if reason in AUTOMATIC and _died_here(headers, queue.name, reason):
            log.info("%s: dead-letter cycle (%s), message dropped", queue.label(), reason)
            continue
        death: dict[str, Any] = {
            "count": 1,
            "reason": reason,
            "queue": queue.name,
            "time": datetime.datetime.fromtimestamp(now_ms // 1000, datetime.UTC),
            "exchange": exchange,
            "routing-keys": [routing_key],
        }
        if reason == "expired" and properties.expiration:
            death["original-expiration"] = properties.expiration
            properties.expiration = None
        deaths = [d for d in headers.get("x-death") or [] if isinstance(d, dict)]
        for index, earlier in enumerate(deaths):
            if earlier.get("queue") == queue.name and earlier.get("reason") == reason:
                count = earlier.get("count")
                death["count"] = (count if isinstance(count, int) else 0) + 1
                del deaths[index]
                break
        headers["x-death"] = [death, *deaths][:DEATHS_MAX]
        for key, value in (("reason", reason), ("queue", queue.name), ("exchange", exchange)):
            headers.setdefault(f"x-first-death-{key}", value)
            headers[f"x-last-death-{key}"] = value
        properties.headers = headers
        key = routing_override if isinstance(routing_override, str) else routing_key
        publish = commands.Basic.Publish(exchange=target, routing_key=key)
        try:
            model.publish(
                queue.vhost, publish, properties, record.value or b"", Durability.WRITTEN, now_ms
            )
        except (AmqpError, KafkaError) as exc:
            # A dead-letter exchange that is missing (404) or refuses the write: dropped,
            # as RabbitMQ drops what its dead-letter exchange cannot take.
            log.info("%s: dead letter to %r dropped: %s", queue.label(), target, exc)
            continue
        sent += 1
    return sent


def engine_letters(
    pairs: Sequence[tuple[DeadLetter, Record | None]],
) -> list[tuple[str, Record | None]]:
    """The queue engine's dead letters (rejects, the delivery limit) with their reasons."""
    return [(REASONS.get(letter.reason, "rejected"), record) for letter, record in pairs]


def _died_here(headers: dict[str, Any], queue: str, reason: str) -> bool:
    deaths = headers.get("x-death")
    if not isinstance(deaths, list):
        return False
    if any(isinstance(d, dict) and d.get("reason") == "rejected" for d in deaths):
        return False  # a rejection in the history: a consumer chose it, not a cycle
    return any(
        isinstance(d, dict) and d.get("queue") == queue and d.get("reason") == reason
        for d in deaths
    )
