"""The exchange, queue, basic and confirm methods of one AMQP connection, on the broker.

`AmqpBackend` (one per listener) holds the model (`model.AmqpModel`: exchanges and queues
on topics) and one `QueueDispatcher` per queue that has consumers. `AmqpBackend.connect`
gives each connection a `ClientConnection`, whose `MethodTable` the connection's state
machine calls (`methods`): a handler answers with the frames its method gets, at once;
what comes later (deliveries, publisher confirms, a server-sent cancel) is `send`t
through the session.

Channels
--------
Per channel (`ChannelContext`): the prefetch limits (Basic.Qos: per consumer, or shared by
the channel with `global`, as RabbitMQ reads the flag), the consumers, the deliveries not
yet acknowledged by delivery tag, and publisher confirms. The channel is the member that
holds its deliveries in each queue's share group (`amqp:<topic>`), so when it closes
(either side, or with its connection) everything it holds is released in one step per
queue and delivered again with `redelivered` set, as RabbitMQ does; acknowledged messages
never come back. Cancelling a consumer keeps its deliveries on the channel (RabbitMQ).

Delivering
----------
A queue with consumers has one dispatcher task: in turn, each consumer with credit (its
prefetch, its channel's, a transport that is not write-paused) gets up to
`DELIVER_BATCH_MAX` messages acquired for its channel; when no consumer can take more, or
the queue is empty, the task waits for an append to the queue's topic, a release in its
share group, or new credit (`kick`: an ack, a Qos, a consumer, a transport resuming).
A no-ack consumer's messages are acknowledged as they are sent; its bound is the
transport's write buffer (the pump pauses writing past its high-water mark, and the
dispatcher then skips it).

Publishing
----------
A publish is appended before its handler returns (`model.publish`). In confirm mode the
channel numbers publishes from 1 and acknowledges them once durable: those that needed
no fsync at once, the rest when the fsync group commit covering them completes
(`Partition.durable`), with `multiple` for a contiguous run; a write that fails is
nacked. `mandatory` messages no queue gets are returned (312 NO_ROUTE) before their
confirm, as RabbitMQ orders them.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from pamqp import commands

from ...broker.configs import EXCHANGE_TYPE
from ...broker.exchanges import ROUTED_PRODUCER_ID_BASE, ROUTING_KEY_HEADER, routed_producer_id
from ...broker.partition import Durability, Partition, wait_any
from ...broker.shares import AckType
from ...errors import KafkaError
from ...flow.admission import Admission, Kind
from ...records.batch import ATTR_CONTROL, HEADER_BYTES, Record, encode_batch, parse_header
from ...records.codec import read_records
from ...storage.errors import StorageError
from ...types import RequestContext
from .deadletter import dead_letter, stream_properties
from .errors import AmqpError, ReplyCode
from .framing import Outbound, encode
from .mapping import content_header_frame, delivery_content
from .methods import Call, MethodTable, Reaction
from .model import AmqpModel, QueueDef

if TYPE_CHECKING:
    from ...broker.core import Broker

log = logging.getLogger(__name__)

DELIVER_BATCH_MAX: Final = 64
"""Messages one consumer is given per turn: fairness between consumers of one queue (they
take turns) against the cost of a turn."""
DELIVER_BYTES_MAX: Final = 1024 * 1024
"""About how many bytes of log one turn reads for one consumer."""
NO_ACK_BATCH: Final = 256
"""Messages a no-ack consumer is given per turn (its bound is the write buffer)."""
IDLE_WAIT_MS: Final = 30_000
"""How long a dispatcher sleeps with nothing to do before looking again (it is woken
sooner by appends, releases and new credit)."""
UNACKED_MAX: Final = 65_536
"""Deliveries one channel may hold unacknowledged whatever its prefetch (0 means no
limit in AMQP; here it means this one): bounds the channel's delivery-tag map."""
CONFIRMS_PENDING_MAX: Final = 1_000_000
"""Publishes one channel may have waiting for their confirm: past it the channel is
closed (406), since a publisher that never reads confirms would grow the list forever."""
ROUTED_PRODUCERS_REFRESH_MS: Final = 1_000
"""How often, at most, the map of exchange producer ids is rebuilt for an unknown one."""
EXCHANGE_NAME_DELIVERABLE_MAX: Final = 127
"""pamqp refuses longer exchange names in Basic.Deliver (and so does the spec's grammar)."""
_SETTLING_METHODS: Final = frozenset(
    {commands.Basic.Ack, commands.Basic.Nack, commands.Basic.Reject, commands.Basic.Publish}
)
"""The methods gathered for a flush at the end of the turn (every other one first applies
what was gathered before it, so it sees it)."""
PUBLISH_BATCH_RECORDS_MAX: Final = 1000
PUBLISH_BATCH_BYTES_MAX: Final = 1024 * 1024
"""One append of gathered publishes holds at most this many messages and about this many
bytes (a topic made by Kafka clients takes batches of 1 MB by default)."""
PRIORITY_LOOKAHEAD: Final = 1000
"""Ready messages a priority queue looks at to choose the next by priority: bounds the
work of one delivery; a message further back waits its turn in publish order."""
_CONSUMER_SERIALS: Final = itertools.count()
_FRAME_END: Final = b"\xce"
_FRAME_HEAD: Final = struct.Struct(">BHI")
_BODY_FRAME: Final = 3


class Sender:
    """How a connection's frames leave (the session implements it)."""

    def send(self, data: bytes, kind: str) -> None:  # pragma: no cover - protocol
        raise NotImplementedError

    def write_paused(self) -> bool:  # pragma: no cover - protocol
        raise NotImplementedError

    def supports(self, capability: str) -> bool:  # pragma: no cover - protocol
        raise NotImplementedError

    def publishes_blocked(self) -> bool:  # pragma: no cover - protocol
        """Whether the broker-wide flow signal (free disk) holds publishers now."""
        raise NotImplementedError

    def block_publishes(
        self, reason: str, clear: Callable[[], bool]
    ) -> None:  # pragma: no cover - protocol
        """Stop reading from this connection (Connection.Blocked) until `clear()`."""
        raise NotImplementedError

    def throttle(self, delay_ms: int) -> None:  # pragma: no cover - protocol
        """Read nothing from this connection for `delay_ms`."""
        raise NotImplementedError


@dataclass(slots=True, eq=False)
class Consumer:
    channel: ChannelContext
    tag: str
    queue: QueueDef
    no_ack: bool
    exclusive: bool
    prefetch: int
    """Per consumer (0: none); the channel's global limit applies besides."""
    unacked: int = 0
    offset: int = 0
    """A stream consumer's next offset to read."""
    priority: int = 0
    """`x-priority` (Basic.Consume's argument): higher first."""
    serial: int = field(default_factory=lambda: next(_CONSUMER_SERIALS))
    """Registration order (who is first for a single active consumer)."""

    def credit(self) -> int:
        channel = self.channel
        if channel.closed or channel.connection.sender.write_paused():
            return 0
        if self.no_ack:
            return NO_ACK_BATCH
        room = DELIVER_BATCH_MAX
        if self.prefetch:
            room = min(room, self.prefetch - self.unacked)
        if channel.global_prefetch:
            room = min(room, channel.global_prefetch - len(channel.unacked))
        return min(room, UNACKED_MAX - len(channel.unacked))

    def batch_credit(self) -> int:
        """`credit`, once there is enough of it to be worth a turn: a quarter of the
        prefetch window (up to `DELIVER_BATCH_MAX`), so that a consumer acking one message
        at a time is sent messages a few at a time, not one read of the log per ack. A
        consumer holding nothing is always served (nothing waits on a partial window)."""
        credit = self.credit()
        if credit <= 0 or self.no_ack or self.unacked == 0:
            return credit
        window = self.prefetch or self.channel.global_prefetch
        if not window:
            return credit
        return credit if credit >= max(1, min(window, DELIVER_BATCH_MAX) // 4) else 0


@dataclass(slots=True)
class Pending:
    queue: QueueDef
    offset: int
    consumer: Consumer | None
    """None for a Basic.Get."""


@dataclass(slots=True, eq=False)
class ChannelContext:
    connection: ClientConnection
    number: int
    member_id: str
    prefetch: int = 0
    """Basic.Qos(global=false): the limit of consumers made after it."""
    global_prefetch: int = 0
    consumers: dict[str, Consumer] = field(default_factory=dict)
    unacked: dict[int, Pending] = field(default_factory=dict)
    next_tag: int = 1
    confirming: bool = False
    next_seq: int = 1
    unconfirmed: deque[tuple[int, Partition | None, int]] = field(default_factory=deque)
    confirm_task: asyncio.Task[None] | None = None
    closed: bool = False


@dataclass(slots=True)
class _Publish:
    """A publish checked and encoded, waiting for its connection's flush."""

    context: ChannelContext
    seq: int
    """Its confirm's delivery tag (0 when the channel does not confirm)."""
    partition: Partition | None
    record: Record
    durability: Durability
    ok: bool
    """False: confirmed with a nack whatever happens (a reject-publish queue was full)."""


class QueueDispatcher:
    """Delivers one queue's messages to its consumers; see the module docstring."""

    def __init__(self, backend: AmqpBackend, queue: QueueDef) -> None:
        self._backend = backend
        self.queue = queue
        self.consumers: list[Consumer] = []
        self._turn = 0
        self._kicked: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def add(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self.kick()

    def remove(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.kick()

    def kick(self) -> None:
        """Credit or records may be available: look again."""
        kicked = self._kicked
        if kicked is not None and not kicked.done():
            kicked.set_result(None)

    def stop(self) -> None:
        self.consumers.clear()
        if self._task is not None:
            self._task.cancel()

    def deliver(self, consumer: Consumer, credit: int) -> bool:
        """Send `consumer` up to `credit` messages; False when the queue had none."""
        return self._backend.deliver(consumer, credit)

    # The waiter protocol of `wait_any` (a Wakeable), for kicks.
    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._kicked = waiter

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None:
        if self._kicked is waiter:
            self._kicked = None

    async def _run(self) -> None:
        backend = self._backend
        broker = backend.broker
        queue = self.queue
        try:
            while self.consumers and not broker.closing:
                if not self._turn_once():
                    partition = broker.partition(queue.topic, 0)
                    if partition is None:
                        return
                    sources = [partition, broker.shares.wakeup(queue.group_id), self]
                    waited = wait_any(
                        sources, broker.clock() + IDLE_WAIT_MS, broker.timers, broker.clock
                    )
                    if waited is not None:
                        await waited
                else:
                    await asyncio.sleep(0)  # let the loop write and read in between
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivering from %s failed", queue.label())

    def _turn_once(self) -> bool:
        """One round of deliveries; whether anything was delivered.

        Consumers take turns (one batch each), but only those of the highest priority
        (`x-priority`) that can take more: a lower one gets messages only while every
        higher one is at its prefetch limit, as RabbitMQ's consumer priorities work. With
        `x-single-active-consumer`, only the active consumer gets any: the one of the
        highest priority registered first; when it goes, the next takes over."""
        consumers = self.consumers
        if not consumers:
            return False
        if self.queue.single_active:
            active = min(consumers, key=lambda c: (-c.priority, c.serial))
            credit = active.batch_credit()
            return credit > 0 and self.deliver(active, credit)
        for level in sorted({c.priority for c in consumers}, reverse=True):
            ready = [c for c in consumers if c.priority == level and c.batch_credit() > 0]
            if not ready:
                continue
            delivered = False
            for step in range(len(ready)):
                consumer = ready[(self._turn + step) % len(ready)]
                credit = consumer.batch_credit()
                if credit <= 0:
                    continue
                if not self.deliver(consumer, credit):
                    break  # the queue is empty (for everyone)
                delivered = True
            self._turn = (self._turn + 1) % len(ready)
            return delivered
        return False


class PriorityDispatcher(QueueDispatcher):
    """Delivers a priority queue's messages (`x-max-priority`): the highest priority
    first, in publish order within one, among the first `PRIORITY_LOOKAHEAD` ready
    messages of the queue (its order beyond them is the log's). The priorities read are
    remembered by offset, so each message's headers are read once."""

    def __init__(self, backend: AmqpBackend, queue: QueueDef) -> None:
        super().__init__(backend, queue)
        self.priorities: dict[int, int] = {}

    def deliver(self, consumer: Consumer, credit: int) -> bool:
        return self._backend.deliver_by_priority(self, consumer, credit)


class StreamDispatcher(QueueDispatcher):
    """Delivers a stream's messages: each consumer reads the topic from its own offset
    (nothing is acquired or acknowledged away), within its credit."""

    async def _run(self) -> None:
        backend = self._backend
        broker = backend.broker
        queue = self.queue
        try:
            while self.consumers and not broker.closing:
                delivered = False
                for consumer in list(self.consumers):
                    credit = consumer.credit()
                    if credit > 0 and backend.deliver_stream(consumer, credit):
                        delivered = True
                if delivered:
                    await asyncio.sleep(0)
                    continue
                partition = broker.partition(queue.topic, 0)
                if partition is None:
                    return
                waited = wait_any(
                    [partition, self], broker.clock() + IDLE_WAIT_MS, broker.timers, broker.clock
                )
                if waited is not None:
                    await waited
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("delivering from %s failed", queue.label())


class QueueUpkeep:
    """What a queue does without a consumer: expire messages past their TTL, keep within
    its length limit, delete itself when unused for `x-expires`. One task per queue that
    has any of them, woken by appends to the queue, releases and its own deadlines."""

    def __init__(self, backend: AmqpBackend, queue: QueueDef) -> None:
        self._backend = backend
        self.queue = queue
        self._kicked: asyncio.Future[None] | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    def kick(self) -> None:
        kicked = self._kicked
        if kicked is not None and not kicked.done():
            kicked.set_result(None)

    def stop(self) -> None:
        self._task.cancel()

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._kicked = waiter

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None:
        if self._kicked is waiter:
            self._kicked = None

    async def _run(self) -> None:
        backend, queue = self._backend, self.queue
        broker, model = backend.broker, backend.model
        try:
            while (model.is_declared(queue) or model.is_forwarding(queue)) and not broker.closing:
                now = broker.clock()
                due: int | None = None
                if queue.forward_to is not None and model.forward(queue, now):
                    due = now  # more are due: go on after the loop serves others
                if queue.message_ttl_ms is not None or queue.expiring:
                    due = model.expire(queue, now)
                model.enforce_length(queue, now)
                expires = queue.expires_ms
                if expires is not None and queue.consumers <= 0:
                    unused_until = queue.last_used_ms + expires
                    if unused_until <= now:
                        backend.delete_queue(queue)
                        return
                    due = unused_until if due is None else min(due, unused_until)
                if due is not None and due <= now:
                    await asyncio.sleep(0)
                    continue
                partition = broker.partition(queue.topic, 0)
                if partition is None:
                    return
                sources = [partition, broker.shares.wakeup(queue.group_id), self]
                deadline = now + IDLE_WAIT_MS if due is None else due
                waited = wait_any(sources, deadline, broker.timers, broker.clock)
                if waited is not None:
                    await waited
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("upkeep of %s failed", queue.label())
        finally:
            if backend.upkeeps.get(queue.topic) is self:
                del backend.upkeeps[queue.topic]


class AmqpBackend:
    """The broker behind an AMQP listener; see the module docstring."""

    def __init__(self, broker: Broker, model: AmqpModel) -> None:
        self.broker = broker
        self.model = model
        self.dispatchers: dict[str, QueueDispatcher] = {}
        """By queue topic."""
        self.connections: set[ClientConnection] = set()
        self.upkeeps: dict[str, QueueUpkeep] = {}
        """By queue topic: the queues with TTLs, length limits or expiry."""
        self._serial = itertools.count(1)
        self._started = False
        self.admission = Admission(broker.flow)
        self._routed_producers: dict[int, str] = {}
        """The exchange (AMQP name) of each exchange partition's copies, by producer id."""
        self._routed_producers_at = -ROUTED_PRODUCERS_REFRESH_MS

    def _start(self) -> None:
        """Start the upkeep of the queues found on start (once a loop runs)."""
        if not self._started:
            self._started = True
            for queue in [*self.model.queues(), *self.model.forwarders()]:
                self.upkeep(queue)

    def upkeep(self, queue: QueueDef) -> None:
        """Make sure a queue that needs upkeep has it, and look at it now."""
        if not queue.needs_upkeep:
            return
        found = self.upkeeps.get(queue.topic)
        if found is None or found.queue is not queue:
            if found is not None:
                found.stop()
            found = self.upkeeps[queue.topic] = QueueUpkeep(self, queue)
        found.kick()

    def delete_queue(self, queue: QueueDef) -> int:
        """Delete `queue`: its consumers are cancelled, deliveries of it forgotten."""
        self.queue_deleted(queue)
        for connection in self.connections:
            for context in connection.channels.values():
                for tag in [t for t, p in context.unacked.items() if p.queue is queue]:
                    pending = context.unacked.pop(tag)
                    if pending.consumer is not None:
                        pending.consumer.unacked -= 1
        return self.model.delete_queue(queue)

    def connect(self, sender: Sender) -> ClientConnection:
        self._start()
        connection = ClientConnection(self, sender, next(self._serial))
        self.connections.add(connection)
        return connection

    def dispatcher(self, queue: QueueDef) -> QueueDispatcher:
        found = self.dispatchers.get(queue.topic)
        if found is None or found.queue is not queue:
            kind: type[QueueDispatcher] = QueueDispatcher
            if queue.is_stream:
                kind = StreamDispatcher
            elif queue.max_priority:
                kind = PriorityDispatcher
            found = self.dispatchers[queue.topic] = kind(self, queue)
        return found

    def deliver_by_priority(
        self, dispatcher: PriorityDispatcher, consumer: Consumer, credit: int
    ) -> bool:
        """`deliver` for a priority queue: pick the next messages by priority among the
        first ready ones, acquire exactly those, send them highest first."""
        queue, channel = consumer.queue, consumer.channel
        shares = self.broker.shares
        now = self.broker.clock()
        known = dispatcher.priorities
        got = self.acquire_by_priority(queue, channel.member_id, known, credit, now)
        if not got:
            return False
        records = dict(shares.read_records(queue.topic_id, 0, sorted(got)))
        frames: list[bytes] = []
        expired: list[tuple[int, Record]] = []
        for offset in sorted(got, key=lambda o: (-known.get(o, 0), o)):
            record = records.get(offset)
            if record is None:
                continue
            if self.model.expired(queue, record, now):
                expired.append((offset, record))
                continue
            exchange, routing_key, properties = self.delivery_of(record, 0)
            body = record.value or b""
            tag = channel.next_tag
            channel.next_tag += 1
            deliver = commands.Basic.Deliver(
                consumer_tag=consumer.tag,
                delivery_tag=tag,
                redelivered=got[offset] > 1,
                exchange=exchange,
                routing_key=routing_key,
            )
            frames.extend(
                _message(channel.number, deliver, properties, body, channel.connection.frame_max)
            )
            if consumer.no_ack:
                self.settle(queue, channel.member_id, [offset], AckType.ACCEPT)
            else:
                channel.unacked[tag] = Pending(queue, offset, consumer)
                consumer.unacked += 1
        if expired:
            self.expire_acquired(queue, channel.member_id, expired, now)
        if frames:
            channel.connection.sender.send(b"".join(frames), "deliver")
        return True

    def acquire_by_priority(
        self, queue: QueueDef, member_id: str, known: dict[int, int], count: int, now_ms: int
    ) -> dict[int, int]:
        """Acquire the `count` ready messages of highest priority among the first
        `PRIORITY_LOOKAHEAD` (`known` remembers priorities by offset); their delivery
        counts by offset."""
        shares = self.broker.shares
        ranges = shares.ready_offsets(queue.group_id, queue.topic_id, 0, PRIORITY_LOOKAHEAD)
        ready = [
            offset
            for first, last in ranges
            for offset in range(first, min(last, first + PRIORITY_LOOKAHEAD - 1) + 1)
        ][:PRIORITY_LOOKAHEAD]
        if not ready:
            return {}
        unknown = [offset for offset in ready if offset not in known]
        if unknown:
            for offset, record in shares.read_records(queue.topic_id, 0, unknown):
                known[offset] = _priority_of(record, queue.max_priority)
        for offset in [o for o in known if o < ready[0]]:
            del known[offset]  # settled or taken: below the first ready message
        chosen = sorted(sorted(ready, key=lambda o: (-known.get(o, 0), o))[:count])
        acquired = shares.acquire_offsets(
            queue.group_id, member_id, queue.topic_id, 0, chosen, now_ms
        )
        return {
            offset: r.delivery_count
            for r in acquired
            for offset in range(r.first_offset, r.last_offset + 1)
        }

    def deliver_stream(self, consumer: Consumer, credit: int) -> bool:
        """Send a stream consumer up to `credit` messages from its offset, each with its
        offset in the `x-stream-offset` header (as RabbitMQ does); False when it is at
        the end."""
        queue, channel = consumer.queue, consumer.channel
        partition = self.broker.partition(queue.topic, 0)
        if partition is None:
            return False
        consumer.offset = max(consumer.offset, partition.log_start_offset)
        if consumer.offset >= partition.high_watermark:
            return False
        try:
            data = memoryview(partition.read(consumer.offset, DELIVER_BYTES_MAX).records)
        except KafkaError as exc:
            log.warning("%s not read at %d: %s", queue.label(), consumer.offset, exc)
            return False
        frames: list[bytes] = []
        position = 0
        sent = 0
        while position + HEADER_BYTES <= len(data) and sent < credit:
            batch_header = parse_header(data, position)
            if position + batch_header.size > len(data):
                break
            batch = data[position : position + batch_header.size]
            position += batch_header.size
            if batch_header.attributes & ATTR_CONTROL:
                consumer.offset = batch_header.base_offset + batch_header.last_offset_delta + 1
                continue
            _, copies = read_records(batch)
            for copy in copies:
                if copy.offset < consumer.offset:
                    continue
                if sent >= credit:
                    break
                record = Record(copy.value, copy.key, tuple(copy.headers), copy.timestamp)
                exchange, routing_key, _ = self.delivery_of(record, batch_header.producer_id)
                body = record.value or b""
                properties = stream_properties(record, copy.offset, len(body))
                tag = channel.next_tag
                channel.next_tag += 1
                deliver = commands.Basic.Deliver(
                    consumer_tag=consumer.tag,
                    delivery_tag=tag,
                    redelivered=False,
                    exchange=exchange,
                    routing_key=routing_key,
                )
                frames.extend(
                    _message(
                        channel.number, deliver, properties, body, channel.connection.frame_max
                    )
                )
                channel.unacked[tag] = Pending(queue, copy.offset, consumer)
                consumer.unacked += 1
                consumer.offset = copy.offset + 1
                sent += 1
        if frames:
            channel.connection.sender.send(b"".join(frames), "deliver")
        return sent > 0

    def kick(self, queue: QueueDef) -> None:
        found = self.dispatchers.get(queue.topic)
        if found is not None:
            found.kick()

    def deliver(self, consumer: Consumer, credit: int) -> bool:
        """Acquire up to `credit` messages for `consumer` and send them; False when there
        were none to acquire."""
        channel = consumer.channel
        queue = consumer.queue
        broker = self.broker
        now = broker.clock()
        acquired = broker.shares.acquire_one(
            queue.group_id, channel.member_id, queue.topic_id, 0, credit, DELIVER_BYTES_MAX, now
        )
        if acquired is None:
            return False
        frames: list[bytes] = []
        offsets: list[int] = []
        expired: list[tuple[int, Record]] = []
        for offset, delivery_count, record, producer_id in acquired.messages():
            if self.model.expired(queue, record, now):
                expired.append((offset, record))
                continue
            value = record.value
            tag = channel.next_tag
            channel.next_tag += 1
            exchange, routing_key, properties = self.delivery_of(record, producer_id)
            body = value or b""
            deliver = commands.Basic.Deliver(
                consumer_tag=consumer.tag,
                delivery_tag=tag,
                redelivered=delivery_count > 1,
                exchange=exchange,
                routing_key=routing_key,
            )
            frames.extend(
                _message(channel.number, deliver, properties, body, channel.connection.frame_max)
            )
            if consumer.no_ack:
                offsets.append(offset)
            else:
                channel.unacked[tag] = Pending(queue, offset, consumer)
                consumer.unacked += 1
        if offsets:
            self.settle(queue, channel.member_id, offsets, AckType.ACCEPT)
        if expired:
            self.expire_acquired(queue, channel.member_id, expired, now)
        if frames:
            channel.connection.sender.send(b"".join(frames), "deliver")
        return True

    def delivery_of(self, record: Record, producer_id: int) -> tuple[str, str, bytes]:
        """A stored message's exchange, routing key and property list, as delivered. A
        record a Kafka producer wrote has no AMQP headers: its routing key is what the
        router routed it by (its `routing-key` header, else its key), and its exchange
        the one whose copy it is (the copy's producer id names the exchange partition)."""
        exchange, routing_key, properties = delivery_content(record.headers)
        if (
            not routing_key
            and record.key
            and all(name != ROUTING_KEY_HEADER for name, _ in record.headers)
        ):
            routing_key = record.key.decode("utf-8", errors="replace")[:255]
        if not exchange and producer_id >= ROUTED_PRODUCER_ID_BASE:
            exchange = self._exchange_of_producer(producer_id)
        return exchange, routing_key, properties

    def _exchange_of_producer(self, producer_id: int) -> str:
        found = self._routed_producers.get(producer_id)
        if found is None:
            now = self.broker.clock()
            if now - self._routed_producers_at < ROUTED_PRODUCERS_REFRESH_MS:
                return ""
            self._routed_producers_at = now
            self._routed_producers = {}
            for topic in self.broker.topics:
                if topic.configs.get(EXCHANGE_TYPE):
                    name = self.model.exchange_name(topic.name)
                    for index in range(topic.partitions):
                        pid = routed_producer_id(topic.topic_id.int, index)
                        self._routed_producers[pid] = name
            found = self._routed_producers.get(producer_id, "")
        return found if len(found) <= EXCHANGE_NAME_DELIVERABLE_MAX else ""

    def expire_acquired(
        self, queue: QueueDef, member_id: str, expired: list[tuple[int, Record]], now_ms: int
    ) -> None:
        """Messages acquired for a consumer that turned out expired: dead-lettered and
        settled instead of delivered (RabbitMQ never delivers an expired message)."""
        dead_letter(self.model, queue, [("expired", record) for _, record in expired], now_ms)
        self.settle(queue, member_id, [offset for offset, _ in expired], AckType.ACCEPT)

    def settle(self, queue: QueueDef, member_id: str, offsets: list[int], ack: AckType) -> None:
        """Acknowledge (accept, release, reject) `offsets` of `queue` held by `member_id`."""
        batches = [(first, last, ack) for first, last in _runs(sorted(offsets))]
        outcome = self.broker.shares.acknowledge(
            queue.group_id, member_id, queue.topic_id, 0, batches, self.broker.clock()
        )
        if outcome.message is not None and outcome.code:
            log.debug(
                "%s: settling %d message(s): %s", queue.label(), len(offsets), outcome.message
            )

    def queue_deleted(self, queue: QueueDef) -> None:
        """Cancel every consumer of a deleted queue (server-sent Basic.Cancel to clients
        that announced `consumer_cancel_notify`, as RabbitMQ does)."""
        upkeep = self.upkeeps.pop(queue.topic, None)
        if upkeep is not None:
            upkeep.stop()
        dispatcher = self.dispatchers.pop(queue.topic, None)
        if dispatcher is None:
            return
        consumers = list(dispatcher.consumers)
        dispatcher.stop()
        for consumer in consumers:
            channel = consumer.channel
            channel.consumers.pop(consumer.tag, None)
            for tag in [t for t, p in channel.unacked.items() if p.queue is queue]:
                del channel.unacked[tag]
            if channel.closed:
                continue
            sender = channel.connection.sender
            if sender.supports("consumer_cancel_notify"):
                sender.send(
                    encode(channel.number, commands.Basic.Cancel(consumer_tag=consumer.tag)),
                    "cancel",
                )

    def trim(self) -> None:
        self.model.trim()

    def shutdown(self) -> None:
        for dispatcher in self.dispatchers.values():
            dispatcher.stop()
        self.dispatchers.clear()
        for upkeep in self.upkeeps.values():
            upkeep.stop()
        self.upkeeps.clear()


class ClientConnection(MethodTable):
    """One connection's methods and channels; see the module docstring."""

    def __init__(self, backend: AmqpBackend, sender: Sender, serial: int) -> None:
        super().__init__()
        self.backend = backend
        self.sender = sender
        self.serial = serial
        self.frame_max = 131_072
        self.channels: dict[int, ChannelContext] = {}
        self.exclusive_queues: list[QueueDef] = []
        self.definitions_changed = False
        """A binding changed while handling the current frame: the session answers once
        it is durable."""
        self._publishing: list[_Publish] = []
        """Publishes not appended yet (`flush_publishes`, at the end of this turn)."""
        self._publish_scheduled = False
        self._settling: dict[tuple[QueueDef, str, AckType], list[int]] = {}
        """Acknowledgements not applied yet (`flush_settles`, at the end of this turn)."""
        self._settle_scheduled = False
        self._closed = False
        model, broker = backend.model, backend.broker
        self._model = model
        self._broker = broker
        for method, handler in {
            commands.Exchange.Declare: self._exchange_declare,
            commands.Exchange.Delete: self._exchange_delete,
            commands.Exchange.Bind: self._exchange_bind,
            commands.Exchange.Unbind: self._exchange_unbind,
            commands.Queue.Declare: self._queue_declare,
            commands.Queue.Bind: self._queue_bind,
            commands.Queue.Unbind: self._queue_unbind,
            commands.Queue.Purge: self._queue_purge,
            commands.Queue.Delete: self._queue_delete,
            commands.Basic.Qos: self._basic_qos,
            commands.Basic.Consume: self._basic_consume,
            commands.Basic.Cancel: self._basic_cancel,
            commands.Basic.Publish: self._basic_publish,
            commands.Basic.Get: self._basic_get,
            commands.Basic.Ack: self._basic_ack,
            commands.Basic.Nack: self._basic_nack,
            commands.Basic.Reject: self._basic_reject,
            commands.Basic.Recover: self._basic_recover,
            commands.Basic.RecoverAsync: self._basic_recover_async,
            commands.Confirm.Select: self._confirm_select,
        }.items():
            self.register(
                method, handler if method in _SETTLING_METHODS else self._after_settles(handler)
            )

    def _after_settles(self, handler: Callable[[Call], Reaction]) -> Callable[[Call], Reaction]:
        """Acks gathered for a batch are applied before any other method is handled, so
        every method sees the acks sent before it (a declare's counts, a get)."""

        def handle(call: Call) -> Reaction:
            if self._publishing:
                self.flush_publishes()
            if self._settling:
                self.flush_settles()
            return handler(call)

        return handle

    # --- the state machine's hooks -------------------------------------------------------

    def channel_closed(self, channel: int) -> None:
        context = self.channels.pop(channel, None)
        if context is not None:
            self._close_channel(context)

    def connection_closed(self) -> None:
        if self._closed:
            return
        self._closed = True
        for context in list(self.channels.values()):
            self._close_channel(context)
        self.channels.clear()
        for queue in self.exclusive_queues:
            if self._model.queue(queue.vhost, queue.name) is queue:
                self._delete_queue(queue)
        self.exclusive_queues.clear()
        self.backend.connections.discard(self)

    def writing_resumed(self) -> None:
        for context in self.channels.values():
            for consumer in context.consumers.values():
                self.backend.kick(consumer.queue)

    def _close_channel(self, context: ChannelContext) -> None:
        self.flush_publishes()  # what it published is stored
        self.flush_settles()  # what it acknowledged stays acknowledged
        context.closed = True
        for consumer in list(context.consumers.values()):
            self._end_consumer(consumer)
        context.consumers.clear()
        held = {
            pending.queue for pending in context.unacked.values() if not pending.queue.is_stream
        }
        context.unacked.clear()
        now = self._broker.clock()
        for queue in held:
            self._broker.shares.release(queue.group_id, context.member_id, now)
        if context.confirm_task is not None:
            context.confirm_task.cancel()

    def _end_consumer(self, consumer: Consumer) -> None:
        backend = self.backend
        queue = consumer.queue
        dispatcher = backend.dispatchers.get(queue.topic)
        if dispatcher is not None:
            dispatcher.remove(consumer)
            if not dispatcher.consumers:
                dispatcher.stop()
                backend.dispatchers.pop(queue.topic, None)
        queue.consumers -= 1
        queue.last_used_ms = self._broker.clock()
        upkeep = backend.upkeeps.get(queue.topic)
        if upkeep is not None:
            upkeep.kick()
        still_declared = self._model.queue(queue.vhost, queue.name) is queue
        if queue.auto_delete and queue.consumers <= 0 and queue.had_consumers and still_declared:
            self._delete_queue(queue)

    def _channel(self, call: Call) -> ChannelContext:
        context = self.channels.get(call.channel)
        if context is None:
            context = ChannelContext(self, call.channel, f"amqp-{self.serial}-{call.channel}")
            self.channels[call.channel] = context
            self.frame_max = call.connection.frame_max_bytes or self.frame_max
        return context

    # --- exchanges -----------------------------------------------------------------------

    def _exchange_declare(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Exchange.Declare)
        self._model.declare_exchange(call.connection.vhost, method)
        for forwarder in self._model.forwarders():  # an x-delayed-message exchange's
            self.backend.upkeep(forwarder)
        return () if method.nowait else (commands.Exchange.DeclareOk(),)

    def _exchange_delete(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Exchange.Delete)
        self._model.delete_exchange(call.connection.vhost, method)
        return () if method.nowait else (commands.Exchange.DeleteOk(),)

    def _exchange_bind(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Exchange.Bind)
        self._model.bind_exchange(
            call.connection.vhost,
            method.destination,
            method.source,
            method.routing_key,
            method.arguments or {},
        )
        self.definitions_changed = True
        return () if method.nowait else (commands.Exchange.BindOk(),)

    def _exchange_unbind(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Exchange.Unbind)
        self._model.unbind_exchange(
            call.connection.vhost,
            method.destination,
            method.source,
            method.routing_key,
            method.arguments or {},
        )
        self.definitions_changed = True
        return () if method.nowait else (commands.Exchange.UnbindOk(),)

    # --- queues ------------------------------------------------------------------------

    def _queue_declare(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Queue.Declare)
        queue, ready = self._model.declare_queue(call.connection.vhost, method, self)
        queue.last_used_ms = call.now_ms
        if queue.exclusive and queue.owner is self and queue not in self.exclusive_queues:
            self.exclusive_queues.append(queue)
        self.backend.upkeep(queue)
        if method.nowait:
            return ()
        return (
            commands.Queue.DeclareOk(
                queue=queue.name, message_count=ready, consumer_count=queue.consumers
            ),
        )

    def _queue_bind(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Queue.Bind)
        self._model.bind_queue(call.connection.vhost, method, self)
        self.definitions_changed = True
        return () if method.nowait else (commands.Queue.BindOk(),)

    def _queue_unbind(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Queue.Unbind)
        self._model.unbind_queue(call.connection.vhost, method, self)
        self.definitions_changed = True
        return (commands.Queue.UnbindOk(),)

    def _queue_purge(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Queue.Purge)
        queue = self._model.required_queue(call.connection.vhost, method.queue, self)
        count = self._model.purge_queue(queue, call.now_ms)
        return () if method.nowait else (commands.Queue.PurgeOk(message_count=count),)

    def _queue_delete(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Queue.Delete)
        vhost = call.connection.vhost
        queue = self._model.queue(vhost, method.queue)
        if queue is None:
            # RabbitMQ: deleting a queue that does not exist succeeds.
            return () if method.nowait else (commands.Queue.DeleteOk(message_count=0),)
        self._model.check_owner(queue, self)
        if method.if_unused and queue.consumers > 0:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"{queue.label()} in use")
        if method.if_empty:
            ready, unacked = self._model.counts(queue)
            if ready or unacked:
                raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"{queue.label()} is not empty")
        count = self._delete_queue(queue)
        return () if method.nowait else (commands.Queue.DeleteOk(message_count=count),)

    def _delete_queue(self, queue: QueueDef) -> int:
        return self.backend.delete_queue(queue)

    # --- basic: consuming ----------------------------------------------------------------

    def _basic_qos(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Basic.Qos)
        if method.prefetch_size:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({method.prefetch_size})")
        context = self._channel(call)
        if method.global_:
            context.global_prefetch = method.prefetch_count
        else:
            context.prefetch = method.prefetch_count
        for consumer in context.consumers.values():
            self.backend.kick(consumer.queue)
        return (commands.Basic.QosOk(),)

    def _basic_consume(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Basic.Consume)
        context = self._channel(call)
        queue = self._model.required_queue(call.connection.vhost, method.queue, self)
        tag = method.consumer_tag or _consumer_tag()
        if tag in context.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        offset = 0
        if queue.is_stream:
            if method.no_ack:
                raise AmqpError(
                    ReplyCode.NOT_IMPLEMENTED,
                    f"automatic acknowledgement not supported by stream queues {queue.label()}",
                )
            if not (context.prefetch or context.global_prefetch):
                raise AmqpError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"consumer prefetch count is not set for '{queue.label()}'",
                )
            spec = (method.arguments or {}).get("x-stream-offset")
            offset = self._model.stream_start(queue, spec)
        dispatcher = self.backend.dispatcher(queue)
        if any(c.exclusive for c in dispatcher.consumers) or (
            method.exclusive and dispatcher.consumers
        ):
            raise AmqpError(ReplyCode.ACCESS_REFUSED, f"{queue.label()} in exclusive use")
        consumer = Consumer(
            context,
            tag,
            queue,
            method.no_ack,
            method.exclusive,
            context.prefetch,
            offset=offset,
            priority=_consumer_priority(method.arguments or {}, queue),
        )
        context.consumers[tag] = consumer
        queue.consumers += 1
        queue.had_consumers = True
        queue.last_used_ms = call.now_ms
        # Deliveries start on the next turn of the loop: after ConsumeOk is written.
        dispatcher.add(consumer)
        return () if method.nowait else (commands.Basic.ConsumeOk(consumer_tag=tag),)

    def _basic_cancel(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Basic.Cancel)
        context = self._channel(call)
        consumer = context.consumers.pop(method.consumer_tag or "", None)
        if consumer is not None:
            self._end_consumer(consumer)
        return () if method.nowait else (commands.Basic.CancelOk(consumer_tag=method.consumer_tag),)

    def _basic_get(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Basic.Get)
        context = self._channel(call)
        queue = self._model.required_queue(call.connection.vhost, method.queue, self)
        if queue.is_stream:
            raise AmqpError(
                ReplyCode.NOT_IMPLEMENTED,
                f"basic.get not supported by stream queues {queue.label()}",
            )
        broker = self._broker
        queue.last_used_ms = call.now_ms
        while queue.max_priority:
            known: dict[int, int] = {}
            got = self.backend.acquire_by_priority(queue, context.member_id, known, 1, call.now_ms)
            if not got:
                return (commands.Basic.GetEmpty(),)
            ((offset, delivery_count),) = got.items()
            ((_, found),) = broker.shares.read_records(queue.topic_id, 0, [offset])
            if found is None:
                continue
            record, producer_id = found, 0
            if not self._model.expired(queue, record, call.now_ms):
                break
            self.backend.expire_acquired(queue, context.member_id, [(offset, record)], call.now_ms)
        while not queue.max_priority:
            acquired = broker.shares.acquire_one(
                queue.group_id,
                context.member_id,
                queue.topic_id,
                0,
                1,
                DELIVER_BYTES_MAX,
                call.now_ms,
            )
            messages = [] if acquired is None else list(acquired.messages())
            if not messages:
                return (commands.Basic.GetEmpty(),)
            offset, delivery_count, record, producer_id = messages[0]
            if not self._model.expired(queue, record, call.now_ms):
                break
            self.backend.expire_acquired(queue, context.member_id, [(offset, record)], call.now_ms)
        value = record.value
        tag = context.next_tag
        context.next_tag += 1
        if method.no_ack:
            self.backend.settle(queue, context.member_id, [offset], AckType.ACCEPT)
        else:
            context.unacked[tag] = Pending(queue, offset, None)
        ready, _ = self._model.counts(queue)
        exchange, routing_key, properties = self.backend.delivery_of(record, producer_id)
        body = value or b""
        get_ok = commands.Basic.GetOk(
            delivery_tag=tag,
            redelivered=delivery_count > 1,
            exchange=exchange,
            routing_key=routing_key,
            message_count=ready,
        )
        data = b"".join(_message(call.channel, get_ok, properties, body, self.frame_max))
        self.sender.send(data, "get")
        return ()

    def _basic_ack(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Basic.Ack)
        self._settle(call, method.delivery_tag, method.multiple, AckType.ACCEPT)
        return ()

    def _basic_nack(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Basic.Nack)
        ack = AckType.RELEASE if method.requeue else AckType.REJECT
        self._settle(call, method.delivery_tag, method.multiple, ack)
        return ()

    def _basic_reject(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Basic.Reject)
        ack = AckType.RELEASE if method.requeue else AckType.REJECT
        self._settle(call, method.delivery_tag or 0, False, ack)
        return ()

    def _settle(self, call: Call, tag: int, multiple: bool, ack: AckType) -> None:
        context = self._channel(call)
        unacked = context.unacked
        if multiple:
            tags = [t for t in unacked if t <= tag] if tag else list(unacked)
        elif tag in unacked:
            tags = [tag]
        else:
            tags = []
        if not tags and (tag or not multiple):
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {tag}")
        by_queue: dict[QueueDef, list[int]] = {}
        for one in tags:
            pending = unacked.pop(one)
            by_queue.setdefault(pending.queue, []).append(pending.offset)
            if pending.consumer is not None:
                pending.consumer.unacked -= 1
        for queue, offsets in by_queue.items():
            if queue.is_stream:  # a stream's acks are credit only
                self.backend.kick(queue)
                continue
            key = (queue, context.member_id, ack)
            self._settling.setdefault(key, []).extend(offsets)
        if self._settling and not self._settle_scheduled:
            self._settle_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush_settles)

    def flush_settles(self) -> None:
        """Apply the acknowledgements gathered since the last flush, one step per queue
        and kind: a client acking each message sends many acks in one read, and each
        step writes the queue's state log once, so this turns N writes into one."""
        self._settle_scheduled = False
        settling, self._settling = self._settling, {}
        for (queue, member_id, ack), offsets in settling.items():
            self.backend.settle(queue, member_id, offsets, ack)
            self.backend.kick(queue)

    def _basic_recover(self, call: Call) -> Reaction:
        self._recover(call)
        return (commands.Basic.RecoverOk(),)

    def _basic_recover_async(self, call: Call) -> Reaction:
        self._recover(call)
        return ()

    def _recover(self, call: Call) -> None:
        """Redeliver every unacknowledged delivery of the channel (requeue=true is the
        only form RabbitMQ implements, and so here)."""
        context = self._channel(call)
        self.flush_settles()
        held = {
            pending.queue for pending in context.unacked.values() if not pending.queue.is_stream
        }
        for pending in context.unacked.values():
            if pending.consumer is not None:
                pending.consumer.unacked -= 1
        context.unacked.clear()
        for queue in held:
            self._broker.shares.release(queue.group_id, context.member_id, call.now_ms)
            self.backend.kick(queue)

    # --- basic: publishing ---------------------------------------------------------------

    def _confirm_select(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Confirm.Select)
        self._channel(call).confirming = True
        return () if method.nowait else (commands.Confirm.SelectOk(),)

    def _basic_publish(self, call: Call) -> Reaction:
        method = call.method
        assert isinstance(method, commands.Basic.Publish) and call.content is not None
        context = self._channel(call)
        seq = 0
        if context.confirming:
            seq = context.next_seq
            context.next_seq += 1
        durability = Durability.FSYNCED if context.confirming else Durability.WRITTEN
        properties, body, property_bytes = call.content
        model = self._model
        self._admit(call, method, properties, len(body))
        refused = False
        if model.limited:
            # reject-publish: a publish to a full queue is nacked; the copy the router
            # makes anyway is dropped by the queue's upkeep, so it never becomes ready.
            full = [
                q
                for q in model.destinations(call.connection.vhost, method, properties)
                if model.full(q, len(body))
            ]
            refused = bool(full)
            for queue in full:
                self.backend.upkeep(queue)
        prepared = model.prepare(
            call.connection.vhost, method, properties, body, call.now_ms, property_bytes
        )
        if properties.expiration is not None:
            # A message with its own TTL: its queues expire their heads from now on,
            # without waiting for a consumer to reach it (RabbitMQ's per-message TTL).
            for queue in model.destinations(call.connection.vhost, method, properties):
                if not queue.expiring and not queue.is_stream:
                    queue.expiring = True
                    self.backend.upkeep(queue)
        out: list[Outbound] = []
        if method.mandatory and not prepared.routed:
            out.append(
                commands.Basic.Return(
                    reply_code=int(ReplyCode.NO_ROUTE),
                    reply_text="NO_ROUTE",
                    exchange=method.exchange,
                    routing_key=method.routing_key,
                )
            )
            self._return_content(call, out)
        if prepared.partition is None and not context.confirming:
            return out  # no queue by that name: dropped, as RabbitMQ drops it
        self._publishing.append(
            _Publish(context, seq, prepared.partition, prepared.record, durability, not refused)
        )
        if not self._publish_scheduled:
            self._publish_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush_publishes)
        return out

    def flush_publishes(self) -> None:
        """Append the publishes gathered since the last flush, in order: consecutive ones
        to one partition as one batch (a pipelining publisher sends dozens per read, and
        one append and one routing step for them all costs a fraction of one each), then
        queue their confirms behind the batch's fsync."""
        self._publish_scheduled = False
        pending, self._publishing = self._publishing, []
        replies: dict[ChannelContext, list[Outbound]] = {}
        start = 0
        while start < len(pending):
            first = pending[start]
            end, size = start + 1, len(first.record.value or b"")
            while end < len(pending) and pending[end].partition is first.partition:
                size += len(pending[end].record.value or b"")
                if size > PUBLISH_BATCH_BYTES_MAX or end - start >= PUBLISH_BATCH_RECORDS_MAX:
                    break
                end += 1
            group, start = pending[start:end], end
            self._append_group(group, replies)
        for context, frames in replies.items():
            if frames and not context.closed:
                self.sender.send(b"".join(encode(context.number, f) for f in frames), "confirm")

    def _append_group(
        self, group: list[_Publish], replies: dict[ChannelContext, list[Outbound]]
    ) -> None:
        partition = group[0].partition
        durable_partition: Partition | None = None
        durable_offset: int | None = None
        ok = True
        if partition is not None:
            durability = max(p.durability for p in group)
            try:
                published = partition.publish(encode_batch([p.record for p in group]), durability)
                durable_partition = published.durable_partition or partition
                durable_offset = published.durable_offset
            except KafkaError as exc:
                ok = False
                log.warning("AMQP publishes to %s not stored: %s", partition.tp, exc)
                if isinstance(exc, StorageError):
                    # The log cannot take writes now (free disk below its floor, a failed
                    # fsync): hold this connection's publishers until it can again, as
                    # RabbitMQ blocks publishers on a disk alarm.
                    self.sender.block_publishes(
                        "the broker cannot store messages now",
                        lambda: self._broker.resources.publish_refusal is None,
                    )
        for publish in group:
            context = publish.context
            if not context.confirming or context.closed:
                continue
            try:
                frames = self._confirm(
                    context, publish.seq, durable_partition, durable_offset, ok=ok and publish.ok
                )
            except AmqpError as error:  # too many confirms pending: that channel goes
                frames = []
                replies.setdefault(context, []).extend(self._close_from_server(context, error))
            replies.setdefault(context, []).extend(frames)

    def _admit(
        self,
        call: Call,
        method: commands.Basic.Publish,
        properties: commands.Basic.Properties,
        size: int,
    ) -> None:
        """Ask the flow controller about this publish (`flow/`, as every protocol does)
        and hold the connection's publishers when it says so: a resource or an opted-in
        topic's backlog blocked (until it clears), or a quota's throttle (for its time).
        The publish itself goes ahead: it was read already; what the client sends next
        is not read until then."""
        broker = self._broker
        sender = self.sender
        if sender.publishes_blocked():
            sender.block_publishes(
                "the broker cannot store messages now", lambda: not sender.publishes_blocked()
            )
        if broker.flow.idle:
            return
        vhost = call.connection.vhost
        topics = [queue.topic for queue in self._model.destinations(vhost, method, properties)]
        if method.exchange:
            exchange = self._model.exchange(vhost, method.exchange)
            if exchange is not None:
                topics.append(exchange.topic)
        info = call.connection
        context = RequestContext(info.client_name, f"/{info.peer_host}", "amqp")
        admission = self.backend.admission
        decision = admission.admit(context, size, call.now_ms, Kind.PRODUCE, topics)
        if decision.wait_for:
            names = ", ".join(sorted(decision.wait_for))
            sender.block_publishes(
                f"{names} over its limit",
                lambda: not admission.still_blocked(decision, 0, topics),
            )
        elif decision.throttle_ms > 0:
            sender.throttle(decision.throttle_ms)

    def _close_from_server(self, context: ChannelContext, error: AmqpError) -> list[Outbound]:
        """A channel error found outside its handler (a confirm backlog over its bound):
        logged; the channel's confirms stop (its publisher sees no more acks and times
        out), as a channel that cannot be told stays consistent."""
        log.warning("AMQP channel %d: %s", context.number, error)
        context.confirming = False
        return []

    def _return_content(self, call: Call, out: list[Outbound]) -> None:
        from pamqp import body as pbody
        from pamqp import header as pheader

        assert call.content is not None
        properties, data, _ = call.content
        out.append(pheader.ContentHeader(0, len(data), properties))
        step = max(1, self.frame_max - 8)
        for start in range(0, len(data), step):
            out.append(pbody.ContentBody(data[start : start + step]))

    def _confirm(
        self,
        context: ChannelContext,
        seq: int,
        partition: Partition | None,
        durable_offset: int | None,
        *,
        ok: bool,
    ) -> list[Outbound]:
        """Confirm `seq` now (returned frames) when nothing before it waits and it needs
        no fsync, else queue it for the channel's confirm task."""
        if not ok:
            if not context.unconfirmed:
                return [commands.Basic.Nack(delivery_tag=seq)]
            context.unconfirmed.append((seq, None, -1))
        elif durable_offset is None and not context.unconfirmed:
            return [commands.Basic.Ack(delivery_tag=seq)]
        else:
            context.unconfirmed.append((seq, partition, durable_offset or 0))
        if len(context.unconfirmed) > CONFIRMS_PENDING_MAX:
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"more than {CONFIRMS_PENDING_MAX} publishes wait for their confirm",
            )
        if context.confirm_task is None or context.confirm_task.done():
            context.confirm_task = asyncio.get_running_loop().create_task(
                self._confirm_loop(context)
            )
        return []

    async def _confirm_loop(self, context: ChannelContext) -> None:
        """Confirm the queued publishes in order, one fsync round at a time."""
        pending = context.unconfirmed
        while pending and not context.closed:
            last_seq = pending[-1][0]
            targets: dict[Partition, int] = {}
            failed_seqs: list[int] = []
            for seq, partition, offset in pending:
                if partition is None:
                    if offset == -1:
                        failed_seqs.append(seq)
                    continue
                targets[partition] = max(targets.get(partition, 0), offset)
            ok = True
            try:
                for partition, offset in targets.items():
                    await partition.durable(offset)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("AMQP publishes not made durable: %s", exc)
                ok = False
            if context.closed:
                return
            frames: list[bytes] = []
            if ok and not failed_seqs:
                frames.append(
                    encode(context.number, commands.Basic.Ack(delivery_tag=last_seq, multiple=True))
                )
            else:
                failed = set(failed_seqs)
                for seq, _partition, _offset in pending:
                    if seq > last_seq:
                        break
                    good = ok and seq not in failed
                    reply = (
                        commands.Basic.Ack(delivery_tag=seq)
                        if good
                        else commands.Basic.Nack(delivery_tag=seq)
                    )
                    frames.append(encode(context.number, reply))
            while pending and pending[0][0] <= last_seq:
                pending.popleft()
            self.sender.send(b"".join(frames), "confirm")


def _priority_of(record: Record | None, max_priority: int) -> int:
    """A stored message's priority (its `priority` property, as the record's text copy),
    capped at the queue's maximum as RabbitMQ caps it; 0 without one."""
    if record is None:
        return 0
    for name, value in record.headers:
        if name == "priority" and value is not None:
            try:
                return max(0, min(int(value), max_priority))
            except ValueError:
                return 0
    return 0


def _consumer_priority(arguments: Mapping[str, object], queue: QueueDef) -> int:
    value = arguments.get("x-priority", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"invalid arg 'x-priority' for {queue.label()}: {value!r} is not an integer",
        )
    return value


def _runs(offsets: list[int]) -> Iterator[tuple[int, int]]:
    """Sorted offsets as (first, last) runs of consecutive ones."""
    if not offsets:
        return
    first = last = offsets[0]
    for offset in offsets[1:]:
        if offset == last + 1:
            last = offset
            continue
        if offset == last:
            continue
        yield first, last
        first = last = offset
    yield first, last


def _message(
    channel: int, method: Outbound, properties: bytes, body: bytes, frame_max: int
) -> Iterator[bytes]:
    """A method with content as the frames that carry it: the method, the content header
    (the stored property list, not encoded again) and the body frames."""
    yield encode(channel, method)
    yield content_header_frame(channel, len(body), properties)
    yield from _body_frames(channel, body, frame_max)


def _body_frames(channel: int, body: bytes | memoryview, frame_max: int) -> Iterator[bytes]:
    """Body frames of at most `frame_max` bytes each (8 of which are the frame's own)."""
    step = max(1, frame_max - 8)
    for start in range(0, len(body), step):
        part = body[start : start + step]
        yield _FRAME_HEAD.pack(_BODY_FRAME, channel, len(part)) + bytes(part) + _FRAME_END


def _consumer_tag() -> str:
    return "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode()[:22]
