"""Topics and cluster identity, persisted in the data directory.

    weirmq-data/
        meta.properties      cluster.id and node.id (Kafka's file and keys)
        topics.json          every topic: id, partition count, configs
        producer-id-block    the end of the producer-id block in use

`topics.json` is rewritten atomically (temp file, fsync, rename, directory fsync) before
any partition directory of a new topic is created, and every change is made in memory
only once the file holding it is saved: on a full disk the change fails with
KAFKA_STORAGE_ERROR and the registry is as it was. So after a crash a topic is either
wholly known or unknown; a partition directory with no entry (it cannot happen in that
order, but a user may copy one in) is adopted as a topic rather than ignored, because
ignoring it would hide data. The file has one line per topic, each entry's JSON kept from
the last save: a save costs a join, not the encoding of every topic again (measured at
20,000 topics: 12 ms of the event loop per change, 120-155 ms before).

A creation too large to make in one request (the broker makes its logs off the event
loop, in chunks) is *pending* meanwhile: saved in topics.json first, as any change, but
not known to `get` and iteration until `publish`. Clients see no topic, or the old
partition count of a topic being grown, rather than one whose logs do not all exist; a
crash leaves the entry, and the next start makes the missing logs.

Creation is bounded (issue 20), by settings the broker checks before anything is saved:
partitions per request (`max_partitions_per_request`, Kafka 4's POLICY_VIOLATION
"Excessively large number of partitions per request"), partitions per broker
(`max_broker_partitions`, `partitions_total` here) and two rates per client id as
`RateBuckets`: Kafka's controller mutation quota (KIP-599: partitions created or deleted
per second, THROTTLING_QUOTA_EXCEEDED past it) and the topics Metadata may auto-create.

Topic names follow Kafka's rules: 1 to 249 characters of ``[a-zA-Z0-9._-]``, not ``.``
or ``..``. Topic ids are random UUIDs, as in Kafka, and never change.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from ..errors import ErrorCode, KafkaError
from ..storage.checkpoint import write_atomically
from ..storage.errors import storage_error

log = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"
META_FILE = "meta.properties"
PRODUCER_ID_FILE = "producer-id-block"
FORMAT_VERSION = 1
MAX_NAME_CHARS = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
QUOTA_WINDOW_S: Final = 11
"""A rate's bucket holds this many seconds of it: Kafka's controller quota window,
controller.quota.window.num (11) samples of controller.quota.window.size.seconds (1)."""
RATE_CLIENTS_MAX: Final = 10_000
"""Client ids whose buckets are kept at once (the least recently seen is forgotten first;
a forgotten client starts with a full bucket, as a new one does)."""


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class UnknownTopicError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class TopicExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class PolicyViolationError(KafkaError):
    """A creation past one of the broker's limits (partitions per request, per broker)."""

    code = ErrorCode.policy_violation


class ThrottlingQuotaExceededError(KafkaError):
    """A creation or deletion past the client's rate (KIP-599); retriable after
    `throttle_ms`."""

    code = ErrorCode.throttling_quota_exceeded

    def __init__(self, message: str, throttle_ms: int) -> None:
        super().__init__(message)
        self.throttle_ms = throttle_ms


class TopicBusyError(KafkaError):
    """A change to a topic whose partitions are being added: Kafka answers a partition
    change during a reassignment so."""

    code = ErrorCode.reassignment_in_progress


class InternalTopicError(KafkaError):
    """A client asked to create, grow or reconfigure a topic the broker owns (Kafka answers
    INVALID_REQUEST when a client tries to create its own internal log)."""

    code = ErrorCode.invalid_request


def check_topic_name(name: str) -> None:
    """Raise `InvalidTopicError` unless `name` is a legal Kafka topic name."""
    if name in ("", ".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidTopicError(f"topic name is {len(name)} characters, at most 249 allowed")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)


class RateBuckets:
    """A rate per client id, as Kafka's controller mutation quota enforces one (KIP-599):
    a token bucket per client, filled at `rate_per_s` up to `QUOTA_WINDOW_S` seconds'
    worth. An operation goes ahead while the client's bucket is not negative, and takes
    what it costs even past zero (one large topic is never refused for its size alone);
    then the client waits until the bucket is back to zero, `throttle_ms`. A rate of 0
    means no limit. Sans I/O: every call takes `now_ms`."""

    def __init__(self, rate_per_s: int, *, clients_max: int = RATE_CLIENTS_MAX) -> None:
        assert rate_per_s >= 0 and clients_max >= 1, (rate_per_s, clients_max)
        self.rate_per_s = rate_per_s
        self.burst = rate_per_s * QUOTA_WINDOW_S
        self._clients_max = clients_max
        self._buckets: OrderedDict[str, tuple[float, int]] = OrderedDict()
        """Client id -> (credits, when they were counted); a full bucket is no entry."""

    @property
    def limited(self) -> bool:
        return self.rate_per_s > 0

    def credits(self, client_id: str, now_ms: int) -> float:
        found = self._buckets.get(client_id)
        if found is None:
            return float(self.burst)
        credits, at_ms = found
        refill = max(0, now_ms - at_ms) * self.rate_per_s / 1000
        return min(float(self.burst), credits + refill)

    def throttle_ms(self, client_id: str, now_ms: int) -> int:
        """0 if the client may go ahead, else how long until it may."""
        if not self.limited:
            return 0
        credits = self.credits(client_id, now_ms)
        return 0 if credits >= 0 else math.ceil(-credits * 1000 / self.rate_per_s)

    def record(self, client_id: str, amount: int, now_ms: int) -> None:
        """Take `amount` from the client's bucket (it may go negative)."""
        if not self.limited or amount <= 0:
            return
        self._buckets[client_id] = (self.credits(client_id, now_ms) - amount, now_ms)
        self._buckets.move_to_end(client_id)
        while len(self._buckets) > self._clients_max:
            self._buckets.popitem(last=False)


class TopicRegistry:
    """The topics of one data directory; see the module docstring."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self._pending: dict[str, Topic] = {}
        """Creations and growths saved but not made yet (see the module docstring)."""
        self._entries: dict[str, tuple[Topic, str]] = {}
        """Each saved topic's entry in topics.json, as last encoded."""
        self._partitions_total = 0
        self._load()

    def _load(self) -> None:
        path = self.data_dir / TOPICS_FILE
        if not path.exists():
            return
        document = json.loads(path.read_text())
        if document.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: unknown format version {document.get('version')!r}")
        for name, entry in document["topics"].items():
            self._remember(
                Topic(name, uuid.UUID(entry["id"]), int(entry["partitions"]), entry["configs"])
            )
        self._partitions_total = sum(t.partitions for t in self._topics.values())

    def _remember(self, topic: Topic) -> None:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def _forget(self, name: str) -> Topic:
        topic = self._topics.pop(name)
        del self._by_id[topic.topic_id]
        return topic

    def _entry(self, topic: Topic) -> str:
        """`topic`'s line of topics.json; encoded again only when the topic changed."""
        cached = self._entries.get(topic.name)
        if cached is not None and cached[0] is topic:
            return cached[1]
        entry = {
            "id": str(topic.topic_id),
            "partitions": topic.partitions,
            "configs": topic.configs,
        }
        text = f"{json.dumps(topic.name)}: {json.dumps(entry, sort_keys=True)}"
        self._entries[topic.name] = (topic, text)
        return text

    def _document(self, topics: Mapping[str, Topic]) -> bytes:
        lines = ",\n".join(self._entry(topic) for topic in topics.values())
        return f'{{"version": {FORMAT_VERSION}, "topics": {{\n{lines}\n}}}}\n'.encode()

    def _save(
        self,
        change: Topic | None = None,
        *,
        without: str | None = None,
        pending: bool = False,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        """Write topics.json as it will be with `change` made (or `without` removed), then
        make the change in memory: a write that fails (a full disk) changes nothing here
        and raises `StorageError` (`DiskFullError`). A `pending` change is saved, and held
        apart until `publish`."""
        topics = {**self._topics, **self._pending}
        if change is not None:
            topics[change.name] = change
        if without is not None:
            del topics[without]
        try:
            write_atomically(
                self.data_dir / TOPICS_FILE, self._document(topics), before_rename=before_commit
            )
        except OSError as exc:
            raise storage_error(exc, f"saving {TOPICS_FILE}") from exc
        self._partitions_total = sum(t.partitions for t in topics.values())
        if change is not None and pending:
            self._pending[change.name] = change
        elif change is not None:
            self._pending.pop(change.name, None)
            self._replace(change)
        if without is not None:
            self._drop(without)

    def _replace(self, topic: Topic) -> None:
        if topic.name in self._topics:
            self._forget(topic.name)
        self._remember(topic)

    def _drop(self, name: str) -> None:
        """Forget `name` in memory: known, pending, and its saved entry."""
        self._pending.pop(name, None)
        self._entries.pop(name, None)
        if name in self._topics:
            self._forget(name)

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def pending(self, name: str) -> Topic | None:
        """The topic as a creation or growth under way will make it, or None."""
        return self._pending.get(name)

    @property
    def partitions_total(self) -> int:
        """Partitions of every topic in topics.json, pending creations and growths too."""
        return self._partitions_total

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._topics.values()))

    def __len__(self) -> int:
        return len(self._topics)

    def create(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        pending: bool = False,
    ) -> Topic:
        """Register a new topic: persisted first, then known here (`_save`), or with
        `pending` only once `publish`ed."""
        check_topic_name(name)
        assert name not in self._topics and name not in self._pending, name
        assert partitions >= 1, partitions
        topic = Topic(name, uuid.uuid4(), partitions, dict(configs or {}))
        self._save(topic, pending=pending)
        return topic

    def publish(self, name: str) -> Topic:
        """Make a pending creation or growth known (it is saved already)."""
        topic = self._pending.pop(name)
        self._replace(topic)
        return topic

    def set_configs(self, name: str, configs: Mapping[str, str]) -> Topic:
        """Replace the topic's config overrides (persisted before this returns)."""
        assert name not in self._pending, name
        topic = replace(self._topics[name], configs=dict(configs))
        self._save(topic)
        return topic

    def set_partitions(self, name: str, partitions: int, *, pending: bool = False) -> Topic:
        """Grow the topic to `partitions` (persisted before this returns; with `pending`,
        known here only once `publish`ed)."""
        current = self._topics[name]
        assert partitions > current.partitions and name not in self._pending, (name, partitions)
        topic = replace(current, partitions=partitions)
        self._save(topic, pending=pending)
        return topic

    def shrink(self, name: str, partitions: int) -> None:
        """Undo a growth whose logs could not be made, like `forget` undoes a creation."""
        topic = replace(self._topics[name], partitions=partitions)
        try:
            self._save(topic)
        except KafkaError as exc:
            log.warning("topic %r shrunk back, but %s still says more: %s", name, TOPICS_FILE, exc)
            self._pending.pop(name, None)
            self._replace(topic)

    def delete(self, name: str, before_commit: Callable[[], None] | None = None) -> Topic:
        """Forget the topic (persisted before this returns); its id is never reused.

        `before_commit` runs once the new topics.json is written but not yet in place (the
        broker deletes the partitions then): a full disk refuses the deletion before
        anything is deleted."""
        topic = self._topics[name]
        self._save(without=name, before_commit=before_commit)
        return topic

    def forget(self, name: str) -> Topic | None:
        """Undo a creation whose logs could not be made: forgotten here at once, and in
        topics.json when it can be written (on a full disk it keeps the entry, and the
        next save, or the next start, which creates the missing logs, settles it)."""
        topic = self._topics.get(name) or self._pending.get(name)
        if topic is None:
            return None
        try:
            self._save(without=name)
        except KafkaError as exc:
            log.warning("topic %r forgotten, but %s still names it: %s", name, TOPICS_FILE, exc)
            self._drop(name)
        return topic

    def adopt(self, partitions_by_topic: Mapping[str, int]) -> list[Topic]:
        """Register topics found on disk but missing here (see the module docstring)."""
        adopted = []
        for name, count in sorted(partitions_by_topic.items()):
            if name in self._topics:
                continue
            log.warning("adopting topic %r found on disk with %d partition(s)", name, count)
            topic = Topic(name, uuid.uuid4(), count, {})
            self._remember(topic)
            adopted.append(topic)
        if adopted:
            self._partitions_total += sum(topic.partitions for topic in adopted)
            try:
                self._save()
            except KafkaError as exc:  # known here all the same: their data is on disk
                log.error("adopted topics not saved in %s: %s", TOPICS_FILE, exc)
        return adopted


def load_cluster_id(data_dir: Path, node_id: int) -> str:
    """The cluster id in meta.properties, created on first start (22 base64url chars, like
    Kafka's). A different node.id than the one recorded is refused: the data directory
    belongs to another broker."""
    path = data_dir / META_FILE
    properties: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                properties[key.strip()] = value.strip()
    if "cluster.id" in properties:
        recorded = int(properties.get("node.id", node_id))
        if recorded != node_id:
            raise ValueError(
                f"{path} belongs to node.id {recorded}, but this broker is node.id {node_id}"
            )
        return properties["cluster.id"]
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    write_atomically(path, f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n".encode())
    return cluster_id


class ProducerIdAllocator:
    """Hands out producer ids that are never reused, even across crashes.

    Ids are reserved in blocks: the end of the current block is persisted before any id of
    it is handed out, so after a crash the next start begins past every id ever given.
    """

    BLOCK = 1000

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / PRODUCER_ID_FILE
        start = 0
        if self._path.exists():
            text = self._path.read_text().strip()
            if not text.isdigit():  # never guess: a wrong guess would reuse producer ids
                raise ValueError(f"{self._path}: expected a number, found {text[:40]!r}")
            start = int(text)
        self._next = start
        self._end = start

    def allocate(self) -> int:
        if self._next >= self._end:
            self._end = self._next + self.BLOCK
            write_atomically(self._path, f"{self._end}\n".encode())
        producer_id = self._next
        self._next += 1
        return producer_id
