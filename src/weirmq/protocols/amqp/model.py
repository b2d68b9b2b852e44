"""AMQP's exchanges and queues on WeirMQ's log: what each one is, where it lives, how it is
declared, found again after a restart, and written to.

Every AMQP object is a topic, so everything published over AMQP is on the log, replayable
and readable by Kafka clients and Spark:

    AMQP                        WeirMQ
    --------------------------  -----------------------------------------------------------
    exchange E (vhost /)        the exchange topic E (`weirmq.exchange.type`, docs/routing.md):
                                a publish appends to it and the router copies the message to
                                the topics bound to it, in the same turn
    the default exchange ""     none: a publish appends to the queue named by the routing key
    queue Q (vhost /)           topic Q, one partition, read by the share group "amqp:Q" (the
                                queue engine, `weirmq.queues`): locks, acks, redelivery
    binding E -> Q (key K)      a binding of exchange topic E to topic Q (`Exchanges.bind`)
    binding E -> E2             an exchange-to-exchange binding of the two topics

Topic names. A name Kafka allows (letters, digits, `.`, `_`, `-`, at most 249, not starting
with `__`) is used as it is, in vhost `/`; other vhosts prefix `<vhost>.`. Otherwise, or
when the name is taken by a topic that is not this object (Celery declares an exchange and
a queue both called `celery`, and a Kafka user may own a plain topic of that name), the
topic gets a suffix (`.queue`, `.exchange`) or, failing that, a readable prefix and a
hash. The topic records which AMQP object it is (`weirmq.amqp.queue` /
`weirmq.amqp.exchange`: vhost, name, flags and arguments, JSON), and `load` builds the
registry from those configs, so a lookup never re-derives a name. An exchange made by
Kafka clients or the CLI (a topic with `weirmq.exchange.type` and no AMQP record) is the
AMQP exchange of the same name in vhost `/`: that is how a record a Kafka producer writes
to an exchange reaches AMQP consumers.

Declarations are checked as RabbitMQ checks them (the texts are RabbitMQ's, since people
search for them): a passive declare of a missing object is 404; a redeclare with other
flags or arguments 406 "inequivalent arg"; names starting with `amq.` are reserved (403);
an exclusive queue belongs to the connection that declared it (405 to others) and goes
with it. Queues that are not durable, and exclusive ones, are deleted when the broker
starts, as RabbitMQ's transient queues are. RabbitMQ's queue arguments WeirMQ does not
enforce yet (`NOT_YET_ARGUMENTS`: x-max-length-bytes on a classic queue, ...) are refused
with 406 and a text saying so, rather than accepted and ignored; arguments RabbitMQ does
not know are kept and ignored, as RabbitMQ keeps them.

Sans-I/O apart from the broker's own synchronous calls (topic creation fsyncs
topics.json, a binding appends to `__weirmq_routing`): each method returns or raises
`AmqpError` with RabbitMQ's code.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import logging
import os
import re
import uuid
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from pamqp import commands

from ...broker.configs import AMQP_EXCHANGE, AMQP_QUEUE, EXCHANGE_ALTERNATE, EXCHANGE_TYPE
from ...broker.delays import DELAY_MAX_MS
from ...broker.exchanges import RoutingError
from ...broker.partition import Durability, Partition
from ...broker.shares import DeadLetter, ShareConfig
from ...errors import KafkaError
from ...records.batch import Record, encode_batch
from .deadletter import dead_letter, engine_letters, properties_of
from .errors import AmqpError, ReplyCode
from .mapping import PROPERTIES_HEADER, record_headers

if TYPE_CHECKING:
    from ...broker.core import Broker

log = logging.getLogger(__name__)

DEFAULT_EXCHANGE: Final = ""
BUILTIN_EXCHANGES: Final[Mapping[str, str]] = {
    "amq.direct": "direct",
    "amq.fanout": "fanout",
    "amq.topic": "topic",
    "amq.headers": "headers",
    "amq.match": "headers",
}
"""RabbitMQ's pre-declared exchanges (every vhost has them); made on first use."""
EXCHANGE_TYPES: Final = frozenset({"direct", "fanout", "topic", "headers"})
DELAYED_TYPE: Final = "x-delayed-message"
"""RabbitMQ's delayed-message exchange type (its plugin): a publish with an `x-delay`
header (milliseconds) is routed that much later, by its `x-delayed-type`."""
FORWARD_BATCH: Final = 500
"""Due messages an x-delayed-message exchange routes per turn of its upkeep."""
RESERVED_PREFIX: Final = "amq."
SERVER_NAMED_PREFIX: Final = "amq.gen-"
QUEUE_GROUP_PREFIX: Final = "amqp:"
NAME_BYTES_MAX: Final = 255
"""AMQP's short string: exchange and queue names."""
TOPIC_NAME_CHARS_MAX: Final = 249
_LEGAL_TOPIC: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")
_ILLEGAL_CHARS: Final = re.compile(r"[^A-Za-z0-9._-]")

CONSUMER_TIMEOUT_MS: Final = 1_800_000
"""How long a delivery may stay unacknowledged before it is given to another consumer
(RabbitMQ's `consumer_timeout`, 30 minutes): the lock of the queue engine."""
WINDOW_RECORDS: Final = 10_000
"""The queue engine's in-flight window (its largest): unacknowledged deliveries, and what
lies between the oldest of them and the newest, stay within it."""

SUPPORTED_ARGUMENTS: Final = frozenset(
    {
        "x-queue-type",
        "x-delivery-limit",
        "x-message-ttl",
        "x-expires",
        "x-max-length",
        "x-overflow",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-dead-letter-strategy",
        "x-single-active-consumer",
        "x-max-priority",
        "x-max-length-bytes",
    }
)
NOT_YET_ARGUMENTS: Final = frozenset({"x-max-age", "x-stream-max-segment-size-bytes"})
"""RabbitMQ queue arguments WeirMQ refuses (406) on a classic or quorum queue: a stream's
retention, which a queue (trimmed below what it settled) has no use for. The rest of
RabbitMQ's arguments are enforced, or are about replicas and memory (`x-queue-mode`,
the locators), which one broker writing to its log accepts and has nothing to do with."""
OVERFLOW_MODES: Final = frozenset({"drop-head", "reject-publish", "reject-publish-dlx"})
DEAD_LETTER_STRATEGIES: Final = frozenset({"at-most-once", "at-least-once"})
TTL_MS_MAX: Final = 315_360_000_000
"""RabbitMQ's bound for x-message-ttl, x-expires and the expiration property: ten years
in milliseconds (Celery's delayed delivery declares TTLs up to 2**27 seconds)."""
SIZE_READ_RECORDS: Final = 1000
"""Messages read at a time to learn their body sizes (x-max-length-bytes)."""
EXPIRE_SCAN_MAX: Final = 1000
"""Messages one expiry pass looks at from a queue's head (the next pass follows at once
when they had all expired): bounds the work of one turn of the loop."""
PRIORITY_MAX: Final = 255
"""RabbitMQ's bound for x-max-priority (it advises 10 at most; every level costs it a
queue, and here nothing: levels are only an order of delivery)."""
QUEUE_TYPES: Final = frozenset({"classic", "quorum"})


@dataclass(slots=True, eq=False)
class QueueDef:
    vhost: str
    name: str
    topic: str
    topic_id: uuid.UUID
    durable: bool
    exclusive: bool
    auto_delete: bool
    arguments: dict[str, Any]
    owner: object | None = None
    """The connection of an exclusive queue (not persisted: it goes with it)."""
    consumers: int = 0
    had_consumers: bool = False
    last_used_ms: int = 0
    """For `x-expires`: the last declare, get or consumer (RabbitMQ's "unused")."""
    expiring: bool = False
    """A message with an `expiration` property was published to it (since the start):
    its upkeep expires heads then, as for a queue TTL."""
    forward_to: ExchangeDef | None = None
    """For the holding queue of an x-delayed-message exchange: where due messages go."""

    @property
    def group_id(self) -> str:
        return QUEUE_GROUP_PREFIX + self.topic

    def _int_argument(self, name: str) -> int | None:
        value = self.arguments.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def message_ttl_ms(self) -> int | None:
        return self._int_argument("x-message-ttl")

    @property
    def expires_ms(self) -> int | None:
        return self._int_argument("x-expires")

    @property
    def max_length(self) -> int | None:
        return self._int_argument("x-max-length")

    @property
    def max_length_bytes(self) -> int | None:
        return self._int_argument("x-max-length-bytes")

    @property
    def overflow(self) -> str:
        value = self.arguments.get("x-overflow")
        return value if isinstance(value, str) else "drop-head"

    @property
    def dead_letter_exchange(self) -> str | None:
        value = self.arguments.get("x-dead-letter-exchange")
        return value if isinstance(value, str) else None

    @property
    def max_priority(self) -> int:
        """`x-max-priority` (0: not a priority queue)."""
        return self._int_argument("x-max-priority") or 0

    @property
    def single_active(self) -> bool:
        return self.arguments.get("x-single-active-consumer") is True

    @property
    def is_stream(self) -> bool:
        """`x-queue-type=stream`: the topic read non-destructively, each consumer from
        its own offset (no share group, nothing acknowledged away)."""
        return self.arguments.get("x-queue-type") == "stream"

    @property
    def needs_upkeep(self) -> bool:
        """Whether something must happen without a consumer: TTL expiry, a length limit,
        expiry of the queue itself."""
        return (
            self.message_ttl_ms is not None
            or self.max_length is not None
            or self.max_length_bytes is not None
            or self.expires_ms is not None
            or self.expiring
            or self.forward_to is not None
        )

    def document(self) -> str:
        return json.dumps(
            {
                "vhost": self.vhost,
                "name": self.name,
                "durable": self.durable,
                "exclusive": self.exclusive,
                "auto_delete": self.auto_delete,
                "arguments": self.arguments,
            },
            sort_keys=True,
        )

    def label(self) -> str:
        return f"queue '{self.name}' in vhost '{self.vhost}'"


@dataclass(slots=True, eq=False)
class ExchangeDef:
    vhost: str
    name: str
    topic: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    declared: bool = True
    """Declared over AMQP (False: an exchange topic made by Kafka clients or the CLI)."""
    delayed_topic: str | None = None
    """An x-delayed-message exchange's holding topic (see `publish` and `forward`)."""

    @property
    def route_type(self) -> str:
        """How it routes: its type, or an x-delayed-message exchange's x-delayed-type."""
        if self.type == DELAYED_TYPE:
            return str(self.arguments.get("x-delayed-type", "direct"))
        return self.type

    def document(self) -> str:
        document: dict[str, Any] = {
            "vhost": self.vhost,
            "name": self.name,
            "type": self.type,
            "durable": self.durable,
            "auto_delete": self.auto_delete,
            "internal": self.internal,
            "arguments": self.arguments,
        }
        if self.delayed_topic is not None:
            document["delayed_topic"] = self.delayed_topic
        return json.dumps(document, sort_keys=True)

    def label(self) -> str:
        return f"exchange '{self.name}' in vhost '{self.vhost}'"


class BodySizes:
    """The body size of each message of a queue from its oldest unsettled one, as
    cumulative sums (an append-only array), so that the bytes of any range of ready
    messages is one subtraction: what `x-max-length-bytes` counts, as RabbitMQ counts it
    (bodies only). Each message is read once, when it is first counted."""

    def __init__(self, queue: QueueDef, start: int) -> None:
        self.queue = queue
        self.base = start
        self._cumulative = array("q", [0])

    @property
    def end(self) -> int:
        return self.base + len(self._cumulative) - 1

    def advance(self, start: int) -> None:
        """Forget the sizes below `start` (settled), once they are most of the array."""
        if start <= self.base:
            return
        if start >= self.end:
            self.base, self._cumulative = start, array("q", [0])
            return
        dropped = start - self.base
        if dropped * 2 < len(self._cumulative):
            return
        offset = self._cumulative[dropped]
        self._cumulative = array("q", (value - offset for value in self._cumulative[dropped:]))
        self.base = start

    def extend(self, shares: Any, high_watermark: int) -> None:
        while self.end < high_watermark:
            upto = min(high_watermark, self.end + SIZE_READ_RECORDS)
            wanted = list(range(self.end, upto))
            total = self._cumulative[-1]
            for _, record in shares.read_records(self.queue.topic_id, 0, wanted):
                total += len(record.value or b"") if record is not None else 0
                self._cumulative.append(total)

    def between(self, first: int, last: int) -> int:
        """The body bytes of offsets `first..last` (those below what is known count 0)."""
        first = max(first, self.base)
        last = min(last, self.end - 1)
        if last < first:
            return 0
        return self._cumulative[last + 1 - self.base] - self._cumulative[first - self.base]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A publish checked and encoded, not yet appended."""

    routed: bool
    """Some queue gets it (for `mandatory`)."""
    partition: Partition | None
    """Where it is appended (None: nowhere, an unroutable default-exchange publish)."""
    record: Record


@dataclass(frozen=True, slots=True)
class Publication:
    """Where a publish went."""

    routed: bool
    """Some queue got it (for `mandatory`)."""
    partition: Partition | None
    """The partition appended to (None: nothing was, an unroutable default-exchange
    publish); its fsync below `durable_offset` confirms the message."""
    durable_offset: int | None


class AmqpModel:
    """The registry of one broker's AMQP objects; see the module docstring."""

    def __init__(self, broker: Broker, *, message_bytes_max: int) -> None:
        self._broker = broker
        self._queues: dict[tuple[str, str], QueueDef] = {}
        self._exchanges: dict[tuple[str, str], ExchangeDef] = {}
        self._forwarders: dict[str, QueueDef] = {}
        self._rejecting: set[QueueDef] = set()
        """The declared queues with a reject-publish length limit (`limited`)."""
        self._body_sizes: dict[str, BodySizes] = {}
        """By queue topic, for queues with x-max-length-bytes."""
        """The holding queue of each x-delayed-message exchange, by the exchange's topic."""
        self._topic_max_bytes = str(max(1_048_588, message_bytes_max + 1_048_576))
        broker.exchanges.typed_headers = typed_headers
        self.load()

    # --- the registry ----------------------------------------------------------------------

    def load(self) -> None:
        """Find the AMQP objects in the topics' configs; delete transient queues."""
        broker = self._broker
        transient: list[str] = []
        for topic in list(broker.topics):
            queue_doc = _document(topic.configs.get(AMQP_QUEUE, ""))
            if queue_doc is not None:
                queue = QueueDef(
                    str(queue_doc.get("vhost", "/")),
                    str(queue_doc.get("name", topic.name)),
                    topic.name,
                    topic.topic_id,
                    bool(queue_doc.get("durable", True)),
                    bool(queue_doc.get("exclusive", False)),
                    bool(queue_doc.get("auto_delete", False)),
                    dict(queue_doc.get("arguments") or {}),
                )
                if queue.exclusive or not queue.durable:
                    transient.append(topic.name)
                    continue
                self._remember(queue)
                if not queue.is_stream:
                    broker.shares.set_queue_config(queue.group_id, share_config(queue.arguments))
                    self._watch_dead_letters(queue)
                queue.last_used_ms = broker.clock()
                continue
            exchange_doc = _document(topic.configs.get(AMQP_EXCHANGE, ""))
            if exchange_doc is not None:
                exchange = ExchangeDef(
                    str(exchange_doc.get("vhost", "/")),
                    str(exchange_doc.get("name", topic.name)),
                    topic.name,
                    str(exchange_doc.get("type") or topic.configs.get(EXCHANGE_TYPE, "direct")),
                    bool(exchange_doc.get("durable", True)),
                    bool(exchange_doc.get("auto_delete", False)),
                    bool(exchange_doc.get("internal", False)),
                    dict(exchange_doc.get("arguments") or {}),
                )
                delayed = exchange_doc.get("delayed_topic")
                exchange.delayed_topic = delayed if isinstance(delayed, str) else None
                if not exchange.durable:
                    transient.append(topic.name)  # RabbitMQ's transient exchanges go too
                    if exchange.delayed_topic is not None:
                        transient.append(exchange.delayed_topic)
                    continue
                self._exchanges[(exchange.vhost, exchange.name)] = exchange
                if exchange.delayed_topic is not None:
                    self._add_forwarder(exchange)
        for name in transient:
            log.info("deleting transient AMQP topic %r", name)
            try:
                broker.delete_topic(name)
            except KafkaError as exc:
                log.warning("transient AMQP topic %r not deleted: %s", name, exc)

    def queue(self, vhost: str, name: str) -> QueueDef | None:
        return self._queues.get((vhost, name))

    def queues(self) -> list[QueueDef]:
        return list(self._queues.values())

    def exchange(self, vhost: str, name: str) -> ExchangeDef | None:
        """The exchange, made on first use when it is built in, adopted when it is a
        WeirMQ exchange topic of that name (vhost `/`); None when there is none."""
        found = self._exchanges.get((vhost, name))
        if found is not None:
            if self._broker.topics.get(found.topic) is None:  # deleted through Kafka
                del self._exchanges[(vhost, name)]
                return self.exchange(vhost, name)
            return found
        if name in BUILTIN_EXCHANGES:
            return self._create_exchange(
                vhost, name, BUILTIN_EXCHANGES[name], True, False, False, {}
            )
        if vhost == "/":
            topic = self._broker.topics.get(name)
            kind = None if topic is None else topic.configs.get(EXCHANGE_TYPE)
            if topic is not None and kind:
                adopted = ExchangeDef(vhost, name, name, kind, declared=False)
                self._exchanges[(vhost, name)] = adopted
                return adopted
        return None

    def exchange_name(self, topic: str) -> str:
        """The AMQP name of the exchange whose topic is `topic` (its own name when it was
        made by Kafka clients or the CLI)."""
        for exchange in self._exchanges.values():
            if exchange.topic == topic:
                return exchange.name
        return topic

    # --- exchanges ---------------------------------------------------------------------------

    def declare_exchange(self, vhost: str, method: commands.Exchange.Declare) -> None:
        name = method.exchange
        if name == DEFAULT_EXCHANGE:
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"operation not permitted on the default exchange in vhost '{vhost}'",
            )
        found = self.exchange(vhost, name)
        if method.passive:
            if found is None:
                raise AmqpError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")
            return
        kind = method.exchange_type
        if kind not in EXCHANGE_TYPES and kind != DELAYED_TYPE:
            raise AmqpError(ReplyCode.COMMAND_INVALID, f"unknown exchange type '{kind}'")
        arguments = _plain(method.arguments or {})
        if kind == DELAYED_TYPE and arguments.get("x-delayed-type") not in EXCHANGE_TYPES:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                "Invalid argument, 'x-delayed-type' must be an existing exchange type",
            )
        if found is not None:
            _equivalent(found.label(), "type", kind, found.type)
            if found.declared:
                _equivalent(found.label(), "durable", method.durable, found.durable)
                _equivalent(found.label(), "auto_delete", method.auto_delete, found.auto_delete)
                _equivalent(found.label(), "internal", method.internal, found.internal)
                for key in sorted(set(arguments) | set(found.arguments)):
                    _equivalent(found.label(), key, arguments.get(key), found.arguments.get(key))
            return
        if name.startswith(RESERVED_PREFIX):
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"exchange name '{name}' contains reserved prefix 'amq.*'",
            )
        _check_name(name, "exchange", vhost)
        self._create_exchange(
            vhost, name, kind, method.durable, method.auto_delete, method.internal, arguments
        )

    def _create_exchange(
        self,
        vhost: str,
        name: str,
        kind: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
    ) -> ExchangeDef:
        topic = self._free_topic(vhost, name, "exchange")
        exchange = ExchangeDef(vhost, name, topic, kind, durable, auto_delete, internal, arguments)
        if kind == DELAYED_TYPE:
            exchange.delayed_topic = self._free_topic(vhost, f"{name}.delayed", "exchange")
            # The holding topic: delays on (broker/delays.py keeps each message back until
            # its x-delay passed), read by the exchange's forwarder, never by clients.
            self._create_topic(
                exchange.delayed_topic,
                {"weirmq.delay.enable": "true", "retention.ms": "-1", "retention.bytes": "-1"},
            )
        configs = {EXCHANGE_TYPE: exchange.route_type, AMQP_EXCHANGE: exchange.document()}
        alternate = arguments.get("alternate-exchange")
        if isinstance(alternate, str) and alternate:
            configs[EXCHANGE_ALTERNATE] = self._exchange_topic(vhost, alternate)
        self._create_topic(topic, configs)
        self._exchanges[(vhost, name)] = exchange
        if exchange.delayed_topic is not None:
            self._add_forwarder(exchange)
        return exchange

    def _add_forwarder(self, exchange: ExchangeDef) -> None:
        assert exchange.delayed_topic is not None
        holding = self._broker.topics.get(exchange.delayed_topic)
        if holding is None:
            log.warning("%s: its holding topic is gone; delayed messages wait", exchange.label())
            return
        queue = QueueDef(
            exchange.vhost,
            f"{exchange.name} (delayed)",
            holding.name,
            holding.topic_id,
            True,
            False,
            False,
            {},
            forward_to=exchange,
        )
        self._broker.shares.set_queue_config(queue.group_id, share_config({}))
        self._forwarders[exchange.topic] = queue

    def forwarders(self) -> list[QueueDef]:
        return list(self._forwarders.values())

    def forward(self, queue: QueueDef, now_ms: int) -> bool:
        """Route the due messages of an x-delayed-message exchange (its holding topic's
        records, appended there by the delays service once due) through the exchange;
        whether there may be more. At least once: routed, then settled."""
        exchange = queue.forward_to
        assert exchange is not None
        shares = self._broker.shares
        offsets = [
            offset
            for first, last in shares.ready_offsets(
                queue.group_id, queue.topic_id, 0, FORWARD_BATCH
            )
            for offset in range(first, min(last, first + FORWARD_BATCH) + 1)
        ][:FORWARD_BATCH]
        if not offsets:
            return False
        records = [
            Record(
                record.value,
                record.key,
                tuple((n, v) for n, v in record.headers if not n.startswith("weirmq.del")),
                record.timestamp_ms,
            )
            for _, record in shares.read_records(queue.topic_id, 0, offsets)
            if record is not None
        ]
        partition = self._broker.partition(exchange.topic, 0)
        if partition is not None and records:
            try:
                partition.publish(encode_batch(records, base_offset=0), Durability.WRITTEN)
            except KafkaError as exc:
                log.warning("%s: due messages not routed yet: %s", exchange.label(), exc)
                return False
        shares.purge(queue.group_id, queue.topic_id, 0, now_ms, offsets=offsets)
        return len(offsets) >= FORWARD_BATCH

    def _exchange_topic(self, vhost: str, name: str) -> str:
        """The topic of an exchange that may not exist yet (an alternate)."""
        found = self._exchanges.get((vhost, name))
        return found.topic if found is not None else _preferred(vhost, name)

    def delete_exchange(self, vhost: str, method: commands.Exchange.Delete) -> None:
        name = method.exchange
        if name == DEFAULT_EXCHANGE or name.startswith(RESERVED_PREFIX):
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"operation not permitted on {_exchange_label(name, vhost)}",
            )
        found = self.exchange(vhost, name)
        if found is None:
            return  # RabbitMQ 3.x and 4.x: deleting a missing exchange succeeds
        exchanges = self._broker.exchanges
        if method.if_unused and any(True for _ in exchanges.router.bindings(found.topic)):
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"{found.label()} in use")
        self._delete_topic(found.topic)
        self._exchanges.pop((vhost, name), None)
        self._drop_forwarder(found)

    def _drop_forwarder(self, exchange: ExchangeDef) -> None:
        forwarder = self._forwarders.pop(exchange.topic, None)
        if forwarder is not None:
            self._broker.shares.set_queue_config(forwarder.group_id, None)
        if exchange.delayed_topic is not None:
            self._delete_topic(exchange.delayed_topic)

    def is_forwarding(self, queue: QueueDef) -> bool:
        exchange = queue.forward_to
        return exchange is not None and self._forwarders.get(exchange.topic) is queue

    def bind_exchange(
        self, vhost: str, destination: str, source: str, key: str, arguments: Mapping[str, object]
    ) -> None:
        dest = self._required_exchange(vhost, destination)
        src = self._required_exchange(vhost, source)
        self._bind(src, dest.topic, key, arguments)

    def unbind_exchange(
        self, vhost: str, destination: str, source: str, key: str, arguments: Mapping[str, object]
    ) -> None:
        dest = self._required_exchange(vhost, destination)
        src = self._required_exchange(vhost, source)
        self._unbind(src, dest.topic, key, arguments)

    def _required_exchange(self, vhost: str, name: str) -> ExchangeDef:
        if name == DEFAULT_EXCHANGE:
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"operation not permitted on the default exchange in vhost '{vhost}'",
            )
        found = self.exchange(vhost, name)
        if found is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")
        return found

    # --- queues ------------------------------------------------------------------------------

    def declare_queue(
        self, vhost: str, method: commands.Queue.Declare, owner: object
    ) -> tuple[QueueDef, int]:
        """The queue (declared now or before) and its ready message count."""
        name = method.queue
        if not name:
            if method.passive:
                raise AmqpError(ReplyCode.NOT_FOUND, f"no queue '' in vhost '{vhost}'")
            name = _server_name()
        found = self.queue(vhost, name)
        if found is not None and self._broker.topics.get(found.topic) is None:
            self._forget_queue(found)  # its topic was deleted through Kafka
            found = None
        if method.passive:
            if found is None:
                raise AmqpError(ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '{vhost}'")
            self.check_owner(found, owner)
            return found, self.counts(found)[0]
        if found is not None:
            self.check_owner(found, owner)
            arguments = _plain(method.arguments or {})
            _equivalent(found.label(), "durable", method.durable, found.durable)
            _equivalent(found.label(), "exclusive", method.exclusive, found.exclusive)
            _equivalent(found.label(), "auto_delete", method.auto_delete, found.auto_delete)
            for key in sorted(set(arguments) | set(found.arguments)):
                if key in SUPPORTED_ARGUMENTS or key in NOT_YET_ARGUMENTS:
                    _equivalent(found.label(), key, arguments.get(key), found.arguments.get(key))
            return found, self.counts(found)[0]
        if name.startswith(RESERVED_PREFIX) and not method.queue == "":
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"queue name '{name}' contains reserved prefix 'amq.*'",
            )
        _check_name(name, "queue", vhost)
        arguments = _plain(method.arguments or {})
        label = f"queue '{name}' in vhost '{vhost}'"
        if arguments.get("x-queue-type") == "stream":
            return self._declare_stream(vhost, name, method, arguments, label), 0
        if arguments.get("x-queue-type") == "quorum":
            # RabbitMQ's quorum queues are durable and shared, never exclusive or auto-delete.
            for refused, flag in (
                (not method.durable, "non-durable"),
                (method.exclusive, "exclusive-owner"),
                (method.auto_delete, "auto-delete"),
            ):
                if refused:
                    raise AmqpError(
                        ReplyCode.PRECONDITION_FAILED, f"invalid property '{flag}' for {label}"
                    )
        config = _checked_arguments(label, arguments)
        topic_name = self._free_topic(vhost, name, "queue")
        queue = QueueDef(
            vhost,
            name,
            topic_name,
            uuid.UUID(int=0),
            method.durable,
            method.exclusive,
            method.auto_delete,
            arguments,
            owner if method.exclusive else None,
        )
        self._broker.shares.set_queue_config(queue.group_id, config)
        topic = self._create_topic(
            topic_name,
            {
                AMQP_QUEUE: queue.document(),
                # A queue keeps every message until it is acknowledged: consumed
                # prefixes are trimmed by `trim`, never by age or size.
                "retention.ms": "-1",
                "retention.bytes": "-1",
            },
        )
        queue.topic_id = topic.topic_id
        queue.last_used_ms = self._broker.clock()
        self._remember(queue)
        self._watch_dead_letters(queue)
        return queue, 0

    def _declare_stream(
        self,
        vhost: str,
        name: str,
        method: commands.Queue.Declare,
        arguments: dict[str, Any],
        label: str,
    ) -> QueueDef:
        """A stream: a durable topic whose retention is the stream's (`x-max-age`,
        `x-max-length-bytes`, `x-stream-max-segment-size-bytes`), kept whoever reads it."""
        if not method.durable:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED, f"invalid property 'non-durable' for {label}"
            )
        if method.exclusive:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED, f"invalid property 'exclusive-owner' for {label}"
            )
        if method.auto_delete:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED, f"invalid property 'auto-delete' for {label}"
            )
        retention = _stream_retention(label, arguments)
        topic_name = self._free_topic(vhost, name, "queue")
        queue = QueueDef(vhost, name, topic_name, uuid.UUID(int=0), True, False, False, arguments)
        topic = self._create_topic(topic_name, {AMQP_QUEUE: queue.document(), **retention})
        queue.topic_id = topic.topic_id
        queue.last_used_ms = self._broker.clock()
        self._remember(queue)
        return queue

    def stream_start(self, queue: QueueDef, spec: object) -> int:
        """Where a stream consumer starts (`x-stream-offset`): first, last, next (the
        default), an offset, or a timestamp (the first message at or after it)."""
        partition = self._broker.partition(queue.topic, 0)
        if partition is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no {queue.label()}")
        start, end = partition.log_start_offset, partition.high_watermark
        if spec is None or spec == "next":
            return end
        if spec == "first":
            return start
        if spec == "last":
            return max(start, end - 1)
        if isinstance(spec, datetime.datetime):
            found = partition.log.offset_for_timestamp(int(spec.timestamp() * 1000))
            return end if found is None else min(max(start, found.offset), end)
        if isinstance(spec, int) and not isinstance(spec, bool):
            return min(max(spec, start), end)
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"invalid x-stream-offset {spec!r} for {queue.label()}: first, last, next, an "
            "offset or a timestamp",
        )

    def check_owner(self, queue: QueueDef, owner: object) -> None:
        if queue.exclusive and queue.owner is not owner:
            raise AmqpError(
                ReplyCode.RESOURCE_LOCKED,
                f"cannot obtain exclusive access to locked {queue.label()}. It could be "
                "originally declared on another connection or the exclusive property value "
                "does not match that of the original declaration.",
            )

    def required_queue(self, vhost: str, name: str, owner: object) -> QueueDef:
        found = self.queue(vhost, name)
        if found is not None and self._broker.topics.get(found.topic) is None:
            self._forget_queue(found)
            found = None
        if found is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '{vhost}'")
        self.check_owner(found, owner)
        return found

    def counts(self, queue: QueueDef) -> tuple[int, int]:
        """(ready, unacknowledged) messages (none for a stream, as RabbitMQ answers)."""
        if queue.is_stream:
            return 0, 0  # RabbitMQ counts nothing in a stream: it is read, not consumed
        return self._broker.shares.queue_counts(queue.group_id, queue.topic_id, 0)

    def bind_queue(self, vhost: str, method: commands.Queue.Bind, owner: object) -> None:
        queue = self.required_queue(vhost, method.queue, owner)
        exchange = self._required_exchange(vhost, method.exchange)
        self._bind(exchange, queue.topic, method.routing_key, method.arguments or {})

    def unbind_queue(self, vhost: str, method: commands.Queue.Unbind, owner: object) -> None:
        queue = self.required_queue(vhost, method.queue, owner)
        exchange = self._required_exchange(vhost, method.exchange)
        self._unbind(exchange, queue.topic, method.routing_key, method.arguments or {})

    def purge_queue(self, queue: QueueDef, now_ms: int) -> int:
        if queue.is_stream:
            raise AmqpError(
                ReplyCode.NOT_IMPLEMENTED,
                f"queue.purge not supported by stream queues {queue.label()}",
            )
        return self._broker.shares.purge(queue.group_id, queue.topic_id, 0, now_ms)

    def delete_queue(self, queue: QueueDef) -> int:
        """Delete the queue's topic (and so its state and bindings); the ready messages
        it had."""
        ready, _ = self.counts(queue)
        self._delete_topic(queue.topic)
        self._forget_queue(queue)
        self._delete_unused_auto_delete()
        return ready

    def _delete_unused_auto_delete(self) -> None:
        """Auto-delete exchanges left without a binding (their last queue went, and its
        bindings with it) go too, as RabbitMQ deletes them."""
        router = self._broker.exchanges.router
        for exchange in list(self._exchanges.values()):
            if not (exchange.auto_delete and exchange.declared):
                continue
            if exchange.topic in router and not any(True for _ in router.bindings(exchange.topic)):
                self._delete_topic(exchange.topic)
                self._exchanges.pop((exchange.vhost, exchange.name), None)
                self._drop_forwarder(exchange)

    def _forget_queue(self, queue: QueueDef) -> None:
        if self._queues.get((queue.vhost, queue.name)) is queue:
            del self._queues[(queue.vhost, queue.name)]
        self._rejecting.discard(queue)
        self._broker.shares.set_queue_config(queue.group_id, None)
        self._broker.shares.set_dead_letter_handler(queue.group_id, None)

    def is_declared(self, queue: QueueDef) -> bool:
        return self._queues.get((queue.vhost, queue.name)) is queue and (
            self._broker.topics.get(queue.topic) is not None
        )

    # --- dead letters, expiry, length limits ---------------------------------------------------

    def _watch_dead_letters(self, queue: QueueDef) -> None:
        """Route the queue engine's dead letters of `queue` (rejects, the delivery limit)
        to its dead-letter exchange (deadletter.py)."""
        if queue.dead_letter_exchange is None:
            return
        clock = self._broker.clock

        def handle(pairs: Sequence[tuple[DeadLetter, Record | None]]) -> None:
            dead_letter(self, queue, engine_letters(pairs), clock())

        self._broker.shares.set_dead_letter_handler(queue.group_id, handle)

    def expired(self, queue: QueueDef, record: Record, now_ms: int) -> bool:
        due = _due(queue.message_ttl_ms, record)
        return due is not None and due <= now_ms

    def expire(self, queue: QueueDef, now_ms: int) -> int | None:
        """Dead-letter (or drop) the expired messages at the head of `queue`: from its
        first ready message, up to the first that has not expired, as RabbitMQ expires
        them. Returns when to look again (None: nothing will expire by itself)."""
        shares = self._broker.shares
        offsets: list[int] = []
        for first, last in shares.ready_offsets(queue.group_id, queue.topic_id, 0, EXPIRE_SCAN_MAX):
            offsets.extend(range(first, min(last, first + EXPIRE_SCAN_MAX - len(offsets) - 1) + 1))
            if len(offsets) >= EXPIRE_SCAN_MAX:
                break
        if not offsets:
            return None
        expired: list[tuple[int, Record]] = []
        next_due: int | None = None
        for offset, record in shares.read_records(queue.topic_id, 0, offsets):
            if record is None:
                continue
            due = _due(queue.message_ttl_ms, record)
            if due is None:
                break  # the head never expires: nothing behind it does before it
            if due > now_ms:
                next_due = due
                break
            expired.append((offset, record))
        if expired:
            self._drop(queue, expired, "expired", now_ms)
            if len(expired) == len(offsets):
                next_due = now_ms  # there may be more behind this pass
        return next_due

    def enforce_length(self, queue: QueueDef, now_ms: int) -> None:
        """Keep `queue` within `x-max-length` ready messages and `x-max-length-bytes` of
        ready message bodies: drop the oldest (drop-head) or the newest (reject-publish,
        reject-publish-dlx: the publishes over the limit), dead-lettering them for
        drop-head and reject-publish-dlx."""
        count_limit, byte_limit = queue.max_length, queue.max_length_bytes
        if count_limit is None and byte_limit is None:
            return
        shares = self._broker.shares
        ready, _ = shares.queue_counts(queue.group_id, queue.topic_id, 0)
        if byte_limit is None and ready <= (count_limit or 0):
            return
        ranges = shares.ready_offsets(queue.group_id, queue.topic_id, 0, ready + 1)
        sizes = self._sizes(queue) if byte_limit is not None else None
        total = 0 if sizes is None else sum(sizes.between(a, b) for a, b in ranges)
        count_left = ready - (count_limit if count_limit is not None else ready)
        offsets: list[int] = []
        dropped_bytes = 0
        order = ranges if queue.overflow == "drop-head" else list(reversed(ranges))
        for first, last in order:
            span = range(first, last + 1)
            for offset in span if queue.overflow == "drop-head" else reversed(span):
                over_bytes = byte_limit is not None and total - dropped_bytes > byte_limit
                if len(offsets) >= count_left and not over_bytes:
                    break
                offsets.append(offset)
                if sizes is not None:
                    dropped_bytes += sizes.between(offset, offset)
            else:
                continue
            break
        if not offsets:
            return
        offsets.sort()
        if queue.overflow == "reject-publish":
            shares.purge(queue.group_id, queue.topic_id, 0, now_ms, offsets=offsets)
            return
        pairs = [
            (offset, record)
            for offset, record in shares.read_records(queue.topic_id, 0, offsets)
            if record is not None
        ]
        self._drop(queue, pairs, "maxlen", now_ms, offsets=offsets)

    def full(self, queue: QueueDef, size: int = 0) -> bool:
        """Whether a publish of `size` bytes to `queue` now would be over its length
        limits with a reject-publish overflow (the publisher is nacked)."""
        if queue.overflow == "drop-head":
            return False
        count_limit, byte_limit = queue.max_length, queue.max_length_bytes
        if count_limit is None and byte_limit is None:
            return False
        ready, _ = self.counts(queue)
        if count_limit is not None and ready >= count_limit:
            return True
        if byte_limit is None:
            return False
        sizes = self._sizes(queue)
        shares = self._broker.shares
        ranges = shares.ready_offsets(queue.group_id, queue.topic_id, 0, ready + 1)
        return sum(sizes.between(a, b) for a, b in ranges) + size > byte_limit

    def _sizes(self, queue: QueueDef) -> BodySizes:
        """The body sizes of `queue`'s messages, read once each (for x-max-length-bytes)."""
        sizes = self._body_sizes.get(queue.topic)
        partition = self._broker.partition(queue.topic, 0)
        start = self._broker.shares.queue_start(queue.group_id, queue.topic_id, 0) or 0
        if sizes is None or sizes.queue is not queue:
            sizes = self._body_sizes[queue.topic] = BodySizes(queue, start)
        if partition is not None:
            sizes.advance(start)
            sizes.extend(self._broker.shares, partition.high_watermark)
        return sizes

    def _drop(
        self,
        queue: QueueDef,
        pairs: Sequence[tuple[int, Record]],
        reason: str,
        now_ms: int,
        *,
        offsets: Sequence[int] | None = None,
    ) -> None:
        """Dead-letter these messages of `queue` first, then take them out of it."""
        dead_letter(self, queue, [(reason, record) for _, record in pairs], now_ms)
        dropped = list(offsets) if offsets is not None else [offset for offset, _ in pairs]
        self._broker.shares.purge(queue.group_id, queue.topic_id, 0, now_ms, offsets=dropped)

    def destinations(
        self, vhost: str, method: commands.Basic.Publish, properties: commands.Basic.Properties
    ) -> list[QueueDef]:
        """The queues a publish would reach (for the reject-publish check)."""
        if method.exchange == DEFAULT_EXCHANGE:
            found = self._queues.get((vhost, method.routing_key))
            return [found] if found is not None else []
        exchange = self.exchange(vhost, method.exchange)
        if exchange is None:
            return []
        try:
            stored = record_headers(method.exchange, method.routing_key, properties)
            route = self._broker.exchanges.router.route(
                exchange.topic, method.routing_key, _route_headers(stored, properties)
            )
        except RoutingError:
            return []
        by_topic = {queue.topic: queue for queue in self._queues.values()}
        return [by_topic[topic] for topic in route.topics if topic in by_topic]

    @property
    def limited(self) -> bool:
        """Whether any queue has a reject-publish length limit (publishes check it): asked
        on every publish, so kept as a set rather than found by a walk of every queue."""
        return bool(self._rejecting)

    def _remember(self, queue: QueueDef) -> None:
        self._queues[(queue.vhost, queue.name)] = queue
        limited = queue.max_length is not None or queue.max_length_bytes is not None
        if limited and queue.overflow != "drop-head":
            self._rejecting.add(queue)

    def trim(self) -> None:
        """Move each queue's log start up to its oldest unsettled message, so that the
        segments holding only acknowledged messages are deleted (a queue forgets what it
        delivered, as RabbitMQ's do; an exchange's log keeps it for replay)."""
        broker = self._broker
        for queue in [*self._queues.values(), *self._forwarders.values()]:
            partition = broker.partition(queue.topic, 0)
            if partition is None:
                continue
            start = broker.shares.queue_start(queue.group_id, queue.topic_id, 0)
            if start is not None and start > partition.log_start_offset:
                try:
                    broker.delete_records(queue.topic, 0, start)
                except KafkaError as exc:
                    log.warning("%s not trimmed: %s", queue.label(), exc)

    # --- publishing ----------------------------------------------------------------------------

    def publish(
        self,
        vhost: str,
        method: commands.Basic.Publish,
        properties: commands.Basic.Properties,
        body: bytes,
        durability: Durability,
        now_ms: int,
        property_bytes: bytes | None = None,
    ) -> Publication:
        """Append one message where `method` says; raises AmqpError (404 for a missing
        exchange, 403 for an internal one) or KafkaError (the log refused it).
        `property_bytes`: the property list as the client sent it (stored as it is)."""
        prepared = self.prepare(vhost, method, properties, body, now_ms, property_bytes)
        if prepared.partition is None:
            return Publication(False, None, None)
        published = prepared.partition.publish(encode_batch([prepared.record]), durability)
        return Publication(
            prepared.routed,
            published.durable_partition or prepared.partition,
            published.durable_offset,
        )

    def prepare(
        self,
        vhost: str,
        method: commands.Basic.Publish,
        properties: commands.Basic.Properties,
        body: bytes,
        now_ms: int,
        property_bytes: bytes | None = None,
    ) -> Prepared:
        """Where a publish goes and the record it is, checked (raises as `publish`) but
        not appended: a connection appends the publishes of one read together (one batch
        per partition, handlers.py)."""
        name, key = method.exchange, method.routing_key
        if properties.expiration is not None:
            _check_expiration(properties.expiration)
        headers = record_headers(name, key, properties, property_bytes=property_bytes)
        broker = self._broker
        if name == DEFAULT_EXCHANGE:
            queue = self._queues.get((vhost, key))
            partition = None if queue is None else broker.partition(queue.topic, 0)
            record = Record(body, None, tuple(headers), now_ms)
            return Prepared(partition is not None, partition, record)
        exchange = self.exchange(vhost, name)
        if exchange is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")
        if exchange.internal:
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"cannot publish to internal {exchange.label()}",
            )
        if exchange.type == DELAYED_TYPE:
            delay = (properties.headers or {}).get("x-delay")
            if isinstance(delay, int) and not isinstance(delay, bool) and delay > 0:
                return self._prepare_delayed(exchange, body, headers, delay, now_ms)
        routed = True
        if method.mandatory:
            try:
                route = broker.exchanges.router.route(
                    exchange.topic, key, _route_headers(headers, properties)
                )
                routed = bool(route.topics)
            except RoutingError:
                routed = False
        topic = broker.topics.get(exchange.topic)
        if topic is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")
        index = 0 if topic.partitions == 1 else _partition_for(key, topic.partitions)
        partition = broker.partition(exchange.topic, index)
        if partition is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")
        return Prepared(routed, partition, Record(body, None, tuple(headers), now_ms))

    def _prepare_delayed(
        self,
        exchange: ExchangeDef,
        body: bytes,
        headers: list[tuple[str, bytes]],
        delay_ms: int,
        now_ms: int,
    ) -> Prepared:
        """Hold a message for `delay_ms` in the exchange's holding topic (the delays
        service appends it there when due; the forwarder then routes it). Mandatory is
        not checked for delayed messages, as the RabbitMQ plugin does not."""
        assert exchange.delayed_topic is not None
        partition = self._broker.partition(exchange.delayed_topic, 0)
        if partition is None:
            raise AmqpError(ReplyCode.NOT_FOUND, f"{exchange.label()} lost its holding topic")
        held = [*headers, ("weirmq.delay.ms", str(min(delay_ms, DELAY_MAX_MS)).encode())]
        return Prepared(True, partition, Record(body, None, tuple(held), now_ms))

    # --- helpers ----------------------------------------------------------------------------

    def _bind(
        self, source: ExchangeDef, destination: str, key: str, arguments: Mapping[str, object]
    ) -> None:
        try:
            self._broker.exchanges.bind(
                source.topic, destination, **_binding_fields(source, key, arguments)
            )
        except RoutingError as exc:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, str(exc)) from None
        except KafkaError as exc:
            raise AmqpError(ReplyCode.INTERNAL_ERROR, f"binding not saved: {exc}") from None

    def _unbind(
        self, source: ExchangeDef, destination: str, key: str, arguments: Mapping[str, object]
    ) -> None:
        exchanges = self._broker.exchanges
        try:
            binding = exchanges.find_binding(
                source.topic, destination, **_binding_fields(source, key, arguments)
            )
            if binding is not None:
                exchanges.unbind(binding)
        except RoutingError:
            return  # no binding could have these fields: nothing to remove
        except KafkaError as exc:
            raise AmqpError(ReplyCode.INTERNAL_ERROR, f"binding not removed: {exc}") from None
        unused = not any(True for _ in exchanges.router.bindings(source.topic))
        if source.auto_delete and source.declared and unused:
            self._delete_topic(source.topic)
            self._exchanges.pop((source.vhost, source.name), None)
            self._drop_forwarder(source)

    def _free_topic(self, vhost: str, name: str, kind: str) -> str:
        """A topic name for a new object (see the module docstring)."""
        preferred = _preferred(vhost, name)
        topics = self._broker.topics
        candidates = [preferred, f"{preferred}.{kind}"]
        digest = hashlib.sha256(f"{kind}\0{vhost}\0{name}".encode()).hexdigest()[:12]
        readable = _ILLEGAL_CHARS.sub("_", name)[:180].lstrip("_") or kind
        candidates.append(f"amqp.{kind}.{readable}.{digest}")
        for candidate in candidates:
            free = topics.get(candidate) is None and topics.pending(candidate) is None
            if _legal_topic(candidate) and free:
                return candidate
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"no topic name is free for {kind} '{name}' in vhost '{vhost}'",
        )

    def _create_topic(self, name: str, configs: dict[str, str]) -> Any:
        configs.setdefault("max.message.bytes", self._topic_max_bytes)
        try:
            return self._broker.create_topic(name, 1, configs)
        except KafkaError as exc:
            raise AmqpError(
                ReplyCode.INTERNAL_ERROR, f"topic '{name}' not created: {exc}"
            ) from None

    def _delete_topic(self, name: str) -> None:
        try:
            self._broker.delete_topic(name)
        except KafkaError as exc:
            if self._broker.topics.get(name) is not None:
                raise AmqpError(
                    ReplyCode.INTERNAL_ERROR, f"topic '{name}' not deleted: {exc}"
                ) from None


STREAM_ARGUMENTS: Final = frozenset(
    {
        "x-queue-type",
        "x-max-age",
        "x-max-length-bytes",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
    }
)
"""What a stream's declaration may carry; the last two are about replicas, which one
broker accepts and has nothing to do with."""
_AGE_UNITS: Final = {
    "Y": 365 * 86_400_000,
    "M": 30 * 86_400_000,
    "D": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1000,
}
_AGE: Final = re.compile(r"([0-9]+)([YMDhms])")


def _stream_retention(label: str, arguments: Mapping[str, Any]) -> dict[str, str]:
    """A stream's arguments as its topic's retention configs (RabbitMQ's words in 406s).
    Without any, a stream keeps everything, as RabbitMQ's does."""
    configs = {"retention.ms": "-1", "retention.bytes": "-1"}
    for key, value in arguments.items():
        if key not in STREAM_ARGUMENTS:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid arg '{key}' for {label} of queue type rabbit_stream_queue",
            )
        if key == "x-max-age":
            match = _AGE.fullmatch(value) if isinstance(value, str) else None
            if match is None or int(match.group(1)) == 0:
                raise AmqpError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"invalid arg 'x-max-age' for {label}: {_shown(value)} is not a positive "
                    "number with a unit (Y, M, D, h, m, s)",
                )
            configs["retention.ms"] = str(int(match.group(1)) * _AGE_UNITS[match.group(2)])
        elif key in ("x-max-length-bytes", "x-stream-max-segment-size-bytes"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
                raise AmqpError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"invalid arg '{key}' for {label}: {_shown(value)} is not a number of "
                    "bytes (at least 1024)",
                )
            name = "retention.bytes" if key == "x-max-length-bytes" else "segment.bytes"
            configs[name] = str(min(value, 2**31 - 1) if name == "segment.bytes" else value)
    return configs


def _check_expiration(text: str) -> None:
    """The `expiration` property as RabbitMQ checks it: milliseconds, as decimal digits,
    at most `TTL_MS_MAX` (406 otherwise, closing the channel)."""
    try:
        value = int(text)
    except ValueError:
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}': {{error,no_integer}}"
        ) from None
    if value < 0:
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"invalid expiration '{text}': {{value_negative,{value}}}",
        )
    if value > TTL_MS_MAX:
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"invalid expiration '{text}': {{value_too_large,{value}}}",
        )


def _due(ttl_ms: int | None, record: Record) -> int | None:
    """When a stored message expires: its timestamp plus the smaller of the queue's TTL
    and its own `expiration` (milliseconds, as text); None when neither applies."""
    due_ms = ttl_ms
    for name, value in record.headers:
        if name == "expiration" and value is not None:
            try:
                own = int(value)
            except ValueError:
                break
            if own >= 0:
                due_ms = own if due_ms is None else min(due_ms, own)
            break
    return None if due_ms is None else record.timestamp_ms + due_ms


def share_config(arguments: Mapping[str, Any]) -> ShareConfig:
    """The queue engine's settings for a queue with these (checked) arguments: no lock
    timeout short of RabbitMQ's consumer timeout, immediate redelivery, the whole log from
    the queue's creation, and a delivery limit only when `x-delivery-limit` sets one."""
    limit = arguments.get("x-delivery-limit")
    return ShareConfig(
        record_lock_duration_ms=CONSUMER_TIMEOUT_MS,
        # RabbitMQ counts redeliveries: a limit of N allows N + 1 deliveries.
        delivery_count_limit=(limit + 1) if isinstance(limit, int) and limit >= 0 else 2**31 - 1,
        max_record_locks=WINDOW_RECORDS,
        auto_offset_reset="earliest",
        retry_backoff_ms=0,
    )


def _checked_arguments(label: str, arguments: Mapping[str, Any]) -> ShareConfig:
    """Check a new queue's arguments as RabbitMQ does (406 with its words); the queue
    engine's settings for them."""

    def invalid(key: str, why: str) -> AmqpError:
        return AmqpError(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{key}' for {label}: {why}")

    def whole(key: str, value: Any, low: int, high: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(key, f"{{unacceptable_type,{_shown(value)}}}")
        if value < low:
            raise invalid(
                key, f"{{value_negative,{value}}}" if value < 0 else f"{{value_zero,{value}}}"
            )
        if value > high:
            raise invalid(key, f"{{value_too_large,{value}}}")

    for key, value in arguments.items():
        if key in NOT_YET_ARGUMENTS:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"argument '{key}' of {label} is not supported by WeirMQ yet",
            )
        if key == "x-queue-type":
            if value == "stream":
                raise invalid(key, "stream queues are not supported by WeirMQ yet")
            if value not in QUEUE_TYPES:
                raise invalid(key, f"{_shown(value)} is not one of classic, quorum")
        elif key == "x-delivery-limit":
            whole(key, value, 0, 2**31 - 2)
        elif key == "x-max-length-bytes":
            whole(key, value, 0, 2**63 - 1)
        elif key == "x-message-ttl" or key == "x-max-length":
            whole(key, value, 0, TTL_MS_MAX if key == "x-message-ttl" else 2**63 - 1)
        elif key == "x-expires":
            whole(key, value, 1, TTL_MS_MAX)
        elif key == "x-overflow":
            if value not in OVERFLOW_MODES:
                raise invalid(
                    key, f"{_shown(value)} is not one of {', '.join(sorted(OVERFLOW_MODES))}"
                )
        elif key == "x-max-priority":
            whole(key, value, 1, PRIORITY_MAX)
        elif key == "x-single-active-consumer" and not isinstance(value, bool):
            raise invalid(key, f"{{unacceptable_type,{_shown(value)}}}")
        elif key == "x-dead-letter-strategy":
            if value not in DEAD_LETTER_STRATEGIES:
                raise invalid(key, f"{_shown(value)} is not one of at-most-once, at-least-once")
        elif key in ("x-dead-letter-exchange", "x-dead-letter-routing-key") and not isinstance(
            value, str
        ):
            raise invalid(key, f"{{unacceptable_type,{_shown(value)}}}")
    if "x-dead-letter-routing-key" in arguments and "x-dead-letter-exchange" not in arguments:
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"invalid arg 'x-dead-letter-routing-key' for {label}: Key "
            "x-dead-letter-routing-key should be specified together with "
            "x-dead-letter-exchange",
        )
    return share_config(arguments)


def _equivalent(label: str, what: str, received: object, current: object) -> None:
    if received != current or type(received) is not type(current):
        numbers = (int, float)
        if (
            isinstance(received, numbers)
            and isinstance(current, numbers)
            and not isinstance(received, bool)
            and not isinstance(current, bool)
            and received == current
        ):
            return
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"inequivalent arg '{what}' for {label}: received {_shown(received)} but "
            f"current is {_shown(current)}",
        )


def _shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"'{str(value).lower()}'"
    if isinstance(value, str):
        return f"'{value}'"
    return f"the value '{value}'"


def _plain(table: Mapping[str, Any]) -> dict[str, Any]:
    """A field table as JSON values (what a definition stores and compares)."""
    return {str(key): _plain_value(value) for key, value in table.items()}


def _plain_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Mapping):
        return _plain(value)
    if isinstance(value, list | tuple):
        return [_plain_value(item) for item in value]
    return str(value)


def _route_headers(
    stored: Sequence[tuple[str, bytes]], properties: commands.Basic.Properties
) -> dict[str, Any]:
    """The headers the router sees for a message: the stored record's (as an exchange
    partition routes it), with the AMQP header table's typed values over them (what
    `typed_headers` gives the broker for the same record)."""
    headers: dict[str, Any] = dict(stored)
    headers.update(_routable_headers(properties.headers or {}))
    return headers


def typed_headers(stored: Sequence[tuple[str, bytes | None]]) -> Mapping[str, Any]:
    """The typed header table of a stored AMQP message (`Exchanges.typed_headers`): its
    routable values (strings, numbers, booleans, bytes, null); nothing for a record
    without AMQP properties or with damaged ones."""
    if not any(name == PROPERTIES_HEADER for name, _ in stored):
        return {}
    try:
        _, _, properties = properties_of(stored)
    except Exception:
        return {}
    return _routable_headers(properties.headers or {})


def _routable_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    return {
        str(k): v
        for k, v in headers.items()
        if v is None or isinstance(v, bool | int | float | str | bytes)
    }


def _binding_fields(
    source: ExchangeDef, key: str, arguments: Mapping[str, object]
) -> dict[str, Any]:
    """The binding fields an exchange type routes on: the key for direct and topic, the
    arguments (with x-match) for headers, nothing for fanout."""
    if source.route_type == "headers":
        return {"arguments": _routable_headers(arguments)}
    if source.route_type == "fanout":
        return {}
    return {"key": key}


def _document(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _preferred(vhost: str, name: str) -> str:
    return name if vhost == "/" else f"{_ILLEGAL_CHARS.sub('_', vhost.strip('/'))}.{name}"


def _legal_topic(name: str) -> bool:
    return (
        bool(_LEGAL_TOPIC.fullmatch(name))
        and not name.startswith("__")
        and name
        not in (
            ".",
            "..",
        )
    )


def _check_name(name: str, kind: str, vhost: str) -> None:
    if len(name.encode()) > NAME_BYTES_MAX:
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"{kind} name is longer than {NAME_BYTES_MAX} bytes in vhost '{vhost}'",
        )


def _exchange_label(name: str, vhost: str) -> str:
    if name == DEFAULT_EXCHANGE:
        return f"the default exchange in vhost '{vhost}'"
    return f"exchange '{name}' in vhost '{vhost}'"


def _server_name() -> str:
    """RabbitMQ's form: amq.gen- and 22 characters of URL-safe base64."""
    return SERVER_NAMED_PREFIX + base64.urlsafe_b64encode(os.urandom(16)).decode()[:22]


def _partition_for(key: str, partitions: int) -> int:
    """A multi-partition exchange (made by Kafka clients): one routing key, one partition,
    so that messages with one key stay in order."""
    digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % partitions
