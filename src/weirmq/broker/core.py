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

Producer state is snapshotted on a clean stop, every partition's in one file of the data
directory (`partition.PRODUCER_STATE_FILE`), once the logs are durable and before the
clean-shutdown marker. On start each partition restores its entry (or the per-partition
file older versions wrote) and replays the log after it; without a usable snapshot it
replays the whole log (only batch headers are read, and retention bounds how much there is).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path

from ..errors import KafkaError
from ..flow.controller import FlowController
from ..flow.quotas import QuotaTable
from ..groups import consumer as kip848
from ..groups import share as kip932
from ..groups.classic import ClassicSettings
from ..groups.coordinator import CoordinatorSettings, GroupCoordinator
from ..groups.views import GroupView, PartitionLag
from ..settings import Settings
from ..storage.config import LogConfig
from ..storage.errors import OffsetOutOfRangeError, storage_error
from ..storage.lock import DataDirLock
from ..storage.log import FileLog
from ..storage.manager import LogManager, StorageSettings
from ..types import Clock, Timers, TopicPartition
from . import configs
from .backlog import BacklogGuard
from .configs import ConfigEntry
from .delays import DELAYED_TOPIC, Delays
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
    ProducerIdAllocator,
    Topic,
    TopicExistsError,
    TopicRegistry,
    UnknownTopicError,
    check_topic_name,
    load_cluster_id,
)

log = logging.getLogger(__name__)

__all__ = ["INTERNAL_TOPICS", "LEADER_EPOCH", "Broker", "Partition", "TopicPartition"]

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, ROUTING_TOPIC, SHARE_STATE_TOPIC, DELAYED_TOPIC})
"""Written only by the broker itself; clients may read them, not produce or delete."""
PARTITIONS_MAX = 100_000
"""Partitions of one topic at most: each is a directory and open files when used."""


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
        settings = self.settings
        self.cluster_id = load_cluster_id(data_dir, settings.node_id)
        self.topics = TopicRegistry(data_dir)
        self.logs = LogManager(
            data_dir,
            clock=self.clock,
            settings=StorageSettings(
                flush_interval_ms=settings.flush_interval_ms, handles_max=settings.handles_max
            ),
            config_for=self.log_config,
        )
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
        )
        self.offsets_log = OffsetsLog(self.groups, self._offsets_partition, self.clock)
        self.offsets_log.load()
        self.shares.load()
        self.group_replies = GroupReplies()
        self.group_timer = GroupTimer(self.groups, self.group_replies, self.clock, self.timers)
        self.exchanges.load()
        self.delays.load()  # after the producer states are loaded
        self.logs.periodic_state = self.exchanges.cursor_file

    # --- topics -------------------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        """The storage settings of `topic`: its overrides over the broker's settings."""
        known = self.topics.get(topic)
        return configs.log_config(self.settings, known.configs if known else {})

    def _adopt_orphans(self) -> None:
        counts: dict[str, int] = {}
        for topic, partition in self.logs.logs():
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        self.topics.adopt(counts)
        for known in self.topics:
            for partition in range(known.partitions):
                self._add_partition(known.name, partition, known.configs)

    def topic(self, name: str, *, auto_create: bool) -> Topic:
        """The topic, created with the default partition count when allowed and missing.
        Raises UnknownTopicError or InvalidTopicError."""
        found = self.topics.get(name)
        if found is not None:
            return found
        check_topic_name(name)
        # The broker makes its internal topics itself, with the configs they need.
        if name in INTERNAL_TOPICS or not (auto_create and self.settings.auto_create_topics):
            raise UnknownTopicError(f"unknown topic {name!r}")
        return self.create_topic(name, self.settings.default_partitions)

    def create_topic(
        self,
        name: str,
        partitions: int,
        topic_configs: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool = False,
    ) -> Topic:
        """Create a topic with these config overrides, or raise the KafkaError that says
        why not (invalid name, existing topic, partition count, config)."""
        check_topic_name(name)
        if self.topics.get(name) is not None:
            raise TopicExistsError(f"topic {name!r} already exists")
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
        if validate_only:
            return Topic(name, uuid.UUID(int=0), partitions, overrides)
        created = self.topics.create(name, partitions, overrides)  # KAFKA_STORAGE_ERROR
        self._add_partitions(created, range(partitions))
        self._apply_configs(created)
        self.exchanges.topic_created(created)
        if bindings:
            try:
                self.exchanges.alter_bindings(name, [(configs.AlterOp.SET, bindings)])
            except KafkaError:  # an exchange is created with its bindings or not at all
                self.delete_topic(name)
                raise
        log.info("created topic %r with %d partition(s)", name, partitions)
        return created

    def _add_partitions(self, topic: Topic, indexes: range) -> None:
        """Open (or create) the logs of `indexes` of a topic that topics.json now holds.

        All or nothing: when a log cannot be made (a full disk), the ones made are removed
        and the topic is forgotten (a new topic) or shrunk back (CreatePartitions), so the
        broker never knows a topic whose logs do not exist, and a later try (the next
        offset commit creating `__consumer_offsets`) starts afresh."""
        try:
            for index in indexes:
                self._add_partition(topic.name, index, topic.configs)
        except KafkaError as exc:
            log.error("topic %r: partitions not created: %s", topic.name, exc)
            for index in indexes:
                if self.partitions.pop(TopicPartition(topic.name, index), None) is not None:
                    try:
                        self.logs.delete(topic.name, index)
                    except KafkaError as undo:
                        log.error("cannot remove %s-%d: %s", topic.name, index, undo)
            if indexes.start == 0:
                self.topics.forget(topic.name)
            else:
                self.topics.shrink(topic.name, indexes.start)
            raise

    def _add_partition(
        self, name: str, index: int, overrides: Mapping[str, str] | None = None
    ) -> Partition:
        """The partition's log (opened, or created empty) wrapped in its `Partition`."""
        found = self.logs.get(name, index)
        if found is None:
            found = self.logs.create(name, index, self.log_config(name))
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
        return partition

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
        """Grow the topic to `total` partitions (Kafka never shrinks a topic)."""
        topic = self.known_topic(name)
        _refuse_internal(name, "have its partitions changed")
        if total <= topic.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {topic.partitions} partition(s); the new count must be "
                f"larger, got {total}"
            )
        _check_partition_count(total)
        if validate_only:
            return Topic(name, topic.topic_id, total, topic.configs)
        grown = self.topics.set_partitions(name, total)
        self._add_partitions(grown, range(topic.partitions, total))
        self.exchanges.partitions_added(grown)
        log.info("topic %r grown to %d partitions", name, total)
        return grown

    def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        entries = configs.describe(self.settings, self.known_topic(name).configs)
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
        self.exchanges.configs_changed(changed)
        log.info("topic %r configs now %s", topic.name, overrides or "the defaults")
        return changed

    def _apply_configs(self, topic: Topic) -> None:
        config = configs.log_config(self.settings, topic.configs)
        fsync = configs.acks_all_fsync(self.settings, topic.configs)
        delays = self.delays if configs.delays_enabled(self.settings, topic.configs) else None
        for index in range(topic.partitions):
            partition = self.partitions.get(TopicPartition(topic.name, index))
            if partition is not None:
                partition.log.config = config
                partition.fsync_acks_all = fsync
                partition.delays = delays

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
        """Retention, time-based rolls and producer expiry; called periodically."""
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
