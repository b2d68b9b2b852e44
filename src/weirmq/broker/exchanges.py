"""Exchanges on the log: a topic that routes what is written to it, durably and replayably.

An exchange is a topic whose `weirmq.exchange.type` config is set (CreateTopics, the CLI or
the admin API set it when the topic is created; it never changes). Its partitions are the
exchange's input log: a Kafka producer writes to the exchange's name as to any topic, and
what it writes stays there, replayable, under the topic's retention. The graph itself
(types, bindings, alternates, the route cache) is `weirmq.routing.Router`; this module
persists it, feeds it the records, and appends the copies.

Definitions
-----------
The exchange's type, alternate and unroutable policy are topic configs (`topics.json`, with
the topic). Bindings are records of the internal topic `__weirmq_routing` (one partition,
each record a bind or an unbind as JSON), replayed in order on start: appending a binding
costs one small write whatever the number of bindings, where rewriting one file per bind
would make 10,000 bindings cost 10,000 whole rewrites. A binding whose source or
destination is gone when replayed is skipped; deleting a topic unbinds everything that
leads to it, as deleting a queue does in RabbitMQ.

The write path
--------------
Routing happens inside `Partition.publish` of an exchange partition, on the loop, in the
same turn as the append (`ExchangeInput`, the partition's `router`):

    plan     before the append: read the batch's records (`records.codec`, aiokafka's C
             codec), route each (`Router.route`) and group them by destination partition
             (Kafka's murmur2 of the record key, so keyed order holds per destination);
             an exchange whose policy is `reject` refuses the whole batch, unwritten, when
             any record has no destination (INVALID_RECORD, as Kafka refuses a batch);
    append   the batch goes into the exchange's log as the producer sent it;
    deliver  place the keyless records (all of one batch in one partition, chosen from the
             batch's offset, so that re-routing chooses the same) and append one batch per
             destination partition, records as they were (key, value, headers, timestamp).

Each exchange partition remembers, per key of a record without headers, where such a
record goes (its route depends on the key alone): a record whose key was seen before costs
one dict lookup to place. The memo is emptied when a definition or a topic changes.

So a routed record reaches its destinations before its producer is answered, routing lag is
zero in steady state, and per key destinations see records in exchange order (appends are
sequential on the loop). An idempotent producer's retry is recognised by the exchange
partition and not routed again.

Crashes
-------
A crash can fall between the exchange append and the copies, or between copies. The
exchange's log is the source of truth: the broker re-routes, on start, everything after the
*routing cursor* of each exchange partition (the offset below which every copy is
durable), and skips what a destination already has:

- The cursor file (`routing-cursor-checkpoint`, Kafka's checkpoint format) is written by
  the storage flusher after each periodic flush, with the cursors read *before* that
  flush; every copy below those cursors was appended before it, so it is durable when the
  file is. A clean stop writes the exact cursors after the final flush.
- Every copy is written with a producer id reserved for its exchange partition
  (`routed_producer_id`: above 2**62, where the allocator never reaches) and sequence
  numbers chosen so that a batch's last sequence is its last record's source offset (mod
  2**31). The destination's producer state, which every partition rebuilds from its own
  log after a crash, so remembers the last source offset it holds from each exchange
  partition. Copies are appended in source order and a recovered log is a prefix of what
  was written, so a destination holding source offset `s` holds every earlier copy meant
  for it: re-routing skips, per destination, every offset up to that one.

With acks=all the exchange's batch is fsynced before the producer is answered, so every
copy exists or will exist after any crash, exactly once. (After an operating-system crash a
destination may keep a copy of an acks=1 record the exchange lost: the copy's bytes reached
the disk and the exchange's did not. It is not routed twice; later records are, since the
dedup point never goes past the exchange's end.)

Replay
------
A binding records where routing was in each partition of its exchange when it was made
(`bound_at`, in its bind record). `replay` re-routes a range of the exchange's log into
that binding alone, by default everything before that point, so a binding added later can
be given the past without duplicating what it got live. Its copies carry no producer id:
a replay is an operator's action, and one cut short is run again with a range.

What is not here yet: compaction of the definitions log, copies compressed as their
source was.
"""

from __future__ import annotations

import json
import logging
import operator
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote

from murmurhash2 import murmurhash2

from ..errors import KafkaError
from ..records.batch import Record, decode_records, encode_batch
from ..records.codec import Copy, CopyWriter, read_records
from ..routing import (
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    HeaderValue,
    Route,
    Router,
    UnknownExchangeError,
    UnroutableError,
    binding_document,
    binding_from_document,
)
from ..routing import (
    RoutingError as RoutingError,  # re-exported for the AMQP adapter
)
from ..storage.checkpoint import encode_offsets, read_offsets
from ..storage.errors import StorageError
from ..types import TopicPartition
from . import configs
from .partition import Partition
from .scan import scan_batches

if TYPE_CHECKING:
    from .core import Broker
    from .topics import Topic

log = logging.getLogger(__name__)

ROUTING_TOPIC = "__weirmq_routing"
"""The internal topic holding every bind and unbind, in order."""
ROUTING_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(8 << 20)}
CURSORS_FILE = "routing-cursor-checkpoint"
"""In the data directory: per exchange partition, the offset below which routing is done."""
ROUTING_KEY_HEADER = "routing-key"
"""A Kafka record's routing key is this header's value when present, else its key."""
ROUTED_PRODUCER_ID_BASE = 1 << 62
"""Copies carry producer ids from here up; the allocator counts up from 0 (see the
module docstring, "Crashes")."""
_PARTITION_BITS = 17  # PARTITIONS_MAX (100,000) < 2**17
_TOPIC_ID_BITS = 62 - _PARTITION_BITS
_SEQUENCE_MODULUS = 1 << 31
MURMUR2_SEED = 0x9747B28C
"""Kafka's default partitioner: murmur2(key, this seed) & 0x7fffffff, modulo partitions."""
_BATCH_SEED = struct.Struct(">qi")
_OFFSET = operator.attrgetter("offset")
COPY_BATCH_BYTES_MAX = 1 << 20
"""A destination batch holds at most about this many bytes of records (a compressed
source batch can hold far more once decompressed)."""


def routed_producer_id(topic_id_int: int, partition: int) -> int:
    """The producer id the copies from one exchange partition carry: stable across
    restarts (derived from the topic id), and never one the allocator hands out."""
    return (
        ROUTED_PRODUCER_ID_BASE
        | ((topic_id_int & ((1 << _TOPIC_ID_BITS) - 1)) << _PARTITION_BITS)
        | partition
    )


def span_routing_key(span: Copy) -> str:
    """The `routing-key` header if the record has one, else its key, as text."""
    for name, value in span.headers:
        if name == ROUTING_KEY_HEADER and value is not None:
            return value.decode("utf-8", errors="replace")
    if span.key is None:
        return ""
    return span.key.decode("utf-8", errors="replace")


class ExchangeStats:
    """Totals since start for one exchange (metrics and `describe`)."""

    __slots__ = ("alternate", "copies", "failed", "unroutable")

    def __init__(self) -> None:
        self.copies = 0
        """Records appended to destinations (one record to three topics counts three)."""
        self.unroutable = 0
        """Records no binding routed, dropped (with the `reject` policy they are refused
        and never written, so never counted here)."""
        self.alternate = 0
        """Records that went through an alternate exchange."""
        self.failed = 0
        """Copies a destination refused (its log offline); logged as errors."""


@dataclass(frozen=True, slots=True)
class ExchangeView:
    """An exchange as `describe` shows it."""

    exchange: Exchange
    partitions: int
    bindings: tuple[Binding, ...]
    stats: ExchangeStats
    lag_records: int
    """Records appended to the exchange and not routed yet (0 but during recovery)."""


@dataclass(slots=True)
class _Batch:
    """One source batch, routed: its records grouped by destination partition, in offset
    order. Keyed records have their partitions already (the key decides); keyless ones
    wait for the batch's offset, which places them (`Exchanges._keyless_pair`). Offsets
    are the batch's own: from 0 for a batch being published, the log's in recovery."""

    base: int
    """The batch's base offset as read (0 for a producer's batch)."""
    last: int
    """The offset of its last record (as read); -1 when it has none to route."""
    copies: dict[tuple[str, int], list[Copy]]
    keyless: list[tuple[Copy, Route]]
    alternate: int
    """Records that went through an alternate exchange."""
    unroutable: int


ROUTE_MEMO_ENTRIES = 16_384
"""Per exchange partition, routes of header-less records remembered by raw key."""


TypedHeaders = Callable[[Sequence[tuple[str, bytes | None]]], Mapping[str, HeaderValue]]
"""A record's headers in, the typed values of those a protocol knows out."""
_TYPED_TYPES: Final = frozenset({ExchangeType.HEADERS, ExchangeType.CONTENT})
"""The exchange types that match on header values, where a value's type matters."""


class ExchangeInput:
    """The routing of one exchange partition; `Partition.router` of that partition.

    It remembers the route of each raw key it saw on records without headers (`_memo`, a
    plain dict, emptied when the definitions change or it fills): such a route depends on
    the key alone, and the lookup costs less than decoding the key and asking the router."""

    __slots__ = (
        "_generation",
        "_memo",
        "_service",
        "destination_memo",
        "partition",
        "producer_id",
    )

    def __init__(self, service: Exchanges, partition: Partition, producer_id: int) -> None:
        self._service = service
        self.partition = partition
        self.producer_id = producer_id
        self._memo: dict[bytes | None, Route] = {}
        self.destination_memo: dict[bytes, tuple[tuple[tuple[str, int], ...], bool]] = {}
        """Per raw key of a header-less record: its (topic, partition) destinations."""
        self._generation = -1

    def plan(self, records: bytes | memoryview) -> _Batch:
        """Route every record of the batch about to be appended; raises `UnroutableError`
        (nothing is written then) when one has no destination and the policy rejects."""
        header, spans = read_records(records)
        reject = self._service.router.exchange(self.partition.tp.topic).unroutable == "reject"
        return self.group(header.base_offset, spans, reject=reject)

    def group(self, base: int, spans: list[Copy], *, reject: bool) -> _Batch:
        """Route `spans` and group them by destination; see `_Batch`. This loop runs for
        every record published to an exchange: the memos spare it the router and the
        partitioner for keys seen before, and it touches each record once."""
        self._check_memo()
        known = self.destination_memo
        copies: dict[tuple[str, int], list[Copy]] = {}
        keyless: list[tuple[Copy, Route]] = []
        alternate = unroutable = 0
        for span in spans:
            key = span.key
            # The common case first: a keyed record without headers, its key seen before.
            found_pairs = None if span.headers else known.get(key)  # type: ignore[arg-type]
            if found_pairs is not None:
                pairs, through_alternate = found_pairs
                alternate += through_alternate
                for pair in pairs:
                    found = copies.get(pair)
                    if found is None:
                        copies[pair] = [span]
                    else:
                        found.append(span)
                continue
            route = self.route(span)
            if route.alternates_used:
                alternate += 1
            if not route.topics:
                if reject:
                    raise UnroutableError(
                        f"exchange {self.partition.tp.topic!r} routes no record with routing "
                        f"key {span_routing_key(span)!r} and refuses unroutable records"
                    )
                unroutable += 1
                continue
            if key is None:
                keyless.append((span, route))
                continue
            pairs = self.destinations(span, route)
            for pair in pairs:
                found = copies.get(pair)
                if found is None:
                    copies[pair] = [span]
                else:
                    found.append(span)
        last = spans[-1].offset if spans else -1
        return _Batch(base, last, copies, keyless, alternate, unroutable)

    def _check_memo(self) -> None:
        """Empty the memos when the definitions or the topics changed, or they are full."""
        generation = self._service.router.generation + self._service.topology
        if self._generation != generation or len(self._memo) >= ROUTE_MEMO_ENTRIES:
            self._memo.clear()
            self.destination_memo.clear()
            self._generation = generation

    def route(self, span: Copy) -> Route:
        """Where one record goes (raises a RoutingError, e.g. for a too long key)."""
        router = self._service.router
        if span.headers:
            topic = self.partition.tp.topic
            headers: dict[str, HeaderValue] = dict(span.headers)
            typed = self._service.typed_headers
            if typed is not None and router.exchange(topic).type in _TYPED_TYPES:
                headers.update(typed(span.headers))
            return router.route(topic, span_routing_key(span), headers)
        self._check_memo()
        route = self._memo.get(span.key)
        if route is None:
            route = router.route(self.partition.tp.topic, span_routing_key(span))
            self._memo[span.key] = route
        return route

    def destinations(self, span: Copy, route: Route) -> tuple[tuple[str, int], ...]:
        """The (topic, partition) pairs a keyed record goes to: Kafka's default
        partitioner over each topic's partitions. Remembered per key, with whether the
        route went through an alternate, for records without headers (their route, found
        by `route` just before, depends on the key alone)."""
        key = span.key
        assert key is not None
        topics = self._service.topic_partitions
        hashed = murmurhash2(key, MURMUR2_SEED) & 0x7FFFFFFF
        pairs = tuple((t, hashed % topics[t]) for t in route.topics if t in topics)
        if not span.headers:
            self.destination_memo[key] = (pairs, bool(route.alternates_used))
        return pairs

    def deliver(self, plan: _Batch, base_offset: int) -> None:
        """Append the copies of a batch the exchange has just appended at `base_offset`."""
        self._service.deliver(self, plan, base_offset)


class Exchanges:
    """Every exchange of one broker; see the module docstring."""

    def __init__(self, broker: Broker, data_dir: Path) -> None:
        self._broker = broker
        self._data_dir = data_dir
        self.router = Router()
        self.typed_headers: TypedHeaders | None = None
        """A protocol's typed view of a record's headers (AMQP's typed header table, from
        its stored properties), for the exchange types that match on values: a header
        `a` of int 1 then matches a binding on 1, not "1", as in RabbitMQ. None: the
        headers as stored (bytes, compared as text)."""
        self.stats: dict[str, ExchangeStats] = {}
        self._inputs: dict[TopicPartition, ExchangeInput] = {}
        self.cursors: dict[TopicPartition, int] = {}
        """Per exchange partition, the offset routing has reached (see "Crashes")."""
        self.bound_at: dict[Binding, dict[int, int]] = {}
        """Per binding: where routing was in each partition of its exchange when it was
        made, so that `replay` re-routes by default exactly what came before it."""
        self.topology = 0
        """Bumped whenever a topic appears, disappears or grows: the memos of every
        `ExchangeInput` depend on the partition counts."""
        self._topic_partitions: dict[str, int] | None = None
        self._loaded_cursors = read_offsets(data_dir / CURSORS_FILE)

    # --- start ---------------------------------------------------------------------------

    def load(self) -> None:
        """Declare the exchanges of the topics, replay the bindings, then re-route what a
        crash left unrouted. Called once, after every partition is open."""
        for topic in self._broker.topics:
            if topic.configs.get(configs.EXCHANGE_TYPE):
                self._declare(topic)
        self._replay_bindings()
        for exchange_input in self._inputs.values():
            self._recover(exchange_input)

    def _replay_bindings(self) -> None:
        partition = self._broker.partition(ROUTING_TOPIC, 0)
        if partition is None or partition.offline_reason is not None:
            return
        applied = 0
        try:
            for batch in scan_batches(partition.log, partition.log_start_offset):
                for _offset, _key, value in decode_records(batch):
                    applied += self._replay_one(value)
        except (StorageError, KafkaError) as exc:
            log.error("%s: replay stopped early: %s", ROUTING_TOPIC, exc)
        if applied:
            log.info("routing: %d binding change(s) replayed", applied)

    def _replay_one(self, value: bytes | None) -> int:
        try:
            change = json.loads(value or b"")
            binding = binding_from_document(change["binding"])
            if change["op"] == "bind":
                if self._destination_kind(binding.destination) is None:
                    return 0  # the destination was deleted without its unbind
                self.router.bind(binding)
                bound_at = change.get("bound_at") or {}
                self.bound_at[binding] = {int(p): int(o) for p, o in bound_at.items()}
            else:
                self.router.unbind(binding)
                self.bound_at.pop(binding, None)
        except UnknownExchangeError:
            return 0  # the source was deleted
        except (ValueError, KeyError, TypeError, RoutingError) as exc:
            log.error("%s: skipping a malformed record: %s", ROUTING_TOPIC, exc)
            return 0
        return 1

    # --- topics becoming and ceasing to be exchanges --------------------------------------

    @property
    def topic_partitions(self) -> dict[str, int]:
        """Every topic's partition count (rebuilt after a change of `topology`)."""
        if self._topic_partitions is None:
            self._topic_partitions = {t.name: t.partitions for t in self._broker.topics}
        return self._topic_partitions

    def topology_changed(self) -> None:
        """A topic was created, deleted or grown (the broker calls this)."""
        self.topology += 1 << 32  # apart from the router's generation, added to it
        self._topic_partitions = None

    def topic_created(self, topic: Topic) -> None:
        """A new topic: declared as an exchange if it has the type config."""
        self.topology_changed()
        if topic.configs.get(configs.EXCHANGE_TYPE):
            self._declare(topic)

    def _declare(self, topic: Topic) -> None:
        self.router.declare(exchange_of(topic.name, topic.configs))
        self.stats.setdefault(topic.name, ExchangeStats())
        self.partitions_added(topic)

    def partitions_added(self, topic: Topic) -> None:
        """Give every partition of an exchange topic its `ExchangeInput` (new ones too)."""
        self.topology_changed()
        if topic.name not in self.router:
            return
        for index in range(topic.partitions):
            tp = TopicPartition(topic.name, index)
            partition = self._broker.partitions.get(tp)
            if partition is None or tp in self._inputs:
                continue
            producer_id = routed_producer_id(topic.topic_id.int, index)
            partition.router = self._inputs[tp] = ExchangeInput(self, partition, producer_id)
            self.cursors[tp] = self._loaded_cursors.get(tp, partition.log_start_offset)

    def check_configs(self, topic: Topic, new: Mapping[str, str]) -> None:
        """Refuse config changes that would change what a topic is: the type is set when
        the topic is created and never changes (InvalidConfigError)."""
        before = topic.configs.get(configs.EXCHANGE_TYPE, "")
        after = new.get(configs.EXCHANGE_TYPE, "")
        if before != after:
            raise configs.InvalidConfigError(
                f"{configs.EXCHANGE_TYPE} is set when a topic is created and never changes "
                f"(topic {topic.name!r} is {before or 'a plain topic'!r}, asked {after!r})"
            )
        if after:
            exchange_of(topic.name, new)  # refuses what the router would

    def configs_changed(self, topic: Topic) -> None:
        """An exchange's alternate or unroutable policy changed."""
        if topic.name in self.router:
            self.router.redefine(exchange_of(topic.name, topic.configs))

    def topic_deleted(self, name: str) -> None:
        """Forget an exchange, or every binding to a deleted topic."""
        self.topology_changed()
        if name in self.router:
            removed = self.router.delete(name)
            for tp in [tp for tp in self._inputs if tp.topic == name]:
                del self._inputs[tp]
                self.cursors.pop(tp, None)
            self.stats.pop(name, None)
        else:
            removed = tuple(b for b in self.router.bindings() if b.destination == name)
            for binding in removed:
                self.router.unbind(binding)
        if removed:
            self._write_changes("unbind", removed)

    # --- bindings ------------------------------------------------------------------------

    def bind(
        self,
        source: str,
        destination: str,
        *,
        key: str = "",
        arguments: Mapping[str, HeaderValue] | None = None,
        expression: str | None = None,
    ) -> tuple[Binding, bool]:
        """Bind `destination` (a topic or an exchange) to exchange `source`; returns the
        binding and whether it is new. Raises a KafkaError saying what is wrong. Durable
        once `definitions_durable` returns."""
        kind = self._destination_kind(destination)
        if kind is None:
            raise UnknownExchangeError(f"no topic or exchange {destination!r} to bind to")
        binding = Binding(source, destination, kind, key, arguments or {}, expression)
        if not self.router.bind(binding):
            return binding, False
        try:
            self._write_changes("bind", (binding,))
        except BaseException:
            self.router.unbind(binding)
            raise
        return binding, True

    def find_binding(
        self,
        source: str,
        destination: str,
        *,
        key: str = "",
        arguments: Mapping[str, HeaderValue] | None = None,
        expression: str | None = None,
    ) -> Binding | None:
        """The binding of exchange `source` with these fields, or None. (Arguments compare
        as the router compares them: 1 equals 1.0, not true.) Raises the routing error of
        fields no binding could have."""
        kind: DestinationKind = "exchange" if destination in self.router else "topic"
        wanted = Binding(source, destination, kind, key, arguments or {}, expression)
        return wanted if wanted in dict.fromkeys(self.router.bindings(source)) else None

    def unbind(self, binding: Binding) -> bool:
        """Remove a binding; True if it existed."""
        if not self.router.unbind(binding):
            return False
        try:
            self._write_changes("unbind", (binding,))
        except BaseException:
            self.router.bind(binding)
            raise
        return True

    def bindings_config(self, name: str) -> configs.ConfigEntry | None:
        """`BINDINGS_CONFIG` of exchange `name` as DescribeConfigs shows it (None for a
        plain topic)."""
        if name not in self.router:
            return None
        value = ",".join(binding_spec(b) for b in self.router.bindings(name))
        source = configs.ConfigSource.DYNAMIC_TOPIC_CONFIG
        return configs.ConfigEntry(
            name=BINDINGS_CONFIG,
            value=value,
            source=source,
            read_only=False,
            sensitive=False,
            type=configs.ConfigType.LIST.name,
            documentation=(
                "the exchange's bindings, one item each: DEST, DEST?key=PATTERN, "
                "DEST?match=EXPRESSION or DEST?x-match=all&NAME=VALUE (docs/routing.md)"
            ),
            synonyms=((BINDINGS_CONFIG, value, source),),
        )

    def alter_bindings(
        self, name: str, ops: Sequence[tuple[int, str | None]], *, validate_only: bool = False
    ) -> bool:
        """Apply IncrementalAlterConfigs operations on `BINDINGS_CONFIG` of exchange
        `name`, in order; every item is checked before anything changes. Returns whether
        a binding changed (then `definitions_durable` makes it durable)."""
        if name not in self.router:
            raise configs.InvalidConfigError(
                f"{BINDINGS_CONFIG} applies to exchanges; {name!r} is a plain topic"
            )
        exchange = self.router.exchange(name)
        current = self.router.bindings(name)
        target: dict[Binding, None] = dict.fromkeys(current)
        for op, value in ops:
            if op == configs.AlterOp.DELETE:
                target = {}
                continue
            if value is None:
                raise configs.InvalidConfigError(f"{BINDINGS_CONFIG} needs a value (null given)")
            items = [
                parse_binding_spec(exchange, item, self._destination_kind)
                for item in value.split(",")
                if item.strip()
            ]
            if op == configs.AlterOp.SET:
                target = dict.fromkeys(items)
            elif op == configs.AlterOp.APPEND:
                target.update(dict.fromkeys(items))
            elif op == configs.AlterOp.SUBTRACT:
                for item in items:
                    target.pop(item, None)
            else:
                raise configs.InvalidConfigError(f"unknown config operation {op}")
        removed = [b for b in current if b not in target]
        added = [b for b in target if b not in dict.fromkeys(current)]
        for binding in added:  # the router's own checks (expression, x-match, cycles) first
            if self.router.bind(binding):
                self.router.unbind(binding)
        if validate_only:
            return False
        for binding in removed:
            self.unbind(binding)
        for binding in added:
            self.bind(
                binding.source,
                binding.destination,
                key=binding.key,
                arguments=dict(binding.arguments),
                expression=binding.expression,
            )
        return bool(removed or added)

    def _destination_kind(self, name: str) -> DestinationKind | None:
        if name in self.router:
            return "exchange"
        if self._broker.topics.get(name) is not None and name not in _INTERNAL:
            return "topic"
        return None

    def _write_changes(self, op: str, bindings: Iterable[Binding]) -> None:
        values = []
        for binding in bindings:
            change: dict[str, object] = {"op": op, "binding": binding_document(binding)}
            if op == "bind":
                bound_at = self.bound_at[binding] = self._cursors_of(binding.source)
                change["bound_at"] = {str(p): o for p, o in bound_at.items()}
            else:
                self.bound_at.pop(binding, None)
            values.append(json.dumps(change, sort_keys=True).encode())
        partition = self._routing_partition()
        now = self._broker.clock()
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            partition.append_internal(encode_batch([Record(v, b"binding", (), now) for v in chunk]))

    def _cursors_of(self, exchange: str) -> dict[int, int]:
        return {tp.partition: o for tp, o in self.cursors.items() if tp.topic == exchange}

    def _routing_partition(self) -> Partition:
        found = self._broker.partition(ROUTING_TOPIC, 0)
        if found is None:
            self._broker.create_topic(ROUTING_TOPIC, 1, ROUTING_TOPIC_CONFIGS)
            found = self._broker.partition(ROUTING_TOPIC, 0)
            assert found is not None
        return found

    async def definitions_durable(self) -> None:
        """Return once every binding change made so far is fsynced."""
        partition = self._broker.partition(ROUTING_TOPIC, 0)
        if partition is not None:
            await partition.durable(partition.log_end_offset)

    # --- routing -------------------------------------------------------------------------

    def deliver(
        self,
        source: ExchangeInput,
        batch: _Batch,
        base_offset: int,
        held: dict[TopicPartition, int] | None = None,
    ) -> None:
        """Append the copies of one source batch (appended at `base_offset`) to their
        destination partitions, and move the source's cursor past it. With `held`
        (recovery), skip what each destination already holds (`_held_offset`, cached in
        `held`)."""
        stats = self.stats[source.partition.tp.topic]
        stats.alternate += batch.alternate
        stats.unroutable += batch.unroutable
        copies = batch.copies
        if batch.keyless:
            placed: dict[str, tuple[tuple[str, int], ...]] = {}
            for span, route in batch.keyless:
                for topic in route.topics:
                    pairs = placed.get(topic)
                    if pairs is None:
                        pairs = placed[topic] = self._keyless_pair(source, topic, base_offset)
                    for pair in pairs:
                        copies.setdefault(pair, []).append(span)
            for spans in copies.values():  # keyed and keyless records: back in offset order
                spans.sort(key=_OFFSET)
        for pair, spans in copies.items():
            tp = TopicPartition(*pair)
            after = -1
            if held is not None:
                if tp not in held:
                    held[tp] = self._held_offset(source, tp, source.partition.log_end_offset)
                after = held[tp]
            stats.copies += self._append_copies(source, tp, batch, base_offset, spans, after)
        if batch.last >= 0:
            self.cursors[source.partition.tp] = base_offset + batch.last - batch.base + 1

    def _keyless_pair(
        self, source: ExchangeInput, topic: str, base_offset: int
    ) -> tuple[tuple[str, int], ...]:
        """Where a source batch's keyless records go in `topic`: one partition per batch
        (big destination batches, like Kafka's sticky partitioner), chosen from the batch's
        offset so that re-routing after a crash chooses the same one."""
        partitions = self.topic_partitions.get(topic)
        if partitions is None:
            return ()
        seed = _BATCH_SEED.pack(base_offset, source.partition.tp.partition)
        return ((topic, (murmurhash2(seed, MURMUR2_SEED) & 0x7FFFFFFF) % partitions),)

    def _append_copies(
        self,
        source: ExchangeInput,
        tp: TopicPartition,
        batch: _Batch,
        base_offset: int,
        spans: list[Copy],
        after: int,
    ) -> int:
        """Append the records of `spans` whose source offset is above `after` to `tp`, in
        batches of at most `COPY_BATCH_BYTES_MAX`; returns how many were appended."""
        partition = self._broker.partitions.get(tp)
        if partition is None:
            return 0
        shift = base_offset - batch.base  # a record's source offset: its offset + shift
        if after >= base_offset:
            spans = [s for s in spans if s.offset + shift > after]
            if not spans:
                return 0

        def base_sequence(first: int, count: int) -> int:
            # The batch's last sequence is its last record's source offset (mod 2**31).
            return (spans[first + count - 1].offset + shift - count + 1) % _SEQUENCE_MODULUS

        appended = 0
        now = self._broker.clock()
        writer = CopyWriter(source.producer_id, 0, COPY_BATCH_BYTES_MAX)
        for records, first, count in writer.write(spans, base_sequence):
            last_source = spans[first + count - 1].offset + shift
            try:
                last = partition.append_internal(records)
            except KafkaError as exc:
                self.stats[source.partition.tp.topic].failed += count
                log.error("routing %s into %s failed: %s", source.partition.tp, tp, exc)
                return appended
            partition.producers.replay_batch(
                source.producer_id,
                0,
                base_sequence(first, count),
                last_source % _SEQUENCE_MODULUS,
                last - count + 1,
                last,
                now,
            )
            appended += count
        return appended

    def _recover(self, source: ExchangeInput) -> None:
        """Re-route what follows the cursor, skipping what destinations already hold."""
        partition = source.partition
        tp = partition.tp
        start = max(self.cursors.get(tp, 0), partition.log_start_offset)
        end = partition.log_end_offset
        self.cursors[tp] = start
        if start >= end or partition.offline_reason is not None:
            return
        held: dict[TopicPartition, int] = {}
        copies_before = self.stats[tp.topic].copies
        try:
            for stored in scan_batches(partition.log, start):
                header, spans = read_records(stored)
                routable = [s for s in spans if s.offset >= start and self._routable(source, s)]
                batch = source.group(header.base_offset, routable, reject=False)
                self.deliver(source, batch, header.base_offset, held)
        except (StorageError, KafkaError) as exc:
            log.error("routing recovery of %s stopped early: %s", tp, exc)
        self.cursors[tp] = end
        log.info(
            "routing: %s re-routed offsets %d..%d (%d copies written)",
            tp, start, end - 1, self.stats[tp.topic].copies - copies_before,
        )  # fmt: skip

    @staticmethod
    def _routable(source: ExchangeInput, span: Copy) -> bool:
        try:
            source.route(span)
        except RoutingError:  # a record accepted under other definitions: not routed
            return False
        return True

    def _held_offset(self, source: ExchangeInput, tp: TopicPartition, end: int) -> int:
        """The last source offset of `source` that destination `tp` holds (-1: none
        known): from its producer state, its sequence (mod 2**31) read as the offset
        nearest the exchange's end, never past it (see "Crashes")."""
        partition = self._broker.partitions.get(tp)
        entry = None if partition is None else partition.producers.entry(source.producer_id)
        if entry is None or not entry.batches:
            return -1
        last_seq = entry.last_seq
        top = end - 1
        below = top - ((top - last_seq) % _SEQUENCE_MODULUS)  # the nearest at or below top
        above = below + _SEQUENCE_MODULUS
        return top if above - top < top - below else below

    # --- replay --------------------------------------------------------------------------

    def replay_ranges(
        self,
        binding: Binding,
        *,
        from_offsets: Mapping[int, int] | None = None,
        from_timestamp_ms: int | None = None,
        to_offsets: Mapping[int, int] | None = None,
    ) -> dict[int, tuple[int, int]]:
        """Per partition of the binding's exchange, the offsets [start, end) `replay`
        would re-route: from `from_offsets` (per partition), else the first record at or
        after `from_timestamp_ms`, else the log start; up to `to_offsets`, else where
        routing was when the binding was made (so nothing it already got is sent twice),
        else where routing is now. Raises UnknownExchangeError / InvalidConfigError."""
        if binding not in dict.fromkeys(self.router.bindings(binding.source)):
            raise UnknownExchangeError(f"exchange {binding.source!r} has no such binding")
        topic = self._broker.known_topic(binding.source)
        bound_at = self.bound_at.get(binding, {})
        ranges: dict[int, tuple[int, int]] = {}
        for index in range(topic.partitions):
            partition = self._broker.partitions.get(TopicPartition(binding.source, index))
            if partition is None:
                continue
            start = partition.log_start_offset
            if from_offsets is not None and index in from_offsets:
                start = max(start, from_offsets[index])
            elif from_timestamp_ms is not None:
                found = partition.log.offset_for_timestamp(from_timestamp_ms)
                start = partition.log_end_offset if found is None else found.offset
            cursor = self.cursors.get(TopicPartition(binding.source, index), start)
            end = min(bound_at.get(index, cursor), cursor)
            if to_offsets is not None and index in to_offsets:
                end = min(to_offsets[index], cursor)
            ranges[index] = (start, max(start, end))
        return ranges

    def replay(
        self, binding: Binding, ranges: Mapping[int, tuple[int, int]]
    ) -> Iterator[tuple[int, int]]:
        """Re-route the records of `ranges` (from `replay_ranges`) into `binding` only:
        those its pattern, arguments or expression match go to its destination (through
        it, when that is an exchange), partitioned as live routing does. Yields (records
        read, copies written) after each source batch, so that a caller on the event loop
        can let others run in between. The copies carry no producer id: a replay is not
        part of crash recovery, and one cut short is run again with a range."""
        only = Router()
        only.declare(self.router.exchange(binding.source))
        if binding.to_exchange:
            only.declare(self.router.exchange(binding.destination))
        only.bind(binding)
        read = copied = 0
        for index, (start, end) in sorted(ranges.items()):
            partition = self._broker.partitions.get(TopicPartition(binding.source, index))
            if partition is None or start >= end:
                continue
            for stored in scan_batches(partition.log, start):
                header, spans = read_records(stored)
                if header.base_offset >= end:
                    break
                picked = [s for s in spans if start <= s.offset < end]
                read += len(picked)
                copied += self._replay_batch(binding, only, header.base_offset, picked, index)
                yield read, copied

    def _replay_batch(
        self, binding: Binding, only: Router, base_offset: int, spans: list[Copy], index: int
    ) -> int:
        copies: dict[tuple[str, int], list[Copy]] = {}
        counts = self.topic_partitions
        for span in spans:
            key, headers = span_routing_key(span), dict(span.headers)
            try:
                route = only.route(binding.source, key, headers)
                if binding.to_exchange and binding.destination in route.visited:
                    route = self.router.route(binding.destination, key, headers)
            except RoutingError:
                continue
            for topic in route.topics:
                if topic not in counts:
                    continue
                if span.key is None:
                    seed = _BATCH_SEED.pack(base_offset, index)
                    hashed = murmurhash2(seed, MURMUR2_SEED) & 0x7FFFFFFF
                else:
                    hashed = murmurhash2(span.key, MURMUR2_SEED) & 0x7FFFFFFF
                copies.setdefault((topic, hashed % counts[topic]), []).append(span)
        written = 0
        for pair, picked in copies.items():
            partition = self._broker.partitions.get(TopicPartition(*pair))
            if partition is None:
                continue
            writer = CopyWriter(-1, -1, COPY_BATCH_BYTES_MAX)  # no producer: see `replay`
            for records, _first, count in writer.write(picked, lambda _f, _c: -1):
                partition.append_internal(records)
                written += count
        return written

    # --- views and checkpoints -----------------------------------------------------------

    def cursor_file(self) -> dict[str, bytes]:
        """The cursors as the checkpoint file's bytes. Called on the flusher thread before
        a periodic flush (a dict copy is atomic under the GIL) and at a clean stop."""
        return {CURSORS_FILE: encode_offsets(dict(self.cursors))}

    def describe(self, name: str) -> ExchangeView:
        exchange = self.router.exchange(name)
        topic = self._broker.known_topic(name)
        lag = 0
        for index in range(topic.partitions):
            tp = TopicPartition(name, index)
            partition = self._broker.partitions.get(tp)
            if partition is not None:
                lag += max(0, partition.log_end_offset - self.cursors.get(tp, 0))
        return ExchangeView(
            exchange,
            topic.partitions,
            self.router.bindings(name),
            self.stats.setdefault(name, ExchangeStats()),
            lag,
        )


# --- bindings as a topic config ---------------------------------------------------------------

BINDINGS_CONFIG = "weirmq.exchange.bindings"
"""An exchange's bindings as a Kafka list config: one item per binding (`binding_spec`),
so any Kafka AdminClient reads them with DescribeConfigs and changes them with
IncrementalAlterConfigs (APPEND binds, SUBTRACT unbinds, SET replaces, DELETE unbinds all).
Not stored with the topic's configs: the bindings log is the truth, this is a view of it."""
_ESCAPES = {"%": "%25", ",": "%2C", "&": "%26", "=": "%3D"}


def _escape(text: str, *, keep_equals: bool = False) -> str:
    for char, escaped in _ESCAPES.items():
        if not (keep_equals and char == "="):
            text = text.replace(char, escaped)
    return text


def binding_spec(binding: Binding) -> str:
    """One binding as an item of `BINDINGS_CONFIG`:

        DEST                                  fanout
        DEST?key=eu.#                         direct and topic: the binding key
        DEST?match=amount > 100               content: the expression
        DEST?x-match=any&region=eu&urgent     headers: arguments (no value: presence only)

    `%`, `,`, `&` and (in names) `=` are percent-encoded, so an item never holds the comma
    that separates list items."""
    params: list[str] = []
    if binding.expression is not None:
        params.append("match=" + _escape(binding.expression, keep_equals=True))
    elif binding.arguments:
        for name, value in binding.arguments.items():
            shown = _escape(name)
            if value is not None:
                text = str(value).lower() if isinstance(value, bool) else str(value)
                shown += "=" + _escape(text, keep_equals=True)
            params.append(shown)
    elif binding.key or "?" in binding.destination:
        params.append("key=" + _escape(binding.key, keep_equals=True))
    return binding.destination + ("?" + "&".join(params) if params else "")


def parse_binding_spec(
    source: Exchange, spec: str, kind_of: Callable[[str], DestinationKind | None]
) -> Binding:
    """The binding an item of `BINDINGS_CONFIG` describes, from exchange `source`; raises
    InvalidConfigError (or a routing error) saying what is wrong with it."""
    destination, _, query = spec.strip().partition("?")
    destination = unquote(destination)
    kind = kind_of(destination)
    if kind is None:
        raise configs.InvalidConfigError(
            f"binding {spec!r}: no topic or exchange {destination!r} to bind to"
        )
    params: dict[str, str | None] = {}
    for part in query.split("&") if query else ():
        name, equals, value = part.partition("=")
        params[unquote(name)] = unquote(value) if equals else None
    expected = _PARAMS[source.type]
    if expected is not None:
        unknown = sorted(set(params) - {expected})
        if unknown:
            raise configs.InvalidConfigError(
                f"binding {spec!r}: a {source.type} exchange's binding takes "
                + (f"only '{expected}=...'" if expected else "no parameters")
                + f", not {', '.join(map(repr, unknown))}"
            )
    if source.type is ExchangeType.CONTENT:
        expression = params.get("match")
        if not expression:
            raise configs.InvalidConfigError(
                f"binding {spec!r}: a content exchange's binding needs match=EXPRESSION"
            )
        return Binding(source.name, destination, kind, expression=expression)
    if source.type is ExchangeType.HEADERS:
        return Binding(source.name, destination, kind, arguments=params)
    return Binding(source.name, destination, kind, key=params.get("key") or "")


_PARAMS: dict[ExchangeType, str | None] = {
    ExchangeType.DIRECT: "key",
    ExchangeType.TOPIC: "key",
    ExchangeType.FANOUT: "",
    ExchangeType.CONTENT: "match",
    ExchangeType.HEADERS: None,  # every parameter is an argument
}


_INTERNAL = frozenset({ROUTING_TOPIC, "__consumer_offsets"})


def exchange_of(name: str, topic_configs: Mapping[str, str]) -> Exchange:
    """The `Exchange` a topic's configs define."""
    return Exchange(
        name,
        ExchangeType(topic_configs[configs.EXCHANGE_TYPE]),
        topic_configs.get(configs.EXCHANGE_ALTERNATE) or None,
        "reject" if topic_configs.get(configs.EXCHANGE_UNROUTABLE) == "reject" else "drop",
    )
