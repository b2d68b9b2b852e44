"""The broker: the protocol-neutral model every protocol adapter calls.

One `Broker` owns one data directory, locked for its lifetime (`storage.lock`): a second
broker on the same directory refuses to start instead of interleaving writes with ours.
It wires together:

- topics (`topics.TopicRegistry`) and their configs;
- one `Partition` per topic-partition (`partition.py`): the log, high watermark, leader
  epoch, producer (idempotence) state, waiting readers and the durability policy. Every
  write from every protocol goes through `Partition.publish`, every read through
  `Partition.read`, every long poll through `wait_for_data`;
- the group coordinator and its services (`group_service`: its replies, log and timer);
- statistics (`stats`), fed by an append listener, so no writer counts by hand;
- one clock and one timer service, injected (`weirmq.types`): record timestamps, group
  deadlines and fetch long polls all run on them, so a test steps them together.

Everything here runs on the event loop's thread except fsyncs, which the storage layer's
group committer runs on its own thread; a writer awaits an asyncio future that the
committer's callback settles through `call_soon_threadsafe` (`Partition.durable`), so a
slow disk never stalls the loop.

Topic creation is bounded (`topics.py` has the limits) and never stalls the loop for
long: a creation of more than `CREATE_IN_REQUEST_MAX` partitions (`create_topic_soon`,
`create_partitions_soon`) is saved in topics.json first, as pending, then its partition
directories and files are made by a worker thread (`LogManager.prepare`) and opened on the
loop `OPEN_CHUNK_PARTITIONS` at a time, other requests served in between; only then is the
topic (or its new partitions) known. It runs as a task of its own, so a client that gives
up waiting does not stop it half-way; the broker stopping does, and the next start makes
the missing partitions from topics.json. Measured: 20,000 partitions took 8-35 s in the
request, during which nothing else was answered; off the loop they take 21-32 s (the new
directories are fsynced before the answer), while other requests wait 0.37 s at most.

Producer state is snapshotted on a clean stop, every partition's in one file of the data
directory (`partition.PRODUCER_STATE_FILE`), once the logs are durable and before the
clean-shutdown marker. On start each partition restores its entry (or the per-partition
file older versions wrote) and replays the log after it; without a usable snapshot it
replays the whole log (only batch headers are read, and retention bounds how much there is).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, KafkaError
from ..flow.controller import FlowController
from ..flow.quotas import QuotaTable
from ..groups import consumer as kip848
from ..groups import share as kip932
from ..groups.classic import ClassicSettings
from ..groups.coordinator import CoordinatorSettings, GroupCoordinator, MigrationPolicy
from ..groups.views import GroupView, PartitionLag
from ..settings import PARTITIONS_PER_TOPIC_MAX, Settings
from ..storage.cleaner import CompactionConfig
from ..storage.config import LogConfig
from ..storage.errors import OffsetOutOfRangeError, StorageError, storage_error
from ..storage.lock import DataDirLock
from ..storage.log import FileLog
from ..storage.manager import LogManager, StorageSettings
from ..types import Clock, Timers, TopicPartition
from . import configs
from .backlog import BacklogGuard
from .configs import ConfigEntry
from .delays import DELAYED_TOPIC, Delays
from .dynamic_configs import DynamicBrokerConfigs
from .exchanges import BINDINGS_CONFIG, ROUTING_TOPIC, Exchanges, exchange_of
from .group_configs import GroupConfigs
from .group_service import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_CONFIGS,
    GroupReplies,
    GroupTimer,
    OffsetsLog,
    group_lag,
)
from .partition import (
    LEADER_EPOCH,
    PRODUCER_STATE_FILE,
    Partition,
    producer_state_file,
    read_producer_snapshots,
    wait_any,
)
from .quotas import ClientQuotas
from .resources import ResourceGuard
from .shares import SHARE_STATE_TOPIC, ShareService
from .stats import BrokerStats
from .timers import LoopTimers
from .topics import (
    InternalTopicError,
    InvalidPartitionsError,
    InvalidTopicError,
    PolicyViolationError,
    ProducerIdAllocator,
    RateBuckets,
    ThrottlingQuotaExceededError,
    Topic,
    TopicBusyError,
    TopicExistsError,
    TopicRegistry,
    UnknownTopicError,
    check_topic_name,
    load_cluster_id,
)
from .txn_service import TXN_TOPIC, TransactionService

log = logging.getLogger(__name__)

__all__ = ["INTERNAL_TOPICS", "LEADER_EPOCH", "Broker", "Partition", "TopicPartition"]

COMPACTION_CONFIGS = (
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
)
"""The topic configs the log cleaner reads (their values in force: override, broker, default)."""
INTERNAL_TOPICS = frozenset(
    {OFFSETS_TOPIC, ROUTING_TOPIC, SHARE_STATE_TOPIC, DELAYED_TOPIC, TXN_TOPIC}
)
"""Written only by the broker itself; clients may read them, not produce or delete."""
_CLEANED_INTERNAL = frozenset({OFFSETS_TOPIC, TXN_TOPIC})
PARTITIONS_MAX = PARTITIONS_PER_TOPIC_MAX
"""Partitions of one topic at most: each is a directory and open files when used."""
CREATE_IN_REQUEST_MAX = 32
"""Partitions a creation makes in the request itself, on the event loop: each is a
directory and a file, 0.3-2 ms of file-system work measured here, so ~60 ms at most.
Larger creations are made off the loop (`create_topic_soon`)."""
OPEN_CHUNK_PARTITIONS = 128
"""Partitions an off-loop creation opens per turn of the event loop, their directories
and files made already: ~0.13 ms each measured here (a directory scan, an open, the
`Partition`), so ~20 ms of other requests' wait per chunk on an idle machine."""
REFUSAL_LOG_INTERVAL_MS = 10_000
"""Auto-creations refused by a limit are logged at most this often (a client may retry
in a loop)."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    """See the module docstring."""

    def __init__(
        self, settings: Settings, *, clock: Clock | None = None, timers: Timers | None = None
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or wall_clock_ms
        self.timers: Timers = timers or LoopTimers(self.clock)
        self.node_id = settings.node_id
        data_dir = Path(settings.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock = DataDirLock.acquire(data_dir)
        try:
            self._open(data_dir)
        except BaseException:
            self._dir_lock.release()
            raise

    def _open(self, data_dir: Path) -> None:
        self.dynamic_configs = DynamicBrokerConfigs(data_dir, self.settings)
        """Broker configs changed at runtime (KIP-226); `settings` are the static ones with
        these over them."""
        self.settings = settings = self.dynamic_configs.effective()
        self.cluster_id = load_cluster_id(data_dir, settings.node_id)
        self.topics = TopicRegistry(data_dir)
        self.mutation_quota = RateBuckets(settings.controller_mutation_rate)
        """Partitions created or deleted per client id (KIP-599), charged by the Kafka
        admin APIs, which know the client and the request version."""
        self.auto_create_quota = RateBuckets(settings.auto_create_topics_rate)
        """Topics auto-created per client id (`topic`)."""
        self._refusals_logged_ms: int | None = None
        self._refused_since_log = 0
        self._creations: set[asyncio.Task[Topic]] = set()
        """Off-loop creations under way: held here, so that none is collected half-way."""
        self.logs = LogManager(
            data_dir,
            clock=self.clock,
            settings=StorageSettings(
                flush_interval_ms=settings.flush_interval_ms,
                handles_max=settings.handles_max,
                cleaner_enable=settings.log_cleaner_enable,
                cleaner_io_bytes_per_s=settings.log_cleaner_io_max_bytes_per_second,
                cleaner_dedupe_buffer_bytes=settings.log_cleaner_dedupe_buffer_size,
                cleaner_backoff_ms=settings.log_cleaner_backoff_ms,
            ),
            config_for=self.log_config,
            compaction_for=self.compaction_config,
        )
        self._cleaner_started = False
        self.stats = BrokerStats()
        self.append_listeners: list[Callable[[TopicPartition, int, int], None]] = [
            self._count_append
        ]
        """Called after every append with (partition, bytes, records); see Partition."""
        self.partitions: dict[TopicPartition, Partition] = {}
        self.exchanges = Exchanges(self, data_dir)
        self.delays = Delays(self, data_dir)
        self._adopt_orphans()
        self.producer_ids = ProducerIdAllocator(data_dir)
        snapshots = read_producer_snapshots(data_dir, self._topic_ids())
        for partition in self.partitions.values():
            partition.load_producers(snapshots.get(partition.tp))
        self.advertised: tuple[str, int] = ("127.0.0.1", 9092)
        self.closing = False
        self.started_ms = self.clock()
        self.group_configs = GroupConfigs(data_dir, settings)
        self.client_quotas = ClientQuotas(data_dir)
        self.flow = FlowController(
            QuotaTable(resolver=self.client_quotas.limits, any_resolved=self.client_quotas.any)
        )
        """Back-pressure for every protocol (flow/): client quotas and guarded resources."""
        self.resources = ResourceGuard(data_dir, settings, self.flow, self.logs)
        """Free disk and request memory, sampled into the flow controller's gauges."""
        self.backlog = BacklogGuard(self)
        """Opted-in topics' backlogs, sampled into the flow controller's gauges."""
        self.shares = ShareService(self, self.group_configs)
        self.groups = GroupCoordinator(
            coordinator_settings(settings),
            self._write_group_records,
            partitions_of=self._partition_count,
            topics=self._topic_infos,
            share_listener=self.shares,
            consumer_timeouts=self.group_configs.consumer_timeouts,
        )
        self.offsets_log = OffsetsLog(self.groups, self._offsets_partition, self.clock)
        self.offsets_log.load()
        self.shares.load()
        self.group_replies = GroupReplies()
        self.group_timer = GroupTimer(self.groups, self.group_replies, self.clock, self.timers)
        self.txns = TransactionService(self)
        """The transaction coordinator (broker/txn_service.py)."""
        if self.txns.load() and not self.logs.boot_recorded:
            self.logs.record_boot()  # after a machine's crash: its fences are durable now
        self.exchanges.load()
        self.delays.load()  # after the producer states are loaded
        self.logs.periodic_state = self.exchanges.cursor_file
        self._start_cleaner()

    # --- topics -------------------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        """The storage settings of `topic`: its overrides over the broker's settings."""
        known = self.topics.get(topic)
        return configs.log_config(self.settings, known.configs if known else {})

    def compaction_config(self, topic: str) -> CompactionConfig:
        """Whether and how the log cleaner compacts `topic` (storage/cleaner.py). Of the
        internal topics only `__consumer_offsets` and `__transaction_state` are cleaned:
        their records are Kafka's, the newest per key being the state. The others keep
        themselves bounded with their own snapshots, and a delta newer than its key's
        snapshot would outlive it."""
        known = self.topics.get(topic)
        if known is None or (topic in INTERNAL_TOPICS and topic not in _CLEANED_INTERNAL):
            return CompactionConfig()
        values = {
            name: configs.effective(self.settings, known.configs, name)
            for name in COMPACTION_CONFIGS
            if name in configs.CONFIGS_BY_NAME
        }
        try:
            return CompactionConfig.from_topic_configs(values)
        except ValueError:
            log.error("topic %s: bad compaction configs, not compacted", topic)
            return CompactionConfig()

    def _start_cleaner(self) -> None:
        """Start the log cleaner's thread once a loop runs here (its swaps run on it)."""
        if self._cleaner_started:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the first housekeeping starts it
        self._cleaner_started = True

        def finish() -> None:
            if self.closing:
                return
            try:
                self.logs.finish_cleaning()
            except Exception:
                log.exception("swapping in cleaned segments failed")

        def ready() -> None:  # on the cleaner's thread
            loop.call_soon_threadsafe(finish)

        self.logs.start_cleaner(ready)

    def _adopt_orphans(self) -> None:
        counts: dict[str, int] = {}
        for topic, partition in self.logs.logs():
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        self.topics.adopt(counts)
        for known in self.topics:
            for partition in range(known.partitions):
                self._add_partition(known.name, partition, known.configs)

    def topic(self, name: str, *, auto_create: bool, client_id: str = "") -> Topic:
        """The topic, created with the default partition count when allowed and missing.
        Raises UnknownTopicError (also for a topic being created, or one an auto-creation
        limit refuses), ThrottlingQuotaExceededError (past `auto_create_topics_rate` for
        `client_id`) or InvalidTopicError."""
        found = self.topics.get(name)
        if found is not None:
            return found
        check_topic_name(name)
        if self.topics.pending(name) is not None:
            raise UnknownTopicError(f"topic {name!r} is being created")
        # The broker makes its internal topics itself, with the configs they need.
        if name in INTERNAL_TOPICS or not (auto_create and self.settings.auto_create_topics):
            raise UnknownTopicError(f"unknown topic {name!r}")
        now = self.clock()
        wait_ms = self.auto_create_quota.throttle_ms(client_id, now)
        if wait_ms:
            self._note_refused_auto_creation(name, client_id, "auto_create_topics_rate")
            raise ThrottlingQuotaExceededError(
                f"topic {name!r} not created: client {client_id!r} is past "
                f"auto_create_topics_rate ({self.auto_create_quota.rate_per_s}/s); retry in "
                f"{wait_ms} ms",
                wait_ms,
            )
        try:
            created = self.create_topic(name, self.settings.default_partitions)
        except PolicyViolationError as exc:  # Kafka answers a topic it did not make so
            self._note_refused_auto_creation(name, client_id, str(exc))
            raise UnknownTopicError(f"topic {name!r} not created: {exc}") from exc
        self.auto_create_quota.record(client_id, 1, now)
        return created

    def _note_refused_auto_creation(self, name: str, client_id: str, why: str) -> None:
        """Log refused auto-creations, at most once per `REFUSAL_LOG_INTERVAL_MS`."""
        self._refused_since_log += 1
        now = self.clock()
        last = self._refusals_logged_ms
        if last is not None and now - last < REFUSAL_LOG_INTERVAL_MS:
            return
        log.warning(
            "auto-creation refused %d time(s) since the last report, the latest topic %r "
            "for client %r: %s",
            self._refused_since_log,
            name,
            client_id,
            why,
        )
        self._refusals_logged_ms, self._refused_since_log = now, 0

    def create_topic(
        self,
        name: str,
        partitions: int,
        topic_configs: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool = False,
    ) -> Topic:
        """Create a topic with these config overrides, or raise the KafkaError that says
        why not (invalid name, existing topic, partition count, config, a limit). Made
        here, on the caller's thread: see `create_topic_soon` for large topics."""
        overrides, bindings = self._check_creation(name, partitions, topic_configs)
        if validate_only:
            return Topic(name, uuid.UUID(int=0), partitions, overrides)
        created = self.topics.create(name, partitions, overrides)  # KAFKA_STORAGE_ERROR
        self._add_partitions(created, range(partitions))
        return self._topic_created(created, bindings)

    def create_topic_soon(
        self, name: str, partitions: int, topic_configs: Mapping[str, str | None] | None = None
    ) -> asyncio.Task[Topic]:
        """`create_topic` for many partitions, off the event loop (module docstring).

        Checked and saved (pending) before this returns, raising as `create_topic` does;
        the task returns the topic once every partition exists, or raises what stopped
        it, everything undone. Needs a running event loop."""
        overrides, bindings = self._check_creation(name, partitions, topic_configs)
        loop = asyncio.get_running_loop()  # before anything is saved: none, nothing done
        reserved = self.topics.create(name, partitions, overrides, pending=True)

        async def create() -> Topic:
            await self._add_partitions_off_loop(reserved, range(partitions))
            return self._topic_created(self.topics.publish(name), bindings)

        return self._in_background(loop, create())

    def _check_creation(
        self, name: str, partitions: int, topic_configs: Mapping[str, str | None] | None
    ) -> tuple[dict[str, str], str | None]:
        """The checked overrides and bindings of a topic to create, or the KafkaError."""
        check_topic_name(name)
        if self.topics.get(name) is not None:
            raise TopicExistsError(f"topic {name!r} already exists")
        if self.topics.pending(name) is not None:
            raise TopicExistsError(f"topic {name!r} is being created")
        _check_partition_count(partitions)
        wanted = dict(topic_configs or {})
        bindings = wanted.pop(BINDINGS_CONFIG, None)
        overrides = configs.check_overrides(self.settings, wanted)
        if bindings is not None and not overrides.get(configs.EXCHANGE_TYPE):
            raise configs.InvalidConfigError(
                f"{BINDINGS_CONFIG} needs {configs.EXCHANGE_TYPE}: only an exchange has bindings"
            )
        if overrides.get(configs.EXCHANGE_TYPE):
            exchange_of(name, overrides)  # refuses what the router would
        self._check_room(name, partitions)
        return overrides, bindings

    def _check_room(self, name: str, adding: int) -> None:
        """POLICY_VIOLATION past `max_partitions_per_request` (one call is one request's
        worth at least) or `max_broker_partitions`. The broker's internal topics, one
        partition each, are never refused: its services rely on them."""
        if name in INTERNAL_TOPICS:
            return
        settings = self.settings
        if adding > settings.max_partitions_per_request:
            raise PolicyViolationError(
                f"Excessively large number of partitions per request: {adding} asked, "
                f"max_partitions_per_request is {settings.max_partitions_per_request}"
            )
        held = self.topics.partitions_total
        if held + adding > settings.max_broker_partitions:
            raise PolicyViolationError(
                f"{adding} more partition(s) would bring this broker to {held + adding}, past "
                f"max_broker_partitions ({settings.max_broker_partitions}): delete topics or "
                "raise the limit"
            )

    def _topic_created(self, created: Topic, bindings: str | None) -> Topic:
        """The rest of a creation, once every partition exists and the topic is known."""
        self._apply_configs(created)
        self.backlog.refresh(created)  # guarded from its first publish, not a sample later
        self.exchanges.topic_created(created)
        if bindings:
            try:
                self.exchanges.alter_bindings(created.name, [(configs.AlterOp.SET, bindings)])
            except KafkaError:  # an exchange is created with its bindings or not at all
                self.delete_topic(created.name)
                raise
        log.info("created topic %r with %d partition(s)", created.name, created.partitions)
        return created

    def _add_partitions(self, topic: Topic, indexes: range) -> None:
        """Open (or create) the logs of `indexes` of a topic that topics.json now holds.

        All or nothing: when a log cannot be made (a full disk), the ones made are removed
        and the topic is forgotten (a new topic) or shrunk back (CreatePartitions), so the
        broker never knows a topic whose logs do not exist, and a later try (the next
        offset commit creating `__consumer_offsets`) starts afresh."""
        config = configs.log_config(self.settings, topic.configs)
        try:
            for index in indexes:
                self._add_partition(topic.name, index, topic.configs, config)
        except KafkaError as exc:
            self._undo_partitions(topic, indexes, exc)
            raise

    async def _add_partitions_off_loop(self, topic: Topic, indexes: range) -> None:
        """`_add_partitions`, its file-system work done by a worker thread a chunk at a
        time (`LogManager.prepare`), each chunk then opened on the loop while the worker
        prepares the next. A broker that stops meanwhile gives up, leaving the rest to
        its next start."""
        loop = asyncio.get_running_loop()
        config = configs.log_config(self.settings, topic.configs)
        chunks = [
            range(start, min(start + OPEN_CHUNK_PARTITIONS, indexes.stop))
            for start in range(indexes.start, indexes.stop, OPEN_CHUNK_PARTITIONS)
        ]
        preparing: asyncio.Future[None] | None = None
        try:
            for number, chunk in enumerate(chunks):
                if preparing is None:
                    preparing = loop.run_in_executor(None, self.logs.prepare, topic.name, chunk)
                await preparing
                preparing = None
                if self.closing:
                    raise StorageError(
                        f"the broker is stopping: the partitions of {topic.name!r} not made "
                        "yet are made at its next start"
                    )
                if number + 1 < len(chunks):
                    upcoming = chunks[number + 1]
                    preparing = loop.run_in_executor(None, self.logs.prepare, topic.name, upcoming)
                for index in chunk:
                    self._add_partition(topic.name, index, topic.configs, config)
        except KafkaError as exc:
            if preparing is not None:  # let it finish: nothing may make directories after
                await asyncio.gather(preparing, return_exceptions=True)
            if not self.closing:
                self._undo_partitions(topic, indexes, exc)
            raise

    def _undo_partitions(self, topic: Topic, indexes: range, exc: KafkaError) -> None:
        log.error("topic %r: partitions not created: %s", topic.name, exc)
        for index in indexes:
            if self.partitions.pop(TopicPartition(topic.name, index), None) is not None:
                try:
                    self.logs.delete(topic.name, index)
                except KafkaError as undo:
                    log.error("cannot remove %s-%d: %s", topic.name, index, undo)
        self.logs.discard(topic.name, indexes)  # made by `prepare`, never opened
        if indexes.start == 0:
            self.topics.forget(topic.name)
        else:
            self.topics.shrink(topic.name, indexes.start)

    def _in_background(
        self, loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, Topic]
    ) -> asyncio.Task[Topic]:
        task = loop.create_task(work)
        self._creations.add(task)
        task.add_done_callback(self._creation_done)
        return task

    def _creation_done(self, task: asyncio.Task[Topic]) -> None:
        self._creations.discard(task)
        if task.cancelled():
            return
        error = task.exception()  # retrieved here too: its requester may be gone
        if error is not None and not isinstance(error, KafkaError):
            log.error("creating partitions failed", exc_info=error)

    def _add_partition(
        self,
        name: str,
        index: int,
        overrides: Mapping[str, str] | None = None,
        config: LogConfig | None = None,
    ) -> Partition:
        """The partition's log (opened, or created empty) wrapped in its `Partition`."""
        found = self.logs.get(name, index)
        if found is None:
            found = self.logs.create(name, index, config or self.log_config(name))
        tp = TopicPartition(name, index)
        partition = self.partitions[tp] = Partition(
            tp,
            found,
            logs=self.logs,
            clock=self.clock,
            listeners=self.append_listeners,
            fsync_acks_all=configs.acks_all_fsync(self.settings, overrides or {}),
        )
        if configs.delays_enabled(self.settings, overrides or {}):
            partition.delays = self.delays
        partition.recompress = configs.recompression(self.settings, overrides or {})
        partition.txn_check = self._txn_check
        partition.txn_lost = self._txn_lost
        return partition

    def _txn_check(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """KIP-890's check of a transactional write, by the transaction coordinator."""
        return self.txns.check_write(producer_id, epoch, tp)

    def _txn_lost(self, tp: TopicPartition, producer_ids: list[int]) -> None:
        """A roll-back took writes of these producers' open transactions: fence them."""
        self.txns.writes_lost(tp, producer_ids)

    def known_topic(self, name: str) -> Topic:
        found = self.topics.get(name)
        if found is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return found

    def delete_topic(self, name: str) -> None:
        """Delete the topic and its data.

        The partition directories go first (renamed, then removed; a crash leaves only
        renamed directories, which the next start removes), then the registry entry: a
        crash in between brings the topic back empty, never with the deleted data."""
        topic = self.known_topic(name)
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"{name} is an internal topic and cannot be deleted")
        self._refuse_busy(name, "deleted")

        def drop_partitions() -> None:
            for index in range(topic.partitions):
                self.logs.delete(name, index)
                gone = self.partitions.pop(TopicPartition(name, index), None)
                if gone is not None:
                    gone.wake()  # waiting fetches answer UNKNOWN_TOPIC_OR_PARTITION now

        # The new topics.json is written first and put in place after the partitions are
        # gone: a full disk refuses the deletion (KAFKA_STORAGE_ERROR) before any is.
        self.topics.delete(name, before_commit=drop_partitions)
        self.exchanges.topic_deleted(name)
        self.shares.topic_deleted(topic.topic_id)
        try:
            self.groups.forget_topic(name)
        except KafkaError as exc:  # the offsets log refused; they go with their group
            log.error("offsets of deleted topic %r not removed: %s", name, exc)
        self.stats.forget_topic(name)
        log.info("deleted topic %r", name)

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> Topic:
        """Grow the topic to `total` partitions (Kafka never shrinks a topic), here, on
        the caller's thread: see `create_partitions_soon` for many."""
        topic = self._check_growth(name, total)
        if validate_only:
            return Topic(name, topic.topic_id, total, topic.configs)
        grown = self.topics.set_partitions(name, total)
        self._add_partitions(grown, range(topic.partitions, total))
        return self._topic_grown(grown)

    def create_partitions_soon(self, name: str, total: int) -> asyncio.Task[Topic]:
        """`create_partitions` off the event loop, as `create_topic_soon` creates: the new
        partitions are known once all of them exist, and the topic cannot be changed
        meanwhile (TopicBusyError)."""
        topic = self._check_growth(name, total)
        loop = asyncio.get_running_loop()
        grown = self.topics.set_partitions(name, total, pending=True)

        async def grow() -> Topic:
            await self._add_partitions_off_loop(grown, range(topic.partitions, total))
            return self._topic_grown(self.topics.publish(name))

        return self._in_background(loop, grow())

    def _check_growth(self, name: str, total: int) -> Topic:
        topic = self.known_topic(name)
        _refuse_internal(name, "have its partitions changed")
        self._refuse_busy(name, "grown")
        if total <= topic.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {topic.partitions} partition(s); the new count must be "
                f"larger, got {total}"
            )
        _check_partition_count(total)
        self._check_room(name, total - topic.partitions)
        return topic

    def _topic_grown(self, grown: Topic) -> Topic:
        self.exchanges.partitions_added(grown)
        log.info("topic %r grown to %d partitions", grown.name, grown.partitions)
        return grown

    def _refuse_busy(self, name: str, what: str) -> None:
        """A topic being grown off the loop cannot be changed until that is done."""
        growing = self.topics.pending(name)
        if growing is not None:
            raise TopicBusyError(
                f"topic {name!r} is being grown to {growing.partitions} partitions and cannot "
                f"be {what} until that is done; retry later"
            )

    def describe_overrides(self, overrides: Mapping[str, str]) -> list[ConfigEntry]:
        """The configs of a topic with these overrides, with their sources and synonyms."""
        dynamic = self.dynamic_configs
        return configs.describe(dynamic.static, overrides, dynamic.synonyms)

    def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        entries = self.describe_overrides(self.known_topic(name).configs)
        bindings = self.exchanges.bindings_config(name)
        if bindings is not None:
            entries.append(bindings)
            entries.sort(key=lambda entry: entry.name)
        return entries

    def alter_topic_configs(
        self,
        name: str,
        set_: Mapping[str, str | None],
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> Topic:
        """Set and delete config overrides (IncrementalAlterConfigs SET and DELETE)."""
        ops: list[tuple[str, int, str | None]] = [
            (key, configs.AlterOp.SET, value) for key, value in set_.items()
        ]
        ops += [(key, configs.AlterOp.DELETE, None) for key in delete]
        return self.alter_topic_configs_ops(name, ops, validate_only=validate_only)

    def alter_topic_configs_ops(
        self, name: str, ops: list[tuple[str, int, str | None]], *, validate_only: bool = False
    ) -> Topic:
        """IncrementalAlterConfigs: (name, op, value) in order. An exchange's bindings
        (`weirmq.exchange.bindings`) change through the bindings log, the rest as configs;
        every change is checked before any is made."""
        topic = self.known_topic(name)
        _refuse_internal(name, "have its configs altered")
        self._refuse_busy(name, "reconfigured")
        binding_ops = [(op, value) for key, op, value in ops if key == BINDINGS_CONFIG]
        ops = [entry for entry in ops if entry[0] != BINDINGS_CONFIG]
        overrides = configs.apply_ops(self.settings, topic.configs, ops)
        if binding_ops:
            self._change_bindings(topic, overrides, binding_ops, validate_only=validate_only)
            if overrides == topic.configs:
                return topic  # only the bindings changed: topics.json stays as it is
        return self._replace_configs(topic, overrides, validate_only=validate_only)

    def replace_topic_configs(
        self, name: str, new: Mapping[str, str | None], *, validate_only: bool = False
    ) -> Topic:
        """Make `new` the topic's whole set of overrides (legacy AlterConfigs)."""
        topic = self.known_topic(name)
        _refuse_internal(name, "have its configs altered")
        self._refuse_busy(name, "reconfigured")
        wanted = dict(new)
        bindings = wanted.pop(BINDINGS_CONFIG, None)
        overrides = configs.check_overrides(self.settings, wanted)
        if bindings is not None:
            ops = [(configs.AlterOp.SET, bindings)]
            self._change_bindings(topic, overrides, ops, validate_only=validate_only)
        return self._replace_configs(topic, overrides, validate_only=validate_only)

    def _change_bindings(
        self,
        topic: Topic,
        overrides: dict[str, str],
        ops: Sequence[tuple[int, str | None]],
        *,
        validate_only: bool,
    ) -> None:
        """An exchange's bindings, changed through its bindings log. The other configs are
        already checked (`overrides`); `Exchanges.alter_bindings` checks every binding
        before it changes any."""
        self.exchanges.check_configs(topic, overrides)
        self.exchanges.alter_bindings(topic.name, ops, validate_only=validate_only)

    def _replace_configs(
        self, topic: Topic, overrides: dict[str, str], *, validate_only: bool
    ) -> Topic:
        self.exchanges.check_configs(topic, overrides)
        if validate_only:
            return Topic(topic.name, topic.topic_id, topic.partitions, overrides)
        changed = self.topics.set_configs(topic.name, overrides)
        self._apply_configs(changed)
        self.backlog.refresh(changed)
        self.exchanges.configs_changed(changed)
        log.info("topic %r configs now %s", topic.name, overrides or "the defaults")
        return changed

    def _apply_configs(self, topic: Topic) -> None:
        config = configs.log_config(self.settings, topic.configs)
        fsync = configs.acks_all_fsync(self.settings, topic.configs)
        delays = self.delays if configs.delays_enabled(self.settings, topic.configs) else None
        recompress = configs.recompression(self.settings, topic.configs)
        for index in range(topic.partitions):
            partition = self.partitions.get(TopicPartition(topic.name, index))
            if partition is not None:
                partition.log.config = config
                partition.fsync_acks_all = fsync
                partition.delays = delays
                partition.recompress = recompress

    def alter_broker_configs(
        self,
        layer: str,
        ops: list[tuple[str, int, str | None]] | None = None,
        values: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool,
    ) -> None:
        """Change a dynamic layer (broker/dynamic_configs.py) by IncrementalAlterConfigs `ops`
        or, legacy AlterConfigs, to exactly `values`; in force at once for every topic."""
        if values is not None:
            self.dynamic_configs.replace(layer, values, validate_only=validate_only)
        else:
            self.dynamic_configs.alter(layer, ops or [], validate_only=validate_only)
        if validate_only:
            return
        self.settings = self.dynamic_configs.effective()
        for topic in self.topics:
            self._apply_configs(topic)

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        """Move the partition's log start to `offset` (-1: the high watermark); returns
        the new log start (DeleteRecords' low watermark). Checkpointed before returning."""
        found = self.partition(name, partition)
        if found is None:
            raise UnknownTopicError(f"unknown topic or partition {name}-{partition}")
        if name in INTERNAL_TOPICS:  # Kafka's answer: INVALID_TOPIC_EXCEPTION
            raise InvalidTopicError(f"cannot delete records of internal topic {name}")
        if offset == -1:
            offset = found.high_watermark
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot delete records below offset {offset}")
        low_watermark = found.log.advance_log_start(offset)
        try:
            self.logs.write_checkpoints()
        except OSError as exc:
            raise storage_error(exc, "writing the log start checkpoint") from exc
        return low_watermark

    def partition(self, topic: str, index: int) -> Partition | None:
        """The partition, or None when the topic or the partition does not exist."""
        return self.partitions.get(TopicPartition(topic, index))

    def partition_log(self, topic: str, index: int) -> FileLog | None:
        found = self.partitions.get(TopicPartition(topic, index))
        return None if found is None else found.log

    def _count_append(self, tp: TopicPartition, size_bytes: int, records: int) -> None:
        stats = self.stats.topic(tp[0])
        stats.bytes_in += size_bytes
        stats.records_in += records

    # --- groups -------------------------------------------------------------------------

    def _write_group_records(self, pairs: list[tuple[bytes, bytes | None]]) -> None:
        self.offsets_log.write(pairs)

    def _offsets_partition(self, create: bool) -> Partition | None:
        """The coordinator's log partition; the internal topic is made on first use."""
        found = self.partitions.get(TopicPartition(OFFSETS_TOPIC, 0))
        if found is None and create:
            self.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIGS)
            found = self.partitions[TopicPartition(OFFSETS_TOPIC, 0)]
        return found

    def _partition_count(self, topic: str) -> int | None:
        found = self.topics.get(topic)
        return None if found is None else found.partitions

    def _topic_infos(self) -> dict[str, kip848.TopicInfo]:
        return {
            t.name: kip848.TopicInfo(t.topic_id, t.partitions)
            for t in self.topics
            if t.name not in INTERNAL_TOPICS
        }

    def group_views(self) -> list[GroupView]:
        return self.groups.views()

    def group_view(self, group_id: str) -> GroupView | None:
        return self.groups.view(group_id)

    def group_lag(self, group_id: str) -> list[PartitionLag]:
        """Per partition the group committed or owns: committed offset, log end, lag."""
        return group_lag(self.groups, self.partition, group_id)

    def delete_group(self, group_id: str) -> None:
        """Delete an empty group and its offsets (GroupError when not possible)."""
        self.groups.delete_group(group_id, self.clock())

    # --- waiting readers ----------------------------------------------------------------

    def wait_for_data(
        self, tps: Iterable[TopicPartition], deadline_ms: int
    ) -> Awaitable[None] | None:
        """An awaitable that returns when one of `tps` gets an append, the broker closes,
        or the clock reaches `deadline_ms`; None if there is nothing to wait for."""
        if self.closing:
            return None
        found = [p for p in map(self.partitions.get, tps) if p is not None]
        return wait_any(found, deadline_ms, self.timers, self.clock)

    def wake_all(self) -> None:
        """Answer everything that waits: fetch long polls, group joins and syncs."""
        for partition in self.partitions.values():
            partition.wake()
        self.shares.wake_all()
        self.group_replies.deliver(self.groups.abort_waiting())

    # --- housekeeping and shutdown ------------------------------------------------------

    def housekeeping(self) -> None:
        """Retention, time-based rolls, compaction's swaps and producer expiry; called
        periodically."""
        self._start_cleaner()
        self.txns.poke()
        self.logs.housekeeping()
        now = self.clock()
        for partition in self.partitions.values():
            partition.producers.expire(now, self.settings.producer_id_expiration_ms)
        try:
            self.groups.expire_offsets(now)
        except Exception:
            log.exception("offsets retention failed")

    def close(self) -> None:
        """Flush every log, then write the checkpoints and the producer-state snapshot,
        then mark the shutdown clean (`LogManager.close`: the marker comes last).

        The snapshot is taken once the logs are durable, so it never covers records that a
        crash during the stop could still take away."""
        self.closing = True
        self.group_timer.cancel()
        self.shares.cancel_timer()
        self.txns.cancel_timer()
        self.wake_all()
        self.logs.flush_for_close()
        self.delays.close()  # after the flush: confirms what it made durable
        snapshot = producer_state_file(self.partitions.values(), self._topic_ids())
        self.logs.close(state_files={PRODUCER_STATE_FILE: snapshot, **self.exchanges.cursor_file()})
        self._dir_lock.release()

    def _topic_ids(self) -> dict[str, uuid.UUID]:
        return {topic.name: topic.topic_id for topic in self.topics}


def coordinator_settings(settings: Settings) -> CoordinatorSettings:
    return CoordinatorSettings(
        classic=ClassicSettings(
            min_session_timeout_ms=settings.group_min_session_timeout_ms,
            max_session_timeout_ms=settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
            max_size=settings.group_max_size,
        ),
        consumer=kip848.ConsumerGroupSettings(
            session_timeout_ms=settings.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
            max_size=settings.group_max_size,
        ),
        share=kip932.ShareGroupSettings(
            session_timeout_ms=settings.group_share_session_timeout_ms,
            heartbeat_interval_ms=settings.group_share_heartbeat_interval_ms,
        ),
        offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
        migration_policy=MigrationPolicy.parse(settings.group_consumer_migration_policy),
    )


def _check_partition_count(partitions: int) -> None:
    if not 1 <= partitions <= PARTITIONS_MAX:
        raise InvalidPartitionsError(
            f"the number of partitions must be between 1 and {PARTITIONS_MAX}, got {partitions}"
        )


def _refuse_internal(name: str, what: str) -> None:
    """INVALID_REQUEST for a client's change to a topic the broker owns (its configs, such
    as compaction, and its one partition are what the broker's services rely on)."""
    if name in INTERNAL_TOPICS:
        raise InternalTopicError(f"{name} is an internal topic and cannot {what}")
