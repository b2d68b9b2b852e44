"""The broker's state: topics, partition logs, producer state, fetch waiters.

One `Broker` owns one data directory. Everything here runs on the event loop's thread
except fsyncs, which the storage layer's group committer runs on its own thread; the
loop awaits an asyncio future that the committer's callback settles through
`call_soon_threadsafe` (`durable`), so a slow disk never stalls the loop.

Writers and readers of a partition meet in two places:

- the log itself: an append is synchronous on the loop thread, so requests are appended
  in the order they arrive, which idempotent producers rely on;
- fetch waiters: a long-polling fetch registers one future on every partition it reads;
  an append resolves the futures of its partition, and the fetch reads again.

Producer state (idempotence) is per partition. On a clean shutdown it is snapshotted into
each partition directory; on start the snapshot is restored and the log after it replayed.
Without a usable snapshot (after a crash) the whole log is replayed: only batch headers
are looked at, and retention bounds how much there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ..groups import consumer as kip848
from ..groups.classic import ClassicSettings
from ..groups.coordinator import CoordinatorSettings, GroupCoordinator
from ..groups.views import GroupView, PartitionLag
from ..storage.checkpoint import write_atomically
from ..storage.config import LogConfig
from ..storage.errors import OffsetOutOfRangeError, StorageError
from ..storage.log import FileLog
from ..storage.manager import LogManager, StorageSettings
from ..wire.errors import KafkaError
from . import configs
from .configs import ConfigEntry
from .groups import OFFSETS_TOPIC, GroupTimer, OffsetsLog, group_lag
from .producers import PartitionProducers, SnapshotError
from .scan import scan_batch_headers
from .settings import Settings
from .stats import BrokerStats
from .topics import (
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

TopicPartition = tuple[str, int]
PRODUCER_SNAPSHOT_FILE = "producer-state.snapshot"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
"""Written only by the broker itself; clients may read them, not produce or delete."""
PARTITIONS_MAX = 100_000
"""Partitions of one topic at most: each is a directory and open files when used."""
LEADER_EPOCH = 0
"""A single broker never changes leader, so every partition stays at leader epoch 0."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    """See the module docstring."""

    def __init__(self, settings: Settings, *, clock: Callable[[], int] | None = None) -> None:
        self.settings = settings
        self.clock = clock or wall_clock_ms
        self.node_id = settings.node_id
        data_dir = Path(settings.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
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
        self._adopt_orphans()
        # Derived from the topics' configs, kept as a set because Produce asks per batch;
        # `_apply_configs` and `delete_topic` keep it in step.
        self._no_fsync = {
            t.name for t in self.topics if not configs.acks_all_fsync(settings, t.configs)
        }
        self.producer_ids = ProducerIdAllocator(data_dir)
        self.producers: dict[TopicPartition, PartitionProducers] = {}
        for tp, partition_log in self.logs.logs().items():
            self.producers[tp] = self._load_producers(partition_log)
        self._waiters: dict[TopicPartition, list[asyncio.Future[None]]] = defaultdict(list)
        self.advertised: tuple[str, int] = ("127.0.0.1", 9092)
        self.closing = False
        self.stats = BrokerStats()
        self.started_ms = self.clock()
        self.current_client: tuple[str, str] = ("", "")
        """(client id, "/host") of the request being handled; set by the dispatcher."""
        self.groups = GroupCoordinator(
            coordinator_settings(settings),
            self._write_group_records,
            partitions_of=self._partition_count,
            topics=self._topic_infos,
        )
        self.offsets_log = OffsetsLog(self)
        self.offsets_log.load()
        self.group_timer = GroupTimer(self)

    # --- topics -------------------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        """The storage settings of `topic`: its overrides over the broker's settings."""
        known = self.topics.get(topic)
        return configs.log_config(self.settings, known.configs if known else {})

    def acks_all_fsync(self, topic: str) -> bool:
        """Whether acks=all waits for an fsync on `topic` (weirmq.acks.all.fsync)."""
        return topic not in self._no_fsync

    def _adopt_orphans(self) -> None:
        counts: dict[str, int] = {}
        for topic, partition in self.logs.logs():
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        self.topics.adopt(counts)
        for known in self.topics:
            for partition in range(known.partitions):
                self.logs.create(known.name, partition)

    def topic(self, name: str, *, auto_create: bool) -> Topic:
        """The topic, created with the default partition count when allowed and missing.
        Raises UnknownTopicError or InvalidTopicError."""
        found = self.topics.get(name)
        if found is not None:
            return found
        check_topic_name(name)
        if not (auto_create and self.settings.auto_create_topics):
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
        overrides = configs.check_overrides(self.settings, topic_configs or {})
        if validate_only:
            return Topic(name, uuid.UUID(int=0), partitions, overrides)
        created = self.topics.create(name, partitions, overrides)
        self._apply_configs(created)
        for partition in range(partitions):
            self._add_partition(name, partition)
        log.info("created topic %r with %d partition(s)", name, partitions)
        return created

    def _add_partition(self, name: str, partition: int) -> None:
        self.logs.create(name, partition, self.log_config(name))
        self.producers[(name, partition)] = PartitionProducers()

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
        for partition in range(topic.partitions):
            tp = (name, partition)
            self.logs.delete(name, partition)
            self.producers.pop(tp, None)
            self.appended(tp)  # waiting fetches answer UNKNOWN_TOPIC_OR_PARTITION now
        self.topics.delete(name)
        try:
            self.groups.forget_topic(name)
        except KafkaError as exc:  # the offsets log refused; they go with their group
            log.error("offsets of deleted topic %r not removed: %s", name, exc)
        self._no_fsync.discard(name)
        self.stats.forget_topic(name)
        log.info("deleted topic %r", name)

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> Topic:
        """Grow the topic to `total` partitions (Kafka never shrinks a topic)."""
        topic = self.known_topic(name)
        if total <= topic.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {topic.partitions} partition(s); the new count must be "
                f"larger, got {total}"
            )
        _check_partition_count(total)
        if validate_only:
            return Topic(name, topic.topic_id, total, topic.configs)
        grown = self.topics.set_partitions(name, total)
        for partition in range(topic.partitions, total):
            self._add_partition(name, partition)
        log.info("topic %r grown to %d partitions", name, total)
        return grown

    def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        return configs.describe(self.settings, self.known_topic(name).configs)

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
        topic = self.known_topic(name)
        overrides = configs.apply_ops(self.settings, topic.configs, ops)
        return self._replace_configs(topic, overrides, validate_only=validate_only)

    def replace_topic_configs(
        self, name: str, new: Mapping[str, str | None], *, validate_only: bool = False
    ) -> Topic:
        """Make `new` the topic's whole set of overrides (legacy AlterConfigs)."""
        topic = self.known_topic(name)
        overrides = configs.check_overrides(self.settings, new)
        return self._replace_configs(topic, overrides, validate_only=validate_only)

    def _replace_configs(
        self, topic: Topic, overrides: dict[str, str], *, validate_only: bool
    ) -> Topic:
        if validate_only:
            return Topic(topic.name, topic.topic_id, topic.partitions, overrides)
        changed = self.topics.set_configs(topic.name, overrides)
        self._apply_configs(changed)
        log.info("topic %r configs now %s", topic.name, overrides or "the defaults")
        return changed

    def _apply_configs(self, topic: Topic) -> None:
        config = configs.log_config(self.settings, topic.configs)
        for partition in range(topic.partitions):
            partition_log = self.logs.get(topic.name, partition)
            if partition_log is not None:
                partition_log.config = config
        if configs.acks_all_fsync(self.settings, topic.configs):
            self._no_fsync.discard(topic.name)
        else:
            self._no_fsync.add(topic.name)

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        """Move the partition's log start to `offset` (-1: the high watermark); returns
        the new log start (DeleteRecords' low watermark). Checkpointed before returning."""
        partition_log = self.partition_log(name, partition)
        if partition_log is None:
            raise UnknownTopicError(f"unknown topic or partition {name}-{partition}")
        if offset == -1:
            offset = partition_log.log_end_offset
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot delete records below offset {offset}")
        low_watermark = partition_log.advance_log_start(offset)
        self.logs.write_checkpoints()
        return low_watermark

    def partition_log(self, topic: str, partition: int) -> FileLog | None:
        return self.logs.get(topic, partition)

    def partition_producers(self, tp: TopicPartition) -> PartitionProducers:
        state = self.producers.get(tp)
        if state is None:
            state = self.producers[tp] = PartitionProducers()
        return state

    # --- groups -------------------------------------------------------------------------

    def _write_group_records(self, pairs: list[tuple[bytes, bytes | None]]) -> None:
        self.offsets_log.write(pairs)

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
        return group_lag(self, group_id)

    def delete_group(self, group_id: str) -> None:
        """Delete an empty group and its offsets (GroupError when not possible)."""
        self.groups.delete_group(group_id, self.clock())

    # --- fetch waiters ------------------------------------------------------------------

    def appended(self, tp: TopicPartition, size_bytes: int = 0, records: int = 0) -> None:
        """New data in `tp` (`size_bytes` of batches holding `records`): count it and wake
        every fetch waiting on it."""
        if size_bytes:
            stats = self.stats.topic(tp[0])
            stats.bytes_in += size_bytes
            stats.records_in += records
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when one of `tps` gets an append, the broker closes, or after
        `timeout_s`, whichever is first."""
        if self.closing or timeout_s <= 0:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        registered = []
        for tp in tps:
            self._waiters[tp].append(waiter)
            registered.append(tp)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in registered:
                waiting = self._waiters.get(tp)
                if waiting is not None and waiter in waiting:
                    waiting.remove(waiter)
                    if not waiting:
                        del self._waiters[tp]

    def wake_all(self) -> None:
        """Answer everything that waits: fetch long polls, group joins and syncs."""
        for tp in list(self._waiters):
            self.appended(tp)
        self.groups.abort_waiting()

    # --- durability ---------------------------------------------------------------------

    async def durable(self, partition_log: FileLog, offset: int) -> None:
        """Return once `partition_log` is fsynced below `offset` (group commit); raises
        what failed the fsync."""
        if partition_log.flushed_offset >= offset:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()

        def on_flusher_thread(result: int | BaseException) -> None:
            # RuntimeError: the loop is closed, so nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result)

        self.logs.when_durable(partition_log, offset, on_flusher_thread)
        await future

    # --- producer state -----------------------------------------------------------------

    def _load_producers(self, partition_log: FileLog) -> PartitionProducers:
        state, start = PartitionProducers(), partition_log.log_start_offset
        path = partition_log.directory / PRODUCER_SNAPSHOT_FILE
        if path.exists():
            try:
                restored, covered = PartitionProducers.restore(path.read_bytes())
                if partition_log.log_start_offset <= covered <= partition_log.log_end_offset:
                    state, start = restored, covered
            except (SnapshotError, OSError) as exc:
                log.warning("%s: ignoring producer snapshot (%s); replaying the log", path, exc)
        if partition_log.offline_reason is not None:
            return state
        try:
            for header in scan_batch_headers(partition_log, start):
                state.replay(header)
        except StorageError as exc:
            log.error("%s: producer state not rebuilt: %s", partition_log.directory.name, exc)
        return state

    def _save_producer_snapshots(self) -> None:
        for tp, partition_log in self.logs.logs().items():
            state = self.producers.get(tp)
            if state is None or partition_log.offline_reason is not None:
                continue
            path = partition_log.directory / PRODUCER_SNAPSHOT_FILE
            try:
                write_atomically(path, state.snapshot(partition_log.log_end_offset))
            except OSError as exc:
                log.error("%s: producer snapshot not written: %s", path, exc)

    # --- housekeeping and shutdown ------------------------------------------------------

    def housekeeping(self) -> None:
        """Retention, time-based rolls and producer expiry; called periodically."""
        self.logs.housekeeping()
        now = self.clock()
        for state in self.producers.values():
            state.expire(now, self.settings.producer_id_expiration_ms)
        try:
            self.groups.expire_offsets(now)
        except Exception:
            log.exception("offsets retention failed")

    def close(self) -> None:
        """Flush everything, write checkpoints and producer snapshots, mark clean."""
        self.closing = True
        self.group_timer.cancel()
        self.wake_all()
        self.logs.close()
        self._save_producer_snapshots()


def _settle(future: asyncio.Future[int], result: int | BaseException) -> None:
    if future.done():  # the waiting request was cancelled (its connection closed)
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


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
        offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
    )


def _check_partition_count(partitions: int) -> None:
    if not 1 <= partitions <= PARTITIONS_MAX:
        raise InvalidPartitionsError(
            f"the number of partitions must be between 1 and {PARTITIONS_MAX}, got {partitions}"
        )
